"""What splice proves of the memory a call touches, for the two ``memory=`` declarations
that let cuTile order the call against less than every memory operation of the kernel
(:class:`splice.tile_ir.SpliceMarkerPointer`):

- **``memory="none"``** (``splice.asm``): the snippet touches no global memory. Every
  instruction must touch no memory at all (:data:`NO_MEMORY`), or name one of the private
  state spaces ``.shared``, ``.shared::cta``, ``.local``, ``.param`` (:data:`SPACED`);
  everything else (a generic address, ``.global``, ``cp.*``, textures, ``call``, any
  opcode splice does not know) is refused (:func:`check_no_global_memory`, applied to the
  snippet's text by :func:`splice.asm_check.check_snippet`).
- **``memory="arguments"``** (externs): the callee touches global memory only through its
  pointer arguments (and a tile call's staged tiles). Proven on the callee's PTX and on
  every function it reaches (:func:`splice.analysis.collectives.outside_ptx`) by an address
  analysis (:func:`check_argument_sites`):

  1. Each 64-bit value gets a set of *origins*, iterated to a fixed point over the
     function's instructions (flow-insensitively: a register's origins are those of all its
     definitions, so loops and joins need no special case). ``D``: an address derived from
     a pointer parameter (a ``float32*`` argument or a staged tile), or the address of the
     thread's stack (``__local_depot``), a ``.shared`` or ``.const`` variable with its
     constant offset (``("D", "sym@8")``, ``sym@?`` once unknown); ``Z``: the constant 0 (a
     null pointer); ``N``: an integer (a narrower value, a non-pointer parameter, an
     immediate, a special register); ``L``: a 64-bit value loaded from memory, the result
     of a call that is not proven to return an address, a ``.param`` that is neither a
     parameter, a call's result nor a stored argument; ``G``: the address of a ``.global``
     variable or a function; ``X``: arithmetic splice does not follow as address
     arithmetic.
  2. ``mov``, ``cvta``, ``mapa`` and a ``cvt`` between integer types keep the origins;
     ``selp`` joins its two values; ``add``/``sub`` of exactly one address and offsets that
     are not addresses (``N``, ``Z`` or ``L``: an index read from memory is data) keep the
     address's origins, as does ``mad`` whose product is of non-addresses, except that a
     null (``Z``) side of the address becomes ``X`` (null plus an integer is any address);
     ``and`` keeps them only with an immediate alignment mask (:func:`_alignment_mask`);
     ``sub`` of two derived addresses is an integer. Any other arithmetic with an address
     operand (``mul``, ``shl``, ``or``, a sum of two addresses, an ``and`` with a run-time
     mask, any floating-point instruction) is ``X``.
  3. Parameters: a ``ld.param`` of the function's own parameter has its origins (the
     root's from the declared signature; a callee's, the join of what its callers pass,
     iterated with the callers); a ``ld.param`` of a call's return value has what the
     callee returns (``st.param`` to its ``func_retval``). A call of a function no PTX
     defines returns ``L`` (``malloc``); one of a function that is neither ``vprintf`` nor
     ``__assertfail`` nor ``malloc``/``free`` (code of a binary object), or a call through
     a register, is refused: splice cannot read what it touches.
  4. Then every access of ``.global`` or generic memory (``ld``, ``ldu``, ``st``,
     ``atom``, ``red``, ``multimem``, ``discard``, ``wmma`` loads and stores,
     ``mbarrier``, the global operand of a ``cp.*`` copy) must be at an address whose
     origins are only ``D`` (or ``Z``), and a ``D`` of the stack, a ``.shared`` or a
     ``.const`` variable at a constant offset inside it (a run-time offset through a
     generic address may reach any memory); a ``[symbol]`` operand of a ``.global``
     variable, a texture, surface or tensor-map access, a bulk tensor copy (its tensor map
     is not a pointer argument) and any instruction not known to leave global memory alone
     are refused.

  A refusal names the extern, its declaration, the instruction, the chain of functions
  that reaches it, the call site, and the fix (``memory="any"``).

- **Tile calls** (any ``memory=``): the same analysis tracks, for an address derived from
  one of splice's staging buffers (``__splice_tile_<g>_buf<k>``), its constant offset
  (``("D", "buf@8")``; ``add``/``sub`` of an immediate moves it, anything else makes it
  unknown, and a register seen at two offsets, as a loop's pointer, is at an unknown one);
  an ``ld``/``st``/``atom``/``red`` at a known offset outside the tile is refused
  (:func:`check_tile_bounds`). Run time checks of the rest: :mod:`splice.inputs.tile_guards`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import SpliceLinkError
from .collectives import chain_names, outside_ptx, reach_text
from .memory_none import NO_MEMORY, WHY_NOT

#: The prefix of splice's tile staging symbols (:data:`splice.inputs.tile_fragment.PREFIX`;
#: not imported: the analyses import no input kind).
TILE_PREFIX = "__splice_tile_"
from ..ptxtools.ptx import (
    Instruction,
    Module,
    Statement,
    declared_variable_name,
    destinations,
    parse_instruction,
)

# ---------------------------------------------------------------------------------------------
# memory="arguments" (externs): an address analysis on the callee's PTX

#: An origin: (kind, why). Kinds as the module docstring's rule 1.
Origin = tuple[str, str]
D: Origin = ("D", "")
Z: Origin = ("Z", "")
N: Origin = ("N", "")
_ADDRESS = frozenset({"D", "G"})
_FINE = frozenset({"D", "Z"})

#: Calls of CUDA's device runtime the walk cannot read, allowed in a memory="arguments"
#: callee: printf's buffer and the assertion record are not the kernel's memory; malloc's
#: result is an address of unknown origin (``L``), so the callee may not access it.
_RUNTIME_CALLS = frozenset({"vprintf", "__assertfail", "malloc", "free"})

#: Instructions that access memory at their bracketed operands (the state space named in
#: the opcode, generic where none).
_ACCESSES = frozenset({"ld", "ldu", "st", "atom", "red", "multimem", "discard"})

#: Instructions that leave global memory alone, besides :data:`NO_MEMORY`: shared-memory
#: barriers and fences, tensor memory, cache hints (``prefetch``: no value depends on it).
_NO_GLOBAL = NO_MEMORY | frozenset({"mbarrier", "fence", "membar", "griddepcontrol",
                                    "tcgen05", "ret", "exit", "prefetch", "prefetchu",
                                    "applypriority", "ldmatrix", "stmatrix", "wmma",
                                    "getctarank", "elect", "clusterlaunchcontrol"})

_WIDTH_RE = re.compile(r"\.[busf](\d+)\b|\.(pred)\b")
_REG_DECL_RE = re.compile(r"(%[A-Za-z_$][\w$]*)(?:<(\d+)>)?")
_NUMBER_RE = re.compile(r"^-?(0[xX][0-9a-fA-F]+|0[fFdD][0-9a-fA-F]+|\d+)[uU]?$")


@dataclass
class _Fn:
    """One reached function: its statements' instructions, register widths, parameters."""

    mod: Module
    name: str
    chain: tuple[str, ...]
    code: list[tuple[Instruction, str]]      # (instruction, its text)
    widths: dict[str, int]
    params: list[str]
    result: str | None
    symbols: dict[str, str]                  # symbol -> its state space (".global", ...)
    sizes: dict[str, int | None]             # symbol -> its bytes (None: unsized, [])
    regs: dict[str, frozenset] = field(default_factory=dict)


def _widths(mod: Module, body: list[Statement]) -> dict[str, int]:
    """Register (or register prefix, for ``%rd<8>``) -> its width in bits."""
    out: dict[str, int] = {}
    for st in body:
        if st.kind != "directive" or st.head != ".reg":
            continue
        text = st.text(mod.text)
        m = _WIDTH_RE.search(text)
        bits = 1 if m is None or m.group(2) else int(m.group(1))
        for name, _count in _REG_DECL_RE.findall(text):
            out[name] = bits
    return out


_TYPE_BYTES_RE = re.compile(r"\.[bsuf](8|16|32|64)\b")
_VECTOR_RE = re.compile(r"\.v(2|4|8)\b")
_DIM_RE = re.compile(r"\[\s*(\d*)\s*\]")


def _variable_bytes(text: str) -> int | None:
    """The bytes a variable directive declares (``.local .align 4 .b8 d[16];``: 16), or
    None for an unsized array (``[]``)."""
    decl = text.split("=")[0]
    m = _TYPE_BYTES_RE.search(decl)
    size = int(m.group(1)) // 8 if m else 1
    v = _VECTOR_RE.search(decl)
    size *= int(v.group(1)) if v else 1
    for dim in _DIM_RE.findall(decl):
        if not dim:
            return None
        size *= int(dim)
    return size


def _symbol_spaces(mod: Module) -> tuple[dict[str, str], dict[str, int | None]]:
    """Every variable the module declares (at any depth) -> its state space, and -> its
    bytes."""
    out: dict[str, str] = {}
    sizes: dict[str, int | None] = {}
    for st in mod.statements:
        if st.kind != "directive":
            continue
        heads = [t.text for t in st.tokens if t.kind == "directive"]
        space = next((h for h in heads if h in (".global", ".shared", ".const", ".local")),
                     None)
        name = declared_variable_name(st) if space is not None else None
        if name is not None and space is not None:
            out[name] = space
            sizes[name] = _variable_bytes(st.text(mod.text))
    for name in mod.functions:
        out.setdefault(name, ".func")
    return out, sizes


def _function(mod: Module, name: str, chain: tuple[str, ...], symbols) -> _Fn:
    fn = mod.functions[name]
    body = mod.body_statements(fn)
    code = [(parse_instruction(st, mod.text), " ".join(st.text(mod.text).split()))
            for st in body if st.kind == "instruction"]
    return _Fn(mod, name, chain, code, _widths(mod, body), [p.name for p in fn.params],
               fn.results[0].name if fn.results else None, *symbols)


def _width(f: _Fn, reg: str) -> int:
    if reg in f.widths:
        return f.widths[reg]
    return f.widths.get(reg.rstrip("0123456789"), 64)


class _Proof:
    """The interprocedural fixed point: each reached function's parameter and result
    origins, and its registers'."""

    def __init__(self, fns: list[_Fn], root_params: list[frozenset]):
        self.fns = fns
        self.by_name: dict[str, list[_Fn]] = {}
        for f in fns:
            self.by_name.setdefault(f.name, []).append(f)
        self.params: dict[int, list[frozenset]] = {id(f): [frozenset()] * len(f.params)
                                                   for f in fns}
        self.params[id(fns[0])] = list(root_params)
        self.results: dict[int, frozenset] = {id(f): frozenset() for f in fns}

    def run(self) -> None:
        changed = True
        while changed:
            changed = False
            for f in self.fns:
                changed |= self._function(f)

    def _function(self, f: _Fn) -> bool:
        """One pass of ``f`` to its own fixed point; whether a callee's parameters or
        ``f``'s result grew."""
        grew = False
        while True:
            before = dict(f.regs)
            grew |= self._pass(f)
            if f.regs == before:
                return grew

    def _pass(self, f: _Fn) -> bool:
        pending: dict[str, frozenset] = {}     # a call's argument .params, by name
        returned: dict[str, frozenset] = {}    # the last call's result .param, by name
        grew = False
        for ins, text in f.code:
            if ins.base == "st" and "param" in ins.modifiers and len(ins.operands) >= 2:
                sym = _bracket_symbol(ins.operands[0])
                value = self.value(f, ins.operands[1])
                if sym == f.result:
                    grew |= self._grow_result(f, value)
                elif sym is not None:
                    pending[sym] = pending.get(sym, frozenset()) | value
                continue
            if ins.base == "call":
                returned, g = self._call(f, ins, text, pending)
                grew |= g
                pending = {}
                continue
            for d in _written(ins):
                new = self._transfer(f, ins, text, d, returned, pending)
                f.regs[d] = _join(f.regs.get(d, frozenset()), new)
        return grew

    def _grow_result(self, f: _Fn, value: frozenset) -> bool:
        old = self.results[id(f)]
        self.results[id(f)] = _join(old, value)
        return self.results[id(f)] != old

    def _call(self, f: _Fn, ins: Instruction, text: str, pending) \
            -> tuple[dict[str, frozenset], bool]:
        """What the call's result ``.param`` holds (by name), and whether a callee's
        parameters grew."""
        target = ins.call_target or ""
        callees = self.by_name.get(target, [])
        rets = [r.strip() for r in ins.operands[0].strip("()").split(",")] \
            if ins.operands and ins.operands[0].startswith("(") else []
        if not callees:
            unknown = frozenset({("L", f"the result of '{target}' ('{text}')")})
            return dict.fromkeys(rets, unknown), False
        args = _call_args(ins)
        grew = False
        for g in callees:
            ps = self.params[id(g)]
            for i, a in enumerate(args[:len(ps)]):
                v = pending.get(a, frozenset({N}))
                joined = _join(ps[i], v)
                if joined != ps[i]:
                    ps[i] = joined
                    grew = True
        out: frozenset = frozenset()
        for g in callees:
            out |= self.results[id(g)]
        return dict.fromkeys(rets, out), grew

    def value(self, f: _Fn, op: str) -> frozenset:
        """The origins of operand ``op`` of an instruction of ``f``."""
        op = op.strip()
        if op.startswith("{"):
            out: frozenset = frozenset()
            for part in op.strip("{}").split(","):
                out |= self.value(f, part)
            return out
        if op.startswith("%"):
            if "." in op:
                return frozenset({N})                     # a special register (%tid.x)
            return f.regs.get(op, frozenset()) if _width(f, op) >= 64 else frozenset({N})
        if _NUMBER_RE.match(op):
            return frozenset({Z}) if re.fullmatch(r"-?0+[uU]?", op) else frozenset({N})
        sym, _, offset = op.replace(" ", "").partition("+")
        return frozenset({_symbol_origin(f, sym, _int(offset or "0"))})

    def _transfer(self, f: _Fn, ins: Instruction, text: str, dest: str, returned,
                  pending) -> frozenset:
        if _width(f, dest) < 64:
            return frozenset({N})
        base, ops = ins.base, list(ins.operands[1:])
        if base in ("ld", "ldu") and "param" in ins.modifiers:
            return self._param_load(f, ops[0], returned, pending)
        if base in ("ld", "ldu", "atom", "multimem"):
            return frozenset({("L", f"a value loaded from memory ('{text}')")})
        vals = [self.value(f, o) for o in ops]
        if any(m in _FLOAT_TYPES for m in ins.modifiers) and any(map(_has_address, vals)):
            return frozenset({("X", f"'{text}', floating-point arithmetic on an address")})
        if base in ("mov", "cvta", "mapa") or (base == "cvt" and vals):
            return vals[0] if vals else frozenset({N})
        if base == "selp":
            return _join(vals[0], vals[1])
        return _shift(_arithmetic(base, vals, text, ops), _constant_offset(base, ops, vals))

    def _param_load(self, f: _Fn, op: str, returned, pending) -> frozenset:
        """A ``ld.param``: of the function's own parameter, of the last call's result, or of
        an argument it stored for a call; any other ``.param`` is not followed."""
        sym = _bracket_symbol(op)
        if sym in f.params:
            return self.params[id(f)][f.params.index(sym)]
        if sym in returned:
            return returned[sym]
        if sym in pending:
            return pending[sym]
        return frozenset({("L", f"a .param value splice does not follow ('{op.strip()}')")})


def _symbol_origin(f: _Fn, sym: str, offset: int | None) -> Origin:
    space = f.symbols.get(sym)
    if space in (".shared", ".local", ".const"):   # a staged tile, or private memory
        return ("D", f"{sym}@{'?' if offset is None else offset}")
    if space == ".func":
        return ("G", f"the address of the function '{sym}'")
    return ("G", f"the address of the global variable '{sym}'")


#: The floating-point types of PTX: arithmetic in them on an address is not an offset.
_FLOAT_TYPES = frozenset({"f16", "f16x2", "bf16", "bf16x2", "f32", "f32x2", "f64", "tf32",
                          "e4m3", "e5m2", "e4m3x2", "e5m2x2"})

#: The widest alignment an ``and`` may round an address down to and keep its origin: the
#: result lies at most this many bytes below the address.
MAX_ALIGNMENT = 4096


def _alignment_mask(op: str) -> bool:
    """Whether ``op`` is an immediate ``-2**k`` (k >= 1, 2**k <= :data:`MAX_ALIGNMENT`):
    an ``and`` with it rounds an address down to a multiple of ``2**k``."""
    k = _int(op.strip())
    if k is None:
        return False
    low = ~k & (2 ** 64 - 1)           # the bits the mask clears
    return 0 < low < MAX_ALIGNMENT and low & (low + 1) == 0


def _plus_offset(address: frozenset, text: str) -> frozenset:
    """The origins of an address plus an offset: the address's, where a null side (a
    select or join of an argument and 0) becomes an arbitrary address."""
    null = frozenset({("X", f"'{text}', an offset added to a value that may be the null "
                            f"pointer (a select or join of an address and 0): the sum may be "
                            f"any address")})
    return frozenset(o for o in address if o[0] != "Z") | (null if Z in address else
                                                          frozenset())


def _arithmetic(base: str, vals: list[frozenset], text: str, ops: list[str]) -> frozenset:
    """Origins of the result of ``base`` on operands of origins ``vals`` (rule 2)."""
    has_address = _has_address
    bad = frozenset({("X", f"'{text}', arithmetic splice does not follow on an address")})
    terms = vals
    if base == "mad" and len(vals) == 3:
        if has_address(vals[0]) or has_address(vals[1]):
            return bad
        terms = [frozenset({N}), vals[2]]
    if base == "sub" and len(vals) == 2 and has_address(vals[1]):
        both_derived = all(k in _FINE for v in vals for k, _ in v)
        return frozenset({N}) if both_derived else bad
    if base == "and" and any(map(has_address, vals)):
        mask = [o for o, v in zip(ops, vals) if not has_address(v)]
        if len(vals) != 2 or len(mask) != 1 or not _alignment_mask(mask[0]):
            return frozenset({("X", f"'{text}', an 'and' of an address with what is not a "
                                    f"constant alignment mask (-2, -4 ... -{MAX_ALIGNMENT}): "
                                    f"the result need not point into the same memory")})
        return next(v for v in vals if has_address(v))
    if base in ("add", "sub", "mad"):
        addresses = [v for v in terms if has_address(v)]
        if len(addresses) == 1:
            rest = [v for v in terms if v is not addresses[0]]
            return _plus_offset(addresses[0], text) | \
                frozenset(o for v in rest for o in v if o[0] == "X")
        if len(addresses) > 1:
            return bad
    elif any(has_address(v) for v in vals):
        return bad
    out = frozenset(o for v in vals for o in v if o[0] in ("L", "X"))
    return out or frozenset({N})


def _int(text: str) -> int | None:
    """An integer immediate's value (decimal or hex, signed), or None."""
    try:
        return int(text.rstrip("uU"), 0)
    except ValueError:
        return None


def _has_address(v: frozenset) -> bool:
    return any(k in _ADDRESS for k, _ in v)


def _constant_offset(base: str, ops: list[str], vals: list[frozenset]) -> int | None:
    """For ``add``/``sub`` of one address and immediates: the constant it adds (``sub``
    subtracts its second operand); 0 for an instruction that keeps the address (``mov``);
    None where the offset is not a constant (the tracked offsets become unknown)."""
    if base not in ("add", "sub") or len(ops) != 2 or _has_address(vals[1]) == \
            _has_address(vals[0]):
        return None
    other = ops[1] if _has_address(vals[0]) else ops[0]
    k = _int(other.strip())
    if k is None:
        return None
    return -k if base == "sub" else k


def _shift(origins: frozenset, by: int | None) -> frozenset:
    """``origins`` with each tracked buffer offset (``("D", "buf@8")``) moved by ``by``
    bytes, or made unknown (``None``)."""
    out = set()
    for kind, why in origins:
        if kind == "D" and "@" in why:
            sym, off = why.rsplit("@", 1)
            why = f"{sym}@?" if by is None or off == "?" else f"{sym}@{int(off) + by}"
        out.add((kind, why))
    return frozenset(out)


def _compact(origins: frozenset) -> frozenset:
    """``origins`` with one reason kept per kind of refused origin (the first in order):
    a refusal names one, and the sets stay small in a long callee."""
    kept: dict[str, Origin] = {}
    for o in sorted(origins):
        if o[0] in ("L", "G", "X"):
            kept.setdefault(o[0], o)
    return frozenset(o for o in origins if o[0] not in ("L", "G", "X")) | \
        frozenset(kept.values())


#: How many constant offsets of one symbol a register's origins keep; past that it is at an
#: unknown offset (so that a loop that steps a pointer reaches a fixed point).
_OFFSETS_KEPT = 8


def _join(a: frozenset, b: frozenset) -> frozenset:
    """The union of two origin sets, widened: a symbol seen at more than
    :data:`_OFFSETS_KEPT` offsets is at an unknown one; one reason per refused kind
    (:func:`_compact`)."""
    out = _compact(a | b)
    offsets: dict[str, set[str]] = {}
    for kind, why in out:
        if kind == "D" and "@" in why:
            sym, off = why.rsplit("@", 1)
            offsets.setdefault(sym, set()).add(off)
    wide = {sym for sym, offs in offsets.items() if len(offs) > _OFFSETS_KEPT or
            (len(offs) > 1 and "?" in offs)}
    if not wide:
        return out
    return frozenset(o for o in out if not (o[0] == "D" and o[1].rsplit("@", 1)[0] in wide)) \
        | frozenset(("D", f"{sym}@?") for sym in wide)


def _bracket_symbol(op: str) -> str | None:
    m = re.match(r"\[\s*([A-Za-z_$][\w$]*)", op.strip())
    return m.group(1) if m else None


def _call_args(ins: Instruction) -> list[str]:
    """The argument ``.param`` names of ``call (ret), f, (a, b)`` (or ``call f, (a)``)."""
    lists = [o for o in ins.operands if o.startswith("(")]
    if not lists:
        return []
    last = lists[-1] if len(lists) == 2 or not ins.operands[0].startswith("(") else ""
    return [a.strip() for a in last.strip("()").split(",") if a.strip()]


def _written(ins: Instruction) -> list[str]:
    if ins.base in ("st", "red", "call", "bra", "ret"):
        return []
    return destinations(ins)


# -- the accesses


def _access_operands(ins: Instruction) -> list[tuple[str, str]]:
    """(state space or "" for generic, bracketed operand) of each memory operand ``ins``
    accesses that is not in a private state space."""
    spaces = [m.split("::")[0] for m in ins.modifiers
              if m.split("::")[0] in ("global", "shared", "local", "param", "const")]
    bracketed = [o for o in ins.operands if o.strip().startswith("[")]
    if ins.base in _ACCESSES or ins.base == "mbarrier" or (
            ins.base == "wmma" and ("load" in ins.modifiers or "store" in ins.modifiers)):
        space = spaces[0] if spaces else ""
        return [(space, o) for o in bracketed[:1]] if space in ("", "global") else []
    if ins.base == "cp":
        return [(s, o) for s, o in zip(spaces, bracketed) if s == "global"]
    return []


def _refusal(ins: Instruction, text: str) -> str | None:
    """Why ``ins`` touches global memory other than through an address the analysis can
    check, or None."""
    base, mods = ins.base, ins.modifiers
    if base == "cp" and ("tensor" in mods or "prefetch" in mods):
        return None if "prefetch" in mods else \
            "copies through a tensor map (TMA), which is not one of its pointer arguments"
    if base in _ACCESSES or base == "cp" or base == "call":
        return None
    if base in WHY_NOT and base not in _NO_GLOBAL:
        return WHY_NOT[base]
    if base in _NO_GLOBAL or base == "cvta":
        return None
    return "is not an instruction splice knows to leave global memory alone"


def _address_fault(proof: _Proof, f: _Fn, ins: Instruction, op: str) -> str | None:
    inner = op.strip()[1:-1].replace(" ", "")
    head, _, offset = inner.partition("+")
    origins = proof.value(f, head)
    bad = [o for o in origins if o[0] not in _FINE]
    if not bad:
        return "of no origin splice could trace" if not origins else \
            _private_fault(f, origins, _int(offset or "0"), _access_bytes(ins))
    for kind in ("G", "X", "L", "N"):
        hit = next((o for o in sorted(bad) if o[0] == kind), None)
        if hit is not None:
            return _WHY[kind].format(why=hit[1])
    return None


def _private_fault(f: _Fn, origins: frozenset, imm: int | None, size: int) -> str | None:
    """Why a generic (or global) access at an address of ``origins`` plus ``imm`` may leave
    the ``.local``, ``.shared`` or ``.const`` variable it is derived from: a run-time
    offset (through a generic address it may reach any memory), or constant bytes outside
    the variable's declared size. A staged tile's offsets are the tile call's
    (:func:`check_tile_bounds`, the guard words)."""
    for kind, why in sorted(origins):
        if kind != "D" or "@" not in why or why.startswith(TILE_PREFIX):
            continue
        sym, _, at = why.rpartition("@")
        space = f.symbols.get(sym, ".local")[1:]
        if at == "?" or imm is None:
            return (f"that is the address of the {space} variable '{sym}' plus a run-time "
                    f"offset: through a generic address that may reach any memory, and "
                    f"splice cannot prove it stays in '{sym}'")
        a, end = int(at) + imm, f.sizes.get(sym)
        if end is not None and (a < 0 or a + size > end):
            return (f"that is bytes {a}..{a + size - 1} of the {space} variable '{sym}' "
                    f"({end} bytes): outside it")
    return None


_WHY = {
    "G": "that is {why}, not one of its pointer arguments",
    "X": "computed by {why}",
    "L": "that is {why}: a pointer read from memory, not one of its pointer arguments",
    "N": "computed from integers only (an integer cast of unknown origin), not from a "
         "pointer argument",
}


def _first_fault(proof: _Proof) -> tuple[_Fn, str, str] | None:
    """(function, instruction text, why) of the first access (or instruction) that breaks
    rule 4, in the order the walk reached the functions."""
    for f in proof.fns:
        for ins, text in f.code:
            why = _refusal(ins, text)
            if why is not None:
                return f, text, why
            for _space, op in _access_operands(ins):
                fault = _address_fault(proof, f, ins, op)
                if fault is not None:
                    return f, text, f"accesses global (or generic) memory at an address {fault}"
    return None


def _proven(ext, reach) -> _Proof | None:
    """The fixed point over the functions ``ext``'s symbol reaches (``reach``:
    :func:`splice.analysis.collectives.outside_ptx`), or None when it reaches none."""
    symbols: dict[int, tuple] = {}
    fns = [_function(m, n, tuple(c), symbols.setdefault(id(m), _symbol_spaces(m)))
           for m, n, c in reach.functions()]
    if not fns:
        return None
    proof = _Proof(fns, _root_params(ext, len(fns[0].params)))
    proof.run()
    return proof


def _root_params(ext, fn_params: int) -> list[frozenset]:
    kinds = [t.kind for t in ext.signature.args]
    return [frozenset({D}) if k in ("p", "t") else frozenset({N})
            for k in (kinds + ["i"] * fn_params)[:fn_params]]


def prove_arguments_only(ext, mod: Module, modules) -> tuple[str, str] | None:
    """Prove that ``ext``'s callee (``ext.symbol`` in ``mod``) and everything it reaches
    access global memory only at addresses derived from its pointer arguments (the module
    docstring's rules 1-4).

    Args:
        ext: the extern (``.symbol``, ``.signature``, ``.fragment``).
        mod: the PTX module of its fragment.
        modules: every fragment module of the kernel (callees may lie in another).

    Returns:
        None when it is proven; else (the instruction, why), the instruction with where it
        sits ("in its own body", "in 'g', reached through f -> g").

    Example:
        >>> prove_arguments_only(ext, module, [module])       # doctest: +SKIP
    """
    reach = outside_ptx(mod, ext.symbol, modules)
    if reach.indirect is not None:
        names = chain_names(ext, reach.indirect)
        return "a call through a function pointer", (
            f"{reach_text(names)}: splice cannot read what the called function touches")
    for name, chain in reach.undefined.items():
        if name not in _RUNTIME_CALLS:
            return f"call {name}", (
                f"{reach_text(chain_names(ext, chain[:-1]))} calls '{name}', which no PTX "
                f"fragment defines (code of a binary object): splice cannot read what it "
                f"touches")
    proof = _proven(ext, reach)
    hit = _first_fault(proof) if proof is not None else None
    if hit is None:
        return None
    f, text, why = hit
    return text, f"{reach_text(chain_names(ext, f.chain))} {why}"


def check_argument_sites(sites, fragments: Mapping[str, tuple[str, Module]], target: str,
                         keys: Mapping[int, str] | None = None) -> None:
    """Refuse every call site whose extern is declared ``memory="arguments"`` unless
    :func:`prove_arguments_only` proves it, and every tile call that
    :func:`check_tile_bounds` refuses.

    Args:
        sites: the traced call sites (``.extern``, ``.where``).
        fragments: content key -> (description, PTX module) of every fragment of the
            kernel, compiled for ``target``.
        target: the kernel's PTX target.
        keys: id(fragment) -> its content key for ``target``
            (:func:`splice.forms.base.site_module`).

    Raises:
        SpliceLinkError: naming the extern, its declaration, the instruction, the chain of
            functions that reaches it, the call site and the fix (``memory="any"``); or,
            for a tile call, the tile and the bytes outside it.

    Example:
        >>> check_argument_sites(traced.sites, modules, "sm_90a", keys)  # doctest: +SKIP
    """
    modules = [m for _, m in fragments.values()]
    done: set[tuple[int, str]] = set()
    for site in sites:
        ext = site.extern
        if ext.staging is not None and ext.staging.role == "call" and \
                ext.fragment.has_ptx_body:
            check_tile_bounds(site, _site_module(ext, fragments, target, keys), modules)
        if ext.memory != "arguments" or (ext.staging is not None and
                                         ext.staging.role in ("store", "load")):
            continue
        what = f"extern '{ext.name}' (declared at {ext.where}), called at {site.where},"
        if not ext.fragment.has_ptx_body:
            raise SpliceLinkError(
                f"{what} is declared memory=\"arguments\", but its code is a binary object "
                f"({ext.fragment.describe()}) whose memory accesses splice cannot read. "
                f"Declare it memory=\"any\" (the default), or link its PTX")
        mod = _site_module(ext, fragments, target, keys)
        if (id(mod), ext.symbol) in done:
            continue
        hit = prove_arguments_only(ext, mod, modules)
        if hit is not None:
            raise SpliceLinkError(
                f"{what} is declared memory=\"arguments\" (it touches global memory only "
                f"through its pointer arguments, so cuTile orders it against those arrays "
                f"alone), but '{hit[0]}' {hit[1]}. A later read of that memory could see a "
                f"stale value. Declare it memory=\"any\" (the default: ordered against "
                f"every load and store of the kernel), or pass the memory it touches as a "
                f"pointer argument")
        done.add((id(mod), ext.symbol))


# ---------------------------------------------------------------------------------------------
# Tile calls: no constant offset outside a staged tile

_BITS_RE = re.compile(r"^[bsuf](\d+)$")


def tile_names(frag) -> list[str]:
    """What each staging buffer of a tile call's fragment stages, for messages ("tile
    argument 2", "the tile result").

    Args:
        frag: the tile call's fragment (``.buffers``, ``.results``, ``.tile_positions``).

    Returns:
        list[str]: one name per buffer, in order.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> tile_names(NS(buffers=[0, 0], results=1, tile_positions=(1, 2)))
        ['tile argument 2', 'the tile result']
    """
    first_result = len(frag.buffers) - frag.results
    return [f"tile argument {frag.tile_positions[k] + 1}" if k < first_result else
            "the tile result" if frag.results == 1 else
            f"tile result {k - first_result + 1}" for k in range(len(frag.buffers))]


def _site_module(ext, fragments, target: str, keys) -> Module:
    """The PTX module of ``ext``'s fragment (as :func:`splice.forms.base.site_module`,
    which the analyses cannot import)."""
    frag = ext.fragment
    return fragments[keys[id(frag)] if keys is not None else frag.content_key(target)][1]


def _access_bytes(ins: Instruction) -> int:
    """The bytes an ``ld``/``st``/``atom``/``red`` accesses (its type times its vector
    length)."""
    bits = next((int(m.group(1)) for mod in reversed(ins.modifiers)
                 if (m := _BITS_RE.match(mod))), 8)
    vec = next((int(mod[1:]) for mod in ins.modifiers if re.fullmatch(r"v\d", mod)), 1)
    return max(bits // 8, 1) * vec


def _tile_ranges(frag) -> dict[str, tuple[int, int, str]]:
    """Each staging buffer of a tile call's fragment -> (first byte, end byte, which tile)
    relative to its symbol (after the guard words in check mode)."""
    lead = getattr(frag, "guard_bytes", 0)
    out = {}
    for k, ((elem, n), which) in enumerate(zip(frag.buffers, tile_names(frag))):
        size = frag.buffer_bytes(k)
        out[frag.buffer(k)] = (lead, lead + size, f"{which} ({n} x {elem.name}, {size} bytes)")
    return out


def _out_of_tile(proof: _Proof, f: _Fn, ins: Instruction, ranges) -> str | None:
    if ins.base not in ("ld", "st", "atom", "red") or "param" in ins.modifiers or \
            "local" in ins.modifiers:
        return None
    op = next((o for o in ins.operands if o.strip().startswith("[")), None)
    if op is None:
        return None
    head, _, off = op.strip()[1:-1].replace(" ", "").partition("+")
    imm = _int(off or "0")
    if imm is None or not head.startswith("%"):
        return None       # a symbol's own address: splice's staging code, not the callee's
    size = _access_bytes(ins)
    for kind, why in _shift(proof.value(f, head), imm):
        sym, _, at = why.rpartition("@")
        if kind != "D" or sym not in ranges or at == "?":
            continue
        lo, hi, which = ranges[sym]
        a = int(at)
        if a < lo or a + size > hi:
            side = "before the start" if a < lo else "past the end"
            return (f"accesses bytes {a - lo}..{a - lo + size - 1} of {which}: {side} of "
                    f"the tile")
    return None


def check_tile_bounds(site, mod: Module, modules) -> None:
    """Refuse a tile call (``site.extern.staging.role == "call"``) whose callee, or a
    function it reaches, accesses a staged tile at a constant offset outside it: the
    address is the buffer's plus constants only (``y[N] = -1.0f``, one past a result of
    N elements), so it lands in other shared memory (splice's next buffer, tileiras's).

    Args:
        site: the tile call's block or warpgroup site (``.extern``, ``.where``).
        mod: the PTX module of its fragment (:class:`splice.inputs.tile_fragment.TileFragment`).
        modules: every fragment module of the kernel.

    Raises:
        SpliceLinkError: naming the call, the instruction, the tile, the bytes and the fix.

    Example:
        >>> check_tile_bounds(site, module, [module])          # doctest: +SKIP
    """
    ext = site.extern
    ranges = _tile_ranges(ext.fragment)
    proof = _proven(ext, outside_ptx(mod, ext.symbol, modules))
    if proof is None:
        return
    for f in proof.fns:
        for ins, text in f.code:
            why = _out_of_tile(proof, f, ins, ranges)
            if why is not None:
                raise SpliceLinkError(
                    f"tile call of extern '{ext.name}' (declared at {ext.where}), called "
                    f"at {site.where}: '{text}' {reach_text(chain_names(ext, f.chain))} "
                    f"{why}, into shared memory splice or tileiras uses for something "
                    f"else. Index the tile within its shape (pass the number of valid "
                    f"elements as a scalar argument if it varies)")
