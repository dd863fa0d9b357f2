"""Element calls (``scope="element"``, the default): the extern applies to every element of
its tile arguments, each call on the thread that owns the element.

Two marker variants: :data:`ATOMIC` (an atomic compare-and-swap on the site's marker global:
impure and void calls, and pure calls whose fma marker LLVM changed) and :data:`FMA` (an
``fma.rn.f64`` keyed by a load of the marker global: pure calls with a result, proven by
:mod:`splice.forms.fma_proof`). Each instance becomes the call sequence of
:func:`splice.forms.calls.call_block`, predicated like its marker.

Collectives: refused in the callee (:mod:`splice.analysis.collectives`): which threads of a warp or
CTA reach one instance together is tileiras's layout.

The PTX analysis is imported when it runs (:func:`_ptx`): a cache hit loads the forms, not
the rewriter.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import TYPE_CHECKING

from .base import (
    FlagAnswers,
    Marker,
    Scope,
    SiteInfo,
    generated_text,
    instances_text,
    no_call_ends,
    no_check_snippet,
    no_function_edits,
    no_key_load,
)

if TYPE_CHECKING:
    from ..ptxtools.spans import Span


class ElementAtomic(FlagAnswers):
    """An element call on an atomic marker."""

    scope = Scope.ELEMENT
    marker = Marker.ATOMIC
    span_kind = "call"
    runs_collectives = False
    straight_line_snippets = False
    #: whether the form proves its markers per function (:meth:`key_load`)
    per_function = False
    takes_tiles = False

    def declare(self, sig, options, what: str) -> bool:
        return options.pure

    def check_arguments(self, typed, describe, positions) -> str | None:
        return None

    def for_call(self, pure_with_result: bool, atomic: bool):
        return FMA if pure_with_result and not atomic else ATOMIC

    def with_marker(self, marker: Marker):
        return FMA if marker is Marker.FMA else ATOMIC

    def global_edit(self, index: int) -> str:
        return f"// splice: marker global of site {index} removed"

    def instance_edits(self, body, i, site, instance):
        s, ins = body.parsed[i]
        dest, _addr, cmp, swap = ins.operands
        return [(s.start, s.end,
                 _ptx().calls.call_block(site, ins.guard, dest, (cmp, swap), instance))]

    key_load = staticmethod(no_key_load)
    call_ends = staticmethod(no_call_ends)
    function_edits = staticmethod(no_function_edits)

    def check_callees(self, sites, fragments, target: str, keys, kernel) -> None:
        """No warp- or CTA-collective instruction in the callee or anything it calls
        (:func:`splice.forms.element_callees.check_element_sites`), then what every callee
        is checked for (:func:`splice.forms.effects.check_every_callee`)."""
        ptx = _ptx()
        ptx.element_callees.check_element_sites(sites, fragments, target, keys)
        ptx.effects.check_every_callee(sites, fragments, target, keys)

    def check_linked_callees(self, sites, cubin: bytes, target: str, fragments, keys,
                             disassemble) -> None:
        """No collective instruction in the machine code of a binary object's callee
        (:func:`splice.forms.element_callees.check_binary_sites`)."""
        _ptx().element_callees.check_binary_sites(sites, cubin, target, fragments, keys,
                                                  disassemble=disassemble)

    #: a snippet runs per element like any element call: no rule of its own
    check_snippet = staticmethod(no_check_snippet)

    def describe(self, span: Span) -> str:
        return generated_text(span, "call sequence")

    def summary(self, info: SiteInfo) -> str:
        marker = f"{self.marker} marker"
        if info.why_atomic:
            marker += f" (its fma marker was changed by tileiras: {info.why_atomic})"
        return (f"site {info.index}: {info.extern} -> {info.symbol} at {info.where}, tile "
                f"shape {info.shape}, {instances_text(info)}, {marker}")


class ElementFma(ElementAtomic):
    """A pure element call with a result on an fma marker: its markers are proven per
    function (:mod:`splice.forms.fma_proof`); a statement naming one that is not a key
    load, or a marker LLVM changed, is a :class:`~splice.forms.base.Refusal`."""

    marker = Marker.FMA
    per_function = True

    def instance_edits(self, body, i, site, instance):
        raise body.fail(f"site {site.index}: an atomic marker of a pure call on an fma "
                        f"marker", i)

    def key_load(self, body, i, named, sites):
        return _ptx().fma_proof.key_load(body, i, named, sites)

    def function_edits(self, body, key_loads, sites, first):
        return _ptx().fma_proof.fma_edits(body, key_loads, sites, first)


ATOMIC = ElementAtomic()
FMA = ElementFma()


@functools.cache
def _ptx() -> SimpleNamespace:
    """The modules that write an element call's PTX (:mod:`.calls`), prove its fma markers
    (:mod:`.fma_proof`) and check its callees (:mod:`.element_callees`, :mod:`.effects`),
    imported on first use: a cache hit loads the forms, not the PTX parser."""
    from . import calls, effects, element_callees, fma_proof
    return SimpleNamespace(calls=calls, effects=effects, element_callees=element_callees,
                           fma_proof=fma_proof)
