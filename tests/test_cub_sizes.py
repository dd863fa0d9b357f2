"""splice.cub at every documented shape: a dtype x size x op matrix (CPU compile for
sm_90), values of a sample on the CPU executor and the GPU, and a test for each public
parameter that fails if it is ignored.

The full matrix (every op, every documented dtype, every size 128 x 2**j: 300 compiles)
is marked ``slow`` and runs with ``pytest -m slow tests/test_cub_sizes.py`` (or
``SPLICE_SLOW_TESTS=1``; about 20 minutes on 2 busy cores, all 300 passed on 2026-12-04);
every run compiles :data:`SAMPLE`, which holds each op, each
dtype family, the largest documented size of each op and every shape issue 37 found
refused (the guard's ``cvt.u64.u32`` round trip that tileiras emits for arrays not known
to be 16-byte aligned, :mod:`splice.thread_index`).

The arrays are declared with no alignment or shape divisibility (what a user's odd-sized
array gets): that is the signature under which tileiras takes ``tid.x`` through 64 bits.
"""

from __future__ import annotations

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice import cub
from splice.errors import SpliceCallError
from splice.inputs import cccl
from support import kernels as K
from support.kernels import ArrayConstraint
from support.ptx_exec import run_build

ConstInt = ct.Constant[int]
SIZES = tuple(cub.THREADS << j for j in range(6))            # 128 ... 4096
SORT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "bfloat16", "float32", "float64")
SUM_DTYPES = ("int32", "int64", "uint32", "uint64", "float32", "float64")
INT_DTYPES = SORT_DTYPES[:8]
TOP_K, BINS = 16, 256


@pytest.fixture(scope="module", autouse=True)
def _cub_headers():
    if not cccl.include_dirs():
        pytest.skip(f"CUB headers not found: {cccl.INSTALL_HINT}")


@splice.kernel
def sort_kernel(x, y, N: ConstInt, DESC: ct.Constant[bool]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t, descending=DESC))


@splice.kernel
def sort_pairs_kernel(k, v, ks, vs, N: ConstInt, DESC: ct.Constant[bool]):
    a = ct.load(k, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    b = ct.load(v, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    sa, sb = splice.cub.sort_pairs(a, b, descending=DESC)
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
def histogram_kernel(x, h, N: ConstInt, B: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(h, index=(ct.bid(0),), tile=splice.cub.histogram(t, B))


def _array(dtype: str) -> ArrayConstraint:
    """A 1-D array with no alignment or shape divisibility known."""
    return ArrayConstraint(getattr(ct, dtype), 1, index_dtype=ct.int32,
                           stride_lower_bound_incl=0, alias_groups=(),
                           may_alias_internally=False, stride_constant=(1,),
                           stride_divisible_by=(1,), base_addr_divisible_by=1,
                           shape_divisible_by=1)


def _case(op: str, dtype: str, n: int, desc: bool = False):
    """(kernel, signature) of one matrix cell."""
    if op == "sort":
        return sort_kernel, K.signature(_array(dtype), _array(dtype), n, desc)
    if op == "sort_pairs":
        return sort_pairs_kernel, K.signature(_array(dtype), _array("int32"), _array(dtype),
                                              _array("int32"), n, desc)
    if op == "top_k":
        return top_k_kernel, K.signature(_array(dtype), _array(dtype), _array("int32"), n,
                                         TOP_K)
    if op == "inclusive_sum":
        return scan_kernel, K.signature(_array(dtype), _array(dtype), n)
    assert op == "histogram"
    return histogram_kernel, K.signature(_array(dtype), _array("int32"), n, BINS)


MATRIX = [(op, d, n) for op, dtypes in (("sort", SORT_DTYPES), ("sort_pairs", SORT_DTYPES),
                                         ("top_k", SORT_DTYPES),
                                         ("inclusive_sum", SUM_DTYPES),
                                         ("histogram", INT_DTYPES))
          for d in dtypes for n in SIZES]
#: Compiled in every run: issue 37's refused shapes, each op at its largest size, each dtype.
SAMPLE = [("sort", "int8", 2048), ("sort", "float16", 2048), ("sort", "float64", 4096),
          ("top_k", "float16", 2048), ("histogram", "uint8", 1024),
          ("sort_pairs", "bfloat16", 4096), ("top_k", "uint64", 4096),
          ("inclusive_sum", "int64", 4096), ("histogram", "int16", 4096),
          ("sort", "uint32", 128)]


def _ids(cells):
    return [f"{op}-{d}-{n}" for op, d, n in cells]


def _compile(op, dtype, n, desc=False):
    kernel, sig = _case(op, dtype, n, desc)
    return splice.compile(kernel, sig, "sm_90")


def _one_call_per_block(build, op):
    """The op's block call is in the kernel once, spliced (a call per block)."""
    name = {"sort": "sort_keys"}.get(op, op)
    [call] = [s for s in build.sites if s.extern.startswith(f"splice_cub::{name}<") and
              s.extern.endswith("(block call on the staged tiles)")]
    assert call.instances == 1
    assert "__splice_block_" in build.spliced_ptx


@pytest.mark.parametrize("op,dtype,n", SAMPLE, ids=_ids(SAMPLE))
def test_documented_shape_compiles_sample(op, dtype, n):
    _one_call_per_block(_compile(op, dtype, n), op)


@pytest.mark.slow
@pytest.mark.parametrize("op,dtype,n", [c for c in MATRIX if c not in SAMPLE],
                         ids=_ids([c for c in MATRIX if c not in SAMPLE]))
def test_documented_shape_compiles(op, dtype, n):
    _one_call_per_block(_compile(op, dtype, n), op)


def test_tiles_beyond_shared_memory_refused_with_the_nearest_shape_that_fits():
    """Past the documented sizes the limit is shared memory: a (16384,) float64 sort
    stages 2 x 128 KiB; the refusal names the limit and the nearest tiles that fit."""
    with pytest.raises(SpliceCallError, match=r"262144 bytes of shared memory .*more than any "
                                              r"GPU gives a block \(232448 on sm_90\).*"
                                              r"nearest that fits .*8192 x float64, "
                                              r"8192 x float64"):
        _compile("sort", "float64", 16384)


# ---------------------------------------------------------------------------------------------
# Values of the sample on the CPU executor (one CTA)

_rng = np.random.default_rng(37)


def _run(op, dtype, n, *arrays, desc=False):
    launch = run_build(_compile(op, dtype, n, desc), (1,), *arrays)
    assert not launch.approx


def test_exec_sort_int8_2048_unaligned():
    x = _rng.integers(-128, 128, 2048).astype(np.int8)
    y = np.zeros_like(x)
    _run("sort", "int8", 2048, x, y)
    np.testing.assert_array_equal(y, np.sort(x))


def test_exec_histogram_uint8_1024_unaligned():
    x = _rng.integers(0, 256, 1024).astype(np.uint8)
    h = np.full(BINS, -1, np.int32)
    _run("histogram", "uint8", 1024, x, h)
    np.testing.assert_array_equal(h, np.bincount(x, minlength=BINS))


@pytest.mark.parametrize("desc", [False, True])
def test_exec_sort_pairs_descending(desc):
    """``descending`` of sort_pairs: keys largest first and values with them; ties keep
    their order both ways (CUB's radix sort is stable descending too)."""
    n = 256
    k = _rng.integers(0, 20, n).astype(np.float32)                   # ties: stability
    v = np.arange(n, dtype=np.int32)
    ks, vs = np.zeros_like(k), np.zeros_like(v)
    _run("sort_pairs", "float32", n, k, v, ks, vs, desc=desc)
    order = np.argsort(-k if desc else k, kind="stable")
    np.testing.assert_array_equal(ks, k[order])
    np.testing.assert_array_equal(vs, v[order])


def test_exec_top_k_float16_2048():
    x = (_rng.permutation(2048) - 1024).astype(np.float16)          # distinct, exact
    vals, idx = np.zeros(TOP_K, np.float16), np.zeros(TOP_K, np.int32)
    _run("top_k", "float16", 2048, x, vals, idx)
    order = np.argsort(-x.astype(np.float32), kind="stable")[:TOP_K]
    np.testing.assert_array_equal(vals, x[order])
    np.testing.assert_array_equal(idx, order)


# ---------------------------------------------------------------------------------------------
# GPU: the sample against PyTorch, many rows

_TORCH_SORTS = ("sort", "sort_pairs")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,n,desc", [("int8", 2048, False), ("float16", 2048, True),
                                          ("float64", 4096, False)])
def test_gpu_sort_sample(torch, dtype, n, desc):
    from support.gpu import launch
    rows = 64
    tdt = getattr(torch, dtype)
    x = (torch.randn(rows * n + 3, device="cuda") * 100).to(tdt)[3:]   # unaligned
    y = torch.empty_like(x)
    launch(torch, (rows,), sort_kernel, (x, y, n, desc))
    ref = torch.sort(x.view(rows, n), dim=-1, descending=desc).values.reshape(-1)
    assert torch.equal(y, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("desc", [False, True])
def test_gpu_sort_pairs_descending(torch, desc):
    from support.gpu import launch
    rows, n = 64, 1024
    k = torch.randint(0, 50, (rows * n,), device="cuda").float()
    v = torch.arange(rows * n, device="cuda", dtype=torch.int32)
    ks, vs = torch.empty_like(k), torch.empty_like(v)
    launch(torch, (rows,), sort_pairs_kernel, (k, v, ks, vs, n, desc))
    ref = torch.sort(k.view(rows, n), dim=-1, descending=desc, stable=True)
    assert torch.equal(ks, ref.values.reshape(-1))
    assert torch.equal(vs.view(rows, n), v.view(rows, n).gather(1, ref.indices).int())


@pytest.mark.gpu
def test_gpu_top_k_float16_and_histogram_uint8(torch):
    from support.gpu import launch
    rows = 64
    x = torch.randperm(rows * 2048, device="cuda").remainder(60000).to(torch.float16)
    vals = torch.empty(rows * TOP_K, device="cuda", dtype=torch.float16)
    idx = torch.empty(rows * TOP_K, device="cuda", dtype=torch.int32)
    launch(torch, (rows,), top_k_kernel, (x, vals, idx, 2048, TOP_K))
    ref = torch.topk(x.view(rows, 2048).float(), TOP_K, dim=-1)
    assert torch.equal(vals.view(rows, TOP_K).float(), ref.values)
    u = torch.randint(0, 256, (rows * 1024,), device="cuda", dtype=torch.uint8)
    h = torch.empty(rows * BINS, device="cuda", dtype=torch.int32)
    launch(torch, (rows,), histogram_kernel, (u, h, 1024, BINS))
    ref_h = torch.stack([torch.bincount(r.long(), minlength=BINS) for r in u.view(rows, 1024)])
    assert torch.equal(h.view(rows, BINS).long(), ref_h)
