"""The opportunistic warp pattern, proven: which warp-collective instructions of a function
are correct at any divergence, so that an element-scope call may run them.

``mask = __activemask(); ... __shfl_sync(mask, ...)`` (``__match_all_sync``,
``__ballot_sync``, ``__reduce_*_sync``, ``__syncwarp`` likewise) is correct whichever
threads of a warp execute the call together: ``activemask.b32`` (PTX ISA 9.4 section
9.7.15.12) gives the threads executing it together -- the *group* -- one mask, the set of
them; a ``.sync`` instruction waits for the threads of its membermask (9.7.10.6, 9.7.15.2,
9.7.15.10, 9.7.15.11, 9.7.15.13, 9.7.15.15); so when every thread of the group executes that
``.sync`` once with the group's mask, or none does, they meet there. Warp-aggregated atomics
are written so, and NVSHMEM's ``nvshmem_<T>_g`` in the form ``if (__activemask() == ~0u &&
__match_all_sync(~0u, ...) == ~0u ...) { ... __shfl_sync(mask, ...) }`` (which NVVM compiles
with the constant full mask, known equal to the group's there).

:func:`proven` accepts a ``.sync`` instruction S of a function when all of this holds in
the function's PTX (else it stays refused by :mod:`splice.analysis.collectives`):

- S is not predicated, and its membermask (the last operand) is, on every path from the
  function's entry to S, the result of the latest execution of an ``activemask.b32`` A
  (directly or through plain ``mov`` copies), or the full mask ``-1`` on paths that went
  through the branch of a ``setp.eq/ne`` of that result with ``-1`` on which it is ``-1``.
  A forward data-flow analysis; any other write (arithmetic, a load, a parameter, a
  predicated instruction, a register declared in a nested scope) makes a register
  unknown, and so does a join of different values;
- for each such A: no path from A reaches A (or another such A) before S; no path from S
  reaches S again before an A; and at every branch (or predicated return) between A and S
  whose predicate is not *uniform over A's group*, either every path reaches S or none
  does. Uniform: computed (with the instructions in :data:`_PURE`) after A from constants,
  A's result, and the results of syncs already proven on A's group alone (all of a
  ``match.all``, ``vote.sync``, ``redux.sync``, and ``elect.sync``'s lane), the same
  instruction having written it on every path (a join of two writes is not uniform);
- the function branches through no register (``brx.idx``), and every branch's label is
  resolved in the ``{ }`` block scopes it sits in (two sibling blocks may declare one
  name: each branch goes to its own block's).

Syncs are proven in rounds until none is added (a sync's result may make a later branch
uniform). An ``activemask.b32`` is accepted with the S it feeds: alone, its value would be
tileiras's layout. The proof stays in one function; calls are walked by
:mod:`splice.analysis.collectives` as before. Binary objects (``from_object``) are not covered:
their SASS is checked by :func:`splice.forms.element_callees.check_binary_sites` as before.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from ..ptxtools.ptx import Body, Function, Instruction, Module, Statement, destinations

#: Opcode prefixes of the warp instructions whose last operand is a membermask and whose
#: ISA semantics are "wait for the threads of membermask to execute it".
MASKED = ("shfl.sync", "vote.sync", "match", "redux.sync", "elect.sync", "bar.warp.sync")
#: How many destinations of a proven sync hold the same value in every thread of the mask
#: (``match.all``: the mask or 0, and the predicate; ``elect.sync``: the elected lane, not
#: its predicate; shfl and ``match.any``: per lane).
_UNIFORM_RESULTS = {"match.all": 2, "vote.sync": 2, "redux.sync": 1, "elect.sync": 1}
#: Instructions whose result is a function of their operands alone.
_PURE = frozenset("add sub mul mad and or xor not cnot shl shr popc brev bfind clz setp selp "
                  "min max neg abs cvt mov slct bfe bfi prmt lop3".split())
_PLAIN_MOV = frozenset({"mov.b32", "mov.u32", "mov.s32"})
_FULL_MASK = frozenset({"-1", "0xffffffff", "0xFFFFFFFF", "4294967295"})
_REG = re.compile(r"%[A-Za-z_$][A-Za-z0-9_$]*")
_IMM = re.compile(r"-?(0[xX][0-9a-fA-F]+|0[fFdD][0-9a-fA-F]+|\d+(\.\d*)?([eE][-+]?\d+)?)U?")
_SETP_FULL = re.compile(r"setp\.(eq|ne)\.(b32|u32|s32)")
_EXITS = frozenset({"ret", "exit"})
#: A thread that traps ends the kernel: it waits for nobody and nobody waits for it.
_DEAD_ENDS = frozenset({"trap"})
_FULL = "<full>"   # state key: the activemasks whose latest result is known to be -1


@dataclasses.dataclass(frozen=True)
class _Fresh:
    """The result of the latest execution of one of the activemasks ``origins``."""
    origins: frozenset[int]


@dataclasses.dataclass(frozen=True)
class _Uniform:
    """A value the same in every thread of the group of ``origins`` (none: of any group),
    written by node ``node``; ``value``: an integer constant; ``full_when``: a predicate
    that is this (True/False) exactly when the activemask result is -1."""
    origins: frozenset[int]
    node: int
    value: int | None = None
    full_when: bool | None = None


_UNDEF, _UNKNOWN = "undef", "unknown"
_Value = _Fresh | _Uniform | str | frozenset


def _is_masked(opcode: str) -> bool:
    parts = opcode.split(".")
    return any(parts[:len(p.split("."))] == p.split(".") for p in MASKED)


def proven(mod: Module, fn: Function) -> frozenset[int]:
    """The offsets (``Statement.start``) of the ``activemask.b32`` and membermask ``.sync``
    statements of ``fn`` (defined in ``mod``) proven to be the opportunistic pattern (see
    the module's docstring); empty when there is none."""
    analysed = mod.body(fn)
    code = [i for _, i in analysed.parsed if i is not None]
    if not any(i.opcode == "activemask.b32" for i in code) or \
            not any(_is_masked(i.opcode) for i in code) or \
            any(i.base == "brx" for i in code):
        return frozenset()
    cfg = _Cfg(analysed)
    nested = _nested_registers(analysed.statements)
    if nested is None or cfg.unresolved:
        return frozenset()
    syncs: dict[int, frozenset[int]] = {}   # proven sync node -> its activemasks
    # A round proves what it can with the results of the syncs proven before it as uniform
    # values. Monotone: a proven sync's results only turn unknown values uniform, and
    # neither a mask nor a "returned -1" fact depends on them, so a proven sync stays
    # proven with the same activemasks and is not checked again.
    candidates = [n for n, ins in enumerate(cfg.ins) if ins is not None and
                  _is_masked(ins.opcode)]
    while True:                               # each round adds one at least, or ends
        at = _dataflow(cfg, nested, syncs)
        found = {n: o for n in candidates if n not in syncs
                 and (o := _group_of_sync(cfg, at, n, nested)) is not None
                 and _control_ok(cfg, at, o, n)}
        if not found:
            break
        syncs = {**syncs, **found}
    return frozenset({cfg.stmts[n].start for n in syncs} |
                     {cfg.stmts[a].start for o in syncs.values() for a in o})


def _group_of_sync(cfg: _Cfg, at, n: int, nested: set[str]) -> frozenset[int] | None:
    """The activemasks whose group's mask node ``n``'s membermask is, if it is an
    unpredicated membermask ``.sync``, and it is."""
    ins, state = cfg.ins[n], at[n]
    if ins is None or state is None or not _is_masked(ins.opcode) or ins.guard is not None \
            or not ins.operands:
        return None
    mask = ins.operands[-1]
    value: _Value | None = None
    if _REG.fullmatch(mask) and mask not in nested:
        value = state.get(mask)
    full = state.get(_FULL, frozenset())
    if isinstance(value, _Fresh) and value.origins:
        return value.origins
    if full and (mask in _FULL_MASK or isinstance(value, _Uniform) and value.value == -1):
        return full
    return None


# ---------------------------------------------------------------------------------------------
# The graph


class _Cfg:
    """The function body as a graph of its instructions and labels (one node each)."""

    def __init__(self, body: Body):
        scoped = _scoped(body.statements)
        self.stmts = [s for s, _ in scoped]
        parsed = {id(s): ins for s, ins in body.parsed}
        self.ins: list[Instruction | None] = [parsed[id(s)] for s in self.stmts]
        # a label is visible in the block that declares it and the blocks inside that one
        # (ptxas accepts one name declared in two sibling blocks, each branch going to its own)
        labels = {(chain[-1], s.tokens[0].text): n for n, (s, chain) in enumerate(scoped)
                  if s.kind == "label"}
        #: a branch whose target this graph cannot resolve: no proof holds
        self.unresolved = False
        self.succ: list[tuple[int, ...]] = []
        self.jump: list[int | None] = []    # a conditional branch's target
        for n, ins in enumerate(self.ins):
            nxt = (n + 1,) if n + 1 < len(self.stmts) else ()
            target = None
            if ins is not None and ins.base == "bra":
                name = ins.operands[-1] if ins.operands else ""
                target = next((labels[(b, name)] for b in reversed(scoped[n][1])
                               if (b, name) in labels), None)
                self.unresolved |= target is None
            ends = ins is not None and (ins.base in _EXITS or ins.base in _DEAD_ENDS or
                                        ins.base == "bra")
            through = () if ends and (ins is None or ins.guard is None) else nxt
            jump = (target,) if target is not None else ()
            self.succ.append(tuple(dict.fromkeys(jump + through)))
            self.jump.append(target if ins is not None and ins.guard and target != n + 1
                             else None)
        self.pred: list[list[int]] = [[] for _ in self.stmts]
        for n, ss in enumerate(self.succ):
            for m in ss:
                self.pred[m].append(n)
        #: the nodes where :meth:`exits`, and where :meth:`splits`
        self.exit_nodes = frozenset(n for n in range(len(self.stmts)) if self.exits(n))
        self.split_nodes = frozenset(n for n in range(len(self.stmts)) if self.splits(n))

    def exits(self, n: int) -> bool:
        """A thread leaves the function (or the kernel) here without a dead end."""
        ins = self.ins[n]
        if ins is not None and ins.base in _DEAD_ENDS:
            return False
        return ins is not None and ins.base in _EXITS or not self.succ[n]

    def splits(self, n: int) -> bool:
        """Threads may go different ways here: a predicated branch or return."""
        ins = self.ins[n]
        return ins is not None and ins.guard is not None and \
            (len(self.succ[n]) > 1 or ins.base in _EXITS)

    def backwards(self, targets: set[int], within: set[int]) -> set[int]:
        """The nodes of ``within`` with a path from a successor to one of ``targets`` whose
        nodes in between are in ``within``."""
        out: set[int] = set()
        todo = list(targets)
        while todo:
            x = todo.pop()
            for p in self.pred[x]:
                if p in within and p not in out:
                    out.add(p)
                    todo.append(p)
        return out

    def forwards(self, start: int, stop: set[int]) -> set[int]:
        """The nodes reached from ``start``'s successors, not going on from ``stop``."""
        seen: set[int] = set()
        todo = list(self.succ[start])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                if n not in stop:
                    todo.extend(self.succ[n])
        return seen


def _control_ok(cfg: _Cfg, at, origins: frozenset[int], s: int) -> bool:
    """Every thread of the group of an activemask in ``origins`` executes ``s`` once
    before the next of them, or none does."""
    stop = set(origins) | {s}
    if s in cfg.forwards(s, stop):                  # S again without an activemask
        return False
    for a in origins:
        region = cfg.forwards(a, stop)
        if region & set(origins):                   # an activemask again before S
            return False
        inner = region - stop
        # uniform over *a's* group: a value of another activemask b's group is not (threads
        # of several b-groups may execute a together), nor one of several (a join)
        parting = [n for n in inner & cfg.split_nodes
                   if not _uniform_guard(cfg, at, n, frozenset({a}))]
        if not parting:
            continue
        to_s = cfg.backwards({s}, inner)
        leave = cfg.backwards(inner & cfg.exit_nodes, inner)
        # where threads of the group may part: all of them on to S, or none
        if any(n in to_s and (n in leave or n in cfg.exit_nodes) for n in parting):
            return False
    return True


def _scoped(body: Sequence[Statement]) -> list[tuple[Statement, tuple[int, ...]]]:
    """The instructions and labels of ``body``, each with the ``{ }`` blocks it sits in
    (outermost first, the function body as block 0; a block: its open brace's index)."""
    chain = [0]
    out = []
    for k, s in enumerate(body):
        if s.kind == "open":
            chain.append(k + 1)
        elif s.kind == "close":
            chain.pop()
        elif s.kind in ("instruction", "label"):
            out.append((s, tuple(chain)))
    return out


def _uniform_guard(cfg: _Cfg, at, n: int, origins: frozenset[int]) -> bool:
    ins, state = cfg.ins[n], at[n]
    assert ins is not None and ins.guard is not None
    if state is None:
        return False
    v = state.get(ins.guard.lstrip("!"))
    return isinstance(v, (_Fresh, _Uniform)) and v.origins <= origins


def _nested_registers(body: Sequence[Statement]) -> set[str] | None:
    """Register names declared in a nested ``{ }`` scope of the body (one may shadow a
    register of the same name: a proof by names would not hold), ``%r<4>`` expanded; None
    when a declaration cannot be read."""
    top = body[0].depth if body else 0
    out: set[str] = set()
    for s in body:
        if s.kind == "directive" and s.head == ".reg" and s.depth > top:
            toks = [t.text for t in s.tokens]
            for k, t in enumerate(toks):
                if not t.startswith("%"):
                    continue
                if k + 1 < len(toks) and toks[k + 1] == "<":
                    if k + 2 >= len(toks) or not toks[k + 2].isdigit():
                        return None
                    out.update(f"{t}{i}" for i in range(int(toks[k + 2])))
                else:
                    out.add(t)
    return out


# ---------------------------------------------------------------------------------------------
# The values


def _dataflow(cfg: _Cfg, nested: set[str], syncs: dict[int, frozenset[int]]) -> list:
    """For each node, the value of each register before it executes (None: unreachable;
    a register not in the map is undefined there), and under :data:`_FULL` the activemasks
    known to have returned -1."""
    at: list[dict | None] = [None] * len(cfg.stmts)
    if not at:
        return at
    at[0] = {}
    todo = [0]
    while todo:
        n = todo.pop()
        state = at[n]
        assert state is not None
        out = _transfer(cfg.ins[n], n, state, nested, syncs)
        for m in cfg.succ[n]:
            edge = _on_edge(cfg, n, m, out)
            before = at[m]
            joined = edge if before is None else _join(before, edge)
            if joined != before:
                at[m] = joined
                todo.append(m)
    return at


def _on_edge(cfg: _Cfg, n: int, m: int, state: dict) -> dict:
    """The state along edge n -> m: a branch on "activemask == -1" tells which way."""
    ins = cfg.ins[n]
    if cfg.jump[n] is None or ins is None or ins.guard is None:
        return state
    pred = state.get(ins.guard.lstrip("!"))
    if not isinstance(pred, _Uniform) or pred.full_when is None:
        return state
    value = (m == cfg.jump[n]) != ins.guard.startswith("!")   # the predicate on this edge
    if value != pred.full_when:
        return state
    return {**state, _FULL: state.get(_FULL, frozenset()) | pred.origins}


def _transfer(ins: Instruction | None, n: int, state: dict, nested: set[str],
              syncs: dict[int, frozenset[int]]) -> dict:
    if ins is None:
        return state
    written = _written(ins)
    if not written:
        return state
    out = dict(state)
    if ins.opcode == "activemask.b32" and ins.guard is None and written[0] not in nested:
        for r, v in state.items():   # what came from its earlier result is stale
            if isinstance(v, (_Fresh, _Uniform)) and n in v.origins:
                out[r] = _UNKNOWN
        if _FULL in out and n in out[_FULL]:
            del out[_FULL]
        out[written[0]] = _Fresh(frozenset({n}))
        return out
    results = _results(ins, n, state, nested, syncs)
    for i, r in enumerate(written):
        out[r] = results[i] if i < len(results) and r not in nested else _UNKNOWN
    return out


def _results(ins: Instruction, n: int, state: dict, nested: set[str],
             syncs: dict[int, frozenset[int]]) -> list:
    """The values of the registers ``ins`` writes, in order (shorter: the rest unknown)."""
    if ins.guard is not None:
        return []
    if n in syncs:
        k = next((k for p, k in _UNIFORM_RESULTS.items() if ins.opcode.startswith(p)), 0)
        return [_Uniform(syncs[n], n)] * k
    srcs = ins.operands[1:]
    if ins.opcode in _PLAIN_MOV and len(srcs) == 1 and _REG.fullmatch(srcs[0]):
        v = state.get(srcs[0], _UNDEF) if srcs[0] not in nested else _UNKNOWN
        return [v]
    if ins.base not in _PURE:
        return []
    if ins.base == "mov" and len(srcs) == 1 and _IMM.fullmatch(srcs[0]):
        return [_Uniform(frozenset(), n, _int(srcs[0]))]
    origins: frozenset[int] = frozenset()
    fresh = None
    for op in srcs:
        v = state.get(op) if _REG.fullmatch(op) and op not in nested else None
        if isinstance(v, (_Fresh, _Uniform)):
            origins |= v.origins
            fresh = v if isinstance(v, _Fresh) else fresh
        elif not _IMM.fullmatch(op):
            return []
    full_when = None
    m = _SETP_FULL.fullmatch(ins.opcode)
    if m and fresh is not None and len(srcs) == 2 and "|" not in ins.operands[0] and \
            any(op in _FULL_MASK or isinstance(state.get(op), _Uniform) and
                state[op].value == -1 for op in srcs):
        full_when = m.group(1) == "eq"
    return [_Uniform(origins, n, None, full_when)] * 2


def _int(text: str) -> int | None:
    try:
        v = int(text.rstrip("U"), 0)
    except ValueError:
        return None
    return -1 if v == 0xFFFFFFFF else v


def _written(ins: Instruction) -> list[str]:
    """Registers an instruction writes: :func:`splice.ptxtools.ptx.destinations`, and the registers
    in the result list of a ``call``."""
    if ins.base == "call":
        first = ins.operands[0] if ins.operands else ""
        return _REG.findall(first) if first.startswith("(") else []
    return destinations(ins)


def _join(a: dict, b: dict) -> dict:
    out: dict = {}
    for r in (a.keys() | b.keys()) - {_FULL}:
        out[r] = _join_value(a.get(r, _UNDEF), b.get(r, _UNDEF))
    if a.get(_FULL) is not None and a.get(_FULL) == b.get(_FULL):
        out[_FULL] = a[_FULL]
    return out


def _join_value(x, y):
    if x == y:
        return x
    if isinstance(x, _Fresh) and isinstance(y, _Fresh):
        return _Fresh(x.origins | y.origins)
    if isinstance(x, _Uniform) and isinstance(y, _Uniform) and x.node == y.node:
        return dataclasses.replace(x, origins=x.origins | y.origins)
    return _UNKNOWN
