"""The marked function body the call forms' PTX analysis reads (:class:`MarkedBody`), and
the PTX patterns they share."""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from ..errors import SpliceRewriteError
from ..ptxtools.names import MARKER_RE
from ..ptxtools.ptx import Body, Function, Instruction, Module, Statement, registers_in


def rewrite_error(kernel_name: str, msg: str, stmt_text: str | None = None) -> SpliceRewriteError:
    """The error for a call-site rewrite of ``kernel_name`` that cannot be proven."""
    detail = f"\n    offending PTX: {stmt_text.strip()}" if stmt_text else ""
    return SpliceRewriteError(f"cannot prove the call-site rewrite of kernel "
                              f"'{kernel_name}': {msg}{detail}")


@dataclasses.dataclass
class MarkedBody:
    """One function's body as the forms analyse it: each statement with its parsed
    instruction (None for other statements), the statements defining each register, and
    the registers holding a marker's address (register -> site) with the statements
    defining them (filled by :func:`splice.forms.rewrite.splice_calls`)."""

    module: Module
    fn: Function
    kernel_name: str
    parsed: Sequence[tuple[Statement, Instruction | None]]
    defs: dict[str, list[int]]
    analysed: Body
    marker_reg: dict[str, int] = dataclasses.field(default_factory=dict)
    address_defs: set[int] = dataclasses.field(default_factory=set)

    @classmethod
    def parse(cls, module: Module, fn: Function, kernel_name: str) -> MarkedBody:
        """The marked body of ``fn`` on its analysed :meth:`~splice.ptxtools.ptx.Module.body`."""
        body = module.body(fn)
        return cls(module, fn, kernel_name, body.parsed, body.defs, body)

    def fail(self, msg: str, i: int | None = None) -> SpliceRewriteError:
        """The error for statement ``i`` (or the function as a whole)."""
        return rewrite_error(self.kernel_name, msg,
                             None if i is None else self.parsed[i][0].text(self.module.text))

    def named_sites(self, ins: Instruction) -> set[int]:
        """The sites whose marker symbol or address register ``ins`` names."""
        return {self.marker_reg[r] for op in ins.operands for r in registers_in(op)
                if r in self.marker_reg} | {int(m.group(1)) for op in ins.operands
                                            for m in MARKER_RE.finditer(op)}


PLAIN_REG = re.compile(r"%[A-Za-z_$][A-Za-z0-9_$]*")
ADDR_RE = re.compile(r"^\[\s*([%A-Za-z_$][A-Za-z0-9_$]*)\s*(?:\+\s*(-?\w+)\s*)?\]$")


def is_key_load(ins: Instruction) -> bool:
    """Whether ``ins`` is a plain load of two operands (the form of an fma key load)."""
    return ins.base == "ld" and len(ins.operands) == 2 and \
        all(m in ("global", "b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "nc",
                  "ca", "cg", "weak") for m in ins.modifiers)
