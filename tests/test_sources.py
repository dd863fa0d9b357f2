"""Every CUDA C input form: C++ names (namespaces, templates, overloads) through generated
extern "C" trampolines, libraries compiled once for several externs."""

import cuda.tile as ct
import pytest

import splice
from splice.compat import release
from splice.system import toolchain
from support import kernels as K
from support.fragments import LTO_SRC, OBJ_SRC, ltoir, nvjitlink_too_old, rdc_cubin

SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 256)
SIG_I32 = K.signature(K.array(ct.int32), K.array(ct.int32), 256)

CXX = r'''
namespace my_ns {
template <class T> __device__ T scale(T x) { return x * T(3); }
__device__ float over(float x) { return x + 1.0f; }
__device__ double over(double x) { return x + 2.0; }
namespace inner { __device__ float deep(float x, int n) { return x * n; } }
}
'''


def _kern(ext, nargs=1):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t) if nargs == 1 else ext(t, 4))
    return kern


@pytest.mark.parametrize("name, sig, nargs", [
    ("my_ns::scale<float>", "float32(float32)", 1),
    ("my_ns::over", "float32(float32)", 1),
    ("my_ns::inner::deep", "float32(float32, int32)", 2),
])
def test_cxx_names(name, sig, nargs):
    ext = splice.extern(source=CXX, name=name, signature=sig)(lambda *a: None)
    b = splice.compile(_kern(ext, nargs), SIG, "sm_90")
    assert b.sites[0].extern == name and b.sites[0].inlined
    assert b.sites[0].symbol.startswith("splice_cxx_")


def test_cxx_overload_without_exact_types_is_an_error():
    ext = splice.extern(source=CXX, name="my_ns::over", signature="float32(int32)")(
        lambda x: None)
    with pytest.raises(splice.SpliceCompileError, match="my_ns::over"):
        splice.build(_kern(ext), K.signature(K.array(ct.int32), K.array(ct.float32), 256),
                     "sm_90")


def test_library_compiles_once_for_several_externs():
    lib = splice.library(CXX + 'extern "C" __device__ float plain_c(float x) '
                               '{ return -x; }\n')
    scale = lib.extern("my_ns::scale<float>", signature="float32(float32)")
    deep = lib.extern("my_ns::inner::deep", signature="float32(float32, int32)")

    @lib.extern()
    def plain_c(x: ct.float32) -> ct.float32: ...

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=scale(t) + deep(t, 2) + plain_c(t))
    b = splice.compile(kern, SIG, "sm_90")
    assert [s.extern for s in b.sites] == ["my_ns::scale<float>", "my_ns::inner::deep",
                                           "plain_c"]
    assert [s.kind for s in b.spans if s.owner.startswith("CUDA C source")] == ["fragment"]
    frags = {s.extern: s for s in b.sites}
    assert len(frags) == 3


def test_library_file(tmp_path):
    (tmp_path / "ops.h").write_text("#define K 5.0f\n")
    (tmp_path / "mylib.cu").write_text('#include "ops.h"\n'
                                       'extern "C" __device__ float lib_f(float x) '
                                       '{ return x * K; }\n')
    lib = splice.library(path=tmp_path / "mylib.cu")
    f = lib.extern("lib_f", signature="float32(float32)")
    b = splice.compile(_kern(f), SIG, "sm_90")
    assert "0f40A00000" in b.spliced_ptx


def test_ltoir_file(tmp_path):
    p = tmp_path / "f.ltoir"
    p.write_bytes(ltoir())
    ext = splice.extern.from_ltoir(p, name="lto_f", signature="float32(float32)")
    b = splice.compile(_kern(ext), SIG, "sm_90")
    assert b.sites[0].inlined and "fma.rn.f32" in b.spliced_ptx
    assert ".entry __splice_lto_root" not in b.spliced_ptx


def test_ltoir_for_another_arch_is_refused():
    ext = splice.extern.from_ltoir(data=ltoir("sm_100a"), name="lto_f",
                                   signature="float32(float32)")
    with pytest.raises(splice.SpliceLinkError, match="nvJitLink"):
        splice.build(_kern(ext), SIG, "sm_90")


def test_nvrtc_dlto_option():
    ext = splice.extern(source=LTO_SRC.decode(), name="lto_f", options=["-dlto"],
                        signature="float32(float32)")(lambda x: None)
    b = splice.compile(_kern(ext), SIG, "sm_90")
    assert b.sites[0].inlined and "fma.rn.f32" in b.spliced_ptx


def test_binary_objects_need_an_nvjitlink_as_new_as_ptxas(tmp_path, monkeypatch):
    from cuda.bindings import nvjitlink
    monkeypatch.setattr(nvjitlink, "version", lambda: (13, 0))
    ext = splice.extern.from_object(rdc_cubin(tmp_path), name="obj_f",
                                    signature="float32(float32)")
    need = release(toolchain.ptxas_version())  # the ptxas tileiras runs, whatever its minor
    with pytest.raises(splice.SpliceToolchainError,
                       match=rf"needs nvJitLink {need[0]}\.{need[1]} or newer"):
        splice.build(_kern(ext), SIG, "sm_90")


def test_relocatable_cubin_object(tmp_path):
    if nvjitlink_too_old():
        pytest.skip("nvJitLink older than tileiras's ptxas")
    ext = splice.extern.from_object(rdc_cubin(tmp_path), name="obj_f",
                                    signature="float32(float32)")
    b = splice.compile(_kern(ext), SIG, "sm_90")
    assert b.cubin[:4] == b"\x7fELF" and not b.sites[0].inlined
    assert b.sass is None or b.sass_call_count("obj_f") >= 1


def test_binary_object_refused_for_a_tma_kernel(tmp_path):
    ext = splice.extern.from_object(rdc_cubin(tmp_path), name="obj_f",
                                    signature="float32(float32)")

    @splice.kernel
    def mm(A, B, C, tm: ct.Constant[int], tn: ct.Constant[int], tk: ct.Constant[int]):
        acc = K.matmul_tile(A, B, tm, tn, tk)
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(ext(acc), C.dtype))
    sig = K.signature(K.array(ct.float16, 2), K.array(ct.float16, 2), K.array(ct.float16, 2),
                      128, 128, 64)
    with pytest.raises(splice.SpliceLinkError, match="hidden tensor-map parameter"):
        splice.build(mm, sig, "sm_90")


def test_binary_object_suffix_is_checked(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"\0")
    with pytest.raises(splice.SpliceDeclarationError, match="must end in"):
        splice.extern.from_object(p, name="f", signature="float32(float32)")


PTR_SRC = r'''
extern "C" __device__ float neighbours(const float *p, int i, int n) {
    float l = i > 0 ? p[i - 1] : 0.0f, r = i + 1 < n ? p[i + 1] : 0.0f;
    return l + p[i] + r;
}
'''
neighbours = splice.extern(source=PTR_SRC, name="neighbours",
                           signature="float32(float32*, int32, int32)")(lambda *a: None)


@splice.kernel
def stencil_kernel(x, y, n: int, TILE: ct.Constant[int]):
    idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    ct.store(y, index=(ct.bid(0),), tile=neighbours(x, idx, n))


def test_pointer_arguments_compile():
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.scalar(ct.int32), 256)
    b = splice.compile(stencil_kernel, sig, "sm_90")
    assert b.sites[0].instances >= 1


def test_pointer_argument_errors():
    bad = splice.extern(source=PTR_SRC, name="neighbours",
                        signature="float32(int32*, int32, int32)")(lambda *a: None)

    @splice.kernel
    def kern(x, y, n: int, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=bad(x, ct.arange(TILE, dtype=ct.int32), n))
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.scalar(ct.int32), 256)
    with pytest.raises(splice.SpliceCallError, match="array of float32, but the signature "
                                                      "expects int32"):
        splice.build(kern, sig, "sm_90")
    with pytest.raises(splice.SpliceDeclarationError, match="cannot return a pointer"):
        splice.parse_signature("float32*(float32)")


@pytest.mark.gpu
def test_pointer_arguments_on_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    import numpy as np
    n, tile = 4096, 256
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    xt = torch.from_numpy(x).cuda()
    y = torch.empty(n, dtype=torch.float32, device="cuda")
    ct.launch(torch.cuda.current_stream(), (n // tile,), stencil_kernel, (xt, y, n, tile))
    torch.cuda.synchronize()
    ref = x + np.concatenate([[0], x[:-1]]) + np.concatenate([x[1:], [0]])
    np.testing.assert_allclose(y.cpu().numpy(), ref, rtol=1e-6, atol=1e-6)


def _nvcc():
    import shutil

    from splice.system import toolchain
    cand = toolchain.tileiras().resolve().parent / "nvcc"
    return str(cand) if cand.is_file() else shutil.which("nvcc")


@pytest.mark.parametrize("kind", ["fatbin", "o", "a"])
def test_fatbin_object_and_library(tmp_path, kind):
    import os
    import subprocess
    nvcc = _nvcc()
    if nvcc is None or nvjitlink_too_old():
        pytest.skip("needs nvcc and an nvJitLink as new as ptxas")
    cu = tmp_path / "obj.cu"
    cu.write_bytes(OBJ_SRC)
    env = dict(os.environ, PATH=os.path.dirname(nvcc) + os.pathsep + os.environ["PATH"])
    out = tmp_path / ("obj.fatbin" if kind == "fatbin" else "obj.o")
    flag = "-fatbin" if kind == "fatbin" else "-c"
    r = subprocess.run([nvcc, flag, "-rdc=true", "-arch=sm_90a", str(cu), "-o", str(out)],
                       capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"nvcc could not build the object here: {r.stderr[-300:]}")
    if kind == "a":
        lib = tmp_path / "libobj.a"
        subprocess.run(["ar", "rcs", str(lib), str(out)], check=True)
        out = lib
    ext = splice.extern.from_object(out, name="obj_f", signature="float32(float32)")
    b = splice.compile(_kern(ext), SIG, "sm_90")
    assert b.cubin[:4] == b"\x7fELF"
    assert b.sass is None or b.sass_call_count("obj_f") >= 1


# Regressions: the C type check must never be dropped (each was a silent miscompile).

def test_extern_c_in_a_namespace_with_the_wrong_types_is_an_error():
    ext = splice.extern(source='namespace q { extern "C" __device__ float nsf(int x) '
                               '{ return x; } }', name="nsf",
                        signature="float32(float32)")(lambda x: None)
    with pytest.raises(splice.SpliceCompileError, match="nsf"):
        splice.build(_kern(ext), SIG, "sm_90")


def test_one_unresolvable_library_symbol_keeps_the_other_checks():
    lib = splice.library('extern "C" __device__ float lf(float x) { return x; }\n')
    wrong = lib.extern("lf", signature="int32(int32)")
    lib.extern("typo_not_defined", signature="float32(float32)")
    with pytest.raises(splice.SpliceCompileError, match="'lf' must return float|lf"):
        splice.build(_kern(wrong), SIG_I32, "sm_90")


def test_redeclaring_a_library_symbol_keeps_both_checks():
    lib = splice.library('extern "C" __device__ float lf2(float x) { return x; }\n')
    wrong = lib.extern("lf2", signature="int32(int32)")
    lib.extern("lf2", signature="float32(float32)")
    with pytest.raises(splice.SpliceCompileError, match="lf2"):
        splice.build(_kern(wrong), SIG_I32, "sm_90")


def test_missing_cxx_name_is_named_with_its_declaration():
    ext = splice.extern(source=CXX, name="my_ns::nope", signature="float32(float32)")(
        lambda x: None)
    with pytest.raises(splice.SpliceCompileError) as e:
        splice.build(_kern(ext), SIG, "sm_90")
    assert "my_ns::nope" in str(e.value) and "test_sources.py" in str(e.value)


def test_undefined_c_symbol_is_a_link_error_not_a_dropped_check():
    lib = splice.library('extern "C" __device__ float here(float x) { return x; }\n')
    ghost = lib.extern("ghost", signature="float32(float32)")
    with pytest.raises(splice.SpliceLinkError, match="does not define the device function "
                                                     "'ghost'"):
        splice.build(_kern(ghost), SIG, "sm_90")


def test_cxx_names_for_ptx_are_refused_with_advice():
    with pytest.raises(splice.SpliceDeclarationError, match="give the mangled"):
        splice.extern.from_ptx(ptx=K.PTX_SCALE, name="ns::f", signature="float32(float32)")


@pytest.mark.parametrize("form", ["cuda", "ptx", "ltoir", "object"])
def test_a_file_removed_after_declaration_is_a_declaration_error(tmp_path, form):
    """Files are read at the first build, not at declaration: one gone by then is a
    SpliceDeclarationError naming the file, and no kernel cache entry is written."""
    from splice.system import cache
    if form == "cuda":
        p = tmp_path / "f.cu"
        p.write_text('extern "C" __device__ float f(float x) { return x; }\n')
        ext = splice.extern(path=p, name="f", signature="float32(float32)")(lambda x: None)
    elif form == "ptx":
        p = tmp_path / "f.ptx"
        p.write_text(".version 8.0\n.target sm_90\n.address_size 64\n")
        ext = splice.extern.from_ptx(p, name="f", signature="float32(float32)")
    elif form == "ltoir":
        p = tmp_path / "f.ltoir"
        p.write_bytes(ltoir())
        ext = splice.extern.from_ltoir(p, name="lto_f", signature="float32(float32)")
    else:
        p = rdc_cubin(tmp_path)
        ext = splice.extern.from_object(p, name="obj_f", signature="float32(float32)")
    p.unlink()
    before = set(cache.entries("kernel"))
    with pytest.raises(splice.SpliceDeclarationError, match="cannot read") as info:
        splice.build(_kern(ext), SIG, "sm_90")
    assert str(p) in str(info.value)
    assert set(cache.entries("kernel")) == before


class _Provider:
    """A header library of one header, recording what the source asks of it."""

    def __init__(self, inc, version="1"):
        self.inc, self.version, self.checked = inc, version, []

    def include_dirs(self, texts):
        return [self.inc] if any("prov.h" in t for t in texts) else []

    def options(self, texts):
        return ["-DPROV_SCALE=3.0f"] if any("prov.h" in t for t in texts) else []

    def key(self, texts):
        return self.version

    def check_extern(self, ext, source):
        self.checked.append((ext, source))

    def compile_hint(self, log):
        return "\n    provider: its compile hint"

    def header_hint(self, header):
        return f"<{header}> is the provider's" if header.startswith("prov_") else ""


def test_a_cuda_source_asks_each_header_provider(tmp_path):
    # include dirs, options, key, extern check, failure hints: what NVSHMEM and CCCL answer
    from splice.inputs.fragments import CudaSource
    (tmp_path / "prov.h").write_text("#define PROV(x) ((x) * PROV_SCALE)\n")
    prov = _Provider(tmp_path)
    src = ('#include <prov.h>\nextern "C" __device__ float pf(float x) '
           '{ return PROV(x); }\n')
    frag = CudaSource(text=src, where="x.py:1", providers=(prov,))
    assert f"-I{tmp_path}" in frag._options("sm_90") and "-DPROV_SCALE=3.0f" in \
        frag._options("sm_90")
    assert "0f40400000" in frag.module("sm_90").text     # 3.0f: the provider's option
    key = frag.content_key("sm_90")
    assert CudaSource(text=src, where="x.py:1",
                      providers=(_Provider(tmp_path, "2"),)).content_key("sm_90") != key
    frag.check_extern("ext")
    assert prov.checked == [("ext", src)]
    bad = CudaSource(text='#include <prov_missing.h>\n', where="x.py:1", providers=(prov,))
    with pytest.raises(splice.SpliceCompileError) as info:
        bad.module("sm_90")
    msg = str(info.value)
    assert "hint: <prov_missing.h> is the provider's" in msg and "its compile hint" in msg
