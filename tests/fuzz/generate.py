"""Random snippets (:class:`~.program.Snippet`), well defined by construction.

A seeded ``random.Random`` draws, per snippet: the results (one dtype, or a tuple of two to
four within 64 bits), one to four inputs (at least one tile; tiles, kernel scalars, Python
constants, arrays; at most 128 bits), NVRTC's contraction default or ``-fmad=false``,
``pure``, and an expression or a function body. Expressions are typed top down: each node
is drawn for the type its parent wants (an operation on operands of that type or of another,
converted explicitly), so implicit conversions happen only where C++ defines them exactly
(the usual arithmetic conversions, promotions, ``?:``). Bodies declare and assign locals,
branch, loop a constant number of times (``break``/``continue`` in the loop), and return
early.
"""

from __future__ import annotations

import random

import numpy as np

from . import cmodel as C
from .cmodel import BOOL, F32, I32, CType
from .program import (
    ARITH,
    COMPARE,
    LOGIC,
    ArrayDecl,
    Assign,
    Binary,
    Cast,
    Cond,
    Decl,
    Expr,
    For,
    If,
    Input,
    Jump,
    Lit,
    Load,
    Render,
    Return,
    Snippet,
    Store,
    Unary,
    Var,
    call,
    cast,
    param_var,
)

ALL = list(C.TYPES.values())
NAMES = ("a", "b", "c", "d")
_BY_RESULT: dict[CType, list] = {}
for _fn in C.FUNCTIONS:
    _BY_RESULT.setdefault(_fn.result, []).append(_fn)


def int_values(t: CType) -> list[int]:
    """Edge values of an integer type: its bounds, 0, +-1, powers of two and their
    neighbours."""
    if t.kind == "b":
        return [0, 1]
    vals = {t.lo, t.hi, 0, 1, t.lo + 1, t.hi - 1, 2, 3, 7, t.hi // 2, t.hi // 2 + 1}
    if t.kind == "s":
        vals |= {-1, -2, -7, t.lo // 2}
    for k in range(1, t.bits - (t.kind == "s")):
        if k in (7, 8, 15, 16, 23, 24, 31, 32, 52, 53, 63) or k < 4:
            vals |= {1 << k, (1 << k) - 1, (1 << k) + 1}
    return sorted(v for v in vals if t.lo <= v <= t.hi)


def float_values(t: CType) -> list[float]:
    """Finite edge values of a floating type, each exactly a value of ``t`` (literals can
    be them): zeros, halves (rounding ties), the integer types' bounds, the largest finite,
    the least normal and subnormal (the inputs add inf and NaN:
    :func:`~.harness.pool`)."""
    f = np.float32 if t == F32 else np.float64
    info = np.finfo(f)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 0.1, -7.25, 100.0, 1e10,
            -1e10, 2.0 ** 31, -2.0 ** 31, 2.0 ** 32, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 255.5,
            -128.5, 65535.75, 2.0 ** 24 + 2, float(info.max), -float(info.max),
            float(info.tiny), float(info.smallest_subnormal), -float(info.smallest_subnormal),
            float(np.nextafter(f(2.0 ** 31), f(0))), float(np.nextafter(f(1), f(2)))]
    return [float(f(v)) for v in vals]


class Generator:
    """Draws snippets from ``rnd``; :meth:`snippet` is the entry."""

    def __init__(self, rnd: random.Random, depth: int = 3):
        self.r = rnd
        self.depth = depth

    # ---------------------------------------------------------------- snippets and inputs

    def snippet(self) -> Snippet:
        self.names = 0
        style = self.r.choices(["mixed", "float", "int"], [50, 25, 25])[0]
        self.types = {"mixed": ALL, "float": C.FLOATS, "int": C.INTS}[style]
        self.weights = [20 if t.is_float else 6 for t in self.types]
        results = self.results()
        inputs = self.inputs(results)
        self.vars = [param_var(i) for i in inputs if i.kind != "array"]
        self.varying = {i.name for i in inputs if i.kind == "tile"}
        self.arrays = [(i.name, i.ctype, 8) for i in inputs if i.kind == "array"]
        self.loops = 0
        self.budget = 16          # statements per body
        if self.r.random() < 0.45:
            body: tuple = tuple(self.expr(t, self.depth, top=True) for t in results)
        else:
            body = self.block(results, top=True, depth=0)
        return Snippet(inputs, results, body, contracts=self.r.random() < 0.6,
                       pure=self.r.random() < 0.8, placement=self.placement())

    def placement(self) -> str:
        return self.r.choices(["straight", "loop", "branch"], [70, 15, 15])[0]

    def again(self, s: Snippet) -> Snippet:
        """``s``'s code on other inputs of the same C types (other pool arrays, kinds,
        constants)."""
        inputs = []
        for i in s.inputs:
            kinds = ["array"] if i.kind == "array" else ["tile", "scalar"] + (
                ["const"] if i.dtype in ("bool", "int32", "float32") else [])
            kind = i.kind if i is s.inputs[0] else self.r.choice(kinds)
            values = (self.value(i.ctype),) if kind == "const" else None
            if kind == "const" and i.dtype == "float32" and not np.isfinite(values[0]):
                values = (0.5,)
            inputs.append(Input(i.name, i.dtype, kind, values, self.r.randint(0, 1)))
        return s.replace(inputs=tuple(inputs), placement=self.placement())

    def some_type(self) -> CType:
        """A type of the snippet's style: in a mixed snippet floats more often than one in
        eleven (float results and operands keep every bit of a rounding, where a
        conversion to an integer keeps few); a float snippet's are float32 and float64, an
        integer snippet's the integer types."""
        return self.r.choices(self.types, self.weights)[0]

    def results(self) -> tuple[CType, ...]:
        if self.r.random() < 0.7:
            return (self.some_type(),)
        while True:
            ts = tuple(self.some_type() for _ in range(self.r.randint(2, 4)))
            pos = 0
            for t in ts:
                pos = -(-pos // t.bits) * t.bits + t.bits
            if pos <= 64:
                return ts

    def inputs(self, results) -> tuple[Input, ...]:
        """One to four inputs, the first a tile, half of them of a result's type."""
        out: list[Input] = []
        bits = 0
        for k in range(self.r.choice([1, 2, 2, 3, 3, 4])):
            kind = "tile" if k == 0 else self.r.choices(
                ["tile", "scalar", "const", "array"], [50, 20, 15, 15])[0]
            t = self.r.choice(results) if self.r.random() < 0.5 else self.some_type()
            inp = self.input(NAMES[k], kind, t)
            width = 64 if kind == "array" else inp.ctype.bits
            if bits + width > 128:
                break
            bits += width
            out.append(inp)
        return tuple(out)

    def input(self, name: str, kind: str, t: CType) -> Input:
        if kind == "const":
            dtype = self.r.choice(["bool", "int32", "float32"])
            t = C.TYPES[dtype]
            v = self.value(t)
            if dtype == "float32":
                v = v if np.isfinite(v) else 1.5
            return Input(name, dtype, kind, (v,))
        return Input(name, t.name, kind, variant=self.r.randint(0, 1))

    def value(self, t: CType):
        if t.is_float:
            if self.r.random() < 0.5:
                return self.r.choice(float_values(t))
            f = np.float32 if t == F32 else np.float64
            return float(f(self.r.uniform(-1, 1) * 10.0 ** self.r.randint(-3, 6)))
        pick = self.r.random()
        if pick < 0.35:
            v = self.r.choice(int_values(t))
        else:
            v = self.r.randint(-20, 20) if pick < 0.8 else self.r.randint(t.lo, t.hi)
        return bool(v & 1) if t.kind == "b" else max(t.lo, min(t.hi, v))

    # ----------------------------------------------------------------------- expressions

    def expr(self, t: CType, depth: int, top: bool = False) -> Expr:
        """An expression of type ``t`` (``top``: a result, never a lone leaf)."""
        if depth <= 0 or (not top and self.r.random() < 0.2):
            return self.leaf(t)
        kinds = ["arith", "bits", "compare", "logic", "unary", "cond", "cast", "call"]
        boolean = t == BOOL     # a comparison or logic elsewhere loses all but one bit
        weights = [30, 14 if t.is_int else 5, 30 if boolean else 4, 12 if boolean else 2, 6,
                   10, 5, 12]
        if self.arrays:
            kinds.append("load")
            weights.append(6)
        kind = self.r.choices(kinds, weights)[0]
        return cast(t, getattr(self, "_" + kind)(t, depth - 1))

    def operand_type(self, t: CType, ints: bool = False) -> CType:
        if self.r.random() < 0.75 and (t.is_int or not ints):
            return t
        return self.r.choice(C.INTS + [BOOL]) if ints else self.some_type()

    def leaf(self, t: CType) -> Expr:
        """A variable (of type ``t`` if one is, else converted), sometimes a literal.
        Variables that differ between elements (tile inputs, locals) are drawn three times
        as often: a result that is the same for every element tests little."""
        if not self.vars or self.r.random() < 0.15:
            return Lit(t, self.value(t))
        same = [v for v in self.vars if v.ty == t]
        pool = same if same and self.r.random() < 0.7 else self.vars
        weights = [3 if v.name in self.varying or v.name[0] == "v" else 1 for v in pool]
        return cast(t, self.r.choices(pool, weights)[0])

    def pair(self, ta: CType, tb: CType, d: int) -> tuple[Expr, Expr]:
        """Two operands, redrawn once when they come out the same but for conversions
        (``a % a`` and ``b - (int)b`` are constants)."""
        a, b = self.expr(ta, d), self.expr(tb, d)
        if _bare(a).render(_CTX) == _bare(b).render(_CTX):
            b = self.expr(tb, d)
        return a, b

    def _arith(self, t, d):
        op = self.r.choice(ARITH)
        ints = op == "%"
        return Binary(op, *self.pair(self.operand_type(t, ints), self.operand_type(t, ints), d))

    def _bits(self, t, d):
        op = self.r.choice(["&", "|", "^", "<<", ">>"])
        ta = self.operand_type(t, ints=True)
        if op in ("<<", ">>") and self.r.random() < 0.5:    # within the operand's own bits
            return Binary(op, self.expr(ta, d), Lit(I32, self.r.randint(0, ta.bits - 1)))
        return Binary(op, *self.pair(ta, self.operand_type(t, ints=True), d))

    def _compare(self, t, d):
        ta = self.some_type()
        tb = ta if self.r.random() < 0.6 else self.some_type()
        return Binary(self.r.choice(COMPARE), *self.pair(ta, tb, d))

    def _logic(self, t, d):
        if self.r.random() < 0.3:
            return Unary("!", self.expr(self.some_type(), d))
        return Binary(self.r.choice(LOGIC), self.expr(self.some_type(), d),
                      self.expr(self.some_type(), d))

    def _unary(self, t, d):
        a = self.expr(self.operand_type(t), d)
        return Unary("~" if a.ty.is_int and self.r.random() < 0.4 else "-", a)

    def _cond(self, t, d):
        tb = t if self.r.random() < 0.7 else self.some_type()
        c = self._compare(t, d) if self.r.random() < 0.6 else self.expr(self.some_type(), d)
        return Cond(c, self.expr(t, d), self.expr(tb, d))

    def _cast(self, t, d):      # an expression of another type (expr() converts it)
        return self.expr(self.some_type(), d)

    def _call(self, t, d):
        fns = _BY_RESULT.get(t) if self.r.random() < (0.85 if t.is_float else 0.6) else None
        fn = self.r.choice(fns or C.FUNCTIONS)
        return call(fn, [self.expr(p if self.r.random() < 0.7 else self.some_type(), d)
                         for p in fn.params])

    def _load(self, t, d):
        name, ty, size = self.r.choice(self.arrays)
        return Load(name, ty, self.expr(self.r.choice(C.INTS), d), size)

    # ------------------------------------------------------------------------ statements

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def block(self, results, top: bool, depth: int) -> tuple:
        """Statements (a whole body ending with ``return`` when ``top``). Locals declared
        here go out of scope at its end."""
        saved, saved_arrays = list(self.vars), list(self.arrays)
        stmts: list = []
        for _ in range(self.r.randint(1, 4 if top else 3)):
            if self.budget <= 0:    # a long tail of huge bodies costs compile time, not bugs
                break
            self.budget -= 1
            stmts.append(self.statement(results, depth))
        if top:
            stmts.append(Return(tuple(self.expr(t, self.depth, top=True) for t in results)))
        self.vars, self.arrays = saved, saved_arrays
        return tuple(stmts)

    def statement(self, results, depth: int):
        locals_ = [v for v in self.vars if v.name[0] == "v"]
        local_arrays = [a for a in self.arrays if a[0][0] == "w"]
        kinds = ["decl", "assign", "if", "for", "return", "jump", "array", "store"]
        weights = [35, 20 if locals_ else 0, 15, 12 if depth < 2 else 0, 8,
                   6 if self.loops else 0, 4, 10 if local_arrays else 0]
        kind = self.r.choices(kinds, weights)[0]
        d = max(1, self.depth - 1)
        if kind == "decl":
            v = Var(self.fresh("v"), self.some_type())
            init = self.expr(v.ty, d)
            self.vars.append(v)
            return Decl(v, init)
        if kind == "assign":
            v = self.r.choice(locals_)
            return Assign(v, self.expr(v.ty, d))
        if kind == "if":
            cond = self.expr(self.some_type(), d)
            then = self.block(results, False, depth + 1)
            orelse = self.block(results, False, depth + 1) if self.r.random() < 0.5 else ()
            return If(cond, then, orelse)
        if kind == "for":
            count = self.r.randint(1, 4)
            i = Var(self.fresh("i"), I32, (0, count - 1))
            self.vars.append(i)
            self.loops += 1
            body = self.block(results, False, depth + 1)
            self.loops -= 1
            self.vars.remove(i)
            return For(i, count, body)
        if kind == "array":
            ty, size = self.some_type(), self.r.choice([2, 4])
            decl = ArrayDecl(self.fresh("w"), ty, tuple(self.expr(ty, d - 1)
                                                        for _ in range(size)))
            self.arrays.append((decl.name, ty, size))
            return decl
        if kind == "store":
            name, ty, size = self.r.choice(local_arrays)
            return Store(name, size, self.expr(self.r.choice(C.INTS), d), self.expr(ty, d))
        if kind == "return":
            ret = Return(tuple(self.expr(t, d) for t in results))
            return If(self.expr(BOOL, d), (ret,))
        return If(self.expr(BOOL, d), (Jump(self.r.choice(["break", "continue"])),))


_CTX = Render(True)


def _bare(e: Expr) -> Expr:
    """``e`` without its outer conversions."""
    while isinstance(e, Cast):
        e = e.a
    return e


def generate(seed: int, count: int, depth: int = 3) -> list[Snippet]:
    """``count`` snippets from ``seed`` (the same list for the same arguments). One in ten
    repeats an earlier one's code on other inputs of the same types (one generated function
    for both calls)."""
    g = Generator(random.Random(seed), depth)
    out: list[Snippet] = []
    while len(out) < count:
        if out and g.r.random() < 0.1:
            out.append(g.again(g.r.choice(out)))
        else:
            out.append(g.snippet())
    return out

