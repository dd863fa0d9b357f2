"""What a register or guard predicate holds in each thread of a one-dimensional block, by
EVALUATING its definitions for every ``tid.x`` (not by matching one pattern).

The block-scope proof (:mod:`splice.forms.block_proof`, point 1) needs the guard before a marker to
be true exactly for the threads with ``tid.x != 0``. tileiras derives that predicate from
``%tid.x`` in more than one way: ``mov.u32 %r1, %tid.x; setp.ne.b32 %p1, %r1, 0``, or, in
kernels whose arrays are not known to be 16-byte aligned, through a 64-bit round trip::

        mov.u32        %r24, %tid.x;
        cvt.u64.u32    %rd4, %r24;
        cvt.u32.u64    %r25, %rd4;
        setp.ne.b32    %p33, %r25, 0;

:func:`guard_values` follows the predicate's definition back to ``%tid.x`` and integer
constants and computes it for each ``tid.x`` in ``0 .. threads - 1`` with PTX's integer
semantics (widths, truncation, sign extension, shift clamping), so that any derivation
tileiras emits -- a round trip, a mask, an offset -- is judged by the values it computes.

**Why the values are the register's values.** Each register followed must have exactly one
writing instruction in the function (:attr:`splice.ptxtools.ptx.Body.defs`; no ``call`` returns
into it either), unpredicated, placed
before the instruction that reads it, whose sources are again such registers, integer
immediates or ``%tid.x``: tileiras's PTX is in SSA form, so that definition is the value
every read sees, in every thread, and it is a function of ``tid.x`` alone. Anything else
makes the evaluation return None and the caller refuses, as before: a second definition, a
guard, a load, a special register other than ``%tid.x``, an opcode or modifier not in the
tables below (``.sat``, ``.cc``, rounding, float types), an operand whose width is not the
instruction's, a cycle. The evaluator never approximates: it computes every value exactly
or gives up.
"""

from __future__ import annotations

import functools
import re
from typing import Callable

from ..ptxtools.ptx import Body, registers_in

#: Integer types: name -> (bits, signed). ``b`` types are bit patterns (unsigned here).
_TYPES = {f"{k}{w}": (w, k == "s") for k in ("b", "u", "s") for w in (8, 16, 32, 64)}
#: setp comparisons: name -> (signedness it forces: None = the type's, test on two ints).
_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
        "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
        "lo": lambda a, b: a < b, "ls": lambda a, b: a <= b,
        "hi": lambda a, b: a > b, "hs": lambda a, b: a >= b}
_UNSIGNED_CMP = ("lo", "ls", "hi", "hs")
_BINARY = {"and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
           "add": lambda a, b: a + b, "sub": lambda a, b: a - b}
_INT = re.compile(r"(-?)(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)U?")
_MAX_DEPTH = 64

#: A register's values: (bits, one raw unsigned value per thread).
Values = tuple[int, tuple[int, ...]]


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) & 1 else v


def _immediate(text: str, bits: int, threads: int) -> Values | None:
    m = _INT.fullmatch(text)
    if m is None:
        return None
    digits = m.group(2)
    base = 16 if digits[:2] in ("0x", "0X") else 2 if digits[:2] in ("0b", "0B") else \
        8 if len(digits) > 1 and digits[0] == "0" else 10
    value = int(digits[2:] if base in (16, 2) else digits, base)
    value = -value if m.group(1) else value
    return bits, (value % (1 << bits),) * threads


class _Evaluator:
    """Evaluates registers of one function body for ``threads`` threads (memoised)."""

    def __init__(self, body: Body, threads: int):
        self.body, self.threads = body, threads
        self.memo: dict[str, Values | None] = {}
        self.active: set[str] = set()
        # a call's return registers are written too, but not in Body.defs (``call`` has
        # no destination operand there)
        self.call_written = {r for _, ins in body.parsed
                             if ins is not None and ins.base == "call"
                             for op in ins.operands if op.startswith("(")
                             for r in registers_in(op)}

    def operand(self, text: str, bits: int, use: int) -> Values | None:
        """``text`` read as a ``bits``-bit operand by the instruction at ``use``."""
        if text == "%tid.x":
            got: Values | None = (32, tuple(range(self.threads)))
        elif text.startswith("%"):
            got = self.register(text, use)
        else:
            return _immediate(text, bits, self.threads)
        return got if got is not None and got[0] == bits else None

    def register(self, reg: str, use: int) -> Values | None:
        defs = self.body.defs.get(reg, ())
        if len(defs) != 1 or defs[0] >= use or reg in self.active or \
                reg in self.call_written or len(self.active) >= _MAX_DEPTH:
            return None
        if reg not in self.memo:
            self.active.add(reg)
            self.memo[reg] = self.definition(reg, defs[0])
            self.active.discard(reg)
        return self.memo[reg]

    def definition(self, reg: str, at: int) -> Values | None:
        ins = self.body.parsed[at][1]
        assert ins is not None   # a definition is an instruction
        if ins.guard is not None or not ins.operands or ins.operands[0] != reg:
            return None
        rule = _RULES.get(ins.base)
        return rule(self, ins.modifiers, ins.operands[1:], at) if rule else None


def _mov(ev: _Evaluator, mods, srcs, at) -> Values | None:
    if len(mods) != 1 or mods[0] not in _TYPES or len(srcs) != 1:
        return None
    return ev.operand(srcs[0], _TYPES[mods[0]][0], at)


def _cvt(ev: _Evaluator, mods, srcs, at) -> Values | None:
    """Integer to integer, no ``.sat``: the source as its type, then truncated or extended
    (by the source's signedness) to the destination's width."""
    if len(mods) != 2 or any(m not in _TYPES or m[0] == "b" for m in mods) or len(srcs) != 1:
        return None
    (dbits, _), (sbits, ssigned) = _TYPES[mods[0]], _TYPES[mods[1]]
    got = ev.operand(srcs[0], sbits, at)
    if got is None:
        return None
    wide = (_signed(v, sbits) if ssigned else v for v in got[1])
    return dbits, tuple(v % (1 << dbits) for v in wide)


def _binary(ev: _Evaluator, mods, srcs, at, *, base: str) -> Values | None:
    if len(mods) != 1 or mods[0] not in _TYPES or len(srcs) != 2:
        return None
    bits = _TYPES[mods[0]][0]
    a, b = (ev.operand(s, bits, at) for s in srcs)
    if a is None or b is None:
        return None
    f = _BINARY[base]
    return bits, tuple(f(x, y) % (1 << bits) for x, y in zip(a[1], b[1]))


def _not(ev: _Evaluator, mods, srcs, at) -> Values | None:
    if len(mods) != 1 or mods[0] not in _TYPES or len(srcs) != 1:
        return None
    bits = _TYPES[mods[0]][0]
    a = ev.operand(srcs[0], bits, at)
    return None if a is None else (bits, tuple(~x % (1 << bits) for x in a[1]))


def _mul(ev: _Evaluator, mods, srcs, at) -> Values | None:
    """``mul.lo`` (the low half) and ``mul.wide`` (the double-width product)."""
    if len(mods) != 2 or mods[0] not in ("lo", "wide") or mods[1][0] not in "us" or \
            mods[1] not in _TYPES or len(srcs) != 2:
        return None
    bits, signed = _TYPES[mods[1]]
    a, b = (ev.operand(s, bits, at) for s in srcs)
    if a is None or b is None:
        return None
    out = bits * 2 if mods[0] == "wide" else bits
    if out > 64:
        return None
    conv = (lambda v: _signed(v, bits)) if signed else (lambda v: v)
    return out, tuple(conv(x) * conv(y) % (1 << out) for x, y in zip(a[1], b[1]))


def _shift(ev: _Evaluator, mods, srcs, at, *, base: str) -> Values | None:
    """``shl.b``, ``shr.{b,u,s}``: the amount a u32; amounts past the width clamp (PTX)."""
    if len(mods) != 1 or mods[0] not in _TYPES or len(srcs) != 2 or \
            (base == "shl" and mods[0][0] != "b"):
        return None
    bits, signed = _TYPES[mods[0]]
    a, n = ev.operand(srcs[0], bits, at), ev.operand(srcs[1], 32, at)
    if a is None or n is None:
        return None
    if base == "shl":
        vals = (x << min(k, bits) for x, k in zip(a[1], n[1]))
    elif signed:
        vals = (_signed(x, bits) >> min(k, bits) for x, k in zip(a[1], n[1]))
    else:
        vals = (x >> min(k, bits) for x, k in zip(a[1], n[1]))
    return bits, tuple(v % (1 << bits) for v in vals)


def _setp(ev: _Evaluator, mods, srcs, at) -> Values | None:
    """``setp.cmp.type p, a, b`` (no ``|q`` destination, no boolean combination): 1 where
    the comparison holds."""
    if len(mods) != 2 or mods[0] not in _CMP or mods[1] not in _TYPES or len(srcs) != 2:
        return None
    bits, signed = _TYPES[mods[1]]
    if mods[1][0] == "b" and mods[0] not in ("eq", "ne"):
        return None
    signed = signed and mods[0] not in _UNSIGNED_CMP
    a, b = (ev.operand(s, bits, at) for s in srcs)
    if a is None or b is None:
        return None
    conv = (lambda v: _signed(v, bits)) if signed else (lambda v: v)
    test = _CMP[mods[0]]
    return 1, tuple(int(test(conv(x), conv(y))) for x, y in zip(a[1], b[1]))


_Rule = Callable[[_Evaluator, tuple, tuple, int], "Values | None"]
_RULES: dict[str, _Rule] = {"mov": _mov, "cvt": _cvt, "not": _not, "mul": _mul, "setp": _setp}
for _op in _BINARY:
    _RULES[_op] = functools.partial(_binary, base=_op)
for _op in ("shl", "shr"):
    _RULES[_op] = functools.partial(_shift, base=_op)


def guard_values(guard: str, body: Body, use: int, threads: int) -> tuple[bool, ...] | None:
    """Whether ``@guard`` (``%p`` or ``!%p``) holds, for each ``tid.x`` in
    ``0 .. threads - 1``, at the instruction ``use`` that it guards; None when its
    definition is not one this module evaluates exactly (see the module docstring).

    Args:
        guard: the guard as written, ``"%p1"`` or ``"!%p1"``.
        body: the function body holding it.
        use: the statement index of the guarded instruction.
        threads: the block's ``.reqntid`` (one-dimensional).

    Returns:
        One bool per thread, or None.

    Example:
        >>> from splice.ptxtools.ptx import Module
        >>> m = Module(".visible .entry k() .reqntid 4 { .reg .b32 %r<3>; .reg .b64 %rd<2>;"
        ...            " .reg .pred %p<2>; mov.u32 %r1, %tid.x; cvt.u64.u32 %rd1, %r1;"
        ...            " cvt.u32.u64 %r2, %rd1; setp.ne.b32 %p1, %r2, 0; @%p1 bra $L;"
        ...            " $L: ret; }")
        >>> body = m.body(m.functions["k"])
        >>> use = next(i for i, (_, ins) in enumerate(body.parsed) if ins and ins.base == "bra")
        >>> guard_values("%p1", body, use, 4)
        (False, True, True, True)
    """
    pred = guard.removeprefix("!")
    got = _Evaluator(body, threads).operand(pred, 1, use) if pred.startswith("%") else None
    if got is None:
        return None
    return tuple(bool(v) != guard.startswith("!") for v in got[1])
