"""Delta debugging on the generated AST: a failing snippet made as small as it still fails.

The failing element's input values are made explicit first (:func:`~.harness.with_values`:
the case then fails alone, on every element, whatever the seed). Then, round after round,
every one-step reduction of the snippet is drawn (:func:`reductions`: a statement removed, a
branch or loop replaced by its body, a result dropped, an expression replaced by one of its
operands, by 0 or 1 or by a parameter, an unused input dropped, ``-fmad=false`` or
``pure=False`` dropped, an input value set to 0 or 1), the candidates are run together as one
batch, smallest first, and the smallest that still fails the same way is kept; it ends when
none does. Every candidate is well typed and well defined by construction (the AST renders
each replaced operation safely), so a candidate fails only by the bug.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from .harness import Finding, element_inputs, inputs, layout, with_values
from .program import (
    ArrayDecl,
    Assign,
    Decl,
    Expr,
    For,
    If,
    Jump,
    Lit,
    Load,
    Return,
    Snippet,
    Store,
    Var,
    cast,
    param_var,
)
from .runner import Stats, run_cases

#: Candidates run per batch.
CHUNK = 48


def minimise(snippet: Snippet, finding: Finding, seed: int, log=print,
             stats: Stats | None = None) -> tuple[Snippet, Finding]:
    """The smallest reduction of ``snippet`` found that fails as ``finding`` says, and its
    finding. The inputs: the failing element's values if the case fails with them alone,
    else the batch's values of every element (a failure that needs the other elements)."""
    start = _alone(snippet, finding, seed, stats)
    if start is None:
        log("  (the case alone does not fail: not minimised)")
        return snippet, finding
    snippet, finding = start
    rounds = 0
    while True:
        rounds += 1
        found = _smaller(snippet, finding, seed, stats)
        if found is None:
            break
        snippet, finding = found
    log(f"  minimised in {rounds} rounds: {size(snippet)} characters")
    if any(i.values is None for i in snippet.inputs):   # explicit, for a regression test
        whole = explicit(snippet, None, seed)
        again = run_cases([whole.case()], seed, stats=stats)
        if _same(again, finding):
            return whole, again[0]
        log("  (fails with the batch's input pools only: the test keeps values=None)")
    return snippet, finding


def _alone(snippet: Snippet, finding: Finding, seed: int, stats):
    """(the snippet as it fails alone, its finding), or None."""
    for s in (explicit(snippet, finding.element or 0, seed), snippet):
        found = run_cases([s.case()], seed, stats=stats)
        if _same(found, finding):
            return s, found[0]
    return None


def explicit(snippet: Snippet, element: int | None, seed: int) -> Snippet:
    """``snippet`` with explicit input values, those its pool inputs have with ``seed``:
    element ``element``'s (every element's: None)."""
    lay = layout([snippet.case()])
    data = inputs(lay, seed)
    if element is not None:
        values = element_inputs(lay, 0, data, element)
    else:
        values = {i.name: (i.values[0] if key is None else
                           tuple(v.item() for v in data[key]) if i.kind in ("tile", "array")
                           else data[key][0].item())
                  for i, key in zip(snippet.inputs, lay.sources[0])}
    return snippet.replace(inputs=with_values(snippet.case(), values).inputs)


def _same(found: list[Finding], finding: Finding) -> bool:
    return bool(found) and found[0].kind == finding.kind and (
        finding.kind == "mismatch" or _head(found[0].detail) == _head(finding.detail))


def _head(detail: str) -> str:
    """An error's class and its first words (no file names or lines)."""
    return " ".join(detail.split(":")[0].split()[:3])


def _smaller(snippet: Snippet, finding: Finding, seed: int, stats):
    cands = sorted({c.case(): c for c in reductions(snippet)
                    if size(c) < size(snippet) or _simpler(c, snippet)}.values(), key=size)
    for start in range(0, len(cands), CHUNK):
        chunk = cands[start:start + CHUNK]
        found = run_cases([c.case() for c in chunk], seed, stats=stats)
        for c in chunk:     # smallest first
            hit = next((f for f in found if f.case == c.case() and _same([f], finding)), None)
            if hit is not None:
                return c, hit
    return None


def size(s: Snippet) -> int:
    return len(s.code()) + 8 * len(s.inputs) + 4 * len(s.results) + 4 * (not s.contracts) + \
        4 * (not s.pure) + 4 * (s.placement != "straight")


def _simpler(c: Snippet, s: Snippet) -> bool:
    """Same size, but input values nearer 0."""
    return size(c) == size(s) and _weight(c) < _weight(s)


def _weight(s: Snippet) -> float:
    return sum(abs(float(v)) if v == v else 1e300 for i in s.inputs for v in i.values or ())


# ------------------------------------------------------------------------------ reductions

def reductions(s: Snippet) -> Iterator[Snippet]:
    """Every one-step reduction of ``s``."""
    if not s.contracts:
        yield s.replace(contracts=True)
    if not s.pure:
        yield s.replace(pure=True)
    if s.placement != "straight":
        yield s.replace(placement="straight")
    if len(s.results) > 1:
        for k in range(len(s.results)):
            yield from _drop_result(s, k)
    yield from _inputs(s)
    if s.is_expression:
        for k, e in enumerate(s.body):
            for v in expr_variants(e, _params(s)):
                yield s.replace(body=s.body[:k] + (v,) + s.body[k + 1:])
        return
    ret = s.body[-1]
    if isinstance(ret, Return) and not (_names(ret.values) - {v.name for v in _params(s)}):
        yield s.replace(body=ret.values)
    for b in stmt_variants(s.body, _params(s), top=True):
        yield s.replace(body=b)


def _params(s: Snippet) -> list[Var]:
    return [param_var(i) for i in s.inputs if i.kind != "array"]


def _drop_result(s: Snippet, k: int) -> Iterator[Snippet]:
    results = s.results[:k] + s.results[k + 1:]

    def drop(stmts):
        out = []
        for st in stmts:
            if isinstance(st, Return):
                st = Return(st.values[:k] + st.values[k + 1:])
            elif isinstance(st, If):
                st = If(st.cond, drop(st.then), drop(st.orelse))
            elif isinstance(st, For):
                st = For(st.var, st.count, drop(st.body))
            out.append(st)
        return tuple(out)
    if s.is_expression:
        yield s.replace(results=results, body=s.body[:k] + s.body[k + 1:])
    else:
        yield s.replace(results=results, body=drop(s.body))


def _inputs(s: Snippet) -> Iterator[Snippet]:
    used = _names(s.body)
    tiles = [i for i in s.inputs if i.kind == "tile"]
    for k, inp in enumerate(s.inputs):
        rest = s.inputs[:k] + s.inputs[k + 1:]
        if inp.name not in used and (inp.kind != "tile" or len(tiles) > 1):
            yield s.replace(inputs=rest)
        for v in _simpler_values(inp):
            yield s.replace(inputs=s.inputs[:k] + (v,) + s.inputs[k + 1:])


def _simpler_values(inp) -> Iterator:
    if inp.values is None:
        return
    for k, v in enumerate(inp.values):
        for w in (0, 1):
            w = type(v)(w)
            if abs(float(w)) < abs(float(v)) or v != v:
                vals = inp.values[:k] + (w,) + inp.values[k + 1:]
                yield dataclasses.replace(inp, values=vals)


def _names(nodes) -> set[str]:
    """The names of the variables and arrays ``nodes`` (statements or expressions) use."""
    out: set[str] = set()
    for n in _walk(nodes):
        if isinstance(n, Var):
            out.add(n.name)
        elif isinstance(n, Load):
            out.add(n.array)
        elif isinstance(n, Assign):
            out.add(n.var.name)
        elif isinstance(n, Store):
            out.add(n.name)
    return out


def _walk(nodes):
    for n in nodes:
        yield n
        if isinstance(n, Expr):
            yield from _walk(n.children())
        elif isinstance(n, Decl):
            yield from _walk((n.init,))
        elif isinstance(n, Assign):
            yield from _walk((n.value,))
        elif isinstance(n, ArrayDecl):
            yield from _walk(n.inits)
        elif isinstance(n, Store):
            yield from _walk((n.index, n.value))
        elif isinstance(n, Return):
            yield from _walk(n.values)
        elif isinstance(n, If):
            yield from _walk((n.cond, *n.then, *n.orelse))
        elif isinstance(n, For):
            yield from _walk(n.body)


def _zero(t) -> Lit:
    return Lit(t, 0.0 if t.is_float else (False if t.kind == "b" else 0))


def expr_variants(e: Expr, params: list[Var]) -> Iterator[Expr]:
    """``e`` with one node replaced: by an operand or an operand's operand, 0, 1 or a
    parameter (each converted to the node's type)."""
    for c in e.children():
        yield cast(e.ty, c)
        for g in c.children():      # past a conversion: (short)(int)x -> (short)x
            yield cast(e.ty, g)
    if not isinstance(e, (Lit, Var)):
        yield _zero(e.ty)
        yield Lit(e.ty, 1.0 if e.ty.is_float else (True if e.ty.kind == "b" else 1))
        for p in params:
            yield cast(e.ty, p)
    elif isinstance(e, Lit) and e.value != 0:
        yield _zero(e.ty)
    kids = e.children()
    for k, c in enumerate(kids):
        for v in expr_variants(c, params):
            yield e.rebuild(kids[:k] + (v,) + kids[k + 1:])


def _free_jump(stmts) -> bool:
    """A ``break``/``continue`` of ``stmts`` not inside a loop of its own."""
    for s in stmts:
        if isinstance(s, Jump):
            return True
        if isinstance(s, If) and _free_jump(s.then + s.orelse):
            return True
    return False


def substitute(stmts, name: str, value: Expr) -> tuple:
    """``stmts`` with variable ``name`` replaced by ``value`` and assignments to it dropped."""
    def ex(e: Expr) -> Expr:
        if isinstance(e, Var) and e.name == name:
            return cast(e.ty, value)
        kids = e.children()
        return e.rebuild(tuple(ex(k) for k in kids)) if kids else e
    out: list = []
    for s in stmts:
        if isinstance(s, Decl):
            out.append(Decl(s.var, ex(s.init)))
        elif isinstance(s, Assign):
            if s.var.name != name:
                out.append(Assign(s.var, ex(s.value)))
        elif isinstance(s, Return):
            out.append(Return(tuple(ex(v) for v in s.values)))
        elif isinstance(s, ArrayDecl):
            out.append(ArrayDecl(s.name, s.ty, tuple(ex(v) for v in s.inits)))
        elif isinstance(s, Store):
            out.append(Store(s.name, s.size, ex(s.index), ex(s.value)))
        elif isinstance(s, If):
            out.append(If(ex(s.cond), substitute(s.then, name, value),
                          substitute(s.orelse, name, value)))
        elif isinstance(s, For):
            out.append(For(s.var, s.count, substitute(s.body, name, value)))
        else:
            out.append(s)
    return tuple(out)


def stmt_variants(stmts: tuple, params: list[Var], top: bool = False) -> Iterator[tuple]:
    """``stmts`` with one statement removed, unwrapped or reduced (the final ``return`` of
    a whole body stays last)."""
    last = len(stmts) - 1 if top else len(stmts)
    for k, s in enumerate(stmts):
        before, after = stmts[:k], stmts[k + 1:]
        if k < last:
            if isinstance(s, Decl):
                yield before + substitute(after, s.var.name, _zero(s.var.ty))
            elif isinstance(s, ArrayDecl):
                if s.name not in _names(after):
                    yield before + after
            elif not (isinstance(s, Return) and top):
                yield before + after
        if isinstance(s, If):
            yield before + s.then + after
            if s.orelse:
                yield before + s.orelse + after
                yield before + (If(s.cond, s.then),) + after
        if isinstance(s, For):
            if not _free_jump(s.body):
                yield before + substitute(s.body, s.var.name, Lit(s.var.ty, 0)) + after
            if s.count > 1:
                yield before + (For(Var(s.var.name, s.var.ty, (0, 0)), 1,
                                    substitute(s.body, s.var.name, Var(s.var.name, s.var.ty,
                                                                       (0, 0)))),) + after
        yield from (before + (v,) + after for v in _inner_variants(s, params))


def _inner_variants(s, params) -> Iterator:
    """``s`` with one reduction inside it."""
    if isinstance(s, Decl):
        yield from (Decl(s.var, v) for v in expr_variants(s.init, params))
    elif isinstance(s, Assign):
        yield from (Assign(s.var, v) for v in expr_variants(s.value, params))
    elif isinstance(s, ArrayDecl):
        for k, e in enumerate(s.inits):
            yield from (ArrayDecl(s.name, s.ty, s.inits[:k] + (v,) + s.inits[k + 1:])
                        for v in expr_variants(e, params))
    elif isinstance(s, Store):
        yield from (Store(s.name, s.size, v, s.value) for v in expr_variants(s.index, params))
        yield from (Store(s.name, s.size, s.index, v) for v in expr_variants(s.value, params))
    elif isinstance(s, Return):
        for k, e in enumerate(s.values):
            yield from (Return(s.values[:k] + (v,) + s.values[k + 1:])
                        for v in expr_variants(e, params))
    elif isinstance(s, If):
        yield from (If(v, s.then, s.orelse) for v in expr_variants(s.cond, params))
        yield from (If(s.cond, b, s.orelse) for b in stmt_variants(s.then, params))
        yield from (If(s.cond, s.then, b) for b in stmt_variants(s.orelse, params))
    elif isinstance(s, For):
        yield from (For(s.var, s.count, b) for b in stmt_variants(s.body, params))
