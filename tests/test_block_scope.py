"""Block-scope calls (scope="block"): declaration, the PTX a block site becomes, every
refusal (CPU), and kernels checked against NumPy/PyTorch (GPU)."""

from __future__ import annotations

import re

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.errors import (
    SpliceCallError,
    SpliceDeclarationError,
    SpliceLinkError,
    SpliceRewriteError,
)
from splice.forms import FORMS
from splice.forms.base import SiteCall
from splice.forms.rewrite import splice_calls
from splice.inputs import cccl
from splice.ptxtools.ptx import Module, Param
from splice.types import parse_signature
from support import kernels as K
from support.ptx_exec import ExecError, run, run_build

f32, i32 = ct.float32, ct.int32
ConstInt = ct.Constant[int]

# ---------------------------------------------------------------------------------------------
# Externs

# CUB BlockReduce over one row of a row-major (rows, n) matrix, 128 threads (tileiras's block).
BLOCK_REDUCE_SRC = r'''
#include <cub/block/block_reduce.cuh>
extern "C" __device__ float row_sum(const float* x, int row, int n) {
    using R = cub::BlockReduce<float, 128>;
    __shared__ typename R::TempStorage tmp;
    __shared__ float total;
    const float* r = x + (long long)row * n;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += 128) acc += r[i];
    float s = R(tmp).Sum(acc);
    if (threadIdx.x == 0) total = s;
    __syncthreads();
    return total;
}'''

# A shared-memory histogram of one block's slice: __shared__ + atomicAdd + __syncthreads.
# buf holds the 256 bins, then the values (256 per block: tile ``t`` of buf, t >= 1).
HISTOGRAM_SRC = r'''
extern "C" __device__ void histogram(int* buf, int t) {
    __shared__ int h[256];
    const int* x = buf + 256 * t;
    for (int b = threadIdx.x; b < 256; b += blockDim.x) h[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&h[x[i]], 1);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&buf[b], h[b]);
}'''

# Warp-shuffle inclusive scan of 32-element segments, written in place; returns the total of
# the block's first warp segment (same in every thread through a shuffle from lane 31).
SCAN_SRC = r'''
extern "C" __device__ float warp_scan(float* x, int start) {
    int lane = threadIdx.x & 31;
    float v = x[start + threadIdx.x];
    for (int d = 1; d < 32; d *= 2) {
        float o = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += o;
    }
    x[start + threadIdx.x] = v;
    float last = __shfl_sync(0xffffffffu, v, 31);
    return last;
}'''

# No shared memory, no stack: inlinable. Sum over the block of (threadIdx.x + a) via shuffles
# and one barrier-free broadcast: every thread returns the same value.
WARP_SUM_SRC = r'''
extern "C" __device__ int block_count(int a) {
    int v = a;
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v * (int)(blockDim.x / 32);
}'''


def _block_reduce_extern():
    """The CUB row sum, or a skip when no CCCL headers are found."""
    return _cub_extern(BLOCK_REDUCE_SRC, "row_sum", "float32(float32*, int32, int32)")


def _cub_extern(source: str, name: str, signature: str):
    """A block-scope extern of CUDA C that includes CUB, or a skip when no CCCL headers are
    found."""
    for incs in ([], *cccl.installations()):
        ext = splice.extern(source=source, name=name, scope="block",
                            include_dirs=incs, options=["-std=c++17"],
                            signature=signature)(lambda *a: None)
        try:
            ext._splice_extern.fragment.module("sm_90")
            return ext
        except splice.SpliceError:
            continue
    pytest.skip("CUB headers (cub/block/block_reduce.cuh) not found: install the cccl extra "
                "(pip install nvidia-cuda-cccl) or a CUDA toolkit with CCCL")


histogram = splice.extern(source=HISTOGRAM_SRC, name="histogram", scope="block",
                          signature="void(int32*, int32)")(
                              lambda *a: None)
warp_scan = splice.extern(source=SCAN_SRC, name="warp_scan", scope="block",
                          signature="float32(float32*, int32)")(lambda *a: None)
block_count = splice.extern(source=WARP_SUM_SRC, name="block_count", scope="block",
                            signature="int32(int32)")(lambda *a: None)
block_count_called = splice.extern(source=WARP_SUM_SRC, name="block_count", scope="block",
                                   inline="never", signature="int32(int32)")(lambda *a: None)
block_twice = splice.extern(source=r'''
extern "C" __device__ int block_twice(int a) { return 2 * __shfl_sync(0xffffffffu, a, 0); }''',
                            name="block_twice", scope="block", inline="never",
                            signature="int32(int32)")(lambda *a: None)
element_count = splice.extern(source=r'''
extern "C" __device__ int element_count(int a) { return a + 1; }''', name="element_count",
                              signature="int32(int32)")(lambda *a: None)

# ---------------------------------------------------------------------------------------------
# Kernels (loads without TMA: a TMA load makes tileiras warp-specialise the kernel)


def make_row_sum_kernel(fn):
    @splice.kernel
    def row_sum_kernel(x, y, n: int, TILE: ConstInt):
        bid = ct.bid(0)
        s = fn(x, bid, n)
        t = ct.load(x, index=(bid, 0), shape=(1, TILE), allow_tma=False)
        ct.store(y, index=(bid,), tile=ct.full((1,), s, f32) + ct.sum(t, axis=1) * 0.0)
    return row_sum_kernel


@ct.kernel
def ct_row_sum_kernel(x, y, TILE: ConstInt):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid, 0), shape=(1, TILE), allow_tma=False)
    ct.store(y, index=(bid,), tile=ct.sum(t, axis=1))


@splice.kernel
def histogram_kernel(buf, out, TILE: ConstInt):
    bid = ct.bid(0)
    t = ct.load(buf, index=(bid + 1,), shape=(TILE,), allow_tma=False)
    histogram(buf, bid + 1)
    ct.store(out, index=(bid,), tile=t)


@splice.kernel
def scan_kernel(x, totals, TILE: ConstInt):
    bid = ct.bid(0)
    t = ct.load(totals, index=(bid,), shape=(TILE,), allow_tma=False)
    last = warp_scan(x, bid * 128)
    ct.store(totals, index=(bid,), tile=t * 0.0 + last)


def make_count_kernel(fn):
    @splice.kernel
    def count_kernel(x, y, reps: int, flag: int, TILE: ConstInt):
        bid = ct.bid(0)
        t = ct.load(x, index=(bid,), shape=(TILE,), allow_tma=False)
        acc = 0
        for i in range(reps):            # a block call in a loop
            acc = acc + fn(i)
        if flag > 0:                     # ... and in a branch on a uniform scalar
            acc = acc + fn(1000)
        ct.store(y, index=(bid,), tile=t + acc)
    return count_kernel


count_kernel = make_count_kernel(block_count)
count_kernel_called = make_count_kernel(block_count_called)


def count_ref(reps, flag, threads=128):
    w = threads // 32
    return sum(32 * i * w for i in range(reps)) + (32 * 1000 * w if flag > 0 else 0)


bump = splice.extern(source=r'''
extern "C" __device__ void bump(float* x, int start, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[start + (n - 1 - i)] += 1.0f;
}''', name="bump", scope="block", signature="void(float32*, int32, int32)")(lambda *a: None)


@splice.kernel
def order_kernel(x, y, TILE: ConstInt):
    # the kernel stores x, the block call reads and writes it (other threads' elements:
    # reversed), the kernel loads it again
    bid = ct.bid(0)
    t = ct.load(y, index=(bid,), shape=(TILE,), allow_tma=False)
    ct.store(x, index=(bid,), tile=t * 2.0)
    bump(x, bid * TILE, TILE)
    u = ct.load(x, index=(bid,), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(bid,), tile=u)


@splice.kernel
def two_sites_kernel(x, y, TILE: ConstInt):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(TILE,), allow_tma=False)
    a = block_count(1)
    b = block_twice(a)
    ct.store(y, index=(bid,), tile=t + a * 1000 + b)


@splice.kernel
def tma_row_kernel(x, y, n: int, TILE: ConstInt):
    bid = ct.bid(0)
    s = block_count(bid)
    t = ct.load(x, index=(bid, 0), shape=(1, TILE))      # TMA: warp-specialised
    ct.store(y, index=(bid,), tile=ct.sum(t, axis=1) + s)


@splice.kernel
def matmul_block_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = K.matmul_tile(A, B, tm, tn, tk)
    s = block_count(ct.bid(0))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc + s, C.dtype))


@splice.kernel
def tile_argument_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=t + block_count(t))


def _vec_sig(dtype=i32, *extra):
    return K.signature(K.array(dtype), K.array(dtype), *extra, 128)


COUNT_SIG = K.signature(K.array(i32), K.array(i32), K.scalar(i32), K.scalar(i32), 128)

# ---------------------------------------------------------------------------------------------
# Declarations


def test_scope_is_validated_and_recorded():
    with pytest.raises(SpliceDeclarationError, match="scope must be 'element' or 'block'"):
        splice.extern(source="", name="f", signature="int32(int32)", scope="warp")(
            lambda a: None)
    assert block_count._splice_extern.scope == "block"
    assert not block_count._splice_extern.pure      # block scope is always impure
    assert element_count._splice_extern.scope == "element"
    p = splice.extern.from_ptx(ptx=".version 8.0\n", name="f", signature="int32(int32)",
                               scope="block")
    assert p._splice_extern.scope == "block"
    lib = splice.library(source=WARP_SUM_SRC)
    assert lib.extern("block_count", signature="int32(int32)",
                      scope="block")._splice_extern.scope == "block"
    with pytest.raises(SpliceDeclarationError, match="scope"):
        lib.extern("block_count", signature="int32(int32)", scope=None)
    with pytest.raises(SpliceDeclarationError, match="cannot return a pointer"):
        splice.extern.from_ptx(ptx=".version 8.0\n.target sm_80\n.address_size 64\n",
                               name="g", signature="float32*(int32)", scope="block")


# ---------------------------------------------------------------------------------------------
# The PTX a block site becomes


def _block_spans(b):
    """The span of each block call in the build: from thread 0's argument store to the end
    of the all-threads block."""
    return [span for span in b.spans if span.kind == "block call"]


def _block_instances(b) -> list[str]:
    """The text of each block call (:func:`_block_spans`)."""
    return [span.text(b.spliced_ptx) for span in _block_spans(b)]


def _code(text: str) -> str:
    """``text`` without its comments."""
    return re.sub(r"[ \t]*//[^\n]*", "", text)


@pytest.mark.parametrize("kernel,inlined", [(count_kernel, True),
                                            (count_kernel_called, False)])
def test_block_site_ptx(kernel, inlined):
    b = splice.compile(kernel, COUNT_SIG, "sm_90")
    assert all(s.inlined == inlined for s in b.sites)
    assert "block scope: every thread of the block calls it once per execution" in b.summary()
    ptx = b.spliced_ptx.split(".nv_intermediate_source_section")[0]
    instances = _block_instances(b)
    assert len(instances) == sum(s.instances for s in b.sites) >= 3
    # one span per instance of every site, numbered as the sites report them
    assert sorted((s.site, s.instance) for s in _block_spans(b)) == \
        [(s.index, k) for s in b.sites for k in range(s.instances)]
    for text in instances:
        # thread 0 stores the arguments, every thread meets at the label, a barrier, the
        # arguments, the call (or inlined body), a barrier, then only thread 0 goes on
        store, rest = text.split("\n$__splice_block_", 1)
        assert "st.shared.b" in store and "call" not in re.sub(r"//[^\n]*", "", store)
        assert _code(rest).endswith("\n\t}")         # the span ends with the block
        assert "@%__splice_q trap;" in rest      # unless the whole block is there
        body = rest.split("bar.red.popc.u32", 1)[1]
        call_part, after = body.rsplit("bar.sync \t0;", 1)
        assert "ld.shared.b" in call_part
        assert ("inlined body of block_count" in call_part) == inlined
        assert ("call (__splice_r), block_count," in call_part) == (not inlined)
        assert re.search(r"setp.ne.u32 \t%__splice_q, %__splice_tid, 0;\n\t@%__splice_q bra "
                         r"\t\$L__BB\d+_\d+;", after)
    # each instance's guard now leads to splice's label, and its old target (where the
    # instance sends thread 0 on) still follows a barrier
    for span in _block_spans(b):
        label = f"$__splice_block_{span.site}_{span.instance}"
        *_, join = re.findall(r"@%__splice_q bra \t(\$L__BB\d+_\d+);", span.text(ptx))
        assert ptx.count(label + ":") == 1
        assert len(re.findall(r"@%p\d+ bra \t" + re.escape(label) + ";", ptx)) == 1
        assert re.search(r"@%p\d+ bra \t" + re.escape(join) + ";", b.ptx)  # tileiras's guard
        assert re.search(re.escape(join) + r":\n(\s*\.loc[^\n]*\n)*\s*bar.sync \t0;", ptx)
    assert "__splice_marker" not in ptx


def test_block_site_of_ptx_source():
    # the shared-memory histogram (void, pointers) and the CUB-free scan (shuffles) compile
    for kernel, sig in ((histogram_kernel, K.signature(K.array(i32), K.array(i32), 256)),
                        (scan_kernel, K.signature(K.array(f32), K.array(f32), 128))):
        b = splice.compile(kernel, sig, "sm_90")
        [site] = b.sites
        assert site.instances == 1 and site.shape == ()
        assert ".shared .align 8 .b8 __splice_block_0[16];" in b.spliced_ptx


def test_order_and_two_sites_compile():
    b = splice.compile(order_kernel, _vec_sig(f32), "sm_90")
    assert len(_block_instances(b)) == 1
    b = splice.compile(two_sites_kernel, _vec_sig(), "sm_90")
    assert [s.instances for s in b.sites] == [1, 1]
    assert len(_block_instances(b)) == 2
    assert sorted((s.site, s.instance) for s in b.spans if s.kind == "block call") == \
        [(0, 0), (1, 0)]


def test_block_reduce_compiles():
    fn = _block_reduce_extern()
    sig = K.signature(K.array(f32, 2), K.array(f32), K.scalar(i32), 256)
    b = splice.compile(make_row_sum_kernel(fn), sig, "sm_90")
    assert b.sites[0].instances == 1


# ---------------------------------------------------------------------------------------------
# Refusals


def test_tile_argument_refused():
    with pytest.raises(SpliceCallError, match=r"argument 1 is a int32 tile of shape \(128,\); "
                                              r"a block-scope extern .* takes scalars"):
        splice.compile(tile_argument_kernel, _vec_sig(), "sm_90")


def test_warp_specialised_kernel_refused():
    sig = K.signature(K.array(f32, 2), K.array(f32), K.scalar(i32), 256)
    with pytest.raises(SpliceRewriteError, match="tileiras warp-specialised this kernel"):
        splice.compile(tma_row_kernel, sig, "sm_90")


def test_tma_matmul_refused():
    sig = K.signature(K.array(ct.float16, 2), K.array(ct.float16, 2), K.array(ct.float16, 2),
                      128, 128, 64)
    with pytest.raises(SpliceRewriteError, match="warp-specialised") as e:
        splice.compile(matmul_block_kernel, sig, "sm_90")
    assert "block_count" in str(e.value)


big_shared = splice.extern(source=r'''
extern "C" __device__ int big_shared(int a) {
    __shared__ int s[60000];
    s[threadIdx.x] = a;
    __syncthreads();
    return s[(threadIdx.x + 1) % blockDim.x];
}''', name="big_shared", scope="block", signature="int32(int32)")(lambda a: None)


@splice.kernel
def big_shared_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t + big_shared(ct.bid(0)))


def test_too_much_shared_memory_is_a_clear_error():
    with pytest.raises(splice.SpliceLinkError, match=r"needs \d+ bytes of shared memory per "
                                                     r"block, more than the \d+ the GPU allows "
                                                     r"\(.*declared at .*test_block_scope.py:\d+: "
                                                     r"240000 bytes;.* splice's block-call "
                                                     r"argument scratch: 16 bytes"):
        splice.compile(big_shared_kernel, _vec_sig(), "sm_90")


@splice.kernel
def one_warp_kernel(x, y):
    s = block_count(ct.bid(0))
    ct.store(y, index=(ct.bid(0),), tile=ct.full((1,), s, i32))


# a sum over the group through per-warp partials and the group barrier (splice_group.h)
GROUP_SUM_SRC = r'''
#include <splice_group.h>
extern "C" __device__ float group_sum(const float* x, int base) {
    __shared__ float per_warp[4];
    float v = 0.0f;
    for (unsigned i = splice_group_rank(); i < 256; i += splice_group_size()) v += x[base + i];
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    if (splice_group_rank() % 32 == 0) per_warp[splice_group_rank() / 32] = v;
    splice_group_sync();
    return per_warp[0] + per_warp[1] + per_warp[2] + per_warp[3];
}'''
group_sum = splice.extern(source=GROUP_SUM_SRC, name="group_sum", scope="block",
                          signature="float32(float32*, int32)")


def _group_sum_kernel(warps):
    @splice.kernel(num_worker_warps=warps)
    def group_sum_kernel(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        s = group_sum(x, ct.bid(0) * TILE)
        ct.store(y, index=(ct.bid(0),), tile=t * 0.0 + s, allow_tma=False)
    return group_sum_kernel


def test_group_header_in_a_block_of_one_warpgroup():
    """splice_group.h's group is the block when the block is one warpgroup (128 threads):
    the group sum is each row's sum."""
    x = np.random.default_rng(5).integers(-50, 50, 512).astype(np.float32)
    y = np.zeros_like(x)
    b = splice.compile(_group_sum_kernel(4), K.signature(K.array(f32), K.array(f32), 256),
                       "sm_90")
    assert ".reqntid 128" in b.ptx
    run_build(b, (2,), x, y)
    np.testing.assert_array_equal(y.reshape(2, 256),
                                  np.repeat(x.reshape(2, 256).sum(1, keepdims=True), 256, 1))


def test_group_header_in_a_larger_block_refused():
    """In a 256-thread block (num_worker_warps=8, no warp specialisation) two threads share
    each splice_group_rank() and the group barrier meets any 4 warps: the callee races
    (the executor's shared-memory race), so splice refuses it, naming the fix."""
    with pytest.raises(SpliceLinkError, match=r"block-scope extern 'group_sum'.*uses "
                                              r"splice_group.h's group .*in a block of 256 "
                                              r"threads.*threadIdx.x, blockDim.x and "
                                              r"__syncthreads\(\)"):
        splice.compile(_group_sum_kernel(8), K.signature(K.array(f32), K.array(f32), 256),
                       "sm_90")


def test_one_warp_block_refused():
    with pytest.raises(SpliceRewriteError, match=r"one warp per block \(.reqntid 32\)"):
        splice.compile(one_warp_kernel, K.signature(K.array(i32), K.array(i32)), "sm_90")


# Hand-written PTX: tileiras's 0-d pattern, and each way it can fail the proof.

_GOOD = """
.version 8.0
.target sm_90a
.address_size 64
.visible .global .align 8 .b8 __splice_marker_0[8];
.visible .entry k(.param .u64 k_p0)
.reqntid 128
{
\t.reg .pred \t%p<4>;
\t.reg .b32 \t%r<8>;
\t.reg .b64 \t%rd<12>;
\t.shared .align 8 .b8 smem[8];
\tld.param.b64 \t%rd3, [k_p0];
\tbar.sync \t0;
\tmov.u32 \t%r1, %tid.x;
\tsetp.ne.b32 \t%p1, %r1, 0;
\t@%p1 bra \t$L__BB0_2;
\tmov.b64 \t%rd9, __splice_marker_0;
\tatom.global.acq_rel.cas.b64 \t%rd10, [%rd9], %rd3, 7;
\tst.shared.b64 \t[smem], %rd10;
$L__BB0_2:
\tbar.sync \t0;
\tld.shared.b64 \t%rd11, [smem];
\tst.global.b64 \t[%rd3], %rd11;
\tret;
}
"""

_BROKEN = {
    "2-D block": (".reqntid 128", ".reqntid 64, 2", "not one-dimensional"),
    "cluster of CTAs (num_ctas=2)": (".reqntid 128", ".reqntid 128\n.reqnctapercluster 2",
                                     "cluster of CTAs .*num_ctas=1"),
    "no block size": (".reqntid 128", "", "no fixed block size"),
    "guard on another thread": ("setp.ne.b32 \t%p1, %r1, 0;", "setp.ne.b32 \t%p1, %r1, 128;",
                                "does not skip exactly the threads with tid.x != 0"),
    # p2 is the complement of p1 = (tid != 0): the branch skips thread 0, not the others
    "guard on the second predicate of a setp pair": (
        "setp.ne.b32 \t%p1, %r1, 0;\n\t@%p1 bra", "setp.ne.b32 \t%p3|%p1, %r1, 0;\n\t@%p1 bra",
        "does not skip exactly the threads with tid.x != 0"),
    # mbarrier.try_wait writes its first operand: the guard is no longer setp's alone
    "guard predicate also written by mbarrier.try_wait": (
        "\tret;", "\tmbarrier.try_wait.parity.shared::cta.b64 \t%p1, [smem], 0;\n\tret;",
        "does not skip exactly the threads with tid.x != 0"),
    "tid register also written by multimem.ld_reduce": (
        "\tret;", "\tmultimem.ld_reduce.relaxed.sys.global.add.u32 \t%r1, [%rd3];\n\tret;",
        "does not skip exactly the threads with tid.x != 0"),
    "guard not on tid": ("mov.u32 \t%r1, %tid.x;", "mov.u32 \t%r1, %ctaid.x;",
                         "does not skip exactly"),
    "label inside the guarded code": ("\tmov.b64 \t%rd9, __splice_marker_0;",
                                      "$L__X:\n\tmov.b64 \t%rd9, __splice_marker_0;",
                                      "not behind a branch on the thread index"),
    "branch inside the guarded code": ("\tst.shared.b64 \t[smem], %rd10;",
                                       "\t@%p2 bra \t$L__BB0_2;\n\tst.shared.b64 \t[smem], %rd10;",
                                       "branch"),
    "join reached from elsewhere": ("\tbar.sync \t0;\n\tmov.u32",
                                    "\t@%p2 bra \t$L__BB0_2;\n\tbar.sync \t0;\n\tmov.u32",
                                    "reached from elsewhere"),
    "a branch between the join and the barrier": (
        "$L__BB0_2:\n\tbar.sync \t0;", "$L__BB0_2:\n\t@%p2 bra \t$L__BB0_9;\n\tbar.sync \t0;",
        "not followed by an unpredicated"),
    "no barrier at the join": ("$L__BB0_2:\n\tbar.sync \t0;", "$L__BB0_2:\n\tbar.warp.sync \t-1;",
                               "not followed by an unpredicated CTA-wide barrier"),
    "predicated barrier at the join": ("$L__BB0_2:\n\tbar.sync \t0;",
                                       "$L__BB0_2:\n\t@%p2 bar.sync \t0;",
                                       "not followed by an unpredicated"),
    "warp specialisation": ("\tbar.sync \t0;\n\tmov.u32",
                            "\tsetmaxnreg.dec.sync.aligned.u32 \t32;\n\tmov.u32",
                            "warp-specialised"),
    "cluster barrier (not warp specialisation)": (
        "$L__BB0_2:\n\tbar.sync \t0;", "$L__BB0_2:\n\tbarrier.cluster.arrive;\n\tbar.sync \t0;",
        "not followed by an unpredicated"),
    "named barrier": ("\tbar.sync \t0;\n\tmov.u32", "\tbarrier.sync \t1, 128;\n\tmov.u32",
                      "warp-specialised"),
    "result written twice": ("\tst.shared.b64 \t[smem], %rd10;",
                             "\tst.shared.b64 \t[smem], %rd10;\n\tmov.b64 \t%rd10, 0;",
                             "other definitions"),
    "another atomic behind the guard": ("\tst.shared.b64 \t[smem], %rd10;",
                                        "\tatom.global.add.u32 \t%r5, [%rd3], 1;\n"
                                        "\tst.shared.b64 \t[smem], %rd10;", "another atomic"),
    "exit": ("\tret;", "\texit;", "may exit early"),
    "predicated ret": ("\tbar.sync \t0;\n\tmov.u32", "\t@%p2 ret;\n\tbar.sync \t0;\n\tmov.u32",
                       "may exit early"),
    "predicated marker": ("\tatom.global.acq_rel", "\t@%p2 atom.global.acq_rel",
                          "predicated"),
}


# tileiras derives the guard from %tid.x in more than one way; the proof evaluates the
# derivation for every tid.x of the block (splice.thread_index), so each of these is
# accepted as it computes exactly tid.x != 0 (the first is what tileiras emits for arrays
# not known to be 16-byte aligned), and each in _LOSSY_GUARDS is refused.
_TID = "\tmov.u32 \t%r1, %tid.x;\n\tsetp.ne.b32 \t%p1, %r1, 0;"
_ROUND_TRIP_GUARDS = {
    "cvt.u64.u32 round trip": "\tmov.u32 \t%r2, %tid.x;\n\tcvt.u64.u32 \t%rd4, %r2;\n"
                              "\tcvt.u32.u64 \t%r1, %rd4;\n\tsetp.ne.b32 \t%p1, %r1, 0;",
    "cvt.u8 truncation in a 128-thread block (no value lost)":
        "\tmov.u32 \t%r2, %tid.x;\n\tcvt.u8.u32 \t%rs1, %r2;\n"
        "\tcvt.u32.u8 \t%r1, %rs1;\n\tsetp.ne.b32 \t%p1, %r1, 0;",
    "offset and back": "\tmov.u32 \t%r2, %tid.x;\n\tadd.s32 \t%r3, %r2, -128;\n"
                       "\tsub.s32 \t%r1, %r3, -128;\n\tsetp.ne.b32 \t%p1, %r1, 0;",
    "mask, shift and an unsigned >= 1": "\tmov.u32 \t%r2, %tid.x;\n"
                                         "\tand.b32 \t%r3, %r2, 127;\n"
                                         "\tshl.b32 \t%r1, %r3, 2;\n"
                                         "\tsetp.ge.u32 \t%p1, %r1, 1;",
    "64-bit product": "\tmov.u32 \t%r2, %tid.x;\n\tmul.wide.u32 \t%rd4, %r2, 3;\n"
                      "\tsetp.ne.b64 \t%p1, %rd4, 0;",
}
_LOSSY_GUARDS = {
    # in a 512-thread block tid.x = 256 truncates to 0: it would not be skipped
    "cvt.u8 truncation in a 512-thread block": (
        ".reqntid 512", "\tmov.u32 \t%r2, %tid.x;\n\tcvt.u8.u32 \t%rs1, %r2;\n"
                        "\tcvt.u32.u8 \t%r1, %rs1;\n\tsetp.ne.b32 \t%p1, %r1, 0;"),
    # tid.x >> 1 is 0 for threads 0 and 1: thread 1 would not be skipped
    "a shift that drops a bit": (
        ".reqntid 128", "\tmov.u32 \t%r2, %tid.x;\n\tshr.u32 \t%r1, %r2, 1;\n"
                        "\tsetp.ne.b32 \t%p1, %r1, 0;"),
    "a guard that skips thread 0": (
        ".reqntid 128", "\tmov.u32 \t%r1, %tid.x;\n\tsetp.eq.b32 \t%p1, %r1, 0;"),
    "a saturating conversion (not evaluated)": (
        ".reqntid 128", "\tmov.u32 \t%r2, %tid.x;\n\tcvt.sat.u8.u32 \t%rs1, %r2;\n"
                        "\tcvt.u32.u8 \t%r1, %rs1;\n\tsetp.ne.b32 \t%p1, %r1, 0;"),
    "a load in the derivation": (
        ".reqntid 128", "\tld.shared.u32 \t%r2, [smem];\n\tsetp.ne.b32 \t%p1, %r2, 0;"),
    "a register defined twice": (
        ".reqntid 128", "\tmov.u32 \t%r2, %tid.x;\n\tmov.u32 \t%r2, %tid.x;\n"
                        "\tsetp.ne.b32 \t%p1, %r2, 0;"),
    "a definition after the guard": (
        ".reqntid 128", "\tsetp.ne.b32 \t%p1, %r2, 0;\n\tmov.u32 \t%r2, %tid.x;"),
    "a predicated definition": (
        ".reqntid 128", "\tmov.u32 \t%r1, %tid.x;\n\t@%p2 mov.u32 \t%r1, 0;\n"
                        "\tsetp.ne.b32 \t%p1, %r1, 0;"),
    "another special register": (
        ".reqntid 128", "\tmov.u32 \t%r1, %laneid;\n\tsetp.ne.b32 \t%p1, %r1, 0;"),
}
_GOOD_WIDE = _GOOD.replace("\t.reg .b32 \t%r<8>;",
                           "\t.reg .b32 \t%r<8>;\n\t.reg .b16 \t%rs<4>;")


@pytest.mark.parametrize("case", sorted(_ROUND_TRIP_GUARDS))
def test_hand_written_guard_derivations_accepted(case):
    assert _TID in _GOOD_WIDE
    text = _GOOD_WIDE.replace(_TID, _ROUND_TRIP_GUARDS[case], 1)
    rep = splice_calls(Module(text), {0: _block_site()}, kernel_name="k")
    assert rep.replaced == {0: 1}


@pytest.mark.parametrize("case", sorted(_LOSSY_GUARDS))
def test_hand_written_lossy_guard_derivations_refused(case):
    dims, guard = _LOSSY_GUARDS[case]
    text = _GOOD_WIDE.replace(_TID, guard, 1).replace(".reqntid 128", dims, 1)
    with pytest.raises(SpliceRewriteError, match="does not skip exactly the threads with "
                                                 "tid.x != 0"):
        splice_calls(Module(text), {0: _block_site()}, kernel_name="k")


def _block_site(scope="block"):
    form = FORMS[scope]
    sig = parse_signature("int32(int32*, int32)")
    return SiteCall(0, "callee0", (Param("p0", ".param .b64", None, ".b64", ".param"),
                                   Param("p1", ".param .b32", None, ".b32", ".param")),
                    Param("r", ".param .b32", None, ".b32", ".param"), sig,
                    "callee0 at test:1", None, form, 64)


def test_hand_written_block_site():
    rep = splice_calls(Module(_GOOD), {0: _block_site()}, kernel_name="k")
    assert rep.replaced == {0: 1}
    ptx = rep.ptx
    # thread 0's guard leads to the instance's label, not to the join
    assert "@%p1 bra \t$__splice_block_0_0;" in ptx and "@%p1 bra \t$L__BB0_2;" not in ptx
    assert ".shared .align 8 .b8 __splice_block_0[16];" in ptx
    [scratch, span] = rep.spans
    assert (scratch.kind, scratch.site) == ("splice", 0)
    assert (span.kind, span.site, span.instance) == ("block call", 0, 0)
    text = span.text(ptx)
    order = [text.index(s) for s in ("st.shared.b64 \t[__splice_block_0+8]",
                                     "$__splice_block_0_0:", "bar.red.popc.u32",
                                     "@%__splice_q trap;",
                                     "call (__splice_r), callee0,", "bar.sync \t0;",
                                     "@%__splice_q bra \t$L__BB0_2;")]
    assert order == sorted(order)
    # after the span: tileiras's code on thread 0, then the join
    after = "\n".join(ptx.split("\n")[span.end_line:])
    assert after.index("st.shared.b64 \t[smem], %rd10;") < after.index("$L__BB0_2:")
    Module(ptx)   # parses


def test_hand_written_join_with_instructions_before_the_barrier():
    # tileiras's scheduler may put instructions between the join label and its barrier
    text = _GOOD.replace("$L__BB0_2:\n\tbar.sync", "$L__BB0_2:\n\tcvt.u32.u64 \t%r3, %rd3;\n"
                                                   "\tbar.sync")
    rep = splice_calls(Module(text), {0: _block_site()}, kernel_name="k")
    assert rep.replaced == {0: 1}


def test_element_scope_site_unchanged_by_block_logic():
    rep = splice_calls(Module(_GOOD), {0: _block_site("element")}, kernel_name="k")
    assert "__splice_block" not in rep.ptx and "@%p1 bra \t$L__BB0_2;" in rep.ptx


@pytest.mark.parametrize("case", sorted(_BROKEN))
def test_hand_written_refusals(case):
    old, new, msg = _BROKEN[case]
    assert old in _GOOD
    text = _GOOD.replace(old, new, 1)
    with pytest.raises(SpliceRewriteError, match=msg):
        splice_calls(Module(text), {0: _block_site()}, kernel_name="k")


# ---------------------------------------------------------------------------------------------
# GPU: each against NumPy / PyTorch


@pytest.mark.gpu
def test_gpu_block_reduce_row_sum(torch):
    from support.gpu import launch
    fn = _block_reduce_extern()
    rows, n = 64, 4096
    x = torch.randn(rows, n, device="cuda")
    y = torch.empty(rows, device="cuda")
    launch(torch, (rows,), make_row_sum_kernel(fn), (x, y, n, 256))
    torch.testing.assert_close(y, x.sum(dim=1), rtol=1e-4, atol=1e-3)
    # against ct.sum of the same rows
    yc = torch.empty(rows, device="cuda")
    xs = x[:, :256].contiguous()
    launch(torch, (rows,), ct_row_sum_kernel, (xs, yc, 256))
    y2 = torch.empty(rows, device="cuda")
    launch(torch, (rows,), make_row_sum_kernel(fn), (xs, y2, 256, 256))
    torch.testing.assert_close(y2, yc, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_gpu_histogram(torch):
    from support.gpu import launch
    blocks = 64
    rng = np.random.default_rng(0)
    xn = rng.integers(0, 256, blocks * 256).astype(np.int32)
    buf = torch.from_numpy(np.concatenate([np.zeros(256, np.int32), xn])).cuda()
    out = torch.empty(blocks * 256, dtype=torch.int32, device="cuda")
    launch(torch, (blocks,), histogram_kernel, (buf, out, 256))
    np.testing.assert_array_equal(buf[:256].cpu().numpy(), np.bincount(xn, minlength=256))
    np.testing.assert_array_equal(out.cpu().numpy(), xn)


@pytest.mark.gpu
def test_gpu_warp_scan(torch):
    from support.gpu import launch
    blocks = 16
    x = torch.randn(blocks * 128, device="cuda")
    ref = x.view(-1, 32).cumsum(dim=1)
    totals = torch.zeros(blocks * 128, device="cuda")
    launch(torch, (blocks,), scan_kernel, (x, totals, 128))
    torch.testing.assert_close(x.view(-1, 32), ref, rtol=1e-5, atol=1e-5)
    first_warp_total = ref.view(blocks, 4, 32)[:, 0, 31]
    torch.testing.assert_close(totals.view(blocks, 128),
                               first_warp_total[:, None].expand(blocks, 128))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [count_kernel, count_kernel_called])
@pytest.mark.parametrize("reps,flag", [(0, 0), (1, 1), (5, 0), (7, 1)])
def test_gpu_loop_and_uniform_branch(torch, kernel, reps, flag):
    from support.gpu import launch
    x = torch.arange(4 * 128, dtype=torch.int32, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (4,), kernel, (x, y, reps, flag, 128))
    assert torch.equal(y, x + count_ref(reps, flag))


@pytest.mark.gpu
def test_gpu_ordering_store_call_load(torch):
    from support.gpu import launch
    blocks = 8
    y = torch.randn(blocks * 128, device="cuda")
    x = torch.zeros_like(y)
    want = y * 2 + 1
    launch(torch, (blocks,), order_kernel, (x, y, 128))
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(x, want)


@pytest.mark.gpu
def test_gpu_two_sites(torch):
    from support.gpu import launch
    x = torch.arange(2 * 128, dtype=torch.int32, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (2,), two_sites_kernel, (x, y, 128))
    a = 32 * 4            # block_count(1) on 128 threads
    b = 2 * a             # block_twice(a)
    assert torch.equal(y, x + a * 1000 + b)


@pytest.mark.gpu
def test_gpu_tma_matmul_refused_at_launch(torch):
    from support.gpu import launch
    A = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    B = torch.randn(128, 256, device="cuda", dtype=torch.float16)
    C = torch.empty(256, 256, device="cuda", dtype=torch.float16)
    with pytest.raises(SpliceRewriteError, match="warp-specialised"):
        launch(torch, (2, 2, 1), matmul_block_kernel, (A, B, C, 128, 128, 64))


# ---------------------------------------------------------------------------------------------
# Cache: two externs of one library symbol, one element and one block scope


_PLUS = splice.library(source='extern "C" __device__ int plus(int a) { return a + 1; }')
plus_element = _PLUS.extern("plus", signature="int32(int32)", pure=False)
plus_block = _PLUS.extern("plus", signature="int32(int32)", scope="block")


def _two_plus_kernel(f1, f2):
    @splice.kernel
    def two_plus(x, y, TILE: ConstInt):
        bid = ct.bid(0)
        t = ct.load(x, index=(bid,), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(bid,), tile=t + f1(bid) + f2(bid))
    return two_plus


def test_cache_tells_element_from_block_scope_of_one_symbol(fresh_cache):
    """The kernel key named each symbol's first extern only: a kernel calling the symbol at
    element scope twice was served the cubin of the same kernel whose second call is at
    block scope (same bytecode), a block call it never asked for."""
    mixed = splice.build(_two_plus_kernel(plus_element, plus_block), _vec_sig(), "sm_90")
    both = splice.build(_two_plus_kernel(plus_element, plus_element), _vec_sig(), "sm_90")
    assert [s.scope for s in mixed.sites] == ["element", "block"]
    assert not both.from_cache and both.cubin != mixed.cubin
    again = splice.build(_two_plus_kernel(plus_element, plus_block), _vec_sig(), "sm_90")
    assert again.from_cache and again.cubin == mixed.cubin


def test_cluster_kernel_refused_with_num_ctas_in_the_message():
    """num_ctas=2: tileiras runs 0-d operations once per cluster (guard on cluster_ctaid and
    tid, joined by a cluster barrier): refused, and the message says num_ctas, not only that
    the guard is not on tid.x."""
    @splice.kernel(num_ctas=2)
    def cluster_kernel(x, y, TILE: ConstInt):
        bid = ct.bid(0)
        t = ct.load(x, index=(bid,), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(bid,), tile=t + block_count(bid))
    with pytest.raises(SpliceRewriteError, match=r"cluster of CTAs .*num_ctas=1"):
        splice.compile(cluster_kernel, _vec_sig(), "sm_90")


# ---------------------------------------------------------------------------------------------
# CPU executor: the GPU tests' kernels run on support.ptx_exec (the spliced PTX for sm_90)


def _exec(kernel, sig, grid, *args):
    return run_build(splice.compile(kernel, sig, "sm_90"), grid, *args)


def test_exec_block_reduce_row_sum():
    fn = _block_reduce_extern()
    rows, n = 3, 512
    x = np.random.default_rng(0).integers(-50, 50, (rows, n)).astype(np.float32)  # exact sums
    y = np.zeros(rows, np.float32)
    sig = K.signature(K.array(f32, 2), K.array(f32), K.scalar(i32), 256)
    _exec(make_row_sum_kernel(fn), sig, (rows,), x, y, n)
    np.testing.assert_array_equal(y, x.sum(axis=1))


# CUB BlockRadixSort and BlockScan over a block's 512 elements (128 threads x 4), in place;
# returns the block's total (BlockScan's aggregate, the same in every thread).
SORT_SCAN_SRC = r'''
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
extern "C" __device__ int sort_scan(int* x, int start) {
    using S = cub::BlockRadixSort<int, 128, 4>;
    using C = cub::BlockScan<int, 128>;
    __shared__ union { typename S::TempStorage s; typename C::TempStorage c; } tmp;
    int k[4];
    for (int i = 0; i < 4; ++i) k[i] = x[start + threadIdx.x * 4 + i];
    S(tmp.s).Sort(k);
    __syncthreads();
    int ex, total;
    C(tmp.c).ExclusiveSum(k[0] + k[1] + k[2] + k[3], ex, total);
    for (int i = 0; i < 4; ++i) x[start + threadIdx.x * 4 + i] = k[i];
    return total;
}'''


def test_exec_cub_radix_sort_and_scan():
    fn = _cub_extern(SORT_SCAN_SRC, "sort_scan", "int32(int32*, int32)")

    @splice.kernel
    def sort_kernel(x, y, TILE: ConstInt):
        bid = ct.bid(0)
        t = ct.load(y, index=(bid,), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(bid,), tile=t + fn(x, bid * 512))

    x = np.random.default_rng(0).integers(-1000, 1000, 1024).astype(np.int32)
    want = np.sort(x.reshape(2, 512), axis=1)
    y = np.zeros(256, np.int32)
    _exec(sort_kernel, _vec_sig(), (2,), x, y)
    np.testing.assert_array_equal(x.reshape(2, 512), want)
    np.testing.assert_array_equal(y.reshape(2, 128), np.repeat(want.sum(axis=1)[:, None], 128,
                                                                axis=1))


def test_exec_histogram():
    blocks = 3
    xn = np.random.default_rng(0).integers(0, 256, blocks * 256).astype(np.int32)
    buf = np.concatenate([np.zeros(256, np.int32), xn])
    out = np.zeros(blocks * 256, np.int32)
    _exec(histogram_kernel, K.signature(K.array(i32), K.array(i32), 256), (blocks,), buf, out)
    np.testing.assert_array_equal(buf[:256], np.bincount(xn, minlength=256))
    np.testing.assert_array_equal(out, xn)


def test_exec_warp_scan():
    blocks = 2
    x = np.random.default_rng(1).integers(-9, 9, blocks * 128).astype(np.float32)
    ref = x.reshape(-1, 32).cumsum(axis=1)
    totals = np.zeros(blocks * 128, np.float32)
    _exec(scan_kernel, _vec_sig(f32), (blocks,), x, totals)
    np.testing.assert_array_equal(x.reshape(-1, 32), ref)
    np.testing.assert_array_equal(totals.reshape(blocks, 128),
                                  np.repeat(ref.reshape(blocks, 4, 32)[:, 0, 31:], 128, axis=1))


@pytest.mark.parametrize("kernel", [count_kernel, count_kernel_called])
@pytest.mark.parametrize("reps,flag", [(0, 0), (1, 1), (3, 0)])
def test_exec_loop_and_uniform_branch(kernel, reps, flag):
    x = np.arange(2 * 128, dtype=np.int32)
    y = np.zeros_like(x)
    _exec(kernel, COUNT_SIG, (2,), x, y, reps, flag)
    np.testing.assert_array_equal(y, x + count_ref(reps, flag))


def test_exec_ordering_store_call_load():
    blocks = 2
    y = np.random.default_rng(2).standard_normal(blocks * 128).astype(np.float32)
    x = np.zeros_like(y)
    want = y * np.float32(2) + np.float32(1)
    _exec(order_kernel, _vec_sig(f32), (blocks,), x, y)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(x, want)


def test_exec_ordering_call_then_code_at_the_join():
    """The void call's writes reach code tileiras's scheduler may place at the call's join,
    before its own barrier (a read of the word another thread wrote in the callee): only
    the barrier splice puts after the call orders them."""
    from support.group_positions import read_at_join
    blocks = 2
    b = splice.compile(order_kernel, _vec_sig(f32), "sm_90")
    y0 = np.random.default_rng(4).standard_normal(blocks * 128).astype(np.float32)
    want = y0 * np.float32(2) + np.float32(1)
    for ptx in (b.spliced_ptx, read_at_join(b.spliced_ptx, "block", 0)):
        x, y = np.zeros_like(y0), y0.copy()
        run(ptx, b.symbol, (blocks,), x, y)
        np.testing.assert_array_equal(x, want)
        np.testing.assert_array_equal(y, want)


def test_exec_two_sites():
    x = np.arange(2 * 128, dtype=np.int32)
    y = np.zeros_like(x)
    _exec(two_sites_kernel, _vec_sig(), (2,), x, y)
    a = 32 * 4
    np.testing.assert_array_equal(y, x + a * 1000 + 2 * a)


def test_exec_block_call_with_threads_missing_traps():
    """Threads that exit before a block call are excused from tileiras's barriers, but the
    call's first barrier counts who is there and traps: a partial call is a launch failure,
    never a wrong result. (The early exit is planted in the PTX: splice refuses kernels
    whose threads can exit before the site.)"""
    b = splice.compile(order_kernel, _vec_sig(f32), "sm_90")
    ptx = b["spliced_ptx"]
    entry = ptx.index(".entry")
    first = ptx.index("ld.param", entry)
    early = ("{ .reg .b32 %__t; .reg .pred %__q; mov.u32 %__t, %tid.x; "
             "setp.ge.u32 %__q, %__t, 64; @%__q exit; }\n\t")
    x = np.zeros(128, np.float32)
    y = np.ones(128, np.float32)
    run(ptx, b.symbol, (1,), x, y)          # the kernel as splice built it runs
    with pytest.raises(ExecError, match="trap in thread 0"):
        run(ptx[:first] + early + ptx[first:], b.symbol, (1,), x, y)


_BLOCK_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float32", "float64"]


@pytest.mark.parametrize("name", _BLOCK_TYPES)
def test_exec_block_call_arguments_of_every_type(name):
    """A block call's two scalar arguments (thread 0's values staged in shared memory) and
    result, for each element type: the kernel's scalar and the block index."""
    t = splice.ELEMENT_TYPES[name]
    fn = splice.extern(source=f'extern "C" __device__ {t.c_type} mix({t.c_type} a, '
                              f'{t.c_type} b) {{ return ({t.c_type})(a * ({t.c_type})3 - b); }}',
                       name="mix", scope="block", signature=f"{name}({name}, {name})")(
                           lambda a, b: None)
    dt = getattr(ct, name)

    @splice.kernel
    def block_mix(x, y, s, TILE: ConstInt):
        bid = ct.bid(0)
        tl = ct.load(x, index=(bid,), shape=(TILE,), allow_tma=False)
        v = fn(s, ct.astype(bid, dt))
        ct.store(y, index=(bid,), tile=tl + v)

    x = np.zeros(2 * 128, name)
    y = np.zeros_like(x)
    s = np.dtype(name).type(-5 if name[0] in "if" else 200)
    sig = K.signature(K.array(dt), K.array(dt), K.scalar(dt), 128)
    _exec(block_mix, sig, (2,), x, y, s)
    with np.errstate(over="ignore"):
        want = np.repeat(np.array([s * np.dtype(name).type(3) - np.dtype(name).type(b)
                                   for b in (0, 1)], name), 128)
    np.testing.assert_array_equal(y, want)
