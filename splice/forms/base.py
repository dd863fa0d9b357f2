"""What every call form answers (:class:`CallForm`) and the values its PTX analysis returns
(edits, or a :class:`Refusal`). Nothing here loads the PTX machinery (a cache hit needs the
forms, not the rewriter): the marked function body the analysis reads is
:mod:`splice.forms.marked`."""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Union

from ..errors import SpliceRewriteError

if TYPE_CHECKING:
    from ..ptx import Body
    from ..rewrite import SiteCall
    from .marked import MarkedBody
    from ..sites import SiteInfo
    from ..spans import Generated, Span
    from ..types import Signature


class Scope(str, enum.Enum):
    """The ``scope=`` of a declaration: which threads run one call (a ``str`` enum:
    ``Scope.BLOCK == "block"``)."""

    ELEMENT = "element"
    BLOCK = "block"
    WARPGROUP = "warpgroup"

    def __str__(self) -> str:
        return self.value


class Marker(str, enum.Enum):
    """How a call site reaches PTX (``docs/design.md#markers``).

    ``FMA``: a pure call with a result: an ``fma.rn.f64`` keyed by a load of the site's
    marker global (``docs/design.md#fma-marker``). ``ATOMIC``: an atomic compare-and-swap
    on the marker global (impure and void calls, block calls, and pure calls whose fma
    marker LLVM changed). A ``str`` enum: ``Marker.FMA == "fma"``.
    """

    FMA = "fma"
    ATOMIC = "atomic"

    def __str__(self) -> str:
        return self.value


#: One edit of a function's PTX: (start, end, replacement text), by position.
Edit = tuple[int, int, Union[str, "Generated"]]


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Pure call sites whose fma markers did not reach PTX in a form the proof accepts
    (e.g. LLVM merged the markers of two sites of different calls in the two arms of a
    branch): the pipeline gives them the atomic marker and lowers the kernel again.

    Attributes:
        sites: the site indices involved (of this trace).
        reason: what the proof found, e.g. "register %rd7 holds the keys of sites 1 and 2".
        message: the full error, naming the kernel and the PTX statement, for when no
            other marker is left to try.
        merged_keys: whether a register holds the keys of ``sites`` (LLVM merged their
            markers), which the fma form accepts when they are the same call.
    """

    sites: frozenset[int]
    reason: str
    message: str
    merged_keys: bool = dataclasses.field(default=False, compare=False)

    def error(self) -> SpliceRewriteError:
        return SpliceRewriteError(self.message)


class CallForm(Protocol):
    """One way a call site runs (``splice/forms/__init__.py`` says how to add one).

    Attributes:
        scope: the declaration's ``scope=`` this form serves.
        marker: the marker the call reaches PTX as.
        span_kind: the :class:`splice.spans.Span` kind of one instance's generated code.
        per_function: whether the form proves its markers per function
            (:meth:`key_load`, :meth:`function_edits`) rather than per instance
            (:meth:`instance_edits`).
        runs_collectives: whether the callee may execute collective instructions (warp or
            CTA barriers, shuffles, votes, NVSHMEM collectives): False for a form whose
            call runs on a divergent subset of threads (:mod:`splice.collectives`).
        takes_tiles: whether its calls may take and return whole tiles (``splice.tile``,
            staged in shared memory around the call: :mod:`splice.tiles`), which needs
            :meth:`call_ends`.
    """

    scope: Scope
    marker: Marker
    span_kind: str
    runs_collectives: bool
    per_function: bool
    takes_tiles: bool

    def declare(self, sig: Signature, pure: bool, what: str) -> bool:
        """Check a declaration of this form; the ``pure`` the extern gets.

        Raises:
            SpliceDeclarationError: naming ``what``.
        """

    def check_arguments(self, typed: list, describe: Callable[[Any], str]) -> str | None:
        """What is wrong with a call's typed arguments (cuTile Vars, ``describe`` naming
        one), or None; the trace raises it as a ``SpliceCallError``."""

    def for_call(self, pure_with_result: bool, atomic: bool) -> CallForm:
        """The form (marker variant) of one call: ``pure_with_result`` for a pure extern
        with a result, ``atomic`` when the pipeline gave the site the atomic marker."""

    def with_marker(self, marker: Marker) -> CallForm:
        """The variant of this form's scope that has ``marker`` (a cache entry's)."""

    def global_edit(self, index: int) -> str | Generated:
        """What replaces the marker global of site ``index``."""

    def instance_edits(self, body: MarkedBody, i: int, site: SiteCall,
                       instance: int) -> list[Edit]:
        """The edits replacing the atomic marker at statement ``i`` of ``body``.

        Raises:
            SpliceRewriteError: the rewrite cannot be proven.
        """

    def key_load(self, body: MarkedBody, i: int, named: set[int],
                 sites: Mapping[int, SiteCall]) -> tuple[int, str, int] | Refusal:
        """Only for a form with ``per_function`` set: statement ``i``, which names the
        markers of ``named`` (sites of this form), as one of the loads
        :meth:`function_edits` takes (statement, register, site), or a Refusal."""

    def function_edits(self, body: MarkedBody, key_loads: list[tuple[int, str, int]],
                       sites: Mapping[int, SiteCall], first: Mapping[int, int]
                       ) -> tuple[list[Edit], dict[int, int]] | Refusal:
        """The edits of the markers this form proves per function (the fma markers: their
        key loads ``key_loads``, instances numbered from ``first[site]``) with the number
        of instances per site, or a :class:`Refusal`."""

    def call_ends(self, body: Body, i: int) -> tuple[int, int]:
        """Only for a form with ``takes_tiles``: the statements (guard, join) around the
        call of the marker instance at statement ``i`` of ``body``, between which every
        thread of the call runs it once; a tile call's stores are proven to lie in the
        straight-line code before the guard, its loads after the join.

        Raises:
            ValueError: the instance's call is not proven (its own proof says why).
        """

    def describe(self, span: Span) -> str:
        """What wrote ``span`` (of this form's :attr:`span_kind`), for a message."""

    def summary(self, info: SiteInfo) -> str:
        """The report line of one site (:meth:`splice.sites.SiteInfo.__str__`)."""


def instances_text(info: SiteInfo) -> str:
    """``"3 call(s) in PTX"`` (or inlined bodies, and why not inlined), for a summary."""
    how = "inlined bod(ies)" if info.inlined else "call(s)"
    why = f" (not inlined: {info.why_not_inlined})" if info.why_not_inlined else ""
    return f"{info.instances} {how} in PTX{why}"


def generated_text(span: Span, what: str) -> str:
    """What wrote ``span`` (a call form's generated code): ``what`` for the site's owner."""
    return f"the {what} splice generated for {span.owner} (site {span.site}, instance " \
           f"{span.instance})"


def no_function_edits(body, key_loads, sites, first) -> tuple[list[Edit], dict[int, int]]:
    """:meth:`CallForm.function_edits` of a form without per-function markers."""
    return [], {}


def no_call_ends(body, i) -> tuple[int, int]:
    """:meth:`CallForm.call_ends` of a form that takes no tiles (never called: the staging
    is built only for forms with ``takes_tiles``)."""
    raise AssertionError("call_ends of a form that takes no tiles")


def no_key_load(body, i, named, sites) -> Refusal:
    """:meth:`CallForm.key_load` of a form without per-function markers (never called:
    the rewriter asks only forms with ``per_function`` set)."""
    raise AssertionError("key_load of a form without per-function markers")
