"""Golden per-form cases (tests/corpus/forms/, made by tests/corpus/make_form_cases.py): real
tileiras PTX with one form's call sites in, the rewritten PTX's spans out. Each case reads
as one input and one expected output: ``<case>.expected`` shows, span by span, what the
form's rewrite puts where (the block form's thread-0 store and every thread's call, the
warpgroup form's counted barriers around a TMA epilogue's call, a tile call's staging)."""

import re

import pytest

from support.form_cases import expected_text, load, rewrite_case, stems

STEMS = stems()


def test_every_form_has_a_case():
    assert {s.split(".")[0] for s in STEMS} >= {"block", "warpgroup", "staging"}


@pytest.mark.parametrize("stem", STEMS)
def test_the_rewrite_is_the_expected_one(stem):
    ptx, records, expected = load(stem)
    report = rewrite_case(ptx, records, stem)
    assert report.refused is None
    markers = len(re.findall(r"atom\.[\w.]*cas\.b(?:32|64)\s+%\w+, \[%\w+\]", ptx))
    assert report.total == markers > 0          # every marker instance replaced
    assert expected_text(report) == expected


@pytest.mark.parametrize("stem", STEMS)
def test_each_case_has_its_forms_spans(stem):
    ptx, records, expected = load(stem)
    kinds = {f"'{r['scope']} call'" if r["scope"] != "element" else "'call'"
             for r in records.values()}
    assert {k for k in kinds} <= set(re.findall(r"^// span ('[\w ]+')", expected, re.M))


def test_a_changed_rewrite_is_caught():
    # the comparison can fail: a line more in the input moves every span of the output
    stem = next(s for s in STEMS if s.startswith("block."))
    ptx, records, expected = load(stem)
    assert expected_text(rewrite_case(ptx, records, stem)) == expected
    moved = ptx.replace("\n", "\n// one line more\n", 1)
    assert expected_text(rewrite_case(moved, records, stem)) != expected
