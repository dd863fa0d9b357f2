"""The PTX rewriter: every call-site marker in a kernel's PTX becomes a call of its extern.

A call site reaches PTX as one or more marker instructions, one per tile element the
executing thread owns (``docs/design.md#markers``, :mod:`splice.tracing.tile_ir`): an atomic
compare-and-swap on the site's marker global, the arguments packed into its compare and swap
operands (impure, void and block calls)::

    mov.b64              %rd15, __splice_marker_3;
    atom.global.cas.b64  %rd16, [%rd15], %rd36, 1073741824;

or, for a pure call with a result, an ``fma.rn.f64`` keyed by a load of the marker global
(``docs/design.md#fma-marker``), proven per function by :mod:`splice.forms.fma_proof`; a
marker LLVM changed is a :class:`Refusal` naming the sites in the report, and the pipeline
gives them atomic markers.

This module finds the markers and hands each to its site's call form (:mod:`splice.forms`),
which gives the edits: a call sequence (:mod:`splice.forms.calls`) for an element call, thread 0's
argument store and every thread's call for a block call. It **proves** the rewrite instead
of assuming it:

- every use of a marker symbol or of a register derived from one (through ``mov``/``cvta``)
  must be a marker's address; anything else -- a marker turned into a load, an address
  computed with an offset, a register with two definitions -- is a :class:`SpliceRewriteError`;
- the number of marker instances found equals the number replaced, per site;
- the rewritten PTX re-parses, holds exactly that many extra ``call`` instructions, and has
  no marker symbol, marker global or marker instruction left.

Every byte outside the replaced statements is left as it was.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from typing import Mapping

from ..ptxtools.names import MARKER_RE, RESERVED_PREFIXES
from ..ptxtools.ptx import (
    Instruction,
    Module,
    PTXSyntaxError,
    apply_edits,
    destinations,
    opcode_head,
    parse_instruction,
    registers_in,
)
from ..ptxtools.spans import Span, spans_of_edits
from .base import CallForm, Edit, Refusal, SiteCall
from .marked import ADDR_RE, PLAIN_REG, MarkedBody, is_key_load, rewrite_error
from .staging import check_staging

__all__ = ["MARKER_RE", "Refusal", "SpliceReport", "splice_calls"]


@dataclasses.dataclass(frozen=True)
class SpliceReport:
    """What the rewriter did: marker instances found and replaced, per site index; the
    rewritten PTX; ``module``, that PTX as parsed by the rewriter's own check; and
    ``spans``, the lines of ``ptx`` each marker instance's call sequence (kind ``"call"``,
    and ``"block call"`` around a block-scope one) and each block site's argument scratch
    (``"splice"``) occupy, in text order (:class:`splice.ptxtools.spans.Span`). With ``refused``
    set, nothing was rewritten (``ptx`` is empty): the fma markers it names must become
    atomic markers."""

    found: Mapping[int, int]
    replaced: Mapping[int, int]
    ptx: str
    module: Module | None = dataclasses.field(default=None, repr=False, compare=False)
    refused: Refusal | None = None
    spans: tuple[Span, ...] = dataclasses.field(default=(), repr=False)

    @property
    def total(self) -> int:
        return sum(self.replaced.values())


def _is_marker_cas(ins: Instruction) -> bool:
    return ins.base == "atom" and "cas" in ins.modifiers and ins.modifiers[-1] in ("b32",
                                                                                     "b64")


def splice_calls(module: Module, sites: Mapping[int, SiteCall], *,
                 kernel_name: str) -> SpliceReport:
    """Replace every marker instance in ``module`` with a call of its site's callee, or
    say which fma markers must become atomic markers (:attr:`SpliceReport.refused`).

    Raises:
        SpliceRewriteError: a marker whose rewrite cannot be proven, a marker of an unknown
            site, or a rewritten module that fails the checks above.
    """
    text = module.text
    _check_reserved_names(module, kernel_name)
    edits = _marker_globals(module, sites, kernel_name)
    found: dict[int, int] = defaultdict(int)
    replaced: dict[int, int] = defaultdict(int)
    for fn in module.function_order:
        if not fn.is_definition:
            continue
        out = _splice_function(MarkedBody.parse(module, fn, kernel_name), sites, replaced)
        if isinstance(out, Refusal):
            return SpliceReport({}, {}, "", refused=out)
        fn_edits, fn_found, fn_replaced = out
        edits += fn_edits
        for idx, n in fn_found.items():
            found[idx] += n
        for idx, n in fn_replaced.items():
            replaced[idx] += n
    for idx in found:
        if found[idx] != replaced[idx]:
            raise rewrite_error(kernel_name, f"site {idx}: {found[idx]} marker instance(s) found, "
                                     f"{replaced[idx]} replaced")
    new_text = apply_edits(text, edits)
    n_calls = sum(n for i, n in replaced.items()
                  if sites[i].inline is None and (sites[i].params or sites[i].result))
    out_mod = _verify(new_text, sites, n_calls, _count_calls(module, sites), kernel_name)
    return SpliceReport(dict(found), dict(replaced), new_text, out_mod,
                        spans=tuple(spans_of_edits(text, edits)))


def _check_reserved_names(module: Module, kernel_name: str) -> None:
    text = module.text
    for s in module.statements:
        if s.kind == "opaque":
            continue
        for t in s.tokens:
            if t.kind in ("reg", "ident") and t.text.startswith(RESERVED_PREFIXES):
                raise rewrite_error(kernel_name, f"the kernel's PTX already uses the name "
                                    f"{t.text!r}, which has splice's reserved prefix",
                                    s.text(text))


def _marker_globals(module: Module, sites: Mapping[int, SiteCall], kernel_name: str
                    ) -> list[Edit]:
    """The module-level marker globals, each replaced as its site's form says."""
    edits: list[Edit] = []
    for s in module.statements:
        if s.depth == 0 and s.kind == "directive":
            for t in s.tokens:
                m = MARKER_RE.fullmatch(t.text)
                if m:
                    idx = int(m.group(1))
                    if idx not in sites:
                        raise rewrite_error(kernel_name,
                                            f"marker global of unknown call site {idx}",
                                            s.text(module.text))
                    edits.append((s.start, s.end, sites[idx].form.global_edit(idx)))
                    break
    return edits


def _splice_function(b: MarkedBody, sites: Mapping[int, SiteCall], before: Mapping[int, int]):
    """The edits of one function definition -- every marker instance replaced by its call
    (numbered after the ``before`` instances of other functions), every marker address
    definition removed -- with the instances found and replaced per site; or the
    :class:`Refusal` of a form that proves its markers per function."""
    _find_marker_addresses(b)
    edits: list[Edit] = []
    found: dict[int, int] = defaultdict(int)
    replaced: dict[int, int] = defaultdict(int)
    loads: dict[CallForm, list[tuple[int, str, int]]] = {}
    at: dict[int, list[int]] = defaultdict(list)  # atomic site -> its instances' statements
    for i, (_s, ins) in enumerate(b.parsed):
        if ins is None or i in b.address_defs:
            continue
        named = b.named_sites(ins)
        if not named:
            continue
        per_function = {k for k in named if k in sites and sites[k].form.proves_per_function()}
        if per_function:
            form = sites[min(per_function)].form
            load = form.key_load(b, i, per_function, sites)
            if isinstance(load, Refusal):
                return load
            loads.setdefault(form, []).append(load)
            continue
        idx = _marker_instance_site(b, i, sites)
        found[idx] += 1
        edits += sites[idx].form.instance_edits(b, i, sites[idx], before.get(idx, 0) +
                                                replaced[idx])
        at[idx].append(i)
        replaced[idx] += 1
    _check_tile_staging(b, sites, at)
    for form, form_loads in loads.items():
        first = defaultdict(int, {k: before.get(k, 0) + replaced.get(k, 0) for k in sites})
        out = form.function_edits(b, form_loads, sites, first)
        if isinstance(out, Refusal):
            return out
        form_edits, counts = out
        edits += form_edits
        for idx, n in counts.items():
            found[idx] += n
            replaced[idx] += n
    # The address definitions are dead once every marker is replaced.
    for i in sorted(b.address_defs):
        s = b.parsed[i][0]
        edits.append((s.start, s.end, "// splice: marker address removed"))
    return edits, found, replaced


def _check_tile_staging(b: MarkedBody, sites, at: Mapping[int, list[int]]) -> None:
    """The proof that every tile call's stores precede its block call and its loads
    follow it (:func:`splice.forms.staging.check_staging`)."""
    if not any(sites[idx].staging is not None for idx in at):
        return
    why = check_staging(b.analysed, sites, at)
    if why is not None:
        raise b.fail(f"cannot prove the shared-memory staging of a tile call: {why}")


def _find_marker_addresses(b: MarkedBody) -> None:
    """Fill ``b.marker_reg`` and ``b.address_defs``: the registers that ``mov``/``cvta``
    copy a marker symbol (or such a register) into, to a fixpoint. A register holding the
    markers of two sites, or also written by anything else, is an error."""
    changed = True
    while changed:
        changed = False
        for i, (s, ins) in enumerate(b.parsed):
            if i in b.address_defs:
                continue
            if ins is None:
                if s.kind != "instruction" and any(MARKER_RE.search(t.text)
                                                   for t in s.tokens):
                    raise b.fail("a marker symbol appears outside an instruction", i)
                continue
            src_idx = _address_copy_source(ins, b.marker_reg)
            if src_idx is None:
                continue
            [dst] = destinations(ins)
            if dst in b.marker_reg and b.marker_reg[dst] != src_idx:
                raise b.fail(f"register {dst} holds the markers of two sites", i)
            b.marker_reg[dst] = src_idx
            b.address_defs.add(i)
            changed = True
    for reg, idx in b.marker_reg.items():
        others = [j for j in b.defs[reg] if j not in b.address_defs]
        if others:
            raise b.fail(f"register {reg} holds the marker address of site {idx} but is "
                         f"also written by other instructions", others[0])


def _marker_instance_site(b: MarkedBody, i: int, sites) -> int:
    """The site of statement ``i``, which names a marker of an atomic site: it must be
    that site's marker (a compare-and-swap on the marker's address, of the marker's width,
    whose data operands are not marker addresses)."""
    ins = b.parsed[i][1]
    assert ins is not None
    if is_key_load(ins):
        idx = _marker_site(b, ins.operands[1], sites, i)
        raise b.fail(f"site {idx}: a load of the marker of a call that is not pure "
                     f"(tileiras transformed the call site)", i)
    if not _is_marker_cas(ins) or len(ins.operands) != 4:
        raise b.fail("a marker address is used by an instruction that is not a marker "
                     "(tileiras transformed the call site)", i)
    _dest, addr, cmp, swap = ins.operands
    for op in (_dest, cmp, swap):
        if MARKER_RE.search(op) or any(r in b.marker_reg for r in registers_in(op)):
            raise b.fail("a marker address is used as a data operand", i)
    idx = _marker_site(b, addr, sites, i)
    width = sites[idx].width
    if ins.modifiers[-1] != f"b{width}":
        raise b.fail(f"site {idx}: marker of type .{ins.modifiers[-1]}, expected "
                     f".b{width}", i)
    return idx


def _marker_site(b: MarkedBody, addr: str, sites, i: int) -> int:
    """The site index of a marker address operand ``[sym]`` or ``[%reg]`` (statement ``i``)."""
    m = ADDR_RE.match(addr)
    if m is None:
        raise b.fail(f"unexpected marker address operand {addr!r}", i)
    base, offset = m.group(1), m.group(2)
    if offset not in (None, "0"):
        raise b.fail(f"marker address with offset {offset}", i)
    if base.startswith("%"):
        if base not in b.marker_reg:
            raise b.fail("marker access through an unknown address", i)
        idx = b.marker_reg[base]
    else:
        mm = MARKER_RE.fullmatch(base)
        if mm is None:
            raise b.fail(f"unexpected marker address {base!r}", i)
        idx = int(mm.group(1))
    if idx not in sites:
        raise b.fail(f"marker of unknown call site {idx}", i)
    return idx


def _address_copy_source(ins: Instruction, marker_reg: Mapping[str, int]) -> int | None:
    """If ``ins`` copies a marker address into a register (``mov``/``cvta`` of a marker
    symbol or of a marker register), the site index; else None."""
    if ins.base not in ("mov", "cvta") or len(ins.operands) != 2 or ins.guard is not None:
        return None
    dst, src = ins.operands
    if not PLAIN_REG.fullmatch(dst):
        return None
    m = MARKER_RE.fullmatch(src)
    if m:
        return int(m.group(1))
    if src in marker_reg:
        return marker_reg[src]
    return None


def _count_calls(module: Module, sites: Mapping[int, SiteCall]) -> int:
    """Calls of a site's callee that pass splice's own parameters (``__splice_p``,
    ``__splice_r``): the calls the rewriter emitted. Only ``call`` statements are parsed;
    only the parameter lists count (a callee splice generated, ``__splice_tile_0_call``,
    is named ``__splice_...`` itself, and called without parameters it passes none)."""
    callees = {s.callee for s in sites.values()}
    n = 0
    for s in module.statements:
        if s.kind == "instruction" and opcode_head(s) == "call":
            ins = parse_instruction(s, module.text)
            if ins.call_target in callees and \
                    any("__splice_" in op for op in ins.operands if op.startswith("(")):
                n += 1
    return n


def _verify(new_text: str, sites, n_replaced: int, calls_before: int,
            kernel_name: str) -> Module:
    try:
        out = Module(new_text, f"spliced PTX of {kernel_name}")
    except PTXSyntaxError as e:
        raise rewrite_error(kernel_name, f"the rewritten PTX does not parse: {e}") from None
    # no marker symbol in any statement (so no marker instruction either): only the
    # statements where the text spells one (the Tile IR tileiras embeds does) are looked at
    starts = [s.start for s in out.statements]
    for m in MARKER_RE.finditer(new_text):
        i = bisect.bisect_right(starts, m.start()) - 1
        s = out.statements[i] if i >= 0 else None
        if s is not None and s.kind != "opaque" and m.start() < s.end and \
                any(MARKER_RE.search(t.text) for t in s.tokens):
            raise rewrite_error(kernel_name, "a marker symbol is left after the rewrite",
                        s.text(new_text))
    calls_after = _count_calls(out, sites)
    if calls_after - calls_before != n_replaced:
        raise rewrite_error(kernel_name, f"{n_replaced} markers replaced by calls but the "
                                         f"rewritten PTX has {calls_after - calls_before} new "
                                         f"calls")
    return out

