"""The PTX rewriter: every call-site marker in a kernel's PTX becomes a call of its extern.

A call site reaches PTX as one or more marker instructions, one per tile element the
executing thread owns, in one of two forms (see :mod:`splice.tile_ir`):

- an impure (or void) call, an atomic compare-and-swap on the site's marker global
  (``docs/design.md#markers``), the arguments packed into the compare and swap operands
  (register or immediate), the result register receiving the return value's bits::

      mov.b64              %rd15, __splice_marker_3;
      atom.global.cas.b64  %rd16, [%rd15], %rd36, 1073741824;

- a pure call with a result, an ``fma.rn.f64`` with the *key* K -- loaded from the marker
  global, which always holds 0 -- as a multiplicand, the packed arguments blinded by xor
  with K (so that LLVM cannot fold a constant argument into the fma)::

      ld.global.b64   %rd40, [__splice_marker_0];
      xor.b64         %rd49, %rd40, %rd42;
      fma.rn.f64      %rd50, %rd49, %rd40, %rd40;     // slot 0 = %rd49, slot 1 = %rd40

  The key is 0 -- the value the load reads -- so every blinded value equals its argument:
  the load goes, every read of a key register becomes the literal 0 (an xor with it a
  move), and each fma with a key multiplicand is an instance, the other multiplicand
  slot 0 and the addend slot 1. The values derived from K may flow only through ``mov``,
  ``xor`` and the exact forms LLVM makes of an xor with a constant (``not.b64``; ``add``
  or ``sub`` of the sign bit; ``neg.f64`` of K itself) into marker fmas, or be unblinded
  by the results of their sites: any other use means LLVM changed the call site's form,
  and is a :class:`Refusal` naming the sites in the report (the pipeline then gives
  them atomic markers). Why pure calls get this marker, and the proof's invariants:
  ``docs/design.md#fma-marker``, ``docs/design.md#fma-proof``.

:func:`splice_calls` replaces each instance with a scoped block that unpacks the
operands, stores the callee's ``.param``\\ s, ``call``\\ s it (``call``, not ``call.uni``: owner
threads may diverge) and writes the result register, predicated like the marker was.

It **proves** the rewrite instead of assuming it:

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
import re
from collections import defaultdict
from typing import Mapping, Sequence

from . import block
from .errors import SpliceRewriteError
from .spans import Generated, Span, spans_of_edits
from .ptx import Function, Instruction, Module, Param, Statement, apply_edits, destinations, \
    parse_instruction, registers_in
from .sites import Marker
from .types import ArgSlot, ElementType, Signature

MARKER_RE = re.compile(r"__splice_marker_(\d+)\b")
_PREFIX_RESERVED = ("%__splice", "__splice_p", "__splice_r", "$__splice")


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
    """

    index: int
    callee: str
    params: tuple[Param, ...]
    result: Param | None
    signature: Signature
    label: str
    inline: tuple | None = None   # (prepared Module, Function) to inline, or None: call
    marker: Marker = Marker.ATOMIC
    marker_bits: int = 0          # width of the marker's operands; 0: signature.marker_bits
    scope: str = "element"        # "block": every thread of the block calls (splice.block)
    # the rounding of an fma marker ("rn", "rz", "rm", "rp"): sites of different roundings
    # are fmas of different intrinsics to LLVM, which it does not merge
    fma_rounding: str = "rn"

    @property
    def width(self) -> int:
        return self.marker_bits or self.signature.marker_bits


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
    """

    sites: frozenset[int]
    reason: str
    message: str

    def error(self) -> SpliceRewriteError:
        return SpliceRewriteError(self.message)


@dataclasses.dataclass(frozen=True)
class SpliceReport:
    """What the rewriter did: marker instances found and replaced, per site index; the
    rewritten PTX; ``module``, that PTX as parsed by the rewriter's own check; and
    ``spans``, the lines of ``ptx`` each marker instance's call sequence (kind ``"call"``,
    and ``"block call"`` around a block-scope one) and each block site's argument scratch
    (``"splice"``) occupy, in text order (:class:`splice.spans.Span`). With ``refused``
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


def _fail(kernel_name: str, msg: str, stmt_text: str | None = None) -> SpliceRewriteError:
    detail = f"\n    offending PTX: {stmt_text.strip()}" if stmt_text else ""
    return SpliceRewriteError(f"cannot prove the call-site rewrite of kernel "
                              f"'{kernel_name}': {msg}{detail}")


def _is_marker_cas(ins: Instruction) -> bool:
    return ins.base == "atom" and "cas" in ins.modifiers and ins.modifiers[-1] in ("b32",
                                                                                     "b64")


_ADDR_RE = re.compile(r"^\[\s*([%A-Za-z_$][A-Za-z0-9_$]*)\s*(?:\+\s*(-?\w+)\s*)?\]$")


def splice_calls(module: Module, sites: Mapping[int, SiteCall], *,
                 kernel_name: str) -> SpliceReport:
    """Replace every marker instance in ``module`` with a call of its site's callee, or
    say which fma markers must become atomic markers (:attr:`SpliceReport.refused`).

    Raises:
        SpliceRewriteError: a marker whose rewrite cannot be proven, a marker of an unknown
            site, or a rewritten module that fails the checks above.
    """
    text = module.text
    for s in module.statements:
        if s.kind == "opaque":
            continue
        for t in s.tokens:
            if t.kind in ("reg", "ident") and t.text.startswith(_PREFIX_RESERVED):
                raise _fail(kernel_name, f"the kernel's PTX already uses the name {t.text!r}, "
                                         f"which has splice's reserved prefix", s.text(text))
    edits: list[tuple[int, int, str]] = []
    found: dict[int, int] = defaultdict(int)
    replaced: dict[int, int] = defaultdict(int)

    # Module-level marker globals: removed.
    for s in module.statements:
        if s.depth == 0 and s.kind == "directive":
            for t in s.tokens:
                m = MARKER_RE.fullmatch(t.text)
                if m:
                    idx = int(m.group(1))
                    if idx not in sites:
                        raise _fail(kernel_name, f"marker global of unknown call site {idx}",
                                    s.text(text))
                    edits.append((s.start, s.end, Generated(
                        block.scratch_declaration(idx), block.SCRATCH_OWNER, "splice", idx)
                                   if sites[idx].scope == "block" else
                                   f"// splice: marker global of site {idx} removed"))
                    break

    try:
        for fn in module.function_order:
            if fn.is_definition:
                edits.extend(_splice_function(module, fn, sites, kernel_name, found,
                                              replaced))
    except FmaMarkerError as e:
        return SpliceReport({}, {}, "", refused=Refusal(e.sites, e.reason, e.message))

    for idx in found:
        if found[idx] != replaced[idx]:
            raise _fail(kernel_name, f"site {idx}: {found[idx]} marker instance(s) found, "
                                     f"{replaced[idx]} replaced")
    new_text = apply_edits(text, edits)
    n_calls = sum(n for i, n in replaced.items()
                  if sites[i].inline is None and (sites[i].params or sites[i].result))
    out = _verify(new_text, sites, n_calls, _count_calls(module, sites), kernel_name)
    return SpliceReport(dict(found), dict(replaced), new_text, out,
                        spans=tuple(spans_of_edits(text, edits)))


@dataclasses.dataclass
class _Body:
    """One function's body: each statement with its parsed instruction (None for other
    statements), the statements defining each register, and the registers holding a
    marker's address (register -> site) with the statements defining them."""

    module: Module
    fn: Function
    kernel_name: str
    parsed: list[tuple[Statement, Instruction | None]]
    defs: dict[str, list[int]]
    marker_reg: dict[str, int] = dataclasses.field(default_factory=dict)
    address_defs: set[int] = dataclasses.field(default_factory=set)

    @classmethod
    def parse(cls, module: Module, fn: Function, kernel_name: str) -> _Body:
        parsed: list[tuple[Statement, Instruction | None]] = []
        defs: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(module.body_statements(fn)):
            ins = parse_instruction(s, module.text) if s.kind == "instruction" else None
            parsed.append((s, ins))
            if ins is not None:
                for r in destinations(ins):
                    defs[r].append(i)
        return cls(module, fn, kernel_name, parsed, defs)

    def fail(self, msg: str, i: int | None = None) -> SpliceRewriteError:
        """The error for statement ``i`` (or the function as a whole)."""
        return _fail(self.kernel_name, msg,
                     None if i is None else self.parsed[i][0].text(self.module.text))


def _splice_function(module: Module, fn: Function, sites, kernel_name, found, replaced):
    """The edits of one function definition: every marker instance replaced by its call
    (``found`` and ``replaced`` counted per site), every marker address definition
    removed. Raises :class:`FmaMarkerError` naming the fma sites the proof refuses."""
    b = _Body.parse(module, fn, kernel_name)
    _find_marker_addresses(b)
    edits: list[tuple[int, int, str]] = []
    key_loads: list[tuple[int, str, int]] = []   # (statement, register, site)
    for i, (_s, ins) in enumerate(b.parsed):
        if ins is None or i in b.address_defs:
            continue
        named = _named_sites(b, ins)
        if not named:
            continue
        fma_named = {k for k in named if k in sites and sites[k].marker is Marker.FMA}
        if fma_named:
            key_loads.append(_fma_key_load(b, i, fma_named, sites))
            continue
        idx = _marker_instance_site(b, i, sites)
        found[idx] += 1
        edits.extend(_atomic_instance(b, i, sites[idx], replaced[idx]))
        replaced[idx] += 1
    edits.extend(_splice_fma_markers(b.parsed, b.defs, key_loads, sites, kernel_name,
                                     module.text, found, replaced))
    # The address definitions are dead once every marker is replaced.
    for i in sorted(b.address_defs):
        s = b.parsed[i][0]
        edits.append((s.start, s.end, "// splice: marker address removed"))
    return edits


def _find_marker_addresses(b: _Body) -> None:
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


def _named_sites(b: _Body, ins: Instruction) -> set[int]:
    """The sites whose marker symbol or address register ``ins`` names."""
    return {b.marker_reg[r] for op in ins.operands for r in registers_in(op)
            if r in b.marker_reg} | {int(m.group(1)) for op in ins.operands
                                     for m in MARKER_RE.finditer(op)}


def _fma_key_load(b: _Body, i: int, fma_named: set[int], sites) -> tuple[int, str, int]:
    """Statement ``i``, which names the marker of fma sites, as a key load (statement,
    register, site). Any other use of an fma site's marker global is a
    :class:`FmaMarkerError` naming the sites, so that the pipeline gives them the atomic
    marker."""
    ins = b.parsed[i][1]
    assert ins is not None
    m = _ADDR_RE.match(ins.operands[1]) if len(ins.operands) == 2 else None
    dest = ins.operands[0]
    idx = min(fma_named)
    if _is_key_load(ins) and len(fma_named) == 1 and m is not None and \
            m.group(2) in (None, "0") and _PLAIN_REG.fullmatch(dest) and \
            _width_of(ins) == sites[idx].width:
        return i, dest, idx
    msg = (f"the marker global of site(s) {sorted(fma_named)} is used by an instruction "
           f"that is not a load of its key")
    raise FmaMarkerError(b.fail(msg, i).message, fma_named, msg)


def _marker_instance_site(b: _Body, i: int, sites) -> int:
    """The site of statement ``i``, which names a marker of an atomic site: it must be
    that site's marker (a compare-and-swap on the marker's address, of the marker's width,
    whose data operands are not marker addresses)."""
    s, ins = b.parsed[i]
    assert ins is not None
    text, kernel_name = b.module.text, b.kernel_name
    if _is_key_load(ins):
        idx = _marker_site(ins.operands[1], b.marker_reg, sites, kernel_name, s, text)
        raise b.fail(f"site {idx}: a load of the marker of a call that is not pure "
                     f"(tileiras transformed the call site)", i)
    if not _is_marker_cas(ins) or len(ins.operands) != 4:
        raise b.fail("a marker address is used by an instruction that is not a marker "
                     "(tileiras transformed the call site)", i)
    _dest, addr, cmp, swap = ins.operands
    for op in (_dest, cmp, swap):
        if MARKER_RE.search(op) or any(r in b.marker_reg for r in registers_in(op)):
            raise b.fail("a marker address is used as a data operand", i)
    idx = _marker_site(addr, b.marker_reg, sites, kernel_name, s, text)
    width = sites[idx].width
    if ins.modifiers[-1] != f"b{width}":
        raise b.fail(f"site {idx}: marker of type .{ins.modifiers[-1]}, expected "
                     f".b{width}", i)
    return idx


def _atomic_instance(b: _Body, i: int, site: SiteCall, instance: int):
    """The edits replacing the atomic marker at statement ``i`` by ``site``'s call."""
    s, ins = b.parsed[i]
    assert ins is not None
    if site.scope == "block":
        return _block_instance(b.module, b.fn, b.parsed, b.defs, i, site, instance,
                               b.kernel_name)
    dest, _addr, cmp, swap = ins.operands
    return [(s.start, s.end, call_block(site, ins.guard, dest, (cmp, swap), instance))]


def _block_instance(module, fn, parsed, defs, i, site, instance, kernel_name):
    """The edits of one instance of a block-scope site's marker (statement ``i``): the guard
    retargeted, the marker replaced by thread 0's store of the arguments and every thread's
    call (see :mod:`splice.block`, which proves it)."""
    s, ins = parsed[i]
    what = f"block-scope call of {site.label} (site {site.index})"
    ws = block.warp_specialisation(module, parsed)
    if ws is not None:
        raise _fail(kernel_name, f"{what}: tileiras warp-specialised this kernel ({ws!r}): "
                                 f"its scalar operations run in a subset of the block's "
                                 f"warps, so splice cannot make every thread of the block "
                                 f"call the extern. Block-scope calls need a kernel without "
                                 f"warp specialisation (e.g. no TMA pipeline: "
                                 f"ct.load(..., allow_tma=False), no ct.mma)")
    if ins.guard is not None:
        raise _fail(kernel_name, f"{what}: the marker is predicated", s.text(module.text))
    dest = ins.operands[0]
    if dest != "_" and len(defs.get(dest, ())) != 1:
        raise _fail(kernel_name, f"{what}: the marker's result register {dest} has other "
                                 f"definitions", s.text(module.text))
    try:
        g, j = block.prove_instance(module, fn, parsed, defs, i)
    except ValueError as e:
        raise _fail(kernel_name, f"{what}: cannot prove that every thread of the block "
                                 f"reaches the call exactly once: {e}",
                    s.text(module.text)) from None
    gs, gins = parsed[g]
    join = gins.operands[0]
    guard = f"@{gins.guard} {gins.opcode} \t{block.guard_label(site, instance)}; // splice: " \
            f"was {join}"
    body = Generated(block.thread0_block(site, instance, ins.operands[2:]) + "\n" +
                     block.all_threads_block(site, instance, dest, join, call_block),
                     site.label, "block call", site.index, instance)
    return [(gs.start, gs.end, guard), (s.start, s.end, body)]


def _is_key_load(ins: Instruction) -> bool:
    return ins.base == "ld" and len(ins.operands) == 2 and \
        all(m in ("global", "b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "nc",
                  "ca", "cg", "weak") for m in ins.modifiers)


def _width_of(ins: Instruction) -> int:
    return int(ins.modifiers[-1][1:])


def _marker_site(addr: str, marker_reg, sites, kernel_name, s, text) -> int:
    """The site index of a marker address operand ``[sym]`` or ``[%reg]``."""
    m = _ADDR_RE.match(addr)
    if m is None:
        raise _fail(kernel_name, f"unexpected marker address operand {addr!r}", s.text(text))
    base, offset = m.group(1), m.group(2)
    if offset not in (None, "0"):
        raise _fail(kernel_name, f"marker address with offset {offset}", s.text(text))
    if base.startswith("%"):
        if base not in marker_reg:
            raise _fail(kernel_name, "marker access through an unknown address", s.text(text))
        idx = marker_reg[base]
    else:
        mm = MARKER_RE.fullmatch(base)
        if mm is None:
            raise _fail(kernel_name, f"unexpected marker address {base!r}", s.text(text))
        idx = int(mm.group(1))
    if idx not in sites:
        raise _fail(kernel_name, f"marker of unknown call site {idx}", s.text(text))
    return idx


_PLAIN_REG = re.compile(r"%[A-Za-z_$][A-Za-z0-9_$]*")


class FmaMarkerError(SpliceRewriteError):
    """Raised inside the proof when the fma markers of some pure call sites did not reach
    PTX in the form the rewriter can prove; :func:`splice_calls` returns it as the
    report's :class:`Refusal`, never raises it."""

    def __init__(self, message: str, sites, reason: str, merged_keys: bool = False):
        super().__init__(message)
        self.sites = frozenset(sites)
        self.reason = reason
        self.merged_keys = merged_keys   # a register holds the keys of ``sites``


def _splice_fma_markers(parsed, defs, key_loads, sites, kernel_name, text, found,
                        replaced):
    """The fma markers of pure calls (module docstring): :func:`_prove_fma_markers`, then
    :func:`_fma_marker_edits`. Raises :class:`FmaMarkerError` naming the sites the proof
    refused."""
    if not key_loads:
        return []
    merged: dict[int, int] = {}   # site -> the site of the same call its key stands for
    while True:
        loads = [(i, reg, merged.get(idx, idx)) for i, reg, idx in key_loads]
        proof = _prove_fma_markers(parsed, defs, loads, sites, kernel_name, text)
        e = proof.refused
        if e is None:
            break
        group = {s for s in sites if merged.get(s, s) in e.sites}
        if not e.merged_keys or not _same_calls([sites[s] for s in group]):
            raise FmaMarkerError(str(e), group, e.reason)
        merged.update({s: min(group) for s in group})
    edits, counts = _fma_marker_edits(proof, parsed, _merged_sites(sites, merged), replaced)
    for idx, n in counts.items():
        found[idx] += n
        replaced[idx] += n
    return edits


def _same_calls(group: Sequence[SiteCall]) -> bool:
    """Whether the sites of ``group`` make the same call: the same callee (or inlined
    body), prototype, signature and marker. LLVM merges the fma markers of two such sites
    in the arms of a branch into one fma whose key is either site's key: whichever arm ran,
    that fma is the same call (of either site)."""
    a = group[0]
    return all(b.callee == a.callee and b.params == a.params and b.result == a.result and
               b.signature == a.signature and b.width == a.width and
               b.fma_rounding == a.fma_rounding and
               b.marker is a.marker is Marker.FMA and b.scope == a.scope == "element" and
               (b.inline is a.inline or b.inline is not None and a.inline is not None and
                b.inline[1] is a.inline[1]) for b in group)


def _merged_sites(sites: Mapping[int, SiteCall], merged: Mapping[int, int]):
    """``sites``, the label of each site that stands for merged ones naming them all (its
    instances are counted as its own)."""
    out = dict(sites)
    for rep in set(merged.values()):
        others = sorted(s for s, r in merged.items() if r == rep and s != rep)
        out[rep] = dataclasses.replace(
            sites[rep], label=f"{sites[rep].label}, or site(s) {others} (LLVM merged their "
                              f"markers: the same call)")
    return out


@dataclasses.dataclass(frozen=True)
class FmaProof:
    """What :func:`_prove_fma_markers` established about one function's fma markers.

    The rewritten program is the original one run with every key 0 -- the value the loads
    read -- and each marker fma replaced by its call. Every xor with a key is then the
    identity, so each value equals the one the original Tile IR computes with the key 0:
    a blinded slot its argument, an unblinded result its call's result. What needs proof
    is which fmas are markers and which multiplicand is the key:

    - a *key register* holds the key of one site on every path: each of its definitions is
      a load of that site's key or a plain copy of a key register (a greatest fixpoint, so
      that copies around a loop count);
    - an *instance* is an ``fma.rn.f64`` with a key-register multiplicand; the other
      multiplicand is slot 0, the addend slot 1 (either may be the key -- a zero argument --
      or, when LLVM cancelled the key of a result against the key of the next blinding, the
      previous call's result itself);
    - values *derived* from keys, through the *xor network* (unguarded ``mov``, ``xor``
      and the forms of an xor with a constant, :func:`_xor_form`), carry the keys and the
      call results xor-ed into them (a result counts as holding its site's key, which the
      Tile IR's unblinding xor removes): a value in which every key is matched by its
      site's result (an unblinded result, however LLVM reassociated the xors) goes
      anywhere; one with keys left over only into the network and, with one site left
      over, that site's instances (:func:`_fma_derived_values`).

    Anything else -- a key read by another instruction, an fma that takes a derived value
    but no key multiplicand, two sites' values combined -- is ``refused``: a
    :class:`FmaMarkerError` naming the sites and the reason (the pipeline gives them atomic
    markers). See ``docs/design.md#fma-proof``.
    """

    key_loads: tuple[tuple[int, str, int], ...] = ()   # (statement, register, site)
    key_site: Mapping[str, int] = dataclasses.field(default_factory=dict)  # register -> site
    key_regs: frozenset[str] = frozenset()      # registers that hold a key on every path
    instances: Mapping[int, tuple[int, str, str]] = dataclasses.field(default_factory=dict)
    copies: frozenset[int] = frozenset()        # network statements reading a key register
    unblind: frozenset[int] = frozenset()       # those of them whose value is free
    refused: FmaMarkerError | None = None
    # copies that compute a constant from a key (``not.b64 d, K``: -1), with their value
    constants: Mapping[int, int] = dataclasses.field(default_factory=dict)


def _prove_fma_markers(parsed, defs, key_loads, sites, kernel_name, text) -> FmaProof:
    """Which fmas of one function are marker instances, and that nothing else uses a key
    (:class:`FmaProof`)."""
    def fail(idxs, msg, i=None, merged_keys=False):
        return FmaMarkerError(_fail(kernel_name, msg, None if i is None else
                                    parsed[i][0].text(text)).message, idxs, msg, merged_keys)

    load_stmts = {i for i, _reg, _idx in key_loads}
    try:
        key_site, key_regs = _fma_key_registers(parsed, defs, key_loads, load_stmts, fail)
        instances, results = _fma_instances(parsed, defs, key_site, key_regs, sites)
        excess, network, reads_key, constants = _fma_derived_values(
            parsed, defs, key_loads, key_regs, instances, results, fail)
        _check_fma_derived_uses(parsed, excess, network, load_stmts, instances, fail)
        for i in sorted(instances):
            idx = instances[i][0]
            if sites[idx].width != 64:
                raise fail({idx}, f"site {idx}: fma marker of a {sites[idx].width}-bit site",
                           i)
    except FmaMarkerError as e:
        return FmaProof(refused=e)
    return FmaProof(tuple(key_loads), key_site, frozenset(key_regs), instances,
                    reads_key, frozenset(i for i in reads_key
                                         if parsed[i][1].operands[0] not in excess),
                    constants=constants)


def _plain_copy(ins) -> bool:
    return ins is not None and ins.base == "mov" and ins.guard is None and \
        len(ins.operands) == 2 and all(_PLAIN_REG.fullmatch(o) for o in ins.operands)


def _fma_key_registers(parsed, defs, key_loads, load_stmts, fail):
    """1. Key registers: (register -> site of the key it is loaded or copied from, the
    registers among them that hold that key on every path)."""
    key_site: dict[str, int] = {}
    for i, reg, idx in key_loads:
        if key_site.setdefault(reg, idx) != idx:
            raise fail({idx, key_site[reg]}, f"register {reg} holds the keys of sites "
                                              f"{key_site[reg]} and {idx}", i, True)
    changed = True
    while changed:
        changed = False
        for i, (_s, ins) in enumerate(parsed):
            if _plain_copy(ins) and ins.operands[1] in key_site:
                dest, idx = ins.operands[0], key_site[ins.operands[1]]
                if dest not in key_site:
                    key_site[dest] = idx
                    changed = True
                elif key_site[dest] != idx:
                    raise fail({idx, key_site[dest]}, f"register {dest} holds the keys of "
                                                      f"sites {key_site[dest]} and {idx}", i,
                               True)
    key_regs = set(key_site)
    changed = True
    while changed:
        changed = False
        for reg in list(key_regs):
            if not all(j in load_stmts or (_plain_copy(parsed[j][1]) and
                                           parsed[j][1].operands[1] in key_regs)
                       for j in defs[reg]):
                key_regs.discard(reg)
                changed = True
    return key_site, key_regs


def _fma_instances(parsed, defs, key_site, key_regs, sites):
    """2. Instances (statement -> (site, slot 0, slot 1)), and the registers only they
    write (results: register -> site). An instance's rounding is its site's
    (:attr:`SiteCall.fma_rounding`)."""
    instances: dict[int, tuple[int, str, str]] = {}
    for i, (_s, ins) in enumerate(parsed):
        if ins is None or ins.base != "fma" or len(ins.operands) != 4:
            continue
        _dest, x, y, z = ins.operands
        if not all(_PLAIN_REG.fullmatch(o) for o in (x, y, z)):
            continue   # a slot is never a constant (it holds the key): not an instance
        key = y if y in key_regs else x if x in key_regs else None
        if key is not None and ins.modifiers == (sites[key_site[key]].fma_rounding, "f64"):
            instances[i] = (key_site[key], x if key == y else y, z)
    results: dict[str, int] = {}
    for i, (site_idx, _a, _c) in instances.items():
        dest = parsed[i][1].operands[0]
        if all(j in instances and instances[j][0] == site_idx for j in defs[dest]):
            results[dest] = site_idx
    return instances, results


_SIGN_BIT = 1 << 63
_ALL_ONES = (1 << 64) - 1


def _immediate(op: str) -> int | None:
    """The 64-bit pattern of an integer literal operand (decimal or hex), else None."""
    try:
        return int(op, 0) & _ALL_ONES
    except ValueError:
        return None


def _xor_form(ins: Instruction) -> tuple[int, bool] | None:
    """An exact 64-bit operation that LLVM makes of an xor with a constant, when ``ins`` is
    one of one register: (the constant C, so that the result is the register ^ C; whether
    that holds for every value, not only for the key 0). ``not.b64`` is ^ -1; ``add`` and
    ``sub`` of the sign bit are ^ the sign bit (carries out of bit 63 are lost);
    ``neg.f64`` flips the sign bit of a register that holds the key (0.0 -> -0.0, exact),
    but of a NaN it "yields an unspecified NaN" (PTX ISA), so only on a key. Else None."""
    ops = ins.operands
    if ins.guard is not None or not all(_PLAIN_REG.fullmatch(o) or _immediate(o) is not None
                                        for o in ops[1:]):
        return None
    if ins.opcode == "not.b64" and len(ops) == 2 and _PLAIN_REG.fullmatch(ops[1]):
        return _ALL_ONES, True
    if ins.opcode == "neg.f64" and len(ops) == 2 and _PLAIN_REG.fullmatch(ops[1]):
        return _SIGN_BIT, False
    if ins.opcode in ("add.s64", "add.u64", "sub.s64", "sub.u64") and len(ops) == 3:
        x, c = ops[1:]
        if ins.base == "add" and _immediate(x) is not None:
            x, c = c, x       # add is commutative; sub of the register from C is not ^ C
        if _PLAIN_REG.fullmatch(x) and _immediate(c) == _SIGN_BIT:
            return _SIGN_BIT, True
    return None


# A value's *signature* in the xor network: (the sites whose keys it holds xor-ed together,
# the sites whose call results it holds xor-ed together), each a set taken modulo 2.
_Sig = tuple[frozenset[int], frozenset[int]]
_PLAIN: _Sig = (frozenset(), frozenset())
_MAX_SIGNATURES = 16   # per register; more is refused (never seen: LLVM's forms have 1-3)


def _network_sources(ins: Instruction | None, key_regs) -> list[str] | None:
    """The register operands of ``ins`` if it is a statement of the xor network -- an
    unguarded ``mov`` of a register, ``xor`` of registers and immediates, or an exact
    :func:`_xor_form` -- else None."""
    if ins is None or ins.guard is not None or len(ins.operands) < 2 or \
            not _PLAIN_REG.fullmatch(ins.operands[0]):
        return None
    srcs = list(ins.operands[1:])
    form = _xor_form(ins)
    if form is not None:
        [reg] = [o for o in srcs if _PLAIN_REG.fullmatch(o)]
        return [reg] if form[1] or reg in key_regs else None
    if ins.base == "mov" and len(srcs) == 1 and _PLAIN_REG.fullmatch(srcs[0]):
        return srcs
    if ins.base == "xor" and len(srcs) == 2 and \
            all(_PLAIN_REG.fullmatch(o) or _immediate(o) is not None for o in srcs):
        return [o for o in srcs if _PLAIN_REG.fullmatch(o)]
    return None


def _fma_derived_values(parsed, defs, key_loads, key_regs, instances, results, fail):
    """3. The values derived from keys, through the *xor network* (:func:`_network_sources`):
    the signatures of the values each register may hold (:func:`_network_signatures`).

    A call's result counts as holding its site's key: the Tile IR unblinds a 64-bit result
    by an xor with the key, which LLVM may reassociate with other keys and results
    (``r0 ^ K0 ^ r1 ^ K1`` as ``(K1 ^ K0) ^ r0 ^ r1``). A value is *free* -- any
    instruction may read it -- when it holds no key, or when each key it holds is matched by
    that site's result (an unblinded result); else it is *blinded* for the sites left over
    (its *excess*), and only the network and, with an excess of one site, that site's
    instances may read it (step 4). Every register holds one kind of value on every path
    (:func:`_blinded_registers`). Keys that cancel each other without a result (so that a
    value derived from keys is plain) are refused, as LLVM does not make them.

    Returns (register -> excess, for the registers holding blinded values; the network
    statements (-> their register operands); those that read a key register; their
    constants: statement -> its value with the key 0)."""
    network = {i: srcs for i, (_s, ins) in enumerate(parsed)
               if (srcs := _network_sources(ins, key_regs)) is not None}
    for i, _reg, _idx in key_loads:
        network.pop(i, None)
    poss = _network_signatures(parsed, defs, key_loads, network, instances, results, fail)
    excess = _blinded_registers(poss, defs, fail)
    constants = {i: form[0] for i, srcs in network.items()
                 if (form := _xor_form(parsed[i][1])) is not None and srcs[0] in key_regs}
    reads_key = frozenset(i for i, srcs in network.items() if any(r in key_regs for r in srcs))
    return excess, network, reads_key, constants


def _network_signatures(parsed, defs, key_loads, network, instances, results, fail):
    """The signatures of the values each register may hold: a least fixpoint from the key
    loads (the site's key), the results (the site's result) and every other definition
    (plain) through the ``network`` statements."""
    load_site = {i: idx for i, _reg, idx in key_loads}
    poss: dict[str, set[_Sig]] = defaultdict(set)
    for i, (_s, ins) in enumerate(parsed):
        if ins is None or i in network:
            continue
        for r in destinations(ins):
            if i in load_site:
                poss[r].add((frozenset({load_site[i]}), frozenset()))
            elif i in instances and results.get(r) == instances[i][0]:
                poss[r].add((frozenset(), frozenset({instances[i][0]})))
            else:
                poss[r].add(_PLAIN)

    def values(reg: str) -> set[_Sig]:
        return poss[reg] if defs.get(reg) else {_PLAIN}

    changed = True
    while changed:
        changed = False
        for i, srcs in network.items():
            # (signature, whether a key went into it) of each value the statement may make
            outs: set[tuple[_Sig, bool]] = {(_PLAIN, False)}
            for reg in srcs:
                outs = {((e ^ e2, t ^ t2), k or bool(e2)) for (e, t), k in outs
                        for e2, t2 in values(reg)}
            if any(sig == _PLAIN and k for sig, k in outs):
                raise fail({s for reg in srcs for e, _t in values(reg) for s in e},
                           "two values derived from call-site keys combined by xor", i)
            dest = parsed[i][1].operands[0]
            new = {sig for sig, _k in outs} - poss[dest]
            if new:
                poss[dest] |= new
                changed = True
                if len(poss[dest]) > _MAX_SIGNATURES:
                    raise fail({s for e, t in poss[dest] for s in e | t},
                               f"register {dest} holds too many different values derived "
                               f"from call-site keys", i)
    return poss


def _blinded_registers(poss, defs, fail) -> dict[str, frozenset[int]]:
    """The excess of each register that holds blinded values. Each holds one kind of value
    on every path: free, or blinded for the same sites -- or, on some paths, a result of
    that one site blinded for it as LLVM passes ``acc = f(acc, x)`` on (the key
    cancelled); never a plain value on some paths and a blinded one on others."""
    excess: dict[str, frozenset[int]] = {}
    for reg, sigs in poss.items():
        blinded = {e ^ t for e, t in sigs if e and e ^ t}
        if not blinded:
            continue
        results_of = {t for e, t in sigs if not e and t}
        plain = any(not e and not t or e and not e ^ t for e, t in sigs)
        sites = set().union(*blinded, *results_of)
        if plain or len(blinded | results_of) > 1:
            where = defs[reg][0]
            if plain:
                raise fail(sites, f"register {reg} holds a value of the marker of site(s) "
                                  f"{sorted(sites)} but is also written by other "
                                  f"instructions", where)
            raise fail(sites, f"register {reg} holds values of sites {sorted(sites)}", where)
        [excess[reg]] = blinded
    return excess


def _check_fma_derived_uses(parsed, excess, network, load_stmts, instances, fail):
    """4. Nothing but the xor network and the instances of its site reads a blinded value
    (a register with an excess, :func:`_fma_derived_values`)."""
    for i, (_s, ins) in enumerate(parsed):
        if ins is None or i in network or i in load_stmts:
            continue
        sources = ins.operands[1:] if destinations(ins) else ins.operands
        used = [excess[r] for op in sources for r in registers_in(op) if r in excess]
        if not used:
            continue
        sites = set().union(*used)
        if i not in instances:
            raise fail(sites, f"a value of the marker of site(s) {sorted(sites)} is used by "
                              f"an instruction that is not a marker", i)
        if any(e != {instances[i][0]} for e in used):
            raise fail(sites | {instances[i][0]}, f"a marker fma mixes the values of sites "
                                                  f"{sorted(sites | {instances[i][0]})}", i)


def _fma_marker_edits(proof: FmaProof, parsed, sites, first_instance: Mapping[int, int]):
    """The edits that make a proven function's keys 0 and its instances calls, and the
    number of instances per site (numbered from ``first_instance[site]``).

    The key is 0: every read of a key register becomes the literal 0 (a copy of the key
    a move of 0, an xor with it a move of the other operand, a key operand of a marker
    0), and the loads of key registers go. Not merely "the load becomes mov 0": LLVM
    loads a key only on the paths that use it and rotates copies of it through unrolled
    loops, and ptxas does not fold an xor with a register that is 0 on some paths and
    undefined on others. A load into a register that is a blinded value on another path
    (still read) becomes mov 0."""
    key_regs, key_site = proof.key_regs, proof.key_site

    def zero(op):
        return "0" if op in key_regs else op

    edits = []
    for i, reg, idx in proof.key_loads:
        s, ins = parsed[i]
        if reg in key_regs:
            edits.append((s.start, s.end, f"// splice: load of the key of site {idx} removed "
                                          f"(the key is 0)"))
        else:
            guard = f"@{ins.guard} " if ins.guard else ""
            edits.append((s.start, s.end, f"{guard}mov.b64 \t{reg}, 0; // splice: the key of "
                                          f"site {idx} (0)"))
    for i in sorted(proof.copies | proof.unblind):
        s, ins = parsed[i]
        keys = [o for o in ins.operands[1:] if o in key_regs]
        if not keys:
            continue
        dest = ins.operands[0]
        idx = key_site[keys[0]]
        if i in proof.constants:
            c = proof.constants[i]
            new = (f"mov.b64 \t{dest}, {c - (1 << 64) if c >> 63 else c}; // splice: "
                   f"{ins.opcode} of the key of site {idx} (0)")
        elif ins.base == "mov":
            new = f"mov.b64 \t{dest}, 0; // splice: copy of the key of site {idx} (0)"
        else:
            [other] = [o for o in ins.operands[1:] if o not in key_regs] or ["0"]
            new = f"mov.b64 \t{dest}, {other}; // splice: xor with the key of site {idx} (0)"
        edits.append((s.start, s.end, new))
    counts: dict[int, int] = defaultdict(int)
    for i in sorted(proof.instances):
        s, ins = parsed[i]
        idx, slot0, slot1 = proof.instances[i]
        edits.append((s.start, s.end, call_block(sites[idx], ins.guard, ins.operands[0],
                                                 (zero(slot0), zero(slot1)),
                                                 first_instance[idx] + counts[idx])))
        counts[idx] += 1
    return edits, dict(counts)


def _address_copy_source(ins: Instruction, marker_reg: Mapping[str, int]) -> int | None:
    """If ``ins`` copies a marker address into a register (``mov``/``cvta`` of a marker
    symbol or of a marker register), the site index; else None."""
    if ins.base not in ("mov", "cvta") or len(ins.operands) != 2 or ins.guard is not None:
        return None
    dst, src = ins.operands
    if not re.fullmatch(r"%[A-Za-z_$][A-Za-z0-9_$]*", dst):
        return None
    m = MARKER_RE.fullmatch(src)
    if m:
        return int(m.group(1))
    if src in marker_reg:
        return marker_reg[src]
    return None


def _count_calls(module: Module, sites: Mapping[int, SiteCall]) -> int:
    """Calls of a site's callee that pass splice's own parameters (``__splice_p``,
    ``__splice_r``): the calls the rewriter emitted. Only ``call`` statements are parsed."""
    callees = {s.callee for s in sites.values()}
    n = 0
    for s in module.statements:
        if s.kind == "instruction" and opcode_head(s) == "call":
            ins = parse_instruction(s, module.text)
            if ins.call_target in callees and \
                    any("__splice_" in op for op in ins.operands):
                n += 1
    return n


def opcode_head(s: Statement) -> str:
    """The first word of an instruction's opcode (``"call"`` for ``@%p1 call.uni``)."""
    toks = s.tokens
    k = 0
    if toks and toks[0].text == "@":
        k = 3 if len(toks) > 2 and toks[1].text == "!" else 2
    return toks[k].text if k < len(toks) else ""


def _verify(new_text: str, sites, n_replaced: int, calls_before: int,
            kernel_name: str) -> Module:
    try:
        out = Module(new_text, f"spliced PTX of {kernel_name}")
    except Exception as e:
        raise _fail(kernel_name, f"the rewritten PTX does not parse: {e}") from None
    # no marker symbol in any statement (so no marker instruction either): only the
    # statements where the text spells one (the Tile IR tileiras embeds does) are looked at
    starts = [s.start for s in out.statements]
    for m in MARKER_RE.finditer(new_text):
        i = bisect.bisect_right(starts, m.start()) - 1
        s = out.statements[i] if i >= 0 else None
        if s is not None and s.kind != "opaque" and m.start() < s.end and \
                any(MARKER_RE.search(t.text) for t in s.tokens):
            raise _fail(kernel_name, "a marker symbol is left after the rewrite",
                        s.text(new_text))
    calls_after = _count_calls(out, sites)
    if calls_after - calls_before != n_replaced:
        raise _fail(kernel_name, f"{n_replaced} markers replaced by calls but the rewritten "
                                 f"PTX has {calls_after - calls_before} new calls")
    return out


# ---------------------------------------------------------------------------------------------
# Call sequence


def _param_bits(p: Param) -> int:
    return p.size_bytes * 8


def call_block(site: SiteCall, guard: str | None, dest: str,
               operands: Sequence[str], instance: int) -> Generated:
    """The PTX replacing one marker instance: a scoped block calling ``site.callee`` with
    the arguments unpacked from the marker's two operands, result into ``dest``; tagged
    (kind ``"call"``) with the site's label, index and ``instance``."""
    # st.param/ld.param cannot be predicated: a guarded marker becomes a branch around the
    # whole call sequence.
    sig = site.signature
    width = site.width
    packing = sig.packing()
    lines = [f"{{ // splice: call {site.label} (site {site.index}, instance {instance})"]
    decls = [f"\t.reg .b{width} \t%__splice_s<2>;"]
    body = []
    skip = f"$__splice_skip_{site.index}_{instance}"
    if guard:
        negated = guard[1:] if guard.startswith("!") else "!" + guard
        body.append(f"\t@{negated} bra \t{skip};")
    for k, op in enumerate(operands):
        body.append(f"\tmov.b{width} \t%__splice_s{k}, {op};")
    regs = {"b16": 0, "b32": 0, "b64": 0}

    def reg(kind: str) -> str:
        n = regs[kind]
        regs[kind] += 1
        return f"%__splice_{kind}_{n}"

    values = []
    for i, (elem, place, param) in enumerate(zip(sig.args, packing, site.params,
                                                 strict=True)):
        pname = f"__splice_p{i}"
        pbits = _param_bits(param)
        value = _extract(body, reg, f"%__splice_s{place.slot}", width, place, elem, pbits)
        values.append((value, pbits))
        if site.inline is None:
            decls.append(f"\t{param.declare(pname)};")
            body.append(f"\tst.param.b{pbits} \t[{pname}], {value};")
    args = ", ".join(f"__splice_p{i}" for i in range(len(sig.args)))
    if site.inline is not None:
        _inline_call(site, values, body, reg, dest, width, instance)
    elif site.result is not None:
        decls.append(f"\t{site.result.declare('__splice_r')};")
        body.append(f"\tcall (__splice_r), {site.callee}, ({args});")
        rbits = _param_bits(site.result)
        if dest != "_":
            if rbits == width:
                body.append(f"\tld.param.b{width} \t{dest}, [__splice_r];")
            elif rbits == 32:
                r = reg("b32")
                body.append(f"\tld.param.b32 \t{r}, [__splice_r];")
                body.append(f"\tcvt.u64.u32 \t{dest}, {r};")
            else:
                r = reg("b16")
                body.append(f"\tld.param.b{rbits} \t{r}, [__splice_r];")
                body.append(f"\tcvt.u{width}.u16 \t{dest}, {r};")
    else:
        body.append(f"\tcall {site.callee}, ({args});")
        if dest != "_":
            body.append(f"\tmov.b{width} \t{dest}, 0;")
    if guard:
        body.append(f"{skip}:")
    for kind, n in regs.items():
        if n:
            decls.append(f"\t.reg .{kind} \t%__splice_{kind}_<{n}>;")
    return Generated("\n".join(lines + decls + body + ["\t} // splice: end call"]),
                     site.label, "call", site.index, instance)


def _inline_call(site, values, body, reg, dest, width, instance):
    """The callee's body in place of the call (see :mod:`splice.inline`)."""
    from .inline import inline_body
    mod, fn = site.inline
    result = None
    if site.result is not None:
        rbits = _param_bits(site.result)
        rv = reg(f"b{max(rbits, 16)}")
        result = (rv, max(rbits, 16))
    body.extend(inline_body(mod, fn, values, result, f"{site.index}_{instance}"))
    if result is not None and dest != "_":
        rv, rbits = result
        if rbits == width:
            body.append(f"\tmov.b{width} \t{dest}, {rv};")
        else:
            body.append(f"\tcvt.u{width}.u{rbits} \t{dest}, {rv};")
    elif result is None and dest != "_":
        body.append(f"\tmov.b{width} \t{dest}, 0;")


_SIGNED_CVT = {8: "s8", 16: "s16"}


def _extract(body: list[str], reg, slot_reg: str, width: int, place: ArgSlot,
             elem: ElementType, pbits: int) -> str:
    """Emit instructions extracting one argument from its ``width``-bit slot register into
    a register of ``pbits`` bits (the callee's .param width), extended as C promotes it;
    return the register."""
    src = slot_reg
    if place.offset:
        t = reg(f"b{width}")
        body.append(f"\tshr.b{width} \t{t}, {slot_reg}, {place.offset};")
        src = t
    if pbits == 64:
        if place.bits == 64:
            return src
        w = _low32(body, reg, src, width)
        w = _extend32(body, w, place.bits, elem)
        d = reg("b64")
        sign = "s" if elem.kind == "s" else "u"
        body.append(f"\tcvt.{sign}64.{sign}32 \t{d}, {w};")
        return d
    if pbits == 32:
        w = _low32(body, reg, src, width)
        if place.bits < 32:
            w2 = reg("b32")
            body.append(f"\tmov.b32 \t{w2}, {w};")
            w = _extend32(body, w2, place.bits, elem)
        return w
    # 16- or 8-bit parameter (e.g. __half as .b8[2]): the low bits in a 16-bit register.
    h = reg("b16")
    body.append(f"\tcvt.u16.u{width} \t{h}, {src};")
    return h


def _low32(body, reg, src: str, width: int) -> str:
    if width == 32:
        return src
    w = reg("b32")
    body.append(f"\tcvt.u32.u64 \t{w}, {src};")
    return w


def _extend32(body, w: str, bits: int, elem: ElementType) -> str:
    if bits >= 32:
        return w
    if elem.kind == "s":
        body.append(f"\tcvt.s32.{_SIGNED_CVT[bits]} \t{w}, {w};")
    elif elem.kind == "b":
        body.append(f"\tand.b32 \t{w}, {w}, 1;")
    else:
        body.append(f"\tand.b32 \t{w}, {w}, {(1 << bits) - 1};")
    return w
