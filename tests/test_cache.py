"""The content-keyed disk cache: atomic entries, corruption detected and rebuilt, read-only
directories tolerated, and keys that follow content, not location."""

import os
import stat

import cuda.tile as ct
import pytest

import splice
from splice.system import cache
from support import kernels as K

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
    splice.system.toolchain.overlay()
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
    splice.system.toolchain.overlay.cache_clear()  # the overlay falls back to the temp directory
    try:
        with pytest.warns(RuntimeWarning, match="cannot write the cache directory"):
            b = splice.build(K.ptx_kernel, SIG, "sm_90")
        assert b.cubin and not b.from_cache
    finally:
        splice.system.toolchain.overlay.cache_clear()


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
    from splice.driver import verify
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
    from splice.driver import verify
    from splice.system import toolchain
    from splice.tracing import trace
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), 512)
    traced = trace.trace_kernel(K.ptx_kernel, sig, "sm_90")
    cap = toolchain.run_tileiras(traced.bytecode, traced.tileiras_flags, timeout=None,
                                 what="test")
    raw = toolchain.run_ptxas(cap.ptx, toolchain.ptxas_flags(cap), cap.host_object,
                              timeout=None, what="test")
    b = splice.build(K.ptx_kernel, sig, "sm_90")
    b.cubin, b._sass = raw, None
    with pytest.raises(splice.SpliceRewriteError, match="marker"):
        verify.verify_build(b)


# ---------------------------------------------------------------------------------------------
# Code and tool identity in the key

_BUILD_IN_COPY = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2], sys.argv[2] + "/support"]  # kernels.py
import cuda.tile as ct
import kernels as K, splice
assert splice.__file__.startswith(sys.argv[1]), splice.__file__
b = splice.build(K.saxpy_kernel, K.signature(K.array(ct.float32), K.array(ct.float32),
                 K.array(ct.float32), K.scalar(ct.float32), 256), "sm_90")
print("hit" if b.from_cache else "miss")
"""


def test_an_edit_to_splice_misses_and_unchanged_splice_hits_across_processes(fresh_cache,
                                                                              tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    copy = tmp_path / "pkg"
    shutil.copytree(Path(splice.__file__).parent, copy / "splice",
                    ignore=shutil.ignore_patterns("__pycache__"))
    tests = Path(__file__).resolve().parent

    def build():
        out = subprocess.run([sys.executable, "-c", _BUILD_IN_COPY, str(copy), str(tests)],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip(), {p.name for p in cache.entries()}

    first, entries1 = build()
    second, entries2 = build()
    assert (first, second) == ("miss", "hit") and entries2 == entries1
    with open(copy / "splice" / "forms" / "rewrite.py", "a") as f:
        f.write("# one more line\n")
    third, entries3 = build()
    assert third == "miss"
    kernels = {p.name for p in cache.entries("kernel")}
    assert len(kernels) == 2 and len(entries3) == 2 * len(entries1)  # fragment entries too
    assert build()[0] == "hit"


def test_code_identity_hashes_every_source_file(tmp_path):
    from splice.system import identity
    ident = cache.code_identity()
    assert ident == identity._hash_package(identity._PKG)[0]
    fake_pkg = tmp_path / "splice"
    fake_pkg.mkdir()
    (fake_pkg / "cache.py").write_text("x = 1\n")
    (fake_pkg / "sub").mkdir()
    (fake_pkg / "sub" / "m.py").write_text("y = 2\n")
    a = identity._hash_package(fake_pkg)[0]
    (fake_pkg / "sub" / "m.py").write_text("y = 3\n")
    assert identity._hash_package(fake_pkg)[0] not in (a, ident)


def test_tool_identity_is_in_the_key(fresh_cache, monkeypatch):
    from splice.system import toolchain
    assert splice.build(K.ptx_kernel, SIG, "sm_90").from_cache is False
    assert splice.build(K.ptx_kernel, SIG, "sm_90").from_cache
    real = toolchain._file_identity

    def newer_ptxas(path):
        ident = real(path)
        return ident[:2] + [ident[2] + 1] if path == toolchain.ptxas() else ident
    monkeypatch.setattr(toolchain, "_file_identity", newer_ptxas)
    assert not splice.build(K.ptx_kernel, SIG, "sm_90").from_cache


def test_nvrtc_identity_is_in_a_cuda_fragment_key(monkeypatch, tmp_path):
    from splice.system import toolchain
    frag = K.saxpy._splice_extern.fragment
    before = frag.content_key("sm_90")
    other = tmp_path / "libnvrtc.so.13"
    other.write_bytes(b"another NVRTC")
    monkeypatch.setattr(toolchain, "_library_path", lambda name: other)
    moved = frag.content_key("sm_90")
    assert moved != before
    monkeypatch.setattr(toolchain, "_library_path", lambda name: None)  # fall back: version
    assert toolchain.tool_identity("nvrtc") == [["nvrtc", "version",
                                                 *toolchain.nvrtc_version()]]
    assert frag.content_key("sm_90") not in (before, moved)


_WHICH_LIBRARY = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from splice.system import toolchain
predicted = [toolchain._library_path(n) for n in ("nvrtc", "nvJitLink")]
assert "cuda.bindings.nvrtc" not in sys.modules
toolchain.nvrtc_version()
from cuda.bindings import nvjitlink
nvjitlink.version()
from cuda.pathfinder import load_nvidia_dynamic_lib
loaded = [Path(load_nvidia_dynamic_lib(n).abs_path) for n in ("nvrtc", "nvJitLink")]
print(all(p is not None and p.resolve() == q.resolve() for p, q in zip(predicted, loaded)))
"""


def test_the_libraries_found_are_the_ones_cuda_bindings_loads():
    # found before cuda-bindings loads them (a new process), then compared with what it did
    import subprocess
    import sys
    from pathlib import Path
    out = subprocess.run([sys.executable, "-c", _WHICH_LIBRARY,
                          str(Path(__file__).resolve().parent.parent)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]


_WARM_HIT = """
import subprocess, sys
sys.path[:0] = [sys.argv[1], sys.argv[2], sys.argv[2] + "/support"]  # kernels.py
import cuda.tile as ct
import kernels as K, splice
from splice.tracing import trace
sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.array(ct.float32),
                  K.scalar(ct.float32), 256)
trace.trace_kernel(K.saxpy_kernel, sig, "sm_90")  # cuTile probes tileiras once
if sys.argv[3] == "warm":
    real_popen = subprocess.Popen

    class Refuse(real_popen):  # (cuda.pathfinder runs ldconfig when imported: allowed)
        def __init__(self, args, *a, **k):
            if any(w in str(args) for w in ("tileiras", "ptxas", "--version", "nvdisasm")):
                raise AssertionError(f"a tool ran on a cache hit: {args}")
            super().__init__(args, *a, **k)
    subprocess.Popen = Refuse
b = splice.build(K.saxpy_kernel, sig, "sm_90")
print(b.from_cache, "cuda.bindings.nvrtc" in sys.modules)
"""


def test_a_cache_hit_runs_no_tool_and_does_not_import_nvrtc(fresh_cache):
    import subprocess
    import sys
    from pathlib import Path
    tests = Path(__file__).resolve().parent

    def run(mode):
        out = subprocess.run([sys.executable, "-c", _WARM_HIT, str(tests.parent), str(tests),
                              mode], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()
    assert run("cold") == ["False", "True"]
    assert run("warm") == ["True", "False"]


# ---------------------------------------------------------------------------------------------
# Bounded: least recently used entries evicted after each store


def _store(key, size):
    assert cache.store("kernel", key, {"k": key}, key.encode() * (size // len(key)))
    return cache._entry_path("kernel", key)


def _age(path, seconds_ago):
    t = __import__("time").time() - seconds_ago
    os.utime(path, (t, t))


def test_least_recently_used_entries_are_evicted(fresh_cache, monkeypatch):
    a = _store("a", 1000)
    limit = a.stat().st_size * 7 // 2   # room for three entries
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", str(limit))
    b, c = (_store(k, 1000) for k in ("b", "c"))
    for i, p in enumerate((a, b, c)):
        _age(p, 100 - i)          # a oldest
    assert cache.load("kernel", "a") is not None  # a used now: b is the least recently used
    _store("d", 1000)
    left = {cache.read(p, touch=False)[0]["meta"]["k"] for p in cache.entries()}
    assert left == {"a", "c", "d"}
    assert cache.size()[1] <= limit


def test_the_newest_entry_is_kept_even_when_larger_than_the_limit(fresh_cache, monkeypatch):
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", "100")
    _store("a", 50)
    big = _store("big", 5000)
    assert cache.entries() == [big]
    assert cache.load("kernel", "big")[1] == b"big" * (5000 // 3)


def test_eviction_never_touches_temporary_files_or_the_overlay(fresh_cache, monkeypatch):
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", "0")
    p = _store("a", 100)
    tmp = p.parent / ".tmp-writer-in-progress"
    tmp.write_bytes(b"x" * 10000)
    overlay = fresh_cache / "toolchain" / "overlay-x" / "bin"
    overlay.mkdir(parents=True)
    (overlay / "tileiras").write_bytes(b"x" * 10000)
    b = _store("b", 100)
    assert cache.entries() == [b]       # limit 0: 'a' evicted, the newest kept
    size = b.stat().st_size
    assert cache.prune(0) == (1, size)
    assert tmp.exists() and (overlay / "tileiras").exists()
    assert cache.size() == (0, 0)


def test_a_vanished_entry_is_a_miss(fresh_cache):
    p = _store("a", 100)
    p.unlink()
    assert cache.load("kernel", "a") is None
    assert cache.prune(0) == (0, 0)


def test_a_bad_limit_warns_and_uses_the_default(monkeypatch):
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", "4G")
    cache._warn_bad_limit.cache_clear()
    with pytest.warns(RuntimeWarning, match="not a byte count"):
        assert cache.max_bytes() == cache.DEFAULT_MAX_BYTES
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", "12345")
    assert cache.max_bytes() == 12345


@pytest.mark.gpu
def test_an_edited_cu_is_run_by_a_new_kernel_object_not_by_a_relaunch(torch, tmp_path,
                                                                       fresh_cache):
    # README "Edited sources in a running process": cuTile keeps compiled variants per
    # kernel object and signature; replace_hints() gives a new object with an empty cache
    from support.gpu import launch
    src = tmp_path / "f.cu"
    src.write_text('extern "C" __device__ float f(float x) { return x + 1.0f; }\n')
    f = splice.extern(path=src, name="f", signature="float32(float32)")(lambda x: None)

    @splice.kernel
    def k(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=f(ct.load(x, index=(ct.bid(0),), shape=(TILE,))))
    x = torch.arange(128, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (1,), k, (x, y, 128))
    assert torch.equal(y, x + 1)
    src.write_text('extern "C" __device__ float f(float x) { return x + 2.0f; }\n')
    launch(torch, (1,), k, (x, y, 128))
    assert torch.equal(y, x + 1)          # compiled already: the old code
    launch(torch, (1,), k.replace_hints(), (x, y, 128))
    assert torch.equal(y, x + 2)


# --------------------------------------------------------------------------------------------
# Builds that keep their stages (splice.compile, inspect(), a dump directory) hit like a launch


def _counting_tileiras(monkeypatch) -> list:
    """Each tileiras run appends to the list returned."""
    from splice.system import toolchain
    runs: list = []
    real = toolchain.run_tileiras

    def tileiras(*a, **k):
        runs.append(1)
        return real(*a, **k)

    monkeypatch.setattr(toolchain, "run_tileiras", tileiras)
    return runs


def _fields(b) -> dict:
    import dataclasses
    return {f.name: getattr(b, f.name) for f in dataclasses.fields(b)
            if f.name not in ("from_cache", "seconds", "timings", "_sass")}


def test_a_second_compile_hits_the_cache_with_the_stages_of_the_first(fresh_cache,
                                                                      monkeypatch):
    runs = _counting_tileiras(monkeypatch)
    miss = splice.compile(K.ptx_kernel, SIG, "sm_90")
    hit = splice.compile(K.ptx_kernel, SIG, "sm_90")
    assert len(runs) == 1 and (miss.from_cache, hit.from_cache) == (False, True)
    assert miss.ptx and miss.spliced_ptx and miss.spans and miss.tileir
    assert _fields(hit) == _fields(miss)
    assert [hit[s] for s in hit.STAGES] == [miss[s] for s in miss.STAGES]
    # the spans still point at the lines the call sequences occupy in the hit's PTX
    calls = [s.text(hit.spliced_ptx) for s in hit.spans if s.kind == "call"]
    assert calls and all("call" in c and "ptx_scale" in c for c in calls), calls
    assert splice.build(K.ptx_kernel, SIG, "sm_90").from_cache and len(runs) == 1


def test_inspect_hits_the_entry_compile_cached(fresh_cache, monkeypatch):
    runs = _counting_tileiras(monkeypatch)
    miss = splice.compile(K.ptx_kernel, SIG, "sm_90")
    hit = K.ptx_kernel.inspect(signature=SIG, arch="sm_90")
    assert len(runs) == 1 and hit.from_cache and _fields(hit) == _fields(miss)


def test_a_compile_after_a_launch_build_compiles_once_for_the_stages(fresh_cache, monkeypatch):
    # a launch caches the cubin without the stages' texts: the first compile builds them,
    # the next hits; the launch's entry still hits
    runs = _counting_tileiras(monkeypatch)
    launched = splice.build(K.ptx_kernel, SIG, "sm_90")
    assert launched.ptx is None
    first = splice.compile(K.ptx_kernel, SIG, "sm_90")
    again = splice.compile(K.ptx_kernel, SIG, "sm_90")
    assert len(runs) == 2 and not first.from_cache and again.from_cache
    assert first.cubin == launched.cubin == again.cubin and again.ptx == first.ptx
    assert splice.build(K.ptx_kernel, SIG, "sm_90").from_cache and len(runs) == 2


def test_a_compile_whose_stages_entry_is_gone_or_corrupt_compiles_again(fresh_cache,
                                                                        monkeypatch):
    runs = _counting_tileiras(monkeypatch)
    want = splice.compile(K.ptx_kernel, SIG, "sm_90")
    [entry] = cache.entries("stages")
    data = bytearray(entry.read_bytes())
    data[-3] ^= 0xFF
    entry.write_bytes(bytes(data))
    got = splice.compile(K.ptx_kernel, SIG, "sm_90")
    assert not got.from_cache and len(runs) == 2 and _fields(got) == _fields(want)
    [entry] = cache.entries("stages")
    entry.unlink()
    assert not splice.compile(K.ptx_kernel, SIG, "sm_90").from_cache and len(runs) == 3
    assert splice.compile(K.ptx_kernel, SIG, "sm_90").from_cache and len(runs) == 3


def test_a_dump_dir_build_that_hits_writes_the_stages_it_has(fresh_cache, tmp_path,
                                                             monkeypatch):
    runs = _counting_tileiras(monkeypatch)
    monkeypatch.setenv("SPLICE_DUMP_DIR", str(tmp_path / "miss"))
    miss = splice.build(K.ptx_kernel, SIG, "sm_90")
    monkeypatch.setenv("SPLICE_DUMP_DIR", str(tmp_path / "hit"))
    hit = splice.build(K.ptx_kernel, SIG, "sm_90")
    assert len(runs) == 1 and not miss.from_cache and hit.from_cache
    [missed] = (tmp_path / "miss").iterdir()
    [hitd] = (tmp_path / "hit").iterdir()
    wrote = {p.name for p in hitd.iterdir()}
    sym = miss.symbol
    want = {f"{sym}{x}" for x in (".tilebc", ".ptx", ".tileir", ".spliced.ptx", ".cubin",
                                  ".timings.json")}
    want |= {f"{sym}.sass"} if miss.sass is not None else set()
    assert wrote == want
    assert wrote < {p.name for p in missed.iterdir()}    # the miss also has the fragments'
    for name in wrote - {f"{sym}.timings.json"}:
        assert (hitd / name).read_bytes() == (missed / name).read_bytes(), name
    assert (hitd / f"{sym}.spliced.ptx").read_text() == hit.spliced_ptx
