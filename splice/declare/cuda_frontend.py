"""Inline CUDA C in cuTile kernels: ``splice.cuda``, the C counterpart of ``splice.asm``.

:func:`make_cuda_function` makes ``splice.cuda``, a plain function cuTile's frontend
resolves to :func:`_handle_cuda` inside a kernel. A call::

    y = splice.cuda("__expf(-x * x)", dtype=ct.float32, x=t)

becomes an extern whose device code is a generated ``extern "C" __device__`` function
(:class:`CudaSnippet`): one parameter per named input, typed from its cuTile dtype (the C
types of :data:`splice.types.ELEMENT_TYPES`, ``T*`` for an array), the snippet as its body
(an expression is returned). The extern goes through the CUDA C path of any extern
(:class:`CudaSnippetSource`, a :class:`splice.inputs.fragments.CudaSource`: NVRTC, the
content-keyed cache, inlining, every check of the pipeline); its trace is an extern call's
(:func:`splice.tracing.trace.emit_call`, :func:`splice.declare.tile_trace.emit_tile_call`
for tiles at block or warpgroup scope).

The generated text does not hold the call's location, so two calls of one snippet with
the same types share a symbol and a fragment (one NVRTC compile, one module). ``#line``
directives give the snippet its own line numbers, so that an NVRTC error is reported at
the snippet's line and column and at the kernel line of the call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import weakref
from typing import Any

from ..errors import (
    SpliceCallError,
    SpliceCompileError,
    SpliceDeclarationError,
    SpliceError,
)
from ..inputs.fragments import CudaSource
from ..system import _cutile as cu
from ..system import safe_fs
from ..tracing.trace import describe, loc_str, python_caller
from ..types import (
    ElementType,
    Signature,
    TileTuple,
    TileType,
    element_type,
    pointer,
    results_layout,
)
from .declaring import CallOptions
from .snippet_text import bracket_refusal, input_name_refusal, is_body

#: The file name NVRTC reports the snippet's lines under (``#line 1 "..."``): a path that
#: cannot exist (``/dev/null`` is no directory), so no code that reads an error's file
#: (:func:`splice.inputs.cuda_compile.compile_source`) finds one another user placed.
SNIPPET_FILE = "/dev/null/splice.cuda"

#: The NVRTC program name of every snippet (the location of the call is not in the text,
#: so that equal snippets share their compile): the generated lines' file name. In no
#: directory (:data:`~splice.inputs.cuda_compile.NO_DIRECTORY`): a quoted ``includes=``
#: name is looked up in ``include_dirs=``, never in the current directory.
PROGRAM = "/dev/null/splice_cuda.cu"

@dataclasses.dataclass(frozen=True)
class CudaSnippet:
    """One inline CUDA C snippet with its parameters' and results' types.

    Attributes:
        code: the C++ expression or function body, as written.
        names: the parameters' names (the call's input names, in order).
        params: their types: element types, pointers, or (block and warpgroup scope) tiles.
        outputs: the results' element types (none: void).
        tile_outputs: the tile results of a block or warpgroup snippet (then no
            ``outputs``): arrays it writes, parameters after the inputs named ``out`` (one)
            or ``out0``, ``out1``... (several).
        includes: headers to ``#include`` before the function.
        build: NVRTC's inputs besides the text (options, include directories, defines),
            part of the symbol: one text compiled two ways is two functions.
    """

    code: str
    names: tuple[str, ...]
    params: tuple[ElementType, ...]
    outputs: tuple[ElementType, ...]
    includes: tuple[str, ...] = ()
    build: tuple = ()
    tile_outputs: tuple[TileType, ...] = ()

    @property
    def is_body(self) -> bool:
        """A function body (it returns with ``return``), not an expression. A void snippet
        is pasted as statements either way."""
        return bool(self.outputs) and is_body(self.code)

    def carrier(self) -> tuple[ElementType | None, tuple[int, ...]]:
        """The element type the function returns (None: void; several results: their
        unsigned carrier, :func:`splice.types.results_layout`) and each result's offset."""
        if not self.outputs:
            return None, ()
        if len(self.outputs) == 1:
            return self.outputs[0], (0,)
        return results_layout(self.outputs)

    def signature(self) -> Signature:
        if self.tile_outputs:
            tiles = self.tile_outputs
            return Signature(self.params, tiles[0] if len(tiles) == 1 else TileTuple.of(tiles))
        carrier, _ = self.carrier()
        return Signature(self.params, carrier, self.outputs if len(self.outputs) > 1 else ())

    @property
    def output_names(self) -> tuple[str, ...]:
        """The parameter names of the tile results: ``out``, or ``out0``, ``out1``..."""
        n = len(self.tile_outputs)
        return ("out",) if n == 1 else tuple(f"out{i}" for i in range(n))

    @property
    def symbol(self) -> str:
        """The function's C name: a hash of the generated text and NVRTC's inputs, so equal
        snippets share it."""
        h = hashlib.sha256(repr((self.source("splice_cuda"), self.build)).encode()
                           ).hexdigest()[:12]
        return f"splice_cuda_{h}"

    def param_list(self) -> str:
        """``float x, const float* p, float (&t)[16]``."""
        out = []
        for name, t in zip((*self.names, *self.output_names),
                           (*self.params, *self.tile_outputs)):
            if isinstance(t, TileType):
                dims = "".join(f"[{n}]" for n in t.shape or ())
                out.append(f"{t.elem.c_type} (&{name}){dims}")
            else:
                out.append(f"{t.c_type} {name}")
        return ", ".join(out)

    def source(self, symbol: str | None = None) -> str:
        """The CUDA C of the function ``symbol`` (default: :attr:`symbol`)."""
        symbol = symbol or self.symbol
        heads = {t.c_header for t in (*self.params, *self.outputs)
                 if t.c_header and not isinstance(t, TileType)}
        heads |= {t.elem.c_header for t in (*self.params, *self.tile_outputs)
                  if isinstance(t, TileType) and t.elem.c_header}
        lines = [f"#include <{h}>" for h in sorted(heads)]
        lines += [f"#include {h}" for h in self.includes]
        for name in (*self.names, *self.output_names[:len(self.tile_outputs)]):
            lines += [f"#ifdef {name}",      # a macro of an included header: not a parameter
                      f'#error "splice: the input {name} is a macro here (of an included '
                      f'header, or defines=); rename the input"', "#endif"]
        tiles = self.tile_outputs or any(isinstance(t, TileType) for t in self.params)
        linkage = "" if tiles else 'extern "C" '   # a tile function is called by the
        # staging trampoline (splice.inputs.checks.tile_trampoline), by its C++ name
        if len(self.outputs) > 1:
            return "\n".join(lines + self._several(symbol)) + "\n"
        ret = "void" if not self.outputs else self.outputs[0].c_type
        lines.append(f"{linkage}__device__ {ret} {symbol}({self.param_list()}) {{")
        lines += self._body(lines)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _several(self, symbol: str) -> list[str]:
        """A struct of the results, the snippet returning it (``return {a, b};``), and the
        ``extern "C"`` function packing it into the carrier (its C layout is the offsets
        :func:`splice.types.results_layout` gives)."""
        carrier, _ = self.carrier()
        assert carrier is not None
        args = ", ".join(self.names)
        lines = [*self._results_struct(symbol),
                 f"static __device__ __forceinline__ {symbol}_results {symbol}_body("
                 f"{self.param_list()}) {{"]
        lines += self._body(lines)
        lines += ["}",
                  f'extern "C" __device__ {carrier.c_type} {symbol}({self.param_list()}) {{',
                  # local names an input cannot have (no input name starts with "__")
                  f"    {symbol}_results __r = {symbol}_body({args});",
                  f"    {carrier.c_type} __u = 0;",
                  "    ::memcpy(&__u, &__r, sizeof __r);",
                  "    return __u;",
                  "}"]
        return lines

    def _results_struct(self, symbol: str) -> list[str]:
        """The struct the snippet returns its results in (``return {a, b};``): its
        constructor takes each result as it is typed in the snippet and checks that type,
        as the results of an extern are checked (:func:`splice.inputs.checks.
        _results_trampoline`): a result of another type is an error, not a conversion."""
        from ..inputs.checks import c_type_alternatives
        ns = f"{symbol}_check"
        n = len(self.outputs)
        members = " ".join(f"{t.c_type} r{i};" for i, t in enumerate(self.outputs))
        checks = []
        for i, t in enumerate(self.outputs):
            ok = " || ".join(f"{ns}::same<A{i}, {c}>::value" for c in c_type_alternatives(t))
            checks.append(f'static_assert({ok}, "splice: result {i + 1} of the snippet must '
                          f'be a {t.c_type} (dtype {t.name}); convert it: ({t.c_type})(...)");')
        return [f"namespace {ns} {{ template <class A, class B> struct same {{ enum {{ value = 0 "
                f"}}; }}; template <class A> struct same<A, A> {{ enum {{ value = 1 }}; }}; }}",
                f"struct {symbol}_results {{ {members}",
                f"  template <{', '.join(f'class A{i}' for i in range(n))}> __device__ "
                f"{symbol}_results({', '.join(f'A{i} a{i}' for i in range(n))}) : "
                f"{', '.join(f'r{i}(a{i})' for i in range(n))} {{ {' '.join(checks)} }}",
                "};"]

    def _body(self, before: list[str]) -> list[str]:
        """The snippet's lines, numbered from 1 in :data:`SNIPPET_FILE`; then the line
        numbers of the generated text again (``before``: the lines before these)."""
        head = [] if self.is_body or not self.outputs else ["return"]
        code = self.code.strip("\n")
        n_after = len(before) + len(head) + 2 + code.count("\n") + 2
        tail = [] if self.is_body else [";"]
        return [*head, f'#line 1 "{SNIPPET_FILE}"', code, f'#line {n_after} "{PROGRAM}"', *tail]

    def describe_params(self) -> str:
        ret = "void" if not self.outputs else ", ".join(t.c_type for t in self.outputs)
        several = " (return {a, b, ...})" if len(self.outputs) > 1 else ""
        writes = f"; writes {', '.join(self.output_names)}" if self.tile_outputs else ""
        return f"parameters ({self.param_list() or 'none'}); returns {ret}{several}{writes}"


@dataclasses.dataclass(eq=False)
class CudaSnippetSource(CudaSource):
    """The CUDA C of a :class:`CudaSnippet`, compiled as any CUDA C source; a compile
    error is said at the snippet's line and column and the call's kernel line."""

    snippet: Any = None   # CudaSnippet, always given
    kind = "cuda"

    def describe(self) -> str:
        return f"inline CUDA C (splice.cuda) at {self.where}"

    def naming(self, ext) -> str:
        return f"inline CUDA C (splice.cuda) at {ext.where}"

    def program_name(self) -> str:
        return PROGRAM

    def _nvrtc(self, full: str, name: str, target: str, found) -> str:
        try:
            return super()._nvrtc(full, name, target, found)
        except SpliceCompileError as e:
            raise SpliceCompileError(self._compile_message(e, target), e.log) from None

    def _compile_message(self, e: SpliceCompileError, target: str) -> str:
        """The first error of NVRTC's log: in the snippet, its line, column and text;
        elsewhere (a header, the generated code around the snippet), NVRTC's own lines."""
        from ..inputs.cuda_compile import header_hint, undefined_result_hint
        from ..ptxtools.ptx import arch_words
        head = f"{self.describe()} does not compile for {arch_words(target)}"
        said = _result_type_error(e.log, self.snippet) or \
            _first_snippet_error(e.log, self.snippet.code) or _first_other_error(e.log)
        if "missing return statement" in said:
            said += ("\n    hint: a path through the snippet reaches its end without "
                     "return; every path must return the result")
        elif self.snippet.is_body and said.startswith("error in the code splice generated"):
            said += ("\n    hint: the snippet has a 'return' (a lambda's?), so it was pasted as "
                     "a function body, which must end with 'return ...;' (write "
                     "'return [](float v) { ... }(x);')")
        hints = undefined_result_hint(e.log) + header_hint(e.log, self.providers) + \
            "".join(p.compile_hint(e.log) for p in self.providers)
        code = "\n      ".join(self.snippet.code.strip().splitlines())
        return (f"{head}: {said}\n    snippet: {code}\n    "
                f"{self.snippet.describe_params()}{hints}")


_LOG_ERROR = re.compile(r"^(.*)\((\d+)\): (?:catastrophic )?error: (.*)$")


def _first_snippet_error(log: str, code: str) -> str | None:
    """"line L, column C of the snippet: <message>" with the line and a caret, for the
    first error NVRTC reports in the snippet (None: its first error is elsewhere)."""
    lines = log.splitlines()
    for k, ln in enumerate(lines):
        m = _LOG_ERROR.match(ln)
        if m is None:
            continue
        if m.group(1) != SNIPPET_FILE:
            return None
        n = int(m.group(2))
        src = code.strip("\n").splitlines()
        text = src[n - 1] if 0 < n <= len(src) else ""
        caret = lines[k + 2] if k + 2 < len(lines) and lines[k + 2].strip() == "^" else ""
        col = len(caret) - 2 if caret else 0   # NVRTC echoes the line indented by 2
        at = f"line {n}, column {col}" if col > 0 else f"line {n}"
        mark = f"\n      {' ' * (col - 1)}^" if col > 0 else ""
        return f"error at {at} of the snippet: {m.group(3)}\n      {text}{mark}"
    return None


_RESULT_CHECK = re.compile(r'static assertion failed with "splice: result (\d+) of the snippet')
_INSTANCE = re.compile(r"\[with (.*)\]\" at line (\d+) of " + re.escape(SNIPPET_FILE))


def _result_type_error(log: str, snippet: CudaSnippet) -> str | None:
    """"line L of the snippet: result k is <type>, ...", where the first error of the log
    is the type check of a result (:meth:`CudaSnippet._results_struct`); else None."""
    first = next((ln for ln in log.splitlines() if _LOG_ERROR.match(ln)), "")
    check = _RESULT_CHECK.search(first)
    if check is None:
        return None
    k = int(check.group(1))
    instance = _INSTANCE.search(log)
    types = dict(kv.split("=", 1) for kv in instance.group(1).split(", ")) if instance else {}
    got = types.get(f"A{k - 1}", "another type")
    want = snippet.outputs[k - 1]
    n = int(instance.group(2)) if instance else 0
    src = snippet.code.strip("\n").splitlines()
    text = f"\n      {src[n - 1]}" if 0 < n <= len(src) else ""
    return (f"error at line {n} of the snippet: result {k} has type {got}, but dtype= asks "
            f"for {want.c_type} (ct.{want.name}), and splice converts no result (as for an "
            f"extern's); convert it in the snippet: ({want.c_type})(...){text}")


def _first_other_error(log: str) -> str:
    """NVRTC's first error outside the snippet (in the code generated around it, or in a
    header), with the lines NVRTC shows under it."""
    lines = log.splitlines()
    for k, ln in enumerate(lines):
        m = _LOG_ERROR.match(ln)
        if m:
            shown = [x for x in lines[k + 1:k + 3] if x.strip()]
            where = "the code splice generated around the snippet" \
                if m.group(1) == PROGRAM else m.group(1)
            return (f"error in {where}: {ln.strip()}"
                    + "".join(f"\n      {x}" for x in shown))
    return log.strip().splitlines()[0] if log.strip() else "unknown NVRTC error"


# --------------------------------------------------------------------------------------------
# The front end: splice.cuda inside a kernel


def make_cuda_function():
    """``splice.cuda``: a plain function cuTile resolves to :func:`_handle_cuda`."""
    def cuda(code, *args, dtype=..., pure=True, memory="any", scope=None, includes=(),
             include_dirs=(), defines=(), options=(), **inputs):
        raise SpliceCallError(f"splice.cuda called from Python at {python_caller()}: it is "
                              f"device code; use it inside a @splice.kernel function")
    cu.resolve_calls(cuda, _handle_cuda)
    return cuda


@dataclasses.dataclass
class _Call:
    """The location of one ``splice.cuda`` call, for its errors."""

    loc: Any
    where: str

    def error(self, message: str) -> SpliceCallError:
        return SpliceCallError(f"inline CUDA C (splice.cuda) at {self.where}: {message}",
                               self.loc)

    def constant(self, var, what: str):
        if var is None:
            return None
        if not var.is_constant():
            raise self.error(f"{what} must be a compile-time constant (a literal or a "
                             f"ct.Constant parameter)")
        return var.get_constant()


def _handle_cuda(callee, code, args, dtype, pure, memory, scope, includes, include_dirs,
                 defines, options, inputs):
    loc = cu.current_loc()
    call = _Call(loc, loc_str(loc))
    text = call.constant(code, "the code")
    if not isinstance(text, str) or not text.strip():
        raise call.error(f"the code must be a non-empty str of CUDA C (an expression such as "
                         f"'__expf(-x * x)' or a body with return), got {text!r:.60}")
    unbalanced = bracket_refusal(text)
    if unbalanced is not None:
        raise call.error(f"{unbalanced}; the snippet must be whole: an expression, or a body "
                         f"whose brackets close")
    if args:
        raise call.error(f"inputs are passed by name, as the snippet's parameters: "
                         f"splice.cuda(code, dtype=..., x=t), not {len(args)} positional "
                         f"input(s)")
    outputs = _output_types(call, call.constant(dtype, "dtype"))
    try:
        call_options = CallOptions.parse(
            f"inline CUDA C (splice.cuda) at {call.where}", pure=call.constant(pure, "pure"),
            scope=call.constant(scope, "scope") or "element",
            memory=call.constant(memory, "memory"))
    except SpliceDeclarationError as e:
        raise SpliceCallError(e.message, call.loc) from None
    ext = _snippet_extern(call, text, outputs, inputs, call_options,
                          (includes, include_dirs, defines, options))
    if ext.signature.has_tiles:
        from .tile_trace import emit_tile_call
        return emit_tile_call(ext, tuple(inputs.values()), loc)
    from ..tracing.trace import emit_call
    return emit_call(ext, tuple(inputs.values()), loc)


def _check_broadcast(call: _Call, inputs: dict) -> None:
    """The tile inputs of an element snippet broadcast to a common shape (at block and
    warpgroup scope each tile is passed whole)."""
    shape: tuple[int, ...] = ()
    tiles = [(n, v.get_type()) for n, v in inputs.items()
             if isinstance(v.get_type(), cu.TileTy)]
    try:
        for _, ty in tiles:
            shape = cu.broadcast_shapes2(shape, ty.shape)
    except cu.BroadcastError:
        said = ", ".join(f"{n} {tuple(ty.shape)}" for n, ty in tiles)
        raise call.error(f"the inputs' shapes do not broadcast to a common shape: "
                         f"{said}") from None


def _output_types(call: _Call, dt) -> tuple[ElementType, ...]:
    """The element types of ``dtype=`` (a dtype, a tuple of them, None for void)."""
    if dt is Ellipsis:
        raise call.error("dtype= is required: the result's dtype (dtype=ct.float32), a tuple "
                         "of dtypes for several results, or dtype=None for a snippet without "
                         "a result")
    try:
        types = () if dt is None else tuple(element_type(d) for d in (
            dt if isinstance(dt, tuple) else (dt,)))
    except SpliceError as e:
        raise call.error(f"dtype: {getattr(e, 'message', e)}") from None
    if isinstance(dt, tuple) and len(types) < 2:
        raise call.error("a tuple dtype= needs at least two dtypes; write one dtype "
                         "(ct.float32, not (ct.float32,)) for one result")
    if any(t.kind in ("p", "r") for t in types):
        raise call.error("a result is a dtype (ct.float32...) or a splice.tile, not a "
                         "pointer or a tuple of tiles (give a tuple of splice.tile)")
    if any(isinstance(t, TileType) for t in types):
        if not all(isinstance(t, TileType) for t in types):
            raise call.error("tile and element results do not mix: every result is a "
                             "splice.tile, or none is")
        return types
    if len(types) > 1:
        try:
            results_layout(types)
        except SpliceDeclarationError as e:
            raise call.error(e.message) from None
    return types


def _snippet_extern(call: _Call, text: str, outputs, inputs: dict, options: CallOptions,
                    compile_args):
    """The extern calling the snippet (its fragment a :class:`CudaSnippetSource`) with the
    ``options`` its call gave."""
    from .externs import ExternFunction
    form = options.form
    if not form.takes_tile_arguments():
        _check_broadcast(call, inputs)
    names, params = _parameters(call, inputs, form)
    tile_outputs = _tile_outputs(call, outputs, names, params, form)
    if tile_outputs:
        outputs = ()
    includes, opts, incs, defs = _compile_inputs(call, *compile_args)
    snippet = CudaSnippet(text, names, params, outputs, includes, (opts, incs, defs),
                          tile_outputs)
    sig = snippet.signature()
    try:
        sig.packing()
        # a snippet without outputs is impure
        options = dataclasses.replace(options, pure=options.pure and bool(outputs))
        options = options.declared(sig, f"inline CUDA C (splice.cuda) at {call.where}")
    except SpliceDeclarationError as e:
        raise SpliceCallError(e.message, call.loc) from None
    return ExternFunction("splice.cuda", snippet.symbol, sig, _fragment(snippet, call.where),
                          call.where, options)


#: The fragment of each snippet (by symbol) in each trace: equal snippets of one kernel
#: share one object, so the pipeline compiles it once (its fragments are compiled ahead, in
#: parallel, by object) and a compile error names the first call.
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fragment(snippet: CudaSnippet, where: str) -> CudaSnippetSource:
    """The :class:`CudaSnippetSource` of ``snippet``, first called at ``where``: the one
    of this trace's earlier calls of the snippet, if any."""
    from ..tracing.trace import current_session
    from .externs import HEADER_PROVIDERS
    session = current_session()
    shared = _SHARED.setdefault(session, {}) if session is not None else {}
    frag = shared.get(snippet.symbol)
    if frag is None:
        opts, incs, defs = snippet.build
        frag = CudaSnippetSource(text=snippet.source(), options=opts, include_dirs=incs,
                                 defines=defs, where=where, providers=HEADER_PROVIDERS,
                                 snippet=snippet)
        if not snippet.signature().has_tiles:
            frag.roots = ((snippet.symbol, snippet.signature()),)
        shared[snippet.symbol] = frag
    return frag


def _tile_outputs(call: _Call, outputs, names, params, form) -> tuple[TileType, ...]:
    """The tile results (``dtype=splice.tile(...)``), each with its shape: its own, or that
    of the first tile input. None but at block and warpgroup scope.

    Raises:
        SpliceCallError: a tile result at element scope, one without a shape and no tile
            input, an input named like a result parameter (``out``, ``out0``...).
    """
    tiles = tuple(t for t in outputs if isinstance(t, TileType))
    if not tiles:
        return ()
    if not form.takes_tile_arguments():
        raise call.error(f"a tile result (splice.tile) is for scope=\"block\" or "
                         f"\"warpgroup\", where the snippet writes the whole tile; an "
                         f"{form.scope} snippet returns one element "
                         f"(dtype=ct.{tiles[0].elem.name})")
    first = next((t.shape for t in params if isinstance(t, TileType)), None)
    if any(t.shape is None for t in tiles) and first is None:
        raise call.error(f"the tile result has no shape and there is no tile input to take "
                         f"it from; give it one: splice.tile(ct.{tiles[0].elem.name}, "
                         f"(128,))")
    taken = set(names) & set(("out",) if len(tiles) == 1 else
                             (f"out{i}" for i in range(len(tiles))))
    if taken:
        raise call.error(f"input {sorted(taken)[0]!r}: the snippet's tile results are the "
                         f"parameters out (one) or out0, out1... (several); rename the input")
    return tuple(TileType.of(t.elem, t.shape or first) for t in tiles)


def _parameters(call: _Call, inputs: dict, form) -> tuple[tuple[str, ...],
                                                           tuple[ElementType, ...]]:
    """The snippet's parameter names and types from the call's named inputs: a tile or
    scalar's dtype, an array's ``T*``; at block and warpgroup scope a tile of a shape is
    the array of that shape (``float (&t)[16]``)."""
    names, params = [], []
    for name, var in inputs.items():
        why = input_name_refusal(name)
        if why is not None:
            raise call.error(f"input {name!r} cannot name the snippet's C parameter: it is "
                             f"{why}; rename it")
        ty = var.get_type()
        try:
            if isinstance(ty, cu.ArrayTy):
                t: ElementType = pointer(element_type(ty.dtype))
            elif isinstance(ty, cu.TileTy):
                elem = element_type(ty.dtype)
                t = TileType.of(elem, tuple(ty.shape)) if ty.shape and form.takes_tile_arguments() \
                    else elem
            else:
                raise call.error(f"input {name!r} is {describe(var)}; inputs are tiles, "
                                 f"scalars, Python constants or arrays")
        except (SpliceDeclarationError, AttributeError) as e:
            raise call.error(f"input {name!r}: {getattr(e, 'message', e)}") from None
        names.append(name)
        params.append(t)
    return tuple(names), tuple(params)


def _compile_inputs(call: _Call, includes, include_dirs, defines, options):
    """``includes`` as ``#include`` operands, and the checked (options, include
    directories, defines) of :func:`splice.declare.declaring.check_options`."""
    from .declaring import check_options
    inc = call.constant(includes, "includes")
    inc = (inc,) if isinstance(inc, str) else inc
    if not isinstance(inc, tuple) or not all(isinstance(h, str) and h.strip() for h in inc):
        raise call.error(f"includes must be a header name or a tuple of them, such as "
                         f"('cuda_fp16.h', 'cuda/std/cmath'), got {inc!r:.80}")
    heads = tuple(h.strip() if h.strip()[0] in "<\"" else f"<{h.strip()}>" for h in inc)
    opts = call.constant(options, "options")
    dirs = call.constant(include_dirs, "include_dirs")
    defs = call.constant(defines, "defines")
    if isinstance(defs, tuple):   # a kernel has no dict literal: (("N", 4), ("FAST", None))
        if not all(isinstance(d, tuple) and len(d) == 2 for d in defs):
            raise call.error(f"defines must be a dict, or a tuple of (name, value) pairs, "
                             f"got {defs!r:.80}")
        defs = dict(defs)
    if isinstance(opts, tuple):
        opts = list(opts)
    if isinstance(opts, list) and any(o in ("-dlto", "--dlto") for o in opts
                                      if isinstance(o, str)):
        raise call.error("option -dlto is not for snippets: splice inlines the snippet's PTX")
    base = None if call.loc is None or call.loc.is_unknown() else \
        safe_fs.declaring_dir(call.loc.filename)
    try:
        o, d, df = check_options(opts, dirs, defs, f"inline CUDA C (splice.cuda) at "
                                                   f"{call.where}", base)
    except SpliceDeclarationError as e:
        raise SpliceCallError(e.message, call.loc) from None
    return heads, o, d, df


def _public_cuda():
    f = make_cuda_function()
    f.__doc__ = CUDA_DOC
    f.__module__ = "splice"
    return f


CUDA_DOC = """Inline CUDA C applied to every element of its input tiles (inside a
@splice.kernel), as an extern of that code would be.

    y = splice.cuda("__expf(-x * x)", dtype=ct.float32, x=t)
    p = splice.cuda("float s, c; __sincosf(x, &s, &c); return s * c;", dtype=ct.float32, x=t)
    s, c = splice.cuda("float s, c; __sincosf(x, &s, &c); return {s, c};",
                       dtype=(ct.float32, ct.float32), x=t)
    splice.cuda("atomicAdd(counter, v)", dtype=None, counter=counts, v=t)

Args:
    code (str): a C++ expression (its value is the result), or a function body that
        returns with ``return`` (several results: ``return {a, b};``); a snippet of
        ``dtype=None`` is pasted as statements (a trailing ``;`` is optional). A
        compile-time constant.
    dtype: the result's dtype (required): a cuTile dtype, a tuple of at least two
        (at most 64 bits together; the call returns a tuple of tiles), or None (no
        result: a side effect only, always impure). At block and warpgroup scope also a
        tile result, ``splice.tile(ct.float32)`` (the shape of the first tile input) or
        ``splice.tile(ct.int32, (8,))``, or a tuple of them (a module-level name: a kernel
        cannot call ``splice.tile``): the snippet writes it as the array ``out``
        (several: ``out0``, ``out1``...) and returns nothing.
    pure (bool): True (default): no side effect, the result depends only on the inputs
        (as for ``splice.extern``): an unused call may be removed, a call hoisted or moved
        across the kernel's loads and stores. False: kept in place and in order, run
        exactly once per element.
    memory (str): which memory an impure snippet touches: "any" (default) or "arguments"
        (global memory only through its array inputs), as for ``splice.extern``.
    scope (str): "element" (default): the snippet runs once per element of the broadcast
        inputs, on the thread that owns it. "block" / "warpgroup": every thread of the
        block / warpgroup runs it once per execution of the call (``__syncthreads``,
        shuffles, ``__shared__`` memory allowed as for an extern of that scope); a tile
        input is then the whole tile, an array of its shape in shared memory
        (``float (&t)[16]``); the result is a scalar (thread 0's) or tiles the snippet
        writes (see ``dtype``).
    includes (str | tuple[str, ...]): headers to ``#include`` before the snippet
        (``"cuda_fp16.h"``, ``"<cuda/std/cmath>"``, ``'"my.h"'``).
    include_dirs (str | tuple[str, ...]): extra include directories (a relative one is
        taken from the directory of the kernel's file, never the working directory).
    defines (dict | tuple): preprocessor macros, a dict or (inside a kernel, which has
        no dict literals) a tuple of (name, value) pairs; values as for
        ``splice.extern(defines=)``.
    options (tuple[str, ...]): extra NVRTC options (``("--use_fast_math",)``); not
        ``-dlto``.
    **inputs: the snippet's parameters, by name: tiles and scalars (broadcast to a common
        shape; the C type of their dtype, ``float`` for float32, ``__half`` for float16...),
        Python constants (int32, float32 or bool, as cuTile types them), arrays (a ``T*``
        to the array's first element). A name must be a C identifier, not a C++ keyword,
        not one of the option names above.

Returns:
    A tile (or tuple of tiles) of the inputs' broadcast shape, or None.

Raises:
    SpliceCallError: at the call, before tileiras runs: code or an option that is not a
        compile-time constant, code that is not a str, a missing ``dtype=``, a dtype that is
        not one, more than 64 bits of results, positional inputs, an input name that is
        not a C parameter name, an input that is not a tile, scalar, constant or array,
        inputs that do not broadcast, more than 128 bits of element inputs, ``memory`` not
        "any" or "arguments" (or not "any" on a pure snippet), a bad scope, a tile result
        at element scope (or mixed with element results, or without a shape to take),
        bad includes/options/defines (as for ``splice.extern``).
    SpliceCompileError: NVRTC rejected the snippet: its message at the snippet's line and
        column, the snippet, its parameters and the call site.
    SpliceLinkError: what an extern's code gets: a collective (``__syncthreads``,
        ``__shfl_sync``...) in an element snippet, an effect in a pure snippet, ``exit``,
        too much shared memory, a warpgroup snippet that synchronises the whole block.

Example:
    ```python
    import cuda.tile as ct
    import splice

    @splice.kernel
    def k(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),),
                 tile=splice.cuda("__expf(-x * x)", dtype=ct.float32, x=t))

    sig = splice.kernel_signature("array(float32)", "array(float32)", 128)
    print(splice.compile(k, sig, "sm_90").summary())
    ```
"""


#: The public ``splice.cuda`` (``splice/__init__.py`` loads it on first use).
cuda = _public_cuda()
