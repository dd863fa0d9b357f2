"""Several results from one extern: a CUDA C function returning a struct or a CUDA vector
type, declared ``-> (ct.float32, ct.float32)`` or ``"(float32, float32)(float32)"``, comes
back in the kernel as a tuple of tiles. Compiled without a GPU (SASS via nvdisasm of the
cubin) and, marker gpu, launched and checked against NumPy."""

import cuda.tile as ct
import numpy as np
import pytest

import splice
from support import kernels as K

f32, i32, f16 = ct.float32, ct.int32, ct.float16

SINCOS = r'''
struct SinCos { float s, c; };
extern "C" __device__ SinCos sincos_pair(float x) {
    SinCos r; __sincosf(x, &r.s, &r.c); return r;
}'''

MIX = r'''
struct Split { int whole; float frac; };
extern "C" __device__ Split split_float(float x) {
    float w = truncf(x); return Split{(int)w, x - w};
}'''

QUAD = r'''
#include <cuda_fp16.h>
struct Quad { __half a, b, c, d; };
extern "C" __device__ Quad powers(float x) {
    return Quad{__float2half(x), __float2half(x * x), __float2half(x * x * x),
                __float2half(-x)};
}'''

VEC = ('extern "C" __device__ float2 minmax(float a, float b) {'
       ' return make_float2(fminf(a, b), fmaxf(a, b)); }')
CXX = r'''
namespace geo {
template <class T> struct Polar { T r, theta; };
template <class T> __device__ Polar<T> polar(T x, T y) {
    return Polar<T>{sqrtf(x * x + y * y), atan2f(y, x)};
}
}'''


@splice.extern(source=SINCOS)
def sincos_pair(x: ct.float32) -> (ct.float32, ct.float32): ...


@splice.extern(source=SINCOS, name="sincos_pair", pure=False)
def sincos_impure(x: ct.float32) -> (ct.float32, ct.float32): ...


sincos_called = splice.extern(source=SINCOS, name="sincos_pair", inline="never",
                              signature="(float32, float32)(float32)")
split_float = splice.extern(source=MIX, name="split_float",
                            signature="(int32, float32)(float32)")
powers = splice.extern(source=QUAD, name="powers",
                       signature="(float16, float16, float16, float16)(float32)")
minmax = splice.extern(source=VEC, name="minmax", signature="(float32, float32)(float32, float32)")
polar = splice.extern(source=CXX, name="geo::polar<float>",
                      signature="(float32, float32)(float32, float32)")


def _pair_kernel(fn):
    @splice.kernel
    def pair_kernel(x, a, b, TILE: K.ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        u, v = fn(t)
        ct.store(a, index=(ct.bid(0),), tile=u)
        ct.store(b, index=(ct.bid(0),), tile=v.astype(ct.float32))
    return pair_kernel


def _two_arg_kernel(fn):
    @splice.kernel
    def two_arg_kernel(x, y, a, b, TILE: K.ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        s = ct.load(y, index=(ct.bid(0),), shape=(TILE,))
        u, v = fn(t, s)
        ct.store(a, index=(ct.bid(0),), tile=u)
        ct.store(b, index=(ct.bid(0),), tile=v)
    return two_arg_kernel


@splice.kernel
def quad_kernel(x, out, TILE: K.ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    p1, p2, p3, n = powers(t)
    ct.store(out, index=(0, ct.bid(0)), tile=ct.reshape(p1, (1, TILE)))
    ct.store(out, index=(1, ct.bid(0)), tile=ct.reshape(p2, (1, TILE)))
    ct.store(out, index=(2, ct.bid(0)), tile=ct.reshape(p3, (1, TILE)))
    ct.store(out, index=(3, ct.bid(0)), tile=ct.reshape(n, (1, TILE)))


KERNELS = {
    "sincos": (_pair_kernel(sincos_pair), f32),
    "sincos_impure": (_pair_kernel(sincos_impure), f32),
    "sincos_called": (_pair_kernel(sincos_called), f32),
    "split": (_pair_kernel(split_float), i32),
}
PAIR_SIG = K.signature(K.array(f32), K.array(f32), K.array(f32), 256)
PAIR_SIG_MIX = K.signature(K.array(f32), K.array(i32), K.array(f32), 256)
TWO_SIG = K.signature(K.array(f32), K.array(f32), K.array(f32), K.array(f32), 256)
QUAD_SIG = K.signature(K.array(f32), K.array(f16, 2), 256)


def _sig(name):
    return PAIR_SIG_MIX if KERNELS[name][1] == i32 else PAIR_SIG


@pytest.mark.parametrize("name", ["sincos", "split"])
def test_pure_results_are_inlined_with_no_sass_call(name):
    b = splice.compile(KERNELS[name][0], _sig(name), "sm_90")
    [site] = b.sites
    assert site.inlined and site.instances >= 1
    if b.sass is not None:
        assert b.sass_call_count() == 0
    # the trampoline returns the packed pair: its PTX is the callee, inlined
    assert "call (__splice_r)" not in b.spliced_ptx


def test_impure_results_keep_an_atomic_marker_call_per_element():
    b = splice.compile(KERNELS["sincos_impure"][0], PAIR_SIG, "sm_90")
    [site] = b.sites
    assert site.marker == "atomic" and site.inlined and site.instances >= 1


def test_called_results_are_one_sass_call_per_instance():
    b = splice.compile(KERNELS["sincos_called"][0], PAIR_SIG, "sm_90")
    [site] = b.sites
    assert not site.inlined
    assert b.spliced_ptx.count(f"call (__splice_r), {site.symbol},") == site.instances
    if b.sass is not None:
        assert b.sass_call_count(site.symbol) == site.instances


def test_fp16_quad_is_packed_into_one_64_bit_result():
    b = splice.compile(quad_kernel, QUAD_SIG, "sm_90")
    [site] = b.sites
    assert site.inlined
    sig = powers._splice_extern.signature
    assert sig.result.name == "uint64" and sig.offsets == (0, 16, 32, 48)
    if b.sass is not None:
        assert b.sass_call_count() == 0


@pytest.mark.parametrize("fn", [minmax, polar], ids=["float2", "cxx_template"])
def test_vector_type_and_cxx_template_results(fn):
    b = splice.compile(_two_arg_kernel(fn), TWO_SIG, "sm_90")
    [site] = b.sites
    assert site.inlined
    if b.sass is not None:   # sqrtf/atan2f keep CUDA's slow-path helper CALLs
        assert b.sass_call_count(site.symbol) == 0


def test_signature_text_and_annotation_agree():
    a = sincos_pair._splice_extern.signature
    assert a == splice.types.parse_signature("(float32, float32)(float32)")
    assert str(a) == "(float32, float32)(float32)" and a.result.name == "uint64"
    with pytest.raises(splice.SpliceDeclarationError, match="need 80 bits"):
        splice.types.parse_signature("(int8, float32, int16)(float32)")


def test_results_layout_is_the_c_struct_layout():
    layout = splice.types.results_layout
    t = splice.ELEMENT_TYPES
    assert layout((t["int8"], t["float32"])) == (t["uint64"], (0, 32))
    assert layout((t["int8"], t["int8"], t["int16"])) == (t["uint32"], (0, 8, 16))
    assert layout((t["float16"], t["int8"], t["float16"])) == (t["uint64"], (0, 16, 32))
    assert layout((t["bool"], t["float32"])) == (t["uint64"], (0, 32))


def _compile_error(source, signature, name="f"):
    ext = splice.extern(source=source, name=name, signature=signature)
    with pytest.raises(splice.SpliceCompileError) as e:
        splice.compile(_pair_kernel(ext), PAIR_SIG, "sm_90")
    return str(e.value)


def test_member_type_mismatch_is_refused_at_compile_time():
    msg = _compile_error('struct R { float a; int b; };\n'
                         'extern "C" __device__ R f(float x) { return R{x, 1}; }',
                         "(float32, float32)(float32)")
    assert "member 2 of the result of 'f' must be float" in msg
    assert "test_results.py" in msg


def test_member_count_mismatch_is_refused_at_compile_time():
    msg = _compile_error('struct R { float a, b, c; };\n'
                         'extern "C" __device__ R f(float x) { return R{x, x, x}; }',
                         "(float32, float32)(float32)")
    assert "binding names" in msg and "test_results.py" in msg
    assert "'f' (extern declared at" in msg and "exactly 2 public members (float, float)" in msg


def test_parameter_type_mismatch_is_refused_at_compile_time():
    msg = _compile_error('struct R { float a, b; };\n'
                         'extern "C" __device__ R f(double x) { return R{(float)x, 0}; }',
                         "(float32, float32)(float32)")
    assert "must take exactly (float) (no conversion)" in msg and "test_results.py" in msg


@pytest.mark.parametrize("signature, needle", [
    ("(float64, float32)(float32)", "need 96 bits"),
    ("(float32,)(float32)", "at least two dtypes"),
    ("(float32*, float32)(float32)", "cannot be a pointer"),
])
def test_results_beyond_64_bits_or_malformed_are_refused_at_declaration(signature, needle):
    with pytest.raises(splice.SpliceDeclarationError, match=needle.replace("(", r"\(")):
        splice.extern(source=SINCOS, name="sincos_pair", signature=signature)


def test_block_scope_results_are_refused():
    with pytest.raises(splice.SpliceDeclarationError, match="returns one scalar"):
        splice.extern(source=SINCOS, name="sincos_pair", scope="block",
                      signature="(float32, float32)(float32)")


def test_member_types_accept_the_documented_c_alternatives():
    """int8 may be ``char`` (signed on NVRTC's platforms), as for parameters."""
    ext = splice.extern(source='struct R { char a; short b; };\n'
                               'extern "C" __device__ R f(float x) { return R{(char)x, 1}; }',
                        name="f", signature="(int8, int16)(float32)")

    @splice.kernel
    def kern(x, a, TILE: K.ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        u, v = ext(t)
        ct.store(a, index=(ct.bid(0),), tile=u.astype(ct.int16) + v)
    sig = K.signature(K.array(f32), K.array(ct.int16), 256)
    assert splice.compile(kern, sig, "sm_90").sites[0].inlined


def test_library_extern_with_results():
    lib = splice.library(SINCOS + MIX)
    sc = lib.extern("sincos_pair", signature="(float32, float32)(float32)")
    b = splice.compile(_pair_kernel(sc), PAIR_SIG, "sm_90")
    assert b.sites[0].inlined


# ---------------------------------------------------------------------------------------------
# PTX and LTO-IR: the .func returns the struct as an aggregate .param


def _sincos_ptx(ret: str, stores: str) -> str:
    return f"""
.version 8.0
.target sm_80
.address_size 64
.visible .func (.param {ret}) sc(.param .b32 x)
{{
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;
    ld.param.f32 %f1, [x];
    sin.approx.f32 %f2, %f1;
    cos.approx.f32 %f3, %f1;
    {stores}
    ret;
}}
"""


AGGREGATE = _sincos_ptx(".align 4 .b8 func_retval0[8]", "st.param.f32 [func_retval0+0], %f2; "
                        "st.param.f32 [func_retval0+4], %f3;")
PACKED = _sincos_ptx(".b64 func_retval0", "mov.b64 %rd1, {%f2, %f3}; "
                     "st.param.b64 [func_retval0], %rd1;")
PAIR = "(float32, float32)(float32)"
ptx_sincos = splice.extern.from_ptx(ptx=AGGREGATE, name="sc", signature=PAIR)
ptx_sincos_packed = splice.extern.from_ptx(ptx=PACKED, name="sc", signature=PAIR)
KERNELS["ptx_aggregate"] = (_pair_kernel(ptx_sincos), f32)
KERNELS["ptx_packed"] = (_pair_kernel(ptx_sincos_packed), f32)


def test_ptx_aggregate_result_is_loaded_in_aligned_pieces():
    b = splice.compile(_pair_kernel(ptx_sincos), PAIR_SIG, "sm_90")
    [site] = b.sites
    assert not site.inlined        # its st.param at +4 is not a whole-result store
    calls = b.spliced_ptx.count("call (__splice_r), sc,")
    assert calls == site.instances
    assert b.spliced_ptx.count("[__splice_r+0];") == calls
    assert b.spliced_ptx.count("[__splice_r+4];") == calls
    assert "ld.param.b64" not in b.spliced_ptx.split("call (__splice_r), sc,")[1][:400]


def test_ptx_packed_result_is_inlined():
    b = splice.compile(_pair_kernel(ptx_sincos_packed), PAIR_SIG, "sm_90")
    assert b.sites[0].inlined
    if b.sass is not None:
        assert b.sass_call_count() == 0


@pytest.mark.parametrize("ret, needle", [
    (".align 4 .b8 func_retval0[12]", "12 bytes, aligned to 4"),
    (".align 2 .b8 func_retval0[8]", "8 bytes, aligned to 2"),
    (".b32 func_retval0", "packed in one .b64"),
    (".f64 func_retval0", "packed in one .b64"),
])
def test_ptx_result_not_the_struct_is_refused(ret, needle):
    ext = splice.extern.from_ptx(ptx=_sincos_ptx(ret, ""), name="sc", signature=PAIR)
    with pytest.raises(splice.SpliceLinkError) as e:
        splice.compile(_pair_kernel(ext), PAIR_SIG, "sm_90")
    msg = str(e.value)
    assert needle in msg and ".param .align 4 .b8 func_retval0[8]" in msg
    assert "test_results.py" in msg


def test_ltoir_struct_result():
    from splice.system import toolchain
    src = SINCOS.replace("sincos_pair", "lto_sincos").encode()
    ltoir = toolchain.nvrtc_compile_ltoir(src, "lto.cu", ["-arch=sm_90", "-rdc=true", "-dlto"])
    ext = splice.extern.from_ltoir(data=ltoir, name="lto_sincos", signature=PAIR)
    b = splice.compile(_pair_kernel(ext), PAIR_SIG, "sm_90")
    assert b.sites[0].instances >= 1


def test_binary_object_results_are_refused(tmp_path):
    obj = tmp_path / "f.cubin"
    obj.write_bytes(b"\x7fELF")
    with pytest.raises(splice.SpliceDeclarationError, match="a binary object does not carry"):
        splice.extern.from_object(obj, name="f", signature=PAIR)


# ---------------------------------------------------------------------------------------------
# On the CPU executor (support.ptx_exec): the values of the spliced PTX, for sm_80 (the 1-D
# loads are TMA loads on sm_90, out of the executor's scope)


def _exec_pair(name, x):
    from support.ptx_exec import run_build
    kern, out_t = KERNELS[name]
    a = np.zeros(x.shape, np.int32 if out_t == i32 else np.float32)
    b = np.zeros(x.shape, np.float32)
    sig = K.signature(K.array(f32), K.array(out_t), K.array(f32), 256)
    run_build(splice.compile(kern, sig, "sm_80"), (x.size // 256,), x, a, b)
    return a, b


@pytest.mark.parametrize("name", ["sincos", "sincos_impure", "sincos_called", "ptx_aggregate",
                                  "ptx_packed"])
def test_exec_sincos_pair_values(name):
    x = np.random.default_rng(0).uniform(-np.pi, np.pi, 512).astype(np.float32)
    s, c = _exec_pair(name, x)
    # sin/cos.approx.f32: absolute error at most 2^-20.9 on [-pi, pi] (PTX ISA); the order
    # of the pair (a swap, a wrong offset) is far outside it
    np.testing.assert_allclose(s, np.sin(x.astype(np.float64)), atol=2e-6, rtol=0)
    np.testing.assert_allclose(c, np.cos(x.astype(np.float64)), atol=2e-6, rtol=0)


def test_exec_int_float_mix_values():
    x = np.random.default_rng(1).uniform(-1000, 1000, 512).astype(np.float32)
    w, f = _exec_pair("split", x)
    np.testing.assert_array_equal(w, np.trunc(x).astype(np.int32))
    np.testing.assert_array_equal(f, x - np.trunc(x))


def test_exec_fp16_quad_values():
    from support.ptx_exec import run_build
    x = np.random.default_rng(2).uniform(-4, 4, 512).astype(np.float32)
    out = np.zeros((4, x.size), np.float16)
    sig = K.signature(K.array(f32), K.array(f16, 2), 256)
    run_build(splice.compile(quad_kernel, sig, "sm_80"), (x.size // 256,), x, out)
    x32 = x.astype(np.float32)
    ref = np.stack([x32, x32 * x32, x32 * x32 * x32, -x32]).astype(np.float16)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("fn", [minmax, polar], ids=["float2", "cxx_template"])
def test_exec_two_argument_results_values(fn):
    from support.ptx_exec import run_build
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(512).astype(np.float32) for _ in range(2))
    a, b = np.zeros(512, np.float32), np.zeros(512, np.float32)
    sig = K.signature(*[K.array(f32)] * 4, 256)
    run_build(splice.compile(_two_arg_kernel(fn), sig, "sm_80"), (2,), x, y, a, b)
    if fn is minmax:
        np.testing.assert_array_equal(a, np.minimum(x, y))
        np.testing.assert_array_equal(b, np.maximum(x, y))
    else:
        np.testing.assert_allclose(a, np.hypot(x, y), rtol=1e-6)
        np.testing.assert_allclose(b, np.arctan2(y, x), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# On a GPU: the values


def _run_pair(dev, name, x):
    torch = dev.torch
    kern, out_t = KERNELS[name]
    xt = torch.from_numpy(x).cuda()
    a = torch.empty(x.shape, dtype=torch.int32 if out_t == i32 else torch.float32,
                    device="cuda")
    b = torch.empty_like(xt)
    dev.launch((x.size // 256,), kern, (xt, a, b, 256))
    torch.cuda.synchronize()
    return a.cpu().numpy(), b.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sincos", "sincos_impure", "sincos_called", "ptx_aggregate",
                                  "ptx_packed"])
def test_sincos_pair_values(dev, name):
    x = np.random.default_rng(0).uniform(-np.pi, np.pi, 4096).astype(np.float32)
    s, c = _run_pair(dev, name, x)
    np.testing.assert_allclose(s, np.sin(x), atol=2e-6, rtol=0)
    np.testing.assert_allclose(c, np.cos(x), atol=2e-6, rtol=0)


@pytest.mark.gpu
def test_int_float_mix_values(dev):
    x = np.random.default_rng(1).uniform(-1000, 1000, 4096).astype(np.float32)
    w, f = _run_pair(dev, "split", x)
    np.testing.assert_array_equal(w, np.trunc(x).astype(np.int32))
    np.testing.assert_array_equal(f, x - np.trunc(x))


@pytest.mark.gpu
def test_fp16_quad_values(dev):
    torch = dev.torch
    x = np.random.default_rng(2).uniform(-4, 4, 4096).astype(np.float32)
    out = torch.empty((4, x.size), dtype=torch.float16, device="cuda")
    dev.launch((x.size // 256,), quad_kernel, (torch.from_numpy(x).cuda(), out, 256))
    torch.cuda.synchronize()
    ref = np.stack([x, x * x, x * x * x, -x]).astype(np.float16)
    np.testing.assert_array_equal(out.cpu().numpy(), ref)


@pytest.mark.gpu
@pytest.mark.parametrize("fn", [minmax, polar], ids=["float2", "cxx_template"])
def test_two_argument_results_values(dev, fn):
    torch = dev.torch
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    a, b = (torch.empty(4096, device="cuda") for _ in range(2))
    dev.launch((16,), _two_arg_kernel(fn), (torch.from_numpy(x).cuda(),
                                           torch.from_numpy(y).cuda(), a, b, 256))
    torch.cuda.synchronize()
    if fn is minmax:
        np.testing.assert_array_equal(a.cpu().numpy(), np.minimum(x, y))
        np.testing.assert_array_equal(b.cpu().numpy(), np.maximum(x, y))
    else:
        np.testing.assert_allclose(a.cpu().numpy(), np.hypot(x, y), rtol=1e-6)
        np.testing.assert_allclose(b.cpu().numpy(), np.arctan2(y, x), atol=1e-6)

