"""ptx.Body: one function's statements parsed once, with its defs and labels, memoised per
module (the rewriter's forms and the inliner share it)."""

from splice.ptxtools.ptx import Module

TEXT = """.version 8.0
.target sm_90a
.address_size 64
.visible .func f()
{
\t.reg .b32 %r<4>;
\tmov.u32 \t%r1, %tid.x;
$L_top:
\tadd.s32 \t%r1, %r1, 1;
\tsetp.lt.s32 \t%p1, %r1, 8;
\t@%p1 bra \t$L_top;
\tret;
}
"""


def test_body_is_parsed_once_per_module_and_function():
    mod = Module(TEXT)
    fn = mod.functions["f"]
    body = mod.body(fn)
    assert mod.body(fn) is body
    assert Module(TEXT).body(Module(TEXT).functions["f"]) is not body


def test_body_defs_and_labels():
    mod = Module(TEXT)
    body = mod.body(mod.functions["f"])
    kinds = [s.kind for s in body.statements]
    assert kinds.count("label") == 1 and body.labels == {"$L_top": kinds.index("label")}
    opcodes = [None if ins is None else ins.opcode for _s, ins in body.parsed]
    assert [opcodes[i] for i in body.defs["%r1"]] == ["mov.u32", "add.s32"]
    assert [opcodes[i] for i in body.defs["%p1"]] == ["setp.lt.s32"]
    assert body.defs["%r9"] == []
    assert all((ins is None) == (s.kind != "instruction") for s, ins in body.parsed)
