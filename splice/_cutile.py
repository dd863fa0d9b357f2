"""The one module that touches cuTile's private API (supported: cuda-tile >=1.7,<1.8).

What it uses, and why (``docs/design.md#cutile-hooks``):

- ``_cutile_custom_implementation_handler``: a plain function carrying this attribute is
  resolved by cuTile's frontend (``hir2ir._try_find_function_impl``) to our handler, which
  adds splice's own IR operations for the call.
- ``cuda.tile._ir``: ``Operation``, ``operand``/``attribute``, ``add_operation``,
  ``broadcast_to``, ``implicit_cast``, ``TileTy``; ``TileAtomicCAS`` is subclassed so that
  cuTile's token-order pass orders impure calls against the kernel's memory operations.
- ``cuda.tile._bytecode`` encoders: each call site lowers to a per-site module global and a
  *marker* on it (``docs/design.md#markers``), the arguments packed into the marker's two
  32- or 64-bit operands: an atomic compare-and-swap for impure and void calls
  (:class:`SpliceImpureCall`), and for pure calls with a result an ``fma.rn.f64`` keyed by a
  load of the global (:class:`SplicePureCall`, ``docs/design.md#fma-marker``).
- ``cuda.tile._compile``: ``compile_tile`` (bytecode only), the tileiras it would run, and its
  optimisation flags.
- ``ct.kernel._compile`` is overridden by :class:`SpliceKernel` to return splice's cubin to
  cuTile's own launcher and launch cache.
- ``cuda.tile.jax._jax`` (``_array_constraint``, ``pack_scalar``,
  ``_calling_convention_for``, the ``cutile_launch`` FFI target) and
  ``cuda.tile._annotated_function``'s node types: :mod:`splice.jax` launches splice's cubin
  exactly as ``cuda.tile.jax.cutile_call`` launches cuTile's (:func:`jax_internals`).

``check_supported_cutile()`` fails loudly when a cuda-tile outside the supported range is
installed or when any of these names moved; it runs on the first trace (not at import, so
that ``python -m splice doctor`` can report it); ``tests/test_cutile_contract.py`` exercises
it. Every private cuTile import of splice is in this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import inspect
import threading
import types
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import cuda.tile as ct

from .errors import SpliceCallError, SpliceDeclarationError, SpliceError, \
    SpliceToolchainError
from .sites import CallSite, Marker
from .types import Signature

SUPPORTED_CUTILE = ((1, 7), (1, 8))  # [low, high)

try:
    import cuda.tile._bytecode as bc
    from cuda.tile._compile import (
        _find_compiler_bin,
        _tileiras_effective_opt_and_device_debug,
        compile_tile,
        format_sm_arch,
    )
    from cuda.tile._cext import get_compute_capability
    from cuda.tile._datatype import pointer_dtype
    from cuda.tile._ir import ir
    from cuda.tile._ir.arithmetic_ops import broadcast_to, reshape
    from cuda.tile._ir.cast_ops import implicit_cast
    from cuda.tile._ir.core_ops import strictly_typed_const
    from cuda.tile._ir.ir import Operation, Var, add_operation, add_operation_variadic, \
        attribute, operand
    from cuda.tile._ir.ops import TileAtomicCAS
    from cuda.tile._ir.ops_utils import broadcast_shapes2, memory_order_to_bytecode, \
        memory_scope_to_bytecode
    from cuda.tile._ir.type import LooselyTypedScalar, TileTy, TokenTy
    from cuda.tile._memory_model import MemoryOrder, MemoryScope, MemorySpace
    _IMPORT_ERROR: Exception | None = None
except (ImportError, AttributeError) as e:  # pragma: no cover - exercised by contract test
    _IMPORT_ERROR = e

    # Stand-ins for the names this module uses at import, so that ``import splice`` and
    # ``python -m splice doctor`` still work; the first trace raises (check_supported_cutile).
    class Operation:  # type: ignore[no-redef]
        def __init_subclass__(cls, **kwargs):
            pass

    def attribute(*args, **kwargs):
        return None

    operand = attribute
    TileAtomicCAS = Operation
    ir = type("ir", (), {"MemoryEffect": type("MemoryEffect", (), {"STORE": None})})


def cutile_version() -> str:
    return importlib.metadata.version("cuda-tile")


def check_supported_cutile() -> None:
    """Raise SpliceToolchainError unless the installed cuda-tile is in the supported range
    and exposes every private name splice uses."""
    ver = cutile_version()
    parts = tuple(int(p) for p in ver.split(".")[:2])
    lo, hi = SUPPORTED_CUTILE
    if not (lo <= parts < hi):
        raise SpliceToolchainError(
            f"splice supports cuda-tile >={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}; found {ver}. "
            f"splice relies on cuTile internals that change between releases.")
    if _IMPORT_ERROR is not None:
        raise SpliceToolchainError(
            f"cuda-tile {ver} lacks an internal API splice uses: {_IMPORT_ERROR}")


_supported = False


def ensure_supported_cutile() -> None:
    """:func:`check_supported_cutile` once per process, on first trace (not at import, so
    that ``import splice`` and ``python -m splice doctor`` work with any cuda-tile)."""
    global _supported
    if not _supported:
        check_supported_cutile()
        _supported = True


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

    def new_site(self, extern, shape, where, call_shape, marker, marker_bits,
                 key) -> CallSite:
        site = CallSite(len(self.sites), extern, tuple(shape), where, tuple(call_shape),
                        marker, marker_bits, key)
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


def _loc_str(loc) -> str:
    if loc is None or loc.is_unknown():
        return "<unknown location>"
    return f"{loc.filename}:{loc.line}"


# --------------------------------------------------------------------------------------------
# IR operations


def _int_type(tt, bits: int, shape):
    return tt.tile(tt.simple(getattr(bc.SimpleType, f"I{bits}")), list(shape))


def _shape_ty(tt, dtype, shape):
    from cuda.tile._ir2bytecode import typeid
    return typeid(tt, TileTy(dtype, shape))


_FLOATS = (ct.float16, ct.bfloat16, ct.float32, ct.float64)
_INT_OF_WIDTH = {16: ct.int16, 32: ct.int32, 64: ct.int64}


def _bits_of(dtype) -> int:
    return 1 if dtype == ct.bool_ else dtype.bitwidth


def _place_bits(ctx, value, dtype, shape, width: int, offset: int = 0):
    """A tile of ``dtype`` -> its bits in a ``width``-bit integer tile, zero-extended and
    shifted left by ``offset``."""
    tt = ctx.type_table
    if dtype in _FLOATS:
        value = bc.encode_BitcastOp(ctx.builder, _int_type(tt, dtype.bitwidth, shape), value)
    if _bits_of(dtype) < width:
        value = bc.encode_ExtIOp(ctx.builder, _int_type(tt, width, shape), value,
                                 bc.Signedness.Unsigned)
    if offset:
        amount = ctx.constant(offset, TileTy(_INT_OF_WIDTH[width], shape))
        value = bc.encode_ShLIOp(ctx.builder, _int_type(tt, width, shape), value, amount,
                                 bc.IntegerOverflow.NONE)
    return value


def _take_bits(ctx, raw, width: int, dtype, shape, offset: int = 0):
    """The inverse of :func:`_place_bits`: bits ``[offset, offset + bits)`` of a
    ``width``-bit integer tile as a tile of ``dtype``."""
    tt = ctx.type_table
    if offset:
        amount = ctx.constant(offset, TileTy(_INT_OF_WIDTH[width], shape))
        raw = bc.encode_ShRIOp(ctx.builder, _int_type(tt, width, shape), raw, amount,
                               bc.Signedness.Unsigned)
    bits = _bits_of(dtype)
    if bits < width:
        raw = bc.encode_TruncIOp(ctx.builder, tt.tile(tt.I1, list(shape)) if bits == 1
                                 else _int_type(tt, bits, shape), raw, bc.IntegerOverflow.NONE)
    if dtype in _FLOATS:
        raw = bc.encode_BitcastOp(ctx.builder, _shape_ty(tt, dtype, shape), raw)
    return raw


def _pack_operands(ctx, site: CallSite, args: Sequence[Var]):
    """Bytecode packing the call's arguments into the marker's two integer operands
    (each ``marker_bits`` wide)."""
    tt = ctx.type_table
    shape = site.shape
    sig: Signature = site.extern.signature
    width = site.marker_bits
    slot_ty = _int_type(tt, width, shape)
    wide_dtype = ct.int64 if width == 64 else ct.int32
    slots: list[Optional[bc.Value]] = [None, None]
    for var, elem, place in zip(args, sig.args, sig.packing(), strict=True):
        value = _place_bits(ctx, ctx.get_value(var), elem.dtype, shape, width, place.offset)
        prev = slots[place.slot]
        slots[place.slot] = value if prev is None else bc.encode_OrIOp(ctx.builder, slot_ty,
                                                                       prev, value)
    zero = None
    for i, v in enumerate(slots):
        if v is None:
            if zero is None:
                zero = ctx.constant(0, TileTy(wide_dtype, shape))
            slots[i] = zero
    return slots


def _unpack_result(ctx, site: CallSite, raw):
    return _take_bits(ctx, raw, site.marker_bits, site.extern.signature.result.dtype,
                      site.shape)


def _marker_cas(ctx, site, pointer, args, token, order: MemoryOrder):
    cmp, val = _pack_operands(ctx, site, args)
    tt = ctx.type_table
    return bc.encode_AtomicCASTkoOp(
        ctx.builder,
        result_type=_int_type(tt, site.marker_bits, site.shape),
        result_token_type=tt.Token,
        pointers=ctx.get_value(pointer),
        cmp=cmp,
        val=val,
        mask=None,
        token=None if token is None else ctx.get_value(token),
        memory_ordering_semantics=memory_order_to_bytecode[order],
        memory_scope=memory_scope_to_bytecode[MemoryScope.DEVICE],
    )


@dataclass(eq=False)
class SpliceMarkerPointer(Operation, opcode="splice_marker_pointer"):
    """Pointer tile (shape of the call) to the call site's marker global. Pure; its result
    is unknown to cuTile's alias analysis, so an impure call that uses it is ordered
    against every memory operation of the kernel."""

    site: CallSite = attribute()

    def generate_bytecode(self, ctx):
        tt = ctx.type_table
        ptr, elem = _marker_global(ctx, self.site)
        ptr_ty = tt.pointer(elem, bc.PtrAttr.Missing)
        shape = self.site.shape
        if shape:
            ptr = bc.encode_ReshapeOp(ctx.builder, tt.tile(ptr_ty, [1] * len(shape)), ptr)
            ptr = bc.encode_BroadcastOp(ctx.builder, tt.tile(ptr_ty, list(shape)), ptr)
        return ptr


@dataclass(eq=False)
class SplicePureCall(Operation, opcode="splice_pure_call"):
    """A call of a pure extern that returns a value. No memory effect: cuTile may remove it
    when its result is unused and hoist it out of loops.

    Its marker is elementwise arithmetic, so it keeps the layout of its operands (an mma
    accumulator stays in registers; an atomic marker would need a shared-memory layout
    conversion around the call)::

        K  = load(__splice_marker_<i>)     // 0-d, weak; the global always holds 0
        a' = slot0 ^ K;  c' = slot1 ^ K    // integer tiles of the site's marker width
        r  = bitcast_i(fma(bitcast_f(a'), bitcast_f(K), bitcast_f(c')))   // ^ K if 64-bit

    LLVM cannot fold any of it (K is the content of a visible global, unknown at compile
    time; xor with an unknown is a bijection, so no constant argument -- a NaN, 1.0, -0.0 --
    reaches the fma and lets it be simplified), so each element reaches PTX as one
    ``fma.rn.f64`` with K as a multiplicand. A 64-bit result is xor-ed with K again, so
    that it is an integer to LLVM from the start (an ``and`` clearing bit 63 of a bitcast
    f64 becomes ``abs.f64``, which may change NaN bits). The rewriter makes K 0 (the value the
    load reads) and replaces each such fma by the call of slots (a', c') -- which equal
    (slot0, slot1) once K is 0. See :mod:`splice.rewrite`.
    """

    site: CallSite = attribute()
    args: tuple[Var, ...] = operand()

    def generate_bytecode(self, ctx):
        site = self.site
        tt = ctx.type_table
        width = site.marker_bits
        shape = site.shape
        itile = _int_type(tt, width, shape)
        ftile = tt.tile(tt.simple(getattr(bc.SimpleType, f"F{width}")), list(shape))
        key = _marker_key(ctx, site)
        if shape:
            key = bc.encode_ReshapeOp(ctx.builder, _int_type(tt, width, [1] * len(shape)), key)
            key = bc.encode_BroadcastOp(ctx.builder, itile, key)
        a, c = (bc.encode_BitcastOp(ctx.builder, ftile,
                                    bc.encode_XOrIOp(ctx.builder, itile, slot, key))
                for slot in _pack_operands(ctx, site, self.args))
        fkey = bc.encode_BitcastOp(ctx.builder, ftile, key)
        raw = bc.encode_FmaOp(ctx.builder, ftile, a, fkey, c, bc.RoundingMode.NEAREST_EVEN,
                              False)
        raw = bc.encode_BitcastOp(ctx.builder, itile, raw)
        if site.extern.signature.result.bits == width:
            # a 64-bit result is unblinded by xor with K too: an integer from the start, so
            # that LLVM cannot turn the kernel's integer operations on it into f64 ones (an
            # `and` clearing bit 63 of a bitcast f64 becomes abs.f64, which may change NaN
            # bits). Not narrower results: LLVM would narrow the xor and truncate K.
            raw = bc.encode_XOrIOp(ctx.builder, itile, raw, key)
        return _unpack_result(ctx, site, raw)


def _marker_global(ctx, site):
    """0-d pointer tile to the site's marker global (defined on first use: one module can
    hold several signatures of a kernel)."""
    tt = ctx.type_table
    name = site.marker_symbol
    width = site.marker_bits
    elem = tt.simple(getattr(bc.SimpleType, f"I{width}"))
    if not ctx.global_section.is_defined(name):
        ctx.global_section.define_global(name, tt.tile(elem, (1,)), bytes(width // 8),
                                         alignment=width // 8)
    ptr_ty = tt.pointer(elem, bc.PtrAttr.Missing)
    return bc.encode_GetGlobalOp(ctx.builder, tt.tile(ptr_ty, []), name), elem


def _marker_key(ctx, site):
    """The 0-d integer tile K loaded (weak, no token) from the site's marker global."""
    tt = ctx.type_table
    ptr, elem = _marker_global(ctx, site)
    value, _token = bc.encode_LoadPtrTkoOp(ctx.builder, tt.tile(elem, []), tt.Token, ptr,
                                           None, None, None, bc.MemoryOrderingSemantics.WEAK,
                                           None, None)
    return value


@dataclass(eq=False)
class SpliceImpureCall(TileAtomicCAS, opcode="splice_impure_call",
                       memory_effect=ir.MemoryEffect.STORE):
    """A call of an impure (or void) extern. A TileAtomicCAS to cuTile's passes: never
    removed, never hoisted, threaded on the memory token so it keeps its order against the
    kernel's loads and stores. Its marker is acq_rel so tileiras/LLVM cannot move plain
    memory accesses across it either."""

    # cuTile collects fields from each class's own annotations: re-declare all of them.
    memory_order: MemoryOrder = attribute()
    memory_scope: MemoryScope = attribute()
    pointer: Var = operand()
    expected: Optional[Var] = operand(default=None)
    desired: Optional[Var] = operand(default=None)
    mask: Optional[Var] = operand(default=None)
    token: Optional[Var] = operand(default=None)
    site: CallSite = attribute()
    args: tuple[Var, ...] = operand()

    def generate_bytecode(self, ctx):
        raw, token = _marker_cas(ctx, self.site, self.pointer, self.args, self.token,
                                 self.memory_order)
        if self.site.extern.signature.result is None:
            return raw, token
        return _unpack_result(ctx, self.site, raw), token


# --------------------------------------------------------------------------------------------
# The frontend hook


def _call_error(ext, message, loc) -> SpliceCallError:
    session = getattr(_local, "session", None)
    kernel = f" in kernel '{session.kernel_name}'" if session else ""
    return SpliceCallError(
        f"call of extern '{ext.name}' (declared at {ext.where}){kernel} at {_loc_str(loc)}: "
        f"{message}", loc)


def _describe(var: Var) -> str:
    ty = var.get_type()
    if isinstance(ty, TileTy):
        return f"a scalar {ty.dtype}" if ty.shape == () else f"a {ty.dtype} tile of shape " \
                                                              f"{ty.shape}"
    return f"a value of type {ty}"


@dataclass(eq=False)
class SplicePtrToInt(Operation, opcode="splice_ptr_to_int"):
    """An array's base address as a 0-d uint64 tile (a pointer argument of an extern)."""

    pointer: Var = operand()

    def generate_bytecode(self, ctx):
        tt = ctx.type_table
        return bc.encode_PtrToIntOp(ctx.builder, tt.tile(tt.I64, []), ctx.get_value(self.pointer))


def _array_address(ext, i, var, elem, loc):
    from cuda.tile._ir.type import ArrayTy
    ty = var.get_type()
    if not isinstance(ty, ArrayTy):
        raise _call_error(ext, f"argument {i + 1} is {_describe(var)}, but the signature "
                               f"expects an array of {elem.pointee} ({elem})", loc)
    if ty.dtype != elem.pointee.dtype:
        raise _call_error(ext, f"argument {i + 1} is an array of {ty.dtype}, but the "
                               f"signature expects {elem}", loc)
    return add_operation(SplicePtrToInt, TileTy(ct.uint64, ()),
                         pointer=var.get_aggregate().base_ptr)


#: IEEE 754 binary formats of the float element types: (significand bits p, including the
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
        raise _call_error(ext, f"argument {i + 1}: constant {value!r} overflows {elem} to "
                               f"infinity (largest finite {big:g})", loc)
    if abs(v) <= 2.0 ** (emin - p):
        raise _call_error(ext, f"argument {i + 1}: constant {value!r} underflows {elem} "
                               f"to zero (smallest {2.0 ** (emin - p + 1):g})", loc)


def _handle_extern_call(callee, *args):
    ext = callee._splice_extern
    builder = ir.Builder.get_current()
    if len(args) == 2 and isinstance(args[0], tuple):  # cuTile packs *args, **kwargs
        args, kwargs = args
        if kwargs:
            raise _call_error(ext, f"keyword argument(s) {', '.join(kwargs)}: pass extern "
                                   f"arguments by position", builder.loc)
    return _emit_call(ext, args, builder.loc)


_handle_extern_call._is_coroutine = False


def _emit_call(ext, args, loc):
    """Add the IR operations of one call of ``ext`` with argument Vars ``args``."""
    session: TraceSession | None = getattr(_local, "session", None)
    if session is None:
        raise _call_error(
            ext, "externs can only be called inside a kernel decorated with @splice.kernel "
                 "and compiled by splice (a plain @ct.kernel would run the unresolved "
                 "call-site marker). cuda.tile.compilation.export_kernel and "
                 "cuda.tile.jax.cutile_call run cuTile's compiler directly: use "
                 "splice.export_kernel and splice.jax.cutile_call (same arguments) instead",
            loc)
    sig: Signature = ext.signature
    if len(args) != len(sig.args):
        raise _call_error(ext, f"expected {len(sig.args)} argument(s) for signature {sig}, "
                               f"got {len(args)}", loc)
    typed: Any = []  # a list, then the broadcast tuple
    for i, (var, elem) in enumerate(zip(args, sig.args)):
        ty = var.get_type()
        if elem.kind == "p":
            typed.append(_array_address(ext, i, var, elem, loc))
            continue
        if not isinstance(ty, TileTy):
            raise _call_error(ext, f"argument {i + 1} is {_describe(var)}; an extern takes "
                                   f"tiles or scalars of {elem}", loc)
        loose = var.get_loose_type()
        if isinstance(loose, LooselyTypedScalar):
            if elem.kind == "f":  # the Python value, before cuTile's own float32 rounding
                _check_float_constant(ext, i, loose.value, elem, loc)
            try:
                if elem.kind == "f" and isinstance(loose.value, (int, float)):
                    # from the Python value: the Var holds it rounded to float32 (cuTile's
                    # type for a Python float), which a float64 parameter must not see
                    var = strictly_typed_const(float(loose.value), TileTy(elem.dtype, ()))
                else:
                    var = implicit_cast(var, elem.dtype, f"argument {i + 1}")
            except Exception as e:  # cuTile's TileTypeError/TileValueError
                raise _call_error(ext, f"argument {i + 1}: constant not representable as "
                                       f"{elem}: {getattr(e, 'message', e)}", loc) from None
        elif ty.dtype != elem.dtype:
            raise _call_error(ext, f"argument {i + 1} is {_describe(var)}, but the signature "
                                   f"{sig} expects {elem}; convert it with "
                                   f".astype(ct.{elem.name}) first", loc)
        typed.append(var)
    if ext.scope == "block":
        _check_block_arguments(ext, typed, loc)
    shape: tuple[int, ...] = ()
    for var in typed:
        try:
            shape = broadcast_shapes2(shape, var.get_type().shape)
        except Exception:
            shapes = ", ".join(str(v.get_type().shape) for v in typed)
            raise _call_error(ext, f"argument shapes {shapes} do not broadcast to a common "
                                   f"shape", loc) from None
    typed = tuple(broadcast_to(v, shape) for v in typed)
    call_shape = shape
    res = sig.result
    key = session.site_key(loc)
    if ext.pure and res is not None and key not in session.atomic_sites:
        site = session.new_site(ext, shape, _loc_str(loc), call_shape, Marker.FMA,
                                FMA_MARKER_BITS, key)
        return add_operation(SplicePureCall, TileTy(res.dtype, shape), site=site, args=typed)
    marker_shape = _marker_shape(shape, typed)
    if marker_shape != shape:
        typed = tuple(reshape(v, marker_shape) for v in typed)
        shape = marker_shape
    site = session.new_site(ext, shape, _loc_str(loc), call_shape, Marker.ATOMIC,
                            sig.marker_bits, key)
    marker_dtype = ct.uint64 if sig.marker_bits == 64 else ct.uint32
    ptr_ty = TileTy(pointer_dtype(marker_dtype, MemorySpace.GLOBAL), shape)
    pointer = add_operation(SpliceMarkerPointer, ptr_ty, site=site)
    result_ty = TileTy(marker_dtype if res is None else res.dtype, shape)
    value, _token = add_operation_variadic(
        SpliceImpureCall, (result_ty, TokenTy()), site=site, pointer=pointer, args=typed,
        memory_order=MemoryOrder.ACQ_REL, memory_scope=MemoryScope.DEVICE)
    if res is None:
        return None
    return value if shape == call_shape else reshape(value, call_shape)


def _check_block_arguments(ext, typed, loc) -> None:
    """A block-scope call (``scope="block"``) takes scalars and pointers: every thread of
    the block passes the same values. Its marker is then a 0-d atomic, which tileiras runs
    on one thread behind a ``tid.x == 0`` guard (DESIGN.md F12; :mod:`splice.block`)."""
    for i, var in enumerate(typed):
        shape = var.get_type().shape
        if shape != ():
            raise _call_error(
                ext, f"argument {i + 1} is {_describe(var)}; a block-scope extern "
                     f"(scope=\"block\") takes scalars (0-d tiles, Python constants) and "
                     f"pointers (arrays) for now: reduce the tile to a scalar, or pass the "
                     f"array and index it inside the function", loc)


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


@dataclass(eq=False)
class SpliceUnpack(Operation, opcode="splice_unpack"):
    """Split the integer carrying several outputs of an inline-PTX snippet into its
    outputs (each at its bit offset)."""

    carrier: Var = operand()
    offsets: tuple[int, ...] = attribute()

    def generate_bytecode(self, ctx):
        raw = ctx.get_value(self.carrier)
        cty = self.carrier.get_type()
        return tuple(_take_bits(ctx, raw, cty.dtype.bitwidth, var.get_type().dtype, cty.shape,
                                off) for var, off in zip(self.result_vars, self.offsets))


@dataclass(eq=False)
class SplicePack(Operation, opcode="splice_pack"):
    """k consecutive elements along the last axis -> one integer of k x width bits
    (element j at bits [j*width, (j+1)*width)): operands of a ``pack=k`` snippet."""

    x: Var = operand()
    k: int = attribute()

    def generate_bytecode(self, ctx):
        tt = ctx.type_table
        xty = self.x.get_type()
        rty = self.result_var.get_type()
        w = xty.dtype.bitwidth
        outer = rty.shape
        v = bc.encode_ReshapeOp(ctx.builder, _shape_ty(tt, xty.dtype, (*outer, self.k)),
                                ctx.get_value(self.x))
        zero = ctx.constant(0, TileTy(ct.int32, ()))
        acc = None
        cbits = rty.dtype.bitwidth
        for j in range(self.k):
            idx = [zero] * len(outer) + [ctx.constant(j, TileTy(ct.int32, ()))]
            part = bc.encode_ExtractOp(ctx.builder, _shape_ty(tt, xty.dtype, (*outer, 1)), v,
                                       idx)
            part = bc.encode_ReshapeOp(ctx.builder, _shape_ty(tt, xty.dtype, outer), part)
            part = _place_bits(ctx, part, xty.dtype, outer, cbits, j * w)
            acc = part if acc is None else bc.encode_OrIOp(ctx.builder,
                                                           _int_type(tt, cbits, outer), acc,
                                                           part)
        return acc


@dataclass(eq=False)
class SpliceUnpackPacked(Operation, opcode="splice_unpack_packed"):
    """The inverse of :class:`SplicePack`: one integer -> k consecutive elements."""

    carrier: Var = operand()
    k: int = attribute()

    def generate_bytecode(self, ctx):
        tt = ctx.type_table
        cty = self.carrier.get_type()
        rty = self.result_var.get_type()
        outer = cty.shape
        cbits = cty.dtype.bitwidth
        w = rty.dtype.bitwidth
        raw = ctx.get_value(self.carrier)
        parts = []
        for j in range(self.k):
            v = _take_bits(ctx, raw, cbits, rty.dtype, outer, j * w)
            parts.append(bc.encode_ReshapeOp(ctx.builder, _shape_ty(tt, rty.dtype, (*outer, 1)),
                                             v))
        width = 1
        while len(parts) > 1:
            width *= 2
            parts = [bc.encode_CatOp(ctx.builder, _shape_ty(tt, rty.dtype, (*outer, width)),
                                     parts[i], parts[i + 1], len(outer))
                     for i in range(0, len(parts), 2)]
        return bc.encode_ReshapeOp(ctx.builder, _shape_ty(tt, rty.dtype, rty.shape), parts[0])


def _pack_inputs(args, k, pure, where, loc):
    """Broadcast the inputs of a ``pack=k`` snippet to a common shape, pad a last axis
    shorter than k by repeating it (pure snippets only), and pack k elements per operand.
    Returns (packed operands, common shape, padded shape)."""
    from cuda.tile._ir.arithmetic_ops import reshape
    from cuda.tile._ir.ops import cat
    shape: tuple[int, ...] = ()
    for var in args:
        shape = broadcast_shapes2(shape, var.get_type().shape)
    base = tuple(shape) if shape else (1,)
    if base[-1] % k and not pure:
        raise SpliceCallError(f"inline PTX at {where}: pack={k} needs a last axis divisible by "
                              f"{k} for an impure snippet (got {base[-1]}): padding would run "
                              f"its side effects on padding lanes", loc)
    packed = []
    padded = base
    for var in args:
        v = broadcast_to(var, shape)
        if not shape:
            v = reshape(v, (1,))
        while v.get_type().shape[-1] % k:
            v = cat((v, v), -1)
        padded = v.get_type().shape
        dt = v.get_type().dtype
        bits = k * dt.bitwidth
        if dt == ct.bool_ or bits not in (16, 32, 64):
            raise SpliceCallError(f"inline PTX at {where}: pack={k} of {dt} makes {bits}-bit "
                                  f"operands; k x element width must be 16, 32 or 64 bits",
                                  loc)
        carrier = {16: ct.uint16, 32: ct.uint32, 64: ct.uint64}[bits]
        packed.append(add_operation(SplicePack, TileTy(carrier, (*padded[:-1],
                                                                 padded[-1] // k)), x=v, k=k))
    return packed, tuple(shape), tuple(padded)


def _constant(var, what, where):
    if var is None:
        return None
    if not var.is_constant():
        raise SpliceCallError(f"inline PTX at {where}: {what} must be a compile-time constant")
    return var.get_constant()


def _handle_asm(callee, template, args, dtype, constraints, pure, pack):
    from .asm import AsmSpec
    from .extern import ExternFunction
    from .fragments import AsmSource
    from .types import Signature, element_type
    from cuda.tile._ir.core_ops import build_tuple
    builder = ir.Builder.get_current()
    loc = builder.loc
    where = _loc_str(loc)
    text = _constant(template, "the PTX template", where)
    if not isinstance(text, str):
        raise SpliceCallError(f"inline PTX at {where}: the template must be a string", loc)
    dt = _constant(dtype, "dtype", where)
    many = isinstance(dt, tuple)
    try:
        outputs = () if dt is None else tuple(element_type(d) for d in (dt if many else (dt,)))
    except Exception as e:
        raise SpliceCallError(f"inline PTX at {where}: dtype: {getattr(e, 'message', e)}",
                              loc) from None
    pure_v = _constant(pure, "pure", where)
    if not isinstance(pure_v, bool):
        raise SpliceCallError(f"inline PTX at {where}: pure must be True or False", loc)
    k = _constant(pack, "pack", where)
    if not isinstance(k, int) or k not in (1, 2, 4, 8):
        raise SpliceCallError(f"inline PTX at {where}: pack must be 1, 2, 4 or 8, got {k!r}",
                              loc)
    for i, var in enumerate(args):
        if not isinstance(var.get_type(), TileTy):
            raise SpliceCallError(f"inline PTX at {where}: input {i + 1} is {_describe(var)}; "
                                  f"inputs are tiles or scalars", loc)
    if k > 1:
        if not args:
            raise SpliceCallError(f"inline PTX at {where}: pack={k} needs inputs", loc)
        if any(t.kind == "b" for t in outputs):
            raise SpliceCallError(f"inline PTX at {where}: pack={k} cannot pack bool outputs",
                                  loc)
        elem_out = outputs
        args, shape, padded = _pack_inputs(args, k, pure_v and bool(outputs), where, loc)
        try:
            outputs = tuple(element_type({16: "uint16", 32: "uint32", 64: "uint64"}[
                k * t.bits]) for t in elem_out)
        except KeyError:
            raise SpliceCallError(f"inline PTX at {where}: pack={k} outputs must be "
                                  f"{16 // k}/{32 // k}/{64 // k}-bit", loc) from None
    inputs = []
    for i, var in enumerate(args):
        ty = var.get_type()
        try:
            inputs.append(element_type(ty.dtype))
        except Exception as e:
            raise SpliceCallError(f"inline PTX at {where}: input {i + 1}: "
                                  f"{getattr(e, 'message', e)}", loc) from None
    spec = AsmSpec(text, outputs, tuple(inputs), where)
    try:
        spec.check(_constant(constraints, "constraints", where))
        carrier, offsets = spec.result_layout()
        sig = Signature(tuple(inputs), carrier)
        sig.packing()
    except SpliceError as e:
        raise SpliceCallError(e.message, loc) from None
    # inline="auto": a snippet that declares .local/.shared scratch stays a call
    ext = ExternFunction(f"asm@{where}", spec.symbol, sig, pure_v and bool(outputs),
                         AsmSource(spec=spec), where, inline="auto")
    raw = _emit_call(ext, tuple(args), loc)
    if not outputs:
        return None
    if len(outputs) == 1:
        outs = (raw,)
    else:
        rshape = raw.get_type().shape
        outs = add_operation_variadic(SpliceUnpack, tuple(TileTy(t.dtype, rshape)
                                                          for t in outputs),
                                      carrier=raw, offsets=offsets)
    if k > 1:
        from cuda.tile._ir.arithmetic_ops import reshape
        from cuda.tile._ir.ops import extract
        res = []
        for var, t in zip(outs, elem_out):
            v = add_operation(SpliceUnpackPacked, TileTy(t.dtype, padded), carrier=var, k=k)
            if padded != (shape if shape else (1,)):
                zero = tuple(loosely_const(0) for _ in padded)
                v = extract(v, zero, (*padded[:-1], (shape[-1] if shape else 1)))
            if not shape:
                v = reshape(v, ())
            res.append(v)
        outs = tuple(res)
    return build_tuple(tuple(outs)) if many else outs[0]


_handle_asm._is_coroutine = False


def loosely_const(v):
    from cuda.tile._ir.core_ops import loosely_typed_const
    return loosely_typed_const(v)


def make_asm_function():
    """``splice.asm``: a plain function cuTile resolves to :func:`_handle_asm`."""
    def asm(template, *args, dtype=None, constraints=None, pure=True, pack=1):
        raise SpliceCallError(f"splice.asm called from Python at {_python_caller()}: it is "
                              f"device code; use it inside a @splice.kernel function")
    asm._cutile_custom_implementation_handler = _handle_asm
    return asm


def _python_caller() -> str:
    """"file:line" of the user's Python code that called into splice (the first frame above
    the caller of this function that is outside the splice package)."""
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    frame = sys._getframe(2)
    while frame.f_back is not None and \
            os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def make_callable_stub(ext, pyfunc):
    """A plain Python function standing for ``ext`` in kernels (cuTile resolves it to
    :func:`_handle_extern_call`); called from host code it raises."""
    import functools
    import inspect

    def stub(*args, **kwargs):
        raise SpliceCallError(
            f"extern '{ext.name}' (declared at {ext.where}) called from Python at "
            f"{_python_caller()}: it is device code; call it inside a @splice.kernel "
            f"function")

    if pyfunc is not None:
        functools.update_wrapper(stub, pyfunc)
        del stub.__wrapped__
    stub.__name__ = stub.__qualname__ = ext.name
    # cuTile binds call arguments against this before calling the handler: take any number
    # of positional arguments so that the handler, not cuTile, reports a wrong arity.
    stub.__signature__ = inspect.Signature(
        [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
         inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])
    stub._cutile_custom_implementation_handler = _handle_extern_call
    stub._splice_extern = ext
    return stub


def refuse_in_kernels(decorate, message: str):
    """``decorate`` (the decorator ``splice.extern(...)`` returns when it lacks ``name=`` or
    ``signature=``), which called inside a kernel raises :class:`SpliceCallError` with
    ``message`` instead of cuTile's "Raised exception must be wrapped in static_exception()"
    (cuTile would trace into the decorator's body)."""
    def handler(callee, *args):
        loc = ir.Builder.get_current().loc
        raise SpliceCallError(f"call at {_loc_str(loc)}: {message}", loc)

    handler._is_coroutine = False
    decorate._cutile_custom_implementation_handler = handler
    return decorate


# --------------------------------------------------------------------------------------------
# Kernel compilation


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


def trace_kernel(kernel: ct.kernel, signature, arch: str, context=None,
                 atomic_sites: frozenset[str] = frozenset()) -> TracedKernel:
    """Trace ``kernel`` for ``signature`` (or a list of signatures: one module with an entry
    each, as ``cuda.tile.compilation.export_kernel`` makes) and return its Tile IR bytecode
    with the call sites of every extern in it, and the tileiras flags cuTile would use for
    ``arch``. Pure call sites whose key (:attr:`CallSite.key`) is in ``atomic_sites`` get the atomic marker (see
    :class:`SplicePureCall`)."""
    ensure_supported_cutile()
    from cuda.tile._cext import default_tile_context
    context = context or default_tile_context
    ann = kernel._annotated_function
    signatures = tuple(signature) if isinstance(signature, (list, tuple)) else (signature,)
    with trace_session(ann.pyfunc.__name__, atomic_sites) as session:
        result = compile_tile(ann, signatures, arch, kernel._compiler_options, context,
                              return_bytecode=True, return_cubin=False)
    sig = result.kernel_signatures[0]
    opt, device_debug = _tileiras_effective_opt_and_device_debug(kernel._compiler_options,
                                                                 arch)
    flags = ["--gpu-name", arch, f"-O{opt}"]
    flags.append("--device-debug" if device_debug else "--lineinfo")
    return TracedKernel(bytes(result.bytecode), sig.symbol, tuple(session.sites),
                        tuple(result.library_lifecycle_providers), tuple(flags),
                        context.config.compiler_timeout_sec,
                        tuple(s.symbol for s in result.kernel_signatures))


def check_build_args(kernel, signature) -> None:
    """Raise SpliceDeclarationError unless ``kernel`` is a kernel (``@splice.kernel``) and
    ``signature`` a ``cuda.tile.compilation.KernelSignature`` or a non-empty list of them."""
    ensure_supported_cutile()
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
        code = kernel._pyfunc.__code__
        raise SpliceDeclarationError(
            f"kernel '{kernel._pyfunc.__name__}' ({code.co_filename}:{code.co_firstlineno}): "
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
    want = len(inspect.signature(kernel._pyfunc).parameters)
    for s in signatures:
        check_symbol(s.symbol, f"kernel '{kernel._pyfunc.__name__}'")
        if len(s.parameters) != want:
            code = kernel._pyfunc.__code__
            raise SpliceDeclarationError(
                f"kernel '{kernel._pyfunc.__name__}' ({code.co_filename}:"
                f"{code.co_firstlineno}) takes {want} parameters but its signature lists "
                f"{len(s.parameters)}; give one constraint per parameter, in order")


def tileiras_path() -> str:
    """Path of the tileiras cuTile would run (pip package first, then PATH, CUDA_HOME)."""
    if _IMPORT_ERROR is not None:
        check_supported_cutile()
    try:
        return _find_compiler_bin().path
    except FileNotFoundError as e:
        raise SpliceToolchainError(str(e)) from None


def nvshmem_lifecycle():
    """cuTile's NVSHMEM library-lifecycle provider module (``library_init(handle)`` runs
    ``nvshmem.core.library_init`` on a loaded module; cuda-tile 1.7)."""
    from cuda.tile._library_lifecycle import nvshmem
    return nvshmem


def current_arch() -> str:
    """The architecture of the current GPU ("sm_90").

    Raises:
        SpliceToolchainError: no GPU or CUDA driver (libcuda) on this machine."""
    ensure_supported_cutile()
    try:
        return format_sm_arch(*get_compute_capability())
    except Exception as e:  # cuTile raises OSError (no libcuda) or its own driver errors
        raise SpliceToolchainError(
            f"no GPU to take the architecture from ({type(e).__name__}: {e})") from None


def signature_from_args(kernel, args):
    from cuda.tile.compilation import CallingConvention, KernelSignature
    return KernelSignature.from_kernel_args(kernel, args, CallingConvention.cutile_python_v1())


class SpliceKernel(ct.kernel):
    """``@splice.kernel``: a ``@ct.kernel`` whose compiled cubin has every extern call
    spliced in. Same options as ``ct.kernel``; launch it with ``ct.launch``."""

    def __new__(cls, function=None, /, **kwargs):
        if function is None:
            def decorate(func):
                return cls(func, **kwargs)
            return decorate
        if not isinstance(function, types.FunctionType):
            caller = next(f for f in inspect.stack() if f.filename != __file__)
            raise SpliceDeclarationError(
                f"@splice.kernel at {caller.filename}:{caller.lineno}: got "
                f"{type(function).__name__} {function!r:.80}; decorate a def (a Python "
                f"function) with @splice.kernel")
        return super().__new__(cls, function, **kwargs)

    def __init__(self, function, /, **options):
        try:
            super().__init__(function, **options)
        except (TypeError, ValueError) as e:  # cuTile checks the options
            code = function.__code__
            given = ", ".join(f"{k}={v!r}" for k, v in options.items())
            raise SpliceDeclarationError(
                f"@splice.kernel '{function.__name__}' ({code.co_filename}:"
                f"{code.co_firstlineno}): cuTile refuses the options {given}: {e}; num_ctas, "
                f"occupancy, opt_level and num_worker_warps take ints (or ct.ByTarget)"
            ) from None

    def _compile(self, signature, context, compute_capability=None):
        from . import pipeline
        arch = format_sm_arch(*(compute_capability or get_compute_capability()))
        built = pipeline.build(self, signature, arch, context)
        return built.cubin, built.symbol, None, built.lifecycle_providers

    def replace_hints(self, **hints):
        # through __init__, which turns cuTile's refusal of a hint into a SpliceError
        return type(self)(self._pyfunc,
                          **{**dataclasses.asdict(self._compiler_options), **hints})

    def inspect(self, *args, signature=None, arch: str | None = None):
        """Every stage of this kernel's compilation, as a :class:`splice.pipeline.Build`.

        Pass the launch arguments (needs a GPU to derive the signature), or a
        ``cuda.tile.compilation.KernelSignature`` and an ``arch`` such as ``"sm_90"`` (no
        GPU needed).

        Raises:
            SpliceDeclarationError: neither arguments nor ``signature=``, or arguments cuTile
                cannot make a signature of.
            SpliceToolchainError: no ``arch=`` (or launch arguments) on a machine without a
                GPU; and as for :func:`splice.build`.
        """
        from . import pipeline
        name, where = pipeline._kernel_desc(self)
        what = f"kernel '{name}' ({where}): inspect()"
        if signature is None and not args:
            raise SpliceDeclarationError(
                f"{what} needs the kernel's launch arguments, or signature= (a "
                f"cuda.tile.compilation.KernelSignature) and arch='sm_90'")
        if arch is None or signature is None:
            try:
                arch = arch or current_arch()
                signature = signature or signature_from_args(self, args)
            except SpliceToolchainError as e:
                raise SpliceToolchainError(
                    f"{what} {'with launch arguments ' if args else 'without arch= '}needs "
                    f"this machine's GPU: {e.message}; pass "
                    f"signature=KernelSignature(...) and arch='sm_90' (or 'sm_80', 'sm_100') "
                    f"to compile without a GPU") from None
            except Exception as e:  # cuTile cannot make a signature of these arguments
                raise SpliceDeclarationError(
                    f"{what}: cuTile cannot make a kernel signature of the arguments given "
                    f"({type(e).__name__}: {e}); pass them as for ct.launch") from None
        return pipeline.build(self, signature, arch, None, keep_stages=True)


# --------------------------------------------------------------------------------------------
# cuTile's JAX integration (cuda.tile.jax), for splice.jax


@dataclass(frozen=True)
class JaxInternals:
    """What :mod:`splice.jax` reuses of ``cuda.tile.jax`` (cuda-tile 1.7), so that a spliced
    kernel sees exactly the signature, scalar packing and launch that cuTile's own
    ``cutile_call`` would give it: ``_array_constraint(aval, index_dtype, alias_group)``,
    ``pack_scalar(value, want_int64)``, ``_calling_convention_for(constraints)``, the
    annotation tree node types, and the name of the XLA FFI target cuTile registers
    (``cutile_launch``, api_version 4; attributes as in ``_cutile_call_ffi_p_lower``)."""

    array_constraint: Any
    pack_scalar: Any
    calling_convention_for: Any
    leaf_node: Any
    homogeneous_tuple_node: Any
    heterogeneous_tuple_node: Any
    ffi_target: str = "cutile_launch"


def jax_internals() -> JaxInternals:
    """cuTile's JAX internals (importing ``cuda.tile.jax`` registers its FFI target).

    Raises:
        SpliceToolchainError: JAX is not installed, or cuTile's JAX module lacks a name."""
    try:
        import cuda.tile.jax as cjax
        from cuda.tile.jax import _jax
        from cuda.tile._annotated_function import HeterogeneousTupleNode, \
            HomogeneousTupleNode, LeafAnnotationNode
        if not cjax.HAS_JAX:
            raise ImportError("JAX is not installed")
        return JaxInternals(_jax._array_constraint, _jax.pack_scalar,
                            _jax._calling_convention_for, LeafAnnotationNode,
                            HomogeneousTupleNode, HeterogeneousTupleNode)
    except (ImportError, AttributeError) as e:
        raise SpliceToolchainError(
            f"splice.jax needs JAX (with its CUDA plugin) and cuda-tile "
            f"{cutile_version()}'s cuda.tile.jax: {e}") from None


def parameter_annotations(kernel) -> tuple[list[str], list]:
    """The kernel's parameter names and cuTile's annotation tree for each."""
    ann = kernel._annotated_function
    return list(ann.pysig.parameters), list(ann.parameter_annotations)
