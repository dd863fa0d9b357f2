"""The call sequence that replaces one marker instance (:func:`call_block`): a scoped block
that unpacks the marker's two operands into the callee's arguments, stores its ``.param``\\ s,
``call``\\ s it (``call``, not ``call.uni``: owner threads may diverge) -- or inlines its body
(:mod:`splice.ptxtools.inline`) -- and writes the result register, predicated like the marker was.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

from ..ptxtools.inline import inline_body
from ..ptxtools.ptx import Param
from ..ptxtools.spans import Generated
from ..types import ArgSlot, ElementType

if TYPE_CHECKING:
    from .base import SiteCall


def _param_bits(p: Param) -> int:
    return p.size_bytes * 8


def call_block(site: SiteCall, guard: str | None, dest: str,
               operands: Sequence[str], instance: int) -> Generated:
    """The PTX replacing one marker instance: a scoped block calling ``site.callee`` with
    the arguments unpacked from the marker's two operands, result into ``dest``; tagged
    (kind: the site form's ``span_kind``) with the site's label, index and ``instance``."""
    # st.param/ld.param cannot be predicated: a guarded marker becomes a branch around the
    # whole call sequence.
    sig = site.signature
    width = site.width
    packing = sig.packing()
    lines = [f"{{ // splice: call {site.label} (site {site.index}, instance {instance})"]
    decls = [f"\t.reg .b{width} \t%__splice_s<2>;"]
    body = []
    skip = f"$__splice_skip_{site.index}_{instance}"
    if guard:
        negated = guard[1:] if guard.startswith("!") else "!" + guard
        body.append(f"\t@{negated} bra \t{skip};")
    for k, op in enumerate(operands):
        body.append(f"\tmov.b{width} \t%__splice_s{k}, {op};")
    regs = {"b16": 0, "b32": 0, "b64": 0}

    def reg(kind: str) -> str:
        n = regs[kind]
        regs[kind] += 1
        return f"%__splice_{kind}_{n}"

    values = []
    for i, (elem, place, param) in enumerate(zip(sig.args, packing, site.params,
                                                 strict=True)):
        pname = f"__splice_p{i}"
        pbits = _param_bits(param)
        value = _extract(body, reg, f"%__splice_s{place.slot}", width, place, elem, pbits)
        values.append((value, pbits))
        if site.inline is None:
            decls.append(f"\t{param.declare(pname)};")
            body.append(f"\tst.param.b{pbits} \t[{pname}], {value};")
    args = ", ".join(f"__splice_p{i}" for i in range(len(sig.args)))
    if site.inline is not None:
        _inline_call(site, values, body, reg, dest, width, instance)
    elif site.result is not None:
        decls.append(f"\t{site.result.declare('__splice_r')};")
        body.append(f"\tcall (__splice_r), {site.callee}, ({args});")
        if dest != "_":
            body.extend(_load_result(site.result, width, dest, reg))
    else:
        body.append(f"\tcall {site.callee}, ({args});")
        if dest != "_":
            body.append(f"\tmov.b{width} \t{dest}, 0;")
    if guard:
        body.append(f"{skip}:")
    for kind, n in regs.items():
        if n:
            decls.append(f"\t.reg .{kind} \t%__splice_{kind}_<{n}>;")
    return Generated("\n".join(lines + decls + body + ["\t} // splice: end call"]),
                     site.label, site.form.span_kind, site.index, instance)


def _load_result(result: Param, width: int, dest: str, reg) -> list[str]:
    """``ld.param`` of the callee's return value ``__splice_r`` into ``dest`` (``width``
    bits, zero-extended). An aggregate (several results: ``.param .align A .b8 r[N]``) is
    loaded in pieces of its alignment, each access naturally aligned as the PTX ISA
    requires of ``ld`` (``docs/design.md#several-results``)."""
    rbits = _param_bits(result)
    align = int(m.group(1)) if (m := re.search(r"\.align\s+(\d+)", result.decl)) else 0
    if result.array is not None and 0 < align < result.size_bytes:
        acc, piece = reg(f"b{width}"), reg(f"b{width}")
        out = [f"\tmov.b{width} \t{acc}, 0;"]
        for off in range(0, result.size_bytes, align):
            pbits = 8 * align
            r = reg(f"b{max(pbits, 16)}")
            out.append(f"\tld.param.b{pbits} \t{r}, [__splice_r+{off}];")
            out.append(f"\tcvt.u{width}.u{max(pbits, 16)} \t{piece}, {r};")
            if off:
                out.append(f"\tshl.b{width} \t{piece}, {piece}, {8 * off};")
            out.append(f"\tor.b{width} \t{acc}, {acc}, {piece};")
        return out + [f"\tmov.b{width} \t{dest}, {acc};"]
    if rbits == width:
        return [f"\tld.param.b{width} \t{dest}, [__splice_r];"]
    r = reg("b32" if rbits == 32 else "b16")
    return [f"\tld.param.b{rbits} \t{r}, [__splice_r];",
            f"\tcvt.u{width}.u{32 if rbits == 32 else 16} \t{dest}, {r};"]


def _inline_call(site, values, body, reg, dest, width, instance):
    """The callee's body in place of the call (see :mod:`splice.ptxtools.inline`)."""
    mod, fn = site.inline
    result = None
    if site.result is not None:
        rbits = _param_bits(site.result)
        rv = reg(f"b{max(rbits, 16)}")
        result = (rv, max(rbits, 16))
    body.extend(inline_body(mod, fn, values, result, f"{site.index}_{instance}"))
    if result is not None and dest != "_":
        rv, rbits = result
        if rbits == width:
            body.append(f"\tmov.b{width} \t{dest}, {rv};")
        else:
            body.append(f"\tcvt.u{width}.u{rbits} \t{dest}, {rv};")
    elif result is None and dest != "_":
        body.append(f"\tmov.b{width} \t{dest}, 0;")


_SIGNED_CVT = {8: "s8", 16: "s16"}


def _extract(body: list[str], reg, slot_reg: str, width: int, place: ArgSlot,
             elem: ElementType, pbits: int) -> str:
    """Emit instructions extracting one argument from its ``width``-bit slot register into
    a register of ``pbits`` bits (the callee's .param width), extended as C promotes it;
    return the register."""
    src = slot_reg
    if place.offset:
        t = reg(f"b{width}")
        body.append(f"\tshr.b{width} \t{t}, {slot_reg}, {place.offset};")
        src = t
    if pbits == 64:
        if place.bits == 64:
            return src
        w = _low32(body, reg, src, width)
        w = _extend32(body, w, place.bits, elem)
        d = reg("b64")
        sign = "s" if elem.kind == "s" else "u"
        body.append(f"\tcvt.{sign}64.{sign}32 \t{d}, {w};")
        return d
    if pbits == 32:
        w = _low32(body, reg, src, width)
        if place.bits < 32:
            w2 = reg("b32")
            body.append(f"\tmov.b32 \t{w2}, {w};")
            w = _extend32(body, w2, place.bits, elem)
        return w
    # 16- or 8-bit parameter (e.g. __half as .b8[2]): the low bits in a 16-bit register.
    h = reg("b16")
    body.append(f"\tcvt.u16.u{width} \t{h}, {src};")
    return h


def _low32(body, reg, src: str, width: int) -> str:
    if width == 32:
        return src
    w = reg("b32")
    body.append(f"\tcvt.u32.u64 \t{w}, {src};")
    return w


def _extend32(body, w: str, bits: int, elem: ElementType) -> str:
    if bits >= 32:
        return w
    if elem.kind == "s":
        body.append(f"\tcvt.s32.{_SIGNED_CVT[bits]} \t{w}, {w};")
    elif elem.kind == "b":
        body.append(f"\tand.b32 \t{w}, {w}, 1;")
    else:
        body.append(f"\tand.b32 \t{w}, {w}, {(1 << bits) - 1};")
    return w
