"""Every input kind run on a GPU (marker gpu): real headers (curand's Philox, cuda_fp8.h),
C++ templates in namespaces, LTO-IR and relocatable binary objects."""

import os
from pathlib import Path

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.system import toolchain
from support import kernels as K
from support.fragments import ltoir, nvjitlink_too_old, rdc_cubin

ConstInt = ct.Constant[int]


def _curand_include():
    """A directory holding curand_kernel.h (CUDA toolkit or the nvidia-curand wheel)."""
    cands = []
    try:
        import nvidia.cu13 as cu13
        cands += [Path(p) / "include" for p in cu13.__path__]
    except ImportError:
        pass
    try:
        import nvidia.curand as cr
        cands += [Path(p) / "include" for p in cr.__path__]
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(Path(os.environ[var]) / "include")
    cands.insert(0, Path("/usr/local/cuda/include"))
    # curand_kernel.h includes <nv/target> (CCCL)
    return next((str(c) for c in cands if (c / "curand_kernel.h").is_file() and (
        (c / "nv" / "target").exists() or (c / "cccl" / "nv" / "target").exists())), None)


DROPOUT_SRC = r'''
#include <curand_kernel.h>
#define P_DROP 0.25f
extern "C" __device__ float philox_dropout(float x, unsigned long long seed, unsigned int i) {
    curandStatePhilox4_32_10_t st;
    curand_init(seed, i, 0, &st);
    float u = curand_uniform(&st);
    return u < P_DROP ? 0.0f : x / (1.0f - P_DROP);
}
'''

FP8_SRC = r'''
#include <cuda_fp8.h>
extern "C" __device__ unsigned char to_e4m3(float x) {
    __nv_fp8_e4m3 v(x);
    return v.__x;
}
extern "C" __device__ float from_e4m3(unsigned char b) {
    __nv_fp8_e4m3 v;
    v.__x = b;
    return (float)v;
}
'''


def _make_dropout():
    inc = _curand_include()
    if inc is None:
        return None
    dirs = [inc] + ([str(Path(inc) / "cccl")] if (Path(inc) / "cccl").is_dir() else [])
    drop = splice.extern(source=DROPOUT_SRC, name="philox_dropout", include_dirs=dirs,
                         signature="float32(float32, uint64, uint32)")(lambda *a: None)

    @splice.kernel
    def dropout_kernel(x, y, seed: ct.ScalarInt64, TILE: ConstInt):
        bid = ct.bid(0)
        t = ct.load(x, index=(bid,), shape=(TILE,))
        idx = ct.astype(bid * TILE + ct.arange(TILE, dtype=ct.int32), ct.uint32)
        ct.store(y, index=(bid,), tile=drop(t, ct.bitcast(seed, ct.uint64), idx))
    return dropout_kernel


fp8_lib = splice.library(FP8_SRC)
to_e4m3 = fp8_lib.extern("to_e4m3", signature="uint8(float32)")
from_e4m3 = fp8_lib.extern("from_e4m3", signature="float32(uint8)")


@splice.kernel
def fp8_kernel(x, bits, back, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    b = to_e4m3(t)
    ct.store(bits, index=(ct.bid(0),), tile=b)
    ct.store(back, index=(ct.bid(0),), tile=from_e4m3(b))


TEMPLATE_SRC = r'''
namespace my_ns {
template <class T> __device__ T scale(T x) { return x * T(3) + T(1); }
}
'''
scale_f = splice.extern(source=TEMPLATE_SRC, name="my_ns::scale<float>",
                        signature="float32(float32)")(lambda x: None)
scale_i = splice.extern(source=TEMPLATE_SRC, name="my_ns::scale<long long>",
                        signature="int64(int64)")(lambda x: None)


@splice.kernel
def template_kernel(x, y, xi, yi, TILE: ConstInt):
    ct.store(y, index=(ct.bid(0),), tile=scale_f(ct.load(x, index=(ct.bid(0),),
                                                         shape=(TILE,))))
    ct.store(yi, index=(ct.bid(0),), tile=scale_i(ct.load(xi, index=(ct.bid(0),),
                                                          shape=(TILE,))))


# ----------------------------------------------------------------------------- CPU

def test_input_kernels_compile():
    sig = K.signature(K.array(ct.float32), K.array(ct.uint8), K.array(ct.float32), 256)
    b = splice.compile(fp8_kernel, sig, "sm_90")
    # one library compile
    assert [s.kind for s in b.spans if s.owner.startswith("CUDA C source")] == ["fragment"]
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.array(ct.int64),
                      K.array(ct.int64), 256)
    splice.compile(template_kernel, sig, "sm_90")
    dropout = _make_dropout()
    if dropout is not None:
        splice.compile(dropout, K.signature(K.array(ct.float32), K.array(ct.float32),
                                            K.scalar(ct.int64), 256), "sm_90")


# ----------------------------------------------------------------------------- GPU

from support.gpu import launch as _launch


@pytest.mark.gpu
def test_curand_philox_dropout_matches_a_cupy_rawkernel_bit_for_bit(torch):
    cupy = pytest.importorskip("cupy")
    dropout = _make_dropout()
    if dropout is None:
        pytest.skip("curand_kernel.h not found")
    n, tile, seed = 1 << 16, 256, 1234567890123
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = torch.empty(n, dtype=torch.float32, device="cuda")
    _launch(torch, (n // tile,), dropout, (torch.from_numpy(x).cuda(), y, seed, tile))
    raw = cupy.RawKernel(DROPOUT_SRC.replace('extern "C" __device__', 'extern "C" __device__') +
                         r'''
extern "C" __global__ void ref(const float *x, float *y, unsigned long long seed, int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = philox_dropout(x[i], seed, i);
}''', "ref", options=("-I" + _curand_include(), "-I" + _curand_include() + "/cccl"),
        backend="nvrtc")
    cx = cupy.asarray(x)
    cy = cupy.empty_like(cx)
    raw(((n + 255) // 256,), (256,), (cx, cy, cupy.uint64(seed), cupy.int32(n)))
    ref = cupy.asnumpy(cy)
    got = y.cpu().numpy()
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    assert 0.2 < np.mean(got == 0) < 0.3


@pytest.mark.gpu
def test_fp8_conversions_match_ml_dtypes(torch):
    n, tile = 1 << 14, 256
    x = (np.random.default_rng(1).standard_normal(n) * 50).astype(np.float32)
    bits = torch.empty(n, dtype=torch.uint8, device="cuda")
    back = torch.empty(n, dtype=torch.float32, device="cuda")
    _launch(torch, (n // tile,), fp8_kernel, (torch.from_numpy(x).cuda(), bits, back, tile))
    ml = pytest.importorskip("ml_dtypes")
    ref = x.astype(ml.float8_e4m3fn)
    # cuda_fp8.h saturates to the largest finite value (448) where ml_dtypes gives NaN
    finite = np.abs(x) <= 448
    np.testing.assert_array_equal(bits.cpu().numpy()[finite], ref.view(np.uint8)[finite])
    np.testing.assert_array_equal(back.cpu().numpy()[finite], ref.astype(np.float32)[finite])


@pytest.mark.gpu
def test_cxx_template_from_a_namespace(torch):
    n, tile = 4096, 256
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    xi = np.random.default_rng(3).integers(-2 ** 40, 2 ** 40, n, dtype=np.int64)
    y = torch.empty(n, dtype=torch.float32, device="cuda")
    yi = torch.empty(n, dtype=torch.int64, device="cuda")
    _launch(torch, (n // tile,), template_kernel, (torch.from_numpy(x).cuda(), y,
                                                  torch.from_numpy(xi).cuda(), yi, tile))
    np.testing.assert_allclose(y.cpu().numpy(), x * np.float32(3) + 1, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(yi.cpu().numpy(), xi * 3 + 1)


def _target():
    arch = toolchain.gpu_arch()
    return arch + "a" if arch in ("sm_90", "sm_100") else arch


def _run_unary(torch, ext, ref_fn):
    @splice.kernel
    def kern(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t))
    n, tile = 4096, 256
    x = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    y = torch.empty(n, dtype=torch.float32, device="cuda")
    _launch(torch, (n // tile,), kern, (torch.from_numpy(x).cuda(), y, tile))
    np.testing.assert_allclose(y.cpu().numpy(), ref_fn(x), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_ltoir(torch):
    lto = splice.extern.from_ltoir(data=ltoir(_target()), name="lto_f",
                                   signature="float32(float32)")
    _run_unary(torch, lto, lambda x: x * np.float32(3) + 1)


@pytest.mark.gpu
def test_binary_object(torch, tmp_path):
    if nvjitlink_too_old():
        pytest.skip("nvJitLink older than tileiras's ptxas (splice refuses it with a clear "
                    "error, tested on the CPU)")
    obj = splice.extern.from_object(rdc_cubin(tmp_path, _target()), name="obj_f",
                                    signature="float32(float32)")
    _run_unary(torch, obj, lambda x: x * np.float32(5) - 1)
