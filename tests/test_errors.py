"""Every bad input gets splice's own error naming the user's function, file and line, and
leaves no cache entry behind."""

import re
from pathlib import Path

import cuda.tile as ct
import pytest

import splice
from splice.system import cache
from support import kernels as K

HERE = Path(__file__).name
f32 = ct.float32
SIG_1D = K.signature(K.array(f32), K.array(f32), 256)


def _kernel_calling(ext, nargs=1, void=False):
    if void:
        @splice.kernel
        def kern(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ext(t, t)
            ct.store(y, index=(ct.bid(0),), tile=t)
    elif nargs == 1:
        @splice.kernel
        def kern(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=ext(t))
    else:
        @splice.kernel
        def kern(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=ext(t, t))
    return kern


def _no_kernel_entries():
    return [p for p in cache.entries("kernel")]


def _compile_fails(kern, exc, *needles, sig=SIG_1D, arch="sm_90"):
    before = set(_no_kernel_entries())
    with pytest.raises(exc) as info:
        splice.build(kern, sig, arch)
    text = str(info.value)
    for n in needles:
        assert n in text, f"{n!r} not in:\n{text}"
    assert set(_no_kernel_entries()) == before, "a failed build left a cache entry"
    return info.value


# ----------------------------------------------------------------------------- declaration

def test_missing_annotation_names_the_stub():
    with pytest.raises(splice.SpliceDeclarationError) as info:
        @splice.extern(source='extern "C" __device__ float f(float x) { return x; }')
        def f(x) -> ct.float32: ...
    assert "parameter 'x' has no dtype annotation" in str(info.value)
    assert HERE in str(info.value)


def test_missing_return_annotation():
    with pytest.raises(splice.SpliceDeclarationError, match="missing return annotation"):
        @splice.extern(source='extern "C" __device__ float f(float x) { return x; }')
        def f(x: ct.float32): ...


def test_unsupported_dtype_annotation():
    with pytest.raises(splice.SpliceDeclarationError, match="unsupported"):
        @splice.extern(source='extern "C" __device__ float f(float x) { return x; }')
        def f(x: ct.float8_e4m3fn) -> ct.float32: ...


def test_source_and_path_exclusive():
    with pytest.raises(splice.SpliceDeclarationError, match="exactly one of source= or path="):
        @splice.extern(source="x", path="y.cu")
        def f(x: ct.float32) -> ct.float32: ...


def test_missing_file():
    with pytest.raises(splice.SpliceDeclarationError, match="not found"):
        splice.extern.from_ptx("no/such/file.ptx", name="f", signature="float32(float32)")


def test_stub_arity_must_match_signature():
    with pytest.raises(splice.SpliceDeclarationError, match="takes 1 parameter"):
        @splice.extern(source="", signature="float32(float32, float32)")
        def f(x): ...


def test_calling_an_extern_from_python_raises():
    with pytest.raises(splice.SpliceError, match="device code"):
        K.saxpy(1.0, 2.0, 3.0)


# ----------------------------------------------------------------------------- call sites

def test_extern_in_a_plain_cutile_kernel_is_refused():
    from cuda.tile._compile import compile_tile

    @ct.kernel
    def plain(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=K.gelu_tanh(t))
    with pytest.raises(splice.SpliceCallError, match="@splice.kernel"):
        compile_tile(plain._annotated_function, [SIG_1D], "sm_90", return_bytecode=True,
                     return_cubin=False)


def test_c_type_mismatch_is_caught_by_the_compiler():
    @splice.extern(source='extern "C" __device__ int as_int(float x) { return (int)x; }',
                   signature="float32(float32)")
    def as_int(x): ...
    _compile_fails(_kernel_calling(as_int), splice.SpliceCompileError,
                   "'as_int' must return float", "float32(float32)")

    @splice.extern(source='extern "C" __device__ float from_int(int x) { return x; }',
                   signature="float32(float32)")
    def from_int(x): ...
    _compile_fails(_kernel_calling(from_int), splice.SpliceCompileError,
                   "parameter 1 of 'from_int' must be float")

    @splice.extern(source='extern "C" __device__ float two(float x, float y) { return x; }',
                   signature="float32(float32)")
    def two(x): ...
    _compile_fails(_kernel_calling(two), splice.SpliceCompileError,
                   "must be an extern \\\"C\\\" function of 1 parameter(s)")


def test_long_and_int64_t_are_accepted_for_int64():
    @splice.extern(source='#include <cuda/std/cstdint>\n' if False else
                   'extern "C" __device__ long w64(long x, unsigned long y) '
                   '{ return x + (long)y; }', signature="int64(int64, uint64)")
    def w64(x, y): ...

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=w64(t, ct.bitcast(t, ct.uint64)))
    sig = K.signature(K.array(ct.int64), K.array(ct.int64), 256)
    assert splice.build(kern, sig, "sm_90").cubin


def test_ptx_prototype_must_match_signature():
    ext = splice.extern.from_ptx(ptx=K.PTX_SCALE, name="ptx_scale",
                                 signature="float32(float32)")
    _compile_fails(_kernel_calling(ext), splice.SpliceLinkError,
                   "does not match the declared signature", "2 parameter(s)")
    ext = splice.extern.from_ptx(ptx=K.PTX_SCALE, name="ptx_scale",
                                 signature="float64(float64, float64)")
    sig = K.signature(K.array(ct.float64), K.array(ct.float64), 256)
    _compile_fails(_kernel_calling(ext, 2), splice.SpliceLinkError, "cannot carry float64",
                   sig=sig)
    ext = splice.extern.from_ptx(ptx=K.PTX_SCALE, name="ptx_scale",
                                 signature="void(float32, float32)")
    _compile_fails(_kernel_calling(ext, void=True), splice.SpliceLinkError,
                   "returns a value but the signature is void")


def test_ptx_that_ptxas_rejects():
    ext = splice.extern.from_ptx(ptx=K.PTX_SCALE.replace("fma.rn.f32", "fma.bogus.f32"),
                                 name="ptx_scale", signature="float32(float32, float32)")
    e = _compile_fails(_kernel_calling(ext, 2), splice.SpliceToolchainError,
                       "ptxas rejected")
    assert "fma.bogus" in e.log or "error" in e.log.lower()


def test_non_utf8_ptx_file(tmp_path):
    p = tmp_path / "bad.ptx"
    p.write_bytes(K.PTX_SCALE.encode() + b"\xff\xfe")
    ext = splice.extern.from_ptx(p, name="ptx_scale", signature="float32(float32, float32)")
    _compile_fails(_kernel_calling(ext, 2), splice.SpliceDeclarationError, "not UTF-8")


def test_edit_of_a_ptx_file_is_seen(tmp_path):
    p = tmp_path / "s.ptx"
    p.write_text(K.PTX_SCALE)
    ext = splice.extern.from_ptx(p, name="ptx_scale", signature="float32(float32, float32)")
    kern = _kernel_calling(ext, 2)
    b1 = splice.build(kern, SIG_1D, "sm_90")
    p.write_text(K.PTX_SCALE.replace("0f3F800000", "0f40000000"))
    b2 = splice.build(kern, SIG_1D, "sm_90")
    assert b1.cubin != b2.cubin and not b2.from_cache
    assert splice.build(kern, SIG_1D, "sm_90").from_cache


def test_fragments_calling_each_other_cyclically():
    # f (fragment A) calls g (fragment B), which calls f: legal whole-program PTX once the
    # .extern declarations are hoisted into prototypes
    @splice.extern(source='extern "C" __device__ float g_cyc(float x, int d);\n'
                          'extern "C" __device__ float f_cyc(float x, int d) '
                          '{ return d <= 0 ? x : g_cyc(x * 0.5f, d - 1); }')
    def f_cyc(x: ct.float32, d: ct.int32) -> ct.float32: ...

    @splice.extern(source='extern "C" __device__ float f_cyc(float x, int d);\n'
                          'extern "C" __device__ float g_cyc(float x, int d) '
                          '{ return d <= 0 ? x : f_cyc(x + 1.0f, d - 1); }')
    def g_cyc(x: ct.float32, d: ct.int32) -> ct.float32: ...

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=f_cyc(t, 4) + g_cyc(t, 3))
    b = splice.compile(kern, SIG_1D, "sm_90")
    assert b.cubin
    assert not re.search(r"\.extern\s+\.func[^;]*\b[fg]_cyc\b", b.spliced_ptx)


def test_huge_source_compiles():
    filler = "// " + "x" * 200 + "\n"
    src = filler * 20000 + 'extern "C" __device__ float huge(float x) { return x; }\n'
    assert len(src) > 4_000_000

    @splice.extern(source=src)
    def huge(x: ct.float32) -> ct.float32: ...
    assert splice.build(_kernel_calling(huge), SIG_1D, "sm_90").cubin


@pytest.mark.parametrize("name", ["ret", "call", "mov", "bra"])
def test_externs_named_like_ptx_opcodes(name):
    ext = splice.extern(source=f'extern "C" __device__ float {name}(float x) '
                               f'{{ return x + 1.0f; }}',
                        name=name, signature="float32(float32)")(lambda x: None)
    b = splice.build(_kernel_calling(ext), SIG_1D, "sm_90")
    assert b.sites[0].instances >= 1


def test_extern_c_function_inside_a_namespace():
    # the C-type check cannot see it at global scope; the .func prototype is still checked
    @splice.extern(source='namespace ns { extern "C" __device__ float in_ns(float x) '
                          '{ return x * 3.0f; } }')
    def in_ns(x: ct.float32) -> ct.float32: ...
    assert splice.build(_kernel_calling(in_ns), SIG_1D, "sm_90").cubin


def test_editing_an_included_header_rebuilds(tmp_path):
    (tmp_path / "scale.h").write_text("#define SCALE 5.0f\n")
    cu = tmp_path / "k.cu"
    cu.write_text('#include "scale.h"\n'
                  'extern "C" __device__ float scaled(float x) { return x * SCALE; }\n')

    @splice.extern(path=cu)
    def scaled(x: ct.float32) -> ct.float32: ...
    kern = _kernel_calling(scaled)
    b1 = splice.compile(kern, SIG_1D, "sm_90")
    (tmp_path / "scale.h").write_text("#define SCALE 7.0f\n")
    b2 = splice.compile(kern, SIG_1D, "sm_90")
    assert "0f40A00000" in b1.spliced_ptx and "0f40E00000" in b2.spliced_ptx  # 5.0f, 7.0f


def test_error_in_an_included_header_quotes_the_header(tmp_path):
    (tmp_path / "util.h").write_text("// util\nfloat broken = ;\n")
    cu = tmp_path / "k.cu"
    cu.write_text('#include "util.h"\n'
                  'extern "C" __device__ float hdr(float x) { return x; }\n')

    @splice.extern(path=cu)
    def hdr(x: ct.float32) -> ct.float32: ...
    _compile_fails(_kernel_calling(hdr), splice.SpliceCompileError, "util.h:2:",
                   "float broken = ;")


@pytest.mark.parametrize("arch, ok", [("sm_90a", True), ("SM_90", True), ("sm_100f", True),
                                      ("compute_90", False), ("90", False), ("sm90x", False)])
def test_architecture_names(arch, ok):
    if ok:
        assert splice.compile(K.ptx_kernel, SIG_1D.__class__(
            K.signature(K.array(f32), K.array(f32), 512).parameters,
            SIG_1D.calling_convention), arch).cubin
    else:
        with pytest.raises(splice.SpliceToolchainError, match="unknown GPU architecture"):
            splice.compile(K.ptx_kernel, SIG_1D, arch)


def test_kernel_whose_name_contains_the_reserved_prefix():
    @splice.kernel
    def my__splice_reduce(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=K.ptx_scale(t, t))
    assert splice.build(my__splice_reduce, SIG_1D, "sm_90").cubin


@pytest.mark.parametrize("sig", ["float32(int8, int32, int8, int64)",
                                 "int32(" + ", ".join(["int8", "int16"] * 5) + ")",
                                 "float64(int8, float64, int16, int32, int8)"])
def test_arguments_up_to_128_bits_always_pack(sig):
    s = splice.parse_signature(sig)
    slots = s.packing()
    used = {}
    for place in slots:
        assert place.offset % place.bits == 0
        for b in range(place.offset, place.offset + place.bits):
            assert (place.slot, b) not in used
            used[place.slot, b] = True


@pytest.mark.parametrize("value, dtype, needle", [(1e300, ct.float32, "overflows float32"),
                                                  (70000.0, ct.float16, "overflows float16"),
                                                  (1e-10, ct.float16, "underflows float16")])
def test_float_constants_out_of_range(value, dtype, needle):
    name = "float16" if dtype is ct.float16 else "float32"
    t = splice.ELEMENT_TYPES[name]
    ext = splice.extern(source=f'#include <cuda_fp16.h>\nextern "C" __device__ {t.c_type} '
                               f'fc_{name}({t.c_type} x) {{ return x; }}',
                        name=f"fc_{name}", signature=f"{name}({name})")(lambda x: None)

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=ct.load(x, index=(ct.bid(0),), shape=(TILE,)) +
                 ext(value))
    sig = K.signature(K.array(dtype), K.array(dtype), 256)
    _compile_fails(kern, splice.SpliceCallError, needle, sig=sig)



def test_the_fix_named_for_an_overloaded_function_compiles():
    # issue 9: name="sq" on an overloaded C++ function failed with NVRTC's text alone; the
    # message now says to write name="::sq", and that must then pick the float overload
    src = ('__device__ float sq(float x) { return x * x; }\n'
           '__device__ double sq(double x) { return x * x; }\n')
    plain = splice.extern(source=src, name="sq", signature="float32(float32)")(lambda x: None)
    with pytest.raises(splice.SpliceCompileError, match='name="::sq"'):
        splice.build(_kernel_calling(plain), SIG_1D, "sm_90")
    fixed = splice.extern(source=src, name="::sq", signature="float32(float32)")(
        lambda x: None)
    b = splice.compile(_kernel_calling(fixed), SIG_1D, "sm_90")
    assert [s.symbol for s in b.sites] != [] and b.cubin


def test_a_ptx_file_declared_with_the_entry_point_the_message_names_compiles(tmp_path):
    f = tmp_path / "scale.ptx"
    f.write_text(K.PTX_SCALE)
    with pytest.raises(splice.SpliceDeclarationError, match="use splice.extern.from_ptx"):
        @splice.extern(path=str(f))
        def ptx_scale(x: ct.float32, y: ct.float32) -> ct.float32: ...
    ext = splice.extern.from_ptx(str(f), name="ptx_scale",
                                 signature="float32(float32, float32)")
    assert splice.compile(_kernel_calling(ext, nargs=2), SIG_1D, "sm_90").cubin


def test_inspect_with_arguments_cutile_cannot_type(monkeypatch):
    from splice.system import _cutile
    monkeypatch.setattr(_cutile, "get_compute_capability", lambda *a: (9, 0))  # as on an H100
    with pytest.raises(splice.SpliceDeclarationError) as info:
        _kernel_calling(K.gelu_tanh).inspect(1.0)      # the kernel takes 3 arguments
    text = str(info.value)
    assert "cuTile cannot make a kernel signature" in text and "as for ct.launch" in text
    assert "kernel 'kern' (" in text and HERE in text


def test_inspect_with_arguments_but_no_cuda_driver_says_it_needs_the_gpu(monkeypatch):
    # cuTile asks libcuda about array arguments: its OSError was reported as arguments
    # cuTile "cannot make a kernel signature" of
    from cuda.tile.compilation import KernelSignature

    from splice.system import _cutile

    def no_driver(*a, **k):
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(_cutile, "get_compute_capability", lambda *a: (9, 0))
    monkeypatch.setattr(KernelSignature, "from_kernel_args", no_driver)
    with pytest.raises(splice.SpliceToolchainError) as info:
        _kernel_calling(K.gelu_tanh).inspect(1.0, 2.0, 3)
    text = str(info.value)
    assert "needs this machine's GPU" in text and "libcuda.so.1" in text
    assert "signature=KernelSignature(...)" in text and "kernel 'kern' (" in text


@pytest.mark.gpu
def test_inspect_with_the_wrong_number_of_arguments_on_a_gpu():
    with pytest.raises(splice.SpliceDeclarationError, match="cannot make a kernel signature"):
        _kernel_calling(K.gelu_tanh).inspect(1.0)
