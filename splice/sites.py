"""Call sites: the records one extern call goes through, from the trace to the report.

::

    CallSite   recorded while cuTile traces the kernel (splice.trace): which extern, the
               tile shape, the source location, the marker kind; ``key`` is stable
               across traces of one kernel signature
    SiteCall   how the rewriter calls it (splice.rewrite): the callee's PTX prototype,
               the body to inline
    SiteInfo   what the build reports of it (splice.pipeline.Build.sites): instances in
               PTX, inlined or not and why, its marker and why it is not the fma marker

All three carry the site's call form (:mod:`splice.forms`), which knows its scope and
marker. This module imports nothing of cuTile's, so that the rewriter and its tests use it
without cuTile.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .forms import element
from .forms.base import CallForm, Marker
from .names import marker_symbol

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
        extern: the called :class:`splice.externs.ExternFunction`.
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
    call_shape: tuple[int, ...] = ()
    form: CallForm = element.ATOMIC
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
    form: CallForm = element.ATOMIC
    why_atomic: str | None = None

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
