"""PTX for the active-mask proof's tests: a device function wrapping a body, and the forms
more than one test file checks."""

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def ptx_fn(body: str) -> str:
    """``f(a) -> r``: ``%r1`` = a, ``%p1`` = a > 0, then ``body``, then return ``%r1``."""
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


# A loop whose shfl mask comes from an older activemask B on the first pass and a newer one
# A after; after A, a branch tests a ballot of B's group: uniform over B's group, not over
# A's (splice accepted it once; test_activemask_model.py shows its deadlock).
OLDER_GROUPS_BALLOT = """
    activemask.b32 %r2;
    setp.eq.s32 %p6, %r1, 1;
    vote.sync.ballot.b32 %r5, %p6, %r2;
    mov.u32 %r6, 0;
$LOOP:
    shfl.sync.idx.b32 %r9|%p2, %r1, 0, 31, %r2;
    add.s32 %r6, %r6, 1;
    setp.gt.s32 %p4, %r6, 1;
    @%p4 bra $END;
    activemask.b32 %r2;
    setp.ne.s32 %p3, %r5, 0;
    @%p3 bra $END;
    bra.uni $LOOP;
$END:"""
