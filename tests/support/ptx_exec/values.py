"""Bit patterns and IEEE arithmetic of the executor: every register holds an unsigned int
(its bits); these helpers turn bits into numbers and numbers into correctly rounded bits.

f32 add/sub/mul/div/sqrt round-to-nearest are computed in float64 and rounded once more to
float32: double rounding is innocuous for these when the wider format has at least 2p+2
bits (53 >= 2*24+2). f32 fma carries the float64 sum's exact error (TwoSum) so the second
rounding is exact too; f64 fma and every directed rounding (``.rz``/``.rm``/``.rp``) go
through :class:`fractions.Fraction`, which Python rounds correctly to float64.
"""

from __future__ import annotations

import math
import re
import struct
from fractions import Fraction

_F = struct.Struct("<f")
_I = struct.Struct("<I")
_D = struct.Struct("<d")
_Q = struct.Struct("<Q")
_E = struct.Struct("<e")
_H = struct.Struct("<H")

M8, M16, M32, M64 = 0xff, 0xffff, 0xffffffff, (1 << 64) - 1
F32_NAN = 0x7fffffff          # the canonical NaN an f32 operation returns
F64_NAN = 0x7fffffffffffffff
F16_NAN = 0x7fff
BF16_NAN = 0x7fff
F32_INF = 0x7f800000
FLT_MAX = 3.4028234663852886e38


def sext(v: int, bits: int) -> int:
    """``v``'s low ``bits`` bits as a signed integer."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def b2f(b: int) -> float:
    return _F.unpack(_I.pack(b & M32))[0]


def f2b(x: float) -> int:
    """float -> nearest f32 bits (ties to even; NaN -> canonical NaN)."""
    if x != x:
        return F32_NAN
    try:
        return _I.unpack(_F.pack(x))[0]
    except OverflowError:
        return F32_INF | (0x80000000 if x < 0 else 0)


def b2d(b: int) -> float:
    return _D.unpack(_Q.pack(b & M64))[0]


def d2b(x: float) -> int:
    if x != x:
        return F64_NAN
    return _Q.unpack(_D.pack(x))[0]


def b2h(b: int) -> float:
    return _E.unpack(_H.pack(b & M16))[0]


def h2b(x: float) -> int:
    """float -> nearest f16 bits (ties to even)."""
    if x != x:
        return F16_NAN
    try:
        return _H.unpack(_E.pack(x))[0]
    except OverflowError:
        return 0x7c00 | (0x8000 if x < 0 else 0)


def bf2f(b: int) -> float:
    return b2f((b & M16) << 16)


def f2bf(x: float) -> int:
    """float -> nearest bf16 bits (ties to even), through the exact value."""
    if x != x:
        return BF16_NAN
    return round_to_format(x, 8, 7, "rn") if math.isfinite(x) else (
        0x7f80 | (0x8000 if x < 0 else 0))


def ftz32(b: int) -> int:
    """Flush an f32 subnormal (input or output) to a zero of its sign."""
    return b & 0x80000000 if (b & 0x7f800000) == 0 else b


def ftz64(b: int) -> int:
    return b & (1 << 63) if (b & 0x7ff0000000000000) == 0 else b


# ---------------------------------------------------------------------------------------------
# Rounding exact values to a binary format


def round_to_format(x: float | Fraction, ebits: int, mbits: int, mode: str,
                    satfinite: bool = False, has_inf: bool = True) -> int:
    """The bits of the exact finite value ``x`` rounded to the format with ``ebits``
    exponent and ``mbits`` mantissa bits, IEEE style (subnormals; ``has_inf=False`` for
    fp8 e4m3, whose largest finite value is 448). ``mode`` rn/rz/rm/rp. ``satfinite``
    clamps overflow to the largest finite value. A float -0.0 keeps its sign."""
    sign = 1 if x < 0 or (isinstance(x, float) and math.copysign(1, x) < 0) else 0
    a = Fraction(abs(x))
    bias = (1 << (ebits - 1)) - 1
    if a == 0:
        return sign << (ebits + mbits)
    emin = 1 - bias
    # exponent of a: 2^e <= a < 2^(e+1)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)
    quantum = Fraction(2) ** (e - mbits)
    q, r = divmod(a, quantum)
    q = int(q)
    up = _round_up(q, r, quantum, mode, sign)
    q += up
    if q >> (mbits + 1):          # carried into the next binade
        q >>= 1
        e += 1
    if q < (1 << mbits):          # subnormal (e == emin)
        expfield = 0
    else:
        expfield = e + bias
    if has_inf:
        emax_field = (1 << ebits) - 2
        maxfin = (emax_field << mbits) | ((1 << mbits) - 1)
    else:                         # e4m3: S.1111.111 is NaN, S.1111.110 = 448
        emax_field = (1 << ebits) - 1
        maxfin = (emax_field << mbits) | ((1 << mbits) - 2)
    bits = (expfield << mbits) | (q & ((1 << mbits) - 1))
    if expfield > emax_field or bits > maxfin:
        toward_zero = mode == "rz" or (mode == "rm" and not sign) or (mode == "rp" and sign)
        if satfinite or toward_zero:
            bits = maxfin
        elif has_inf:
            bits = ((1 << ebits) - 1) << mbits
        else:
            bits = (1 << (ebits + mbits)) - 1     # NaN
    return (sign << (ebits + mbits)) | bits


def _round_up(q: int, r: Fraction, quantum: Fraction, mode: str, sign: int) -> int:
    if r == 0:
        return 0
    if mode == "rn":
        half = quantum / 2
        return 1 if r > half or (r == half and q & 1) else 0
    if mode == "rz":
        return 0
    if mode == "rp":
        return 0 if sign else 1
    if mode == "rm":
        return 1 if sign else 0
    raise ValueError(mode)


def exact_to_f32(x: Fraction | float, mode: str) -> int:
    return round_to_format(x, 8, 23, mode) if _finite(x) else f2b(float(x))


def exact_to_f64(x: Fraction | float, mode: str) -> int:
    if not _finite(x):
        return d2b(float(x))
    if mode == "rn":
        try:
            return d2b(float(x))
        except OverflowError:
            return d2b(math.inf if x > 0 else -math.inf)
    return round_to_format(x, 11, 52, mode)


def _finite(x) -> bool:
    return isinstance(x, Fraction) or math.isfinite(x)


def decode_minifloat(b: int, ebits: int, mbits: int, has_inf: bool = True) -> float:
    """The value of a small float's bits (fp8 e4m3 / e5m2, also f16/bf16)."""
    sign = -1.0 if (b >> (ebits + mbits)) & 1 else 1.0
    exp = (b >> mbits) & ((1 << ebits) - 1)
    man = b & ((1 << mbits) - 1)
    bias = (1 << (ebits - 1)) - 1
    if has_inf and exp == (1 << ebits) - 1:
        return sign * math.inf if man == 0 else math.nan
    if not has_inf and exp == (1 << ebits) - 1 and man == (1 << mbits) - 1:
        return math.nan
    if exp == 0:
        return sign * man * 2.0 ** (1 - bias - mbits)
    return sign * (1 + man / (1 << mbits)) * 2.0 ** (exp - bias)


# ---------------------------------------------------------------------------------------------
# f32 arithmetic on bits


def _two_sum(a: float, b: float) -> tuple[float, float]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def f32_from_double_and_error(s: float, err: float) -> int:
    """f32 bits nearest to the exact value ``s + err`` (``s`` the float64 rounding of it,
    ``|err| <= ulp(s)/2``): only when ``s`` lies exactly half-way between two floats does
    the error decide (a nudge of ``s`` by one float64 ulp toward it)."""
    r = f2b(s)
    if err == 0.0 or not math.isfinite(s):
        return r
    f = b2f(r)
    if f == s or math.isinf(f):
        return r
    other = b2f(r + 1 if abs(f) < abs(s) else r - 1)
    if s != (f + other) / 2:
        return r
    return f2b(math.nextafter(s, math.inf if err > 0 else -math.inf))


def f32_fma(a: int, b: int, c: int, mode: str = "rn", ftz: bool = False,
            sat: bool = False) -> int:
    if ftz:
        a, b, c = ftz32(a), ftz32(b), ftz32(c)
    x, y, z = b2f(a), b2f(b), b2f(c)
    if mode != "rn" or not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
        r = _exact_fma(x, y, z, exact_to_f32, mode)
    else:
        p = x * y                       # exact in float64
        s, err = _two_sum(p, z)         # an exact zero gets IEEE's sign from p + z
        r = f32_from_double_and_error(s, err)
    return _finish32(r, ftz, sat)


def _exact_fma(x: float, y: float, z: float, to_bits, mode: str) -> int:
    if math.isfinite(x) and math.isfinite(y) and not math.isfinite(z):
        return to_bits(z, "rn")      # the exact product is finite, even where x * y is not
    if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
        return to_bits(x * y + z, "rn")
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact != 0:
        return to_bits(exact, mode)
    p_neg = math.copysign(1, x) * math.copysign(1, y) < 0
    z_neg = math.copysign(1, z) < 0
    if (x == 0 or y == 0) and z == 0 and p_neg == z_neg:
        neg = p_neg
    else:
        neg = mode == "rm"
    return to_bits(-0.0 if neg else 0.0, "rn")


def f64_fma(a: int, b: int, c: int, mode: str = "rn") -> int:
    return _exact_fma(b2d(a), b2d(b), b2d(c), exact_to_f64, mode)


def _finish32(r: int, ftz: bool, sat: bool) -> int:
    if (r & 0x7fffffff) > F32_INF:
        return F32_NAN if not sat else 0
    if ftz:
        r = ftz32(r)
    if sat:
        v = b2f(r)
        r = 0 if v <= 0 or v != v else (0x3f800000 if v >= 1 else r)
    return r


def f32_binary(op: str, a: int, b: int, mode: str = "rn", ftz: bool = False,
               sat: bool = False) -> int:
    """add/sub/mul/div of f32 bits with a rounding mode."""
    if ftz:
        a, b = ftz32(a), ftz32(b)
    x, y = b2f(a), b2f(b)
    if mode == "rn" or not (math.isfinite(x) and math.isfinite(y)):
        try:
            v = _ARITH[op](x, y)
        except ZeroDivisionError:
            v = math.nan if x == 0 or x != x else math.copysign(math.inf, x) * \
                math.copysign(1, y)
        r = f2b(v)
    else:
        if op == "div" and y == 0:
            return f32_binary(op, a, b, "rn", ftz, sat)
        exact = _EXACT[op](Fraction(x), Fraction(y))
        if exact != 0:
            r = exact_to_f32(exact, mode)
        elif op in ("add", "sub"):
            r = 0x80000000 if _zero_sum_negative(op, x, y, mode) else 0
        else:
            r = f2b(_ARITH[op](x, y))      # a zero product or quotient: the signs' xor
    return _finish32(r, ftz, sat)


def _zero_sum_negative(op: str, x: float, y: float, mode: str) -> bool:
    """The sign of an exact zero ``x + y`` (``x - y``: ``x + -y``), IEEE 754 6.3: the
    addends' sign when both are zeros of one sign, else -0 only rounding toward -inf
    (``+0 + -0`` and ``x - x`` are -0 in .rm, +0 in the other modes)."""
    yy = y if op == "add" else -y
    if x == 0 and yy == 0 and math.copysign(1, x) == math.copysign(1, yy):
        return math.copysign(1, x) < 0
    return mode == "rm"


def f64_binary(op: str, a: int, b: int, mode: str = "rn") -> int:
    x, y = b2d(a), b2d(b)
    if mode == "rn" or not (math.isfinite(x) and math.isfinite(y)) or (op == "div" and y == 0):
        try:
            v = _ARITH[op](x, y)
        except ZeroDivisionError:
            v = math.nan if x == 0 or x != x else math.copysign(math.inf, x) * \
                math.copysign(1, y)
        except OverflowError:
            v = math.inf
        return d2b(v)
    exact = _EXACT[op](Fraction(x), Fraction(y))
    if exact == 0 and op in ("add", "sub"):
        return d2b(-0.0 if _zero_sum_negative(op, x, y, mode) else 0.0)
    if exact == 0:
        return d2b(_ARITH[op](x, y))
    return exact_to_f64(exact, mode)


_ARITH = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
          "div": lambda x, y: x / y}
_EXACT = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
          "div": lambda x, y: x / y}


def f32_sqrt(a: int, mode: str = "rn", ftz: bool = False) -> int:
    if ftz:
        a = ftz32(a)
    x = b2f(a)
    if x != x or x < 0:
        return F32_NAN if not (x == 0) else a
    if x == 0 or math.isinf(x):
        return a
    if mode == "rn":
        return _finish32(f2b(math.sqrt(x)), ftz, False)
    return _finish32(_sqrt_directed(Fraction(x), exact_to_f32, 24, mode), ftz, False)


def f64_sqrt(a: int, mode: str = "rn") -> int:
    x = b2d(a)
    if x != x or x < 0:
        return F64_NAN if x != 0 else a
    if x == 0 or math.isinf(x):
        return a
    if mode == "rn":
        # math.sqrt is correctly rounded (IEEE) on the platforms CPython runs on
        return d2b(math.sqrt(x))
    return _sqrt_directed(Fraction(x), exact_to_f64, 53, mode)


def _sqrt_directed(x: Fraction, to_bits, prec: int, mode: str) -> int:
    # integer square root at 2*prec+4 bits of precision, then directed rounding; an inexact
    # root is nudged by an infinitesimal so that it never lands on a representable value
    shift = 2 * (prec + 4) - (x.numerator.bit_length() - x.denominator.bit_length())
    shift += shift & 1
    n = (x.numerator << shift) // x.denominator if shift >= 0 else \
        x.numerator // (x.denominator << -shift)
    r = math.isqrt(n)
    exact = r * r == n and (x.numerator << max(shift, 0)) % x.denominator == 0
    root = Fraction(r, 1 << (shift // 2)) if shift >= 0 else Fraction(r << (-shift // 2))
    if not exact:
        root += Fraction(1, 1 << (shift // 2 + 2)) if shift >= 0 else Fraction(1, 4)
    return to_bits(root, mode)


def f32_rcp(a: int, mode: str = "rn", ftz: bool = False) -> int:
    return f32_binary("div", 0x3f800000, a, mode, ftz)


def minmax(op: str, a: int, b: int, bits: int, value, qnan: int, nan: bool = False) -> int:
    """min/max of two floats' bits (``value`` decodes them): a NaN operand is ignored unless
    both are (``nan``: ``.NaN``, propagated) and gives the canonical ``qnan``; -0 < +0."""
    x, y = value(a), value(b)
    if x != x or y != y:
        if nan or (x != x and y != y):
            return qnan
        return b if x != x else a
    if x == y:
        s = bits - 1
        neg = (a >> s) | (b >> s) if op == "min" else (a >> s) & (b >> s)
        return (a & ((1 << s) - 1)) | (neg << s)
    return a if (x < y) == (op == "min") else b


def f32_minmax(op: str, a: int, b: int, ftz: bool = False, nan: bool = False) -> int:
    if ftz:
        a, b = ftz32(a), ftz32(b)
    return minmax(op, a, b, 32, b2f, F32_NAN, nan)


def f64_minmax(op: str, a: int, b: int) -> int:
    return minmax(op, a, b, 64, b2d, F64_NAN)


def float_to_int(x: float, bits: int, signed: bool, mode: str, sat_always: bool = True) -> int:
    """cvt.rni/rzi/rmi/rpi (or rn/rz...) float -> integer of a number (not a NaN: what a
    NaN gives depends on the instruction ptxas picks, ``runtime._nan_to_int``), saturated
    to the integer range (PTX: float-to-integer conversions saturate)."""
    if math.isinf(x):
        v = None
    else:
        v = {"rn": _round_half_even, "rz": math.trunc, "rm": math.floor,
             "rp": math.ceil}[mode](x)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if v is None:
        v = hi if x > 0 else lo
    v = min(max(v, lo), hi)
    return v & ((1 << bits) - 1)


def _round_half_even(x: float) -> int:
    return int(round(x))


def float_round_integral(x: float, mode: str) -> float:
    """cvt.rni.f32.f32 and friends: round to an integral value in the same format."""
    if x != x or math.isinf(x) or x == 0:
        return x
    v = {"rn": _round_half_even, "rz": math.trunc, "rm": math.floor, "rp": math.ceil}[mode](x)
    return math.copysign(float(v), x) if v == 0 else float(v)


# ---------------------------------------------------------------------------------------------
# PTX types and literals

# type name -> (bits, kind): kind "u" unsigned/bits, "s" signed, "f" float, "p" predicate
TYPES = {
    "pred": (1, "p"), "b8": (8, "u"), "u8": (8, "u"), "s8": (8, "s"),
    "b16": (16, "u"), "u16": (16, "u"), "s16": (16, "s"), "f16": (16, "f"), "bf16": (16, "f"),
    "b32": (32, "u"), "u32": (32, "u"), "s32": (32, "s"), "f32": (32, "f"),
    "f16x2": (32, "f"), "bf16x2": (32, "f"), "tf32": (32, "f"),
    "b64": (64, "u"), "u64": (64, "u"), "s64": (64, "s"), "f64": (64, "f"),
    "b128": (128, "u"), "e4m3x2": (16, "f"), "e5m2x2": (16, "f"), "e4m3": (8, "f"),
    "e5m2": (8, "f"), "s16x2": (32, "s"), "u16x2": (32, "u"),
}

_IMM_RE = re.compile(r"^-?(0[xX][0-9a-fA-F]+|[0-9]+)U?$")
_FIMM_RE = re.compile(r"^0[fF][0-9a-fA-F]{8}$|^0[dD][0-9a-fA-F]{16}$")


def imm_value(op: str) -> int:
    """An integer or float immediate's bits (floats as ``0f``/``0d`` hex)."""
    if _FIMM_RE.match(op):
        return int(op[2:], 16)
    s = op.rstrip("U")
    return int(s, 0) if not s.startswith("-") else -int(s[1:], 0)


def is_imm(op: str) -> bool:
    return bool(_IMM_RE.match(op) or _FIMM_RE.match(op))
