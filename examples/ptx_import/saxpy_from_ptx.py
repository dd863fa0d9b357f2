"""A cuTile kernel calling a device function imported from a prebuilt .ptx file.

`saxpy.ptx` (committed, generated from `saxpy.cu` by `make_ptx.py`) defines
`.func saxpy(float, float, float)`. With a GPU the result is checked against NumPy; without
one the kernel is compiled for sm_90 and the spliced call sites and SASS CALL count printed.
"""

import sys

import cuda.tile as ct
import numpy as np

import splice

saxpy = splice.extern.from_ptx("saxpy.ptx", name="saxpy",
                               signature="float32(float32, float32, float32)")


@splice.kernel
def saxpy_kernel(X, Y, Out, a: float, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    x = ct.load(X, index=(bid,), shape=(TILE,))
    y = ct.load(Y, index=(bid,), shape=(TILE,))
    ct.store(Out, index=(bid,), tile=saxpy(a, x, y))


def run_on_gpu(n=1 << 20, tile=1024, a=2.5):
    import torch
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    X, Y = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    Out = torch.empty_like(X)
    ct.launch(torch.cuda.current_stream(), (n // tile,), saxpy_kernel, (X, Y, Out, a, tile))
    torch.cuda.synchronize()
    ref = (np.float64(a) * x + y).astype(np.float32)
    err = np.abs(Out.cpu().numpy() - ref).max()
    print(f"saxpy from PTX on {splice.toolchain.gpu_arch()}: n={n}, max |error| = {err:.2e}")
    assert err <= 1e-6, err
    print("OK")


def compile_only(tile=1024):
    from cuda.tile.compilation import (
        ArrayConstraint,
        CallingConvention,
        KernelSignature,
        ScalarConstraint,
    )
    arr = ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0,
                          alias_groups=(), may_alias_internally=False, stride_constant=(1,))
    sig = KernelSignature([arr, arr, arr, ScalarConstraint(ct.float32), tile],
                          CallingConvention.cutile_python_v1())
    build = splice.compile(saxpy_kernel, sig, arch="sm_90")
    print("no GPU: compiled for sm_90 without launching")
    print(build.summary())


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
