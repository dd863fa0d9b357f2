"""Merging fragments: line info of several fragments, PTX callees without .visible, weak
template instances, ptxas errors located in the fragment they come from."""

import cuda.tile as ct
import pytest

import splice
from support import kernels as K

SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 256)


def _two_call_kernel(f, g):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=f(t) + g(t))
    return kern


def test_two_fragments_with_lineinfo():
    @splice.extern(source='extern "C" __device__ float li_a(float x) { return x + 1; }',
                   options=["-lineinfo"])
    def li_a(x: ct.float32) -> ct.float32: ...

    @splice.extern(source='extern "C" __device__ float li_b(float x) { return x + 2; }',
                   options=["-lineinfo"])
    def li_b(x: ct.float32) -> ct.float32: ...
    b = splice.compile(_two_call_kernel(li_a, li_b), SIG, "sm_90")
    import re
    indices = re.findall(r"^\s*\.file\s+(\d+)", b.spliced_ptx, re.M)
    assert len(indices) == len(set(indices)) >= 3


def test_ptx_callee_without_visible():
    ptx = K.PTX_SCALE.replace(".visible .func", ".func")
    ext = splice.extern.from_ptx(ptx=ptx, name="ptx_scale",
                                 signature="float32(float32, float32)", inline="never")
    ext2 = splice.extern.from_ptx(ptx=ptx, name="ptx_scale",
                                  signature="float32(float32, float32)")

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t, t) + ext2(t, 2.0))
    b = splice.compile(kern, SIG, "sm_90")
    assert [s.inlined for s in b.sites] == [False, True]


def test_weak_template_instances_from_two_sources():
    tmpl = ("template <class T> __device__ __noinline__ T damp(T x) { return x * T(0.5); }\n")

    @splice.extern(source=tmpl + 'extern "C" __device__ float wa(float x) '
                                 '{ return damp(x) + 1.0f; }')
    def wa(x: ct.float32) -> ct.float32: ...

    @splice.extern(source=tmpl + 'extern "C" __device__ float wb(float x) '
                                 '{ return damp(x) * 3.0f; }', options=["--use_fast_math"])
    def wb(x: ct.float32) -> ct.float32: ...
    assert splice.build(_two_call_kernel(wa, wb), SIG, "sm_90").cubin


def test_ptxas_error_names_the_fragment_and_its_line():
    ptx = K.PTX_SCALE.replace("fma.rn.f32", "fma.f32")
    ext = splice.extern.from_ptx(ptx=ptx, name="ptx_scale", inline="never",
                                 signature="float32(float32, float32)")

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t, t))
    with pytest.raises(splice.SpliceToolchainError) as e:
        splice.build(kern, SIG, "sm_90")
    msg = str(e.value)
    assert "PTX text declared at" in msg and "test_link.py" in msg
    assert "fma.f32" in msg


def test_unresolved_function_names_the_fragment():
    @splice.extern(source='extern "C" __device__ float helper_elsewhere(float);\n'
                          'extern "C" __device__ float uses_helper(float x) '
                          '{ return helper_elsewhere(x) + 1.0f; }')
    def uses_helper(x: ct.float32) -> ct.float32: ...

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=uses_helper(t))
    with pytest.raises(splice.SpliceLinkError, match="helper_elsewhere") as e:
        splice.build(kern, SIG, "sm_90")
    assert "test_link.py" in str(e.value)
