"""Externs and kernels shared by the CPU tests (compiled to cubins) and the GPU tests
(launched and checked against NumPy)."""

from __future__ import annotations

import re

import cuda.tile as ct
import numpy as np
from cuda.tile.compilation import (
    ArrayConstraint,
    CallingConvention,
    KernelSignature,
    ScalarConstraint,
)

import splice

ConstInt = ct.Constant[int]

# ---------------------------------------------------------------------------------------------
# One extern per element type: argument and result of that type, a type-specific operation
# whose NumPy reference is exact.

_OPS = {
    "bool": ("return !x;", lambda x: ~x),
    "int8": ("return (signed char)(x * 3 + 1);", lambda x: (x.astype(np.int64) * 3 + 1)
             .astype(np.int8)),
    "int16": ("return (short)(x * 3 + 1);", lambda x: (x.astype(np.int64) * 3 + 1)
              .astype(np.int16)),
    "int32": ("return x * 3 + 1;", lambda x: (x.astype(np.int64) * 3 + 1).astype(np.int32)),
    "int64": ("return x * 3 + 1;", lambda x: x * 3 + 1),
    "uint8": ("return (unsigned char)(x * 3u + 1u);", lambda x: (x.astype(np.uint64) * 3 + 1)
              .astype(np.uint8)),
    "uint16": ("return (unsigned short)(x * 3u + 1u);",
               lambda x: (x.astype(np.uint64) * 3 + 1).astype(np.uint16)),
    "uint32": ("return x * 3u + 1u;", lambda x: (x.astype(np.uint64) * 3 + 1)
               .astype(np.uint32)),
    "uint64": ("return x * 3ull + 1ull;", lambda x: x * np.uint64(3) + np.uint64(1)),
    "float16": ("return __hadd(__hmul(x, __float2half(2.0f)), __float2half(1.0f));",
                lambda x: (x * np.float16(2) + np.float16(1)).astype(np.float16)),
    "bfloat16": ("return __float2bfloat16(__bfloat162float(x) * 2.0f + 1.0f);", None),
    "float32": ("return x * 2.0f + 1.0f;", lambda x: x * np.float32(2) + np.float32(1)),
    "float64": ("return x * 2.0 + 1.0;", lambda x: x * 2.0 + 1.0),
}


def _make_type_extern(name: str, inline: str = "auto"):
    t = splice.ELEMENT_TYPES[name]
    body, ref = _OPS[name]
    src = (f"#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
           f"extern \"C\" __device__ {t.c_type} twist_{name}({t.c_type} x) {{ {body} }}\n")
    fn = splice.extern(source=src, name=f"twist_{name}", inline=inline,
                       signature=f"{name}({name})")(lambda x: None)
    return fn, ref


TYPE_EXTERNS = {name: _make_type_extern(name) for name in _OPS}
TYPE_EXTERNS_CALLED = {name: _make_type_extern(name, "never") for name in _OPS}


def make_type_kernel(name: str, inline: str = "auto"):
    fn, _ = (TYPE_EXTERNS if inline == "auto" else TYPE_EXTERNS_CALLED)[name]

    @splice.kernel
    def type_kernel(x, y, TILE: ConstInt):
        bid = ct.bid(0)
        t = ct.load(x, index=(bid,), shape=(TILE,))
        ct.store(y, index=(bid,), tile=fn(t))
    return type_kernel


TYPE_KERNELS = {(name, inline): make_type_kernel(name, inline)
                for name in _OPS for inline in ("auto", "never")}


def random_values(name: str, n: int, rng) -> np.ndarray:
    """``n`` values of element type ``name`` for the type kernels: integers over their whole
    range, floats ``N(0, 10)``, bfloat16 as float32 ``N(0, 1)``."""
    if name == "bool":
        return rng.random(n) < 0.5
    if name.startswith(("int", "uint")):
        info = np.iinfo(name)
        return rng.integers(info.min, info.max, n, dtype=name, endpoint=True)
    if name == "bfloat16":
        return rng.standard_normal(n).astype(np.float32)
    return (rng.standard_normal(n) * 10).astype(name)

# ---------------------------------------------------------------------------------------------
# Several arguments of mixed types, packed into the 128-bit payload.

mixed = splice.extern(source=r'''
#include <cuda_fp16.h>
extern "C" __device__ double mixed(signed char a, __half b, bool c, int d, float e) {
    return (double)a * 1000.0 + (double)__half2float(b) + (c ? 0.5 : 0.0) + d * 3.0 + e;
}''', name="mixed", signature="float64(int8, float16, bool, int32, float32)")(lambda *a: None)


def mixed_ref(a, b, c, d, e):
    return (a.astype(np.float64) * 1000.0 + b.astype(np.float64) + np.where(c, 0.5, 0.0)
            + d.astype(np.float64) * 3.0 + e.astype(np.float64))


@splice.kernel
def mixed_kernel(a, b, c, d, e, y, TILE: ConstInt):
    bid = ct.bid(0)
    ta = ct.load(a, index=(bid,), shape=(TILE,))
    tb = ct.load(b, index=(bid,), shape=(TILE,))
    tc = ct.load(c, index=(bid,), shape=(TILE,))
    td = ct.load(d, index=(bid,), shape=(TILE,))
    te = ct.load(e, index=(bid,), shape=(TILE,))
    ct.store(y, index=(bid,), tile=mixed(ta, tb, tc, td, te))


fma64 = splice.extern(source=r'''extern "C" __device__ double fma64(double a, double b) {
    return __dadd_rn(__dmul_rn(a, b), 0.25); }''',
                      name="fma64", signature="float64(float64, float64)")(lambda a, b: None)


@splice.kernel
def same_arg_kernel(x, y, TILE: ConstInt):
    # both payload slots carry the same value: the marker's compare == swap operand
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=fma64(t, t))


# ---------------------------------------------------------------------------------------------
# saxpy: scalar + tile + constant, broadcasting, 2-D tiles

@splice.extern(source=r'''
extern "C" __device__ float saxpy(float a, float x, float y) { return a * x + y; }''')
def saxpy(a: ct.float32, x: ct.float32, y: ct.float32) -> ct.float32: ...


@splice.kernel
def saxpy_kernel(x, y, out, a: float, TILE: ConstInt):
    bid = ct.bid(0)
    tx = ct.load(x, index=(bid,), shape=(TILE,))
    ty = ct.load(y, index=(bid,), shape=(TILE,))
    ct.store(out, index=(bid,), tile=saxpy(a, tx, ty))


saxpy_called = splice.extern(source=r'''
extern "C" __device__ float saxpy(float a, float x, float y) { return a * x + y; }''',
                             name="saxpy", signature="float32(float32, float32, float32)",
                             inline="never")(lambda a, x, y: None)


@splice.kernel
def saxpy_call_kernel(x, y, out, a: float, TILE: ConstInt):
    bid = ct.bid(0)
    tx = ct.load(x, index=(bid,), shape=(TILE,))
    ty = ct.load(y, index=(bid,), shape=(TILE,))
    ct.store(out, index=(bid,), tile=saxpy_called(a, tx, ty))


@splice.kernel
def broadcast_kernel(col, row, out, a: float, TM: ConstInt, TN: ConstInt):
    # (TM, 1) and (1, TN) broadcast to (TM, TN); `a` is a scalar, 0.5 a constant
    bm, bn = ct.bid(0), ct.bid(1)
    c = ct.load(col, index=(bm, 0), shape=(TM, 1))
    r = ct.load(row, index=(0, bn), shape=(1, TN))
    ct.store(out, index=(bm, bn), tile=saxpy(a, c, r) + saxpy(a, 0.5, r))


@splice.kernel
def scalar_kernel(out, a: float, b: float):
    # a call on scalars only: shape ()
    v = saxpy(a, b, 1.0)
    ct.store(out, index=(0,), tile=ct.full((1,), 0, dtype=ct.float32) + v)


# ---------------------------------------------------------------------------------------------
# Control flow: loops, branches, helper functions, several call sites

@splice.extern(source=r'''
extern "C" __device__ float step(float acc, float x) { return acc * 0.5f + x; }''')
def step(acc: ct.float32, x: ct.float32) -> ct.float32: ...


def helper(t):
    # a plain helper function calling an extern
    return step(t, 1.0)


@splice.kernel
def control_kernel(x, y, ITERS: ConstInt, TILE: ConstInt):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(TILE,))
    acc = ct.full((TILE,), 0, dtype=ct.float32)
    for i in range(ITERS):
        acc = step(acc, t)
    if bid % 2 == 0:
        acc = helper(acc)
    else:
        acc = saxpy(2.0, acc, t)
    acc = helper(acc)
    ct.store(y, index=(bid,), tile=acc)


def control_ref(x, iters, tile):
    acc = np.zeros_like(x)
    for _ in range(iters):
        acc = acc * np.float32(0.5) + x
    out = np.empty_like(x)
    for b in range(len(x) // tile):
        s = slice(b * tile, (b + 1) * tile)
        a = acc[s]
        a = a * np.float32(0.5) + np.float32(1) if b % 2 == 0 else np.float32(2) * a + x[s]
        out[s] = a * np.float32(0.5) + np.float32(1)
    return out


# ---------------------------------------------------------------------------------------------
# A void, impure extern: atomicAdd on a counter, exactly once per element

count = splice.extern(source=r'''
extern "C" __device__ void count(long long counter, unsigned int value) {
    atomicAdd((unsigned long long *)counter, 1ull);
    atomicAdd((unsigned long long *)counter + 1, (unsigned long long)value);
}''', name="count", signature="void(int64, uint32)", pure=False)(lambda c, v: None)


@splice.kernel
def count_kernel(x, counter: ct.ScalarInt64, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    count(counter, t)


@splice.kernel
def count_2d_kernel(x, counter: ct.ScalarInt64, TM: ConstInt, TN: ConstInt):
    t = ct.load(x, index=(ct.bid(0), 0), shape=(TM, TN))
    count(counter, t)


# ---------------------------------------------------------------------------------------------
# Prebuilt PTX

PTX_SCALE = r"""
.version 8.0
.target sm_80
.address_size 64

.visible .func  (.param .b32 func_retval0) ptx_scale(
	.param .b32 ptx_scale_param_0,
	.param .b32 ptx_scale_param_1
)
{
	.reg .f32 	%f<4>;
	ld.param.f32 	%f1, [ptx_scale_param_0];
	ld.param.f32 	%f2, [ptx_scale_param_1];
	fma.rn.f32 	%f3, %f1, %f2, 0f3F800000;
	st.param.f32 	[func_retval0+0], %f3;
	ret;
}
"""

ptx_scale = splice.extern.from_ptx(ptx=PTX_SCALE, name="ptx_scale",
                                   signature="float32(float32, float32)")


@splice.kernel
def ptx_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=ptx_scale(t, 3.0))


# ---------------------------------------------------------------------------------------------
# TMA matmul (fp16, 128x128x64 tiles on sm_90: cp.async.bulk.tensor + wgmma) whose epilogue
# calls an extern

@splice.extern(source=r'''
extern "C" __device__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}''')
def gelu_tanh(x: ct.float32) -> ct.float32: ...


def gelu_tanh_ref(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def matmul_tile(A, B, tm, tn, tk):
    """The (tm, tn) float32 accumulator of C = A @ B for this block (cuTile's MatMul
    sample, written anew)."""
    num_k = ct.num_tiles(A, axis=1, shape=(tm, tk))
    acc = ct.full((tm, tn), 0, dtype=ct.float32)
    for k in range(num_k):
        a = ct.load(A, index=(ct.bid(0), k), shape=(tm, tk), padding_mode=ct.PaddingMode.ZERO)
        b = ct.load(B, index=(k, ct.bid(1)), shape=(tk, tn), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(a, b, acc)
    return acc


@splice.kernel
def matmul_gelu_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = matmul_tile(A, B, tm, tn, tk)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(gelu_tanh(acc), C.dtype))


@splice.kernel
def matmul_plain_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    # no extern: the baseline for the epilogue's SASS
    acc = matmul_tile(A, B, tm, tn, tk)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype))


def kloop_shape(ptx: str) -> tuple[int, int, tuple[int, ...]]:
    """(``.reqntid``, ``wgmma.mma_async`` count, the ``wgmma.wait_group`` depths) of a TMA
    matmul's PTX: the proxy for its GPU time (issue 21; benchmarks/warpgroup_tiles_cpu.md).
    The plain 128x128x64 matmul on sm_90 is (256, 16, (0, 1)): two warpgroups, one wgmma
    group in flight across k-steps."""
    return (int(re.search(r"\.reqntid (\d+)", ptx).group(1)),
            len(re.findall(r"wgmma\.mma_async", ptx)),
            tuple(sorted({int(d) for d in
                          re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)})))


# ---------------------------------------------------------------------------------------------
# Signatures for compiling without a GPU


def array(dtype, ndim=1, stride_one_last=True):
    return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False,
                           stride_constant=(None,) * (ndim - 1) + ((1,) if stride_one_last
                                                                   else (None,)),
                           stride_divisible_by=(16,) * (ndim - 1) + (1,),
                           base_addr_divisible_by=16,
                           shape_divisible_by=16)


def unaligned_array(dtype, ndim=1):
    """An array with no alignment or shape divisibility known (a user's odd-sized array):
    tileiras then takes ``tid.x`` through 64 bits before the guard of a 0-d operation
    (issue 37, :mod:`splice.thread_index`)."""
    return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False,
                           stride_constant=(None,) * (ndim - 1) + (1,),
                           stride_divisible_by=(1,) * ndim, base_addr_divisible_by=1,
                           shape_divisible_by=1)


def signature(*params):
    return KernelSignature(params, CallingConvention.cutile_python_v1())


def scalar(dtype):
    return ScalarConstraint(dtype)


# tanh.approx.f32 by splice.asm: a pure snippet, so an fma marker
@splice.kernel
def asm_tanh_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.asm("tanh.approx.f32 $0, $1;", t,
                                                     dtype=ct.float32))
