"""Tracing a kernel: cuTile's frontend runs on the kernel's Python source, and each call of
an extern in it reaches :func:`_handle_extern_call`, which checks the arguments against the
extern's signature, records a :class:`~splice.forms.base.CallSite` in the current
:class:`TraceSession` and adds the call's marker operations (:mod:`splice.tracing.tile_ir`).

::

    trace_kernel(kernel, signature, arch)
      -> _cutile.lower_to_bytecode (cuTile's frontend)   inside a TraceSession
           -> _handle_extern_call -> emit_call           for each extern call
      -> TracedKernel(bytecode, sites, tileiras flags)

Every cuTile name comes from :mod:`splice.system._cutile` (as ``cu.<name>``, at call time, so that
``import splice`` does not import cuTile's compiler); the operations, which subclass
cuTile's, are imported on the first call.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

import cuda.tile as ct

from ..errors import (
    SpliceCallError,
    SpliceDeclarationError,
    SpliceError,
    SpliceUnsafePathError,
    user_location,
)
from ..forms.base import CallSite, Memory
from ..system import _cutile as cu
from ..system import cache, settings, toolchain
from ..types import Signature
from . import reloading

# --------------------------------------------------------------------------------------------
# Call sites recorded while cuTile traces one kernel signature.

class TraceSession:
    """Collects the call sites of one kernel compilation. Only inside a session may an
    extern be called: a kernel that is not compiled by splice would otherwise run its
    markers as plain atomics and compute garbage."""

    def __init__(self, kernel_name: str, atomic_sites: frozenset[str] = frozenset()):
        self.kernel_name = kernel_name
        self.sites: list[CallSite] = []
        #: keys (:attr:`CallSite.key`) of pure call sites that get the atomic marker
        self.atomic_sites = atomic_sites
        self._seen: dict[str, int] = {}
        self._tile_groups = 0
        #: (extern, "file:line") of every call of a void extern: its result is None
        self.void_calls: list[tuple[Any, str]] = []

    def next_tile_group(self) -> int:
        """The number of the next tile call (:mod:`splice.forms.staging`) of this trace."""
        self._tile_groups += 1
        return self._tile_groups - 1

    def site_key(self, loc) -> str:
        """The stable key of the next call at ``loc``: its location, the locations it was
        inlined through, and how many calls this trace met there before."""
        chain = []
        while loc is not None:
            chain.append(str(loc))
            loc = loc.call_site
        where = "<-".join(chain)
        n = self._seen.get(where, 0)
        self._seen[where] = n + 1
        return f"{where}#{n}"

    def new_site(self, extern, shape, where, call_shape, form, marker_bits,
                 key) -> CallSite:
        site = CallSite(len(self.sites), extern, tuple(shape), where, tuple(call_shape),
                        form, marker_bits, key)
        self.sites.append(site)
        return site


_local = threading.local()


@contextlib.contextmanager
def trace_session(kernel_name: str, atomic_sites: frozenset[str] = frozenset()):
    prev = getattr(_local, "session", None)
    session = TraceSession(kernel_name, atomic_sites)
    _local.session = session
    try:
        yield session
    finally:
        _local.session = prev


def current_session() -> TraceSession | None:
    """The session of the trace running on this thread, or None outside one."""
    return getattr(_local, "session", None)


def loc_str(loc) -> str:
    """A traced source location as "file:line"."""
    if loc is None or loc.is_unknown():
        return "<unknown location>"
    return f"{loc.filename}:{loc.line}"


# --------------------------------------------------------------------------------------------
# Tracing a kernel


@dataclass
class TracedKernel:
    """The result of tracing a kernel for one signature."""

    bytecode: bytes
    symbol: str
    sites: tuple[CallSite, ...]
    lifecycle_providers: tuple
    tileiras_flags: tuple[str, ...]
    timeout_sec: float | None
    symbols: tuple[str, ...] = ()   # every entry's symbol (several signatures: one each)
    #: impure calls given an array the kernel may store by TMA
    #: (:mod:`splice.ptxtools.tma_store_reads`)
    tma_stored_reads: tuple = ()
    #: the global names the traced code loaded and what they held
    #: (:class:`splice.system._cutile.Read`, :mod:`splice.tracing.reloading`)
    reads: tuple = ()



def trace_kernel(kernel: ct.kernel, signature, arch: str, context=None,
                 atomic_sites: frozenset[str] = frozenset()) -> TracedKernel:
    """Trace ``kernel`` for ``signature`` (or a list of signatures: one module with an entry
    each, as ``cuda.tile.compilation.export_kernel`` makes) and return its Tile IR bytecode
    with the call sites of every extern in it, and the tileiras flags cuTile would use for
    ``arch``. Pure call sites whose key (:attr:`CallSite.key`) is in ``atomic_sites`` get
    the atomic marker (see :class:`splice.tracing.tile_ir.SplicePureCall`).

    Raises:
        SpliceToolchainError: the installed cuda-tile is not supported.
        SpliceCallError: a bad extern call in the kernel."""
    cu.ensure_supported_cutile()
    signatures = tuple(signature) if isinstance(signature, (list, tuple)) else (signature,)
    with trace_session(cu.python_function(kernel).__name__, atomic_sites) as session:
        try:
            lowered = cu.lower_to_bytecode(kernel, signatures, arch, context,
                                           bytecode_version())
        except OSError as e:
            if str(e) not in _NO_SOURCE:
                raise
            raise _no_source_error(kernel) from None
        except ct.TileError as e:
            if isinstance(e, SpliceError) or not session.void_calls or not (
                    isinstance(e, ct.TileInternalError) or "None" in e.message):
                raise
            raise _void_result_error(e, session) from None
    reloading.read(lowered.reads)
    return TracedKernel(lowered.bytecode, lowered.symbols[0], tuple(session.sites),
                        lowered.lifecycle_providers, lowered.tileiras_flags,
                        lowered.timeout_sec, lowered.symbols, lowered.tma_stored_reads,
                        lowered.reads)


def bytecode_version() -> int:
    """The Tile IR bytecode version the kernels are written in: the newest the installed
    tileiras takes (:func:`splice.system._cutile.max_bytecode_version`, which runs
    tileiras), remembered in this process and in the cache under tileiras's identity
    (:func:`splice.system.toolchain.tool_identity`) and cuTile's dev-features switch: a
    process that only hits (a service started from a pack) runs no tileiras. Under
    ``SPLICE_COMPILE=never`` a version not remembered is not probed: the oldest version
    cuTile writes, remembered nowhere (a kernel traced in it misses, unless this toolchain
    compiled that very bytecode, and the build's refusal names it and its externs)."""
    key = cache.key_of("bytecode-version", toolchain.tool_identity("tileiras"),
                       cu.dev_features())
    if key not in _versions:
        try:
            hit = cache.load("probe", key)
        except SpliceUnsafePathError:
            hit = None
        if hit is not None and hit[1].isdigit():
            _versions[key] = int(hit[1])
        elif settings.compile_never():   # no tileiras may run: a version no probe gave
            return cu.oldest_bytecode_version()   # (the build misses and says so)
        else:
            _versions[key] = cu.max_bytecode_version()
            with contextlib.suppress(SpliceUnsafePathError):
                cache.store("probe", key, {"what": "tileiras's newest Tile IR bytecode "
                                                   "version"}, str(_versions[key]).encode())
    return _versions[key]


_versions: dict[str, int] = {}


#: What :func:`inspect.findsource` raises for a function whose source Python has not kept.
_NO_SOURCE = ("could not get source code", "source code not available")


def _no_source_error(kernel) -> SpliceDeclarationError:
    """The error for cuTile's frontend failing to read the source of the kernel or of a
    function it calls (:func:`inspect.findsource`'s OSError, :data:`_NO_SOURCE`)."""
    fn = cu.python_function(kernel)
    code = fn.__code__
    return SpliceDeclarationError(
        f"kernel '{fn.__name__}' ({code.co_filename}:{code.co_firstlineno}): cuTile compiles "
        f"a kernel, and every function it calls, from its Python source, and Python has "
        f"none for one of them (a function defined by exec() or at the interactive "
        f"prompt): define it in a .py file and import it")


def _void_result_error(e, session: TraceSession) -> SpliceCallError:
    """cuTile's error at a use of None, when the kernel calls void externs: their result is
    None (cuTile says only "Unsupported operand types ... None", or nothing at all)."""
    calls = "; ".join(f"extern '{ext.name}' (declared at {ext.where}, signature "
                      f"{ext.signature}) called at {where}"
                      for ext, where in session.void_calls)
    said = e.message.strip() or f"cuTile's {type(e).__name__} (no message)"
    return SpliceCallError(
        f"in kernel '{session.kernel_name}' at {loc_str(e.loc)}: {said}. The kernel calls "
        f"void extern(s), whose result is None: {calls}. Do not use that result (a tile, a "
        f"store, arithmetic); declare the extern with a result type if it has one", e.loc)


def check_build_args(kernel, signature) -> None:
    """Raise SpliceDeclarationError unless ``kernel`` is a kernel (``@splice.kernel``) and
    ``signature`` a ``cuda.tile.compilation.KernelSignature`` or a non-empty list of them."""
    cu.ensure_supported_cutile()
    from cuda.tile.compilation import KernelSignature
    if not isinstance(kernel, ct.kernel):
        code = getattr(kernel, "__code__", None)
        at = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
        raise SpliceDeclarationError(
            f"splice compiles @splice.kernel functions; got {type(kernel).__name__} "
            f"{getattr(kernel, '__name__', repr(kernel))!s:.80}{at}: decorate the kernel "
            f"function with @splice.kernel")
    signatures = signature if isinstance(signature, (list, tuple)) and signature \
        else [signature]
    for bad in signatures:   # (None is a bad signature too: no sentinel)
        if isinstance(bad, KernelSignature):
            continue
        code = cu.python_function(kernel).__code__
        raise SpliceDeclarationError(
            f"kernel '{cu.python_function(kernel).__name__}' "
            f"({code.co_filename}:{code.co_firstlineno}): "
            f"signature must be a cuda.tile.compilation.KernelSignature (or a non-empty list "
            f"of them), got {type(bad).__name__} {bad!r:.80}; make one with "
            f"splice.kernel_signature(\"array(float32)\", ...), or pass the launch "
            f"arguments to kernel.inspect(*args) on a GPU machine")
    _check_parameter_count(kernel, signatures)


def _check_parameter_count(kernel, signatures) -> None:
    """One constraint per kernel parameter (cuTile's tracer fails on a mismatch with
    "zip() argument 2 is longer than argument 1"), and entry symbols tileiras can emit."""
    import inspect

    from .signatures import check_symbol
    want = len(inspect.signature(cu.python_function(kernel)).parameters)
    for s in signatures:
        check_symbol(s.symbol, f"kernel '{cu.python_function(kernel).__name__}'")
        if len(s.parameters) != want:
            code = cu.python_function(kernel).__code__
            raise SpliceDeclarationError(
                f"kernel '{cu.python_function(kernel).__name__}' ({code.co_filename}:"
                f"{code.co_firstlineno}) takes {want} parameters but its signature lists "
                f"{len(s.parameters)}; give one constraint per parameter, in order")




# --------------------------------------------------------------------------------------------
# Extern calls: cuTile's frontend resolves each to _handle_extern_call


def call_error(ext, message, loc) -> SpliceCallError:
    """The error of a bad call of ``ext`` at the traced location ``loc``."""
    session = current_session()
    kernel = f" in kernel '{session.kernel_name}'" if session else ""
    return SpliceCallError(
        f"call of extern '{ext.name}' (declared at {ext.where}){kernel} at {loc_str(loc)}: "
        f"{message}", loc)


def describe(var) -> str:
    """What a traced value is, for an error message ("a float32 tile of shape (256,)")."""
    ty = var.get_type()
    if isinstance(ty, cu.TileTy):
        return f"a scalar {ty.dtype}" if ty.shape == () else f"a {ty.dtype} tile of shape " \
                                                              f"{ty.shape}"
    return f"a value of type {ty}"


def _array_address(ext, i, var, elem, loc):
    from .tile_ir import SplicePtrToInt
    ty = var.get_type()
    if not isinstance(ty, cu.ArrayTy):
        raise call_error(ext, f"argument {i + 1} is {describe(var)}, but the signature "
                              f"expects an array of {elem.pointee} ({elem})", loc)
    if ty.dtype != elem.pointee.dtype:
        raise call_error(ext, f"argument {i + 1} is an array of {ty.dtype}, but the "
                              f"signature expects {elem}", loc)
    return cu.add_operation(SplicePtrToInt, cu.TileTy(ct.uint64, ()),
                            pointer=var.get_aggregate().base_ptr)


#: implicit one; emax; emin).
_FLOAT_FORMATS = {"float16": (11, 15, -14), "bfloat16": (8, 127, -126),
                  "float32": (24, 127, -126), "float64": (53, 1023, -1022)}


def _check_float_constant(ext, i, value, elem, loc):
    """A Python constant that would become inf or 0 in the parameter's type is an error
    (as an out-of-range integer constant is). Round to nearest, ties to even (IEEE 754
    section 4.3.1): a value overflows once it reaches the largest finite value plus half
    its ulp, ``(2 - 2**(1-p)) * 2**emax + 2**(emax-p)`` (the tie rounds to the even
    neighbour, infinity), and underflows to 0 up to half the smallest subnormal,
    ``2**(emin-p)`` (the tie rounds to the even neighbour, 0)."""
    import math
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return
    if math.isnan(v) or math.isinf(v) or v == 0.0:
        return
    p, emax, emin = _FLOAT_FORMATS[elem.name]
    big = (2 - 2.0 ** (1 - p)) * 2.0 ** emax
    if elem.name != "float64" and abs(v) >= big + 2.0 ** (emax - p):
        raise call_error(ext, f"argument {i + 1}: constant {value!r} overflows {elem} to "
                               f"infinity (largest finite {big:g})", loc)
    if abs(v) <= 2.0 ** (emin - p):
        raise call_error(ext, f"argument {i + 1}: constant {value!r} underflows {elem} "
                               f"to zero (smallest {2.0 ** (emin - p + 1):g})", loc)



def _handle_extern_call(callee, *args):
    reloading.reached(callee)
    ext = callee._splice_extern
    loc = cu.current_loc()
    if len(args) == 2 and isinstance(args[0], tuple):  # cuTile packs *args, **kwargs
        args, kwargs = args
        if kwargs:
            raise call_error(ext, f"keyword argument(s) {', '.join(kwargs)}: pass extern "
                                  f"arguments by position", loc)
    return getattr(callee, "_splice_emit", emit_call)(ext, args, loc)


def emit_call(ext, args, loc, shown=None):
    """Add the IR operations of one call of ``ext`` with argument Vars ``args``; its result
    Var (None for a void extern).

    ``shown``: (the extern, the argument positions) that errors name, where ``ext`` is a
    staging site of a tile call (:mod:`splice.declare.tile_trace`): the user's extern and where
    each of ``args`` is among the arguments of the user's call. Default: ``ext``, and
    the positions of ``args`` in ``args``.

    Raises:
        SpliceCallError: not inside a trace by splice, or arguments that do not fit the
            extern's signature."""
    from .tile_ir import SplicePureCall
    session = current_session()
    if session is None:
        raise call_error(
            ext, "externs can only be called inside a kernel decorated with @splice.kernel "
                 "and compiled by splice (a plain @ct.kernel would run the unresolved "
                 "call-site marker). cuda.tile.compilation.export_kernel and "
                 "cuda.tile.jax.cutile_call run cuTile's compiler directly: use "
                 "splice.export_kernel and splice.jax.cutile_call (same arguments) instead",
            loc)
    sig: Signature = ext.signature
    assert not sig.has_tiles, "tile calls are emitted by splice.declare.tile_trace"
    if len(args) != len(sig.args):
        raise call_error(ext, f"expected {len(sig.args)} argument(s) for signature {sig}, "
                              f"got {len(args)}", loc)
    named, positions = shown or (ext, range(len(args)))
    typed = [_typed_argument(named, i, var, elem, loc)
             for i, var, elem in zip(positions, args, sig.args)]
    wrong = ext.form.check_arguments(typed, describe, positions)
    if wrong is not None:
        raise call_error(named, wrong, loc)
    shape = _broadcast_shape(ext, typed, loc)
    key = session.site_key(loc)
    form = ext.form.for_call(ext.pure and sig.result is not None, key in session.atomic_sites)
    if form.proves_per_function():
        assert sig.result is not None   # for_call gives a per-function form to a result only
        site = session.new_site(ext, shape, loc_str(loc), shape, form, FMA_MARKER_BITS, key)
        raw = cu.add_operation(SplicePureCall, cu.TileTy(sig.result.dtype, shape), site=site,
                               args=tuple(cu.broadcast_to(v, shape) for v in typed))
    else:
        pointers = tuple((p, var) for p, var, elem in zip(positions, args, sig.args)
                         if elem.kind == "p")
        raw = _emit_atomic_call(session, ext, form, key, typed, shape, loc,
                                (named, pointers))
    if not sig.results:
        return raw
    return cu.build_tuple(split_results(raw, sig.results, sig.offsets))


def split_results(raw, types, offsets) -> tuple:
    """The results (Vars of element types ``types``) packed at bit ``offsets`` into the
    carrier tile ``raw`` (several results of an extern, the outputs of a snippet)."""
    from .tile_ir import SpliceUnpack
    rshape = raw.get_type().shape
    return tuple(cu.add_operation_variadic(SpliceUnpack, tuple(cu.TileTy(t.dtype, rshape)
                                                               for t in types),
                                           carrier=raw, offsets=offsets))


def _typed_argument(ext, i, var, elem, loc):
    """Argument ``i`` (a Var) as the signature's ``elem`` takes it: an array's address, a
    Python constant converted (checked for range), a tile of exactly ``elem``'s dtype."""
    if elem.kind == "p":
        return _array_address(ext, i, var, elem, loc)
    ty = var.get_type()
    if not isinstance(ty, cu.TileTy):
        raise call_error(ext, f"argument {i + 1} is {describe(var)}; an extern takes "
                              f"tiles or scalars of {elem}", loc)
    loose = var.get_loose_type()
    if isinstance(loose, cu.LooselyTypedScalar):
        if elem.kind == "f":  # the Python value, before cuTile's own float32 rounding
            _check_float_constant(ext, i, loose.value, elem, loc)
        context = f"argument {i + 1}: constant not representable as {elem}"
        try:
            if elem.kind == "f" and isinstance(loose.value, (int, float)):
                # from the Python value: the Var holds it rounded to float32 (cuTile's
                # type for a Python float), which a float64 parameter must not see
                return cu.strictly_typed_const(float(loose.value), cu.TileTy(elem.dtype, ()))
            return cu.implicit_cast(var, elem.dtype, context)
        except (ct.TileTypeError, ct.TileValueError) as e:
            # cuTile's message is "<context>: <why>", then its (unknown) location: the
            # first line is the whole of it
            raise call_error(ext, e.message.split("\n")[0], loc) from None
    if ty.dtype != elem.dtype:
        raise call_error(ext, f"argument {i + 1} is {describe(var)}, but the signature "
                              f"{ext.signature} expects {elem}; convert it with "
                              f".astype(ct.{elem.name}) first", loc)
    return var


def _broadcast_shape(ext, typed, loc) -> tuple[int, ...]:
    shape: tuple[int, ...] = ()
    for var in typed:
        try:
            shape = cu.broadcast_shapes2(shape, var.get_type().shape)
        except cu.BroadcastError:
            shapes = ", ".join(str(v.get_type().shape) for v in typed)
            raise call_error(ext, f"argument shapes {shapes} do not broadcast to a common "
                                  f"shape", loc) from None
    return tuple(shape)


def _emit_atomic_call(session, ext, form, key, typed, call_shape, loc, shown):
    """The atomic marker of a call (impure, void, or a pure site in ``atomic_sites``), on
    the shape :func:`_marker_shape` gives; its result reshaped back to ``call_shape``.
    ``shown``: the extern errors name and (position, array Var) of each array argument;
    their base pointers are the memory an extern of ``memory="arguments"`` is ordered
    against (a snippet of ``memory="none"`` is ordered against none) and what
    :mod:`splice.ptxtools.tma_store_reads` checks
    (:class:`splice.tracing.tile_ir.SpliceMarkerPointer`)."""
    from .tile_ir import SpliceImpureCall, SpliceMarkerPointer
    named, pointers = shown
    sig = ext.signature
    typed = tuple(cu.broadcast_to(v, call_shape) for v in typed)
    shape = _marker_shape(call_shape, typed)
    if shape != call_shape:
        typed = tuple(cu.reshape(v, shape) for v in typed)
    site = session.new_site(ext, shape, loc_str(loc), call_shape, form, sig.marker_bits, key)
    marker_dtype = ct.uint64 if sig.marker_bits == 64 else ct.uint32
    ptr_ty = cu.TileTy(cu.pointer_dtype(marker_dtype, cu.MemorySpace.GLOBAL), shape)
    pointer = cu.add_operation(
        SpliceMarkerPointer, ptr_ty, site=site,
        call=f"call of extern '{named.name}' (declared at {named.where}) in kernel "
             f"'{session.kernel_name}' at {loc_str(loc)}",
        shown=tuple(f"argument {p + 1} ({_array_name(var)})" for p, var in pointers),
        arrays=tuple(var.get_aggregate().base_ptr for _, var in pointers))
    res = sig.result
    result_ty = cu.TileTy(marker_dtype if res is None else res.dtype, shape)
    order = cu.MemoryOrder.ACQ_REL if ext.memory is Memory.ANY else cu.MemoryOrder.RELAXED
    value, _token = cu.add_operation_variadic(
        SpliceImpureCall, (result_ty, cu.TokenTy()), site=site, pointer=pointer, args=typed,
        memory_order=order, memory_scope=cu.MemoryScope.DEVICE)
    if res is None:
        if ext.staging is None:     # a tile call's sites: declare.tile_trace records the call
            session.void_calls.append((ext, loc_str(loc)))
        return None
    return value if shape == call_shape else cu.reshape(value, call_shape)


def _array_name(var) -> str:
    """The kernel's name of an array Var (cuTile names a parameter's Var after it, with a
    ``.<n>`` suffix for later versions), or "an array" where it has none."""
    name = (getattr(var, "name", "") or "").split(".")[0]
    return name if name.isidentifier() else "an array"


#: Width of the fma marker of pure calls: f64, always. An f32 fma would serve signatures
#: that fit 2 x 32 bits, but on sm_100 LLVM pairs f32 fmas into ``fma.rn.f32x2``
#: (measured, tileiras 13.4), which would hide the call sites; there is no f64x2 fma.
FMA_MARKER_BITS = 64

#: Threads per block tileiras lays elementwise tiles out over (``.reqntid 128``).
_THREADS = 128
_VECTOR_BYTES = 16


def _marker_shape(shape, args) -> tuple[int, ...]:
    """The shape the atomic marker (impure calls) operates on: the call's shape with its
    last axis split as (n / v, v), v the elements per thread of a vectorised (16-byte)
    access of the widest argument. tileiras gives atomics one element per thread per row;
    on a (n / v, v) tile that is v consecutive elements per thread -- the layout the
    kernel's loads and stores already have, so no shared-memory layout conversion is
    needed around the call. The result is reshaped back; which thread runs which element
    does not change the semantics (each element still runs exactly once, on the thread
    that owns it)."""
    if len(shape) != 1 or not args:
        # 2-D tiles come in layouts (row-vectorised loads, mma accumulators) that a split
        # last axis does not match: measured no better or worse (BAR/STS/LDS counts)
        return shape
    widest = max(v.get_type().dtype.bitwidth for v in args) // 8 or 1
    n = shape[-1]
    v = min(_VECTOR_BYTES // widest, n // _THREADS)
    if v < 2 or n % v:
        return shape
    return (n // v, v)




# --------------------------------------------------------------------------------------------
# The Python side of an extern: the function a kernel calls


def python_caller() -> str:
    """"file:line" of the user's Python code that called into splice
    (:func:`splice.errors.user_location`)."""
    return user_location()


def make_callable_stub(ext, pyfunc, emit=None):
    """A plain Python function standing for ``ext`` in kernels (cuTile resolves it to
    :func:`_handle_extern_call`, which calls ``emit(ext, args, loc)``: :func:`emit_call`
    unless given); called from host code it raises."""
    import functools
    import inspect

    def stub(*args, **kwargs):
        raise SpliceCallError(
            f"extern '{ext.name}' (declared at {ext.where}) called from Python at "
            f"{python_caller()}: it is device code; call it inside a @splice.kernel "
            f"function")

    if pyfunc is not None:
        functools.update_wrapper(stub, pyfunc)
        del stub.__wrapped__  # type: ignore[attr-defined]
    stub.__name__ = stub.__qualname__ = ext.name
    # cuTile binds call arguments against this before calling the handler: take any number
    # of positional arguments so that the handler, not cuTile, reports a wrong arity.
    stub.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
         inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])
    cu.resolve_calls(stub, _handle_extern_call)
    stub._splice_extern = ext  # type: ignore[attr-defined]
    if emit is not None:
        stub._splice_emit = emit  # type: ignore[attr-defined]
    reloading.declared(stub)
    return stub


def refuse_in_kernels(decorate, message: str):
    """``decorate`` (the decorator ``splice.extern(...)`` returns when it lacks ``name=`` or
    ``signature=``), which called inside a kernel raises :class:`SpliceCallError` with
    ``message`` instead of cuTile's "Raised exception must be wrapped in static_exception()"
    (cuTile would trace into the decorator's body)."""
    def handler(callee, *args):
        loc = cu.current_loc()
        raise SpliceCallError(f"call at {loc_str(loc)}: {message}", loc)

    cu.resolve_calls(decorate, handler)
    return decorate
