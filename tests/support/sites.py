"""Call-site records (:class:`splice.forms.rewrite.SiteCall`) for rewriter tests on hand-written
PTX, and callee definitions matching them."""

from __future__ import annotations

from splice.forms import element
from splice.forms.base import SiteCall
from splice.ptxtools.ptx import Param
from splice.types import parse_signature


def param_for(elem, name) -> Param:
    """The ``.param`` a callee declares for an argument or result of element type ``elem``."""
    if elem.name in ("float16", "bfloat16"):
        return Param(name, ".param .align 2 .b8", 2, ".b8", ".param")
    bits = max(elem.bits, 32)
    return Param(name, f".param .b{bits}", None, f".b{bits}", ".param")


def site_call(idx: int, sig_text: str, marker: str = "atomic") -> SiteCall:
    """Site ``idx`` calling ``callee<idx>`` with signature ``sig_text``; ``marker`` is
    "atomic" or "fma" (64-bit fma marker)."""
    sig = parse_signature(sig_text)
    params = tuple(param_for(a, f"f{idx}_p{i}") for i, a in enumerate(sig.args))
    result = param_for(sig.result, "ret") if sig.result else None
    return SiteCall(idx, f"callee{idx}", params, result, sig, f"callee{idx} at test:{idx}",
                    None, element.FMA if marker == "fma" else element.ATOMIC,
                    64 if marker == "fma" else 0)


def fma_sites(n: int = 1) -> dict[int, SiteCall]:
    """``n`` pure sites ``float64(float64, float64)`` with fma markers, indices 0..n-1."""
    return {i: site_call(i, "float64(float64, float64)", "fma") for i in range(n)}


def callee_ptx(site: SiteCall) -> str:
    """A definition matching the site's prototype (returns 0 / does nothing)."""
    params = ",\n".join(f"\t{p.declare(p.name)}" for p in site.params)
    ret = f"({site.result.declare('ret')}) " if site.result else ""
    body = ""
    if site.result is not None:
        bits = site.result.size_bytes * 8
        body = f"\tst.param.b{bits} \t[ret], 0;\n"
    return f".visible .func {ret}callee{site.index}(\n{params}\n)\n{{\n{body}\tret;\n}}\n"


def with_calls_replaced(text: str, spans, tag: str = "<M>") -> str:
    """``text`` with the lines of each call sequence (:class:`splice.ptxtools.spans.Span` of kind
    "call" in ``spans``) replaced by one line ``tag``."""
    lines = text.split("\n")
    out: list[str] = []
    pos = 0
    for span in spans:
        if span.kind == "call":
            out += lines[pos:span.start_line - 1] + [tag]
            pos = span.end_line
    return "\n".join(out + lines[pos:])
