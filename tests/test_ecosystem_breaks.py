"""Breaking issue 12's signatures and export as a demanding user would (second round)."""

import io

import cuda.tile as ct
import pytest

import splice

from support.eco import eco_kernel, sig as _sig


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


def _log(header: str) -> str:
    return f'x.cu(1): catastrophic error: cannot open source file "{header}"'


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
    from splice.externs import HEADER_PROVIDERS
    from splice.fragments import header_hint
    assert says in header_hint(_log(header), HEADER_PROVIDERS)


def test_user_headers_in_like_named_folders_get_no_nvshmem_hint():
    from splice.externs import HEADER_PROVIDERS
    from splice.fragments import header_hint
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
