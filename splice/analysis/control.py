"""Control flow of one PTX function body (:class:`splice.ptxtools.ptx.Body`), as the forms'
proofs ask it: the statements one thread can go to next, whether a path runs from one kind of
instruction to a statement, which warps of the block reach each statement, and the values a
register holds as a function of the thread or warp index. PTX only: nothing here knows a
call site or a form."""

from __future__ import annotations

from typing import Callable

from ..ptxtools.ptx import Body, Instruction


def tid_register(reg: str, body: Body) -> bool:
    """Whether ``reg``'s only definition is ``mov.{u32,b32} reg, %tid.x``."""
    parsed, defs = body.parsed, body.defs
    if len(defs.get(reg, ())) != 1:
        return False
    ins = parsed[defs[reg][0]][1]
    assert ins is not None   # a definition is an instruction
    return ins.base == "mov" and ins.guard is None and \
        ins.modifiers in (("u32",), ("b32",), ("s32",)) and ins.operands == (reg, "%tid.x")


def immediate(op: str) -> int | None:
    try:
        return int(op, 0)
    except ValueError:
        return None


def setp_of(guard: str, body: Body) -> tuple[Instruction, bool] | None:
    """(the ``setp`` that is the only definition of ``@guard``'s predicate, and whether the
    guard negates it) for a 32-bit comparison whose only destination is that predicate;
    else None."""
    pred = guard.lstrip("!")
    if len(body.defs.get(pred, ())) != 1:
        return None
    ins = body.parsed[body.defs[pred][0]][1]
    if ins is None or ins.base != "setp" or ins.guard is not None or len(ins.operands) != 3 or \
            ins.operands[0] != pred or len(ins.modifiers) != 2 or \
            ins.modifiers[1] not in ("b32", "u32", "s32"):
        return None
    return ins, guard.startswith("!")


def successors(parsed, labels: dict[str, int], k: int, *, past_end: bool = False) -> list[int]:
    """The statements control can reach right after statement ``k`` (of one thread); with
    ``past_end``, ``len(parsed)`` stands for falling off the function's last statement."""
    ins = parsed[k][1]
    nxt = [k + 1] if k + 1 < len(parsed) or past_end else []
    if ins is None:
        return nxt
    if ins.base in ("ret", "exit", "trap"):
        return nxt if ins.guard is not None else []
    if ins.base == "bra":
        target = [labels[ins.operands[0]]] if ins.operands[0] in labels else []
        return target + (nxt if ins.guard is not None else [])
    if ins.base == "brx":
        return list(labels.values())
    return nxt


_WARP_ID_SHFL = ("0", "31", "-1")


_WARP_OPS: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "and": lambda a, b: a & b,
    "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << b,
    "shr": lambda a, b: a >> b}


def warp_expr(reg: str, body: Body, depth: int = 0) -> Callable[[int], int] | None:
    """``f`` with ``reg == f(warp id)`` (32 bits) in every thread, when ``reg``'s only
    definition is ``shr.u32 reg, tid, 5`` (tid: only ``mov %tid.x``), ``shfl.sync.idx.b32
    reg, w, 0, 31, -1`` of such a register (lane 0's value: the same in the whole warp), or
    an ``add``/``sub``/``and``/``or``/``xor``/``shl``/``shr`` (32-bit, unsigned ``shr``) of one
    and an immediate; else None."""
    if depth > 8 or len(body.defs.get(reg, ())) != 1:
        return None
    ins = body.parsed[body.defs[reg][0]][1]
    if ins is None or ins.guard is not None or not ins.operands or ins.operands[0] != reg:
        return None
    ops = ins.operands
    if ins.opcode in ("shr.u32", "shr.b32") and ops[2:] == ("5",) and \
            tid_register(ops[1], body):
        return lambda w: w
    if ins.opcode == "shfl.sync.idx.b32" and ops[2:] == _WARP_ID_SHFL:
        return warp_expr(ops[1], body, depth + 1)
    op = _WARP_OPS.get(ins.base)
    imm = immediate(ops[2]) if len(ops) == 3 else None
    if op is None or imm is None or ins.modifiers not in (("s32",), ("u32",), ("b32",)) or \
            ins.opcode == "shr.s32":
        return None
    inner = warp_expr(ops[1], body, depth + 1)
    if inner is None:
        return None
    return lambda w: op(inner(w), imm) & 0xFFFFFFFF


_CMP: dict[str, Callable[[int, int], bool]] = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "lo": lambda a, b: a < b, "ls": lambda a, b: a <= b, "hi": lambda a, b: a > b,
    "hs": lambda a, b: a >= b}


def warp_predicate(guard: str, body: Body) -> Callable[[int], bool] | None:
    """For ``@guard`` on a per-warp-uniform value (a ``setp`` comparing a function of the
    warp id (:func:`warp_expr`) with an immediate, the predicate's only definition): warp -> whether
    the guard holds. None for any other guard."""
    found = setp_of(guard, body)
    if found is None or found[0].modifiers[0] not in _CMP:
        return None
    ins, negated = found
    cmp, ty = ins.modifiers
    if ty == "b32" and cmp not in ("eq", "ne"):
        return None
    a, b = ins.operands[1:]
    swap = immediate(a) is not None
    reg, imm = (b, immediate(a)) if swap else (a, immediate(b))
    f = warp_expr(reg, body)
    if imm is None or f is None:
        return None

    def norm(v: int) -> int:
        v &= 0xFFFFFFFF
        return v - (1 << 32) if ty == "s32" and v >= 1 << 31 else v

    def holds(w: int) -> bool:
        x, y = norm(f(w)), norm(imm)
        return _CMP[cmp](*((y, x) if swap else (x, y))) != negated
    return holds


def warps_reaching(body: Body, nwarps: int) -> list[frozenset[int]]:
    """For each statement, the warps whose threads can reach it from the function's entry
    (step 5): a branch on a per-warp-uniform predicate (:func:`warp_predicate`) sends each
    warp its own way, every other branch both ways."""
    parsed, labels = body.parsed, body.labels
    reach: list[set[int]] = [set() for _ in parsed]
    if not parsed:
        return []
    reach[0] = set(range(nwarps))
    work = [0]
    preds: dict[int, Callable[[int], bool] | None] = {}
    while work:
        k = work.pop()
        here = reach[k]
        ins = parsed[k][1]
        outs: list[tuple[int, set[int]]]
        if ins is not None and ins.base == "bra" and ins.guard is not None:
            if k not in preds:
                preds[k] = warp_predicate(ins.guard, body)
            p = preds[k]
            taken = {w for w in here if p(w)} if p is not None else here
            fall = {w for w in here if not p(w)} if p is not None else here
            target = labels.get(ins.operands[0])
            outs = ([(target, taken)] if target is not None else []) + \
                ([(k + 1, fall)] if k + 1 < len(parsed) else [])
        else:
            outs = [(n, here) for n in successors(parsed, labels, k)]
        for n, ws in outs:
            if not ws <= reach[n]:
                reach[n] |= ws
                work.append(n)
    return [frozenset(r) for r in reach]


def reaches(body: Body, i: int, source: Callable[[Instruction], bool],
             kill: Callable[[Instruction], bool]) -> bool:
    """Whether some path from an instruction matching ``source`` reaches statement ``i``
    without passing one matching ``kill``."""
    parsed, labels = body.parsed, body.labels
    starts = [k for k, (_, ins) in enumerate(parsed) if ins is not None and source(ins)]
    seen = set(starts)
    work = list(starts)
    while work:
        k = work.pop()
        for n in successors(parsed, labels, k):
            if n == i:
                return True
            ins = parsed[n][1]
            if n not in seen and not (ins is not None and kill(ins)):
                seen.add(n)
                work.append(n)
    return False
