"""The kernel the ecosystem tests (signatures, export, JAX) share: y = 2 x through a CUDA C
extern."""

import cuda.tile as ct

import splice

TWICE = 'extern "C" __device__ float eco_twice(float x) { return x * 2.0f; }'
eco_twice = splice.extern(source=TWICE, name="eco_twice", signature="float32(float32)")


@splice.kernel
def eco_kernel(x, y, TILE: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=eco_twice(t))


def sig(tile=256, dtype="float32"):
    """``eco_kernel``'s signature for ``TILE=tile`` and arrays of ``dtype``."""
    return splice.kernel_signature(f"array({dtype})", f"array({dtype})", tile)
