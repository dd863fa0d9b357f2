"""Tiles into and out of cooperative calls: ``scope="block"`` and ``scope="warpgroup"``
externs whose parameters or result are ``splice.tile(dtype, shape=None)``.

A call ``y = f(t, k)`` of ``f(x: splice.tile(ct.float32), k: ct.int32) ->
splice.tile(ct.float32)`` is traced as three kinds of call sites, all of them externs of
one fragment splice generates for the call (:class:`TileFragment`)::

    idx = reshape(arange(N), t.shape)     # the row-major index, built by splice
    __splice_tile_<g>_store0(t, idx)      # element site, impure: buf0[idx] = t, exactly
                                          # once per element, on the thread that owns it
    __splice_tile_<g>_call(k)             # block (or warpgroup) site: every thread calls
                                          # f(*(float(*)[N])buf0, k, *(float(*)[N])out)
    y = __splice_tile_<g>_load(idx_r)     # element site, impure: y = out[idx_r]

``buf0`` and ``out`` are ``.shared`` buffers of that fragment (one per tile argument, one
for a tile result: separate in and out buffers, so that a call in a loop needs no extra
barrier), ``<g>`` numbers the tile calls of the trace. The element sites are impure, so
cuTile keeps them in program order with the block site (its memory token), and tileiras
puts a ``bar.sync 0`` between consecutive impure operations.

**Why the call sees every element and the kernel every result** (checked on the PTX by
:func:`check_staging`; anything else is a :class:`~splice.errors.SpliceRewriteError` naming
the step):

1. the block site is proven as any block site (:mod:`splice.forms.block_proof`): every thread of the
   block executes it once per execution, and its first barrier orders everything before it
   (the stores) before the call, its last barrier the call's stores before what follows;
2. *stores*: the instances of each store site lie in the straight-line stretch that ends at
   the block site's guard (no label, branch, call, exit before it up to the stretch's start:
   tileiras's barriers are allowed, and so are forward skips -- a predicated ``bra`` over
   straight-line code to a label nothing else names, which tileiras puts around the
   element operations of a tile smaller than the block: a thread runs them or not and
   goes on once either way; another block site's guard ends the stretch), so a thread that
   reaches the call executed all of its stores of this execution just before; their
   number per stretch is the tile's elements per thread (``ceil(elements / threads)``)
   and every instance of the site lies in such a stretch;
3. *loads*: the same for the load site, in the straight-line stretch after the block site's
   join.

**At warpgroup scope** (:mod:`splice.forms.warpgroup_proof`) the same staging and the same proof
hold with the warpgroup site in the block site's place: 1. is
:func:`splice.forms.warpgroup_proof.prove_site` (every thread of one warpgroup reaches it once;
splice's counting entry barrier over the group orders the stores before the call, its exit barrier
the call before the loads), and the elements per thread of 2. and 3. count the group's 128 threads,
not the block's: the ``threads`` of :meth:`~splice.forms.base.CallForm.call_ends`, which each form
answers.

**Shared memory**: the buffers of one call beyond :data:`MAX_SHARED_BYTES` are refused at
the call (:mod:`splice.declare.tile_trace`); once the fragments are merged,
:func:`splice.ptxtools.shared_memory.check_block_limit` adds every static ``.shared``
declaration of the kernel (the
buffers, tileiras's own, the callee's ``__shared__``) and refuses a total beyond the
block's maximum before ptxas runs, naming each owner's bytes (next to the 128x128x64 TMA
matmul's 196,760 B that leaves about 35 KB: a (128,) float32 vector, 1 KB in and out,
fits; a 128x128 float32 accumulator, 64 KB each way, does not).

An element that is padding (a partial tile at an array's edge, loaded with ``ct.load``'s
padding) is staged like the others: the function sees the whole tile; pass the number of
valid elements as a scalar argument.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..errors import ProofRefusal

#: The parts of a tile call (:attr:`Staging.role`).
ROLES = ("store", "call", "load")



@dataclasses.dataclass(frozen=True)
class Staging:
    """The part an extern plays in a tile call (``ExternFunction.staging``).

    Attributes:
        role: ``"store"`` (an element site storing a tile argument), ``"call"`` (the block
            site) or ``"load"`` (an element site loading the tile result).
        group: the tile call's number in its trace.
        elements: the elements of the tile the site stores or loads (0 for ``"call"``).
        what: the tile in messages ("tile argument 1 of 'sort' at k.py:12").
        threads: for ``"call"``, the block size the function needs, or None: any.
    """

    role: str
    group: int
    elements: int = 0
    what: str = ""
    threads: int | None = None


# --------------------------------------------------------------------------------------------
# The fragment of one tile call


# --------------------------------------------------------------------------------------------
# Declaration


# --------------------------------------------------------------------------------------------
# The proof on the PTX (see the module docstring)

_STOP = ("bra", "brx", "ret", "exit", "call", "trap")


def check_staging(body, sites, at: Mapping[int, list[int]]) -> str | None:
    """Points 2 and 3 of the module docstring for every tile call of the function ``body``
    (a :class:`splice.ptxtools.ptx.Body`): ``at`` holds the statement indices of each atomic site's
    marker instances, ``sites`` the sites (``.staging``, ``.form``). The threads a call's
    elements are spread over come from its form (:meth:`~splice.forms.base.CallForm.call_ends`:
    the block's at block scope, the warpgroup's 128 at warpgroup scope). Returns why the
    staging is not proven, naming the step, or None."""
    from . import block_proof
    groups: dict[int, dict[str, list[tuple[Any, list[int]]]]] = {}
    for idx, positions in at.items():
        st = sites[idx].staging
        if st is not None:
            assert st.role in ROLES, st
            groups.setdefault(st.group, {}).setdefault(st.role, []).append(
                (sites[idx], positions))
    parsed = body.parsed
    refs = _label_refs(parsed)
    ends = _call_ends(body, sites, at)
    skips = _Skips(parsed, refs, frozenset(e[0] for e in ends.values()))
    for group, roles in groups.items():
        missing = [sc for idx, sc in sites.items() if idx not in at and
                   sc.staging is not None and sc.staging.group == group]
        if missing:
            return (f"step 'every part in the function': {missing[0].staging.what} has no "
                    f"marker instance in it (tileiras removed or moved it)")
        [(call_site, call_at)] = roles["call"]     # present: every part is (above)
        counted: dict[int, int] = {}
        for i in call_at:
            if i not in ends:
                continue    # the call site's own proof reports it
            g, j, threads = ends[i]
            need = call_site.staging.threads
            if need is not None and need != threads:
                return (f"step 'block size': {call_site.staging.what} is compiled for blocks "
                        f"of {need} threads, and tileiras runs it on {threads} (.reqntid "
                        f"{block_proof.block_dims(body.module, body.fn)})")
            lo, hi = skips.stretch_before(g), skips.stretch_after(j)
            for role, window in (("store", range(lo, g)), ("load", range(j + 1, hi))):
                for site, positions in roles.get(role, []):
                    n = sum(1 for p in positions if p in window)
                    why = _count(site, role, n, threads, call_site)
                    if why is not None:
                        return why
                    counted[site.index] = counted.get(site.index, 0) + n
        for role in ("store", "load"):
            for site, positions in roles.get(role, []):
                if counted.get(site.index, 0) != len(positions):
                    return (f"step '{role}s in one straight-line stretch with the call': "
                            f"{site.staging.what}: {len(positions) - counted.get(site.index, 0)}"
                            f" of its {len(positions)} {role} instance(s) lie outside the "
                            f"straight-line code around the call")
    return None


def _count(site, role: str, n: int, threads: int, call_site) -> str | None:
    """Why ``n`` instances of the store or load ``site`` in the stretch around one call
    instance are not the tile's elements per thread (``ceil(elements / threads)``)."""
    want = -(-site.staging.elements // threads)
    if n == want:
        return None
    return (f"step '{'stores before' if role == 'store' else 'loads after'} the call': "
            f"{site.staging.what} has {n} {role} instance(s) per thread in the straight-line "
            f"code {'before' if role == 'store' else 'after'} the {call_site.form.scope} call "
            f"(site {call_site.index}), not {want} ({site.staging.elements} elements on "
            f"{threads} threads)")


def _label_refs(parsed) -> dict[str, int]:
    """How often each label name appears in ``parsed`` (its definition included)."""
    refs: dict[str, int] = {}
    for s, _ins in parsed:
        for t in s.tokens:
            if t.text.startswith("$"):
                refs[t.text] = refs.get(t.text, 0) + 1
    return refs


def _call_ends(body, sites, at) -> dict[int, tuple[int, int, int]]:
    """Every proven instance of a call site whose form takes tiles: marker statement ->
    (guard, join, threads) (:meth:`~splice.forms.base.CallForm.call_ends`)."""
    out = {}
    for idx, positions in at.items():
        form = sites[idx].form
        if not form.takes_tiles:
            continue
        for i in positions:
            try:
                out[i] = form.call_ends(body, i)
            except ProofRefusal:
                pass    # the call site's own proof reports it
    return out


@dataclasses.dataclass(frozen=True)
class _Skips:
    """Straight-line stretches of one function, with forward skips: ``parsed`` its
    statements, ``refs`` :func:`_label_refs`, ``guards`` the guards of its block sites
    (which end a stretch: another call)."""

    parsed: list
    refs: dict
    guards: frozenset

    def skip(self, k: int) -> tuple[int, int] | None:
        """``(k, j)`` when statement ``k`` is a forward skip: a predicated ``bra`` (not a
        block site's guard) to the label at ``j`` over straight-line code, the label named
        by nothing else. A thread runs the code between them or not, and reaches ``j``
        once either way (tileiras guards the element operations of a tile smaller than
        the block so: only the owner threads run them)."""
        parsed = self.parsed
        s, ins = parsed[k]
        if k in self.guards or ins is None or ins.base != "bra" or ins.guard is None or \
                len(ins.operands) != 1:
            return None
        target = ins.operands[0]
        j = k + 1
        while j < len(parsed) and _straight(parsed[j]):
            j += 1
        if j < len(parsed) and parsed[j][0].kind == "label" and \
                parsed[j][0].tokens[0].text == target and self.refs.get(target) == 2:
            return k, j
        return None

    def stretch_before(self, g: int) -> int:
        """The first statement of the straight-line code that ends at statement ``g``: no
        label, branch, call or exit in ``[result, g)`` (barriers and other instructions
        are), but for forward skips."""
        parsed, k = self.parsed, g
        while k > 0:
            if _straight(parsed[k - 1]):
                k -= 1
                continue
            if parsed[k - 1][0].kind == "label":
                b = k - 2
                while b >= 0 and _straight(parsed[b]):
                    b -= 1
                if b >= 0 and self.skip(b) == (b, k - 1):
                    k = b
                    continue
            break
        return k

    def stretch_after(self, j: int) -> int:
        """One past the last statement of the straight-line code that starts after ``j``,
        but for forward skips."""
        parsed, k = self.parsed, j + 1
        while k < len(parsed):
            if _straight(parsed[k]):
                k += 1
                continue
            hop = self.skip(k)
            if hop is None:
                break
            k = hop[1] + 1
        return k


def _straight(entry) -> bool:
    s, ins = entry
    if s.kind == "directive":
        return True
    return s.kind == "instruction" and ins is not None and ins.base not in _STOP
