"""What splice proves of a ``splice.asm`` snippet before it pastes it into a ``.func``.

A snippet is pasted between the code that loads its inputs and the code that copies its
outputs out (:meth:`splice.declare.asm_frontend.AsmSpec.ptx`), and that ``.func`` is then inlined
at every element. Two faults would compile and silently store garbage, so
:func:`check_snippet` refuses them:

1. **Control leaving the snippet.** ``ret`` (the inliner turns it into a branch past the
   output copy), ``exit`` (the thread's later stores are lost), a ``bra`` to a label the
   snippet does not define, a ``brx.idx`` whose target list is not the snippet's own
   ``.branchtargets`` of the snippet's labels -- guarded (``@p``, ``@!p``) or not. A
   snippet's labels cannot be reached from outside it: the wrapper around it has no
   branch, PTX labels are local to their function, and the inliner renames them per
   instance. ``call`` returns to the next instruction and is allowed (its callee is
   checked like any callee, for collectives); ``trap`` aborts the launch, loudly.
2. **An output left unwritten on some path.** Every output operand (``$0``...) must be a
   destination on every path from the snippet's start to its end: of an unguarded
   instruction, or of two instructions guarded by ``@p`` and ``@!p`` with no write of
   ``p`` between them. A write under ``@p`` alone, a write only in one arm of a branch, an
   output that is only read (``add.f32 $1, $1, 1.0``) or an empty template are refused.
   Paths that never reach the end (a loop with no exit) need nothing.
3. **Control flow in a cooperative snippet.** A ``scope="block"``/``"warpgroup"`` snippet
   runs once per execution on every thread of its group, between the call's barriers
   (:mod:`splice.forms.block_proof`): with ``straight_line=`` it must be straight-line code -- no
   ``bra``, ``brx``, ``call``, ``ret`` or ``exit`` (guarded or not) and no label, since
   any of them could send the threads of the group different ways around those barriers.

4. **Global memory in a snippet declared ``memory="none"``.** Such a snippet is ordered
   against none of the kernel's loads and stores
   (:class:`splice.tracing.tile_ir.SpliceMarkerPointer`), so one that touched global memory could
   race with them. With ``memory="none"`` every instruction must be one that touches no memory
   (arithmetic, conversion, ``mov``, ``shfl``, ``vote``, ``redux``, ``bar``, ...:
   :data:`_NO_MEMORY`), or a memory access whose opcode names the state space ``.shared``,
   ``.shared::cta``, ``.local`` or ``.param`` (:data:`_SPACED`: ``ld``, ``st``, ``atom``, ``red``,
   ``mbarrier``, ...). Everything else is refused: a generic address (no state space), ``.global``,
   ``.shared::cluster``, ``.const``, asynchronous and bulk copies (``cp.*``), texture and
   surface instructions, ``multimem``, ``tensormap``, fences, ``call`` (its callee is not
   read), and any opcode splice does not know -- an allowlist, so that no form is missed.
   The rule lives in :mod:`splice.analysis.memory_proof`, with the proof of ``memory="arguments"``.

And it keeps the snippet a piece of one function body: only instructions, labels, ``{ }``
scopes and ``.reg``/``.local``/``.param``/``.pragma``/``.branchtargets``/``.calltargets``/
``.callprototype`` declarations; no ``.shared`` variable (a per-element call runs on
every thread at once: use ``scope="block"`` code, or local memory); no ``.reg`` that
redeclares a register of the wrapper (in a ``{ }`` scope it would shadow an operand, and
writes would miss the output). Why, and what is left out: ``docs/design.md#asm-proof``.
"""

from __future__ import annotations

import re
from typing import Iterable

from ..ptxtools.ptx import (
    Instruction,
    PTXSyntaxError,
    Statement,
    destinations,
    parse_instruction,
    split_statements,
)
from .memory_none import MemoryFault, check_no_global_memory

#: Directives a snippet may hold: declarations local to a function body.
_ALLOWED_DIRECTIVES = frozenset({".reg", ".local", ".param", ".pragma", ".branchtargets",
                                 ".calltargets", ".callprototype", ".loc"})


class SnippetFault(Exception):
    """Why a snippet is refused (the caller adds the snippet and the call site)."""


def check_snippet(body: str, outputs: Iterable[str], reserved: Iterable[str], *,
                  straight_line: str | None = None, no_global_memory: bool = False) -> None:
    """Refuse a snippet that control can leave, or that leaves an output unwritten.

    Args:
        body: the snippet with its operands replaced by the wrapper's registers.
        outputs: the registers of the output operands (``%a0``...), in order.
        reserved: every register the wrapper declares.
        straight_line: the scope of a cooperative snippet (``"block"``, ``"warpgroup"``),
            which must also be straight-line code (rule 3); None for an element snippet.
        no_global_memory: whether the snippet must touch no global memory (rule 4: it is
            declared ``memory="none"``).

    Raises:
        SnippetFault: the first rule of the module docstring that the snippet breaks.
    """
    try:
        stmts = split_statements(body)
    except PTXSyntaxError as e:
        raise SnippetFault(f"it is not a sequence of PTX statements ({e.message}); braces "
                           f"must balance and every statement end with ';'") from None
    code = _code(body, stmts, set(reserved), straight_line)
    if straight_line is not None:
        _check_straight_line(code, straight_line)
    if no_global_memory:
        for _, ins in code:
            if isinstance(ins, Instruction):
                _check_no_global_memory(ins)
    labels = {s.tokens[0].text for s in stmts if s.kind == "label"}
    targets = _branch_target_lists(body, stmts)
    for _, ins in code:
        if isinstance(ins, Instruction):
            _check_transfer(ins, labels, targets)
    missing = _unwritten(code, list(outputs), targets)
    if missing:
        raise SnippetFault(
            f"output operand(s) {', '.join(missing)} are not written on every path through "
            f"the snippet: each output must be the destination of an unguarded instruction "
            f"(or of a pair guarded by @p and @!p) on every path to its end")


def _code(body: str, stmts: list[Statement], reserved: set[str], straight_line: str | None):
    """``(statement, Instruction | label name | None)`` for the statements that matter to
    control flow, after refusing what a snippet may not hold (``straight_line``: a
    cooperative snippet's scope, None for an element snippet)."""
    out: list[tuple[Statement, Instruction | str | None]] = []
    for s in stmts:
        if s.kind == "instruction":
            out.append((s, parse_instruction(s, body)))
        elif s.kind == "label":
            out.append((s, s.tokens[0].text))
        elif s.kind == "directive":
            _check_directive(s, body, reserved, straight_line)
        elif s.kind not in ("open", "close"):
            raise SnippetFault(f"{s.text(body).strip()[:60]!r} is not an instruction: a "
                               f"snippet is pasted into a function body (instructions, "
                               f"labels, {{ }} scopes, .reg/.local declarations)")
    return out


def _check_directive(s: Statement, body: str, reserved: set[str],
                     straight_line: str | None) -> None:
    heads = [t.text for t in s.tokens if t.kind == "directive"]
    if ".shared" in heads and straight_line is not None:
        raise SnippetFault(f"it declares a .shared variable, which splice.asm does not "
                           f"support in a {straight_line}-scope snippet: use CUDA C with "
                           f"scope=\"{straight_line}\" (its __shared__ variables, which splice "
                           f"counts in the block's shared memory), or .local scratch")
    if ".shared" in heads:
        raise SnippetFault("it declares a .shared variable: a per-element snippet runs on "
                           "every thread of the block at once, which would share it; use "
                           ".local scratch, or CUDA C with scope=\"block\"")
    if s.head not in _ALLOWED_DIRECTIVES:
        raise SnippetFault(f"the directive {s.head} does not belong in a function body "
                           f"(a snippet may declare .reg, .local, .param and .branchtargets)")
    if s.head == ".reg":
        for name in _declared_registers(s.text(body)):
            if name in reserved:
                raise SnippetFault(f"it declares {name}, a register splice uses for an "
                                   f"operand; name scratch registers otherwise")


def _declared_registers(text: str) -> list[str]:
    """The registers a ``.reg`` declaration declares (``%r<4>``: ``%r0``..``%r3``)."""
    out: list[str] = []
    for m in re.finditer(r"(%[A-Za-z_$][A-Za-z0-9_$]*)(?:<(\d+)>)?", text):
        name, count = m.group(1), m.group(2)
        out += [name] if count is None else [f"{name}{i}" for i in range(int(count))]
    return out


def _branch_target_lists(body: str, stmts: list[Statement]) -> dict[str, list[str]]:
    """``{list label: [target labels]}`` of the snippet's ``L: .branchtargets A, B;``."""
    out: dict[str, list[str]] = {}
    for prev, s in zip(stmts, stmts[1:]):
        if prev.kind == "label" and s.kind == "directive" and s.head == ".branchtargets":
            out[prev.tokens[0].text] = [t.text for t in s.tokens[1:] if t.kind == "ident"]
    return out


def _guard_text(ins: Instruction) -> str:
    return f"@{ins.guard} " if ins.guard else ""


def _check_transfer(ins: Instruction, labels: set[str], targets: dict[str, list[str]]):
    """Refuse an instruction that sends control out of the snippet."""
    where = f"'{_guard_text(ins)}{ins.opcode}'"
    if ins.base in ("ret", "exit"):
        why = ("the inliner turns it into a branch past the code that copies the outputs "
               "out" if ins.base == "ret" else "the thread would skip the kernel's later "
               "stores")
        raise SnippetFault(f"{where} leaves the snippet ({why}); end the snippet by "
                           f"falling through its last instruction (branch to a label at "
                           f"its end)")
    if ins.base == "bra":
        target = ins.operands[-1] if ins.operands else ""
        if target not in labels:
            raise SnippetFault(f"{where} {target} branches to a label the snippet does not "
                               f"define; a snippet may only branch to its own labels")
    if ins.base == "brx":
        lst = ins.operands[-1] if ins.operands else ""
        bad = [t for t in targets.get(lst, [""]) if t not in labels] if lst in targets \
            else [lst]
        if bad:
            raise SnippetFault(f"{where} may branch outside the snippet (target list {lst}: "
                               f"{', '.join(bad)} is not a label of the snippet); its list "
                               f"must be a .branchtargets of the snippet's own labels")


#: The instructions that make a snippet other than straight-line code.
_CONTROL = frozenset({"bra", "brx", "call", "ret", "exit"})


def _check_straight_line(code, straight_line: str) -> None:
    """Refuse a label or a control transfer (``code`` as :func:`_code` returns) in a
    ``straight_line``-scope snippet."""
    for _, item in code:
        what = "a label" if isinstance(item, str) else \
            f"'{item.base}'" if isinstance(item, Instruction) and item.base in _CONTROL \
            else None
        if what is not None:
            raise SnippetFault(f"a {straight_line}-scope snippet must be straight-line PTX, "
                               f"and this one has {what}: move the control flow into the "
                               f"kernel (an if on a scalar) or into a CUDA C extern")


def _complement(guard: str) -> str:
    return guard[1:] if guard.startswith("!") else "!" + guard


#: A register name in an operand, with or without ``%`` (``p``, ``%p1``), not a part of an
#: immediate (``0f3F800000``) or of a dotted name.
_NAME_RE = re.compile(r"(?<![\w$.%])%?[A-Za-z_$][\w$]*")


def _written(ins: Instruction) -> list[str]:
    """Registers ``ins`` writes (``ptx.destinations``' rule, for names with or without
    ``%``), with the return value of a ``call (ret), f, (args)``."""
    ops = ins.operands
    if ins.base == "call":
        if len(ops) >= 2 and ops[0].startswith("(") and not ops[1].startswith("("):
            return _NAME_RE.findall(ops[0])
        return []
    if not ops or ops[0].startswith("["):
        return []
    probe = Instruction(None, ins.opcode, ("%x",) + ops[1:])
    return _NAME_RE.findall(ops[0]) if destinations(probe) else []


def _transfer(state: frozenset, ins: Instruction) -> frozenset:
    """The facts after ``ins``: ``("def", r)`` r is written; ``("if", r, g)`` r is written
    under guard g (``%p`` or ``!%p``) since g's predicate was last written."""
    dests = _written(ins)
    facts = set(state)
    for d in dests:
        if ins.guard is None or ("if", d, _complement(ins.guard)) in facts:
            facts.add(("def", d))
        else:
            facts.add(("if", d, ins.guard))
    return frozenset(f for f in facts if f[0] == "def" or f[2].lstrip("!") not in dests)


def _unwritten(code, outputs: list[str], targets: dict[str, list[str]]) -> list[str]:
    """The outputs not written on some path from the snippet's start to its end (a forward
    must-analysis over the snippet's statements; ``code`` as :func:`_code` returns)."""
    n = len(code)
    at_label = {item: k for k, (_, item) in enumerate(code) if isinstance(item, str)}
    state_in: dict[int, frozenset] = {0: frozenset()}
    work = [0]
    while work:
        k = work.pop()
        if k == n:
            continue
        state = state_in[k]
        item = code[k][1]
        succ = [k + 1]
        if isinstance(item, Instruction):
            state = _transfer(state, item)
            if item.base in ("bra", "brx"):
                dests = [item.operands[-1]] if item.base == "bra" else \
                    targets[item.operands[-1]]
                succ = [at_label[t] for t in dests] + ([k + 1] if item.guard else [])
        for j in succ:
            old = state_in.get(j)
            new = state if old is None else old & state
            if new != old:
                state_in[j] = new
                work.append(j)
    if n not in state_in:      # the end is unreachable: nothing is copied out
        return []
    return [f"${i}" for i, r in enumerate(outputs) if ("def", r) not in state_in[n]]


def _check_no_global_memory(ins: Instruction) -> None:
    """Rule 4, :func:`splice.analysis.memory_none.check_no_global_memory` (one analysis module holds
    both ``memory=`` rules)."""
    try:
        check_no_global_memory(ins)
    except MemoryFault as e:
        raise SnippetFault(str(e)) from None
