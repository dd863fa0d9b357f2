"""Normalise every row of X by its sum, where the row sum is CUB's ``BlockReduce`` called
with ``scope="block"``: every thread of the block calls ``row_sum`` once.

With a GPU the result is checked against NumPy. Without one, the kernel is compiled for
sm_90 and the call site and the SASS CALL count are printed.
"""

import sys

import cuda.tile as ct
import numpy as np

import splice
from splice.cccl import include_dirs


@splice.extern(scope="block", options=["-std=c++17"], include_dirs=include_dirs(),
               source=r'''
#include <cub/block/block_reduce.cuh>
extern "C" __device__ float row_sum(const float* x, int row, int n) {
    using R = cub::BlockReduce<float, 128>;          // tileiras's block: 128 threads
    __shared__ typename R::TempStorage tmp;
    __shared__ float total;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += 128) acc += x[(long long)row * n + i];
    float s = R(tmp).Sum(acc);                        // valid in thread 0 only
    if (threadIdx.x == 0) total = s;
    __syncthreads();
    return total;                                     // the same in every thread
}''')
def row_sum(x: splice.pointer(ct.float32), row: ct.int32, n: ct.int32) -> ct.float32: ...


@splice.kernel
def normalise_rows(x, y, n: int, N: ct.Constant[int]):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid, 0), shape=(1, N), allow_tma=False)
    s = row_sum(x, bid, n)
    ct.store(y, index=(bid, 0), tile=t / s)


def run_on_gpu(M=256, N=1024):
    import torch
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.5, (M, N)).astype(np.float32)
    X = torch.from_numpy(x).cuda()
    Y = torch.empty_like(X)
    ct.launch(torch.cuda.current_stream(), (M,), normalise_rows, (X, Y, N, N))
    torch.cuda.synchronize()
    ref = x / x.astype(np.float64).sum(axis=1, keepdims=True)
    err = np.abs(Y.cpu().numpy() - ref).max()
    print(f"normalise_rows on {splice.toolchain.gpu_arch()}: {M}x{N}, max |error| = {err:.2e}")
    assert err < 1e-6, err
    print("OK")


def compile_only(N=1024):
    sig = splice.kernel_signature("array(float32, ndim=2)", "array(float32, ndim=2)",
                                  "scalar(int32)", N)
    build = splice.compile(normalise_rows, sig, arch="sm_90")
    print("no GPU: compiled for sm_90 without launching")
    print(build.summary())


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
