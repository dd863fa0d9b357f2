"""splice.jax.cutile_call's grid, tried as a demanding user would (second round)."""

import cuda.tile as ct
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import splice
import splice.jax as sj

COPY = 'extern "C" __device__ float jb_copy(float x) { return x; }'
jb_copy = splice.extern(source=COPY, name="jb_copy", signature="float32(float32)")


@splice.kernel
def jb_kernel(x, y, TILE: ct.Constant):
    ct.store(y, ct.bid(0), jb_copy(ct.load(x, ct.bid(0), TILE)))


@pytest.mark.parametrize("grid", [(4.5,), (4.0,), (0,), (-1,), (True,), (2 ** 31,),
                                  (1, 65536), ("4",)])
def test_grid_outside_what_cuda_launches_is_refused(grid):
    # np.int32(4.5) truncated the grid to 4 (the last tile silently not computed), a
    # negative or 0 grid reached the launch, 2**31 overflowed np.int32
    x = jnp.ones((1024,), jnp.float32)
    with pytest.raises(splice.SpliceDeclarationError, match="grid"):
        sj.cutile_call(grid, jb_kernel, (x, sj.OutputPlaceholder(x.shape, x.dtype), 256))


def test_numpy_integer_grids_are_ints():
    assert sj._check_grid((np.int64(4), 2)) == (4, 2, 1)
