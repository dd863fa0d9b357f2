"""Fault injection and concurrency: every fault gives a clear error or recovers, and leaves
nothing half-written in the cache."""

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cuda.tile as ct
import pytest

import splice
from splice.system import cache, tileiras_overlay, toolchain
from support import kernels as K

SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 512)
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _fake_tileiras(tmp_path, script):
    """What runs as the overlay's tileiras: a script (opened as the checked one is)."""
    d = tmp_path / "fake-overlay"
    (d / "bin").mkdir(parents=True, exist_ok=True)
    t = d / "bin" / "tileiras"
    t.write_text("#!/bin/sh\n" + script)
    t.chmod(0o755)
    return lambda: os.open(t, os.O_PATH)


def _no_entries():
    return cache.entries("kernel") == []


def test_tileiras_exits_nonzero(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "_runnable_tileiras", _fake_tileiras(
        tmp_path, "echo 'error: something broke' >&2; exit 3\n"))
    with pytest.raises(splice.SpliceToolchainError, match=r"tileiras failed \(exit 3\)") as e:
        splice.build(K.ptx_kernel, SIG, "sm_90")
    assert "something broke" in e.value.log
    # as cuTile raises when tileiras fails on a @ct.kernel
    assert isinstance(e.value, ct.TileCompilerExecutionError)
    assert not isinstance(e.value, ct.TileCompilerTimeoutError)
    assert _no_entries()


def test_tileiras_times_out(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "_runnable_tileiras", _fake_tileiras(tmp_path, "sleep 30\n"))
    t0 = time.time()
    with pytest.raises(splice.SpliceToolchainError, match="exceeded the compile timeout") as e:
        toolchain.run_tileiras(b"bytecode", ("--gpu-name", "sm_90"), timeout=1, what="k")
    assert isinstance(e.value, ct.TileCompilerTimeoutError)   # as cuTile raises
    assert not isinstance(e.value, ct.TileCompilerExecutionError)
    assert time.time() - t0 < 20


def test_tileiras_that_never_runs_ptxas(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "_runnable_tileiras", _fake_tileiras(tmp_path, "exit 0\n"))
    with pytest.raises(splice.SpliceToolchainError, match="ran it 0 times"):
        splice.build(K.ptx_kernel, SIG, "sm_90")
    assert _no_entries()


def test_ptxas_missing(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "tileiras"
    fake.write_text("")
    monkeypatch.setattr(toolchain, "tileiras", lambda: fake)
    with pytest.raises(splice.SpliceToolchainError, match="ptxas not found beside tileiras"):
        toolchain.ptxas.__wrapped__()


def test_libnvvm_missing(fresh_cache, tmp_path, monkeypatch):
    real = toolchain.tileiras().resolve()
    root = tmp_path / "toolkit"
    (root / "bin").mkdir(parents=True)
    try:
        os.link(real, root / "bin" / "tileiras")
    except OSError:
        pytest.skip("cannot hard-link tileiras here")
    os.symlink(toolchain.ptxas(), root / "bin" / "ptxas")
    monkeypatch.setattr(toolchain, "tileiras", lambda: root / "bin" / "tileiras")
    monkeypatch.setattr(tileiras_overlay, "_overlay_bases", lambda real: [tmp_path / "ov"])
    toolchain.overlay.cache_clear()
    try:
        with pytest.raises(splice.SpliceToolchainError, match="libnvvm is missing"):
            splice.build(K.ptx_kernel, SIG, "sm_90")
    finally:
        toolchain.overlay.cache_clear()
    assert _no_entries()


def test_cuda_home_pointing_at_another_toolkit_is_ignored(fresh_cache, tmp_path, monkeypatch):
    # DESIGN.md F6: tileiras would pick up this toolkit's libnvvm/ptxas and fail
    bogus = tmp_path / "cuda-13.0"
    for sub in ("bin", "nvvm/lib64", "lib64"):
        (bogus / sub).mkdir(parents=True)
    (bogus / "nvvm/lib64/libnvvm.so").write_text("not a library")
    (bogus / "bin/ptxas").write_text("#!/bin/sh\nexit 1\n")
    (bogus / "bin/ptxas").chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(bogus))
    monkeypatch.setenv("CUDA_PATH", str(bogus))
    b = splice.build(K.ptx_kernel, SIG, "sm_90")
    assert b.cubin[:4] == b"\x7fELF"


def test_disk_full_while_writing_an_entry(fresh_cache, monkeypatch):
    from splice.system import safe_fs
    real_fdopen = os.fdopen

    class Full:
        """A file of a full disk: every write fails."""

        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)
    monkeypatch.setattr(safe_fs.os, "fdopen", lambda *a, **k: Full(real_fdopen(*a, **k)))
    monkeypatch.setattr(cache, "_warned_readonly", False)
    with pytest.warns(RuntimeWarning, match="No space left"):
        b = splice.build(K.ptx_kernel, SIG, "sm_90")
    assert b.cubin
    monkeypatch.setattr(safe_fs.os, "fdopen", real_fdopen)
    assert _no_entries()
    assert list(fresh_cache.rglob(".tmp-*")) == []


def test_writer_killed_mid_write_leaves_no_valid_entry(fresh_cache):
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from splice.system import cache
        real_replace = os.replace
        def slow(*a, **k):   # (os.replace with dir_fd keywords: splice.system.safe_fs)
            print("writing", flush=True)
            time.sleep(60)
        cache.os.replace = slow
        cache.store("kernel", "ab" * 32, {{}}, b"x" * 1000000)
    """)
    env = dict(os.environ, SPLICE_CACHE_DIR=str(fresh_cache))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env,
                         text=True)
    assert p.stdout.readline().strip() == "writing"
    p.send_signal(signal.SIGKILL)
    p.wait()
    temps = list(fresh_cache.rglob(".tmp-*"))
    assert temps, "the killed writer left its temporary file"
    assert cache.load("kernel", "ab" * 32) is None
    # the next writer stores the entry and removes the stale temporary file
    for t in temps:
        os.utime(t, (time.time() - 2 * cache.STALE_TEMP_SECONDS,) * 2)
    assert cache.store("kernel", "ab" * 32, {"ok": 1}, b"payload")
    assert cache.load("kernel", "ab" * 32) == ({"ok": 1}, b"payload")
    assert list(fresh_cache.rglob(".tmp-*")) == []


_WORKER = textwrap.dedent("""
    import hashlib, sys, threading
    sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
    import cuda.tile as ct
    import splice
    from support import kernels as K
    sigs = {
        "ptx": (K.ptx_kernel, K.signature(K.array(ct.float32), K.array(ct.float32), 512)),
        "saxpy": (K.saxpy_kernel, K.signature(K.array(ct.float32), K.array(ct.float32),
                                              K.array(ct.float32), K.scalar(ct.float32), 256)),
        "count": (K.count_kernel, K.signature(K.array(ct.uint32), K.scalar(ct.int64), 64)),
    }
    names = sorted(sigs)
    out, errors = [], []
    def work(i):
        try:
            name = names[(i + int(sys.argv[3])) % len(names)]
            kern, sig = sigs[name]
            b = splice.build(kern, sig, "sm_90")
            out.append((name, hashlib.sha256(b.cubin).hexdigest()))
        except Exception as e:
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
    for name, h in out: print(name, h)
    for e in errors: print("ERROR", e)
""")


def test_threads_and_processes_share_one_cache(fresh_cache):
    env = dict(os.environ, SPLICE_CACHE_DIR=str(fresh_cache))
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(ROOT), str(TESTS), str(k)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for k in range(4)]
    hashes = {}
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        lines = out.splitlines()
        assert not [ln for ln in lines if ln.startswith("ERROR")], out
        assert len(lines) == 8
        for ln in lines:
            assert len(ln.split()) == 2, out
            name, h = ln.split()
            hashes.setdefault(name, set()).add(h)
    assert set(hashes) == {"ptx", "saxpy", "count"}
    assert all(len(v) == 1 for v in hashes.values()), hashes
    entries = cache.entries("kernel")
    assert len(entries) == 3
    for e in entries:
        assert cache.read(e) is not None
    assert list(fresh_cache.rglob(".tmp-*")) == []


_STORE_AND_EVICT = textwrap.dedent("""
    import hashlib, json, os, random, sys
    sys.path.insert(0, sys.argv[1])
    from splice.system import cache
    def payload(key):
        n = 500 + int(key[:4], 16) % 3000
        return (hashlib.sha256(key.encode()).digest() * (n // 32 + 1))[:n]
    rng = random.Random(int(sys.argv[2]))
    keys = [f"{i:04x}{j}" for i in range(0, 0xffff, 0x0fff) for j in range(3)]
    torn = []
    for step in range(150):
        key = rng.choice(keys)
        if rng.random() < 0.5:
            assert cache.store("kernel", key, {"key": key}, payload(key))
        hit = cache.load("kernel", key)
        if hit is not None and hit != ({"key": key}, payload(key)):
            torn.append(key)
        for p in cache.entries():     # every entry file a reader can open is whole
            try:
                data = p.read_bytes()
            except FileNotFoundError:
                continue
            parts = data.split(b"\\n", 2)
            head = json.loads(parts[1]) if len(parts) == 3 else {}
            if head.get("sha256") != cache._digest(head.get("meta", {}), parts[-1]):
                torn.append(p.name)
    print("TORN" if torn else "OK", len(torn))
""")


def test_many_processes_store_and_evict_while_readers_load(fresh_cache):
    limit = 20000   # a handful of entries of 0.5 to 3.5 kB
    env = dict(os.environ, SPLICE_CACHE_DIR=str(fresh_cache),
               SPLICE_CACHE_MAX_BYTES=str(limit))
    procs = [subprocess.Popen([sys.executable, "-c", _STORE_AND_EVICT, str(ROOT), str(k)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for k in range(8)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        assert out.split() == ["OK", "0"], out
    n, total = cache.size()
    assert 0 < n and total <= limit
    assert list(fresh_cache.rglob(".tmp-*")) == []
    for e in cache.entries():
        assert cache.read(e) is not None


def test_nvrtc_does_not_corrupt_interpreter_constants():
    # regression: output buffers were `b" " * size`; for an empty log (size 1) that is
    # CPython's shared b" " object, which NVRTC overwrote with NUL for the whole process
    toolchain.nvrtc_compile(b'extern "C" __device__ float f(float x) { return x; }',
                            "f.cu", ["-rdc=true"])
    assert b" " == bytes([32]) and b" " == b"\x20"
    assert "a b".split() == ["a", "b"]
