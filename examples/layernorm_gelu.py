"""Layer norm followed by GELU, where the activation is a CUDA C device function.

A cuTile kernel in the style of cuTile's samples: one block normalises one row of X
(shape M x N), scales and shifts it, and applies `gelu_erf` -- written in CUDA C, compiled by
NVRTC and spliced into the kernel's PTX by splice -- to every element of the (1, N) tile.

With a GPU the result is checked against NumPy. Without one, the kernel is compiled for
sm_90 and the spliced call sites and the SASS CALL count are printed.
"""

import sys

import cuda.tile as ct
import numpy as np

import splice


@splice.extern(source=r'''
extern "C" __device__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}''')
def gelu_erf(x: ct.float32) -> ct.float32: ...


@splice.kernel
def layernorm_gelu(X, W, B, Y, eps: float, N: ct.Constant[int]):
    row = ct.bid(0)
    x = ct.load(X, index=(row, 0), shape=(1, N)).astype(ct.float32)
    mean = ct.sum(x, axis=1, keepdims=True) / N
    xc = x - mean
    var = ct.sum(xc * xc, axis=1, keepdims=True) / N
    w = ct.reshape(ct.load(W, index=(0,), shape=(N,)), (1, N))
    b = ct.reshape(ct.load(B, index=(0,), shape=(N,)), (1, N))
    y = xc * ct.rsqrt(var + eps) * w + b
    ct.store(Y, index=(row, 0), tile=gelu_erf(y).astype(Y.dtype))


def reference(x, w, b, eps):
    from math import erf
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps) * w + b
    return 0.5 * y * (1.0 + np.vectorize(erf)(y / np.sqrt(2.0)))


def run_on_gpu(M=256, N=1024, eps=1e-5):
    import torch
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, N)).astype(np.float32)
    w = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    X, W, B = (torch.from_numpy(a).cuda() for a in (x, w, b))
    Y = torch.empty_like(X)
    ct.launch(torch.cuda.current_stream(), (M,), layernorm_gelu, (X, W, B, Y, eps, N))
    torch.cuda.synchronize()
    err = np.abs(Y.cpu().numpy() - reference(x, w, b, eps)).max()
    print(f"layernorm_gelu on {splice.toolchain.gpu_arch()}: {M}x{N}, max |error| = {err:.2e}")
    assert err < 1e-4, err
    print("OK")


def compile_only(N=1024):
    sig = splice.kernel_signature("array(float32, ndim=2)", "array(float32)", "array(float32)",
                                  "array(float32, ndim=2)", "scalar(float32)", N)
    build = splice.compile(layernorm_gelu, sig, arch="sm_90")
    print("no GPU: compiled for sm_90 without launching")
    print(build.summary())


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
