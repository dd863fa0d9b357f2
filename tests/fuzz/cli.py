"""``python -m tests.fuzz``: a fuzzing run, its findings minimised and printed as
regression tests.

    python -m tests.fuzz --cases 2000 --seed 7 [--batch 100] [--minutes 60]

Batch ``i`` of seed ``S`` is :func:`batch_snippets` ``(S, i, size)``: a finding is
reproduced by its seed, batch and size alone.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time

from .generate import generate
from .harness import Finding
from .program import Case, Snippet
from .runner import Stats, run_cases


def batch_seed(seed: int, index: int) -> int:
    """The seed of batch ``index`` of a run seeded ``seed`` (its snippets and inputs)."""
    return seed * 1_000_003 + index


def batch_snippets(seed: int, index: int, size: int) -> list[Snippet]:
    return generate(batch_seed(seed, index), size)


def fuzz(seed: int, cases: int, batch: int, ubsan: bool = True, minutes: float = 0,
         stats: Stats | None = None, log=print):
    """Run ``cases`` generated cases (batches of ``batch``); yield (batch index, snippet,
    finding) for each finding. ``minutes``: stop after that long (0: no limit)."""
    stats = stats if stats is not None else Stats()
    start = time.monotonic()
    index = 0
    while index * batch < cases:
        if minutes and time.monotonic() - start > minutes * 60:
            log(f"time limit: stopped after {index} batches")
            return
        size = min(batch, cases - index * batch)
        snippets = batch_snippets(seed, index, size)
        by_case = {s.case(): s for s in snippets}
        t = time.monotonic()
        found = run_cases(list(by_case), batch_seed(seed, index), ubsan, stats)
        log(f"batch {index}: {size} cases in {time.monotonic() - t:.1f} s, "
            f"{len(found)} finding(s); {stats.cases} cases so far")
        for f in found:
            yield index, by_case[f.case], f
        index += 1


def regression_test(case: Case, name: str, origin: str) -> str:
    """A pytest function running ``case`` on both sides (``fuzz.runner.check``)."""
    inputs = "".join(f"\n            Input({i.name!r}, {i.dtype!r}, {i.kind!r}, {i.values!r}),"
                     for i in case.inputs)
    code = _code_literal(case.code)
    extra = "".join([f", options={case.options!r}" if case.options else "",
                     "" if case.pure else ", pure=False",
                     "" if case.placement == "straight" else f", placement={case.placement!r}"])
    return (f"def test_{name}():\n"
            f'    """Found by the splice.cuda fuzzer ({origin})."""\n'
            f"    check(Case(\n"
            f"        {code},\n"
            f"        results={case.results!r},\n"
            f"        inputs=({inputs}\n        ){extra}))\n")


def _code_literal(code: str) -> str:
    lines = code.split("\n")
    if len(lines) == 1:
        return repr(code)
    return "(" + "\n         ".join(repr(ln + "\n") for ln in lines[:-1]) + \
        f"\n         {lines[-1]!r})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=int, default=1000, help="cases to run (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="the run's seed (default 1)")
    p.add_argument("--batch", type=int, default=100, help="cases per kernel (default 100)")
    p.add_argument("--minutes", type=float, default=0, help="stop after this long")
    p.add_argument("--no-ubsan", action="store_true",
                   help="compile the host side without UBSan (faster)")
    p.add_argument("--no-minimise", action="store_true", help="print findings as found")
    a = p.parse_args(argv)
    if "SPLICE_CACHE_DIR" not in os.environ:     # thousands of snippets: not the user's cache
        cache = tempfile.mkdtemp(prefix="splice-fuzz-cache-")
        os.environ["SPLICE_CACHE_DIR"] = cache
        atexit.register(shutil.rmtree, cache, True)
    stats = Stats()
    start = time.monotonic()
    findings = []
    for index, snippet, f in fuzz(a.seed, a.cases, a.batch, not a.no_ubsan, a.minutes, stats):
        findings.append(_report(a, index, snippet, f, len(findings) + 1))
    took = time.monotonic() - start
    print(f"\n{stats.cases} cases (seed {a.seed}, batches of {a.batch}) in {took:.0f} s: "
          f"{len(findings)} finding(s); host {stats.host:.0f} s, splice {stats.splice:.0f} s, "
          f"executor {stats.executor:.0f} s")
    return 1 if findings else 0


def _report(a, index: int, snippet: Snippet, f: Finding, number: int) -> Finding:
    print(f"\n=== finding {number}: {f.kind} in batch {index} (seed {a.seed}, batch size "
          f"{a.batch})\n{f.detail}\n--- code:\n{f.case.code}\n--- inputs: {f.case.inputs}")
    if a.no_minimise:
        return f
    from .minimise import minimise
    small, f2 = minimise(snippet, f, batch_seed(a.seed, index))
    print(f"--- minimised ({f2.kind}):\n{f2.detail}\n--- regression test:\n")
    print(regression_test(small.case(), f"fuzz_finding_{number}",
                          f"python -m tests.fuzz --seed {a.seed} --batch {a.batch}, "
                          f"batch {index}"))
    sys.stdout.flush()
    return f2
