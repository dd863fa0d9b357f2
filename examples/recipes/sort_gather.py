"""Row-wise argsort and gather in one cuTile kernel: per sequence, order its tokens by a
score (largest first, equal scores in token order) and gather their vectors in that order;
what ``torch.argsort(scores, stable=True, descending=True)`` and ``torch.gather`` do in two
kernels (and cuTile cannot do alone: it has no sort).

    perm[b] = argsort(-scores[b])           (stable; CUB's radix sort of (score, index))
    out[b, i, :] = h[b, perm[b, i], :]

Keys are ordered by their IEEE value as CUB's radix sort ranks them: largest first, -0.0
equal to +0.0 (token order kept, as by ``torch.sort``), a NaN before +inf unless its sign
bit is set (``-nan``: after -inf; ``torch.sort`` puts every NaN first). A sequence is one
tile of 128 ... 4096 scores (``splice.cub`` tiles); the vectors are gathered NC tokens
(ELEMENTS vector elements) at a time, by several blocks per sequence where the sequences are
fewer than the GPU's multiprocessors: each block of a sequence sorts it (a few microseconds)
and gathers every PARTS-th step (one block per sequence moved 8 x 4096 128-vectors at 1.49x
PyTorch's time on an H100: 8 blocks on 132 multiprocessors).

    python examples/recipes/sort_gather.py                  # GPU: runs and checks
    python examples/recipes/sort_gather.py --compile-only   # compiles for sm_90
"""

import sys

import cuda.tile as ct

import splice

ConstInt = ct.Constant[int]
ELEMENTS = 8192          # vector elements a gather step moves (64 per thread)


@splice.kernel
def sort_gather(scores, h, perm, out, steps: int, N: ConstInt, D: ConstInt, NC: ConstInt):
    """Block ``(b, p)``: sequence b's N scores sorted (descending, stable), its (N, D)
    vectors gathered in that order, NC tokens a step, steps p, p + P, ... of ``steps = N //
    NC`` (P = ``ct.num_blocks(1)``): a runtime trip count (tileiras unrolls a loop whose
    count it knows, and pipelined the 64 unrolled gathers in a producer warpgroup, where a
    block call cannot run). Every block of a sequence stores the same permutation, then
    reads its steps of it back (a block's store comes before its loads)."""
    b = ct.bid(0)
    s = ct.reshape(ct.load(scores, index=(b, 0), shape=(1, N), allow_tma=False), (N,))
    _, order = splice.cub.sort_pairs(s, ct.arange(N, dtype=ct.int32), descending=True)
    ct.store(perm, index=(b, 0), tile=ct.reshape(order, (1, N)), allow_tma=False)
    col = ct.arange(D, dtype=ct.int32)[None, :]
    for c in range(ct.bid(1), steps, ct.num_blocks(1)):
        rows = ct.load(perm, index=(b, c), shape=(1, NC), allow_tma=False)   # as stored
        v = ct.gather(h, (b, ct.reshape(rows, (NC, 1)), col))
        ct.store(out, index=(b, c, 0), tile=ct.reshape(v, (1, NC, D)), allow_tma=False)


def arguments(n: int, d: int) -> tuple:
    """(steps, N, D, NC) for sequences of n tokens of d-vectors (powers of two)."""
    nc = max(1, min(n, ELEMENTS // d))
    return n // nc, n, d, nc


def parts(sequences: int, steps: int, multiprocessors: int) -> int:
    """Blocks per sequence: enough for two blocks a multiprocessor, at most one a step."""
    return max(1, min(steps, -(-2 * multiprocessors // sequences)))


def run(scores, h):
    """On CUDA tensors: ``scores`` (B, N) float32, ``h`` (B, N, D). Returns (perm int32,
    out)."""
    import torch
    bsz, n = scores.shape
    perm = torch.empty(bsz, n, dtype=torch.int32, device=scores.device)
    out = torch.empty_like(h)
    args = arguments(n, h.shape[2])
    sms = torch.cuda.get_device_properties(scores.device).multi_processor_count
    ct.launch(torch.cuda.current_stream(), (bsz, parts(bsz, args[0], sms)), sort_gather,
              (scores, h, perm, out) + args)
    return perm, out


def torch_reference(scores, h):
    import torch
    perm = torch.argsort(scores, dim=-1, descending=True, stable=True)
    return perm.int(), torch.gather(h, 1, perm[:, :, None].expand(-1, -1, h.shape[2]))


def run_on_gpu(shapes=((8, 4096, 128), (256, 1024, 64))):
    import torch
    for bsz, n, d in shapes:
        scores = torch.randint(0, 1000, (bsz, n), device="cuda").float()   # ties
        h = torch.randn(bsz, n, d, device="cuda", dtype=torch.bfloat16)
        perm, out = run(scores, h)
        rp, ro = torch_reference(scores, h)
        assert torch.equal(perm, rp) and torch.equal(out, ro)
        print(f"({bsz}, {n}) scores, {d}-vectors: equal to torch.argsort + torch.gather")
    print("OK")


def compile_only(n=1024, d=64):
    print("no GPU: compiled for sm_90 without launching")
    sig = splice.kernel_signature("array(float32, ndim=2)", "array(bfloat16, ndim=3)",
                                  "array(int32, ndim=2)", "array(bfloat16, ndim=3)",
                                  "scalar(int32)", *arguments(n, d)[1:])
    print(splice.compile(sort_gather, sig, "sm_90").summary())


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
