"""Impure calls given an array the kernel stores by TMA (:mod:`splice.tma_store_reads`):
refused where the PTX issues a bulk store to global memory, whose writes nothing orders
before the call's reads; accepted with ``allow_tma=False`` on the store, on sm_80, and for
calls given other arrays or arrays the kernel only loads. The read-back kernel's values on
the CPU executor and on the GPU."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.errors import SpliceCallError
from splice.ptxtools.tma_store_reads import BULK_GLOBAL_STORE
from support import kernels as K
from support.ptx_exec import run_build

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import matmul_rowmax_fp8 as fp8

f16, f32, i32 = ct.float16, ct.float32, ct.int32
ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]
HERE = Path(__file__).name

read_back = splice.extern(
    name="read_back", signature="float32(float32*, int32)", pure=False,
    source=r'''extern "C" __device__ float read_back(const float* c, int i) { return c[i]; }''')

read_back_f16 = splice.extern(
    name="read_back_f16", signature="float32(float16*, int32)", pure=False,
    source=r'''#include <cuda_fp16.h>
extern "C" __device__ float read_back_f16(const __half* a, int i) {
    return __half2float(a[i]);
}''')


def _block_index(width, tm, tn):
    """The (tm, tn) row-major indices of this block's tile of a (., width) array."""
    rows = ct.bid(0) * tm + ct.arange(tm, dtype=i32)
    cols = ct.bid(1) * tn + ct.arange(tn, dtype=i32)
    return ct.reshape(rows, (tm, 1)) * width + ct.reshape(cols, (1, tn))


@splice.kernel
def matmul_read_back_kernel(A, B, C, Out, tm: ConstInt, tn: ConstInt, tk: ConstInt,
                            tma: ConstBool):
    """C = A @ B (stored with TMA allowed or not), then every element of the block's C tile
    read back from global memory by an impure call (ordered after the store by the memory
    token), into Out."""
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=K.matmul_tile(A, B, tm, tn, tk),
             allow_tma=tma)
    ct.store(Out, index=(ct.bid(0), ct.bid(1)),
             tile=read_back(C, _block_index(C.shape[1], tm, tn)))


@splice.kernel
def matmul_read_before_store_kernel(A, B, C, Out, tm: ConstInt, tn: ConstInt,
                                    tk: ConstInt):
    """The block's C tile read back by the impure call *before* C's TMA store."""
    acc = K.matmul_tile(A, B, tm, tn, tk)
    ct.store(Out, index=(ct.bid(0), ct.bid(1)),
             tile=read_back(C, _block_index(C.shape[1], tm, tn)))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=acc)


@splice.kernel
def matmul_read_a_kernel(A, B, C, Out, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    """C = A @ B stored by TMA, then the impure call reads A (which the kernel only loads,
    by TMA) back: this block's (tm, tn) corner of it, into Out."""
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=K.matmul_tile(A, B, tm, tn, tk))
    ct.store(Out, index=(ct.bid(0), ct.bid(1)),
             tile=read_back_f16(A, _block_index(A.shape[1], tm, tn)))


def _read_back_sig(tma=True):
    return K.signature(K.array(f16, 2), K.array(f16, 2), K.array(f32, 2), K.array(f32, 2),
                       128, 128, 64, tma)


def test_element_read_back_of_tma_stored_array_is_refused():
    """sm_90: the store of C becomes a TMA bulk store, and the element call reads C: refused,
    naming the call, the argument, the store's line and both fixes."""
    with pytest.raises(SpliceCallError) as e:
        splice.compile(matmul_read_back_kernel, _read_back_sig(), "sm_90")
    msg = str(e.value)
    call_line = _line_of("tile=read_back(C, _block_index")
    store_line = _line_of("ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=K.matmul_tile(A, B, "
                          "tm, tn, tk),\n")
    assert "extern 'read_back'" in msg and "kernel 'matmul_read_back_kernel'" in msg
    assert f"{HERE}:{call_line}: argument 1 (C)" in msg
    assert re.search(rf"ct\.store at \S*{HERE}:{store_line}\b", msg)
    assert "allow_tma=False" in msg and "pass the stored tile itself" in msg


def test_element_read_before_the_tma_store_is_refused_too():
    """Conservative: a store anywhere in the kernel counts, not only one before the call (in
    a loop, "after" the call is before it in the next iteration)."""
    sig = K.signature(K.array(f16, 2), K.array(f16, 2), K.array(f32, 2), K.array(f32, 2),
                      128, 128, 64)
    with pytest.raises(SpliceCallError, match=r"argument 1 \(C\) is an array the kernel "
                                              r"stores with ct\.store at "):
        splice.compile(matmul_read_before_store_kernel, sig, "sm_90")


def test_element_read_back_without_tma_compiles():
    """With allow_tma=False on C's store the call is accepted: the PTX still issues bulk
    stores (Out's, which the call does not read), so what it rests on is the array."""
    b = splice.compile(matmul_read_back_kernel, _read_back_sig(tma=False), "sm_90")
    assert BULK_GLOBAL_STORE.search(b.ptx)
    [site] = b.sites            # one site, 128 x 128 elements on 128 threads
    assert site.instances == 128
    [site] = b.sites
    assert site.instances == 128


def test_element_read_back_on_sm_80_compiles():
    """sm_80 has no TMA: the same kernel (TMA allowed) is accepted."""
    b = splice.compile(matmul_read_back_kernel, _read_back_sig(), "sm_80")
    assert BULK_GLOBAL_STORE.search(b.ptx) is None
    assert b.sites[0].instances >= 1


@splice.kernel
def scale_read_back_kernel(X, C, Out, tm: ConstInt, tn: ConstInt, tma: ConstBool):
    """C = 2 X (stored with TMA allowed or not), then every element of the block's C tile
    read back by the impure call, into Out."""
    x = ct.load(X, index=(ct.bid(0), ct.bid(1)), shape=(tm, tn))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=x * 2.0, allow_tma=tma)
    ct.store(Out, index=(ct.bid(0), ct.bid(1)),
             tile=read_back(C, _block_index(C.shape[1], tm, tn)))


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("tma", [True, False])
def test_exec_read_back_without_bulk_stores(arch, tma):
    """Without the matmul's warp specialisation tileiras stores C with st.global even where
    TMA is allowed (measured, tileiras 13.4): no bulk store, the call is accepted, and on the
    CPU executor Out is exactly the C the kernel stored (the matmul kernels above use
    mbarriers, outside the executor's scope)."""
    sig = K.signature(K.array(f32, 2), K.array(f32, 2), K.array(f32, 2), 64, 64, tma)
    b = splice.compile(scale_read_back_kernel, sig, arch)
    assert BULK_GLOBAL_STORE.search(b.ptx) is None
    X = np.arange(128 * 64, dtype=np.float32).reshape(128, 64) - 4000
    C = np.zeros_like(X)
    out = np.full_like(X, np.nan)
    run_build(b, (2, 1, 1), X, C, out)
    np.testing.assert_array_equal(C, 2 * X)
    np.testing.assert_array_equal(out, C)


def test_read_back_of_an_array_only_loaded_is_accepted():
    """The call reads A, which the kernel loads by TMA and never stores, after C's TMA
    store: accepted (a bulk load's completion is awaited on its mbarrier)."""
    b = splice.compile(matmul_read_a_kernel,
                       K.signature(K.array(f16, 2), K.array(f16, 2), K.array(f32, 2),
                                   K.array(f32, 2), 128, 128, 64), "sm_90")
    assert BULK_GLOBAL_STORE.search(b.ptx)
    assert b.sites[0].instances == 128


# ---------------------------------------------------------------------------------------------
# Warpgroup-scope calls

_RD_SRC = r'''#include <cuda_fp16.h>
#include <splice_group.h>
template <int N> __device__ void rd(const float (&m)[N], const __half* c, float* out) {
    float a = 0;
    for (int i = splice_group_rank(); i < 128 * 128; i += 128)
        a += __half2float(c[(long long)blockIdx.x * 128 * 128 + i]);
    atomicAdd(out, a);
}'''

_rd = {mem: splice.extern(source=_RD_SRC, name="rd", scope="warpgroup", memory=mem,
                          signature="void(tile(float32), float16*, float32*)")
       for mem in ("any", "arguments")}


def _wg_kernel(rd, read_c: bool):
    """C = A @ B stored by TMA, then a warpgroup call given the rows' maxima and C (or A:
    ``read_c`` False) and s."""
    @splice.kernel
    def matmul_rd_kernel(A, B, Cm, s, tm: ConstInt, tn: ConstInt, tk: ConstInt):
        acc = K.matmul_tile(A, B, tm, tn, tk)
        ct.store(Cm, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, Cm.dtype))
        rd(ct.max(acc, axis=1), Cm if read_c else A, s)
    return matmul_rd_kernel


_WG_SIG = K.signature(K.array(f16, 2), K.array(f16, 2), K.array(f16, 2), K.array(f32),
                      128, 128, 64)


@pytest.mark.parametrize("memory", ["any", "arguments"])
def test_warpgroup_call_given_tma_stored_array_is_refused(memory):
    with pytest.raises(SpliceCallError, match=r"extern 'rd' .*argument 2 \(Cm\) is an array "
                                              r"the kernel stores with ct\.store at "):
        splice.compile(_wg_kernel(_rd[memory], True), _WG_SIG, "sm_90")


@pytest.mark.parametrize("memory", ["any", "arguments"])
def test_warpgroup_call_given_a_loaded_array_is_accepted(memory):
    b = splice.compile(_wg_kernel(_rd[memory], False), _WG_SIG, "sm_90")
    assert BULK_GLOBAL_STORE.search(b.ptx)
    assert any(s.scope == "warpgroup" for s in b.sites)


def test_example_fp8_epilogue_is_accepted():
    """The example stores C by TMA and gives its call scales and amax, not C: accepted."""
    b = splice.compile(fp8.matmul_fp8_scales, fp8.signature(), "sm_90")
    assert BULK_GLOBAL_STORE.search(b.ptx)


# ---------------------------------------------------------------------------------------------
# The PTX the rule looks for


@pytest.mark.parametrize("line, bulk", [
    ("\tcp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd1, {%r1, %r2}], [%r3];",
     True),
    ("\t@%p1 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r1, %r2}], [%r3];",
     True),
    ("\tcp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r1], 256;", True),
    ("\tcp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group [%rd1, {%r1}],"
     " [%r2];", True),
    ("\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
     " [%r1], [%rd1, {%r2, %r3}], [%r4];", False),      # a TMA load
    ("\tcp.async.bulk.wait_group.read 0;", False),
    ("\tst.global.f32 [%rd1], %f1;", False),
])
def test_bulk_global_store_pattern(line, bulk):
    assert bool(BULK_GLOBAL_STORE.search(f".entry k()\n{{\n{line}\n}}\n")) is bulk


def _line_of(text: str) -> int:
    """The line of this file where ``text`` starts."""
    src = Path(__file__).read_text()
    return src[:src.index(text)].count("\n") + 1


# ---------------------------------------------------------------------------------------------
# GPU


@pytest.mark.gpu
def test_gpu_impure_call_reads_the_stored_tile(torch):
    """An impure call after ``ct.store(C, allow_tma=False)`` reads the stored values (the
    store is st.global, ordered before the call's loads by the marker's acq_rel)."""
    from support.gpu import launch
    n = 2048
    A = torch.randn(n, 256, device="cuda", dtype=torch.float16)
    B = torch.randn(256, n, device="cuda", dtype=torch.float16)
    C = torch.zeros(n, n, device="cuda", dtype=torch.float32)
    out = torch.full((n, n), float("nan"), device="cuda", dtype=torch.float32)
    launch(torch, (n // 128, n // 128, 1), matmul_read_back_kernel,
           (A, B, C, out, 128, 128, 64, False))
    torch.testing.assert_close(C, A.float() @ B.float(), rtol=1e-3, atol=1e-2)
    assert torch.equal(out, C), (out != C).sum().item()
