"""The PTX rewriter: unit tests on hand-written PTX and generated (hypothesis) kernels.

Properties checked on every generated kernel:
- every marker instance is replaced exactly once, per site;
- every byte outside the replaced statements is unchanged;
- the output re-parses and holds no marker symbol;
- (on a sample) ptxas accepts the output merged with callee definitions.
"""

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splice.errors import SpliceRewriteError
from splice.forms.rewrite import splice_calls
from splice.ptxtools import link
from splice.ptxtools.ptx import Module, split_statements
from splice.system import toolchain
from splice.types import parse_signature
from support import fuzz
from support.ptx_interp import HEADER
from support.sites import callee_ptx, site_call, with_calls_replaced

SIGS = {
    0: "float32(float32)",
    1: "float32(float32, float32)",
    2: "int32(int32, int16, uint8)",
    3: "float64(float64, float64)",
    4: "void(int64, uint32)",
    5: "float16(float16, bool)",
}


def _marker_width(idx):
    return parse_signature(SIGS[idx]).marker_bits


# --------------------------------------------------------------------------- generator

REG = {32: "%r", 64: "%rd"}

filler_stmt = st.sampled_from([
    "\tadd.s32 \t%r1, %r2, %r3;\n",
    "\tmov.u32 \t%r4, %tid.x;\n",
    "\t.loc\t1 12 4\n",
    "\t// a comment with __splice_marker_99 inside is not a marker\n",
    "\t/* block\n comment */\n",
    "\tsetp.ne.s32 \t%p1, %r1, 0;\n",
    "\t@%p1 add.s64 \t%rd3, %rd4, 8;\n",
    "\tld.global.v4.b32 \t{%r5, %r6, %r7, %r8}, [%rd5];\n",
    "\tmov.b64 \t{%r9, %r10}, %rd6;\n",
    "\t.pragma \"nounroll\";\n",
    "\tst.shared.v2.b32 \t[%r11+16], {%r1, %r2};\n",
    "    add.f32   %f1,%f2 ,  %f3 ;\n",
    "\tbar.sync \t0;\n",
    "\t{\n\t.reg .b32 %inner;\n\tmov.b32 %inner, 1;\n\t}\n",
])


@st.composite
def kernels(draw):
    """A generated kernel: (pieces, sites used, instance count per site). Each piece is
    ("filler", text) or ("marker", text) for a marker instance."""
    n_sites = draw(st.integers(1, 4))
    site_ids = draw(st.lists(st.sampled_from(sorted(SIGS)), min_size=n_sites,
                             max_size=n_sites, unique=True))
    # pure sites with a result may have the fma marker (key load, xor-blinded slots, fma)
    markers = {i: draw(st.sampled_from(["atomic", "fma"])) if not SIGS[i].startswith("void")
               else "atomic" for i in site_ids}
    pieces = []
    counts = {i: 0 for i in site_ids}
    widths = {i: 64 if markers[i] == "fma" else _marker_width(i) for i in site_ids}
    globals_ = "".join(
        f".visible .global .align {widths[i] // 8} .b8 __splice_marker_{i}"
        f"[{widths[i] // 8}];\n" for i in site_ids)
    pieces.append(("filler", HEADER + globals_ + "\n.visible .entry k(\n\t.param .u64 k_p0\n)\n"
                   ".reqntid 128\n{\n\t.reg .pred %p<4>;\n\t.reg .b32 %r<40>;\n"
                   "\t.reg .b64 %rd<40>;\n\t.reg .f32 %f<8>;\n\t.reg .b64 %rdk<40>;\n"
                   "\t.reg .b64 %rdx<400>;\n"))
    addr_reg = {}
    keys = {}
    for i in site_ids:
        addr_reg[i] = f"%rd{20 + i}"
        mov = draw(st.sampled_from(["mov.u64", "mov.b64"]))
        pieces.append(("filler", f"\t{mov} \t%rd{20 + i}, __splice_marker_{i};\n"))
        if draw(st.booleans()):
            # an extra cvta hop, as generic addressing would produce
            pieces.append(("filler", f"\tcvta.global.u64 \t%rd{30 + i}, %rd{20 + i};\n"))
            addr_reg[i] = f"%rd{30 + i}"
        if markers[i] == "fma":
            direct = draw(st.booleans())
            addr = f"[__splice_marker_{i}]" if direct else f"[{addr_reg[i]}]"
            pieces.append(("key", f"\tld.global.b64 \t%rdk{i}, {addr};\n"))
            keys[i] = [f"%rdk{i}"]
            if draw(st.booleans()):  # a copy of the key, as register allocation makes
                pieces.append(("keyuse", f"\tmov.b64 \t%rdk{20 + i}, %rdk{i};\n"))
                keys[i].append(f"%rdk{20 + i}")
    blinded = [0]
    results = {i: [] for i in site_ids}   # unblinded result registers of fma sites
    n_stmts = draw(st.integers(1, 30))
    label = 0
    for _ in range(n_stmts):
        kind = draw(st.sampled_from(["filler", "marker", "marker", "label", "loop"]))
        if kind == "filler":
            pieces.append(("filler", draw(filler_stmt)))
        elif kind == "label":
            label += 1
            pieces.append(("filler", f"$L__BB0_{label}:\n"))
        elif kind == "loop":
            label += 1
            pieces.append(("filler", f"$L__loop{label}:\n"))
            pieces.append(("filler", f"\t@%p2 bra \t$L__loop{label};\n"))
        else:
            i = draw(st.sampled_from(site_ids))
            if markers[i] == "fma":
                key = draw(st.sampled_from(keys[i]))
                slots = []
                for _ in range(2):
                    if draw(st.integers(0, 3)) == 0:
                        slots.append(key)          # a zero slot: xor(0, K) folds to K
                        continue
                    blinded[0] += 1
                    b = f"%rdx{blinded[0]}"
                    src = f"%rd{draw(st.integers(1, 9))}" if draw(st.booleans()) else \
                        str(draw(st.integers(0, 2 ** 64 - 1)))
                    x, y = (key, src) if draw(st.booleans()) else (src, key)
                    masked = draw(st.integers(0, 2)) == 0
                    if masked:
                        # a masked load: the key where the element is masked off (xor(0, K)
                        # folds to K), the blinded value where it is loaded
                        other = draw(st.sampled_from(keys[i]))
                        if draw(st.booleans()):
                            pieces.append(("keyuse", f"\tmov.b64 \t{b}, {other};\n"))
                        else:  # the key loaded straight into the blinded register
                            # (not the key on every path: the load becomes mov 0)
                            pieces.append(("keyzero", f"\tld.global.b64 \t{b}, "
                                                      f"[__splice_marker_{i}];\n"))
                        pieces.append(("filler", f"\t@%p1 bra \t$Lm{blinded[0]};\n"))
                    pieces.append(("keyuse", f"\txor.b64 \t{b}, {x}, {y};\n"))
                    if masked:
                        pieces.append(("filler", f"$Lm{blinded[0]}:\n"))
                    slots.append(b)
                if results[i] and draw(st.integers(0, 3)) == 0:
                    # the result of an earlier call as slot 0: LLVM cancels the key of its
                    # unblinding against the key of this blinding (acc = f(acc, x))
                    slots[0] = draw(st.sampled_from(results[i]))
                mul = (slots[0], key) if draw(st.booleans()) else (key, slots[0])
                guard = draw(st.sampled_from(["", "@%p1 ", "@!%p3 "]))
                unblind = not guard and draw(st.booleans())
                if unblind:  # a result register of its own, unblinded, then stored
                    blinded[0] += 1
                    dest = f"%rdx{blinded[0]}"
                else:
                    dest = f"%rd{draw(st.integers(10, 19))}"
                pieces.append(("marker", f"\t{guard}fma.rn.f64 \t{dest}, {mul[0]}, {mul[1]}, "
                                         f"{slots[1]};\n", (slots[0], slots[1])))
                counts[i] += 1
                if unblind:
                    results[i].append(dest)
                    blinded[0] += 1
                    u = f"%rdx{blinded[0]}"
                    x, y = (dest, key) if draw(st.booleans()) else (key, dest)
                    pieces.append(("keyuse", f"\txor.b64 \t{u}, {x}, {y};\n"))
                    pieces.append(("filler", f"\tst.global.b64 \t[%rd3], {u};\n"))
                continue
            w = _marker_width(i)
            reg = REG[w]
            ops = []
            for _ in range(2):
                if draw(st.booleans()):
                    ops.append(f"{reg}{draw(st.integers(1, 9))}")
                else:
                    ops.append(str(draw(st.integers(0, 2 ** w - 1))))
            dest = draw(st.sampled_from([f"{reg}{draw(st.integers(10, 19))}", "_"])) \
                if SIGS[i].startswith("void") else f"{reg}{draw(st.integers(10, 19))}"
            guard = draw(st.sampled_from(["", "@%p1 ", "@!%p3 "]))
            sem = draw(st.sampled_from(["", ".relaxed.gpu", ".acq_rel", ".acq_rel.gpu"]))
            direct = draw(st.integers(0, 4)) == 0
            addr = f"[__splice_marker_{i}]" if direct else f"[{addr_reg[i]}]"
            sp = draw(st.sampled_from([" \t", " ", "\t\t"]))
            pieces.append(("marker", f"\t{guard}atom.global{sem}.cas.b{w}{sp}{dest}, {addr}, "
                                     f"{ops[0]}, {ops[1]};\n", (ops[0], ops[1])))
            counts[i] += 1
    pieces.append(("filler", "\tret;\n}\n"))
    return pieces, markers, counts


def _strip_rewrites(report) -> str:
    """The output with the lines of every call sequence (the report's spans) replaced by a
    sentinel."""
    return with_calls_replaced(report.ptx, report.spans)


def _expected(pieces) -> str:
    out = []
    for kind, text, *_ in pieces:
        if kind in ("key", "keyuse", "keyzero"):  # a key load; an instruction reading a key
            out.append(text[:len(text) - len(text.lstrip())] + f"<{kind}>\n")
        elif kind == "marker":
            lead = text[:len(text) - len(text.lstrip())]
            out.append(lead.rstrip("\t ") + "<M>" + "\n")
        else:
            out.append(text)
    return "".join(out)


def _normalise_removed(text):
    text = re.sub(r"// splice: load of the key of site \d+ removed \(the key is 0\)", "<key>",
                  text)
    text = re.sub(r"mov\.b64 \t\S+, 0; // splice: the key of site \d+ \(0\)", "<keyzero>",
                  text)
    text = re.sub(r"mov\.b64 \t\S+, \S+; // splice: (?:copy of|xor with) the key of site \d+ "
                  r"\(0\)", "<keyuse>", text)
    text = re.sub(r"[^\n]*// splice: marker address removed", "<A>", text)
    text = re.sub(r"// splice: marker global of site \d+ removed", "<G>", text)
    return text


def _expected_norm(pieces):
    exp = _expected(pieces)
    exp = re.sub(r"\t(?:mov\.[ub]64|cvta\.global\.u64) \t%rd\d+, (?:__splice_marker_\d+|%rd\d+);",
                 "<A>", exp)
    exp = re.sub(r"\.visible \.global \.align \d \.b8 __splice_marker_\d+\[\d\];", "<G>", exp)
    return exp


_ptxas_checked = {"n": 0}


@settings(max_examples=fuzz.examples("SPLICE_FUZZ_EXAMPLES", 1000), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kernels())
def test_generated_kernels(case):
    pieces, markers, counts = case
    site_ids = list(markers)
    text = "".join(t for _, t, *_ in pieces)
    sites = {i: site_call(i, SIGS[i], markers[i]) for i in site_ids}
    report = splice_calls(Module(text), sites, kernel_name="k")
    for i in site_ids:
        assert report.found.get(i, 0) == counts[i]
        assert report.replaced.get(i, 0) == counts[i]
    out = report.ptx
    mod = Module(out)
    for s in mod.statements:
        assert not any("__splice_marker" in t.text for t in s.tokens)
    # each call takes the marker's slot operands: for an fma marker the multiplicand that
    # is not the key (a register that is the key on one path only is a slot) and the addend
    want = [tuple("0" if re.fullmatch(r"%rdk\d+", r) else r for r in slots)
            for kind, _t, *rest in pieces if kind == "marker" for slots in rest]
    got = re.findall(r"mov\.b\d+ \t%__splice_s0, (\S+);\n\tmov\.b\d+ \t%__splice_s1, (\S+);",
                     out)
    assert got == want
    # one span per call sequence: each site's instances numbered in text order
    for i in site_ids:
        assert [s.instance for s in report.spans if s.site == i] == list(range(counts[i]))
    assert all(s.kind == "call" for s in report.spans)
    # byte-identical outside the rewritten statements
    got = _normalise_removed(_strip_rewrites(report))
    lead_fixed = re.sub(r"[ \t]*<M>", "<M>", got)
    exp = re.sub(r"[ \t]*<M>", "<M>", _expected_norm(pieces))
    assert lead_fixed == exp
    # a sample goes through ptxas, merged with callee definitions
    if _ptxas_checked["n"] < int(os.environ.get("SPLICE_FUZZ_PTXAS", "25")) and \
            sum(counts.values()):
        _ptxas_checked["n"] += 1
        frag = Module(HEADER + "".join(callee_ptx(sites[i]) for i in site_ids))
        merged = link.merge(mod, [("generated callees", frag)], "k").text
        toolchain.run_ptxas(merged, ["-arch", "sm_90a"], None, timeout=120, what="fuzz case")


# --------------------------------------------------------------------------- hand-written

def _kernel(body, globals_=".visible .global .align 4 .b8 __splice_marker_0[4];\n"):
    return (HEADER + globals_ + ".visible .entry k()\n{\n\t.reg .b32 %r<9>;\n"
            "\t.reg .b64 %rd<9>;\n\t.reg .pred %p<3>;\n" + body + "\tret;\n}\n")


SITE0 = {0: site_call(0, SIGS[0])}


def test_basic_marker_becomes_call():
    src = _kernel("\tmov.u64 \t%rd1, __splice_marker_0;\n"
                  "\tatom.global.cas.b32 \t%r2, [%rd1], %r1, 0;\n"
                  "\tst.global.b32 \t[%rd2], %r2;\n")
    out = splice_calls(Module(src), SITE0, kernel_name="k").ptx
    assert "call (__splice_r), callee0, (__splice_p0);" in out
    assert "ld.param.b32 \t%r2, [__splice_r];" in out
    assert "st.global.b32 \t[%rd2], %r2;" in out
    assert "__splice_marker_0" not in out


@pytest.mark.parametrize("guard, branch", [("@%p1", "@!%p1 bra"), ("@!%p1", "@%p1 bra")])
def test_guarded_marker_branches_around_the_call(guard, branch):
    # st.param/ld.param cannot be predicated: the guard becomes a branch over the sequence
    src = _kernel("\tmov.u64 \t%rd1, __splice_marker_0;\n"
                  f"\t{guard} atom.global.cas.b32 \t%r2, [%rd1], %r1, 0;\n")
    report = splice_calls(Module(src), SITE0, kernel_name="k")
    [span] = report.spans
    lines = span.text(report.ptx).splitlines()
    assert lines[0].strip().startswith("{") and lines[-1].strip().startswith("}")
    instrs = [ln.strip() for ln in lines[1:-1] if not ln.strip().startswith(".")]
    assert instrs[0].startswith(branch + " \t$__splice_skip_0_0")
    assert instrs[-1] == "$__splice_skip_0_0:"
    assert not any(i.startswith("@") for i in instrs[1:])


def test_unknown_site_is_an_error():
    src = _kernel("\tmov.u64 \t%rd1, __splice_marker_7;\n"
                  "\tatom.global.cas.b32 \t%r2, [%rd1], %r1, 0;\n",
                  ".visible .global .align 4 .b8 __splice_marker_7[4];\n")
    with pytest.raises(SpliceRewriteError, match="unknown call site 7"):
        splice_calls(Module(src), SITE0, kernel_name="k")


@pytest.mark.parametrize("body, needle", [
    ("\tmov.u64 \t%rd1, __splice_marker_0;\n\tld.global.b32 \t%r2, [%rd1];\n",
     "a load of the marker of a call that is not pure"),
    ("\tmov.u64 \t%rd1, __splice_marker_0;\n\tatom.global.cas.b32 \t%r2, [%rd1+4], %r1, 0;\n",
     "offset 4"),
    ("\tmov.u64 \t%rd1, __splice_marker_0;\n\tadd.s64 \t%rd2, %rd1, 0;\n"
     "\tatom.global.cas.b32 \t%r2, [%rd2], %r1, 0;\n", "not a marker"),
    ("\tmov.u64 \t%rd1, __splice_marker_0;\n\tmov.u64 \t%rd1, %rd5;\n"
     "\tatom.global.cas.b32 \t%r2, [%rd1], %r1, 0;\n", "also written by other instructions"),
    ("\tmov.u64 \t%rd1, __splice_marker_0;\n\tatom.global.cas.b32 \t%r2, [%rd3], %rd1, 0;\n",
     "used as a data operand"),
    ("\tmov.u64 \t%rd1, __splice_marker_0;\n\tatom.global.add.u32 \t%r2, [%rd1], 1;\n",
     "not a marker"),
    ("\tmov.u64 \t%rd1, __splice_marker_0;\n\tatom.global.cas.b64 \t%rd2, [%rd1], %rd3, 0;\n",
     "expected .b32"),
    ("\tmov.u64 \t%rd1, __splice_marker_0;\n\tst.global.b64 \t[%rd4], %rd1;\n",
     "not a marker"),
])
def test_unprovable_markers_are_errors(body, needle):
    with pytest.raises(SpliceRewriteError, match=re.escape(needle)):
        splice_calls(Module(_kernel(body)), SITE0, kernel_name="k")


def test_reserved_names_in_the_kernel_are_refused():
    src = _kernel("\t{\n\t.reg .b32 %__splice_s0;\n\t}\n")
    with pytest.raises(SpliceRewriteError, match="reserved prefix"):
        splice_calls(Module(src), SITE0, kernel_name="k")


def test_marker_outside_instructions():
    src = _kernel("\t.reg .b64 __splice_marker_0x;\n")  # an identifier that contains it
    splice_calls(Module(src), SITE0, kernel_name="k")  # not the marker symbol: fine


def test_user_atomic_cas_is_left_alone():
    src = _kernel("\tld.param.u64 \t%rd3, [k_p];\n"
                  "\tatom.global.cas.b32 \t%r2, [%rd3], %r1, 0;\n")
    rep = splice_calls(Module(src), SITE0, kernel_name="k")
    assert "atom.global.cas.b32 \t%r2, [%rd3], %r1, 0;" in rep.ptx
    assert rep.total == 0


# --------------------------------------------------------------------------- parser

@pytest.mark.parametrize("bad, needle", [
    ("{", "not closed"),
    ("}", "unbalanced"),
    (".visible .func f()\n{\n\tret;\n", "not closed"),
    ("/* never closed", "unterminated /* comment"),
    ('.file 1 "x', "unterminated string"),
    ("\tadd.s32 %r1, %r2, %r3", "unterminated statement"),
    ("\u00e9", "unexpected character"),
])
def test_malformed_ptx(bad, needle):
    from splice.ptxtools.ptx import PTXSyntaxError
    with pytest.raises(PTXSyntaxError, match=re.escape(needle)):
        Module(HEADER + bad)


@pytest.mark.parametrize("text, where", [
    ("   \t/* open", "unterminated /* comment at line 1, column 5"),
    ("\n  \"x", "unterminated string at line 2, column 3"),
    ("  \u00e9", "unexpected character '\u00e9' at line 1, column 3"),
    ("mov %r1, 1; \t #", "unexpected character '#' at line 1, column 15"),
])
def test_tokenizer_errors_point_past_the_whitespace(text, where):
    # the token pattern takes the whitespace before a token in the same match
    from splice.ptxtools.ptx import PTXSyntaxError, tokenize
    with pytest.raises(PTXSyntaxError, match=re.escape(where)):
        list(tokenize(text))


def test_tokens_start_after_whitespace_and_comments():
    from splice.ptxtools.ptx import tokenize
    text = "  mov.b32 \t%r1, /* c */ 0f3F800000; // end\n\t \n"
    toks = list(tokenize(text))
    assert [t if isinstance(t, str) else (t.kind, t.text) for t in toks] == [
        ("ident", "mov.b32"), ("reg", "%r1"), ("punct", ","), ("number", "0f3F800000"),
        ("punct", ";"), "\n", "\n"]
    assert all(text[t.start:t.end] == t.text for t in toks if not isinstance(t, str))


def test_statements_keep_exact_spans():
    text = HEADER + _kernel("\t@!%p1 bra \t$L1;\n$L1:\n\tmov.b64 \t{%r1, %r2}, %rd1;\n")
    for s in split_statements(text):
        assert text[s.start:s.end].strip()


# --------------------------------------------------------------------------- fma markers

FMA_GLOBALS = (".visible .global .align 8 .b8 __splice_marker_0[8];\n"
               ".visible .global .align 8 .b8 __splice_marker_1[8];\n")
FMA_SITES = {0: site_call(0, SIGS[1], "fma"), 1: site_call(1, SIGS[3], "fma")}


def _fma_kernel(body):
    return _kernel(body, FMA_GLOBALS)


def test_fma_marker_becomes_call_with_key_zero():
    src = _fma_kernel("\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
                      "\txor.b64 \t%rd2, %rd1, %rd5;\n"
                      "\tfma.rn.f64 \t%rd3, %rd1, %rd2, %rd1;\n"
                      "\tst.global.b64 \t[%rd6], %rd3;\n")
    report = splice_calls(Module(src), FMA_SITES, kernel_name="k")
    out = report.ptx
    assert report.found == {0: 1} and report.replaced == {0: 1}
    assert "// splice: load of the key of site 0 removed (the key is 0)" in out
    # slot 0: the multiplicand that is not the key; slot 1: the addend (the key: 0)
    assert "mov.b64 \t%__splice_s0, %rd2;" in out and "mov.b64 \t%__splice_s1, 0;" in out
    # an xor with the key (0) is a move, which ptxas folds
    assert "mov.b64 \t%rd2, %rd5; // splice: xor with the key of site 0 (0)" in out
    assert "__splice_marker" not in out and "%rd1" not in out.split("removed (the key")[1]


@pytest.mark.parametrize("body, needle, sites", [
    # LLVM sank two sites' markers from the arms of a branch: one key register, two loads
    ("\t@%p1 bra \t$L1;\n\tld.global.b64 \t%rd1, [__splice_marker_0];\n\tbra.uni \t$L2;\n"
     "$L1:\n\tld.global.b64 \t%rd1, [__splice_marker_1];\n$L2:\n"
     "\tfma.rn.f64 \t%rd3, %rd2, %rd1, %rd1;\n", "holds the keys of sites", {0, 1}),
    ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n\tst.global.b64 \t[%rd6], %rd1;\n",
     "not a marker", {0}),
    ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n\txor.b64 \t%rd2, %rd1, %rd5;\n"
     "\tadd.s64 \t%rd4, %rd2, 1;\n", "not a marker", {0}),
    # the key only as the addend
    ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n\txor.b64 \t%rd2, %rd1, %rd5;\n"
     "\tfma.rn.f64 \t%rd3, %rd2, %rd2, %rd1;\n", "not a marker", {0}),
    # two keys' values combined: the key cancels
    ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n\txor.b64 \t%rd2, %rd1, %rd5;\n"
     "\txor.b64 \t%rd4, %rd2, %rd1;\n\tfma.rn.f64 \t%rd3, %rd4, %rd1, %rd1;\n",
     "combined by xor", {0}),
    ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n\tld.global.b64 \t%rd2, "
     "[__splice_marker_1];\n\tfma.rn.f64 \t%rd3, %rd2, %rd1, %rd1;\n", "mixes the values",
     {0, 1}),
    # a blinded register also written by a non-marker instruction on another path
    ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n\txor.b64 \t%rd2, %rd1, %rd5;\n"
     "\t@%p1 mov.b64 \t%rd2, %rd7;\n\tfma.rn.f64 \t%rd3, %rd2, %rd1, %rd1;\n",
     "also written by other instructions", {0}),
    # neither multiplicand is the key on every path: which one is the key?
    ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n\txor.b64 \t%rd2, %rd1, %rd5;\n"
     "\tmov.b64 \t%rd4, %rd1;\n\tmov.b64 \t%rd4, %rd2;\n\tfma.rn.f64 \t%rd3, %rd4, %rd2, "
     "%rd1;\n", "not a marker", {0}),
    ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
     "\tfma.rn.ftz.f64 \t%rd3, %rd1, %rd1, %rd1;\n", "not a marker", {0}),
])
def test_unprovable_fma_markers_name_their_sites(body, needle, sites):
    refused = splice_calls(Module(_fma_kernel(body)), FMA_SITES, kernel_name="k").refused
    assert refused is not None and needle in refused.message, refused
    assert refused.sites == sites


def test_atomic_marker_of_an_fma_site_is_an_error():
    src = _fma_kernel("\tatom.global.cas.b64 \t%rd2, [__splice_marker_0], %rd1, 0;\n")
    refused = splice_calls(Module(src), FMA_SITES, kernel_name="k").refused
    assert refused is not None and "not a load of its key" in refused.message


def test_fma_marker_after_a_masked_load_takes_the_blinded_register():
    # Regression (silently wrong on the H200 before the fix): where a tile's element is
    # masked off, LLVM folds xor(0, K) to K, so the blinded register is a copy of the key on
    # that path and a blinded value on the other. It is slot 0, not the key: the call got 0
    # for every element of the second vector of each thread.
    src = _fma_kernel("\tld.global.b64 \t%rd5, [__splice_marker_0];\n"
                      "\tmov.b64 \t%rd4, %rd5;\n"
                      "\t@%p1 bra \t$L__BB0_6;\n"
                      "\txor.b64 \t%rd4, %rd5, %rd2;\n"
                      "$L__BB0_6:\n"
                      "\tfma.rn.f64 \t%rd7, %rd4, %rd5, %rd5;\n"
                      "\tfma.rn.f64 \t%rd8, %rd5, %rd4, %rd5;\n")
    out = splice_calls(Module(src), FMA_SITES, kernel_name="k").ptx
    assert out.count("mov.b64 \t%__splice_s0, %rd4;") == 2
    assert "mov.b64 \t%__splice_s0, %rd5;" not in out


def test_key_load_into_a_register_that_is_also_blinded_becomes_zero():
    # Regression: a key load whose register an xor also writes on another path is read as
    # a blinded value (here slot 0); deleting the load left it undefined where p is true.
    src = _fma_kernel("\tld.global.b64 \t%rd4, [__splice_marker_0];\n"
                      "\tld.global.b64 \t%rd5, [__splice_marker_0];\n"
                      "\t@%p1 bra \t$L__BB0_6;\n"
                      "\txor.b64 \t%rd4, %rd5, %rd2;\n"
                      "$L__BB0_6:\n"
                      "\tfma.rn.f64 \t%rd7, %rd4, %rd5, %rd5;\n")
    out = splice_calls(Module(src), FMA_SITES, kernel_name="k").ptx
    assert "mov.b64 \t%rd4, 0; // splice: the key of site 0 (0)" in out
    assert "mov.b64 \t%__splice_s0, %rd4;" in out
    assert "mov.b64 \t%__splice_s1, 0;" in out


@pytest.mark.parametrize("body", [
    "\tld.global.v2.b64 \t{%rd1, %rd2}, [__splice_marker_0];\n",
    "\tld.global.L1::evict_last.b64 \t%rd1, [__splice_marker_0];\n",
    "\tld.global.b32 \t%r1, [__splice_marker_0];\n",
    "\tmov.u64 \t%rd1, __splice_marker_0;\n\tst.global.b64 \t[%rd1], %rd2;\n",
])
def test_other_forms_of_an_fma_sites_marker_fall_back(body):
    # any unexpected use of an fma site's marker global names the site, so that the pipeline
    # gives it the atomic marker instead of failing the build
    refused = splice_calls(Module(_fma_kernel(body)), FMA_SITES, kernel_name="k").refused
    assert refused is not None and refused.sites == {0}
