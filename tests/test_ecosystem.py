"""splice where cuTile users already are (issue 12): signatures without a GPU, ahead-of-time
export, stub-less declarations, logging, naming the SASS CALLs that are not splice's."""

import io
import logging

import cuda.tile as ct
import numpy as np
import pytest
from cuda.tile.compilation import ArrayConstraint, ConstantConstraint, ScalarConstraint

import splice
from splice.__main__ import parse_signature
from splice.driver.verify import elf_symbols
from support import eco
from support.eco import TWICE, eco_kernel, eco_twice
from support.eco import sig as _sig


def _entries(cubin: bytes) -> list[str]:
    return sorted(n for n in elf_symbols(cubin) if n.startswith("eco_kernel"))


# --- kernel_signature -----------------------------------------------------------------------

def test_kernel_signature_reads_the_grammar():
    sig = splice.kernel_signature("array(float32)", "array(float16, ndim=2)", "scalar(int32)",
                                  "1024", 2.5, True, "scalar(bool)")
    a, b, s, c, f, t, flag = sig.parameters
    assert isinstance(a, ArrayConstraint) and a.dtype == ct.float32 and a.ndim == 1
    assert a.stride_constant == (1,) and a.base_addr_divisible_by == 16
    assert isinstance(b, ArrayConstraint) and b.dtype == ct.float16 and b.ndim == 2
    assert b.stride_constant == (None, 1)
    assert isinstance(s, ScalarConstraint) and s.dtype == ct.int32
    assert flag.dtype == ct.bool_
    assert [x.value for x in (c, f, t)] == [1024, 2.5, True]
    assert all(isinstance(x, ConstantConstraint) for x in (c, f, t))


def test_kernel_signature_passes_constraints_through():
    arr = splice.kernel_signature("array(int64)").parameters[0]
    assert splice.kernel_signature(arr, -3).parameters[0] is arr


def test_cli_and_library_read_one_grammar():
    text = "array(float32), array(float16, ndim=2), scalar(int32), 1024"
    assert parse_signature(text) == splice.kernel_signature(
        "array(float32)", "array(float16, ndim=2)", "scalar(int32)", 1024)


@pytest.mark.parametrize("bad, says", [
    ("array(complex)", "unknown dtype 'complex'"),
    ("array(float32, ndim=9)", "ndim=N"),
    ("array(float32, rank=2)", "ndim=N"),
    ("scalar(float32, ndim=2)", "scalar() takes only a dtype"),
    ("tensor(float32)", "expected array"),
    ("array(float32), 4", "names 2 parameters"),
    ("__import__('os')", "expected array"),
    ("'text'", "must be an int, float or bool"),
    ("array(", "not valid syntax"),
    ("x", "not array(...), scalar(...) or a constant"),
])
def test_kernel_signature_refuses_text_outside_the_grammar(bad, says):
    with pytest.raises(splice.SpliceDeclarationError, match="kernel signature") as e:
        splice.kernel_signature(bad)
    assert says in str(e.value)


def test_kernel_signature_compiles_without_a_gpu():
    b = splice.compile(eco_kernel, _sig(), "sm_90")
    assert b.cubin[:4] == b"\x7fELF" and [s.symbol for s in b.sites] == ["eco_twice"]


# --- export_kernel --------------------------------------------------------------------------

def test_export_one_signature_matches_compile(tmp_path):
    out = tmp_path / "k.cubin"
    splice.export_kernel(eco_kernel, [_sig()], out, gpu_code="sm_90")
    blob = out.read_bytes()
    assert blob[:4] == b"\x7fELF"
    assert _entries(blob) == [splice.compile(eco_kernel, _sig(), "sm_90").symbol]


def test_export_several_signatures_is_one_cubin_like_cutile(monkeypatch):
    """cuTile writes one ELF cubin with an entry per signature; so does splice."""
    monkeypatch.setenv("SPLICE_VERIFY", "1")   # each entry's CALLs are counted
    sigs = [_sig(256).with_mangled_symbol("eco_kernel"),
            _sig(128, "float32").with_mangled_symbol("eco_kernel")]
    buf = io.BytesIO()
    splice.export_kernel(eco_kernel, sigs, buf, gpu_code="sm_90")
    blob = buf.getvalue()
    assert _entries(blob) == sorted(s.symbol for s in sigs)
    assert not [n for n in elf_symbols(blob) if "__splice_marker" in n]


@pytest.mark.parametrize("kwargs, says", [
    ({"gpu_code": None}, "gpu_code is required"),
    ({"gpu_code": "sm_90", "output_format": "tileir_bytecode"}, "only 'cubin'"),
    ({"gpu_code": "sm_90", "bytecode_version": "13.1"}, "bytecode_version"),
])
def test_export_refuses_what_it_cannot_write(kwargs, says):
    with pytest.raises(splice.SpliceDeclarationError, match=says) as e:
        splice.export_kernel(eco_kernel, [_sig()], io.BytesIO(), **kwargs)
    assert isinstance(e.value, ValueError)     # a value refused, as cuTile refuses values


@pytest.mark.parametrize("kwargs, says", [
    ({"gpu_code": None, "output_format": "cubin"}, "gpu_code is required"),
    ({"gpu_code": "sm_90", "output_format": "ptx"}, "output_format='ptx'"),
])
def test_export_raises_a_value_error_where_cutiles_export_does(kwargs, says):
    # cuTile's export_kernel refuses no gpu_code and an unknown format with a ValueError
    # (NVIDIA's test_export_cubin_requires_gpu_code, run through splice's drop-in plugin,
    # expects it): splice's refusal is one too, so the same `except ValueError` catches both
    @ct.kernel
    def plain(x):
        pass
    with pytest.raises(ValueError) as theirs:
        ct.compilation.export_kernel(plain, [_sig()], io.BytesIO(), **kwargs)
    with pytest.raises(ValueError, match=says) as ours:
        splice.export_kernel(eco_kernel, [_sig()], io.BytesIO(), **kwargs)
    assert not isinstance(theirs.value, splice.SpliceError)
    assert isinstance(ours.value, splice.SpliceDeclarationError)
    if "gpu_code" in says:
        assert "gpu_code is required" in str(theirs.value)


def test_export_refuses_no_signatures_and_plain_kernels():
    with pytest.raises(splice.SpliceDeclarationError, match="non-empty list"):
        splice.export_kernel(eco_kernel, [], io.BytesIO(), gpu_code="sm_90")

    @ct.kernel
    def plain(x):
        pass
    with pytest.raises(splice.SpliceDeclarationError, match="not a @splice.kernel"):
        splice.export_kernel(plain, [_sig()], io.BytesIO(), gpu_code="sm_90")


def test_export_refuses_two_signatures_with_one_symbol():
    with pytest.raises(splice.SpliceDeclarationError, match="two signatures give the entry"):
        splice.export_kernel(eco_kernel, [_sig(), _sig()], io.BytesIO(), gpu_code="sm_90")


def test_cutiles_export_kernel_names_splices():
    from cuda.tile.compilation import export_kernel
    with pytest.raises(splice.SpliceCallError, match="splice.export_kernel") as e:
        export_kernel(eco_kernel, [_sig()], io.BytesIO(), gpu_code="sm_90",
                      output_format="cubin")
    assert "splice.jax.cutile_call" in str(e.value) and "eco_twice" in str(e.value)


# --- stub-less extern -----------------------------------------------------------------------

def test_stubless_extern_is_the_extern():
    ext = eco_twice._splice_extern
    assert ext.symbol == "eco_twice" and str(ext.signature) == "float32(float32)"
    text = open(eco.__file__).read()
    line = text.split("\neco_twice = splice.extern(")[0].count("\n") + 2
    assert ext.where.endswith(f"eco.py:{line}")   # where it was declared
    with pytest.raises(splice.SpliceError, match="device code"):
        eco_twice(np.float32(1))


def test_decorator_form_with_name_and_signature_still_declares_from_the_stub():
    decl = splice.extern(source=TWICE, name="eco_twice", signature="float32(float32)")

    def stub(x):
        pass
    fn = decl(stub)
    assert fn._splice_extern.where.endswith(f":{stub.__code__.co_firstlineno}")
    with pytest.raises(splice.SpliceDeclarationError, match="the stub takes 2"):
        decl(lambda a, b: None)


def test_stubless_cxx_extern_compiles():
    sq = splice.extern(source="namespace eco { __device__ float sq(float x) { return x*x; } }",
                       name="eco::sq", signature="float32(float32)")

    @splice.kernel
    def k(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=sq(t))
    b = splice.compile(k, _sig(), "sm_90")
    assert b.sites[0].extern == "eco::sq" and b.sites[0].instances >= 1


def test_extern_without_name_or_signature_is_still_a_decorator():
    decl = splice.extern(source=TWICE)
    assert not hasattr(decl, "_splice_extern")

    def eco_twice(x: ct.float32) -> ct.float32: ...
    assert decl(eco_twice)._splice_extern.symbol == "eco_twice"


# --- logging --------------------------------------------------------------------------------

def test_logging_says_compiled_then_cached_and_never_warns(caplog, tmp_path, monkeypatch):
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    caplog.set_level(logging.DEBUG, logger="splice")
    splice.export_kernel(eco_kernel, [_sig(512)], io.BytesIO(), gpu_code="sm_90")
    splice.export_kernel(eco_kernel, [_sig(512)], io.BytesIO(), gpu_code="sm_90")
    text = [r.getMessage() for r in caplog.records if r.name == "splice"]
    compiled = [t for t in text if "compiled in" in t]
    cached = [t for t in text if "cubin from the cache in" in t]
    assert len(compiled) == 1 and len(cached) == 1, text
    assert "eco_kernel" in compiled[0] and "1 call site(s)" in compiled[0]
    assert any("site 0: eco_twice" in t and "inlined" in t for t in text)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# --- summary names every CALL ---------------------------------------------------------------

def test_summary_names_the_calls_that_are_not_splices():
    """An IEEE float division leaves CALLs of CUDA's slow path; summary() must not let them
    pass for extern calls."""
    @splice.kernel
    def divide(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=eco_twice(t) / (t + 1.0))
    b = splice.compile(divide, _sig(), "sm_90")
    if b.sass is None:
        pytest.skip("needs nvdisasm")
    targets = b.sass_call_targets()
    helper = [n for n in targets if "div_rn" in n]
    assert helper and "eco_twice" not in targets
    text = b.summary()
    assert f"SASS CALLs of externs: 0 (eco_twice: 0); {sum(targets.values())} other SASS " \
        f"CALL(s), below" in text
    assert "not externs (CUDA's internal helpers" in text
    assert f"{helper[0]}: {targets[helper[0]]} (IEEE division slow path)" in text


# --- GPU: the exported cubin loads -----------------------------------------------------------

@pytest.mark.gpu
def test_exported_cubin_loads_with_every_entry():
    from cuda.bindings import driver as drv

    def ok(result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        return rest[0] if len(rest) == 1 else rest
    ok(drv.cuInit(0))
    dev = ok(drv.cuDeviceGet(0))
    major = ok(drv.cuDeviceGetAttribute(
        drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = ok(drv.cuDeviceGetAttribute(
        drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    ctx = ok(drv.cuDevicePrimaryCtxRetain(dev))
    ok(drv.cuCtxSetCurrent(ctx))
    sigs = [_sig(256).with_mangled_symbol("eco_kernel"),
            _sig(128).with_mangled_symbol("eco_kernel")]
    buf = io.BytesIO()
    splice.export_kernel(eco_kernel, sigs, buf, gpu_code=f"sm_{major}{minor}")
    module = ok(drv.cuModuleLoadData(buf.getvalue()))
    try:
        for s in sigs:
            ok(drv.cuModuleGetFunction(module, s.symbol.encode()))
    finally:
        ok(drv.cuModuleUnload(module))
        ok(drv.cuDevicePrimaryCtxRelease(dev))


# --- header help ----------------------------------------------------------------------------

def _log(header):
    return f'x.cu(1): catastrophic error: cannot open source file "{header}"\n'


@pytest.fixture(params=[False, True], ids=["no-cccl", "cccl"])
def include_dir(request, tmp_path, monkeypatch):
    from splice.inputs import cccl
    monkeypatch.setattr(cccl, "include_dirs",
                        lambda: [str(tmp_path / "cccl")] if request.param else [])
    return request.param


@pytest.mark.parametrize("header, says", [
    ("cstdint", "include <cuda/std/cstdint> (libcu++, namespace cuda::std) instead of "
                "<cstdint>"),
    ("stdint.h", "include <cuda/std/cstdint>"),
    ("type_traits", "include <cuda/std/type_traits>"),
])
def test_standard_headers_point_at_libcuxx(include_dir, header, says):
    from splice.declare.externs import HEADER_PROVIDERS
    from splice.inputs.cuda_compile import header_hint
    hint = header_hint(_log(header), HEADER_PROVIDERS)
    assert says in hint
    assert ("cuda-toolkit[cccl]" in hint) != include_dir


@pytest.mark.parametrize("header", ["nv/target", "cub/block/block_reduce.cuh",
                                    "cuda/std/cstdint", "thrust/complex.h"])
def test_cccl_headers_say_how_to_install_cccl(include_dir, header):
    from splice.declare.externs import HEADER_PROVIDERS
    from splice.inputs.cuda_compile import header_hint
    hint = header_hint(_log(header), HEADER_PROVIDERS)
    if include_dir:
        assert "is not in CCCL at" in hint
    else:
        assert f"<{header}> is part of CCCL" in hint and \
            "pip install 'cuda-toolkit[cccl]'" in hint


def test_other_missing_headers_get_no_cccl_hint():
    from splice.declare.externs import HEADER_PROVIDERS
    from splice.inputs.cuda_compile import header_hint
    assert header_hint(_log("my_header.h"), HEADER_PROVIDERS) == ""
    assert header_hint("x.cu(3): error: identifier \"y\" is undefined",
                       HEADER_PROVIDERS) == ""
    assert "no device version" in header_hint(_log("vector"), HEADER_PROVIDERS)


def test_cstdint_in_a_fragment_gets_the_hint():
    from splice.inputs import cccl
    src = '#include <cstdint>\nextern "C" __device__ float eco_h(float x) { return x; }'
    h = splice.extern(source=src, name="eco_h", signature="float32(float32)")

    @splice.kernel
    def k(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=h(ct.load(x, index=(ct.bid(0),), shape=(TILE,))))
    with pytest.raises(splice.SpliceCompileError, match=r"include <cuda/std/cstdint>") as e:
        splice.compile(k, _sig(), "sm_90")
    assert ("cuda-toolkit[cccl]" in str(e.value)) != bool(cccl.include_dirs())


def test_cooperative_groups_compile_with_cccl_or_say_how():
    from splice.inputs import cccl
    src = ('#include <cooperative_groups.h>\n'
           'extern "C" __device__ float eco_cg(float x) { return x; }')
    cg = splice.extern(source=src, name="eco_cg", signature="float32(float32)")

    @splice.kernel
    def k(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=cg(ct.load(x, index=(ct.bid(0),), shape=(TILE,))))
    if cccl.include_dirs():
        assert splice.compile(k, _sig(), "sm_90").sites[0].instances >= 1
    else:
        with pytest.raises(splice.SpliceCompileError, match=r"<nv/target> is part of CCCL"):
            splice.compile(k, _sig(), "sm_90")


def test_jax_contract_names_what_is_missing():
    """splice.jax's use of cuda.tile.jax goes through _cutile.jax_internals: it either finds
    every name or says what is missing (no JAX in CI)."""
    import importlib.util

    from splice.system import _cutile
    if importlib.util.find_spec("jax") is None:
        with pytest.raises(splice.SpliceToolchainError, match="splice.jax needs JAX"):
            _cutile.jax_internals()
    else:
        j = _cutile.jax_internals()
        assert callable(j.array_constraint) and j.ffi_target == "cutile_launch"


# --------------------------------------------------------------------------------------------
# Edges: array strides and constants in signatures, export targets, stub-less externs,
# header hints, a source declared twice, symbols tileiras cannot emit

@pytest.mark.parametrize("dtype, elems", [("float32", 4), ("float16", 8), ("bfloat16", 8),
                                          ("float64", 2), ("int8", 16), ("bool", 16)])
def test_array_strides_assume_16_bytes_like_a_launch(dtype, elems):
    # cuTile's launch (and its JAX path) assume outer strides divisible by 16 *bytes*; the
    # grammar claimed 16 *elements* (64 bytes for float32), which a launch never claims: a
    # (M, 20) float32 array satisfies the launch's assumption but not the cubin's.
    a = splice.kernel_signature(f"array({dtype}, ndim=3)").parameters[0]
    assert a.stride_divisible_by == (elems, elems, 1)


def test_array_ndim_given_twice_is_refused():
    with pytest.raises(splice.SpliceDeclarationError, match="ndim.*twice"):
        splice.kernel_signature("array(float32, ndim=2, ndim=3)")


@pytest.mark.parametrize("const", ["99999999999999999999999", "-99999999999999999999999",
                                   2 ** 64, -(2 ** 63) - 1])
def test_integer_constants_outside_64_bits_are_refused(const):
    with pytest.raises(splice.SpliceDeclarationError, match="64-bit"):
        splice.kernel_signature(const)


def test_64_bit_constants_are_kept():
    sig = splice.kernel_signature(2 ** 64 - 1, -(2 ** 63), "-9223372036854775808")
    assert [p.value for p in sig.parameters] == [2 ** 64 - 1, -(2 ** 63), -(2 ** 63)]


def test_signature_with_too_few_or_many_parameters_names_the_kernel():
    for params in (("array(float32)", 256), ("array(float32)",) * 2 + (256, 1)):
        with pytest.raises(splice.SpliceDeclarationError, match=r"eco_kernel.*3 parameters"):
            splice.compile(eco_kernel, splice.kernel_signature(*params), "sm_90")


def test_export_to_a_path_it_cannot_write_is_a_splice_error(tmp_path):
    for where in (tmp_path / "no" / "such" / "dir" / "k.cubin", tmp_path):
        with pytest.raises(splice.SpliceError, match=r"eco_kernel.*cannot write"):
            splice.export_kernel(eco_kernel, [_sig()], where, gpu_code="sm_90")


def test_export_to_a_text_file_is_a_splice_error():
    with pytest.raises(splice.SpliceError, match=r"eco_kernel.*binary"):
        splice.export_kernel(eco_kernel, [_sig()], io.StringIO(), gpu_code="sm_90")


def test_cutiles_own_cubin_export_names_splice_export():
    from cuda.tile.compilation import export_kernel
    with pytest.raises(splice.SpliceError, match="splice.export_kernel"):
        export_kernel(eco_kernel, [_sig()], io.BytesIO(), gpu_code="sm_90",
                      output_format="cubin")
    assert ct  # cuTile imported before splice patched it


@pytest.mark.parametrize("kwargs, missing", [({"signature": "float32(float32)"}, "name="),
                                             ({"name": "g"}, "signature=")])
def test_half_stubless_extern_called_in_a_kernel_says_what_is_missing(kwargs, missing):
    # With only one of name=/signature= the result is the decorator: called on a tile inside
    # a kernel it failed in cuTile with "Raised exception must be wrapped in
    # static_exception()" (issue 12's symptom).
    g = splice.extern(source='extern "C" __device__ float g(float x) { return x; }',
                      **kwargs)

    @splice.kernel
    def half(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=g(t))

    with pytest.raises(splice.SpliceCallError) as e:
        splice.compile(half, _sig(), "sm_90")
    text = str(e.value)
    assert missing in text and "decorator" in text and __file__ in text
    assert "static_exception" not in text


def test_half_stubless_extern_still_decorates_a_stub():
    g = splice.extern(source='extern "C" __device__ float g(float x) { return x; }',
                      name="g")

    @g
    def stub(x: ct.float32) -> ct.float32: ...
    assert stub._splice_extern.symbol == "g"


@pytest.mark.parametrize("header, says", [
    # the two headers most often carried over from nvcc code had no hint at all
    ("math.h", "need no include"), ("stdio.h", "printf"), ("cstdio", "printf"),
    # an NVSHMEM header other than nvshmem.h/nvshmemx.h (or those through a macro): NVSHMEM's
    # include path is added only when the source includes one of those two
    ("device/nvshmem_defines.h", "#include <nvshmem.h>"),
    ("nvshmem_host.h", "#include <nvshmem.h>"),
    ("nvshmem.h", "#include <nvshmem.h>"),
])
def test_common_missing_headers_get_a_hint(header, says):
    from splice.declare.externs import HEADER_PROVIDERS
    from splice.inputs.cuda_compile import header_hint
    assert says in header_hint(_log(header), HEADER_PROVIDERS)


def test_user_headers_in_like_named_folders_get_no_nvshmem_hint():
    from splice.declare.externs import HEADER_PROVIDERS
    from splice.inputs.cuda_compile import header_hint
    assert "NVSHMEM" not in header_hint(_log("host/config.h"), HEADER_PROVIDERS)
    assert "NVSHMEM" not in header_hint(_log("device/my_nvshmem_wrappers.hpp"),
                                        HEADER_PROVIDERS)


def test_one_source_declared_twice_is_not_called_different_code():
    src = 'extern "C" __device__ float eco_dup(float x) { return x + 1.0f; }'
    a = splice.extern(source=src, name="eco_dup", signature="float32(float32)")
    b = splice.extern(source=src, name="eco_dup", signature="float32(float32)")

    @splice.kernel
    def dup(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=b(a(t)))

    with pytest.raises(splice.SpliceLinkError, match="declared twice") as e:
        splice.compile(dup, _sig(), "sm_90")
    assert "different code" not in str(e.value) and "declare it once" in str(e.value)


@pytest.mark.parametrize("symbol", ["bad name", "", "1abc", "k-1"])
def test_a_symbol_tileiras_cannot_emit_is_a_declaration_error(symbol):
    # was SpliceToolchainError "tileiras failed (exit 5)" with the tool's log
    with pytest.raises(splice.SpliceDeclarationError, match="symbol"):
        splice.kernel_signature("array(float32)", "array(float32)", 64, symbol=symbol)
    sig = splice.kernel_signature("array(float32)", "array(float32)", 64).with_symbol(symbol)
    with pytest.raises(splice.SpliceDeclarationError, match=r"eco_kernel.*symbol"):
        splice.export_kernel(eco_kernel, [sig], io.BytesIO(), gpu_code="sm_90")
