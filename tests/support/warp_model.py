"""A warp of a few lanes running a tiny PTX subset under independent thread scheduling,
explored over every schedule: the oracle for splice.activemask's proof
(tests/test_activemask_model.py).

Lanes run alone except at ``activemask`` (any subset of the lanes waiting at it may
execute it together: its result is that subset) and at a membermask ``.sync`` (it fires
when every lane of the mask waits at that very instruction with that mask, as splice's
proof requires). :func:`explore` reports a deadlock (lanes wait at a sync for lanes that
left or wait elsewhere) or a lane waiting with a mask that lacks it. ``-1`` is the full
warp of :data:`LANES` lanes. :func:`program` makes a random structured function (ifs on
per-lane and group-derived predicates, early returns, loops bounded by the lane's input,
activemasks and syncs), the shapes LLVM emits.
"""

from __future__ import annotations

import itertools
import random
import re

from splice.ptxtools.ptx import Module, parse_instruction

LANES = 3
FULL = (1 << LANES) - 1
_SPECIAL = ("activemask", "vote", "shfl", "bar")


def load(ptx: str, name: str = "f"):
    """The instructions of function ``name`` and its labels (label -> index)."""
    mod = Module(ptx, "t")
    code, labels = [], {}
    for s in mod.body_statements(mod.functions[name]):
        if s.kind == "label":
            labels[s.tokens[0].text] = len(code)
        elif s.kind == "instruction":
            code.append(parse_instruction(s, mod.text))
    return code, labels


def _val(regs: dict, op: str) -> int:
    if op == "-1":
        return FULL
    if re.fullmatch(r"-?\d+", op):
        return int(op)
    return regs.get(op, 0)


def _run_alone(code, labels, pc: int, regs: dict):
    """Run one lane up to its next activemask or sync: (pc, regs); pc None: returned."""
    regs = dict(regs)
    for _ in range(1000):
        if pc >= len(code):
            return None, regs
        ins = code[pc]
        if ins.guard is not None:
            taken = bool(regs.get(ins.guard.lstrip("!"), 0)) != ins.guard.startswith("!")
            if not taken:
                pc += 1
                continue
        if ins.opcode.split(".")[0] in _SPECIAL:
            return pc, regs
        a = ins.operands
        if ins.base == "bra":
            pc = labels[a[-1]]
            continue
        if ins.base in ("ret", "exit"):
            return None, regs
        if ins.base == "mov":
            regs[a[0]] = _val(regs, a[1])
        elif ins.base == "add":
            regs[a[0]] = _val(regs, a[1]) + _val(regs, a[2])
        elif ins.base == "setp":
            x, y = _val(regs, a[1]), _val(regs, a[2])
            regs[a[0]] = {"eq": x == y, "ne": x != y, "gt": x > y,
                          "lt": x < y}[ins.opcode.split(".")[1]]
        elif ins.base not in ("ld", "st"):
            raise ValueError(f"the model has no {ins.opcode}")
        pc += 1
    raise RuntimeError("a lane ran 1000 instructions alone")


def _state(pc, regs):
    return pc, tuple(sorted(regs.items()))


def explore(code, labels, inputs: list[dict]) -> str | None:
    """Every schedule of the lanes (``inputs``: each lane's initial registers): the first
    error found, or None."""
    start = tuple(_state(*_run_alone(code, labels, 0, r)) for r in inputs)
    seen, todo = set(), [start]
    while todo:
        st = todo.pop()
        if st in seen:
            continue
        seen.add(st)
        live = [i for i, (pc, _) in enumerate(st) if pc is not None]
        if not live:
            continue
        moves = []
        at: dict[int, list[int]] = {}
        for i in live:
            at.setdefault(st[i][0], []).append(i)
        for pc, lanes in at.items():
            ins = code[pc]
            if ins.opcode == "activemask.b32":
                for k in range(1, len(lanes) + 1):
                    for sub in itertools.combinations(lanes, k):
                        m = sum(1 << i for i in sub)
                        moves.append([(i, {ins.operands[0]: m}) for i in sub])
                continue
            masks: dict[int, list[int]] = {}
            for i in lanes:
                m = _val(dict(st[i][1]), ins.operands[-1])
                if not (m >> i) & 1:
                    return f"lane {i} executes {ins.opcode} with mask {m:#b}, without itself"
                masks.setdefault(m, []).append(i)
            for m, ls in masks.items():
                if set(ls) == {i for i in range(LANES) if (m >> i) & 1}:
                    moves.append(_fire(ins, ls, st))
        if not moves:
            return "deadlock: " + ", ".join(
                f"lane {i} waits in {code[st[i][0]].opcode}" for i in live)
        for move in moves:
            new = list(st)
            for i, writes in move:
                pc, regs = st[i]
                regs = {**dict(regs), **writes}
                new[i] = _state(*_run_alone(code, labels, pc + 1, regs))
            todo.append(tuple(new))
    return None


def _fire(ins, lanes, st):
    if ins.opcode.startswith("vote.sync.ballot"):
        ballot = sum(1 << i for i in lanes if dict(st[i][1]).get(ins.operands[1], 0))
        return [(i, {ins.operands[0]: ballot}) for i in lanes]
    if ins.opcode.startswith("shfl"):
        return [(i, {ins.operands[0].split("|")[0]: 0}) for i in lanes]
    return [(i, {}) for i in lanes]


def errors(ptx: str, seed: int, trials: int = 6) -> str | None:
    """:func:`explore` for ``trials`` random inputs (``%r1`` in 0..2, ``%r8`` in 0..1 per
    lane, as :func:`program`'s parameters)."""
    code, labels = load(ptx)
    rnd = random.Random(seed)
    for _ in range(trials):
        inputs = [{"%r1": rnd.randint(0, 2), "%r8": rnd.randint(0, 1)} for _ in range(LANES)]
        err = explore(code, labels, inputs)
        if err:
            return f"{err} (inputs {inputs})"
    return None


class _Gen:
    def __init__(self, rnd: random.Random):
        self.r, self.n, self.depth = rnd, 0, 0

    def label(self) -> str:
        self.n += 1
        return f"$L{self.n}"

    def pred(self):
        r = self.r.random()
        if r < 0.3:
            return [], "%p1"                                   # per lane
        if r < 0.55:
            m = self.r.choice(["%r2", "%r3"])
            return [f"setp.eq.s32 %p2, {m}, -1;"], "%p2"       # activemask() == full
        if r < 0.8:
            return ["setp.ne.s32 %p3, %r4, 0;"], "%p3"         # a ballot
        return ["setp.gt.s32 %p4, %r1, 0;"], "%p4"             # per lane

    def stmts(self, k: int) -> list[str]:
        return [s for _ in range(k) for s in self.stmt()]

    def stmt(self) -> list[str]:
        r, m = self.r.random(), self.r.choice(["%r2", "%r3"])
        other = "%r3" if m == "%r2" else "%r2"
        if r < 0.2:
            return [f"activemask.b32 {m};"]
        if r < 0.35:
            return [f"shfl.sync.idx.b32 %r9|%p7, %r1, 0, 31, {m};"]
        if r < 0.45:
            return [f"vote.sync.ballot.b32 %r4, %p1, {m};"]
        if r < 0.5:
            return [f"mov.b32 {m}, {other};"]
        if r < 0.55:
            return ["shfl.sync.idx.b32 %r9|%p7, %r1, 0, 31, -1;"]
        if self.depth >= 2:
            return [f"activemask.b32 {m};"]
        self.depth += 1
        try:
            return self._nested(r, m)
        finally:
            self.depth -= 1

    def _nested(self, r: float, m: str) -> list[str]:
        if r < 0.62:
            sync = self.r.choice([f"shfl.sync.idx.b32 %r9|%p7, %r1, 0, 31, {m};",
                                  f"vote.sync.ballot.b32 %r4, %p1, {m};",
                                  f"bar.warp.sync {m};"])
            return [f"activemask.b32 {m};", *self.stmts(self.r.randint(1, 2)), sync]
        if r < 0.8:
            pre, p = self.pred()
            neg = "!" if self.r.random() < 0.5 else ""
            end = self.label()
            body = self.stmts(self.r.randint(1, 3))
            if self.r.random() < 0.4:
                other = self.label()
                return [*pre, f"@{neg}{p} bra {other};", *body, f"bra.uni {end};",
                        f"{other}:", *self.stmts(self.r.randint(1, 2)), f"{end}:"]
            return [*pre, f"@{neg}{p} bra {end};", *body, f"{end}:"]
        if r < 0.88:
            pre, p = self.pred()
            return [*pre, f"@{p} ret;"]
        c, top = f"%r{10 + self.depth}", self.label()
        bound = "%r1" if self.r.random() < 0.7 else "2"
        return [f"mov.u32 {c}, 0;", f"{top}:", *self.stmts(self.r.randint(1, 3)),
                f"add.s32 {c}, {c}, 1;", f"setp.gt.s32 %p5, {bound}, {c};", f"@%p5 bra {top};"]


HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def program(seed: int) -> str:
    """A random function ``f`` (PTX text): per-lane inputs ``%r1`` (0..2) and ``%p1``."""
    rnd = random.Random(seed)
    body = _Gen(rnd).stmts(rnd.randint(2, 6))
    lines = "\n".join(s if s.endswith(":") else "    " + s for s in body)
    return HEADER + f"""
.visible .func (.param .b32 r) f(.param .b32 a, .param .b32 b) {{
    .reg .b32 %r<16>; .reg .pred %p<8>;
    ld.param.b32 %r1, [a];
    ld.param.b32 %r8, [b];
    setp.ne.s32 %p1, %r8, 0;
{lines}
    st.param.b32 [r], %r1;
    ret;
}}
"""
