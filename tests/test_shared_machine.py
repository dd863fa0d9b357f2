"""Safe on a shared machine (issue 29, ``docs/security.md``): with two real users, the
attacks of another user on splice's overlay, cache, dump directory, lock and inputs are
refused or harmless, and the honest compile still works.

The two users are unused uids (no accounts needed): children of this process that import
splice as root, then setgid/setuid (``support/shared_machine.py`` is what they run). CI runs as root; elsewhere these tests
skip. The in-process tests below them need root too: they give files to another uid.
"""

import contextlib
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import splice
from splice.system import cache, toolchain
from support import shared_machine as lab

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="playing two users takes setuid to unused uids: run as root "
                              "(CI does)")

VICTIM, ATTACKER, OTHER, GROUP = 54321, 54322, 54323, 54320
REPO = Path(__file__).resolve().parent.parent
FIVE = 'extern "C" __device__ float five(float x) { return x * 5.0f; }\n'


def _make(path: Path, mode: int, owner: int = 0, group: int = 0) -> Path:
    path.mkdir()
    os.chown(path, owner, group)
    path.chmod(mode)
    return path


def _fake_toolkit(pkgs: Path) -> None:
    """A copy of tileiras's toolkit (links, and tileiras itself) under ``pkgs``."""
    real = toolchain.tileiras().resolve()
    root = pkgs / "cu13"
    (root / "bin").mkdir(parents=True)
    for e in real.parent.parent.iterdir():
        if e.name != "bin":
            (root / e.name).symlink_to(e)
    for e in real.parent.iterdir():
        if e.name != "tileiras":
            (root / "bin" / e.name).symlink_to(e)
    shutil.copy2(real, root / "bin" / "tileiras")


def _world() -> Path:
    w = Path(tempfile.mkdtemp(prefix="splice-two-users-"))
    w.chmod(0o755)
    (w / "victim-uid").write_text(str(VICTIM))
    (w / "group-gid").write_text(str(GROUP))
    for name, mode in (("marks", 0o1777), ("sync", 0o1777), ("results", 0o1777), ("tmp", 0o1777),
                       ("tmp2", 0o1777), ("dumps", 0o1777), ("world-cache", 0o777),
                       ("ro-cache", 0o755), ("pkgs", 0o777), ("pkgs-root", 0o755),
                       ("src", 0o755)):
        _make(w / name, mode)
    _make(w / "group-cache", 0o2770, 0, GROUP)
    _make(w / "victim", 0o755, VICTIM, VICTIM)
    _make(w / "attacker", 0o755, ATTACKER, ATTACKER)
    (w / "src" / "five.cu").write_text(FIVE)
    os.mkfifo(w / "src" / "fifo.cu")
    os.mkfifo(w / "src" / "fifo.cuh")
    (w / "src" / "zero.cu").symlink_to("/dev/zero")
    for name in ("precious-size", "precious-dump"):
        (w / "victim" / name).write_text("precious")
        os.chown(w / "victim" / name, VICTIM, VICTIM)
    _fake_toolkit(w / "pkgs")        # in a directory every user can write
    _fake_toolkit(w / "pkgs-root")   # in one only root can
    return w


def _as(uid: int, role: str, w: Path, home: Path, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPLICE_", "XDG_")) and k not in ("HOME", "TMPDIR")}
    cutile = home / f"cutile-tmp-{role}"   # cuTile makes its temporary directory on import
    _make(cutile, 0o700, uid, uid)
    env.update(PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}", HOME=str(home),
               PYTHONDONTWRITEBYTECODE="1", CUDA_TILE_TEMP_DIR=str(cutile), **extra)
    return subprocess.Popen([sys.executable, "-m", "support.shared_machine", role, str(w),
                             str(uid)], cwd=w, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _results(w: Path, role: str, proc) -> dict:
    try:
        out = proc.communicate(timeout=400)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0].decode(errors="replace")
    path = w / "results" / f"{role}.json"
    res = json.loads(path.read_text()) if path.exists() else {}
    res["output"] = out[-4000:]
    return res


@pytest.fixture(scope="module")
def two_users():
    """The attacker plants, then the victim compiles while the attacker holds the lock:
    {role: {step: what it did}}."""
    w = _world()
    try:
        attacker_home = w / "attacker"
        planted = _results(w, "attacker-plant", _as(
            ATTACKER, "attacker-plant", w, attacker_home,
            SPLICE_CACHE_DIR=str(attacker_home / "cache")))
        assert planted.get("attacker_plant", {}).get("ok"), planted
        hold = _as(ATTACKER, "attacker-hold", w, attacker_home)
        victim = _results(w, "victim", _as(VICTIM, "victim", w, w / "victim"))
        _results(w, "attacker-hold", hold)
        yield {step: r.get("value", r) for step, r in victim.items() if step != "output"} | \
            {"output": victim["output"]}
    finally:
        shutil.rmtree(w, ignore_errors=True)


def _ok(r: dict):
    assert r["ok"], r
    return r["value"]


def _refused(r: dict, *words: str) -> str:
    assert not r["ok"] and r["error"] == "SpliceUnsafePathError", r
    for w in words:
        assert w in r["message"], r["message"]
    return r["message"]


# ---------------------------------------------------------------------------------------------
# another user's program runs as you


def test_overlay_planted_in_temporary_directory_is_never_run(two_users):
    r = two_users["victim_temporary"]["tmp"]
    symbol, marks = _ok(r)
    assert "tmp" not in marks
    assert any("cannot be kept" in w for w in r["warnings"])


def test_overlay_planted_beside_the_toolkit_is_never_run(two_users):
    symbol, marks = _ok(two_users["victim_near"])
    assert "near" not in marks


def test_overlay_planted_in_a_world_writable_cache_is_refused(two_users):
    shared = two_users["victim_shared"]
    _refused(shared["world"]["a"], "world-cache", "every user can write it", "mode 0777")
    for scenario in ("world", "group", "group-trusted"):
        for k in "af":
            r = shared[scenario][k]
            assert "world-cache" not in r.get("value", {}).get("marks", []), r


def test_overlay_is_never_shared_even_in_a_trusted_cache(two_users):
    r = _ok(two_users["victim_shared"]["group-trusted"]["a"])
    assert "group-cache" not in r["marks"]


# ---------------------------------------------------------------------------------------------
# another user's GPU code in your cubin


def test_forged_kernel_entry_in_a_shared_cache_is_not_served(two_users):
    shared = two_users["victim_shared"]
    _refused(shared["world"]["a"], "world-cache")
    _refused(shared["group"]["a"], "group-cache", "its group can write it")


def test_forged_fragment_entry_in_a_shared_cache_is_not_linked(two_users):
    shared = two_users["victim_shared"]
    _refused(shared["world"]["f"], "world-cache")
    _refused(shared["group"]["f"], "group-cache")


def test_trusted_group_shares_entries_by_choice(two_users):
    """SPLICE_CACHE_TRUST=@group: what the group stored is used (the risk the docs state)."""
    trusted = two_users["victim_shared"]["group-trusted"]
    assert _ok(trusted["a"])["forged_cubin"]
    assert _ok(trusted["f"])["forged_fragment"]


# ---------------------------------------------------------------------------------------------
# your files overwritten


def test_links_in_a_shared_cache_are_not_followed(two_users):
    shared = two_users["victim_shared"]
    assert shared["precious-size"] == "precious"   # .size -> the victim's file
    assert not shared["made-by-lock"]               # .lock -> a file it would create


def test_dump_directory_of_another_user_is_refused(two_users):
    r = two_users["victim_dump"]
    _refused(r, "dump directory", "another user owns it", f"uid {ATTACKER}")
    assert bytes.fromhex(r["precious"]) == b"precious"


# ---------------------------------------------------------------------------------------------
# denial of service


def test_another_user_cannot_hold_the_cache_lock(two_users):
    r = two_users["victim_lock"]
    assert r["attacker"].startswith("denied"), r
    _ok(r["first"])
    _ok(r["second"])


def test_precreated_temporary_directory_is_no_denial_of_service(two_users):
    symbol, marks = _ok(two_users["victim_temporary"]["tmp2"])


def test_fifo_and_device_inputs_are_refused_not_read(two_users):
    files = two_users["victim_files"]
    _ok(files["entry"])   # a FIFO at a cache entry: a miss, rebuilt
    _refused(files["fifo"], "fifo.cu", "not a regular file")
    _refused(files["zero"], "zero.cu", "not a regular file")
    _refused(files["include"], "fifo.cuh", "not a regular file")


# ---------------------------------------------------------------------------------------------
# states splice does not get out of


def test_no_home_and_no_passwd_entry_compiles_in_a_private_cache(two_users):
    r = two_users["victim_homeless"]
    _ok(r)
    assert any("no home directory" in w for w in r["warnings"]), r


# ---------------------------------------------------------------------------------------------
# in this process (root is the victim; "another user" owns the files)


@pytest.fixture
def world(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "five.cu").write_text(FIVE)
    lab.kernels.cache_clear()
    return tmp_path


def test_entries_another_user_wrote_are_misses(world, fresh_cache):
    lab.build(str(world), "a")
    for e in cache.entries():
        fragment = e.parent.parent.name == "fragment"
        lab.forge(e, lambda b, fragment=fragment: b.replace(
            lab.GENUINE.encode(), lab.FORGED.encode()) if fragment else b + lab.FORGED_TAIL)
        os.chown(e, ATTACKER, ATTACKER)
    lab._forget()
    a = lab.build(str(world), "a")
    assert not a.from_cache and not a.cubin.endswith(lab.FORGED_TAIL)
    f = lab.build(str(world), "f")
    assert lab.GENUINE in f.spliced_ptx and lab.FORGED not in f.spliced_ptx
    assert all(e.stat().st_uid == 0 for e in cache.entries())   # replaced by its own


def test_entries_of_a_trusted_user_are_hits(world, fresh_cache, monkeypatch):
    lab.build(str(world), "a")
    for e in cache.entries():
        os.chown(e, OTHER, OTHER)
    monkeypatch.setenv("SPLICE_CACHE_TRUST", str(OTHER))
    lab._forget()
    assert lab.build(str(world), "a").from_cache


def test_cache_made_private(world, fresh_cache):
    """Directories 0700, files 0600 (the overlay's tools: 0700, or root's hard link)."""
    lab.build(str(world), "a")
    for p in [fresh_cache, *fresh_cache.rglob("*")]:
        st = p.lstat()
        if "toolchain" in p.parts or stat.S_ISLNK(st.st_mode):
            continue
        assert stat.S_IMODE(st.st_mode) == (0o700 if stat.S_ISDIR(st.st_mode) else 0o600), p


def test_lock_wait_times_out_naming_the_lock(world, fresh_cache, monkeypatch):
    lab.build(str(world), "a")
    with contextlib.suppress(ImportError):   # (the test shows the hang without it)
        from splice.system import safe_fs
        monkeypatch.setattr(safe_fs, "LOCK_TIMEOUT_SECONDS", 0.2)
    fd = os.open(fresh_cache / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with lab.deadline(30), pytest.warns(RuntimeWarning, match=r"\.lock stayed held"):
            assert not lab.build(str(world), "b").from_cache
    finally:
        os.close(fd)


def _fresh_overlay() -> Path:
    toolchain.overlay.cache_clear()
    return toolchain.overlay()


@pytest.mark.parametrize("damage", ["missing", "truncated", "foreign"])
def test_broken_overlay_is_rebuilt(world, fresh_cache, damage):
    tool = _fresh_overlay() / "bin" / "tileiras"
    tool.unlink()   # (a hard link to the real tileiras: never written through)
    if damage != "missing":
        tool.write_bytes(b"\x7fELF" * 10)
    if damage == "foreign":
        os.chown(tool, ATTACKER, ATTACKER)
    assert _fresh_overlay() / "bin" / "tileiras" == tool
    assert tool.stat().st_size == toolchain.tileiras().stat().st_size
    assert tool.stat().st_uid == 0
    lab._forget()
    assert lab.build(str(world), "a").cubin


def test_overlay_owned_by_another_user_is_refused_naming_it(fresh_cache):
    root = _fresh_overlay()
    os.chown(root, ATTACKER, ATTACKER)   # never its files: tileiras is the real one's link
    with pytest.raises(splice.SpliceUnsafePathError, match=f"{root}.*uid {ATTACKER}"):
        _fresh_overlay()


def test_leftovers_of_killed_builds_are_removed(fresh_cache):
    root = _fresh_overlay()
    left = root.parent / "overlay-tmp-killed"
    (left / "bin").mkdir(parents=True)
    (left / "bin" / "tileiras").write_bytes(b"x" * 1000)
    old = time.time() - 7200   # (toolchain.STALE_BUILD_SECONDS is 600)
    os.utime(left, (old, old))
    _fresh_overlay()
    assert not left.exists()


def test_links_at_dump_files_are_replaced_not_followed(world, fresh_cache, tmp_path,
                                                       monkeypatch):
    victim_file = tmp_path / "precious"
    victim_file.write_text("precious")
    a = lab.build(str(world), "a")
    d = tmp_path / "dumps" / f"{a.symbol}.{lab.ARCH}"
    d.mkdir(parents=True, mode=0o700)
    (d / f"{a.symbol}.cubin").symlink_to(victim_file)
    monkeypatch.setenv("SPLICE_DUMP_DIR", str(tmp_path / "dumps"))
    lab.build(str(world), "a")
    assert victim_file.read_text() == "precious"
    assert (d / f"{a.symbol}.cubin").read_bytes() == a.cubin
    assert stat.S_IMODE((d / f"{a.symbol}.cubin").stat().st_mode) == 0o600


def test_trust_setting_names_users_and_groups(monkeypatch):
    from splice.system import safe_fs
    monkeypatch.setenv("SPLICE_CACHE_TRUST", f"{OTHER}, @{GROUP}, root")
    assert safe_fs.cache_trust() == safe_fs.Trust(frozenset({OTHER, 0}), frozenset({GROUP}))
    monkeypatch.setenv("SPLICE_CACHE_TRUST", "no-such-user-splice")
    with pytest.raises(splice.SpliceUnsafePathError, match="no-such-user-splice"):
        safe_fs.cache_trust()



@pytest.mark.parametrize("mode", [0o777, 0o1777], ids=["world-writable", "sticky"])
def test_overlay_kept_only_where_no_one_else_can_rename_a_directory_above(tmp_path,
                                                                          monkeypatch, mode):
    shared = _make(tmp_path / "shared", mode)   # /tmp is 1777: others cannot rename ours
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(shared / "cache"))
    try:
        assert (shared in _fresh_overlay().parents) == bool(mode & stat.S_ISVTX)
    finally:
        toolchain.overlay.cache_clear()


def test_overlay_not_kept_in_a_shared_cache_whose_members_can_rename_it(tmp_path, monkeypatch):
    """A trusted group shares cache entries, never what splice runs: a member can rename
    ``toolchain-<uid>`` in the group-writable cache and put their own tileiras there."""
    shared = _make(tmp_path / "shared", 0o2770, owner=OTHER, group=GROUP)
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(shared))
    monkeypatch.setenv("SPLICE_CACHE_TRUST", f"@{GROUP}")
    try:
        assert shared not in _fresh_overlay().parents
    finally:
        toolchain.overlay.cache_clear()


# ---------------------------------------------------------------------------------------------
# a FIFO or a device as a declaration's path (any user)


@pytest.mark.parametrize("declare", [
    lambda p: splice.extern(path=p, name="f", signature="float32(float32)"),
    lambda p: splice.library(path=p),
    lambda p: splice.extern.from_ptx(p, name="f", signature="float32(float32)"),
    lambda p: splice.extern.from_ltoir(p, name="f", signature="float32(float32)"),
    lambda p: splice.extern.from_object(p, name="f", signature="float32(float32)"),
], ids=["extern", "library", "from_ptx", "from_ltoir", "from_object"])
def test_a_fifo_or_device_as_a_path_is_refused_never_opened(tmp_path, declare):
    """errors.md's promise: SpliceUnsafePathError, not "file not found"; the FIFO is never
    opened, so a writer waiting on it stays blocked (opening it to read would release it)."""
    import threading
    fifo = tmp_path / "f.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)
    writer.start()
    with pytest.raises(splice.SpliceUnsafePathError, match=r"it is a FIFO, not a regular "
                                                           r"file(.|\n)*give a file"):
        declare(str(fifo))
    writer.join(0.5)
    assert writer.is_alive()           # still waiting for a reader: splice opened nothing
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))   # release it
    writer.join(5)
    with pytest.raises(splice.SpliceUnsafePathError, match=r"/dev/zero: it is a character "
                                                           r"device"):
        declare("/dev/zero")

