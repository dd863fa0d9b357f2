"""Tiles into and out of block calls: the staging's cost, side by side in one process.

    (a) row sort of (M, 1024) float32: splice.cub.sort vs torch.sort(dim=-1) vs the same CUB
        BlockRadixSort as a whole CUDA C kernel (CuPy RawKernel; target splice <= 1.10 x it)
    (b) row inclusive scan: splice.cub.inclusive_sum (CUB BlockScan) vs ct.cumsum (<= 1.05)
    (c) top-k, k = 8 of 1024 per row: splice.cub.top_k vs torch.topk
    (d) 256-bin histogram per row of int32 values: splice.cub.histogram vs torch.bincount
        (all rows in one call, each row's values offset by row * 256)
    (e) row exclusive sum: splice.cub.exclusive_sum vs torch.cumsum (inclusive: the nearest)
    (f) row running maximum: splice.cub.inclusive_scan(t, "max") vs torch.cummax
    (g) row maximum: splice.cub.reduce(t, "max") vs torch.amax(dim=-1) vs ct.max
    (h) stable row sort: splice.cub.merge_sort vs torch.sort(stable=True) vs splice.cub.sort
    (i) runs of each sorted row of int32 values 0..15: splice.cub.unique_counts vs
        torch.unique_consecutive(return_counts=True) (all rows in one call, each row's
        values offset by row * 16)
    (j) (i)'s runs decoded back: splice.cub.run_length_decode vs torch.repeat_interleave
    (e)-(j) flush the L2 before each timed launch (_timing's flush_l2).

One block per row, M = 16384 by default; medians of interleaved launches (CUDA events).
Also the first launch (trace, compile, splice, link, load; empty caches) of each spliced
kernel against a plain cuTile kernel of the same shape (a row copy).

Without a GPU the script compiles each spliced kernel for sm_90 and reports its call
sites, staging instances per thread, static shared memory and compile time.

    python benchmarks/bench_block_tiles.py [--reps 50] [--rows 16384] [--compile-only]
"""

import argparse
import os
import re
import sys
import tempfile
import time

# Empty caches, so that the first launch measures the whole compile (compiling only, the
# caller's cache serves: it measures nothing).
if "--compile-only" not in sys.argv:
    os.environ["SPLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="splice-bench-")
os.environ["CUDA_TILE_CACHE_DIR"] = "off"

import cuda.tile as ct

import splice

N, K, BINS = 1024, 8, 256


@splice.kernel
def sort_rows(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t))


@splice.kernel
def scan_rows(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.inclusive_sum(t))


@splice.kernel
def top_k_rows(x, v, i, N: ct.Constant[int], K: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    a, b = splice.cub.top_k(t, K)
    ct.store(v, index=(ct.bid(0),), tile=a)
    ct.store(i, index=(ct.bid(0),), tile=b)


@splice.kernel
def histogram_rows(x, h, N: ct.Constant[int], BINS: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(h, index=(ct.bid(0),), tile=splice.cub.histogram(t, BINS))


@splice.kernel
def exclusive_sum_rows(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.exclusive_sum(t))


@splice.kernel
def cummax_rows(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.inclusive_scan(t, "max"))


@splice.kernel
def max_rows(x, m, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(m, index=(ct.bid(0),), tile=ct.full((1,), 0, dtype=ct.float32) +
             splice.cub.reduce(t, "max"))


@ct.kernel
def ct_max_rows(x, m, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(m, index=(ct.bid(0),), tile=ct.reshape(ct.max(t, axis=0), (1,)))


@splice.kernel
def merge_sort_rows(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.merge_sort(t))


@splice.kernel
def unique_counts_rows(x, v, c, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    a, b = splice.cub.unique_counts(t)
    ct.store(v, index=(ct.bid(0),), tile=a)
    ct.store(c, index=(ct.bid(0),), tile=b)


@splice.kernel
def run_length_decode_rows(v, c, y, N: ct.Constant[int]):
    a = ct.load(v, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    b = ct.load(c, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.run_length_decode(a, b))


@ct.kernel
def cumsum_rows(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=ct.cumsum(t, axis=0))


@ct.kernel
def copy_rows(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t)


CUB_SORT_KERNEL = r'''
#include <cub/block/block_radix_sort.cuh>
extern "C" __global__ void __launch_bounds__(128) cub_sort_rows(const float* x, float* y) {
    using Sort = cub::BlockRadixSort<float, 128, 8>;
    __shared__ typename Sort::TempStorage tmp;
    const float* r = x + (long long)blockIdx.x * 1024;
    float v[8];
    for (int i = 0; i < 8; ++i) v[i] = r[threadIdx.x * 8 + i];
    Sort(tmp).Sort(v);
    float* o = y + (long long)blockIdx.x * 1024;
    for (int i = 0; i < 8; ++i) o[threadIdx.x * 8 + i] = v[i];
}'''

CASES = {   # name: (kernel, parameters of its signature)
    "sort": (sort_rows, ("array(float32)", "array(float32)", N)),
    "scan": (scan_rows, ("array(float32)", "array(float32)", N)),
    "top_k": (top_k_rows, ("array(float32)", "array(float32)", "array(int32)", N, K)),
    "histogram": (histogram_rows, ("array(int32)", "array(int32)", N, BINS)),
    "exclusive_sum": (exclusive_sum_rows, ("array(float32)", "array(float32)", N)),
    "cummax": (cummax_rows, ("array(float32)", "array(float32)", N)),
    "reduce_max": (max_rows, ("array(float32)", "array(float32)", N)),
    "merge_sort": (merge_sort_rows, ("array(float32)", "array(float32)", N)),
    "unique_counts": (unique_counts_rows, ("array(int32)", "array(int32)", "array(int32)", N)),
    "rl_decode": (run_length_decode_rows,
                  ("array(int32)", "array(int32)", "array(int32)", N)),
}


def compile_only():
    print(f"no GPU: each kernel compiled for sm_90 (rows of {N} elements, one block per row)")
    print(f"{'kernel':<14} {'sites':>5} {'stores/thr':>10} {'loads/thr':>9} "
          f"{'static smem B':>13} {'compile s':>9}")
    for name, (kernel, params) in CASES.items():
        t0 = time.perf_counter()
        b = splice.compile(kernel, splice.kernel_signature(*params), "sm_90")
        dt = time.perf_counter() - t0
        stores = sum(s.instances for s in b.sites if "into shared memory" in s.extern)
        loads = sum(s.instances for s in b.sites if "from shared memory" in s.extern)
        ptx = b.spliced_ptx.split(".nv_intermediate_source_section")[0]
        smem = sum(int(m.group(1)) * int(m.group(2)) // 8 for m in re.finditer(
            r"^\s*(?:\.weak\s+)?\.shared\s[^;]*?\.b(\d+)\s+[\w$]+\[(\d+)\];", ptx, re.M))
        print(f"{name:<14} {len(b.sites):>5} {stores:>10} {loads:>9} {smem:>13} {dt:>9.2f}")


def _cub_kernel():
    """The whole-kernel CUB sort (CuPy RawKernel on NVRTC), or None without CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    from splice.cccl import include_dirs
    opts = ("-std=c++17",) + tuple(f"-I{d}" for d in include_dirs())
    return cupy.RawKernel(CUB_SORT_KERNEL, "cub_sort_rows", options=opts, backend="nvrtc")


def run_on_gpu(reps: int, m: int):
    import torch
    from _timing import first_launch, time_callable_side_by_side
    stream = torch.cuda.current_stream()

    def launcher(kernel, args):
        return lambda: ct.launch(stream, (m,), kernel, args)
    x = torch.randn(m * N, device="cuda")
    y, y2 = torch.empty_like(x), torch.empty_like(x)
    v = torch.empty(m * K, device="cuda")
    i = torch.empty(m * K, device="cuda", dtype=torch.int32)
    xi = torch.randint(0, BINS, (m * N,), device="cuda", dtype=torch.int32)
    h = torch.empty(m * BINS, device="cuda", dtype=torch.int32)
    first = {
        "sort": first_launch(torch, sort_rows, (x, y, N), (m,)),
        "scan": first_launch(torch, scan_rows, (x, y, N), (m,)),
        "top_k": first_launch(torch, top_k_rows, (x, v, i, N, K), (m,)),
        "histogram": first_launch(torch, histogram_rows, (xi, h, N, BINS), (m,)),
        "plain copy": first_launch(torch, copy_rows, (x, y2, N), (m,)),
    }
    rows = x.view(m, N)
    # correctness first: every timed kernel against torch
    launcher(sort_rows, (x, y, N))()
    assert torch.equal(y.view(m, N), torch.sort(rows, dim=-1).values)
    launcher(top_k_rows, (x, v, i, N, K))()
    assert torch.equal(v.view(m, K), torch.topk(rows, K, dim=-1).values)
    launcher(histogram_rows, (xi, h, N, BINS))()
    offs = (xi.view(m, N) + torch.arange(m, device="cuda")[:, None] * BINS).reshape(-1)
    assert torch.equal(h.long(), torch.bincount(offs, minlength=m * BINS))
    cub = _cub_kernel()
    sort_cases = {"splice.cub.sort": launcher(sort_rows, (x, y, N)),
                  "torch.sort": lambda: torch.sort(rows, dim=-1)}
    if cub is not None:
        import cupy
        xc, yc = cupy.asarray(x), cupy.empty(m * N, dtype=cupy.float32)
        sort_cases["CUB kernel (CuPy)"] = lambda: cub((m,), (128,), (xc, yc))
    tables = {
        f"(a) row sort of ({m}, {N}) float32": sort_cases,
        f"(b) row inclusive scan of ({m}, {N}) float32": {
            "splice.cub.inclusive_sum": launcher(scan_rows, (x, y, N)),
            "ct.cumsum": launcher(cumsum_rows, (x, y2, N))},
        f"(c) top-{K} of each row of ({m}, {N}) float32": {
            "splice.cub.top_k": launcher(top_k_rows, (x, v, i, N, K)),
            "torch.topk": lambda: torch.topk(rows, K, dim=-1)},
        f"(d) {BINS}-bin histogram of each row of ({m}, {N}) int32": {
            "splice.cub.histogram": launcher(histogram_rows, (xi, h, N, BINS)),
            "torch.bincount": lambda: torch.bincount(offs, minlength=m * BINS)},
    }
    flushed = new_ops_tables(torch, m, launcher, x, rows)
    tables.update(flushed)
    print(f"{torch.cuda.get_device_name()}, {reps} reps, medians; one block per row")
    for title, fns in tables.items():
        med = time_callable_side_by_side(torch, fns, reps=reps, flush_l2=title in flushed)
        base = next(iter(med.values()))
        print(f"\n{title}\n{'':<4}{'kernel':<26} {'median ms':>10} {'splice / this':>14}")
        for name, t in med.items():
            print(f"{'':<4}{name:<26} {t * 1e3:>10.4f} {base / t:>14.3f}")
    print("\nfirst launch (s), empty caches: " +
          ", ".join(f"{k} {t:.2f}" for k, t in first.items()))


def new_ops_tables(torch, m, launcher, x, rows):
    """Tables (e)-(i): the scans, reduction, merge sort and runs, each checked against
    torch first."""
    y = torch.empty_like(x)
    mx, mx2 = torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
    # sorted rows of small integers, offset per row so that no run crosses rows
    xs = torch.sort(torch.randint(0, 16, (m, N), device="cuda", dtype=torch.int32), -1).values
    xs = (xs + torch.arange(m, device="cuda", dtype=torch.int32)[:, None] * 16).reshape(-1)
    uv, uc = torch.empty_like(xs), torch.empty_like(xs)
    launcher(exclusive_sum_rows, (x, y, N))()
    # float32 sums in CUB's order and in torch's: equal up to rounding
    torch.testing.assert_close(y.view(m, N), torch.cumsum(rows, -1) - rows, atol=1e-3,
                               rtol=1e-4)
    launcher(cummax_rows, (x, y, N))()
    assert torch.equal(y.view(m, N), torch.cummax(rows, -1).values)
    launcher(max_rows, (x, mx, N))()
    assert torch.equal(mx, torch.amax(rows, -1))
    launcher(merge_sort_rows, (x, y, N))()
    assert torch.equal(y.view(m, N), torch.sort(rows, dim=-1, stable=True).values)
    launcher(unique_counts_rows, (xs, uv, uc, N))()
    _, counts = torch.unique_consecutive(xs, return_counts=True)
    assert torch.equal(uc[uc > 0], counts.int())
    yd = torch.empty_like(xs)
    launcher(run_length_decode_rows, (uv, uc, yd, N))()
    assert torch.equal(yd, xs)
    assert torch.equal(torch.repeat_interleave(uv, uc, output_size=m * N), xs)
    return {
        f"(e) row exclusive sum of ({m}, {N}) float32": {
            "splice.cub.exclusive_sum": launcher(exclusive_sum_rows, (x, y, N)),
            "torch.cumsum": lambda: torch.cumsum(rows, -1)},
        f"(f) row running max of ({m}, {N}) float32": {
            "splice.cub.inclusive_scan max": launcher(cummax_rows, (x, y, N)),
            "torch.cummax": lambda: torch.cummax(rows, -1)},
        f"(g) row max of ({m}, {N}) float32": {
            "splice.cub.reduce max": launcher(max_rows, (x, mx, N)),
            "torch.amax": lambda: torch.amax(rows, -1),
            "ct.max": launcher(ct_max_rows, (x, mx2, N))},
        f"(h) stable row sort of ({m}, {N}) float32": {
            "splice.cub.merge_sort": launcher(merge_sort_rows, (x, y, N)),
            "torch.sort stable": lambda: torch.sort(rows, dim=-1, stable=True),
            "splice.cub.sort (radix)": launcher(sort_rows, (x, y, N))},
        f"(i) runs of each sorted row of ({m}, {N}) int32": {
            "splice.cub.unique_counts": launcher(unique_counts_rows, (xs, uv, uc, N)),
            "torch.unique_consecutive": lambda: torch.unique_consecutive(
                xs, return_counts=True)},
        f"(j) run-length decode of (i)'s runs, ({m}, {N}) int32": {
            "splice.cub.run_length_decode": launcher(run_length_decode_rows, (uv, uc, yd, N)),
            "torch.repeat_interleave": lambda: torch.repeat_interleave(
                uv, uc, output_size=m * N)},
    }


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--compile-only", action="store_true")
    a = p.parse_args(argv)
    if a.compile_only or splice.toolchain.gpu_arch() is None:
        compile_only()
    else:
        run_on_gpu(a.reps, a.rows)


if __name__ == "__main__":
    sys.exit(main())
