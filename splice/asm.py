"""Inline PTX in cuTile kernels: ``splice.asm``, an ``asm volatile`` analogue.

Each distinct snippet becomes a small PTX ``.func`` (operands loaded from its parameters
into registers typed by their dtypes, the snippet pasted in, outputs stored to the return
value) that splice calls at every element of the call's tile, like any extern -- and always
inlines, so no ``CALL`` remains in SASS.

Operand numbering follows CUDA C ``asm`` (``%n``) and Triton's ``inline_asm_elementwise``
(``$n``): outputs first, then inputs. ``$$`` is a literal ``$``; ``%`` registers such as
``%globaltimer`` pass through.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from .errors import SpliceCallError
from .types import ElementType

#: Register type and constraint letter of each element type (CUDA C / Triton constraint
#: letters: h = 16-bit, r = 32-bit, l = 64-bit, f = f32, d = f64, b = predicate; 8-bit
#: values live in 16-bit registers, as PTX has no 8-bit ones).
REG = {
    "bool": (".pred", "b"), "int8": (".b16", "h"), "uint8": (".b16", "h"),
    "int16": (".b16", "h"), "uint16": (".b16", "h"), "float16": (".b16", "h"),
    "bfloat16": (".b16", "h"), "int32": (".b32", "r"), "uint32": (".b32", "r"),
    "float32": (".f32", "f"), "int64": (".b64", "l"), "uint64": (".b64", "l"),
    "float64": (".f64", "d"),
}

_OPERAND_RE = re.compile(r"\$(\$|\d+)")


@dataclasses.dataclass(frozen=True)
class AsmSpec:
    """One inline-PTX snippet with its operand types.

    Attributes:
        template: the PTX text with ``$n`` operands.
        outputs: element types of the outputs ($0 ... $(len-1)).
        inputs: element types of the inputs.
        where: "file:line" of the call.
    """

    template: str
    outputs: tuple[ElementType, ...]
    inputs: tuple[ElementType, ...]
    where: str

    @property
    def symbol(self) -> str:
        h = hashlib.sha256(repr((self.template, [t.name for t in self.outputs],
                                 [t.name for t in self.inputs])).encode()).hexdigest()[:12]
        return f"splice_asm_{h}"

    def check(self, constraints: str | None) -> None:
        """Operand references and explicit constraints against the operand dtypes.

        Raises:
            SpliceCallError: a ``$n`` beyond the operands, or a constraint that does not
                match its operand's dtype.
        """
        n = len(self.outputs) + len(self.inputs)
        for m in _OPERAND_RE.finditer(self.template):
            if m.group(1) != "$" and int(m.group(1)) >= n:
                raise SpliceCallError(
                    f"inline PTX at {self.where}: operand ${m.group(1)} does not exist: the "
                    f"snippet has {len(self.outputs)} output(s) and {len(self.inputs)} "
                    f"input(s), $0..${n - 1}")
        if constraints is None:
            return
        if not isinstance(constraints, str):
            raise SpliceCallError(f"inline PTX at {self.where}: constraints must be a string "
                                  f"like '=r,r,r'")
        parts = [c.replace(" ", "").replace("\t", "") for c in constraints.split(",")] \
            if constraints.strip() else []
        if len(parts) != n:
            raise SpliceCallError(
                f"inline PTX at {self.where}: {len(parts)} constraint(s) {constraints!r} for "
                f"{n} operand(s)")
        for k, (c, t) in enumerate(zip(parts, (*self.outputs, *self.inputs))):
            is_out = k < len(self.outputs)
            if c.startswith("=") != is_out:
                raise SpliceCallError(
                    f"inline PTX at {self.where}: constraint {k} {c!r} must "
                    f"{'' if is_out else 'not '}start with '=' (outputs come first)")
            letter = c.lstrip("=")
            if len(letter) != 1 or letter not in "hrlfdb":
                raise SpliceCallError(
                    f"inline PTX at {self.where}: constraint {k} {c!r}: only the letters h, r, "
                    f"l, f, d, b (with '=' for outputs) are supported, no modifiers")
            if letter != REG[t.name][1]:
                raise SpliceCallError(
                    f"inline PTX at {self.where}: constraint {k} {c!r} does not match operand "
                    f"${k} of dtype {t} (register {REG[t.name][0]}, constraint "
                    f"'{'=' if is_out else ''}{REG[t.name][1]}')")

    def operands_text(self) -> str:
        """``$0 .b32 (int32 output), $1 .f32 (float32)...`` for error messages."""
        n_out = len(self.outputs)
        return ", ".join(f"${k} {REG[t.name][0]} ({t}{' output' if k < n_out else ''})"
                         for k, t in enumerate((*self.outputs, *self.inputs)))

    def result_layout(self) -> tuple[ElementType | None, tuple[int, ...]]:
        """The carrier of the outputs (one element type, None for no output) and each
        output's bit offset in it."""
        from .types import ELEMENT_TYPES
        if not self.outputs:
            return None, ()
        if len(self.outputs) == 1:
            return self.outputs[0], (0,)
        offsets, pos = [], 0
        for t in self.outputs:
            pos = -(-pos // t.bits) * t.bits
            offsets.append(pos)
            pos += t.bits
        if pos > 64:
            raise SpliceCallError(
                f"inline PTX at {self.where}: the outputs "
                f"({', '.join(t.name for t in self.outputs)}) need {pos} bits; at most 64 "
                f"bits of outputs are supported")
        return ELEMENT_TYPES["uint32" if pos <= 32 else "uint64"], tuple(offsets)

    def ptx(self, target: str = "sm_80", version: str = "8.0") -> str:
        """The ``.func`` wrapping the snippet."""
        carrier, offsets = self.result_layout()
        lines = [f".version {version}", f".target {target}", ".address_size 64", ""]
        params = []
        for i, t in enumerate(self.inputs):
            params.append(f"\t.param .b{_param_bits(t)} p{i}")
        ret = f"(.param .b{_param_bits(carrier)} func_retval0) " if carrier else ""
        lines.append(f".visible .func {ret}{self.symbol}(")
        lines.append(",\n".join(params))
        lines.append(")")
        lines.append("{")
        regs = {}
        for k, t in enumerate((*self.outputs, *self.inputs)):
            regs[k] = f"%a{k}"
            lines.append(f"\t.reg {REG[t.name][0]} \t%a{k};")
        lines.append("\t.reg .b32 \t%t32;")
        lines.append("\t.reg .b64 \t%t64, %c64;")
        n_out = len(self.outputs)
        for i, t in enumerate(self.inputs):
            k = n_out + i
            reg_t = REG[t.name][0]
            if reg_t == ".pred":
                lines.append(f"\tld.param.b32 \t%t32, [p{i}];")
                lines.append(f"\tsetp.ne.b32 \t%a{k}, %t32, 0;")
            else:
                lines.append(f"\tld.param.b{int(reg_t[2:])} \t%a{k}, [p{i}];")
        body = _OPERAND_RE.sub(lambda m: "$" if m.group(1) == "$" else regs[int(m.group(1))],
                               self.template)
        lines.append("\t" + body.strip())
        if carrier is not None:
            cbits = _param_bits(carrier)
            if len(self.outputs) == 1:
                lines += _store_single(self.outputs[0], cbits)
            else:
                lines.append("\tmov.b64 \t%c64, 0;")
                for k, (t, off) in enumerate(zip(self.outputs, offsets)):
                    lines += _to_b64(t, k)
                    if off:
                        lines.append(f"\tshl.b64 \t%t64, %t64, {off};")
                    lines.append("\tor.b64 \t%c64, %c64, %t64;")
                if cbits == 32:
                    lines.append("\tcvt.u32.u64 \t%t32, %c64;")
                    lines.append("\tst.param.b32 \t[func_retval0], %t32;")
                else:
                    lines.append("\tst.param.b64 \t[func_retval0], %c64;")
        lines.append("\tret;")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _param_bits(t: ElementType) -> int:
    return 32 if t.kind in "bsu" and t.bits < 32 else t.bits


def _store_single(t: ElementType, cbits: int) -> list[str]:
    reg_t = REG[t.name][0]
    if reg_t == ".pred":
        return ["\tselp.u32 \t%t32, 1, 0, %a0;", "\tst.param.b32 \t[func_retval0], %t32;"]
    rbits = int(reg_t[2:])
    if rbits == cbits:
        return [f"\tst.param.b{cbits} \t[func_retval0], %a0;"]
    # 8/16-bit integer value in a 16-bit register, returned in .b32 (C promotion)
    return ["\tcvt.u32.u16 \t%t32, %a0;", "\tst.param.b32 \t[func_retval0], %t32;"]


def _to_b64(t: ElementType, k: int) -> list[str]:
    """Zero-extend output register %a<k> into %t64, keeping only its element's bits."""
    reg_t = REG[t.name][0]
    if reg_t == ".pred":
        return [f"\tselp.u64 \t%t64, 1, 0, %a{k};"]
    rbits = int(reg_t[2:])
    out = [f"\tcvt.u64.u{rbits} \t%t64, %a{k};" if rbits < 64 else f"\tmov.b64 \t%t64, %a{k};"]
    if rbits < 64 and reg_t in (".f32",):
        out = [f"\tmov.b32 \t%t32, %a{k};", "\tcvt.u64.u32 \t%t64, %t32;"]
    if t.bits < rbits:
        out.append(f"\tand.b64 \t%t64, %t64, {(1 << t.bits) - 1};")
    return out


def _public_asm():
    from ._cutile import make_asm_function
    f = make_asm_function()
    f.__doc__ = ASM_DOC
    f.__module__ = "splice"
    return f


ASM_DOC = """Inline PTX applied to every element of its input tiles (inside a @splice.kernel).

    y = splice.asm("mad.lo.s32 $0, $1, $2, $3;", x, a, b, dtype=ct.int32)
    hi, lo = splice.asm("mov.b64 {$1, $0}, $2;", v, dtype=(ct.uint32, ct.uint32))
    t = splice.asm("mov.u64 $0, %globaltimer;", dtype=ct.uint64, pure=False)

Args:
    template (str): PTX; ``$0``.. are the outputs, then the inputs; ``$$`` is ``$``;
        ``%`` registers pass through. Operand registers are typed by dtype: .pred (bool),
        .b16 (8/16-bit ints, float16, bfloat16), .b32 (32-bit ints), .f32, .b64 (64-bit
        ints), .f64.
    *args: input tiles or scalars (broadcast to a common shape); their dtypes are the
        operands' dtypes.
    dtype: the output dtype, a tuple of dtypes (at most 64 bits together; returns a
        tuple), or None (no output: a side effect only).
    constraints (str): optional CUDA/Triton constraints ("=r,r,r": h 16-bit, r 32-bit,
        l 64-bit, f f32, d f64, b predicate), checked against the dtypes.
    pure (bool): False: never removed, never duplicated, runs exactly once per element and
        keeps its order against the kernel's memory operations (``asm volatile`` with a
        "memory" clobber). A snippet without outputs is always impure.

Returns:
    A tile (or tuple of tiles) of the broadcast shape, or None.

Raises:
    SpliceCallError: operand count/type mismatches, before tileiras runs.
    SpliceCompileError: ptxas rejected the snippet (its message, the snippet and the call
        site).
"""
