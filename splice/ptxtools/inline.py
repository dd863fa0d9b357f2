"""Inlining a callee's PTX body at a call site.

ptxas does not inline ``.func``\\ s (``docs/design.md#no-inline``: SASS keeps
``CALL.REL.NOINC`` and the ABI moves), so a call in a tight loop costs. When it is safe,
splice pastes the callee's body into the call site instead:

- the body goes in its own ``{ }`` scope, so its ``.reg`` declarations shadow nothing of the
  kernel's (splice's own registers use the reserved ``%__splice`` prefix);
- each ``ld.param`` of a parameter becomes a ``mov``/``cvt`` from the argument register;
- each ``st.param`` to the return value becomes a ``mov``/``cvt`` into the result register;
- ``ret`` becomes a branch to the end of the inlined body;
- labels get a per-instance suffix (labels are function-scoped in PTX).

:func:`why_not_inlinable` says when this is not safe, and the call stays a real ``call``:
a local stack frame (``.local``, ``%SP``), ``.shared`` declarations, recursion, indirect
calls, parameters used other than by one whole ``ld.param``, vector parameter accesses.
Calls the callee makes to other functions stay calls.
"""

from __future__ import annotations

import collections
import re
from typing import Mapping

from ..system import forksafe
from .ptx import Function, Instruction, Module, Statement, parse_instruction

_TYPE_RE = re.compile(r"^([bsuf])(\d+)$")


def _reg_types(mod: Module, body: list[Statement]) -> dict[str, int]:
    """Register name -> bit width, from the body's ``.reg`` declarations (``%r<5>`` ranges
    and single names)."""
    out: dict[str, int] = {}
    for s in body:
        if s.kind != "directive" or s.head != ".reg":
            continue
        toks = [t.text for t in s.tokens]
        ty = next((t for t in toks[1:] if re.fullmatch(r"\.(b|s|u|f)\d+|\.pred", t)), None)
        if ty is None:
            continue
        bits = 1 if ty == ".pred" else int(ty[2:])
        i = toks.index(ty) + 1
        while i < len(toks):
            name = toks[i]
            if name.startswith("%"):
                if i + 3 < len(toks) and toks[i + 1] == "<":
                    for k in range(int(toks[i + 2])):
                        out[f"{name}{k}"] = bits
                    i += 4
                    continue
                out[name] = bits
            i += 1
    return out


def _param_ref(op: str, names) -> str | None:
    m = re.fullmatch(r"\[\s*([A-Za-z_$][\w$]*)\s*(?:\+\s*0\s*)?\]", op)
    if m and m.group(1) in names:
        return m.group(1)
    return None


def why_not_inlinable(mod: Module, fn: Function,
                      functions: Mapping[str, tuple[Module, Function]]) -> str | None:
    """None when ``fn`` can be inlined at a call site, else the reason it cannot."""
    if not fn.is_definition:
        return "it is only declared here"
    body = mod.body_statements(fn)
    reason = _signature_refusal(fn)
    if reason is not None:
        return reason
    widths = _reg_types(mod, body)
    for s in body:
        reason = _statement_refusal(mod, fn, s, functions, widths)
        if reason is not None:
            return reason
    return None


def _signature_refusal(fn: Function) -> str | None:
    """Why ``fn``'s parameters and result cannot be moved in registers (an aggregate or an
    array), or None."""
    for p in (*fn.params, *fn.results):
        if p.space != ".param" or p.size_bytes not in (1, 2, 4, 8):
            return f"parameter '{p.name}' is an aggregate ({p.declare(p.name)})"
    if any(p.array is not None and p.array != p.size_bytes and p.type != ".b8"
           for p in (*fn.params, *fn.results)):
        return "array parameters"
    return None


def _statement_refusal(mod: Module, fn: Function, s: Statement,
                       functions: Mapping[str, tuple[Module, Function]],
                       widths: dict[str, int]) -> str | None:
    """Why the statement ``s`` of ``fn``'s body keeps ``fn`` from being inlined, or None.
    ``widths``: the body's register widths (:func:`_reg_types`)."""
    text = s.text(mod.text)
    if any(t.text.startswith(("%__splice", "$__splice")) or
           re.fullmatch(r"__splice_(?:p\d+|r)", t.text) for t in s.tokens):
        return "it uses a name splice reserves for its own registers and labels"
    if s.kind == "directive" and s.head in (".local", ".shared"):
        return f"it declares {s.head} memory (a stack frame or shared buffer)"
    if "%SP" in text:
        return "it uses a local stack frame (%SP)"
    if s.kind != "instruction":
        return None
    ins = parse_instruction(s, mod.text)
    if ins.base in ("alloca", "stacksave", "stackrestore"):
        return f"it allocates stack memory ({ins.base})"
    if ins.base == "call":
        return _call_refusal(ins, fn, functions)
    return _parameter_use_refusal(fn, ins, text, widths)


def _call_refusal(ins: Instruction, fn: Function,
                  functions: Mapping[str, tuple[Module, Function]]) -> str | None:
    """Why the call ``ins`` in ``fn`` keeps ``fn`` from being inlined (indirect, or
    reaching ``fn`` again), or None."""
    target = ins.call_target
    if target is None or target.startswith("%"):
        return "it makes an indirect call"
    if _reaches(target, fn.name, functions, set()):
        return "it is recursive"
    return None


def _parameter_use_refusal(fn: Function, ins: Instruction, text: str,
                           widths: dict[str, int]) -> str | None:
    """Why the instruction ``ins`` (PTX ``text``) uses a parameter or the result other than
    as one whole ``ld.param`` / ``st.param`` that :func:`inline_body` rewrites, or None."""
    params = {p.name for p in fn.params}
    results = {p.name for p in fn.results}
    if not any(re.search(r"[\w$]+", op) and any(
            re.search(rf"(?<![\w$%.]){re.escape(n)}(?![\w$])", op) for n in params | results)
            for op in ins.operands):
        return None
    if ins.base == "ld" and "param" in ins.modifiers and len(ins.operands) == 2 and \
            _param_ref(ins.operands[1], params) and not ins.operands[0].startswith("{"):
        return None
    if ins.base == "st" and "param" in ins.modifiers and len(ins.operands) == 2 and \
            _param_ref(ins.operands[0], results) and not ins.operands[1].startswith("{"):
        return _result_store_refusal(fn, ins, text, widths)
    return f"a parameter is used by '{' '.join(text.split())}'"


def _result_store_refusal(fn: Function, ins: Instruction, text: str,
                          widths: dict[str, int]) -> str | None:
    """Why the ``st.param`` of the return value ``ins`` cannot become a ``mov``/``cvt``
    into the result register (its source register's width fits neither the stored type nor
    the result), or None."""
    _, tbits = _type_bits(ins)
    sbits = widths.get(ins.operands[1])
    rbits = fn.results[0].size_bytes * 8
    if sbits is not None and not (sbits == tbits == rbits or
                                  (tbits == rbits and sbits > tbits) or
                                  (sbits == tbits < rbits)):
        return (f"the return value is stored from a {sbits}-bit register with "
                f"'{' '.join(text.split())}'")
    return None


def _reaches(start: str, goal: str, functions, seen: set) -> bool:
    if start == goal:
        return True
    if start in seen or start not in functions:
        return False
    seen.add(start)
    mod, fn = functions[start]
    for s in mod.body_statements(fn):
        if s.kind == "instruction":
            ins = parse_instruction(s, mod.text)
            if ins.base == "call":
                t = ins.call_target
                if t and _reaches(t, goal, functions, seen):
                    return True
    return False


def _type_bits(ins: Instruction) -> tuple[str, int]:
    for m in reversed(ins.modifiers):
        mm = _TYPE_RE.match(m)
        if mm:
            return mm.group(1), int(mm.group(2))
    raise ValueError(f"no type in {ins.opcode}")


def _rename_labels(text: str, labels, suffix: str) -> str:
    for lab in sorted(labels, key=len, reverse=True):
        text = re.sub(rf"(?<![\w$%.]){re.escape(lab)}(?![\w$])", f"{lab}_{suffix}", text)
    return "\t" + text


def inline_body(mod: Module, fn: Function, args: list[tuple[str, int]],
                result: tuple[str, int] | None, suffix: str) -> list[str]:
    """The callee's body as PTX lines for one call site.

    Args:
        args: per parameter, the register holding the argument and its width in bits.
        result: the register to receive the return value and its width, or None.
        suffix: unique per call-site instance; appended to labels.
    """
    body, parsed, widths, labels = _analysed(mod, fn)
    text = mod.text
    pidx = {p.name: i for i, p in enumerate(fn.params)}
    results = {p.name for p in fn.results}
    end = f"$__splice_ret_{suffix}"
    last_instr = next((s for s in reversed(body) if s.kind == "instruction"), None)
    edits = []
    for s, ins in zip(body, parsed):
        if s.kind == "label":
            edits.append((s, f"{s.tokens[0].text}_{suffix}:"))
            continue
        if ins is None:
            if s.kind == "directive" and _names_a_label(s, labels):
                edits.append((s, _rename_labels(text[s.start:s.end], labels, suffix)))
            continue
        g = ""
        if ins.guard:
            g = f"@{ins.guard} "
        if ins.base == "ret":
            edits.append((s, "" if (s is last_instr and not ins.guard)
                          else f"\t{g}bra \t{end};"))
            continue
        name = _param_ref(ins.operands[1], pidx) if (
            ins.base == "ld" and "param" in ins.modifiers and len(ins.operands) == 2) else None
        if name is not None:
            edits.append((s, _argument_move(ins, g, args[pidx[name]], widths)))
            continue
        if ins.base == "st" and "param" in ins.modifiers and len(ins.operands) == 2 and \
                _param_ref(ins.operands[0], results):
            assert result is not None
            edits.append((s, _result_move(ins, g, result, widths)))
            continue
        if _names_a_label(s, labels):
            edits.append((s, _rename_labels(text[s.start:s.end], labels, suffix)))
    return _scoped_lines(fn.name, body, text, {id(s): new for s, new in edits}, end)


#: The last callees :func:`_analysed` saw: id(fn) -> (fn, analysis). The entry holds ``fn``,
#: so its id cannot be reused while the entry exists; a hit checks it is the same object.
_ANALYSED: collections.OrderedDict[int, tuple] = collections.OrderedDict()
_ANALYSED_LOCK = forksafe.lock(globals(), "_ANALYSED_LOCK")


def _analysed(mod: Module, fn: Function):
    """``fn``'s body statements, each parsed (None: not an instruction), its register
    widths and labels: the same for every instance of a call site (a TMA matmul's epilogue
    has 128), so computed once per callee."""
    with _ANALYSED_LOCK:
        hit = _ANALYSED.get(id(fn))
        if hit is not None and hit[0] is fn and hit[1] is mod:
            _ANALYSED.move_to_end(id(fn))
            return hit[2]
    analysed = mod.body(fn)
    body = list(analysed.statements)
    parsed = [ins for _s, ins in analysed.parsed]
    out = (body, parsed, _reg_types(mod, body), set(analysed.labels))
    with _ANALYSED_LOCK:
        _ANALYSED[id(fn)] = (fn, mod, out)
        if len(_ANALYSED) > 64:
            _ANALYSED.popitem(last=False)
    return out


def _names_a_label(s: Statement, labels) -> bool:
    return bool(labels) and any(t.kind == "ident" and t.text in labels for t in s.tokens)


def _argument_move(ins: Instruction, g: str, arg: tuple[str, int],
                   widths: dict[str, int]) -> str:
    """The ``ld.param`` ``ins`` (guard prefix ``g``) of a parameter, as a move from the
    argument register ``arg`` (name, bits)."""
    reg, abits = arg
    kind, tbits = _type_bits(ins)
    dst = ins.operands[0]
    dbits = widths.get(dst, tbits)
    if tbits == abits == dbits:
        return f"\t{g}mov.b{tbits} \t{dst}, {reg};"
    sign = "s" if kind == "s" else "u"
    return f"\t{g}cvt.{sign}{dbits}.{sign}{tbits} \t{dst}, {reg};"


def _result_move(ins: Instruction, g: str, result: tuple[str, int],
                 widths: dict[str, int]) -> str:
    """The ``st.param`` ``ins`` (guard prefix ``g``) of the return value, as a move into the
    result register ``result`` (name, bits)."""
    reg, rbits = result
    _, tbits = _type_bits(ins)
    src = ins.operands[1]
    sbits = widths.get(src, tbits)  # an immediate takes the instruction's type
    if sbits == tbits == rbits:
        return f"\t{g}mov.b{rbits} \t{reg}, {src};"
    if tbits == rbits:  # a wider source register: st.param keeps its low bits
        return f"\t{g}cvt.u{tbits}.u{sbits} \t{reg}, {src};"
    return f"\t{g}cvt.u{rbits}.u{tbits} \t{reg}, {src};"


def _scoped_lines(name: str, body: list[Statement], text: str, replaced: dict[int, str],
                  end: str) -> list[str]:
    """The body's lines in a ``{ }`` scope, statements in ``replaced`` (by id) replaced (an
    empty replacement dropped), then the label ``end`` if a line branches to it."""
    lines = ["\t{ // splice: inlined body of " + name]
    for s in body:
        line = replaced.get(id(s), "\t" + text[s.start:s.end])
        if line:
            lines.append(line)
    lines.append("\t}")
    if any(line.endswith(f"{end};") for line in lines):
        lines.append(f"{end}:")
    return lines
