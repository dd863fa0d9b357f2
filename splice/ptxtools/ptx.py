"""A small PTX parser: a module as statements with exact source spans.

splice rewrites compiler output, so it never re-prints what it did not change: a
:class:`Module` keeps the original text and every :class:`Statement`'s ``[start, end)`` span;
an edit replaces whole statements by span (:func:`apply_edits`), and every byte outside the
edited spans stays as it was.

Statements are found by a tokenizer that knows PTX's lexical rules (PTX ISA 9.x, section
"Syntax"): ``//`` and ``/* */`` comments, string literals, directives (``.name``),
identifiers, registers (``%name``), numbers and punctuation. A statement ends at ``;``, at a
label's ``:``, at a scope brace, or -- for the directives that take no ``;`` (``.version``,
``.target``, ``.loc``, ``.reqntid``...) -- at the end of its line. Top-level blocks that are
not function bodies (``.section``, ``.nv_intermediate_source_section``) are kept opaque.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Iterator, NamedTuple, NoReturn, Sequence

from ..errors import SpliceError


class PTXSyntaxError(SpliceError):
    """The PTX text cannot be split into statements (unbalanced braces, unterminated
    comment or string, a function without a body or prototype)."""


# Directives that end at the end of their line rather than at ';'.
_LINE_DIRECTIVES = frozenset({
    ".version", ".target", ".address_size", ".loc", ".loc_intermediate", ".file",
    ".reqntid", ".maxntid", ".minnctapersm", ".maxnctapersm", ".maxnreg", ".language",
    ".noreturn", ".explicitcluster", ".reqnctapercluster", ".maxclusterrank",
    ".blocksareclusters", ".abi_preserve", ".abi_preserve_control",
})

#: One token after the whitespace before it (one match per token, not two).
_TOKEN_RE = re.compile(r"""
  [ \t\r\f\v]*
  (?:
    (?P<nl>\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<badcomment>/\*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<directive>\.[A-Za-z_][A-Za-z0-9_$:]*)
  | (?P<reg>%[A-Za-z_$][A-Za-z0-9_$]*(?:\.[xyzw])?)
  | (?P<number>0[fFdD][0-9a-fA-F]+|0[xX][0-9a-fA-F]+U?
               |[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+(?:[eE][+-]?[0-9]+)?U?)
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z0-9_:]+)*)
  | (?P<punct>::|[;:,{}()\[\]<>@!+\-*/=|&^~?])
  | (?P<end>\Z)
  )
""", re.VERBOSE | re.DOTALL)


class Token(NamedTuple):
    """One token (a tuple: made for every token of every parse, see :func:`tokenize`)."""

    kind: str   # directive, reg, number, ident, punct, string
    text: str
    start: int
    end: int


def tokenize(text: str, pos: int = 0) -> Iterator[Token | str]:
    """Yield tokens from offset ``pos``; a newline is yielded as the string ``"\\n"``.
    Comments and whitespace are skipped.

    Raises:
        PTXSyntaxError: a character no token starts with, an unterminated comment or
            string.
    """
    n = len(text)
    while pos < n:
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            _untokenizable(text, pos)
        kind = m.lastgroup
        if kind == "nl":
            yield "\n"
        elif kind == "bcomment":
            if "\n" in m.group(kind):
                yield "\n"
        elif kind == "badcomment":
            _untokenizable(text, m.start(kind))
        elif kind == "end":
            return
        elif kind != "lcomment":
            yield Token(kind, m.group(kind), m.start(kind), m.end())  # type: ignore[arg-type]
        pos = m.end()


def _untokenizable(text: str, pos: int) -> NoReturn:
    while text[pos] in " \t\r\f\v":
        pos += 1
    if text.startswith("/*", pos):
        raise PTXSyntaxError(f"unterminated /* comment at {_line_col(text, pos)}")
    if text[pos] == '"':
        raise PTXSyntaxError(f"unterminated string at {_line_col(text, pos)}")
    raise PTXSyntaxError(f"unexpected character {text[pos]!r} at {_line_col(text, pos)}")


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


@dataclasses.dataclass
class Statement:
    """One PTX statement.

    kind: ``directive`` (``.reg``, ``.global``...), ``header`` (a ``.func``/``.entry``
    prototype; its body follows as an ``open`` ... ``close``), ``decl`` (a prototype ending
    in ``;``), ``instruction``, ``label``, ``open``/``close`` (scope braces), ``opaque`` (a
    top-level block splice does not look into).
    """

    kind: str
    start: int
    end: int
    tokens: tuple[Token, ...]
    depth: int  # brace depth at the statement (0: module level)

    def text(self, source: str) -> str:
        return source[self.start:self.end]

    @property
    def head(self) -> str:
        return self.tokens[0].text if self.tokens else ""


def split_statements(text: str) -> list[Statement]:
    """Split PTX text into statements.

    Raises:
        PTXSyntaxError: unbalanced braces or parentheses, unterminated comment or string,
            or a statement left open at the end of the text.
    """
    s = _Splitter(text)
    while True:   # one token per turn; the common case (not punctuation) falls through
        tok = next(s.tokens, None)
        if tok is None:
            break
        if tok == "\n":
            s.end_line()
            continue
        assert isinstance(tok, Token)
        if tok.kind != "punct" or not s.punct(tok):
            s.cur.append(tok)
    return s.finish()


class _Splitter:
    """The state of :func:`split_statements`: the statements found, the tokens of the one
    being read, the brackets open; a method per token that can end a statement."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.stmts: list[Statement] = []
        self.cur: list[Token] = []   # the tokens of the statement being read
        self.depth = 0               # scope braces open
        self.paren = 0               # parentheses open (parameter lists, call arguments)
        self.vec_brace = 0           # vector-operand braces open ({%r1, %r2})

    def emit(self, kind: str, start: int, end: int, tokens: tuple[Token, ...]) -> None:
        """Add a statement at the current depth; the next statement starts empty."""
        self.stmts.append(Statement(kind, start, end, tokens, self.depth))
        self.cur = []

    def end_line(self) -> None:
        """At a newline: a line directive (``.version``...) ends here."""
        cur = self.cur
        if cur and self.paren == 0 and cur[0].kind == "directive" and \
                cur[0].text in _LINE_DIRECTIVES:
            self.emit("directive", cur[0].start, cur[-1].end, tuple(cur))

    def punct(self, tok: Token) -> bool:
        """Read the punctuation ``tok``; True when it ended a statement or was a scope
        brace, False when it belongs to the statement being read."""
        t = tok.text
        cur = self.cur
        if t == "(":
            self.paren += 1
        elif t == ")":
            self.paren -= 1
            if self.paren < 0:
                raise PTXSyntaxError(f"unbalanced ')' at {_line_col(self.text, tok.start)}")
        elif t == ";" and self.paren == 0 and self.vec_brace == 0:
            if cur:   # else an empty statement
                cur.append(tok)
                self.emit(_statement_kind(cur), cur[0].start, tok.end, tuple(cur))
            return True
        elif t == ":" and len(cur) == 1 and cur[0].kind == "ident" and self.paren == 0:
            self.emit("label", cur[0].start, tok.end, (cur[0], tok))
            return True
        elif t == "{":
            return self.open_brace(tok)
        elif t == "}":
            return self.close_brace(tok)
        return False

    def open_brace(self, tok: Token) -> bool:
        """A ``{``: a scope (after a function header, its body), an opaque top-level block
        (read past whole) or a vector operand (False: part of the statement)."""
        cur = self.cur
        opens = _brace_opens(cur, self.paren, self.depth)
        if opens == "opaque":
            end = _skip_opaque_block(self.text, tok.start)
            self.emit("opaque", cur[0].start, end, tuple(cur))
            self.tokens = tokenize(self.text, end)
            return True
        if opens == "vector":
            self.vec_brace += 1
            return False
        if opens == "header":
            self.emit("header", cur[0].start, cur[-1].end, tuple(cur))
        self.emit("open", tok.start, tok.end, (tok,))
        self.depth += 1
        return True

    def close_brace(self, tok: Token) -> bool:
        """A ``}``: the end of a vector operand (False) or of a scope."""
        if self.vec_brace:
            self.vec_brace -= 1
            return False
        _check_close(self.text, tok, self.cur, self.depth)
        self.depth -= 1
        self.emit("close", tok.start, tok.end, (tok,))
        return True

    def finish(self) -> list[Statement]:
        """The statements, once the text is read."""
        if self.cur:
            self.stmts.append(_last_statement(self.text, self.cur, self.paren, self.depth))
        if self.depth != 0:
            raise PTXSyntaxError("unbalanced '{': a block is not closed at end of PTX")
        return self.stmts


def _statement_kind(cur: list[Token]) -> str:
    """The kind of the statement ``cur`` that ends at a ``;``."""
    if cur[0].kind != "directive":
        return "instruction"
    heads = {c.text for c in cur if c.kind == "directive"}
    return "decl" if heads & {".func", ".entry"} else "directive"


def _brace_opens(cur: list[Token], paren: int, depth: int) -> str:
    """What a ``{`` after the tokens ``cur`` opens: "scope" (a bare ``{``), "header" (a
    function body, ``cur`` being its prototype), "opaque" (a top-level block that is not a
    function body, such as ``.section``) or "vector" (an operand such as ``{%r1, %r2}``)."""
    if not cur:
        return "scope"
    directive = cur[0].kind == "directive" and not any(c.text == "=" for c in cur)
    if directive and paren == 0 and any(c.text in (".func", ".entry") for c in cur):
        return "header"
    if directive and depth == 0:
        return "opaque"
    return "vector"


def _check_close(text: str, tok: Token, cur: list[Token], depth: int) -> None:
    """A scope-closing ``}`` at ``tok`` ends no statement and closes an open scope."""
    if cur:
        raise PTXSyntaxError(
            f"statement not terminated before '}}' at "
            f"{_line_col(text, tok.start)}: {text[cur[0].start:tok.start]!r}")
    if depth == 0:
        raise PTXSyntaxError(f"unbalanced '}}' at {_line_col(text, tok.start)}")


def _last_statement(text: str, cur: list[Token], paren: int, depth: int) -> Statement:
    """The statement ``cur`` left open at the end of the text: only a line directive
    (``.version``...) may end there."""
    if cur[0].kind == "directive" and cur[0].text in _LINE_DIRECTIVES and paren == 0:
        return Statement("directive", cur[0].start, cur[-1].end, tuple(cur), depth)
    raise PTXSyntaxError(f"unterminated statement at end of PTX: "
                         f"{text[cur[0].start:cur[0].start + 80]!r}")


def _skip_opaque_block(text: str, open_pos: int) -> int:
    """End offset of the brace block starting at ``open_pos``; raw ``.source_begin`` ...
    ``.source_end`` regions inside it are skipped unread."""
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        if text.startswith(".source_begin", i):
            j = text.find(".source_end", i)
            if j < 0:
                raise PTXSyntaxError(".source_begin without .source_end")
            i = j + len(".source_end")
            continue
        c = text[i]
        if c == '"':
            m = re.compile(r'"(?:[^"\\\n]|\\.)*"').match(text, i)
            if m is None:
                raise PTXSyntaxError(f"unterminated string at {_line_col(text, i)}")
            i = m.end()
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise PTXSyntaxError(f"block opened at {_line_col(text, open_pos)} is never closed")


# ---------------------------------------------------------------------------------------------
# Instructions


@dataclasses.dataclass(frozen=True)
class Instruction:
    """An instruction statement, split: ``[@[!]guard] opcode operand, operand, ...;``."""

    guard: str | None     # "%p1" or "!%p1"
    opcode: str           # "atom.global.cas.b64"
    operands: tuple[str, ...]

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def modifiers(self) -> tuple[str, ...]:
        return tuple(self.opcode.split(".")[1:])

    @property
    def call_target(self) -> str | None:
        """For ``call [(ret),] target, (args)``: the target (a symbol, or a register for
        an indirect call); None for other instructions."""
        if self.base != "call":
            return None
        ops = [o for o in self.operands if not o.startswith("(")]
        return ops[0] if ops else None


def parse_instruction(stmt: Statement, source: str) -> Instruction:
    toks = list(stmt.tokens)
    if toks and toks[-1].text == ";":
        toks.pop()
    guard = None
    if toks and toks[0].text == "@":
        if len(toks) > 2 and toks[1].text == "!":
            guard = "!" + toks[2].text
            toks = toks[3:]
        else:
            guard = toks[1].text
            toks = toks[2:]
    if not toks:
        raise PTXSyntaxError(f"empty instruction: {stmt.text(source)!r}")
    opcode, k = opcode_at(toks, 0)
    operands: list[str] = []
    if len(toks) > k:
        body = source[toks[k].start:toks[-1].end]
        operands = _split_operands(body)
    return Instruction(guard, opcode, tuple(operands))


def opcode_at(toks: Sequence[Token], k: int) -> tuple[str, int]:
    """The opcode starting at token ``k`` and the index of the token after it. ptxas
    accepts blanks and comments between an opcode's parts (``redux .sync .add.u32``), which
    tokenize as an identifier followed by directive tokens; no operand starts with one."""
    parts = [toks[k].text]
    k += 1
    while k < len(toks) and toks[k].kind == "directive":
        parts.append(toks[k].text)
        k += 1
    return "".join(parts), k


def _split_operands(body: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in body:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur).strip()
    if last:
        out.append(last)
    return out


_REG_RE = re.compile(r"%[A-Za-z_$][A-Za-z0-9_$]*")


def registers_in(operand: str) -> list[str]:
    return _REG_RE.findall(operand)


# Opcodes whose first operand is not a destination register. (A first operand in [ ] is
# never one; mbarrier.arrive/test_wait/try_wait, multimem.ld_reduce and wgmma.mma_async
# write theirs, so they are not here: a missed definition would let a proof that needs a
# register's only definition pass.)
_NO_DEST = frozenset({"st", "red", "bar", "barrier", "bra", "brx", "call", "ret", "exit",
                      "prefetch", "prefetchu", "membar", "fence", "trap", "pmevent", "cp",
                      "tensormap", "stmatrix", "cvta"})


def destinations(ins: Instruction) -> list[str]:
    """Registers an instruction writes (first operand, with ``|`` pairs and vectors), for
    the opcodes that have a destination."""
    if ins.base in _NO_DEST or not ins.operands:
        if ins.base == "cvta" and ins.operands:
            return registers_in(ins.operands[0])
        return []
    first = ins.operands[0]
    if first.startswith("["):
        return []
    return registers_in(first)


# ---------------------------------------------------------------------------------------------
# Module structure


@dataclasses.dataclass(frozen=True)
class Param:
    """A ``.param`` (or ``.reg``) in a function prototype: ``.param .align 2 .b8 x[2]``."""

    name: str
    decl: str         # the declaration text without the name: ".param .align 2 .b8"
    array: int | None  # element count for ``name[N]``
    type: str         # ".b32", ".f32", ".b8"...
    space: str        # ".param" or ".reg"

    @property
    def size_bytes(self) -> int:
        width = int(re.sub(r"\D", "", self.type) or 0) // 8 if self.type != ".pred" else 1
        return width * (self.array or 1)

    def declare(self, new_name: str) -> str:
        arr = f"[{self.array}]" if self.array is not None else ""
        return f"{self.decl} {new_name}{arr}"


@dataclasses.dataclass
class Function:
    """A ``.func`` or ``.entry`` in a module."""

    name: str
    kind: str                   # ".func" or ".entry"
    linkage: tuple[str, ...]    # (".visible",), (".extern",), (".weak",), ()
    results: tuple[Param, ...]
    params: tuple[Param, ...]
    header: Statement           # the prototype statement (header or decl)
    body: tuple[int, int] | None  # statement indices [open, close] or None for a declaration

    @property
    def is_definition(self) -> bool:
        return self.body is not None

    def prototype(self, source: str) -> str:
        return " ".join(self.header.text(source).split())


@dataclasses.dataclass(frozen=True, eq=False)
class Body:
    """One function's body, analysed once (:meth:`Module.body`, memoised per module).

    Attributes:
        module, fn: the module and the function definition.
        statements: the body's statements (between its braces).
        parsed: each statement with its parsed instruction (None for other statements).
        defs: register -> the indices (into ``statements``) of the instructions writing it
            (:func:`destinations`); a register no instruction writes gives ``[]``.
        labels: label name -> its statement's index.
    """

    module: Module
    fn: Function
    statements: tuple[Statement, ...]
    parsed: tuple[tuple[Statement, Instruction | None], ...]
    defs: dict[str, list[int]]
    labels: dict[str, int]

    @classmethod
    def of(cls, module: Module, fn: Function) -> Body:
        statements = tuple(module.body_statements(fn))
        parsed = tuple((s, parse_instruction(s, module.text) if s.kind == "instruction"
                        else None) for s in statements)
        defs: dict[str, list[int]] = collections.defaultdict(list)
        for i, (_s, ins) in enumerate(parsed):
            if ins is not None:
                for r in destinations(ins):
                    defs[r].append(i)
        labels = {s.tokens[0].text: i for i, s in enumerate(statements) if s.kind == "label"}
        return cls(module, fn, statements, parsed, defs, labels)


class Module:
    """A parsed PTX module: text, statements, header directives and functions."""

    def __init__(self, text: str, name: str = "<ptx>"):
        if not isinstance(text, str):
            raise PTXSyntaxError(f"{name}: PTX must be text, got {type(text).__name__}")
        self.text = text
        self.name = name
        try:
            self.statements = split_statements(text)
        except PTXSyntaxError as e:
            raise PTXSyntaxError(f"{name}: malformed PTX: {e.message}") from None
        self.version: tuple[int, int] | None = None
        self.target: tuple[str, ...] = ()
        self.address_size: int | None = None
        self.functions: dict[str, Function] = {}
        self.function_order: list[Function] = []
        self._bodies: dict[int, Body] = {}
        self._parse_structure()

    # -- structure
    def _parse_structure(self):
        stmts = self.statements
        i = 0
        while i < len(stmts):
            s = stmts[i]
            if s.depth == 0 and s.kind == "directive":
                head = s.head
                args = [t.text for t in s.tokens[1:]]
                if head == ".version":
                    m = re.fullmatch(r"(\d+)\.(\d+)", "".join(args))
                    if not m:
                        raise PTXSyntaxError(f"{self.name}: bad .version {' '.join(args)!r}")
                    self.version = (int(m.group(1)), int(m.group(2)))
                elif head == ".target":
                    self.target = tuple(a for a in args if a != ",")
                elif head == ".address_size":
                    self.address_size = int(args[0])
            if s.kind in ("header", "decl") and s.depth == 0:
                body = None
                if s.kind == "header":
                    close = self._matching_close(i + 1)
                    body = (i + 1, close)
                fn = self._parse_prototype(s, body)
                if fn.name in self.functions and self.functions[fn.name].is_definition \
                        and fn.is_definition:
                    raise PTXSyntaxError(f"{self.name}: function {fn.name!r} defined twice")
                if fn.name not in self.functions or fn.is_definition:
                    self.functions[fn.name] = fn
                self.function_order.append(fn)
                if body is not None:
                    i = body[1]
            i += 1

    def _matching_close(self, open_index: int) -> int:
        stmts = self.statements
        if open_index >= len(stmts) or stmts[open_index].kind != "open":
            raise PTXSyntaxError(f"{self.name}: function prototype without a body")
        d = stmts[open_index].depth
        for j in range(open_index + 1, len(stmts)):
            if stmts[j].kind == "close" and stmts[j].depth == d:
                return j
        raise PTXSyntaxError(f"{self.name}: function body never closed")

    def _parse_prototype(self, s: Statement, body) -> Function:
        toks = list(s.tokens)
        if toks and toks[-1].text == ";":
            toks.pop()
        linkage = []
        k = 0
        while k < len(toks) and toks[k].text in (".visible", ".extern", ".weak", ".common",
                                                 ".hidden"):
            linkage.append(toks[k].text)
            k += 1
        if k >= len(toks) or toks[k].text not in (".func", ".entry"):
            raise PTXSyntaxError(f"{self.name}: cannot read prototype "
                                 f"{s.text(self.text)[:120]!r}")
        kind = toks[k].text
        k += 1
        results: tuple[Param, ...] = ()
        if k < len(toks) and toks[k].text == "(":
            j = _close_paren(toks, k)
            results = self._parse_params(toks[k + 1:j])
            k = j + 1
        if k >= len(toks) or toks[k].kind != "ident":
            raise PTXSyntaxError(f"{self.name}: function name missing in prototype "
                                 f"{s.text(self.text)[:120]!r}")
        name = toks[k].text
        k += 1
        params: tuple[Param, ...] = ()
        if k < len(toks) and toks[k].text == "(":
            j = _close_paren(toks, k)
            params = self._parse_params(toks[k + 1:j])
        return Function(name, kind, tuple(linkage), results, params, s, body)

    def _parse_params(self, toks: Sequence[Token]) -> tuple[Param, ...]:
        groups: list[list[Token]] = []
        cur: list[Token] = []
        for t in toks:
            if t.text == ",":
                groups.append(cur)
                cur = []
            else:
                cur.append(t)
        if cur:
            groups.append(cur)
        out = []
        for g in groups:
            if not g:
                continue
            array = None
            if len(g) >= 4 and g[-1].text == "]" and g[-3].text == "[":
                array = int(g[-2].text, 0)
                g = g[:-3]
            elif len(g) >= 3 and g[-1].text == "]" and g[-2].text == "[":
                array = 0
                g = g[:-2]
            name = g[-1].text
            decl = " ".join(t.text for t in g[:-1])
            types = [t.text for t in g[:-1] if re.fullmatch(r"\.(b|u|s|f)\d+|\.pred", t.text)]
            space = g[0].text if g and g[0].text in (".param", ".reg") else ".param"
            out.append(Param(name, decl, array, types[-1] if types else "", space))
        return tuple(out)

    # -- queries
    def entries(self) -> list[Function]:
        return [f for f in self.functions.values() if f.kind == ".entry" and f.is_definition]

    def body_statements(self, fn: Function) -> list[Statement]:
        assert fn.body is not None
        a, b = fn.body
        return self.statements[a + 1:b]

    def body(self, fn: Function) -> Body:
        """``fn``'s body analysed (:class:`Body`), once per module and function."""
        hit = self._bodies.get(id(fn))
        if hit is None or hit.fn is not fn:
            hit = self._bodies[id(fn)] = Body.of(self, fn)
        return hit

    def module_symbols(self) -> dict[str, str]:
        """Names defined at module level (functions and variables) -> kind."""
        out = {}
        for s in self.statements:
            if s.depth != 0:
                continue
            if s.kind in ("header", "decl"):
                continue
            if s.kind == "directive" and s.head in VARIABLE_HEADS:
                name = declared_variable_name(s)
                if name:
                    out[name] = "variable"
        for f in self.functions.values():
            out[f.name] = "function"
        return out


def _close_paren(toks: Sequence[Token], k: int) -> int:
    depth = 0
    for j in range(k, len(toks)):
        if toks[j].text == "(":
            depth += 1
        elif toks[j].text == ")":
            depth -= 1
            if depth == 0:
                return j
    raise PTXSyntaxError("unbalanced parentheses in prototype")


#: The directives that open a module-level variable (``.global .align 8 .b8 x[8];``,
#: ``.weak .global ...``, ``.extern .shared ...``).
VARIABLE_HEADS = (".global", ".shared", ".const", ".local", ".visible", ".extern", ".weak",
                  ".common")


def declared_variable_name(s: Statement) -> str | None:
    """Name declared by a module-level variable directive (``.global .align 8 .b8 x[8];``)."""
    last = None
    for t in s.tokens:
        if t.text in ("=", "[", ";"):
            break
        if t.kind == "ident":
            last = t.text
    return last


def arch_words(target: str) -> str:
    """A PTX target as users name the architecture: ``"sm_90 (PTX target sm_90a)"`` for
    tileiras's arch-specific ``sm_90a``, ``"sm_80"`` as is."""
    base = target.rstrip("af")
    return target if base == target else f"{base} (PTX target {target})"


def apply_edits(text: str, edits: Sequence[tuple[int, int, str]]) -> str:
    """Replace each ``[start, end)`` span with new text; spans must not overlap."""
    out = []
    pos = 0
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        if start < pos:
            raise ValueError("overlapping PTX edits")
        out.append(text[pos:start])
        out.append(new)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def opcode_head(s: Statement) -> str:
    """The first word of an instruction's opcode (``"call"`` for ``@%p1 call.uni``)."""
    toks = s.tokens
    k = 0
    if toks and toks[0].text == "@":
        k = 3 if len(toks) > 2 and toks[1].text == "!" else 2
    return toks[k].text if k < len(toks) else ""
