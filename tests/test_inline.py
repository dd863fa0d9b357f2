"""Inlining callee PTX bodies: what is inlined, what is refused and why, and the PTX the
inliner writes for unusual but legal callees."""

import cuda.tile as ct
import pytest

import splice
from support import kernels as K

SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 256)
HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"


def _kern(ext):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t))
    return kern


def _ptx_fn(body, regs=".reg .f32 %f<4>;"):
    return splice.extern.from_ptx(ptx=HEAD + ".visible .func (.param .b32 r) pf(.param .b32 x)"
                                  "\n{\n" + regs + "\n" + body + "\n}\n", name="pf",
                                  signature="float32(float32)")


def test_alloca_is_a_stack_frame():
    ext = _ptx_fn("ld.param.f32 %f1, [x];\nalloca.u64 %rd1, 4096;\n"
                  "st.param.f32 [r], %f1;\nret;", ".reg .f32 %f<4>;\n.reg .b64 %rd<2>;")
    b = splice.compile(_kern(ext), SIG, "sm_90")
    assert not b.sites[0].inlined and "alloca" in b.sites[0].why_not_inlined


def test_return_stored_from_a_wider_register():
    ext = _ptx_fn("ld.param.b32 %r1, [x];\ncvt.u64.u32 %rd1, %r1;\n"
                  "st.param.b32 [r], %rd1;\nret;", ".reg .b32 %r<2>;\n.reg .b64 %rd<2>;")
    b = splice.compile(_kern(ext), SIG, "sm_90")
    assert b.sites[0].inlined and "cvt.u32.u64" in b.spliced_ptx


def test_branchtargets_labels_are_renamed():
    ext = _ptx_fn("ld.param.f32 %f1, [x];\nmov.u32 %r1, 0;\n"
                  "ts: .branchtargets L0, L1;\nbrx.idx %r1, ts;\n"
                  "L0:\nadd.f32 %f1, %f1, 0f3F800000;\nbra L1;\n"
                  "L1:\nst.param.f32 [r], %f1;\nret;", ".reg .f32 %f<4>;\n.reg .b32 %r<2>;")

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t) + ext(t * 2.0))
    b = splice.compile(kern, SIG, "sm_90")
    assert all(s.inlined for s in b.sites)


def test_static_helpers_do_not_block_inlining():
    @splice.extern(source='static __device__ __noinline__ float helper(float x) '
                          '{ return x * 2.0f; }\n'
                          '__device__ float table[4] = {1, 2, 3, 4};\n'
                          'extern "C" __device__ float uses_static(float x) '
                          '{ return helper(x) + table[(int)x & 3]; }')
    def uses_static(x: ct.float32) -> ct.float32: ...
    b = splice.compile(_kern(uses_static), SIG, "sm_90")
    assert b.sites[0].inlined, b.sites[0].why_not_inlined


def test_parameter_named_like_a_register():
    ext = splice.extern.from_ptx(
        ptx=HEAD + ".visible .func (.param .b32 r) pf(.param .b32 x)\n{\n"
            ".reg .b32 %x, %r;\nld.param.b32 %x, [x];\nadd.s32 %r, %x, 1;\n"
            "st.param.b32 [r], %r;\nret;\n}\n", name="pf", signature="int32(int32)",
        inline="always")

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t))
    splice.compile(kern, K.signature(K.array(ct.int32), K.array(ct.int32), 256), "sm_90")


# ---------------------------------------------------------------------------------------------
# Values on the CPU executor: what the inliner rewrites (a guarded result store, a signed
# narrow argument) computes what the called function computes

def _int_kern(ext, dtype=ct.int32):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(ct.bid(0),), tile=ext(t), allow_tma=False)
    return kern


def _exec_int(ext, x, dtype):
    import numpy as np

    from support.ptx_exec import run_build
    n = 128
    b = splice.compile(_int_kern(ext), K.signature(K.array(dtype), K.array(ct.int32), n),
                       "sm_90")
    y = np.zeros(x.size, np.int32)
    launch = run_build(b, (x.size // n,), x, y)
    assert not launch.approx
    return b, y


# the result stored under @p and under @!p: 3 x for x < 0, x + 100 otherwise
GUARDED_RESULT = (HEAD + ".visible .func (.param .b32 r) pg(.param .b32 x)\n{\n"
                  ".reg .b32 %r<4>;\n.reg .pred %p<2>;\nld.param.b32 %r1, [x];\n"
                  "setp.lt.s32 %p1, %r1, 0;\nmul.lo.s32 %r2, %r1, 3;\nadd.s32 %r3, %r1, 100;\n"
                  "@%p1 st.param.b32 [r], %r2;\n@!%p1 st.param.b32 [r], %r3;\nret;\n}\n")


@pytest.mark.parametrize("inline", ["always", "never"])
def test_exec_guarded_result_stores_keep_their_guards(inline):
    import numpy as np
    ext = splice.extern.from_ptx(ptx=GUARDED_RESULT, name="pg", signature="int32(int32)",
                                 inline=inline)
    x = np.random.default_rng(1).integers(-1000, 1000, 256).astype(np.int32)
    b, y = _exec_int(ext, x, ct.int32)
    assert b.sites[0].inlined == (inline == "always")
    np.testing.assert_array_equal(y, np.where(x < 0, 3 * x, x + 100))


# 2 x of a narrow signed argument, read with its signed type
NARROW_ARG = (HEAD + ".visible .func (.param .b32 r) pn(.param .b32 x)\n{\n"
              ".reg .b32 %r<4>;\nld.param.sBITS %r1, [x];\nmul.lo.s32 %r2, %r1, 2;\n"
              "st.param.b32 [r], %r2;\nret;\n}\n")


@pytest.mark.parametrize("inline", ["always", "never"])
@pytest.mark.parametrize("dtype, bits", [(ct.int16, 16), (ct.int8, 8)], ids=["int16", "int8"])
def test_exec_signed_narrow_argument_is_sign_extended(inline, dtype, bits):
    import numpy as np
    ext = splice.extern.from_ptx(ptx=NARROW_ARG.replace("BITS", str(bits)), name="pn",
                                 signature=f"int32({dtype.name})", inline=inline)
    lo, hi = -(1 << (bits - 1)), 1 << (bits - 1)
    x = np.random.default_rng(bits).integers(lo, hi, 256).astype(f"int{bits}")
    x[:2] = (lo, -1)
    b, y = _exec_int(ext, x, dtype)
    assert b.sites[0].inlined == (inline == "always")
    np.testing.assert_array_equal(y, 2 * x.astype(np.int32))
