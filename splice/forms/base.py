"""What every call form answers (:class:`CallForm`), the values its PTX analysis returns
(edits, or a :class:`Refusal`), and the records of a call site that carry a form and that
its methods take::

    CallSite   recorded while cuTile traces the kernel (splice.tracing.trace): which extern, the
               tile shape, the source location, the form; ``key`` is stable across traces
               of one kernel signature
    SiteCall   how the rewriter calls it (splice.forms.rewrite): the callee's PTX prototype,
               the body to inline
    SiteInfo   what the build reports of it (splice.driver.pipeline.Build.sites): instances in
               PTX, inlined or not and why, its marker and why it is not the fma marker

Records and protocol live in one module because each names the other. This module imports
nothing of cuTile's, so that the rewriter and its tests use it without cuTile. Nothing here loads
the PTX machinery (a cache hit needs the forms, not the rewriter): the marked function body the
analysis reads is :mod:`splice.forms.marked`."""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, Union

from ..errors import SpliceRewriteError
from ..ptxtools.names import marker_symbol

if TYPE_CHECKING:
    from ..ptxtools.ptx import Body, Module, Param
    from ..ptxtools.spans import Generated, Span
    from ..types import Signature
    from .marked import MarkedBody


class Scope(str, enum.Enum):
    """The ``scope=`` of a declaration: which threads run one call (a ``str`` enum:
    ``Scope.BLOCK == "block"``)."""

    ELEMENT = "element"
    BLOCK = "block"
    WARPGROUP = "warpgroup"

    def __str__(self) -> str:
        return self.value


class Memory(str, enum.Enum):
    """The ``memory=`` of a declaration: which memory an impure call touches, and so which of
    the kernel's memory operations it is ordered against (a ``str`` enum:
    ``Memory.ARGUMENTS == "arguments"``).

    ``ANY`` (the default): any memory; ordered against every load and store of the kernel.
    ``ARGUMENTS`` (externs): global memory only through its pointer arguments (and a tile
    call's staged tiles), proven by :mod:`splice.analysis.memory_proof`; ordered only
    against the kernel's operations on arrays that may alias them. ``NONE``
    (``splice.asm``): no global memory, proven by :mod:`splice.analysis.asm_check`;
    ordered only against splice's other calls.
    """

    ANY = "any"
    ARGUMENTS = "arguments"
    NONE = "none"

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


#: The rounding of a pure site's fma marker, by site index (``index % 4``): neighbouring
#: sites get different ones, which are different intrinsics to LLVM, so that it does not
#: merge the markers of two sites (e.g. from the two arms of an if/else) into one fma and
#: the kernel need not be lowered again with atomic markers. The rounding of a marker is
#: never used: the call replaces it.
FMA_ROUNDINGS = ("rn", "rz", "rm", "rp")


@dataclasses.dataclass(frozen=True)
class CallSite:
    """One call of an extern as traced in a kernel.

    Attributes:
        index: order of the call in the trace (0, 1, ...); names the marker global.
        extern: the called :class:`splice.declare.externs.ExternFunction`.
        shape: the tile shape of the marker (the call's shape, last axis maybe split).
        where: "file:line" of the call in the user's source.
        call_shape: the tile shape of the call (``()`` for a scalar call).
        form: the call form (:mod:`splice.forms`), with its marker.
        marker_bits: width of the marker's two operands and result (32 or 64).
        key: the call's source location with its inlining chain and its occurrence there
            (``"k.py:12:8#0"``): stable across traces of one signature, unlike ``index``,
            which a trace with other marker kinds may number differently.
    """

    index: int
    extern: Any
    shape: tuple[int, ...]
    where: str
    call_shape: tuple[int, ...]
    form: CallForm
    marker_bits: int = 64
    key: str = ""

    @property
    def marker_symbol(self) -> str:
        return marker_symbol(self.index)

    @property
    def marker(self) -> Marker:
        return self.form.marker

    @property
    def fma_rounding(self) -> str:
        """The PTX rounding of this site's fma marker (:data:`FMA_ROUNDINGS`)."""
        return FMA_ROUNDINGS[self.index % len(FMA_ROUNDINGS)]

    def __str__(self) -> str:  # shown in cuTile IR dumps
        return f"{self.extern.symbol}@{self.where}"


@dataclasses.dataclass(frozen=True)
class SiteCall:
    """How to call the extern of one call site.

    Attributes:
        index: the site's index (its marker is ``__splice_marker_<index>``).
        callee: the callee's PTX symbol.
        params: the callee's ``.param`` prototype, one per argument.
        result: the callee's return ``.param`` or None (void).
        signature: the extern's declared signature.
        label: text for the comment at the call (extern name and call site file:line).
        inline: (prepared Module, Function) to inline, or None: call.
        form: the site's call form (:mod:`splice.forms`), with its marker.
        marker_bits: width of the marker's operands; 0: ``signature.marker_bits``.
        fma_rounding: the rounding of an fma marker ("rn", "rz", "rm", "rp"): sites of
            different roundings are fmas of different intrinsics to LLVM, which it does
            not merge.
        staging: the part the site plays in a tile call, or None.
    """

    index: int
    callee: str
    params: tuple[Param, ...]
    result: Param | None
    signature: Signature
    label: str
    inline: tuple | None
    form: CallForm
    marker_bits: int = 0
    fma_rounding: str = "rn"
    #: the part the site plays in a tile call (:class:`splice.forms.staging.Staging`), or None
    staging: object = None

    @property
    def width(self) -> int:
        return self.marker_bits or self.signature.marker_bits

    @property
    def marker(self):
        return self.form.marker


@dataclasses.dataclass
class SiteInfo:
    """One call site of the built kernel: where it is, what it calls, how many marker
    instances (calls in PTX) it became, and its marker (``why_atomic``: why a pure call
    has the atomic marker -- tileiras changed its fma marker); ``form``: its call form
    (:mod:`splice.forms`)."""

    index: int
    extern: str
    symbol: str
    where: str
    shape: tuple[int, ...]
    instances: int
    inlined: bool = False
    why_not_inlined: str | None = None
    why_atomic: str | None = None
    form: CallForm = dataclasses.field(kw_only=True)

    #: the fields a cache entry stores; the others come from the traced call site
    STORED = ("instances", "inlined", "why_not_inlined", "marker", "why_atomic")

    @classmethod
    def of(cls, site: CallSite, **built) -> SiteInfo:
        """The report of traced ``site`` with the :attr:`STORED` fields ``built``."""
        form = site.form.with_marker(Marker(built.pop("marker", site.form.marker)))
        return cls(site.index, site.extern.name, site.extern.symbol, site.where,
                   site.call_shape, form=form, **built)

    @property
    def marker(self) -> Marker:
        return self.form.marker

    @property
    def scope(self) -> str:
        return self.form.scope

    def stored(self) -> dict:
        """The :attr:`STORED` fields, as a cache entry's JSON holds them."""
        return {name: str(v) if isinstance(v, Marker) else v
                for name, v in ((n, getattr(self, n)) for n in self.STORED)}

    def __str__(self) -> str:
        return self.form.summary(self)


class FlagAnswers:
    """The answers of :class:`CallForm`'s questions that its flags give: a form class
    inherits them (the flags are read only here and in the forms)."""

    runs_collectives: bool
    per_function: bool
    takes_tiles: bool
    straight_line_snippets: bool
    scope: Scope

    def runs_convergently(self) -> bool:
        """Whether every thread of a group calls it together (:attr:`runs_collectives`): its
        callee may execute collectives and owns the shared memory it declares."""
        return self.runs_collectives

    def proves_per_function(self) -> bool:
        """Whether its markers are proven per function (:attr:`per_function`)."""
        return self.per_function

    def takes_tile_arguments(self) -> bool:
        """Whether its calls may take and return whole tiles (:attr:`takes_tiles`)."""
        return self.takes_tiles

    def snippet_rule(self) -> Scope | None:
        """The scope whose straight-line rule a ``splice.asm`` snippet of this form follows
        (:attr:`straight_line_snippets`), or None."""
        return self.scope if self.straight_line_snippets else None


class CallForm(Protocol):
    """One way a call site runs (``splice/forms/__init__.py`` says how to add one).

    Attributes:
        scope: the declaration's ``scope=`` this form serves.
        marker: the marker the call reaches PTX as.
        span_kind: the :class:`splice.ptxtools.spans.Span` kind of one instance's generated code.
        per_function: whether the form proves its markers per function
            (:meth:`key_load`, :meth:`function_edits`) rather than per instance
            (:meth:`instance_edits`).
        runs_collectives: whether the callee may execute collective instructions (warp or
            CTA barriers, shuffles, votes, NVSHMEM collectives): False for a form whose
            call runs on a divergent subset of threads (:mod:`splice.analysis.collectives`).
        takes_tiles: whether its calls may take and return whole tiles (``splice.tile``,
            staged in shared memory around the call: :mod:`splice.forms.staging`), which needs
            :meth:`call_ends`.
        straight_line_snippets: whether a ``splice.asm`` snippet of this form must be
            straight-line PTX (every thread of a group runs it once per execution, around
            splice's barriers: :func:`splice.analysis.asm_check.check_snippet`'s ``straight_line``).
    """

    scope: Scope
    marker: Marker
    span_kind: str
    runs_collectives: bool
    per_function: bool
    takes_tiles: bool
    straight_line_snippets: bool

    def runs_convergently(self) -> bool:
        """Whether every thread of a group calls it together: its callee may execute
        collectives and owns the shared memory it declares (modules outside the forms ask
        this, not :attr:`runs_collectives`)."""

    def proves_per_function(self) -> bool:
        """Whether its markers are proven per function (:attr:`per_function`)."""

    def takes_tile_arguments(self) -> bool:
        """Whether its calls may take and return whole tiles (:attr:`takes_tiles`)."""

    def snippet_rule(self) -> Scope | None:
        """The scope whose straight-line rule a ``splice.asm`` snippet of this form follows
        (:attr:`straight_line_snippets`), or None."""

    def declare(self, sig: Signature, options: Any, what: str) -> bool:
        """Check a declaration of this form (of signature ``sig``, its ``options`` as the
        door took them: :class:`splice.declare.declaring.CallOptions`); the ``pure`` the
        extern gets.

        Raises:
            SpliceDeclarationError: naming ``what``.
        """

    def check_arguments(self, typed: list, describe: Callable[[Any], str],
                        positions: Sequence[int]) -> str | None:
        """What is wrong with a call's typed arguments (cuTile Vars, ``describe`` naming
        one, ``positions`` their indices among the arguments the user's call passes), or
        None; the trace raises it as a ``SpliceCallError``."""

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

    def call_ends(self, body: Body, i: int) -> tuple[int, int, int]:
        """Only for a form with ``takes_tiles``: the statements (guard, join) around the
        call of the marker instance at statement ``i`` of ``body``, between which every
        thread of the call runs it once, and the number of those threads (over which
        tileiras spreads a tile's elements there); a tile call's stores are proven to lie
        in the straight-line code before the guard, its loads after the join.

        Raises:
            ProofRefusal: the instance's call is not proven (its own proof says why).
        """

    def check_callees(self, sites: list[CallSite], fragments: Mapping[str, tuple[str, Module]],
                      target: str, keys: Mapping[int, str], kernel: Module) -> None:
        """Every check of what the externs of ``sites`` (this form's sites of one kernel) or
        anything they call execute, on their PTX: the form's own policy, then what every
        callee is checked for (:func:`splice.forms.effects.check_every_callee`: effects,
        ``memory=``); run once per form present, after the fragments are compiled and
        before they are linked. The driver asks the forms; it runs no check itself.

        Args:
            sites: the kernel's traced call sites whose extern has this form.
            fragments: content key -> (description, PTX module) of every fragment of the
                kernel, compiled for ``target``.
            target: the kernel's PTX target (``"sm_90a"``).
            keys: id(fragment) -> its key in ``fragments``, as the fragments stage took
                them (a fragment's key is not taken again: a source saved mid-build).
            kernel: the kernel's PTX (tileiras's output, not yet rewritten): its blocks.

        Raises:
            SpliceLinkError: naming the extern, its declaration, the call site and the fix.
        """

    def check_linked_callees(self, sites: list[CallSite], cubin: bytes, target: str,
                             fragments: Mapping[str, tuple[str, Module]],
                             keys: Mapping[int, str], disassemble: Callable) -> None:
        """What :meth:`check_callees` cannot read on PTX: the machine code of the externs of
        ``sites`` that binary objects define, in the kernel's linked ``cubin``
        (``disassemble``: its SASS, :func:`splice.system.toolchain.disassemble`); run once
        per form present, after assembling (:func:`no_check_linked_callees`: none).

        Raises:
            SpliceLinkError: as :meth:`check_callees`.
            SpliceToolchainError: the cubin cannot be disassembled where it must be.
        """

    def check_snippet(self, text: str, pack: int) -> str | None:
        """What is wrong with a ``splice.asm`` snippet declared with this form's scope (its
        PTX template ``text``, its ``pack=``), or None (:func:`no_check_snippet`); the trace
        raises it as a ``SpliceCallError`` at the snippet."""

    def describe(self, span: Span) -> str:
        """What wrote ``span`` (of this form's :attr:`span_kind`), for a message."""

    def summary(self, info: SiteInfo) -> str:
        """The report line of one site (:meth:`SiteInfo.__str__`)."""


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


def no_check_linked_callees(sites, cubin: bytes, target: str, fragments, keys,
                            disassemble) -> None:
    """:meth:`CallForm.check_linked_callees` of a form whose callees' PTX says all."""


def no_check_snippet(text: str, pack: int) -> str | None:
    """:meth:`CallForm.check_snippet` of a form that takes any snippet an element call
    takes."""
    return None


def no_call_ends(body, i) -> tuple[int, int, int]:
    """:meth:`CallForm.call_ends` of a form that takes no tiles (never called: the staging
    is built only for forms with ``takes_tiles``)."""
    raise AssertionError("call_ends of a form that takes no tiles")


def no_key_load(body, i, named, sites) -> Refusal:
    """:meth:`CallForm.key_load` of a form without per-function markers (never called:
    the rewriter asks only forms with ``per_function`` set)."""
    raise AssertionError("key_load of a form without per-function markers")


def site_module(ext, fragments: Mapping[str, tuple[str, Module]], target: str,
                keys: Mapping[int, str] | None = None) -> Module:
    """The PTX module of ``ext``'s fragment among ``fragments`` (content key ->
    (description, module)), by the content key in ``keys`` (id(fragment) -> key, as the
    fragments stage took them once a build); without ``keys`` the key is taken here (for
    CUDA C, a walk of the source's headers)."""
    frag = ext.fragment
    return fragments[keys[id(frag)] if keys is not None else frag.content_key(target)][1]
