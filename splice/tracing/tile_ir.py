"""splice's Tile IR operations: what each extern call (and ``splice.asm`` snippet) becomes
in cuTile's IR, and the bytecode each one encodes.

Each call site lowers to a per-site module global and a *marker* on it
(``docs/design.md#markers``), the arguments packed into the marker's two 32- or 64-bit
operands: an atomic compare-and-swap for impure and void calls (:class:`SpliceImpureCall`,
a ``TileAtomicCAS`` to cuTile's passes), and for pure calls with a result an ``fma.rn.f64``
keyed by a load of the global (:class:`SplicePureCall`, ``docs/design.md#fma-marker``).

The operations subclass cuTile's ``Operation``, so this module imports cuTile's compiler:
it is imported on the first trace (by :mod:`splice.tracing.trace` and
:mod:`splice.declare.asm_frontend`), never by ``import splice``, and takes every cuTile
name from :mod:`splice.system._cutile`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import cuda.tile as ct

from ..forms.base import CallSite, Memory
from ..ptxtools.tma_store_reads import StoredArrayRead
from ..system._cutile import (
    SPLICE_ALIAS_SET,
    MemoryOrder,
    MemoryScope,
    Operation,
    TileAtomicCAS,
    TileTy,
    Var,
    attribute,
    bc,
    ir,
    memory_order_to_bytecode,
    memory_scope_to_bytecode,
    operand,
    typeid,
)
from ..types import Signature


def _int_type(tt, bits: int, shape):
    return tt.tile(tt.simple(getattr(bc.SimpleType, f"I{bits}")), list(shape))



def _shape_ty(tt, dtype, shape):
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


#: The memory order of every atomic marker in the bytecode (:class:`SpliceImpureCall`).
MARKER_ORDER = MemoryOrder.ACQ_REL


@dataclass(eq=False)
class SpliceMarkerPointer(Operation, opcode="splice_marker_pointer"):
    """Pointer tile (shape of the call) to the call site's marker global. Pure. The alias
    set cuTile's token-order pass orders the call by is its pointer's:

    - an extern of ``memory="any"`` (the default): the universe (cuTile knows nothing of
      this pointer), so the call is ordered against every memory operation of the kernel;
    - ``memory="arguments"``: the union of the alias sets of ``arrays`` (the base pointers
      of its array arguments; an array of unknown aliasing is the universe) and
      :data:`splice.system._cutile.SPLICE_ALIAS_SET` (the tile staging's buffers), so the call is
      ordered against the kernel's operations on arrays that may alias its arguments, and
      against the other sites of its tile call, only;
    - a ``splice.asm`` snippet of ``memory="none"`` (no array operands):
      :data:`splice.system._cutile.SPLICE_ALIAS_SET` alone, so it is ordered against splice's
      other calls only.

    ``arrays``: the base pointers of the call's array arguments (whatever its ``memory=``),
    ``shown`` what each is for messages ("argument 1 (C)"), ``call`` the call
    ("call of extern 'f' ... at k.py:12"): :meth:`splice_tma_stored_reads`."""

    site: CallSite = attribute()
    call: str = attribute()
    shown: tuple[str, ...] = attribute(default=())
    arrays: tuple[Var, ...] = operand(default=())

    def splice_alias_set(self, alias_set_of) -> int | None:
        """The alias set of the pointer (None: cuTile's own, the universe); called by the
        dataflow hook of :mod:`splice.system._cutile`."""
        memory = self.site.extern.memory
        if memory is Memory.ANY:
            return None
        alias_set = SPLICE_ALIAS_SET
        for array in self.arrays if memory is Memory.ARGUMENTS else ():
            alias_set |= alias_set_of(array)
        return alias_set

    def splice_tma_stored_reads(self, stores, alias_set_of) -> list[StoredArrayRead]:
        """The array arguments of an impure call that may alias an array of ``stores``
        ((alias set, "file:line") of each ``ct.store`` allowing TMA); called by the
        dataflow hook of :mod:`splice.system._cutile` (:mod:`splice.ptxtools.tma_store_reads`)."""
        if self.site.extern.pure:
            return []
        reads = []
        for shown, array in zip(self.shown, self.arrays, strict=True):
            mine = alias_set_of(array)
            lines = tuple(dict.fromkeys(where for aset, where in stores if aset & mine))
            if lines:
                reads.append(StoredArrayRead(self.call, shown, lines))
        return reads

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
    ``fma.<rounding>.f64`` with K as a multiplicand (the rounding differs between
    neighbouring sites so that LLVM does not merge them: :data:`splice.forms.base.FMA_ROUNDINGS`). A
    64-bit result is xor-ed with K again, so that it is an integer to LLVM from the start (an
    ``and`` clearing bit 63 of a bitcast f64 becomes ``abs.f64``, which may change NaN bits). The
    rewriter makes K 0 (the value the load reads) and replaces each such fma by the call of slots
    (a', c') -- which equal (slot0, slot1) once K is 0. See :mod:`splice.forms.rewrite`.
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
        rounding = {"rn": bc.RoundingMode.NEAREST_EVEN, "rz": bc.RoundingMode.ZERO,
                    "rm": bc.RoundingMode.NEGATIVE_INF,
                    "rp": bc.RoundingMode.POSITIVE_INF}[site.fma_rounding]
        raw = bc.encode_FmaOp(ctx.builder, ftile, a, fkey, c, rounding, False)
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
    memory accesses across it either.

    ``memory_order`` is the order cuTile's token-order pass sees: acq_rel for an extern of
    ``memory="any"``, relaxed for ``memory="arguments"`` (and a snippet's "none"). That
    pass joins the input token of an operation with release semantics with the last token
    of every array, whatever its alias set, and orders every later operation after one
    with acquire semantics; relaxed leaves both out, so the call is ordered (before and after) only
    against the operations whose pointer's alias set overlaps its own (:class:`SpliceMarkerPointer`:
    the arrays it is given, the other sites of its tile call, the other declared calls),
    and after the kernel's last acquire (an earlier call of ``memory="any"``; a later one
    is release, so it follows). The bytecode is acq_rel for all (:data:`MARKER_ORDER`), so
    that tileiras/LLVM move no plain access across the marker in a thread's program
    order."""

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
                                 MARKER_ORDER)
        if self.site.extern.signature.result is None:
            return raw, token
        return _unpack_result(ctx, self.site, raw), token


@dataclass(eq=False)
class SplicePtrToInt(Operation, opcode="splice_ptr_to_int"):
    """An array's base address as a 0-d uint64 tile (a pointer argument of an extern)."""

    pointer: Var = operand()

    def generate_bytecode(self, ctx):
        tt = ctx.type_table
        return bc.encode_PtrToIntOp(ctx.builder, tt.tile(tt.I64, []), ctx.get_value(self.pointer))


@dataclass(eq=False)
class SpliceUnpack(Operation, opcode="splice_unpack"):
    """Split the integer carrying several outputs of an inline-PTX snippet, or several
    results of an extern, into them (each at its bit offset)."""

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


