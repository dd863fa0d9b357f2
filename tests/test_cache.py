"""The content-keyed disk cache: atomic entries, corruption detected and rebuilt, read-only
directories tolerated, and keys that follow content, not location."""

import os
import stat

import cuda.tile as ct
import pytest

from support import kernels as K
import splice
from splice import cache

SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 512)


def test_second_build_is_a_cache_hit(fresh_cache):
    b1 = splice.build(K.ptx_kernel, SIG, "sm_90")
    b2 = splice.build(K.ptx_kernel, SIG, "sm_90")
    assert not b1.from_cache and b2.from_cache
    assert b1.cubin == b2.cubin
    assert [s.instances for s in b1.sites] == [s.instances for s in b2.sites]


def test_corrupt_entry_is_detected_and_rebuilt(fresh_cache):
    b1 = splice.build(K.ptx_kernel, SIG, "sm_90")
    [entry] = cache.entries("kernel")
    data = bytearray(entry.read_bytes())
    data[-10] ^= 0xFF  # flip a byte of the cubin
    entry.write_bytes(bytes(data))
    b2 = splice.build(K.ptx_kernel, SIG, "sm_90")
    assert not b2.from_cache and b2.cubin == b1.cubin
    assert splice.build(K.ptx_kernel, SIG, "sm_90").from_cache


@pytest.mark.parametrize("mangle", [lambda d: d[: len(d) // 2], lambda d: b"", lambda d: b"x" + d,
                                    lambda d: d.replace(b'"size"', b'"sise"')])
def test_truncated_or_garbled_entries(fresh_cache, mangle):
    splice.build(K.ptx_kernel, SIG, "sm_90")
    [entry] = cache.entries("kernel")
    entry.write_bytes(mangle(entry.read_bytes()))
    assert not splice.build(K.ptx_kernel, SIG, "sm_90").from_cache


def test_no_temporary_files_left(fresh_cache):
    splice.build(K.ptx_kernel, SIG, "sm_90")
    leftovers = [p for p in fresh_cache.rglob(".tmp-*")]
    assert leftovers == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_cache_dir_compiles_with_one_warning(fresh_cache):
    fresh_cache.mkdir()
    # the toolchain overlay must exist before the directory becomes read-only
    splice.toolchain.overlay()
    fresh_cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.warns(RuntimeWarning, match="cannot write the cache directory"):
            b = splice.build(K.ptx_kernel, SIG, "sm_90")
        assert b.cubin
    finally:
        fresh_cache.chmod(stat.S_IRWXU)


def test_unwritable_cache_dir_compiles_with_one_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(cache, "_warned_readonly", False)
    splice.toolchain.overlay.cache_clear()  # the overlay falls back to the temp directory
    try:
        with pytest.warns(RuntimeWarning, match="cannot write the cache directory"):
            b = splice.build(K.ptx_kernel, SIG, "sm_90")
        assert b.cubin and not b.from_cache
    finally:
        splice.toolchain.overlay.cache_clear()


def test_key_follows_content_not_location(fresh_cache, tmp_path):
    a = tmp_path / "a" / "s.ptx"
    b = tmp_path / "b" / "s.ptx"
    for p in (a, b):
        p.parent.mkdir()
        p.write_text(K.PTX_SCALE)
    ea = splice.extern.from_ptx(a, name="ptx_scale", signature="float32(float32, float32)")
    eb = splice.extern.from_ptx(b, name="ptx_scale", signature="float32(float32, float32)")
    assert ea._splice_extern.fragment.content_key("sm_90a") == \
        eb._splice_extern.fragment.content_key("sm_90a")


def test_kernel_options_are_in_the_key(fresh_cache):
    k2 = K.ptx_kernel.replace_hints(occupancy=2)
    b1 = splice.build(K.ptx_kernel, SIG, "sm_90")
    b2 = splice.build(k2, SIG, "sm_90")
    assert not b2.from_cache
    assert isinstance(k2, splice.kernel)
    assert b1.cubin != b2.cubin


def test_dump_dir_writes_every_stage(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("SPLICE_DUMP_DIR", str(tmp_path / "dump"))
    b = splice.build(K.ptx_kernel, SIG, "sm_90")
    d = tmp_path / "dump" / f"{b.symbol}.{b.arch}"
    names = sorted(p.name[len(b.symbol):] for p in d.iterdir())
    assert {".ptx", ".spliced.ptx", ".cubin", ".tileir"} <= set(names)


def test_inspect_without_a_gpu():
    b = K.saxpy_kernel.inspect(signature=K.signature(K.array(ct.float32), K.array(ct.float32),
                                                     K.array(ct.float32), K.scalar(ct.float32),
                                                     256), arch="sm_90")
    for stage in ("tileir", "ptx", "spliced_ptx", "cubin"):
        assert b[stage]
    assert "saxpy" in b.summary()
    with pytest.raises(KeyError):
        b["nope"]


def test_verify_mode_checks_the_cubin(fresh_cache, monkeypatch):
    from splice import verify
    monkeypatch.setenv("SPLICE_VERIFY", "1")
    called = splice.extern.from_ptx(ptx=K.PTX_SCALE, name="ptx_scale", inline="never",
                                    signature="float32(float32, float32)")

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=called(t, 2.0) + K.ptx_scale(t, t))
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), 1024)
    b = splice.build(kern, sig, "sm_90")
    assert [s.inlined for s in b.sites] == [False, True]
    assert not any("__splice_marker" in n for n in verify.elf_symbols(b.cubin))
    assert splice.build(kern, sig, "sm_90").from_cache  # verified again on a hit
    # a call ptxas lost (or the rewriter miscounted) is caught
    b.entry_calls["ptx_scale"] += 1
    with pytest.raises(splice.SpliceRewriteError, match="SASS CALL"):
        verify.verify_build(b)
    b.entry_calls["ptx_scale"] -= 2
    with pytest.raises(splice.SpliceRewriteError, match="rewriter placed"):
        verify.verify_build(b)


def test_verify_catches_a_cubin_with_markers(fresh_cache):
    from splice import _cutile, toolchain, verify
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), 512)
    traced = _cutile.trace_kernel(K.ptx_kernel, sig, "sm_90")
    cap = toolchain.run_tileiras(traced.bytecode, traced.tileiras_flags, timeout=None,
                                 what="test")
    raw = toolchain.run_ptxas(cap.ptx, toolchain.ptxas_flags(cap), cap.host_object,
                              timeout=None, what="test")
    b = splice.build(K.ptx_kernel, sig, "sm_90")
    b.cubin, b._sass = raw, None
    with pytest.raises(splice.SpliceRewriteError, match="marker"):
        verify.verify_build(b)
