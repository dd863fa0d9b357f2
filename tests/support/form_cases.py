"""The golden per-form cases (tests/corpus/forms/, made by tests/corpus/make_form_cases.py):
a call site as a JSON record, the site call the rewriter gets from it, and the rewritten
PTX checked in FileCheck style (LLVM's FileCheck, as xDSL's ``tests/filecheck`` use it:
the ``filecheck`` package): each ``<case>.check`` holds a ``CHECK:`` line for the first
line of each piece of code splice wrote and ``CHECK-NEXT:`` for the lines after it, with
tileiras's registers and labels captured (``[[R3:%r[0-9]+]]``, then ``[[R3]]``) instead
of their numbers, and no line numbers: a line more elsewhere in the kernel does not break
a case; a changed instruction of splice's does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from splice.forms import form_of
from splice.forms.base import Marker, SiteCall
from splice.forms.rewrite import SpliceReport, splice_calls
from splice.forms.staging import Staging
from splice.ptxtools.ptx import Module
from splice.types import parse_signature
from support.sites import param_for

CASES = Path(__file__).resolve().parent.parent / "corpus" / "forms"
#: The architectures the cases cover, and the forms each has a case of (warpgroup calls
#: where the architecture has warpgroups: wgmma, sm_90).
FORMS_BY_ARCH = {"sm_80": ("element", "block", "staging"),
                 "sm_90": ("element", "block", "warpgroup", "staging"),
                 "sm_100": ("element", "block", "staging")}


def site_record(site) -> dict:
    """A traced call site (:class:`splice.forms.base.CallSite`) as JSON: what its site call
    needs (the PTX of the callee is not part of a case: the rewriter only calls it)."""
    ext, st = site.extern, site.extern.staging
    return {"kernel_symbol": ext.symbol, "signature": str(ext.signature),
            "scope": str(site.form.scope.value), "marker": site.form.marker.value,
            "marker_bits": site.marker_bits, "fma_rounding": site.fma_rounding,
            "staging": None if st is None else {"role": st.role, "group": st.group,
                                                "elements": st.elements, "what": st.what,
                                                "threads": st.threads}}


def site_call(index: int, rec: dict) -> SiteCall:
    """The site call of a record: callee ``callee<index>``, its params from the signature."""
    sig = parse_signature(rec["signature"])
    params = tuple(param_for(a, f"f{index}_p{i}") for i, a in enumerate(sig.args))
    result = param_for(sig.result, "ret") if sig.result else None
    form = form_of(rec["scope"], f"site {index}").with_marker(Marker(rec["marker"]))
    staging = None if rec["staging"] is None else Staging(**rec["staging"])
    return SiteCall(index, f"callee{index}", params, result, sig,
                    f"callee{index} at case:{index}", None, form, rec["marker_bits"],
                    rec["fma_rounding"], staging)


def rewrite_case(ptx: str, records: dict, name: str) -> SpliceReport:
    """The rewriter on a case's PTX with its sites (``records``: index -> record)."""
    sites = {int(k): site_call(int(k), rec) for k, rec in records.items()}
    return splice_calls(Module(ptx, name), sites, kernel_name=name.replace(".", "_"))


#: A register declaration of the kernel (``.reg .b32 %r<13>;``): its registers' prefix.
_REG_DECL = re.compile(r"^\s*\.reg\s+\.\w+\s+%([A-Za-z_]\w*?)<\d+>;", re.M)


def check_lines(ptx: str, report: SpliceReport) -> str:
    """The ``.check`` text of a case: for each span of the rewritten PTX a comment naming
    it, ``CHECK:`` its first line and ``CHECK-NEXT:`` the others; ``CHECK:`` every other
    line splice commented (the guard a block call retargets, a removed marker global);
    the kernel's registers (the prefixes ``ptx`` declares) and tileiras's labels captured
    at their first use."""
    prefixes = sorted(set(_REG_DECL.findall(ptx)), key=len, reverse=True)
    token = re.compile(r"%(?:" + "|".join(map(re.escape, prefixes)) + r")\d+\b|\$L__\w+")
    names: dict[str, str] = {}

    def pattern(line: str) -> str:
        assert "{{" not in line and "[[" not in line, line    # FileCheck's own syntax

        def capture(m: re.Match) -> str:
            tok = m.group(0)
            if tok in names:
                return f"[[{names[tok]}]]"
            cls = re.sub(r"[^A-Za-z]", "", tok).upper()
            names[tok] = f"{cls}{sum(n.rstrip('0123456789') == cls for n in names.values())}"
            regex = r"\$L__[A-Za-z0-9_]+" if tok.startswith("$") else \
                f"{tok.rstrip('0123456789')}[0-9]+"
            return f"[[{names[tok]}:{regex}]]"
        return token.sub(capture, " ".join(line.split()))

    lines = report.ptx.split("\n")
    in_span = {n for s in report.spans for n in range(s.start_line, s.end_line + 1)}
    starts = {s.start_line: s for s in report.spans}
    out = []
    for n, line in enumerate(lines, 1):
        if n in starts:
            s = starts[n]
            out.append(f"// span {s.kind!r} site {s.site} instance {s.instance}")
            out.append(f"CHECK: {pattern(line)}")
        elif n in in_span:
            out.append(f"CHECK-NEXT: {pattern(line)}" if line.strip() else "CHECK-EMPTY:")
        elif "// splice:" in line:
            out.append(f"CHECK: {pattern(line)}")
    return "\n".join(out) + "\n"


def filecheck(checks: Path, text: str) -> subprocess.CompletedProcess:
    """The ``filecheck`` package (LLVM FileCheck's rules) run on ``text`` with the checks of
    the file ``checks``: every line a pattern matches whole (``--match-full-lines``), runs
    of horizontal whitespace alike."""
    return subprocess.run([sys.executable, "-m", "filecheck", "--match-full-lines",
                           str(checks)], input=text, capture_output=True, text=True,
                          timeout=120)


def stems() -> list[str]:
    """Every case, as ``<form>.<shape>.<arch>``."""
    return sorted(p.name[:-len(".ptx")] for p in CASES.glob("*.ptx"))


def load(stem: str) -> tuple[str, dict, Path]:
    """A case's input PTX, its site records and its ``.check`` file."""
    return ((CASES / f"{stem}.ptx").read_text(),
            json.loads((CASES / f"{stem}.json").read_text()), CASES / f"{stem}.check")
