"""Block-scope call sites (``scope="block"``): every thread of the block calls the extern
once per execution of the call site, convergently, with thread 0's arguments.

A block-scope call is traced as a 0-d atomic marker (:mod:`splice.tracing.trace`,
:mod:`splice.tracing.tile_ir`). tileiras runs a 0-d atomic on one thread
(``docs/design.md#block-scope``)::

        mov.u32          %r1, %tid.x;                   // T: the only definition of %r1
        setp.ne.b32      %p1, %r1, 0;                   // P: the only definition of %p1
        @%p1 bra         $L__BB0_2;                     // G: the guard
        ...                                             // S2: thread 0 computes the operands
        atom.global.acq_rel.cas.b64  %rd10, [%rd9], %rd3, %rd8;     // M: the marker
        st.shared.b64    [smem], %rd10;                 // S3: thread 0 keeps the result
    $L__BB0_2:                                          // J: the join
        bar.sync         0;                             // B
        ld.shared.b64    %rd11, [smem];                 // tileiras's own broadcast

and :mod:`splice.forms.block` (``BlockForm.instance_edits``, with the texts below) makes it::

        @%p1 bra         $__splice_block_<i>_<k>;       // G, retargeted
        ...                                             // S2
        st.shared [__splice_block_<i>], cmp; st.shared [__splice_block_<i>+8], swap;
    $__splice_block_<i>_<k>:                            // X: every thread
        bar.red.popc (all there? else trap);  ld.shared cmp, swap;
        <call or inlined body> -> %rd10;  bar.sync 0;
        @(tid.x != 0) bra $L__BB0_2;                    // thread 0 goes on with S3
        st.shared.b64    [smem], %rd10;                 // S3
    $L__BB0_2:
        bar.sync         0;                             // B

**Why every thread calls it exactly once per execution of the site** (each point is checked;
anything else is a :class:`~splice.errors.SpliceRewriteError`):

1. The block is one-dimensional (``.reqntid N``), so ``tid.x == 0`` is one thread, and the
   guard's predicate is exactly ``tid.x != 0``: its definitions (P and T above, or any
   chain of ``mov``/``cvt``/integer arithmetic from ``%tid.x``, such as the
   ``cvt.u64.u32``/``cvt.u32.u64`` round trip tileiras emits for unaligned arrays), each
   the register's only definition, are evaluated for every ``tid.x`` in ``0 .. N - 1``
   (:mod:`splice.analysis.thread_index`), and the predicate must hold for all but thread 0; a
   derivation that cannot be evaluated exactly is refused.
2. S2 and S3 are straight-line code (no label, branch, ``ret``/``exit``, call, barrier or
   other marker), and nothing but G names J. So the only ways to reach J are G's branch
   (threads with ``tid.x != 0``) and falling through S3 (thread 0, after S2 and M), and
   every thread that executes G reaches J without executing G again.
3. J is followed, through straight-line code (instructions that neither branch, exit nor
   synchronise), by B, an unpredicated ``bar.sync 0`` (= ``barrier.sync.aligned 0``). PTX
   requires every thread of the CTA to execute an ``.aligned`` barrier instruction, the
   same instruction, the same number of times (PTX ISA, "bar, barrier": all threads of the
   CTA participate when no thread count is given; ``.aligned``: all threads execute the same
   barrier instruction); splice relies on tileiras's code being correct in that. (A
   one-warp block, which tileiras joins with the non-aligned ``bar.warp.sync -1``, is
   refused.) So every thread executes G -- and, after the rewrite, X -- exactly once
   before each execution of B: all threads together, once per execution of the site.
   A divergent branch around the site or a loop whose trip count differs per thread
   would break tileiras's own B, so they cannot occur here. Threads that *exited* are
   excused from barriers (PTX waits for "non-exited threads"): a kernel with ``exit`` or a
   predicated ``ret`` is refused, and the call's first barrier counts the threads that
   reach it (``bar.red.popc``) and traps unless they are the whole block (``%ntid.x``), so
   a thread that left through a branch to the final ``ret`` is a loud failure, never a
   silently partial call.
4. Warp-specialised kernels (``setmaxnreg``, named barriers ``barrier.sync 1, 128``) run
   0-d operations in a subset of warps behind other guards: refused outright, with a
   message that says so (they also fail 1-3).

**Ordering.** The barrier at X orders every memory access of the block's threads before
the call before every access inside it (PTX ISA 9.7.15.1, "bar, barrier": "the
barrier{.cta}.sync or barrier{.cta}.red ... instruction guarantees that when the barrier
completes, prior memory accesses requested by this thread are performed relative to all
threads participating in the barrier", and that no new access is requested before it
completes), and publishes thread 0's arguments; the ``bar.sync 0`` after the call does
the same for the callee's stores and the kernel after the call, and keeps thread 0 from
overwriting the argument scratch of the next execution before every thread has read it.
Both are barrier 0, which tileiras's own barriers also use: every thread of the block
executes each of them, the same instruction, once per execution of the site (3.), so they
are aligned barriers in PTX's sense, matched with each other, and cannot pair with one of
tileiras's barriers.
"""

from __future__ import annotations

import re

from ..analysis.thread_index import guard_values
from ..errors import ProofRefusal
from ..ptxtools.ptx import Body, Instruction, Module

BARRIER_OPS = ("bar.sync", "bar.cta.sync", "barrier.sync.aligned", "barrier.cta.sync.aligned")
_BRANCH_OPS = ("bra", "brx", "ret", "exit", "call", "trap")


def scratch_owner(form) -> str:
    """What the argument scratch of a site of ``form`` (block or warpgroup) is called in
    messages (its span's owner)."""
    return f"splice's {form.scope}-call argument scratch"



def scratch_symbol(index: int) -> str:
    return f"__splice_block_{index}"


def scratch_declaration(index: int, form) -> str:
    """The module-level shared scratch of site ``index`` of ``form`` (block or warpgroup):
    thread 0's two marker operands."""
    return (f".shared .align 8 .b8 {scratch_symbol(index)}[16]; // splice: arguments of "
            f"{form.scope}-scope site {index}")


def warp_specialisation(body: Body) -> str | None:
    """The instruction that shows tileiras warp-specialised the function, or None."""
    module = body.module
    for s, ins in body.parsed:
        if ins is None:
            continue
        if ins.base == "setmaxnreg":
            return s.text(module.text).strip()
        if ins.base in ("bar", "barrier") and ins.modifiers[:1] not in (("warp",),
                                                                         ("cluster",)):
            if ins.operands[:1] != ("0",) or len(ins.operands) > 1 or \
                    any(m in ("arrive", "red") for m in ins.modifiers):
                return s.text(module.text).strip()
    return None


def block_dims(module: Module, fn) -> str | None:
    """The ``.reqntid`` of ``fn`` as text ("128" or "128, 1, 1"), or None."""
    a, _ = fn.body
    head = module.text[fn.header.start:module.statements[a].start]
    m = re.search(r"\.reqntid\s+([\d\s,]+)", head)
    return m.group(1).strip() if m else None


def cluster_dims(module: Module, fn) -> str | None:
    """The ``.reqnctapercluster`` of ``fn`` as text, or None (no cluster)."""
    a, _ = fn.body
    head = module.text[fn.header.start:module.statements[a].start]
    m = re.search(r"\.reqnctapercluster\s+([\d\s,]+)", head)
    return m.group(1).strip() if m and m.group(1).strip() not in ("1", "1, 1, 1", "1,1,1") \
        else None


def _is_barrier0(ins: Instruction | None) -> bool:
    return ins is not None and ins.guard is None and ins.opcode in BARRIER_OPS and \
        ins.operands == ("0",)


def _guard_is_not_thread0(guard: str, body: Body, use: int, threads: int) -> bool:
    """Whether ``@guard``, at the instruction ``use``, is true exactly for the threads with
    ``tid.x != 0`` of a block of ``threads``: its definitions evaluated for every ``tid.x``
    (:func:`splice.analysis.thread_index.guard_values`; None -- not evaluable exactly --
    is no)."""
    values = guard_values(guard, body, use, threads)
    return values is not None and values == tuple(t != 0 for t in range(threads))


def _straight_line(parsed, lo: int, hi: int, what: str) -> str | None:
    """Why statements ``lo..hi-1`` are not straight-line code for one thread, or None."""
    for j in range(lo, hi):
        s, ins = parsed[j]
        if s.kind == "directive":
            continue
        if s.kind != "instruction":
            return f"{what} has a {s.kind} statement"
        if ins.base in _BRANCH_OPS:
            return f"{what} has a branch, call or exit ({ins.opcode})"
        if ins.base in ("bar", "barrier"):
            return f"{what} has a barrier ({ins.opcode})"
        if ins.base == "atom":
            return f"{what} has another atomic (another call site behind the same guard?)"
    return None


def early_exit(body: Body) -> str | None:
    """An ``exit`` or predicated ``ret`` in the function (a thread leaving early), or None."""
    for s, ins in body.parsed:
        if ins is not None and (ins.base == "exit" or (ins.base == "ret" and ins.guard)):
            return s.text(body.module.text).strip()
    return None


def prove_instance(body: Body, i: int) -> tuple[int, int]:
    """Check points 1-3 of the module docstring for the marker at statement ``i``.

    Returns:
        (statement index of the guard G, statement index of the join label J).

    Raises:
        ProofRefusal: the reason, for the caller's :class:`SpliceRewriteError`.
    """
    dims = check_kernel(body)
    g, target = _guard(body, i, int(dims.split(",")[0]))
    j = join_of(body, g, i, target)
    _check_barrier_after_join(body, j, target, dims)
    return g, j


def check_kernel(body: Body) -> str:
    """What the site's proof needs of the whole kernel: no thread exits early (3.), a
    fixed one-dimensional block (1.), no cluster of CTAs. Returns the ``.reqntid``.

    Raises:
        ProofRefusal: what the kernel lacks.
    """
    module, fn = body.module, body.fn
    leave = early_exit(body)
    if leave is not None:
        raise ProofRefusal(f"threads of the kernel may exit early ({leave!r})")
    dims = block_dims(module, fn)
    if dims is None:
        raise ProofRefusal("the kernel declares no fixed block size (.reqntid)")
    if [d.strip() for d in dims.split(",")][1:] not in ([], ["1"], ["1", "1"]):
        raise ProofRefusal(f"the block is not one-dimensional (.reqntid {dims})")
    cluster = cluster_dims(module, fn)
    if cluster is not None:
        raise ProofRefusal(f"tileiras runs this kernel as a cluster of CTAs "
                           f"(.reqnctapercluster {cluster}: num_ctas > 1), and runs its scalar "
                           f"operations once per cluster, on one thread of one CTA; block-scope "
                           f"calls need num_ctas=1")
    return dims


def _guard(body: Body, i: int, threads: int) -> tuple[int, str]:
    """Point 1: back from the marker at ``i``, through straight-line code with no other
    marker, to the guard G, a branch taken exactly by the threads with ``tid.x != 0`` of
    the block's ``threads``.
    Returns G's statement index and its target label."""
    module, parsed = body.module, body.parsed
    g = i - 1
    while g >= 0 and (parsed[g][0].kind == "directive" or
                      ((ins := parsed[g][1]) is not None and ins.base not in _BRANCH_OPS and
                       ins.base not in ("bar", "barrier", "atom"))):
        g -= 1
    if g < 0:
        raise ProofRefusal("no guard branch before the marker")
    gs, gins = parsed[g]
    if gins is None or gins.base != "bra" or gins.guard is None or len(gins.operands) != 1:
        raise ProofRefusal(f"the marker is not behind a branch on the thread index "
                           f"(found {gs.text(module.text).strip()!r} before it)")
    if not _guard_is_not_thread0(gins.guard, body, g, threads):
        raise ProofRefusal(f"the branch before the marker "
                           f"({gs.text(module.text).strip()!r}) does not skip exactly the "
                           f"threads with tid.x != 0")
    return g, gins.operands[0]


def join_of(body: Body, g: int, i: int, target: str) -> int:
    """Point 2: the marker at ``i`` falls through straight-line code to the guard's
    ``target``, the join J, which nothing but the guard at ``g`` names. Returns J's
    statement index.

    Raises:
        ProofRefusal: the step that does not hold.
    """
    module, parsed = body.module, body.parsed
    j = i + 1
    while j < len(parsed) and parsed[j][0].kind != "label":
        j += 1
    if j >= len(parsed):
        raise ProofRefusal("no join label after the marker")
    label = parsed[j][0].tokens[0].text
    if label != target:
        raise ProofRefusal(f"the code after the marker does not fall through to the "
                           f"guard's target {target} (it reaches {label} first)")
    why = _straight_line(parsed, g + 1, i, "the guarded code before the marker") or \
        _straight_line(parsed, i + 1, j, "the guarded code after the marker")
    if why:
        raise ProofRefusal(why)
    names = [k for k, (s, _) in enumerate(parsed)
             if k not in (g, j) and any(t.text == target for t in s.tokens)]
    if names:
        raise ProofRefusal(f"the join label {target} is reached from elsewhere too "
                           f"({parsed[names[0]][0].text(module.text).strip()!r})")
    return j


def _check_barrier_after_join(body: Body, j: int, target: str, dims: str) -> None:
    """Point 3: the join at ``j`` is followed, through straight-line code (no label,
    branch, exit or other barrier), by B, an unpredicated ``bar.sync 0``."""
    module, parsed = body.module, body.parsed
    b = j + 1
    while b < len(parsed) and (parsed[b][0].kind == "directive" or (
            (ins := parsed[b][1]) is not None and ins.base not in _BRANCH_OPS and
            ins.base not in ("bar", "barrier"))):
        b += 1
    if b < len(parsed) and _is_barrier0(parsed[b][1]):
        return
    found = parsed[b][0].text(module.text).strip() if b < len(parsed) else "the end"
    if dims.split(",")[0].strip() == "32" and found.startswith("bar.warp.sync"):
        raise ProofRefusal(
            "tileiras runs this kernel with one warp per block (.reqntid 32) and joins "
            "it with bar.warp.sync, which does not make every thread execute the same "
            "instruction; kernels with a tile operation of 128 or more elements get a "
            "128-thread block and a CTA-wide bar.sync 0")
    raise ProofRefusal(f"the join label {target} is not followed by an unpredicated "
                       f"CTA-wide barrier (bar.sync 0) but by {found!r}")


def thread0_block(site, instance: int, operands) -> str:
    """Replaces the marker: thread 0 stores the marker's operands into the scratch."""
    w = site.width
    sym = scratch_symbol(site.index)
    lines = [f"{{ // splice: block call {site.label} (site {site.index}, instance {instance}):"
             f" thread 0 passes the arguments",
             f"\t.reg .b{w} \t%__splice_t<2>;"]
    for k, op in enumerate(operands):
        lines.append(f"\tmov.b{w} \t%__splice_t{k}, {op};")
        lines.append(f"\tst.shared.b{w} \t[{sym}+{8 * k}], %__splice_t{k};")
    lines.append("\t}")
    return "\n".join(lines)


def all_threads_block(site, instance: int, dest: str, join: str, call_block) -> str:
    """After thread 0's store: every thread of the block calls the extern; thread 0 then
    goes on with tileiras's code after the marker, the others to the join.

    The first barrier counts its threads (``bar.red.popc``, a ``bar.sync`` that also
    reduces) and traps unless the whole block is there: a thread that exited before the
    site is excused from tileiras's barriers and would be missing from the call -- never
    silently."""
    w = site.width
    sym = scratch_symbol(site.index)
    call = call_block(site, None, dest, ("%__splice_a0", "%__splice_a1"), instance)
    return "\n".join([
        f"{guard_label(site, instance)}: // splice: every thread of the block calls "
        f"{site.label}",
        "{",
        f"\t.reg .b{w} \t%__splice_a<2>;",
        "\t.reg .b32 \t%__splice_tid, %__splice_n, %__splice_ntid;",
        "\t.reg .pred \t%__splice_q, %__splice_true;",
        "\tmov.u32 \t%__splice_tid, %tid.x;",
        "\tsetp.ge.u32 \t%__splice_true, %__splice_tid, 0;",
        "\tbar.red.popc.u32 \t%__splice_n, 0, %__splice_true; // splice: the block's memory "
        "accesses before the call, and the arguments, visible to every thread",
        "\tmov.u32 \t%__splice_ntid, %ntid.x;",
        "\tsetp.ne.u32 \t%__splice_q, %__splice_n, %__splice_ntid;",
        "\t@%__splice_q trap; // splice: not every thread of the block is here",
        f"\tld.shared.b{w} \t%__splice_a0, [{sym}];",
        f"\tld.shared.b{w} \t%__splice_a1, [{sym}+8];",
        call,
        "\tbar.sync \t0; // splice: the call's memory accesses visible to the block after it",
        "\tsetp.ne.u32 \t%__splice_q, %__splice_tid, 0;",
        f"\t@%__splice_q bra \t{join};",
        "\t} // splice: end block call"])


def guard_label(site, instance: int) -> str:
    return f"$__splice_block_{site.index}_{instance}"


# (a template's static __shared__ variable is ``.weak .shared``: CUB's TempStorage)


