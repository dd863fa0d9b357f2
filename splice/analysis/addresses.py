"""The address analysis of a callee's PTX: which memory each 64-bit register may point into,
the ground :mod:`splice.analysis.memory_proof` proves ``memory="arguments"`` and a tile call's
bounds on (its rule 4: the accesses). ``docs/guide/effects.md`` says the same for users.

1. Each 64-bit value gets a set of *origins*, iterated to a fixed point over the function's
   instructions (flow-insensitively: a register's origins are those of all its definitions,
   so loops and joins need no special case). ``D``: an address derived from a pointer
   parameter (a ``float32*`` argument or a staged tile), or the address of the thread's
   stack (``__local_depot``), a ``.shared`` or ``.const`` variable with its constant offset
   (``("D", "sym@8")``, ``sym@?`` once unknown; at most :data:`_OFFSETS_KEPT` offsets of
   one symbol are kept); ``Z``: the constant 0 (a null pointer); ``N``: an integer (a
   narrower value, a non-pointer parameter, an immediate, a special register); ``L``: a
   64-bit value loaded from memory, the result of a call that is not proven to return an
   address, a ``.param`` that is neither a parameter, a call's result nor a stored
   argument; ``G``: the address of a ``.global`` variable or a function; ``X``: arithmetic
   splice does not follow as address arithmetic. A 32-bit register holds only a variable's
   shared-window address at its offset, for the tile bounds (:meth:`Proof.window`); to
   every 64-bit instruction it is ``N``.
2. ``mov``, ``cvta``, ``mapa`` and a ``cvt`` between 64-bit integer types keep the origins
   (a ``cvt`` through a narrower type truncates an address: ``X``);
   ``selp`` joins its two values; ``add``/``sub`` of exactly one address and offsets that
   are not addresses (``N``, ``Z`` or ``L``: an index read from memory is data) keep the
   address's origins, as does ``mad`` whose product is of non-addresses, except that a null
   (``Z``) side of the address becomes ``X`` (null plus an integer is any address); ``and``
   keeps them only with an immediate alignment mask (:func:`alignment_mask`); ``sub`` of
   two derived addresses is an integer (not null minus an address: its negation, which added
   back to the address makes null). Any other arithmetic with an address operand
   (``mul``, ``shl``, ``or``, a sum of two addresses, an ``and`` with a run-time mask, any
   floating-point instruction) is ``X``.
3. Parameters: a ``ld.param`` of the function's own parameter has its origins (the root's
   from the declared signature; a callee's, the join of what its callers pass, iterated
   with the callers); a ``ld.param`` of a call's return value has what the callee returns
   (``st.param`` to its ``func_retval``). A call of a function no PTX defines returns ``L``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..ptxtools.ptx import (
    Instruction,
    Module,
    Statement,
    declared_variable_name,
    destinations,
    parse_instruction,
)

#: An origin: (kind, why). Kinds as the module docstring's rule 1.
Origin = tuple[str, str]
D: Origin = ("D", "")
Z: Origin = ("Z", "")
N: Origin = ("N", "")
_ADDRESS = frozenset({"D", "G"})
FINE = frozenset({"D", "Z"})

_WIDTH_RE = re.compile(r"\.[busf](\d+)\b|\.(pred)\b")
_REG_DECL_RE = re.compile(r"(%[A-Za-z_$][\w$]*)(?:<(\d+)>)?")
_NUMBER_RE = re.compile(r"^-?(0[xX][0-9a-fA-F]+|0[fFdD][0-9a-fA-F]+|\d+)[uU]?$")


@dataclass
class Fn:
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


def _function(mod: Module, name: str, chain: tuple[str, ...], symbols) -> Fn:
    fn = mod.functions[name]
    body = mod.body_statements(fn)
    code = [(parse_instruction(st, mod.text), " ".join(st.text(mod.text).split()))
            for st in body if st.kind == "instruction"]
    return Fn(mod, name, chain, code, _widths(mod, body), [p.name for p in fn.params],
               fn.results[0].name if fn.results else None, *symbols)


def _width(f: Fn, reg: str) -> int:
    if reg in f.widths:
        return f.widths[reg]
    return f.widths.get(reg.rstrip("0123456789"), 64)


class Proof:
    """The interprocedural fixed point: each reached function's parameter and result
    origins, and its registers'."""

    def __init__(self, fns: list[Fn], root_params: list[frozenset]):
        self.fns = fns
        self.by_name: dict[str, list[Fn]] = {}
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

    def _function(self, f: Fn) -> bool:
        """One pass of ``f`` to its own fixed point; whether a callee's parameters or
        ``f``'s result grew."""
        grew = False
        while True:
            before = dict(f.regs)
            grew |= self._pass(f)
            if f.regs == before:
                return grew

    def _pass(self, f: Fn) -> bool:
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

    def _grow_result(self, f: Fn, value: frozenset) -> bool:
        old = self.results[id(f)]
        self.results[id(f)] = _join(old, value)
        return self.results[id(f)] != old

    def _call(self, f: Fn, ins: Instruction, text: str, pending) \
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

    def value(self, f: Fn, op: str) -> frozenset:
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
        return frozenset({_symbol_origin(f, sym, int_value(offset or "0"))})

    def window(self, f: Fn, op: str) -> frozenset:
        """The origins of operand ``op`` as a shared-window address: a 32-bit register's
        variable offsets (:meth:`_window_transfer`), else :meth:`value`'s."""
        op = op.strip()
        if op.startswith("%") and "." not in op and _width(f, op) == 32:
            return f.regs.get(op, frozenset({N}))
        return self.value(f, op)

    def _window_transfer(self, f: Fn, ins: Instruction, ops: list[str]) -> frozenset:
        """A 32-bit register: the address of a ``.local``, ``.shared`` or ``.const``
        variable (a staged tile) at its offset, where it is a ``cvt`` or ``mov`` of one
        (``cvta.to.shared`` then ``cvt.u32.u64``: the shared window's address, as inline
        PTX takes it) or one plus an immediate (``add``/``sub``; plus a register: an
        unknown offset); else ``N``. Only :func:`tile bounds
        <splice.analysis.memory_proof.check_tile_bounds>` reads it (:meth:`window`): to a
        64-bit instruction the register is an integer, as before."""
        if ins.base not in ("cvt", "mov", "add", "sub") or not ops or len(ops) > 2 or \
                any(m in _FLOAT_TYPES for m in ins.modifiers):
            return frozenset({N})
        vals = [self.window(f, o) for o in ops]
        held = [frozenset(o for o in v if o[0] == "D" and "@" in o[1]) for v in vals]
        if len(ops) == 1:
            return held[0] or frozenset({N})
        if ins.base == "sub" and held[1] or bool(held[0]) == bool(held[1]):
            return frozenset({N})
        k = int_value(ops[1 if held[0] else 0].strip())
        by = None if k is None else -k if ins.base == "sub" else k
        return shift(held[0] or held[1], by)

    def _transfer(self, f: Fn, ins: Instruction, text: str, dest: str, returned,
                  pending) -> frozenset:
        if _width(f, dest) < 64:
            return self._window_transfer(f, ins, list(ins.operands[1:])) \
                if _width(f, dest) == 32 else frozenset({N})
        base, ops = ins.base, list(ins.operands[1:])
        if base in ("ld", "ldu") and "param" in ins.modifiers:
            return self._param_load(f, ops[0], returned, pending)
        if base in ("ld", "ldu", "atom", "multimem"):
            return frozenset({("L", f"a value loaded from memory ('{text}')")})
        vals = [self.value(f, o) for o in ops]
        if any(m in _FLOAT_TYPES for m in ins.modifiers) and any(map(_has_address, vals)):
            return frozenset({("X", f"'{text}', floating-point arithmetic on an address")})
        if base == "cvt" and vals and _has_address(vals[0]) and \
                any(_NARROW_INT_RE.fullmatch(m) for m in ins.modifiers):
            return frozenset({("X", f"'{text}', a cvt that truncates an address to fewer "
                                    f"than 64 bits")})
        if base in ("mov", "cvta", "mapa") or (base == "cvt" and vals):
            return vals[0] if vals else frozenset({N})
        if base == "selp":
            return _join(vals[0], vals[1])
        return shift(_arithmetic(base, vals, text, ops), _constant_offset(base, ops, vals))

    def _param_load(self, f: Fn, op: str, returned, pending) -> frozenset:
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


def _symbol_origin(f: Fn, sym: str, offset: int | None) -> Origin:
    space = f.symbols.get(sym)
    if space in (".shared", ".local", ".const"):   # a staged tile, or private memory
        return ("D", f"{sym}@{'?' if offset is None else offset}")
    if space == ".func":
        return ("G", f"the address of the function '{sym}'")
    return ("G", f"the address of the global variable '{sym}'")


#: An integer type narrower than an address: a ``cvt`` through it (PTX lets a ``cvt`` read
#: and write 64-bit registers with narrower types) keeps only the address's low bits.
_NARROW_INT_RE = re.compile(r"[bsu](8|16|32)")

#: The floating-point types of PTX: arithmetic in them on an address is not an offset.
_FLOAT_TYPES = frozenset({"f16", "f16x2", "bf16", "bf16x2", "f32", "f32x2", "f64", "tf32",
                          "e4m3", "e5m2", "e4m3x2", "e5m2x2"})

#: The widest alignment an ``and`` may round an address down to and keep its origin: the
#: result lies at most this many bytes below the address.
MAX_ALIGNMENT = 4096


def alignment_mask(op: str) -> bool:
    """Whether ``op`` is an immediate ``-2**k`` (k >= 1, 2**k <= :data:`MAX_ALIGNMENT`):
    an ``and`` with it rounds an address down to a multiple of ``2**k``."""
    k = int_value(op.strip())
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
        both_derived = all(k == "D" for v in vals for k, _ in v)
        return frozenset({N}) if both_derived else bad
    if base == "and" and any(map(has_address, vals)):
        mask = [o for o, v in zip(ops, vals) if not has_address(v)]
        if len(vals) != 2 or len(mask) != 1 or not alignment_mask(mask[0]):
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


def int_value(text: str) -> int | None:
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
    k = int_value(other.strip())
    if k is None:
        return None
    return -k if base == "sub" else k


def shift(origins: frozenset, by: int | None) -> frozenset:
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



def proven(ext, reach) -> Proof | None:
    """The fixed point over the functions ``ext``'s symbol reaches (``reach``:
    :func:`splice.analysis.collectives.outside_ptx`), or None when it reaches none."""
    symbols: dict[int, tuple] = {}
    fns = [_function(m, n, tuple(c), symbols.setdefault(id(m), _symbol_spaces(m)))
           for m, n, c in reach.functions()]
    if not fns:
        return None
    proof = Proof(fns, _root_params(ext, len(fns[0].params)))
    proof.run()
    return proof


def _root_params(ext, fn_params: int) -> list[frozenset]:
    kinds = [t.kind for t in ext.signature.args]
    return [frozenset({D}) if k in ("p", "t") else frozenset({N})
            for k in (kinds + ["i"] * fn_params)[:fn_params]]
