"""RMSNorm with per-token FP8 (e4m3) quantization, fused in one cuTile kernel: each block
normalises one row, takes the row's absolute maximum with a block-scope reduction
(``splice.cub.reduce``, CUB's ``BlockReduce``) and writes the FP8 row and its scale.

    y = x / sqrt(mean(x**2) + eps) * w              (float32)
    a = max(amax(|y|), 1e-12)
    q = fp8_e4m3(y * (448 / a))                     (448: e4m3's largest finite value;
    scale = a / 448                                  round to nearest even)

The baselines: PyTorch (``rms_norm``, ``amax``, the scale, ``to(float8_e4m3fn)``), and the
unfused cuTile pair (an RMSNorm kernel writing ``y``, then a quantization kernel reading it).
A row of up to 16384 elements is one tile (a hidden size that is not a power of two is
loaded padded with zeros: they add nothing to the sum of squares or to the maximum).

    python examples/recipes/rmsnorm_fp8.py                  # GPU: runs and checks
    python examples/recipes/rmsnorm_fp8.py --compile-only   # compiles for sm_90
"""

import sys

import cuda.tile as ct

import splice

ConstInt = ct.Constant[int]
E4M3_MAX = 448.0
MIN_AMAX = 1e-12


def tile_size(hidden: int) -> int:
    """The tile a row is loaded as: ``hidden`` rounded up to a power of two, at least 128
    (``splice.cub``'s smallest tile; the padding's zeros change nothing)."""
    return max(128, 1 << max(0, hidden - 1).bit_length())


def rms_norm_row(x, w, hidden: int, eps: float, H: int):
    """Row ``ct.bid(0)`` of ``x`` normalised and scaled by ``w``, float32, (H,)."""
    t = ct.load(x, index=(ct.bid(0), 0), shape=(1, H), padding_mode=ct.PaddingMode.ZERO,
                allow_tma=False)
    t = ct.reshape(ct.astype(t, ct.float32), (H,))
    g = ct.astype(ct.load(w, index=(0,), shape=(H,), padding_mode=ct.PaddingMode.ZERO,
                          allow_tma=False), ct.float32)
    return t * ct.rsqrt(ct.sum(t * t, axis=0) / hidden + eps) * g


def quantize_row(y, amax, q, scale, H: int):
    """Store ``y * (448 / amax)`` as e4m3 in row ``ct.bid(0)`` of ``q``, and the scale
    ``amax / 448`` (one division per row, not per element)."""
    amax = ct.maximum(amax, MIN_AMAX)
    ct.store(q, index=(ct.bid(0), 0), allow_tma=False,
             tile=ct.reshape(ct.astype(y * (E4M3_MAX / amax), ct.float8_e4m3fn), (1, H)))
    ct.store(scale, index=(ct.bid(0),), tile=ct.full((1,), 0.0, ct.float32) + amax / E4M3_MAX,
             allow_tma=False)


@splice.kernel
def rms_norm_fp8(x, w, q, scale, hidden: int, eps: float, H: ConstInt):
    """The fused kernel: one block per row; the amax by a block-scope CUB reduction."""
    y = rms_norm_row(x, w, hidden, eps, H)
    quantize_row(y, splice.cub.reduce(ct.abs(y), "max"), q, scale, H)


# The unfused cuTile pair (the baseline): y goes through global memory.

@ct.kernel
def rms_norm(x, w, y, hidden: int, eps: float, H: ConstInt):
    ct.store(y, index=(ct.bid(0), 0), tile=ct.reshape(rms_norm_row(x, w, hidden, eps, H),
                                                       (1, H)), allow_tma=False)


@ct.kernel
def quantize_fp8(y, q, scale, H: ConstInt):
    t = ct.reshape(ct.load(y, index=(ct.bid(0), 0), shape=(1, H), allow_tma=False,
                           padding_mode=ct.PaddingMode.ZERO), (H,))
    quantize_row(t, ct.max(ct.abs(t), axis=0), q, scale, H)


def run(x, w, eps: float = 1e-6):
    """The fused kernel on CUDA tensors: ``x`` (tokens, hidden) float32 or bfloat16, ``w``
    (hidden,). Returns (q float8_e4m3fn, scale float32 (tokens,))."""
    import torch
    tokens, hidden = x.shape
    q = torch.empty(tokens, hidden, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(tokens, dtype=torch.float32, device=x.device)
    ct.launch(torch.cuda.current_stream(), (tokens,), rms_norm_fp8,
              (x, w, q, scale, hidden, eps, tile_size(hidden)))
    return q, scale


def run_unfused(x, w, eps: float = 1e-6):
    """The unfused cuTile pair: the same outputs, y (float32) in between."""
    import torch
    tokens, hidden = x.shape
    y = torch.empty(tokens, hidden, dtype=torch.float32, device=x.device)
    q = torch.empty(tokens, hidden, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(tokens, dtype=torch.float32, device=x.device)
    stream = torch.cuda.current_stream()
    ct.launch(stream, (tokens,), rms_norm, (x, w, y, hidden, eps, tile_size(hidden)))
    ct.launch(stream, (tokens,), quantize_fp8, (y, q, scale, tile_size(hidden)))
    return q, scale


def torch_reference(x, w, eps: float = 1e-6):
    """PyTorch: rms_norm in float32, amax, the scale, the cast (as vLLM's per-token
    quantization: multiplied by the inverse scale)."""
    import torch
    y = torch.nn.functional.rms_norm(x.float(), (x.shape[1],), w.float(), eps)
    amax = y.abs().amax(dim=1, keepdim=True).clamp(min=MIN_AMAX)
    return (y * (E4M3_MAX / amax)).to(torch.float8_e4m3fn), amax[:, 0] / E4M3_MAX


def within_one_step(q, rq) -> bool:
    """Whether e4m3 codes ``q`` and ``rq`` (uint8 arrays, NumPy's) are everywhere at most
    one representable value apart (+0.0 and -0.0 one value; a NaN only beside a NaN)."""
    import numpy as np
    q, rq = np.asarray(q).astype(np.int16), np.asarray(rq).astype(np.int16)
    nan = (q & 0x7f) == 0x7f
    pos = [np.where(c & 0x80, -(c & 0x7f), c & 0x7f) for c in (q, rq)]
    return bool(np.array_equal(nan, (rq & 0x7f) == 0x7f)
                and (np.abs(pos[0] - pos[1])[~nan] <= 1).all())


def run_on_gpu(shapes=((16, 4096), (4096, 7168))):
    import torch
    for tokens, hidden in shapes:
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
        q, s = run(x, w)
        rq, rs = torch_reference(x, w)
        torch.testing.assert_close(s, rs, rtol=1e-5, atol=0)
        # one e4m3 step at most (the rsqrt's last bit can move a value across a rounding)
        assert within_one_step(q.view(torch.uint8).cpu().numpy(),
                               rq.view(torch.uint8).cpu().numpy())
        uq, us = run_unfused(x, w)
        assert torch.equal(us, s) and torch.equal(uq.view(torch.uint8), q.view(torch.uint8))
        print(f"({tokens}, {hidden}) bfloat16: fused = unfused cuTile pair, PyTorch within "
              f"one e4m3 step")
    print("OK")


def compile_only(hidden=4096):
    print("no GPU: compiled for sm_90 without launching")
    sig = splice.kernel_signature("array(bfloat16, ndim=2)", "array(bfloat16)",
                                  "array(float8_e4m3fn, ndim=2)", "array(float32)",
                                  "scalar(int32)", "scalar(float32)", tile_size(hidden))
    print(splice.compile(rms_norm_fp8, sig, "sm_90").summary())


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
