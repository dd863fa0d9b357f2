"""Warpgroup-scope call sites (``scope="warpgroup"``): every thread of the warpgroup that
tileiras runs the call site on calls the extern once per execution, convergently, with the
arguments tileiras computed for the site.

On sm_90 tileiras warp-specialises most kernels with a TMA load or store, a ``ct.mma`` or a
reduction (``docs/design.md#warpgroup-scope``): warps 0-3 (one *warpgroup*, threads
0-127) run the tile code, warp 4 issues the TMA loads, warp 5 the TMA stores (with a
reduction of a ``ct.mma`` accumulator in the epilogue, a second warpgroup, threads 128-255,
runs the epilogue after a ``setmaxnreg.dec``, joined at ``barrier.sync 2, 128``). A 0-d
operation in the tile code runs on one thread of the warpgroup and rejoins it at tileiras's
named barrier::

        mov.u32      %r1, %tid.x;  shr.u32 %r2, %r1, 5;
        shfl.sync.idx.b32  %r3, %r2, 0, 31, -1;          // the warp id, per warp
        setp.gt.u32  %p2, %r3, 3;
        @%p2 bra     $L__BB0_15;                           // R: warps 4.. skip the group's code
        ...
        setp.ne.b32  %p1, %r1, 0;
        @%p1 bra     $L__BB0_14;                           // G: the site's guard
        atom.global.acq_rel.cas.b32 %r32, [%rd17], %r7, 0; // M: the marker, on thread 0
        st.shared.b32 [smem+1024], %r32;
    $L__BB0_14:                                            // J: the join
        barrier.sync 1, 128;                               // B: tileiras's group barrier
        ...
    $L__BB0_15:

:func:`prove_site` proves, for the marker at M, which threads reach it, that they form
one warpgroup, and that splice's barriers around the call are correct; each failed step is
a :class:`WarpgroupRefusal` naming the step (the rewriter's
:class:`~splice.errors.SpliceRewriteError`):

1. **kernel**: a fixed one-dimensional block (``.reqntid``), no cluster, no thread that
   exits early (no ``exit``, no predicated ``ret``).
2. **barrier ids**: every ``bar``/``barrier`` of the kernel names its barrier (and its
   thread count) with an immediate, and none uses :data:`GROUP_BARRIER`, the id splice
   keeps for its own barriers and the callee's ``splice_group_sync()``. So the only
   barriers with that id are splice's.
3. **site shape**: the guard G is a branch taken exactly by the threads with
   ``tid.x != c`` (a single thread ``c``; tileiras's epilogue warpgroup tests
   ``tid.x - 128 != 0``: :func:`guard_thread`), the guarded code is straight-line and falls
   through to the join J, which nothing but G names (as for block scope,
   :mod:`splice.forms.block_proof`).
4. **join barrier**: J is followed, through straight-line code, by an unpredicated
   ``barrier.sync``/``bar.sync`` with immediate id and count (the warp-specialised case), or
   by ``bar.sync 0`` (a kernel that is not warp-specialised).
5. **threads**: which warps can reach G, by a forward analysis over the control-flow graph
   from the kernel's entry in which every branch on a *per-warp-uniform* value -- the warp
   id ``tid.x >> 5`` (or its ``shfl.sync.idx`` from lane 0, or that and a constant through
   ``add``, ``and``, ...) compared with a constant -- sends each warp its own way, and every other
   branch both ways. The warps that can reach G must be exactly one warpgroup (4 consecutive warps,
   the first a multiple of 4: 128 threads), they must number the join barrier's count, and the
   region the warp branch R opens must be entered only through R (no branch from outside it
   to a label inside it: no loop entered partway). In a kernel that is not warp-specialised
   the group is the block, which must be 128 threads.
6. **wgmma**: no path from a ``wgmma.mma_async`` or ``wgmma.commit_group`` reaches M
   without a ``wgmma.wait_group 0`` (the call does not sit inside an open wgmma group,
   whose accumulator registers the asynchronous MMA still writes).
7. **registers**: where a path from a ``setmaxnreg.dec`` reaches M (warps whose register
   budget tileiras cut: its TMA warps, or the epilogue warpgroup it splits off when the
   epilogue reduces the accumulator), the call must be an inlined body that calls nothing
   (:func:`check_registers`): ptxas allocates that within the cut budget, as it does
   tileiras's own code there; a called function has a register count of its own.

**Why every thread of the group calls the extern once per execution.** Only the group's
threads reach G (5.), and splice's code sits between G and J: thread ``c`` stores the
arguments into shared memory, every thread of the group meets at the entry barrier
(``barrier.red.popc`` with :data:`GROUP_BARRIER` and count 128; only splice uses that id,
2.), so the barrier completes only when 128 threads have arrived, all of them the group's.
It counts them (a thread that exited is excused from a barrier and would be missing from the
call: then the count is short and the entry traps), and a second one counts the threads of
rank below the site's identity (:func:`site_identity`), which is that identity only when
every thread is at this site (else the threads of one site or the other trap). With a whole
warp exited the first never completes (it waits for 128 arrivals): a hang, still never a
partial call (``tests/test_warpgroup_scope.py`` runs both on the CPU executor). Then every thread
calls the extern, meets the others at the exit barrier (same id and count; both barriers are the
non-aligned form, correct also where the leader's path has not reconverged with its warp's: the
callee's stores are visible to the group after it, and thread ``c`` does not overwrite the arguments
of the next execution before every thread has read them), and thread ``c`` goes on with tileiras's
code after the marker, the others to J. A partial or mixed call is a trap, never a wrong result.

**The callee** (:func:`check_callee`): the group is 128 threads of a larger block, so a
CTA-wide barrier (``__syncthreads``, ``bar.sync 0``, ``barrier.sync 0``, ``bar.red.* 0``,
CUB's ``CTA_SYNC``) would wait for warps that never come (the TMA warps wait on an mbarrier
the group arrives at only after the call): refused, with the chain of functions. So is any
other barrier than the group's, and any read of ``%ntid`` (``blockDim``: 256 in the TMA
matmul where the group is 128) or of ``%tid`` (``threadIdx``: not the rank in a group that
does not start at thread 0). The header ``splice_group.h`` gives ``splice_group_rank()``,
``splice_group_size()`` and ``splice_group_sync()``.

**Tiles.** A warpgroup call takes tile arguments and results as a block call does
(:mod:`splice.forms.staging`: one staging for both scopes): the owner threads store each element
into splice's shared buffer in the straight-line code before G, every thread of the group
loads the result after J, and the elements are spread over the group's
:data:`GROUP_SIZE` threads (``call_ends`` of the form says so), not the block's. The
buffers, tileiras's own shared memory and the callee's must fit in the block's maximum
(:func:`splice.ptxtools.shared_memory.check_block_limit`: about 35 KB next to the 128x128x64 TMA
matmul's 196,760 B): a (128,) vector fits, a 128x128 float32 accumulator does not.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..analysis import collectives, control
from ..errors import ProofRefusal, SpliceLinkError
from ..ptxtools.ptx import Body, Instruction, Module, parse_instruction
from . import block_proof, warpgroup_callee
from .base import site_module

#: The named barrier id of splice's entry and exit barriers and of ``splice_group_sync()``.
GROUP_BARRIER = 15
#: Threads in a warpgroup.
GROUP_SIZE = 128
#: The register the header's ``splice_group_rank()`` reads ``%tid.x`` into: the one raw
#: ``%tid`` read :func:`callee_refusal` accepts, and only as the header uses it (masked to
#: the rank, ``and.b32 d, %splice_group_tid, 127``, and read nowhere else).
RANK_REGISTER = "%splice_group_tid"

_WGMMA_OPEN = ("wgmma.mma_async", "wgmma.commit_group")


class WarpgroupRefusal(ProofRefusal):
    """A step of the proof that failed: ``step`` (e.g. "threads") and ``reason``."""

    def __init__(self, step: str, reason: str):
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Group:
    """The threads a warpgroup site runs on.

    Attributes:
        first_thread: ``tid.x`` of the group's rank 0 (a multiple of 128).
        leader: ``tid.x`` of the thread tileiras runs the 0-d operation on (it computes the
            arguments; splice passes its values to every thread).
        join_barrier: tileiras's join barrier, as text (``"barrier.sync 1, 128;"``).
        warp_specialised: whether the group is a subset of the block.
    """

    first_thread: int
    leader: int
    join_barrier: str
    warp_specialised: bool


@dataclasses.dataclass(frozen=True)
class SiteProof:
    """What :func:`prove_site` established for one marker instance: ``guard`` and ``join``
    (statement indices of G and J), the :class:`Group`, and ``registers_cut``: whether a
    ``setmaxnreg.dec`` reaches the site (step 7: then only a call-free inlined body may
    run there, :func:`check_registers`)."""

    guard: int
    join: int
    group: Group
    registers_cut: bool = False


def prove_site(body: Body, i: int) -> SiteProof:
    """Prove steps 1-7 of the module docstring for the marker at statement ``i`` of the
    analysed function ``body``.

    Raises:
        WarpgroupRefusal: the first step that fails, with its reason.
    """
    ntid = _check_kernel(body)
    _check_barrier_ids(body)
    g, c, target = _guard(body, i)
    try:
        j = block_proof.join_of(body, g, i, target)
    except ProofRefusal as e:
        raise WarpgroupRefusal("site shape", str(e)) from None
    b, bins = _join_barrier(body, j)
    group = _group(body, g, b, bins, c, ntid)
    _check_reaching(body, i, lambda ins: ins.opcode.startswith(_WGMMA_OPEN),
                    lambda ins: ins.opcode.startswith("wgmma.wait_group") and
                    ins.operands == ("0",), "wgmma",
                    "the call site is inside an open wgmma group: a wgmma.mma_async may "
                    "still be running when it is reached (no wgmma.wait_group 0 between)")
    cut = control.reaches(body, i, lambda ins: ins.opcode.startswith("setmaxnreg.dec"),
                   lambda ins: False)
    return SiteProof(g, j, group, cut)


def check_registers(proof: SiteProof, site) -> None:
    """Step 7 for the call of ``site`` (a :class:`~splice.forms.base.SiteCall`) at a
    proven instance: where a ``setmaxnreg.dec`` reaches the site, the call must be an
    inlined body that calls nothing. ptxas then allocates its registers inside the budget
    tileiras cut, as it does for tileiras's own epilogue code there (measured on sm_90: the
    TMA matmul's epilogue warpgroup, ``setmaxnreg.dec 32``, with an inlined tile call uses
    registers up to R23 only); a called function is compiled with a register count of its
    own, which that budget does not bound.

    Raises:
        WarpgroupRefusal: step "registers".
    """
    if not proof.registers_cut:
        return
    why = "it is called, not inlined" if site.inline is None else _calls_in(site.inline)
    if why is not None:
        raise WarpgroupRefusal(
            "registers", f"the call site is reached after a setmaxnreg.dec (warps whose "
            f"register budget tileiras cut, e.g. its TMA warps or epilogue warpgroup), "
            f"where only an inlined body that calls nothing can run within the cut budget, "
            f"and {why}. Keep the extern inlinable (inline=\"auto\" or \"always\", no "
            f"calls of functions it cannot inline)")


def _calls_in(body: tuple) -> str | None:
    """Why the inlined body ``body`` ((Module, Function)) is not call-free, or None."""
    mod, fn = body
    for st in mod.body_statements(fn):
        if st.kind == "instruction" and parse_instruction(st, mod.text).base == "call":
            return f"its body calls another function ('{' '.join(st.text(mod.text).split())}')"
    return None


# ---------------------------------------------------------------------------------------------
# Steps 1-4


_TMA_LOAD = re.compile(r"\bcp\.async\.bulk\.tensor\.\dd\.shared")
_TMA_STORE = re.compile(r"\bcp\.async\.bulk\.tensor\.\dd\.global")


def tma_hint(module: Module) -> str:
    """What the message refusing a block call in a warp-specialised kernel adds about TMA:
    which copies the kernel has (``allow_tma=False`` on those ct.load/ct.store calls makes
    the kernels measured in ``docs/design.md#warpgroup-scope`` plain), or that it has none
    (then ``allow_tma=False`` changes nothing: ct.mma, or tileiras's own choice)."""
    fix = tma_fix(module)
    if fix is None:
        return " (the kernel has no TMA copies, so allow_tma=False would not change it)"
    return f", or {fix}"


def tma_fix(module: Module) -> str | None:
    """How to make the kernel of ``module`` plain (not warp-specialised): ``allow_tma=False``
    on the ct.load/ct.store calls whose TMA copies it has; None: it has none."""
    code = module.text.split(".nv_intermediate_source_section")[0]
    kinds = [k for k, r in (("ct.load", _TMA_LOAD), ("ct.store", _TMA_STORE)) if r.search(code)]
    if not kinds:
        return None
    return (f"pass allow_tma=False to its {' and '.join(kinds)} calls (its TMA copies) for a "
            f"kernel without warp specialisation, where a block call works")


def _check_kernel(body: Body) -> int:
    try:
        dims = block_proof.check_kernel(body)
    except ProofRefusal as e:
        raise WarpgroupRefusal("kernel", str(e)) from None
    ntid = int(dims.split(",")[0])
    if ntid % 32:
        raise WarpgroupRefusal("kernel", f"the block ({ntid} threads) is not whole warps")
    return ntid


def barrier_operands(ins: Instruction) -> tuple[str, str | None] | None:
    """(id, thread count or None) of a ``bar``/``barrier`` instruction of the CTA (not
    ``.warp``, not ``.cluster``), else None."""
    if ins.base not in ("bar", "barrier") or ins.modifiers[:1] in (("warp",), ("cluster",)):
        return None
    ops = ins.operands
    if "red" in ins.modifiers:          # bar.red.op.type d, a{, b}, {!}c
        return ops[1], (ops[2] if len(ops) == 4 else None)
    return ops[0], (ops[1] if len(ops) > 1 else None)


def _check_barrier_ids(body: Body) -> None:
    module = body.module
    for s, ins in body.parsed:
        if ins is None:
            continue
        ids = barrier_operands(ins)
        if ids is None:
            continue
        text = " ".join(s.text(module.text).split())
        if any(x is not None and control.immediate(x) is None for x in ids):
            raise WarpgroupRefusal("barrier ids", f"the barrier {text!r} names its id or "
                                   f"thread count with a register, so splice cannot prove "
                                   f"which barriers its own barrier id {GROUP_BARRIER} meets")
        if control.immediate(ids[0]) == GROUP_BARRIER:
            raise WarpgroupRefusal("barrier ids", f"the kernel already uses barrier id "
                                   f"{GROUP_BARRIER}, splice's group barrier ({text!r})")


def guard_thread(guard: str, body: Body) -> int | None:
    """The thread ``c`` when ``@guard`` is true exactly for the threads with ``tid.x != c``
    (the guard predicate is a ``setp`` comparing ``tid.x + k`` (:func:`_tid_offset`) with
    an immediate); else None."""
    found = control.setp_of(guard, body)
    if found is None:
        return None
    ins, negated = found
    if (ins.modifiers[0], negated) not in (("ne", False), ("eq", True)):
        return None
    _, a, b = ins.operands
    imm_a, imm_b = control.immediate(a), control.immediate(b)
    reg, imm = (a, imm_b) if imm_a is None else (b, imm_a)
    if imm is None:
        return None
    offset = _tid_offset(reg, body)
    return None if offset is None else (imm - offset) & 0xFFFFFFFF


def _tid_offset(reg: str, body: Body) -> int | None:
    """``k`` when ``reg == tid.x + k`` (32 bits) in every thread: ``reg`` is a register that
    only ``mov %tid.x`` defines (k = 0), or one whose only definition is an unpredicated
    32-bit ``add`` of such a register and an immediate (tileiras's rank in the second
    warpgroup, ``tid.x - 128``); else None."""
    if control.tid_register(reg, body):
        return 0
    if len(body.defs.get(reg, ())) != 1:
        return None
    ins = body.parsed[body.defs[reg][0]][1]
    if ins is None or ins.guard is not None or ins.base != "add" or \
            ins.modifiers not in (("s32",), ("u32",)) or len(ins.operands) != 3 or \
            ins.operands[0] != reg:
        return None
    _, a, b = ins.operands
    imm_a, imm_b = control.immediate(a), control.immediate(b)
    src, k = (a, imm_b) if imm_a is None else (b, imm_a)
    return k if k is not None and control.tid_register(src, body) else None


def _guard(body: Body, i: int) -> tuple[int, int, str]:
    """Step 3: back from the marker at ``i`` through straight-line code to the guard G.
    Returns G's statement index, the thread ``c`` that falls through it and its target."""
    module, parsed = body.module, body.parsed
    g = i - 1
    while g >= 0 and (parsed[g][0].kind == "directive" or
                      ((ins := parsed[g][1]) is not None and ins.base not in block_proof._BRANCH_OPS
                       and ins.base not in ("bar", "barrier", "atom"))):
        g -= 1
    gins = parsed[g][1] if g >= 0 else None
    if gins is None or gins.base != "bra" or gins.guard is None or len(gins.operands) != 1:
        found = parsed[g][0].text(module.text).strip() if g >= 0 else "the entry"
        raise WarpgroupRefusal("site shape", f"the marker is not behind a branch on the "
                               f"thread index (found {found!r} before it)")
    c = guard_thread(gins.guard, body)
    if c is None:
        raise WarpgroupRefusal("site shape", f"the branch before the marker "
                               f"({parsed[g][0].text(module.text).strip()!r}) does not skip "
                               f"exactly the threads with tid.x != c for one thread c")
    return g, c, gins.operands[0]


def _join_barrier(body: Body, j: int) -> tuple[int, Instruction]:
    """Step 4: the barrier B after the join at ``j``, through straight-line code."""
    module, parsed = body.module, body.parsed
    b = j + 1
    while b < len(parsed) and (parsed[b][0].kind == "directive" or (
            (nxt := parsed[b][1]) is not None and nxt.base not in block_proof._BRANCH_OPS and
            nxt.base not in ("bar", "barrier"))):
        b += 1
    ins = parsed[b][1] if b < len(parsed) else None
    found = parsed[b][0].text(module.text).strip() if b < len(parsed) else "the end"
    if ins is not None and ins.opcode == "bar.warp.sync":
        raise WarpgroupRefusal(
            "join barrier", f"tileiras runs this site in a single warp, joined by {found!r}: "
            f"in a warp-specialised kernel that is its TMA warp, where tileiras puts scalar "
            f"code whose result no tile operation of the consumer warps needs at once. Use "
            f"the call's result in the tile code where it is computed (e.g. t = t * f(s) "
            f"inside the branch), so that it runs in the consumer warpgroup; a void call "
            f"has none, but a declaration memory=\"arguments\" (when it touches global "
            f"memory only through its pointer arguments) or the tile it works on as an "
            f"argument (a splice.tile parameter) can keep it there")
    if ins is None or ins.guard is not None or ins.opcode not in block_proof.BARRIER_OPS + (
            "barrier.sync", "barrier.cta.sync"):
        raise WarpgroupRefusal("join barrier", f"the join label is not followed by an "
                               f"unpredicated barrier of the CTA but by {found!r}")
    return b, ins


# ---------------------------------------------------------------------------------------------
# Step 5: the threads


def _group(body: Body, g: int, b: int, bins: Instruction, c: int, ntid: int) -> Group:
    bid, count = barrier_operands(bins) or ("", None)
    text = " ".join(body.parsed[b][0].text(body.module.text).split())
    if count is None:
        # bar.sync 0: the whole block joins -- a kernel that is not warp-specialised
        if control.immediate(bid) != 0:
            raise WarpgroupRefusal("join barrier", f"the site joins at {text!r}, a named "
                                   f"barrier without a thread count")
        ws = block_proof.warp_specialisation(body)
        if ws is not None:
            raise WarpgroupRefusal("join barrier", f"the site joins at {text!r}, a barrier "
                                   f"of the whole block, in a kernel tileiras "
                                   f"warp-specialised ({ws!r})")
        if ntid != GROUP_SIZE:
            raise WarpgroupRefusal(
                "threads", f"in a kernel that is not warp-specialised a warpgroup call runs "
                f"on the whole block, which must then be one warpgroup ({GROUP_SIZE} "
                f"threads); this block has {ntid} (.reqntid). Declare the extern "
                f"scope=\"block\" to call it on every thread of the block")
        if not 0 <= c < ntid:
            raise WarpgroupRefusal("threads", f"the site runs on thread {c}, outside the "
                                   f"block of {ntid} threads")
        return Group(0, c, text, False)
    nwarps = ntid // 32
    _check_region_entry(body, g)
    reach = control.warps_reaching(body, nwarps)
    warps = sorted(reach[g])
    if int(count, 0) != GROUP_SIZE or len(warps) * 32 != GROUP_SIZE or \
            warps != list(range(warps[0], warps[0] + 4)) or warps[0] % 4:
        raise WarpgroupRefusal(
            "threads", f"the threads that can reach the site are warp(s) {_ranges(warps)} "
            f"({32 * len(warps)} threads) and its join barrier is {text!r}: not one "
            f"warpgroup of {GROUP_SIZE} threads (4 consecutive warps, the first a multiple "
            f"of 4) joined by a barrier over exactly them{_workers_hint(warps)}")
    if sorted(reach[b]) != warps:
        raise WarpgroupRefusal("threads", f"the join barrier {text!r} is reached by warps "
                               f"{_ranges(sorted(reach[b]))}, not only the site's "
                               f"{_ranges(warps)}")
    first = 32 * warps[0]
    if not first <= c < first + GROUP_SIZE:
        raise WarpgroupRefusal("threads", f"the site runs on thread {c}, outside the "
                               f"warpgroup of threads {first}-{first + GROUP_SIZE - 1}")
    return Group(first, c, text, True)


def _workers_hint(warps: Sequence[int]) -> str:
    """For a site reached by several whole warpgroups (tileiras's consumer warpgroups: the
    kernel option ``num_worker_warps`` sets how many warps they have), the option that
    makes one; else nothing."""
    n = len(warps)
    if n <= 4 or n % 4:
        return ""
    return (f". {n // 4} consumer warpgroups run the site: the kernel option "
            f"num_worker_warps={n} makes them. Leave num_worker_warps unset (or give 4) "
            f"for one consumer warpgroup, where a warpgroup call works")


def _ranges(warps: Sequence[int]) -> str:
    if len(warps) < 2:
        return str(warps[0]) if warps else "none"
    return f"{warps[0]}-{warps[-1]}" if warps == list(range(warps[0], warps[-1] + 1)) \
        else ", ".join(map(str, warps))


def _check_region_entry(body: Body, g: int) -> None:
    """Step 5, the region: the nearest branch R before G on a per-warp-uniform predicate
    whose target T comes after G opens the group's region (R+1 .. T); no branch from outside
    it names a label inside it."""
    module, parsed, labels = body.module, body.parsed, body.labels
    for r in range(g - 1, -1, -1):
        ins = parsed[r][1]
        if ins is None or ins.base != "bra" or ins.guard is None or \
                labels.get(ins.operands[0], -1) <= g or \
                control.warp_predicate(ins.guard, body) is None:
            continue
        end = labels[ins.operands[0]]
        inside = {name for name, k in labels.items() if r < k < end}
        for k, (s, other) in enumerate(parsed):
            if r < k < end or other is None or other.base not in ("bra", "brx"):
                continue
            hit = [op for op in other.operands if op in inside]
            if hit:
                raise WarpgroupRefusal(
                    "threads", f"the group's region (from "
                    f"{parsed[r][0].text(module.text).strip()!r} to {ins.operands[0]}) is "
                    f"entered partway, at {hit[0]}, by "
                    f"{s.text(module.text).strip()!r} from outside it")
        return
    raise WarpgroupRefusal("threads", "no branch on the warp id opens a region around the "
                           "site (tileiras's warp-specialised kernels open one per role)")


# ---------------------------------------------------------------------------------------------
# Steps 6-7


def _check_reaching(body: Body, i: int, source: Callable[[Instruction], bool],
                    kill: Callable[[Instruction], bool], step: str, reason: str) -> None:
    """Refuse when some path from an instruction matching ``source`` reaches statement ``i``
    without passing one matching ``kill``."""
    if control.reaches(body, i, source, kill):
        raise WarpgroupRefusal(step, reason)


# ---------------------------------------------------------------------------------------------
# The callee


def include_dir() -> Path:
    """The directory of ``splice_group.h`` (on NVRTC's include path for warpgroup externs)."""
    return Path(__file__).parent.parent / "include"


_RANK_READ = re.compile(r"^mov\.u32\s+" + re.escape(RANK_REGISTER) + r"\s*,\s*%tid\.x\s*;$")
_RANK_MASK = re.compile(r"^and\.b32\s+%[\w$]+\s*,\s*" + re.escape(RANK_REGISTER) +
                        rf"\s*,\s*{GROUP_SIZE - 1}\s*;$")
_NAMES_RANK = re.compile(re.escape(RANK_REGISTER) + r"(?![\w$])")


def callee_refusal(ins: Instruction, text: str, snippet: bool = False) -> tuple[str, str] | None:
    """(what is wrong, the fix) when the instruction ``text`` (parsed: ``ins``) cannot run
    in a warpgroup-scope callee; None when it can. The fix names ``splice_group.h``'s
    functions for CUDA C, their PTX for a ``splice.asm`` snippet (``snippet``: PTX cannot
    include a header)."""
    sync, size, rank = _group_fixes(snippet)
    if ins.base in ("bar", "barrier") and ins.modifiers[:1] == ("cluster",):
        return (f"a barrier of the whole cluster ('{text}'), which the block's other warps "
                f"never reach: a deadlock", f"Synchronise the group with {sync}")
    if ins.base == "setmaxnreg":
        return (f"'{text}', which changes the register budget tileiras gave the warpgroup "
                f"for the rest of the kernel", "Remove it")
    if ins.base == "exit":
        return (f"'{text}': a thread that exits inside the call leaves the group (and is "
                f"excused from its barriers)", "Return from the function instead")
    ids = barrier_operands(ins)
    if ids is not None:
        bid, count = ids
        if control.immediate(bid) == 0:
            return (f"a barrier of the whole CTA ('{text}': __syncthreads(), CUB's CTA_SYNC), "
                    f"which the block's other warps (tileiras's TMA warps) never reach: a "
                    f"deadlock", f"Synchronise the group with {sync}")
        if control.immediate(bid) != GROUP_BARRIER or \
                control.immediate(count or "") != GROUP_SIZE or \
                "arrive" in ins.modifiers or "red" in ins.modifiers:
            return (f"a barrier ('{text}') other than the group's (barrier.sync "
                    f"{GROUP_BARRIER}, {GROUP_SIZE})", f"Use {sync}")
        return None
    if any(_NAMES_RANK.search(op) for op in ins.operands) and not (
            _RANK_READ.match(text) or _RANK_MASK.match(text)):
        return (f"a read of the thread index ('{text}': {RANK_REGISTER} holds %tid.x until "
                f"it is masked to the rank), which is not the rank in a group that does not "
                f"start at thread 0", f"Use {rank}")
    for op in ins.operands:
        if re.search(r"%ntid\b", op):
            return (f"a read of the block size ('{text}': blockDim), which is not the "
                    f"group's size", f"Use {size}")
        if re.search(r"%tid\b", op) and not _RANK_READ.match(text):
            return (f"a read of the thread index ('{text}': threadIdx), which is not the "
                    f"rank in a group that does not start at thread 0", f"Use {rank}")
    return None


def _group_fixes(snippet: bool) -> tuple[str, str, str]:
    """How a callee synchronises the group, reads its size and its rank: in CUDA C, in PTX."""
    if not snippet:
        header = "from #include <splice_group.h>"
        return (f"splice_group_sync() {header}", f"splice_group_size() {header}",
                f"splice_group_rank() {header}")
    return (f"the group's barrier, 'barrier.sync {GROUP_BARRIER}, {GROUP_SIZE};'",
            f"the literal {GROUP_SIZE} (the group's size)",
            f"the rank as splice_group.h reads it: '.reg .u32 {RANK_REGISTER}; mov.u32 "
            f"{RANK_REGISTER}, %tid.x; and.b32 %r, {RANK_REGISTER}, {GROUP_SIZE - 1};'")

# ---------------------------------------------------------------------------------------------
# The PTX of a site


#: Warpgroup sites a kernel may have: each one's identity is a count of threads (1..127).
MAX_SITES = 127


def site_identity(site) -> int:
    """The number of the group's threads (by rank) that the second entry barrier counts at
    ``site``: different for every site of the kernel (site indices < :data:`MAX_SITES`)."""
    return 1 + site.index % MAX_SITES


def leader_block(site, instance: int, operands) -> str:
    """Replaces the marker: the leader stores the marker's operands into the site's
    scratch."""
    head, rest = block_proof.thread0_block(site, instance, operands).split("\n", 1)
    return head.replace("block call", "warpgroup call").replace(
        "thread 0 passes", "the group's leader passes") + "\n" + rest


def group_label(site, instance: int) -> str:
    return f"$__splice_group_{site.index}_{instance}"


def all_threads_block(site, instance: int, dest: str, join: str, group: Group,
                      call_block) -> str:
    """After the leader's store: every thread of the group calls the extern; the leader
    then goes on with tileiras's code after the marker, the others to the join.

    Two entry barriers: the first counts the threads there and traps unless all
    :data:`GROUP_SIZE` are (a thread that exited is excused from barriers); the second
    counts those of rank below :func:`site_identity` and traps unless that is the count
    (barriers pair by id, not by instruction: threads at another site's barrier would make
    it that site's count, so that either these or those trap)."""
    w = site.width
    sym = block_proof.scratch_symbol(site.index)
    call = call_block(site, None, dest, ("%__splice_a0", "%__splice_a1"), instance)
    bar = f"{GROUP_BARRIER}, {GROUP_SIZE}"
    ident = site_identity(site)
    return "\n".join([
        f"{group_label(site, instance)}: // splice: every thread of the warpgroup calls "
        f"{site.label}",
        "{",
        f"\t.reg .b{w} \t%__splice_a<2>;",
        "\t.reg .b32 \t%__splice_tid, %__splice_n, %__splice_rank;",
        "\t.reg .pred \t%__splice_q, %__splice_p;",
        "\tmov.u32 \t%__splice_tid, %tid.x;",
        "\tsetp.ge.u32 \t%__splice_p, %__splice_tid, 0;",
        f"\tbarrier.red.popc.u32 \t%__splice_n, {bar}, %__splice_p; // splice: the group's "
        f"memory accesses before the call, and the arguments, visible to it",
        f"\tsetp.ne.u32 \t%__splice_q, %__splice_n, {GROUP_SIZE};",
        "\t@%__splice_q trap; // splice: not every thread of the warpgroup is here",
        f"\tsub.u32 \t%__splice_rank, %__splice_tid, {group.first_thread};",
        f"\tsetp.lt.u32 \t%__splice_p, %__splice_rank, {ident};",
        f"\tbarrier.red.popc.u32 \t%__splice_n, {bar}, %__splice_p;",
        f"\tsetp.ne.u32 \t%__splice_q, %__splice_n, {ident};",
        "\t@%__splice_q trap; // splice: threads of the warpgroup at different call sites",
        f"\tld.shared.b{w} \t%__splice_a0, [{sym}];",
        f"\tld.shared.b{w} \t%__splice_a1, [{sym}+8];",
        call,
        f"\tbarrier.sync \t{bar}; // splice: the call's memory accesses visible to the group "
        f"after it",
        f"\tsetp.ne.u32 \t%__splice_q, %__splice_tid, {group.leader};",
        f"\t@%__splice_q bra \t{join};",
        "\t} // splice: end warpgroup call"])


#: Functions a callee may call that no fragment defines: the CUDA system calls.
_SYSTEM_CALLS = frozenset({"vprintf", "malloc", "free", "__assertfail"})


def check_sites(sites, fragments, target: str, keys: Mapping[int, str]) -> None:
    """Refuse every one of ``sites`` (warpgroup-scope call sites:
    :meth:`splice.forms.warpgroup.WarpgroupForm.check_callees` passes them) whose extern, or
    anything it calls, executes an instruction :func:`callee_refusal` refuses.

    Args:
        sites: warpgroup-scope call sites (``.extern``, ``.where``).
        fragments: content key -> (description, PTX module) of every fragment of the kernel,
            compiled for ``target``.
        target: the kernel's PTX target.
        keys: id(fragment) -> its content key for ``target``, as the fragments stage took
            them (:func:`splice.forms.base.site_module`).

    Raises:
        SpliceLinkError: naming the extern, its declaration, the instruction, the chain of
            functions that reaches it, the call site and the fix.
    """
    modules = [m for _, m in fragments.values()]
    for site in sites:
        ext = site.extern
        what = f"warpgroup-scope extern '{ext.name}' (declared at {ext.where}), called at " \
               f"{site.where}"
        if not ext.fragment.has_ptx_body:   # a binary object: linked after ptxas
            raise SpliceLinkError(
                f"{what}: comes from a binary object ({ext.fragment.describe()}), whose "
                f"barriers and reads of blockDim splice cannot check in machine code; ship "
                f"it as CUDA C, PTX or LTO-IR")
        mod = site_module(ext, fragments, target, keys)
        reach = collectives.outside_ptx(mod, ext.symbol, modules)
        outside = sorted(set(reach.undefined) - _SYSTEM_CALLS)
        if outside:
            through = collectives.chain_names(ext, reach.undefined[outside[0]])
            raise SpliceLinkError(
                f"{what}: calls '{through[-1]}' (through {' -> '.join(through)}), "
                f"which no PTX of the kernel defines, so splice cannot check it for "
                f"barriers; ship it as CUDA C, PTX or LTO-IR")
        for fmod, name, chain in reach.functions():
            hit = _first_refused(fmod, name, ext.fragment.kind == "asm") or \
                warpgroup_callee.warp_refusal(fmod, name)
            if hit is not None:
                problem, fix = hit
                where = collectives.reach_text(collectives.chain_names(ext, chain))
                raise SpliceLinkError(f"{what}, executes {problem}, {where}. A warpgroup "
                                      f"call runs on the {GROUP_SIZE} threads of one "
                                      f"warpgroup, not on the whole block. {fix}")


def check_block_sites(sites, fragments, target: str, keys: Mapping[int, str],
                      kernel: Module) -> None:
    """Refuse a block-scope site whose extern, or anything it calls, uses the group of
    ``splice_group.h`` (its barrier, ``barrier.sync 15, 128``, or the rank it reads
    through :data:`RANK_REGISTER`) in a kernel whose block is not one warpgroup: there
    ``splice_group_size()`` (128) is not the block's size, two threads share each
    ``splice_group_rank()``, and the barrier pairs any 4 warps that reach it. In a
    128-thread block the group is the block, as at warpgroup scope.

    Args:
        sites: block-scope call sites (:meth:`splice.forms.block.BlockForm.check_callees`
            passes them).
        fragments, target, keys: as for :func:`check_sites`.
        kernel: the kernel's PTX: each entry's block (``.reqntid``).

    Raises:
        SpliceLinkError: naming the extern, the instruction, the block size and the fix.
    """
    dims = (block_proof.block_dims(kernel, fn) for fn in kernel.entries())
    wrong = sorted({n for d in dims if d is not None
                    and (n := int(d.split(",")[0])) != GROUP_SIZE})
    if not wrong:
        return
    modules = [m for _, m in fragments.values()]
    for site in sites:
        ext = site.extern
        if not ext.fragment.has_ptx_body:   # a binary object: linked after ptxas
            continue
        mod = site_module(ext, fragments, target, keys)
        for fmod, name, chain in collectives.outside_ptx(mod, ext.symbol, modules).functions():
            use = _group_use(fmod, name)
            if use is None:
                continue
            where = collectives.reach_text(collectives.chain_names(ext, chain))
            raise SpliceLinkError(
                f"block-scope extern '{ext.name}' (declared at {ext.where}), called at "
                f"{site.where}, uses splice_group.h's group ('{use}' {where}) in a block of "
                f"{wrong[0]} threads: the group is one warpgroup of {GROUP_SIZE}, so two "
                f"threads of the block share each splice_group_rank() and "
                f"splice_group_sync() meets any {GROUP_SIZE} of them. A block-scope call "
                f"runs on the whole block: use threadIdx.x, blockDim.x and __syncthreads()")


def _group_use(mod: Module, name: str) -> str | None:
    """The first instruction of function ``name`` that uses splice_group.h's group: its
    barrier (id :data:`GROUP_BARRIER`) or its rank register; None if none does."""
    def uses_group(ins: Instruction, text: str) -> str | None:
        ids = barrier_operands(ins)
        if (ids is not None and control.immediate(ids[0]) == GROUP_BARRIER) or \
                any(_NAMES_RANK.search(op) for op in ins.operands):
            return text
        return None
    return _first_instruction(mod, name, uses_group)


def _first_refused(mod: Module, name: str, snippet: bool) -> tuple[str, str] | None:
    """:func:`callee_refusal` of the first instruction of function ``name`` it refuses."""
    return _first_instruction(mod, name, lambda ins, text: callee_refusal(ins, text, snippet))


def _first_instruction(mod: Module, name: str, test: Callable):
    """The first value other than None that ``test(instruction, its text, whitespace
    normalised)`` gives for an instruction of function ``name``'s body, in order; None if
    none."""
    fn = next(f for f in mod.function_order if f.name == name and f.is_definition)
    for st in mod.body_statements(fn):
        if st.kind == "instruction":
            found = test(parse_instruction(st, mod.text), " ".join(st.text(mod.text).split()))
            if found is not None:
                return found
    return None
