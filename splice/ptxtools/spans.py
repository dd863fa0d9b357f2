"""Where each piece of the PTX splice writes came from, as data.

The code that writes PTX -- the rewriter's call sequences (:mod:`splice.forms.rewrite`), the
fragments and declarations the linker inserts (:mod:`splice.ptxtools.link`) -- returns, next to the
text, a :class:`Span` per piece: which lines it occupies and what it belongs to (a
fragment, a call site's instance). :mod:`splice.driver.diagnose` uses them to say which code a
ptxas error points at. The ``// splice:`` comments in the PTX are for people reading a
dump; nothing parses them.

A piece of generated text is a :class:`Generated` string that carries its span's owner
through the edit lists of :func:`splice.ptxtools.ptx.apply_edits`; :func:`spans_of_edits` then
says where each one landed.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

#: What a span's lines are: ``"fragment"``: a fragment's PTX, as the linker inserted it.
#: ``"splice"``: other declarations splice wrote (the fragments' prototypes, host-filled
#: variables, block-call argument scratch). Any other kind is the ``span_kind`` of a call
#: form (:class:`splice.forms.base.CallForm`): the code that replaced one marker instance
#: of a site of that form (``"call"``: an element call's sequence or inlined body; ``"block
#: call"``: thread 0's argument store, every thread's call and the barriers around it;
#: ``"warpgroup call"``: the same for a warpgroup), so that a new form brings its own kind
#: (:func:`splice.forms.of_span` maps it back). Lines in no span are the kernel's own PTX
#: (tileiras's).
Kind = str


@dataclasses.dataclass(frozen=True)
class Span:
    """Lines ``start_line`` to ``end_line`` (1-based, inclusive, as ptxas numbers them) of
    a PTX text, and what they came from.

    Attributes:
        start_line, end_line: the first and last line.
        owner: the fragment's description (``"CUDA C source declared at f.py:3"``), the
            call site's label (``"scale at k.py:12"``), or what splice declared.
        kind: see :data:`Kind`.
        site: the call site's index (a call form's kind), else None.
        instance: the marker instance's number within its site, else None.
    """

    start_line: int
    end_line: int
    owner: str
    kind: Kind
    site: int | None = None
    instance: int | None = None

    def shifted(self, lines: int) -> Span:
        return dataclasses.replace(self, start_line=self.start_line + lines,
                                   end_line=self.end_line + lines)

    def text(self, ptx: str) -> str:
        """The span's lines of ``ptx`` (whole lines, newline-joined)."""
        return "\n".join(ptx.split("\n")[self.start_line - 1:self.end_line])


class Generated(str):
    """PTX text splice generated, tagged with what it belongs to (a :class:`Span` without
    its lines): an edit's replacement text in :func:`splice.ptxtools.ptx.apply_edits`, which joins
    it like any string, and :func:`spans_of_edits` finds it there."""

    owner: str
    kind: Kind
    site: int | None
    instance: int | None

    def __new__(cls, text: str, owner: str, kind: Kind, site: int | None = None,
                instance: int | None = None) -> Generated:
        self = super().__new__(cls, text)
        self.owner, self.kind, self.site, self.instance = owner, kind, site, instance
        return self

    def span(self, start_line: int) -> Span:
        """Its span when its first character is on ``start_line``."""
        return Span(start_line, start_line + self.count("\n"), self.owner, self.kind,
                    self.site, self.instance)


def spans_of_edits(text: str, edits: Iterable[tuple[int, int, str]]) -> list[Span]:
    """The spans, in the text :func:`splice.ptxtools.ptx.apply_edits` makes of ``text`` and
    ``edits``, of every :class:`Generated` replacement text among the edits."""
    out = []
    line = 1        # the line of the original text at ``pos``
    pos = 0
    extra = 0       # lines the replacements so far added (or removed, negative)
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        line += text.count("\n", pos, start)
        if isinstance(new, Generated):
            out.append(new.span(line + extra))
        line += text.count("\n", start, end)
        extra += new.count("\n") - text.count("\n", start, end)
        pos = end
    return out


def shift_spans(spans: Sequence[Span], lines: int) -> list[Span]:
    return [s.shifted(lines) for s in spans]


def span_at(spans: Sequence[Span], line: int) -> Span | None:
    """The span that holds ``line`` (the smallest, should spans ever nest), or None: the
    line is the kernel's own PTX."""
    holding = [s for s in spans if s.start_line <= line <= s.end_line]
    return min(holding, key=lambda s: s.end_line - s.start_line, default=None)
