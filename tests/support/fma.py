"""The kernels of the fma-marker tests (compiled on the CPU and run on the GPU), their
NumPy references, and the checks of a build's fma sites against the raw tileiras PTX.

Externs return values that identify every bit of every argument (NaNs canonicalised,
so that a reference does not depend on which NaN a constant becomes); kernels cover
special constants, all-constant and scalar calls, control flow, packings up to 128
bits, small results, 2-d shapes, reductions, ``splice.asm`` and 64-bit integer results.
"""

from __future__ import annotations

import re

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.errors import SpliceError
from splice.forms.rewrite import MARKER_RE
from splice.ptxtools.ptx import Module, destinations, parse_instruction

from . import kernels as K

ConstInt = ct.Constant[int]
ARCHS = ["sm_80", "sm_90", "sm_100"]
f32, f64 = ct.float32, ct.float64
NAN, INF = float("nan"), float("inf")
CANON_NAN64 = 0x7FF8000000000000
CANON_NAN32 = 0x7FC00000

# ---------------------------------------------------------------------------------------------
# Externs whose results identify every bit of every argument (NaNs canonicalised, so that the
# reference does not depend on which NaN a constant becomes).

_HDR = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
_BITS_D = ("__device__ static unsigned long long bd(double v) { return v != v ? "
           "0x7ff8000000000000ull : (unsigned long long)__double_as_longlong(v); }\n")
_BITS_F = ("__device__ static unsigned int bf(float v) { return v != v ? 0x7fc00000u : "
           "__float_as_uint(v); }\n")


def cuda_extern(sig: str, body: str, name: str, **kw):
    from splice.types import parse_signature
    s = parse_signature(sig)
    params = ", ".join(f"{a.c_type} {'abcdefgh'[i]}" for i, a in enumerate(s.args))
    ret = s.result.c_type if s.result else "void"
    src = f'{_HDR}{_BITS_D}{_BITS_F}extern "C" __device__ {ret} {name}({params}) {{ {body} }}\n'
    return splice.extern(source=src, name=name, signature=sig, **kw)(lambda *a: None)


hash_dd = cuda_extern("uint64(float64, float64)", "return bd(a) * 3ull + bd(b) * 5ull + 1ull;",
                  "fm_hash_dd")
hash_dd_call = cuda_extern("uint64(float64, float64)", "return bd(a) * 3ull + bd(b) * 5ull + 1ull;",
                       "fm_hash_dd_call", inline="never")
hash_ff = cuda_extern("uint32(float32, float32)", "return bf(a) * 3u + bf(b) * 5u + 1u;",
                  "fm_hash_ff")
hash_qq = cuda_extern("uint64(uint64, uint64)", "return a * 3ull + b * 5ull + 1ull;", "fm_hash_qq")
hash_qq_call = cuda_extern("uint64(uint64, uint64)", "return a * 3ull + b * 5ull + 1ull;",
                       "fm_hash_qq_call", inline="never")
hash_ll = cuda_extern("int64(int64, int64)",
                  "return (long long)((unsigned long long)a * 3ull + (unsigned long long)b * 5ull"
                  " + 1ull);", "fm_hash_ll")
hash_4f = cuda_extern("uint32(float32, float32, float32, float32)",
                  "return bf(a) + bf(b) * 3u + bf(c) * 5u + bf(d) * 7u;", "fm_hash_4f")
# every bit of four 16-bit arguments, in place: checks the unpacking offsets exactly
pack_16x4 = cuda_extern("uint64(float16, bfloat16, int16, uint16)",
                    "return (unsigned long long)__half_as_ushort(a) | "
                    "((unsigned long long)__bfloat16_as_ushort(b) << 16) | "
                    "((unsigned long long)(unsigned short)c << 32) | "
                    "((unsigned long long)d << 48);", "fm_pack_16x4")
# 120 bits of arguments: a double, an int, a short and a signed char
pack_120 = cuda_extern("uint64(float64, int32, int16, int8)",
                   "return bd(a) ^ ((unsigned long long)(unsigned int)b * 0x9E3779B97F4A7C15ull)"
                   " ^ ((unsigned long long)(unsigned short)c << 40) ^ "
                   "((unsigned long long)(unsigned char)d << 56);", "fm_pack_120")
pack_small = cuda_extern("uint64(int8, uint8, bool, int32)",
                     "return (unsigned long long)(unsigned char)a | ((unsigned long long)b << 8)"
                     " | ((unsigned long long)c << 16) | "
                     "((unsigned long long)(unsigned int)d << 32);",
                     "fm_pack_small")
fdd = cuda_extern("float64(float64, float64)", "return a * 0.5 + b;", "fm_fdd")
fneg = cuda_extern("float64(float64)", "return -a;", "fm_fneg")
ff = cuda_extern("float32(float32, float32)", "return a * 0.5f + b;", "fm_ff")
f_bool = cuda_extern("bool(float64, bool)", "return (a > 0.0) != b;", "fm_f_bool")
f_i8 = cuda_extern("int8(int8, uint64)", "return (signed char)(a + (signed char)(b & 7));",
               "fm_f_i8")
f_half = cuda_extern("float16(float16, float16)",
                     "return __hadd(a, __hmul(b, __float2half(2.0f)));", "fm_f_half")
f_bf16 = cuda_extern("bfloat16(bfloat16)",
                 "return __float2bfloat16(__bfloat162float(a) * 2.0f + 1.0f);", "fm_f_bf16")
no_args = cuda_extern("float32()", "return 42.5f;", "fm_no_args")


def f64_inputs(n, seed, specials=True):
    """float64 inputs over many magnitudes, with NaN, infinities, zeros, subnormals and the
    largest value at both ends and reversed after them."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 6, n)
    sp = np.array([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 5e-324, -5e-324,
                   1.7976931348623157e+308, -NAN])
    if specials and n >= 3 * len(sp):
        x[:len(sp)] = sp
        x[len(sp):2 * len(sp)] = sp[::-1]
        x[-len(sp):] = sp
    return x


def f32_inputs(n, seed):
    """:func:`f64_inputs` as float32 (out of range: infinity)."""
    with np.errstate(over="ignore"):
        x = f64_inputs(n, seed).astype(np.float32)
    x[np.abs(x) > 3e38] = np.float32(INF)
    return x


def np_bits64(x):
    x = np.asarray(x, dtype=np.float64)
    b = x.view(np.uint64).copy()
    b[np.isnan(x)] = CANON_NAN64
    return b


def np_bits32(x):
    x = np.asarray(x, dtype=np.float32)
    b = x.view(np.uint32).copy()
    b[np.isnan(x)] = CANON_NAN32
    return b


def ref_hash_dd(a, b):
    return np_bits64(a) * np.uint64(3) + np_bits64(b) * np.uint64(5) + np.uint64(1)


def ref_hash_qq(a, b):
    a = np.asarray(a).astype(np.uint64)
    b = np.asarray(b).astype(np.uint64)
    return a * np.uint64(3) + b * np.uint64(5) + np.uint64(1)


def ref_hash_ff(a, b):
    return np_bits32(a) * np.uint32(3) + np_bits32(b) * np.uint32(5) + np.uint32(1)


def ref_hash_4f(a, b, c, d):
    return (np_bits32(a) + np_bits32(b) * np.uint32(3) + np_bits32(c) * np.uint32(5)
            + np_bits32(d) * np.uint32(7))


# ---------------------------------------------------------------------------------------------
# Special constants reaching the marker

SPECIAL_F64 = [NAN, INF, -INF, 1.0, -1.0, -0.0, 0.0, 2.0, 0.5, 5e-324, -5e-324,
               1.7976931348623157e+308]
# integers whose bits are special doubles (as int64)
SPECIAL_I64 = [0, 1, -1, 0x7FF8000000000000, 0x7FF0000000000000, -0x8000000000000000,
               0x3FF0000000000000, -0x4010000000000000, 0xFFF0000000000000 - 2 ** 64,
               0x7FFFFFFFFFFFFFFF]


def _make_const(fn, zero_dtype, c0, c1):
    """fn with constant (or None: the loaded tile) arguments."""
    @splice.kernel
    def const_args(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        a = t if c0 is None else c0
        b = t if c1 is None else c1
        # + a zero tile: with both arguments constant the call is 0-d
        ct.store(y, index=(ct.bid(0),), tile=fn(a, b) + ct.full((TILE,), 0, zero_dtype))
    return const_args


def make_const_dd(c0, c1):
    return _make_const(hash_dd, ct.uint64, c0, c1)


def make_const_ll(c0, c1):
    return _make_const(hash_ll, ct.int64, c0, c1)


def make_full_dd(c0, c1):
    """The constants as ct.full tiles (not loosely typed scalars)."""
    @splice.kernel
    def full_dd(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=hash_dd(ct.full((TILE,), c0, dtype=ct.float64),
                                                     ct.full((TILE,), c1, dtype=ct.float64)) +
                 ct.astype(ct.full((TILE,), 0, dtype=ct.int32) * 0, ct.uint64) +
                 ct.bitcast(t * 0.0, ct.uint64) * 0)
    return full_dd


def make_const_ff(c0, c1):
    return _make_const(hash_ff, ct.uint32, c0, c1)


def make_const_4f(c):
    @splice.kernel
    def const_4f(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=hash_4f(c, t, c, t))
    return const_4f


CONST_DD_CASES = ([(c, None) for c in SPECIAL_F64] + [(None, c) for c in SPECIAL_F64] +
                  [(c, c) for c in (NAN, -0.0, 0.0, 1.0, -1.0, INF)] +
                  [(-0.0, 0.0), (0.0, -0.0), (1.0, -1.0), (NAN, -0.0)])
# keyed by repr: 0.0 == -0.0, so the tuples themselves would collide
CONST_DD = {repr(case): (case, make_const_dd(*case)) for case in CONST_DD_CASES}
CONST_LL_CASES = [(c, None) for c in SPECIAL_I64] + [(None, c) for c in SPECIAL_I64] + \
                 [(c, c) for c in (0, -0x8000000000000000, 0x7FF8000000000000)]
CONST_LL = {repr(case): (case, make_const_ll(*case)) for case in CONST_LL_CASES}
FULL_DD_CASES = [(0.0, 0.0), (-0.0, -0.0), (NAN, 1.0), (1.0, NAN), (-1.0, INF), (0.0, -0.0)]
FULL_DD = {repr(case): (case, make_full_dd(*case)) for case in FULL_DD_CASES}
SPECIAL_F32 = [NAN, INF, -INF, 1.0, -1.0, -0.0, 0.0]
CONST_FF_CASES = [(c, None) for c in SPECIAL_F32] + [(None, c) for c in SPECIAL_F32] + \
                 [(-0.0, -0.0), (0.0, 0.0), (NAN, NAN)]
CONST_FF = {repr(case): (case, make_const_ff(*case)) for case in CONST_FF_CASES}
CONST_4F = {repr(c): (c, make_const_4f(c)) for c in (NAN, -0.0, 0.0, 1.0, -1.0)}


@splice.kernel
def all_const_kernel(y, TILE: ConstInt):
    # every argument constant: the marker's slots are constants blinded by the key
    r = hash_dd(1.0, -0.0) + hash_dd(NAN, 0.0) + hash_qq(0, 0) * 0 + hash_ll(-1, 0).astype(
        ct.uint64)
    ct.store(y, index=(ct.bid(0),), tile=ct.full((TILE,), 0, dtype=ct.uint64) + r)


@splice.kernel
def scalar_args_kernel(y, a: float, b: float, TILE: ConstInt):
    # 0-d call on kernel scalars, one constant. A launch passes the scalars as float32 (the
    # annotation), splice.compile's signature as float64: astype serves both
    a, b = ct.astype(a, ct.float64), ct.astype(b, ct.float64)
    r = hash_dd(a, b) + hash_dd(b, -0.0) + hash_dd(NAN, a)
    ct.store(y, index=(ct.bid(0),), tile=ct.full((TILE,), 0, dtype=ct.uint64) + r)


@splice.kernel
def no_args_kernel(y, TILE: ConstInt):
    ct.store(y, index=(ct.bid(0),), tile=ct.full((TILE,), 0, dtype=ct.float32) + no_args())


# ---------------------------------------------------------------------------------------------
# Control flow


@splice.kernel
def if_same_extern(x, z, y, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    if flag > 0:
        r = hash_dd(t, u)
    else:
        r = hash_dd(u, t)
    ct.store(y, index=(ct.bid(0),), tile=r)


@splice.kernel
def if_same_extern_const(x, z, y, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    if flag > 0:
        r = hash_dd(t, -0.0)
    else:
        r = hash_dd(0.0, u)
    ct.store(y, index=(ct.bid(0),), tile=r)


@splice.kernel
def if_other_extern(x, z, y, flag: int, TILE: ConstInt):
    # two externs of one signature in the two arms (calls, not inlined bodies)
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    if flag > 0:
        r = hash_dd_call(t, u)
    else:
        r = hash_dd(t, u)
    ct.store(y, index=(ct.bid(0),), tile=r)


@splice.kernel
def if_other_signature(x, z, y, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    if flag > 0:
        r = hash_dd(t, u)
    else:
        r = hash_qq(ct.bitcast(t, ct.uint64), ct.bitcast(u, ct.uint64))
    ct.store(y, index=(ct.bid(0),), tile=r)


@splice.kernel
def if_zero_arm(x, z, y, flag: int, TILE: ConstInt):
    # the argument is 0 on one path: xor(0, K) folds to K there
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    if flag > 0:
        v = ct.full((TILE,), 0.0, dtype=ct.float64)
    else:
        v = t
    ct.store(y, index=(ct.bid(0),), tile=hash_dd(v, u))


@splice.kernel
def nested_ifs(x, z, y, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    r = hash_dd(t, t)
    if flag > 0:
        if flag > 1:
            r = hash_dd(u, 0.0)
        else:
            r = hash_dd(0.0, t)
    else:
        if flag < -1:
            r = hash_dd(t, u) + hash_dd(u, t)
    ct.store(y, index=(ct.bid(0),), tile=r)


@splice.kernel
def result_in_one_branch(x, z, y, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    r = hash_dd(t, u)
    out = ct.full((TILE,), 7, dtype=ct.uint64)
    if flag > 0:
        out = r
    ct.store(y, index=(ct.bid(0),), tile=out)


@splice.kernel
def unused_results(x, z, y, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    hash_dd(t, u)   # removed: pure and unused
    dead = hash_dd(u, t)  # noqa: F841 -- assigned, never used
    ct.store(y, index=(ct.bid(0),), tile=hash_dd(t, t))


@splice.kernel
def several_on_one_line(x, z, y, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=hash_dd(t, u) + hash_dd(u, t) * hash_dd(t, u))


@splice.kernel
def cse_kernel(x, z, y, flag: int, TILE: ConstInt):
    # the same extern, identical arguments, three sites (and a chain through the results)
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    a = hash_dd(t, u)
    b = hash_dd(t, u)
    c = hash_qq(a, b)
    ct.store(y, index=(ct.bid(0),), tile=c + hash_qq(a, a) - hash_qq(b, b))


@splice.kernel
def chain_kernel(x, z, y, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    a = hash_dd(t, u)
    b = hash_qq_call(a, hash_qq(a, ct.bitcast(t, ct.uint64)))
    ct.store(y, index=(ct.bid(0),), tile=hash_qq(hash_qq_call(b, a), b))


def _helper_hash(a, b):
    return hash_dd(a, b) + hash_dd(b, 0.0)


@splice.kernel
def helper_kernel(x, z, y, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=_helper_hash(t, u) + _helper_hash(u, t))


@splice.kernel
def loop_carried_from_zero(x, z, y, n: int, TILE: ConstInt):
    # acc = f(acc, t) from 0 with a runtime trip count: LLVM peels and unrolls the loop, and
    # the register of the first iteration's blinded acc is the key (xor(0, K) = K) there.
    t = ct.bitcast(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.uint64)
    acc = ct.full((TILE,), 0, dtype=ct.uint64)
    for i in range(n):
        acc = hash_qq_call(acc, t)
    ct.store(y, index=(ct.bid(0),), tile=acc)


@splice.kernel
def loop_carried_from_zero_f64(x, z, y, n: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    acc = ct.full((TILE,), 0.0, dtype=ct.float64)
    for i in range(n):
        acc = fdd(acc, t)
    ct.store(y, index=(ct.bid(0),), tile=ct.bitcast(acc, ct.uint64))


@splice.kernel
def loop_carried_f32(x, z, y, n: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,)).astype(ct.float32)
    acc = ct.full((TILE,), 0.0, dtype=ct.float32)
    for i in range(n):
        acc = ff(acc, t)
    ct.store(y, index=(ct.bid(0),), tile=ct.bitcast(acc.astype(ct.float64), ct.uint64))


@splice.kernel
def loop_scalar_index(x, z, y, n: int, TILE: ConstInt):
    # a scalar call per iteration on the loop index (0 in the first iteration)
    acc = ct.uint64(0)
    for i in range(n):
        acc = acc + hash_qq(ct.astype(i, ct.uint64), ct.astype(i, ct.uint64))
    ct.store(y, index=(ct.bid(0),), tile=ct.full((TILE,), 0, dtype=ct.uint64) + acc)


@splice.kernel
def loop_scalar_chain(x, z, y, n: int, TILE: ConstInt):
    acc = ct.uint64(0)
    for i in range(n):
        acc = hash_qq(acc, ct.astype(i, ct.uint64))
    ct.store(y, index=(ct.bid(0),), tile=ct.full((TILE,), 0, dtype=ct.uint64) + acc)


@splice.kernel
def loop_constant_trip(x, z, y, n: int, TILE: ConstInt):
    t = ct.bitcast(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.uint64)
    acc = ct.full((TILE,), 0, dtype=ct.uint64)
    for i in range(7):
        acc = hash_qq(acc, t)
    ct.store(y, index=(ct.bid(0),), tile=acc)


@splice.kernel
def loop_nested(x, z, y, n: int, TILE: ConstInt):
    t = ct.bitcast(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.uint64)
    acc = ct.full((TILE,), 0, dtype=ct.uint64)
    for i in range(n):
        for j in range(n):
            acc = hash_qq(acc, t + ct.astype(j, ct.uint64))
    ct.store(y, index=(ct.bid(0),), tile=acc)


@splice.kernel
def loop_two_sites(x, z, y, n: int, TILE: ConstInt):
    t = ct.bitcast(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.uint64)
    a = ct.full((TILE,), 0, dtype=ct.uint64)
    b = ct.full((TILE,), 0, dtype=ct.uint64)
    for i in range(n):
        a = hash_qq(a, t)
        b = hash_qq(b, a)
    ct.store(y, index=(ct.bid(0),), tile=a ^ b)


@splice.kernel
def loop_invariant_call(x, z, y, n: int, TILE: ConstInt):
    # a loop-invariant pure call: may be hoisted, must still give f(t, u) n times
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    acc = ct.full((TILE,), 0, dtype=ct.uint64)
    for i in range(n):
        acc = acc + hash_dd(t, u)
    ct.store(y, index=(ct.bid(0),), tile=acc)


@splice.kernel
def loop_if_inside(x, z, y, n: int, TILE: ConstInt):
    t = ct.bitcast(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.uint64)
    acc = ct.full((TILE,), 0, dtype=ct.uint64)
    for i in range(n):
        if i % 2 == 0:
            acc = hash_qq(acc, t)
        else:
            acc = hash_qq(t, acc)
    ct.store(y, index=(ct.bid(0),), tile=acc)


@splice.kernel
def early_return(x, z, y, n: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    if n > 0:
        ct.store(y, index=(ct.bid(0),), tile=hash_dd(t, u))
        return
    ct.store(y, index=(ct.bid(0),), tile=hash_dd(u, 0.0))


@splice.kernel
def loop_break(x, z, y, n: int, TILE: ConstInt):
    t = ct.bitcast(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.uint64)
    acc = ct.full((TILE,), 0, dtype=ct.uint64)
    for i in range(n):
        if i == 5:
            break
        acc = hash_qq(acc, t)
    ct.store(y, index=(ct.bid(0),), tile=acc)


@splice.kernel
def loop_continue(x, z, y, n: int, TILE: ConstInt):
    t = ct.bitcast(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.uint64)
    acc = ct.full((TILE,), 0, dtype=ct.uint64)
    for i in range(n):
        if i % 3 == 1:
            continue
        acc = hash_qq(acc, t)
    ct.store(y, index=(ct.bid(0),), tile=acc)


@splice.kernel
def loop_while(x, z, y, n: int, TILE: ConstInt):
    t = ct.bitcast(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.uint64)
    acc = ct.full((TILE,), 0, dtype=ct.uint64)
    i = 0
    while i < n:
        acc = hash_qq(acc, t)
        i = i + 1
    ct.store(y, index=(ct.bid(0),), tile=acc)


def np_loop(f, acc, n):
    for _ in range(n):
        acc = f(acc)
    return acc


hash_ll32 = cuda_extern("uint32(int64, int64)",
                      "return (unsigned)((unsigned long long)a * 3ull + "
                      "(unsigned long long)b * 5ull + 1ull);", "fm_hash_ll32")


hash_dd32 = cuda_extern("uint32(float64, float64)",
                      "return (unsigned)(bd(a) * 3ull + bd(b) * 5ull + 1ull);", "fm_hash_dd32")


@splice.kernel
def if_same_call_narrow(x, z, y, flag: int, TILE: ConstInt):
    # one extern with a 32-bit result in both arms: LLVM merges the two sites' fma markers
    # into one whose key is either site's (the same call, so both are proven)
    t = ct.astype(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.float32)
    if (ct.bid(0) + flag) % 2 == 0:
        r = hash_ff(t, 1.0)
    else:
        r = hash_ff(t, 2.0)
    ct.store(y, index=(ct.bid(0),), tile=ct.astype(r, ct.uint64))


@splice.kernel
def if_same_call_neg_zero(x, z, y, flag: int, TILE: ConstInt):
    # the same with -0.0, which LLVM blinds as neg.f64 of the key, in both arms
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    if (ct.bid(0) + flag) % 2 == 0:
        r = hash_dd32(t, -0.0)
    else:
        r = hash_dd32(u, -0.0)
    ct.store(y, index=(ct.bid(0),), tile=ct.astype(r, ct.uint64))


@splice.kernel
def if_same_call_int_constants(x, z, y, flag: int, TILE: ConstInt):
    # -1 and INT64_MIN in the arms, which LLVM blinds as not.b64 / the sign bit
    t = ct.bitcast(ct.load(x, index=(ct.bid(0),), shape=(TILE,)), ct.int64)
    if flag > 0:
        r = hash_ll32(t, -1)
    else:
        r = hash_ll32(-9223372036854775808, t)
    ct.store(y, index=(ct.bid(0),), tile=ct.astype(r, ct.uint64))


def ref_hash_ll32(a, b):
    a = np.asarray(a, np.int64).view(np.uint64)
    b = np.asarray(b, np.int64).view(np.uint64)
    return (a * np.uint64(3) + b * np.uint64(5) + np.uint64(1)) & np.uint64(0xFFFFFFFF)


def ref_control(name, x, zz, n, tile):
    """NumPy reference of the control-flow kernels above (x, zz float64; n the scalar)."""
    xb = x.view(np.uint64)
    with np.errstate(over="ignore"):
        even = (np.arange(len(x)) // tile + n) % 2 == 0   # the arm each block takes
        if name == "if_same_call_narrow":
            t = x.astype(np.float32)
            return ref_hash_ff(t, np.where(even, np.float32(1.0), np.float32(2.0))
                               ).astype(np.uint64)
        if name == "if_same_call_neg_zero":
            return ref_hash_dd(np.where(even, x, zz), np.full_like(x, -0.0)) & \
                np.uint64(0xFFFFFFFF)
        if name == "if_same_call_int_constants":
            xl = x.view(np.int64)
            return ref_hash_ll32(xl, np.full_like(xl, -1)) if n > 0 else \
                ref_hash_ll32(np.full_like(xl, -2 ** 63), xl)
        if name == "if_same_extern":
            return ref_hash_dd(x, zz) if n > 0 else ref_hash_dd(zz, x)
        if name == "if_same_extern_const":
            return ref_hash_dd(x, np.full_like(x, -0.0)) if n > 0 else \
                ref_hash_dd(np.zeros_like(x), zz)
        if name in ("if_other_extern",):
            return ref_hash_dd(x, zz)
        if name == "if_other_signature":
            return ref_hash_dd(x, zz) if n > 0 else ref_hash_qq(xb, zz.view(np.uint64))
        if name == "if_zero_arm":
            return ref_hash_dd(np.zeros_like(x) if n > 0 else x, zz)
        if name == "nested_ifs":
            if n > 1:
                return ref_hash_dd(zz, np.zeros_like(x))
            if n > 0:
                return ref_hash_dd(np.zeros_like(x), x)
            if n < -1:
                return ref_hash_dd(x, zz) + ref_hash_dd(zz, x)
            return ref_hash_dd(x, x)
        if name == "result_in_one_branch":
            return ref_hash_dd(x, zz) if n > 0 else np.full(x.shape, 7, np.uint64)
        if name == "unused_results":
            return ref_hash_dd(x, x)
        if name == "several_on_one_line":
            return ref_hash_dd(x, zz) + ref_hash_dd(zz, x) * ref_hash_dd(x, zz)
        if name == "cse_kernel":
            a = ref_hash_dd(x, zz)
            return ref_hash_qq(a, a) + ref_hash_qq(a, a) - ref_hash_qq(a, a)
        if name == "chain_kernel":
            a = ref_hash_dd(x, zz)
            b = ref_hash_qq(a, ref_hash_qq(a, xb))
            return ref_hash_qq(ref_hash_qq(b, a), b)
        if name == "helper_kernel":
            z0 = np.zeros_like(x)
            return (ref_hash_dd(x, zz) + ref_hash_dd(zz, z0)) + \
                (ref_hash_dd(zz, x) + ref_hash_dd(x, z0))
        if name == "loop_carried_from_zero":
            return np_loop(lambda a: ref_hash_qq(a, xb), np.zeros_like(xb), n)
        if name == "loop_carried_from_zero_f64":
            return np_loop(lambda a: a * 0.5 + x, np.zeros_like(x), n).view(np.uint64)
        if name == "loop_carried_f32":
            x32 = x.astype(np.float32)
            acc = np_loop(lambda a: (a * np.float32(0.5) + x32).astype(np.float32),
                          np.zeros_like(x32), n)
            return acc.astype(np.float64).view(np.uint64)
        if name == "loop_scalar_index":
            acc = np.zeros(1, np.uint64)
            for i in range(n):
                acc = acc + ref_hash_qq([i], [i])
            return np.broadcast_to(acc, x.shape)
        if name == "loop_scalar_chain":
            acc = np.zeros(1, np.uint64)
            for i in range(n):
                acc = ref_hash_qq(acc, [i])
            return np.broadcast_to(acc, x.shape)
        if name == "loop_constant_trip":
            return np_loop(lambda a: ref_hash_qq(a, xb), np.zeros_like(xb), 7)
        if name == "loop_nested":
            acc = np.zeros_like(xb)
            for _ in range(n):
                for j in range(n):
                    acc = ref_hash_qq(acc, xb + np.uint64(j))
            return acc
        if name == "loop_two_sites":
            a = np.zeros_like(xb)
            b = np.zeros_like(xb)
            for _ in range(n):
                a = ref_hash_qq(a, xb)
                b = ref_hash_qq(b, a)
            return a ^ b
        if name == "loop_invariant_call":
            return ref_hash_dd(x, zz) * np.uint64(n)
        if name == "early_return":
            return ref_hash_dd(x, zz) if n > 0 else ref_hash_dd(zz, np.zeros_like(x))
        if name == "loop_break":
            return np_loop(lambda a: ref_hash_qq(a, xb), np.zeros_like(xb), min(n, 5))
        if name == "loop_continue":
            k = sum(1 for i in range(n) if i % 3 != 1)
            return np_loop(lambda a: ref_hash_qq(a, xb), np.zeros_like(xb), k)
        if name == "loop_while":
            return np_loop(lambda a: ref_hash_qq(a, xb), np.zeros_like(xb), max(n, 0))
        if name == "loop_if_inside":
            acc = np.zeros_like(xb)
            for i in range(n):
                acc = ref_hash_qq(acc, xb) if i % 2 == 0 else ref_hash_qq(xb, acc)
            return acc
    raise KeyError(name)


CONTROL = {k._annotated_function.pyfunc.__name__: k for k in [
    if_same_extern, if_same_extern_const, if_other_extern, if_other_signature, if_zero_arm,
    nested_ifs, result_in_one_branch, unused_results, several_on_one_line, cse_kernel,
    chain_kernel, helper_kernel, loop_carried_from_zero, loop_carried_from_zero_f64,
    loop_carried_f32, loop_scalar_index, loop_scalar_chain, loop_constant_trip, loop_nested,
    loop_two_sites, loop_invariant_call, loop_if_inside, early_return, loop_break,
    loop_continue, loop_while, if_same_call_narrow, if_same_call_neg_zero,
    if_same_call_int_constants]}
CONTROL_SIG = K.signature(K.array(f64), K.array(f64), K.array(ct.uint64), K.scalar(ct.int32),
                          128)


# ---------------------------------------------------------------------------------------------
# Element types, packing, shapes


@splice.kernel
def pack16_kernel(a, b, c, d, y, TILE: ConstInt):
    i = (ct.bid(0),)
    y_t = pack_16x4(ct.load(a, index=i, shape=(TILE,)), ct.load(b, index=i, shape=(TILE,)),
                    ct.load(c, index=i, shape=(TILE,)), ct.load(d, index=i, shape=(TILE,)))
    ct.store(y, index=i, tile=y_t)


@splice.kernel
def pack16_const_kernel(a, y, TILE: ConstInt):
    # -0.0 (0x8000) as float16 and bfloat16, -1 and 0xffff: every 16-bit slot part all-ones
    # or sign bit only
    i = (ct.bid(0),)
    ct.store(y, index=i, tile=pack_16x4(ct.load(a, index=i, shape=(TILE,)), -0.0, -1, 65535))


def _four_tiles_kernel(fn):
    """y = fn(a, b, c, d) over four loaded tiles."""
    @splice.kernel
    def four_tiles(a, b, c, d, y, TILE: ConstInt):
        i = (ct.bid(0),)
        ct.store(y, index=i, tile=fn(ct.load(a, index=i, shape=(TILE,)),
                                     ct.load(b, index=i, shape=(TILE,)),
                                     ct.load(c, index=i, shape=(TILE,)),
                                     ct.load(d, index=i, shape=(TILE,))))
    return four_tiles


pack120_kernel = _four_tiles_kernel(pack_120)
pack_small_kernel = _four_tiles_kernel(pack_small)
hash4f_kernel = _four_tiles_kernel(hash_4f)


@splice.kernel
def small_results_kernel(x, w, yb, y8, yh, ybf, TILE: ConstInt):
    # results narrower than the marker: bool, int8, float16, bfloat16
    i = (ct.bid(0),)
    t = ct.load(x, index=i, shape=(TILE,))
    q = ct.bitcast(t, ct.uint64)
    ct.store(yb, index=i, tile=f_bool(t, t > 1.0))
    ct.store(y8, index=i, tile=f_i8(ct.astype(q & 127, ct.int8), q))
    h = t.astype(ct.float16)
    ct.store(yh, index=i, tile=f_half(h, -h))
    ct.store(ybf, index=i, tile=f_bf16(ct.load(w, index=i, shape=(TILE,))))


@splice.kernel
def shapes_2d_kernel(col, row, y, TM: ConstInt, TN: ConstInt):
    # (TM, 1) x (1, TN) broadcast, a scalar constant and a reduction of the results
    c = ct.load(col, index=(ct.bid(0), 0), shape=(TM, 1))
    r = ct.load(row, index=(0, ct.bid(1)), shape=(1, TN))
    h = hash_dd(c, r) + hash_dd(-0.0, r)
    ct.store(y, index=(ct.bid(0), ct.bid(1)), tile=h)


@splice.kernel
def reduce_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    s = ct.sum(fdd(t, 1.0))
    m = ct.max(fdd(-t, 0.0))
    ct.store(y, index=(ct.bid(0),), tile=ct.full((2,), 0.0, dtype=ct.float64) +
             ct.where(ct.arange(2, dtype=ct.int32) == 0, s, m))


@splice.kernel
def tile_sizes_kernel(x, z, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    ct.store(y, index=(ct.bid(0),), tile=hash_dd(t, u) ^ hash_dd(u, 1.0))


@splice.kernel
def neg_args_kernel(x, z, y, TILE: ConstInt):
    # sign flips around the marker: -t (fneg / xor with the sign bit), -f(...)
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(z, index=(ct.bid(0),), shape=(TILE,))
    r = hash_dd(-t, -u) + ct.bitcast(-fdd(-t, u), ct.uint64) + ct.bitcast(fneg(-t), ct.uint64)
    ct.store(y, index=(ct.bid(0),), tile=r)


def ref_neg_args(x, zz):
    with np.errstate(over="ignore"):
        return ref_hash_dd(-x, -zz) + (-((-x) * 0.5 + zz)).view(np.uint64) + x.view(np.uint64)


# ---------------------------------------------------------------------------------------------
# splice.asm with fma markers


@splice.kernel
def asm_pack_kernel(a, b, y16, y8, hi, lo, TILE: ConstInt):
    i = (ct.bid(0),)
    ha = ct.load(a, index=i, shape=(TILE,))
    hb = ct.load(b, index=i, shape=(TILE,))
    # pack=2: two float16 per .b32 operand
    ct.store(y16, index=i, tile=splice.asm("add.rn.f16x2 $0, $1, $2;", ha, hb,
                                           dtype=ct.float16, pack=2))
    # pack=4: four int8 per .b32, a byte permutation within each group of four
    q = ct.astype(ct.bitcast(ha, ct.int16) & 127, ct.int8)
    ct.store(y8, index=i, tile=splice.asm("prmt.b32 $0, $1, 0, 0x0123;", q, dtype=ct.int8,
                                          pack=4))
    # two outputs of a pure snippet, one constant input
    h, lo_ = splice.asm("mov.b64 {$1, $0}, $2;", ct.bitcast(ha, ct.uint16).astype(ct.uint64) +
                      0x8000000000000000, dtype=(ct.uint32, ct.uint32))
    ct.store(hi, index=i, tile=h)
    ct.store(lo, index=i, tile=lo_)


@splice.kernel
def asm_const_kernel(y, TILE: ConstInt):
    # constant inputs with special bit patterns to a pure snippet
    nz = ct.full((TILE,), -0.0, dtype=ct.float64)
    r = splice.asm("add.rn.f64 $0, $1, $2;", nz, nz, dtype=ct.float64)
    s = splice.asm("add.rn.f64 $0, $1, $2;", ct.full((TILE,), INF, dtype=ct.float64),
                   ct.full((TILE,), -1.0, dtype=ct.float64), dtype=ct.float64)
    ct.store(y, index=(ct.bid(0),), tile=ct.full((TILE,), 0, dtype=ct.uint64) +
             (ct.bitcast(r, ct.uint64) ^ ct.bitcast(s, ct.uint64)))


@splice.kernel
def asm_impure_kernel(x, y, TILE: ConstInt):
    # an impure snippet with an output keeps the atomic marker; a pure one beside it the fma
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    a = splice.asm("add.s32 $0, $1, 1;", t, dtype=ct.int32, pure=False)
    b = splice.asm("add.s32 $0, $1, 2;", t, dtype=ct.int32)
    ct.store(y, index=(ct.bid(0),), tile=a * 1000 + b)


# ---------------------------------------------------------------------------------------------
# Every compiled case (CPU)


def sig_dd():
    return K.signature(K.array(f64), K.array(ct.uint64), 128)


def sig_ll():
    return K.signature(K.array(ct.int64), K.array(ct.int64), 128)


def sig_ff():
    return K.signature(K.array(f32), K.array(ct.uint32), 128)


CASES = {}
for (c0, c1), k in CONST_DD.values():
    CASES[f"const_dd[{c0!r},{c1!r}]"] = (k, sig_dd)
for (c0, c1), k in CONST_LL.values():
    CASES[f"const_ll[{c0!r},{c1!r}]"] = (k, sig_ll)
for (c0, c1), k in FULL_DD.values():
    CASES[f"full_dd[{c0!r},{c1!r}]"] = (k, sig_dd)
for (c0, c1), k in CONST_FF.values():
    CASES[f"const_ff[{c0!r},{c1!r}]"] = (k, sig_ff)
for c, k in CONST_4F.values():
    CASES[f"const_4f[{c!r}]"] = (k, sig_ff)
CASES["all_const"] = (all_const_kernel, lambda: K.signature(K.array(ct.uint64), 128))
CASES["scalar_args"] = (scalar_args_kernel,
                        lambda: K.signature(K.array(ct.uint64), K.scalar(f64), K.scalar(f64), 128))
CASES["no_args"] = (no_args_kernel, lambda: K.signature(K.array(f32), 128))
for name, k in CONTROL.items():
    CASES[name] = (k, lambda: CONTROL_SIG)
CASES["pack16"] = (pack16_kernel, lambda: K.signature(
    K.array(ct.float16), K.array(ct.bfloat16), K.array(ct.int16), K.array(ct.uint16),
    K.array(ct.uint64), 128))
CASES["pack16_const"] = (pack16_const_kernel, lambda: K.signature(
    K.array(ct.float16), K.array(ct.uint64), 128))
CASES["pack120"] = (pack120_kernel, lambda: K.signature(
    K.array(f64), K.array(ct.int32), K.array(ct.int16), K.array(ct.int8), K.array(ct.uint64),
    128))
CASES["pack_small"] = (pack_small_kernel, lambda: K.signature(
    K.array(ct.int8), K.array(ct.uint8), K.array(ct.bool_), K.array(ct.int32),
    K.array(ct.uint64), 128))
CASES["hash4f"] = (hash4f_kernel, lambda: K.signature(
    K.array(f32), K.array(f32), K.array(f32), K.array(f32), K.array(ct.uint32), 128))
CASES["small_results"] = (small_results_kernel, lambda: K.signature(
    K.array(f64), K.array(ct.bfloat16), K.array(ct.bool_), K.array(ct.int8),
    K.array(ct.float16), K.array(ct.bfloat16), 128))
CASES["shapes_2d"] = (shapes_2d_kernel, lambda: K.signature(
    K.array(f64, 2), K.array(f64, 2), K.array(ct.uint64, 2), 16, 32))
CASES["reduce"] = (reduce_kernel, lambda: K.signature(K.array(f64), K.array(f64), 256))
for tile in (1, 2, 16, 256, 4096):
    CASES[f"tile_sizes[{tile}]"] = (tile_sizes_kernel, lambda tile=tile: K.signature(
        K.array(f64), K.array(f64), K.array(ct.uint64), tile))
CASES["neg_args"] = (neg_args_kernel, lambda: K.signature(
    K.array(f64), K.array(f64), K.array(ct.uint64), 128))
CASES["asm_pack"] = (asm_pack_kernel, lambda: K.signature(
    K.array(ct.float16), K.array(ct.float16), K.array(ct.float16), K.array(ct.int8),
    K.array(ct.uint32), K.array(ct.uint32), 128))
CASES["asm_const"] = (asm_const_kernel, lambda: K.signature(K.array(ct.uint64), 128))
CASES["asm_impure"] = (asm_impure_kernel, lambda: K.signature(
    K.array(ct.int32), K.array(ct.int32), 128))
CASES["matmul_epilogue"] = (K.matmul_gelu_kernel, lambda: K.signature(
    K.array(ct.float16, 2), K.array(ct.float16, 2), K.array(ct.float16, 2), 128, 128, 64))

# Every case is compiled for sm_90; these also for sm_80 and sm_100 (the CPU budget).
ALL_ARCH_CASES = ["const_dd[-0.0,None]", "const_dd[None,nan]",
                  "const_ll[-9223372036854775808,None]",
                  "full_dd[0.0,-0.0]", "const_ff[None,-0.0]", "const_4f[-0.0]", "all_const",
                  "scalar_args", "if_same_extern", "if_zero_arm", "nested_ifs",
                  "loop_carried_from_zero", "loop_scalar_index", "loop_scalar_chain",
                  "loop_if_inside", "pack16", "pack120", "small_results", "shapes_2d",
                  "tile_sizes[4096]", "asm_pack", "asm_const"]


def parsed_body(ptx: str):
    mod = Module(ptx)
    [fn] = [f for f in mod.function_order if f.is_definition and f.kind == ".entry"]
    body = mod.body_statements(fn)
    parsed = [parse_instruction(s, ptx) if s.kind == "instruction" else None for s in body]
    defs: dict[str, list[int]] = {}
    for i, ins in enumerate(parsed):
        if ins is not None:
            for r in destinations(ins):
                defs.setdefault(r, []).append(i)
    return parsed, defs


def pure_key_registers(parsed, defs) -> set[str]:
    """Registers of raw tileiras PTX that hold a marker key on every path: every definition
    a load of a marker or a mov of such a register (greatest fixpoint). Computed here
    independently of the rewriter."""
    addr = {ins.operands[0] for ins in parsed if ins is not None and
            ins.base in ("mov", "cvta") and len(ins.operands) == 2 and
            MARKER_RE.fullmatch(ins.operands[1])}

    def is_key_load(ins):
        return ins.base == "ld" and len(ins.operands) == 2 and (
            MARKER_RE.search(ins.operands[1]) or
            ins.operands[1].strip("[]").split("+")[0].strip() in addr)

    keys = {r for r, ds in defs.items()
            if any(is_key_load(parsed[j]) or parsed[j].base == "mov" for j in ds)}
    changed = True
    while changed:
        changed = False
        for r in list(keys):
            if not all(is_key_load(parsed[j]) or (parsed[j].base == "mov" and
                                                  len(parsed[j].operands) == 2 and
                                                  parsed[j].operands[1] in keys)
                       for j in defs[r]):
                keys.discard(r)
                changed = True
    return keys


MARKER_FMAS = {f"fma.{r}.f64" for r in ("rn", "rz", "rm", "rp")}


def expected_fma_slots(raw_ptx: str) -> list[tuple[str, str] | None]:
    """For each marker fma of the raw PTX (an fma.{rn,rz,rm,rp}.f64 with a pure key as a
    multiplicand),
    in text order: (slot 0, slot 1) -- slot 0 the multiplicand that is not a pure key, or
    None where both are (slot 0 is then 0, any choice is right)."""
    parsed, defs = parsed_body(raw_ptx)
    keys = pure_key_registers(parsed, defs)
    out = []
    for ins in parsed:
        if ins is None or ins.opcode not in MARKER_FMAS or len(ins.operands) != 4:
            continue
        _, x, y, z = ins.operands
        if x in keys and y in keys:
            out.append(None)
        elif y in keys:
            out.append((x, z))
        elif x in keys:
            out.append((y, z))
    return out


def spliced_fma_slots(spliced: str, spans, fma_sites: set[int]) -> list[tuple[str, str]]:
    """The (slot 0, slot 1) registers each call block of an fma site takes, in text order
    (``spans``: the build's :class:`splice.ptxtools.spans.Span`\\ s of ``spliced``)."""
    out = []
    for span in spans:
        if span.kind != "call" or span.site not in fma_sites:
            continue
        text = span.text(spliced)
        s0 = re.search(r"mov\.b64 \t%__splice_s0, ([^;]+);", text).group(1)
        s1 = re.search(r"mov\.b64 \t%__splice_s1, ([^;]+);", text).group(1)
        out.append((s0, s1))
    return out


def check_fma_slots(b, name):
    """Every call of an fma site takes the registers the raw PTX's fma had as slot 0 (the
    multiplicand that is not the key on every path) and slot 1 (the addend)."""
    fma_sites = {s.index for s in b.sites if s.marker == "fma"}
    exp = expected_fma_slots(b.ptx)
    got = spliced_fma_slots(b.spliced_ptx, b.spans, fma_sites)
    assert len(exp) == len(got) == sum(s.instances for s in b.sites if s.marker == "fma"), \
        (name, len(exp), len(got))
    parsed, defs = parsed_body(b.ptx)
    keys = pure_key_registers(parsed, defs)
    for e, g in zip(exp, got):
        if e is None:
            continue
        # a register that is the key on every path may be passed as itself or as 0
        ok = all(gg == ee or (ee in keys and gg == "0") for ee, gg in zip(e, g))
        assert ok, (name, "call takes", g, "but the marker fma had", e)


def check_build(b, name):
    assert b.cubin[:4] == b"\x7fELF"
    body = b.spliced_ptx.split(".nv_intermediate_source_section")[0]
    assert "__splice_marker" not in body, name
    for s in b.sites:
        assert s.marker in ("fma", "atomic"), (name, s)
    return body


def compile_case(name, arch):
    kern, sig = CASES[name]
    try:
        b = splice.compile(kern, sig(), arch)
    except SpliceError as e:
        pytest.fail(f"{name} on {arch}: {type(e).__name__}: {e}")
    return b


# ---------------------------------------------------------------------------------------------
# 64-bit integer results through the f64 marker

ident_q = cuda_extern("uint64(uint64)", "return a;", "fm2_ident_q")
ident_l = cuda_extern("int64(int64)", "return a;", "fm2_ident_l", inline="never")


@splice.kernel
def mask_sign_kernel(x, y, TILE: ConstInt):
    # the common "make the hash non-negative" idiom on a pure call's uint64 result
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=ident_q(t) & 0x7FFFFFFFFFFFFFFF)


@splice.kernel
def mask_sign_called_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=(ident_l(t) & 0x7FFFFFFFFFFFFFFF) % 1000003)


@splice.kernel
def mask_sign_asm_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.asm("mov.b64 $0, $1;", t, dtype=ct.uint64) &
             0x7FFFFFFFFFFFFFFF)


MASK_CASES = {"extern": (mask_sign_kernel, ct.uint64),
              "extern_called_mod": (mask_sign_called_kernel, ct.int64),
              "asm": (mask_sign_asm_kernel, ct.uint64)}


NAN_PATTERNS = [0x7FF0000000000001, 0xFFF0000000000001, 0x7FF4000000000000,
                0x7FF8000000000001, 0xFFFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFE, 0xFFF123456789ABCD]
