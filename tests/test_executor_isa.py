"""The executor against the PTX ISA's own definitions, where an executor bug could hide a
splice bug: the ISA's pseudocode (``bfe``, ``bfi``, ``bfind``, ``prmt`` modes, ``shf``,
``shfl`` clamps and segments) written out here in plain Python, and integer and float edge
cases (C division, carry chains, ``copysign``'s operand order, ``testp``, saturating and
NaN conversions) computed with NumPy or ``struct``, never with the executor."""

from __future__ import annotations

import numpy as np
import pytest

from support.ptx_exec import Pointer, run
from support.ptx_snippets import elementwise, kernel

M32 = 0xffffffff


def _ints(seed: int, n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    a[:6] = [0, 1, 0x80000000, M32, 0x7fffffff, 0xfffffff9]
    b[:6] = [0, M32, M32, 1, 0, 2]
    return a, b


def _each(f, *cols) -> np.ndarray:
    return np.array([f(*(int(c[i]) for c in cols)) & M32 for i in range(len(cols[0]))],
                    np.uint32)


def _s(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def _bfe(a: int, pos: int, length: int, signed: bool) -> int:
    """The ISA's bfe pseudocode, 32-bit."""
    pos, length = pos & 0xff, length & 0xff
    sbit = 0 if not signed or length == 0 else (a >> min(pos + length - 1, 31)) & 1
    return sum((((a >> (pos + i)) & 1) if i < length and pos + i <= 31 else sbit) << i
               for i in range(32))


def _bfi(a: int, b: int, pos: int, length: int) -> int:
    """The ISA's bfi pseudocode, 32-bit: a's low bits into b."""
    pos, length = pos & 0xff, length & 0xff
    f = b
    i = 0
    while i < length and pos + i <= 31:
        f = (f & ~(1 << (pos + i))) | (((a >> i) & 1) << (pos + i))
        i += 1
    return f


@pytest.mark.parametrize("pos,length", [(0, 0), (5, 0), (31, 1), (28, 8), (32, 4), (40, 40),
                                        (0, 32), (3, 255), (0x104, 3), (7, 0x103)])
def test_bfe_and_bfi_edge_cases(pos, length):
    a, b = _ints(10)
    for sign, signed in (("u32", False), ("s32", True)):
        got = elementwise(f"bfe.{sign} %r3, %r1, {pos}, {length};", a, b)
        np.testing.assert_array_equal(got, _each(lambda x, s=signed: _bfe(x, pos, length, s), a),
                                      err_msg=f"bfe.{sign} {pos} {length}")
    got = elementwise(f"bfi.b32 %r3, %r1, %r2, {pos}, {length};", a, b)
    np.testing.assert_array_equal(got, _each(lambda x, y: _bfi(x, y, pos, length), a, b),
                                  err_msg=f"bfi {pos} {length}")


def test_bfe_and_bfi_with_register_position_and_length():
    a, b = _ints(11)
    got = elementwise("and.b32 %r4, %r2, 0x3f;\n    shr.u32 %r5, %r2, 8;\n"
                      "    and.b32 %r5, %r5, 0x3f;\n    bfe.s32 %r3, %r1, %r4, %r5;", a, b)
    np.testing.assert_array_equal(got, _each(
        lambda x, y: _bfe(x, y & 0x3f, (y >> 8) & 0x3f, True), a, b))
    got = elementwise("and.b32 %r4, %r2, 0x3f;\n    shr.u32 %r5, %r2, 8;\n"
                      "    and.b32 %r5, %r5, 0x3f;\n    bfi.b32 %r3, %r1, %r2, %r4, %r5;", a, b)
    np.testing.assert_array_equal(got, _each(
        lambda x, y: _bfi(x, y, y & 0x3f, (y >> 8) & 0x3f), a, b))


def _bfind(a: int, signed: bool, shiftamt: bool) -> int:
    v = (~a & M32) if signed and a & 0x80000000 else a
    if v == 0:
        return M32
    pos = v.bit_length() - 1
    return 31 - pos if shiftamt else pos


@pytest.mark.parametrize("ty", ["u32", "s32"])
@pytest.mark.parametrize("shiftamt", [False, True])
def test_bfind(ty, shiftamt):
    a, b = _ints(12)
    a[6:10] = [0xfffffffe, 0x40000000, 0xffff0000, 2]
    sa = ".shiftamt" if shiftamt else ""
    got = elementwise(f"bfind{sa}.{ty} %r3, %r1;", a, b)
    np.testing.assert_array_equal(got, _each(lambda x: _bfind(x, ty == "s32", shiftamt), a))


#: The ISA's table of prmt's special modes: per selector c[1:0], the source byte of d.b0..b3.
PRMT_MODES = {
    "f4e": [(0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6)],
    "b4e": [(0, 7, 6, 5), (1, 0, 7, 6), (2, 1, 0, 7), (3, 2, 1, 0)],
    "rc8": [(0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)],
    "ecl": [(0, 1, 2, 3), (1, 1, 2, 3), (2, 2, 2, 3), (3, 3, 3, 3)],
    "ecr": [(0, 0, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2), (0, 1, 2, 3)],
    "rc16": [(0, 1, 0, 1), (2, 3, 2, 3), (0, 1, 0, 1), (2, 3, 2, 3)],
}


def _prmt(a: int, b: int, c: int, mode: str | None) -> int:
    src = a | (b << 32)
    byte = lambda k: (src >> (8 * k)) & 0xff
    if mode is not None:
        sel = PRMT_MODES[mode][c & 3]
        return sum(byte(s) << (8 * i) for i, s in enumerate(sel))
    out = 0
    for i in range(4):
        n = (c >> (4 * i)) & 0xf
        v = byte(n & 7)
        if n & 8:
            v = 0xff if v & 0x80 else 0
        out |= v << (8 * i)
    return out


@pytest.mark.parametrize("mode", [None, *PRMT_MODES])
def test_prmt_modes(mode):
    a, b = _ints(13)
    c = np.arange(64, dtype=np.uint32) * np.uint32(0x9e3779b1)   # every selector, any high bits
    m = f".{mode}" if mode else ""
    got = elementwise(f"mov.b32 %r4, %r2;\n    mov.u32 %r5, %tid.x;\n"
                      f"    mul.lo.u32 %r5, %r5, 0x9e3779b1;\n"
                      f"    prmt.b32{m} %r3, %r1, %r4, %r5;", a, b)
    np.testing.assert_array_equal(got, _each(lambda x, y, z: _prmt(x, y, z, mode), a, b, c))


@pytest.mark.parametrize("op", ["shf.l.wrap", "shf.l.clamp", "shf.r.wrap", "shf.r.clamp"])
def test_shf_with_any_shift_amount(op):
    a, b = _ints(14)
    n = np.arange(64, dtype=np.uint32) * np.uint32(7) % np.uint32(70)

    def ref(x, y, k):
        k = k & 31 if op.endswith("wrap") else min(k, 32)
        v = (y << 32) | x
        return (v << k) >> 32 if op.startswith("shf.l") else v >> k
    got = elementwise(f"mov.u32 %r4, %tid.x;\n    mul.lo.u32 %r4, %r4, 7;\n"
                      f"    rem.u32 %r4, %r4, 70;\n    {op}.b32 %r3, %r1, %r2, %r4;", a, b)
    np.testing.assert_array_equal(got, _each(ref, a, b, n))


def test_integer_division_truncates_as_c_does():
    a, b = _ints(15)
    b[b == 0] = 3
    b[6:12] = [2, M32 - 1, 7, M32, 5, 0xfffffffd]      # 2, -2, 7, -1, 5, -3
    a[6:12] = [0xfffffff9, 7, M32 - 6, 0x80000001, 0xfffffffb, 10]

    def sdiv(x, y):
        q = abs(_s(x)) // abs(_s(y))
        return q if (_s(x) < 0) == (_s(y) < 0) else -q
    keep = ~((a == 0x80000000) & (b == M32))           # INT_MIN / -1 is unspecified
    got = elementwise("div.s32 %r3, %r1, %r2;", a, b)
    np.testing.assert_array_equal(got[keep], _each(sdiv, a, b)[keep])
    got = elementwise("rem.s32 %r3, %r1, %r2;", a, b)
    np.testing.assert_array_equal(got[keep], _each(lambda x, y: _s(x) - sdiv(x, y) * _s(y),
                                                   a, b)[keep])
    got = elementwise("div.u32 %r3, %r1, %r2;", a, b)
    np.testing.assert_array_equal(got, a // b)
    got = elementwise("rem.u32 %r3, %r1, %r2;", a, b)
    np.testing.assert_array_equal(got, a % b)


def test_multiply_high_wide_and_mad():
    a, b = _ints(16)
    cases = {
        "mul.hi.s32 %r3, %r1, %r2;": lambda x, y: (_s(x) * _s(y)) >> 32,
        "mul.lo.s32 %r3, %r1, %r2;": lambda x, y: x * y,
        "mad.lo.s32 %r3, %r1, %r2, %r1;": lambda x, y: x * y + x,
        "mad.hi.u32 %r3, %r1, %r2, %r2;": lambda x, y: ((x * y) >> 32) + y,
        "mad.hi.s32 %r3, %r1, %r2, %r1;": lambda x, y: ((_s(x) * _s(y)) >> 32) + _s(x),
        "mul.wide.s32 %rd1, %r1, %r2;\n    shr.b64 %rd1, %rd1, 16;\n    cvt.u32.u64 %r3, %rd1;":
            lambda x, y: (_s(x) * _s(y)) >> 16,
        "mad.wide.u32 %rd1, %r1, %r2, 0xffffffffffff;\n    shr.b64 %rd1, %rd1, 20;\n"
        "    cvt.u32.u64 %r3, %rd1;": lambda x, y: (x * y + 0xffffffffffff) >> 20,
        "mul24.lo.u32 %r3, %r1, %r2;": lambda x, y: (x & 0xffffff) * (y & 0xffffff),
        "sad.u32 %r3, %r1, %r2, 5;": lambda x, y: abs(x - y) + 5,
    }
    for op, ref in cases.items():
        np.testing.assert_array_equal(elementwise(op, a, b), _each(ref, a, b), err_msg=op)


def test_carry_chains_add_and_subtract_128_bit_numbers():
    rng = np.random.default_rng(17)
    xs = [int(v) for v in rng.integers(0, 2 ** 63, 32, dtype=np.uint64)]
    xs = [(v << 65 | v) & (2 ** 128 - 1) for v in xs]
    xs[:4] = [2 ** 128 - 1, 0, 2 ** 96 - 1, 2 ** 32 - 1]
    ys = xs[::-1]
    ys[:4] = [1, 1, 1, 2 ** 128 - 1]
    limbs = lambda v: [(v >> (32 * k)) & M32 for k in range(4)]
    a = np.array([limbs(v) for v in xs], np.uint32)
    b = np.array([limbs(v) for v in ys], np.uint32)
    body = """
    mul.wide.u32 %rd1, %r0, 16;
    add.s64 %rd2, %rd_a, %rd1;
    add.s64 %rd3, %rd_b, %rd1;
    sub.s64 %rd2, %rd2, %idx;
    sub.s64 %rd3, %rd3, %idx;
    ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd2];
    ld.global.v4.b32 {%r5, %r6, %r7, %r8}, [%rd3];
    add.cc.u32 %r10, %r1, %r5;
    addc.cc.u32 %r11, %r2, %r6;
    addc.cc.u32 %r12, %r3, %r7;
    addc.cc.u32 %r13, %r4, %r8;
    addc.u32 %r14, 0, 0;
    sub.cc.u32 %r15, %r1, %r5;
    subc.cc.u32 %r16, %r2, %r6;
    subc.cc.u32 %r17, %r3, %r7;
    subc.cc.u32 %r18, %r4, %r8;
    subc.u32 %r19, 0, 0;
    mul.wide.u32 %rd4, %r0, 48;
    ld.param.u64 %rd5, [out];
    add.s64 %rd5, %rd5, %rd4;
    st.global.v4.b32 [%rd5], {%r10, %r11, %r12, %r13};
    st.global.v4.b32 [%rd5+16], {%r15, %r16, %r17, %r18};
    st.global.v2.b32 [%rd5+32], {%r14, %r19};"""
    out = np.zeros((32, 12), np.uint32)
    run(kernel(body), "k", (1,), Pointer(out), Pointer(a), Pointer(b), block=(32,))
    big = lambda row: sum(int(v) << (32 * k) for k, v in enumerate(row))
    for i, (x, y) in enumerate(zip(xs, ys)):
        assert big(out[i, :4]) + (int(out[i, 8]) << 128) == x + y, i
        assert big(out[i, 4:8]) == (x - y) % 2 ** 128, i
        assert out[i, 9] == (M32 if x < y else 0), i      # 0 - 0 - borrow


def _f32(*xs: float) -> np.ndarray:
    return np.array(xs, np.float32)


def test_copysign_takes_the_sign_of_its_first_operand():
    a = _f32(-1.0, 2.0, -0.0, 3.0, np.nan, -5.0, np.inf, 1.0)
    b = _f32(4.0, -8.0, 1.5, -0.0, -2.0, -np.inf, -1.0, -np.nan)
    got = elementwise("copysign.f32 %r3, %r1, %r2;", a.view(np.uint32), b.view(np.uint32))
    want = (b.view(np.uint32) & np.uint32(0x7fffffff)) | (a.view(np.uint32) &
                                                         np.uint32(0x80000000))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("test,ref", [
    ("finite", np.isfinite), ("infinite", np.isinf), ("number", lambda x: ~np.isnan(x)),
    ("notanumber", np.isnan),
    ("normal", lambda x: np.isfinite(x) & (np.abs(x) >= np.finfo(np.float32).tiny)),
    ("subnormal", lambda x: (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny))])
def test_testp(test, ref):
    x = _f32(0.0, -0.0, 1.0, -1e-40, 1e-45, np.inf, -np.inf, np.nan, 1.17549435e-38, 3e38,
             -np.nan, 1.1754942e-38)
    got = elementwise(f"testp.{test}.f32 %p1, %r1;\n    selp.u32 %r3, 1, 0, %p1;",
                      x.view(np.uint32), x.view(np.uint32))
    np.testing.assert_array_equal(got.astype(bool), ref(x))


def test_float_min_max_ignore_one_nan_and_nan_variants_propagate_it():
    a = _f32(np.nan, 1.0, np.nan, -2.0, 3.0, -np.inf)
    b = _f32(1.0, np.nan, np.nan, 5.0, -7.0, np.inf)
    for op, ref in (("min", np.fmin), ("max", np.fmax)):
        got = elementwise(f"{op}.f32 %r3, %r1, %r2;", a.view(np.uint32), b.view(np.uint32))
        want = ref(a, b)
        np.testing.assert_array_equal(np.isnan(got.view(np.float32)), np.isnan(want), op)
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got.view(np.float32)[ok], want[ok], op)
        got = elementwise(f"{op}.NaN.f32 %r3, %r1, %r2;", a.view(np.uint32), b.view(np.uint32))
        want = (np.minimum if op == "min" else np.maximum)(a, b)
        np.testing.assert_array_equal(np.isnan(got.view(np.float32)), np.isnan(want), op)
        np.testing.assert_array_equal(got.view(np.float32)[ok & ~np.isnan(want)],
                                      want[ok & ~np.isnan(want)], op)


def test_selp_and_slct():
    a, b = _ints(18)
    c = _f32(*([1.0, -1.0, 0.0, -0.0, -1e-40, 2.0, np.inf, -np.inf] * 8))
    got = elementwise("setp.lt.u32 %p1, %r1, %r2;\n    selp.b32 %r3, %r1, %r2, %p1;", a, b)
    np.testing.assert_array_equal(got, np.minimum(a, b))
    got = elementwise("slct.b32.s32 %r3, %r1, %r2, %r2;", a, b)
    np.testing.assert_array_equal(got, np.where(b.view(np.int32) >= 0, a, b))
    body = ("mov.u32 %r5, %tid.x;\n    and.b32 %r5, %r5, 7;\n"
            "    mov.b32 %r6, 0x3f800000;\n    {}")
    consts = [0x3f800000, 0xbf800000, 0, 0x80000000, 0x80011c82, 0x40000000, 0x7f800000,
              0xff800000]
    sel = " ".join(f"setp.eq.u32 %p1, %r5, {k};\n    @%p1 mov.b32 %r6, {v};"
                   for k, v in enumerate(consts))
    got = elementwise(body.format(sel + "\n    slct.u32.f32 %r3, %r1, %r2, %r6;"), a, b)
    np.testing.assert_array_equal(got, np.where(c >= 0, a, b))


def _cvt(op: str, x: np.ndarray) -> np.ndarray:
    return elementwise(op, x.view(np.uint32), x.view(np.uint32))


def test_float_to_integer_conversions_saturate_and_send_nan_to_zero():
    x = _f32(2.5, -2.5, 3.5, -0.5, 1e10, -1e10, np.nan, np.inf, -np.inf, 255.5, -129.0, 0.49999997)
    with np.errstate(invalid="ignore"):
        rni = np.rint(x.astype(np.float64))
        s32 = np.where(np.isnan(x), 0, np.clip(rni, -2 ** 31, 2 ** 31 - 1)).astype(np.int64)
        u32 = np.where(np.isnan(x), 0, np.clip(rni, 0, 2 ** 32 - 1)).astype(np.int64)
        u8 = np.where(np.isnan(x), 0, np.clip(np.trunc(x.astype(np.float64)), 0, 255))
        s8 = np.where(np.isnan(x), 0, np.clip(rni, -128, 127))
    np.testing.assert_array_equal(_cvt("cvt.rni.s32.f32 %r3, %r1;", x).view(np.int32), s32)
    np.testing.assert_array_equal(_cvt("cvt.rni.u32.f32 %r3, %r1;", x), u32)
    got = _cvt("cvt.rzi.sat.u8.f32 %h1, %r1;\n    cvt.u32.u16 %r3, %h1;", x)
    np.testing.assert_array_equal(got & 0xff, u8)
    got = _cvt("cvt.rni.sat.s8.f32 %h1, %r1;\n    cvt.u32.u16 %r3, %h1;", x)
    np.testing.assert_array_equal((got & 0xff).astype(np.uint8).view(np.int8), s8)


def test_integer_saturating_conversions():
    a, b = _ints(19)
    a[6:12] = [127, 128, 0xffffff80, 0xffffff7f, 255, 256]
    sa = a.view(np.int32).astype(np.int64)
    widen = "\n    cvt.u32.u16 %r3, %h1;"
    got = elementwise("cvt.sat.s8.s32 %h1, %r1;" + widen, a, b) & 0xff
    np.testing.assert_array_equal(got.astype(np.uint8).view(np.int8), np.clip(sa, -128, 127))
    np.testing.assert_array_equal(elementwise("cvt.sat.u8.s32 %h1, %r1;" + widen, a, b) & 0xff,
                                  np.clip(sa, 0, 255))
    np.testing.assert_array_equal(elementwise("cvt.sat.u16.u32 %h1, %r1;" + widen, a, b),
                                  np.minimum(a, 0xffff))
    np.testing.assert_array_equal(elementwise("cvt.s32.s8 %r3, %r1;", a, b).view(np.int32),
                                  (a & 0xff).astype(np.uint8).view(np.int8))
    np.testing.assert_array_equal(elementwise("add.sat.s32 %r3, %r1, %r2;", a, b).view(np.int32),
                                  np.clip(sa + b.view(np.int32), -2 ** 31, 2 ** 31 - 1))


def _bf16_rn(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (NaN to the canonical 0x7fff)."""
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint32)
    return np.where(np.isnan(x), 0x7fff, r)


def test_half_and_bfloat16_conversions_at_the_edges():
    x = _f32(np.nan, np.inf, -np.inf, 65504.0, 65520.0, 65519.996, 6e-8, 2.98e-8, 1e-5, -0.0,
             1.00048828125, 1.0014648, 3.3895314e38, 3.4e38, 1e-39, -1.0039062)
    with np.errstate(over="ignore"):
        f16 = x.astype(np.float16).view(np.uint16)
    got = _cvt("cvt.rn.f16.f32 %h1, %r1;\n    cvt.u32.u16 %r3, %h1;", x)
    ok = ~np.isnan(x)
    np.testing.assert_array_equal(got[ok], f16[ok])
    assert np.isnan(got[~ok].astype(np.uint16).view(np.float16)).all()
    got = _cvt("cvt.rn.bf16.f32 %h1, %r1;\n    cvt.u32.u16 %r3, %h1;", x)
    np.testing.assert_array_equal(got[ok], _bf16_rn(x)[ok])
    assert ((got[~ok] & 0x7f80) == 0x7f80).all() and (got[~ok] & 0x7f).all()
    got = _cvt("cvt.rz.bf16.f32 %h1, %r1;\n    cvt.u32.u16 %r3, %h1;", x)
    np.testing.assert_array_equal(got[ok], x.view(np.uint32)[ok] >> 16)
    # widening back is exact
    h = np.array([0x0001, 0x8001, 0x03ff, 0x7c00, 0xfc00, 0x7bff, 0x3c01, 0x8000] * 2, np.uint16)
    got = elementwise("cvt.u16.u32 %h1, %r1;\n    cvt.f32.f16 %f1, %h1;\n    mov.b32 %r3, %f1;",
                      h.astype(np.uint32), h.astype(np.uint32))
    np.testing.assert_array_equal(got.view(np.float32), h.view(np.float16).astype(np.float32))
    got = elementwise("cvt.u16.u32 %h1, %r1;\n    cvt.f32.bf16 %f1, %h1;\n    mov.b32 %r3, %f1;",
                      h.astype(np.uint32), h.astype(np.uint32))
    np.testing.assert_array_equal(got, h.astype(np.uint32) << 16)


def _e4m3_values() -> dict[int, float]:
    """Every finite e4m3 (fp8, bias 7, no inf, S.1111.111 is NaN) pattern's value."""
    out = {}
    for bits in range(256):
        e, m = (bits >> 3) & 0xf, bits & 7
        if e == 0xf and m == 7:
            continue
        v = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        out[bits] = -v if bits & 0x80 else v
    return out


def _e4m3_rn_satfinite(x: float) -> int:
    if x != x:
        return 0x7f
    vals = _e4m3_values()
    x = max(-448.0, min(448.0, x))
    best = min(vals, key=lambda b: (abs(vals[b] - x), vals[b] != x and (b & 1),
                                    (b & 0x80) != (0x80 if np.signbit(x) else 0)))
    return best


def test_fp8_e4m3_conversion_rounds_to_nearest_even_and_saturates():
    xs = _f32(0.0, 1.0, 1.0625, 1.1875, 448.0, 464.0, 1000.0, -np.inf, np.nan, 2.0 ** -9,
              2.0 ** -10, 3 * 2.0 ** -10, -0.3, 17.0, 240.0, -2.0 ** -7)
    got = elementwise("cvt.rn.satfinite.e4m3x2.f32 %h1, %r2, %r1;\n    cvt.u32.u16 %r3, %h1;",
                      xs.view(np.uint32), xs[::-1].copy().view(np.uint32))
    want = np.array([_e4m3_rn_satfinite(float(v)) for v in xs], np.uint32)
    hi = np.array([_e4m3_rn_satfinite(float(v)) for v in xs[::-1]], np.uint32)
    np.testing.assert_array_equal(got & 0xff, want)
    np.testing.assert_array_equal(got >> 8, hi)


def _shfl_ref(mode: str, lane: int, b: int, c: int) -> tuple[int, bool]:
    """The ISA's shfl.sync pseudocode: the source lane and the predicate."""
    bval, cval, mask = b & 31, c & 31, (c >> 8) & 31
    max_lane = (lane & mask) | (cval & ~mask)
    min_lane = lane & mask
    if mode == "up":
        j = lane - bval
        p = j >= max_lane
    elif mode == "down":
        j, p = lane + bval, lane + bval <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        p = j <= max_lane
    else:
        j = min_lane | (bval & ~mask)
        p = j <= max_lane
    return (j if p else lane), p


@pytest.mark.parametrize("mode", ["up", "down", "bfly", "idx"])
@pytest.mark.parametrize("b,c", [(1, 0x1f), (3, 0), (5, 0x181f), (2, 0x1807), (9, 0x1c03),
                                 (13, 0x1010), (31, 0x1f)])
def test_shfl_clamps_and_segments(mode, b, c):
    out = np.zeros((32, 2), np.uint32)
    body = f"""
    mul.lo.u32 %r1, %r0, 1000;
    shfl.sync.{mode}.b32 %r3|%p1, %r1, {b}, {c}, -1;
    selp.u32 %r4, 1, 0, %p1;
    mul.wide.u32 %rd1, %r0, 8;
    ld.param.u64 %rd2, [out];
    add.s64 %rd2, %rd2, %rd1;
    st.global.v2.b32 [%rd2], {{%r3, %r4}};"""
    run(kernel(body), "k", (1,), Pointer(out), Pointer(out), Pointer(out), block=(32,))
    want = [_shfl_ref(mode, lane, b, c) for lane in range(32)]
    np.testing.assert_array_equal(out[:, 0], [j * 1000 for j, _ in want])
    np.testing.assert_array_equal(out[:, 1], [int(p) for _, p in want])


def test_vote_and_redux_variants():
    out = np.zeros((64, 8), np.uint32)
    body = """
    and.b32 %r1, %r0, 31;
    setp.lt.u32 %p1, %r0, 40;
    vote.sync.all.pred %p2, %p1, -1;
    vote.sync.any.pred %p3, %p1, -1;
    setp.ne.u32 %p4, %r1, 7;
    vote.sync.uni.pred %p5, %p4, -1;
    selp.u32 %r2, 1, 0, %p2;
    selp.u32 %r3, 1, 0, %p3;
    selp.u32 %r4, 1, 0, %p5;
    sub.s32 %r5, 16, %r1;
    redux.sync.min.s32 %r6, %r5, -1;
    redux.sync.max.u32 %r7, %r5, -1;
    redux.sync.or.b32 %r8, %r0, -1;
    redux.sync.and.b32 %r9, %r5, -1;
    redux.sync.xor.b32 %r10, %r0, -1;
    mul.wide.u32 %rd1, %r0, 32;
    ld.param.u64 %rd2, [out];
    add.s64 %rd2, %rd2, %rd1;
    st.global.v4.b32 [%rd2], {%r2, %r3, %r4, %r6};
    st.global.v4.b32 [%rd2+16], {%r7, %r8, %r9, %r10};"""
    run(kernel(body), "k", (1,), Pointer(out), Pointer(out), Pointer(out), block=(64,))
    for w in range(2):
        t = np.arange(32 * w, 32 * w + 32)
        lane = t % 32
        v = (16 - lane).astype(np.int64) & M32
        o = out[32 * w:32 * w + 32]
        assert (o[:, 0] == int((t < 40).all())).all()
        assert (o[:, 1] == int((t < 40).any())).all()
        assert (o[:, 2] == 0).all()                     # lane 7 disagrees
        assert (o[:, 3].view(np.int32) == -15).all()
        assert (o[:, 4] == v.max()).all()
        assert (o[:, 5] == np.bitwise_or.reduce(t)).all()
        assert (o[:, 6] == np.bitwise_and.reduce(v)).all()
        assert (o[:, 7] == np.bitwise_xor.reduce(t)).all()


def test_shared_atomics():
    extra = ".shared .align 4 .b32 cells[8];\n"
    body = """
    mov.u32 %r1, cells;
    setp.eq.u32 %p1, %r0, 0;
    mov.u32 %r5, 0;
    mov.u32 %r6, 0x7fffffff;
    @%p1 st.shared.v4.b32 [%r1], {%r5, %r5, %r5, %r6};
    @%p1 st.shared.v4.b32 [%r1+16], {%r5, %r5, %r5, %r5};
    bar.sync 0;
    atom.shared.add.u32 %r2, [%r1], %r0;
    atom.shared.inc.u32 %r2, [%r1+4], 10;
    atom.shared.dec.u32 %r2, [%r1+8], 10;
    sub.s32 %r3, 20, %r0;
    atom.shared.min.s32 %r2, [%r1+12], %r3;
    atom.shared.max.s32 %r2, [%r1+16], %r3;
    atom.shared.or.b32 %r2, [%r1+20], %r0;
    atom.shared.exch.b32 %r2, [%r1+24], 5;
    atom.shared.cas.b32 %r4, [%r1+28], %r0, 1000;
    bar.sync 0;
    @%p1 ld.shared.v4.b32 {%r5, %r6, %r7, %r8}, [%r1];
    @%p1 st.global.v4.b32 [%rd_out], {%r5, %r6, %r7, %r8};
    @%p1 ld.shared.v4.b32 {%r5, %r6, %r7, %r8}, [%r1+16];
    @%p1 st.global.v4.b32 [%rd_out+16], {%r5, %r6, %r7, %r8};
    setp.eq.u32 %p2, %r4, %r0;
    selp.u32 %r9, 1, 0, %p2;
    st.global.b32 [%rd_a], %r9;"""
    out = np.zeros(8, np.uint32)
    won = np.zeros(64, np.uint32)
    run(kernel(body, extra=extra), "k", (1,), Pointer(out), Pointer(won), Pointer(won),
        block=(64,))
    assert out[0] == sum(range(64))
    assert out[1] == 64 % 11                   # inc wraps to 0 past 10
    assert out[2] == (-64) % 11                # dec wraps to 10 below 0
    assert out[3].view(np.int32) == 20 - 63 and out[4] == 20
    assert out[5] == 63 and out[6] == 5 and out[7] == 1000
    assert won.sum() == 1 and won[0] == 1      # only thread 0 finds its own id there
