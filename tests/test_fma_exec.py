"""The fma-marker kernels of ``support.fma`` run on the CPU executor (their sm_80 builds:
the spliced PTX) and compared bit for bit with NumPy, as ``test_fma_gpu.py`` checks them on
a GPU: special constants folded or blinded by LLVM, calls without arguments, control flow
(if/else arms merged, loops carrying results, early exits), packings up to 128 bits,
narrow results, 2-D broadcasting and reductions, masked tiles, sign flips around the
marker, ``splice.asm`` and 64-bit integer results."""

from __future__ import annotations

import numpy as np
import pytest

import splice
from support import fma as F
from support import kernels as K
from support.exact import bf16, bf16_value
from support.ptx_exec import run_build

N, TILE = 256, 128
ARCH = "sm_80"


def _run(name, grid, *args):
    kern, sig = F.CASES[name]
    return run_build(splice.compile(kern, sig(), ARCH), grid, *args)


@pytest.mark.parametrize("key", sorted(F.CONST_DD))
def test_special_constants_f64(key):
    (c0, c1), _ = F.CONST_DD[key]
    x = F.f64_inputs(N, 1)
    y = np.zeros(N, np.uint64)
    _run(f"const_dd[{c0!r},{c1!r}]", (N // TILE,), x, y)
    a = x if c0 is None else np.full(N, c0)
    b = x if c1 is None else np.full(N, c1)
    np.testing.assert_array_equal(y, F.ref_hash_dd(a, b))


@pytest.mark.parametrize("key", sorted(F.CONST_LL))
def test_special_integer_constants(key):
    (c0, c1), _ = F.CONST_LL[key]
    rng = np.random.default_rng(2)
    x = rng.integers(-2 ** 63, 2 ** 63 - 1, N, dtype=np.int64, endpoint=True)
    x[:4] = [0, -1, -2 ** 63, 0x7FF8000000000000]
    y = np.zeros(N, np.int64)
    _run(f"const_ll[{c0!r},{c1!r}]", (N // TILE,), x, y)
    a = x if c0 is None else np.full(N, c0, dtype=np.int64)
    b = x if c1 is None else np.full(N, c1, dtype=np.int64)
    ref = (a.view(np.uint64) * np.uint64(3) + b.view(np.uint64) * np.uint64(5) +
           np.uint64(1)).view(np.int64)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("key", sorted(F.FULL_DD))
def test_full_tiles_of_special_constants(key):
    (c0, c1), _ = F.FULL_DD[key]
    x = F.f64_inputs(N, 3)
    y = np.zeros(N, np.uint64)
    _run(f"full_dd[{c0!r},{c1!r}]", (N // TILE,), x, y)
    np.testing.assert_array_equal(y, F.ref_hash_dd(np.full(N, c0), np.full(N, c1)))


@pytest.mark.parametrize("key", sorted(F.CONST_FF))
def test_special_constants_f32(key):
    (c0, c1), _ = F.CONST_FF[key]
    x = F.f32_inputs(N, 4)
    y = np.zeros(N, np.uint32)
    _run(f"const_ff[{c0!r},{c1!r}]", (N // TILE,), x, y)
    a = x if c0 is None else np.full(N, c0, dtype=np.float32)
    b = x if c1 is None else np.full(N, c1, dtype=np.float32)
    np.testing.assert_array_equal(y, F.ref_hash_ff(a, b))


@pytest.mark.parametrize("key", sorted(F.CONST_4F))
def test_four_float32_arguments_with_constants(key):
    c, _ = F.CONST_4F[key]
    x = F.f32_inputs(N, 5)
    y = np.zeros(N, np.uint32)
    _run(f"const_4f[{c!r}]", (N // TILE,), x, y)
    cc = np.full(N, c, dtype=np.float32)
    np.testing.assert_array_equal(y, F.ref_hash_4f(cc, x, cc, x))


def test_all_constant_and_argument_free_calls():
    y = np.zeros(N, np.uint64)
    _run("all_const", (N // TILE,), y)
    ll = np.array([-1], np.int64).view(np.uint64) * np.uint64(3) + np.uint64(1)
    ref = F.ref_hash_dd([1.0], [-0.0]) + F.ref_hash_dd([F.NAN], [0.0]) + ll
    np.testing.assert_array_equal(y, np.broadcast_to(ref, (N,)))
    f = np.zeros(N, np.float32)
    _run("no_args", (N // TILE,), f)
    np.testing.assert_array_equal(f, np.full(N, 42.5, np.float32))


@pytest.mark.parametrize("name", sorted(F.CONTROL))
def test_control_flow(name):
    x = F.f64_inputs(N, 6)
    zz = F.f64_inputs(N, 7)[::-1].copy()
    if name in ("loop_carried_from_zero_f64", "loop_carried_f32"):
        # as on the GPU: NaN payloads and subnormal roundings are not what is tested here
        x[np.isnan(x) | (np.abs(x) < 1e-30)] = 0.25
        x[np.abs(x) > 1e300] = -F.INF
    flags = [0, 1, 3, 27] if name.startswith("loop") else [-1, 0, 1, 2]
    b = splice.compile(F.CONTROL[name], F.CONTROL_SIG, ARCH)
    for n in flags:
        y = np.zeros(N, np.uint64)
        run_build(b, (N // TILE,), x, zz, y, n)
        want = np.asarray(F.ref_control(name, x, zz, n, TILE), dtype=np.uint64)
        bad = np.flatnonzero(y != want)
        assert bad.size == 0, (f"{name} n={n}: {bad.size} of {N} elements differ, first at "
                               f"{bad[:8]}: got {y[bad[:4]]}, want {want[bad[:4]]}")


def test_packing_16bit_arguments_bit_exact():
    rng = np.random.default_rng(8)
    bits = [rng.integers(0, 2 ** 16, N, dtype=np.uint64).astype(np.uint16) for _ in range(4)]
    bits[0][:4] = [0x7E00, 0xFC00, 0x8000, 0x7C01]   # NaN, -inf, -0.0, signalling NaN
    bits[1][:4] = [0x7FC0, 0xFF80, 0x8000, 0x7F81]
    y = np.zeros(N, np.uint64)
    _run("pack16", (N // TILE,), bits[0].view(np.float16), bits[1], bits[2].view(np.int16),
         bits[3], y)
    b64 = [v.astype(np.uint64) for v in bits]
    ref = b64[0] | (b64[1] << np.uint64(16)) | (b64[2] << np.uint64(32)) | \
        (b64[3] << np.uint64(48))
    np.testing.assert_array_equal(y, ref)
    _run("pack16_const", (N // TILE,), bits[0].view(np.float16), y)
    ref = b64[0] | np.uint64(0x8000 << 16) | np.uint64(0xFFFF << 32) | np.uint64(0xFFFF << 48)
    np.testing.assert_array_equal(y, ref)


def test_packing_120_bits_and_small_types():
    rng = np.random.default_rng(9)
    a = F.f64_inputs(N, 10)
    b = rng.integers(-2 ** 31, 2 ** 31 - 1, N, dtype=np.int32, endpoint=True)
    c = rng.integers(-2 ** 15, 2 ** 15 - 1, N, dtype=np.int16, endpoint=True)
    d = rng.integers(-128, 127, N, dtype=np.int8, endpoint=True)
    y = np.zeros(N, np.uint64)
    _run("pack120", (N // TILE,), a, b, c, d, y)
    with np.errstate(over="ignore"):
        ref = F.np_bits64(a) ^ (b.view(np.uint32).astype(np.uint64) *
                                np.uint64(0x9E3779B97F4A7C15)) ^ \
            (c.view(np.uint16).astype(np.uint64) << np.uint64(40)) ^ \
            (d.view(np.uint8).astype(np.uint64) << np.uint64(56))
    np.testing.assert_array_equal(y, ref)
    u8 = rng.integers(0, 255, N, dtype=np.uint8, endpoint=True)
    bo = rng.random(N) < 0.5
    _run("pack_small", (N // TILE,), d, u8, bo, b, y)
    ref = d.view(np.uint8).astype(np.uint64) | (u8.astype(np.uint64) << np.uint64(8)) | \
        (bo.astype(np.uint64) << np.uint64(16)) | \
        (b.view(np.uint32).astype(np.uint64) << np.uint64(32))
    np.testing.assert_array_equal(y, ref)
    f = [F.f32_inputs(N, s) for s in (11, 12, 13, 14)]
    r = np.zeros(N, np.uint32)
    _run("hash4f", (N // TILE,), *f, r)
    np.testing.assert_array_equal(r, F.ref_hash_4f(*f))


def test_results_narrower_than_the_marker():
    rng = np.random.default_rng(15)
    x = rng.standard_normal(N) * 10
    x[:3] = [0.5, 1.0, 1.5]
    w = bf16(rng.standard_normal(N).astype(np.float32))
    yb, y8 = np.zeros(N, np.bool_), np.zeros(N, np.int8)
    yh, ybf = np.zeros(N, np.float16), np.zeros(N, np.uint16)
    _run("small_results", (N // TILE,), x, w, yb, y8, yh, ybf)
    np.testing.assert_array_equal(yb, (x > 0) != (x > 1.0))
    q = x.view(np.uint64)
    a = (q & np.uint64(127)).astype(np.int64)
    ref8 = ((a + (q & np.uint64(7)).astype(np.int64)) & 0xFF).astype(np.uint8).view(np.int8)
    np.testing.assert_array_equal(y8, ref8)
    h = x.astype(np.float16)
    np.testing.assert_array_equal(yh, h + (-h) * np.float16(2))
    np.testing.assert_array_equal(ybf, bf16(bf16_value(w) * np.float32(2) + np.float32(1)))


def test_2d_broadcast_and_reduction():
    M, Nn, TM, TN = 32, 64, 16, 32
    col = F.f64_inputs(M, 16).reshape(M, 1)
    row = F.f64_inputs(Nn, 17).reshape(1, Nn)
    y = np.zeros((M, Nn), np.uint64)
    _run("shapes_2d", (M // TM, Nn // TN), col, row, y)
    c, r = np.broadcast_arrays(col, row)
    np.testing.assert_array_equal(y, F.ref_hash_dd(c, r) +
                                  F.ref_hash_dd(np.full(c.shape, -0.0), r))
    x = np.random.default_rng(18).standard_normal(512)
    out = np.zeros(2 * 2, np.float64)
    _run("reduce", (2,), x, out)
    got = out.reshape(2, 2)
    xs = x.reshape(2, 256)
    np.testing.assert_allclose(got[:, 0], (xs * 0.5 + 1.0).sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(got[:, 1], (-xs * 0.5).max(axis=1))


@pytest.mark.parametrize("tile", [1, 2, 16, 256])
def test_masked_tiles(tile):
    # the last tile is partly out of bounds: masked (zero-padded) elements reach the marker
    n = 2 * tile + max(tile // 2, 1) if tile > 1 else 7
    x = F.f64_inputs(n, 19)
    zz = F.f64_inputs(n, 20)
    y = np.zeros(n, np.uint64)
    _run(f"tile_sizes[{tile}]", (-(-n // tile),), x, zz, y)
    np.testing.assert_array_equal(y, F.ref_hash_dd(x, zz) ^ F.ref_hash_dd(zz, np.ones(n)))


def test_sign_flips_around_the_marker():
    x = F.f64_inputs(N, 21, specials=False)
    zz = F.f64_inputs(N, 22, specials=False)
    x[:4] = [0.0, -0.0, F.INF, -F.INF]
    zz[:4] = [-0.0, 0.0, 1.0, 2.0]
    y = np.zeros(N, np.uint64)
    _run("neg_args", (N // TILE,), x, zz, y)
    np.testing.assert_array_equal(y, F.ref_neg_args(x, zz))


def test_asm_pack_and_outputs():
    rng = np.random.default_rng(23)
    ha = rng.standard_normal(N).astype(np.float16)
    hb = rng.standard_normal(N).astype(np.float16)
    ha[:3] = [-0.0, np.inf, 0.0]
    y16, y8 = np.zeros(N, np.float16), np.zeros(N, np.int8)
    hi, lo = np.zeros(N, np.uint32), np.zeros(N, np.uint32)
    _run("asm_pack", (N // TILE,), ha, hb, y16, y8, hi, lo)
    np.testing.assert_array_equal(y16.view(np.uint16), (ha + hb).view(np.uint16))
    q = (ha.view(np.int16) & 127).astype(np.int8)
    np.testing.assert_array_equal(y8, q.reshape(-1, 4)[:, ::-1].reshape(-1))
    np.testing.assert_array_equal(hi, np.full(N, 0x80000000, np.uint32))
    np.testing.assert_array_equal(lo, ha.view(np.uint16).astype(np.uint32))
    y = np.zeros(N, np.uint64)
    _run("asm_const", (N // TILE,), y)
    ref = np.uint64(0x8000000000000000) ^ np.float64(F.INF).view(np.uint64)
    np.testing.assert_array_equal(y, np.full(N, ref, np.uint64))
    x = rng.integers(-1000, 1000, N, dtype=np.int32)
    r = np.zeros(N, np.int32)
    _run("asm_impure", (N // TILE,), x, r)
    np.testing.assert_array_equal(r, (x + 1) * 1000 + x + 2)


@pytest.mark.parametrize("case", sorted(F.MASK_CASES))
def test_int64_result_with_sign_bit_cleared(case):
    kern, dt = F.MASK_CASES[case]
    rng = np.random.default_rng(31)
    x = rng.integers(0, 2 ** 64 - 1, N, dtype=np.uint64, endpoint=True)
    x[:len(F.NAN_PATTERNS)] = F.NAN_PATTERNS
    x[np.arange(0, N, 5)] |= np.uint64(0x7FF0000000000000)   # a fifth with NaN exponents
    xs = x.view(np.dtype(dt.name))
    y = np.zeros(N, np.dtype(dt.name))
    sig = K.signature(K.array(dt), K.array(dt), TILE)
    run_build(splice.compile(kern, sig, ARCH), (N // TILE,), xs, y)
    want = x & np.uint64(0x7FFFFFFFFFFFFFFF)
    if case == "extern_called_mod":
        want = want % np.uint64(1000003)
    np.testing.assert_array_equal(y.view(np.uint64), want)


@pytest.mark.parametrize("a, b", [(1.5, -2.25), (-0.0, F.NAN), (F.INF, 0.5)])
def test_scalar_arguments_and_negative_zero(a, b):
    y = np.zeros(N, np.uint64)
    _run("scalar_args", (N // TILE,), y, np.float64(a), np.float64(b))
    ref = F.ref_hash_dd([a], [b]) + F.ref_hash_dd([b], [-0.0]) + F.ref_hash_dd([F.NAN], [a])
    np.testing.assert_array_equal(y, np.broadcast_to(ref, (N,)))
