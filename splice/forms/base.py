"""What every call form answers (:class:`CallForm`), the values its PTX analysis returns
(edits, or a :class:`Refusal`), and the marked function body it analyses
(:class:`MarkedBody`)."""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, Union

from ..errors import SpliceRewriteError
from ..names import MARKER_RE
from ..ptx import Function, Instruction, Module, Statement, registers_in

if TYPE_CHECKING:
    from ..rewrite import SiteCall
    from ..sites import SiteInfo
    from ..spans import Generated, Span
    from ..types import Signature


class Scope(str, enum.Enum):
    """The ``scope=`` of a declaration: which threads run one call (a ``str`` enum:
    ``Scope.BLOCK == "block"``)."""

    ELEMENT = "element"
    BLOCK = "block"

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


def rewrite_error(kernel_name: str, msg: str, stmt_text: str | None = None) -> SpliceRewriteError:
    """The error for a call-site rewrite of ``kernel_name`` that cannot be proven."""
    detail = f"\n    offending PTX: {stmt_text.strip()}" if stmt_text else ""
    return SpliceRewriteError(f"cannot prove the call-site rewrite of kernel "
                              f"'{kernel_name}': {msg}{detail}")


@dataclasses.dataclass
class MarkedBody:
    """One function's body as the forms analyse it: each statement with its parsed
    instruction (None for other statements), the statements defining each register, and
    the registers holding a marker's address (register -> site) with the statements
    defining them (filled by :func:`splice.rewrite.splice_calls`)."""

    module: Module
    fn: Function
    kernel_name: str
    parsed: Sequence[tuple[Statement, Instruction | None]]
    defs: dict[str, list[int]]
    marker_reg: dict[str, int] = dataclasses.field(default_factory=dict)
    address_defs: set[int] = dataclasses.field(default_factory=set)

    @classmethod
    def parse(cls, module: Module, fn: Function, kernel_name: str) -> MarkedBody:
        """The marked body of ``fn`` on its analysed :meth:`~splice.ptx.Module.body`."""
        body = module.body(fn)
        return cls(module, fn, kernel_name, body.parsed, body.defs)

    def fail(self, msg: str, i: int | None = None) -> SpliceRewriteError:
        """The error for statement ``i`` (or the function as a whole)."""
        return rewrite_error(self.kernel_name, msg,
                             None if i is None else self.parsed[i][0].text(self.module.text))

    def named_sites(self, ins: Instruction) -> set[int]:
        """The sites whose marker symbol or address register ``ins`` names."""
        return {self.marker_reg[r] for op in ins.operands for r in registers_in(op)
                if r in self.marker_reg} | {int(m.group(1)) for op in ins.operands
                                            for m in MARKER_RE.finditer(op)}


PLAIN_REG = re.compile(r"%[A-Za-z_$][A-Za-z0-9_$]*")
ADDR_RE = re.compile(r"^\[\s*([%A-Za-z_$][A-Za-z0-9_$]*)\s*(?:\+\s*(-?\w+)\s*)?\]$")


def is_key_load(ins: Instruction) -> bool:
    """Whether ``ins`` is a plain load of two operands (the form of an fma key load)."""
    return ins.base == "ld" and len(ins.operands) == 2 and \
        all(m in ("global", "b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "nc",
                  "ca", "cg", "weak") for m in ins.modifiers)


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
    """

    scope: Scope
    marker: Marker
    span_kind: str
    runs_collectives: bool
    per_function: bool

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


def no_key_load(body, i, named, sites) -> Refusal:
    """:meth:`CallForm.key_load` of a form without per-function markers (never called:
    the rewriter asks only forms with ``per_function`` set)."""
    raise AssertionError("key_load of a form without per-function markers")
