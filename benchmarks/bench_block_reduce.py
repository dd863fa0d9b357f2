"""Row-wise reduction: a block-scope CUB extern vs the same kernel with ``ct.sum``.

    y[r] = sum(x[r, :]),  x float32 (M, N), 16384 x 4096 by default (256 MiB)

One block per row. The spliced kernel calls ``row_sum`` with ``scope="block"``: every thread
of the block (128) reads the row with float4 loads and CUB's ``BlockReduce`` sums it (the
first 128 columns come from a small ``ct.load`` + ``ct.sum``, which also gives the kernel
its 128-thread block). The plain kernel loads the whole row as one (1, N) tile and reduces
it with ``ct.sum``. Both are timed side by side in one process (interleaved, CUDA events,
median of repeated launches); prints each kernel's median time, bandwidth (bytes read /
time), the ratio splice / plain (target <= 1.05), and the first launch (trace + compile +
splice + link, empty caches) of each.

    python benchmarks/bench_block_reduce.py [--reps 50] [--rows 16384] [--cols 4096]
"""

import argparse
import os
import sys
import tempfile

# Empty caches, so that the first launch measures the whole compile.
os.environ["SPLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="splice-bench-")
os.environ["CUDA_TILE_CACHE_DIR"] = "off"

import cuda.tile as ct
import torch
from _timing import first_launch, time_side_by_side

import splice
from splice.cccl import include_dirs

HEAD = 128   # columns the kernel sums itself (its 128-thread block)


@splice.extern(scope="block", options=["-std=c++17"], include_dirs=include_dirs(), source=r'''
#include <cub/block/block_reduce.cuh>
extern "C" __device__ float row_sum_tail(const float* x, int row, int n) {
    // columns [128, n) of row `row`; n % 4 == 0, so every row start is 16-byte aligned
    using R = cub::BlockReduce<float, 128>;
    __shared__ typename R::TempStorage tmp;
    __shared__ float total;
    const float4* r = reinterpret_cast<const float4*>(x + (long long)row * n + 128);
    float acc = 0.0f;
    #pragma unroll 8
    for (int i = threadIdx.x; i < (n - 128) / 4; i += 128) {
        float4 v = r[i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    float s = R(tmp).Sum(acc);
    if (threadIdx.x == 0) total = s;
    __syncthreads();
    return total;
}''')
def row_sum_tail(x: splice.pointer(ct.float32), row: ct.int32, n: ct.int32) -> ct.float32: ...


@splice.kernel
def spliced(x, y, n: int):
    bid = ct.bid(0)
    head = ct.load(x, index=(bid, 0), shape=(1, HEAD), allow_tma=False)
    tail = row_sum_tail(x, bid, n)
    ct.store(y, index=(bid,), tile=ct.sum(head, axis=1) + tail)


@ct.kernel
def plain(x, y, N: ct.Constant[int]):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid, 0), shape=(1, N))
    ct.store(y, index=(bid,), tile=ct.sum(t, axis=1))


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--cols", type=int, default=4096)
    a = p.parse_args(argv)
    m, n = a.rows, a.cols
    if n % 4 or n <= HEAD or n & (n - 1):
        p.error("--cols must be a power of two > 128")
    x = torch.randn(m, n, device="cuda")
    ys = torch.empty(m, device="cuda")
    yp = torch.empty(m, device="cuda")
    grid = (m,)
    t_first_splice = first_launch(torch, spliced, (x, ys, n), grid)
    t_first_plain = first_launch(torch, plain, (x, yp, n), grid)
    ref = x.double().sum(dim=1).float()
    torch.testing.assert_close(ys, ref, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(yp, ref, rtol=1e-4, atol=1e-3)
    med = time_side_by_side(torch, {"splice": (grid, spliced, (x, ys, n)),
                                    "plain": (grid, plain, (x, yp, n))}, reps=a.reps)
    nbytes = x.numel() * x.element_size() + m * 4
    print(f"row sums of float32 ({m}, {n}) ({x.numel() * 4 >> 20} MiB), one block per row, "
          f"{a.reps} reps, {torch.cuda.get_device_name()}")
    print(f"{'kernel':<8} {'median ms':>10} {'GB/s':>8} {'first launch s':>15}")
    for k, first in (("plain", t_first_plain), ("splice", t_first_splice)):
        print(f"{k:<8} {med[k] * 1e3:>10.4f} {nbytes / med[k] / 1e9:>8.1f} {first:>15.3f}")
    print(f"ratio splice/plain (median time): {med['splice'] / med['plain']:.4f} "
          f"(target <= 1.05)")
    print(f"first launch ratio splice/plain: {t_first_splice / t_first_plain:.2f}")


if __name__ == "__main__":
    sys.exit(main())
