"""MoE routing and alignment in cuTile: from router logits to the inputs of NVIDIA's cuTile
``fused_moe_kernel``, with no PyTorch between the kernels.

Per token, the top-k experts of its logits and their weights (the softmax renormalised over
the k chosen, as ``softmax`` + ``topk`` + divide by the sum); per expert the number of
(token, k) pairs routed to it (``splice.cub.histogram``), its start in the padded order
(``splice.cub.exclusive_sum`` of the counts rounded up to the GEMM's TILE_M) and the pairs
grouped by expert, in order (``splice.cub.sort_pairs``, stable). The outputs are those of the
sample's ``moe_align_tile_size_torch`` (cutile-python ``test/kernels/fused_moe.py``):

- ``sorted_token_ids``: pair indices ``token * k + j`` grouped by expert, each expert's group
  padded to a multiple of TILE_M with the sentinel ``tokens * k``;
- ``sorted_expert_ids``: per TILE_M block of ``sorted_token_ids``, its expert;
- ``num_tokens_post_padded``: how many entries of ``sorted_token_ids`` are used.

The buffers have their largest size (``tokens * k + experts * (TILE_M - 1)`` entries, rounded
up to whole TILE_M blocks), so a launch needs no host synchronisation (CUDA graphs): past the
used part ``sorted_token_ids`` holds the sentinel and ``sorted_expert_ids`` 0, which the GEMM
skips (its scatter drops the sentinel's row). ``[:num_tokens_post_padded]`` is the output.

One kernel when the pairs fit one block (decode: up to 1024 pairs), otherwise two: per block
of tokens the routing and a histogram, then per block the offsets, the sort and the scatter.

    python examples/recipes/moe_align.py                  # GPU: runs and checks vs PyTorch
    python examples/recipes/moe_align.py --compile-only   # compiles for sm_90, prints sites
"""

import sys

import cuda.tile as ct

import splice

ConstInt = ct.Constant[int]

#: pairs a block sorts: the one-kernel path up to this many, blocks of it beyond
PAIRS_PER_BLOCK = 1024
#: logits a routing step holds (rows x experts): 32 floats per thread of tileiras's 128
ROUTE_ELEMENTS = 4096
FILL = 1024                     # entries a fill step stores


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def config(tokens: int, experts: int, top_k: int, tile_m: int) -> dict:
    """The compile-time shapes of one problem (each a power of two, as cuTile's tiles).

    ``kp``: k rounded up; ``bins``: the histogram's bins (experts rounded up, at least 128,
    the smallest tile of ``splice.cub``; the sort key ``bins`` marks a slot that is no
    pair); ``ep``: logits columns loaded; ``tb``: tokens a routing step takes; ``tpb``:
    tokens per block; ``blocks``: the grid of the two-kernel path (1: one kernel)."""
    if not (1 <= top_k <= experts <= 4096):
        raise ValueError(f"need 1 <= top_k <= experts <= 4096, got {top_k}, {experts}")
    kp, ep = _pow2(top_k), _pow2(experts)
    tpb = PAIRS_PER_BLOCK // kp                       # tokens of one block's pairs
    one_block = tokens * kp <= PAIRS_PER_BLOCK
    if one_block:                                     # at least 128 pairs: splice.cub's tile
        tpb = max(_pow2(tokens), 128 // kp)
    tb = min(tpb, max(128 // kp, ROUTE_ELEMENTS // ep))    # tb * kp >= 128: a cub tile
    blocks = 1 if one_block else -(-tokens // tpb)
    # the most blocks the pairs can need, whole: the GEMM reads TILE_M token ids a block
    # (a partial last block would gather id 0 past the end)
    padded_blocks = -(-(tokens * top_k + experts * (tile_m - 1)) // tile_m)
    return dict(k=top_k, kp=kp, ep=ep, bins=max(128, ep), tb=tb, tpb=tpb, tile_m=tile_m,
                blocks=blocks, padded=padded_blocks * tile_m, padded_blocks=padded_blocks)


# ---------------------------------------------------------------------------------------------
# Tile code the kernels share


def route(logits, topk_ids, topk_weights, step, tokens: int, k: int, KP: int, EP: int,
          TB: int, BINS: int):
    """Routing of tokens ``step * TB ...``: their top-k experts (ties: the lower index) and
    weights stored; returns the step's sort keys (expert, or BINS for no pair) and pair
    indices ``token * k + j``, flattened to (TB * KP,). ``k`` is a runtime value: tileiras
    unrolls a loop whose trip count it knows (k copies of the arg-max)."""
    logit = ct.load(logits, index=(step, 0), shape=(TB, EP),
                    padding_mode=ct.PaddingMode.NEG_INF, allow_tma=False)
    col = ct.arange(EP, dtype=ct.int32)[None, :]
    j = ct.arange(KP, dtype=ct.int32)[None, :]
    ids = ct.full((TB, KP), BINS, dtype=ct.int32)
    top = ct.full((TB, KP), -float("inf"), dtype=ct.float32)
    for r in range(k):
        best = ct.argmax(logit, axis=1, keepdims=True)            # the lowest index of a tie
        ids = ct.where(j == r, best, ids)
        top = ct.where(j == r, ct.max(logit, axis=1, keepdims=True), top)
        logit = ct.where(col == best, -float("inf"), logit)
    e = ct.exp(top - ct.max(top, axis=1, keepdims=True))          # 0 past k
    weights = e / ct.sum(e, axis=1, keepdims=True)
    ct.store(topk_ids, index=(step, 0), tile=ids, allow_tma=False)       # columns < k kept
    ct.store(topk_weights, index=(step, 0), tile=weights, allow_tma=False)
    token = step * TB + ct.arange(TB, dtype=ct.int32)[:, None]
    keys = ct.where((token < tokens) & (j < k), ids, BINS)
    return (ct.reshape(keys, (TB * KP,)).astype(ct.int16),
            ct.reshape(token * k + j, (TB * KP,)))


def fill(sorted_token_ids, sorted_expert_ids, first, step, sentinel):
    """Chunks ``first, first + step, ...`` of both outputs: the sentinel, and expert 0."""
    for c in range(first, ct.cdiv(sorted_token_ids.shape[0], FILL), step):
        ct.store(sorted_token_ids, index=(c,), tile=ct.full((FILL,), sentinel, ct.int32),
                 allow_tma=False)
    for c in range(first, ct.cdiv(sorted_expert_ids.shape[0], FILL), step):
        ct.store(sorted_expert_ids, index=(c,), tile=ct.full((FILL,), 0, ct.int32),
                 allow_tma=False)


def place(keys, pairs, base, sorted_token_ids, sorted_expert_ids, block, TM: int,
          BINS: int):
    """Sort this block's pairs by expert (stable: pair order within an expert) and scatter
    them: sorted position ``i`` of expert ``e`` goes to ``base[block, e] + i``; the first
    pair of each TILE_M block writes the block's expert."""
    k, pair = splice.cub.sort_pairs(keys, pairs)
    expert = k.astype(ct.int32)
    used = expert < BINS                                        # BINS: no pair
    i = ct.arange(keys.shape[0], dtype=ct.int32)
    dest = ct.gather(base, (block, expert), mask=used) + i      # base: stored before the sort
    ct.scatter(sorted_token_ids, dest, pair, mask=used)
    ct.scatter(sorted_expert_ids, dest // TM, expert, mask=used & (dest % TM == 0))


def offsets(counts, mine, before, TM: int):
    """(padded starts of each expert) + (pairs of earlier blocks) - (pairs of this block
    before the expert): where the block's first pair of each expert goes, less its sorted
    position; and the padded total."""
    padded = (counts + (TM - 1)) // TM * TM
    start = splice.cub.exclusive_sum(padded)
    return start + before - splice.cub.exclusive_sum(mine), ct.sum(padded)


# ---------------------------------------------------------------------------------------------
# The kernels


#: cuTile's occupancy hint keeps the one block 128 threads: without it tileiras split the
#: block in two warpgroups where the block calls cannot run (refused) when the routing step
#: was wider than ROUTE_ELEMENTS, and, on an H100, for 64 tokens of 256 experts at top-8 too,
#: from the hints a launch gives (dimensions divisible by 16) that the CPU's signature lacked.
@splice.kernel(occupancy=2)
def moe_align_one_block(logits, topk_ids, topk_weights, sorted_token_ids, sorted_expert_ids,
                        num_tokens_post_padded, base, tokens: int, k: int, KP: ConstInt,
                        EP: ConstInt, TB: ConstInt, TPB: ConstInt, BINS: ConstInt,
                        TM: ConstInt):
    """Everything in one block (up to PAIRS_PER_BLOCK pairs): route, count, offsets, sort,
    scatter. ``base``: (1, BINS) int32 scratch."""
    fill(sorted_token_ids, sorted_expert_ids, 0, 1, tokens * k)
    keys = ct.full((TPB * KP,), 0, dtype=ct.int16)
    pairs = ct.full((TPB * KP,), 0, dtype=ct.int32)
    for s in ct.static_iter(range(TPB // TB)):
        key, pair = route(logits, topk_ids, topk_weights, s, tokens, k, KP, EP, TB, BINS)
        keys = ct.insert(keys, (s,), key)
        pairs = ct.insert(pairs, (s,), pair)
    counts = splice.cub.histogram(keys, BINS)
    b, total = offsets(counts, counts, ct.full((BINS,), 0, dtype=ct.int32), TM)
    ct.store(base, index=(0, 0), tile=ct.reshape(b, (1, BINS)), allow_tma=False)
    ct.store(num_tokens_post_padded, index=(0,), tile=ct.full((1,), 0, ct.int32) + total,
             allow_tma=False)
    place(keys, pairs, base, sorted_token_ids, sorted_expert_ids, 0, TM, BINS)


@splice.kernel
def moe_route_count(logits, topk_ids, topk_weights, counts, sorted_token_ids,
                    sorted_expert_ids, tokens: int, k: int, steps: int, KP: ConstInt,
                    EP: ConstInt, TB: ConstInt, BINS: ConstInt):
    """Two-kernel path, first: per block of ``steps * TB`` tokens, routing and a histogram
    of its pairs (``counts[block]``); the blocks also fill the outputs with the sentinel."""
    block = ct.bid(0)
    fill(sorted_token_ids, sorted_expert_ids, block, ct.num_blocks(0), tokens * k)
    hist = ct.full((BINS,), 0, dtype=ct.int32)
    for s in range(steps):                                  # runtime: not unrolled
        key, _ = route(logits, topk_ids, topk_weights, block * steps + s, tokens, k, KP, EP,
                       TB, BINS)
        hist = hist + splice.cub.histogram(key, BINS)
    ct.store(counts, index=(block, 0), tile=ct.reshape(hist, (1, BINS)), allow_tma=False)


@splice.kernel
def moe_place(topk_ids, counts, sorted_token_ids, sorted_expert_ids, num_tokens_post_padded,
              base, tokens: int, k: int, KP: ConstInt, TPB: ConstInt,
              NB: ConstInt, BINS: ConstInt, TM: ConstInt):
    """Two-kernel path, second: per block, the offsets from every block's histogram (each
    block sums them again: no third kernel), then the sort and the scatter of its pairs."""
    block = ct.bid(0)
    every = ct.load(counts, index=(0, 0), shape=(NB, BINS), padding_mode=ct.PaddingMode.ZERO,
                    allow_tma=False)
    row = ct.arange(NB, dtype=ct.int32)[:, None]
    before = ct.sum(ct.where(row < block, every, 0), axis=0)
    mine = ct.sum(ct.where(row == block, every, 0), axis=0)
    b, total = offsets(ct.sum(every, axis=0), mine, before, TM)
    ct.store(base, index=(block, 0), tile=ct.reshape(b, (1, BINS)), allow_tma=False)
    if block == 0:
        ct.store(num_tokens_post_padded, index=(0,), tile=ct.full((1,), 0, ct.int32) + total,
                 allow_tma=False)
    ids = ct.load(topk_ids, index=(block, 0), shape=(TPB, KP), padding_mode=ct.PaddingMode.ZERO,
                  allow_tma=False)
    token = block * TPB + ct.arange(TPB, dtype=ct.int32)[:, None]
    j = ct.arange(KP, dtype=ct.int32)[None, :]
    keys = ct.where((token < tokens) & (j < k), ids, BINS)
    place(ct.reshape(keys, (TPB * KP,)).astype(ct.int16), ct.reshape(token * k + j, (TPB * KP,)),
          base, sorted_token_ids, sorted_expert_ids, block, TM, BINS)


# ---------------------------------------------------------------------------------------------
# Launching


def plan(c: dict, logits, out: dict, tokens: int) -> list:
    """The launches of one problem: (kernel, grid, runtime arguments, constants) each, the
    arrays NumPy's or PyTorch's (``out`` from :func:`outputs`)."""
    o = out
    if c["blocks"] == 1:
        return [(moe_align_one_block, (1,),
                 (logits, o["topk_ids"], o["topk_weights"], o["sorted_token_ids"],
                  o["sorted_expert_ids"], o["num_tokens_post_padded"], o["base"], tokens,
                  c["k"]),
                 (c["kp"], c["ep"], c["tb"], c["tpb"], c["bins"], c["tile_m"]))]
    nb = _pow2(c["blocks"])
    return [(moe_route_count, (c["blocks"],),
             (logits, o["topk_ids"], o["topk_weights"], o["counts"], o["sorted_token_ids"],
              o["sorted_expert_ids"], tokens, c["k"], c["tpb"] // c["tb"]),
             (c["kp"], c["ep"], c["tb"], c["bins"])),
            (moe_place, (c["blocks"],),
             (o["topk_ids"], o["counts"], o["sorted_token_ids"], o["sorted_expert_ids"],
              o["num_tokens_post_padded"], o["base"], tokens, c["k"]),
             (c["kp"], c["tpb"], nb, c["bins"], c["tile_m"]))]


def outputs(lib, c: dict, tokens: int, **device) -> dict:
    """The outputs and scratch of one problem, allocated by ``lib`` (numpy or torch)."""
    i32, f32 = lib.int32, lib.float32
    return dict(topk_ids=lib.zeros((tokens, c["k"]), dtype=i32, **device),
                topk_weights=lib.zeros((tokens, c["k"]), dtype=f32, **device),
                sorted_token_ids=lib.zeros(c["padded"], dtype=i32, **device),
                sorted_expert_ids=lib.zeros(c["padded_blocks"], dtype=i32, **device),
                num_tokens_post_padded=lib.zeros(1, dtype=i32, **device),
                counts=lib.zeros((c["blocks"], c["bins"]), dtype=i32, **device),
                base=lib.zeros((c["blocks"], c["bins"]), dtype=i32, **device))


def signature(args, constants):
    """The ``splice.kernel_signature`` of a launch (for compiling without a GPU): each array
    typed as ``ct.launch`` types it, dimensions and strides divisible by 16 (elements of
    16 bytes) where they are, which changes what tileiras makes of a kernel."""
    from cuda.tile.compilation import ArrayConstraint

    def param(a):
        if isinstance(a, int):
            return "scalar(int32)"
        dtype = getattr(ct, str(a.dtype).replace("torch.", ""))
        size = a.element_size() if hasattr(a, "element_size") else a.itemsize
        strides = a.stride() if callable(getattr(a, "stride", None)) else \
            tuple(s // size for s in a.strides)
        per16 = 16 // size
        return ArrayConstraint(
            dtype, a.ndim, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
            may_alias_internally=False,
            stride_constant=tuple(1 if s == 1 else None for s in strides),
            stride_divisible_by=tuple(per16 if s % per16 == 0 else 1 for s in strides),
            shape_divisible_by=tuple(16 if d % 16 == 0 else 1 for d in a.shape),
            base_addr_divisible_by=16)
    return splice.kernel_signature(*(param(a) for a in args), *constants)


def moe_align(logits, top_k: int, tile_m: int) -> dict:
    """Route and align on the GPU: ``logits`` a (tokens, experts) float32 CUDA tensor.
    Returns the dict of :func:`outputs` (the scratch included)."""
    import torch
    tokens, experts = logits.shape
    c = config(tokens, experts, top_k, tile_m)
    out = outputs(torch, c, tokens, device=logits.device)
    stream = torch.cuda.current_stream()
    for kernel, grid, args, constants in plan(c, logits, out, tokens):
        ct.launch(stream, grid, kernel, args + constants)
    return out


# ---------------------------------------------------------------------------------------------
# The PyTorch composite it replaces (the sample's alignment, after torch's routing)


def torch_reference(logits, top_k: int, tile_m: int):
    """softmax, topk (ties: the lower expert, by a stable sort), renormalised weights, and
    the sample's ``moe_align_tile_size_torch`` (reproduced: the sample is not part of this
    repository). Returns (weights, ids, sorted_token_ids, sorted_expert_ids)."""
    import torch
    probs = torch.softmax(logits, dim=-1)
    ids = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :top_k]
    weights = torch.gather(probs, 1, ids)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    sorted_ids, expert_ids = moe_align_tile_size_torch(ids.int(), tile_m, logits.shape[1])
    return weights, ids.int(), sorted_ids, expert_ids


def moe_align_tile_size_torch(topk_ids, tile_m: int, num_experts: int):
    """cutile-python ``test/kernels/fused_moe.py``'s alignment, as the sample has it."""
    import torch
    num_tokens, topk = topk_ids.shape
    total_tokens = num_tokens * topk
    flat_expert_ids = topk_ids.reshape(-1)
    sorted_token_indices = torch.argsort(flat_expert_ids, stable=True)
    expert_token_counts = torch.bincount(flat_expert_ids, minlength=num_experts)
    expert_block_counts = (expert_token_counts - 1 + tile_m) // tile_m
    total_blocks = expert_block_counts.sum()
    sorted_token_ids = torch.full((total_blocks * tile_m,), total_tokens,
                                  device=topk_ids.device, dtype=torch.int32)
    sorted_expert_ids = torch.zeros((total_blocks,), device=topk_ids.device, dtype=torch.int32)
    current_block = 0
    current_token = 0
    for expert_id in range(num_experts):
        token_count = expert_token_counts[expert_id]
        block_count = expert_block_counts[expert_id]
        sorted_expert_ids[current_block:current_block + block_count] = expert_id
        sorted_token_start = current_block * tile_m
        sorted_token_ids[sorted_token_start:sorted_token_start + token_count] = (
            sorted_token_indices[current_token:current_token + token_count])
        current_token += token_count
        current_block += block_count
    return sorted_token_ids, sorted_expert_ids


# ---------------------------------------------------------------------------------------------
# The script


def check(logits, top_k: int, tile_m: int, out: dict):
    """Assert that ``out`` (of :func:`moe_align`) is the PyTorch composite's: the ids, the
    weights (to rounding), the used part of the alignment exactly, and the tail."""
    import torch
    w, ids, st, se = torch_reference(logits, top_k, tile_m)
    n = int(out["num_tokens_post_padded"])
    assert torch.equal(out["topk_ids"], ids)
    torch.testing.assert_close(out["topk_weights"], w, rtol=1e-5, atol=1e-6)
    assert n == st.numel() and torch.equal(out["sorted_token_ids"][:n], st)
    assert torch.equal(out["sorted_expert_ids"][:n // tile_m], se)
    assert bool((out["sorted_token_ids"][n:] == logits.shape[0] * top_k).all())
    assert bool((out["sorted_expert_ids"][n // tile_m:] == 0).all())


def run_on_gpu(tokens=(1, 64, 4096), experts=128, top_k=8, tile_m=64):
    import torch
    for t in tokens:
        logits = torch.randn(t, experts, device="cuda")
        check(logits, top_k, tile_m, moe_align(logits, top_k, tile_m))
        kernels = 1 if config(t, experts, top_k, tile_m)["blocks"] == 1 else 2
        print(f"{t} tokens, {experts} experts, top-{top_k}, TILE_M {tile_m}: {kernels} "
              f"kernel(s), equal to the PyTorch composite")
    print("OK")


def compile_only(tokens=4096, experts=256, top_k=8, tile_m=64):
    import numpy as np
    print("no GPU: compiled for sm_90 without launching")
    for t in (16, tokens):
        c = config(t, experts, top_k, tile_m)
        logits = np.zeros((t, experts), np.float32)
        for kernel, grid, args, constants in plan(c, logits, outputs(np, c, t), t):
            build = splice.compile(kernel, signature(args, constants), "sm_90")
            print(f"{t} tokens, grid {grid}:")
            print(build.summary())


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
