"""The golden per-form cases (tests/corpus/forms/, made by tests/corpus/make_form_cases.py):
a call site as a JSON record, the site call the rewriter gets from it, and the rewritten
PTX's spans as the text a case expects."""

from __future__ import annotations

import json
from pathlib import Path

from splice.forms import form_of
from splice.forms.base import Marker, SiteCall
from splice.forms.rewrite import SpliceReport, splice_calls
from splice.forms.staging import Staging
from splice.ptxtools.ptx import Module
from splice.types import parse_signature
from support.sites import param_for

CASES = Path(__file__).resolve().parent.parent / "corpus" / "forms"


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


def expected_text(report: SpliceReport) -> str:
    """What a case expects: the marker instances found and replaced per site, then each
    span of the rewritten PTX (kind, site, instance) followed by its lines."""
    lines = report.ptx.split("\n")
    out = [f"// found {dict(sorted(report.found.items()))} "
           f"replaced {dict(sorted(report.replaced.items()))}"]
    for s in report.spans:
        out.append(f"// span {s.kind!r} site {s.site} instance {s.instance} "
                   f"(lines {s.start_line}-{s.end_line})")
        out += lines[s.start_line - 1:s.end_line]
    return "\n".join(out) + "\n"


def stems() -> list[str]:
    """Every case, as ``<form>.<shape>.<arch>``."""
    return sorted(p.name[:-len(".ptx")] for p in CASES.glob("*.ptx"))


def load(stem: str) -> tuple[str, dict, str]:
    """A case's input PTX, its site records and its expected text."""
    return ((CASES / f"{stem}.ptx").read_text(),
            json.loads((CASES / f"{stem}.json").read_text()),
            (CASES / f"{stem}.expected").read_text())
