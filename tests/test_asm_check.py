"""The rules ``splice.asm_check`` proves of a snippet: control never leaves it, every output
is written on every path to its end, and a block- or warpgroup-scope snippet is
straight-line code (the snippet text here has its operands replaced, as ``AsmSpec.body``
does: ``$0`` is ``%a0``)."""

import cuda.tile as ct
import pytest

import splice
from splice.ptxtools.asm_check import SnippetFault, check_snippet
from support import kernels as K

RESERVED = ["%a0", "%a1", "%a2", "%t32", "%t64", "%c64"]
SEL = "setp.lt.f32 p, %a1, 0f00000000;"


def _check(body, outputs=("%a0",)):
    check_snippet(body, list(outputs), RESERVED)


@pytest.mark.parametrize("body, needle", [
    ("mov.f32 %a0, %a1; ret;", "'ret' leaves the snippet"),
    ("mov.f32 %a0, %a1; @%p ret;", "'@%p ret' leaves the snippet"),
    ("{ .reg .pred p; " + SEL + " mov.f32 %a0, %a1; @!p ret; }", "'@!p ret' leaves"),
    ("mov.f32 %a0, %a1; exit;", "'exit' leaves the snippet"),
    ("mov.f32 %a0, %a1; bra OUT;", "OUT branches to a label the snippet does not define"),
    ("{ .reg .pred p; " + SEL + " @p bra.uni OUT; mov.f32 %a0, %a1; }", "OUT branches"),
    ("{ .reg .b32 i; mov.u32 i, 0; ts: .branchtargets A, X; brx.idx i, ts; "
     "A: mov.f32 %a0, %a1; }", "X is not a label of the snippet"),
    ("{ .reg .b32 i; mov.u32 i, 0; brx.idx i, elsewhere; A: mov.f32 %a0, %a1; }",
     "target list elsewhere"),
    ("call f, (%a1); ret;", "'ret' leaves"),
    ("", "$0 are not written"),
    ("add.f32 %a1, %a1, 0f3F800000;", "$0 are not written"),
    ("add.f32 %a1, %a0, 0f3F800000;", "$0 are not written"),         # only read
    ("st.global.f32 [%a0], %a1;", "$0 are not written"),              # [ ] is no destination
    ("{ .reg .pred p; " + SEL + " @p mov.f32 %a0, 0f00000000; }", "$0 are not written"),
    # the predicate changes between the two guarded writes: no complementary pair
    ("{ .reg .pred p; " + SEL + " @p mov.f32 %a0, 0f00000000; setp.gt.f32 p, %a1, "
     "0f00000000; @!p mov.f32 %a0, %a1; }", "$0 are not written"),
    ("{ .reg .pred p; " + SEL + " @p bra L; mov.f32 %a0, %a1; L: }", "$0 are not written"),
    ("{ .reg .f32 %a0; mov.f32 %a0, %a1; }", "declares %a0"),          # shadows the output
    ("{ .reg .f32 %a<2>; mov.f32 %a0, %a1; }", "declares %a0"),
    ("{ .reg .b32 %t<40>; mov.f32 %a0, %a1; }", "declares %t32"),
    ("{ .shared .f32 s; mov.f32 %a0, %a1; }", "declares a .shared variable"),
    ("} mov.f32 %a0, %a1; {", "not a sequence of PTX statements"),
    ("mov.f32 %a0, %a1", "not a sequence of PTX statements"),
    (".func foo(); mov.f32 %a0, %a1;", "is not an instruction"),
    (".global .f32 g; mov.f32 %a0, %a1;", "does not belong in a function body"),
])
def test_snippet_refused(body, needle):
    with pytest.raises(SnippetFault) as e:
        _check(body)
    assert needle in str(e.value)


def test_vector_output_written_in_part_is_refused():
    with pytest.raises(SnippetFault, match=r"\$0 are not written"):
        _check("mov.b64 {%a1, %t32}, %a2;", ("%a0", "%a1"))


@pytest.mark.parametrize("body, outputs", [
    ("mov.f32 %a0, %a1;", ("%a0",)),
    ("mov.b64 {%a1, %a0}, %a2;", ("%a0", "%a1")),
    ("setp.lt.f32 %a0|%a1, %a2, 0f00000000;", ("%a0", "%a1")),
    ("call (%a0), f, (%a1);", ("%a0",)),
    ("{ .reg .pred p; " + SEL + " @p mov.f32 %a0, 0f00000000; @!p mov.f32 %a0, %a1; }",
     ("%a0",)),
    ("{ .reg .pred %p; setp.lt.f32 %p, %a1, 0f00000000; @!%p mov.f32 %a0, %a1; "
     "@%p mov.f32 %a0, 0f00000000; }", ("%a0",)),
    ("{ .reg .pred p; " + SEL + " @p bra L; mov.f32 %a0, %a1; bra E; "
     "L: mov.f32 %a0, 0f00000000; E: }", ("%a0",)),
    ("{ .reg .b32 i; mov.u32 i, 0; ts: .branchtargets A, B; brx.idx i, ts; "
     "A: mov.f32 %a0, %a1; bra E; B: mov.f32 %a0, %a1; E: }", ("%a0",)),
    # a loop that writes the output before its exit test
    ("{ .reg .pred p; L: mov.f32 %a0, %a1; " + SEL + " @p bra L; }", ("%a0",)),
    ("L: mov.f32 %a0, %a1; bra L;", ("%a0",)),        # never reaches its end
    ("red.global.add.u64 [%a0], 1;", ()),
    ("{ .local .b32 s; st.local.b32 [s], %a1; ld.local.b32 %a0, [s]; }", ("%a0",)),
])
def test_snippet_accepted(body, outputs):
    _check(body, outputs)


# ---------------------------------------------------------------------------------------------
# Straight-line code: block- and warpgroup-scope snippets


@pytest.mark.parametrize("body, needle", [
    ("{ .reg .pred p; " + SEL + " mov.f32 %a0, %a1; @p bra DONE; add.f32 %a0, %a1, %a1; "
     "DONE: }", "has 'bra'"),                          # an element snippet may do this
    ("{ .reg .b32 i; mov.u32 i, 0; ts: .branchtargets A; brx.idx i, ts; "
     "A: mov.f32 %a0, %a1; }", "has a label"),
    ("call (%a0), f, (%a1);", "has 'call'"),
    ("mov.f32 %a0, %a1; @%p ret;", "has 'ret'"),       # rule 3 is named, not rule 1
    ("mov.f32 %a0, %a1; exit;", "has 'exit'"),
    ("mov.f32 %a0, %a1; L: ", "has a label"),
])
@pytest.mark.parametrize("scope", ["block", "warpgroup"])
def test_cooperative_snippet_with_control_flow_refused(body, needle, scope):
    with pytest.raises(SnippetFault) as e:
        check_snippet(body, ["%a0"], RESERVED, straight_line=scope)
    assert f"a {scope}-scope snippet must be straight-line PTX" in str(e.value)
    assert needle in str(e.value)


@pytest.mark.parametrize("body", [
    "shfl.sync.idx.b32 %a0, %a1, 0, 31, -1;",
    "{ .reg .pred p; " + SEL + " @p mov.f32 %a0, 0f00000000; @!p mov.f32 %a0, %a1; }",
    "mov.f32 %a0, %a1; // bra L; ret; L:",              # in a comment: no statement
    "/* exit; */ mov.f32 %a0, %a1;",
])
def test_straight_line_cooperative_snippet_accepted(body):
    check_snippet(body, ["%a0"], RESERVED, straight_line="block")


@pytest.mark.parametrize("scope", ["block", "warpgroup"])
def test_cooperative_snippet_declaring_shared_memory_names_its_scope(scope):
    # not the element-scope reason (every thread of the block sharing one variable is what
    # a cooperative snippet may want): the fix is CUDA C at the snippet's scope
    with pytest.raises(SnippetFault) as e:
        check_snippet("{ .shared .f32 s; mov.f32 %a0, %a1; }", ["%a0"], RESERVED,
                      straight_line=scope)
    msg = str(e.value)
    assert f"not support in a {scope}-scope snippet" in msg and "per-element" not in msg
    assert f'CUDA C with scope="{scope}"' in msg


def test_straight_line_mode_keeps_the_other_rules():
    with pytest.raises(SnippetFault, match=r"\$0 are not written"):
        check_snippet("{ .reg .pred p; " + SEL + " @p mov.f32 %a0, 0f00000000; }", ["%a0"],
                      RESERVED, straight_line="block")


i32 = ct.int32
ConstInt = ct.Constant[int]


@splice.kernel
def asm_branch_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    s = splice.asm("{ .reg .pred p; setp.eq.s32 p, $1, 0; mov.b32 $0, $1; @p bra DONE; "
                   "add.s32 $0, $1, 1; DONE: }", ct.bid(0), dtype=i32, scope="block")
    ct.store(y, index=(ct.bid(0),), tile=t + s)


@splice.kernel
def asm_packed_block_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.asm("mov.b32 $0, $1;", t, dtype=i32,
                                                    pack=2, scope="block"))


def test_the_front_end_proves_cooperative_snippets_straight_line():
    sig = K.signature(K.array(i32), K.array(i32), 128)
    with pytest.raises(splice.SpliceCallError, match=r"block-scope snippet must be "
                                                     r"straight-line PTX.*'bra'") as e:
        splice.compile(asm_branch_kernel, sig, "sm_90")
    assert "test_asm_check.py" in str(e.value)          # the call site
    with pytest.raises(splice.SpliceCallError, match=r"pack=2 packs tile elements; a "
                                                     r"block-scope snippet takes scalars"):
        splice.compile(asm_packed_block_kernel, sig, "sm_90")
