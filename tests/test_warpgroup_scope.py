"""Warpgroup-scope calls (scope="warpgroup"): declaration, the proof on tileiras's PTX of
warp-specialised kernels (TMA matmul fp16/bf16 at two tile shapes, two reduction kernels)
and of a kernel that is not, each broken variant of it, the callee policy (CPU), and
kernels checked against PyTorch (GPU)."""

from __future__ import annotations

import re

import cuda.tile as ct
import pytest

import splice
from splice.errors import SpliceDeclarationError, SpliceLinkError, SpliceRewriteError
from splice.forms import form_of
from splice.forms.base import SiteCall
from splice.forms.rewrite import splice_calls
from splice.inputs import cccl
from splice.ptxtools.ptx import Module, Param
from splice.types import parse_signature
from support import kernels as K

f16, bf16, f32, i32 = ct.float16, ct.bfloat16, ct.float32, ct.int32
ConstInt = ct.Constant[int]

# ---------------------------------------------------------------------------------------------
# Externs

# Every thread of the group adds its share through shuffles and shared memory: the result
# is a + the group's size, counted, in every thread.
GROUP_COUNT_SRC = r'''
#include <splice_group.h>
extern "C" __device__ int group_count(int a) {
    __shared__ int per_warp[4];
    int v = 1;
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    if ((splice_group_rank() & 31) == 0) per_warp[splice_group_rank() / 32] = v;
    splice_group_sync();
    int total = per_warp[0] + per_warp[1] + per_warp[2] + per_warp[3];
    splice_group_sync();
    return a + total;
}'''

group_count = splice.extern(source=GROUP_COUNT_SRC, name="group_count", scope="warpgroup",
                            signature="int32(int32)")(lambda a: None)
group_countf = splice.extern(source=GROUP_COUNT_SRC.replace("int group_count(int a)",
                                                            "float group_countf(float a)")
                             .replace("int total", "float total"),
                             name="group_countf", scope="warpgroup",
                             signature="float32(float32)")(lambda a: None)

# s + the group's sum of x[base + rank] by warp shuffles, then across the 4 warps.
GROUP_SUM_SRC = r'''
#include <splice_group.h>
extern "C" __device__ float group_sum(const float* x, int base, float s) {
    __shared__ float per_warp[4];
    float v = x[base + (int)splice_group_rank()];
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    if ((splice_group_rank() & 31) == 0) per_warp[splice_group_rank() / 32] = v;
    splice_group_sync();
    float total = (per_warp[0] + per_warp[1]) + (per_warp[2] + per_warp[3]);
    splice_group_sync();
    return s + total;
}'''
group_sum = splice.extern(source=GROUP_SUM_SRC, name="group_sum", scope="warpgroup",
                          signature="float32(float32*, int32, float32)")(lambda x, b, s: None)

# The group barrier: each rank writes its slot, meets the group, reads its neighbour's;
# returns s.
GROUP_ROTATE_SRC = r'''
#include <splice_group.h>
extern "C" __device__ float group_rotate(int* out, int base, float s) {
    __shared__ int slot[128];
    unsigned r = splice_group_rank();
    slot[r] = base + (int)r;
    splice_group_sync();
    out[base + (int)r] = slot[(r + 1) % splice_group_size()];
    splice_group_sync();
    return s;
}'''
group_rotate = splice.extern(source=GROUP_ROTATE_SRC, name="group_rotate", scope="warpgroup",
                             signature="float32(int32*, int32, float32)")(lambda o, b, s: None)


def _refused_callee(body: str, name: str):
    return splice.extern(source='#include <splice_group.h>\n' + body, name=name,
                         scope="warpgroup", signature="int32(int32)")(lambda a: None)


CALLEE_REFUSALS = {
    "__syncthreads": (_refused_callee(r'''
extern "C" __device__ int sync_all(int a) { __syncthreads(); return a; }''', "sync_all"),
                      r"a barrier of the whole CTA \('bar.sync 0;'.*in its own body.*"
                      r"splice_group_sync\(\)"),
    "__syncthreads in a callee of the callee": (_refused_callee(r'''
__device__ __noinline__ void helper_sync() { __syncthreads(); }
extern "C" __device__ int sync_deep(int a) { helper_sync(); return a; }''', "sync_deep"),
                      r"barrier of the whole CTA.*reached through sync_deep -> "
                      r"_Z11helper_syncv|barrier of the whole CTA.*reached through sync_deep"),
    "bar.red.popc 0": (_refused_callee(r'''
extern "C" __device__ int red_all(int a) { return __syncthreads_count(a); }''', "red_all"),
                       r"a barrier of the whole CTA \('bar.red.popc"),
    "another named barrier": (_refused_callee(r'''
extern "C" __device__ int named3(int a) { asm volatile("bar.sync 3, 128;"); return a; }''',
                                              "named3"),
                              r"a barrier \('bar.sync 3, 128;'\) other than the group's"),
    "cluster barrier": (_refused_callee(r'''
extern "C" __device__ int cl(int a) {
    asm volatile("barrier.cluster.arrive;"); asm volatile("barrier.cluster.wait;"); return a; }''',
                                        "cl"),
                        r"a barrier of the whole cluster \('barrier.cluster.arrive;'"),
    "exit": (_refused_callee(r'''
extern "C" __device__ int ex(int a) { if (a < 0) asm volatile("exit;"); return a; }''', "ex"),
             r"'exit;': a thread that exits inside the call leaves the group"),
    "blockDim": (_refused_callee(r'''
extern "C" __device__ int bdim(int a) { return a + blockDim.x; }''', "bdim"),
                 r"a read of the block size \('mov.u32 %r\d+, %ntid.x;': blockDim\).*"
                 r"splice_group_size\(\)"),
    "threadIdx": (_refused_callee(r'''
extern "C" __device__ int tidx(int a) { return a + threadIdx.x; }''', "tidx"),
                  r"a read of the thread index .*threadIdx.*splice_group_rank\(\)"),
    # the header's register holds %tid.x until it is masked: used as it is, it is threadIdx
    "the rank register unmasked": (_refused_callee(r'''
extern "C" __device__ int raw_rank(int a) {
    unsigned r;
    asm volatile("{\n\t.reg .u32 %%splice_group_tid;\n\tmov.u32 %%splice_group_tid, %%tid.x;"
                 "\n\tmov.u32 %0, %%splice_group_tid;\n\t}" : "=r"(r));
    return a + r;
}''', "raw_rank"),
                                   r"a read of the thread index \('mov.u32 %r\d+, "
                                   r"%splice_group_tid;'.*splice_group_rank\(\)"),
    "the rank register masked otherwise": (_refused_callee(r'''
extern "C" __device__ int wide_rank(int a) {
    unsigned r;
    asm volatile("{\n\t.reg .u32 %%splice_group_tid;\n\tmov.u32 %%splice_group_tid, %%tid.x;"
                 "\n\tand.b32 %0, %%splice_group_tid, 255;\n\t}" : "=r"(r));
    return a + r;
}''', "wide_rank"),
                                           r"a read of the thread index \('and.b32 %r\d+, "
                                           r"%splice_group_tid, 255;'"),
}

# ---------------------------------------------------------------------------------------------
# Kernels


def make_matmul_kernel(fn):
    @splice.kernel
    def matmul_wg(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
        acc = K.matmul_tile(A, B, tm, tn, tk)
        s = fn(ct.bid(0))
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc + s, C.dtype))
    return matmul_wg


matmul_count_kernel = make_matmul_kernel(group_count)


def _mm_sig(dtype, tm, tn, tk):
    return K.signature(K.array(dtype, 2), K.array(dtype, 2), K.array(dtype, 2), tm, tn, tk)


MATMULS = {"fp16 128x128x64": _mm_sig(f16, 128, 128, 64),
           "bf16 128x128x64": _mm_sig(bf16, 128, 128, 64),
           "fp16 256x128x64": _mm_sig(f16, 256, 128, 64),
           "bf16 256x128x64": _mm_sig(bf16, 256, 128, 64)}


@splice.kernel
def sum_call_kernel(x, y, TILE: ConstInt):
    # t * f(ct.sum(t)) on a (256,) tile: TMA load and store, warp-specialised
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=t * group_countf(ct.sum(t)))


@splice.kernel
def flag_kernel(x, flag, y, TILE: ConstInt):
    # a call under `if ct.sum(flag) > 0`, its result used by the tile code there
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    fl = ct.load(flag, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    if ct.sum(fl) > 0:
        t = t * group_countf(ct.sum(t))
    ct.store(y, index=(ct.bid(0),), tile=t)


@splice.kernel
def flag_scalar_kernel(x, flag, y, TILE: ConstInt):
    # the same call whose result only a scalar takes: tileiras runs it on its TMA warp
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    fl = ct.load(flag, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    s = 0.0
    if ct.sum(fl) > 0:
        s = group_countf(1.0)
    ct.store(y, index=(ct.bid(0),), tile=t + s)


@splice.kernel
def plain_sum_call_kernel(x, y, TILE: ConstInt):
    # no TMA at all: not warp-specialised, a 128-thread block: the group is the block
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t * group_countf(ct.sum(t)), allow_tma=False)


@splice.kernel
def sum_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=t + group_sum(x, ct.bid(0) * TILE, ct.sum(t)))


@splice.kernel
def rotate_kernel(x, out, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=t * group_rotate(out, ct.bid(0) * 128, ct.sum(t)))


block_twice = splice.extern(source='extern "C" __device__ float block_twice(float a) '
                                   '{ return 2 * a; }', name="block_twice", scope="block",
                            signature="float32(float32)")(lambda a: None)


@splice.kernel
def sum_block_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t * block_twice(ct.sum(t)))


VEC_SIG = K.signature(K.array(f32), K.array(f32), 256)
FLAG_SIG = K.signature(K.array(f32), K.array(i32), K.array(f32), 256)

# ---------------------------------------------------------------------------------------------
# Declarations


def test_scope_is_recorded_on_every_declaration_form():
    assert group_count._splice_extern.scope == "warpgroup"
    assert not group_count._splice_extern.pure          # a cooperative call is impure
    lib = splice.library(source=GROUP_COUNT_SRC)
    assert lib.extern("group_count", signature="int32(int32)",
                      scope="warpgroup")._splice_extern.scope == "warpgroup"
    p = splice.extern.from_ptx(ptx=".version 8.0\n", name="f", signature="int32(int32)",
                               scope="warpgroup")
    assert p._splice_extern.scope == "warpgroup"
    lt = splice.extern.from_ltoir(data=b"\x00", name="f", signature="int32(int32)",
                                  scope="warpgroup")
    assert lt._splice_extern.scope == "warpgroup"
    with pytest.raises(SpliceDeclarationError, match="cannot return a pointer"):
        splice.extern.from_ptx(ptx=".version 8.0\n", name="g", signature="float32*(int32)",
                               scope="warpgroup")


# ---------------------------------------------------------------------------------------------
# The proof accepts tileiras's sites


def _group_spans(b):
    return [span for span in b.spans if span.kind == "warpgroup call"]


def _group_calls(b) -> list[str]:
    return [span.text(b.spliced_ptx) for span in _group_spans(b)]


def _check_group_call(b, leader: int = 0) -> None:
    [span] = _group_spans(b)
    assert (span.site, span.instance) == (0, 0) and b.sites[0].instances == 1
    text = span.text(b.spliced_ptx)
    ptx = b.spliced_ptx
    leader_part, rest = text.split("\n$__splice_group_0_0:", 1)
    assert "st.shared.b32 \t[__splice_block_0+0]" in leader_part
    order = [rest.index(s) for s in (
        "barrier.red.popc.u32 \t%__splice_n, 15, 128, %__splice_p;",
        "setp.ne.u32 \t%__splice_q, %__splice_n, 128;", "@%__splice_q trap;",
        "setp.lt.u32 \t%__splice_p, %__splice_rank, 1;",
        "setp.ne.u32 \t%__splice_q, %__splice_n, 1;",
        "ld.shared.b32 \t%__splice_a0, [__splice_block_0];",
        "barrier.sync \t15, 128;",
        f"setp.ne.u32 \t%__splice_q, %__splice_tid, {leader};")]
    assert order == sorted(order)
    # the guard leads every other thread of the group to splice's label; its old target
    # (the join) is still followed by tileiras's barrier
    *_, join = re.findall(r"@%__splice_q bra \t(\$L__BB\d+_\d+);", text)
    assert len(re.findall(r"@%p\d+ bra \t\$__splice_group_0_0;", ptx)) == 1
    assert ptx.count("$__splice_group_0_0:") == 1
    assert re.search(r"@%p\d+ bra \t" + re.escape(join) + ";", b.ptx)  # tileiras's guard
    assert re.search(re.escape(join) + r":\n(\s*\.loc[^\n]*\n)*\s*(barrier.sync \t1, "
                                       r"128;|bar.sync \t0;)", ptx)
    assert "__splice_marker" not in ptx.split(".nv_intermediate_source_section")[0]


@pytest.mark.parametrize("case", sorted(MATMULS))
def test_tma_matmul_epilogue_site(case):
    b = splice.compile(matmul_count_kernel, MATMULS[case], "sm_90")
    assert "setmaxnreg.dec" in b.ptx and "wgmma.mma_async" in b.ptx    # warp-specialised
    assert "warpgroup scope: every thread of the warpgroup" in b.summary()
    _check_group_call(b)


@pytest.mark.parametrize("kernel,sig", [(sum_call_kernel, VEC_SIG), (flag_kernel, FLAG_SIG)],
                         ids=["t * f(ct.sum(t))", "if ct.sum(flag) > 0"])
def test_reduction_kernel_sites(kernel, sig):
    b = splice.compile(kernel, sig, "sm_90")
    assert ".reqntid 256" in b.ptx and "barrier.sync \t1, 128;" in b.ptx
    _check_group_call(b)


def test_kernel_without_warp_specialisation_calls_on_the_block():
    b = splice.compile(plain_sum_call_kernel, VEC_SIG, "sm_90")
    assert ".reqntid 128" in b.ptx and "setmaxnreg" not in b.ptx
    _check_group_call(b)


def test_scalar_only_branch_on_the_tma_warp_is_refused():
    with pytest.raises(SpliceRewriteError, match=r"step 'join barrier': tileiras runs this "
                                                 r"site in a single warp.*t = t \* f\(s\)"):
        splice.compile(flag_scalar_kernel, FLAG_SIG, "sm_90")


# a void call that records the tile's maximum: no result to use in the tile code
RECORD_MAX_SRC = r'''
#include <splice_group.h>
extern "C" __device__ void record_max(float* out, float v) {
    if (splice_group_rank() == 0) atomicAdd(out, v);
}'''


def _record_max_kernel(memory):
    record_max = splice.extern(source=RECORD_MAX_SRC, name="record_max", scope="warpgroup",
                               signature="void(float32*, float32)", memory=memory)

    @splice.kernel
    def record_max_kernel(A, B, C, out, tm: ConstInt, tn: ConstInt, tk: ConstInt):
        acc = K.matmul_tile(A, B, tm, tn, tk)
        record_max(out, ct.max(ct.max(acc, axis=1), axis=0))
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype))
    return record_max_kernel


def test_void_call_on_the_tma_warp_names_a_fix_it_can_use():
    """A void call has no result to use in the tile code: the refusal names what such a
    call can do, and what it names works (memory="arguments" keeps it on the consumer
    warpgroup)."""
    sig = K.signature(K.array(f16, 2), K.array(f16, 2), K.array(f16, 2), K.array(f32),
                      128, 128, 64)
    with pytest.raises(SpliceRewriteError, match=r"tileiras runs this site in a single warp"
                                                 r".*a void call.*memory=\"arguments\""):
        splice.compile(_record_max_kernel("any"), sig, "sm_90")
    b = splice.compile(_record_max_kernel("arguments"), sig, "sm_90")
    [span] = _group_spans(b)
    assert "barrier.red.popc.u32 \t%__splice_n, 15, 128" in span.text(b.spliced_ptx)


def test_block_call_in_warp_specialised_kernel_names_warpgroup_scope():
    with pytest.raises(SpliceRewriteError) as e:
        splice.compile(sum_block_kernel, VEC_SIG, "sm_90")
    msg = str(e.value)
    assert 'scope="warpgroup"' in msg
    # the loads already have allow_tma=False: the message names the TMA store only
    assert "allow_tma=False to its ct.store calls" in msg and "ct.load and" not in msg


# ---------------------------------------------------------------------------------------------
# Broken variants, made from tileiras's PTX


def _site(width: int = 32) -> SiteCall:
    sig = parse_signature("float32(float32)")
    return SiteCall(0, "callee0", (Param("p0", f".param .b{width}", None, f".b{width}",
                                         ".param"),),
                    Param("r", f".param .b{width}", None, f".b{width}", ".param"), sig,
                    "callee0 at test:1", None, form_of("warpgroup", "test"), width)


@pytest.fixture(scope="module")
def matmul_ptx() -> str:
    return splice.compile(matmul_count_kernel, MATMULS["fp16 128x128x64"], "sm_90").ptx


@pytest.fixture(scope="module")
def plain_ptx() -> str:
    return splice.compile(plain_sum_call_kernel, VEC_SIG, "sm_90").ptx


def _marker_at(ptx: str) -> int:
    return ptx.index("atom.global.acq_rel.cas")


def _warp_guard(ptx: str) -> re.Match:
    m = re.search(r"setp.gt.u32 \t(%p\d+), (%r\d+), 3;\n\s*@(%p\d+) bra \t(\$L__BB\d+_\d+);",
                  ptx)
    assert m and m.group(1) == m.group(3)
    return m


def _site_guard(ptx: str) -> re.Match:
    m = list(re.finditer(r"setp.ne.b32 \t(%p\d+), (%r\d+), 0;", ptx[:_marker_at(ptx)]))[-1]
    return m


def _producer_branch(ptx):
    # the warp branch lets only warp 4 (the TMA producer) into the epilogue's code
    m = _warp_guard(ptx)
    return ptx.replace(m.group(0), m.group(0).replace(f"setp.gt.u32 \t{m.group(1)}, "
                                                      f"{m.group(2)}, 3;",
                                                      f"setp.ne.u32 \t{m.group(1)}, "
                                                      f"{m.group(2)}, 4;"), 1)


def _loop_entered_partway(ptx):
    # a branch from the producer warps' code back to the label before the site
    label = re.findall(r"(\$L__BB\d+_\d+):", ptx[:_marker_at(ptx)])[-1]
    end = _warp_guard(ptx).group(4)
    pred = _site_guard(ptx).group(1)
    return ptx.replace(f"{end}:\n", f"{end}:\n\t@{pred} bra \t{label};\n", 1)


def _register_barrier_id(ptx):
    i = _marker_at(ptx)
    j = ptx.index("barrier.sync \t1, 128;", i)
    return ptx[:j] + "barrier.sync \t%r1, 128;" + ptx[j + len("barrier.sync \t1, 128;"):]


def _open_wgmma_group(ptx):
    return ptx.replace("wgmma.wait_group.sync.aligned \t0;", "wgmma.wait_group.sync.aligned \t1;")


def _after_setmaxnreg(ptx):
    m = _site_guard(ptx)
    return ptx.replace(m.group(0), "setmaxnreg.dec.sync.aligned.u32 \t32;\n\t" + m.group(0), 1)


def _barrier_15_in_use(ptx):
    return ptx.replace("\tret;\n", "\tbarrier.sync \t15, 128;\n\tret;\n", 1)


def _exit(ptx):
    return ptx.replace("\tret;\n", "\texit;\n", 1)


def _join_count(ptx):
    i = _marker_at(ptx)
    j = ptx.index("barrier.sync \t1, 128;", i)
    return ptx[:j] + "barrier.sync \t1, 256;" + ptx[j + len("barrier.sync \t1, 128;"):]


def _leader_outside(ptx):
    m = _site_guard(ptx)
    return ptx.replace(m.group(0), m.group(0).replace(", 0;", ", 200;"), 1)


BROKEN = {
    "site in the producer branch": (_producer_branch,
                                    r"step 'threads': the threads that can reach the site are "
                                    r"warp\(s\) 4 \(32 threads\)"),
    "loop entered partway": (_loop_entered_partway, r"step 'threads': the group's region .* "
                                                    r"is entered partway"),
    "register barrier id": (_register_barrier_id, r"step 'barrier ids': the barrier "
                                                  r"'barrier.sync %r1, 128;' names its id"),
    "inside an open wgmma group": (_open_wgmma_group, r"step 'wgmma': the call site is inside "
                                                      r"an open wgmma group"),
    "after setmaxnreg.dec": (_after_setmaxnreg, r"step 'registers'"),
    "barrier id 15 in use": (_barrier_15_in_use, r"step 'barrier ids': the kernel already "
                                                 r"uses barrier id 15"),
    "exit": (_exit, r"step 'kernel': threads of the kernel may exit early"),
    "join barrier counts other threads": (_join_count, r"step 'threads'.*'barrier.sync 1, 256;'"),
    "leader outside the group": (_leader_outside, r"step 'threads': the site runs on thread "
                                                  r"200, outside the warpgroup"),
}


def test_unedited_ptx_is_accepted(matmul_ptx, plain_ptx):
    for ptx in (matmul_ptx, plain_ptx):
        rep = splice_calls(Module(ptx), {0: _site()}, kernel_name="k")
        assert rep.replaced == {0: 1}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_variant_refused(matmul_ptx, case):
    edit, msg = BROKEN[case]
    text = edit(matmul_ptx)
    assert text != matmul_ptx
    with pytest.raises(SpliceRewriteError, match=msg):
        splice_calls(Module(text), {0: _site()}, kernel_name="k")


def test_block_of_256_threads_without_warp_specialisation_refused(plain_ptx):
    text = plain_ptx.replace(".reqntid 128", ".reqntid 256", 1)
    with pytest.raises(SpliceRewriteError, match=r"step 'threads': in a kernel that is not "
                                                 r"warp-specialised a warpgroup call runs on "
                                                 r"the whole block.*has 256.*scope=\"block\""):
        splice_calls(Module(text), {0: _site()}, kernel_name="k")


# ---------------------------------------------------------------------------------------------
# The callee


@pytest.mark.parametrize("case", sorted(CALLEE_REFUSALS))
def test_callee_refused(case):
    fn, msg = CALLEE_REFUSALS[case]
    with pytest.raises(SpliceLinkError, match=msg) as e:
        splice.compile(make_matmul_kernel(fn), MATMULS["fp16 128x128x64"], "sm_90")
    assert f"warpgroup-scope extern '{fn._splice_extern.name}'" in str(e.value)
    assert "128 threads of one warpgroup" in str(e.value)


def test_cub_block_reduce_refused():
    src = r'''
#include <cub/block/block_reduce.cuh>
extern "C" __device__ int cub_sum(int a) {
    using R = cub::BlockReduce<int, 128>;
    __shared__ typename R::TempStorage tmp;
    return R(tmp).Sum(a);
}'''
    for incs in ([], *cccl.installations()):
        fn = splice.extern(source=src, name="cub_sum", scope="warpgroup", include_dirs=incs,
                           options=["-std=c++17"], signature="int32(int32)")(lambda a: None)
        try:
            fn._splice_extern.fragment.module("sm_90")
            break
        except splice.SpliceError:
            continue
    else:
        pytest.skip("CUB headers not found")
    with pytest.raises(SpliceLinkError, match=r"warpgroup-scope extern 'cub_sum'.*(barrier of "
                                              r"the whole CTA|read of the thread index)"):
        splice.compile(make_matmul_kernel(fn), MATMULS["fp16 128x128x64"], "sm_90")


def test_header_functions_are_accepted():
    b = splice.compile(sum_kernel, VEC_SIG, "sm_90")
    [site] = b.sites
    assert site.instances == 1
    b = splice.compile(rotate_kernel, K.signature(K.array(f32), K.array(i32), K.array(f32),
                                                  256), "sm_90")
    assert len(_group_calls(b)) == 1


# ---------------------------------------------------------------------------------------------
# GPU: each against PyTorch


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_matmul_with_group_count(torch, dtype):
    from support.gpu import launch
    dt = getattr(torch, dtype)
    A = torch.randn(256, 128, device="cuda", dtype=dt)
    B = torch.randn(128, 256, device="cuda", dtype=dt)
    C = torch.empty(256, 256, device="cuda", dtype=dt)
    launch(torch, (2, 2, 1), matmul_count_kernel, (A, B, C, 128, 128, 64))
    want = (A.float() @ B.float() + torch.tensor([[0.0], [1.0]], device="cuda")
            .repeat_interleave(128, 0) + 128.0).to(dt)
    torch.testing.assert_close(C, want, rtol=2e-2, atol=2e-1)


@pytest.mark.gpu
def test_gpu_shuffle_reduction(torch):
    from support.gpu import launch
    blocks = 16
    x = torch.randn(blocks * 256, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (blocks,), sum_kernel, (x, y, 256))
    xv = x.view(blocks, 256)
    first128 = torch.stack([x[b * 256:b * 256 + 128].sum() for b in range(blocks)])[:, None]
    torch.testing.assert_close(y.view(blocks, 256), xv + first128 + xv.sum(1, keepdim=True),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_gpu_group_barrier(torch):
    from support.gpu import launch
    blocks = 8
    x = torch.randn(blocks * 256, device="cuda")
    out = torch.full((blocks * 128,), -1, dtype=torch.int32, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (blocks,), rotate_kernel, (x, out, y, 256))
    idx = torch.arange(blocks * 128, dtype=torch.int32, device="cuda").view(blocks, 128)
    assert torch.equal(out.view(blocks, 128), torch.roll(idx, -1, dims=1))
    xv = x.view(blocks, 256)
    torch.testing.assert_close(y.view(blocks, 256), xv * xv.sum(1, keepdim=True), rtol=1e-4,
                               atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [sum_call_kernel, plain_sum_call_kernel])
def test_gpu_reduction_then_call(torch, kernel):
    from support.gpu import launch
    x = torch.randn(8 * 256, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (8,), kernel, (x, y, 256))
    s = x.view(8, 256).sum(dim=1, keepdim=True)
    torch.testing.assert_close(y.view(8, 256), x.view(8, 256) * (s + 128.0), rtol=1e-4,
                               atol=1e-3)


@pytest.mark.gpu
def test_gpu_flag_kernel(torch):
    from support.gpu import launch
    x = torch.randn(4 * 256, device="cuda")
    flag = torch.tensor([1, 0, 0, 3], dtype=torch.int32, device="cuda").repeat_interleave(256)
    y = torch.empty_like(x)
    launch(torch, (4,), flag_kernel, (x, flag, y, 256))
    xv = x.view(4, 256)
    s = xv.sum(dim=1, keepdim=True)
    on = (flag.view(4, 256).sum(dim=1, keepdim=True) > 0)
    torch.testing.assert_close(y.view(4, 256), torch.where(on, xv * (s + 128.0), xv),
                               rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# splice.asm at block and warpgroup scope


@splice.kernel
def asm_matmul_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = K.matmul_tile(A, B, tm, tn, tk)
    # lane 0's value of the block index, every thread of the warpgroup
    s = splice.asm("shfl.sync.idx.b32 $0, $1, 0, 31, -1;", ct.bid(0), dtype=i32,
                   scope="warpgroup")
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc + s, C.dtype))


@splice.kernel
def asm_block_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    s = splice.asm("shfl.sync.idx.b32 $0, $1, 0, 31, -1;", ct.bid(0), dtype=i32, scope="block")
    ct.store(y, index=(ct.bid(0),), tile=t + s)


@splice.kernel
def asm_tile_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.asm("mov.b32 $0, $1;", t, dtype=i32,
                                                    scope="warpgroup"))


def test_asm_at_warpgroup_and_block_scope():
    b = splice.compile(asm_matmul_kernel, MATMULS["fp16 128x128x64"], "sm_90")
    _check_group_call(b)
    assert "shfl.sync.idx.b32" in _group_calls(b)[0]
    b = splice.compile(asm_block_kernel, K.signature(K.array(i32), K.array(i32), 128), "sm_90")
    [text] = [s.text(b.spliced_ptx) for s in b.spans if s.kind == "block call"]
    assert "shfl.sync.idx.b32" in text and "bar.red.popc.u32" in text


def test_asm_cooperative_refusals():
    """(The straight-line rule of block/warpgroup snippets: tests/test_asm_check.py.)"""
    sig = K.signature(K.array(i32), K.array(i32), 128)
    with pytest.raises(splice.SpliceCallError, match=r"argument 1 is a int32 tile of shape "
                                                     r"\(128,\); a warpgroup-scope extern"):
        splice.compile(asm_tile_kernel, sig, "sm_90")


@pytest.mark.gpu
def test_gpu_example_matmul_fp8_scales():
    """examples/matmul_rowmax_fp8.py on the GPU: C, its per-row FP8 scales (a warpgroup
    tile call on the (TM,) row maxima) and its amax against PyTorch (the example asserts
    each, exactly for the scales and the amax)."""
    import subprocess
    import sys
    from pathlib import Path

    from support.env import python_env
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "examples" / "matmul_rowmax_fp8.py")],
                         capture_output=True, text=True, cwd=root / "examples", timeout=600,
                         env=python_env(root))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK" in out.stdout


@splice.kernel
def two_sites_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    a = group_countf(ct.sum(t))
    ct.store(y, index=(ct.bid(0),), tile=t * a + group_countf(a))


def test_two_sites_check_their_own_identity():
    b = splice.compile(two_sites_kernel, VEC_SIG, "sm_90")
    calls = _group_calls(b)
    assert len(calls) == 2
    # the second entry barrier counts the ranks below site + 1: 1 at site 0, 2 at site 1
    ids = sorted(int(re.search(r"setp.lt.u32 \t%__splice_p, %__splice_rank, (\d+);\n\t"
                               r"barrier.red.popc.u32 \t%__splice_n, 15, 128, %__splice_p;\n\t"
                               r"setp.ne.u32 \t%__splice_q, %__splice_n, \1;", c).group(1))
                 for c in calls)
    assert ids == [1, 2]


@pytest.mark.gpu
def test_gpu_two_sites(torch):
    from support.gpu import launch
    x = torch.randn(4 * 256, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (4,), two_sites_kernel, (x, y, 256))
    xv = x.view(4, 256)
    a = xv.sum(dim=1, keepdim=True) + 128.0
    torch.testing.assert_close(y.view(4, 256), xv * a + (a + 128.0), rtol=1e-4, atol=1e-3)


def test_warp_analysis_finds_the_roles_of_the_tma_matmul(matmul_ptx):
    """The analysis of which warps reach each statement finds tileiras's roles (design.md,
    warpgroup-scope): warps 0-3 at the epilogue's site, warp 4 (TMA loads) and warp 5 (TMA
    store) at their setmaxnreg.dec, warps 6-7 at theirs."""
    from splice.analysis import control
    m = Module(matmul_ptx)
    [fn] = [f for f in m.function_order if f.is_definition]
    b = m.body(fn)
    reach = control.warps_reaching(b, 8)
    [site] = [k for k, (_, ins) in enumerate(b.parsed) if ins is not None and ins.base == "atom"]
    assert reach[site] == frozenset(range(4))
    dec = [reach[k] for k, (_, ins) in enumerate(b.parsed)
           if ins is not None and ins.opcode.startswith("setmaxnreg.dec")]
    assert sorted(map(sorted, dec)) == [[4], [5], [6, 7]]
    tma = {w for k, (_, ins) in enumerate(b.parsed)
           if ins is not None and ins.opcode.startswith("cp.async.bulk.tensor") for w in reach[k]}
    assert tma == {4, 5}


def test_binary_object_refused_at_warpgroup_scope(tmp_path):
    from support.fragments import rdc_cubin
    obj = splice.extern.from_object(rdc_cubin(tmp_path), name="obj_f", scope="warpgroup",
                                    signature="float32(float32)")

    @splice.kernel
    def obj_kernel(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(ct.bid(0),), tile=t * obj(ct.sum(t)), allow_tma=False)
    with pytest.raises(SpliceLinkError, match=r"warpgroup-scope extern 'obj_f'.*comes from a "
                                              r"binary object.*ship it as CUDA C, PTX or "
                                              r"LTO-IR"):
        splice.compile(obj_kernel, VEC_SIG, "sm_90")


# ---------------------------------------------------------------------------------------------
# CPU executor (support.ptx_exec): kernels without warp specialisation, where the group is
# the 128-thread block (the executor does not run TMA, mbarrier or setmaxnreg)


@splice.kernel
def plain_sum_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t + group_sum(x, ct.bid(0) * TILE, ct.sum(t)),
             allow_tma=False)


@splice.kernel
def plain_rotate_kernel(x, out, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t * group_rotate(out, ct.bid(0) * 128, ct.sum(t)),
             allow_tma=False)


def _exec(kernel, sig, grid, *args):
    from support.ptx_exec import run_build
    b = splice.compile(kernel, sig, "sm_90")
    assert len(_group_calls(b)) == 1
    return run_build(b, grid, *args)


def test_exec_group_count_shuffle_sum_and_barrier():
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.integers(-20, 20, 2 * 256).astype(np.float32)      # exact sums
    xv = x.reshape(2, 256)
    y = np.zeros_like(x)
    _exec(plain_sum_call_kernel, VEC_SIG, (2,), x, y)
    np.testing.assert_array_equal(y.reshape(2, 256), xv * (xv.sum(1, keepdims=True) + 128))
    y = np.zeros_like(x)
    _exec(plain_sum_kernel, VEC_SIG, (2,), x, y)
    first128 = xv[:, :128].sum(1, keepdims=True)
    np.testing.assert_array_equal(y.reshape(2, 256), xv + first128 + xv.sum(1, keepdims=True))
    out = np.full(2 * 128, -1, np.int32)
    y = np.zeros_like(x)
    _exec(plain_rotate_kernel, K.signature(K.array(f32), K.array(i32), K.array(f32), 256),
          (2,), x, out, y)
    idx = np.arange(2 * 128, dtype=np.int32).reshape(2, 128)
    np.testing.assert_array_equal(out.reshape(2, 128), np.roll(idx, -1, axis=1))
    np.testing.assert_array_equal(y.reshape(2, 256), xv * xv.sum(1, keepdims=True))


def test_exec_group_call_with_threads_missing_traps():
    """Threads that exit before the call never make it a partial call: the entry barrier
    waits for 128 arrivals, so with a whole warp gone it never completes (a deadlock, not
    a wrong result), and with part of a warp gone its count is short and it traps. (The
    exits are planted at splice's label: splice refuses kernels whose threads can exit
    early.)"""
    import numpy as np

    from support.ptx_exec import ExecError, run
    b = splice.compile(plain_sum_call_kernel, VEC_SIG, "sm_90")
    ptx = b["spliced_ptx"]
    at = ptx.index("{", ptx.index("$__splice_group_0_0:")) + 1

    def leave(first):
        return (ptx[:at] + "\n\t{ .reg .b32 %__t; .reg .pred %__e; mov.u32 %__t, %tid.x; "
                f"setp.ge.u32 %__e, %__t, {first}; @%__e exit; }}" + ptx[at:])
    x = np.ones(256, np.float32)
    y = np.zeros(256, np.float32)
    run(ptx, b.symbol, (1,), x, y)
    np.testing.assert_array_equal(y, np.full(256, 256.0 + 128.0, np.float32))
    with pytest.raises(ExecError, match="(?s)deadlock.*waits at barrier 15 \\(count 128\\)"):
        run(leave(96), b.symbol, (1,), x, y)
    with pytest.raises(ExecError, match="trap|deadlock"):
        run(leave(100), b.symbol, (1,), x, y)


# ---------------------------------------------------------------------------------------------
# A warpgroup-scope snippet's refusal names a fix a PTX snippet can use


@splice.kernel
def asm_cta_barrier_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    s = splice.asm("bar.sync 0; mov.b32 $0, $1;", ct.sum(t), dtype=i32, scope="warpgroup")
    ct.store(y, index=(ct.bid(0),), tile=t + s, allow_tma=False)


@splice.kernel
def asm_block_size_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    s = splice.asm("mov.u32 $0, %ntid.x;", ct.sum(t), dtype=i32, scope="warpgroup")
    ct.store(y, index=(ct.bid(0),), tile=t + s, allow_tma=False)


@splice.kernel
def asm_group_barrier_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    s = splice.asm("barrier.sync 15, 128; mov.b32 $0, $1;", ct.sum(t), dtype=i32,
                   scope="warpgroup")
    ct.store(y, index=(ct.bid(0),), tile=t + s, allow_tma=False)


def test_asm_with_the_group_barrier_is_accepted():
    # the barrier a snippet can synchronise the group with (splice_group_sync()'s)
    import numpy as np
    x = np.random.default_rng(1).integers(-50, 50, 2 * 128).astype(np.int32)
    y = np.zeros_like(x)
    _exec(asm_group_barrier_kernel, K.signature(K.array(i32), K.array(i32), 128), (2,), x, y)
    xv = x.reshape(2, 128)
    np.testing.assert_array_equal(y.reshape(2, 128), xv + xv.sum(1, keepdims=True))


@pytest.mark.parametrize("kernel, fix", [(asm_cta_barrier_kernel, "barrier.sync 15, 128"),
                                         (asm_block_size_kernel, "128")])
def test_asm_refusal_names_a_fix_for_ptx(kernel, fix):
    with pytest.raises(SpliceLinkError) as e:
        splice.compile(kernel, K.signature(K.array(i32), K.array(i32), 128), "sm_90")
    msg = str(e.value)
    assert "#include" not in msg and fix in msg


# ---------------------------------------------------------------------------------------------
# Two consumer warpgroups (num_worker_warps=8): refused, and the refusal names the option


@splice.kernel(num_worker_warps=8)
def matmul_eight_workers_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = K.matmul_tile(A, B, tm, tn, tk)
    s = group_count(ct.bid(0))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc + s, C.dtype))


def test_two_consumer_warpgroups_are_refused():
    with pytest.raises(SpliceRewriteError, match=r"step 'threads'.*warp\(s\) 0-7 \(256 threads\)"
                                                 r".*not one warpgroup of 128 threads"):
        splice.compile(matmul_eight_workers_kernel, MATMULS["fp16 128x128x64"], "sm_90")


def test_two_consumer_warpgroups_refusal_names_num_worker_warps():
    with pytest.raises(SpliceRewriteError) as e:
        splice.compile(matmul_eight_workers_kernel, MATMULS["fp16 128x128x64"], "sm_90")
    assert "num_worker_warps=8 makes them" in str(e.value)
    assert "Leave num_worker_warps unset (or give 4)" in str(e.value)
    # what it names works: the same kernel with the default (one consumer warpgroup)
    b = splice.compile(matmul_eight_workers_kernel.replace_hints(num_worker_warps=4),
                       MATMULS["fp16 128x128x64"], "sm_90")
    assert "warpgroup scope" in b.summary()


# ---------------------------------------------------------------------------------------------
# The callee checks use the content keys the fragments stage took


def test_warpgroup_callee_check_uses_the_fragments_stage_keys(fresh_cache, monkeypatch):
    from support.fragments import save_source_mid_build
    saved = save_source_mid_build(monkeypatch, group_countf._splice_extern.fragment)
    b = splice.compile(plain_sum_call_kernel, VEC_SIG, "sm_90")
    assert saved and "warpgroup scope" in b.summary()


def test_argument_scratch_is_named_for_the_warpgroup_scope():
    # the shared-memory report names each span's owner: a warpgroup site's scratch is not a
    # block call's
    from splice.forms.warpgroup import WARPGROUP
    assert WARPGROUP.global_edit(3).owner == "splice's warpgroup-call argument scratch"
    b = splice.compile(plain_sum_call_kernel, VEC_SIG, "sm_90")
    assert re.search(r"\.shared \.align 8 \.b8 __splice_block_0\[16\]; // splice: arguments "
                     r"of warpgroup-scope site 0", b.spliced_ptx)
    assert "block-scope site" not in b.spliced_ptx


# ---------------------------------------------------------------------------------------------
# Values in each group position of a 256-thread warp-specialised block: the group at threads
# 0-127 and the epilogue group at 128-255 (tileiras's guard there is tid.x - 128 != 0)

# tileiras's shape: a branch on the warp id opens the group's region; the guard lets the
# group's first thread to the marker, which stores the result; after the join barrier
# every thread of the group reads it and stores it at out[tid]. SKIP: the warps that are
# not the group's.
_WS_KERNEL = """.version 8.0
.target sm_90
.address_size 64
.visible .global .align 4 .b8 __splice_marker_0[4];
.visible .entry k(.param .u64 k_out, .param .u64 k_in, .param .u64 k_calls)
.reqntid 256
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<16>;
	.shared .align 8 .b8 smem[8];
	ld.param.u64 	%rd1, [k_out];
	ld.param.u64 	%rd2, [k_in];
	ld.param.u64 	%rd3, [k_calls];
	mov.u32 	%r1, %tid.x;
	shr.u32 	%r2, %r1, 5;
	shfl.sync.idx.b32 	%r3, %r2, 0, 31, -1;
	setp.SKIP.u32 	%p2, %r3, 3;
	@%p2 bra 	$L__END;
	ld.global.b32 	%r5, [%rd2];
	add.s32 	%r4, %r1, -FIRST;
	setp.ne.s32 	%p1, %r4, 0;
	@%p1 bra 	$L__JOIN;
	mov.b64 	%rd9, __splice_marker_0;
	atom.global.acq_rel.cas.b64 	%rd10, [%rd9], %rd3, %rd11;
	st.shared.b32 	[smem], %rd10;
$L__JOIN:
	barrier.sync 	1, 128;
	ld.shared.b32 	%r6, [smem];
	mul.wide.u32 	%rd7, %r1, 4;
	add.s64 	%rd8, %rd1, %rd7;
	st.global.b32 	[%rd8], %r6;
$L__END:
	ret;
}
"""

# every calling thread counts itself at calls[0]; the result is 3 b + 1
_WS_CALLEE = """.version 8.0
.target sm_90
.address_size 64
.visible .func (.param .b32 r) callee0(.param .b64 p0, .param .b32 p1)
{
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<4>;
	ld.param.b64 	%rd1, [p0];
	ld.param.b32 	%r1, [p1];
	atom.global.add.u32 	%r2, [%rd1], 1;
	mad.lo.s32 	%r3, %r1, 3, 1;
	st.param.b32 	[r], %r3;
	ret;
}
"""


def _ws_site(inline: bool):
    from splice.forms import FORMS
    from splice.types import parse_signature
    sig = parse_signature("int32(int32*, int32)")
    body = (Module(_WS_CALLEE), Module(_WS_CALLEE).functions["callee0"]) if inline else None
    return SiteCall(0, "callee0", (Param("p0", ".param .b64", None, ".b64", ".param"),
                                   Param("p1", ".param .b32", None, ".b32", ".param")),
                    Param("r", ".param .b32", None, ".b32", ".param"), sig,
                    "callee0 at test:1", body, FORMS["warpgroup"], 64)


@pytest.mark.parametrize("inline", [False, True], ids=["called", "inlined"])
@pytest.mark.parametrize("first", [0, 128], ids=["threads 0-127", "threads 128-255"])
def test_exec_warpgroup_site_in_each_group_position(first, inline):
    """Every thread of the group (and no other) calls once; the leader's result reaches
    every thread of the group after the call (the leader goes on after the marker only
    if it is told apart by tid.x, not by its rank, in a group that starts at 128)."""
    import numpy as np

    from splice.forms.rewrite import splice_calls
    from splice.ptxtools import link
    from support.ptx_exec import Pointer, run
    text = _WS_KERNEL.replace("SKIP", "gt" if first == 0 else "le") \
        .replace("%r1, -FIRST", f"%r1, -{first}") \
        .replace("[%rd9], %rd3, %rd11", "[%rd9], %rd3, %rd12")
    text = text.replace("ld.global.b32 \t%r5, [%rd2];",
                        "ld.global.b32 \t%r5, [%rd2];\n\tcvt.u64.u32 \t%rd12, %r5;")
    report = splice_calls(Module(text), {0: _ws_site(inline)}, kernel_name="k")
    assert report.replaced == {0: 1}
    assert ("call.uni (" in report.module.text or "\tcall " in report.module.text) != inline
    merged = link.merge(report.module, [("the callee", Module(_WS_CALLEE))], "k")
    for b in (7, -40):
        out = np.full(256, -1, np.int32)
        calls = np.zeros(2, np.uint32)
        run(merged.text, "k", (1,), Pointer(out), Pointer(np.array([b], np.int32)),
            Pointer(calls), block=(256,))
        group = slice(first, first + 128)
        np.testing.assert_array_equal(out[group], np.full(128, 3 * b + 1, np.int32))
        np.testing.assert_array_equal(np.delete(out, np.arange(first, first + 128)), -1)
        assert calls[0] == 128


# A void call (an impure callee writing through a pointer) in each group position: tileiras's
# PTX of a 128-thread kernel given the shape of a warp-specialised 256-thread block
# (support.group_positions), the whole pipeline run on it, the values checked after the call

# out[base + rank] += 3 rank + s: an atomic add, so that a thread outside the group calling,
# or a thread of it calling twice, shows in the values
GROUP_ADD_SRC = r'''
#include <splice_group.h>
extern "C" __device__ void group_add(int* out, int base, int s) {
    unsigned r = splice_group_rank();
    atomicAdd(&out[base + (int)r], 3 * (int)r + s);
}'''


def _group_add(inline: str):
    return splice.extern(source=GROUP_ADD_SRC, name="group_add", scope="warpgroup",
                         inline=inline, signature="void(int32*, int32, int32)")


def _group_add_kernel(fn):
    @splice.kernel
    def group_add_kernel(x, out, y, TILE: ConstInt):
        # the call writes out; the kernel loads it after the call (memory="any": ordered)
        bid = ct.bid(0)
        t = ct.load(x, index=(bid,), shape=(TILE,), allow_tma=False)
        fn(out, bid * TILE, ct.sum(t))
        o = ct.load(out, index=(bid,), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(bid,), tile=t * 2 + o, allow_tma=False)
    return group_add_kernel


@pytest.mark.parametrize("inline", ["never", "always"], ids=["called", "inlined"])
@pytest.mark.parametrize("first", [0, 128], ids=["threads 0-127", "threads 128-255"])
def test_exec_void_warpgroup_call_in_each_group_position(first, inline, fresh_cache,
                                                         monkeypatch):
    """Every thread of the group (and no other) calls once with the leader's arguments; the
    kernel reads what the call wrote after it, also in code at the join."""
    import numpy as np

    from support.group_positions import compile_in_group, read_at_join
    from support.ptx_exec import run
    b = compile_in_group(_group_add_kernel(_group_add(inline)),
                         K.signature(K.array(i32), K.array(i32), K.array(i32), 128), first,
                         monkeypatch)
    [text] = _group_calls(b)
    assert f"sub.u32 \t%__splice_rank, %__splice_tid, {first};" in text
    assert ("\tcall " in text) == (inline == "never")
    x = np.random.default_rng(first).integers(-50, 50, 3 * 128).astype(np.int32)
    xv = x.reshape(3, 128)
    want_out = 3 * np.arange(128, dtype=np.int32) + xv.sum(1, keepdims=True)
    # as splice built it, and with a read at the join (before tileiras's barrier) of the
    # word the neighbour wrote in the call: ordered by the barrier after the call
    for ptx in (b.spliced_ptx, read_at_join(b.spliced_ptx, "warpgroup", 3, first)):
        out, y = np.zeros_like(x), np.zeros_like(x)
        run(ptx, b.symbol, (3,), x, out, y)
        np.testing.assert_array_equal(out.reshape(3, 128), want_out)
        np.testing.assert_array_equal(y.reshape(3, 128), xv * 2 + want_out)
