"""Call sites: the records one extern call goes through, from the trace to the report.

::

    CallSite   recorded while cuTile traces the kernel (splice.trace): which extern, the
               tile shape, the source location, the marker kind; ``key`` is stable
               across traces of one kernel signature
    SiteCall   how the rewriter calls it (splice.rewrite): the callee's PTX prototype,
               the body to inline
    SiteInfo   what the build reports of it (splice.pipeline.Build.sites): instances in
               PTX, inlined or not and why, its marker and why it is not the fma marker

All three name the marker kind with one enum, :class:`Marker`. This module imports
nothing of cuTile's, so that the rewriter and its tests use it without cuTile.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

MARKER_PREFIX = "__splice_marker_"

#: The rounding of a pure site's fma marker, by site index (``index % 4``): neighbouring
#: sites get different ones, which are different intrinsics to LLVM, so that it does not
#: merge the markers of two sites (e.g. from the two arms of an if/else) into one fma and
#: the kernel need not be lowered again with atomic markers. The rounding of a marker is
#: never used: the call replaces it.
FMA_ROUNDINGS = ("rn", "rz", "rm", "rp")


class Marker(str, enum.Enum):
    """How a call site reaches PTX (``docs/design.md#markers``).

    ``FMA``: a pure call with a result: an ``fma.rn.f64`` keyed by a load of the site's
    marker global (``docs/design.md#fma-marker``). ``ATOMIC``: an atomic compare-and-swap
    on the marker global (impure and void calls, and pure calls whose fma marker LLVM
    changed). A ``str`` enum: ``Marker.FMA == "fma"``.
    """

    FMA = "fma"
    ATOMIC = "atomic"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class CallSite:
    """One call of an extern as traced in a kernel.

    Attributes:
        index: order of the call in the trace (0, 1, ...); names the marker global.
        extern: the called :class:`splice.externs.ExternFunction`.
        shape: the tile shape of the marker (the call's shape, last axis maybe split).
        where: "file:line" of the call in the user's source.
        call_shape: the tile shape of the call (``()`` for a scalar call).
        marker: the marker kind.
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
    marker: Marker = Marker.ATOMIC
    marker_bits: int = 64
    key: str = ""

    @property
    def marker_symbol(self) -> str:
        return f"{MARKER_PREFIX}{self.index}"

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
    has the atomic marker -- tileiras changed its fma marker)."""

    index: int
    extern: str
    symbol: str
    where: str
    shape: tuple[int, ...]
    instances: int
    inlined: bool = False
    why_not_inlined: str | None = None
    marker: Marker = Marker.ATOMIC
    why_atomic: str | None = None
    scope: str = "element"

    #: the fields a cache entry stores; the others come from the traced call site
    STORED = ("instances", "inlined", "why_not_inlined", "marker", "why_atomic")

    @classmethod
    def of(cls, site: CallSite, **built) -> SiteInfo:
        """The report of traced ``site`` with the :attr:`STORED` fields ``built``."""
        built["marker"] = Marker(built.get("marker", site.marker))
        return cls(site.index, site.extern.name, site.extern.symbol, site.where,
                   site.call_shape, scope=site.extern.scope, **built)

    def stored(self) -> dict:
        """The :attr:`STORED` fields, as a cache entry's JSON holds them."""
        return {name: str(v) if isinstance(v, Marker) else v
                for name, v in ((n, getattr(self, n)) for n in self.STORED)}

    def __str__(self) -> str:
        how = "inlined bod(ies)" if self.inlined else "call(s)"
        why = f" (not inlined: {self.why_not_inlined})" if self.why_not_inlined else ""
        marker = f"{self.marker} marker"
        if self.why_atomic:
            marker += f" (its fma marker was changed by tileiras: {self.why_atomic})"
        if self.scope == "block":
            return (f"site {self.index}: {self.extern} -> {self.symbol} at {self.where}, "
                    f"block scope: every thread of the block calls it once per execution, "
                    f"{self.instances} {how} in PTX{why}")
        return (f"site {self.index}: {self.extern} -> {self.symbol} at {self.where}, tile "
                f"shape {self.shape}, {self.instances} {how} in PTX{why}, {marker}")
