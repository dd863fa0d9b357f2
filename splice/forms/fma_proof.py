"""The proof of the fma markers of pure element calls (``docs/design.md#fma-proof``): which
fmas of one function are marker instances, that nothing else uses a key, and the edits that
make the keys 0 and the instances calls. A marker LLVM changed is a :class:`Refusal` value
naming the sites (the pipeline gives them the atomic marker), never an exception that
leaves this module.

The marker (:mod:`splice.forms.rewrite`'s docstring has an example): an ``fma.rn.f64`` with the
*key* K -- loaded from the marker global, which always holds 0 -- as a multiplicand, the
packed arguments blinded by xor with K (so that LLVM cannot fold a constant argument into
the fma). The key is 0, so every blinded value equals its argument: the load goes, every
read of a key register becomes the literal 0 (an xor with it a move), and each fma with a
key multiplicand is an instance, the other multiplicand slot 0 and the addend slot 1. The
values derived from K may flow only through ``mov``, ``xor`` and the exact forms LLVM makes
of an xor with a constant (``not.b64``; ``add`` or ``sub`` of the sign bit; ``neg.f64`` of K
itself) into marker fmas, or be unblinded by the results of their sites.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Mapping, Sequence

from ..ptxtools.ptx import Instruction, destinations, registers_in
from .base import Refusal, SiteCall
from .calls import call_block
from .marked import ADDR_RE, PLAIN_REG, MarkedBody, is_key_load, rewrite_error


def key_load(b: MarkedBody, i: int, fma_named: set[int], sites
             ) -> tuple[int, str, int] | Refusal:
    """Statement ``i``, which names the marker of fma sites, as a key load (statement,
    register, site). Any other use of an fma site's marker global is a :class:`Refusal`
    naming the sites, so that the pipeline gives them the atomic marker."""
    ins = b.parsed[i][1]
    assert ins is not None
    m = ADDR_RE.match(ins.operands[1]) if len(ins.operands) == 2 else None
    dest = ins.operands[0]
    idx = min(fma_named)
    if is_key_load(ins) and len(fma_named) == 1 and m is not None and \
            m.group(2) in (None, "0") and PLAIN_REG.fullmatch(dest) and \
            _width_of(ins) == sites[idx].width:
        return i, dest, idx
    msg = (f"the marker global of site(s) {sorted(fma_named)} is used by an instruction "
           f"that is not a load of its key")
    return Refusal(frozenset(fma_named), msg, b.fail(msg, i).message)


def _width_of(ins: Instruction) -> int:
    return int(ins.modifiers[-1][1:])


class _Refused(Exception):
    """Raised inside :func:`_prove_fma_markers` (only) where the proof stops; it returns
    the :class:`Refusal`."""

    def __init__(self, refusal: Refusal):
        super().__init__(refusal.message)
        self.refusal = refusal


def fma_edits(b: MarkedBody, key_loads, sites, first: Mapping[int, int]):
    """The edits of one function's fma markers (module docstring): :func:`_prove_fma_markers`,
    then :func:`_fma_marker_edits` (instances of each site numbered from ``first[site]``),
    with the number of instances per site; or the :class:`Refusal` naming the sites the
    proof refused. Markers LLVM merged are accepted when their sites make the same call."""
    if not key_loads:
        return [], {}
    parsed, defs, kernel_name, text = b.parsed, b.defs, b.kernel_name, b.module.text
    merged: dict[int, int] = {}   # site -> the site of the same call its key stands for
    while True:
        loads = [(i, reg, merged.get(idx, idx)) for i, reg, idx in key_loads]
        proof = _prove_fma_markers(parsed, defs, loads, sites, kernel_name, text)
        e = proof.refused
        if e is None:
            break
        group = {s for s in sites if merged.get(s, s) in e.sites}
        if not e.merged_keys or not _same_calls([sites[s] for s in group]):
            return Refusal(frozenset(group), e.reason, e.message)
        merged.update({s: min(group) for s in group})
    return _fma_marker_edits(proof, parsed, _merged_sites(sites, merged), first)


def _same_calls(group: Sequence[SiteCall]) -> bool:
    """Whether the sites of ``group`` make the same call: the same callee (or inlined
    body), prototype, signature and marker. LLVM merges the fma markers of two such sites
    in the arms of a branch into one fma whose key is either site's key: whichever arm ran,
    that fma is the same call (of either site)."""
    a = group[0]
    return all(b.callee == a.callee and b.params == a.params and b.result == a.result and
               b.signature == a.signature and b.width == a.width and
               b.fma_rounding == a.fma_rounding and
               b.form is a.form and
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
    :class:`Refusal` naming the sites and the reason (the pipeline gives them atomic
    markers). See ``docs/design.md#fma-proof``.
    """

    key_loads: tuple[tuple[int, str, int], ...] = ()   # (statement, register, site)
    key_site: Mapping[str, int] = dataclasses.field(default_factory=dict)  # register -> site
    key_regs: frozenset[str] = frozenset()      # registers that hold a key on every path
    instances: Mapping[int, tuple[int, str, str]] = dataclasses.field(default_factory=dict)
    copies: frozenset[int] = frozenset()        # network statements reading a key register
    unblind: frozenset[int] = frozenset()       # those of them whose value is free
    refused: Refusal | None = None
    # copies that compute a constant from a key (``not.b64 d, K``: -1), with their value
    constants: Mapping[int, int] = dataclasses.field(default_factory=dict)


def _prove_fma_markers(parsed, defs, key_loads, sites, kernel_name, text) -> FmaProof:
    """Which fmas of one function are marker instances, and that nothing else uses a key
    (:class:`FmaProof`)."""
    def fail(idxs, msg, i=None, merged_keys=False):
        message = rewrite_error(kernel_name, msg, None if i is None else
                                parsed[i][0].text(text)).message
        return _Refused(Refusal(frozenset(idxs), msg, message, merged_keys))

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
    except _Refused as e:
        return FmaProof(refused=e.refusal)
    return FmaProof(tuple(key_loads), key_site, frozenset(key_regs), instances,
                    reads_key, frozenset(i for i in reads_key
                                         if parsed[i][1].operands[0] not in excess),
                    constants=constants)


def _plain_copy(ins) -> bool:
    return ins is not None and ins.base == "mov" and ins.guard is None and \
        len(ins.operands) == 2 and all(PLAIN_REG.fullmatch(o) for o in ins.operands)


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
        if not all(PLAIN_REG.fullmatch(o) for o in (x, y, z)):
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
    if ins.guard is not None or not all(PLAIN_REG.fullmatch(o) or _immediate(o) is not None
                                        for o in ops[1:]):
        return None
    if ins.opcode == "not.b64" and len(ops) == 2 and PLAIN_REG.fullmatch(ops[1]):
        return _ALL_ONES, True
    if ins.opcode == "neg.f64" and len(ops) == 2 and PLAIN_REG.fullmatch(ops[1]):
        return _SIGN_BIT, False
    if ins.opcode in ("add.s64", "add.u64", "sub.s64", "sub.u64") and len(ops) == 3:
        x, c = ops[1:]
        if ins.base == "add" and _immediate(x) is not None:
            x, c = c, x       # add is commutative; sub of the register from C is not ^ C
        if PLAIN_REG.fullmatch(x) and _immediate(c) == _SIGN_BIT:
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
            not PLAIN_REG.fullmatch(ins.operands[0]):
        return None
    srcs = list(ins.operands[1:])
    form = _xor_form(ins)
    if form is not None:
        [reg] = [o for o in srcs if PLAIN_REG.fullmatch(o)]
        return [reg] if form[1] or reg in key_regs else None
    if ins.base == "mov" and len(srcs) == 1 and PLAIN_REG.fullmatch(srcs[0]):
        return srcs
    if ins.base == "xor" and len(srcs) == 2 and \
            all(PLAIN_REG.fullmatch(o) or _immediate(o) is not None for o in srcs):
        return [o for o in srcs if PLAIN_REG.fullmatch(o)]
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
    poss = _seed_signatures(parsed, key_loads, network, instances, results)

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


def _seed_signatures(parsed, key_loads, network, instances,
                     results) -> defaultdict[str, set[_Sig]]:
    """The signatures the definitions outside the ``network`` give their registers: a key
    load the site's key, a site's result that site, any other definition plain."""
    load_site = {i: idx for i, _reg, idx in key_loads}
    poss: defaultdict[str, set[_Sig]] = defaultdict(set)
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


