"""splice.jax.cutile_call: spliced kernels inside jax.jit.

Without a GPU, JAX lowers for CUDA all the same (``lowering_platforms=("cuda",)``): the CPU
tests check that splice compiles the kernel there and hands cuTile's FFI launch exactly the
attributes cuTile's own cutile_call would. The GPU tests run it against NumPy."""

import os
import re

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # share the GPU with torch

import cuda.tile as ct
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import splice
import splice.jax as sj

TWICE = 'extern "C" __device__ float jx_twice(float x) { return x * 2.0f; }'
jx_twice = splice.extern(source=TWICE, name="jx_twice", signature="float32(float32)")
ADD = 'extern "C" __device__ float jx_add(float a, float b) { return a + b; }'
jx_add = splice.extern(source=ADD, name="jx_add", signature="float32(float32, float32)")


@splice.kernel
def jx_scale(x, y, c: ct.Constant, TILE: ct.Constant):
    t = jx_twice(ct.load(x, ct.bid(0), TILE)) * c
    ct.store(y, ct.bid(0), t)


@splice.kernel
def jx_inplace(x, s, TILE: ct.Constant):
    t = ct.load(x, ct.bid(0), TILE)
    ct.store(x, ct.bid(0), jx_add(t, s))


@splice.kernel
def jx_two_outputs(x, y1, y2, TILE: ct.Constant):
    t = ct.load(x, ct.bid(0), TILE)
    ct.store(y1, ct.bid(0), jx_twice(t))
    ct.store(y2, ct.bid(0), jx_add(t, t + 1.0))


def graph(x, c, s, tile):
    grid = (x.shape[0] // tile,)
    ph = sj.OutputPlaceholder(x.shape, x.dtype)
    y = sj.cutile_call(grid, jx_scale, (x, ph, c, tile))
    y = sj.cutile_call(grid, jx_inplace, (sj.InputOutput(y), s, tile))
    a, b = sj.cutile_call(grid, jx_two_outputs, (y, ph, ph, tile))
    return a + b


def reference(x, c, s):
    y = x * np.float32(2) * np.float32(c) + np.float32(s)
    return y * np.float32(2) + (y + (y + np.float32(1)))


# --- CPU: lowering for CUDA -----------------------------------------------------------------

def _attrs(text: str) -> list[dict]:
    out = []
    for call in re.findall(r"stablehlo\.custom_call @cutile_launch\(.*", text):
        out.append({k: v for k, v in re.findall(r"(\w+) = (dense<[^>]*>|\"[^\"]*\"|[-\w:]+)",
                                                call)})
    return out


def _lower(fn, *args, static=()):
    return jax.jit(fn, static_argnums=static).trace(*args).lower(
        lowering_platforms=("cuda",)).as_text()


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr(sj, "_arch", lambda: "sm_90")


def test_lowers_to_cutiles_launch_of_splices_cubin(sm90):
    x = jax.ShapeDtypeStruct((1024,), jnp.float32)
    text = _lower(graph, x, 2.0, 1.5, 256, static=(1, 2, 3))
    calls = _attrs(text)
    assert [c["function_name"].split("_Kt")[0] for c in calls] == \
        ['"jx_scale', '"jx_inplace', '"jx_two_outputs']
    # the in-place call: one input aliased to its output; its scalar 1.5f packed as bits
    assert "output_operand_aliases" in text
    assert calls[1]["scalar_packed"] == "dense<1069547520>"
    assert calls[2]["num_outputs"].startswith("2")


def test_same_launch_attributes_as_cutiles_cutile_call(sm90, monkeypatch):
    """A spliced kernel with no extern calls and the same plain kernel: cuTile's cutile_call
    and splice's give the launch the same symbol, buffers, scalars and aliases."""
    import cuda.tile._compile as ctc
    import cuda.tile.jax as cj
    monkeypatch.setattr(ctc, "get_sm_arch", lambda: "sm_90")

    def body(x, y, s, TILE: ct.Constant):
        t = ct.load(x, ct.bid(0), TILE)
        ct.store(x, ct.bid(0), t + s)
        ct.store(y, ct.bid(0), t)
    kernels = {"cutile": ct.kernel(body), "splice": splice.kernel(body)}
    lowered = {}
    for who, call in (("cutile", cj.cutile_call), ("splice", sj.cutile_call)):
        def fn(x, s, call=call, k=kernels[who]):
            return call((4,), k, (cj.InputOutput(x), cj.OutputPlaceholder((1024,), x.dtype),
                                  s, 256))
        lowered[who] = _attrs(_lower(fn, jax.ShapeDtypeStruct((1024,), jnp.float32), 7,
                                     static=(1,)))
    [a], [b] = lowered["cutile"], lowered["splice"]
    for attrs in (a, b):
        attrs.pop("cubin_code"), attrs.pop("cubin_id")
    assert a == b
    assert {"buffer_ids", "scalar_packed", "function_name", "index_bitwidths"} <= set(a)


def test_cutiles_cutile_call_names_splices(monkeypatch):
    import cuda.tile._compile as ctc
    import cuda.tile.jax as cj
    monkeypatch.setattr(ctc, "get_sm_arch", lambda: "sm_90")

    def fn(x):
        return cj.cutile_call((4,), jx_scale, (x, cj.OutputPlaceholder(x.shape, x.dtype),
                                               2.0, 256))
    with pytest.raises(splice.SpliceCallError, match="splice.jax.cutile_call"):
        _lower(fn, jax.ShapeDtypeStruct((1024,), jnp.float32))


def test_plain_kernels_go_to_cutile(monkeypatch):
    import cuda.tile.jax as cj
    seen = []
    monkeypatch.setattr(cj, "cutile_call", lambda *a: seen.append(a) or "cuTile's")

    @ct.kernel
    def plain(x):
        pass
    assert sj.cutile_call((1,), plain, (1,)) == "cuTile's" and seen


def test_arguments_are_checked_as_cutile_does():
    x = jnp.zeros(1024, jnp.float32)
    with pytest.raises(TypeError, match="expects 4 arguments"):
        sj.cutile_call((4,), jx_scale, (x,))
    with pytest.raises(TypeError, match="annotated ct.Constant"):
        sj.cutile_call((4,), jx_scale, (x, sj.OutputPlaceholder(x.shape, x.dtype), x, 256))
    with pytest.raises(splice.SpliceDeclarationError, match="grid"):
        sj.cutile_call([4], jx_scale, (x,))


# --- GPU ------------------------------------------------------------------------------------

def _jax_gpu():
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX sees no GPU (needs the CUDA plugin)")


@pytest.mark.gpu
def test_jit_graph_matches_numpy():
    _jax_gpu()
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    got = jax.jit(graph, static_argnums=(1, 2, 3))(jnp.asarray(x), 2.0, 1.5, 256)
    np.testing.assert_allclose(np.asarray(got), reference(x, 2.0, 1.5), rtol=1e-6)


@pytest.mark.gpu
def test_jit_recompiles_per_static_argument_and_shape():
    _jax_gpu()
    f = jax.jit(graph, static_argnums=(1, 2, 3))
    for n, c, s, tile in ((1024, 3.0, -1.0, 128), (2048, 3.0, -1.0, 256),
                          (2048, 0.5, 4.0, 256)):
        x = np.arange(n, dtype=np.float32) / n
        np.testing.assert_allclose(np.asarray(f(jnp.asarray(x), c, s, tile)),
                                   reference(x, c, s), rtol=1e-6)


# --------------------------------------------------------------------------------------------
# what the kernel's names hold when JAX lowers it (docs/guide/reloading.md)

jx_op = jx_twice


@splice.kernel
def jx_named(x, y, TILE: ct.Constant):
    ct.store(y, ct.bid(0), jx_op(ct.load(x, ct.bid(0), TILE)))


def test_a_name_bound_again_is_compiled_again(sm90, monkeypatch):
    # splice.jax keeps each kernel it built while the names its trace read hold the same
    def cubin_id():
        def fn(x):     # a new function each time: JAX's own cache is not asked
            return sj.cutile_call((4,), jx_named, (x, sj.OutputPlaceholder((1024,), x.dtype),
                                                   256))
        [call] = _attrs(_lower(fn, jax.ShapeDtypeStruct((1024,), jnp.float32)))
        return call["cubin_id"]
    first = cubin_id()
    assert cubin_id() == first
    monkeypatch.setitem(globals(), "jx_op", splice.extern(
        source='extern "C" __device__ float jx_thrice(float x) { return x * 3.0f; }',
        name="jx_thrice", signature="float32(float32)"))
    assert cubin_id() != first


# --------------------------------------------------------------------------------------------
# the grid

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
