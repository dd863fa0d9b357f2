"""The test kernels of ``support.kernels`` run on the CPU executor: the spliced PTX (what
ptxas assembles) against NumPy, as ``test_gpu.py`` checks them on a GPU. Compiled for sm_80:
their 1-D loads are TMA loads on sm_90 (warp-specialised, out of the executor's scope)."""

from __future__ import annotations

import math

import cuda.tile as ct
import numpy as np
import pytest

import splice
from support import kernels as K
from support.exact import bf16, bf16_value, fma
from support.ptx_exec import Pointer, run_build

ARCH = "sm_80"
f32, f64 = ct.float32, ct.float64

_CT = {"bool": ct.bool_}


def _ct(name):
    return _CT.get(name) or getattr(ct, name)


@pytest.mark.parametrize("inline", ["auto", "never"])
@pytest.mark.parametrize("name", sorted(K.TYPE_EXTERNS))
def test_every_element_type(name, inline):
    rng = np.random.default_rng(1)
    n, tile = 512, 256
    x = K.random_values(name, n, rng)
    if name == "bfloat16":
        x = bf16(x)
    y = np.zeros_like(x)
    b = splice.compile(K.TYPE_KERNELS[name, inline],
                       K.signature(K.array(_ct(name)), K.array(_ct(name)), tile), ARCH)
    launch = run_build(b, (n // tile,), x, y)
    assert not launch.approx
    if name == "bfloat16":
        ref = bf16(bf16_value(x) * np.float32(2) + np.float32(1))
    else:
        ref = K.TYPE_EXTERNS[name][1](x)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("kernel", ["saxpy_kernel", "saxpy_call_kernel"])
@pytest.mark.parametrize("tile", [1, 2, 16, 32, 64, 128, 256, 1024])
def test_tile_sizes_including_replicated_layouts(tile, kernel):
    n = max(tile * 2, 256)
    rng = np.random.default_rng(tile)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    b = splice.compile(getattr(K, kernel), K.signature(K.array(f32), K.array(f32), K.array(f32),
                                                       K.scalar(f32), tile), ARCH)
    run_build(b, (n // tile,), x, y, out, 1.5)
    # saxpy is a * x + y with one rounding (NVRTC contracts it to fma.rn.f32)
    np.testing.assert_array_equal(out, fma(np.float32(1.5), x, y))


def test_mixed_argument_types():
    rng = np.random.default_rng(7)
    n, tile = 256, 128
    a = rng.integers(-128, 127, n, dtype=np.int8)
    bb = rng.standard_normal(n).astype(np.float16)
    c = rng.random(n) < 0.5
    d = rng.integers(-1000, 1000, n, dtype=np.int32)
    e = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n)
    b = splice.compile(K.mixed_kernel, K.signature(
        K.array(ct.int8), K.array(ct.float16), K.array(ct.bool_), K.array(ct.int32),
        K.array(f32), K.array(f64), tile), ARCH)
    run_build(b, (n // tile,), a, bb, c, d, e, y)
    np.testing.assert_array_equal(y, K.mixed_ref(a, bb, c, d, e))


def test_same_value_in_both_payload_slots():
    x = np.random.default_rng(3).standard_normal(512)
    y = np.zeros(512)
    b = splice.compile(K.same_arg_kernel, K.signature(K.array(f64), K.array(f64), 256), ARCH)
    run_build(b, (2,), x, y)
    np.testing.assert_array_equal(y, x * x + 0.25)


def test_broadcast_2d_scalar_and_constant():
    M, N, TM, TN = 64, 128, 32, 64
    rng = np.random.default_rng(5)
    col = rng.standard_normal((M, 1)).astype(np.float32)
    row = rng.standard_normal((1, N)).astype(np.float32)
    out = np.zeros((M, N), np.float32)
    b = splice.compile(K.broadcast_kernel, K.signature(K.array(f32, 2), K.array(f32, 2),
                                                       K.array(f32, 2), K.scalar(f32), TM, TN),
                       ARCH)
    run_build(b, (M // TM, N // TN), col, row, out, 2.0)
    ref = fma(np.float32(2), col, row) + fma(np.float32(2), np.float32(0.5), row)
    np.testing.assert_array_equal(out, ref)


def test_scalar_call():
    out = np.zeros(16, np.float32)
    b = splice.compile(K.scalar_kernel, K.signature(K.array(f32), K.scalar(f32), K.scalar(f32)),
                       ARCH)
    run_build(b, (1,), out, 3.0, 4.0)
    assert out[0] == np.float32(13.0)


def test_loops_branches_helpers_several_sites():
    n, tile, iters = 1024, 256, 5
    x = np.random.default_rng(11).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    b = splice.compile(K.control_kernel, K.signature(K.array(f32), K.array(f32), iters, tile),
                       ARCH)
    run_build(b, (n // tile,), x, y)
    np.testing.assert_allclose(y, K.control_ref(x, iters, tile), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("tile", [1, 32, 128, 1024])
def test_void_impure_extern_runs_once_per_element(tile):
    n = max(tile * 2, 512)
    x = np.random.default_rng(tile).integers(0, 1000, n, dtype=np.uint32)
    counter = np.zeros(2, np.int64)
    b = splice.compile(K.count_kernel, K.signature(K.array(ct.uint32), K.scalar(ct.int64), tile),
                       ARCH)
    run_build(b, (n // tile,), x, Pointer(counter))
    calls, total = counter
    assert calls == n, f"{calls} calls for {n} elements"
    assert total == int(x.astype(np.uint64).sum())


def test_void_impure_extern_2d_replicated():
    TM, TN, blocks = 4, 8, 4   # 32 elements on 128 threads: replicated 4x
    x = np.random.default_rng(2).integers(0, 100, (TM * blocks, TN), dtype=np.uint32)
    counter = np.zeros(2, np.int64)
    b = splice.compile(K.count_2d_kernel, K.signature(K.array(ct.uint32, 2), K.scalar(ct.int64),
                                                      TM, TN), ARCH)
    run_build(b, (blocks,), x, Pointer(counter))
    calls, total = counter
    assert calls == x.size and total == int(x.astype(np.uint64).sum())


def test_prebuilt_ptx():
    x = np.random.default_rng(4).standard_normal(1024).astype(np.float32)
    y = np.zeros(1024, np.float32)
    b = splice.compile(K.ptx_kernel, K.signature(K.array(f32), K.array(f32), 512), ARCH)
    run_build(b, (2,), x, y)
    np.testing.assert_array_equal(y, fma(x, np.float32(3), np.float32(1)))


@pytest.mark.parametrize("approx", ["exact", "bound"])
def test_approximate_tanh_snippet_within_its_bound(approx):
    x = np.random.default_rng(9).standard_normal(256).astype(np.float32)
    y = np.zeros(256, np.float32)
    b = splice.compile(K.asm_tanh_kernel, K.signature(K.array(f32), K.array(f32), 128), ARCH)
    launch = run_build(b, (2,), x, y, approx=approx)
    assert set(launch.approx) == {"tanh.f32"}
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64)), rtol=2.0 ** -10.9, atol=0)


# PTX externs with guarded early returns (inlined: each guard must survive, as a guarded
# jump to the body's end), a guarded result store, and a signed 16-bit argument
# (sign-extended into its .param).
PTX_EARLY = r"""
.version 8.0
.target sm_80
.address_size 64

.visible .func (.param .b32 r) early(.param .b32 x, .param .b32 k)
{
	.reg .f32 	%f<3>;
	.reg .b32 	%r<2>;
	.reg .pred 	%p;
	ld.param.f32 	%f1, [x];
	ld.param.s32 	%r1, [k];
	cvt.rn.f32.s32 	%f2, %r1;
	st.param.f32 	[r], %f2;
	setp.lt.f32 	%p, %f1, 0f00000000;
	@%p ret;
	add.rn.f32 	%f2, %f1, %f2;
	st.param.f32 	[r], %f2;
	ret;
}

.visible .func (.param .b32 r) pick(.param .b32 x)
{
	.reg .f32 	%f<3>;
	.reg .pred 	%p;
	ld.param.f32 	%f1, [x];
	mov.f32 	%f2, 0f3F800000;
	setp.gt.f32 	%p, %f1, 0f00000000;
	st.param.f32 	[r], %f2;
	@%p st.param.f32 	[r], %f1;
	@!%p ret;
	st.param.f32 	[r], %f1;
	ret;
}
"""


@pytest.mark.parametrize("inline", ["always", "never"])
def test_ptx_extern_with_a_guarded_early_return(inline):
    early = splice.extern.from_ptx(ptx=PTX_EARLY, name="early", inline=inline,
                                   signature="float32(float32, int16)")
    pick = splice.extern.from_ptx(ptx=PTX_EARLY, name="pick", inline=inline,
                                  signature="float32(float32)")

    @splice.kernel
    def early_kernel(x, k, y, TILE: ct.Constant[int]):
        i = ct.bid(0)
        t = ct.load(x, index=(i,), shape=(TILE,))
        ct.store(y, index=(i,), tile=early(t, ct.load(k, index=(i,), shape=(TILE,))) +
                 pick(t) * 1000.0)

    rng = np.random.default_rng(12)
    x = rng.standard_normal(256).astype(np.float32)
    k = rng.integers(-300, 300, 256).astype(np.int16)
    y = np.zeros(256, np.float32)
    b = splice.compile(early_kernel, K.signature(K.array(f32), K.array(ct.int16), K.array(f32),
                                                 128), ARCH)
    run_build(b, (2,), x, k, y)
    kf = k.astype(np.float32)
    np.testing.assert_array_equal(y, fma(np.where(x > 0, x, np.float32(1)), np.float32(1000),
                                         np.where(x < 0, kf, x + kf)))



# A PTX extern that reads its bool and 8-bit parameters as whole .b32 words: the caller owes
# each one extended as C promotes it (bool 0 or 1, unsigned zero-, signed sign-extended),
# although the arguments share one payload slot (the bool at bit 0, the others above it).
PTX_NARROW = r"""
.version 8.0
.target sm_80
.address_size 64

.visible .func (.param .b32 r) words(.param .b32 c, .param .b32 u, .param .b32 s)
{
	.reg .b32 	%r<6>;
	ld.param.b32 	%r1, [c];
	ld.param.b32 	%r2, [u];
	ld.param.b32 	%r3, [s];
	shl.b32 	%r4, %r2, 8;
	shl.b32 	%r5, %r3, 16;
	xor.b32 	%r4, %r4, %r5;
	xor.b32 	%r4, %r4, %r1;
	st.param.b32 	[r], %r4;
	ret;
}
"""


@pytest.mark.parametrize("inline", ["always", "never"])
def test_narrow_arguments_sharing_a_slot_are_extended_whole(inline):
    words = splice.extern.from_ptx(ptx=PTX_NARROW, name="words", inline=inline,
                                   signature="int32(bool, uint8, int8)")

    @splice.kernel
    def words_kernel(c, u, s, y, TILE: ct.Constant[int]):
        i = ct.bid(0)
        ct.store(y, index=(i,), tile=words(ct.load(c, index=(i,), shape=(TILE,)),
                                           ct.load(u, index=(i,), shape=(TILE,)),
                                           ct.load(s, index=(i,), shape=(TILE,))))

    rng = np.random.default_rng(13)
    c = rng.random(256) < 0.5
    u = rng.integers(0, 256, 256).astype(np.uint8)
    s = rng.integers(-128, 128, 256).astype(np.int8)
    y = np.zeros(256, np.int32)
    b = splice.compile(words_kernel, K.signature(K.array(ct.bool_), K.array(ct.uint8),
                                                 K.array(ct.int8), K.array(ct.int32), 128), ARCH)
    run_build(b, (2,), c, u, s, y)
    np.testing.assert_array_equal(y, c.astype(np.int32) ^ (u.astype(np.int32) << 8) ^
                                  (s.astype(np.int32) << 16))

# NVRTC's math library and intrinsics (libdevice code: range reductions, polynomials, bit
# tricks, approximate instructions refined by Newton steps) against float64 NumPy.
_MATH = {
    "expf(x)": np.exp, "logf(fabsf(x) + 0.5f)": lambda x: np.log(_f32(np.abs(x) + 0.5)),
    "sinf(x * 20.0f)": lambda x: np.sin(_f32(x * 20)), "cosf(x)": np.cos,
    "tanhf(x)": np.tanh, "powf(fabsf(x), 1.7f)": lambda x: np.abs(x) ** 1.7,
    "erff(x)": np.vectorize(math.erf), "atan2f(x, 0.7f)": lambda x: np.arctan2(x, 0.7),
    "fmodf(x, 0.3f)": lambda x: np.fmod(x, np.float32(0.3)), "cbrtf(x)": np.cbrt,
    "(float)log(fabs((double)x) + 1.0)": lambda x: np.log(np.abs(x) + 1),
    "(float)sin((double)x * 10.0)": lambda x: np.sin(x * 10),
    "(float)((int)(x * 1000) % 7)": lambda x: np.fmod(np.trunc(x * np.float32(1000)), 7),
    "(float)__double2int_rn((double)x * 7.5)": lambda x: np.rint(x * 7.5),
    "(float)(__byte_perm(__float_as_int(x), 0, 0x0123) & 0xffff)":
        lambda x: (x.view(np.uint32).byteswap() & 0xffff).astype(np.float64),
}


def _f32(v):
    """A float64 intermediate rounded as the float32 C expression rounds it."""
    return v.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("expr", sorted(_MATH))
def test_nvrtc_math(expr):
    src = f'extern "C" __device__ float m(float x) {{ return {expr}; }}'
    fn = splice.extern(source=src, name="m", signature="float32(float32)")(lambda x: None)

    @splice.kernel
    def math_kernel(a, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=fn(ct.load(a, index=(ct.bid(0),), shape=(TILE,))))

    x = np.random.default_rng(0).standard_normal(128).astype(np.float32)
    y = np.zeros(128, np.float32)
    run_build(splice.compile(math_kernel, K.signature(K.array(f32), K.array(f32), 128), ARCH),
              (1,), x, y)
    want = _MATH[expr](x.astype(np.float64) if "__byte_perm" not in expr else x)
    np.testing.assert_allclose(y, want, rtol=4 * 2.0 ** -23, atol=2.0 ** -30)


def test_lto_ir_extern():
    """NVRTC -dlto: LTO-IR linked by nvJitLink into PTX, merged, executed."""
    lto = splice.extern(source='extern "C" __device__ int lto_mix(int a, int b) '
                               '{ return (a ^ (b << 3)) - (a >> 2); }',
                        name="lto_mix", signature="int32(int32, int32)",
                        options=["-dlto"])(lambda a, b: None)

    @splice.kernel
    def lto_kernel(x, y, out, TILE: ct.Constant[int]):
        i = ct.bid(0)
        ct.store(out, index=(i,), tile=lto(ct.load(x, index=(i,), shape=(TILE,)),
                                           ct.load(y, index=(i,), shape=(TILE,))))

    rng = np.random.default_rng(13)
    x, y = rng.integers(-2 ** 31, 2 ** 31 - 1, (2, 256), dtype=np.int32)
    out = np.zeros(256, np.int32)
    sig = K.signature(K.array(ct.int32), K.array(ct.int32), K.array(ct.int32), 128)
    run_build(splice.compile(lto_kernel, sig, ARCH), (2,), x, y, out)
    np.testing.assert_array_equal(out, (x ^ (y << 3)) - (x >> 2))


SWITCH_SRC = r'''
extern "C" __device__ int sw(int x, int i) {
    int a[16];
    for (int k = 0; k < 16; ++k) a[k] = x * k + (k ^ i);
    int r;
    switch (i & 15) {
      case 0: r = a[i & 7] + 1; break; case 1: r = a[3] * 2; break; case 2: r = x - 7; break;
      case 3: r = a[(i >> 2) & 15]; break; case 4: r = 11; break; case 5: r = x ^ 0x55; break;
      case 6: r = a[15] - a[0]; break; case 7: r = x * x; break; case 8: r = -x; break;
      default: r = a[i & 15] + a[(i + 1) & 15];
    }
    if (x < -1000) return 0;
    return r;
}'''


def _switch_ref(x: int, i: int) -> int:
    a = [x * k + (k ^ i) for k in range(16)]
    r = {0: lambda: a[i & 7] + 1, 1: lambda: a[3] * 2, 2: lambda: x - 7,
         3: lambda: a[(i >> 2) & 15], 4: lambda: 11, 5: lambda: x ^ 0x55,
         6: lambda: a[15] - a[0], 7: lambda: x * x, 8: lambda: -x}.get(
             i & 15, lambda: a[i & 15] + a[(i + 1) & 15])()
    return 0 if x < -1000 else r


def test_called_extern_with_a_stack_frame_and_a_switch():
    """A local array indexed at run time keeps the extern a real call with a .local frame
    (the executor gives each frame its own depot); a switch and an early return."""
    fn = splice.extern(source=SWITCH_SRC, name="sw", signature="int32(int32, int32)")(
        lambda a, b: None)

    @splice.kernel
    def switch_kernel(x, y, out, TILE: ct.Constant[int]):
        i = ct.bid(0)
        ct.store(out, index=(i,), tile=fn(ct.load(x, index=(i,), shape=(TILE,)),
                                          ct.load(y, index=(i,), shape=(TILE,))))

    rng = np.random.default_rng(0)
    x = rng.integers(-2000, 2000, 256).astype(np.int32)
    i = rng.integers(0, 64, 256).astype(np.int32)
    out = np.zeros(256, np.int32)
    sig = K.signature(K.array(ct.int32), K.array(ct.int32), K.array(ct.int32), 128)
    b = splice.compile(switch_kernel, sig, ARCH)
    assert not b.sites[0].inlined and ".local" in b["spliced_ptx"]
    run_build(b, (2,), x, i, out)
    want = np.array([_switch_ref(int(a), int(c)) for a, c in zip(x, i)], np.int64)
    np.testing.assert_array_equal(out, want.astype(np.int32))


# ct.mma on sm_80: cp.async tiles into shared memory, ldmatrix (.trans for B), mma.sync
# m16n8k16; the extern's epilogue runs on the accumulator fragments' layout.
MM_SIG = K.signature(K.array(ct.float16, 2), K.array(ct.float16, 2), K.array(ct.float16, 2),
                     64, 64, 32)


def test_mma_matmul_exact_on_small_integers():
    rng = np.random.default_rng(0)
    A = rng.integers(-2, 3, (128, 96)).astype(np.float16)
    B = rng.integers(-2, 3, (96, 64)).astype(np.float16)
    C = np.zeros((128, 64), np.float16)
    launch = run_build(splice.compile(K.matmul_plain_kernel, MM_SIG, ARCH), (2, 1), A, B, C)
    assert set(launch.approx) == {"mma.f32"}
    # every product and partial sum is an integer below 2^11: exact in any order
    np.testing.assert_array_equal(C, (A.astype(np.int64) @ B.astype(np.int64)).astype(
        np.float16))


def test_mma_matmul_with_an_extern_epilogue():
    rng = np.random.default_rng(1)
    A = (rng.standard_normal((64, 64)) / 4).astype(np.float16)
    B = (rng.standard_normal((64, 128)) / 4).astype(np.float16)
    C = np.zeros((64, 128), np.float16)
    run_build(splice.compile(K.matmul_gelu_kernel, MM_SIG, ARCH), (1, 2), A, B, C)
    ref = K.gelu_tanh_ref(A.astype(np.float64) @ B.astype(np.float64))
    np.testing.assert_allclose(C, ref, rtol=2.0 ** -10, atol=2.0 ** -12)
