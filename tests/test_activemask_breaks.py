"""Attempts to get a wrong opportunistic-pattern program accepted (splice/activemask.py),
each a near miss that must stay refused, and the nearby correct forms that must stay
accepted. CPU only: hand-written PTX through the collectives check."""

import pytest

from splice import activemask, collectives
from splice.ptx import Module

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def _ptx_fn(body: str) -> str:
    return HEADER + f"""
.visible .func (.param .b32 r) f(.param .b32 a) {{
    .reg .b32 %r<16>; .reg .pred %p<8>;
    ld.param.b32 %r1, [a];
    setp.gt.s32 %p1, %r1, 0;
{body}
    st.param.b32 [r], %r1;
    ret;
}}
"""


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
