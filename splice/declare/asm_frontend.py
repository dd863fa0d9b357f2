"""Inline PTX in cuTile kernels: ``splice.asm``, an ``asm volatile`` analogue.

:func:`make_asm_function` makes ``splice.asm``, a plain function cuTile's frontend resolves
to :func:`_handle_asm` inside a kernel: it checks the call, packs the inputs of a ``pack=k``
snippet (:class:`splice.tracing.tile_ir.SplicePack`), and calls the snippet as an extern
(:func:`splice.tracing.trace.emit_call`) whose source is an :class:`AsmSpec`.

Each distinct snippet becomes a small PTX ``.func`` (operands loaded from its parameters
into registers typed by their dtypes, the snippet pasted in, outputs stored to the return
value) that splice calls at every element of the call's tile, like any extern -- and always
inlines, so no ``CALL`` remains in SASS.

Operand numbering follows CUDA C ``asm`` (``%n``) and Triton's ``inline_asm_elementwise``
(``$n``): outputs first, then inputs. ``$$`` is a literal ``$``; ``%`` registers such as
``%globaltimer`` pass through.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

import cuda.tile as ct

from ..analysis.asm_check import SnippetFault, check_snippet
from ..errors import SpliceCallError, SpliceDeclarationError, SpliceError
from ..forms.base import Memory
from ..system import _cutile as cu
from ..tracing.trace import describe, emit_call, loc_str, python_caller, split_results
from ..types import ElementType, Signature, element_type, results_layout
from .declaring import ASM_MEMORY, CallOptions

#: Register type and constraint letter of each element type (CUDA C / Triton constraint
#: letters: h = 16-bit, r = 32-bit, l = 64-bit, f = f32, d = f64, b = predicate; 8-bit
#: values live in 16-bit registers, as PTX has no 8-bit ones).
REG = {
    "bool": (".pred", "b"), "int8": (".b16", "h"), "uint8": (".b16", "h"),
    "int16": (".b16", "h"), "uint16": (".b16", "h"), "float16": (".b16", "h"),
    "bfloat16": (".b16", "h"), "int32": (".b32", "r"), "uint32": (".b32", "r"),
    "float32": (".f32", "f"), "int64": (".b64", "l"), "uint64": (".b64", "l"),
    "float64": (".f64", "d"),
}

_OPERAND_RE = re.compile(r"\$(\$|\d+)")

#: The wrapper's scratch registers, besides the operands' ``%a<k>``.
_SCRATCH = ("%t32", "%t64", "%c64")


@dataclasses.dataclass(frozen=True)
class AsmSpec:
    """One inline-PTX snippet with its operand types.

    Attributes:
        template: the PTX text with ``$n`` operands.
        outputs: element types of the outputs ($0 ... $(len-1)).
        inputs: element types of the inputs.
        where: "file:line" of the call.
    """

    template: str
    outputs: tuple[ElementType, ...]
    inputs: tuple[ElementType, ...]
    where: str

    @property
    def symbol(self) -> str:
        h = hashlib.sha256(repr((self.template, [t.name for t in self.outputs],
                                 [t.name for t in self.inputs])).encode()).hexdigest()[:12]
        return f"splice_asm_{h}"

    def check(self, constraints: str | None) -> None:
        """Operand references and explicit constraints against the operand dtypes.

        Raises:
            SpliceCallError: a ``$n`` beyond the operands, or a constraint that does not
                match its operand's dtype.
        """
        n = len(self.outputs) + len(self.inputs)
        for m in _OPERAND_RE.finditer(self.template):
            if m.group(1) != "$" and int(m.group(1)) >= n:
                raise SpliceCallError(
                    f"inline PTX at {self.where}: operand ${m.group(1)} does not exist: the "
                    f"snippet has {len(self.outputs)} output(s) and {len(self.inputs)} "
                    f"input(s), $0..${n - 1}")
        if constraints is None:
            return
        if not isinstance(constraints, str):
            raise SpliceCallError(f"inline PTX at {self.where}: constraints must be a string "
                                  f"like '=r,r,r'")
        parts = [c.replace(" ", "").replace("\t", "") for c in constraints.split(",")] \
            if constraints.strip() else []
        if len(parts) != n:
            raise SpliceCallError(
                f"inline PTX at {self.where}: {len(parts)} constraint(s) {constraints!r} for "
                f"{n} operand(s)")
        for k, (c, t) in enumerate(zip(parts, (*self.outputs, *self.inputs))):
            is_out = k < len(self.outputs)
            if c.startswith("=") != is_out:
                raise SpliceCallError(
                    f"inline PTX at {self.where}: constraint {k} {c!r} must "
                    f"{'' if is_out else 'not '}start with '=' (outputs come first)")
            letter = c.lstrip("=")
            if len(letter) != 1 or letter not in "hrlfdb":
                raise SpliceCallError(
                    f"inline PTX at {self.where}: constraint {k} {c!r}: only the letters h, r, "
                    f"l, f, d, b (with '=' for outputs) are supported, no modifiers")
            if letter != REG[t.name][1]:
                raise SpliceCallError(
                    f"inline PTX at {self.where}: constraint {k} {c!r} does not match operand "
                    f"${k} of dtype {t} (register {REG[t.name][0]}, constraint "
                    f"'{'=' if is_out else ''}{REG[t.name][1]}')")

    def body(self) -> str:
        """The template with its operands replaced by the wrapper's registers (``$k``:
        ``%a<k>``)."""
        return _OPERAND_RE.sub(lambda m: "$" if m.group(1) == "$" else f"%a{m.group(1)}",
                               self.template)

    def check_control(self, options: CallOptions) -> None:
        """Refuse a snippet control can leave or that leaves an output unwritten, a
        cooperative one (its form's :meth:`~splice.forms.base.CallForm.snippet_rule`) that
        is not straight-line code, and one of ``memory="none"`` that may touch global memory
        (:mod:`splice.analysis.asm_check`); ``options``: the snippet's.

        Raises:
            SpliceCallError: naming the rule, the snippet and the call site.
        """
        n = len(self.outputs) + len(self.inputs)
        try:
            check_snippet(self.body(), [f"%a{k}" for k in range(len(self.outputs))],
                          [f"%a{k}" for k in range(n)] + list(_SCRATCH),
                          straight_line=options.form.snippet_rule(),
                          no_global_memory=options.memory is Memory.NONE)
        except SnippetFault as e:
            raise SpliceCallError(f"inline PTX at {self.where}: {e}\n    snippet: "
                                  f"{self.template.strip()}\n    operands: "
                                  f"{self.operands_text()}") from None

    def operands_text(self) -> str:
        """``$0 .b32 (int32 output), $1 .f32 (float32)...`` for error messages."""
        n_out = len(self.outputs)
        return ", ".join(f"${k} {REG[t.name][0]} ({t}{' output' if k < n_out else ''})"
                         for k, t in enumerate((*self.outputs, *self.inputs)))

    def result_layout(self) -> tuple[ElementType | None, tuple[int, ...]]:
        """The carrier of the outputs (one element type, None for no output) and each
        output's bit offset in it (:func:`splice.types.results_layout`).

        Raises:
            SpliceCallError: more than 64 bits of outputs.
        """
        if not self.outputs:
            return None, ()
        if len(self.outputs) == 1:
            return self.outputs[0], (0,)
        try:
            return results_layout(self.outputs)
        except SpliceDeclarationError as e:
            raise SpliceCallError(f"inline PTX at {self.where}: "
                                  f"{e.message.replace('results', 'outputs')}") from None

    def ptx(self, target: str = "sm_80", version: str = "8.0") -> str:
        """The ``.func`` wrapping the snippet."""
        carrier, offsets = self.result_layout()
        lines = [f".version {version}", f".target {target}", ".address_size 64", ""]
        params = []
        for i, t in enumerate(self.inputs):
            params.append(f"\t.param .b{_param_bits(t)} p{i}")
        ret = f"(.param .b{_param_bits(carrier)} func_retval0) " if carrier else ""
        lines.append(f".visible .func {ret}{self.symbol}(")
        lines.append(",\n".join(params))
        lines.append(")")
        lines.append("{")
        for k, t in enumerate((*self.outputs, *self.inputs)):
            lines.append(f"\t.reg {REG[t.name][0]} \t%a{k};")
        lines.append("\t.reg .b32 \t%t32;")
        lines.append("\t.reg .b64 \t%t64, %c64;")
        n_out = len(self.outputs)
        for i, t in enumerate(self.inputs):
            k = n_out + i
            reg_t = REG[t.name][0]
            if reg_t == ".pred":
                lines.append(f"\tld.param.b32 \t%t32, [p{i}];")
                lines.append(f"\tsetp.ne.b32 \t%a{k}, %t32, 0;")
            else:
                lines.append(f"\tld.param.b{int(reg_t[2:])} \t%a{k}, [p{i}];")
        lines.append("\t" + self.body().strip())
        if carrier is not None:
            cbits = _param_bits(carrier)
            if len(self.outputs) == 1:
                lines += _store_single(self.outputs[0], cbits)
            else:
                lines.append("\tmov.b64 \t%c64, 0;")
                for k, (t, off) in enumerate(zip(self.outputs, offsets)):
                    lines += _to_b64(t, k)
                    if off:
                        lines.append(f"\tshl.b64 \t%t64, %t64, {off};")
                    lines.append("\tor.b64 \t%c64, %c64, %t64;")
                if cbits == 32:
                    lines.append("\tcvt.u32.u64 \t%t32, %c64;")
                    lines.append("\tst.param.b32 \t[func_retval0], %t32;")
                else:
                    lines.append("\tst.param.b64 \t[func_retval0], %c64;")
        lines.append("\tret;")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _param_bits(t: ElementType) -> int:
    return 32 if t.kind in "bsu" and t.bits < 32 else t.bits


def _store_single(t: ElementType, cbits: int) -> list[str]:
    reg_t = REG[t.name][0]
    if reg_t == ".pred":
        return ["\tselp.u32 \t%t32, 1, 0, %a0;", "\tst.param.b32 \t[func_retval0], %t32;"]
    rbits = int(reg_t[2:])
    if rbits == cbits:
        return [f"\tst.param.b{cbits} \t[func_retval0], %a0;"]
    # 8/16-bit integer value in a 16-bit register, returned in .b32 (C promotion)
    return ["\tcvt.u32.u16 \t%t32, %a0;", "\tst.param.b32 \t[func_retval0], %t32;"]


def _to_b64(t: ElementType, k: int) -> list[str]:
    """Zero-extend output register %a<k> into %t64, keeping only its element's bits."""
    reg_t = REG[t.name][0]
    if reg_t == ".pred":
        return [f"\tselp.u64 \t%t64, 1, 0, %a{k};"]
    rbits = int(reg_t[2:])
    out = [f"\tcvt.u64.u{rbits} \t%t64, %a{k};" if rbits < 64 else f"\tmov.b64 \t%t64, %a{k};"]
    if rbits < 64 and reg_t in (".f32",):
        out = [f"\tmov.b32 \t%t32, %a{k};", "\tcvt.u64.u32 \t%t64, %t32;"]
    if t.bits < rbits:
        out.append(f"\tand.b64 \t%t64, %t64, {(1 << t.bits) - 1};")
    return out


# --------------------------------------------------------------------------------------------
# The front end: splice.asm inside a kernel


def make_asm_function():
    """``splice.asm``: a plain function cuTile resolves to :func:`_handle_asm`."""
    def asm(template, *args, dtype=None, constraints=None, pure=True, pack=1, scope=None,
            memory="any"):
        raise SpliceCallError(f"splice.asm called from Python at {python_caller()}: it is "
                              f"device code; use it inside a @splice.kernel function")
    cu.resolve_calls(asm, _handle_asm)
    return asm


def _handle_asm(callee, template, args, dtype, constraints, pure, pack, scope, memory):
    loc = cu.current_loc()
    where = loc_str(loc)

    def error(message: str) -> SpliceCallError:
        return SpliceCallError(f"inline PTX at {where}: {message}", loc)

    text = _constant(template, "the PTX template", where)
    if not isinstance(text, str):
        raise error("the template must be a string")
    dt = _constant(dtype, "dtype", where)
    outputs = _output_types(dt, error)
    try:    # inline="auto": a snippet that declares .local/.shared scratch stays a call
        options = CallOptions.parse(
            f"inline PTX at {where}", pure=_constant(pure, "pure", where),
            scope=_constant(scope, "scope", where) or "element",
            memory=_constant(memory, "memory", where), memory_values=ASM_MEMORY)
    except SpliceDeclarationError as e:
        raise SpliceCallError(e.message, loc) from None
    k = _constant(pack, "pack", where)
    if isinstance(k, bool) or not isinstance(k, int) or k not in (1, 2, 4, 8):   # True == 1
        raise error(f"pack must be 1, 2, 4 or 8, got {k!r}")
    why = options.form.check_snippet(text, k)
    if why is not None:
        raise error(why)
    for i, var in enumerate(args):
        if not isinstance(var.get_type(), cu.TileTy):
            raise error(f"input {i + 1} is {describe(var)}; inputs are tiles or scalars")
    elem_out, shape, padded = outputs, (), ()
    if k > 1:
        if not args:
            raise error(f"pack={k} needs inputs")
        if any(t.kind == "b" for t in outputs):
            raise error(f"pack={k} cannot pack bool outputs")
        args, shape, padded = _pack_inputs(args, k, options.pure and bool(outputs), where,
                                           loc)
        outputs = _packed_types(outputs, k, error)
    ext, offsets = _snippet_extern(text, outputs, args, constraints, options, where, loc)
    raw = emit_call(ext, tuple(args), loc)
    if not outputs:
        return None
    outs = (raw,) if len(outputs) == 1 else split_results(raw, outputs, offsets)
    if k > 1:
        outs = tuple(_unpack_output(v, t, k, shape, padded) for v, t in zip(outs, elem_out))
    return cu.build_tuple(tuple(outs)) if isinstance(dt, tuple) else outs[0]


def _constant(var, what, where):
    if var is None:
        return None
    if not var.is_constant():
        raise SpliceCallError(f"inline PTX at {where}: {what} must be a compile-time constant")
    return var.get_constant()


def _output_types(dt, error) -> tuple[ElementType, ...]:
    """The element types of ``dtype=`` (None, a dtype or a tuple of them)."""
    try:
        return () if dt is None else tuple(element_type(d) for d in (
            dt if isinstance(dt, tuple) else (dt,)))
    except SpliceError as e:
        raise error(f"dtype: {getattr(e, 'message', e)}") from None


def _packed_types(outputs, k: int, error) -> tuple[ElementType, ...]:
    """The integer types carrying k elements of each output of a ``pack=k`` snippet."""
    try:
        return tuple(element_type({16: "uint16", 32: "uint32", 64: "uint64"}[k * t.bits])
                     for t in outputs)
    except KeyError:
        raise error(f"pack={k} outputs must be {16 // k}/{32 // k}/{64 // k}-bit") from None


def _snippet_extern(text, outputs, args, constraints, options: CallOptions, where, loc):
    """The extern calling the snippet, and each output's bit offset in its result
    (``constraints``: the Var of ``constraints=``; ``options``: the snippet's)."""
    from ..inputs.fragments import AsmSource
    from .externs import ExternFunction
    inputs = []
    for i, var in enumerate(args):
        try:
            inputs.append(element_type(var.get_type().dtype))
        except (SpliceError, AttributeError) as e:   # AttributeError: a type without dtype
            raise SpliceCallError(f"inline PTX at {where}: input {i + 1}: "
                                  f"{getattr(e, 'message', e)}", loc) from None
    spec = AsmSpec(text, outputs, tuple(inputs), where)
    try:
        spec.check(_constant(constraints, "constraints", where))
        carrier, offsets = spec.result_layout()
        spec.check_control(options)
        sig = Signature(tuple(inputs), carrier)
        sig.packing()
        # a snippet without outputs is impure
        options = dataclasses.replace(options, pure=options.pure and bool(outputs))
        options = options.declared(sig, f"inline PTX at {where}")
    except SpliceError as e:
        raise SpliceCallError(e.message, loc) from None
    return ExternFunction(f"asm@{where}", spec.symbol, sig, AsmSource(spec=spec), where,
                          options), offsets


def _unpack_output(var, t: ElementType, k: int, shape, padded):
    """One output of a ``pack=k`` snippet: k elements of ``t`` per carrier element, the
    padding (:func:`_pack_inputs`) cut off, in the call's ``shape``."""
    from ..tracing.tile_ir import SpliceUnpackPacked
    v = cu.add_operation(SpliceUnpackPacked, cu.TileTy(t.dtype, padded), carrier=var, k=k)
    if padded != (shape if shape else (1,)):
        zero = tuple(cu.loosely_typed_const(0) for _ in padded)
        v = cu.extract(v, zero, (*padded[:-1], (shape[-1] if shape else 1)))
    if not shape:
        v = cu.reshape(v, ())
    return v


def _pack_inputs(args, k, may_pad: bool, where, loc):
    """Broadcast the inputs of a ``pack=k`` snippet to a common shape, pad a last axis
    shorter than k by repeating it (``may_pad``: a pure snippet with outputs only), and
    pack k elements per operand. Returns (packed operands, common shape, padded shape)."""
    from ..tracing.tile_ir import SplicePack
    shape: tuple[int, ...] = ()
    for var in args:
        shape = cu.broadcast_shapes2(shape, var.get_type().shape)
    base = tuple(shape) if shape else (1,)
    if base[-1] % k and not may_pad:
        raise SpliceCallError(f"inline PTX at {where}: pack={k} needs a last axis divisible by "
                              f"{k} for an impure snippet (got {base[-1]}): padding would run "
                              f"its side effects on padding lanes", loc)
    packed = []
    padded = base
    for var in args:
        v = cu.broadcast_to(var, shape)
        if not shape:
            v = cu.reshape(v, (1,))
        while v.get_type().shape[-1] % k:
            v = cu.cat((v, v), -1)
        padded = v.get_type().shape
        dt = v.get_type().dtype
        bits = k * dt.bitwidth
        if dt == ct.bool_ or bits not in (16, 32, 64):
            raise SpliceCallError(f"inline PTX at {where}: pack={k} of {dt} makes {bits}-bit "
                                  f"operands; k x element width must be 16, 32 or 64 bits",
                                  loc)
        carrier = {16: ct.uint16, 32: ct.uint32, 64: ct.uint64}[bits]
        packed.append(cu.add_operation(SplicePack, cu.TileTy(carrier, (*padded[:-1],
                                                                       padded[-1] // k)),
                                       x=v, k=k))
    return packed, tuple(shape), tuple(padded)


def _public_asm():
    f = make_asm_function()
    f.__doc__ = ASM_DOC
    f.__module__ = "splice"
    return f


ASM_DOC = """Inline PTX applied to every element of its input tiles (inside a @splice.kernel).

    y = splice.asm("mad.lo.s32 $0, $1, $2, $3;", x, a, b, dtype=ct.int32)
    hi, lo = splice.asm("mov.b64 {$1, $0}, $2;", v, dtype=(ct.uint32, ct.uint32))
    t = splice.asm("mov.u64 $0, %globaltimer;", dtype=ct.uint64, pure=False)

Args:
    template (str): PTX; ``$0``.. are the outputs, then the inputs; ``$$`` is ``$``;
        ``%`` registers pass through. Operand registers are typed by dtype: .pred (bool),
        .b16 (8/16-bit ints, float16, bfloat16), .b32 (32-bit ints), .f32, .b64 (64-bit
        ints), .f64.
    *args: input tiles or scalars (broadcast to a common shape); their dtypes are the
        operands' dtypes.
    dtype: the output dtype, a tuple of dtypes (at most 64 bits together; returns a
        tuple), or None (no output: a side effect only).
    constraints (str): optional CUDA/Triton constraints ("=r,r,r": h 16-bit, r 32-bit,
        l 64-bit, f f32, d f64, b predicate), checked against the dtypes.
    pure (bool): False: never removed, never duplicated, runs exactly once per element and
        keeps its order against the kernel's memory operations (``asm volatile`` with a
        "memory" clobber). A snippet without outputs is always impure.
    pack (int): 1 (default), 2, 4 or 8 (an int, not a bool): the snippet runs once per k
        elements of the last axis, its operands k elements packed into one register
        (16, 32 or 64 bits: ``pack=2`` of float16 is a .b32 holding two halves); the
        inputs' last axis must divide by k (a pure snippet's shorter axis is padded).
        Element scope only; outputs are unpacked back.
    scope (str): "element" (default), or "block" / "warpgroup": the snippet runs once per
        execution on every thread of the block / of the warpgroup tileiras runs the site on
        (as for ``splice.extern(scope=...)``): scalar inputs, always impure, no ``pack``,
        straight-line PTX only (no branch, label, call or exit).
    memory (str): which memory an impure snippet touches, and so which of the kernel's
        memory operations it is ordered against. "any" (default): any memory, ordered
        against every load and store of the kernel. "none": no global memory (registers,
        ``.shared``/``.shared::cta``/``.local``/``.param`` accesses, barriers, shuffles,
        votes): ordered only against splice's other calls, so tileiras may overlap it with
        the kernel's memory traffic (a warpgroup snippet in a TMA matmul's epilogue keeps
        the plain k-loop). splice proves it on the PTX (:mod:`splice.analysis.asm_check`). Only on
        an impure snippet (``pure=False``, no outputs, or block/warpgroup scope).

Returns:
    A tile (or tuple of tiles) of the broadcast shape, or None.

Raises:
    SpliceCallError: at the call, before tileiras runs: a template that is not a str,
        operand count/type mismatches, constraints that do not match the dtypes, pure not
        a bool, pack not 1/2/4/8 (or a bool), pack with bool outputs or a last axis it
        does not divide, a cooperative snippet with tile inputs; a snippet
        :mod:`splice.analysis.asm_check` refuses: control that can leave it (``ret``, ``exit``,
        a branch to a label it does not define, a call), an output not written on every
        path, a directive other than .reg/.local/.param/.branchtargets, a ``.shared``
        variable, a register splice reserves for operands, and for a block/warpgroup
        snippet any branch, label, call or exit; memory not "any" or "none" ("arguments":
        a snippet has no pointer arguments), "none" on a pure snippet, and under "none" an
        instruction that may touch global memory (a generic address, ``.global``,
        ``.const``, ``.shared::cluster``, ``cp.async*``/``cp.reduce*``/TMA, ``prefetch``,
        ``multimem``, texture/surface, ``tensormap``, a fence, ``griddepcontrol``,
        ``call``, an opcode splice does not know); arguments cuTile's frontend refuses
        (bytes, a list, an unknown keyword).
    SpliceLinkError: a warpgroup-scope snippet that synchronises or measures the whole
        block (``bar.sync 0``/``__syncthreads``, a cluster barrier, another named barrier
        than the group's ``barrier.sync 15, 128``, ``%ntid``, a ``%tid`` read other than
        the group rank's, ``setmaxnreg``), an element snippet running a collective
        (``shfl.sync``, ``bar``, ...), ``exit``; a pure snippet with a side effect.
    SpliceRewriteError: a block/warpgroup snippet at a site splice cannot prove every
        thread of the block/group reaches once (a warp-specialised kernel for block scope).
    SpliceCompileError: ptxas rejected the snippet (its message, the snippet and the call
        site).

Example:
    ```python
    import cuda.tile as ct
    import splice

    @splice.kernel
    def k(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        r = splice.asm("brev.b32 $0, $1;", t, dtype=ct.uint32)      # bit reverse
        ct.store(y, index=(ct.bid(0),), tile=r)

    sig = splice.kernel_signature("array(uint32)", "array(uint32)", 128)
    print(splice.compile(k, sig, "sm_90").summary())
    ```
"""


#: The public ``splice.asm`` (``splice/__init__.py`` loads it on first use).
asm = _public_asm()
