"""The C++ arithmetic types the fuzzer generates, their rules (integral promotion, the usual
arithmetic conversions, [expr.cond] for ``?:``) and integer value ranges, and the table of
functions a generated snippet may call.

The ranges are how the generator keeps programs free of undefined behaviour without
wrapping every operation (YARPGen's approach, coarsely): an integer expression's range is
an interval that holds every value it can take; an operation whose exact result may leave
its type's range, a division that may divide by zero, a shift whose count may be out of
bounds, goes through a safe wrapper of ``include/fuzz_ops.h`` instead (Csmith's).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class CType:
    """One arithmetic type.

    Attributes:
        name: the dtype name (``int32``, ``float64``, ``bool``).
        c: its C++ spelling (splice's: ``signed char``, ``long long``...).
        bits: width.
        kind: ``b`` (bool), ``s`` (signed), ``u`` (unsigned), ``f`` (floating).
    """

    name: str
    c: str
    bits: int
    kind: str

    @property
    def is_int(self) -> bool:
        """An integer type (bool included: it promotes to int)."""
        return self.kind in "bsu"

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def lo(self) -> int:
        return -(1 << (self.bits - 1)) if self.kind == "s" else 0

    @property
    def hi(self) -> int:
        if self.kind == "b":
            return 1
        return (1 << (self.bits - (self.kind == "s"))) - 1

    @property
    def full(self) -> tuple[int, int] | None:
        """Its whole range (None for a floating type)."""
        return None if self.is_float else (self.lo, self.hi)

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.name)

    def __repr__(self) -> str:
        return self.name


TYPES: dict[str, CType] = {t.name: t for t in (
    CType("bool", "bool", 8, "b"),
    CType("int8", "signed char", 8, "s"),
    CType("int16", "short", 16, "s"),
    CType("int32", "int", 32, "s"),
    CType("int64", "long long", 64, "s"),
    CType("uint8", "unsigned char", 8, "u"),
    CType("uint16", "unsigned short", 16, "u"),
    CType("uint32", "unsigned int", 32, "u"),
    CType("uint64", "unsigned long long", 64, "u"),
    CType("float32", "float", 32, "f"),
    CType("float64", "double", 64, "f"),
)}
BOOL, I32, I64, U32, U64 = (TYPES[n] for n in ("bool", "int32", "int64", "uint32", "uint64"))
F32, F64 = TYPES["float32"], TYPES["float64"]
INTS = [t for t in TYPES.values() if t.kind in "su"]
FLOATS = [F32, F64]

Range = tuple[int, int] | None


def promote(t: CType) -> CType:
    """Integral promotion: bool and types narrower than int become int."""
    return I32 if t.is_int and t.bits < 32 else t


def usual(a: CType, b: CType) -> CType:
    """The usual arithmetic conversions ([expr.arith.conv]) of two operand types."""
    if F64 in (a, b):
        return F64
    if F32 in (a, b):
        return F32
    a, b = promote(a), promote(b)
    if a == b:
        return a
    if a.kind == b.kind:
        return a if a.bits > b.bits else b
    s, u = (a, b) if a.kind == "s" else (b, a)
    if u.bits >= s.bits:
        return u
    return s     # the signed type is wider: it holds every value of the unsigned one


def conditional(a: CType, b: CType) -> CType:
    """The type of ``c ? a : b`` for arithmetic operands ([expr.cond]): the common type if
    they are the same, else the usual arithmetic conversions."""
    return a if a == b else usual(a, b)


def unsigned_of(t: CType) -> CType:
    return {32: U32, 64: U64}[t.bits]


def fits(r: Range, t: CType) -> bool:
    """Every value of range ``r`` is a value of ``t``."""
    return r is not None and t.is_int and t.lo <= r[0] and r[1] <= t.hi


def convert(r: Range, t: CType) -> Range:
    """The range of a value of range ``r`` (None: a floating value) converted to ``t``."""
    if t.is_float:
        return None
    if t.kind == "b":
        if r is None or (r[0] <= 0 <= r[1]):
            return (0, 1) if r != (0, 0) else (0, 0)
        return (1, 1)
    return r if fits(r, t) else t.full


def span(values) -> tuple[int, int]:
    v = list(values)
    return min(v), max(v)


# --------------------------------------------------------------------------------- functions

@dataclasses.dataclass(frozen=True)
class Function:
    """A function a snippet may call: CUDA's (a builtin of NVRTC, defined for the host by
    ``fuzz_ops.h``) or the C library's (both sides have it).

    Attributes:
        name: as called.
        result: the result type.
        params: the parameter types (arguments are converted to them explicitly).
        masks: for each parameter, a mask the argument is anded with (None: none), keeping
            it in the domain both definitions agree on (``__byte_perm``'s selector).
        guards: for each parameter, a function of ``fuzz_ops.h`` the argument goes through
            (None: none): ``fz_not_nan`` for ``copysign``'s sign, since the sign of a NaN
            an operation makes is the implementation's (x86's default NaN is negative, a
            GPU's positive), and copysign is the one function that shows it.
    """

    name: str
    result: CType
    params: tuple[CType, ...]
    masks: tuple[int | None, ...] = ()
    guards: tuple[str | None, ...] = ()


def _f(name: str, result: str, *params: str, masks=(), guards=()) -> Function:
    return Function(name, TYPES[result], tuple(TYPES[p] for p in params), tuple(masks),
                    tuple(guards))


#: The guard functions (fuzz_ops.h): a NaN becomes 1.
GUARDS = {"float32": Function("fz_not_nan", TYPES["float32"], (TYPES["float32"],)),
          "float64": Function("fz_not_nan", TYPES["float64"], (TYPES["float64"],))}


_MODES = ("rn", "rz", "ru", "rd")


def _functions() -> list[Function]:
    fs = [
        # integer intrinsics
        _f("__popc", "int32", "uint32"), _f("__popcll", "int32", "uint64"),
        _f("__clz", "int32", "int32"), _f("__clzll", "int32", "int64"),
        _f("__ffs", "int32", "int32"), _f("__ffsll", "int32", "int64"),
        _f("__brev", "uint32", "uint32"), _f("__brevll", "uint64", "uint64"),
        _f("__mulhi", "int32", "int32", "int32"), _f("__umulhi", "uint32", "uint32", "uint32"),
        _f("__mul64hi", "int64", "int64", "int64"),
        _f("__umul64hi", "uint64", "uint64", "uint64"),
        _f("__mul24", "int32", "int32", "int32"), _f("__umul24", "uint32", "uint32", "uint32"),
        _f("__hadd", "int32", "int32", "int32"), _f("__rhadd", "int32", "int32", "int32"),
        _f("__uhadd", "uint32", "uint32", "uint32"), _f("__urhadd", "uint32", "uint32", "uint32"),
        _f("__sad", "uint32", "int32", "int32", "uint32"),
        _f("__usad", "uint32", "uint32", "uint32", "uint32"),
        _f("__byte_perm", "uint32", "uint32", "uint32", "uint32", masks=(None, None, 0x7777)),
        _f("__dp4a", "int32", "int32", "int32", "int32"),
        _f("__dp4a", "uint32", "uint32", "uint32", "uint32"),
        _f("umin", "uint32", "uint32", "uint32"), _f("umax", "uint32", "uint32", "uint32"),
        _f("llmin", "int64", "int64", "int64"), _f("llmax", "int64", "int64", "int64"),
        _f("ullmin", "uint64", "uint64", "uint64"), _f("ullmax", "uint64", "uint64", "uint64"),
        _f("__saturatef", "float32", "float32"),
        # exact C library functions (0 ulp in the CUDA Math API)
        *(_f(n + "f", "float32", *["float32"] * k) for n, k in _LIBM),
        *(_f(n, "float64", *["float64"] * k) for n, k in _LIBM),
        _f("copysignf", "float32", "float32", "float32", guards=(None, "fz_not_nan")),
        _f("copysign", "float64", "float64", "float64", guards=(None, "fz_not_nan")),
        _f("ldexpf", "float32", "float32", "int32"), _f("ldexp", "float64", "float64", "int32"),
    ]
    for s in ("l", "lc", "r", "rc"):
        fs.append(_f(f"__funnelshift_{s}", "uint32", "uint32", "uint32", "uint32"))
    for m in _MODES:   # IEEE operations and conversions with a rounding mode
        for op in ("add", "sub", "mul", "div"):
            fs += [_f(f"__f{op}_{m}", "float32", "float32", "float32"),
                   _f(f"__d{op}_{m}", "float64", "float64", "float64")]
        fs += [_f(f"__fsqrt_{m}", "float32", "float32"), _f(f"__dsqrt_{m}", "float64", "float64"),
               _f(f"__frcp_{m}", "float32", "float32"), _f(f"__drcp_{m}", "float64", "float64"),
               _f(f"__fmaf_{m}", "float32", "float32", "float32", "float32"),
               _f(f"__fma_{m}", "float64", "float64", "float64", "float64"),
               _f(f"__double2float_{m}", "float32", "float64")]
        for src, fname in (("float32", "float"), ("float64", "double")):
            for dst, iname in (("int32", "int"), ("uint32", "uint"), ("int64", "ll"),
                               ("uint64", "ull")):
                # a NaN converts to 0 only where ptxas adds F2I's .NTZ (from float to 32
                # bits); elsewhere its value is the hardware's (0x80000000 from
                # __double2uint_rn on an H100), so those inputs are never a NaN
                ntz = src == "float32" and dst.endswith("32")
                fs.append(_f(f"__{fname}2{iname}_{m}", dst, src,
                             guards=() if ntz else ("fz_not_nan",)))
        for src, iname in (("int32", "int"), ("uint32", "uint"), ("int64", "ll"),
                           ("uint64", "ull")):
            fs.append(_f(f"__{iname}2float_{m}", "float32", src))
        for src, iname in (("int64", "ll"), ("uint64", "ull")):
            fs.append(_f(f"__{iname}2double_{m}", "float64", src))
    fs += [_f("__int2double_rn", "float64", "int32"), _f("__uint2double_rn", "float64", "uint32")]
    return fs


#: (name without the float suffix, arity) of the C library's exactly rounded functions.
_LIBM = [("sqrt", 1), ("fabs", 1), ("floor", 1), ("ceil", 1), ("trunc", 1), ("rint", 1),
         ("nearbyint", 1), ("round", 1), ("fma", 3), ("fmod", 2),
         ("remainder", 2), ("fdim", 2), ("nextafter", 2)]

FUNCTIONS: list[Function] = _functions()
