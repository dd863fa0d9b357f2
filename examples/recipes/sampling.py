"""Top-k / top-p sampling from logits in cuTile: per row a temperature, the top k of the
vocabulary, the smallest prefix of them whose probability reaches p, and one token drawn
from it with a given uniform ``u``; no PyTorch between the kernels.

The definition, exact so that two implementations can agree on every token:

1. ``s = logits / temperature`` (float32, IEEE division); order the vocabulary by ``s``,
   largest first, equal values by the lower token id (a stable descending sort);
2. keep the first ``k`` (1 <= k <= KMAX); their weights ``w_j = expf(s_j - s_0)`` (CUDA's
   ``expf``, which ``torch.exp`` is too), in fixed point ``q_j = trunc(w_j * 2**24)``;
3. with ``c_j = q_0 + ... + q_j`` (int64: exact in any order) and ``P = trunc(p * 2**24)``,
   keep the j with ``(c_j - q_j) * 2**24 < P * c_{k-1}`` (top-p: the prefix before the mass
   reaches p, the token that reaches it included; p = 1 keeps every token of nonzero weight);
4. with ``U = trunc(u * 2**24)`` (0 <= u < 1) and ``C`` the last kept ``c_j``, the token is
   the first kept j with ``c_j * 2**24 > U * C`` (inverse-CDF sampling).

A vocabulary of up to 152k is more than one block sorts (``splice.cub`` tiles: 128 ... 4096
elements), so there are two passes: the candidates are the top KC (k rounded up to a power of
two, at least 128) of each chunk of 4096 (``splice.cub.top_k``: ties by the lower index);
the second kernel merges each row's candidates KC at a time (``top_k`` again over the running
KC and the next ones, in token order, so ties still go to the lower id), then the weights,
the sums (``splice.cub.inclusive_sum``, int64) and the cut.

    python examples/recipes/sampling.py                  # GPU: runs and checks vs PyTorch
    python examples/recipes/sampling.py --compile-only   # compiles for sm_90, prints sites
"""

import sys

import cuda.tile as ct

import splice

ConstInt = ct.Constant[int]

CHUNK = 4096          # vocabulary entries a first-pass block sorts
MERGE = 4096          # candidates a merge step sorts (the running KC among them)
ONE = 1 << 24         # the fixed point of weights, p and u
KMAX = 1024


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def config(rows: int, vocab: int, max_k: int, chunk: int = CHUNK,
           merge: int = MERGE) -> dict:
    """Compile-time shapes: ``kc`` candidates per chunk (>= every row's k, a power of two
    of at least 128, the smallest ``splice.cub`` tile), ``chunks`` per row."""
    if not 1 <= max_k <= KMAX:
        raise ValueError(f"top-k must be 1 ... {KMAX}, got {max_k}")
    kc = max(128, _pow2(max_k))
    if not (kc <= chunk and 2 * kc <= merge):
        raise ValueError(f"chunk {chunk} and merge {merge} too small for {kc} candidates")
    chunks = -(-vocab // chunk)
    return dict(rows=rows, vocab=vocab, kc=kc, chunks=chunks, candidates=chunks * kc,
                chunk=chunk, merge=merge)


@splice.kernel
def sample_candidates(logits, temperature, cand_s, cand_id, C: ConstInt, KC: ConstInt):
    """First pass, block (row, chunk): the KC largest ``logits / temperature`` of the
    chunk's C, largest first (ties: the lower id), and their token ids."""
    row, chunk = ct.bid(0), ct.bid(1)
    s = ct.load(logits, index=(row, chunk), shape=(1, C), allow_tma=False,
                padding_mode=ct.PaddingMode.NEG_INF)
    t = ct.load(temperature, index=(row,), shape=(1,), allow_tma=False)
    s = ct.reshape(s / ct.reshape(t, (1, 1)), (C,))
    token = chunk * C + ct.arange(C, dtype=ct.int32)
    s = ct.where(token < logits.shape[1], s, -float("inf"))    # past the vocabulary (inf / inf)
    v, i = splice.cub.top_k(s, KC)
    ct.store(cand_s, index=(row, chunk), tile=ct.reshape(v, (1, KC)), allow_tma=False)
    ct.store(cand_id, index=(row, chunk), tile=ct.reshape(i + chunk * C, (1, KC)),
             allow_tma=False)


@splice.kernel
def sample_pick(cand_s, cand_id, top_k, top_p, uniform, tokens, weights, order,
                candidates: int, KC: ConstInt, M: ConstInt):
    """Second pass, block ``row``: the top KC of the row's candidates (M at a time), then
    the weights,
    the top-k and top-p cut and the draw. Stores the token, and the KC candidates' weights
    ``w_j`` (0 past k) and ids, in order."""
    row = ct.bid(0)
    best = ct.full((KC,), -float("inf"), dtype=ct.float32)
    ids = ct.full((KC,), 0, dtype=ct.int32)
    pos = ct.arange(M, dtype=ct.int32)
    for start in range(0, candidates, M - KC):          # running KC, then M - KC more
        at = start - KC + pos
        fresh = (pos >= KC) & (at < candidates)
        s = ct.gather(cand_s, (row, at), mask=fresh, padding_value=-float("inf"))
        i = ct.gather(cand_id, (row, at), mask=fresh)
        # stable: equal values keep their order, the running ones (lower ids) first
        s, i = splice.cub.sort_pairs(ct.insert(s, (0,), best), ct.insert(i, (0,), ids),
                                     descending=True)
        best = ct.extract(s, (0,), shape=(KC,))
        ids = ct.extract(i, (0,), shape=(KC,))
    j = ct.arange(KC, dtype=ct.int32)
    k = ct.load(top_k, index=(row,), shape=(), allow_tma=False)
    w = ct.where(j < k, splice.cuda("expf(x)", dtype=ct.float32,
                                    x=best - ct.max(best, axis=0)), 0.0)
    q = ct.astype(w * float(ONE), ct.int64)                         # truncation
    c = splice.cub.inclusive_sum(q)
    p = ct.astype(ct.load(top_p, index=(row,), shape=(), allow_tma=False) * float(ONE),
                  ct.int64)
    keep = (c - q) * ONE < p * ct.max(c, axis=0)
    kept = ct.max(ct.where(keep, c, 0), axis=0)
    u = ct.astype(ct.load(uniform, index=(row,), shape=(), allow_tma=False) * float(ONE),
                  ct.int64)
    pick = ct.sum(ct.where(keep & (c * ONE <= u * kept), 1, 0), axis=0)
    token = ct.sum(ct.where(j == pick, ids, 0), axis=0)
    ct.store(tokens, index=(row,), tile=ct.full((1,), 0, ct.int32) + token, allow_tma=False)
    ct.store(weights, index=(row, 0), tile=ct.reshape(w, (1, KC)), allow_tma=False)
    ct.store(order, index=(row, 0), tile=ct.reshape(ids, (1, KC)), allow_tma=False)


# ---------------------------------------------------------------------------------------------
# Launching


def outputs(lib, c: dict, **device) -> dict:
    """The outputs (``tokens``; the top KC's ``weights`` and ids in ``order``) and the
    candidates between the passes, allocated by ``lib`` (numpy or torch)."""
    rows, kc, i32, f32 = c["rows"], c["kc"], lib.int32, lib.float32
    return dict(tokens=lib.zeros(rows, dtype=i32, **device),
                weights=lib.zeros((rows, kc), dtype=f32, **device),
                order=lib.zeros((rows, kc), dtype=i32, **device),
                cand_s=lib.zeros((rows, c["candidates"]), dtype=f32, **device),
                cand_id=lib.zeros((rows, c["candidates"]), dtype=i32, **device))


def plan(c: dict, logits, temperature, top_k, top_p, uniform, out: dict) -> list:
    """The two launches: (kernel, grid, runtime arguments, constants) each."""
    o = out
    return [(sample_candidates, (c["rows"], c["chunks"]),
             (logits, temperature, o["cand_s"], o["cand_id"]), (c["chunk"], c["kc"])),
            (sample_pick, (c["rows"],),
             (o["cand_s"], o["cand_id"], top_k, top_p, uniform, o["tokens"], o["weights"],
              o["order"], c["candidates"]), (c["kc"], c["merge"]))]


def signature(args, constants):
    """The ``splice.kernel_signature`` of a launch (for compiling without a GPU)."""
    def param(a):
        if isinstance(a, int):
            return "scalar(int32)"
        return f"array({str(a.dtype).replace('torch.', '')}, ndim={a.ndim})"
    return splice.kernel_signature(*(param(a) for a in args), *constants)


def sample(logits, temperature, top_k, top_p, uniform) -> dict:
    """On CUDA tensors: ``logits`` (rows, vocab) float32; per row ``temperature``,
    ``top_p``, ``uniform`` float32 and ``top_k`` int32. Returns the dict of
    :func:`outputs` (``tokens``: the sampled ids)."""
    import torch
    c = config(logits.shape[0], logits.shape[1], int(top_k.max()))
    out = outputs(torch, c, device=logits.device)
    stream = torch.cuda.current_stream()
    for kernel, grid, args, constants in plan(c, logits, temperature, top_k, top_p, uniform,
                                              out):
        ct.launch(stream, grid, kernel, args + constants)
    return out


def pick_weights(w, top_p, uniform):
    """Steps 3-4 of the definition on each row's weights ``w`` in order (float32, 0 past
    k), NumPy or PyTorch arrays: the position picked in each row. The reference's half,
    and the test's on the kernel's own weights."""
    lib = _lib(w)
    q = _fixed(w)
    c = q.cumsum(1)
    keep = (c - q) * ONE < _fixed(top_p)[:, None] * c[:, -1:]
    kept = lib.amax(lib.where(keep, c, 0), 1)
    return (keep & (c * ONE <= _fixed(uniform)[:, None] * kept[:, None])).sum(1)


def _lib(a):
    import numpy as np
    return np if isinstance(a, np.ndarray) else sys.modules["torch"]


def _fixed(v):
    """trunc(v * 2**24) as int64 (``v`` float32 in [0, 1]: the product is exact)."""
    v = v * ONE
    return v.astype("int64") if hasattr(v, "astype") else v.long()


def torch_reference(logits, temperature, top_k, top_p, uniform):
    """The definition in PyTorch: a full stable sort of the vocabulary, cumsum, mask,
    inverse-CDF draw (the whole vocabulary sorted, as samplers do it in PyTorch)."""
    import torch
    s, idx = torch.sort(logits / temperature[:, None], dim=-1, descending=True, stable=True)
    j = torch.arange(s.shape[1], device=s.device)
    w = torch.where(j[None, :] < top_k[:, None], torch.exp(s - s[:, :1]), 0.0)
    at = pick_weights(w, top_p, uniform)
    return idx.gather(1, at[:, None])[:, 0].int(), w


# ---------------------------------------------------------------------------------------------
# The script


def _problem(torch, rows, vocab, max_k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(rows, vocab, device="cuda", generator=g) * 4
    temperature = torch.rand(rows, device="cuda", generator=g) + 0.5
    top_k = torch.randint(1, max_k + 1, (rows,), device="cuda", generator=g, dtype=torch.int32)
    top_p = torch.rand(rows, device="cuda", generator=g) * 0.5 + 0.5
    uniform = torch.rand(rows, device="cuda", generator=g)
    return logits, temperature, top_k, top_p, uniform


def run_on_gpu(shapes=((1, 151936, 50), (64, 151936, 50), (64, 32000, 1000))):
    import torch
    for rows, vocab, max_k in shapes:
        args = _problem(torch, rows, vocab, max_k)
        out = sample(*args)
        ref, w = torch_reference(*args)
        kc = out["weights"].shape[1]
        assert torch.equal(out["tokens"], ref)
        assert torch.equal(out["weights"], w[:, :kc])          # CUDA's expf on both sides
        print(f"{rows} rows of {vocab} logits, top-k <= {max_k}: the tokens of the PyTorch "
              f"reference, exactly")
    print("OK")


def compile_only(rows=64, vocab=151936, max_k=50):
    import numpy as np
    print("no GPU: compiled for sm_90 without launching")
    c = config(rows, vocab, max_k)
    f32, i32 = np.zeros(rows, np.float32), np.zeros(rows, np.int32)
    logits = np.zeros((rows, vocab), np.float32)
    for kernel, grid, args, constants in plan(c, logits, f32, i32, f32, f32,
                                              outputs(np, c)):
        print(f"grid {grid}:")
        print(splice.compile(kernel, signature(args, constants), "sm_90").summary())


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
