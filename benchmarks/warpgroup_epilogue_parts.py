"""Where the warpgroup tile epilogue's time goes (issue 21): the TMA matmul of
``examples/matmul_rowmax_fp8.py`` with its epilogue taken apart, one piece more per variant,
each timed side by side with the plain matmul in one process (medians of interleaved
launches, the L2 flushed before each; the ratio to the plain matmul of the same round, and
the median of the rounds' ratios).

Variants (fp16, M = N = K = 4096 by default, tiles 128x128x64):

- ``plain``, ``plain-again``: the plain matmul twice (the second: the noise floor)
- ``rowmax``: the row maxima of C's tile taken and stored by ``ct.store`` (no call)
- ``elem``: the row maxima passed to an *element* call (``memory="arguments"``) that does
  the per-row ``atomicMax`` of the example's callee (no staging, no group barriers)
- ``empty``: the example's warpgroup tile call with an empty callee (staging, splice's
  entry and exit barriers, nothing else)
- ``sync``: the callee is one ``splice_group_sync()`` (the example's) and nothing else
- ``rows``: the callee does the per-row atomics only (division by 448 included)
- ``rows-nodiv``: the per-row atomics of the row maxima themselves (no division)
- ``amax``: the callee does the group reduction and the one amax atomic only
- ``fused``: the example
- ``previous``: the example's callee as it was before (:data:`PREVIOUS_SRC`)

The callees of ``rows``, ``rows-nodiv`` and ``amax`` are the example's code, cut.

Each variant is compiled for the GPU's architecture; without a GPU, for sm_90, and its
``.reqntid``, ``wgmma`` shape (:func:`warpgroup_token_probe.kloop_shape`) and SASS counts are
printed instead of times.

    python benchmarks/warpgroup_epilogue_parts.py [--reps 50] [--rounds 5] [--size 4096]
"""

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("SPLICE_CACHE_DIR", tempfile.mkdtemp(prefix="splice-parts-"))

import cuda.tile as ct

import splice

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_warpgroup import matmul_plain, matmul_rowmax, sass_profile
from matmul_rowmax_fp8 import ROW_SCALES_SRC, TK, TM, TN, matmul_acc, signature
from warpgroup_token_probe import _elem_signature, _plain_signature, kloop_shape

_HEAD = r'''
#include <splice_group.h>
template <int N>
__device__ void row_scales(const float (&m)[N], float* scales, float* amax) {
    const long long row0 = (long long)blockIdx.x * N;
    const unsigned rank = splice_group_rank();
    (void)row0; (void)rank;
    __builtin_assume(__isGlobal(scales));
    __builtin_assume(__isGlobal(amax));
'''

#: callee bodies of the warpgroup tile variants (the example's callee: ROW_SCALES_SRC)
CALLEES = {
    "empty": "",
    "sync": "splice_group_sync();",
    "rows": """for (unsigned r = rank; r < N; r += splice_group_size())
        atomicMax((int*)&scales[row0 + r], __float_as_int(m[r] / 448.0f));""",
    "rows-nodiv": """for (unsigned r = rank; r < N; r += splice_group_size())
        atomicMax((int*)&scales[row0 + r], __float_as_int(m[r]));""",
    "amax": """__shared__ float per_warp[4];
    float t = 0.0f;
    for (unsigned r = rank; r < N; r += splice_group_size()) t = fmaxf(t, m[r]);
    t = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(t)));
    if (rank % 32 == 0) per_warp[rank / 32] = t;
    splice_group_sync();
    if (rank == 0)
        atomicMax((int*)amax, __float_as_int(fmaxf(fmaxf(per_warp[0], per_warp[1]),
                                                   fmaxf(per_warp[2], per_warp[3]))));""",
}

#: the example's callee before 2026-12-02's third session: shuffles, a second group barrier
#: and atomics through generic pointers (generic ATOMs)
PREVIOUS_SRC = r'''
#include <splice_group.h>
template <int N>
__device__ void row_scales(const float (&m)[N], float* scales, float* amax) {
    __shared__ float per_warp[4];
    const long long row0 = (long long)blockIdx.x * N;
    const unsigned rank = splice_group_rank();
    float t = 0.0f;
    for (unsigned r = rank; r < N; r += splice_group_size()) {
        t = fmaxf(t, m[r]);
        atomicMax((int*)&scales[row0 + r], __float_as_int(m[r] / 448.0f));
    }
    for (int d = 16; d > 0; d /= 2) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, d));
    if (rank % 32 == 0) per_warp[rank / 32] = t;
    splice_group_sync();
    if (rank == 0)
        atomicMax((int*)amax, __float_as_int(fmaxf(fmaxf(per_warp[0], per_warp[1]),
                                                   fmaxf(per_warp[2], per_warp[3]))));
    splice_group_sync();
}'''


def _callee(name):
    src = {"fused": ROW_SCALES_SRC, "previous": PREVIOUS_SRC}.get(name)
    return splice.extern(source=src or _HEAD + CALLEES[name] + "\n}", name="row_scales",
                         scope="warpgroup", memory="arguments",
                         signature="void(tile(float32), float32*, float32*)")


def _tile_kernel(callee):
    @splice.kernel
    def parts(A, B, C, scales, amax, tm: ct.Constant[int], tn: ct.Constant[int],
              tk: ct.Constant[int]):
        c = ct.astype(matmul_acc(A, B, tm, tn, tk), C.dtype)
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)
        callee(ct.astype(ct.max(ct.abs(c), axis=1), ct.float32), scales, amax)
    return parts


row_max = splice.extern(
    name="row_max", signature="int32(float32*, int32, float32)", pure=False,
    memory="arguments",
    source=r'''extern "C" __device__ int row_max(float* s, int i, float v) {
        atomicMax((int*)&s[i], __float_as_int(v / 448.0f)); return 0; }''')


@splice.kernel
def elem_parts(A, B, C, scales, tm: ct.Constant[int], tn: ct.Constant[int],
               tk: ct.Constant[int]):
    c = ct.astype(matmul_acc(A, B, tm, tn, tk), C.dtype)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)
    row_max(scales, ct.bid(0) * tm + ct.arange(tm, dtype=ct.int32),
            ct.astype(ct.max(ct.abs(c), axis=1), ct.float32))


def variants():
    """{name: (kernel, its sm_90 signature, which arguments of (A, B, C, scales, amax) it
    takes)}."""
    out = {"plain": (matmul_plain, _plain_signature, 3),
           "plain-again": (matmul_plain, _plain_signature, 3),
           "rowmax": (matmul_rowmax, _elem_signature, 4),
           "elem": (elem_parts, _elem_signature, 4)}
    for name in (*CALLEES, "fused", "previous"):
        out[name] = (_tile_kernel(_callee(name)), signature, 5)
    return out


def cpu_report() -> None:
    print(f"{'variant':<12} {'.reqntid':>8} {'mma':>4} {'wait_group':>10} "
          f"{'SASS':>5} {'epilogue':>8} {'BAR':>4} {'ATOM':>4}")
    for name, (kernel, sig, _) in variants().items():
        if name == "plain-again":
            continue
        b = splice.compile(kernel, sig(), arch="sm_90")
        threads, mmas, waits = kloop_shape(b.ptx)
        s = sass_profile(b)
        print(f"{name:<12} {threads:>8} {mmas:>4} {waits!s:>10} {s['SASS instructions']:>5} "
              f"{s['in the epilogue']:>8} {s['BAR']:>4} {s['ATOM/RED']:>4}", flush=True)


def _launcher(stream, grid, kernel, args):
    return lambda: ct.launch(stream, grid, kernel, args)


def gpu_report(a) -> None:
    import torch
    from _timing import time_callable_side_by_side
    n = a.size
    A = torch.randn(n, n, device="cuda", dtype=torch.float16)
    B = torch.randn(n, n, device="cuda", dtype=torch.float16)
    C = torch.empty(n, n, device="cuda", dtype=torch.float16)
    scales, amax = torch.zeros(n, device="cuda"), torch.zeros(1, device="cuda")
    grid, stream = (n // TM, n // TN, 1), torch.cuda.current_stream()
    fns = {}
    for name, (kernel, _, k) in variants().items():
        args = ((A, B, C, scales, amax)[:k] if name != "rowmax"
                else (A, B, C, torch.empty(n, device="cuda"))) + (TM, TN, TK)
        fns[name] = _launcher(stream, grid, kernel, args)
        fns[name]()
        torch.cuda.synchronize()
    rounds = [time_callable_side_by_side(torch, fns, reps=a.reps, flush_l2=True)
              for _ in range(a.rounds)]
    print(f"fp16 matmul {n}^3, tiles {TM}x{TN}x{TK}, {a.reps} reps x {a.rounds} rounds, "
          f"{torch.cuda.get_device_name()}; ms per launch (medians), ratio to plain")
    print(f"{'variant':<12}" + "".join(f"{'ms':>9}{'ratio':>8}" for _ in rounds)
          + f"{'median ratio':>14}")
    for name in fns:
        ratios = [r[name] / r["plain"] for r in rounds]
        print(f"{name:<12}" + "".join(f"{r[name] * 1e3:>9.4f}{q:>8.4f}"
                                      for r, q in zip(rounds, ratios, strict=True))
              + f"{statistics.median(ratios):>14.4f}")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--size", type=int, default=4096)
    a = p.parse_args(argv)
    if splice.toolchain.gpu_arch() is None:
        cpu_report()
    else:
        gpu_report(a)


if __name__ == "__main__":
    sys.exit(main())
