"""The executor checked on plain cuTile kernels (``@ct.kernel``, no splice): tileiras's own
PTX (``build["ptx"]``) run on the CPU must match NumPy before any spliced kernel is trusted
to it. Kernels cover elementwise integer, bit and float arithmetic, conversions between
every element type, reductions and scans across the block, 2-D tiles and strides, loops over
tiles, scalar arguments and atomics, on sm_80 and on sm_90 (``allow_tma=False``: no warp
specialisation)."""

from __future__ import annotations

import cuda.tile as ct
import numpy as np
import pytest

from support import kernels as K
from support.exact import bf16, fma
from support.ptx_exec import run
import splice

ConstInt = ct.Constant[int]
f16, f32, f64, i32, i64, u32 = ct.float16, ct.float32, ct.float64, ct.int32, ct.int64, ct.uint32
ARCHS = ("sm_80", "sm_90")
N = 256


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


def _arr(dtype, ndim=1):
    return K.array(dtype, ndim)


def _compile(kernel, params, arch):
    return splice.compile(kernel, K.signature(*params), arch)


def _run(b, grid, *args):
    return run(b["ptx"], b.symbol, grid, *args)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.mark.parametrize("arch", ARCHS)
def test_f32_arithmetic(arch, rng):
    x, y = rng.standard_normal((2, N)).astype(np.float32)
    out = np.zeros(N, np.float32)
    b = _compile(f32_arith, (_arr(f32), _arr(f32), _arr(f32), 128), arch)
    launch = _run(b, (N // 128,), x, y, out)
    assert not launch.approx        # div.rn.f32: exact
    np.testing.assert_array_equal(out, f32_arith_ref(x, y))


@pytest.mark.parametrize("arch", ARCHS)
def test_f64_arithmetic(arch, rng):
    x, y = rng.standard_normal((2, N))
    out = np.zeros(N)
    b = _compile(f64_arith, (_arr(f64), _arr(f64), _arr(f64), 128), arch)
    launch = _run(b, (N // 128,), x, y, out)
    assert not launch.approx
    np.testing.assert_array_equal(out, f64_arith_ref(x, y))


@pytest.mark.parametrize("arch", ARCHS)
def test_int_arithmetic(arch, rng):
    x = rng.integers(-1000, 1000, N).astype(np.int32)
    y = rng.integers(1, 50, N).astype(np.int32) * rng.choice([-1, 1], N).astype(np.int32)
    out = np.zeros(N, np.int32)
    b = _compile(int_arith, (_arr(i32), _arr(i32), _arr(i32), 128), arch)
    _run(b, (N // 128,), x, y, out)
    np.testing.assert_array_equal(out, int_arith_ref(x, y))


@pytest.mark.parametrize("arch", ARCHS)
def test_conversions(arch, rng):
    x = (rng.standard_normal(N) * 3).astype(np.float32)
    x[:4] = [0.0, -0.0, 65504.0 * 2, 1e-8]
    o16 = np.zeros(N, np.float16)
    obf = np.zeros(N, np.uint16)
    oi = np.zeros(N, np.int32)
    ou8 = np.zeros(N, np.uint8)
    b = _compile(conversions, (_arr(f32), _arr(f16), _arr(ct.bfloat16), _arr(i32),
                               _arr(ct.uint8), 128), arch)
    _run(b, (N // 128,), x, o16, obf, oi, ou8)
    with np.errstate(over="ignore"):
        want16 = x.astype(np.float16)
    np.testing.assert_array_equal(o16.view(np.uint16), want16.view(np.uint16))
    np.testing.assert_array_equal(obf, bf16(x))
    np.testing.assert_array_equal(oi, (x * np.float32(100)).astype(np.int32))
    np.testing.assert_array_equal(ou8, (x * np.float32(10)).astype(np.int32).astype(np.uint8))


@pytest.mark.parametrize("arch", ARCHS)
def test_where_and_compare(arch, rng):
    x = rng.integers(-5, 5, N).astype(np.int64)
    y = rng.integers(-5, 5, N).astype(np.int64)
    out = np.zeros(N, np.int64)
    b = _compile(where_compare, (_arr(i64), _arr(i64), _arr(i64), 128), arch)
    _run(b, (N // 128,), x, y, out)
    np.testing.assert_array_equal(out, np.where(x > y, x - y, np.where(x == y, 0, y * 2)))


@pytest.mark.parametrize("arch", ARCHS)
def test_row_reduction_across_the_block(arch, rng):
    rows, n = 3, 512
    x = rng.integers(-100, 100, (rows, n)).astype(np.float32)   # exact sums in any order
    s = np.zeros(rows, np.float32)
    m = np.zeros(rows, np.float32)
    b = _compile(row_reduce, (_arr(f32, 2), _arr(f32), _arr(f32), n), arch)
    _run(b, (rows,), x, s, m)
    np.testing.assert_array_equal(s, x.sum(axis=1))
    np.testing.assert_array_equal(m, x.max(axis=1))


@pytest.mark.parametrize("arch", ARCHS)
def test_2d_tiles_transposed_with_a_scalar(arch, rng):
    tm, tn = 16, 32
    x = rng.standard_normal((2 * tm, 3 * tn)).astype(np.float32)
    out = np.zeros((3 * tn, 2 * tm), np.float32)
    b = _compile(tile_2d, (_arr(f32, 2), _arr(f32, 2), K.scalar(f32), tm, tn), arch)
    _run(b, (2, 3), x, out, 1.5)
    np.testing.assert_array_equal(out, fma(x, np.float32(1.5), np.float32(1)).T)


@pytest.mark.parametrize("arch", ARCHS)
def test_loop_over_tiles(arch, rng):
    x = rng.integers(-100, 100, 4 * 128).astype(np.int32)
    out = np.zeros(2 * 128, np.int32)
    b = _compile(loop_tiles, (_arr(i32), _arr(i32), 128), arch)
    _run(b, (2,), x, out)
    want = x.reshape(4, 128).sum(axis=0)
    np.testing.assert_array_equal(out, np.concatenate([want, want]))


@pytest.mark.parametrize("arch", ARCHS)
def test_cumsum(arch, rng):
    x = rng.integers(-100, 100, N).astype(np.int32)
    out = np.zeros(N, np.int32)
    b = _compile(cumsum_kernel, (_arr(i32), _arr(i32), 128), arch)
    _run(b, (N // 128,), x, out)
    np.testing.assert_array_equal(out, np.concatenate([np.cumsum(x[:128]),
                                                       np.cumsum(x[128:])]))


@pytest.mark.parametrize("arch", ARCHS)
def test_atomic_add(arch, rng):
    x = rng.integers(0, 1000, N).astype(np.int32)
    counts = np.zeros(8, np.int32)
    b = _compile(atomic_count, (_arr(i32), _arr(i32), 128), arch)
    _run(b, (N // 128,), x, counts)
    np.testing.assert_array_equal(counts, np.bincount(x & 7, minlength=8))


@pytest.mark.parametrize("arch", ARCHS)
def test_approximate_exp_is_reported(arch, rng):
    x = rng.standard_normal(N).astype(np.float32)
    out = np.zeros(N, np.float32)
    b = _compile(exp_kernel, (_arr(f32), _arr(f32), 128), arch)
    launch = _run(b, (N // 128,), x, out)
    assert "ex2.f32" in launch.approx
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_wrong_arguments_are_refused():
    b = _compile(exp_kernel, (_arr(f32), _arr(f32), 128), "sm_80")
    x = np.zeros(N, np.float32)
    with pytest.raises(TypeError, match="leave out ct.Constant"):
        _run(b, (2,), x, x, 128)
