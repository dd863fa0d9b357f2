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

import splice
from support import kernels as K
from support import plain_kernels as P
from support.exact import bf16, fma
from support.ptx_exec import run

f16, f32, f64, i32, i64, u32 = ct.float16, ct.float32, ct.float64, ct.int32, ct.int64, ct.uint32
ARCHS = ("sm_80", "sm_90")
N = 256


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
    b = _compile(P.f32_arith, (_arr(f32), _arr(f32), _arr(f32), 128), arch)
    launch = _run(b, (N // 128,), x, y, out)
    assert not launch.approx        # div.rn.f32: exact
    np.testing.assert_array_equal(out, P.f32_arith_ref(x, y))


@pytest.mark.parametrize("arch", ARCHS)
def test_f64_arithmetic(arch, rng):
    x, y = rng.standard_normal((2, N))
    out = np.zeros(N)
    b = _compile(P.f64_arith, (_arr(f64), _arr(f64), _arr(f64), 128), arch)
    launch = _run(b, (N // 128,), x, y, out)
    assert not launch.approx
    np.testing.assert_array_equal(out, P.f64_arith_ref(x, y))


@pytest.mark.parametrize("arch", ARCHS)
def test_int_arithmetic(arch, rng):
    x = rng.integers(-1000, 1000, N).astype(np.int32)
    y = rng.integers(1, 50, N).astype(np.int32) * rng.choice([-1, 1], N).astype(np.int32)
    out = np.zeros(N, np.int32)
    b = _compile(P.int_arith, (_arr(i32), _arr(i32), _arr(i32), 128), arch)
    _run(b, (N // 128,), x, y, out)
    np.testing.assert_array_equal(out, P.int_arith_ref(x, y))


@pytest.mark.parametrize("arch", ARCHS)
def test_conversions(arch, rng):
    x = (rng.standard_normal(N) * 3).astype(np.float32)
    x[:4] = [0.0, -0.0, 65504.0 * 2, 1e-8]
    o16 = np.zeros(N, np.float16)
    obf = np.zeros(N, np.uint16)
    oi = np.zeros(N, np.int32)
    ou8 = np.zeros(N, np.uint8)
    b = _compile(P.conversions, (_arr(f32), _arr(f16), _arr(ct.bfloat16), _arr(i32),
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
    b = _compile(P.where_compare, (_arr(i64), _arr(i64), _arr(i64), 128), arch)
    _run(b, (N // 128,), x, y, out)
    np.testing.assert_array_equal(out, np.where(x > y, x - y, np.where(x == y, 0, y * 2)))


@pytest.mark.parametrize("arch", ARCHS)
def test_row_reduction_across_the_block(arch, rng):
    rows, n = 3, 512
    x = rng.integers(-100, 100, (rows, n)).astype(np.float32)   # exact sums in any order
    s = np.zeros(rows, np.float32)
    m = np.zeros(rows, np.float32)
    b = _compile(P.row_reduce, (_arr(f32, 2), _arr(f32), _arr(f32), n), arch)
    _run(b, (rows,), x, s, m)
    np.testing.assert_array_equal(s, x.sum(axis=1))
    np.testing.assert_array_equal(m, x.max(axis=1))


@pytest.mark.parametrize("arch", ARCHS)
def test_2d_tiles_transposed_with_a_scalar(arch, rng):
    tm, tn = 16, 32
    x = rng.standard_normal((2 * tm, 3 * tn)).astype(np.float32)
    out = np.zeros((3 * tn, 2 * tm), np.float32)
    b = _compile(P.tile_2d, (_arr(f32, 2), _arr(f32, 2), K.scalar(f32), tm, tn), arch)
    _run(b, (2, 3), x, out, 1.5)
    np.testing.assert_array_equal(out, fma(x, np.float32(1.5), np.float32(1)).T)


@pytest.mark.parametrize("arch", ARCHS)
def test_loop_over_tiles(arch, rng):
    x = rng.integers(-100, 100, 4 * 128).astype(np.int32)
    out = np.zeros(2 * 128, np.int32)
    b = _compile(P.loop_tiles, (_arr(i32), _arr(i32), 128), arch)
    _run(b, (2,), x, out)
    want = x.reshape(4, 128).sum(axis=0)
    np.testing.assert_array_equal(out, np.concatenate([want, want]))


@pytest.mark.parametrize("arch", ARCHS)
def test_cumsum(arch, rng):
    x = rng.integers(-100, 100, N).astype(np.int32)
    out = np.zeros(N, np.int32)
    b = _compile(P.cumsum_kernel, (_arr(i32), _arr(i32), 128), arch)
    _run(b, (N // 128,), x, out)
    np.testing.assert_array_equal(out, np.concatenate([np.cumsum(x[:128]),
                                                       np.cumsum(x[128:])]))


@pytest.mark.parametrize("arch", ARCHS)
def test_atomic_add(arch, rng):
    x = rng.integers(0, 1000, N).astype(np.int32)
    counts = np.zeros(8, np.int32)
    b = _compile(P.atomic_count, (_arr(i32), _arr(i32), 128), arch)
    _run(b, (N // 128,), x, counts)
    np.testing.assert_array_equal(counts, np.bincount(x & 7, minlength=8))


@pytest.mark.parametrize("arch", ARCHS)
def test_approximate_exp_is_reported(arch, rng):
    x = rng.standard_normal(N).astype(np.float32)
    out = np.zeros(N, np.float32)
    b = _compile(P.exp_kernel, (_arr(f32), _arr(f32), 128), arch)
    launch = _run(b, (N // 128,), x, out)
    assert "ex2.f32" in launch.approx
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_wrong_arguments_are_refused():
    b = _compile(P.exp_kernel, (_arr(f32), _arr(f32), 128), "sm_80")
    x = np.zeros(N, np.float32)
    with pytest.raises(TypeError, match="leave out ct.Constant"):
        _run(b, (2,), x, x, 128)


def test_64_bit_index_parameters_bind():
    """index_dtype=int64: extents and strides are .u64 entry parameters."""
    from cuda.tile.compilation import ArrayConstraint

    def arr64(dtype, ndim):
        return ArrayConstraint(dtype, ndim, index_dtype=ct.int64, stride_lower_bound_incl=0,
                               alias_groups=(), may_alias_internally=False,
                               stride_constant=(None,) * (ndim - 1) + (1,))
    tm, tn = 16, 32
    x = np.random.default_rng(3).standard_normal((2 * tm, 3 * tn)).astype(np.float32)
    out = np.zeros((3 * tn, 2 * tm), np.float32)
    b = _compile(P.tile_2d, (arr64(f32, 2), arr64(f32, 2), K.scalar(f32), tm, tn), "sm_80")
    entry = b["ptx"][b["ptx"].index(".entry"):]
    assert ".param .u64" in entry[:entry.index(")")].replace(".u64 .ptr", "")
    _run(b, (2, 3), x, out, 1.5)
    np.testing.assert_array_equal(out, fma(x, np.float32(1.5), np.float32(1)).T)
