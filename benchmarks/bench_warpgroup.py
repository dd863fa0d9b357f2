"""A warpgroup-scope epilogue: the TMA matmul of ``examples/matmul_rowmax_fp8.py`` whose
epilogue writes per-row FP8 scales (absmax / 448) through a ``scope="warpgroup"`` call,
side by side with (medians, ratios):

1. the same matmul plain, its C stored the same way (``allow_tma=False``: by the consumer
   warpgroup)                                                    (target <= 1.03)
1b. the plain matmul with cuTile's default TMA store                 (reported)
2. the plain matmul followed by ``torch.amax`` of |C| per row / 448, the epilogue's work as
   a separate kernel                                            (reported; the fused form
                                                                 should win)
3. first launch (trace, tileiras, NVRTC, rewrite, ptxas; empty caches) of the fused kernel
   vs the plain one                                             (reported)

fp16, M = N = K = 4096 by default, tiles 128x128x64. Without a GPU the kernels are compiled
for sm_90 and their call sites and SASS sizes are reported.

    python benchmarks/bench_warpgroup.py [--reps 30] [--size 4096]
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

# Empty caches, so that the first launch measures the whole compile.
os.environ["SPLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="splice-bench-")
os.environ["CUDA_TILE_CACHE_DIR"] = "off"

import cuda.tile as ct

import splice

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from matmul_rowmax_fp8 import TK, TM, TN, compile_only, make_kernel, make_row_scales, \
    matmul_acc


def make_plain(tma_store: bool):
    @ct.kernel
    def matmul_plain(A, B, C, tm: ct.Constant[int], tn: ct.Constant[int],
                     tk: ct.Constant[int]):
        acc = matmul_acc(A, B, tm, tn, tk)
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype),
                 allow_tma=tma_store)
    return matmul_plain


def gpu(a) -> None:
    import torch
    from _timing import first_launch, time_callable_side_by_side
    n = a.size
    fused = make_kernel(make_row_scales(n))
    plain, plain_tma = make_plain(False), make_plain(True)
    A = torch.randn(n, n, device="cuda", dtype=torch.float16)
    B = torch.randn(n, n, device="cuda", dtype=torch.float16)
    Cf, Cp, Ct = (torch.empty(n, n, device="cuda", dtype=torch.float16) for _ in range(3))
    scales = torch.zeros(n, device="cuda")
    grid = (n // TM, n // TN, 1)
    stream = torch.cuda.current_stream()
    t_first_fused = first_launch(torch, fused, (A, B, Cf, scales, TM, TN, TK), grid)
    t_first_plain = first_launch(torch, plain, (A, B, Cp, TM, TN, TK), grid)
    want = Cf.float().abs().amax(dim=1) / torch.full((n,), 448.0, device="cuda")  # IEEE, as m / 448.0f
    assert torch.equal(scales, want)
    torch.testing.assert_close(Cf, Cp)

    def plain_then_amax():
        ct.launch(stream, grid, plain, (A, B, Cp, TM, TN, TK))
        torch.amax(Cp.abs(), dim=1).float().div_(448.0)
    med = time_callable_side_by_side(torch, {
        "fused": lambda: ct.launch(stream, grid, fused, (A, B, Cf, scales, TM, TN, TK)),
        "plain": lambda: ct.launch(stream, grid, plain, (A, B, Cp, TM, TN, TK)),
        "plain (TMA store)": lambda: ct.launch(stream, grid, plain_tma, (A, B, Ct, TM, TN, TK)),
        "plain + torch.amax": plain_then_amax}, reps=a.reps)
    print(f"fp16 matmul {n}^3, tiles {TM}x{TN}x{TK}, per-row FP8 scales, {a.reps} reps, "
          f"{torch.cuda.get_device_name()}")
    for k, v in med.items():
        print(f"{k:<20} {v * 1e3:>9.4f} ms  {2 * n ** 3 / v / 1e12:>7.1f} TFLOP/s")
    print(f"ratio fused/plain: {med['fused'] / med['plain']:.4f} (target <= 1.03)")
    print(f"ratio fused/plain (TMA store): {med['fused'] / med['plain (TMA store)']:.4f}")
    print(f"ratio fused/(plain + torch.amax): {med['fused'] / med['plain + torch.amax']:.4f}")
    print(f"first launch fused {t_first_fused:.3f} s, plain {t_first_plain:.3f} s, ratio "
          f"{t_first_fused / t_first_plain:.2f}")


def compile_report(a) -> None:
    fused = compile_only(a.size)       # prints the build's summary
    sass = fused.sass or ""
    print(f"fused kernel: {len(fused.cubin)} bytes of cubin, "
          f"{sum(1 for ln in sass.splitlines() if ln.strip().startswith('/*'))} SASS lines")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--size", type=int, default=4096)
    a = p.parse_args(argv)
    if splice.toolchain.gpu_arch() is None:
        compile_report(a)
    else:
        gpu(a)


if __name__ == "__main__":
    sys.exit(main())
