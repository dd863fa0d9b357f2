"""The opportunistic warp pattern, proven: which warp-collective instructions of a function
are correct at any divergence, so that an element-scope call may run them.

``mask = __activemask(); ... __shfl_sync(mask, ...)`` (``__match_all_sync``,
``__ballot_sync``, ``__reduce_*_sync``, ``__syncwarp`` likewise) is correct whichever
threads of a warp execute the call together: ``activemask.b32`` (PTX ISA 9.4 section
9.7.15.12) gives each of the threads executing it together the same mask, the set of them;
a ``.sync`` instruction waits for the threads of its membermask (9.7.10.6, 9.7.15.2,
9.7.15.10, 9.7.15.11, 9.7.15.13, 9.7.15.15); so when every one of them goes on to execute
that ``.sync`` once with that mask, before anything else could change it, they meet there.
warp-aggregated atomics and NVSHMEM's ``nvshmem_<T>_g`` (match.all.sync + shfl.sync on the
active mask) are written so.

:func:`proven` accepts a ``.sync`` instruction S of a function when all of this holds in
the function's PTX (else it stays refused by :mod:`splice.collectives`):

- S is not predicated, and its membermask (the last operand) is a register (not a
  constant such as ``0xffffffff``);
- on every path from the function's entry to S, that register holds the result of the
  latest execution of an ``activemask.b32`` A (directly, or through plain ``mov`` copies):
  a forward data-flow analysis; any other write (arithmetic, a load, a parameter, a
  predicated ``activemask``/``mov``, a register declared in a nested scope) makes it
  unknown, and so does a join of different values;
- for each such A: every path from A reaches S before it returns, and before it reaches
  A or another such A again; every path from S back to S passes one of them (so a thread
  of the mask executes S exactly once per A, and no thread of it can leave for another
  instruction, return, or loop a different number of times);
- the function branches through no register (``brx.idx``).

An ``activemask.b32`` is accepted with the S it feeds: alone, its value would be
tileiras's layout. The proof stays in one function; calls are walked by
:mod:`splice.collectives` as before. Binary objects (``from_object``) are not covered: their
SASS is checked by :func:`splice.collectives.check_binary_sites` as before.
"""

from __future__ import annotations

import re
from typing import Sequence

from .ptx import Function, Instruction, Module, Statement, parse_instruction, destinations

#: Opcode prefixes of the warp instructions whose last operand is a membermask and whose
#: ISA semantics are "wait for the threads of membermask to execute it".
MASKED = ("shfl.sync", "vote.sync", "match", "redux.sync", "elect.sync", "bar.warp.sync")
_PLAIN_MOV = frozenset({"mov.b32", "mov.u32", "mov.s32"})
_REG = re.compile(r"%[A-Za-z_$][A-Za-z0-9_$]*")
_EXITS = frozenset({"ret", "exit"})
#: A thread that traps ends the kernel: it waits for nobody and nobody waits for it.
_DEAD_ENDS = frozenset({"trap"})

# Values a tracked register may hold at a point: FRESH (the result of the latest execution
# of the activemask statements in the frozenset), or one of these.
_UNDEF, _UNKNOWN = "undef", "unknown"


def _is_masked(opcode: str) -> bool:
    parts = opcode.split(".")
    return any(parts[:len(p.split("."))] == p.split(".") for p in MASKED)


def proven(mod: Module, fn: Function) -> frozenset[int]:
    """The offsets (``Statement.start``) of the ``activemask.b32`` and membermask ``.sync``
    statements of ``fn`` (defined in ``mod``) proven to be the opportunistic pattern (see
    the module's docstring); empty when there is none."""
    body = mod.body_statements(fn)
    code = [(s, parse_instruction(s, mod.text)) for s in body if s.kind == "instruction"]
    if not any(i.opcode == "activemask.b32" for _, i in code) or \
            not any(_is_masked(i.opcode) for _, i in code) or \
            any(i.base == "brx" for _, i in code):
        return frozenset()
    cfg = _Cfg(body, mod.text)
    nested = _nested_registers(body, fn)
    at = _fresh_masks(cfg, nested)
    out: set[int] = set()
    for n, ins in enumerate(cfg.ins):
        if ins is None or not _is_masked(ins.opcode) or ins.guard is not None:
            continue
        mask = ins.operands[-1] if ins.operands else ""
        state = at[n]
        value = state.get(mask) if state is not None and _REG.fullmatch(mask) and \
            mask not in nested else None
        if isinstance(value, frozenset) and value and _control_equivalent(cfg, value, n):
            out.add(cfg.stmts[n].start)
            out.update(cfg.stmts[a].start for a in value)
    return frozenset(out)


class _Cfg:
    """The function body as a graph of its instructions and labels (one node each)."""

    def __init__(self, body: Sequence[Statement], text: str):
        self.stmts = [s for s in body if s.kind in ("instruction", "label")]
        self.ins: list[Instruction | None] = [
            parse_instruction(s, text) if s.kind == "instruction" else None
            for s in self.stmts]
        labels = {s.tokens[0].text: n for n, s in enumerate(self.stmts) if s.kind == "label"}
        self.succ: list[tuple[int, ...]] = []
        for n, ins in enumerate(self.ins):
            nxt = (n + 1,) if n + 1 < len(self.stmts) else ()
            if ins is None:
                self.succ.append(nxt)
                continue
            jump: tuple[int, ...] = ()
            ends = ins.base in _EXITS or ins.base in _DEAD_ENDS
            if ins.base == "bra":
                jump = tuple(labels[o] for o in ins.operands[-1:] if o in labels)
                ends = True
            through = () if ends and ins.guard is None else nxt
            self.succ.append(tuple(dict.fromkeys(jump + through)))

    def exits(self, n: int) -> bool:
        """A thread leaves the function (or the kernel) here without a dead end."""
        ins = self.ins[n]
        if ins is not None and ins.base in _DEAD_ENDS:
            return False
        return ins is not None and ins.base in _EXITS or not self.succ[n]

    def reaches(self, start: int, targets: set[int], blocked: set[int],
                exits: bool = False) -> bool:
        """Whether a path from ``start``'s successors reaches one of ``targets`` (or, with
        ``exits``, a function exit) without passing a node of ``blocked``."""
        seen: set[int] = set()
        todo = list(self.succ[start])
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if n in targets or (exits and self.exits(n) and n not in blocked):
                return True
            if n not in blocked:
                todo.extend(self.succ[n])
        return False


def _control_equivalent(cfg: _Cfg, origins: frozenset[int], s: int) -> bool:
    for a in origins:
        # from A: S before any return/exit, before A or another origin again
        if cfg.reaches(a, set(origins), {s}) or cfg.reaches(a, set(), {s}, exits=True):
            return False
    # from S: back to S only through an origin
    return not cfg.reaches(s, {s}, set(origins))


def _nested_registers(body: Sequence[Statement], fn: Function) -> set[str]:
    """Register names declared in a nested ``{ }`` scope of the body (one may shadow a
    register of the same name: a proof by names would not hold), ``%r<4>`` expanded."""
    top = body[0].depth if body else 0
    out: set[str] = set()
    for s in body:
        if s.kind == "directive" and s.head == ".reg" and s.depth > top:
            toks = [t.text for t in s.tokens]
            for k, t in enumerate(toks):
                if t.startswith("%"):
                    if k + 3 < len(toks) and toks[k + 1] == "<":
                        out.update(f"{t}{i}" for i in range(int(toks[k + 2], 0)))
                    else:
                        out.add(t)
    return out


def _fresh_masks(cfg: _Cfg, nested: set[str]) -> list[dict | None]:
    """For each node, the value of each tracked register before it executes (None: the
    node is unreachable). Tracked: the registers ``activemask.b32`` or a plain ``mov``
    writes; a register not in the map is undefined there."""
    n_nodes = len(cfg.stmts)
    at: list[dict | None] = [None] * n_nodes
    if not n_nodes:
        return at
    at[0] = {}
    todo = [0]
    while todo:
        n = todo.pop()
        state = at[n]
        assert state is not None
        out = _transfer(cfg.ins[n], n, state, nested)
        for m in cfg.succ[n]:
            before = at[m]
            joined = out if before is None else _join(before, out)
            if joined != before:
                at[m] = joined
                todo.append(m)
    return at


def _transfer(ins: Instruction | None, n: int, state: dict, nested: set[str]) -> dict:
    if ins is None:
        return state
    written = _written(ins)
    if not written:
        return state
    out = dict(state)
    if ins.opcode == "activemask.b32" and ins.guard is None and written[0] not in nested:
        for r, v in state.items():   # copies of this activemask's earlier result are stale
            if isinstance(v, frozenset) and n in v:
                out[r] = _UNKNOWN
        out[written[0]] = frozenset({n})
        return out
    if ins.opcode in _PLAIN_MOV and ins.guard is None and len(ins.operands) == 2 and \
            _REG.fullmatch(ins.operands[1]) and ins.operands[1] not in nested and \
            written[0] not in nested:
        out[written[0]] = state.get(ins.operands[1], _UNDEF)
        return out
    for r in written:
        out[r] = _UNKNOWN
    return out


def _written(ins: Instruction) -> list[str]:
    """Registers an instruction writes: :func:`splice.ptx.destinations`, and the registers
    in the result list of a ``call``."""
    if ins.base == "call":
        first = ins.operands[0] if ins.operands else ""
        return _REG.findall(first) if first.startswith("(") else []
    return destinations(ins)


def _join(a: dict, b: dict) -> dict:
    out = {}
    for r in a.keys() | b.keys():
        x, y = a.get(r, _UNDEF), b.get(r, _UNDEF)
        if x == y:
            out[r] = x
        elif isinstance(x, frozenset) and isinstance(y, frozenset):
            out[r] = x | y
        else:
            out[r] = _UNKNOWN
    return out
