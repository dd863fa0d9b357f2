"""Declaring externs: device functions written in CUDA C or PTX, callable from kernels."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from pathlib import Path
from typing import Any

from ..errors import SpliceDeclarationError
from ..forms import form_of
from ..forms.base import CallForm, Memory
from ..inputs import cccl, nvshmem, tile_fragment
from ..inputs.checks import Declared, cxx_symbol, is_cxx_name
from ..inputs.fragments import CudaSource, Fragment, PtxSource
from ..system import safe_fs
from ..tracing import trace
from ..types import Signature, parse_signature, signature_from_annotations
from .declaring import (
    _C_IDENT,
    CallOptions,
    check_options,
    check_stub,
    check_symbol,
    check_text,
    resolve_path,
)

#: The header libraries a CUDA C source may include besides the CUDA toolkit's, in
#: include-path order (:class:`splice.inputs.headers.HeaderProvider`): CCCL on every source's
#: path, NVSHMEM on the path of a source that includes it.
HEADER_PROVIDERS = (cccl.HEADERS, nvshmem.HEADERS)


@dataclasses.dataclass(eq=False)
class ExternFunction:
    """An extern device function as splice sees it.

    Attributes:
        name: the Python name (used in messages).
        symbol: the PTX symbol of the device function (its C name, ``extern "C"``).
        signature: argument and result element types.
        fragment: the device code that defines ``symbol``.
        where: "file:line" of the declaration.
        options: its ``pure``, ``inline``, call form and ``memory``
            (:class:`~splice.declare.declaring.CallOptions`), which the properties of those
            names read; ``scope`` reads (and sets) the form by its scope's name.
    """

    name: str
    symbol: str
    signature: Signature
    fragment: Fragment
    where: str
    options: CallOptions = CallOptions(True)

    @property
    def pure(self) -> bool:
        return self.options.pure

    @property
    def inline(self) -> str:
        return self.options.inline

    @property
    def form(self) -> CallForm:
        return self.options.form

    @property
    def memory(self) -> Memory:
        return self.options.memory

    @property
    def scope(self) -> str:
        return self.form.scope

    @scope.setter
    def scope(self, name: str) -> None:
        form = form_of(name, f"extern '{self.name}' at {self.where}")
        self.options = dataclasses.replace(self.options, form=form)
    #: the C++ name called through a trampoline (None: ``symbol`` is the C name)
    cxx_name: str | None = None
    #: the part this extern plays in a tile call (:class:`splice.forms.staging.Staging`), or None
    staging: Any = None
    #: the block size a block-scope function was compiled for (``splice.cub``: 128), or
    #: None: a tile call in a kernel with another ``.reqntid`` is refused at compile time
    block_threads: int | None = None
    #: for a block-scope template on 1-D tiles (``splice.cub``): the tile lengths compiled
    #: in the same NVRTC program as a call's (:func:`splice.inputs.tile_fragment.callee_fragment`),
    #: each cut to what it uses and cached on its own; () compiles each call's alone
    batch_sizes: tuple[int, ...] = ()

    def __repr__(self) -> str:
        return (f"<splice extern {self.name}: {self.signature} = {self.symbol} from "
                f"{self.fragment.describe()}>")


def _caller_where(depth: int = 2) -> tuple[str, Path | None]:
    """Where the caller ``depth`` frames up is (``"file:line"``), and the directory its relative
    paths are taken from (:func:`splice.system.safe_fs.declaring_dir`; None: in no file)."""
    frame = inspect.stack()[depth]
    return f"{frame.filename}:{frame.lineno}", safe_fs.declaring_dir(frame.filename)


def _func_where(func) -> tuple[str, Path | None]:
    """:func:`_caller_where` for a stub, by its code."""
    code = getattr(func, "__code__", None)
    if code is None:
        return _caller_where(3)
    return f"{code.co_filename}:{code.co_firstlineno}", safe_fs.declaring_dir(code.co_filename)


def _declare(stub, *, symbol, signature, fragment_factory, where, name, options: CallOptions,
             display_name=None, cxx_name=None):
    """The extern ``name`` declared at ``where`` with the ``options`` its door made: its
    signature (``signature``, or ``stub``'s annotations) checked, its fragment made by
    ``fragment_factory(symbol, sig)``, and the callable stub a kernel calls."""
    what = f"extern '{name}' at {where}"
    try:
        sig = signature_from_annotations(stub) if signature is None else \
            signature if isinstance(signature, Signature) else parse_signature(signature)
    except SpliceDeclarationError as e:
        raise SpliceDeclarationError(f"extern '{name}' at {where}: {e.message}") from None
    if display_name is None:
        symbol = check_symbol(symbol, f"extern '{name}' at {where}")
    if stub is not None and signature is not None and not isinstance(signature, Signature):
        params = list(inspect.signature(stub).parameters.values())
        plain = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        if plain and len(params) != len(sig.args):
            raise SpliceDeclarationError(
                f"extern '{name}' at {where}: the stub takes {len(params)} parameter(s) but "
                f"the signature {sig} has {len(sig.args)}")
    fragment = fragment_factory(symbol, sig)
    tile_fragment.check_declaration(sig, options.form, fragment, what)
    ext = ExternFunction(display_name or name, symbol, sig, fragment, where,
                         options.declared(sig, what), cxx_name)
    if sig.has_tiles:
        from .tile_trace import emit_tile_call
        return trace.make_callable_stub(ext, stub, emit_tile_call)
    return trace.make_callable_stub(ext, stub)


def extern(func=None, /, *, source: str | None = None, path=None, name: str | None = None,
           signature: str | None = None, pure: bool = True, inline: str = "auto", options=(),
           include_dirs=(), defines=None, scope: str = "element", memory: str = "any"):
    """Declare an extern device function written in CUDA C, callable from a
    ``@splice.kernel``.

    Use as a decorator on a typed stub whose body is never run:

        @splice.extern(source=r'''
        extern "C" __device__ float fast_gelu(float x) { ... }''')
        def fast_gelu(x: ct.float32) -> ct.float32: ...

    or, given ``name=`` and ``signature=``, without a stub: it returns the extern itself
    (and still decorates a stub it is applied to):

        fast_gelu = splice.extern(source=SRC, name="fast_gelu", signature="float32(float32)")

    In a kernel, ``fast_gelu(t)`` applies the function to every element of the tile ``t``
    (any shape; scalars too); several arguments broadcast to a common shape.

    Args:
        func: must not be given: ``@splice.extern`` without arguments is an error (the
            source is required).
        source (str): CUDA C/C++ source text defining ``extern "C" __device__`` function(s).
        path (str | os.PathLike): a ``.cu`` file instead of ``source``; relative paths are
            taken from the declaring file's directory (never the working directory).
        name (str): the C symbol; default: the stub's name.
        signature (str): ``"float32(float32, int32)"``; default: the stub's annotations.
            Element types: bool, int8/16/32/64, uint8/16/32/64, float16, bfloat16,
            float32, float64; result may be ``void``. At most 128 bits of arguments.
        pure (bool): True (default): no side effects, and the result depends only on the
            arguments (memory read through a pointer argument must not be written by the
            kernel during the launch): an unused call may be removed, and a call may be
            hoisted out of a loop (running even when the loop runs zero times) or moved
            across the kernel's loads and stores. False:
            kept, in place and in order with the kernel's memory operations, run exactly
            once per element. Void externs are always treated as impure.
        inline (str): "auto" (default): paste the function's PTX body at each call site when
            that is safe (no stack frame, recursion or indirect call), else call it; "always":
            inline or fail; "never": always a real ``call``. ``build.summary()`` says which
            and why.
        options (list[str]): extra NVRTC options (e.g. ``["-std=c++17",
            "--use_fast_math"]``); an option NVRTC does not know is an error.
        include_dirs (list[str]): extra include directories (searched before the file's
            own, then ``-I`` of ``options``; relative ones, and relative paths in
            ``options``, are taken from the declaring file's directory).
        defines (dict[str, str | int | bool | None]): preprocessor macros (``None``:
            ``-DNAME``; ``True``/``False``: 1/0; anything else: its ``str``).
        scope (str): "element" (default): the call applies the function to every element of
            its tile arguments, each on the thread that owns the element. "block": each time
            the call site executes, **every thread of the thread block** calls the function
            once, convergently, with the same arguments, so it may use ``__syncthreads()``,
            ``__shared__`` memory, warp shuffles and votes, ``threadIdx``/``blockDim`` and
            CUB block APIs. Arguments are scalars (0-d tiles, Python constants) and pointers
            (arrays, ``splice.pointer``); the result is a scalar (or void) that the
            function must return in every thread -- splice uses thread 0's. The call is
            impure whatever ``pure`` says: kept in place, with CTA barriers before and
            after it, so the kernel's stores before it are visible to every thread inside
            it and its stores to the kernel after it. A kernel in which splice cannot prove
            that every thread reaches the call (e.g. tileiras warp-specialised it) is a
            :class:`~splice.errors.SpliceRewriteError`. See the README, "Block-scope calls".
            "warpgroup": each time the call site executes, every thread of the **warpgroup**
            (128 threads) that tileiras runs it on calls the function once, convergently,
            with the arguments of the thread tileiras ran the 0-d operation on: the consumer
            warpgroup of a warp-specialised kernel (TMA, ``ct.mma``, reductions on sm_90),
            the whole block of a 128-thread kernel that is not. Arguments and result as for
            "block". The function may use warp shuffles and votes, ``__shared__`` memory
            and ``splice_group_rank()``/``splice_group_size()``/``splice_group_sync()``
            (``#include <splice_group.h>``, on the include path); CTA barriers
            (``__syncthreads()``), other barriers, ``threadIdx`` and ``blockDim`` are a
            :class:`~splice.errors.SpliceLinkError`. A site splice cannot prove is a
            :class:`~splice.errors.SpliceRewriteError` naming the failed step. See the
            README, "Warpgroup-scope calls".
        memory (str): which memory an impure call (``pure=False``, void, block or
            warpgroup scope) touches, and so which of the kernel's memory operations it is
            kept in order with. "any" (default): any memory; it is ordered against every
            load and store of the kernel. "arguments": global memory only through its
            pointer arguments (and, for a tile call, its staged tiles); it is ordered only
            against the kernel's loads and stores of arrays that may alias a pointer
            argument (an array whose aliasing the signature does not give aliases every
            array) and against splice's other calls, in both directions; tileiras may
            then overlap it with the rest (a TMA matmul's epilogue call keeps the plain
            k-loop). A callee that touches other global memory under "arguments" (an
            address passed as an integer, a global variable, an array of the kernel it is
            not given) is a bug of the declaration, as a wrong ``pure=True`` is. Not
            allowed on a pure extern.

    The C function must have exactly the C types of the signature (``float`` for float32,
    ``int`` for int32, ``__half`` for float16, ...); this is checked when it compiles.

    Returns:
        Callable: with ``name=`` and ``signature=``, the extern (which still decorates a
        stub); otherwise a decorator that turns a typed stub into one. An extern is called
        inside ``@splice.kernel`` functions (device code: from Python it raises
        SpliceCallError).

    Raises:
        SpliceDeclarationError: bad signature, symbol, options, scope, memory, or missing
            source file.

    Example:
        ```python
        import cuda.tile as ct
        import splice

        @splice.extern(source=r'''
        extern "C" __device__ float fast_gelu(float x) {
            return x / (1.0f + __expf(-1.702f * x)); }''')
        def fast_gelu(x: ct.float32) -> ct.float32: ...

        @splice.kernel
        def k(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=fast_gelu(t))

        sig = splice.kernel_signature("array(float32)", "array(float32)", 128)
        print(splice.compile(k, sig, "sm_90").summary())
        ```
    """
    if func is not None:
        where = _func_where(func)[0] if callable(func) else _caller_where(2)[0]
        raise SpliceDeclarationError(
            f"extern declared at {where}: use @splice.extern(source=...) or "
            f"@splice.extern(path=...) with arguments; the CUDA C source is required")
    declare = functools.partial(_declare_cuda, source=source, path=path, name=name,
                                signature=signature, options=options,
                                include_dirs=include_dirs, defines=defines)

    def decorate(stub, _where=None):
        where, base = _where or _func_where(stub)
        ext_name = _extern_name(stub, name, where)
        cxx_name = (name or ext_name) if _calls_cxx(stub, name, signature) else None
        call_options = CallOptions.parse(f"extern '{cxx_name or ext_name}' at {where}",
                                         pure=pure, inline=inline, scope=scope, memory=memory)
        return declare(stub, where, base, ext_name, cxx_name, call_options)
    if name is not None and signature is not None:   # no stub needed: declare it now
        return _also_a_decorator(decorate(None, _where=_caller_where(2)), decorate)
    return trace.refuse_in_kernels(decorate, _decorator_only(name, signature,
                                                             _caller_where(2)[0]))


def _extern_name(stub, name, where: str) -> str:
    """The name of the extern :func:`extern` declares for ``stub`` (None: declared from
    ``name=`` and ``signature=``): the stub's, where it is named like a C function, else
    ``name``.

    Raises:
        SpliceDeclarationError: ``stub`` is not callable, or neither names the extern.
    """
    if stub is not None:
        check_stub(stub, where)
    ext_name = getattr(stub, "__name__", "")
    if _C_IDENT.fullmatch(ext_name or ""):
        return ext_name
    if name is None:
        raise SpliceDeclarationError(
            f"extern declared at {where}: the stub {ext_name!r} is not named like a C "
            f"function; give the symbol with name='...'")
    return name


def _calls_cxx(stub, name, signature) -> bool:
    """Whether :func:`extern` calls through a C++ trampoline (C++ ``name``, several results)."""
    return name is not None and is_cxx_name(name) or _several_results(stub, signature)


def _declare_cuda(stub, where: str, base: Path | None, ext_name: str, cxx_name: str | None,
                  call_options: CallOptions, *, source, path, name, signature, options,
                  include_dirs, defines):
    """The extern :func:`extern` declares for ``stub`` (None: declared from ``name=`` and
    ``signature=``) at ``where`` with ``call_options``, relative paths looked up in
    ``base`` first; ``cxx_name``: the function called through a C++ trampoline, or None."""
    what = f"extern '{ext_name}' at {where}"
    file, opts, incs, defs = _cuda_inputs(source, path, options, include_dirs, defines, what,
                                          base)
    if cxx_name is not None:
        return _declare_cxx(stub, cxx_name, signature, call_options, where,
                            CudaSource(text=source, path=file, options=opts,
                                       include_dirs=incs, defines=defs, where=where,
                                       providers=HEADER_PROVIDERS))

    def make(symbol, sig):
        # a tile extern is checked and instantiated per call site (splice.forms.staging)
        return CudaSource(text=source, path=file, options=opts, include_dirs=incs,
                          defines=defs, where=where,
                          declared=() if sig.has_tiles else (Declared(symbol, None, sig, where),),
                          roots=() if sig.has_tiles else ((symbol, sig),),
                          providers=HEADER_PROVIDERS)
    return _declare(stub, symbol=name or ext_name, signature=signature,
                    fragment_factory=make, where=where, name=ext_name, options=call_options)


def _cuda_inputs(source, path, options, include_dirs, defines, what: str, base):
    """A CUDA C declaration's inputs, checked: (the file or None, options, include
    directories, defines); exactly one of ``source`` and ``path``.

    Raises:
        SpliceDeclarationError: named by ``what``."""
    if (source is None) == (path is None):
        raise SpliceDeclarationError(f"{what}: give exactly one of source= or path=")
    check_text(source, what, "source", "cuda")
    opts, incs, defs = check_options(options, include_dirs, defines, what, base)
    file = resolve_path(path, base, what, "cuda") if path is not None else None
    return file, opts, incs, defs


def _decorator_only(name, signature, where: str) -> str:
    """Why ``splice.extern(...)`` at ``where`` without ``name=`` or ``signature=`` cannot be
    called in a kernel."""
    missing = " and ".join(k for k, v in (("name=", name), ("signature=", signature)) if v is None)
    return (f"splice.extern(...) declared at {where} without {missing} is a decorator for a "
            f"typed stub, not an extern; give both name='...' and signature='...' to declare "
            f"the extern without a stub")


def _also_a_decorator(ext_fn, decorate):
    """The extern ``ext_fn`` (declared without a stub), which applied to a stub from Python
    declares it again from that stub, so ``@splice.extern(source=, name=, signature=)``
    still decorates."""
    def fn(*args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return decorate(args[0])
        return ext_fn(*args, **kwargs)   # raises: device code called from Python
    functools.update_wrapper(fn, ext_fn)
    del fn.__wrapped__  # type: ignore[attr-defined]
    return fn


def from_ptx(path=None, /, *, ptx: str | None = None, name: str, signature: str,
             pure: bool = True, inline: str = "auto", scope: str = "element",
             memory: str = "any"):
    """Declare an extern whose device code is PTX: a ``.ptx`` file or PTX text.

    ``saxpy = splice.extern.from_ptx("kernels/saxpy.ptx", name="saxpy",
    signature="float32(float32, float32, float32)")``

    Args:
        path (str | os.PathLike): the ``.ptx`` file; a relative path is taken from the
            declaring file's directory (never the working directory).
        ptx (str): PTX text instead of ``path``.
        name (str): the ``.func`` symbol to call.
        signature (str): as for :func:`extern`; checked against the ``.func`` prototype's
            parameter sizes when linking.
        pure (bool): as for :func:`extern`.
        inline (str): as for :func:`extern`.
        scope (str): "element", "block" or "warpgroup", as for :func:`extern`.
        memory (str): "any" or "arguments", as for :func:`extern`.

    Returns:
        A function to call inside ``@splice.kernel`` functions.

    Raises:
        SpliceDeclarationError: bad signature or symbol, missing file, or both/neither of
            ``path`` and ``ptx``.

    Example:
        ```python
        import cuda.tile as ct
        import splice

        PTX = '''
        .version 8.0
        .target sm_80
        .address_size 64
        .visible .func (.param .b32 r) neg(.param .b32 x)
        {
            .reg .f32 %f<3>;
            ld.param.f32 %f1, [x];
            neg.f32 %f2, %f1;
            st.param.f32 [r], %f2;
            ret;
        }'''
        neg = splice.extern.from_ptx(ptx=PTX, name="neg", signature="float32(float32)")

        @splice.kernel
        def k(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=neg(t))

        sig = splice.kernel_signature("array(float32)", "array(float32)", 128)
        print(splice.compile(k, sig, "sm_90").summary())
        ```
    """
    where, base = _caller_where(2)
    what = f"extern '{name}' at {where}"
    if (path is None) == (ptx is None):
        raise SpliceDeclarationError(f"{what}: give exactly one of a path or ptx=")
    check_text(ptx, what, "ptx", "ptx")
    if ptx is not None and not ptx.strip():
        raise SpliceDeclarationError(f"{what}: ptx= is empty; give the PTX text of a module "
                                     f"defining .func {name}")
    file = resolve_path(path, base, what, "ptx") if path is not None else None
    if signature is None:
        raise SpliceDeclarationError(f"{what}: signature= is required for PTX externs")
    options = CallOptions.parse(what, pure=pure, inline=inline, scope=scope, memory=memory)
    return _declare(None, symbol=name, signature=signature,
                    fragment_factory=lambda s, g: PtxSource(text=ptx, path=file, where=where),
                    where=where, name=name, options=options)


def from_ltoir(path=None, /, *, data: bytes | None = None, name: str, signature: str,
               pure: bool = True, inline: str = "auto", scope: str = "element",
               memory: str = "any"):
    """Declare an extern whose device code is LTO-IR: a ``.ltoir`` file (``nvcc -dlto``,
    NVRTC ``-dlto``) or its bytes. nvJitLink links it (``-lto -ptx``) into PTX for the
    kernel's target, which is merged like any PTX fragment: the final cubin still comes
    from tileiras's ptxas with the TMA host callbacks (``docs/design.md#nv-host``).

    Args:
        path (str | os.PathLike): the ``.ltoir`` file; a relative path is taken from the
            declaring file's directory (never the working directory).
        data (bytes): the LTO-IR instead of ``path``.
        name (str): the ``extern "C"`` symbol.
        signature (str): as for :func:`extern`; checked against the linked ``.func``'s
            parameter sizes.
        pure (bool): as for :func:`extern`.
        inline (str): as for :func:`extern`.
        scope (str): "element", "block" or "warpgroup", as for :func:`extern`.
        memory (str): "any" or "arguments", as for :func:`extern`.

    Returns:
        Callable: the extern, to call inside ``@splice.kernel`` functions (device code:
        called from Python it raises SpliceCallError).

    Raises:
        SpliceDeclarationError: bad signature or symbol, missing file, or both/neither of
            ``path`` and ``data``.

    Example:
        ```python
        import cuda.tile as ct
        import splice
        from splice.toolchain import nvrtc_compile_ltoir

        src = b'extern "C" __device__ float sq(float x) { return x * x; }'
        ir = nvrtc_compile_ltoir(src, "sq.cu", ["-dlto", "-rdc=true", "-arch=compute_90"])
        sq = splice.extern.from_ltoir(data=ir, name="sq", signature="float32(float32)")

        @splice.kernel
        def k(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=sq(t))

        sig = splice.kernel_signature("array(float32)", "array(float32)", 128)
        print(splice.compile(k, sig, "sm_90").summary())
        ```
    """
    from ..inputs.fragments import LtoirSource
    where, base = _caller_where(2)
    # LTO-IR carries no C types: splice checks the linked .func's parameter sizes only
    what = f"extern '{name}' at {where}"
    if (path is None) == (data is None):
        raise SpliceDeclarationError(f"{what}: give exactly one of a path or data=")
    if data is not None and not isinstance(data, (bytes, bytearray)):
        raise SpliceDeclarationError(f"{what}: data must be LTO-IR bytes, got "
                                     f"{type(data).__name__}; a .ltoir file goes as the path")
    if data is not None and not data:
        raise SpliceDeclarationError(f"{what}: data= is empty; give the bytes of an LTO-IR "
                                     f"module (nvcc -dlto, NVRTC -dlto)")
    file = resolve_path(path, base, what, "ltoir") if path is not None else None
    options = CallOptions.parse(what, pure=pure, inline=inline, scope=scope, memory=memory)
    return _declare(None, symbol=name, signature=signature,
                    fragment_factory=lambda s, g: LtoirSource(
                        data=None if data is None else bytes(data), path=file, where=where,
                        roots=((s, tile_fragment.abi_signature(g)),)), where=where, name=name,
                    options=options)


def from_object(path, /, *, name: str, signature: str, pure: bool = True,
                scope: str = "element", memory: str = "any"):
    """Declare an extern whose device code is a relocatable binary: a ``.cubin``
    (compiled with ``-rdc``), ``.fatbin``, ``.o`` with device code, or ``.a`` library,
    for the kernel's architecture. nvJitLink links it with the kernel, which is possible
    only for kernels without TMA tensor maps (their host callbacks need tileiras's own
    ptxas run); for those, ship PTX or LTO-IR instead. Never inlined.

    Args:
        path (str | os.PathLike): the binary; a relative path is taken from the declaring
            file's directory (never the working directory).
        name (str): the ``extern "C"`` symbol, whose C types must match ``signature`` (a
            binary carries no prototype to check).
        signature (str): as for :func:`extern`; one result at most.
        pure (bool): as for :func:`extern`.
        scope (str): "element" or "block" (a binary cannot be checked for "warpgroup").
        memory (str): "any" or "arguments", as for :func:`extern`.

    Returns:
        Callable: the extern, to call inside ``@splice.kernel`` functions (device code:
        called from Python it raises SpliceCallError).

    Raises:
        SpliceDeclarationError: bad signature or symbol, missing file, unknown suffix,
            several results.

    Example:
        ```python
        import splice

        open("f.cubin", "wb").write(b"")   # nvcc -rdc=true -cubin -arch=sm_90a f.cu -o f.cubin
        f = splice.extern.from_object("f.cubin", name="f", signature="float32(float32)")
        print(f.__name__, "declared: read and linked when a kernel calls it")
        try:
            f(1.0)                                 # device code
        except splice.SpliceCallError as e:
            print(str(e).splitlines()[0])
        ```
    """
    from ..inputs.fragments import BINARY_SUFFIXES, BinarySource
    where, base = _caller_where(2)
    what = f"extern '{name}' at {where}"
    if _several_results(None, signature):
        raise SpliceDeclarationError(
            f"{what}: several results need a prototype splice can check (the struct's size "
            f"and alignment), which a binary object does not carry: ship the function as "
            f"PTX, LTO-IR or CUDA C, or return the results packed in one uint64")
    file = resolve_path(path, base, what, "binary")
    if file.suffix.lower() not in BINARY_SUFFIXES:
        raise SpliceDeclarationError(
            f"{what}: {file.name}: a binary object must end in "
            f"{', '.join(BINARY_SUFFIXES)} (PTX: from_ptx, LTO-IR: from_ltoir)")
    options = CallOptions.parse(what, pure=pure, inline="never", scope=scope, memory=memory)
    return _declare(None, symbol=name, signature=signature, where=where, name=name,
                    options=options, fragment_factory=lambda s, g: BinarySource(
                        path=file, where=where, roots=((s, g),)))


def _several_results(stub, signature) -> bool:
    """Whether the declaration names several results (a C function of several results is
    called through a trampoline, as a C++ name is). A signature that does not parse is
    reported by the declaration itself."""
    try:
        sig = signature_from_annotations(stub) if signature is None else \
            signature if isinstance(signature, Signature) else parse_signature(signature)
    except SpliceDeclarationError:
        return False
    return bool(sig.results)


def _declare_cxx(stub, cxx_name, signature, options: CallOptions, where, fragment,
                 library=None):
    """An extern calling the C++ function ``cxx_name`` (or a C function of several
    results) through a generated extern "C" trampoline appended to ``fragment`` (or
    registered with ``library``), with the ``options`` its door made."""
    what = f"extern '{cxx_name}' at {where}"
    if not is_cxx_name(cxx_name):   # a C function of several results
        check_symbol(cxx_name, what)
    try:
        sig = signature_from_annotations(stub) if signature is None else \
            signature if isinstance(signature, Signature) else parse_signature(signature)
    except SpliceDeclarationError as e:
        raise SpliceDeclarationError(f"{what}: {e.message}") from None
    symbol = cxx_symbol(cxx_name, sig)
    decl = Declared(symbol, cxx_name, sig, where)
    if sig.has_tiles:
        pass    # checked and instantiated per call site (splice.forms.staging)
    elif library is not None:
        library._add(decl)
    else:
        fragment.declared = (decl,)
        fragment.roots = ((symbol, sig),)
    return _declare(stub, symbol=symbol, signature=sig,
                    fragment_factory=lambda s, g: fragment, where=where, name=cxx_name,
                    options=options, display_name=cxx_name, cxx_name=cxx_name)


class Library:
    """CUDA C/C++ compiled once, from which several externs are declared:

        lib = splice.library(path="mylib.cu", include_dirs=["include"], options=["-std=c++17"])
        scale = lib.extern("my_ns::scale<float>", signature="float32(float32)")

        @lib.extern()
        def fast_gelu(x: ct.float32) -> ct.float32: ...

    Every extern of a library shares one NVRTC compile (its signature checks and C++
    trampolines are appended to the one source). Arguments as for :func:`extern`.
    """

    def __init__(self, source=None, *, path=None, options=(), include_dirs=(), defines=None,
                 _where=None):
        where, base = _where or _caller_where(3)
        self.where = where
        file, opts, incs, defs = _cuda_inputs(source, path, options, include_dirs, defines,
                                              f"library at {where}", base)
        self.fragment = CudaSource(text=source, path=file, options=opts, include_dirs=incs,
                                   defines=defs, where=where, providers=HEADER_PROVIDERS)
        self._declared: dict[tuple[str, str], Declared] = {}

    def _add(self, decl: Declared) -> None:
        # keyed by symbol and signature: declaring one symbol twice with different
        # signatures keeps both checks (so the wrong one fails), never replaces one
        self._declared[(decl.symbol, str(decl.sig))] = decl
        self.fragment.declared = tuple(self._declared[k] for k in sorted(self._declared))
        self.fragment.roots = tuple(sorted({(d.symbol, d.sig) for d in self._declared.values()},
                                           key=lambda r: (r[0], str(r[1]))))

    def extern(self, name=None, *, signature=None, pure=True, inline="auto", scope="element",
               memory="any"):
        """Declare an extern from this library: ``lib.extern("c_name_or_cxx::name",
        signature="...")``, or ``@lib.extern()`` on a typed stub (its name is the C
        symbol unless ``name=`` is given).

        Args:
            name (str | None): the C symbol or C++ name; default the stub's name.
            signature (str | None): as for :func:`extern`; default the stub's annotations.
            pure (bool): as for :func:`extern`.
            inline (str): as for :func:`extern`.
            scope (str): as for :func:`extern`.
            memory (str): as for :func:`extern`.

        Returns:
            Callable: given ``name`` and ``signature``, the extern; otherwise a decorator
            for a typed stub.

        Raises:
            SpliceDeclarationError: as for :func:`extern`.

        Example:
            ```python
            import cuda.tile as ct
            import splice

            lib = splice.library(source=r'''
            extern "C" __device__ float inc(float x) { return x + 1.0f; }
            namespace ns { __device__ float dbl(float x) { return 2.0f * x; } }''')
            inc = lib.extern("inc", signature="float32(float32)")
            dbl = lib.extern("ns::dbl", signature="float32(float32)")

            @splice.kernel
            def k(x, y, TILE: ct.Constant[int]):
                t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
                ct.store(y, index=(ct.bid(0),), tile=dbl(inc(t)))

            sig = splice.kernel_signature("array(float32)", "array(float32)", 128)
            print(splice.compile(k, sig, "sm_90").summary())
            ```
        """
        where, _ = _caller_where(2)

        def declare(stub, sym):
            options = CallOptions.parse(f"extern '{sym}' at {where}", pure=pure,
                                        inline=inline, scope=scope, memory=memory)
            if is_cxx_name(sym) or _several_results(stub, signature):
                return _declare_cxx(stub, sym, signature, options, where, self.fragment,
                                    library=self)

            def make(symbol, sig):
                if not sig.has_tiles:   # a tile extern: per call site (splice.forms.staging)
                    self._add(Declared(symbol, None, sig, where))
                return self.fragment
            return _declare(stub, symbol=sym, signature=signature,
                            fragment_factory=make, where=where, name=sym, options=options)
        if callable(name):
            return declare(name, name.__name__)
        if name is not None and signature is not None:
            return declare(None, name)

        def decorate(stub):
            check_stub(stub, where)
            return declare(stub, name or stub.__name__)
        return decorate


def library(source=None, *, path=None, options=(), include_dirs=(), defines=None) -> Library:
    """A :class:`Library`: CUDA C/C++ compiled once for several externs.

    Args:
        source (str): CUDA C/C++ text, or
        path (str | os.PathLike): a ``.cu`` file (a relative path is taken from the
            declaring file's directory, never the working directory).
        options (list[str]), include_dirs (list[str]), defines (dict[str, str | None]):
            as for :func:`extern`.

    Returns:
        Library: declare externs with ``lib.extern(name, signature=...)`` or
        ``@lib.extern()``.

    Raises:
        SpliceDeclarationError: both or neither of source/path, missing file, bad options.

    Example:
        ```python
        import cuda.tile as ct
        import splice

        lib = splice.library(source=r'''
        extern "C" __device__ float sq(float x) { return x * x; }
        extern "C" __device__ float cube(float x) { return x * x * x; }''')
        sq = lib.extern("sq", signature="float32(float32)")
        cube = lib.extern("cube", signature="float32(float32)")

        @splice.kernel
        def k(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=sq(t) + cube(t))

        sig = splice.kernel_signature("array(float32)", "array(float32)", 128)
        print(splice.compile(k, sig, "sm_90").summary())
        ```
    """
    return Library(source, path=path, options=options, include_dirs=include_dirs,
                   defines=defines, _where=_caller_where(2))


extern.from_ptx = from_ptx  # type: ignore[attr-defined]
extern.from_ltoir = from_ltoir  # type: ignore[attr-defined]
extern.from_object = from_object  # type: ignore[attr-defined]
