"""Sort every row of X with CUB's ``BlockRadixSort``, called on the row's tile: a
block-scope extern whose parameter and result are tiles (``splice.tile``). splice stages the
tile in shared memory it owns and the C++ template sees it as an array of the tile's shape
(``const float (&x)[N]``), instantiated for each call's N.

With a GPU the result is checked against ``torch.sort``. Without one, the kernel is
compiled for sm_90 and the call sites and the SASS CALL count are printed.
"""

import sys

import cuda.tile as ct

import splice
from splice.cccl import include_dirs


@splice.extern(scope="block", options=["-std=c++17"], include_dirs=include_dirs(),
               source=r'''
#include <cub/block/block_radix_sort.cuh>
template <int N> __device__ void sort_row(const float (&x)[N], float (&y)[N]) {
    constexpr int T = 128, I = N / T;                 // tileiras's block: 128 threads
    static_assert(N % T == 0, "rows of a multiple of 128 elements");
    using Sort = cub::BlockRadixSort<float, T, I>;
    __shared__ typename Sort::TempStorage tmp;
    float v[I];
    for (int i = 0; i < I; ++i) v[i] = x[threadIdx.x * I + i];    // blocked arrangement
    Sort(tmp).Sort(v);
    for (int i = 0; i < I; ++i) y[threadIdx.x * I + i] = v[i];
}''')
def sort_row(x: splice.tile(ct.float32)) -> splice.tile(ct.float32): ...


@splice.kernel
def sort_rows(x, y, N: ct.Constant[int]):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(N,), allow_tma=False)    # row bid of a flat array
    ct.store(y, index=(bid,), tile=sort_row(t))


def run_on_gpu(M=4096, N=1024):
    import torch
    x = torch.randn(M, N, device="cuda")
    y = torch.empty_like(x)
    ct.launch(torch.cuda.current_stream(), (M,), sort_rows, (x.view(-1), y.view(-1), N))
    torch.cuda.synchronize()
    assert torch.equal(y, torch.sort(x, dim=-1).values)
    print(f"sort_rows on {splice.toolchain.gpu_arch()}: {M}x{N} float32, equal to torch.sort")
    print("OK")


def compile_only(N=1024):
    sig = splice.kernel_signature("array(float32)", "array(float32)", N)
    build = splice.compile(sort_rows, sig, arch="sm_90")
    print("no GPU: compiled for sm_90 without launching")
    print(build.summary())


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
