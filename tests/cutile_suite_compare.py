"""Run a cuTile test directory plain and through splice's drop-in plugin
(:mod:`splice.testing.dropin`: every ``@ct.kernel`` a ``@splice.kernel``), and compare each
test's outcome.

::

    python tests/cutile_suite_compare.py path/to/cutile-python/test --out /tmp/cmp [-n 4]
        [--files test_a.py ...] [-- extra pytest arguments]

Each run writes a junit xml (``plain.xml``, ``splice.xml``) and the comparison
``compare.json`` under ``--out``; it prints the counts of each run and every test that passes
plain but not through splice, with its error, then the reverse. Exit status 1 when some test
passes plain and fails through splice (0 otherwise). ``-n`` uses pytest-xdist when it can
be imported (else the runs are serial). The runs use this interpreter; the plugin needs
splice importable (``PYTHONPATH=<splice checkout>``).

On the H200 (a run there lasts 10 minutes at most: one run per command, each interrupted at
``--timeout`` so that its xml still holds the tests that ran), from the checkout's root,
carrying ``.devtc`` (``shared/device/pack.sh``), ``.cutile-tests`` (NVIDIA cutile-python's
``test/`` only, never committed) and ``.dropin-pkgs`` (pytest-xdist and execnet, pure
Python, with their dist-info)::

    source .devtc/setup.sh && export PYTHONPATH="$PYTHONPATH:$PWD/.dropin-pkgs" &&
        python3 tests/cutile_suite_compare.py .cutile-tests/test --out $OUT --only plain \
        -n 8 --timeout 540
    (the same with --only splice)

then here, with both xmls in one directory: ``--out DIR --only none`` prints the comparison.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

PLUGIN = "splice.testing.dropin"
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


def pytest_argv(test_dir: Path, xml: Path, *, through_splice: bool, workers: int,
                extra: list[str], files: list[str] = ()) -> list[str]:
    """The pytest command line of one run (``-n`` only where pytest-xdist is installed;
    ``files``: only these files of ``test_dir``)."""
    targets = [str(test_dir / f) for f in files] or [str(test_dir)]
    argv = [sys.executable, "-m", "pytest", *targets, "-q", "-rN", "-p", "no:cacheprovider",
            f"--junitxml={xml}", "-o", "junit_family=xunit1"]
    if through_splice:
        argv += ["-p", PLUGIN]
    if workers > 1 and importlib.util.find_spec("xdist") is not None:
        argv += ["-n", str(workers)]
    return argv + extra


def run(test_dir: Path, xml: Path, *, through_splice: bool, workers: int = 1,
        extra: list[str] = (), timeout: float | None = None, files: list[str] = ()) -> float:
    """Run pytest on ``test_dir`` (in it), writing ``xml``; seconds. Past ``timeout`` pytest
    is interrupted (SIGINT: it still writes the xml of the tests that ran), and killed 60 s
    later."""
    argv = pytest_argv(test_dir, xml, through_splice=through_splice, workers=workers,
                       extra=list(extra), files=list(files))
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=test_dir, env=os.environ.copy())
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"interrupting pytest after {timeout:.0f} s: the xml holds the tests that ran",
              flush=True)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return time.perf_counter() - t0


def outcomes(xml: Path) -> dict[str, tuple[str, str]]:
    """Each test case of a junit xml: ``"file::name"`` -> (passed/failed/skipped, the
    message of its failure, error or skip: first 800 characters)."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        if case.get("name") is None:      # the test an interrupt stopped
            continue
        name = f"{case.get('file') or case.get('classname', '')}::{case.get('name')}"
        status, said = PASSED, ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = FAILED
                said = (child.get("message") or "") + "\n" + (child.text or "")
                break
            if child.tag == "skipped":
                status, said = SKIPPED, child.get("message") or ""
        out[name] = (status, said.strip()[:800])
    return out


def counts(results: dict[str, tuple[str, str]]) -> dict[str, int]:
    """How many tests passed, failed (or errored) and were skipped."""
    c = {PASSED: 0, FAILED: 0, SKIPPED: 0}
    for status, _ in results.values():
        c[status] += 1
    return c


def compare(plain: dict, spliced: dict) -> dict:
    """The per-test comparison: counts of each run, and the tests whose outcome differs
    (``regressions``: passed plain, not through splice; ``fixed``: the reverse; ``missing``:
    in one run only)."""
    regressions = {t: spliced[t][1] or spliced[t][0] for t in plain
                   if plain[t][0] == PASSED and t in spliced and spliced[t][0] != PASSED}
    fixed = {t: plain[t][1] for t in plain
             if plain[t][0] != PASSED and t in spliced and spliced[t][0] == PASSED}
    missing = sorted(set(plain) ^ set(spliced))
    return {"plain": counts(plain), "splice": counts(spliced), "regressions": regressions,
            "fixed": fixed, "missing": missing}


def report(result: dict) -> str:
    """The comparison as text."""
    lines = [f"plain : {result['plain']}", f"splice: {result['splice']}",
             f"passed plain, not through splice: {len(result['regressions'])}"]
    for test, said in sorted(result["regressions"].items()):
        lines += [f"  {test}", *("      " + s for s in said.splitlines()[:6])]
    lines.append(f"passed through splice, not plain: {len(result['fixed'])}")
    lines += [f"  {t}" for t in sorted(result["fixed"])]
    if result["missing"]:
        lines.append(f"in one run only: {len(result['missing'])}")
        lines += [f"  {t}" for t in result["missing"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("test_dir", type=Path, help="cuTile's test/ directory")
    ap.add_argument("--out", type=Path, required=True, help="directory for the results")
    ap.add_argument("-n", type=int, default=4, help="pytest-xdist workers (if installed)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per run")
    ap.add_argument("--files", nargs="*", default=[],
                    help="only these files of test_dir (default: all)")
    ap.add_argument("--only", choices=("plain", "splice", "none"), default=None,
                    help="run one of the two, or none: compare the plain.xml and "
                         "splice.xml already in --out (a run each on the device, compared "
                         "here)")
    args, extra = ap.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    args.out.mkdir(parents=True, exist_ok=True)
    test_dir = args.test_dir.resolve()
    for which in ("plain", "splice"):
        if args.only in (None, which):
            xml = (args.out / f"{which}.xml").resolve()
            s = run(test_dir, xml, through_splice=which == "splice", workers=args.n,
                    extra=extra, timeout=args.timeout, files=args.files)
            print(f"{which}: {s:.0f} s", flush=True)
    if not all((args.out / f"{w}.xml").is_file() for w in ("plain", "splice")):
        print(f"ran {args.only}; compare once {args.out} holds plain.xml and splice.xml")
        return 0
    result = compare(outcomes(args.out / "plain.xml"), outcomes(args.out / "splice.xml"))
    (args.out / "compare.json").write_text(json.dumps(result, indent=1))
    print(report(result))
    return 1 if result["regressions"] else 0


if __name__ == "__main__":
    sys.exit(main())
