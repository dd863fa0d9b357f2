"""Safe on a shared machine (issue 29, ``docs/security.md``): with two real users, the
attacks of another user on splice's overlay, cache, dump directory, lock and inputs are
refused or harmless, and the honest compile still works.

The two users are unused uids (no accounts needed): children of this process that import
splice as root, then setgid/setuid (``support/shared_machine.py`` is what they run, from a
copy every user can read: :mod:`support.two_users`). CI runs as root; elsewhere these tests
skip. The in-process tests below them need root too: they give files to another uid.
"""

import contextlib
import fcntl
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import splice
from splice.system import cache, toolchain
from support import shared_machine as lab
from support import two_users
from support.two_users import ATTACKER, GROUP, OTHER, VICTIM

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="playing two users takes setuid to unused uids: run as root "
                              "(CI does)")

FIVE = 'extern "C" __device__ float five(float x) { return x * 5.0f; }\n'
_make = two_users.make_dir


def _world() -> Path:
    w = two_users.new_world("splice-two-users-")
    (w / "victim-uid").write_text(str(VICTIM))
    for name, mode in (("tmp", 0o1777), ("tmp2", 0o1777), ("dumps", 0o1777),
                       ("world-cache", 0o777), ("ro-cache", 0o755), ("pkgs", 0o777),
                       ("pkgs-root", 0o755), ("src", 0o755)):
        _make(w / name, mode)
    _make(w / "group-cache", 0o2770, 0, GROUP)
    (w / "src" / "five.cu").write_text(FIVE)
    os.mkfifo(w / "src" / "fifo.cu")
    os.mkfifo(w / "src" / "fifo.cuh")
    (w / "src" / "zero.cu").symlink_to("/dev/zero")
    for name in ("precious-size", "precious-dump"):
        (w / "victim" / name).write_text("precious")
        os.chown(w / "victim" / name, VICTIM, VICTIM)
    two_users.fake_toolkit(w / "pkgs")        # in a directory every user can write
    two_users.fake_toolkit(w / "pkgs-root")   # in one only root can
    return w


def _as(uid: int, role: str, w: Path, home: Path, **extra):
    return two_users.spawn("support.shared_machine", role, w, uid, home, **extra)


@pytest.fixture(scope="module")
def attacks():
    """The attacker plants, then the victim compiles while the attacker holds the lock:
    {role: {step: what it did}}."""
    why = two_users.unusable_why()
    if why is not None:
        pytest.skip(why)
    w = _world()
    try:
        attacker_home = w / "attacker"
        planted = two_users.results(w, "attacker-plant", _as(
            ATTACKER, "attacker-plant", w, attacker_home,
            SPLICE_CACHE_DIR=str(attacker_home / "cache")))
        assert planted.get("attacker_plant", {}).get("ok"), planted
        hold = _as(ATTACKER, "attacker-hold", w, attacker_home)
        victim = two_users.results(w, "victim", _as(VICTIM, "victim", w, w / "victim"))
        two_users.results(w, "attacker-hold", hold)
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


def test_overlay_planted_in_temporary_directory_is_never_run(attacks):
    r = attacks["victim_temporary"]["tmp"]
    symbol, marks = _ok(r)
    assert "tmp" not in marks
    assert any("cannot be kept" in w for w in r["warnings"])


def test_overlay_planted_beside_the_toolkit_is_never_run(attacks):
    symbol, marks = _ok(attacks["victim_near"])
    assert "near" not in marks


def test_overlay_planted_in_a_world_writable_cache_is_refused(attacks):
    shared = attacks["victim_shared"]
    _refused(shared["world"]["a"], "world-cache", "every user can write it", "mode 0777")
    for scenario in ("world", "group", "group-trusted"):
        for k in "af":
            r = shared[scenario][k]
            assert "world-cache" not in r.get("value", {}).get("marks", []), r


def test_overlay_is_never_shared_even_in_a_trusted_cache(attacks):
    r = _ok(attacks["victim_shared"]["group-trusted"]["a"])
    assert "group-cache" not in r["marks"]


# ---------------------------------------------------------------------------------------------
# another user's GPU code in your cubin


def test_forged_kernel_entry_in_a_shared_cache_is_not_served(attacks):
    shared = attacks["victim_shared"]
    _refused(shared["world"]["a"], "world-cache")
    _refused(shared["group"]["a"], "group-cache", "its group can write it")


def test_forged_fragment_entry_in_a_shared_cache_is_not_linked(attacks):
    shared = attacks["victim_shared"]
    _refused(shared["world"]["f"], "world-cache")
    _refused(shared["group"]["f"], "group-cache")


def test_trusted_group_shares_entries_by_choice(attacks):
    """SPLICE_CACHE_TRUST=@group: what the group stored is used (the risk the docs state)."""
    trusted = attacks["victim_shared"]["group-trusted"]
    assert _ok(trusted["a"])["forged_cubin"]
    assert _ok(trusted["f"])["forged_fragment"]


# ---------------------------------------------------------------------------------------------
# your files overwritten


def test_links_in_a_shared_cache_are_not_followed(attacks):
    shared = attacks["victim_shared"]
    assert shared["precious-size"] == "precious"   # .size -> the victim's file
    assert not shared["made-by-lock"]               # .lock -> a file it would create


def test_dump_directory_of_another_user_is_refused(attacks):
    r = attacks["victim_dump"]
    _refused(r, "dump directory", "another user owns it", f"uid {ATTACKER}")
    assert bytes.fromhex(r["precious"]) == b"precious"


# ---------------------------------------------------------------------------------------------
# denial of service


def test_another_user_cannot_hold_the_cache_lock(attacks):
    r = attacks["victim_lock"]
    assert r["attacker"].startswith("denied"), r
    _ok(r["first"])
    _ok(r["second"])


def test_precreated_temporary_directory_is_no_denial_of_service(attacks):
    symbol, marks = _ok(attacks["victim_temporary"]["tmp2"])


def test_fifo_and_device_inputs_are_refused_not_read(attacks):
    files = attacks["victim_files"]
    _ok(files["entry"])   # a FIFO at a cache entry: a miss, rebuilt
    _refused(files["fifo"], "fifo.cu", "not a regular file")
    _refused(files["zero"], "zero.cu", "not a regular file")
    _refused(files["include"], "fifo.cuh", "not a regular file")


# ---------------------------------------------------------------------------------------------
# states splice does not get out of


def test_no_home_and_no_passwd_entry_compiles_in_a_private_cache(attacks):
    r = attacks["victim_homeless"]
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


def test_a_child_forked_while_a_thread_holds_the_cache_lock_gets_it_later(tmp_path):
    """flock belongs to the open file description, which a forked child shares: the
    parent's thread closing its descriptor left the lock held by the child's copy, and
    the child's own first store waited the whole timeout (a fork pool compiling beside
    compiling threads; found when the include walk began to be stored)."""
    code = f"""
import os, sys, threading, time
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from pathlib import Path
from splice.system import safe_fs
lock = Path({str(tmp_path)!r}) / ".lock"
held, forked = threading.Event(), threading.Event()
def hold():
    with safe_fs.locked(lock, "the lock"):
        held.set()
        forked.wait()
threading.Thread(target=hold).start()
held.wait()
pid = os.fork()
if pid == 0:
    time.sleep(0.2)                     # the parent's thread has released it by now
    try:
        with safe_fs.locked(lock, "the lock", timeout=3):
            os._exit(0)
    except TimeoutError:
        os._exit(3)
forked.set()
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "0", out.stdout + out.stderr


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
    old = time.time() - 7200   # (tileiras_overlay.STALE_BUILD_SECONDS is 600)
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
    time.sleep(0.2)                    # the writer is blocked in its open by now
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

