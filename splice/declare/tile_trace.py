"""The trace side of tile calls (:mod:`splice.forms.staging`): a call of a block-scope extern
with tile parameters or a tile result becomes its staging sites -- a store site per tile
argument, the block site, a load site for the result -- each an extern of the call's
:class:`~splice.inputs.tile_fragment.TileFragment`, emitted by
:func:`splice.tracing.trace.emit_call`.
"""

from __future__ import annotations

import dataclasses
import math

import cuda.tile as ct

from ..forms import cub_names, element
from ..forms.staging import Staging
from ..inputs import tile_guards
from ..inputs.tile_fragment import (
    MAX_SHARED_BYTES,
    TileFragment,
    byte_size,
    callee_fragment,
)
from ..system import _cutile as cu
from ..tracing.trace import call_error, current_session, describe, emit_call, loc_str
from ..types import (
    ELEMENT_TYPES,
    ElementType,
    Signature,
    TileType,
    pointer,
    result_tiles,
)

_INT32 = ELEMENT_TYPES["int32"]


def _smaller_tiles(buffers) -> str:
    """The largest halving of every tile that fits :data:`MAX_SHARED_BYTES`, as a hint
    (CUB's or the callee's own shared memory comes on top of it, checked at link)."""
    k = 1
    while sum(-(-n // (1 << k)) * byte_size(e) for e, n in buffers) > MAX_SHARED_BYTES:
        k += 1
    return (f": the nearest that fits has {1 << k} times fewer elements per tile "
            f"({', '.join(f'{max(1, n >> k)} x {e}' for e, n in buffers)})")


def emit_tile_call(ext, args, loc):
    """The IR of one call of ``ext`` (a block-scope extern with tile parameters or result)
    with argument Vars ``args``: the store sites, the block site, the load site. Returns the
    result Var (None for void).

    Raises:
        SpliceCallError: an argument that does not fit the signature (a tile of another
            dtype or shape, a tile where a scalar goes)."""
    session = current_session()
    if session is None:
        return emit_call(ext, args, loc)    # its "only inside @splice.kernel" error
    sig: Signature = ext.signature
    if len(args) != len(sig.args):
        raise call_error(ext, f"expected {len(sig.args)} argument(s) for signature {sig}, "
                              f"got {len(args)}", loc)
    tiles, scalars, positions = [], [], []
    for i, (var, t) in enumerate(zip(args, sig.args)):
        if isinstance(t, TileType):
            tiles.append((i, var, t, _tile_shape(ext, i, var, t, loc)))
        else:
            scalars.append(var)
            positions.append(i)
    results = [(r, r.shape or tiles[0][3]) for r in result_tiles(sig)]
    where = loc_str(loc)
    group = session.next_tile_group()
    stores, call, loads = _staging_externs(ext, tiles, results, group, where, loc)
    for (_i, var, _t, shape), store in zip(tiles, stores):
        emit_call(store, (var, _row_major_index(shape)), loc)
    out = emit_call(call, tuple(scalars), loc, shown=(ext, positions))
    if sig.result is None:
        session.void_calls.append((ext, where))
    if not loads:
        return out
    outs = tuple(emit_call(load, (_row_major_index(shape),), loc)
                 for load, (_r, shape) in zip(loads, results))
    return outs[0] if isinstance(sig.result, TileType) else cu.build_tuple(outs)


def _tile_shape(ext, i, var, t: TileType, loc) -> tuple[int, ...]:
    ty = var.get_type()
    if not isinstance(ty, cu.TileTy) or ty.shape == ():
        raise call_error(ext, f"argument {i + 1} is {describe(var)}, but the signature "
                              f"{ext.signature} takes a tile ({t}) there", loc)
    if ty.dtype != t.elem.dtype:
        raise call_error(ext, f"argument {i + 1} is {describe(var)}, but the signature "
                              f"{ext.signature} takes {t}; convert it with "
                              f".astype(ct.{t.elem.name}) first", loc)
    shape = tuple(ty.shape)
    if t.shape is not None and shape != t.shape:
        raise call_error(ext, f"argument {i + 1} is {describe(var)}, but the signature "
                              f"{ext.signature} takes exactly the shape {t.shape}", loc)
    return shape


def _row_major_index(shape):
    """The int32 tile of ``shape`` whose element at (i0, i1...) is its row-major index."""
    idx = cu.arange(math.prod(shape), ct.int32)
    return idx if len(shape) == 1 else cu.reshape(idx, tuple(shape))


def _staging_externs(ext, tiles, results, group: int, where: str, loc):
    """The externs of one tile call, all of one :class:`~splice.inputs.tile_fragment.TileFragment`:
    (the store externs, the call extern, the load externs). ``tiles``: (argument position, Var,
    type, shape) of each tile argument; ``results``: (type, shape) of each tile result."""
    sig: Signature = ext.signature
    abi_args: list[ElementType] = []
    shapes: list[tuple[int, ...] | None] = []
    buffers: list[tuple[ElementType, int]] = []
    positions: list[int] = []
    tile_shapes = {i: shape for i, _var, _t, shape in tiles}
    for i, t in enumerate(sig.args):
        if isinstance(t, TileType):
            positions.append(len(abi_args))
            abi_args.append(pointer(t.elem))
            shapes.append(tile_shapes[i])
            buffers.append((t.elem, math.prod(tile_shapes[i])))
        else:
            abi_args.append(t)
            shapes.append(None)
    for r, shape in results:
        positions.append(len(abi_args))
        abi_args.append(pointer(r.elem))
        shapes.append(shape)
        buffers.append((r.elem, math.prod(shape)))
    result = None if results else sig.result
    need = sum(n * byte_size(elem) for elem, n in buffers)
    if need > MAX_SHARED_BYTES:
        raise call_error(ext, f"its tiles need {need} bytes of shared memory (an in buffer "
                              f"per tile argument, an out buffer per result: "
                              f"{', '.join(f'{n} x {e}' for e, n in buffers)}), more than "
                              f"any GPU gives a block ({MAX_SHARED_BYTES} on sm_90); use "
                              f"smaller tiles{_smaller_tiles(buffers)}", loc)
    abi = Signature(tuple(abi_args), result)
    base, callee = callee_fragment(ext, abi, tuple(shapes), where)
    public = cub_names.call_of(f"{ext.cxx_name or ext.name} at {where}")
    frag = TileFragment(base=base, callee=callee, abi=abi, group=group,
                        buffers=tuple(buffers), tile_positions=tuple(positions), where=where,
                        results=len(results), scope=str(ext.form.scope),
                        guard_bytes=tile_guards.GUARD_BYTES if tile_guards.enabled() else 0,
                        call_name=" at ".join(public) if public else "")
    label = f"'{ext.name}' at {where}"

    def derived(symbol, name, dsig, elements, what, form=element.ATOMIC):
        own = form is ext.form      # the call itself: the extern's form (its scope)
        options = dataclasses.replace(ext.options, pure=False, form=form,
                                      inline=ext.inline if own else "auto")
        return dataclasses.replace(
            ext, name=f"{ext.name} ({name})", symbol=frag.symbol(symbol), signature=dsig,
            fragment=frag, options=options, cxx_name=None,
            staging=Staging(symbol.rstrip("0123456789"), group, elements, what,
                            ext.block_threads if own else None))
    stores = [derived(f"store{k}", f"tile argument {i + 1} into shared memory",
                      Signature((t.elem, _INT32), None), math.prod(shape),
                      f"tile argument {i + 1} of {label}")
              for k, (i, _var, t, shape) in enumerate(tiles)]
    call = derived("call", f"{ext.form.scope} call on the staged tiles",
                   Signature(sig.scalar_args, result), 0, f"the call of {label}", ext.form)
    several = len(results) > 1
    loads = [derived(f"load{j}", f"tile result{f' {j + 1}' if several else ''} from shared "
                                 f"memory", Signature((_INT32,), r.elem), math.prod(shape),
                     f"the tile result{f' {j + 1}' if several else ''} of {label}")
             for j, (r, shape) in enumerate(results)]
    return stores, call, loads
