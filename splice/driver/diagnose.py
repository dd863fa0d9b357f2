"""ptxas's errors about the merged PTX, said in terms of the code the user wrote.

ptxas numbers the lines of a temporary file holding the merged module (the kernel's PTX
with the call sequences the rewriter wrote and the fragments the linker inserted). The
:class:`splice.ptxtools.spans.Span`\\ s those two return say which code wrote each line: a fragment
(named with the extern's declaration), a call site's call sequence, or -- any other line --
the kernel's own PTX (tileiras output).
"""

from __future__ import annotations

import re
from typing import Sequence

from .. import forms
from ..errors import SpliceError, SpliceLinkError, SpliceToolchainError
from ..ptxtools.shared_memory import KERNEL_OWNER, shared_memory_report
from ..ptxtools.spans import Span, span_at


def describe(span: Span | None) -> str:
    """What wrote the lines of ``span`` (None: the kernel's own PTX), for a message."""
    if span is None:
        return KERNEL_OWNER
    form = forms.of_span(span)
    return span.owner if form is None else form.describe(span)


def owner_of_line(spans: Sequence[Span], line: int) -> str:
    """What wrote ``line`` (1-based) of the merged PTX whose spans are ``spans``."""
    return describe(span_at(spans, line))


def explain_ptxas_failure(error: SpliceToolchainError, merged_text: str,
                          spans: Sequence[Span], what: str) -> SpliceError:
    """The error to raise for ptxas's ``error`` about ``merged_text`` (spans: ``spans``) of
    kernel ``what``: too much shared memory, by declaring code; a function no fragment
    defines, with the fragment that calls it; or ptxas's own message with, for each of its
    first five errors, the code that wrote the line and the line. ``error`` itself when
    its log names no line."""
    def owner(line: int) -> str:
        return owner_of_line(spans, line)
    smem = shared_memory_report(merged_text, error.log, owner, what)
    if smem is not None:
        return SpliceLinkError(smem, error.log)
    lines = merged_text.split("\n")   # as ptxas numbers them (and the spans)
    m = re.search(r"Unresolved extern function '([^']+)'", error.log)
    if m:
        sym = m.group(1)
        caller = next((owner(i + 1) for i, ln in enumerate(lines)
                       if re.search(rf"\.extern\s+\.func[^;]*\b{re.escape(sym)}\b", ln)),
                      "a fragment")
        return SpliceLinkError(
            f"{caller} calls '{sym}', which no fragment of {what} defines: "
            f"call an extern declared from the source that defines it in this kernel too, "
            f"or define it in the same source", error.log)
    notes = []
    # "fatal": a line ptxas cannot parse ("Parsing error near 'x': syntax error")
    for lm in re.finditer(r"line (\d+);\s*(error|fatal|warning)\s*:\s*(.*)", error.log):
        n = int(lm.group(1))
        if lm.group(2) == "warning" or not 0 < n <= len(lines):
            continue
        notes.append(f"    {lm.group(3).strip()}\n      in {owner(n)}: {lines[n - 1].strip()}")
        if len(notes) >= 5:
            break
    if not notes:
        return error
    return SpliceToolchainError(error.message + "\n" + "\n".join(notes), error.log)
