"""Instructions to Python: :class:`Gen` turns one PTX instruction into lines of Python (the
block's source), calling the helpers of :mod:`.runtime` for what is not a one-liner.
Semantics follow the PTX ISA 9.x chapter "Instruction Set", instruction by instruction; an
instruction not here becomes a ``raise`` of :class:`~.memory.ExecError` when it executes.
"""

from __future__ import annotations

from . import values as V
from .memory import LOCAL_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from .modifiers import unknown as unknown_modifiers
from .runtime import mask
from .values import TYPES, imm_value, is_imm

SPECIAL = {
    "%tid.x": "t.tid[0]", "%tid.y": "t.tid[1]", "%tid.z": "t.tid[2]",
    "%ntid.x": "t.cta.ntid[0]", "%ntid.y": "t.cta.ntid[1]", "%ntid.z": "t.cta.ntid[2]",
    "%ctaid.x": "t.cta.ctaid[0]", "%ctaid.y": "t.cta.ctaid[1]", "%ctaid.z": "t.cta.ctaid[2]",
    "%nctaid.x": "t.L.grid[0]", "%nctaid.y": "t.L.grid[1]", "%nctaid.z": "t.L.grid[2]",
    "%laneid": "t.lane", "%warpid": "t.warp", "%nwarpid": "t.cta.nwarps",
    "%lanemask_eq": "(1 << t.lane)", "%lanemask_lt": "((1 << t.lane) - 1)",
    "%lanemask_le": "((2 << t.lane) - 1)", "%lanemask_gt": "(0xffffffff ^ ((2 << t.lane) - 1))",
    "%lanemask_ge": "(0xffffffff ^ ((1 << t.lane) - 1))",
    "%smid": "0", "%nsmid": "132", "%gridid": "0", "%clock": "(t.clock() & 0xffffffff)",
    "%clock_hi": "0", "%clock64": "t.clock()", "%globaltimer": "t.clock()",
    "%globaltimer_lo": "(t.clock() & 0xffffffff)", "%globaltimer_hi": "0",
    "%dynamic_smem_size": "t.L.dynamic_smem", "%total_smem_size": "t.cta.smem_size",
    "%cluster_ctarank": "0", "%cluster_nctarank": "1", "%is_explicit_cluster": "0",
    "%cluster_ctaid.x": "0", "%cluster_ctaid.y": "0", "%cluster_ctaid.z": "0",
    "%cluster_nctaid.x": "1", "%cluster_nctaid.y": "1", "%cluster_nctaid.z": "1",
    "%clusterid.x": "t.cta.ctaid[0]", "%clusterid.y": "t.cta.ctaid[1]",
    "%clusterid.z": "t.cta.ctaid[2]", "%nclusterid.x": "t.L.grid[0]",
    "%nclusterid.y": "t.L.grid[1]", "%nclusterid.z": "t.L.grid[2]",
}

# Out of scope: they need the tensor memory accelerator, async proxies, warpgroup or warp
# MMA, or other CTAs of a cluster (opcode prefix -> what).
OUT_OF_SCOPE = {
    "wgmma": "warpgroup MMA", "mbarrier": "mbarriers",
    "cp.async.bulk": "bulk asynchronous copies (TMA)", "cp.async.mbarrier": "mbarriers",
    "cp.reduce.async": "bulk asynchronous reductions (TMA)",
    "setmaxnreg": "register reallocation (warp specialisation)",
    "tcgen05": "tensor memory", "tensormap": "tensor maps", "wmma": "wmma fragments",
    "movmatrix": "movmatrix", "multimem": "multimem", "barrier.cluster": "cluster barriers",
    "clusterlaunchcontrol": "cluster launch control", "st.async": "st.async",
    "red.async": "red.async", "prefetch.tensormap": "tensor maps",
}


class Unsupported(Exception):
    """An instruction the executor does not implement (compiled into a raise)."""


def _unsup(why: str):
    raise Unsupported(why)


class Gen:
    """Python lines for one instruction; ``generate()`` -> (lines, ends_block)."""

    def __init__(self, dec, scope, ins, st):
        self.dec = dec
        self.scope = scope
        self.ins = ins
        self.st = st
        self.mods = ins.modifiers
        self.base = ins.base
        self.ops = list(ins.operands)

    # -- operands
    def slot(self, name: str) -> int:
        k = self.dec.resolve(self.scope, name)
        if k is None:
            _unsup(f"unknown register or name {name!r}")
        return k

    def width(self, name: str) -> int:
        return self.dec.widths[self.slot(name)]

    def src(self, op: str, bits: int) -> str:
        """Expression for operand ``op`` as an unsigned ``bits``-wide int."""
        op = op.strip()
        if op.startswith("!"):
            return f"(1 - {self.src(op[1:], 1)})"
        if op.startswith("%") or self._is_reg(op):
            if op in SPECIAL:
                return SPECIAL[op] if bits >= 32 else f"({SPECIAL[op]} & {mask(bits)})"
            k = self.dec.resolve(self.scope, op)
            if k is None:
                if op.startswith("%envreg") or op.startswith("%pm") or \
                        op.startswith("%reserved_smem"):
                    return "0"
                _unsup(f"unknown register {op!r}")
            w = self.dec.widths[k]
            return f"r[{k}]" if w <= bits else f"(r[{k}] & {mask(bits)})"
        if is_imm(op):
            return str(imm_value(op) & mask(bits))
        if _is_decimal_float(op):
            return str(V.f2b(float(op)) if bits == 32 else V.d2b(float(op)))
        name, plus, off = op.replace(" ", "").partition("+")
        if plus and is_imm(off):                 # ``mov.u64 %rd, var+imm`` (PTX ISA, mov)
            return self.symbol_address(name, imm_value(off))
        return self.symbol_address(op)

    def _is_reg(self, name: str) -> bool:
        """A register named without ``%`` (``.reg .f32 r0;`` in inline asm), or a ``.local``
        depot (whose slot holds its address)."""
        k = self.dec.resolve(self.scope, name)
        return k is not None and self.dec.widths[k] > 0

    def symbol_address(self, name: str, off: int = 0) -> str:
        """``mov.u64 %rd, name``: the address of a variable (in its own state space)."""
        dec = self.dec
        plus = f" + {off}" if off else ""
        if name in dec.kparams:
            return f"(t.kparams + {dec.kparams[name] + off})"
        k = dec.resolve(self.scope, name)
        if k is not None:
            if any(s == k for s, _, _ in dec.depots):
                return f"(r[{k}]{plus})"
            _unsup(f"the address of parameter {name!r}")
        prog = dec.prog
        if name in prog.shared_layout:
            return str(prog.shared_layout[name] + off)
        if name in prog.vars:
            return f"(t.sym[{name!r}]{plus})"
        if name in prog.module.functions:
            _unsup(f"the address of function {name!r} (indirect calls)")
        _unsup(f"unknown symbol {name!r}")

    def assign(self, op: str, expr: str, bits: int, signed: bool = False) -> str:
        op = op.strip()
        if op == "_":
            return f"_ = {expr}"
        k = self.slot(op)
        w = self.dec.widths[k]
        if w > bits and signed:
            return f"r[{k}] = SX({expr}, {bits}) & {mask(w)}"
        if w < bits:
            return f"r[{k}] = ({expr}) & {mask(w)}"
        return f"r[{k}] = {expr}"

    def vector(self, op: str) -> list[str]:
        op = op.strip()
        if op.startswith("{"):
            return [x.strip() for x in op[1:-1].split(",")]
        return [op]

    def address(self, op: str, space: str) -> str:
        """Expression of a ``[...]`` operand's address."""
        inner = op.strip()[1:-1].strip()
        base, off = inner, 0
        for sep in ("+", "-"):
            j = inner.rfind(sep)
            if j > 0 and is_imm(inner[j + 1:].strip().lstrip("-")):
                base = inner[:j].strip()
                off = imm_value(inner[j + 1:].strip())
                off = -off if sep == "-" else off
                break
        if base.startswith("%") or self._is_reg(base):
            return f"({self.src(base, 64)} + {off})" if off else self.src(base, 64)
        if is_imm(base):
            return str(imm_value(base) + off)
        return self.symbol_address(base, off)

    def aligned(self, addr: str, n: int | str) -> str:
        """``addr`` checked to be a multiple of ``n`` bytes when the access runs
        (:func:`.runtime.AL`: a misaligned access is an error naming this instruction)."""
        if n == 1:
            return addr
        return f"AL({addr}, {n}, {self.dec._msg(self.st, self.ins.opcode)!r})"

    def param_buffer(self, op: str):
        """(slot, offset) when ``[name+off]`` names a ``.param`` of this frame, else None."""
        inner = op.strip()[1:-1].strip()
        name, _, off = inner.partition("+")
        k = self.dec.resolve(self.scope, name.strip())
        if k is None or self.dec.widths[k] != 0:     # a register (or a depot's address)
            return None
        return k, imm_value(off.strip()) if off.strip() else 0

    # -- dispatch
    def generate(self) -> tuple[list[str], bool]:
        """The instruction's lines (under its guard) and whether it ends its block; one the
        executor does not implement becomes a ``raise`` under the same guard."""
        ins = self.ins
        try:
            lines, ends = self._lines()
        except Unsupported as e:
            lines, ends = [f"raise ExecError({self.dec._msg(self.st, str(e))!r})"], False
        if ins.guard:
            neg = ins.guard.startswith("!")
            g = self.src(ins.guard.lstrip("!"), 1)
            lines = [f"if {'not ' if neg else ''}{g}:"] + ["    " + ln for ln in lines] \
                if lines else []
        return lines, ends

    def _lines(self) -> tuple[list[str], bool]:
        ins = self.ins
        for prefix, why in OUT_OF_SCOPE.items():
            if ins.opcode == prefix or ins.opcode.startswith(prefix + "."):
                _unsup(f"{ins.opcode} is out of the executor's scope ({why})")
        handler = getattr(self, "op_" + self.base, None)
        if handler is None:
            _unsup(f"unknown instruction {ins.opcode!r}")
        odd = unknown_modifiers(self.base, self.mods, TYPES)
        if odd:
            _unsup(f"{ins.opcode}: modifier{'s' if len(odd) > 1 else ''} "
                   f"{', '.join('.' + m for m in odd)} the executor does not model "
                   f"(support.ptx_exec.modifiers.KNOWN)")
        out = handler()
        return out if isinstance(out, tuple) else (out, False)
    # -- type helpers
    def ty(self, k: int = -1) -> str:
        tys = [m for m in self.mods if m in TYPES]
        if not tys:
            _unsup(f"no type in {self.ins.opcode!r}")
        return tys[k]

    def tyinfo(self, k: int = -1) -> tuple[str, int, str]:
        t = self.ty(k)
        bits, kind = TYPES[t]
        return t, bits, kind

    def rounding(self, default: str = "rn") -> str:
        for m in self.mods:
            if m in ("rn", "rz", "rm", "rp", "rna"):
                return m
        return default

    # ------------------------------------------------------------------------------------------
    # Integer and bit arithmetic

    def _int_binary(self, expr_u, expr_s=None):
        t, bits, kind = self.tyinfo()
        d, a, b = self.ops[:3]
        A, B = self.src(a, bits), self.src(b, bits)
        if kind == "s" and expr_s is not None:
            e = expr_s(f"SX({A}, {bits})", f"SX({B}, {bits})")
        else:
            e = expr_u(A, B)
        return [self.assign(d, f"({e}) & {mask(bits)}", bits, kind == "s")]

    def op_add(self):
        t, bits, kind = self.tyinfo()
        if kind == "f":
            return self._float_binary("add")
        return self._carry_op("add")

    def op_sub(self):
        t, bits, kind = self.tyinfo()
        if kind == "f":
            return self._float_binary("sub")
        return self._carry_op("sub")

    def op_addc(self):
        return self._carry_op("add", carry_in=True)

    def op_subc(self):
        return self._carry_op("sub", carry_in=True)

    def _carry_op(self, op: str, carry_in: bool = False):
        t, bits, kind = self.tyinfo()
        d, a, b = self.ops[:3]
        A, B = self.src(a, bits), self.src(b, bits)
        cin = " + t.cc" if carry_in and op == "add" else (" - t.cc" if carry_in else "")
        if "sat" in self.mods:
            e = f"SAT_S(SX({A}, {bits}) {'+' if op == 'add' else '-'} SX({B}, {bits}), {bits})"
            return [self.assign(d, f"{e} & {mask(bits)}", bits)]
        sign = "+" if op == "add" else "-"
        lines = [f"_v = {A} {sign} {B}{cin}"]
        if "cc" in self.mods:
            lines.append(f"t.cc = 1 if (_v >> {bits}) & 1 or _v < 0 else 0")
        lines.append(self.assign(d, f"_v & {mask(bits)}", bits, kind == "s"))
        return lines

    def op_mul(self):
        t, bits, kind = self.tyinfo()
        if kind == "f":
            return self._float_binary("mul")
        return self._mul_like(self.ops[0], self.ops[1], self.ops[2], None)

    def op_mad(self):
        t, bits, kind = self.tyinfo()
        if kind == "f":
            return self._fma()
        return self._mul_like(*self.ops[:4])

    def op_madc(self):
        return self._mul_like(*self.ops[:4], carry_in=True)

    def _mul_like(self, d, a, b, c, carry_in=False):
        t, bits, kind = self.tyinfo()
        A, B = self.src(a, bits), self.src(b, bits)
        if kind == "s":
            A, B = f"SX({A}, {bits})", f"SX({B}, {bits})"
        p = f"({A} * {B})"
        part = next((m for m in self.mods if m in ("lo", "hi", "wide")), "lo")
        outbits = 2 * bits if part == "wide" else bits
        if part == "hi":
            p = f"({p} >> {bits})"
        if c is not None:
            C = self.src(c, outbits)
            if kind == "s":
                C = f"SX({C}, {outbits})"
            p = f"({p} + {C}{' + t.cc' if carry_in else ''})"
        lines = []
        if "sat" in self.mods:
            return [self.assign(d, f"SAT_S({p}, {outbits}) & {mask(outbits)}", outbits)]
        lines.append(f"_v = {p}")
        if "cc" in self.mods:
            lines.append(f"t.cc = (_v >> {outbits}) & 1")
        lines.append(self.assign(d, f"_v & {mask(outbits)}", outbits, kind == "s"))
        return lines

    def op_mul24(self):
        t, bits, kind = self.tyinfo()
        d, a, b = self.ops[:3]
        A, B = f"SX({self.src(a, 24)}, 24)" if kind == "s" else self.src(a, 24), \
            f"SX({self.src(b, 24)}, 24)" if kind == "s" else self.src(b, 24)
        sh = 16 if "hi" in self.mods else 0
        return [self.assign(d, f"(({A} * {B}) >> {sh}) & {mask(32)}", 32)]

    def op_mad24(self):
        t, bits, kind = self.tyinfo()
        d, a, b, c = self.ops[:4]
        sx = (lambda e: f"SX({e}, 24)") if kind == "s" else (lambda e: e)
        A, B = sx(self.src(a, 24)), sx(self.src(b, 24))
        sh = 16 if "hi" in self.mods else 0
        return [self.assign(d, f"((({A} * {B}) >> {sh}) + {self.src(c, 32)}) & {mask(32)}", 32)]

    def op_div(self):
        t, bits, kind = self.tyinfo()
        if kind == "f":
            return self._float_div()
        return self._int_binary(lambda a, b: f"IDIV_U({a}, {b}, {bits})",
                                lambda a, b: f"IDIV_S({a}, {b}, {bits})")

    def op_rem(self):
        t, bits, kind = self.tyinfo()
        return self._int_binary(lambda a, b: f"IREM_U({a}, {b})",
                                lambda a, b: f"IREM_S({a}, {b})")

    def op_sad(self):
        t, bits, kind = self.tyinfo()
        d, a, b, c = self.ops[:4]
        sx = (lambda e: f"SX({e}, {bits})") if kind == "s" else (lambda e: e)
        A, B = sx(self.src(a, bits)), sx(self.src(b, bits))
        return [self.assign(d, f"(abs({A} - {B}) + {self.src(c, bits)}) & {mask(bits)}", bits)]

    def op_abs(self):
        t, bits, kind = self.tyinfo()
        d, a = self.ops[:2]
        if kind == "f":
            return self._float_unary_bits("abs")
        return [self.assign(d, f"abs(SX({self.src(a, bits)}, {bits})) & {mask(bits)}", bits,
                            True)]

    def op_neg(self):
        t, bits, kind = self.tyinfo()
        d, a = self.ops[:2]
        if kind == "f":
            return self._float_unary_bits("neg")
        return [self.assign(d, f"(-{self.src(a, bits)}) & {mask(bits)}", bits, kind == "s")]

    def op_min(self):
        return self._minmax("min")

    def op_max(self):
        return self._minmax("max")

    def _minmax(self, op):
        t, bits, kind = self.tyinfo()
        if t in ("f32", "f64", "f16", "bf16", "f16x2", "bf16x2"):
            return self._float_minmax(op)
        if t in ("s16x2", "u16x2"):
            _unsup(f"{self.ins.opcode}")
        fn = "min" if op == "min" else "max"
        e = lambda a, b: f"{fn}({a}, {b})"
        lines = self._int_binary(e, e)
        if "relu" in self.mods:
            d = self.ops[0]
            lines.append(self.assign(d, f"0 if SX({self.src(d, bits)}, {bits}) < 0 else "
                                        f"{self.src(d, bits)}", bits))
        return lines

    def op_popc(self):
        t, bits, _ = self.tyinfo()
        return [self.assign(self.ops[0], f"bin({self.src(self.ops[1], bits)}).count('1')", 32)]

    def op_clz(self):
        t, bits, _ = self.tyinfo()
        return [self.assign(self.ops[0], f"{bits} - {self.src(self.ops[1], bits)}.bit_length()",
                            32)]

    def op_brev(self):
        t, bits, _ = self.tyinfo()
        return [self.assign(self.ops[0], f"BREV({self.src(self.ops[1], bits)}, {bits})", bits)]

    def op_bfind(self):
        t, bits, kind = self.tyinfo()
        sh = "shiftamt" in self.mods
        return [self.assign(self.ops[0],
                            f"BFIND({self.src(self.ops[1], bits)}, {bits}, {kind == 's'}, {sh})",
                            32)]

    def op_bfe(self):
        t, bits, kind = self.tyinfo()
        d, a, b, c = self.ops[:4]
        return [self.assign(d, f"BFE({self.src(a, bits)}, {self.src(b, 32)}, {self.src(c, 32)},"
                               f" {bits}, {kind == 's'})", bits)]

    def op_bfi(self):
        t, bits, _ = self.tyinfo()
        d, a, b, c, e = self.ops[:5]
        return [self.assign(d, f"BFI({self.src(a, bits)}, {self.src(b, bits)}, "
                               f"{self.src(c, 32)}, {self.src(e, 32)}, {bits})", bits)]

    def op_bmsk(self):
        d, a, b = self.ops[:3]
        wrap = "wrap" in self.mods
        return [self.assign(d, f"BMSK({self.src(a, 32)}, {self.src(b, 32)}, {wrap})", 32)]

    def op_szext(self):
        t, bits, kind = self.tyinfo()
        d, a, b = self.ops[:3]
        wrap = "wrap" in self.mods
        return [self.assign(d, f"SZEXT({self.src(a, 32)}, {self.src(b, 32)}, {wrap}, "
                               f"{kind == 's'})", 32)]

    def op_dp4a(self):
        return self._dp("dp4a")

    def op_dp2a(self):
        return self._dp("dp2a")

    def _dp(self, which):
        d, a, b, c = self.ops[:4]
        sa, sb = self.mods[-2] == "s32", self.mods[-1] == "s32"
        hi = "hi" in self.mods
        return [self.assign(d, f"DP({which!r}, {self.src(a, 32)}, {self.src(b, 32)}, "
                               f"{self.src(c, 32)}, {sa}, {sb}, {hi})", 32)]

    def _logic(self, op):
        t, bits, _ = self.tyinfo()
        d, a, b = self.ops[:3]
        return [self.assign(d, f"{self.src(a, bits)} {op} {self.src(b, bits)}", bits)]

    def op_and(self):
        return self._logic("&")

    def op_or(self):
        return self._logic("|")

    def op_xor(self):
        return self._logic("^")

    def op_not(self):
        t, bits, _ = self.tyinfo()
        return [self.assign(self.ops[0], f"{self.src(self.ops[1], bits)} ^ {mask(bits)}", bits)]

    def op_cnot(self):
        t, bits, _ = self.tyinfo()
        return [self.assign(self.ops[0], f"1 if {self.src(self.ops[1], bits)} == 0 else 0", bits)]

    def op_lop3(self):
        if "|" in self.ops[0]:
            _unsup("lop3 with a predicate result")
        d, a, b, c, lut = self.ops[:5]
        return [self.assign(d, f"LOP3({self.src(a, 32)}, {self.src(b, 32)}, {self.src(c, 32)}, "
                               f"{self.src(lut, 8)})", 32)]

    def op_shl(self):
        t, bits, _ = self.tyinfo()
        d, a, b = self.ops[:3]
        return [self.assign(d, f"SHL({self.src(a, bits)}, {self.src(b, 32)}, {bits})", bits)]

    def op_shr(self):
        t, bits, kind = self.tyinfo()
        d, a, b = self.ops[:3]
        return [self.assign(d, f"SHR({self.src(a, bits)}, {self.src(b, 32)}, {bits}, "
                               f"{kind == 's'})", bits)]

    def op_shf(self):
        d, a, b, c = self.ops[:4]
        left = "l" in self.mods
        wrap = "wrap" in self.mods
        return [self.assign(d, f"SHF({self.src(a, 32)}, {self.src(b, 32)}, {self.src(c, 32)}, "
                               f"{left}, {wrap})", 32)]

    def op_prmt(self):
        d, a, b, c = self.ops[:4]
        mode = next((m for m in self.mods if m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")),
                    "")
        return [self.assign(d, f"PRMT({self.src(a, 32)}, {self.src(b, 32)}, {self.src(c, 32)}, "
                               f"{mode!r})", 32)]

    def op_selp(self):
        t, bits, _ = self.tyinfo()
        d, a, b, c = self.ops[:4]
        return [self.assign(d, f"{self.src(a, bits)} if {self.src(c, 1)} else "
                               f"{self.src(b, bits)}", bits)]

    def op_slct(self):
        t, bits, _ = self.tyinfo(-2)
        ct_, cbits, ckind = self.tyinfo(-1)
        d, a, b, c = self.ops[:4]
        C = self.src(c, 32)
        test = f"V.b2f({C}) >= 0" if ckind == "f" else f"SX({C}, 32) >= 0"
        return [self.assign(d, f"{self.src(a, bits)} if {test} else {self.src(b, bits)}", bits)]

    # -- comparisons
    def op_setp(self):
        t, bits, kind = self.tyinfo()
        cmp = self.mods[0]
        dests = [x.strip() for x in self.ops[0].split("|")]
        a, b = self.ops[1:3]
        ftz = "ftz" in self.mods
        A, B = self.src(a, bits), self.src(b, bits)
        e = self._compare(cmp, t, bits, kind, A, B, ftz)
        bool_op = next((m for m in self.mods[1:] if m in ("and", "or", "xor")), None)
        lines = [f"_c = 1 if {e} else 0"]
        if bool_op:
            C = self.src(self.ops[3], 1)
            pyop = {"and": "&", "or": "|", "xor": "^"}[bool_op]
            lines.append(f"_d = _c {pyop} {C}")
            lines.append(f"_e = (1 - _c) {pyop} {C}")
        else:
            lines.append("_d = _c")
            lines.append("_e = 1 - _c")
        lines.append(self.assign(dests[0], "_d", 1))
        if len(dests) > 1:
            lines.append(self.assign(dests[1], "_e", 1))
        return lines

    def _compare(self, cmp, t, bits, kind, A, B, ftz):
        if kind == "f":
            return f"FCMP({cmp!r}, {t!r}, {A}, {B}, {ftz})"
        if kind == "p":
            return {"eq": f"{A} == {B}", "ne": f"{A} != {B}"}[cmp]
        if kind == "s" and cmp in ("lt", "le", "gt", "ge"):
            A, B = f"SX({A}, {bits})", f"SX({B}, {bits})"
        pyop = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
                "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}.get(cmp)
        if pyop is None:
            _unsup(f"comparison {cmp!r} on integers")
        return f"{A} {pyop} {B}"

    def op_set(self):
        dt, dbits, dkind = self.tyinfo(-2)
        t, bits, kind = self.tyinfo(-1)
        cmp = self.mods[0]
        d, a, b = self.ops[:3]
        e = self._compare(cmp, t, bits, kind, self.src(a, bits), self.src(b, bits),
                          "ftz" in self.mods)
        lines = [f"_c = 1 if {e} else 0"]
        bool_op = next((m for m in self.mods[1:] if m in ("and", "or", "xor")), None)
        if bool_op:
            lines.append(f"_c = _c {({'and': '&', 'or': '|', 'xor': '^'})[bool_op]} "
                         f"{self.src(self.ops[3], 1)}")
        one = "0x3f800000" if dkind == "f" else str(mask(dbits))
        lines.append(self.assign(d, f"{one} if _c else 0", dbits))
        return lines

    def op_testp(self):
        t, bits, _ = self.tyinfo()
        return [self.assign(self.ops[0], f"TESTP({self.mods[0]!r}, {t!r}, "
                                         f"{self.src(self.ops[1], bits)})", 1)]

    def op_copysign(self):
        t, bits, _ = self.tyinfo()
        d, a, b = self.ops[:3]
        s = 1 << (bits - 1)
        return [self.assign(d, f"({self.src(b, bits)} & {s - 1}) | ({self.src(a, bits)} & {s})",
                            bits)]

    # -- moves and conversions
    def op_mov(self):
        t, bits, kind = self.tyinfo()
        d, a = self.ops[:2]
        if d.startswith("{"):
            parts = self.vector(d)
            pb = bits // len(parts)
            lines = [f"_v = {self.src(a, bits)}"]
            for i, p in enumerate(parts):
                if p != "_":
                    lines.append(self.assign(p, f"(_v >> {i * pb}) & {mask(pb)}", pb))
            return lines
        if a.startswith("{"):
            parts = self.vector(a)
            pb = bits // len(parts)
            e = " | ".join(f"({self.src(p, pb)} << {i * pb})" for i, p in enumerate(parts))
            return [self.assign(d, e, bits)]
        return [self.assign(d, self.src(a, bits), bits)]

    def op_cvt(self):
        tys = [m for m in self.mods if m in TYPES]
        if len(tys) != 2:
            _unsup(f"cannot read conversion {self.ins.opcode!r}")
        dt, st = tys
        dbits, dkind = TYPES[dt]
        sbits, skind = TYPES[st]
        d = self.ops[0]
        srcs = [self.src(o, sbits) for o in self.ops[1:]]
        flags = tuple(m for m in self.mods if m not in TYPES)
        e = f"CVT({dt!r}, {st!r}, {flags!r}, {', '.join(srcs)})"
        return [self.assign(d, e, dbits, dkind == "s")]

    def op_cvta(self):
        t, bits, _ = self.tyinfo()
        d, a = self.ops[:2]
        to = "to" in self.mods
        space = next((m for m in self.mods if m in ("shared", "local", "global", "const",
                                                      "param")), None)
        if space is None and "shared::cta" in self.mods:
            space = "shared"
        A = self.src(a, bits)
        win = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW}.get(space, 0)
        if not win:
            return [self.assign(d, A, bits)]
        if to:
            return [self.assign(d, f"CVTA_TO({A}, {win}) & {mask(bits)}", bits)]
        return [self.assign(d, f"({A} + {win}) & {mask(bits)}", bits)]

    def op_isspacep(self):
        d, a = self.ops[:2]
        space = self.mods[0]
        A = self.src(a, 64)
        if space in ("shared", "shared::cta", "shared::cluster"):
            e = f"{SHARED_WINDOW} <= {A} < {SHARED_WINDOW + WINDOW_SIZE}"
        elif space == "local":
            e = f"{LOCAL_WINDOW} <= {A} < {LOCAL_WINDOW + WINDOW_SIZE}"
        elif space in ("global", "const", "param"):
            e = f"not ({LOCAL_WINDOW} <= {A} < {SHARED_WINDOW + WINDOW_SIZE})"
        else:
            _unsup(f"isspacep.{space}")
        return [self.assign(d, f"1 if {e} else 0", 1)]

    # -- floats
    def _float_binary(self, op):
        t, bits, kind = self.tyinfo()
        d, a, b = self.ops[:3]
        A, B = self.src(a, bits), self.src(b, bits)
        mode = self.rounding()
        ftz, sat = "ftz" in self.mods, "sat" in self.mods
        # without a rounding modifier ptxas may contract a mul and an add into one fma:
        # computed here rounded twice, and counted (Launch.unrounded)
        note = ["t.L.unrounded += 1"] if self.rounding("") == "" and op != "div" else []
        if t == "f32":
            return note + [self.assign(d, f"V.f32_binary({op!r}, {A}, {B}, {mode!r}, {ftz}, "
                                          f"{sat})", 32)]
        if t == "f64":
            return note + [self.assign(d, f"V.f64_binary({op!r}, {A}, {B}, {mode!r})", 64)]
        return [self.assign(d, f"HALF({op!r}, {t!r}, {mode!r}, {ftz}, {sat}, "
                               f"{'relu' in self.mods}, {A}, {B})", bits)]

    def _fma(self):
        t, bits, kind = self.tyinfo()
        d, a, b, c = self.ops[:4]
        A, B, C = self.src(a, bits), self.src(b, bits), self.src(c, bits)
        mode = self.rounding()
        ftz, sat = "ftz" in self.mods, "sat" in self.mods
        if t == "f32":
            return [self.assign(d, f"V.f32_fma({A}, {B}, {C}, {mode!r}, {ftz}, {sat})", 32)]
        if t == "f64":
            return [self.assign(d, f"V.f64_fma({A}, {B}, {C}, {mode!r})", 64)]
        return [self.assign(d, f"HALF('fma', {t!r}, {mode!r}, {ftz}, {sat}, "
                               f"{'relu' in self.mods}, {A}, {B}, {C})", bits)]

    def op_fma(self):
        return self._fma()

    def _float_div(self):
        t, bits, _ = self.tyinfo()
        d, a, b = self.ops[:3]
        A, B = self.src(a, bits), self.src(b, bits)
        ftz = "ftz" in self.mods
        if "approx" in self.mods or "full" in self.mods:
            return [self.assign(d, f"APPROX(t, 'div', {t!r}, {ftz}, {A}, {B})", bits)]
        return self._float_binary("div")

    def _float_unary_bits(self, op):
        t, bits, _ = self.tyinfo()
        d, a = self.ops[:2]
        A = self.src(a, bits)
        ftz = "ftz" in self.mods
        return [self.assign(d, f"FUNARY({op!r}, {t!r}, {ftz}, {A})", bits)]

    def _float_minmax(self, op):
        t, bits, _ = self.tyinfo()
        d, a, b = self.ops[:3]
        if len(self.ops) > 3:
            _unsup(f"three-operand {self.ins.opcode}")
        A, B = self.src(a, bits), self.src(b, bits)
        ftz, nan = "ftz" in self.mods, "NaN" in self.mods
        if "xorsign" in self.mods or "relu" in self.mods:
            _unsup(self.ins.opcode)
        return [self.assign(d, f"FMINMAX({op!r}, {t!r}, {ftz}, {nan}, {A}, {B})", bits)]

    def _approx_unary(self, fname):
        t, bits, _ = self.tyinfo()
        d, a = self.ops[:2]
        ftz = "ftz" in self.mods
        return [self.assign(d, f"APPROX(t, {fname!r}, {t!r}, {ftz}, {self.src(a, bits)})", bits)]

    def op_rcp(self):
        t, bits, _ = self.tyinfo()
        if "approx" in self.mods:
            return self._approx_unary("rcp")
        d, a = self.ops[:2]
        mode, ftz = self.rounding(), "ftz" in self.mods
        one = "0x3f800000" if t == "f32" else str(V.d2b(1.0))
        if t == "f32":
            return [self.assign(d, f"V.f32_binary('div', {one}, {self.src(a, 32)}, {mode!r}, "
                                   f"{ftz})", 32)]
        return [self.assign(d, f"V.f64_binary('div', {one}, {self.src(a, 64)}, {mode!r})", 64)]

    def op_sqrt(self):
        t, bits, _ = self.tyinfo()
        if "approx" in self.mods:
            return self._approx_unary("sqrt")
        d, a = self.ops[:2]
        mode, ftz = self.rounding(), "ftz" in self.mods
        if t == "f32":
            return [self.assign(d, f"V.f32_sqrt({self.src(a, 32)}, {mode!r}, {ftz})", 32)]
        return [self.assign(d, f"V.f64_sqrt({self.src(a, 64)}, {mode!r})", 64)]

    def op_rsqrt(self):
        return self._approx_unary("rsqrt")

    def op_ex2(self):
        return self._approx_unary("ex2")

    def op_lg2(self):
        return self._approx_unary("lg2")

    def op_sin(self):
        return self._approx_unary("sin")

    def op_cos(self):
        return self._approx_unary("cos")

    def op_tanh(self):
        return self._approx_unary("tanh")

    # -- memory
    def _space(self) -> str:
        for m in self.mods:
            if m in ("global", "shared", "local", "param", "const"):
                return m
            if m.startswith("shared::"):
                if m != "shared::cta":
                    _unsup(f"{self.ins.opcode}: distributed shared memory")
                return "shared"
        return "generic"

    def _access(self, space: str, addr_op: str, n: int, value: str | None) -> str:
        """Read (value None) or write expression of ``n`` bytes at ``addr_op``."""
        if space == "param":
            pb = self.param_buffer(addr_op)
            if pb is not None:
                k, off = pb
                if value is None:
                    return f"PR(r[{k}], {off}, {n})"
                return f"PW(r[{k}], {off}, {n}, {value})"
        addr = self.aligned(self.address(addr_op, space), n)
        if space in ("global", "const", "param"):
            return f"t.G.read({addr}, {n}, t)" if value is None else \
                f"t.G.write({addr}, {n}, {value}, t)"
        if space == "shared":
            return f"t.cta.S.read({addr}, {n}, t)" if value is None else \
                f"t.cta.S.write({addr}, {n}, {value}, t)"
        if space == "local":
            return f"t.Lm.read({addr}, {n})" if value is None else \
                f"t.Lm.write({addr}, {n}, {value})"
        return f"GREAD(t, {addr}, {n})" if value is None else f"GWRITE(t, {addr}, {n}, {value})"

    def _vec(self) -> int:
        for m in self.mods:
            if m in ("v2", "v4", "v8"):
                return int(m[1])
        return 1

    def op_ld(self):
        t, bits, kind = self.tyinfo()
        d, a = self.ops[:2]
        nv = self._vec()
        n = max(bits // 8, 1) * nv
        space = self._space()
        lines = [f"_v = {self._access(space, a, n, None)}"]
        dests = self.vector(d) if nv > 1 else [d]
        eb = max(bits, 8)
        for i, p in enumerate(dests):
            if p == "_":
                continue
            e = f"(_v >> {i * eb}) & {mask(eb)}" if nv > 1 else "_v"
            lines.append(self.assign(p, e, eb, kind == "s"))
        return lines

    op_ldu = op_ld

    def op_st(self):
        t, bits, kind = self.tyinfo()
        a, v = self.ops[:2]
        nv = self._vec()
        eb = max(bits, 8)
        n = eb // 8 * nv
        srcs = self.vector(v) if nv > 1 else [v]
        e = " | ".join(f"({self.src(s, eb)} << {i * eb})" for i, s in enumerate(srcs)) \
            if nv > 1 else self.src(v, eb)
        return [self._access(self._space(), a, n, e)]

    def op_prefetch(self):
        return []

    op_prefetchu = op_prefetch

    def op_membar(self):
        return []

    def op_fence(self):
        if "proxy" in self.mods and "async" in "".join(self.mods):
            _unsup(f"{self.ins.opcode} (async proxy)")
        return []

    def op_nanosleep(self):
        return []

    def op_pmevent(self):
        return []

    def op_discard(self):
        return []

    def op_applypriority(self):
        return []

    def op_griddepcontrol(self):
        return []      # one launch at a time: nothing to wait for, nobody to launch early

    def op_createpolicy(self):
        return [self.assign(self.ops[0], "0", 64)]

    def _atomic(self, has_dest: bool):
        tys = [m for m in self.mods if m in TYPES]
        t = tys[-1]
        bits, kind = TYPES[t]
        op = next((m for m in self.mods if m in ("add", "min", "max", "inc", "dec", "and",
                                                  "or", "xor", "exch", "cas")), None)
        if op is None or self._vec() > 1:
            _unsup(f"{self.ins.opcode}")
        space = self._space()
        if space not in ("global", "shared", "generic"):
            _unsup(f"{self.ins.opcode} in {space} memory")
        operands = self.ops[:] if has_dest else ["_"] + self.ops[:]
        d, a = operands[:2]
        vals = [self.src(o, bits) for o in operands[2:4]]
        addr = self.aligned(self.address(a, space), bits // 8)
        e = f"ATOM(t, {space!r}, {op!r}, {t!r}, {addr}, {', '.join(vals)})"
        return [self.assign(d, e, bits)] if d != "_" else [e]

    def op_atom(self):
        return self._atomic(True)

    def op_red(self):
        return self._atomic(False)

    # -- control flow
    def op_bra(self):
        return [f"return @L{{{self.ops[0].strip()}}}"], True

    def op_brx(self):
        """``brx.idx index, tlist``: a jump through a ``.branchtargets`` table (an index out
        of the table is undefined behaviour: an error)."""
        table = self.dec.branch_tables.get(self.ops[1].strip())
        if table is None:
            _unsup(f"brx.idx through {self.ops[1]!r}, which is not a .branchtargets list")
        targets = ", ".join(f"@L{{{lab}}}" for lab in table)
        return [f"return BRX(({targets},), {self.src(self.ops[0], 32)})"], True

    def op_ret(self):
        return ["return t.ret()"], True

    def op_exit(self):
        return ["return t.exit()"], True

    def op_trap(self):
        return [f"t.trap({self.dec._where(self.st)!r})"], False

    def op_brkpt(self):
        return [f"t.trap({'brkpt at ' + self.dec._where(self.st)!r})"], False

    def op_call(self):
        ops_ = self.ops
        rets: list[str] = []
        i = 0
        if ops_[0].startswith("(") and len(ops_) > 1:
            rets = [x.strip() for x in ops_[0][1:-1].split(",") if x.strip()]
            i = 1
        target = ops_[i].strip()
        args: list[str] = []
        if len(ops_) > i + 1 and ops_[i + 1].startswith("("):
            args = [x.strip() for x in ops_[i + 1][1:-1].split(",") if x.strip()]
        if target.startswith("%"):
            _unsup("an indirect call")
        for x in rets + args:
            if self.dec.resolve(self.scope, x) is None or self.width(x) != 0:
                _unsup(f"call argument {x!r} is not a .param variable")
        a = ", ".join(f"r[{self.slot(x)}]" for x in args)
        rs = ", ".join(str(self.slot(x)) for x in rets)
        return ["t.pc = @NEXT@", f"return t.call({target!r}, ({a}{',' if args else ''}), "
                                  f"({rs}{',' if rets else ''}))"], True

    # -- barriers and warp collectives (the thread waits: the block ends)
    def _wait(self, ev: str) -> tuple[list[str], bool]:
        return [f"t.ev = {ev}", "t.pc = @NEXT@", "return -1"], True

    def op_bar(self):
        """``bar``/``barrier``: the event ``('bar', kind, id, count, predicate, slot,
        aligned, where)``; every ``bar`` form is ``.aligned`` (PTX ISA, "Parallel Synchronization
        and Communication Instructions: bar, barrier": ``bar{.cta}.sync`` is
        ``barrier{.cta}.sync.aligned``), ``barrier`` only with the modifier."""
        mods = [m for m in self.mods if m not in ("cta", "aligned")]
        if mods and mods[0] == "warp":
            return self._wait(f"('warp', 'bar.warp.sync', {self.src(self.ops[0], 32)}, None, ())")
        aligned = f"{self.base == 'bar' or 'aligned' in self.mods}, {self.dec._where(self.st)!r}"
        kind = mods[0] if mods else "sync"
        if kind in ("sync", "arrive"):
            a = self.src(self.ops[0], 32)
            b = self.src(self.ops[1], 32) if len(self.ops) > 1 else "None"
            if kind == "arrive":
                return [f"t.cta.arrive(t, {a}, {b})"], False
            return self._wait(f"('bar', 'sync', {a}, {b}, None, None, {aligned})")
        if kind == "red":
            op = mods[1]
            d = self.ops[0]
            a = self.src(self.ops[1], 32)
            b = self.src(self.ops[2], 32) if len(self.ops) > 3 else "None"
            c = self.src(self.ops[-1], 1)
            return self._wait(f"('bar', {op!r}, {a}, {b}, {c}, {self.slot(d)}, {aligned})")
        _unsup(self.ins.opcode)

    op_barrier = op_bar

    def _members(self) -> str:
        return self.src(self.ops[-1], 32)

    def op_shfl(self):
        if "sync" not in self.mods:
            _unsup("shfl without .sync")
        mode = next(m for m in self.mods if m in ("up", "down", "bfly", "idx"))
        dests = [x.strip() for x in self.ops[0].split("|")]
        a, b, c = (self.src(o, 32) for o in self.ops[1:4])
        slots = tuple(self.slot(x) if x != "_" else -1 for x in dests)
        return self._wait(f"('warp', 'shfl.{mode}', {self._members()}, ({a}, {b}, {c}), "
                          f"{slots})")

    def op_vote(self):
        mode = next(m for m in self.mods if m in ("all", "any", "uni", "ballot"))
        if "sync" not in self.mods:
            _unsup("vote without .sync")
        d, a = self.ops[:2]
        return self._wait(f"('warp', 'vote.{mode}', {self._members()}, {self.src(a, 1)}, "
                          f"({self.slot(d)},))")

    def op_match(self):
        mode = next(m for m in self.mods if m in ("any", "all"))
        t, bits, _ = self.tyinfo()
        dests = [x.strip() for x in self.ops[0].split("|")]
        slots = tuple(self.slot(x) if x != "_" else -1 for x in dests)
        return self._wait(f"('warp', 'match.{mode}', {self._members()}, "
                          f"{self.src(self.ops[1], bits)}, {slots})")

    def op_redux(self):
        op = next(m for m in self.mods if m in ("add", "min", "max", "and", "or", "xor"))
        t, bits, kind = self.tyinfo()
        if kind == "f":
            _unsup(self.ins.opcode)
        return self._wait(f"('warp', 'redux.{op}.{kind}', {self._members()}, "
                          f"{self.src(self.ops[1], 32)}, ({self.slot(self.ops[0])},))")

    def op_activemask(self):
        return self._wait(f"('warp', 'activemask', None, None, ({self.slot(self.ops[0])},))")

    def _matrix(self) -> tuple[int, bool]:
        if "m8n8" not in self.mods or "b16" not in self.mods:
            _unsup(f"{self.ins.opcode}: only the m8n8 .b16 shapes")
        num = next(int(m[1]) for m in self.mods if m in ("x1", "x2", "x4"))
        return num, "trans" in self.mods

    def op_ldmatrix(self):
        """``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16``: a warp-wide load of
        8x8 matrices whose rows' addresses lanes 8j..8j+7 give; lane i gets row i/4, columns
        2(i%4) and 2(i%4)+1 of matrix j in register j (``.trans``: the transpose's)."""
        num, trans = self._matrix()
        dests = tuple(self.slot(x) for x in self.vector(self.ops[0]))
        addr = self.address(self.ops[1], "shared")
        return self._wait(f"('warp', 'ldmatrix.{num}.{trans}', 0xffffffff, {addr}, {dests})")

    def op_stmatrix(self):
        """``stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16``: ldmatrix's inverse."""
        num, trans = self._matrix()
        addr = self.address(self.ops[0], "shared")
        vals = ", ".join(self.src(v, 32) for v in self.vector(self.ops[1]))
        return self._wait(f"('warp', 'stmatrix.{num}.{trans}', 0xffffffff, ({addr}, ({vals},)), "
                          f"())")

    def op_mma(self):
        """``mma.sync.aligned.m16n8k{8,16}.row.col.f32.{f16,bf16}.{f16,bf16}.f32``: a warp's
        16x8 f32 tile D = A B + C, from the fragments each lane holds (resolved when the warp
        has arrived, :meth:`.machine.CTA._mma`)."""
        shape = next((m for m in self.mods if m in ("m16n8k16", "m16n8k8")), None)
        tys = [m for m in self.mods if m in TYPES]
        if shape is None or tys[0] != "f32" or tys[-1] != "f32" or \
                tys[1] not in ("f16", "bf16") or tys[1] != tys[2] or "row" not in self.mods:
            _unsup(f"{self.ins.opcode}: only m16n8k8/m16n8k16 .row.col f32 += f16/bf16")
        d, a, b, c = (self.vector(o) for o in self.ops[:4])
        regs = ", ".join("(" + ", ".join(self.src(x, 32) for x in v) + ",)" for v in (a, b, c))
        return self._wait(f"('warp', 'mma.{shape}.{tys[1]}', 0xffffffff, ({regs}), "
                          f"{tuple(self.slot(x) for x in d)})")

    def op_cp(self):
        """``cp.async.{ca,cg}.shared.global [dst], [src], size{, src-size | ignore-src}``:
        done at once (the copy completes before any later instruction), so
        ``commit_group``/``wait_group``/``wait_all`` have nothing to wait for."""
        mods = self.mods
        if mods[0] != "async":
            _unsup(self.ins.opcode)
        if mods[1] in ("commit_group", "wait_group", "wait_all"):
            return []
        if mods[1] not in ("ca", "cg") or not any(m.startswith("shared") for m in mods):
            _unsup(self.ins.opcode)
        size = self.src(self.ops[2], 32)
        dst = self.aligned(self.address(self.ops[0], "shared"), size)
        src = self.aligned(self.address(self.ops[1], "global"), size)
        keep = size
        if len(self.ops) > 3 and not self.ops[3].startswith("%rd") and \
                self.dec.resolve(self.scope, self.ops[3].lstrip("!")) is not None and \
                self.width(self.ops[3].lstrip("!")) == 1:
            keep = f"(0 if {self.src(self.ops[3], 1)} else {size})"      # ignore-src
        elif len(self.ops) > 3 and "L2::cache_hint" not in "".join(mods):
            keep = self.src(self.ops[3], 32)                              # src-size
        return [f"CP_ASYNC(t, {dst}, {src}, {size}, {keep})"]

    def op_elect(self):
        dests = [x.strip() for x in self.ops[0].split("|")]
        slots = tuple(self.slot(x) if x != "_" else -1 for x in dests)
        return self._wait(f"('warp', 'elect', {self._members()}, None, {slots})")


def _is_decimal_float(op: str) -> bool:
    try:
        float(op)
    except ValueError:
        return False
    return "." in op or "e" in op.lower()
