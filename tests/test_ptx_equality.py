"""The byte-equality harness (tests/tools/ptx_equality.py) tells equal records from records
that differ in one artefact, a count, or a key."""

import json

from tools import ptx_equality


def _record(d, rows, texts):
    (d / "texts").mkdir(parents=True)
    for digest, text in texts.items():
        (d / "texts" / digest).write_text(text)
    (d / "record.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def _row(test, digest, kind="spliced"):
    return {"test": test, "kind": kind, "kernel": "k", "signature": "sig", "arch": "sm_90",
            "sha256": digest}


def test_equal_records_compare_equal(tmp_path, capsys):
    rows = [_row("t::a", "1"), _row("t::a", "2"), _row("t::b", "3", "cubin")]
    a = _record(tmp_path / "a", rows, {"1": "x\n", "2": "y\n"})
    b = _record(tmp_path / "b", rows[::-1], {"1": "x\n", "2": "y\n"})
    assert ptx_equality.compare(a, b) == 0
    assert "0 differ; artefacts equal: 1 cubin, 2 spliced" in capsys.readouterr().out


def test_a_changed_text_a_missing_build_and_a_new_key_differ(tmp_path, capsys):
    a = _record(tmp_path / "a", [_row("t::a", "1"), _row("t::a", "2"), _row("t::b", "3")],
                {"1": "mov.u32 %r1, 1;\n", "2": "y\n", "3": "z\n"})
    b = _record(tmp_path / "b", [_row("t::a", "4"), _row("t::c", "3")],
                {"4": "mov.u32 %r1, 2;\n", "3": "z\n"})
    assert ptx_equality.compare(a, b) == 1
    out = capsys.readouterr().out
    assert "DIFFERS t::a | spliced | k | sig | sm_90: 2 vs 1" in out
    assert "-mov.u32 %r1, 1;" in out and "+mov.u32 %r1, 2;" in out
    assert "DIFFERS t::b" in out and "DIFFERS t::c" in out and "3 differ" in out
