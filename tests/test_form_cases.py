"""Golden per-form cases (tests/corpus/forms/, made by tests/corpus/make_form_cases.py): real
tileiras PTX for sm_80, sm_90 and sm_100 with one form's call sites in, the rewritten PTX
checked in FileCheck style out. Each case reads as one input and its checks:
``<case>.check`` shows, span by span, what the form's rewrite puts where (the element
form's call sequences, the block form's thread-0 store and every thread's call, the
warpgroup form's counted barriers around a TMA epilogue's call, a tile call's staging),
with tileiras's registers and labels captured, not numbered."""

import re

import pytest

from support.form_cases import FORMS_BY_ARCH, filecheck, load, rewrite_case, stems

STEMS = stems()


def test_every_form_has_a_case_on_every_architecture():
    have = {(s.split(".")[0], s.split(".")[-1]) for s in STEMS}
    assert have >= {(form, arch) for arch, forms in FORMS_BY_ARCH.items() for form in forms}


@pytest.mark.parametrize("stem", STEMS)
def test_the_rewrite_passes_the_cases_checks(stem):
    ptx, records, checks = load(stem)
    report = rewrite_case(ptx, records, stem)
    assert report.refused is None
    markers = len(re.findall(r"atom\.[\w.]*cas\.b(?:32|64)\s+%\w+, \[%\w+\]", ptx)) + \
        len(re.findall(r"\bfma\.r[nzmp]\.f64\b", ptx))
    assert report.total == markers > 0          # every marker instance replaced
    run = filecheck(checks, report.ptx)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("stem", STEMS)
def test_each_case_has_its_forms_spans(stem):
    ptx, records, _ = load(stem)
    kinds = {f"{r['scope']} call" if r["scope"] != "element" else "call"
             for r in records.values()}
    assert kinds <= {s.kind for s in rewrite_case(ptx, records, stem).spans}


def _case(form: str, arch: str = "sm_90"):
    stem = next(s for s in STEMS if s.startswith(f"{form}.") and s.endswith(f".{arch}"))
    ptx, records, checks = load(stem)
    return rewrite_case(ptx, records, stem).ptx, checks


@pytest.mark.parametrize("form", ["element", "block", "warpgroup", "staging"])
def test_a_changed_instruction_of_splices_fails_the_checks(form):
    out, checks = _case(form)
    assert filecheck(checks, out).returncode == 0
    # one instruction of the call sequence: the result read from another .param
    changed = out.replace("[__splice_r];", "[__splice_p0];", 1)
    assert changed != out and filecheck(checks, changed).returncode != 0
    # a register or label of tileiras's that splice's code names again (captured at its
    # first use, [[R0:%r[0-9]+]], then [[R0]]), replaced there by another one
    token = re.compile(r"%(?:r|rd|f|fd|p)\d+\b|\$L__\w+")
    seen: set[str] = set()
    for line in (ln for ln in out.splitlines() if "splice" in ln):
        again = [tok for tok in token.findall(line) if tok in seen]
        seen.update(token.findall(line))
        if again:
            break
    renamed = out.replace(line, line.replace(again[0], again[0][:3] + "9999"), 1)
    assert renamed != out and filecheck(checks, renamed).returncode != 0


def test_a_block_barrier_removed_or_predicated_fails_the_checks():
    out, checks = _case("block", "sm_80")
    barrier = "\tbar.sync \t0; // splice:"
    assert barrier in out
    for changed in (out.replace(barrier, "\t// splice:", 1),
                    out.replace(barrier, "\t@%p1 bar.sync \t0; // splice:", 1)):
        assert filecheck(checks, changed).returncode != 0


def test_lines_added_elsewhere_in_the_kernel_pass_the_checks():
    # what made the exact-text cases brittle: a line more in the input moved every span
    # of the output (their line numbers) and the text compared no more
    for form in ("block", "element"):
        stem = next(s for s in STEMS if s.startswith(f"{form}."))
        ptx, records, checks = load(stem)
        moved = ptx.replace("\n", "\n// one line more\n// and another\n", 1)
        assert filecheck(checks, rewrite_case(moved, records, stem).ptx).returncode == 0
