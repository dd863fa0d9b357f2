"""The part of a PTX module that some functions need: :func:`cut` keeps the functions and
module-level variables reachable from ``roots`` (called, or named as an operand: a function
pointer, a variable's address) and drops the other functions and variables. Everything
else at module level (``.version``, ``.target``, ``.file``, a block splice does not look
into) is kept as it is.

NVRTC with ``-rdc=true`` emits every ``.weak`` static data member and inline function of
the headers a source includes (CCCL's ``numeric_limits`` and ``integral_constant`` members:
some 770 lines before any code of the user's): :mod:`splice.cub` cuts them off its
fragments, and cuts each size of a program holding several (:mod:`splice.inputs.fragments`)
out for its own cache entry.
"""

from __future__ import annotations

import re
from typing import Sequence

from .ptx import VARIABLE_HEADS, Module, apply_edits, declared_variable_name


def cut(mod: Module, roots: Sequence[str]) -> str:
    """``mod``'s text with only what ``roots`` reach.

    Args:
        mod: a parsed PTX module.
        roots: names of functions (or variables) to keep, with everything they reach.

    Returns:
        PTX text: the module minus the functions and module-level variables no root
        reaches (their definitions and declarations).

    Raises:
        KeyError: a root the module does not define or declare.

    Example:
        >>> ptx = '''.version 8.0
        ... .target sm_90
        ... .address_size 64
        ... .weak .global .align 4 .u32 unused = 1;
        ... .global .align 4 .u32 used;
        ... .func g() { ret; }
        ... .func h() { ret; }
        ... .visible .func f() { call g, (); st.global.u32 [used], 1; ret; }
        ... '''
        >>> out = cut(Module(ptx), ["f"])
        >>> "unused" in out, ".func h" in out, ".func g" in out, "used;" in out
        (False, False, True, True)
    """
    spans = _symbol_spans(mod)
    missing = [r for r in roots if r not in spans]
    if missing:
        raise KeyError(f"{mod.name}: no function or variable named {', '.join(missing)}")
    kept: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept.add(name)
        for a, b in spans[name]:
            for s in mod.statements[a:b + 1]:
                todo.extend(t.text for t in s.tokens
                            if t.kind == "ident" and t.text in spans and t.text not in kept)
    edits = [(mod.statements[a].start, _line_end(mod.text, mod.statements[b].end), "")
             for name, ranges in spans.items() if name not in kept for a, b in ranges]
    text = apply_edits(mod.text, sorted(edits))
    # NVRTC's "// .globl name" comment (after a blank line) before each visible function
    return _GLOBL.sub(lambda m: "" if m.group(1) in spans and m.group(1) not in kept
                      else m.group(0), text)


_GLOBL = re.compile(r"^(?:[ \t]*\n)?[ \t]*// \.globl[ \t]+([\w$.]+)[ \t]*\n", re.M)


def _line_end(text: str, end: int) -> int:
    """``end``, past the rest of its line when only blanks follow it there."""
    nl = text.find("\n", end)
    return nl + 1 if nl >= 0 and not text[end:nl].strip() else end


def _symbol_spans(mod: Module) -> dict[str, list[tuple[int, int]]]:
    """Per module-level function or variable: the statement ranges ``[first, last]`` that
    declare or define it (a prototype, a definition with its body, a variable's
    directive)."""
    spans: dict[str, list[tuple[int, int]]] = {}
    by_header = {id(fn.header): fn for fn in mod.function_order}
    stmts = mod.statements
    i = 0
    while i < len(stmts):
        s = stmts[i]
        if s.depth == 0:
            fn = by_header.get(id(s))
            if fn is not None:
                last = fn.body[1] if fn.body is not None and s.kind == "header" else i
                spans.setdefault(fn.name, []).append((i, last))
                i = last + 1
                continue
            if s.kind == "directive" and s.head in VARIABLE_HEADS:
                name = declared_variable_name(s)
                if name:
                    spans.setdefault(name, []).append((i, i))
        i += 1
    return spans
