"""The rewriter's last check (``rewrite._verify``): the rewritten PTX parses, holds no marker
symbol in any statement, and exactly as many new calls as markers replaced. It scans only the
statements where the text spells a marker name; the Tile IR text tileiras embeds in its PTX
(an opaque section) spells them and must not count."""

import pytest

from splice.errors import SpliceRewriteError
from splice.forms import rewrite
from support.sites import fma_sites

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
BODY = ".visible .entry k(\n\t.param .u64 k_p0\n)\n{\n\t.reg .b64 %rd<8>;\n{}\tret;\n}\n"


def _kernel(body: str, extra: str = "") -> str:
    return HEAD + extra + BODY.replace("{}", body, 1)


@pytest.mark.parametrize("body", [
    "\tmov.u64 \t%rd1, __splice_marker_0;\n",
    "\tatom.global.cas.b64 \t%rd2, [__splice_marker_3], %rd1, 0;\n",
    "\t@%p1 ld.global.b64 \t%rd2, [__splice_marker_12];\n",
])
def test_a_marker_left_in_a_statement_is_an_error(body):
    with pytest.raises(SpliceRewriteError, match="marker symbol is left"):
        rewrite._verify(_kernel(body), fma_sites(), 0, 0, "k")


TILE_IR = (".nv_intermediate_source_section {\n  .code_block {\n    .ir_name: \"tile ir\"\n"
           "    .source_begin\nglobal  @__splice_marker_0 alignment = 8 <i64: 0> : tile<1xi64>\n"
           "  %2 = get_global @__splice_marker_0 : tile<ptr<i64>>\n    .source_end\n  }\n}\n")


def test_marker_names_in_comments_and_embedded_tile_ir_are_not_statements():
    src = _kernel("\t// was __splice_marker_0\n\tmov.u64 \t%rd1, 0;\n",
                  "// global @__splice_marker_0 alignment = 8\n") + TILE_IR
    assert rewrite._verify(src, fma_sites(), 0, 0, "k").entries()


def test_a_marker_global_left_beside_embedded_tile_ir_is_an_error():
    src = _kernel("", ".visible .global .align 8 .b8 __splice_marker_0[8];\n") + TILE_IR
    with pytest.raises(SpliceRewriteError, match="marker symbol is left"):
        rewrite._verify(src, fma_sites(), 0, 0, "k")


def test_new_calls_must_match_the_markers_replaced():
    with pytest.raises(SpliceRewriteError, match="1 markers replaced by calls but the "
                                                 "rewritten PTX has 0 new calls"):
        rewrite._verify(_kernel("\tmov.u64 \t%rd1, 0;\n"), fma_sites(), 1, 0, "k")


def test_only_the_parameter_lists_count_a_call_as_the_rewriters():
    # a callee splice generated is named __splice_...; called without parameters (a tile
    # call: its tiles are in shared memory) it passes none of splice's and is not counted,
    # as the rewriter does not count it among the markers it replaced by calls
    import dataclasses

    from splice.ptxtools.ptx import Module
    site = dataclasses.replace(fma_sites()[0], callee="__splice_tile_0_call")
    decl = ".visible .func __splice_tile_0_call();\n"
    bare = Module(_kernel("\tcall __splice_tile_0_call, ();\n", decl))
    assert rewrite._count_calls(bare, {0: site}) == 0
    passed = Module(_kernel("\t{\n\t.param .b64 __splice_p0;\n\tst.param.b64 [__splice_p0], "
                            "%rd1;\n\tcall __splice_tile_0_call, (__splice_p0);\n\t}\n",
                            decl.replace("()", "(.param .b64 a)")))
    assert rewrite._count_calls(passed, {0: site}) == 1
