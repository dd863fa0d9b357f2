// The differential fuzzer's header (tests/fuzz), included by every generated snippet on both
// sides: NVRTC (__CUDACC__ defined) and the host C++ compiler.
//
// 1. Safe-math wrappers (both sides), as Csmith's: the generated programs call them wherever
//    the plain C++ operation could be undefined (signed overflow, division by zero,
//    INT_MIN / -1, a left shift of a negative value, an out-of-range float -> integer
//    conversion); the generator writes the plain operator where value ranges prove it safe.
// 2. Host definitions of the CUDA intrinsics the generator uses (__popc, __fadd_rz,
//    __float2int_ru...), written from the CUDA Math API's and the PTX ISA's definitions, so
//    that the host side is an independent implementation. Directed rounding runs the IEEE
//    operation under fesetround (the compile uses -frounding-math and every such operation is
//    an opaque call, so it cannot move across the mode switch).
#pragma once

#ifdef __CUDACC__
#define FZ_FN static __device__ __forceinline__
#else
#define FZ_FN static inline
#endif

// ---------------------------------------------------------------------------- 1. safe math

#define FZ_WRAP(T, U, NAME)                                                                 \
    FZ_FN T fz_add_##NAME(T a, T b) { return (T)((U)a + (U)b); }                             \
    FZ_FN T fz_sub_##NAME(T a, T b) { return (T)((U)a - (U)b); }                             \
    FZ_FN T fz_mul_##NAME(T a, T b) { return (T)((U)a * (U)b); }                             \
    FZ_FN T fz_neg_##NAME(T a) { return (T)((U)0 - (U)a); }                                   \
    FZ_FN T fz_shl_##NAME(T a, int n) { return (T)((U)a << n); }

FZ_WRAP(int, unsigned, int32)
FZ_WRAP(long long, unsigned long long, int64)

#define FZ_DIV(T, NAME, MIN)                                                                \
    FZ_FN T fz_div_##NAME(T a, T b) { return (b == 0 || (a == (MIN) && b == (T)-1)) ? a : a / b; } \
    FZ_FN T fz_mod_##NAME(T a, T b) { return (b == 0 || (a == (MIN) && b == (T)-1)) ? 0 : a % b; }

FZ_DIV(int, int32, -2147483647 - 1)
FZ_DIV(long long, int64, -9223372036854775807ll - 1)
FZ_DIV(unsigned, uint32, 0u)
FZ_DIV(unsigned long long, uint64, 0ull)

// float -> integer: NaN 0, out of range saturated (as PTX's cvt does), else C's truncation.
// LO: the least value whose truncation fits; HI: the least value too large (powers of two).
#define FZ_TO(T, NAME, LO, HI, TMIN, TMAX)                                                  \
    template <class F> FZ_FN T fz_to_##NAME(F x) {                                           \
        return x != x ? (T)0 : x <= (F)(LO) ? (T)(TMIN) : x >= (F)(HI) ? (T)(TMAX) : (T)x;   \
    }

FZ_TO(signed char, int8, -129.0, 128.0, -128, 127)
FZ_TO(short, int16, -32769.0, 32768.0, -32768, 32767)
FZ_TO(int, int32, -2147483649.0, 2147483648.0, -2147483647 - 1, 2147483647)
FZ_TO(unsigned char, uint8, -1.0, 256.0, 0, 255)
FZ_TO(unsigned short, uint16, -1.0, 65536.0, 0, 65535)
FZ_TO(unsigned, uint32, -1.0, 4294967296.0, 0u, 4294967295u)
FZ_TO(unsigned long long, uint64, -1.0, 18446744073709551616.0, 0ull, 18446744073709551615ull)
// int64: -2^63 - 1 is no double; below -2^63 saturates, and -2^63 itself fits
template <class F> FZ_FN long long fz_to_int64(F x) {
    return x != x ? 0ll : x < (F)-9223372036854775808.0 ? -9223372036854775807ll - 1
        : x >= (F)9223372036854775808.0 ? 9223372036854775807ll : (long long)x;
}

// the sign of a NaN an operation makes is the implementation's (x86: negative, a GPU:
// positive); copysign's sign argument goes through this, so no result shows it
FZ_FN float fz_not_nan(float x) { return x != x ? 1.0f : x; }
FZ_FN double fz_not_nan(double x) { return x != x ? 1.0 : x; }
// a float division whose divisor is a constant expression: C++ leaves a division by zero
// undefined, NVRTC warns of a constant zero divisor (#39) and splice makes that an error;
// through a call the divisor is no constant expression and IEEE's result is the program's
FZ_FN float fz_fdiv(float a, float b) { return a / b; }
FZ_FN double fz_fdiv(double a, double b) { return a / b; }

// ------------------------------------------------------------- 2. CUDA intrinsics, host side
#ifndef __CUDACC__
#include <fenv.h>
#include <math.h>

#ifdef __clang__
#define FZ_OPAQUE __attribute__((noinline, optnone))
#else
#define FZ_OPAQUE __attribute__((noipa))
#endif

// one IEEE operation, run under a rounding mode: the operation is an opaque call after
// fesetround, so no optimisation moves or folds it; and fz_in_mode itself is opaque, so that
// the caller's own float operations (the arguments' conversions) cannot be moved past the
// fesetround either (GCC does, even with -frounding-math: GCC PR 34678; the fuzzer found it)
template <class R, class... A> FZ_OPAQUE static R fz_in_mode(int mode, R (*op)(A...), A... a) {
    int old = fegetround();
    fesetround(mode);
    R r = op(a...);
    fesetround(old);
    return r;
}
template <class F> FZ_OPAQUE static F fz_op_add(F a, F b) { return a + b; }
template <class F> FZ_OPAQUE static F fz_op_sub(F a, F b) { return a - b; }
template <class F> FZ_OPAQUE static F fz_op_mul(F a, F b) { return a * b; }
template <class F> FZ_OPAQUE static F fz_op_div(F a, F b) { return a / b; }
template <class F> FZ_OPAQUE static F fz_op_rcp(F a) { return (F)1 / a; }
FZ_OPAQUE static float fz_op_sqrtf(float a) { return sqrtf(a); }
FZ_OPAQUE static double fz_op_sqrt(double a) { return sqrt(a); }
FZ_OPAQUE static float fz_op_fmaf(float a, float b, float c) { return fmaf(a, b, c); }
FZ_OPAQUE static double fz_op_fma(double a, double b, double c) { return fma(a, b, c); }
template <class F, class I> FZ_OPAQUE static F fz_op_cvt(I a) { return (F)a; }

#define FZ_MODES(M, ...) M(rn, FE_TONEAREST, __VA_ARGS__) M(rz, FE_TOWARDZERO, __VA_ARGS__) \
    M(ru, FE_UPWARD, __VA_ARGS__) M(rd, FE_DOWNWARD, __VA_ARGS__)
#define FZ_BIN(R, MODE, P, OP, F) \
    static inline F P##OP##_##R(F a, F b) { return fz_in_mode<F, F, F>(MODE, fz_op_##OP<F>, a, b); }
FZ_MODES(FZ_BIN, __f, add, float) FZ_MODES(FZ_BIN, __f, sub, float)
FZ_MODES(FZ_BIN, __f, mul, float) FZ_MODES(FZ_BIN, __f, div, float)
FZ_MODES(FZ_BIN, __d, add, double) FZ_MODES(FZ_BIN, __d, sub, double)
FZ_MODES(FZ_BIN, __d, mul, double) FZ_MODES(FZ_BIN, __d, div, double)
#define FZ_UN(R, MODE, NAME, OP, F) \
    static inline F NAME##_##R(F a) { return fz_in_mode<F, F>(MODE, OP, a); }
FZ_MODES(FZ_UN, __fsqrt, fz_op_sqrtf, float) FZ_MODES(FZ_UN, __dsqrt, fz_op_sqrt, double)
FZ_MODES(FZ_UN, __frcp, fz_op_rcp<float>, float) FZ_MODES(FZ_UN, __drcp, fz_op_rcp<double>, double)
#define FZ_FMA(R, MODE, NAME, OP, F) \
    static inline F NAME##_##R(F a, F b, F c) { return fz_in_mode<F, F, F, F>(MODE, OP, a, b, c); }
FZ_MODES(FZ_FMA, __fmaf, fz_op_fmaf, float) FZ_MODES(FZ_FMA, __fma, fz_op_fma, double)

// integer -> float under a mode; double -> float
#define FZ_CVT(R, MODE, NAME, I, F) \
    static inline F NAME##_##R(I a) { return fz_in_mode<F, I>(MODE, fz_op_cvt<F, I>, a); }
FZ_MODES(FZ_CVT, __int2float, int, float) FZ_MODES(FZ_CVT, __uint2float, unsigned, float)
FZ_MODES(FZ_CVT, __ll2float, long long, float)
FZ_MODES(FZ_CVT, __ull2float, unsigned long long, float)
FZ_MODES(FZ_CVT, __ll2double, long long, double)
FZ_MODES(FZ_CVT, __ull2double, unsigned long long, double)
FZ_MODES(FZ_CVT, __double2float, double, float)
static inline double __int2double_rn(int a) { return (double)a; }
static inline double __uint2double_rn(unsigned a) { return (double)a; }

// float -> integer, rounded as named, NaN 0, saturated (PTX cvt.rni/rzi/rpi/rmi)
template <class T, class F> static T fz_sat(F r, F lo, F hi, T tmin, T tmax) {
    return r != r ? (T)0 : r < lo ? tmin : r >= hi ? tmax : (T)r;
}
#define FZ_F2I_MODES(NAME, F, T, LO, HI, TMIN, TMAX, SUF)                                   \
    static inline T NAME##_rn(F x) { return fz_sat<T, F>(nearbyint##SUF(x), LO, HI, TMIN, TMAX); } \
    static inline T NAME##_rz(F x) { return fz_sat<T, F>(trunc##SUF(x), LO, HI, TMIN, TMAX); } \
    static inline T NAME##_ru(F x) { return fz_sat<T, F>(ceil##SUF(x), LO, HI, TMIN, TMAX); } \
    static inline T NAME##_rd(F x) { return fz_sat<T, F>(floor##SUF(x), LO, HI, TMIN, TMAX); }
#define FZ_F2I(P, F, SUF)                                                                   \
    FZ_F2I_MODES(P##2int, F, int, -2147483648.0, 2147483648.0, -2147483647 - 1, 2147483647, SUF) \
    FZ_F2I_MODES(P##2uint, F, unsigned, 0.0, 4294967296.0, 0u, 4294967295u, SUF)             \
    FZ_F2I_MODES(P##2ll, F, long long, -9223372036854775808.0, 9223372036854775808.0,         \
                 -9223372036854775807ll - 1, 9223372036854775807ll, SUF)                     \
    FZ_F2I_MODES(P##2ull, F, unsigned long long, 0.0, 18446744073709551616.0, 0ull,           \
                 18446744073709551615ull, SUF)
FZ_F2I(__float, float, f)
FZ_F2I(__double, double, )

// clamped to [+0.0, 1.0] (libdevice's __nv_saturatef); -0.0 is +0.0 (PTX's .sat, the
// executor's model; the fuzzer found the difference: tests/test_cuda_fuzz_findings.py)
static inline float __saturatef(float x) { return x != x ? 0.0f : x <= 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

// integer intrinsics (CUDA Math API, "Integer Intrinsics")
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
static inline unsigned long long __brevll(unsigned long long x) {
    unsigned long long r = 0;
    for (int i = 0; i < 64; ++i) r |= ((x >> i) & 1ull) << (63 - i);
    return r;
}
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
static inline long long __mul64hi(long long a, long long b) {
    return (long long)(((__int128)a * b) >> 64);
}
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline int __mul24(int a, int b) {   // the low 24 bits of each, sign-extended
    long long x = (int)((unsigned)a << 8) >> 8, y = (int)((unsigned)b << 8) >> 8;
    return (int)(unsigned)(unsigned long long)(x * y);
}
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
static inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
static inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
static inline unsigned __uhadd(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a + b) >> 1);
}
static inline unsigned __urhadd(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a + b + 1) >> 1);
}
static inline unsigned __sad(int x, int y, unsigned z) {
    return z + (x > y ? (unsigned)x - (unsigned)y : (unsigned)y - (unsigned)x);
}
static inline unsigned __usad(unsigned x, unsigned y, unsigned z) {
    return z + (x > y ? x - y : y - x);
}
// result byte n = byte s<4n+2:4n> of the eight bytes y:x (the selector's bit 3 of each
// nibble is left 0 by the generator: it means sign replication in PTX's prmt)
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int n = 0; n < 4; ++n) r |= (unsigned)((v >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
    return r;
}
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (s & 31u)) >> 32);
}
static inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return s >= 32u ? lo : (unsigned)((v << s) >> 32);
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (s & 31u));
}
static inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return s >= 32u ? hi : (unsigned)(v >> s);
}
static inline int __dp4a(int a, int b, int c) {
    long long s = c;
    for (int i = 0; i < 4; ++i) s += (long long)(signed char)(a >> (8 * i)) * (signed char)(b >> (8 * i));
    return (int)(unsigned)(unsigned long long)s;
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    unsigned s = c;
    for (int i = 0; i < 4; ++i) s += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
    return s;
}
static inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long llmin(long long a, long long b) { return a < b ? a : b; }
static inline long long llmax(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
#endif
