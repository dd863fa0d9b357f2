"""PTX functions decoded once into Python: each basic block becomes one Python function
``block(r, t) -> next block`` (``r`` the frame's registers, a list of unsigned ints; ``t`` the
thread), generated as source text and compiled with ``exec``.

Statements come from splice's own parser (:mod:`splice.ptx`). Registers are resolved
lexically (an inlined body's ``{ .reg .f32 %f<5>; ... }`` shadows the caller's ``%f1``) to
slots of the frame's list. A block ends at a label, a branch, a call, a return, and at every
instruction that must wait for other threads (barriers, warp collectives): it returns the
next block's index, or a negative code with the thread's event set (see
:mod:`.machine`). An instruction the executor does not implement compiles to a ``raise``:
the kernel fails when it reaches it, never skips it.
"""

from __future__ import annotations

import dataclasses
import re

from splice.ptxtools.ptx import Instruction, Module, Statement, parse_instruction

from . import ops, runtime
from .memory import ExecError
from .values import TYPES, imm_value, is_imm

# PTX directives inside a body that carry nothing to execute
_QUIET_DIRECTIVES = {".loc", ".loc_intermediate", ".pragma", ".file", ".section", ".maxnreg",
                     ".reqntid", ".maxntid", ".minnctapersm", ".noreturn", ".abi_preserve",
                     ".abi_preserve_control"}

_DECL_RE = re.compile(r"^(%[A-Za-z_$][\w$]*)<(\d+)>$")

#: What a register holds before it is written (an f32/f64 NaN with a payload).
GARBAGE = 0x7ff8dead7fc0dead


@dataclasses.dataclass
class Func:
    """A decoded function.

    Attributes:
        name: the PTX name.
        blocks: block index -> Python function ``(r, t) -> int``.
        nslots: registers (and ``.param``/depot slots) of one frame.
        params / results: slots of the ``.func``'s parameters and results, in order, each
            with its size in bytes (their values are ``bytearray``s).
        buffers: slots that get a fresh ``bytearray`` of that size in each frame (scoped
            ``.param`` variables).
        depots: ``.local`` variables of the frame: (slot, size, align).
        source: block index -> the PTX line of its first instruction (for errors).
        is_entry: a ``.entry``.
        init: the registers of a new frame: every register holds :data:`GARBAGE` (its low
            bits) until written, predicates 0. LLVM reads registers that are dead on a path
            (a load's value merged where the load did not run), so reading one is no error;
            a value computed from one shows as NaN-like garbage in the results.
    """

    name: str
    blocks: list
    nslots: int
    params: list[tuple[int, int]]
    results: list[tuple[int, int]]
    buffers: list[tuple[int, int]]
    depots: list[tuple[int, int, int]]
    source: list[str]
    is_entry: bool
    init: list


@dataclasses.dataclass
class Var:
    """A module- or function-level variable: space, size, alignment, initial bytes."""

    name: str
    space: str          # ".global", ".const", ".shared", ".local"
    size: int
    align: int
    init: bytes | None
    extern: bool = False


class Program:
    """A PTX module ready to execute: its variables, and its functions decoded on first
    use."""

    def __init__(self, text: str):
        self.module = Module(text, "<executed PTX>")
        self.text = text
        self.vars: dict[str, Var] = {}
        for s in self.module.statements:
            if s.depth == 0 and s.kind == "directive":
                v = parse_var(s, text)
                if v is not None:
                    self.vars[v.name] = v
        self.fn_shared: dict[str, Var] = {}      # function-level .shared, also static
        self._funcs: dict[str, Func] = {}
        for fn in self.module.functions.values():
            if fn.is_definition:
                for st in self.module.body_statements(fn):
                    if st.kind == "directive" and st.head == ".shared":
                        v = parse_var(st, text)
                        if v is not None:
                            self.fn_shared[v.name] = v
        self.shared_layout, self.static_shared = self._layout_shared()

    def _layout_shared(self) -> tuple[dict[str, int], int]:
        off = 0
        layout = {}
        for v in list(self.vars.values()) + list(self.fn_shared.values()):
            if v.space != ".shared" or v.extern:
                continue
            off = (off + v.align - 1) // v.align * v.align
            layout[v.name] = off
            off += v.size
        for v in self.vars.values():
            if v.space == ".shared" and v.extern:
                layout[v.name] = (off + 15) // 16 * 16
        return layout, off

    def func(self, name: str) -> Func:
        f = self._funcs.get(name)
        if f is None:
            fn = self.module.functions.get(name)
            if fn is None or not fn.is_definition:
                raise ExecError(f"call of {name!r}, which the module does not define")
            f = _Decoder(self, fn).decode()
            self._funcs[name] = f
        return f


def parse_var(s: Statement, text: str) -> Var | None:
    """A variable directive (``.global .align 4 .b8 x[16] = {...};``), or None."""
    toks = [t.text for t in s.tokens]
    space = next((t for t in toks if t in (".global", ".const", ".shared", ".local")), None)
    if space is None or ".func" in toks or ".entry" in toks:
        return None
    extern = ".extern" in toks
    align = 0
    ty = None
    name = None
    count = 1
    init = None
    i = 0
    while i < len(toks):
        tk = toks[i]
        if tk == ".align":
            align = int(toks[i + 1], 0)
            i += 2
            continue
        if tk.startswith(".") and tk[1:] in TYPES:
            ty = tk[1:]
        elif tk == "[":
            if toks[i + 1] == "]":
                count = 0
                i += 2
                continue
            count *= int(toks[i + 1], 0)
            i += 3
            continue
        elif tk == "=":
            raw = s.text(text)
            init = _initialiser(raw[raw.index("=") + 1:], ty or "b8", count)
            break
        elif tk.startswith("%") or (not tk.startswith(".") and tk not in (";", "{", "}", ",")
                                     and name is None):
            name = tk
        i += 1
    if name is None or ty is None:
        return None
    width = max(TYPES[ty][0] // 8, 1)
    return Var(name, space, width * count, align or width, init, extern)


def _initialiser(raw: str, ty: str, count: int) -> bytes:
    width = max(TYPES[ty][0] // 8, 1)
    vals = [v.strip() for v in re.sub(r"[{};]", " ", raw).split(",") if v.strip()]
    if any(not is_imm(v) for v in vals):
        raise ExecError(f"an initialiser the executor cannot read: {raw.strip()[:80]!r} "
                        f"(addresses of symbols, generic() are not modelled)")
    out = bytearray()
    for v in vals:
        out += (imm_value(v) & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    out += bytes(width * count - len(out)) if len(out) < width * count else b""
    return bytes(out)


# ---------------------------------------------------------------------------------------------


class _Scope:
    def __init__(self, parent):
        self.parent = parent
        self.names: dict[str, int] = {}


class _Decoder:
    """One function: scopes and slots, then blocks of generated Python."""

    def __init__(self, prog: Program, fn):
        self.prog = prog
        self.fn = fn
        self.text = prog.text
        self.widths: list[int] = []
        self.params: list[tuple[int, int]] = []
        self.results: list[tuple[int, int]] = []
        self.buffers: list[tuple[int, int]] = []
        self.depots: list[tuple[int, int, int]] = []
        self.kparams: dict[str, int] = {}        # entry parameter -> offset in the buffer
        self.labels: dict[str, int] = {}
        self.branch_tables: dict[str, list[str]] = {}   # a .branchtargets list's labels

    def slot(self, scope: _Scope, name: str, width: int) -> int:
        k = len(self.widths)
        self.widths.append(width)
        scope.names[name] = k
        return k

    def decode(self) -> Func:
        fn = self.fn
        root = _Scope(None)
        if fn.kind == ".entry":
            self.kparams = entry_param_offsets(fn)[0]
        else:
            for p in fn.params:
                self.params.append((self.slot(root, p.name, 0), p.size_bytes))
            for p in fn.results:
                self.results.append((self.slot(root, p.name, 0), p.size_bytes))
        # pass 1: scopes and declarations; the instruction list with their scopes
        items: list[tuple[str, object, _Scope, Statement]] = []
        scope = root
        for st in self.prog.module.body_statements(fn):
            if st.kind == "open":
                scope = _Scope(scope)
            elif st.kind == "close":
                scope = scope.parent
            elif st.kind == "label":
                items.append(("label", st.tokens[0].text, scope, st))
            elif st.kind == "directive" and st.head == ".branchtargets" and items and \
                    items[-1][0] == "label":
                name = items.pop()[1]
                assert isinstance(name, str)
                self.branch_tables[name] = [t.text for t in st.tokens[1:]
                                            if t.kind == "ident"]
            elif st.kind == "directive":
                self._declare(st, scope)
            elif st.kind == "instruction":
                items.append(("ins", parse_instruction(st, self.text), scope, st))
        # pass 2: blocks
        blocks_src: list[list[str]] = [[]]
        source: list[str] = [self._where(items[0][3]) if items else fn.name]
        for kind, what, sc, st in items:
            if kind == "label":
                if blocks_src[-1]:
                    blocks_src.append([])
                    source.append(self._where(st))
                self.labels[what] = len(blocks_src) - 1
                continue
            ins = what
            assert isinstance(ins, Instruction)
            lines, ends = ops.Gen(self, sc, ins, st).generate()
            if not blocks_src[-1]:
                source[-1] = self._where(st)
            blocks_src[-1].extend(lines)
            if ends:
                blocks_src.append([])
                source.append(self._where(st))
        # close: each block falls through to the next; the last returns
        nblocks = len(blocks_src)
        funcs = []
        env = runtime.runtime_env()
        for i, lines in enumerate(blocks_src):
            body = [ln.replace("@NEXT@", str(i + 1)) for ln in lines]
            body = [self._labels_resolved(ln) for ln in body]
            if i + 1 < nblocks:
                body.append(f"return {i + 1}")
            else:
                body.append("return t.ret()")
            src = f"def _b{i}(r, t):\n" + "".join(f"    {ln}\n" for ln in body)
            ns: dict = {}
            try:
                exec(compile(src, f"<ptx {fn.name} block {i}: {source[i]}>", "exec"), env, ns)
            except SyntaxError as e:
                raise AssertionError(f"executor generated bad Python for {fn.name} "
                                     f"block {i}:\n{src}") from e
            funcs.append(ns[f"_b{i}"])
        init = [GARBAGE & ((1 << w) - 1) if w > 1 else 0 for w in self.widths]
        return Func(fn.name, funcs, len(self.widths), self.params, self.results,
                    self.buffers, self.depots, source, fn.kind == ".entry", init)

    def _labels_resolved(self, line: str) -> str:
        def sub(m):
            name = m.group(1)
            if name not in self.labels:
                raise ExecError(f"{self.fn.name}: branch to unknown label {name!r}")
            return str(self.labels[name])
        return re.sub(r"@L\{([^}]*)\}", sub, line)

    def _where(self, st: Statement) -> str:
        line = self.text.count("\n", 0, st.start) + 1
        return f"line {line}: {st.text(self.text).strip()[:100]}"

    def _msg(self, st: Statement, why: str) -> str:
        return f"{self.fn.name}, PTX {self._where(st)}: {why}"

    def _declare(self, st: Statement, scope: _Scope) -> None:
        head = st.head
        toks = [t.text for t in st.tokens]
        if head == ".reg":
            ty = next((t[1:] for t in toks[1:] if t.startswith(".") and t[1:] in TYPES), None)
            if ty is None:
                raise ExecError(f"{self.fn.name}: cannot read {st.text(self.text)!r}")
            width = TYPES[ty][0]
            names = st.text(self.text).rstrip(";").split(f".{ty}", 1)[1]
            for nm in names.split(","):
                nm = nm.strip()
                m = _DECL_RE.match(nm)
                if m:
                    for j in range(int(m.group(2))):
                        self.slot(scope, f"{m.group(1)}{j}", width)
                elif nm:
                    self.slot(scope, nm, width)
        elif head == ".param":
            v = parse_var_param(st, self.text)
            self.buffers.append((self.slot(scope, v[0], 0), v[1]))
        elif head == ".local":
            v = parse_var(st, self.text)
            if v is not None:
                self.depots.append((self.slot(scope, v.name, 64), v.size, v.align))
        elif head == ".shared":
            pass     # laid out with the module's (Program.fn_shared)
        elif head in _QUIET_DIRECTIVES or head.startswith(".loc"):
            pass
        else:
            raise ExecError(f"{self.fn.name}: unsupported directive {st.text(self.text)!r}")

    # -- used by ops.Gen
    def resolve(self, scope: _Scope, name: str) -> int | None:
        s: _Scope | None = scope
        while s is not None:
            k = s.names.get(name)
            if k is not None:
                return k
            s = s.parent
        return None


def parse_var_param(st: Statement, text: str) -> tuple[str, int]:
    toks = [t.text for t in st.tokens]
    width = 0
    count = 1
    name = ""
    i = 0
    while i < len(toks):
        tk = toks[i]
        if tk == ".align":
            i += 2
            continue
        if tk.startswith(".") and tk[1:] in TYPES:
            width = max(TYPES[tk[1:]][0] // 8, 1)
        elif tk == "[":
            count = int(toks[i + 1], 0)
            i += 3
            continue
        elif not tk.startswith(".") and tk != ";":
            name = tk
        i += 1
    return name, width * count


def entry_param_offsets(fn) -> tuple[dict[str, int], int]:
    """Offsets of an entry's parameters in its parameter buffer (each aligned to its
    ``.align``, or to its size; a ``.ptr ... .align N`` is the pointee's alignment), and
    the buffer's size."""
    offs = {}
    off = 0
    for p in fn.params:
        toks = p.decl.split()
        align = 0
        if ".align" in toks and ".ptr" not in toks:
            align = int(toks[toks.index(".align") + 1])
        width = max(TYPES.get(p.type.lstrip("."), (8, ""))[0] // 8, 1)
        align = align or width
        off = (off + align - 1) // align * align
        offs[p.name] = off
        off += p.size_bytes
    return offs, off
