"""Plain cuTile kernels (``@ct.kernel``, no splice) whose results NumPy computes exactly:
the executor's own check (``tests/test_executor_cutile.py``) and, on a GPU, the comparison of
the GPU's results with the executor's (``tests/test_executor_gpu.py``). Loads without TMA
(``allow_tma=False``): tileiras does not warp-specialise them on sm_90."""

from __future__ import annotations

import cuda.tile as ct
import numpy as np

from .exact import fma

ConstInt = ct.Constant[int]
f16, f32, f64, i32, i64 = ct.float16, ct.float32, ct.float64, ct.int32, ct.int64


def _load(x, i, tile):
    return ct.load(x, index=(i,), shape=(tile,), allow_tma=False)


@ct.kernel
def f32_arith(x, y, out, TILE: ConstInt):
    i = ct.bid(0)
    a, b = _load(x, i, TILE), _load(y, i, TILE)
    ct.store(out, index=(i,), tile=(a * b + a) / (b + 3.0) - ct.maximum(a, b))


def f32_arith_ref(x, y):
    return fma(x, y, x) / (y + np.float32(3)) - np.maximum(x, y)


@ct.kernel
def f64_arith(x, y, out, TILE: ConstInt):
    i = ct.bid(0)
    a, b = _load(x, i, TILE), _load(y, i, TILE)
    ct.store(out, index=(i,), tile=ct.sqrt(a * a + b * b) / (ct.abs(b) + 1.0))


def f64_arith_ref(x, y):
    return np.sqrt(fma(x, x, y * y)) / (np.abs(y) + 1.0)


@ct.kernel
def int_arith(x, y, out, TILE: ConstInt):
    i = ct.bid(0)
    a, b = _load(x, i, TILE), _load(y, i, TILE)
    q = ct.floordiv(a, b)
    r = ct.mod(a, b)
    ct.store(out, index=(i,), tile=q * 1000 + r + ((a ^ b) & 0xff) + (a >> 2) - (b << 3))


def int_arith_ref(x, y):
    return (x // y) * 1000 + x % y + ((x ^ y) & 0xff) + (x >> 2) - (y << 3)


@ct.kernel
def conversions(x, o16, obf, oi, ou8, TILE: ConstInt):
    i = ct.bid(0)
    a = _load(x, i, TILE)
    ct.store(o16, index=(i,), tile=ct.astype(a, f16))
    ct.store(obf, index=(i,), tile=ct.astype(a, ct.bfloat16))
    ct.store(oi, index=(i,), tile=ct.astype(a * 100.0, i32))
    ct.store(ou8, index=(i,), tile=ct.astype(ct.astype(a * 10.0, i32), ct.uint8))


@ct.kernel
def where_compare(x, y, out, TILE: ConstInt):
    i = ct.bid(0)
    a, b = _load(x, i, TILE), _load(y, i, TILE)
    ct.store(out, index=(i,), tile=ct.where(a > b, a - b, ct.where(a == b, 0, b * 2)))


@ct.kernel
def row_reduce(x, s, m, TN: ConstInt):
    i = ct.bid(0)
    t = ct.load(x, index=(i, 0), shape=(1, TN), allow_tma=False)
    ct.store(s, index=(i,), tile=ct.sum(t, axis=1))
    ct.store(m, index=(i,), tile=ct.max(t, axis=1))


@ct.kernel
def tile_2d(x, out, a: float, TM: ConstInt, TN: ConstInt):
    bm, bn = ct.bid(0), ct.bid(1)
    t = ct.load(x, index=(bm, bn), shape=(TM, TN), allow_tma=False)
    ct.store(out, index=(bn, bm), tile=ct.transpose(t * a + 1.0))


@ct.kernel
def loop_tiles(x, out, TILE: ConstInt):
    # each block sums every tile of x
    n = ct.num_tiles(x, axis=0, shape=(TILE,))
    acc = ct.full((TILE,), 0, dtype=ct.int32)
    for k in range(n):
        acc = acc + _load(x, k, TILE)
    ct.store(out, index=(ct.bid(0),), tile=acc)


@ct.kernel
def cumsum_kernel(x, out, TILE: ConstInt):
    i = ct.bid(0)
    ct.store(out, index=(i,), tile=ct.cumsum(_load(x, i, TILE), axis=0))


@ct.kernel
def atomic_count(x, counts, TILE: ConstInt):
    t = _load(x, ct.bid(0), TILE)
    ct.atomic_add(counts, t & 7, 1)


@ct.kernel
def exp_kernel(x, out, TILE: ConstInt):
    i = ct.bid(0)
    ct.store(out, index=(i,), tile=ct.exp(_load(x, i, TILE)))
