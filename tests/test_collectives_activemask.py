"""The opportunistic warp pattern in element-scope calls (splice/activemask.py): a ``.sync``
instruction whose membermask is the result of ``activemask.b32`` in the same function (or
the constant full mask where that result was compared equal to it), and that every thread
of that mask reaches once, is correct at any divergence and accepted; each near miss (a
constant, computed or parameter mask, a sync not every thread of the mask reaches, a mask
undefined or stale on some path, a branch on a per-lane value, ``bar.sync``,
``__syncwarp()``) stays refused with the collectives check's message.

CPU: hand-written PTX and CUDA C (NVRTC). GPU (``gpu``): warp-aggregated atomics and a
match_any histogram called per element by divergent owner threads (a data-dependent early
return, a masked tail, a replicated 2-D layout), checked exactly against NumPy."""

import re
import types

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.analysis import activemask, collectives
from splice.declare.externs import HEADER_PROVIDERS
from splice.forms import element_callees
from splice.inputs.fragments import CudaSource
from splice.ptxtools.ptx import Module, parse_instruction
from splice.system import cache, toolchain
from support import kernels as K
from support.activemask import HEADER, OLDER_GROUPS_BALLOT
from support.activemask import ptx_fn as _ptx_fn

SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 256)


def _hit(ptx: str):
    return collectives.find_collective(Module(ptx, "t"), "f")


# ---------------------------------------------------------------------------------------------
# PTX: accepted forms

ACCEPTED_PTX = {
    "shfl": """
    activemask.b32 %r2;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;""",
    "every membermask instruction": """
    activemask.b32 %r2;
    vote.sync.ballot.b32 %r3, %p1, %r2;
    vote.sync.all.pred %p2, %p1, %r2;
    match.any.sync.b32 %r4, %r1, %r2;
    match.all.sync.b32 %r5|%p3, %r1, %r2;
    redux.sync.add.u32 %r6, %r1, %r2;
    elect.sync %r7|%p4, %r2;
    bar.warp.sync %r2;""",
    "plain mov copies": """
    activemask.b32 %r2;
    mov.b32 %r3, %r2;
    mov.u32 %r4, %r3;
    shfl.sync.bfly.b32 %r1|%p2, %r1, 1, 31, %r4;""",
    # match.all on the value, a per-thread path, then a shfl
    "divergence between activemask and the sync": """
    activemask.b32 %r2;
    match.all.sync.b32 %r3|%p2, %r1, %r2;
    @%p2 bra $SAME;
    add.s32 %r1, %r1, 1;
$SAME:
    shfl.sync.idx.b32 %r1|%p3, %r1, 0, 31, %r2;""",
    "a leader-only atomic": """
    activemask.b32 %r2;
    @%p1 bra $JOIN;
    popc.b32 %r3, %r2;
    add.s32 %r1, %r1, %r3;
$JOIN:
    shfl.sync.idx.b32 %r1|%p3, %r1, 0, 31, %r2;""",
    "activemask and sync in every iteration": """
    mov.u32 %r5, 0;
$LOOP:
    activemask.b32 %r2;
    shfl.sync.bfly.b32 %r3|%p2, %r1, 1, 31, %r2;
    add.s32 %r5, %r5, 1;
    setp.lt.s32 %p3, %r5, %r1;
    @%p3 bra $LOOP;""",
    "one activemask on each branch": """
    @%p1 bra $ELSE;
    activemask.b32 %r2;
    bra.uni $JOIN;
$ELSE:
    activemask.b32 %r2;
$JOIN:
    shfl.sync.idx.b32 %r1|%p3, %r1, 0, 31, %r2;""",
    "a trap on an error path": """
    activemask.b32 %r2;
    @%p1 bra $OK;
    trap;
$OK:
    shfl.sync.idx.b32 %r1|%p3, %r1, 0, 31, %r2;""",
    "the full mask where activemask returned it": """
    activemask.b32 %r2;
    setp.ne.s32 %p2, %r2, -1;
    @%p2 bra $SKIP;
    mov.u32 %r3, -1;
    match.all.sync.b32 %r4|%p3, %r1, %r3;
    shfl.sync.idx.b32 %r1|%p4, %r1, 0, 31, 0xffffffff;
$SKIP:""",
    "the same with setp.eq and a negated branch": """
    activemask.b32 %r2;
    setp.eq.s32 %p2, %r2, -1;
    @!%p2 bra $SKIP;
    shfl.sync.idx.b32 %r1|%p4, %r1, 0, 31, -1;
$SKIP:""",
    "a sync under a branch on a match.all result": """
    activemask.b32 %r2;
    match.all.sync.b32 %r3|%p2, %r1, %r2;
    setp.eq.s32 %p3, %r3, 0;
    @%p3 bra $SKIP;
    @%p2 bra $SKIP;
    redux.sync.add.u32 %r1, %r1, %r2;
$SKIP:""",
    "two patterns in a row": """
    activemask.b32 %r2;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;
    @%p1 bra $NEXT;
    add.s32 %r1, %r1, 1;
$NEXT:
    activemask.b32 %r3;
    redux.sync.add.u32 %r1, %r1, %r3;""",
}


@pytest.mark.parametrize("body", ACCEPTED_PTX.values(), ids=ACCEPTED_PTX.keys())
def test_accepted_ptx(body):
    assert _hit(_ptx_fn(body)) is None


# ---------------------------------------------------------------------------------------------
# PTX: near misses, refused at the instruction named

REFUSED_PTX = {
    "constant -1": ("""
    activemask.b32 %r2;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, -1;""", "activemask.b32"),
    "constant 0xffffffff": ("""
    activemask.b32 %r2;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, 0xffffffff;""", "activemask.b32"),
    "a full mask in a register": ("""
    activemask.b32 %r2;
    mov.u32 %r2, -1;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;""", "activemask.b32"),
    "computed (and)": ("""
    activemask.b32 %r2;
    and.b32 %r3, %r2, 15;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r3;""", "activemask.b32"),
    "computed (ballot of the active mask)": ("""
    activemask.b32 %r2;
    vote.sync.ballot.b32 %r3, %p1, %r2;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r3;""", "shfl.sync.idx.b32"),
    "from the parameter": ("""
    activemask.b32 %r2;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r1;""", "activemask.b32"),
    "bar.sync beside the pattern": ("""
    activemask.b32 %r2;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;
    bar.sync 0;""", "bar.sync 0;"),
    "bar.warp.sync with a full mask": ("""
    activemask.b32 %r2;
    bar.warp.sync -1;""", "activemask.b32"),
    "a predicated sync": ("""
    activemask.b32 %r2;
    @%p1 shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;""", "activemask.b32"),
    "a predicated activemask": ("""
    @%p1 activemask.b32 %r2;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;""", "@%p1 activemask.b32"),
    "a predicated mov": ("""
    activemask.b32 %r2;
    @%p1 mov.b32 %r3, %r2;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r3;""", "activemask.b32"),
    "mask defined on one path only": ("""
    @%p1 bra $L;
    activemask.b32 %r2;
$L:
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;""", "activemask.b32"),
    "mask overwritten on one path": ("""
    activemask.b32 %r2;
    @%p1 bra $L;
    add.s32 %r2, %r2, 0;
$L:
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;""", "activemask.b32"),
    "the sync under an if": ("""
    activemask.b32 %r2;
    @%p1 bra $SKIP;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;
$SKIP:""", "activemask.b32"),
    "a return between": ("""
    activemask.b32 %r2;
    @%p1 ret;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;""", "activemask.b32"),
    "an exit between": ("""
    activemask.b32 %r2;
    @%p1 exit;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;""", "activemask.b32"),
    "the sync in a loop of data-dependent trip count": ("""
    activemask.b32 %r2;
    mov.u32 %r5, 0;
$LOOP:
    shfl.sync.bfly.b32 %r3|%p2, %r1, 1, 31, %r2;
    add.s32 %r5, %r5, 1;
    setp.lt.s32 %p3, %r5, %r1;
    @%p3 bra $LOOP;""", "activemask.b32"),
    "activemask in a loop, the sync after it": ("""
    mov.u32 %r5, 0;
$LOOP:
    activemask.b32 %r2;
    add.s32 %r5, %r5, 1;
    setp.lt.s32 %p3, %r5, %r1;
    @%p3 bra $LOOP;
    shfl.sync.bfly.b32 %r3|%p2, %r1, 1, 31, %r2;""", "activemask.b32"),
    "a copy made before the activemask ran again": ("""
    activemask.b32 %r4;
    mov.u32 %r5, 0;
$LOOP:
    activemask.b32 %r2;
    shfl.sync.bfly.b32 %r3|%p2, %r1, 1, 31, %r4;
    mov.b32 %r4, %r2;
    add.s32 %r5, %r5, 1;
    setp.lt.s32 %p3, %r5, %r1;
    @%p3 bra $LOOP;""", "activemask.b32"),
    "a nested scope's register of the same name": ("""
    activemask.b32 %r2;
    { .reg .b32 %r2;
      shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2; }""", "activemask.b32"),
    "the full mask where activemask did not return it": ("""
    activemask.b32 %r2;
    setp.eq.s32 %p2, %r2, -1;
    @%p2 bra $SKIP;
    shfl.sync.idx.b32 %r1|%p4, %r1, 0, 31, -1;
$SKIP:""", "activemask.b32"),
    "the full mask after a compare with another constant": ("""
    activemask.b32 %r2;
    setp.ne.s32 %p2, %r2, 65535;
    @%p2 bra $SKIP;
    shfl.sync.idx.b32 %r1|%p4, %r1, 0, 31, -1;
$SKIP:""", "activemask.b32"),
    "the full mask after the activemask ran again": ("""
    mov.u32 %r5, 0;
    activemask.b32 %r2;
    setp.ne.s32 %p2, %r2, -1;
    @%p2 bra $OUT;
$LOOP:
    activemask.b32 %r2;
    shfl.sync.idx.b32 %r1|%p4, %r1, 0, 31, -1;
    add.s32 %r5, %r5, 1;
    setp.lt.s32 %p3, %r5, %r1;
    @%p3 bra $LOOP;
$OUT:""", "activemask.b32"),
    "a sync under a branch on a match.any result (per lane)": ("""
    activemask.b32 %r2;
    match.any.sync.b32 %r3, %r1, %r2;
    setp.eq.s32 %p3, %r3, %r2;
    @%p3 bra $SKIP;
    redux.sync.add.u32 %r1, %r1, %r2;
$SKIP:""", "redux.sync"),
    # threads that went different ways before the activemask may be in its group
    "a sync under a branch on a join of two constants": ("""
    @%p1 bra $ONE;
    mov.u32 %r3, 0;
    bra.uni $JOIN;
$ONE:
    mov.u32 %r3, 1;
$JOIN:
    activemask.b32 %r2;
    setp.eq.s32 %p3, %r3, 0;
    @%p3 bra $SKIP;
    redux.sync.add.u32 %r1, %r1, %r2;
$SKIP:""", "activemask.b32"),
    # %r6 at the setp is the popc of another group (the first activemask's or this one's
    # in the previous iteration): the threads of this group may hold different values
    "a branch on a value of another activemask's group": ("""
    activemask.b32 %r2;
    bra.uni $Y;
$LOOP:
    activemask.b32 %r2;
    setp.eq.s32 %p3, %r6, 5;
    @%p3 bra $OUT;
    redux.sync.add.u32 %r1, %r1, %r2;
$Y:
    popc.b32 %r6, %r2;
    add.s32 %r1, %r1, 1;
    setp.lt.s32 %p4, %r1, 100;
    @%p4 bra $LOOP;
$OUT:""", "activemask.b32"),
    "the deprecated shfl (no membermask)": ("""
    activemask.b32 %r2;
    shfl.idx.b32 %r1|%p2, %r1, 0, 31;""", "activemask.b32"),
    "activemask alone": ("""
    activemask.b32 %r2;
    add.s32 %r1, %r1, %r2;""", "activemask.b32"),
}


@pytest.mark.parametrize("body, instruction", REFUSED_PTX.values(), ids=REFUSED_PTX.keys())
def test_near_miss_ptx_is_refused(body, instruction):
    """Refused, named by the first collective instruction of the function (as before the
    exemption: here the activemask, which feeds no proven sync), and no sync of the near
    miss proven."""
    hit = _hit(_ptx_fn(body))
    assert hit is not None and hit.instruction.startswith(instruction), hit
    mod = Module(_ptx_fn(body), "t")
    syncs = [st.start for st in mod.statements if st.kind == "instruction" and
             activemask._is_masked(parse_instruction(st, mod.text).opcode)]
    proven = activemask.proven(mod, mod.functions["f"])
    if "bar.sync" in body:   # the shfl is the pattern, the bar.sync is what is refused
        assert syncs[-1] in proven
    else:                    # the last membermask instruction is the near miss
        assert syncs[-1] not in proven if syncs else True


def test_an_indirect_branch_voids_the_proof():
    ptx = HEADER + """
.visible .func (.param .b32 r) f(.param .b32 a) {
    .reg .b32 %r<8>; .reg .pred %p<4>;
    ld.param.b32 %r1, [a];
    activemask.b32 %r2;
    ts: .branchtargets $A, $B;
    brx.idx %r1, ts;
$A:
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;
    bra.uni $B;
$B:
    st.param.b32 [r], %r1;
    ret;
}
"""
    assert _hit(ptx).instruction == "activemask.b32 %r2;"


def test_the_pattern_in_a_callee_is_accepted_and_a_near_miss_there_refused():
    def mod(mask):
        return Module(HEADER + f"""
.func (.param .b32 r) leaf(.param .b32 a) {{
    .reg .b32 %r<4>; .reg .pred %p<2>;
    ld.param.b32 %r1, [a];
    activemask.b32 %r2;
    shfl.sync.idx.b32 %r1|%p1, %r1, 0, 31, {mask};
    st.param.b32 [r], %r1; ret; }}
.visible .func (.param .b32 r) f(.param .b32 a) {{
    .reg .b32 %r<2>;
    {{ .param .b32 p; .param .b32 q; call.uni (q), leaf, (p); ld.param.b32 %r1, [q]; }}
    st.param.b32 [r], %r1; ret; }}
""", "t")
    assert collectives.find_collective(mod("%r2"), "f") is None
    hit = collectives.find_collective(mod("-1"), "f")
    assert hit.function == "leaf" and hit.chain == ("f", "leaf")


def test_the_sass_of_the_pattern_is_still_refused_in_a_binary_object():
    """Binary objects are checked in SASS, where the pattern is VOTE.ANY feeding a
    WARPSYNC/SHFL: splice does not prove it there, so a from_object call stays refused
    (the same source as PTX or CUDA C is accepted)."""
    from cuda.bindings import nvjitlink
    m = re.search(r"release (\d+)\.(\d+)", toolchain.ptxas_version())
    if (m and tuple(nvjitlink.version()) < (int(m.group(1)), int(m.group(2)))) or \
            toolchain.nvdisasm() is None:
        pytest.skip("needs nvJitLink as new as ptxas, and nvdisasm")
    cubin = toolchain.run_ptxas(_ptx_fn(ACCEPTED_PTX["shfl"]), ["-arch", "sm_90a", "-c"],
                                None, timeout=120, what="activemask object")
    hit = collectives.find_sass_collective(toolchain.disassemble(cubin), "f")
    assert hit is not None and hit[0].startswith(("VOTE", "WARPSYNC", "SHFL"))


# ---------------------------------------------------------------------------------------------
# CUDA C through NVRTC

AGG_SRC = r'''
__device__ __forceinline__ unsigned lane_id() {
    unsigned l; asm("mov.u32 %0, %%laneid;" : "=r"(l)); return l;
}
// A unique ticket per calling element: one atomicAdd per group of lanes that call together.
extern "C" __device__ int agg_ticket(int *counter, int v, int in_bounds) {
    if (!in_bounds || (v & 1)) return -1;              // the masked tail, odd values: no ticket
    unsigned mask = __activemask();
    unsigned lane = lane_id();
    int leader = __ffs(mask) - 1;
    int base = 0;
    if (lane == (unsigned)leader) base = atomicAdd(counter, __popc(mask));
    base = __shfl_sync(mask, base, leader);
    return base + __popc(mask & ((1u << lane) - 1u));
}
// A 16-bin histogram of the non-negative values: one atomicAdd per bin per group.
extern "C" __device__ int agg_hist(long long *hist, int v, int in_bounds) {
    if (!in_bounds || v < 0) return 0;
    unsigned mask = __activemask();
    int bin = v & 15;
    unsigned peers = __match_any_sync(mask, bin);
    if (lane_id() == (unsigned)(__ffs(peers) - 1))
        atomicAdd((unsigned long long *)hist + bin, (unsigned long long)__popc(peers));
    return __popc(peers);
}
'''

ACCEPTED_CUDA = {
    "ballot, any, all, reduce, syncwarp on the mask": r'''
    unsigned m = __activemask();
    int b = (int)__ballot_sync(m, x > 0) + __any_sync(m, x > 1) + __all_sync(m, x > 2);
    __syncwarp(m);
    return b + (int)__reduce_add_sync(m, (unsigned)x) + (int)__reduce_max_sync(m, (unsigned)x);''',
    "activemask in every iteration of a divergent loop": r'''
    int v = 0; for (int i = 0; i < (x & 7); ++i) {
    unsigned m = __activemask(); v += __shfl_xor_sync(m, x + i, 1); }
    return v;''',
    # NVSHMEM's nvshmem_<T>_g (nvshmemi_proxy_rma_g), in its shape: a full constant mask
    # under "activemask() == full", branches on match.all results, a lane-0-only spin
    "the coalesced get under activemask() == full": r'''
    const unsigned full = 0xffffffffu;
    const unsigned am = __activemask();
    unsigned lane; asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    int same_pe = 0, contiguous = 0;
    if (full == am && full == __match_all_sync(full, x >> 8, &same_pe) &&
        full == __match_all_sync(full, x - (int)lane, &contiguous)) {
        int off = -1;
        if (lane == 0) { off = atomicAdd(&g_head, 32); while (g_flag[off & 63] < 0) {} }
        off = __shfl_sync(am, off, 0);
        int v = g_buf[(off + lane) & 1023];
        __syncwarp(am);
        if (lane == 0) { __threadfence(); g_flag[off & 63] = -1; }
        return v;
    }
    return atomicAdd(&g_head, 1);''',
    "match_all then shfl on the mask": r'''
    unsigned m = __activemask(); int same;
    unsigned all = __match_all_sync(m, x >> 4, &same);
    int v = same ? x : x * 3;
    return __shfl_sync(m, v, __ffs(m) - 1) + (int)all;''',
}

REFUSED_CUDA = {
    "full mask": ("unsigned m = __activemask(); return __shfl_sync(0xffffffffu, x, 0) + (int)m;",
                  "activemask.b32"),
    "computed mask": ("return __shfl_sync(__activemask() & 0xffu, x, 0);", "activemask.b32"),
    "__syncwarp()": ("unsigned m = __activemask(); __syncwarp(); "
                     "return __shfl_sync(m, x, 0);", "bar.warp.sync"),
    "__syncthreads()": ("unsigned m = __activemask(); __syncthreads(); "
                        "return __shfl_sync(m, x, 0);", "bar.sync 0;"),
    "sync under an if": ("unsigned m = __activemask(); "
                         "if (x > 0) x = __shfl_sync(m, x, 0); return x;", "activemask.b32"),
    "return between": ("unsigned m = __activemask(); if (x < 0) return 0; "
                       "return __shfl_sync(m, x, 0);", "activemask.b32"),
    "data-dependent loop": ("unsigned m = __activemask(); int v = x; "
                            "for (int i = 0; i < (x & 7); ++i) v += __shfl_xor_sync(m, v, 1); "
                            "return v;", "activemask.b32"),
    "a full mask on the side where activemask() != full": (
        "unsigned am = __activemask(); int v = x; "
        "if (am != 0xffffffffu) v = __shfl_sync(0xffffffffu, x, 0); return v;",
        "activemask.b32"),
    "a full mask where activemask() == another constant": (
        "unsigned am = __activemask(); int v = x; "
        "if (am == 0xffffu) v = __shfl_sync(0xffffffffu, x, 0); return v;",
        "activemask.b32"),
    "a sync under a branch on a shfl result (per lane)": (
        "unsigned m = __activemask(); int v = __shfl_sync(m, x, 0); "
        "if (v == x) v += __reduce_add_sync(m, x); return v;", "redux.sync"),
}


GLOBALS = "__device__ int g_head; __device__ int g_flag[64]; __device__ int g_buf[1024];\n"


def _cuda_hit(body: str, params: str = "int x"):
    src = GLOBALS + f'extern "C" __device__ int f({params}) {{{body}}}\n'
    return collectives.find_collective(CudaSource(text=src, where="t.py:1",
                                                  providers=HEADER_PROVIDERS).module("sm_90"),
                                       "f")


@pytest.mark.parametrize("body", ACCEPTED_CUDA.values(), ids=ACCEPTED_CUDA.keys())
def test_accepted_cuda(body):
    assert _cuda_hit(body) is None


@pytest.mark.parametrize("body, instruction", REFUSED_CUDA.values(), ids=REFUSED_CUDA.keys())
def test_near_miss_cuda_is_refused(body, instruction):
    hit = _cuda_hit(body)
    assert hit is not None and instruction in hit.instruction, hit


def test_mask_from_a_parameter_is_refused():
    hit = _cuda_hit("return __shfl_sync(m, x, 0) + (int)__activemask();", "int x, unsigned m")
    assert hit is not None and "shfl.sync" in hit.instruction


def test_the_aggregated_atomics_are_accepted():
    mod = CudaSource(text=AGG_SRC, where="t.py:1", providers=HEADER_PROVIDERS).module("sm_90")
    assert "activemask.b32" in mod.text and "shfl.sync" in mod.text and "match.any" in mod.text
    assert collectives.find_collective(mod, "agg_ticket") is None
    assert collectives.find_collective(mod, "agg_hist") is None


# ---------------------------------------------------------------------------------------------
# Through the pipeline

_AGG = splice.library(source=AGG_SRC)
agg_ticket = _AGG.extern("agg_ticket", signature="int32(int32*, int32, int32)",
                         pure=False)
agg_hist = _AGG.extern("agg_hist", signature="int32(int64*, int32, int32)", pure=False)


@splice.kernel
def agg_kernel(x, counter, hist, tickets, sizes, n: int, TILE: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    ok = ct.astype(idx < n, ct.int32)
    ct.store(tickets, index=(ct.bid(0),), tile=agg_ticket(counter, t, ok))
    ct.store(sizes, index=(ct.bid(0),), tile=agg_hist(hist, t, ok))


@splice.kernel
def agg_2d_kernel(x, counter, hist, tickets, sizes, n: int, TM: ct.Constant[int],
                  TN: ct.Constant[int]):
    # 32 elements on a CTA of more threads: replicated, only the owner calls
    t = ct.load(x, index=(ct.bid(0), 0), shape=(TM, TN))
    row = ct.reshape(ct.bid(0) * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    idx = row * TN + ct.reshape(ct.arange(TN, dtype=ct.int32), (1, TN))
    ok = ct.astype(idx < n, ct.int32)
    ct.store(tickets, index=(ct.bid(0), 0), tile=agg_ticket(counter, t, ok))
    ct.store(sizes, index=(ct.bid(0), 0), tile=agg_hist(hist, t, ok))


def _agg_sig(tile):
    i32 = K.array(ct.int32)
    return K.signature(i32, i32, K.array(ct.int64), i32, i32, K.scalar(ct.int32), tile)


def _agg_2d_sig():
    i32 = K.array(ct.int32, 2)
    return K.signature(i32, K.array(ct.int32), K.array(ct.int64), i32, i32,
                       K.scalar(ct.int32), 4, 8)


def test_the_pipeline_builds_the_aggregated_atomics():
    for kernel, sig in ((agg_kernel, _agg_sig(128)), (agg_2d_kernel, _agg_2d_sig())):
        assert len(splice.build(kernel, sig, "sm_90").sites) == 2


def test_the_pipeline_refusal_is_unchanged_for_a_near_miss():
    src = ('extern "C" __device__ float g(float x) { unsigned m = __activemask(); '
           'return __shfl_sync(0xffffffffu, x, 0) + (float)m; }')
    ext = splice.extern(source=src, name="g", signature="float32(float32)")(lambda x: None)

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=ext(ct.load(x, index=(ct.bid(0),),
                                                         shape=(TILE,))))
    before = set(cache.entries("kernel"))
    with pytest.raises(splice.SpliceLinkError,
                       match=r"extern 'g' .* executes the warp-collective instruction "
                             r"'activemask\.b32 %r\d+;' in its own body \(PTX ISA 9.4 section "
                             r"9.7.15.12.*once per tile element.*scope=\"block\""):
        splice.build(kern, SIG, "sm_90")
    assert set(cache.entries("kernel")) == before


def test_check_element_sites_accepts_the_pattern():
    ext = agg_ticket._splice_extern
    frags = {ext.fragment.content_key("sm_90a"): ("d", ext.fragment.module("sm_90a"))}
    element_callees.check_element_sites([types.SimpleNamespace(extern=ext, where="k.py:1")],
                                    frags, "sm_90a")


# ---------------------------------------------------------------------------------------------
# GPU: exact results with divergent owner threads

def _check_agg(dev, x, n, counter, hist, tickets, sizes):
    xs = x.reshape(-1)[:n]
    want = (xs & 1) == 0
    got = dev.host(tickets).reshape(-1)[:n]
    count = int(dev.host(counter)[0])
    assert count == int(want.sum())
    assert np.array_equal(np.sort(got[want]), np.arange(count, dtype=np.int32))
    assert (got[~want] == -1).all()
    pos = xs >= 0
    assert np.array_equal(dev.host(hist), np.bincount(xs[pos] & 15, minlength=16))
    sz = dev.host(sizes).reshape(-1)[:n]
    assert (sz[~pos] == 0).all() and ((sz[pos] >= 1) & (sz[pos] <= 32)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [32, 128, 1024])
def test_gpu_aggregated_atomics_with_divergent_owners(dev, tile):
    torch = dev.torch
    n = 10007                                    # a masked tail in the last tile
    blocks = -(-n // tile)
    x = np.random.default_rng(tile).integers(-40, 40, n, dtype=np.int32)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    hist = torch.zeros(16, dtype=torch.int64, device="cuda")
    tickets = torch.empty(blocks * tile, dtype=torch.int32, device="cuda")
    sizes = torch.empty(blocks * tile, dtype=torch.int32, device="cuda")
    dev.launch((blocks,), agg_kernel, (dev.arr(x), counter, hist, tickets, sizes, n, tile))
    _check_agg(dev, x, n, counter, hist, tickets, sizes)


@pytest.mark.gpu
def test_gpu_aggregated_atomics_replicated_2d(dev):
    torch = dev.torch
    TM, TN, blocks = 4, 8, 64
    n = TM * TN * blocks - 5                     # the last 5 elements are masked by n
    x = np.random.default_rng(3).integers(-40, 40, (TM * blocks, TN), dtype=np.int32)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    hist = torch.zeros(16, dtype=torch.int64, device="cuda")
    tickets = torch.empty((TM * blocks, TN), dtype=torch.int32, device="cuda")
    sizes = torch.empty((TM * blocks, TN), dtype=torch.int32, device="cuda")
    dev.launch((blocks,), agg_2d_kernel, (dev.arr(x), counter, hist, tickets, sizes, n, TM,
                                          TN))
    _check_agg(dev, x, n, counter, hist, tickets, sizes)


# ---------------------------------------------------------------------------------------------
# Near misses of the pattern (labels, older groups' ballots, device debug) and its hints

def _hit_body(body: str):
    """The collective the check finds in a function of ``body``."""
    return collectives.find_collective(Module(_ptx_fn(body), "t"), "f")


# ptxas resolves a branch to the label of its own block: here lanes with %p1 go to the
# first block's L and on to OUT, skipping the shfl that waits for the whole group (checked
# with ptxas 13.4 + nvdisasm: '@P0 BRA' jumps past the SHFL). One name for all blocks sent
# both branches to the second L, in front of the shfl, and the function was accepted.
SIBLING_LABELS = """
    activemask.b32 %r2;
    {
    @%p1 bra L;
    bra.uni M;
L:
    bra.uni OUT;
    }
M:
    {
L:
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;
    }
OUT:"""


def test_a_branch_goes_to_the_label_of_its_own_block():
    hit = _hit_body(SIBLING_LABELS)
    assert hit is not None and hit.instruction == "activemask.b32 %r2;", hit


def test_a_branch_to_a_label_the_graph_cannot_find_voids_the_proof():
    mod = Module(_ptx_fn("""
    activemask.b32 %r2;
    @%p1 bra $ELSEWHERE;
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;"""), "t")
    assert activemask.proven(mod, mod.functions["f"]) == frozenset()


@pytest.mark.parametrize("second", ["add.s32 %r1, %r1, 2;", "bra.uni L;"])
def test_one_label_name_in_two_inline_asm_blocks_is_still_accepted(second):
    """Inline asm used twice declares its label in two sibling blocks: each branch
    resolved in its own block, both reach the shfl, accepted as before."""
    assert _hit_body(f"""
    activemask.b32 %r2;
    {{ @%p1 bra L; add.s32 %r1, %r1, 1; L: }}
    {{ @%p1 bra L; {second} L: }}
    shfl.sync.idx.b32 %r1|%p2, %r1, 0, 31, %r2;""") is None


# The shfl's mask comes from the first activemask B (first iteration) or from A (the
# second). The branch after A tests a ballot of B's group: uniform over B's group, not over
# A's. Lanes 0 (r1 == 1) and 1-2 (r1 != 1) executing B apart hold ballots 1 and 0; all
# three may execute A together (mask 0b111); then lane 0 leaves and lanes 1-2 wait in the
# shfl for it forever (test_activemask_model.py runs it in its model warp). Accepted while
# a guard counted as uniform when its activemasks were any of the sync's, not the one of
# the region.



def test_a_branch_uniform_over_an_older_group_is_not_uniform_over_the_new_one():
    hit = _hit_body(OLDER_GROUPS_BALLOT)
    assert hit is not None and hit.instruction.startswith("shfl.sync"), hit


def test_the_same_loop_branching_on_the_new_groups_ballot_is_accepted():
    assert _hit_body(OLDER_GROUPS_BALLOT.replace(
        "    setp.ne.s32 %p3, %r5, 0;",
        "    vote.sync.ballot.b32 %r7, %p6, %r2;\n    setp.ne.s32 %p3, %r7, 0;")) is None


# ---------------------------------------------------------------------------------------------
# The refusal says what the pattern needs, when the instruction could be part of it

def _refusal(body: str, options=()) -> str:
    import types

    import splice
    src = f'extern "C" __device__ int g(int x) {{ {body} }}'
    ext = splice.extern(source=src, name="g", signature="int32(int32)", pure=False,
                        options=options)(lambda x: None)._splice_extern
    frags = {ext.fragment.content_key("sm_90"): ("d", ext.fragment.module("sm_90"))}
    with pytest.raises(splice.SpliceLinkError) as e:
        element_callees.check_element_sites([types.SimpleNamespace(extern=ext, where="k.py:7")],
                                        frags, "sm_90")
    return str(e.value)


@pytest.mark.parametrize("body", [
    "unsigned m = __activemask(); if (x < 0) return 0; return __shfl_sync(m, x, 0);",
    "return __shfl_sync(__activemask() & 0xffu, x, 0);",
    "return __shfl_sync(0xffffffffu, x, 0);",
])
def test_a_near_miss_says_what_the_pattern_needs(body):
    msg = _refusal(body)
    assert "extern 'g' (declared at " in msg and "called at k.py:7" in msg
    assert "scope=\"block\"" in msg
    assert "opportunistic pattern, which splice could not prove here" in msg
    assert "__activemask() taken in the same function" in msg


def test_the_pattern_under_device_debug_says_why():
    """-G compiles __activemask() and __shfl_sync as functions of their own, the mask a
    parameter: refused (the proof is within one function), and the message says so."""
    msg = _refusal("unsigned m = __activemask(); return __shfl_sync(m, x, 0);", ("-G",))
    assert "not under -G" in msg


def test_a_cta_barrier_gets_no_pattern_hint():
    msg = _refusal("__syncthreads(); return x;")
    assert "bar.sync" in msg and "opportunistic" not in msg


# ---------------------------------------------------------------------------------------------
# The pattern called, not inlined (inline="never"): the proof is on the callee's body, which
# is now a real .func call from divergent owner threads

TICKET_SRC = r'''
extern "C" __device__ int ticket_never(int *counter, int v, int in_bounds) {
    if (!in_bounds || (v & 1)) return -1;
    unsigned mask = __activemask();
    unsigned lane; asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    int leader = __ffs(mask) - 1;
    int base = 0;
    if (lane == (unsigned)leader) base = atomicAdd(counter, __popc(mask));
    base = __shfl_sync(mask, base, leader);
    return base + __popc(mask & ((1u << lane) - 1u));
}
'''


def _ticket_kernel():
    import cuda.tile as ct

    import splice
    ticket = splice.extern(source=TICKET_SRC, name="ticket_never",
                           signature="int32(int32*, int32, int32)", pure=False,
                           inline="never")(lambda c, v, ok: None)

    @splice.kernel
    def ticket_never_kernel(x, counter, tickets, n: int, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
        idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
        ok = ct.astype(idx < n, ct.int32)
        ct.store(tickets, index=(ct.bid(0),), tile=ticket(counter, t, ok))
    return ticket_never_kernel


def _ticket_sig(tile):
    import cuda.tile as ct

    from support import kernels as K
    i32 = K.array(ct.int32)
    return K.signature(i32, i32, i32, K.scalar(ct.int32), tile)


def test_the_pattern_builds_as_a_call():
    import splice
    b = splice.build(_ticket_kernel(), _ticket_sig(128), "sm_90")
    [site] = b.sites
    assert not site.inlined and site.why_not_inlined == 'inline="never"'


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [32, 1024])
def test_gpu_the_pattern_as_a_call_with_divergent_owners(dev, tile):
    import numpy as np
    torch = dev.torch
    n = 5003
    blocks = -(-n // tile)
    x = np.random.default_rng(tile).integers(-40, 40, n, dtype=np.int32)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    tickets = torch.empty(blocks * tile, dtype=torch.int32, device="cuda")
    dev.launch((blocks,), _ticket_kernel(), (dev.arr(x), counter, tickets, n, tile))
    want = (x & 1) == 0
    got = dev.host(tickets).reshape(-1)[:n]
    count = int(dev.host(counter)[0])
    assert count == int(want.sum())
    assert np.array_equal(np.sort(got[want]), np.arange(count, dtype=np.int32))
    assert (got[~want] == -1).all()
