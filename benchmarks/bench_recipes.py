"""The recipes (examples/recipes/, docs/recipes/) against what users run today, side by side
in one process: medians of interleaved launches (CUDA events), the L2 flushed before each.
Every case checks the recipe's values against its baseline first.

    (1) MoE routing + alignment (moe_align.py) vs the cuTile sample's PyTorch composite
        (softmax, topk, renormalise, moe_align_tile_size_torch: a host loop over the
        experts), the same in vectorised PyTorch (no host loop), and the same algorithm in
        CUDA C (benchmarks/moe_align_cuda.py, CuPy RawModule)
    (2) top-k / top-p sampling (sampling.py) vs the PyTorch reference of the definition (a
        full sort of the vocabulary), and PyTorch with torch.topk of the largest k first
    (3) RMSNorm + per-token FP8 (rmsnorm_fp8.py) vs PyTorch, the unfused cuTile pair, and
        the fused kernel with ct.max instead of splice.cub.reduce (what splice costs)
    (4) argsort + gather (sort_gather.py) vs torch.argsort + torch.gather

Decode-sized and prefill-sized problems each; ``splice / this`` below 1 is splice faster.

    python benchmarks/bench_recipes.py [--reps 30] [--only moe,sampling,rmsnorm,gather]
    python benchmarks/bench_recipes.py --compile-only     # no GPU: compiles, compile times
"""

import argparse
import sys
import time
from pathlib import Path

import cuda.tile as ct

import splice

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "recipes"))

import moe_align
import rmsnorm_fp8
import sampling
import sort_gather

MOE = [(1, 128, 8, 64), (64, 128, 8, 64), (64, 256, 8, 64), (4096, 128, 8, 64),
       (16384, 256, 8, 64), (16384, 8, 2, 128)]
SAMPLING = [(1, 151936, 50), (64, 151936, 50), (64, 32000, 50), (256, 32000, 1000)]
RMSNORM = [(16, 4096), (4096, 4096), (16384, 7168)]
GATHER = [(8, 4096, 128), (256, 1024, 64)]


# ---------------------------------------------------------------------------------------------
# (1) MoE


def torch_align_vectorised(torch, logits, k, tile_m):
    """Routing and alignment in PyTorch without a host loop (graph-safe): the same outputs
    over the largest buffers, as the recipe."""
    tokens, experts = logits.shape
    probs = torch.softmax(logits, -1)
    w, ids = torch.topk(probs, k, -1)
    w = w / w.sum(-1, keepdim=True)
    flat = ids.view(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + tile_m - 1) // tile_m * tile_m
    start, ustart = torch.cumsum(padded, 0) - padded, torch.cumsum(counts, 0) - counts
    e = flat[order]
    dest = start[e] + torch.arange(flat.numel(), device=flat.device) - ustart[e]
    size = -(-(tokens * k + experts * (tile_m - 1)) // tile_m) * tile_m
    sorted_ids = torch.full((size,), tokens * k, dtype=torch.int32, device=flat.device)
    sorted_ids[dest] = order.int()
    expert_ids = torch.zeros(-(-size // tile_m), dtype=torch.int32, device=flat.device)
    first = dest % tile_m == 0
    expert_ids[dest[first] // tile_m] = e[first].int()
    return w, ids, sorted_ids, expert_ids, padded.sum()


def _cupy_moe(c, experts, logits, tokens):
    """The CUDA C baseline's launcher and outputs (None without CuPy)."""
    try:
        import cupy
    except ImportError:
        return None, None
    import moe_align_cuda

    from splice.cccl import include_dirs
    mod = cupy.RawModule(code=moe_align_cuda.source(c, experts), backend="nvrtc",
                         options=moe_align_cuda.options(include_dirs()))
    out = moe_align.outputs(cupy, c, tokens)
    steps = [(mod.get_function(name), grid, args) for name, grid, args in
             moe_align_cuda.launches(c, experts, cupy.asarray(logits), out, tokens)]

    def launch():
        for fn, grid, args in steps:
            fn(grid, (128,), tuple(cupy.int32(a) if isinstance(a, int) else a for a in args))
    return launch, out


def moe_cases(torch):
    for tokens, experts, k, tm in MOE:
        logits = torch.randn(tokens, experts, device="cuda")
        c = moe_align.config(tokens, experts, k, tm)
        out = moe_align.outputs(torch, c, tokens, device="cuda")
        steps = moe_align.plan(c, logits, out, tokens)
        stream = torch.cuda.current_stream()

        def spliced(steps=steps, stream=stream):
            for kernel, grid, args, constants in steps:
                ct.launch(stream, grid, kernel, args + constants)
        spliced()
        _, ids, st, se = moe_align.torch_reference(logits, k, tm)
        n = int(out["num_tokens_post_padded"])
        assert torch.equal(out["topk_ids"], ids) and torch.equal(out["sorted_token_ids"][:n], st)
        vec = torch_align_vectorised(torch, logits, k, tm)
        assert torch.equal(vec[2], out["sorted_token_ids"])
        fns = {"splice": spliced,
               "torch (sample's)": lambda lg=logits, k=k, tm=tm: moe_align.torch_reference(
                   lg, k, tm),
               "torch vectorised": lambda lg=logits, k=k, tm=tm: torch_align_vectorised(
                   torch, lg, k, tm)}
        cuda_c, cout = _cupy_moe(c, experts, logits, tokens)
        if cuda_c is not None:
            cuda_c()
            assert torch.equal(torch.as_tensor(cout["sorted_token_ids"], device="cuda"),
                               out["sorted_token_ids"])
            fns["CUDA C (CuPy)"] = cuda_c
        yield (f"(1) MoE routing + alignment: {tokens} tokens, {experts} experts, top-{k}, "
               f"TILE_M {tm} ({len(steps)} kernel(s))", fns)


# ---------------------------------------------------------------------------------------------
# (2) sampling


def torch_topk_first(torch, logits, temperature, top_k, top_p, uniform):
    """The definition in PyTorch with torch.topk of the largest k instead of a full sort."""
    s, idx = torch.topk(logits / temperature[:, None], int(top_k.max()), dim=-1)
    j = torch.arange(s.shape[1], device=s.device)
    w = torch.where(j[None, :] < top_k[:, None], torch.exp(s - s[:, :1]), 0.0)
    return idx.gather(1, sampling.pick_weights(w, top_p, uniform)[:, None])


def sampling_cases(torch):
    for rows, vocab, max_k in SAMPLING:
        args = sampling._problem(torch, rows, vocab, max_k)
        c = sampling.config(rows, vocab, max_k)
        out = sampling.outputs(torch, c, device="cuda")
        steps = sampling.plan(c, *args, out)
        stream = torch.cuda.current_stream()

        def spliced(steps=steps, stream=stream):
            for kernel, grid, a, constants in steps:
                ct.launch(stream, grid, kernel, a + constants)
        spliced()
        ref, _ = sampling.torch_reference(*args)
        assert torch.equal(out["tokens"], ref)
        yield (f"(2) top-k / top-p sampling: {rows} rows of {vocab} logits, top-k <= {max_k}",
               {"splice": spliced,
                "torch (full sort)": lambda a=args: sampling.torch_reference(*a),
                "torch (topk first)": lambda a=args: torch_topk_first(torch, *a)})


# ---------------------------------------------------------------------------------------------
# (3) RMSNorm + FP8


@ct.kernel
def rms_norm_fp8_ct_max(x, w, q, scale, hidden: int, eps: float, H: ct.Constant[int]):
    """The fused kernel in cuTile alone: the amax by ct.max."""
    y = rmsnorm_fp8.rms_norm_row(x, w, hidden, eps, H)
    rmsnorm_fp8.quantize_row(y, ct.max(ct.abs(y), axis=0), q, scale, H)


def rmsnorm_cases(torch):
    for tokens, hidden in RMSNORM:
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
        q, s = rmsnorm_fp8.run(x, w)
        uq, us = rmsnorm_fp8.run_unfused(x, w)
        assert torch.equal(uq.view(torch.uint8), q.view(torch.uint8)) and torch.equal(us, s)
        q2, s2 = torch.empty_like(q), torch.empty_like(s)
        stream, h = torch.cuda.current_stream(), rmsnorm_fp8.tile_size(hidden)

        def ct_max(q2=q2, s2=s2, x=x, w=w, h=h, hidden=hidden, tokens=tokens, stream=stream):
            ct.launch(stream, (tokens,), rms_norm_fp8_ct_max, (x, w, q2, s2, hidden, 1e-6, h))
        ct_max()
        assert torch.equal(q2.view(torch.uint8), q.view(torch.uint8))
        yield (f"(3) RMSNorm + FP8 per token: ({tokens}, {hidden}) bfloat16",
               {"splice (fused)": lambda x=x, w=w: rmsnorm_fp8.run(x, w),
                "torch": lambda x=x, w=w: rmsnorm_fp8.torch_reference(x, w),
                "cuTile pair (unfused)": lambda x=x, w=w: rmsnorm_fp8.run_unfused(x, w),
                "fused, ct.max": ct_max})


# ---------------------------------------------------------------------------------------------
# (4) argsort + gather


def gather_cases(torch):
    for bsz, n, d in GATHER:
        scores = torch.randn(bsz, n, device="cuda")
        h = torch.randn(bsz, n, d, device="cuda", dtype=torch.bfloat16)
        perm, out = sort_gather.run(scores, h)
        rp, ro = sort_gather.torch_reference(scores, h)
        assert torch.equal(perm, rp) and torch.equal(out, ro)
        yield (f"(4) argsort + gather: ({bsz}, {n}) scores, {d}-vectors bfloat16",
               {"splice": lambda s=scores, h=h: sort_gather.run(s, h),
                "torch": lambda s=scores, h=h: sort_gather.torch_reference(s, h)})


CASES = {"moe": moe_cases, "sampling": sampling_cases, "rmsnorm": rmsnorm_cases,
         "gather": gather_cases}


def run_on_gpu(reps: int, only):
    import torch
    from _timing import time_callable_side_by_side
    print(f"{torch.cuda.get_device_name()}, {reps} reps, medians, L2 flushed before each")
    for key in only:
        for title, fns in CASES[key](torch):
            med = time_callable_side_by_side(torch, fns, reps=reps, flush_l2=True)
            base = med[next(iter(med))]
            print(f"\n{title}\n{'':<4}{'':<24} {'median ms':>10} {'splice / this':>14}")
            for name, t in med.items():
                print(f"{'':<4}{name:<24} {t * 1e3:>10.4f} {base / t:>14.3f}")


def compile_only(only):
    print("no GPU: each recipe kernel compiled for sm_90 at the benchmark's largest size")
    for key in only:
        t0 = time.perf_counter()
        {"moe": lambda: moe_align.compile_only(*MOE[-2][:3], MOE[-2][3]),
         "sampling": lambda: sampling.compile_only(*SAMPLING[1]),
         "rmsnorm": lambda: rmsnorm_fp8.compile_only(RMSNORM[-1][1]),
         "gather": lambda: sort_gather.compile_only(*GATHER[0][1:])}[key]()
        print(f"{key}: {time.perf_counter() - t0:.1f} s")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--only", default=",".join(CASES))
    p.add_argument("--compile-only", action="store_true")
    a = p.parse_args(argv)
    only = [k for k in a.only.split(",") if k]
    if unknown := set(only) - set(CASES):
        p.error(f"unknown --only {sorted(unknown)}; choose from {list(CASES)}")
    if a.compile_only or splice.toolchain.gpu_arch() is None:
        compile_only(only)
    else:
        run_on_gpu(a.reps, only)


if __name__ == "__main__":
    sys.exit(main())
