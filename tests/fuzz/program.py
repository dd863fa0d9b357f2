"""The generated programs: a typed AST of C++ expressions and statements, and its rendering
as the text both compilers get.

Each node knows its C++ type (:mod:`.cmodel`'s rules) and, for integers, a range holding
every value it can take. Rendering picks, per operation, the plain C++ operator where the
ranges prove it defined, and a safe wrapper of ``include/fuzz_ops.h`` otherwise; so a node
replaced by the minimiser (:mod:`.minimise`) renders safely whatever its new operands are.

A :class:`Snippet` renders to a :class:`Case` (:meth:`Snippet.case`): the text-level record
the harness runs (:mod:`.harness`), which is also what a regression test writes.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property

from . import cmodel as C
from .cmodel import BOOL, F32, I32, CType, Function, Range


@dataclasses.dataclass(frozen=True)
class Input:
    """One input of a snippet (one keyword argument of its ``splice.cuda`` call).

    Attributes:
        name: the parameter's name.
        dtype: its element type's name (``int32``).
        kind: ``tile`` (an element of a loaded tile), ``scalar`` (a kernel scalar
            parameter), ``const`` (a Python constant in the call: C's ``int``, ``float`` or
            ``bool``), ``array`` (a pointer to an array's first element).
        values: the input's values (tile, array: cycled over the elements; scalar, const:
            one); None: drawn from the batch's pool (``variant`` picks one of its arrays).
        variant: which pool array of ``dtype`` (generated cases).
    """

    name: str
    dtype: str
    kind: str
    values: tuple | None = None
    variant: int = 0

    @property
    def ctype(self) -> CType:
        return C.TYPES[self.dtype]


@dataclasses.dataclass(frozen=True)
class Case:
    """A snippet as text, with everything needed to run it on both sides.

    Attributes:
        code: the ``splice.cuda`` code: an expression (``{a, b}`` for several results) or a
            function body with ``return``.
        results: the result dtypes' names (one, or several: a tuple dtype).
        inputs: the snippet's inputs, in call order.
        options: NVRTC options (``("-fmad=false",)``).
        pure: ``splice.cuda``'s ``pure=``.
        placement: where the kernel calls it: ``straight`` (in the kernel's straight-line
            code), ``loop`` (in a loop of one or two iterations, by the block, storing in
            each), ``branch`` (in both arms of an ``if`` on the block index).
    """

    code: str
    results: tuple[str, ...]
    inputs: tuple[Input, ...]
    options: tuple[str, ...] = ()
    pure: bool = True
    placement: str = "straight"

    @property
    def is_body(self) -> bool:
        return "return" in self.code


# ------------------------------------------------------------------------------ expressions

class Expr:
    """An expression node: :attr:`ty`, :attr:`range`, :meth:`children`, :meth:`rebuild`."""

    ty: CType

    @property
    def range(self) -> Range:
        return None if self.ty.is_float else self.ty.full

    def children(self) -> tuple[Expr, ...]:
        return ()

    def rebuild(self, kids: tuple[Expr, ...]) -> Expr:
        return self

    def render(self, ctx: Render) -> str:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, eq=False)
class Var(Expr):
    """A parameter, local or loop counter (``bounds``: a loop counter's range)."""

    name: str
    ty: CType
    bounds: tuple[int, int] | None = None

    @property
    def range(self) -> Range:
        return self.bounds or (None if self.ty.is_float else self.ty.full)

    def render(self, ctx):
        return self.name


@dataclasses.dataclass(frozen=True, eq=False)
class Lit(Expr):
    ty: CType
    value: int | float | bool

    @property
    def range(self) -> Range:
        return None if self.ty.is_float else (int(self.value), int(self.value))

    def render(self, ctx):
        return literal(self.ty, self.value)


def literal(t: CType, v) -> str:
    """A C++ literal of type ``t`` (floats in hexadecimal: exact on both sides)."""
    if t.kind == "b":
        return "true" if v else "false"
    if t.is_float:
        suffix = "f" if t == F32 else ""
        text = float(v).hex() + suffix
        return f"({text})" if text.startswith("-") else text
    suffix = {"int32": "", "uint32": "u", "int64": "ll", "uint64": "ull"}.get(t.name)
    if suffix is None:                       # 8- and 16-bit: a cast of an int literal
        return f"(({t.c}){literal(I32, v)})"
    v = int(v)
    if v == t.lo and t.kind == "s":          # -2147483648 is no literal: -(2^31 - 1) - 1
        return f"({-t.hi}{suffix} - 1)"
    return f"({v}{suffix})" if v < 0 else f"{v}{suffix}"


@dataclasses.dataclass(frozen=True, eq=False)
class Unary(Expr):
    op: str          # "-", "~", "!"
    a: Expr

    @cached_property
    def ty(self) -> CType:     # type: ignore[override]
        return BOOL if self.op == "!" else C.promote(self.a.ty)

    @property
    def range(self) -> Range:
        if self.op == "!":
            return (0, 1)
        r = self.a.range
        if r is None:
            return None
        exact = (-r[1], -r[0]) if self.op == "-" else (~r[1], ~r[0])
        return exact if C.fits(exact, self.ty) else self.ty.full

    def children(self):
        return (self.a,)

    def rebuild(self, kids):
        return Unary(self.op, kids[0])

    def render(self, ctx):
        a = self.a.render(ctx)
        if self.op == "-" and self.ty.kind == "s" and not C.fits((-self.a.range[1],
                                                                   -self.a.range[0]), self.ty):
            return f"fz_neg_{self.ty.name}({a})"
        return f"({self.op}{a})"


ARITH = ("+", "-", "*", "/", "%")
BITS = ("&", "|", "^", "<<", ">>")
COMPARE = ("<", "<=", ">", ">=", "==", "!=")
LOGIC = ("&&", "||")


@dataclasses.dataclass(frozen=True, eq=False)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr

    @cached_property
    def ty(self) -> CType:     # type: ignore[override]
        if self.op in COMPARE or self.op in LOGIC:
            return BOOL
        if self.op in ("<<", ">>"):
            return C.promote(self.a.ty)
        return C.usual(self.a.ty, self.b.ty)

    def children(self):
        return (self.a, self.b)

    def rebuild(self, kids):
        return Binary(self.op, *kids)

    @property
    def range(self) -> Range:
        if self.ty == BOOL:
            return (0, 1)
        if self.ty.is_float:
            return None
        exact = self._exact()
        return exact if exact is not None and C.fits(exact, self.ty) else self.ty.full

    def _count_range(self) -> tuple[int, int]:
        """The shift count's range as rendered (masked to the width unless it fits)."""
        r, w = self.b.range, self.ty.bits
        return r if r is not None and 0 <= r[0] and r[1] < w else (0, w - 1)

    def _exact(self) -> Range:
        """The range of the mathematically exact result (None: not tracked)."""
        ra, rb = C.convert(self.a.range, self.ty), C.convert(self.b.range, self.ty)
        if self.op in ("<<", ">>"):
            ra, n = C.convert(self.a.range, self.ty), self._count_range()
            if self.op == ">>":
                return C.span([ra[0] >> n[0], ra[0] >> n[1], ra[1] >> n[0], ra[1] >> n[1]])
            return C.span([ra[0] << n[0], ra[0] << n[1], ra[1] << n[0], ra[1] << n[1]])
        if ra is None or rb is None:
            return None
        if self.op in ("+", "-", "*"):
            f = {"+": lambda x, y: x + y, "-": lambda x, y: x - y,
                 "*": lambda x, y: x * y}[self.op]
            return C.span(f(x, y) for x in ra for y in rb)
        nonneg = [r[1] for r in (ra, rb) if r[0] >= 0]
        if self.op == "&" and nonneg:        # at most the least non-negative operand
            return (0, min(nonneg))
        if self.op == "%" and rb[0] > 0 and ra[0] >= 0:
            return (0, min(ra[1], rb[1] - 1))
        return None

    def _shl_defined(self) -> bool:
        """C++17's signed ``<<``: defined for a non-negative left operand whose shifted
        value fits."""
        ra = C.convert(self.a.range, self.ty)
        return ra[0] >= 0 and C.fits(self._exact(), self.ty)

    def _div_safe(self) -> bool:
        ra, rb = C.convert(self.a.range, self.ty), C.convert(self.b.range, self.ty)
        if rb is None or rb[0] <= 0 <= rb[1]:
            return False
        return self.ty.kind == "u" or not (ra[0] <= self.ty.lo and rb[0] <= -1 <= rb[1])

    def render(self, ctx):
        a, b = self.a.render(ctx), self.b.render(ctx)
        t, op = self.ty, self.op
        if op in ("<<", ">>"):
            r, w = self.b.range, t.bits
            n = b if r is not None and 0 <= r[0] and r[1] < w else f"({b} & {w - 1})"
            if op == "<<" and t.kind == "s" and not self._shl_defined():
                return f"fz_shl_{t.name}({a}, {n})"
            return f"({a} {op} {n})"
        if t.is_float and op == "*" and ctx.contracts:
            return f"{'__fmul_rn' if t == F32 else '__dmul_rn'}({a}, {b})"
        if op in ("/", "%") and t.is_int and not self._div_safe():
            return f"fz_{'div' if op == '/' else 'mod'}_{t.name}({a}, {b})"
        if op == "/" and t.is_float and _constant(self.b):
            c = "float" if t == F32 else "double"      # the operands' common type
            return f"fz_fdiv(({c})({a}), ({c})({b}))"
        if op in ("+", "-", "*") and t.kind == "s" and not C.fits(self._exact(), t):
            return f"fz_{ {'+': 'add', '-': 'sub', '*': 'mul'}[op]}_{t.name}({a}, {b})"
        return f"({a} {op} {b})"


def _constant(e: Expr) -> bool:
    """Whether ``e`` is a C++ constant expression (literals, operators and casts of them),
    which the compiler evaluates and warns of (a zero divisor)."""
    return isinstance(e, Lit) or (isinstance(e, (Unary, Binary, Cond, Cast))
                                  and all(_constant(k) for k in e.children()))


@dataclasses.dataclass(frozen=True, eq=False)
class Cond(Expr):
    c: Expr
    a: Expr
    b: Expr

    @cached_property
    def ty(self) -> CType:     # type: ignore[override]
        return C.conditional(self.a.ty, self.b.ty)

    @property
    def range(self) -> Range:
        ra, rb = C.convert(self.a.range, self.ty), C.convert(self.b.range, self.ty)
        if ra is None or rb is None:
            return None if self.ty.is_float else self.ty.full
        return min(ra[0], rb[0]), max(ra[1], rb[1])

    def children(self):
        return (self.c, self.a, self.b)

    def rebuild(self, kids):
        return Cond(*kids)

    def render(self, ctx):
        return f"({self.c.render(ctx)} ? {self.a.render(ctx)} : {self.b.render(ctx)})"


@dataclasses.dataclass(frozen=True, eq=False)
class Cast(Expr):
    """An explicit conversion; floating to integer through ``fz_to_<T>`` (saturating, NaN
    to 0), since C++ leaves an out-of-range one undefined."""

    ty: CType
    a: Expr

    @property
    def range(self) -> Range:
        return C.convert(self.a.range, self.ty)

    def children(self):
        return (self.a,)

    def rebuild(self, kids):
        return cast(self.ty, kids[0])

    def render(self, ctx):
        a = self.a.render(ctx)
        if self.a.ty.is_float and self.ty.kind in "su":
            return f"fz_to_{self.ty.name}({a})"
        return f"(({self.ty.c}){a})"


def cast(t: CType, e: Expr) -> Expr:
    """``e`` converted to ``t`` (itself if it has that type)."""
    return e if e.ty == t else Cast(t, e)


@dataclasses.dataclass(frozen=True, eq=False)
class Call(Expr):
    fn: Function
    args: tuple[Expr, ...]

    @property
    def ty(self) -> CType:     # type: ignore[override]
        return self.fn.result

    def children(self):
        return self.args

    def rebuild(self, kids):
        return call(self.fn, kids)

    def render(self, ctx):
        return f"{self.fn.name}({', '.join(a.render(ctx) for a in self.args)})"


def call(fn: Function, args) -> Call:
    """``fn`` called on ``args``, each converted to its parameter type (and masked or
    guarded)."""
    out = []
    for k, (p, a) in enumerate(zip(fn.params, args)):
        a = cast(p, a)
        guard = fn.guards[k] if k < len(fn.guards) else None
        if guard is not None and not (isinstance(a, Call) and a.fn.name == guard):
            a = Call(C.GUARDS[p.name], (a,))
        mask = fn.masks[k] if k < len(fn.masks) else None
        if mask is not None and not (isinstance(a, Binary) and a.op == "&" and
                                     isinstance(a.b, Lit) and a.b.value == mask):
            a = Binary("&", a, Lit(p, mask))
        out.append(a)
    return Call(fn, tuple(out))


@dataclasses.dataclass(frozen=True, eq=False)
class Load(Expr):
    """``p[i & 7]``: an element of an array (an array input's first eight elements, or a
    local array of ``size``, a power of two)."""

    array: str
    ty: CType
    index: Expr
    size: int = 8

    def children(self):
        return (self.index,)

    def rebuild(self, kids):
        return Load(self.array, self.ty, kids[0], self.size)

    def render(self, ctx):
        return f"{self.array}[{index(self.index, self.size, ctx)}]"


def index(i: Expr, size: int, ctx) -> str:
    """An index expression kept within ``[0, size)`` (masked unless its range is)."""
    r, text = i.range, i.render(ctx)
    if r is not None and 0 <= r[0] and r[1] < size:
        return text
    return f"((unsigned){text}) & {size - 1}u"


# ------------------------------------------------------------------------------- statements

@dataclasses.dataclass(frozen=True, eq=False)
class Decl:
    var: Var
    init: Expr


@dataclasses.dataclass(frozen=True, eq=False)
class Assign:
    var: Var
    value: Expr


@dataclasses.dataclass(frozen=True, eq=False)
class ArrayDecl:
    """``T name[size] = {...};``: a local array (indexed at run time, it lives on the
    stack: the snippet is then called, not inlined)."""

    name: str
    ty: CType
    inits: tuple[Expr, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class Store:
    """``name[i & (size - 1)] = value;``."""

    name: str
    size: int
    index: Expr
    value: Expr


@dataclasses.dataclass(frozen=True, eq=False)
class If:
    cond: Expr
    then: tuple
    orelse: tuple = ()


@dataclasses.dataclass(frozen=True, eq=False)
class For:
    """``for (int i = 0; i < count; ++i)``."""

    var: Var
    count: int
    body: tuple


@dataclasses.dataclass(frozen=True, eq=False)
class Return:
    values: tuple[Expr, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class Jump:
    word: str       # "break" / "continue"


Stmt = Decl | Assign | ArrayDecl | Store | If | For | Return | Jump


@dataclasses.dataclass(frozen=True)
class Render:
    """What rendering depends on: whether NVRTC may contract a float multiply and add into
    an fma (its default; then every float multiply is ``__fmul_rn``/``__dmul_rn``, which
    NVRTC never contracts, and the host compiles with ``-ffp-contract=off``)."""

    contracts: bool


def render_stmts(stmts, ctx: Render, indent: str = "") -> list[str]:
    out: list[str] = []
    for s in stmts:
        out += _render_stmt(s, ctx, indent)
    return out


def _render_stmt(s, ctx: Render, ind: str) -> list[str]:
    if isinstance(s, Decl):
        return [f"{ind}{s.var.ty.c} {s.var.name} = {s.init.render(ctx)};"]
    if isinstance(s, Assign):
        return [f"{ind}{s.var.name} = {s.value.render(ctx)};"]
    if isinstance(s, Return):
        return [f"{ind}return {render_values(s.values, ctx)};"]
    if isinstance(s, Jump):
        return [f"{ind}{s.word};"]
    if isinstance(s, ArrayDecl):
        inits = ", ".join(e.render(ctx) for e in s.inits)
        return [f"{ind}{s.ty.c} {s.name}[{len(s.inits)}] = {{{inits}}};"]
    if isinstance(s, Store):
        return [f"{ind}{s.name}[{index(s.index, s.size, ctx)}] = {s.value.render(ctx)};"]
    if isinstance(s, For):
        v = s.var.name
        return [f"{ind}for (int {v} = 0; {v} < {s.count}; ++{v}) {{",
                *render_stmts(s.body, ctx, ind + "  "), f"{ind}}}"]
    assert isinstance(s, If)
    lines = [f"{ind}if ({s.cond.render(ctx)}) {{", *render_stmts(s.then, ctx, ind + "  ")]
    if s.orelse:
        lines += [f"{ind}}} else {{", *render_stmts(s.orelse, ctx, ind + "  ")]
    return lines + [f"{ind}}}"]


def render_values(values, ctx: Render) -> str:
    if len(values) == 1:
        return values[0].render(ctx)
    return "{" + ", ".join(v.render(ctx) for v in values) + "}"


# ---------------------------------------------------------------------------------- snippet

@dataclasses.dataclass(frozen=True, eq=False)
class Snippet:
    """A generated snippet.

    Attributes:
        inputs: its inputs (:class:`Input`; values None: from the batch's pool).
        results: the result types.
        body: a tuple of expressions (the expression form: the code is the expression, or
            ``{a, b}``), or of statements ending with a :class:`Return`.
        contracts: NVRTC's default ``-fmad=true`` (else ``-fmad=false`` is passed).
        pure: ``splice.cuda``'s ``pure=``.
        placement: :attr:`Case.placement`.
    """

    inputs: tuple[Input, ...]
    results: tuple[CType, ...]
    body: tuple
    contracts: bool = True
    pure: bool = True
    placement: str = "straight"

    @property
    def is_expression(self) -> bool:
        return bool(self.body) and isinstance(self.body[0], Expr)

    def code(self) -> str:
        ctx = Render(self.contracts)
        if self.is_expression:
            return render_values(self.body, ctx)
        return "\n".join(render_stmts(self.body, ctx))

    def case(self) -> Case:
        return Case(self.code(), tuple(t.name for t in self.results), self.inputs,
                    () if self.contracts else ("-fmad=false",), self.pure, self.placement)

    def replace(self, **kw) -> Snippet:
        return dataclasses.replace(self, **kw)


def param_var(inp: Input) -> Var:
    """The C parameter of an input as an expression (a constant's C type: int, float,
    bool)."""
    return Var(inp.name, const_type(inp) if inp.kind == "const" else inp.ctype)


def const_type(inp: Input) -> CType:
    """The C type a Python constant has in a snippet (cuTile's: int32, float32, bool)."""
    return {"bool": BOOL, "int32": I32, "float32": F32}[inp.dtype]

