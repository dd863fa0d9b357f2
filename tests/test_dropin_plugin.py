"""The drop-in plugin (``-p splice.testing.dropin``: every ``@ct.kernel`` a
``@splice.kernel``) on ``tests/cutile_style``, a directory in cuTile's test style: each of its
tests passes plain (cuTile) and through splice, and through the plugin its kernels are
splice's; and the comparison script's per-test report (``tests/cutile_suite_compare.py``,
which the H200 run points at NVIDIA's cutile-python ``test/``)."""

import os
import sys
from pathlib import Path

import cuda.tile as ct
import cutile_suite_compare as cmp
import pytest

import splice
from splice.testing import dropin

STYLE_DIR = Path(__file__).parent / "cutile_style"


def _env():
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_cutile_style_directory_passes_plain_and_through_splice(tmp_path, monkeypatch):
    for k, v in _env().items():
        monkeypatch.setenv(k, v)
    results = {}
    for which in ("plain", "splice"):
        xml = tmp_path / f"{which}.xml"
        cmp.run(STYLE_DIR, xml, through_splice=which == "splice", timeout=500)
        results[which] = cmp.outcomes(xml)
    result = cmp.compare(results["plain"], results["splice"])
    from cutile_style.refused_kernels import REFUSED
    # test_style_refusals.py: one per refused kernel and 3 more; test_style_features.py: 9;
    # the GPU tests (one per refused kernel) skip without a GPU
    assert result["plain"]["failed"] == 0, cmp.report(result)
    assert result["plain"]["passed"] >= len(REFUSED) + 3 + 9, cmp.report(result)
    assert result["splice"] == result["plain"], cmp.report(result)
    assert result["regressions"] == {} and result["missing"] == []


def _junit(path, cases):
    body = "".join(
        f'<testcase classname="m" name="{n}" file="t.py">'
        + ("" if s == "passed" else f'<{"failure" if s == "failed" else "skipped"} '
           f'message="{msg}">trace</{"failure" if s == "failed" else "skipped"}>')
        + "</testcase>" for n, s, msg in cases)
    path.write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
    return path


def test_compare_lists_each_test_that_passes_plain_and_fails_through_splice(tmp_path):
    plain = cmp.outcomes(_junit(tmp_path / "p.xml", [
        ("a", "passed", ""), ("b", "passed", ""), ("c", "failed", "old bug"),
        ("d", "skipped", "no gpu"), ("e", "passed", "")]))
    spliced = cmp.outcomes(_junit(tmp_path / "s.xml", [
        ("a", "passed", ""), ("b", "failed", "TileTypeError: boom"), ("c", "passed", ""),
        ("d", "skipped", "no gpu"), ("f", "passed", "")]))
    result = cmp.compare(plain, spliced)
    assert result["plain"] == {"passed": 3, "failed": 1, "skipped": 1}
    assert result["splice"] == {"passed": 3, "failed": 1, "skipped": 1}
    assert list(result["regressions"]) == ["t.py::b"]
    assert result["regressions"]["t.py::b"].startswith("TileTypeError: boom")
    assert list(result["fixed"]) == ["t.py::c"]
    assert result["missing"] == ["t.py::e", "t.py::f"]
    text = cmp.report(result)
    assert "passed plain, not through splice: 1\n  t.py::b\n      TileTypeError: boom" in text


def test_xdist_is_used_only_where_installed(tmp_path, monkeypatch):
    import importlib.util
    have = importlib.util.find_spec("xdist") is not None
    argv = cmp.pytest_argv(tmp_path, tmp_path / "x.xml", through_splice=True, workers=4,
                           extra=["-k", "static"])
    assert ("-n" in argv) == have
    assert argv[argv.index("-p", argv.index("no:cacheprovider")) + 1] == cmp.PLUGIN
    assert argv[-2:] == ["-k", "static"] and argv[0] == sys.executable
    plain = cmp.pytest_argv(tmp_path, tmp_path / "x.xml", through_splice=False, workers=1,
                            extra=[])
    assert cmp.PLUGIN not in plain and "-n" not in plain


def test_install_replaces_kernel_and_export_and_uninstall_restores():
    import cuda.tile.compilation as ctc
    before = (ct.kernel, ctc.export_kernel)
    dropin.install()
    try:
        assert ct.kernel is splice.kernel
        assert ctc.export_kernel is dropin.export_kernel

        def f(x):
            ct.static_assert(False, "through the plugin")
        with pytest.raises(ct.TileStaticAssertionError) as e:
            ctc.export_kernel(ct.kernel(f), [splice.kernel_signature("array(float32)")],
                              __import__("io").BytesIO(), gpu_code="sm_90")
        assert isinstance(e.value, splice.SpliceError)   # it went through splice
    finally:
        dropin.uninstall()
    assert (ct.kernel, ctc.export_kernel) == before
