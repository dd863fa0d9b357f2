"""The fma-marker kernels of ``support.fma`` run on the GPU and compared bit-exactly with
NumPy (marker: gpu)."""

from __future__ import annotations

import numpy as np
import pytest

from support.fma import (
    CONST_4F,
    CONST_DD,
    CONST_FF,
    CONST_LL,
    CONTROL,
    FULL_DD,
    INF,
    MASK_CASES,
    NAN,
    NAN_PATTERNS,
    all_const_kernel,
    asm_const_kernel,
    asm_impure_kernel,
    asm_pack_kernel,
    f32_inputs,
    f64_inputs,
    hash4f_kernel,
    neg_args_kernel,
    no_args_kernel,
    np_bits64,
    pack16_const_kernel,
    pack16_kernel,
    pack120_kernel,
    pack_small_kernel,
    reduce_kernel,
    ref_control,
    ref_hash_4f,
    ref_hash_dd,
    ref_hash_ff,
    ref_neg_args,
    scalar_args_kernel,
    shapes_2d_kernel,
    small_results_kernel,
    tile_sizes_kernel,
)

INT64_MAX = 0x7FFFFFFFFFFFFFFF

N, TILE = 1024, 128


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(CONST_DD))
def test_gpu_special_constants_f64(dev, key):
    (c0, c1), kern = CONST_DD[key]
    x = f64_inputs(N, 1)
    y = dev.empty(N, np.uint64)
    dev.launch((N // TILE,), kern, (dev.arr(x), y, TILE))
    a = x if c0 is None else np.full(N, c0)
    b = x if c1 is None else np.full(N, c1)
    np.testing.assert_array_equal(dev.host(y), ref_hash_dd(a, b))


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(CONST_LL))
def test_gpu_special_integer_constants(dev, key):
    (c0, c1), kern = CONST_LL[key]
    rng = np.random.default_rng(2)
    x = rng.integers(-2 ** 63, 2 ** 63 - 1, N, dtype=np.int64, endpoint=True)
    x[:4] = [0, -1, -2 ** 63, 0x7FF8000000000000]
    y = dev.empty(N, np.int64)
    dev.launch((N // TILE,), kern, (dev.arr(x), y, TILE))
    a = x if c0 is None else np.full(N, c0, dtype=np.int64)
    b = x if c1 is None else np.full(N, c1, dtype=np.int64)
    ref = (a.view(np.uint64) * np.uint64(3) + b.view(np.uint64) * np.uint64(5) +
           np.uint64(1)).view(np.int64)
    np.testing.assert_array_equal(dev.host(y), ref)


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(FULL_DD))
def test_gpu_full_tiles_of_special_constants(dev, key):
    (c0, c1), kern = FULL_DD[key]
    x = f64_inputs(N, 3)
    y = dev.empty(N, np.uint64)
    dev.launch((N // TILE,), kern, (dev.arr(x), y, TILE))
    np.testing.assert_array_equal(dev.host(y), ref_hash_dd(np.full(N, c0), np.full(N, c1)))


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(CONST_FF))
def test_gpu_special_constants_f32(dev, key):
    (c0, c1), kern = CONST_FF[key]
    x = f32_inputs(N, 4)
    y = dev.empty(N, np.uint32)
    dev.launch((N // TILE,), kern, (dev.arr(x), y, TILE))
    a = x if c0 is None else np.full(N, c0, dtype=np.float32)
    b = x if c1 is None else np.full(N, c1, dtype=np.float32)
    np.testing.assert_array_equal(dev.host(y), ref_hash_ff(a, b))


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(CONST_4F))
def test_gpu_four_float32_arguments_with_constants(dev, key):
    c, kern = CONST_4F[key]
    x = f32_inputs(N, 5)
    y = dev.empty(N, np.uint32)
    dev.launch((N // TILE,), kern, (dev.arr(x), y, TILE))
    cc = np.full(N, c, dtype=np.float32)
    np.testing.assert_array_equal(dev.host(y), ref_hash_4f(cc, x, cc, x))


@pytest.mark.gpu
def test_gpu_all_constant_and_argument_free_calls(dev):
    y = dev.empty(N, np.uint64)
    dev.launch((N // TILE,), all_const_kernel, (y, TILE))
    ll = np.array([-1], np.int64).view(np.uint64) * np.uint64(3) + np.uint64(1)
    ref = ref_hash_dd([1.0], [-0.0]) + ref_hash_dd([NAN], [0.0]) + ll
    np.testing.assert_array_equal(dev.host(y), np.broadcast_to(ref, (N,)))
    f = dev.empty(N, np.float32)
    dev.launch((N // TILE,), no_args_kernel, (f, TILE))
    np.testing.assert_array_equal(dev.host(f), np.full(N, 42.5, np.float32))


_IF_FLAGS = [-2, -1, 0, 1, 2]
_LOOP_TRIPS = [0, 1, 2, 3, 4, 5, 8, 26, 27, 50, 51, 53, 77]


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CONTROL))
def test_gpu_control_flow(dev, name):
    x = f64_inputs(N, 6)
    zz = f64_inputs(N, 7)[::-1].copy()
    if name in ("loop_carried_from_zero_f64", "loop_carried_f32"):
        # float arithmetic in the callee: NaN payloads and the rounding of subnormals (the
        # callee's a * 0.5 + b is contracted to an fma) are not what is tested here
        x[np.isnan(x) | (np.abs(x) < 1e-30)] = 0.25
        x[np.abs(x) > 1e300] = -INF
    flags = _LOOP_TRIPS if name.startswith("loop") else _IF_FLAGS
    if name == "loop_nested":
        flags = [0, 1, 2, 3, 7, 12]
    kern = CONTROL[name]
    for n in flags:
        y = dev.empty(N, np.uint64)
        dev.launch((N // TILE,), kern, (dev.arr(x), dev.arr(zz), y, n, TILE))
        got = dev.host(y)
        want = np.asarray(ref_control(name, x, zz, n, TILE), dtype=np.uint64)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (f"{name} n={n}: {bad.size} of {N} elements differ, first at "
                               f"{bad[:8]}: got {got[bad[:4]]}, want {want[bad[:4]]}")


@pytest.mark.gpu
def test_gpu_packing_16bit_arguments_bit_exact(dev):
    torch = dev.torch
    rng = np.random.default_rng(8)
    bits = [rng.integers(0, 2 ** 16, N, dtype=np.uint64).astype(np.uint16) for _ in range(4)]
    bits[0][:4] = [0x7E00, 0xFC00, 0x8000, 0x7C01]   # NaN, -inf, -0.0, signalling NaN
    bits[1][:4] = [0x7FC0, 0xFF80, 0x8000, 0x7F81]
    a = dev.arr(bits[0]).view(torch.float16)
    b = dev.arr(bits[1]).view(torch.bfloat16)
    c = dev.arr(bits[2]).view(torch.int16)
    d = dev.arr(bits[3])
    y = dev.empty(N, np.uint64)
    dev.launch((N // TILE,), pack16_kernel, (a, b, c, d, y, TILE))
    b64 = [v.astype(np.uint64) for v in bits]
    ref = b64[0] | (b64[1] << np.uint64(16)) | (b64[2] << np.uint64(32)) | \
        (b64[3] << np.uint64(48))
    np.testing.assert_array_equal(dev.host(y), ref)
    dev.launch((N // TILE,), pack16_const_kernel, (a, y, TILE))
    ref = b64[0] | np.uint64(0x8000 << 16) | np.uint64(0xFFFF << 32) | np.uint64(0xFFFF << 48)
    np.testing.assert_array_equal(dev.host(y), ref)


@pytest.mark.gpu
def test_gpu_packing_120_bits_and_small_types(dev):
    rng = np.random.default_rng(9)
    a = f64_inputs(N, 10)
    b = rng.integers(-2 ** 31, 2 ** 31 - 1, N, dtype=np.int32, endpoint=True)
    c = rng.integers(-2 ** 15, 2 ** 15 - 1, N, dtype=np.int16, endpoint=True)
    d = rng.integers(-128, 127, N, dtype=np.int8, endpoint=True)
    y = dev.empty(N, np.uint64)
    dev.launch((N // TILE,), pack120_kernel, tuple(dev.arr(v) for v in (a, b, c, d)) +
               (y, TILE))
    with np.errstate(over="ignore"):
        ref = np_bits64(a) ^ (b.view(np.uint32).astype(np.uint64) *
                              np.uint64(0x9E3779B97F4A7C15)) ^ \
            (c.view(np.uint16).astype(np.uint64) << np.uint64(40)) ^ \
            (d.view(np.uint8).astype(np.uint64) << np.uint64(56))
    np.testing.assert_array_equal(dev.host(y), ref)
    u8 = rng.integers(0, 255, N, dtype=np.uint8, endpoint=True)
    bo = rng.random(N) < 0.5
    dev.launch((N // TILE,), pack_small_kernel, tuple(dev.arr(v) for v in (d, u8, bo, b)) +
               (y, TILE))
    ref = d.view(np.uint8).astype(np.uint64) | (u8.astype(np.uint64) << np.uint64(8)) | \
        (bo.astype(np.uint64) << np.uint64(16)) | \
        (b.view(np.uint32).astype(np.uint64) << np.uint64(32))
    np.testing.assert_array_equal(dev.host(y), ref)
    f = [f32_inputs(N, s) for s in (11, 12, 13, 14)]
    r = dev.empty(N, np.uint32)
    dev.launch((N // TILE,), hash4f_kernel, tuple(dev.arr(v) for v in f) + (r, TILE))
    np.testing.assert_array_equal(dev.host(r), ref_hash_4f(*f))


@pytest.mark.gpu
def test_gpu_results_narrower_than_the_marker(dev):
    torch = dev.torch
    rng = np.random.default_rng(15)
    x = rng.standard_normal(N) * 10
    x[:3] = [0.5, 1.0, 1.5]
    w = torch.from_numpy(rng.standard_normal(N).astype(np.float32)).to(torch.bfloat16).cuda()
    yb, y8 = dev.empty(N, np.bool_), dev.empty(N, np.int8)
    yh = dev.empty(N, np.float16)
    ybf = torch.empty(N, dtype=torch.bfloat16, device="cuda")
    dev.launch((N // TILE,), small_results_kernel, (dev.arr(x), w, yb, y8, yh, ybf, TILE))
    np.testing.assert_array_equal(dev.host(yb), (x > 0) != (x > 1.0))
    q = x.view(np.uint64)
    a = (q & np.uint64(127)).astype(np.int64)
    ref8 = ((a + (q & np.uint64(7)).astype(np.int64)) & 0xFF).astype(np.uint8).view(np.int8)
    np.testing.assert_array_equal(dev.host(y8), ref8)
    h = x.astype(np.float16)
    np.testing.assert_array_equal(dev.host(yh), h + (-h) * np.float16(2))
    refbf = (w.float() * 2 + 1).to(torch.bfloat16).float().cpu().numpy()
    np.testing.assert_array_equal(ybf.float().cpu().numpy(), refbf)


@pytest.mark.gpu
def test_gpu_2d_broadcast_and_reduction(dev):
    M, Nn, TM, TN = 64, 128, 16, 32
    col = f64_inputs(M, 16).reshape(M, 1)
    row = f64_inputs(Nn, 17).reshape(1, Nn)
    y = dev.empty((M, Nn), np.uint64)
    dev.launch((M // TM, Nn // TN), shapes_2d_kernel, (dev.arr(col), dev.arr(row), y, TM, TN))
    c, r = np.broadcast_arrays(col, row)
    np.testing.assert_array_equal(dev.host(y), ref_hash_dd(c, r) +
                                  ref_hash_dd(np.full(c.shape, -0.0), r))
    x = np.random.default_rng(18).standard_normal(2048)
    out = dev.empty(2 * 8, np.float64)
    dev.launch((8,), reduce_kernel, (dev.arr(x), out, 256))
    got = dev.host(out).reshape(8, 2)
    xs = x.reshape(8, 256)
    np.testing.assert_allclose(got[:, 0], (xs * 0.5 + 1.0).sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(got[:, 1], (-xs * 0.5).max(axis=1))


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [1, 2, 16, 64, 128, 256, 1024, 4096])
def test_gpu_masked_tiles(dev, tile):
    # the last tile is partly out of bounds: masked (zero-padded) elements reach the marker
    # as xor(0, K) = K on their path
    n = 3 * tile + max(tile // 2, 1) if tile > 1 else 37
    grid = -(-n // tile)
    x = f64_inputs(n, 19)
    zz = f64_inputs(n, 20)
    y = dev.empty(n, np.uint64)
    dev.launch((grid,), tile_sizes_kernel, (dev.arr(x), dev.arr(zz), y, tile))
    want = ref_hash_dd(x, zz) ^ ref_hash_dd(zz, np.ones(n))
    got = dev.host(y)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"tile {tile}: {bad.size} of {n} differ, first at {bad[:8]}"


@pytest.mark.gpu
def test_gpu_sign_flips_around_the_marker(dev):
    x = f64_inputs(N, 21, specials=False)
    zz = f64_inputs(N, 22, specials=False)
    x[:4] = [0.0, -0.0, INF, -INF]
    zz[:4] = [-0.0, 0.0, 1.0, 2.0]
    y = dev.empty(N, np.uint64)
    dev.launch((N // TILE,), neg_args_kernel, (dev.arr(x), dev.arr(zz), y, TILE))
    np.testing.assert_array_equal(dev.host(y), ref_neg_args(x, zz))


@pytest.mark.gpu
def test_gpu_asm_pack_and_outputs(dev):
    rng = np.random.default_rng(23)
    ha = rng.standard_normal(N).astype(np.float16)
    hb = rng.standard_normal(N).astype(np.float16)
    ha[:3] = [-0.0, np.inf, 0.0]
    y16, y8 = dev.empty(N, np.float16), dev.empty(N, np.int8)
    hi, lo = dev.empty(N, np.uint32), dev.empty(N, np.uint32)
    dev.launch((N // TILE,), asm_pack_kernel, (dev.arr(ha), dev.arr(hb), y16, y8, hi, lo,
                                               TILE))
    np.testing.assert_array_equal(dev.host(y16).view(np.uint16), (ha + hb).view(np.uint16))
    q = (ha.view(np.int16) & 127).astype(np.int8)
    np.testing.assert_array_equal(dev.host(y8), q.reshape(-1, 4)[:, ::-1].reshape(-1))
    np.testing.assert_array_equal(dev.host(hi), np.full(N, 0x80000000, np.uint32))
    np.testing.assert_array_equal(dev.host(lo), ha.view(np.uint16).astype(np.uint32))
    y = dev.empty(N, np.uint64)
    dev.launch((N // TILE,), asm_const_kernel, (y, TILE))
    ref = np.uint64(0x8000000000000000) ^ np.float64(INF).view(np.uint64)
    np.testing.assert_array_equal(dev.host(y), np.full(N, ref, np.uint64))
    x = rng.integers(-1000, 1000, N, dtype=np.int32)
    r = dev.empty(N, np.int32)
    dev.launch((N // TILE,), asm_impure_kernel, (dev.arr(x), r, TILE))
    np.testing.assert_array_equal(dev.host(r), (x + 1) * 1000 + x + 2)


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(MASK_CASES))
def test_gpu_int64_result_with_sign_bit_cleared(dev, case):
    kern, dt = MASK_CASES[case]
    n, tile = 1024, 128
    rng = np.random.default_rng(31)
    x = rng.integers(0, 2 ** 64 - 1, n, dtype=np.uint64, endpoint=True)
    x[:len(NAN_PATTERNS)] = NAN_PATTERNS
    x[np.arange(0, n, 5)] |= np.uint64(0x7FF0000000000000)   # a fifth with NaN exponents
    xs = x.view(np.dtype(dt.name))
    y = dev.empty(n, np.dtype(dt.name))
    dev.launch((n // tile,), kern, (dev.arr(xs), y, tile))
    want = x & np.uint64(INT64_MAX)
    if case == "extern_called_mod":
        want = want % np.uint64(1000003)
    got = dev.host(y).view(np.uint64)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{bad.size} of {n} differ, first {bad[:6]}: got "
                           f"{[hex(v) for v in got[bad[:3]]]}, want "
                           f"{[hex(v) for v in want[bad[:3]]]}")



@pytest.mark.gpu
@pytest.mark.parametrize("a, b", [(1.5, -2.25), (-0.0, NAN), (INF, 0.5)])
def test_gpu_scalar_arguments_and_negative_zero(dev, a, b):
    # hash_dd(b, -0.0): -0.0 reaches the marker as neg.f64 of the key (one lowering). A and b
    # are passed as float64 scalars (a Python float is a float32 to cuTile, which the
    # extern's float64 parameters refuse).
    y = dev.empty(N, np.uint64)
    dev.launch((N // TILE,), scalar_args_kernel, (y, np.float64(a), np.float64(b), TILE))
    ref = ref_hash_dd([a], [b]) + ref_hash_dd([b], [-0.0]) + ref_hash_dd([NAN], [a])
    np.testing.assert_array_equal(dev.host(y), np.broadcast_to(ref, (N,)))
