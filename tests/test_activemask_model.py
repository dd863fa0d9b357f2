"""splice.activemask's proof against a model warp (tests/support/warp_model.py): every
random function the collectives check accepts must run without a deadlock under every
schedule of independent thread scheduling (any lanes waiting at an activemask may execute
it together), for random per-lane inputs. The model itself is checked on known deadlocks,
so that the sweep can fail. CPU only."""

import pytest

from splice.analysis import collectives
from splice.ptxtools.ptx import Module
from support import warp_model as W
from support.activemask import OLDER_GROUPS_BALLOT

# A sync under a per-lane if.
UNDER_AN_IF = """
    activemask.b32 %r2;
    @%p1 bra $S;
    shfl.sync.idx.b32 %r9|%p7, %r1, 0, 31, %r2;
$S:"""

# A branch on a ballot of an older activemask's group (see test_activemask_breaks.py),
# which splice accepted: the model shows its deadlock.


THE_PATTERN = """
    activemask.b32 %r2;
    @%p1 bra $J;
    add.s32 %r1, %r1, 1;
$J:
    shfl.sync.idx.b32 %r9|%p7, %r1, 0, 31, %r2;"""


def _fn(body: str) -> str:
    return W.HEADER + f"""
.visible .func (.param .b32 r) f(.param .b32 a, .param .b32 b) {{
    .reg .b32 %r<16>; .reg .pred %p<8>;
    ld.param.b32 %r1, [a];
    ld.param.b32 %r8, [b];
    setp.ne.s32 %p1, %r8, 0;
{body}
    st.param.b32 [r], %r1;
    ret;
}}
"""


def _accepted(ptx: str) -> bool:
    return collectives.find_collective(Module(ptx, "t"), "f") is None


@pytest.mark.parametrize("body", [UNDER_AN_IF, OLDER_GROUPS_BALLOT])
def test_the_model_finds_the_deadlock_and_splice_refuses_it(body):
    assert "deadlock" in (W.errors(_fn(body), 0, trials=24) or "")
    assert not _accepted(_fn(body))


def test_the_model_runs_the_pattern_without_a_deadlock():
    assert W.errors(_fn(THE_PATTERN), 0, trials=24) is None
    assert _accepted(_fn(THE_PATTERN))


def test_every_accepted_random_program_runs_without_a_deadlock():
    accepted = 0
    for seed in range(2000):
        ptx = W.program(seed)
        if "activemask" not in ptx or not _accepted(ptx):
            continue
        accepted += 1
        err = W.errors(ptx, seed)
        assert err is None, f"seed {seed}: accepted, but {err}\n{ptx}"
    assert accepted >= 15    # the sweep is not vacuous
