"""Warpgroup calls (``scope="warpgroup"``): every thread of the warpgroup that tileiras runs
the call site on calls the extern once per execution, convergently, with the arguments of
the thread tileiras ran the 0-d operation on.

Declaration: any result but a pointer; always kept in place and in order (never pure).
Arguments: scalars, pointers and tiles, as for block calls (tiles staged in shared memory
around the call by :mod:`splice.forms.staging`, spread over the group's 128 threads). Marker: a 0-d
atomic, which tileiras runs on one thread of the consumer warpgroup behind a ``tid.x != c`` guard,
joined at its named barrier (``barrier.sync 1, 128``) in a warp-specialised kernel, at ``bar.sync
0`` in a 128-thread kernel that is not; its global becomes the arguments' shared scratch. Each
instance: :func:`splice.forms.warpgroup_proof.prove_site` proves which threads reach it (one
warpgroup), the leader stores the arguments, the guard is retargeted so that every thread of the
group calls the extern between splice's own counting barriers (``docs/design.md#warpgroup-scope``).
Collectives: warp-level ones and the group's barrier in the callee; CTA barriers, other
barriers and raw ``blockDim``/``threadIdx`` reads are refused
(:meth:`WarpgroupForm.check_callees`, which :mod:`splice.driver.stages` runs for every form
present). The PTX analysis is imported when it runs (:func:`_ptx`): a cache hit loads the
forms, not the rewriter.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import TYPE_CHECKING

from ..ptxtools.spans import Generated
from .base import Scope, SiteInfo, generated_text, instances_text
from .block import BlockForm, marker_result

if TYPE_CHECKING:
    from ..ptxtools.spans import Span


class WarpgroupForm(BlockForm):
    """A warpgroup call on its 0-d atomic marker: a block call's declaration, argument
    rules and scratch (:class:`~splice.forms.block.BlockForm`), its own proof and code."""

    scope = Scope.WARPGROUP
    span_kind = "warpgroup call"
    takes_tiles = True

    def instance_edits(self, body, i, site, instance):
        """The edits of one instance of the site's marker (statement ``i``): the guard
        retargeted, the marker replaced by the leader's store of the arguments and the
        group's call (see :mod:`splice.forms.warpgroup_proof`, which proves it)."""
        ptx = _ptx()
        warpgroup_proof = ptx.warpgroup_proof
        parsed = body.parsed
        s, ins = parsed[i]
        what = f"warpgroup-scope call of {site.label} (site {site.index})"
        dest = marker_result(body, i, what)
        if site.index >= warpgroup_proof.MAX_SITES:
            raise body.fail(f"{what}: a kernel's warpgroup calls must be among its first "
                            f"{warpgroup_proof.MAX_SITES} call sites", i)
        try:
            proof = warpgroup_proof.prove_site(body.analysed, i)
            warpgroup_proof.check_registers(proof, site)
        except warpgroup_proof.WarpgroupRefusal as e:
            raise body.fail(f"{what}: cannot prove that every thread of a warpgroup reaches "
                            f"the call exactly once, at step '{e.step}': {e.reason}",
                            i) from None
        gs, gins = parsed[proof.guard]
        join = gins.operands[0]
        guard = f"@{gins.guard} {gins.opcode} \t{warpgroup_proof.group_label(site, instance)}; " \
                f"// splice: was {join}"
        text = warpgroup_proof.leader_block(site, instance, ins.operands[2:]) + "\n" + \
            warpgroup_proof.all_threads_block(site, instance, dest, join, proof.group,
                                              ptx.calls.call_block)
        return [(gs.start, gs.end, guard),
                (s.start, s.end, Generated(text, site.label, self.span_kind, site.index,
                                           instance))]

    def call_ends(self, body, i):
        """The group's guard G and join J (:func:`splice.forms.warpgroup_proof.prove_site`), and the
        group's :data:`~splice.forms.warpgroup_proof.GROUP_SIZE` threads, over which tileiras
        spreads the elements of a tile it runs there."""
        warpgroup_proof = _ptx().warpgroup_proof
        proof = warpgroup_proof.prove_site(body, i)     # a WarpgroupRefusal: a ProofRefusal
        return proof.guard, proof.join, warpgroup_proof.GROUP_SIZE

    def check_callees(self, sites, fragments, target: str, keys, kernel) -> None:
        """Refuse the sites whose extern runs what the group cannot
        (:func:`splice.forms.warpgroup_proof.check_sites`: the same arguments but
        ``kernel``), then what every callee is checked for
        (:func:`splice.forms.effects.check_every_callee`)."""
        ptx = _ptx()
        ptx.warpgroup_proof.check_sites(sites, fragments, target, keys)
        ptx.effects.check_every_callee(sites, fragments, target, keys)

    def describe(self, span: Span) -> str:
        return generated_text(span, "warpgroup-scope call sequence")

    def summary(self, info: SiteInfo) -> str:
        return (f"site {info.index}: {info.extern} -> {info.symbol} at {info.where}, "
                f"warpgroup scope: every thread of the warpgroup tileiras runs it on calls "
                f"it once per execution, {instances_text(info)}")


WARPGROUP = WarpgroupForm()


@functools.cache
def _ptx() -> SimpleNamespace:
    """The modules that prove and write a warpgroup call's PTX (:mod:`.warpgroup_proof`,
    :mod:`.calls`) and check its callees (:mod:`.warpgroup_proof`, :mod:`.effects`),
    imported on first use: a cache hit loads the forms, not the PTX parser."""
    from . import calls, effects, warpgroup_proof
    return SimpleNamespace(calls=calls, effects=effects, warpgroup_proof=warpgroup_proof)
