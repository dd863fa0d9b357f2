"""Running a batch of cases on both sides and comparing.

A batch of :class:`~.program.Case` becomes one cuTile kernel (:mod:`.device`: one
``splice.cuda`` call per case, each storing its results in its own slots of one output
array per dtype), compiled by splice for sm_90 and run on the CPU PTX executor, and one C++
program (:mod:`.host`: each case a function, called on every element), compiled by the host
C++ compiler; both read the same inputs (:func:`inputs`) and their outputs are compared:
integers and bools bit for bit, floats bit for bit except that any NaN equals any NaN (a
GPU's NaN is canonical, x86's keeps a payload; neither is wrong).

A case splice refuses (a ``SpliceError``: the kernel line of the call names the case), that
the executor cannot run, or that the host compiler rejects (the ``#line`` of each case names
it) is a finding too; the rest of the batch is run again without it.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from . import cmodel as C
from .generate import float_values, int_values
from .program import Case, Input

#: Elements per block and blocks: each case runs on TILE * BLOCKS elements.
TILE, BLOCKS = 64, 2
N = TILE * BLOCKS


@dataclasses.dataclass
class Layout:
    """Where a batch's inputs and outputs live.

    Attributes:
        arrays: input arrays (key -> dtype), in parameter order; read as tiles, pointers.
        scalars: scalar parameters (key -> dtype).
        outputs: output arrays (dtype -> number of slots of N elements).
        sources: per case, per input, the key it reads (None: a constant).
        slots: per case, per result, (dtype, slot).
        explicit: the keys whose values a case gives (key -> (dtype, values)).
        cases: the batch.
        scalar_forms: the forms a scalar may take in the kernel (:meth:`scalar_form`); a
            GPU launch types scalar parameters from Python values, so the GPU test passes
            every scalar as a tile.
    """

    arrays: dict[str, str]
    scalars: dict[str, str]
    outputs: dict[str, int]
    sources: list[list[str | None]]
    slots: list[list[tuple[str, int]]]
    explicit: dict[str, tuple[str, tuple]]
    cases: list[Case] = dataclasses.field(default_factory=list)
    scalar_forms: tuple[str, ...] = ("param", "tile0", "tile1")

    def scalar_form(self, key: str) -> str:
        """How scalar ``key`` reaches the kernel: ``param`` (a scalar parameter),
        ``tile0`` (an array loaded as a 0-d tile), ``tile1`` (loaded as a (1,) tile, which
        broadcasts): one of :attr:`scalar_forms`, by the key (a case's own scalar: by its
        name, type and value, so that it keeps its form in any batch)."""
        name = repr((key.split("_")[-1], *self.explicit[key])) if key in self.explicit else key
        return self.scalar_forms[zlib.crc32(name.encode()) % len(self.scalar_forms)]

    def tiles(self) -> list[str]:
        """The array keys some case reads as a tile."""
        return [k for k in self.arrays if any(
            src == k and inp.kind == "tile"
            for c, srcs in zip(self.cases, self.sources) for inp, src in zip(c.inputs, srcs))]


def layout(cases: list[Case], scalar_forms=("param", "tile0", "tile1")) -> Layout:
    lay = Layout({}, {}, {}, [], [], {}, list(cases), tuple(scalar_forms))
    for k, case in enumerate(cases):
        srcs: list[str | None] = []
        for inp in case.inputs:
            srcs.append(_source(lay, k, inp))
        lay.sources.append(srcs)
        slots = []
        for dt in case.results:
            slots.append((dt, lay.outputs.get(dt, 0)))
            lay.outputs[dt] = slots[-1][1] + 1
        lay.slots.append(slots)
    return lay


def _source(lay: Layout, k: int, inp: Input) -> str | None:
    if inp.kind == "const":
        return None
    array = inp.kind in ("tile", "array")
    if inp.values is None:
        key = f"in_{inp.dtype}_{inp.variant}" if array else f"s_{inp.dtype}"
    else:
        key = f"in_c{k}_{inp.name}" if array else f"s_c{k}_{inp.name}"
        lay.explicit[key] = (inp.dtype, inp.values)
    (lay.arrays if array else lay.scalars)[key] = inp.dtype
    return key


# ------------------------------------------------------------------------------------ data

def pool(dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` values of ``dtype``: edge values, small values, and values over the whole
    range (floats: special values, halves, scaled normals, random bit patterns)."""
    t = C.TYPES[dtype]
    if t.kind == "b":
        return rng.random(n) < 0.5
    pick = rng.random(n)
    if t.is_int:
        edge = np.array(int_values(t), dtype=object)[rng.integers(0, len(int_values(t)), n)]
        small = rng.integers(max(t.lo, -20), min(t.hi, 20), n, endpoint=True)
        wide = rng.integers(t.lo, t.hi, n, endpoint=True, dtype=np.dtype(dtype))
        out = np.where(pick < 0.4, edge, np.where(pick < 0.7, small, wide.astype(object)))
        return np.array([min(max(int(v), t.lo), t.hi) for v in out], dtype=dtype)
    specials = float_values(t) + [np.inf, -np.inf, np.nan]
    special = np.array(specials, dtype=dtype)[rng.integers(0, len(specials), n)]
    halves = (rng.integers(-40, 41, n) / 2).astype(dtype)
    scaled = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 7, n)).astype(dtype)
    utype = np.dtype(f"u{t.bits // 8}")
    bits = rng.integers(0, np.iinfo(utype).max, n, endpoint=True, dtype=utype).view(dtype)
    return np.where(pick < 0.35, special, np.where(pick < 0.6, halves,
                                                   np.where(pick < 0.85, scaled, bits)))


def inputs(lay: Layout, seed: int) -> dict[str, np.ndarray]:
    """Every input array (N elements) and scalar (one element) of the batch. A pool key's
    values depend only on ``seed`` and the key, so a case alone gets the values it had in
    its batch."""
    out = {}
    for key, dt in [*lay.arrays.items(), *lay.scalars.items()]:
        n = N if key in lay.arrays else 1
        if key in lay.explicit:
            vals = lay.explicit[key][1]
            out[key] = np.resize(np.array(vals, dtype=object), n).astype(dt)
        else:
            rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
            out[key] = pool(dt, n, rng)
    return out


# ------------------------------------------------------------------------------- findings

@dataclasses.dataclass
class Finding:
    """A case on which the two sides disagree, or that one side could not run.

    Attributes:
        kind: ``mismatch`` (different results), ``refused`` (splice raised), ``executor``
            (the CPU executor raised), ``host`` (the host compiler or the host run failed:
            a generator bug, e.g. undefined behaviour UBSan caught).
        case: the case.
        detail: what differed (elements, inputs, both results) or the error.
        element: a mismatching element (``mismatch``), else None.
    """

    kind: str
    case: Case
    detail: str
    element: int | None = None


def compare(lay: Layout, k: int, dev: dict, host: dict, data: dict) -> Finding | None:
    """The first mismatching result of case ``k``, with up to four elements."""
    case = lay.cases[k]
    for r, (dt, slot) in enumerate(lay.slots[k]):
        d, h = (x[dt][slot * N:(slot + 1) * N] for x in (dev, host))
        bad = np.flatnonzero(~same(d, h))
        if bad.size:
            lines = [f"result {r} ({dt}): {bad.size} of {N} elements differ"]
            for e in bad[:4]:
                lines.append(f"  element {e}: inputs {element_inputs(lay, k, data, e)}; "
                             f"splice+executor {show(d[e])}, host C++ {show(h[e])}")
            return Finding("mismatch", case, "\n".join(lines), int(bad[0]))
    return None


def same(d: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Elementwise: equal bits, or (floats) both NaN."""
    if d.dtype.kind == "f":
        u = np.dtype(f"u{d.dtype.itemsize}")
        return (d.view(u) == h.view(u)) | (np.isnan(d) & np.isnan(h))
    return d.view(np.uint8 if d.dtype == np.bool_ else d.dtype) == \
        h.view(np.uint8 if h.dtype == np.bool_ else h.dtype)


def show(v) -> str:
    """A value, with its bits for floats."""
    if isinstance(v, np.floating):
        u = np.dtype(f"u{v.dtype.itemsize}")
        return f"{v!r} (0x{int(np.asarray(v).view(u)):0{v.dtype.itemsize * 2}x})"
    return repr(v.item() if hasattr(v, "item") else v)


def element_inputs(lay: Layout, k: int, data: dict, e: int) -> dict:
    """Case ``k``'s input values at element ``e`` (an array input: its first eight)."""
    out = {}
    for inp, key in zip(lay.cases[k].inputs, lay.sources[k]):
        if key is None:
            out[inp.name] = inp.values[0]
        elif inp.kind == "array":
            out[inp.name] = tuple(v.item() for v in data[key][:8])
        else:
            out[inp.name] = data[key][e if inp.kind == "tile" else 0].item()
    return out


def with_values(case: Case, values: dict) -> Case:
    """``case`` with explicit input values (:func:`element_inputs`'s), so that it runs
    alone, on any seed, as it ran in its batch at that element."""
    return dataclasses.replace(case, inputs=tuple(
        dataclasses.replace(i, values=v if isinstance(v, tuple) else (v,), variant=0)
        for i, v in ((i, values[i.name]) for i in case.inputs)))
