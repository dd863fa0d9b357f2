"""The whole pipeline to a cubin, without a GPU, for sm_80, sm_90 and sm_100."""

import cuda.tile as ct
import pytest

import splice
from support import kernels as K

ARCHS = ["sm_80", "sm_90", "sm_100"]
f32 = ct.float32


def _build(kernel, sig, arch):
    b = splice.compile(kernel, sig, arch)
    assert b.cubin[:4] == b"\x7fELF"
    assert "__splice_marker" not in b.spliced_ptx.split(".nv_intermediate_source_section")[0]
    return b


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tile", [1, 64, 1024, 4096])
def test_saxpy_every_arch_and_tile(arch, tile):
    sig = K.signature(K.array(f32), K.array(f32), K.array(f32), K.scalar(f32), tile)
    b = _build(K.saxpy_kernel, sig, arch)
    [site] = b.sites
    assert site.symbol == "saxpy" and site.shape == (tile,)
    assert site.instances >= 1 and site.inlined
    assert b.spliced_ptx.count("inlined body of saxpy") == site.instances
    assert "call (__splice_r), saxpy," not in b.spliced_ptx
    if b.sass is not None:
        assert b.sass_call_count("saxpy") == 0  # inlined: no CALL left


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tile", [1, 64, 4096])
def test_never_inlined_calls(arch, tile):
    sig = K.signature(K.array(f32), K.array(f32), K.array(f32), K.scalar(f32), tile)
    b = _build(K.saxpy_call_kernel, sig, arch)
    [site] = b.sites
    assert not site.inlined and site.why_not_inlined == 'inline="never"'
    assert b.spliced_ptx.count("call (__splice_r), saxpy,") == site.instances
    if b.sass is not None:
        assert b.sass_call_count("saxpy") == site.instances
        # SPLICE_VERIFY's count: CALL lines name "$<kernel>$saxpy", which is not where the
        # kernel's body ends (it ended at the first such CALL and failed on the H200)
        assert b.sass_call_count("saxpy", kernel_body_only=True) == site.instances


@pytest.mark.parametrize("inline", ["auto", "never"])
@pytest.mark.parametrize("name", sorted(K.TYPE_EXTERNS))
def test_every_element_type(name, inline):
    t = splice.ELEMENT_TYPES[name]
    sig = K.signature(K.array(t.dtype), K.array(t.dtype), 128)
    b = _build(K.TYPE_KERNELS[name, inline], sig, "sm_90")
    assert b.sites[0].instances >= 1
    assert b.sites[0].inlined == (inline == "auto")


@pytest.mark.parametrize("arch", ARCHS)
def test_mixed_argument_packing(arch):
    sig = K.signature(K.array(ct.int8), K.array(ct.float16), K.array(ct.bool_),
                      K.array(ct.int32), K.array(f32), K.array(ct.float64), 256)
    _build(K.mixed_kernel, sig, arch)


def test_same_value_in_both_payload_slots():
    sig = K.signature(K.array(ct.float64), K.array(ct.float64), 256)
    _build(K.same_arg_kernel, sig, "sm_90")


@pytest.mark.parametrize("arch", ARCHS)
def test_broadcast_scalar_and_2d(arch):
    sig = K.signature(K.array(f32, 2), K.array(f32, 2), K.array(f32, 2), K.scalar(f32), 32, 64)
    b = _build(K.broadcast_kernel, sig, arch)
    assert [s.shape for s in b.sites] == [(32, 64), (1, 64)]
    sig = K.signature(K.array(f32), K.scalar(f32), K.scalar(f32))
    b = _build(K.scalar_kernel, sig, arch)
    assert b.sites[0].shape == ()


@pytest.mark.parametrize("arch", ARCHS)
def test_control_flow(arch):
    sig = K.signature(K.array(f32), K.array(f32), 3, 256)
    b = _build(K.control_kernel, sig, arch)
    assert len(b.sites) == 4  # loop body, helper in if, saxpy in else, helper after


@pytest.mark.parametrize("arch", ARCHS)
def test_void_impure_extern(arch):
    sig = K.signature(K.array(ct.uint32), K.scalar(ct.int64), 64)
    b = _build(K.count_kernel, sig, arch)
    assert b.sites[0].instances >= 1 and b.sites[0].inlined
    assert b.spliced_ptx.count("inlined body of count") == b.sites[0].instances


def test_ptx_fragment():
    sig = K.signature(K.array(f32), K.array(f32), 512)
    for arch in ARCHS:
        _build(K.ptx_kernel, sig, arch)


def test_tma_matmul_epilogue_sm90():
    sig = K.signature(K.array(ct.float16, 2), K.array(ct.float16, 2), K.array(ct.float16, 2),
                      128, 128, 64)
    b = _build(K.matmul_gelu_kernel, sig, "sm_90")
    ptx = b.ptx
    assert "cp.async.bulk.tensor" in ptx and "wgmma" in ptx
    assert b.host_object_size > 0  # the --nv-host callbacks that fill the tensor maps
    assert b.sites[0].instances >= 1


def test_matmul_epilogue_keeps_the_accumulator_layout():
    # A pure extern on the wgmma accumulator: its fma marker is elementwise, so the SASS has
    # the plain kernel's shared-memory traffic (stmatrix + TMA store), no layout conversion.
    import re
    from collections import Counter
    sig = K.signature(K.array(ct.float16, 2), K.array(ct.float16, 2), K.array(ct.float16, 2),
                      128, 128, 64)
    b = _build(K.matmul_gelu_kernel, sig, "sm_90")
    plain = _build(K.matmul_plain_kernel, sig, "sm_90")
    if b.sass is None:
        pytest.skip("nvdisasm not installed")

    def ops(sass):
        return Counter(m.group(1) for m in re.finditer(
            r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass))
    got, want = ops(b.sass), ops(plain.sass)
    for op in ("BAR", "STS", "LDS", "STSM", "UTMASTG", "ATOMG"):
        assert got[op] == want[op], (op, got[op], want[op])
    assert [s.marker for s in b.sites] == ["fma"]


@pytest.mark.parametrize("arch", ARCHS)
def test_neighbouring_sites_round_differently_so_llvm_keeps_them_apart(arch):
    # with one rounding LLVM merges the markers of the two arms (next test); with a
    # rounding per site they are different intrinsics: all four sites keep fma markers and
    # the kernel is lowered once
    sig = K.signature(K.array(f32), K.array(f32), 3, 256)
    b = _build(K.control_kernel, sig, arch)
    assert b.lowerings == 1 and [s.marker for s in b.sites] == ["fma"] * 4
    assert all(f"fma.{r}.f64" in b.ptx for r in ("rn", "rz", "rm", "rp"))
    assert all(s.instances >= 1 for s in b.sites)


@pytest.mark.parametrize("arch", ARCHS)
def test_merged_fma_markers_fall_back_to_atomic_markers(arch, one_fma_rounding):
    # LLVM sinks the markers of the two arms of control_kernel's if/else into one fma whose
    # key is a phi of both sites' keys: those two sites are compiled again with atomic
    # markers; the others keep fma markers.
    sig = K.signature(K.array(f32), K.array(f32), 3, 256)
    b = _build(K.control_kernel, sig, arch)
    assert [s.marker for s in b.sites] == ["fma", "atomic", "atomic", "fma"]
    for s in b.sites[1:3]:
        assert "holds the keys of sites 1 and 2" in s.why_atomic
        assert "its fma marker was changed" in str(s)
    assert all(s.instances >= 1 for s in b.sites)


def _key_as_slot0(b):
    """The build's call sequences (its ``"call"`` spans) that pass a site's key as slot 0:
    the rewriter replaces every operand that is the key on every path by the literal 0 (a
    register that is the key only on some paths -- where a masked load left the element
    out -- is a value and stays)."""
    import re
    ptx = b.spliced_ptx
    calls = [s for s in b.spans if s.kind == "call"]
    assert len(calls) == sum(s.instances for s in b.sites) >= 1
    slot0 = [re.findall(r"mov\.b64 \t%__splice_s0, (%?\w+);", s.text(ptx)) for s in calls]
    assert all(len(ops) == 1 for ops in slot0)
    return [(s.site, s.instance) for s, [op] in zip(calls, slot0) if op == "0"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tile", [64, 1024, 4096])
def test_masked_loads_pass_the_loaded_value_not_the_key(arch, tile):
    # Regression: with masked (bounds-checked) loads LLVM folds xor(0, K) to K on the
    # masked-off path; the rewriter took that register for the key and passed the real key
    # (0) as the argument -- half of every tile came out as f(0) on the H200.
    for kern, sig in [(K.asm_tanh_kernel, K.signature(K.array(f32), K.array(f32), tile)),
                      (K.saxpy_kernel, K.signature(K.array(f32), K.array(f32), K.array(f32),
                                                   K.scalar(f32), tile))]:
        b = _build(kern, sig, arch)
        assert [s.marker for s in b.sites] == ["fma"]
        assert _key_as_slot0(b) == []
