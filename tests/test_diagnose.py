"""Where each piece of the merged PTX came from (splice.ptxtools.spans), and ptxas errors said in
terms of it (splice.diagnose): a fragment, a call site's call sequence, the kernel's own
PTX."""

import dataclasses

import cuda.tile as ct
import pytest
from hypothesis import given
from hypothesis import strategies as st

import splice
from splice.driver import diagnose
from splice.errors import SpliceLinkError, SpliceToolchainError
from splice.forms.rewrite import splice_calls
from splice.ptxtools import link
from splice.ptxtools.ptx import Module, Param, apply_edits
from splice.ptxtools.spans import Generated, Span, span_at, spans_of_edits
from splice.system import toolchain
from support import kernels as K
from support.ptx_interp import HEADER
from support.sites import callee_ptx, site_call

# --------------------------------------------------------------------------- spans of edits

@st.composite
def edited_texts(draw):
    """A text of numbered lines and non-overlapping edits of it, some of them Generated
    (each with a unique owner, several lines, or none)."""
    lines = draw(st.integers(1, 30))
    text = "".join(f"line {i};\n" for i in range(lines))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    edits = []
    for k, (a, b) in enumerate(zip(cuts[::2], cuts[1::2])):
        body = "\n".join(f"g{k}.{j}" for j in range(draw(st.integers(1, 4))))
        new = Generated(f"<{body}>", f"owner {k}", "call", k, 0) if draw(st.booleans()) else \
            draw(st.sampled_from(["", "x", "x\ny\n", "\n"]))
        edits.append((a, b, new))
    return text, edits


@given(edited_texts())
def test_spans_of_edits_are_where_apply_edits_puts_the_text(case):
    text, edits = case
    out = apply_edits(text, edits)
    spans = spans_of_edits(text, edits)
    generated = [new for _a, _b, new in edits if isinstance(new, Generated)]
    assert [s.owner for s in spans] == [g.owner for g in generated]
    for span, g in zip(spans, generated):
        at = out.index(g)    # unique: "<g<k>.0" names it
        assert span.start_line == out.count("\n", 0, at) + 1
        assert span.end_line == out.count("\n", 0, at + len(g)) + 1
        assert g in span.text(out)


def test_span_at_picks_the_smallest_holding_span():
    outer = Span(3, 20, "outer", "block call", 0, 0)
    inner = Span(5, 9, "inner", "call", 0, 0)
    assert span_at([outer, inner], 6) is inner
    assert span_at([outer, inner], 4) is outer
    assert span_at([outer, inner], 21) is None


# --------------------------------------------------------------------------- rewriter, linker

def _kernel(extra: str = "") -> str:
    """Two sites, site 0 twice (once guarded), and ``extra`` before the ret."""
    return (HEADER + ".visible .global .align 4 .b8 __splice_marker_0[4];\n"
            ".visible .global .align 4 .b8 __splice_marker_1[4];\n"
            ".visible .entry k(.param .u64 k_p0)\n{\n\t.reg .pred %p<2>;\n"
            "\t.reg .b32 %r<9>;\n\t.reg .b64 %rd<9>;\n\t.reg .f32 %f<4>;\n"
            "\tld.param.u64 \t%rd2, [k_p0];\n"
            "\tmov.u64 \t%rd1, __splice_marker_0;\n"
            "\tatom.global.cas.b32 \t%r2, [%rd1], %r1, 0;\n"
            "\tsetp.ne.s32 \t%p1, %r2, 0;\n"
            "\t@%p1 atom.global.cas.b32 \t%r3, [__splice_marker_0], %r2, 0;\n"
            "\tatom.global.cas.b32 \t%r4, [__splice_marker_1], %r3, 0;\n"
            "\tst.global.b32 \t[%rd2], %r4;\n" + extra + "\tret;\n}\n")


SITES = {i: site_call(i, "float32(float32)") for i in (0, 1)}


def _callees(extra: str = "") -> Module:
    return Module(HEADER + "".join(callee_ptx(s) for s in SITES.values()).replace(
        "\tret;", extra + "\tret;", 1))


def test_rewriter_spans_are_the_call_sequences():
    report = splice_calls(Module(_kernel()), SITES, kernel_name="k")
    assert [(s.kind, s.owner, s.site, s.instance) for s in report.spans] == [
        ("call", "callee0 at test:0", 0, 0), ("call", "callee0 at test:0", 0, 1),
        ("call", "callee1 at test:1", 1, 0)]
    for span in report.spans:
        lines = span.text(report.ptx).split("\n")
        assert lines[0].strip() == (f"{{ // splice: call callee{span.site} at test:"
                                    f"{span.site} (site {span.site}, instance "
                                    f"{span.instance})")
        assert lines[-1] == "\t} // splice: end call"
        assert sum(f"call (__splice_r), callee{span.site}," in ln for ln in lines) == 1
    # nothing outside the spans calls
    outside = [ln for i, ln in enumerate(report.ptx.split("\n"), 1)
               if span_at(report.spans, i) is None]
    assert not any("call" in ln.split("//")[0] for ln in outside)


def test_merged_spans_move_with_the_inserted_fragments():
    report = splice_calls(Module(_kernel()), SITES, kernel_name="k")
    linked = link.prepare(report.module, [("the callees", _callees())], "k",
                          frozenset({"callee0", "callee1"}))
    merged = link.insert(report.module, linked, "k", report.spans)
    kinds = [s.kind for s in merged.spans]
    assert kinds == ["splice", "fragment", "call", "call", "call"]
    protos, frag, *calls = merged.spans
    assert protos.owner == "splice's prototypes of the fragments' functions"
    assert protos.text(merged.text).count(".visible .func") == 2
    text = frag.text(merged.text).split("\n")
    assert frag.owner == "the callees"
    assert text[0] == "// splice: begin the callees" and text[-1] == "// splice: end the callees"
    assert sum(ln.startswith(".visible .func") for ln in text) == 2
    # the rewriter's spans: the same text, further down
    for before, after in zip(report.spans, calls):
        assert after.text(merged.text) == before.text(report.ptx)
        assert after.start_line - before.start_line == \
            merged.text.count("\n") - report.ptx.count("\n")
    assert link.merge(report.module, [("the callees", _callees())], "k").text == merged.text


# --------------------------------------------------------------------------- ptxas errors

BAD = "\tfma.f32 \t%f1, %f2, %f3, %f1;\n"    # no rounding modifier: ptxas refuses it
UNPARSED = "\tfoo bar baz;\n"     # not PTX: ptxas's "fatal : Parsing error", not an "error"


def _ptxas_error(case: str) -> str:
    kernel, callees, sites = _kernel(), _callees(), dict(SITES)
    if case == "kernel":
        kernel = _kernel(BAD)
    elif case == "fragment":
        callees = _callees("\t.reg .f32 %f<4>;\n" + BAD)
    elif case == "fragment syntax":
        callees = _callees(UNPARSED)
    else:   # the call passes a .b64 where the callee takes a .b32
        sites[1] = dataclasses.replace(
            sites[1], params=(Param("x", ".param .b64", None, ".b64", ".param"),))
    report = splice_calls(Module(kernel), sites, kernel_name="k")
    merged = link.insert(report.module, link.prepare(report.module, [("the callees", callees)],
                                                     "k", frozenset({"callee0", "callee1"})),
                         "k", report.spans)
    with pytest.raises(SpliceToolchainError) as e:
        toolchain.run_ptxas(merged.text, ["-arch", "sm_90a"], None, timeout=120, what="k")
    out = diagnose.explain_ptxas_failure(e.value, merged.text, merged.spans, "kernel 'k'")
    assert isinstance(out, SpliceToolchainError) and out.log == e.value.log
    return out.message


@pytest.mark.parametrize("case, where, line", [
    ("fragment", "the callees", "fma.f32 \t%f1, %f2, %f3, %f1;"),
    ("fragment syntax", "the callees", "foo bar baz;"),
    ("call", "the call sequence splice generated for callee1 at test:1 (site 1, instance 0)",
     "call (__splice_r), callee1, (__splice_p0);"),
    ("kernel", "the kernel's own PTX (tileiras output)", "fma.f32 \t%f1, %f2, %f3, %f1;"),
])
def test_ptxas_error_names_the_code_that_wrote_the_line(case, where, line):
    msg = _ptxas_error(case)
    notes = msg.split("\n")[1:]
    assert notes and len(notes) % 2 == 0
    for note in notes[1::2]:
        assert note == f"      in {where}: {line}"


def test_shared_memory_by_the_code_that_declares_it():
    report = splice_calls(Module(_kernel().replace(
        ".visible .entry", ".shared .align 4 .b8 own[64];\n.visible .entry")), SITES,
        kernel_name="k")
    callees = Module(HEADER + ".shared .align 4 .b8 buf[1000];\n" +
                     "".join(callee_ptx(s) for s in SITES.values()))
    merged = link.insert(report.module, link.prepare(report.module, [("the callees", callees)],
                                                     "k", frozenset({"callee0", "callee1"})),
                         "k", report.spans)
    err = SpliceToolchainError("ptxas rejected", "ptxas error   : Entry function 'k' uses "
                               "too much shared data (0x3000c bytes, 0xc000 max)")
    out = diagnose.explain_ptxas_failure(err, merged.text, merged.spans, "kernel 'k'")
    assert isinstance(out, SpliceLinkError)
    assert "(static shared memory by declaration: the callees: 1000 bytes; the kernel's own " \
           "PTX (tileiras output): 64 bytes)" in out.message


# --------------------------------------------------------------------------- a build

def test_build_spans_of_a_compiled_kernel():
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.array(ct.float32),
                      K.scalar(ct.float32), 128)
    b = splice.compile(K.saxpy_call_kernel, sig, "sm_90")
    [site] = b.sites
    calls = [s for s in b.spans if s.kind == "call"]
    assert [(s.site, s.instance) for s in calls] == [(0, k) for k in range(site.instances)]
    for span in calls:
        assert span.owner == f"saxpy at {site.where}"
        assert "call (__splice_r), saxpy," in span.text(b.spliced_ptx)
    [frag] = [s for s in b.spans if s.kind == "fragment"]
    assert frag.text(b.spliced_ptx).startswith(f"// splice: begin {frag.owner}\n")
    assert "CUDA C source declared at" in frag.owner and "kernels.py" in frag.owner
    assert ".visible .func" in frag.text(b.spliced_ptx)
    assert not splice.build(K.saxpy_call_kernel, sig, "sm_90").spans   # no stages kept


# --------------------------------------------------------------------------- NVRTC errors

def test_nvrtc_error_in_generated_code_names_the_extern():
    @splice.extern(source='extern "C" __device__ float from_int(int x) { return x; }',
                   signature="float32(float32)")
    def from_int(x): ...

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=from_int(t))
    with pytest.raises(splice.SpliceCompileError) as e:
        splice.compile(kern, K.signature(K.array(ct.float32), K.array(ct.float32), 128),
                       "sm_90")
    assert "\n    in the code splice generated for extern 'from_int' (declared at " \
           f"{__file__}:" in e.value.message
    assert "static_assert" in e.value.message.split("in the code splice generated")[1]


def test_generated_blocks_own_their_lines():
    from splice.inputs.checks import Declared, generated_blocks, owner_of_line
    from splice.types import parse_signature
    declared = [Declared("f", None, parse_signature("float16(float16)"), "a.py:1"),
                Declared("g0", "ns::g", parse_signature("float32(float32)"), "a.py:2")]
    blocks = generated_blocks(declared)
    code = "".join(text for _, text in blocks).split("\n")
    owners = [owner_of_line(blocks, n) for n in range(1, len(code))]
    assert owners[0] is None and code[0] == "#include <cuda_fp16.h>"
    first_f, first_g = owners.index("'f' (declared at a.py:1)"), \
        owners.index("'ns::g' (declared at a.py:2)")
    assert set(owners[first_f:first_g]) == {"'f' (declared at a.py:1)"}
    assert set(owners[first_g:]) == {"'ns::g' (declared at a.py:2)"}
    assert "ns::g" in code[first_g + 1] + code[first_g + 2]
    assert owner_of_line(blocks, len(code)) is None
