"""Block calls (``scope="block"``): every thread of the block calls the extern once per
execution of the call site, convergently, with thread 0's arguments.

Declaration: one result (any type but a pointer) or void; always kept in place and in order (never
pure). Arguments: scalars and pointers (every thread passes the same values). Marker: a 0-d atomic,
which tileiras runs on thread 0 behind a ``tid.x == 0`` guard; its global becomes the
arguments' shared scratch. Each instance: thread 0 stores the arguments, the guard is
retargeted so that every thread calls the extern, joined at tileiras's ``bar.sync 0``
(:func:`splice.forms.block_proof.prove_instance` proves it; ``docs/design.md#block-scope``).
Collectives: allowed in the callee. The PTX analysis is imported when it runs (:func:`_ptx`):
a cache hit loads the forms, not the rewriter.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import TYPE_CHECKING

from ..errors import ProofRefusal, SpliceDeclarationError
from ..ptxtools.spans import Generated
from . import cub_names
from .base import (
    FlagAnswers,
    Marker,
    Scope,
    SiteInfo,
    generated_text,
    instances_text,
    no_check_linked_callees,
    no_function_edits,
    no_key_load,
)

if TYPE_CHECKING:
    from ..ptxtools.spans import Span


class BlockForm(FlagAnswers):
    """A block call on its 0-d atomic marker."""

    scope = Scope.BLOCK
    marker = Marker.ATOMIC
    span_kind = "block call"
    runs_collectives = True
    straight_line_snippets = True
    per_function = False
    takes_tiles = True

    def declare(self, sig, options, what: str) -> bool:
        """A block-scope extern's result is one scalar, taken from one thread: any element
        type or void. (Its arguments are checked at the call: scalars and pointers.)"""
        if sig.result is not None and sig.result.kind == "p":
            raise SpliceDeclarationError(f"{what}: a {self.scope}-scope extern cannot return "
                                         f"a pointer")
        if sig.results:
            raise SpliceDeclarationError(f"{what}: a {self.scope}-scope extern returns one "
                                         f"scalar; several results are for element-scope "
                                         f"externs (return them through a pointer argument)")
        return False   # a cooperative call is always kept, in place and in order

    def check_arguments(self, typed, describe, positions) -> str | None:
        """Scalars and pointers: every thread of the block (of the group, for a subclass's
        scope) passes the same values. Its marker is then a 0-d atomic, which tileiras runs
        on one thread behind a ``tid.x == c`` guard (``docs/design.md#block-scope``;
        :mod:`splice.forms.block_proof`); tiles go to ``splice.tile`` parameters."""
        for i, var in zip(positions, typed):
            if var.get_type().shape != ():
                return (f"argument {i + 1} is {describe(var)}; a {self.scope}-scope extern "
                        f"(scope=\"{self.scope}\") takes scalars (0-d tiles, Python "
                        f"constants) and pointers (arrays) where its signature names them: "
                        f"declare the parameter splice.tile({var.get_type().dtype}) to pass "
                        f"the whole tile (staged in shared memory), or reduce the tile to a "
                        f"scalar")
        return None

    def for_call(self, pure_with_result: bool, atomic: bool):
        return self

    def with_marker(self, marker: Marker):
        return self

    def global_edit(self, index: int) -> Generated:
        block_proof = _ptx().block_proof
        return Generated(block_proof.scratch_declaration(index, self),
                         block_proof.scratch_owner(self), "splice", index)

    def instance_edits(self, body, i, site, instance):
        """The edits of one instance of the site's marker (statement ``i``): the guard
        retargeted, the marker replaced by thread 0's store of the arguments and every
        thread's call (see :mod:`splice.forms.block_proof`, which proves it)."""
        ptx = _ptx()
        block_proof = ptx.block_proof
        parsed, kernel_name = body.parsed, body.kernel_name
        s, ins = parsed[i]
        what = f"block-scope call of {site.label} (site {site.index})"
        ws = block_proof.warp_specialisation(body.analysed)
        if ws is not None:
            raise ptx.marked.rewrite_error(kernel_name,
                                           _warp_specialised(site, body.module, ws))
        dest = marker_result(body, i, what)
        try:
            g, _j = block_proof.prove_instance(body.analysed, i)
        except ProofRefusal as e:
            raise body.fail(f"{what}: cannot prove that every thread of the block reaches "
                            f"the call exactly once: {e}", i) from None
        gs, gins = parsed[g]
        join = gins.operands[0]
        guard = f"@{gins.guard} {gins.opcode} \t{block_proof.guard_label(site, instance)}; // " \
                f"splice: was {join}"
        text = block_proof.thread0_block(site, instance, ins.operands[2:]) + "\n" + \
            block_proof.all_threads_block(site, instance, dest, join, ptx.calls.call_block)
        return [(gs.start, gs.end, guard),
                (s.start, s.end, Generated(text, site.label, self.span_kind, site.index,
                                           instance))]

    def call_ends(self, body, i):
        """Thread 0's guard and the join at tileiras's ``bar.sync 0``
        (:func:`splice.forms.block_proof.prove_instance`), and the block's threads
        (``.reqntid``)."""
        block_proof = _ptx().block_proof
        g, j = block_proof.prove_instance(body, i)
        dims = block_proof.block_dims(body.module, body.fn)
        assert dims is not None     # prove_instance refuses a kernel without .reqntid
        return g, j, int(dims.split(",")[0])

    key_load = staticmethod(no_key_load)
    function_edits = staticmethod(no_function_edits)
    def check_callees(self, sites, fragments, target: str, keys, kernel) -> None:
        """Collectives are allowed in the callee; splice_group.h's group only where the
        block is one warpgroup (:func:`splice.forms.warpgroup_proof.check_block_sites`);
        then what every callee is checked for
        (:func:`splice.forms.effects.check_every_callee`)."""
        ptx = _ptx()
        ptx.warpgroup_proof.check_block_sites(sites, fragments, target, keys, kernel)
        ptx.effects.check_every_callee(sites, fragments, target, keys)

    #: a convergent callee's machine code may run collectives: nothing to read in the cubin
    check_linked_callees = staticmethod(no_check_linked_callees)

    def check_snippet(self, text: str, pack: int) -> str | None:
        """Every thread of the group runs a ``splice.asm`` snippet of this form once per
        execution, on scalars (:func:`scalar_snippet`)."""
        return scalar_snippet(self, text, pack)

    def describe(self, span: Span) -> str:
        return generated_text(span, "block-scope call sequence")

    def summary(self, info: SiteInfo) -> str:
        return (f"site {info.index}: {info.extern} -> {info.symbol} at {info.where}, "
                f"block scope: every thread of the block calls it once per execution, "
                f"{instances_text(info)}")


def marker_result(body, i: int, what: str) -> str:
    """The result register of a cooperative site's marker at statement ``i``, which must be
    unpredicated and the register's only definition."""
    ins = body.parsed[i][1]
    if ins.guard is not None:
        raise body.fail(f"{what}: the marker is predicated", i)
    dest = ins.operands[0]
    if dest != "_" and len(body.defs.get(dest, ())) != 1:
        raise body.fail(f"{what}: the marker's result register {dest} has other "
                        f"definitions", i)
    return dest


def scalar_snippet(form, text: str, pack: int) -> str | None:
    """What is wrong with a ``splice.asm`` snippet of ``form`` (PTX template ``text``,
    ``pack=``) that runs once per execution on every thread of its scope's group, or None:
    it takes
    scalars (its straight-line rule is :mod:`splice.analysis.asm_check`'s, by
    :attr:`~splice.forms.base.CallForm.straight_line_snippets`)."""
    if pack != 1:
        return f"pack={pack} packs tile elements; a {form.scope}-scope snippet takes scalars"
    return None


BLOCK = BlockForm()


def _warp_specialised(site, module, ws: str) -> str:
    """The refusal of block-scope ``site`` in a kernel tileiras warp-specialised (``ws``: the
    instruction that shows it), with the fix that works: a user's extern can be declared
    at warpgroup scope (tiles included) unless its code synchronises the whole block; a
    splice.cub call cannot (CUB synchronises the block), only a plain kernel runs it."""
    warpgroup_proof = _ptx().warpgroup_proof
    why = (f"tileiras warp-specialised this kernel ({ws!r}): its scalar operations run in a "
           f"subset of the block's warps, so splice cannot make every thread of the block "
           f"call")
    public = cub_names.call_of(site.label)
    if public is None:
        return (f"block-scope call of {site.label} (site {site.index}): {why} the extern. "
                f"Declare the extern scope=\"warpgroup\" to call it on the warpgroup that "
                f"runs the site, if its code has no barrier of the whole block: it then runs "
                f"on that warpgroup's {warpgroup_proof.GROUP_SIZE} threads, with "
                f"splice_group_rank(), splice_group_size() and splice_group_sync() from "
                f"#include <splice_group.h> for threadIdx, blockDim and "
                f"__syncthreads(){warpgroup_proof.tma_hint(module)}")
    name, where = public
    fix = warpgroup_proof.tma_fix(module)
    return (f"{name} at {where} (site {site.index}): {why} it. {name} runs at block scope "
            f"only (CUB synchronises the whole block with __syncthreads()), so it has no "
            f"warpgroup form: " + (f"{fix[0].upper()}{fix[1:]}" if fix else
                                   "the kernel has no TMA copies (allow_tma=False would not "
                                   "change it); " + _no_tma_fix(module)))


def _no_tma_fix(module) -> str:
    """The fix for a kernel tileiras warp-specialised without TMA copies: one with ct.mma
    (wgmma) stays so; otherwise tileiras chose it (it pipelines the gathers or loads of an
    unrolled loop in a producer warpgroup, or splits wide tiles): a loop it does not unroll
    or cuTile's occupancy hint gave a plain 128-thread block in docs/recipes."""
    if "wgmma." in module.text.split(".nv_intermediate_source_section")[0]:
        return "call it from a kernel without ct.mma"
    return ("tileiras chose to split the block (it pipelines the unrolled loads or gathers "
            "of a loop in a producer warpgroup, or splits wide tiles): give such a loop a "
            "trip count that is a kernel argument (tileiras unrolls ct.static_iter and "
            "range() of a count it knows), or ask for a 128-thread block with cuTile's "
            "occupancy hint, @splice.kernel(occupancy=2)")


@functools.cache
def _ptx() -> SimpleNamespace:
    """The modules that prove and write a block call's PTX (:mod:`.block_proof`,
    :mod:`.calls`, :mod:`.marked`) and check its callees (:mod:`.warpgroup_proof`'s rule on
    the group header, :mod:`.effects`), imported on first use: a cache hit loads the forms,
    not the PTX parser."""
    from . import block_proof, calls, effects, marked, warpgroup_proof
    return SimpleNamespace(block_proof=block_proof, calls=calls, effects=effects,
                           marked=marked, warpgroup_proof=warpgroup_proof)
