"""splice.cub: sort, sort_pairs, top_k, inclusive_sum and histogram of a tile -- each
compiled for sm_90 (CPU), each refusal, and each against PyTorch (GPU)."""

from __future__ import annotations

import re

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.errors import SpliceCallError
from splice.inputs import cccl
from support import kernels as K
from support.ptx_exec import run_build

f32, i32 = ct.float32, ct.int32
ConstInt = ct.Constant[int]


@pytest.fixture(scope="module", autouse=True)
def _cub_headers():
    if not cccl.include_dirs():
        pytest.skip(f"CUB headers not found: {cccl.INSTALL_HINT}")


# one row of a flat array per block: allow_tma=False keeps tileiras from warp-specialising

@splice.kernel
def sort_kernel(x, y, N: ConstInt, DESC: ct.Constant[bool]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t, descending=DESC))


@splice.kernel
def sort_pairs_kernel(k, v, ks, vs, N: ConstInt):
    a = ct.load(k, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    b = ct.load(v, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    sa, sb = splice.cub.sort_pairs(a, b)
    ct.store(ks, index=(ct.bid(0),), tile=sa)
    ct.store(vs, index=(ct.bid(0),), tile=sb)


@splice.kernel
def top_k_kernel(x, vals, idx, N: ConstInt, KK: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    v, i = splice.cub.top_k(t, KK)
    ct.store(vals, index=(ct.bid(0),), tile=v)
    ct.store(idx, index=(ct.bid(0),), tile=i)


@splice.kernel
def scan_kernel(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.inclusive_sum(t))


@splice.kernel
def histogram_kernel(x, h, N: ConstInt, BINS: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(h, index=(ct.bid(0),), tile=splice.cub.histogram(t, BINS))


def _sig(*arrays, consts=()):
    return K.signature(*(K.array(d) for d in arrays), *consts)


def _exec(kernel, sig, *args):
    """Compile for sm_90 and run one CTA (one row) on the CPU executor; CUB's radix sort of
    one CTA takes ~0.35 s there."""
    launch = run_build(splice.compile(kernel, sig, "sm_90"), (1,), *args)
    assert not launch.approx


_rng = np.random.default_rng(7)


def test_sort_compiles_with_one_call_per_block():
    b = splice.compile(sort_kernel, _sig(f32, f32, consts=(1024, False)), "sm_90")
    store, call, load = b.sites
    assert (store.instances, call.instances, load.instances) == (8, 1, 8)
    assert "splice_cub::sort_keys<float, false>" in call.extern
    # the CUB code is compiled for 128 threads, and the proof holds the kernel to it
    assert splice.cub._extern("splice_cub::sort_keys<float, false>",
                              "tile(float32)(tile(float32))").block_threads == 128
    # CUB's code is in it (inlined into the instance, whose temporary storage it uses), cut
    # to what the call reaches: none of the ~770 lines of CCCL's .weak constants
    assert "_ZZN10splice_cub9sort_keysIfLb0ELi1024EEEvRAT1__KT_RAT1__S1_E3tmp" in b.spliced_ptx
    assert "numeric_limits" not in b.spliced_ptx and "integral_constant" not in b.spliced_ptx


def test_each_operation_compiles():
    cases = [
        (sort_kernel, _sig(i32, i32, consts=(256, True)), [2, 1, 2]),
        (sort_pairs_kernel, _sig(f32, i32, f32, i32, consts=(512,)), [4, 4, 1, 4, 4]),
        (top_k_kernel, _sig(f32, f32, i32, consts=(1024, 8)), [8, 1, 1, 1]),
        (scan_kernel, _sig(f32, f32, consts=(1024,)), [8, 1, 8]),
        (histogram_kernel, _sig(i32, i32, consts=(1024, 256)), [8, 1, 2]),
    ]
    builds = {}
    for kernel, sig, instances in cases:
        builds[kernel] = b = splice.compile(kernel, sig, "sm_90")
        assert [s.instances for s in b.sites] == instances, kernel
    # top_k's results have the shape (k,)
    assert [s.shape for s in builds[top_k_kernel].sites] == [(1024,), (), (8,), (8,)]


@splice.kernel
def sort_2d_kernel(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0), 0), shape=(N, N), allow_tma=False)
    ct.store(y, index=(ct.bid(0), 0), tile=splice.cub.sort(t))


@splice.kernel
def sort_bool_kernel(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t > 0.0).astype(f32))


@splice.kernel
def top_k_bad_kernel(x, vals, idx, N: ConstInt, KK: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    v, i = splice.cub.top_k(t, KK)
    ct.store(vals, index=(ct.bid(0),), tile=v)


@splice.kernel
def histogram_float_kernel(x, h, N: ConstInt, BINS: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(h, index=(ct.bid(0),), tile=splice.cub.histogram(t, BINS))


def test_refusals():
    with pytest.raises(SpliceCallError, match="takes a 1-D tile"):
        splice.compile(sort_2d_kernel, K.signature(K.array(f32, 2), K.array(f32, 2), 16),
                       "sm_90")
    with pytest.raises(SpliceCallError, match="bool tiles are not supported"):
        splice.compile(sort_bool_kernel, _sig(f32, f32, consts=(256,)), "sm_90")
    with pytest.raises(SpliceCallError, match="k must be a power of two"):
        splice.compile(top_k_bad_kernel, _sig(f32, f32, i32, consts=(256, 6)), "sm_90")
    with pytest.raises(SpliceCallError, match="k must be a power of two from 1 to the tile's"):
        splice.compile(top_k_bad_kernel, _sig(f32, f32, i32, consts=(256, 512)), "sm_90")
    with pytest.raises(SpliceCallError, match="float32 tiles are not supported"):
        splice.compile(histogram_float_kernel, _sig(f32, i32, consts=(256, 16)), "sm_90")
    with pytest.raises(SpliceCallError, match="bins must be a power of two"):
        splice.compile(histogram_kernel, _sig(i32, i32, consts=(256, 100)), "sm_90")
    with pytest.raises(SpliceCallError, match="device code"):
        splice.cub.sort(None)


@pytest.mark.parametrize("n", [64, 32])
def test_tile_smaller_than_the_block_is_refused_at_the_call(n):
    """The user's line first: at the call, when the kernel is traced (not CUB's own
    static_assert when CUB compiles)."""
    with pytest.raises(SpliceCallError) as e:
        splice.compile(sort_kernel, _sig(f32, f32, consts=(n, False)), "sm_90")
    assert re.match(rf"splice\.cub\.sort at \S*test_cub\.py:\d+: a tile of {n} elements; "
                    rf"splice\.cub takes tiles of 128 x 2\*\*j elements", e.value.message), \
        e.value.message


# ---------------------------------------------------------------------------------------------
# GPU: against PyTorch


@pytest.mark.gpu
@pytest.mark.parametrize("n,desc", [(128, False), (1024, False), (2048, True)])
def test_gpu_sort(torch, n, desc):
    from support.gpu import launch
    rows = 256
    x = torch.randn(rows * n, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (rows,), sort_kernel, (x, y, n, desc))
    ref = torch.sort(x.view(rows, n), dim=-1, descending=desc).values.reshape(-1)
    torch.testing.assert_close(y, ref, rtol=0, atol=0)


@pytest.mark.parametrize("n,desc", [(128, False), (256, True)])
def test_exec_sort(n, desc):
    x = _rng.standard_normal(n).astype(np.float32)
    y = np.zeros_like(x)
    _exec(sort_kernel, _sig(f32, f32, consts=(n, desc)), x, y)
    np.testing.assert_array_equal(y, np.sort(x)[::-1] if desc else np.sort(x))


@pytest.mark.gpu
def test_gpu_sort_int32(torch):
    from support.gpu import launch
    rows, n = 64, 256
    x = torch.randint(-1000, 1000, (rows * n,), device="cuda", dtype=torch.int32)
    y = torch.empty_like(x)
    launch(torch, (rows,), sort_kernel, (x, y, n, False))
    assert torch.equal(y, torch.sort(x.view(rows, n), dim=-1).values.reshape(-1))


def test_exec_sort_int32():
    x = _rng.integers(-1000, 1000, 256).astype(np.int32)
    y = np.zeros_like(x)
    _exec(sort_kernel, _sig(i32, i32, consts=(256, False)), x, y)
    np.testing.assert_array_equal(y, np.sort(x))


@pytest.mark.gpu
def test_gpu_sort_pairs(torch):
    from support.gpu import launch
    rows, n = 64, 512
    k = torch.randint(0, 50, (rows * n,), device="cuda").float()    # ties: stability
    v = torch.arange(rows * n, device="cuda", dtype=torch.int32)
    ks, vs = torch.empty_like(k), torch.empty_like(v)
    launch(torch, (rows,), sort_pairs_kernel, (k, v, ks, vs, n))
    ref = torch.sort(k.view(rows, n), dim=-1, stable=True)
    assert torch.equal(ks, ref.values.reshape(-1))
    assert torch.equal(vs.view(rows, n), v.view(rows, n).gather(1, ref.indices).int())


def test_exec_sort_pairs():
    n = 128
    k = _rng.integers(0, 20, n).astype(np.float32)                  # ties: stability
    v = np.arange(n, dtype=np.int32)
    ks, vs = np.zeros_like(k), np.zeros_like(v)
    _exec(sort_pairs_kernel, _sig(f32, i32, f32, i32, consts=(n,)), k, v, ks, vs)
    order = np.argsort(k, kind="stable")
    np.testing.assert_array_equal(ks, k[order])
    np.testing.assert_array_equal(vs, v[order])



@splice.kernel
def sort_pairs_desc_kernel(k, v, ks, vs, N: ConstInt):
    a = ct.load(k, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    b = ct.load(v, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    sa, sb = splice.cub.sort_pairs(a, b, descending=True)
    ct.store(ks, index=(ct.bid(0),), tile=sa)
    ct.store(vs, index=(ct.bid(0),), tile=sb)


@pytest.mark.parametrize("desc", [False, True])
def test_exec_radix_sort_orders_signed_zeros_as_equal_and_nans_by_sign(desc):
    """Found trying to break the sorts (issue 44): the docs said -0.0 sorts before +0.0,
    and NaNs after +inf; CUB's radix sort ranks -0.0 as +0.0 (equal keys: their order kept,
    as torch.sort(stable=True) does) and a NaN with its sign bit set below -inf."""
    n = 128
    k = np.zeros(n, np.float32)
    k[0::2] = -0.0                                                   # -0.0, +0.0, -0.0 ...
    k[10:16] = [np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0]
    assert np.signbit(k[11]) and not np.signbit(k[10])
    v = np.arange(n, dtype=np.int32)
    ks, vs = np.zeros_like(k), np.zeros_like(v)
    kernel = sort_pairs_desc_kernel if desc else sort_pairs_kernel
    _exec(kernel, _sig(f32, i32, f32, i32, consts=(n,)), k, v, ks, vs)
    # by rank: -nan, -inf, -1, the zeros in index order, 1, +inf, +nan
    rank = np.select([np.isnan(k) & np.signbit(k), np.isnan(k)], [-4.0, 4.0],
                     np.clip(np.where(k == 0, 0.0, k), -3, 3))
    order = np.argsort(-rank if desc else rank, kind="stable")
    np.testing.assert_array_equal(vs, order)
    np.testing.assert_array_equal(ks.view(np.uint32), k[order].view(np.uint32))

@pytest.mark.gpu
def test_gpu_top_k(torch):
    from support.gpu import launch
    rows, n, k = 128, 1024, 8
    x = torch.randperm(rows * n, device="cuda").float()              # distinct values
    vals = torch.empty(rows * k, device="cuda")
    idx = torch.empty(rows * k, device="cuda", dtype=torch.int32)
    launch(torch, (rows,), top_k_kernel, (x, vals, idx, n, k))
    ref = torch.topk(x.view(rows, n), k, dim=-1)
    assert torch.equal(vals.view(rows, k), ref.values)
    assert torch.equal(idx.view(rows, k).long(), ref.indices)


def test_exec_top_k():
    n, k = 256, 8
    x = _rng.permutation(n).astype(np.float32)                      # distinct values
    vals, idx = np.zeros(k, np.float32), np.zeros(k, np.int32)
    _exec(top_k_kernel, _sig(f32, f32, i32, consts=(n, k)), x, vals, idx)
    order = np.argsort(-x)[:k]
    np.testing.assert_array_equal(vals, x[order])
    np.testing.assert_array_equal(idx, order)


@pytest.mark.gpu
def test_gpu_inclusive_sum(torch):
    from support.gpu import launch
    rows, n = 128, 1024
    x = torch.randint(-8, 8, (rows * n,), device="cuda").float()     # exact in float32
    y = torch.empty_like(x)
    launch(torch, (rows,), scan_kernel, (x, y, n))
    assert torch.equal(y.view(rows, n), torch.cumsum(x.view(rows, n), dim=-1))


def test_exec_inclusive_sum():
    x = _rng.integers(-8, 8, 256).astype(np.float32)                # exact in float32
    y = np.zeros_like(x)
    _exec(scan_kernel, _sig(f32, f32, consts=(256,)), x, y)
    np.testing.assert_array_equal(y, np.cumsum(x))


@pytest.mark.gpu
def test_gpu_histogram(torch):
    from support.gpu import launch
    rows, n, bins = 64, 1024, 256
    x = torch.randint(-20, bins + 20, (rows * n,), device="cuda", dtype=torch.int32)
    h = torch.empty(rows * bins, device="cuda", dtype=torch.int32)
    launch(torch, (rows,), histogram_kernel, (x, h, n, bins))
    ref = torch.stack([torch.bincount(r[(r >= 0) & (r < bins)], minlength=bins)
                       for r in x.view(rows, n)])
    assert torch.equal(h.view(rows, bins).long(), ref)


def test_exec_histogram_with_shared_atomics():
    n, bins = 256, 16
    x = _rng.integers(-4, bins + 4, n).astype(np.int32)
    h = np.full(bins, -1, np.int32)
    b = splice.compile(histogram_kernel, _sig(i32, i32, consts=(n, bins)), "sm_90")
    # the counters are the staged result tile: the template says it is in shared memory,
    # so NVRTC adds with atom.shared (it emitted a generic atom.add before)
    assert re.search(r"^\s*atom\.shared\.add\.u32", b.spliced_ptx, re.M)
    run_build(b, (1,), x, h)
    np.testing.assert_array_equal(h, np.bincount(x[(x >= 0) & (x < bins)], minlength=bins))


def test_benchmark_compiles_and_reports_without_a_gpu():
    import subprocess
    import sys
    from pathlib import Path

    from support.env import python_env
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "bench_block_tiles.py", "--compile-only"],
                         capture_output=True, text=True, cwd=root / "benchmarks",
                         timeout=900, env=python_env(root))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.stdout.splitlines()[2:]}
    assert set(rows) == {"sort", "scan", "top_k", "histogram", "exclusive_sum", "cummax",
                         "reduce_max", "merge_sort", "unique_counts", "rl_decode"}
    assert rows["sort"][:3] == ["3", "8", "8"] and rows["top_k"][:3] == ["4", "8", "2"]


@splice.kernel
def warp_specialised_sort_kernel(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,))              # a TMA load, and a reduction
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t) * ct.sum(t))


def _line_of(code: str) -> int:
    """The line of this file that has ``code``."""
    return next(n for n, line in enumerate(open(__file__), 1) if code in line)


def test_warp_specialised_kernel_refusal_says_what_works():
    from splice.errors import SpliceRewriteError
    with pytest.raises(SpliceRewriteError) as e:
        splice.compile(warp_specialised_sort_kernel, _sig(f32, f32, consts=(256,)), "sm_90")
    msg = str(e.value)
    assert "allow_tma=False" in msg and "splice.cub.sort" in msg
    assert "Declare the extern" not in msg and "splice_cub::" not in msg
    assert f"splice.cub.sort at {__file__}:{_line_of('splice.cub.sort(t) * ct.sum(t)')}" in msg


def _sort_then_gather(x, h, y, N):
    """Sort a row, then gather rows of ``h`` by the order in a loop: tileiras pipelines the
    unrolled gathers in a producer warpgroup (no TMA, no ct.mma) unless told otherwise."""
    _, order = splice.cub.sort_pairs(ct.load(x, index=(ct.bid(0),), shape=(N,),
                                             allow_tma=False),
                                     ct.arange(N, dtype=ct.int32))
    for c in ct.static_iter(range(N // 64)):
        rows = ct.extract(order, (c,), shape=(64,))[:, None]
        v = ct.gather(h, (rows, ct.arange(64, dtype=ct.int32)[None, :]))
        ct.store(y, index=(ct.bid(0) * (N // 64) + c, 0), tile=v, allow_tma=False)


@splice.kernel
def gather_loop_kernel(x, h, y, N: ConstInt):
    _sort_then_gather(x, h, y, N)


def test_warp_specialised_without_tma_or_mma_names_the_occupancy_hint():
    """Issue 44: tileiras split a kernel with neither TMA copies nor ct.mma (a loop of
    gathers after a sort); the refusal said "call it from a kernel without ct.mma". It
    names what works instead."""
    from splice.errors import SpliceRewriteError
    sig = K.signature(K.array(f32), K.array(ct.bfloat16, 2), K.array(ct.bfloat16, 2), 1024)
    with pytest.raises(SpliceRewriteError) as e:
        splice.compile(gather_loop_kernel, sig, "sm_90")
    msg = str(e.value)
    assert "without ct.mma" not in msg
    assert "@splice.kernel(occupancy=2)" in msg and "trip count that is a kernel argument" in msg

def test_every_template_names_its_public_function():
    # the refusals name the user's splice.cub call by its template (splice.forms.cub_names)
    import re

    from splice.forms import cub_names
    templates = set(re.findall(r"__device__ \w+ (\w+)\(",
                               splice.cub._SOURCE + splice.cub._OPS_SOURCE))
    assert templates == set(cub_names.PUBLIC)
    assert all(callable(getattr(splice.cub, f)) for f in cub_names.PUBLIC.values())
    assert cub_names.call_of("splice_cub::top_k<int> (block call on the staged tiles) at "
                             "/a b/k.py:7") == ("splice.cub.top_k", "/a b/k.py:7")
    assert cub_names.call_of("reverse_tile (block call on the staged tiles) at k.py:7") is None
