"""Inlining callee PTX bodies: what is inlined, what is refused and why, and the PTX the
inliner writes for unusual but legal callees."""

import cuda.tile as ct

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
