"""Packs (splice.system.packs, ``python -m splice cache export|import``): a cache's entries
in one file, imported into another cache through the cache's own store (the importer's
files, 0600/0700), whole or not at all. An imported pack serves a new process with
``SPLICE_COMPILE=never`` and no NVRTC, tileiras or ptxas run; a pack of another toolchain,
a tampered entry and unsafe members are refused, nothing imported (issue 47)."""

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

import splice
from splice.errors import SplicePackError
from splice.inputs import cccl
from splice.system import cache, packs, toolchain
from support.env import python_env

TESTS = Path(__file__).resolve().parent


def _fill(n: int = 3, kind: str = "kernel") -> list[Path]:
    """``n`` entries stored in the current cache (no compile)."""
    for i in range(n):
        cache.store(kind, f"key {i}", {"symbol": f"k{i}", "arch": "sm_90"}, b"cubin %d" % i)
    return cache.entries(kind)


def _cache_files(root: Path) -> list[Path]:
    """Every file of a cache but the tileiras overlay's and the lock/size bookkeeping."""
    if not root.exists():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")
                  and not any(part.startswith("toolchain") for part in p.parts))


def _members(pack: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(pack, "r:gz") as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else b"") for m in tar]


def _repack(pack: Path, members, out: Path) -> Path:
    """A pack file of ``members`` ((TarInfo, bytes) in order), as a tampering hand makes."""
    with tarfile.open(out, "w:gz") as tar:
        for info, data in members:
            info = tarfile.TarInfo(info.name) if isinstance(info, str) else info
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return out


def _manifest_of(members) -> dict:
    return json.loads(members[0][1])


def _with_manifest(members, manifest: dict):
    info = tarfile.TarInfo("manifest.json")
    return [(info, json.dumps(manifest).encode())] + members[1:]


@pytest.fixture
def two_caches(tmp_path, monkeypatch):
    """(the cache that exports, the empty one that imports); the first is current."""
    a, b = tmp_path / "made", tmp_path / "imported"
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(a))
    return a, b


def test_a_pack_round_trips_every_entry_with_its_manifest(two_caches, tmp_path, monkeypatch):
    a, b = two_caches
    made = _fill(3) + _fill(2, "fragment")
    pack = packs.export_pack(tmp_path / "p.splice")
    assert (pack.entries, pack.architectures) == (5, ("sm_90",))
    assert stat.S_IMODE(os.stat(pack.path).st_mode) == 0o600
    members = _members(pack.path)
    manifest = _manifest_of(members)
    assert members[0][0].name == "manifest.json" and manifest["format"] == packs.FORMAT
    assert manifest["toolchain"] == packs.toolchain_record()
    assert sorted(e["name"] for e in manifest["entries"]) == sorted(p.stem for p in made)
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(b))
    got = packs.import_pack(pack.path)
    assert got.entries == 5 and got.bytes == pack.bytes
    for kind, i in [("kernel", 0), ("kernel", 2), ("fragment", 1)]:
        assert cache.load(kind, f"key {i}")[1] == b"cubin %d" % i
    assert packs.import_pack(pack.path).entries == 0          # had them all already


def test_imported_entries_are_the_importers_own_files(two_caches, tmp_path, monkeypatch):
    """Owned by the importer, files 0600 and directories 0700 whatever the pack's members
    said (its members are 0600 with no owner; an altered one says 0777, uid 4242)."""
    a, b = two_caches
    _fill(2)
    pack = packs.export_pack(tmp_path / "p.splice").path
    members = _members(pack)
    for info, _ in members:
        info.mode, info.uid, info.gid = 0o4777, 4242, 4242
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(b))
    packs.import_pack(_repack(pack, members, tmp_path / "modes.splice"))
    files = _cache_files(b)
    assert len(files) == 2
    for p in files:
        st = p.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o600), p
    for d in {p.parent for p in files} | {p.parent.parent for p in files} | {b}:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


def _other_tileiras(monkeypatch):
    """tool_identity as on a machine whose tileiras was installed a day later."""
    real = toolchain.tool_identity

    def other(*names):
        out = real(*names)
        return [[x[0], x[1], x[2], x[3] + 86400 * 10**9, *x[4:]] if x[0] == "tileiras" else x
                for x in out]
    monkeypatch.setattr(toolchain, "tool_identity", other)


def test_a_pack_of_another_toolchain_is_refused_naming_both(two_caches, tmp_path,
                                                            monkeypatch):
    a, b = two_caches
    _fill(2)
    with monkeypatch.context() as m:
        _other_tileiras(m)
        pack = packs.export_pack(tmp_path / "other.splice").path
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(b))
    with pytest.raises(SplicePackError) as e:
        packs.import_pack(pack)
    msg = e.value.message
    here = toolchain.tool_identity("tileiras")[0]
    assert "another toolchain" in msg and "tileiras: the pack's" in msg
    assert msg.count(here[1]) == 2                         # both tileiras named
    assert "ptxas" not in msg.split("tileiras: ")[1].split("\n")[0]
    assert _cache_files(b) == []


def test_a_pack_of_another_splice_is_refused(two_caches, tmp_path, monkeypatch):
    a, b = two_caches
    _fill(1)
    pack = packs.export_pack(tmp_path / "p.splice").path
    members = _members(pack)
    manifest = _manifest_of(members)
    manifest["toolchain"]["splice"] = "0" * 64
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(b))
    with pytest.raises(SplicePackError, match="splice code: the pack's 0000000000000000"):
        packs.import_pack(_repack(pack, _with_manifest(members, manifest),
                                  tmp_path / "x.splice"))
    assert _cache_files(b) == []


def _tamper(members, how: str):
    """The members of a pack altered as ``how`` says (the manifest left as exported
    unless said)."""
    manifest = _manifest_of(members)
    entry = members[1]
    if how == "a flipped byte":
        data = bytearray(entry[1])
        data[-1] ^= 1
        return [members[0], (entry[0], bytes(data)), *members[2:]]
    if how == "a flipped byte, the manifest's checksum updated":   # the entry's own fails
        import hashlib
        data = bytearray(entry[1])
        data[-1] ^= 1
        manifest["entries"][0]["sha256"] = hashlib.sha256(data).hexdigest()
        return _with_manifest([members[0], (entry[0], bytes(data)), *members[2:]], manifest)
    if how == "an entry missing":
        return members[:-1]
    if how == "an entry twice":
        return members + [members[-1]]
    if how == "an unlisted entry":
        name = "entries/kernel/" + "ab" * 32 + ".bin"
        return members + [(tarfile.TarInfo(name), entry[1])]
    if how == "the manifest not first":
        return members[1:] + members[:1]
    if how == "a manifest of another format":
        manifest["format"] = "splice-pack-0"
        return _with_manifest(members, manifest)
    if how == "a kind splice does not store":
        manifest["entries"][0]["kind"] = "toolchain"
        info = tarfile.TarInfo(f"entries/toolchain/{manifest['entries'][0]['name']}.bin")
        return _with_manifest([members[0], (info, entry[1]), *members[2:]], manifest)
    raise AssertionError(how)


def _link(kind, name="entries/kernel/" + "cd" * 32 + ".bin", target="/etc/passwd"):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize("how", [
    "a flipped byte", "a flipped byte, the manifest's checksum updated", "an entry missing",
    "an entry twice", "an unlisted entry", "the manifest not first",
    "a manifest of another format", "a kind splice does not store"])
def test_a_tampered_pack_is_refused_and_nothing_imported(two_caches, tmp_path, monkeypatch,
                                                         how):
    _refused_whole(two_caches, tmp_path, monkeypatch, lambda members: _tamper(members, how))


def _refused_whole(two_caches, tmp_path, monkeypatch, alter) -> None:
    """A pack of three entries, its members altered by ``alter``, is refused and leaves
    the importing cache empty (the entries stored before the bad member removed)."""
    a, b = two_caches
    _fill(3)
    pack = packs.export_pack(tmp_path / "p.splice").path
    bad = _repack(pack, alter(_members(pack)), tmp_path / "bad.splice")
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(b))
    with pytest.raises(SplicePackError, match="refuses the pack"):
        packs.import_pack(bad)
    assert _cache_files(b) == []


@pytest.mark.parametrize("member", [
    _link(tarfile.SYMTYPE), _link(tarfile.LNKTYPE), _link(tarfile.DIRTYPE),
    _link(tarfile.FIFOTYPE), _link(tarfile.CHRTYPE),
    tarfile.TarInfo("../../escaped.bin"), tarfile.TarInfo("/tmp/absolute.bin"),
    tarfile.TarInfo("entries/kernel/../../../x.bin"),
    tarfile.TarInfo("entries/kernel/" + "AB" * 32 + ".bin")],
    ids=["symlink", "hard link", "directory", "fifo", "device", "dotdot", "absolute",
         "dotdot under entries", "upper-case name"])
def test_a_member_that_is_not_an_entry_file_is_refused(two_caches, tmp_path, monkeypatch,
                                                       member):
    _refused_whole(two_caches, tmp_path, monkeypatch,
                   lambda members: members[:2] + [(member, b"x" * 10)] + members[2:])
    assert not (tmp_path / "escaped.bin").exists() and not Path("/tmp/absolute.bin").exists()


def test_a_pack_larger_than_the_cache_or_with_too_many_members_is_refused(
        two_caches, tmp_path, monkeypatch):
    a, b = two_caches
    _fill(4)
    pack = packs.export_pack(tmp_path / "p.splice")
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(b))
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", str(pack.bytes - 1))
    with pytest.raises(SplicePackError, match="more than the cache's bound"):
        packs.import_pack(pack.path)
    monkeypatch.delenv("SPLICE_CACHE_MAX_BYTES")
    monkeypatch.setattr(packs, "MAX_MEMBERS", 4)
    with pytest.raises(SplicePackError, match="does not list its entries"):
        packs.import_pack(pack.path)
    assert _cache_files(b) == []


class _Zeros(io.RawIOBase):
    """``n`` zero bytes, read in chunks (a member written without holding it in memory)."""

    def __init__(self, n: int):
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


def test_a_member_larger_than_its_manifest_says_is_refused_before_it_is_read(
        two_caches, tmp_path, monkeypatch):
    """A zip bomb: a member named as a listed entry but of 256 MiB of zeros (some 250 KB
    compressed) is refused by its header's size, not read into memory first."""
    import tracemalloc
    a, b = two_caches
    _fill(2)
    members = _members(packs.export_pack(tmp_path / "p.splice").path)
    bomb = tmp_path / "bomb.splice"
    with tarfile.open(bomb, "w:gz", compresslevel=1) as tar:
        for info, data in members:
            if info.name == members[1][0].name:
                info.size = 256 << 20
                tar.addfile(info, io.BufferedReader(_Zeros(info.size)))
            else:
                tar.addfile(info, io.BytesIO(data))
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(b))
    tracemalloc.start()
    try:
        with pytest.raises(SplicePackError, match="refuses the pack"):
            packs.import_pack(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20
    assert _cache_files(b) == []


@pytest.mark.parametrize("cut", [2, 3])
def test_a_pack_cut_inside_a_member_is_refused_whole(two_caches, tmp_path, monkeypatch, cut):
    a, b = two_caches
    for i in range(3):
        cache.store("kernel", f"key {i}", {"arch": "sm_90"}, os.urandom(100_000))
    data = packs.export_pack(tmp_path / "p.splice").path.read_bytes()
    (tmp_path / "cut.splice").write_bytes(data[:len(data) // cut])
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(b))
    with pytest.raises(SplicePackError, match="cannot be read as a pack"):
        packs.import_pack(tmp_path / "cut.splice")
    assert _cache_files(b) == []


@pytest.mark.parametrize("content", [b"", b"not a pack at all", b"\x1f\x8b\x08garbage",
                                     "a tar without a manifest"])
def test_a_file_that_is_not_a_pack_is_refused(two_caches, tmp_path, content):
    path = tmp_path / "x.splice"
    if isinstance(content, str):
        _repack(path, [(tarfile.TarInfo("readme.txt"), b"hello")], path)
    else:
        path.write_bytes(content)
    with pytest.raises(SplicePackError, match="refuses the pack"):
        packs.import_pack(path)


@pytest.mark.parametrize("what", ["missing", "directory", "unreadable"])
def test_a_pack_file_that_cannot_be_opened_is_a_pack_error_naming_it(two_caches, tmp_path,
                                                                    what):
    path = tmp_path / "pack.splice"
    if what == "directory":
        path.mkdir()
    elif what == "unreadable":
        path.write_bytes(b"x")
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("root reads a file of mode 0")
    with pytest.raises(SplicePackError, match=f"{path}"):
        packs.import_pack(path)


def test_a_fifo_is_refused_not_waited_for(two_caches, tmp_path):
    """Refused by its type before it is opened (as a declaration's path= is): opening a
    FIFO to read, even without blocking, releases a writer waiting on it."""
    fifo = tmp_path / "pack.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)
    writer.start()
    time.sleep(0.2)                    # the writer is blocked in its open by now
    with pytest.raises(SplicePackError, match="not a regular file"):
        packs.import_pack(fifo)
    writer.join(0.5)
    assert writer.is_alive()           # still waiting for a reader: splice opened nothing
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))   # release it
    writer.join(5)


def test_export_used_within_takes_the_entries_of_the_last_runs(two_caches, tmp_path):
    old = _fill(3)
    for p in old[:2]:                                      # used two hours ago
        t = time.time() - 7200
        os.utime(p, (t, t))
    pack = packs.export_pack(tmp_path / "recent.splice", used_within=3600)
    assert [e["name"] for e in _manifest_of(_members(pack.path))["entries"]] == [old[2].stem]
    assert packs.export_pack(tmp_path / "all.splice").entries == 3


def test_export_leaves_out_entries_another_splice_wrote(two_caches, tmp_path, monkeypatch):
    _fill(2)
    with monkeypatch.context() as m:
        m.setattr(cache, "code_identity", lambda: "f" * 64)
        cache.store("kernel", "another splice's", {"arch": "sm_80"}, b"old")
    assert len(cache.entries("kernel")) == 3
    pack = packs.export_pack(tmp_path / "p.splice")
    assert pack.entries == 2 and pack.architectures == ("sm_90",)


def test_export_to_a_directory_it_cannot_write_says_so(two_caches, tmp_path):
    _fill(1)
    with pytest.raises(SplicePackError, match="cannot write the pack"):
        packs.export_pack(tmp_path / "no" / "such" / "dir" / "p.splice")


def _cli(*args, env):
    return subprocess.run([sys.executable, "-m", "splice", *args], capture_output=True,
                          text=True, env=python_env(TESTS.parent, **env))


def test_cache_export_and_import_commands(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from splice.system import cache\n"
            "for k in 'abc': cache.store('kernel', k, {'arch': 'sm_90'}, b'x' * 100)")
    subprocess.run([sys.executable, "-c", code, str(TESTS.parent)], check=True,
                   env=python_env(TESTS.parent, SPLICE_CACHE_DIR=a))
    pack = str(tmp_path / "p.splice")
    out = _cli("cache", "export", pack, "--used-within", "1h", env={"SPLICE_CACHE_DIR": a})
    assert out.returncode == 0 and "3 entries" in out.stdout and "sm_90" in out.stdout
    out = _cli("cache", "import", pack, env={"SPLICE_CACHE_DIR": b})
    assert out.returncode == 0 and "3 entries imported" in out.stdout, out.stderr
    assert "3 entries" in _cli("cache", "size", env={"SPLICE_CACHE_DIR": b}).stdout
    for bad, says in [(("cache", "import"), "takes a FILE"),
                      (("cache", "size", pack), "takes no FILE"),
                      (("cache", "import", pack, "--used-within", "1h"), "--used-within"),
                      (("cache", "export", pack, "--used-within", "soon"), "not a duration")]:
        out = _cli(*bad, env={"SPLICE_CACHE_DIR": b})
        assert out.returncode == 2 and says in out.stderr, (bad, out.stderr)
    (tmp_path / "junk").write_bytes(b"junk")
    out = _cli("cache", "import", str(tmp_path / "junk"), env={"SPLICE_CACHE_DIR": b})
    assert out.returncode == 2 and "refuses the pack" in out.stderr


# --- a service started from a pack runs no compiler --------------------------------------

_KERNELS = r'''
import cuda.tile as ct
import splice
import splice.cccl

scale = splice.extern(source='extern "C" __device__ float sc(float x) { return 3 * x; }',
                      name="sc", signature="float32(float32)")
PTX = """.version 8.0
.target sm_80
.address_size 64
.visible .func (.param .b32 r) p_inc(.param .b32 a)
{
    .reg .f32 %f<3>;
    ld.param.f32 %f1, [a];
    add.f32 %f2, %f1, 0f3F800000;
    st.param.f32 [r], %f2;
    ret;
}
"""
inc = splice.extern.from_ptx(ptx=PTX, name="p_inc", signature="float32(float32)")

@splice.kernel
def with_cuda(x, y, N: ct.Constant[int]):
    ct.store(y, index=(ct.bid(0),), tile=scale(ct.load(x, index=(ct.bid(0),), shape=(N,))))

@splice.kernel
def with_ptx(x, y, N: ct.Constant[int]):
    ct.store(y, index=(ct.bid(0),), tile=inc(ct.load(x, index=(ct.bid(0),), shape=(N,))))

@splice.kernel
def with_cub(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t))

KERNELS = [with_cuda, with_ptx] + ([with_cub] if splice.cccl.include_dirs() else [])
'''

_SERVICE = r'''
import json, sys
from cuda.bindings import nvjitlink, nvrtc    # (their import runs ldconfig: not counted)
runs = []
sys.addaudithook(lambda event, args: event == "subprocess.Popen" and runs.append(
    str(args[0]).rsplit("/", 1)[-1]))
def counted(name, real):
    def call(*a, **k):
        runs.append(name)
        return real(*a, **k)
    return call
nvrtc.nvrtcCompileProgram = counted("NVRTC", nvrtc.nvrtcCompileProgram)
nvjitlink.create = counted("nvJitLink", nvjitlink.create)
import splice, kernels
sig = splice.kernel_signature("array(float32)", "array(float32)", 1024)
hits = [splice.build(k, sig, "sm_90").from_cache for k in kernels.KERNELS]
print(json.dumps({"hits": hits, "runs": runs}))
'''


def _service(tmp_path, cache_dir: Path, script: str = _SERVICE, **env) -> dict:
    (tmp_path / "service.py").write_text(script)
    out = subprocess.run([sys.executable, str(tmp_path / "service.py")], capture_output=True,
                         text=True, env=python_env(TESTS.parent, tmp_path,
                                                   SPLICE_CACHE_DIR=str(cache_dir), **env))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_service_started_from_a_pack_runs_no_compiler(tmp_path):
    """The CI job compiles (CUDA C, PTX and, with CCCL, splice.cub externs) and exports;
    the service imports into an empty cache and, with SPLICE_COMPILE=never, builds every
    kernel from it: no NVRTC, tileiras or ptxas run (counted: every subprocess, every
    NVRTC compile and nvJitLink link of the process)."""
    (tmp_path / "kernels.py").write_text(_KERNELS)
    ci, served = tmp_path / "ci-cache", tmp_path / "served-cache"
    first = _service(tmp_path, ci)                   # the CI job: compiles
    assert not any(first["hits"])
    assert {"tileiras", "ptxas", "NVRTC"} <= set(first["runs"])    # the counting counts
    pack = tmp_path / "kernels.splice"
    assert _cli("cache", "export", str(pack), env={"SPLICE_CACHE_DIR": str(ci)}).returncode == 0
    assert _cli("cache", "import", str(pack),
                env={"SPLICE_CACHE_DIR": str(served)}).returncode == 0
    got = _service(tmp_path, served, SPLICE_COMPILE="never")
    assert all(got["hits"]) and got["runs"] == []


@pytest.mark.skipif(not cccl.include_dirs(), reason="needs CCCL's headers")
def test_cache_only_mode_refuses_a_kernel_the_pack_lacks(tmp_path):
    """Without the pack the same service fails at its first kernel, naming it, its extern
    and the pack commands, having run nothing."""
    (tmp_path / "kernels.py").write_text(_KERNELS.replace("KERNELS = [with_cuda, with_ptx] +",
                                                          "KERNELS = "))
    (tmp_path / "service.py").write_text(_SERVICE)
    out = subprocess.run([sys.executable, str(tmp_path / "service.py")], capture_output=True,
                         text=True, env=python_env(TESTS.parent, tmp_path,
                                                   SPLICE_CACHE_DIR=str(tmp_path / "empty"),
                                                   SPLICE_COMPILE="never"))
    assert out.returncode != 0
    err = out.stderr
    assert "SpliceNotCachedError" in err and "kernel 'with_cub'" in err and "sm_90" in err
    assert "splice.cub.sort" in err or "sort" in err
    assert "python -m splice cache export" in err and "python -m splice cache import" in err


def test_cache_only_mode_runs_no_tool_before_it_refuses(tmp_path):
    """An empty cache under SPLICE_COMPILE=never: the kernel is refused, naming it, and
    nothing ran before (also not tileiras's probe of its bytecode version, which a trace
    needs and a compile stores)."""
    (tmp_path / "kernels.py").write_text(_KERNELS)
    refused = _SERVICE.replace(
        'hits = [splice.build(k, sig, "sm_90").from_cache for k in kernels.KERNELS]',
        'try:\n    splice.build(kernels.with_cuda, sig, "sm_90")\n'
        'except splice.SpliceNotCachedError as e:\n    hits = [e.message]')
    got = _service(tmp_path, tmp_path / "empty", refused, SPLICE_COMPILE="never")
    assert got["runs"] == []
    assert "kernel 'with_cuda'" in got["hits"][0] and "cache import" in got["hits"][0]


@pytest.mark.parametrize("tool", ["tileiras", "ptxas", "NVRTC", "nvJitLink"])
def test_cache_only_mode_refuses_every_tool_run(tool, fresh_cache, monkeypatch):
    """A backstop under the pipeline's own check: no path of splice runs a compiler
    while SPLICE_COMPILE=never (the error names the tool and what needed it)."""
    import subprocess as sp

    from cuda.bindings import nvjitlink, nvrtc
    ran = []
    monkeypatch.setattr(sp, "Popen", lambda *a, **k: ran.append(a) or 1 / 0)
    monkeypatch.setattr(nvrtc, "nvrtcCreateProgram", lambda *a, **k: ran.append(a) or 1 / 0)
    monkeypatch.setattr(nvjitlink, "create", lambda *a, **k: ran.append(a) or 1 / 0)
    monkeypatch.setenv("SPLICE_COMPILE", "never")
    run = {"tileiras": lambda: toolchain.run_tileiras(b"", (), timeout=5, what="the test"),
           "ptxas": lambda: toolchain.run_ptxas("", [], None, timeout=5, what="the test"),
           "NVRTC": lambda: toolchain.nvrtc_compile(b"", "the test", []),
           "nvJitLink": lambda: toolchain.nvjitlink_run([], [], "cubin", "the test")}[tool]
    with pytest.raises(splice.SpliceNotCachedError, match=f"the test.*{tool}"):
        run()
    assert ran == []


@pytest.mark.gpu
def test_gpu_a_service_started_from_a_pack_launches_with_no_compiler(torch, tmp_path):
    """On the GPU: the first ct.launch of each kernel in a process whose cache was
    imported from a pack, with SPLICE_COMPILE=never, runs no NVRTC, tileiras or ptxas and
    computes what the compiling process computed."""
    (tmp_path / "kernels.py").write_text(_KERNELS)
    launch = _SERVICE.replace(
        'hits = [splice.build(k, sig, "sm_90").from_cache for k in kernels.KERNELS]',
        'import torch, cuda.tile as ct\n'
        'x = torch.randn(64 * 1024, device="cuda")\n'
        'outs = []\n'
        'for k in kernels.KERNELS:\n'
        '    y = torch.empty_like(x)\n'
        '    ct.launch(torch.cuda.current_stream(), (64,), k, (x, y, 1024))\n'
        '    outs.append(float(y.double().sum()))\n'
        'torch.cuda.synchronize()\n'
        'hits = outs')
    (tmp_path / "service.py").write_text(launch)
    env = dict(CUDA_TILE_CACHE_DIR=str(tmp_path / "ct"))
    ci, served = tmp_path / "ci-cache", tmp_path / "served-cache"
    first = _service_launch(tmp_path, ci, env)
    pack = tmp_path / "kernels.splice"
    assert _cli("cache", "export", str(pack), env={"SPLICE_CACHE_DIR": str(ci)}).returncode == 0
    assert _cli("cache", "import", str(pack),
                env={"SPLICE_CACHE_DIR": str(served)}).returncode == 0
    got = _service_launch(tmp_path, served, dict(env, SPLICE_COMPILE="never"))
    assert got["runs"] == [], got            # what ran (a tool's name, NVRTC, nvJitLink)
    assert got["hits"] == first["hits"], (got, first)


def _service_launch(tmp_path, cache_dir: Path, env: dict) -> dict:
    out = subprocess.run([sys.executable, str(tmp_path / "service.py")], capture_output=True,
                         text=True, env=python_env(TESTS.parent, tmp_path,
                                                   SPLICE_CACHE_DIR=str(cache_dir), **env))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_public_names(tmp_path, two_caches):
    assert splice.export_pack is packs.export_pack and splice.import_pack is packs.import_pack
    assert issubclass(splice.SplicePackError, splice.SpliceError)
