"""Memory-bound elementwise kernel: an extern call vs. the same kernel in pure cuTile.

    y = scale_shift(x) = 2 x + 1,  x, y float32, 64 Mi elements (256 MiB per array)

Both kernels are timed side by side in one process (interleaved, CUDA events, median of
repeated launches). Prints each kernel's median time and achieved bandwidth (bytes read +
written / time), and the ratio splice / plain (target <= 1.02). Also reports the first
launch (trace + compile + splice + link, empty caches) of each kernel, after both sides paid
their one-time costs (cuTile's tileiras version probe, NVRTC's import, splice's tileiras
overlay) on a warm-up kernel each; ``bench_first_launch.py`` measures first launches in
detail.

    python benchmarks/bench_elementwise.py [--reps 50] [--tile 1024]
"""

import argparse
import os
import sys
import tempfile

# Empty caches (both on, as users have them), so that the first launch measures the whole
# compile.
os.environ["SPLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="splice-bench-")
os.environ["CUDA_TILE_CACHE_DIR"] = tempfile.mkdtemp(prefix="cutile-bench-")

import cuda.tile as ct
import torch
from _timing import first_launch, time_side_by_side

import splice


@splice.extern(source=r'''
extern "C" __device__ float scale_shift(float x) { return x * 2.0f + 1.0f; }''')
def scale_shift(x: ct.float32) -> ct.float32: ...


@splice.kernel
def spliced(x, y, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(TILE,))
    ct.store(y, index=(bid,), tile=scale_shift(t))


@ct.kernel
def plain(x, y, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(TILE,))
    ct.store(y, index=(bid,), tile=t * 2.0 + 1.0)


# Warm-up kernels: other code (extern source, constant) than the measured ones, so that
# their compiles pay the once-per-process costs and leave no cache entry the others hit.
@splice.extern(source=r'''
extern "C" __device__ float warm_up(float x) { return x * 3.0f + 1.0f; }''')
def warm_up(x: ct.float32) -> ct.float32: ...


@splice.kernel
def spliced_warm_up(x, y, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    ct.store(y, index=(bid,), tile=warm_up(ct.load(x, index=(bid,), shape=(TILE,))))


@ct.kernel
def plain_warm_up(x, y, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    ct.store(y, index=(bid,), tile=ct.load(x, index=(bid,), shape=(TILE,)) * 3.0 + 1.0)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--tile", type=int, default=1024)
    p.add_argument("--elements", type=int, default=64 << 20)
    a = p.parse_args(argv)
    n, tile = a.elements, a.tile
    x = torch.randn(n, device="cuda")
    ys = torch.empty_like(x)
    yp = torch.empty_like(x)
    grid = (n // tile,)
    first_launch(torch, plain_warm_up, (x, yp, tile), grid)
    first_launch(torch, spliced_warm_up, (x, ys, tile), grid)
    t_first_splice = first_launch(torch, spliced, (x, ys, tile), grid)
    t_first_plain = first_launch(torch, plain, (x, yp, tile), grid)
    torch.testing.assert_close(ys, x * 2 + 1)
    torch.testing.assert_close(yp, x * 2 + 1)
    med = time_side_by_side(torch, {"splice": (grid, spliced, (x, ys, tile)),
                                    "plain": (grid, plain, (x, yp, tile))}, reps=a.reps)
    nbytes = 2 * n * x.element_size()
    print(f"elementwise y = 2x + 1, float32, {n} elements ({n * 4 >> 20} MiB per array), "
          f"tile {tile}, {a.reps} reps, {torch.cuda.get_device_name()}")
    print(f"{'kernel':<8} {'median ms':>10} {'GB/s':>8} {'first launch s':>15}")
    for k, first in (("plain", t_first_plain), ("splice", t_first_splice)):
        print(f"{k:<8} {med[k] * 1e3:>10.4f} {nbytes / med[k] / 1e9:>8.1f} {first:>15.3f}")
    print(f"ratio splice/plain (median time): {med['splice'] / med['plain']:.4f} "
          f"(target <= 1.02)")
    print(f"first launch ratio splice/plain: {t_first_splice / t_first_plain:.2f}")


if __name__ == "__main__":
    sys.exit(main())
