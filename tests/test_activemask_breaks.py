"""Attempts to get a wrong opportunistic-pattern program accepted (splice/activemask.py),
each a near miss that must stay refused, and the nearby correct forms that must stay
accepted. CPU only: hand-written PTX through the collectives check."""

import pytest

from splice import activemask, collectives
from splice.ptx import Module
from support.activemask import OLDER_GROUPS_BALLOT, ptx_fn as _ptx_fn

def _hit(body: str):
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
    hit = _hit(SIBLING_LABELS)
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
    assert _hit(f"""
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
    hit = _hit(OLDER_GROUPS_BALLOT)
    assert hit is not None and hit.instruction.startswith("shfl.sync"), hit


def test_the_same_loop_branching_on_the_new_groups_ballot_is_accepted():
    assert _hit(OLDER_GROUPS_BALLOT.replace(
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
        collectives.check_element_sites([types.SimpleNamespace(extern=ext, where="k.py:7")],
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
