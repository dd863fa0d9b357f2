"""Warp-level and warpgroup-level instructions in a warpgroup-scope callee: what is proven
safe, and what is refused (:func:`warp_refusal`, applied by
:func:`splice.forms.warpgroup_proof.check_sites` to the callee and every function it reaches).

A warpgroup call runs on the 128 threads of one warpgroup (4 consecutive warps, the first
a multiple of 4), all of them at the call together: splice's entry barrier counts them
(:mod:`splice.forms.warpgroup_proof`). So at the callee's entry every lane of each of its 4 warps is
there, and the warpgroup is a hardware warpgroup.

- **Warp collectives with a membermask** (``__shfl_sync``, ``__ballot_sync``/``vote.sync``,
  ``__match_*_sync``, ``__reduce_*_sync``, ``elect.sync``, ``__syncwarp``): the mask must be
  the full mask (``0xffffffff``, ``-1``), whose lanes the call proves present, or the
  proven opportunistic pattern (``mask = __activemask()`` feeding the instruction,
  :func:`splice.analysis.activemask.proven`), which is correct at any divergence. Any other mask (a
  constant with lanes missing, a mask computed at run time, a parameter) is refused: that
  the lanes it names, and only they, reach the instruction together depends on the callee's
  own branches, which splice does not prove. Fix: use the full mask in code every lane
  runs, or ``__activemask()``.
- **wgmma** (``wgmma.fence``, ``wgmma.mma_async``, ``wgmma.commit_group``,
  ``wgmma.wait_group``): the group is one hardware warpgroup, so a ``.sync.aligned`` wgmma
  has its 128 threads. Accepted when no ``wgmma`` group is left open when a function
  returns: on every path from a ``wgmma.mma_async`` or ``wgmma.commit_group`` to a ``ret``
  there is a ``wgmma.wait_group 0`` (else the asynchronous MMA could still write its
  accumulator registers, or read its shared-memory operands, after the call, whose
  registers and staged tiles the kernel reuses). Refused otherwise. (An open group of the
  kernel's own at the call site is refused by step 6 of
  :func:`splice.forms.warpgroup_proof.prove_site`.)
"""

from __future__ import annotations

from ..analysis import activemask, control
from ..ptxtools.ptx import Body, Instruction, Module

#: Opcode prefixes of the warp collectives whose last operand is a membermask.
_MASKED = ("shfl.sync", "vote.sync", "match.", "redux.sync", "elect.sync", "bar.warp.sync")
_FULL_MASK = frozenset({"-1", "0xffffffff", "0xFFFFFFFF", "4294967295"})
_WGMMA_OPEN = ("wgmma.mma_async", "wgmma.commit_group")


def _masked(ins: Instruction) -> bool:
    return ins.opcode.startswith(_MASKED) and (not ins.opcode.startswith("match.")
                                               or ".sync" in ins.opcode)


def _mask_refusal(body: Body, proven: frozenset[int]) -> tuple[str, str] | None:
    for st, ins in body.parsed:
        if ins is None or not _masked(ins) or st.start in proven:
            continue
        mask = ins.operands[-1].strip() if ins.operands else ""
        if _full(body, mask):
            continue
        text = " ".join(st.text(body.module.text).split())
        return (f"a warp collective whose membermask is not the full mask ('{text}', mask "
                f"{mask}): which lanes reach it together depends on the callee's own "
                f"branches, which splice does not prove",
                "Use the full mask 0xffffffff in code every lane of the warp runs, or "
                "mask = __activemask() (the opportunistic pattern splice proves)")
    return None


def _full(body: Body, mask: str) -> bool:
    """Whether ``mask`` is the full mask: the immediate, or a register every write of which
    is an unguarded ``mov`` of it."""
    if mask in _FULL_MASK:
        return True
    defs = body.defs.get(mask, [])
    writes = [body.parsed[k][1] for k in defs]
    return bool(writes) and all(
        w is not None and w.base == "mov" and w.guard is None and
        w.operands[-1].strip() in _FULL_MASK for w in writes)


def _open_wgmma_at_return(body: Body) -> str | None:
    """The text of a ``ret`` some path from a ``wgmma.mma_async``/``commit_group`` reaches
    without a ``wgmma.wait_group 0``; None if none does."""
    parsed, labels = body.parsed, body.labels
    starts = [k for k, (_, ins) in enumerate(parsed)
              if ins is not None and ins.opcode.startswith(_WGMMA_OPEN)]
    seen, work = set(starts), list(starts)
    while work:
        k = work.pop()
        for n in control.successors(parsed, labels, k, past_end=True):
            ins = parsed[n][1] if n < len(parsed) else None
            if n >= len(parsed) or (ins is not None and ins.base == "ret"):
                return "ret" if n >= len(parsed) else \
                    " ".join(parsed[n][0].text(body.module.text).split())
            closes = ins is not None and ins.opcode.startswith("wgmma.wait_group") and \
                ins.operands == ("0",)
            if n not in seen and not closes:
                seen.add(n)
                work.append(n)
    return None


def warp_refusal(mod: Module, name: str) -> tuple[str, str] | None:
    """(what is wrong, the fix) for the first warp collective or wgmma group of function
    ``name`` (in ``mod``) that a warpgroup-scope callee may not run (the module
    docstring's rules); None when there is none.

    Args:
        mod: the PTX module defining the function.
        name: the function (the extern's symbol, or a function it reaches).

    Returns:
        None, or (the problem with the instruction's text, how to fix it).

    Example:
        >>> from splice.ptx import Module
        >>> ptx = (".version 8.0\\n.target sm_90\\n.address_size 64\\n.func f()\\n{\\n"
        ...        ".reg .b32 %r<3>;\\nshfl.sync.bfly.b32 %r1, %r2, 1, 31, 65535;\\nret;\\n}\\n")
        >>> warp_refusal(Module(ptx), "f")[1].startswith("Use the full mask")
        True
    """
    fn = next(f for f in mod.function_order if f.name == name and f.is_definition)
    body = mod.body(fn)
    hit = _mask_refusal(body, activemask.proven(mod, fn))
    if hit is not None:
        return hit
    ret = _open_wgmma_at_return(body)
    if ret is not None:
        return (f"an open wgmma group at '{ret}': a path from a wgmma.mma_async or "
                f"wgmma.commit_group returns without a wgmma.wait_group 0, so the "
                f"asynchronous MMA may still write its accumulator registers and read its "
                f"shared-memory operands after the call",
                "Wait for the group before returning: wgmma.wait_group 0 "
                "(__wgmma_wait_group<0>() / 'wgmma.wait_group.sync.aligned 0;')")
    return None
