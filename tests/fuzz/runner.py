"""Batches run end to end: :func:`run_cases` (findings of a list of cases) and
:func:`check` (cases that must agree: a regression test's body)."""

from __future__ import annotations

import dataclasses
import time

from splice.errors import SpliceError
from support.ptx_exec import ExecError

from . import device, host
from .harness import Finding, compare, inputs, layout
from .program import Case


@dataclasses.dataclass
class Stats:
    """Where a run's time went (seconds) and how many cases ran."""

    cases: int = 0
    splice: float = 0.0
    executor: float = 0.0
    host: float = 0.0
    reruns: int = 0


def run_cases(cases: list[Case], seed: int, ubsan: bool = False,
              stats: Stats | None = None) -> list[Finding]:
    """Run ``cases`` as one batch (inputs from ``seed``) and return the findings. A case
    one side could not run is a finding and the batch is run again without it (a failure
    no case is named for: the batch is split in halves until it is)."""
    stats = stats if stats is not None else Stats()
    findings: list[Finding] = []
    todo = list(cases)
    while todo:
        try:
            findings += _batch(todo, seed, ubsan, stats)
            return findings
        except _Failed as f:
            stats.reruns += 1
            if f.index is not None:
                findings.append(Finding(f.kind, todo[f.index], f.message))
                del todo[f.index]
                continue
            if len(todo) == 1:
                findings.append(Finding(f.kind, todo[0], f.message))
                return findings
            half = len(todo) // 2
            return findings + run_cases(todo[:half], seed, ubsan, stats) + \
                run_cases(todo[half:], seed, ubsan, stats)
    return findings


class _Failed(Exception):
    def __init__(self, kind: str, message: str, index: int | None):
        super().__init__(message)
        self.kind, self.message, self.index = kind, message, index


def _batch(cases: list[Case], seed: int, ubsan: bool, stats: Stats) -> list[Finding]:
    """One batch: the host side first (cheap, and a host failure is a generator bug that
    would waste the device side's time), then splice and the executor."""
    lay = layout(cases)
    data = inputs(lay, seed)
    t0 = time.perf_counter()
    try:
        ref = host.run(lay, data, ubsan)
    except host.HostError as e:
        raise _Failed("host", str(e), e.case) from None
    t1 = time.perf_counter()
    try:
        build = device.compile_batch(lay)
    except SpliceError as e:
        raise _Failed("refused", f"{type(e).__name__}: {e}",
                      device.case_of_error(str(e), device.source(lay)[1])) from None
    t2 = time.perf_counter()
    try:
        dev, launch = device.run_executor(build, lay, data)
    except ExecError as e:
        raise _Failed("executor", f"ExecError: {e}", None) from None
    t3 = time.perf_counter()
    stats.host += t1 - t0
    stats.splice += t2 - t1
    stats.executor += t3 - t2
    stats.cases += len(cases)
    out = []
    for k in range(len(cases)):
        f = compare(lay, k, dev, ref, data)
        if f is not None:
            if launch.approx:
                f.detail += f"\n  (approximate instructions ran: {sorted(launch.approx)})"
            out.append(f)
    return out


def check(*cases: Case, seed: int = 0) -> None:
    """Run ``cases`` on both sides (one batch); raise AssertionError with the findings if
    they disagree or one side cannot run one (a regression test's body)."""
    found = run_cases(list(cases), seed)
    if found:
        raise AssertionError("\n\n".join(f"{f.kind}: {f.detail}\ncode:\n{f.case.code}"
                                          for f in found))
