"""Launching a compiled kernel on the executor with NumPy arguments, the way cuTile's
launcher binds them.

cuTile's calling convention (``cutile_python_v1``; cuda-tile 1.7 ``ArrayTy``: an array
parameter is the aggregate ``(base_ptr, *shape, *strides)``) gives each array argument
``1 + 2 * ndim`` entry parameters: the base address (``.u64``), the extent of every axis,
then the stride of every axis in elements (``.u32`` for ``index_dtype=int32``, ``.u64`` for
int64); a scalar is one parameter of its type. ``Constant`` arguments are compiled in and are
not parameters. The widths are read from the entry's ``.param`` list, so a kernel compiled
for 64-bit indices binds too.
"""

from __future__ import annotations

import numpy as np

from splice.ptxtools.ptx import Function

from . import values as V
from .decode import Program, entry_param_offsets
from .machine import Launch
from .memory import ExecError, GlobalMemory
from .values import TYPES

_PROGRAMS: dict[str, Program] = {}


class Pointer:
    """An array passed by its address, as a 64-bit scalar (``ct.ScalarInt64``, a pointer
    parameter of a ``splice.asm`` snippet): copied in, and back after the launch."""

    def __init__(self, array: np.ndarray):
        if not array.flags.c_contiguous:
            raise TypeError("Pointer: pass a C-contiguous array")
        self.array = array


def program(ptx: str) -> Program:
    """The decoded program of a PTX text (memoised: one decode per text per process)."""
    p = _PROGRAMS.get(ptx)
    if p is None:
        if len(_PROGRAMS) > 64:
            _PROGRAMS.clear()
        p = _PROGRAMS[ptx] = Program(ptx)
    return p


def block_dims(fn: Function) -> tuple[int, int, int]:
    """The entry's ``.reqntid`` (tileiras always states one)."""
    toks = [t.text for t in fn.header.tokens]
    if ".reqntid" not in toks:
        raise ValueError(f"{fn.name} has no .reqntid: pass block=")
    i = toks.index(".reqntid") + 1
    dims = []
    while i < len(toks) and (toks[i].isdigit() or toks[i] == ","):
        if toks[i] != ",":
            dims.append(int(toks[i]))
        i += 1
    return tuple(dims + [1] * (3 - len(dims)))   # type: ignore[return-value]


def run(ptx: str, kernel: str, grid, *args, block=None, dynamic_smem: int = 0,
        approx: str = "exact") -> Launch:
    """Run entry ``kernel`` of the PTX module ``ptx`` over ``grid`` (CTA after CTA) with
    cuTile-bound arguments: NumPy arrays (copied in, and copied back into the same arrays
    after the launch) and scalars (Python or NumPy numbers). Pass the kernel's runtime
    arguments in order, without its ``ct.Constant`` ones. ``approx="bound"`` returns every
    approximate instruction's result off by its whole documented error (a comparison's
    tolerance is then checked too).

    Returns:
        Launch: ``.approx`` (approximate instructions that ran), ``.blocks_run``.

    Raises:
        ExecError: anything the GPU would not do reliably (see :mod:`.memory`).
        TypeError: arguments that do not match the entry's parameters.
    """
    prog = program(ptx)
    fn = prog.module.functions.get(kernel)
    if fn is None or fn.kind != ".entry":
        raise TypeError(f"no entry {kernel!r} in the PTX")
    memory = GlobalMemory()
    params, arrays = bind(fn, args, memory)
    launch = Launch(prog, kernel, grid, block or block_dims(fn), params, memory, dynamic_smem,
                    approx)
    launch.run()
    for base, a in arrays:
        buf = memory.buffer(base)
        a[...] = np.frombuffer(bytes(buf), dtype=a.dtype).reshape(a.shape)
    return launch


def bind(fn: Function, args, memory: GlobalMemory) -> tuple[bytes, list]:
    """The parameter buffer of ``args`` and the (address, array) of each array."""
    offs, size = entry_param_offsets(fn)
    buf = bytearray(size)
    params = list(fn.params)
    arrays: list[tuple[int, np.ndarray]] = []
    bases: dict[int, int] = {}

    def placed(a: np.ndarray, what: str) -> int:
        """The array's address: one allocation per array object (an array passed twice
        is one buffer, as on the GPU)."""
        if id(a) not in bases:
            bases[id(a)] = memory.alloc(a.tobytes(), what)
            arrays.append((bases[id(a)], a))
        return bases[id(a)]

    k = 0
    for i, a in enumerate(args):
        if isinstance(a, Pointer):
            if k >= len(params):
                raise TypeError(_count_error(fn, args))
            base = placed(a.array, f"argument {i} (a pointer)")
            _put(buf, offs[params[k].name], params[k].type, base)
            k += 1
        elif isinstance(a, np.ndarray):
            need = 1 + 2 * a.ndim
            if k + need > len(params):
                raise TypeError(_count_error(fn, args))
            if not a.flags.c_contiguous:
                raise TypeError(f"argument {i}: pass a C-contiguous array (a strided view "
                                f"is bound by its base array's extents: not modelled)")
            base = placed(a, f"argument {i} ({a.dtype}{list(a.shape)})")
            strides = [s // a.itemsize for s in a.strides]
            vals = [base, *a.shape, *strides]
            for v, p in zip(vals, params[k:k + need]):
                _put(buf, offs[p.name], p.type, int(v))
            k += need
        else:
            if k >= len(params):
                raise TypeError(_count_error(fn, args))
            p = params[k]
            _put(buf, offs[p.name], p.type, _scalar_bits(a, p.type, i))
            k += 1
    rest = params[k:]
    if rest and all(p.type == ".b8" and p.array for p in rest):
        raise ExecError(f"{fn.name} takes {len(rest)} tensor maps (TMA descriptors, filled by "
                        f"cuTile's host callback): TMA is out of the executor's scope")
    if k != len(params):
        raise TypeError(_count_error(fn, args))
    return bytes(buf), arrays


def _count_error(fn: Function, args) -> str:
    return (f"{fn.name} has {len(fn.params)} parameters ({', '.join(p.type for p in fn.params)})"
            f"; the {len(args)} arguments do not bind to them (an array takes 1 + 2 * ndim, a "
            f"scalar 1; leave out ct.Constant arguments)")


def _put(buf: bytearray, off: int, ty: str, v: int) -> None:
    n = max(TYPES[ty.lstrip(".")][0] // 8, 1)
    buf[off:off + n] = (v & ((1 << (8 * n)) - 1)).to_bytes(n, "little")


def _scalar_bits(a, ty: str, i: int) -> int:
    t = ty.lstrip(".")
    if isinstance(a, np.generic):
        if a.dtype.kind == "f" or a.dtype.itemsize * 8 == TYPES[t][0]:
            return int(np.asarray(a).view(f"u{a.dtype.itemsize}"))
        a = a.item()
    if isinstance(a, (bool, np.bool_)):
        return int(a)
    if isinstance(a, int):
        return a
    if isinstance(a, float):
        if t == "f32":
            return V.f2b(a)
        if t == "f64":
            return V.d2b(a)
        raise TypeError(f"argument {i}: a Python float for a {ty} parameter (pass a NumPy "
                        f"scalar of the kernel's dtype)")
    raise TypeError(f"argument {i}: cannot bind {type(a).__name__} to a {ty} parameter")


def run_build(build, grid, *args, **kw) -> Launch:
    """:func:`run` on what splice hands to ptxas: ``build["spliced_ptx"]`` (a
    :class:`splice.Build` from ``splice.compile``), entry ``build.symbol``."""
    return run(build["spliced_ptx"], build.symbol, grid, *args, **kw)
