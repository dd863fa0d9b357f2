"""Checked at use, not once (issue 42, ``docs/security.md``): what splice runs, writes into
and removes is checked when it is used, through descriptors, never by a name another user
could re-point; nothing is looked up in the working directory; what a process makes is
removed by that process only, and what a killed one left by the next; a shared cache set
up as the docs say works.

The attacks take two real users (children that change uid: :mod:`support.two_users`,
:mod:`support.at_use`; or files this process, as root, gives to another uid), so they run
as root (CI does). The others (leaks, one build per key) run as any user.
"""

import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import splice
from splice.system import cache, nvrtc_pch, safe_fs, tileiras_overlay, toolchain
from support import shared_machine as lab
from support import two_users
from support.env import python_env
from support.two_users import ATTACKER, GROUP, OTHER, VICTIM

REPO = Path(__file__).resolve().parent.parent
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another uid "
                               "takes root (CI runs as root)")
_make = two_users.make_dir
FIVE = 'extern "C" __device__ float five(float x) { return x * 5.0f; }\n'


@pytest.fixture
def open_tmp():
    """A fresh directory every user can reach (``tmp_path`` is under root's 0700 one)."""
    d = Path(tempfile.mkdtemp(prefix="splice-at-use-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _ok(r: dict):
    assert r["ok"], r
    return r["value"]


@pytest.fixture(scope="module")
def world():
    """A world for the two-user attacks, and the overlays the attacker made for its
    toolkits (her capturing ptxas leaves a mark): (world, {toolkit: overlay name})."""
    why = two_users.unusable_why()
    if why is not None:
        pytest.skip(why)
    w = two_users.new_world("splice-at-use-")
    for name, mode in (("pkgs-sticky", 0o1777), ("pkgs-root", 0o755), ("ro-cache", 0o755),
                       ("tmp-private", 0o1777), ("scratch", 0o1777), ("victim-inc", 0o755),
                       ("src", 0o755)):
        _make(w / name, mode)
    (w / "src" / "five.cu").write_text(FIVE)
    (w / "victim-inc" / "scale.h").write_text("#define SCALE 3.0f\n")
    two_users.fake_toolkit(w / "pkgs-sticky")
    two_users.fake_toolkit(w / "pkgs-root")
    home = w / "attacker"
    made = two_users.results(w, "attacker-overlays", two_users.spawn(
        "support.at_use", "attacker-overlays", w, ATTACKER, home,
        SPLICE_CACHE_DIR=str(home / "cache")))
    try:
        yield w, _ok(made["attacker_overlays"])
    finally:
        shutil.rmtree(w, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# another user's program runs as you


def test_a_re_pointed_overlay_place_never_runs_another_users_tileiras(world):
    """``<toolkit>/../.splice-overlay`` in a sticky directory: the attacker's link to a
    directory of the victim's, re-pointed at her overlay after the victim built there.
    splice resolved the place once, by name (``stat``), and ran tileiras by path at every
    compile: the second compile ran hers."""
    w, _ = world
    tools = _make(w / "victim" / "tools", 0o755, VICTIM, VICTIM)
    place = w / "pkgs-sticky" / ".splice-overlay"
    two_users.as_user(ATTACKER, "ln", "-s", str(tools), str(place))
    proc = two_users.spawn("support.at_use", "victim-repointed", w, VICTIM, w / "victim")
    two_users.wait_for(w, "repoint", proc)
    two_users.as_user(ATTACKER, "ln", "-sfn", str(w / "attacker" / "evil-pkgs-sticky"),
                      str(place))
    two_users.go(w, "repoint")
    v = _ok(two_users.results(w, "victim-repointed", proc)["victim_repointed"])
    _ok(v["first"])
    _ok(v["second"])
    assert "repointed" not in v["marks"]
    assert list(tools.iterdir()) == []   # another user's link is never followed


def test_a_private_overlay_is_removed_by_its_process_only_and_never_taken_over(world):
    """The private overlay (``mkdtemp`` in a shared temporary directory): a child of
    ``os.fork`` exiting normally removed it under its parent (an exit handler with no
    pid check), and the attacker made her own at its name, which the parent then ran (it
    only checked that ``bin/tileiras`` was a file)."""
    w, names = world
    proc = two_users.spawn("support.at_use", "victim-forked", w, VICTIM, w / "victim")
    holder = Path(two_users.wait_for(w, "recreate", proc)).parent
    if holder.exists():
        shutil.rmtree(holder)   # a temporary-directory cleaner (running as root)
    two_users.as_user(ATTACKER, "mkdir", "-m", "755", str(holder))
    two_users.as_user(ATTACKER, "cp", "-a",
                      str(w / "attacker" / "evil-pkgs-root" / names["pkgs-root"]), str(holder))
    two_users.go(w, "recreate")
    v = _ok(two_users.results(w, "victim-forked", proc)["victim_forked"])
    _ok(v["first"])
    assert v["kept"]   # the fork child's exit left its parent's overlay alone
    _ok(v["second"])
    assert "recreated" not in v["marks"]
    assert any("changed while this process used it" in m for m in v["second"]["warnings"])


@root_only
@pytest.mark.parametrize("change", ["ptxas", "tileiras", "lib"])
def test_an_overlay_changed_after_it_was_found_is_not_run(tmp_path, fresh_cache, monkeypatch,
                                                          change):
    """Found once per process, it was run by name at every compile with one check (that
    ``bin/tileiras`` is a file): a capturing ptxas given to another user (who then wrote
    it), tileiras or ``lib/`` made links, ran or broke the next compile."""
    monkeypatch.setattr(tileiras_overlay, "changed", [])
    lab.kernels.cache_clear()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "five.cu").write_text(FIVE)
    toolchain.overlay.cache_clear()
    try:
        lab.build(str(tmp_path), "a")
        root = toolchain.overlay()
        mark = tmp_path / "mark"
        _change_overlay(root, change, mark)
        with pytest.warns(RuntimeWarning, match="changed while this process used it"):
            b = lab.build(str(tmp_path), "b")
        assert b.cubin and not mark.exists()
        assert root not in toolchain.overlay().parents and toolchain.overlay() != root
    finally:
        toolchain.overlay.cache_clear()
        lab.kernels.cache_clear()


def _change_overlay(root: Path, change: str, mark: Path) -> None:
    if change == "ptxas":
        script = root / "bin" / "ptxas"
        text = script.read_text().split("\n", 1)
        script.write_text(f"{text[0]}\ntouch {mark}\n{text[1]}")
        os.chown(script, ATTACKER, ATTACKER)
    elif change == "tileiras":
        (root / "bin" / "tileiras").unlink()
        (root / "bin" / "tileiras").symlink_to(toolchain.tileiras().resolve())
    else:
        real = os.readlink(next((root / "lib").iterdir()))
        shutil.rmtree(root / "lib")
        (root / "lib").symlink_to(Path(real).parent)


@root_only
def test_the_capturing_ptxas_never_runs_a_program_found_in_path(tmp_path, fresh_cache,
                                                                monkeypatch):
    """It ran ``ln`` (and ``cp``, ``rm``) through PATH at every first compile: one in a
    directory on your PATH that another user can write ran as you."""
    theirs = _make(tmp_path / "bin", 0o777, ATTACKER, ATTACKER)
    mark = tmp_path / "mark"
    for tool in ("ln", "cp", "rm"):
        fake = theirs / tool
        fake.write_text(f"#!/bin/sh\ntouch {mark}\nexec {safe_fs.system_program(tool)} \"$@\"\n")
        fake.chmod(0o755)
        os.chown(fake, ATTACKER, ATTACKER)
    monkeypatch.setenv("PATH", f"{theirs}{os.pathsep}{os.environ.get('PATH', '')}")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "five.cu").write_text(FIVE)
    lab.kernels.cache_clear()
    toolchain.overlay.cache_clear()
    try:
        assert lab.build(str(tmp_path), "a").cubin
        assert not mark.exists()
    finally:
        toolchain.overlay.cache_clear()
        lab.kernels.cache_clear()


# ---------------------------------------------------------------------------------------------
# another user's GPU code in yours


def test_a_header_planted_in_the_working_directory_is_never_used(world):
    """A ``source=`` extern was the NVRTC program ``extern_source@<file>:<line>``, a
    relative name: its quoted ``#include "scale.h"`` was looked up under
    ``./extern_source@<dir>/`` in the current directory before ``include_dirs``."""
    w, _ = world
    planted = w / "scratch" / f"extern_source@{w}" / "lib" / "support"
    two_users.as_user(ATTACKER, "mkdir", "-p", str(planted))
    two_users.as_user(ATTACKER, "sh", "-c", f"echo '#define SCALE 7.0f' > "
                                            f"{shlex.quote(str(planted / 'scale.h'))}")
    r = two_users.results(w, "victim-cwd", two_users.spawn(
        "support.at_use", "victim-cwd", w, VICTIM, w / "victim"))
    assert _ok(r["victim_cwd"]) == {"genuine": True, "planted": False}


def test_a_tool_work_directory_in_a_tmpdir_others_can_rename_is_refused(world):
    """``$TMPDIR`` a directory every user can write, not sticky (a team scratch
    directory): ptxas wrote the cubin into ``$TMPDIR/splice-ptxas-*/kernel.cubin`` and
    splice read it back by name; another user renamed the work directory and put her own
    in its place (as she can in such a directory), and her cubin was loaded as yours.
    The same held for tileiras's PTX. Now such a ``$TMPDIR`` is refused, naming it."""
    w, _ = world
    shared = _make(w / "shared-tmp", 0o777)
    proc = two_users.spawn("support.at_use", "victim-tmpdir", w, VICTIM, w / "victim")
    ready = w / "sync" / "swap.ready"
    while not ready.exists() and proc.poll() is None:
        time.sleep(0.05)
    if ready.exists():
        work = Path(ready.read_text())
        assert work.parent == shared
        two_users.as_user(ATTACKER, "sh", "-c", 'mv "$1" "$1.x" && mkdir -m 777 "$1" && '
                          'printf FORGED-BY-ATTACKER > "$1/kernel.cubin"', "sh", str(work))
        two_users.go(w, "swap")
    v = two_users.results(w, "victim-tmpdir", proc)["victim_tmpdir"]
    assert v.get("value") is not True, "another user's cubin was loaded"
    assert not v["ok"] and v["error"] == "SpliceUnsafePathError", v
    assert str(shared) in v["message"] and "TMPDIR" in v["message"]


@root_only
def test_the_pch_directory_is_not_made_under_a_cache_another_user_can_rename(
        tmp_path, monkeypatch):
    """NVRTC opens its PCH by name: under a cache whose parent another user owns (and
    can rename entries of), she can swap the directory and put her own PCH there."""
    theirs = _make(tmp_path / "theirs", 0o777, ATTACKER, ATTACKER)
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(theirs / "cache"))
    monkeypatch.setattr(nvrtc_pch, "_state", {})
    assert nvrtc_pch._private_dir() is None
    assert not list(theirs.glob("cache/pch-*"))


# ---------------------------------------------------------------------------------------------
# your files written elsewhere


@root_only
def test_a_link_at_the_dump_directory_is_not_followed(tmp_path, fresh_cache, monkeypatch):
    """``<dump>/<symbol>.<arch>`` another user made a link to a directory of yours: the
    dump was written there (``stat`` followed the link)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "five.cu").write_text(FIVE)
    lab.kernels.cache_clear()
    a = lab.build(str(tmp_path), "a")
    yours = _make(tmp_path / "yours", 0o700)
    dumps = _make(tmp_path / "dumps", 0o1777)
    link = dumps / f"{a.symbol}.{lab.ARCH}"
    link.symlink_to(yours)
    os.lchown(link, ATTACKER, ATTACKER)
    monkeypatch.setenv("SPLICE_DUMP_DIR", str(dumps))
    try:
        with pytest.raises(splice.SpliceUnsafePathError, match="symbolic link .*uid "
                                                              f"{ATTACKER}"):
            lab.build(str(tmp_path), "a")
    finally:
        lab.kernels.cache_clear()
    assert list(yours.iterdir()) == []


@root_only
def test_another_users_link_on_the_way_to_the_cache_is_not_followed(tmp_path, monkeypatch):
    """A link another user planted where you put the cache (``/tmp/mycache``) leads
    splice elsewhere (a directory of yours: ``stat`` checked the target only)."""
    yours = _make(tmp_path / "yours", 0o700)
    shared = _make(tmp_path / "shared", 0o1777)
    (shared / "mycache").symlink_to(yours)
    os.lchown(shared / "mycache", ATTACKER, ATTACKER)
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(shared / "mycache"))
    with pytest.raises(splice.SpliceUnsafePathError, match="symbolic link"):
        cache.store("kernel", "k", {}, b"payload")
    assert list(yours.iterdir()) == []
    (shared / "mine").symlink_to(yours)   # your own link: followed
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(shared / "mine"))
    assert cache.store("kernel", "k", {}, b"payload")
    assert cache.load("kernel", "k")[1] == b"payload"


def test_walk_follows_your_links_as_the_kernel_does(tmp_path):
    """safe_fs.walk resolves a path one name at a time: a relative link of yours with
    ``..`` in it leads where the kernel's lookup leads; a loop, a file and a missing name
    are errors."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "up").symlink_to("..")
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "file").write_text("")
    fd = safe_fs.walk(tmp_path / "a" / "up" / "a" / "b", "the test directory")
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "a" / "b"))
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        safe_fs.walk(tmp_path / "loop", "the test directory")
    with pytest.raises(splice.SpliceUnsafePathError, match="not a directory"):
        safe_fs.walk(tmp_path / "file", "the test directory")
    with pytest.raises(FileNotFoundError):
        safe_fs.walk(tmp_path / "missing", "the test directory")


# ---------------------------------------------------------------------------------------------
# the team cache, as the docs set it up


def _recipe(directory: Path) -> dict[str, str]:
    """docs/security.md's commands for a shared cache, run as written (as root, no
    sudo) for ``directory`` and the group GROUP; the settings it exports."""
    text = (REPO / "docs" / "security.md").read_text()
    block = text.split("## Sharing a cache", 1)[1].split("```console\n", 1)[1].split("```")[0]
    settings: dict[str, str] = {}
    for line in block.splitlines():
        command = line.removeprefix("$ ").split("#")[0]
        argv = shlex.split(command.replace("/scratch/splice-cache", str(directory))
                           .replace("gpu-team", str(GROUP)))
        argv = argv[1:] if argv[:1] == ["sudo"] else argv
        if argv[:1] == ["export"]:
            settings.update(a.split("=", 1) for a in argv[1:])
        else:
            subprocess.run(argv, check=True)
    return settings


def test_the_documented_team_cache_works_for_users_of_other_primary_groups(world):
    """``chmod 2770`` and ``SPLICE_CACHE_TRUST=@team``: new directories were made 0770,
    which cleared the set-group-ID bit they inherited, so ``kind/xx/`` got the user's
    primary group and the first store was refused (with ``chmod go-w`` as the fix)."""
    w, _ = world
    settings = _recipe(w / "team-cache")
    first = two_users.results(w, "team-first", two_users.spawn(
        "support.at_use", "team-first", w, VICTIM, w / "victim", **settings))
    assert _ok(first.get("team", first)) == {"from_cache": False}
    second = two_users.results(w, "team-second", two_users.spawn(
        "support.at_use", "team-second", w, OTHER, w / "other", **settings))
    assert _ok(second["team"]) == {"from_cache": True}   # the first one's entries
    for d in (p for p in (w / "team-cache").rglob("*") if p.is_dir()
              and "toolchain" not in p.name):
        st = d.stat()
        assert st.st_gid == GROUP and st.st_mode & stat.S_ISGID, d


@root_only
def test_the_refusal_of_a_shared_cache_names_its_cause(tmp_path, monkeypatch):
    """A group-writable cache whose group is not the one trusted: the advice was
    ``chmod go-w``; the cause is the group."""
    shared = _make(tmp_path / "cache", 0o2770, 0, OTHER)
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(shared))
    monkeypatch.setenv("SPLICE_CACHE_TRUST", f"@{GROUP}")
    with pytest.raises(splice.SpliceUnsafePathError) as e:
        cache.load("kernel", "k")
    assert f"is not one SPLICE_CACHE_TRUST names (@{GROUP})" in str(e.value)
    assert f"chgrp {GROUP} {shared}" in str(e.value) and "go-w" not in str(e.value)


@root_only
def test_an_entry_in_a_cache_directory_every_user_can_write_is_never_loaded(open_tmp,
                                                                            monkeypatch):
    """A team cache the group can traverse (2775), its ``kernel/`` directories made
    writable by every user (a member's ``chmod -R a+rwX kernel``): an entry there was
    read by its path, its directories unchecked, and a file in a set-group-ID directory
    of the team has the team's group whoever writes it: a user outside the team
    replaced the entry with hers, and it was loaded. A store there was refused all
    along."""
    team = _make(open_tmp / "team", 0o2775, 0, GROUP)
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(team))
    monkeypatch.setenv("SPLICE_CACHE_TRUST", f"@{GROUP}")
    assert cache.store("kernel", "k", {}, b"genuine")
    entry = cache._entry_path("kernel", "k")
    for d in (entry.parent, entry.parent.parent):
        d.chmod(0o2777)
    data = entry.read_bytes()
    nl = data.index(b"\n", len(cache._MAGIC))
    header = json.loads(data[len(cache._MAGIC):nl])
    header.update(size=6, sha256=cache._digest(header["meta"], b"forged"))
    forged = open_tmp / "forged"
    forged.write_bytes(cache._MAGIC + json.dumps(header).encode() + b"\n" + b"forged")
    forged.chmod(0o644)
    two_users.as_user(ATTACKER, "sh", "-c", 'rm -f "$2" && cp "$1" "$2"', "sh", str(forged),
                      str(entry))
    assert (entry.stat().st_uid, entry.stat().st_gid) == (ATTACKER, GROUP)
    assert cache.load("kernel", "k") is None


# ---------------------------------------------------------------------------------------------
# nothing leaks (any user)


_MAKE_DIRS = """
import atexit, json, os, sys
from splice.system import cache, nvrtc_pch, tileiras_overlay, toolchain
made = [cache._temporary_root(), nvrtc_pch._private_dir(), tileiras_overlay._private_overlay(
    "overlay-test", toolchain.tileiras().resolve(), "#!/bin/sh", "test")]
(made[1] / "state").mkdir()
(made[1] / "state" / "pch").write_bytes(b"x" * 10000)
print(json.dumps([str(p) for p in made]), flush=True)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return python_env(REPO / "tests", REPO, SPLICE_CACHE_DIR=str(tmp_path / "cache"),
                      TMPDIR=str(tmp_path / "tmp"))


def _child(tmp_path: Path, code: str):
    return subprocess.Popen([sys.executable, "-W", "ignore", "-c", code], text=True,
                            env=_env(tmp_path), stdout=subprocess.PIPE, stdin=subprocess.PIPE)


def _run(tmp_path: Path, code: str) -> str:
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=_env(tmp_path),
                          capture_output=True, text=True, timeout=300, check=True).stdout


@pytest.fixture
def tmp_dirs(tmp_path):
    (tmp_path / "tmp").mkdir()
    return tmp_path


def test_a_fork_child_leaves_its_parents_directories_alone(tmp_dirs):
    """The private overlay and the no-HOME cache were removed by every process that ran
    the exit handlers, a child of ``os.fork`` too (the PCH directory's checked the
    pid); the parent removes them when it exits."""
    code = _MAKE_DIRS + """
child = os.fork()
if child == 0:
    atexit._run_exitfuncs()
    os._exit(0)
os.waitpid(child, 0)
print(json.dumps([os.path.isdir(p) for p in made]))
"""
    out, _ = _child(tmp_dirs, code).communicate(timeout=300)
    made, kept = (json.loads(line) for line in out.splitlines()[-2:])
    assert kept == [True, True, True]
    assert not any(Path(p).exists() for p in made)


def test_what_killed_processes_left_is_removed_by_the_next_one(tmp_dirs):
    """``kill -9`` (and a fork child's ``os._exit``) left the PCH directory (up to 163 MB),
    the private overlay (a 103 MB copy) and the no-HOME cache for ever, uncounted."""
    alive = _child(tmp_dirs, _MAKE_DIRS + "sys.stdin.read()\n")
    made = [Path(p) for p in json.loads(alive.stdout.readline())]
    sweep = """
from splice.system import cache, toolchain
toolchain.overlay(); print(cache.size()[1]); cache._temporary_root()
"""
    counted = int(_run(tmp_dirs, sweep).split()[-1])
    assert all(p.exists() for p in made)   # a running process's are kept...
    assert counted >= 10000                 # ... and its PCH counted
    os.kill(alive.pid, signal.SIGKILL)
    alive.wait()
    assert all(p.exists() for p in made)
    counted = int(_run(tmp_dirs, sweep).split()[-1])
    assert not any(p.exists() for p in made)
    assert counted == 0


def test_sweep_takes_only_dead_or_day_old_real_directories_of_yours(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    me, dead = os.getpid(), gone.pid
    for name in (f"x-{me}-live", f"x-{me}-old", f"x-{dead}-dead"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_bytes(b"x" * 100)
    old = time.time() - safe_fs.STALE_PROCESS_DIR_SECONDS - 60
    os.utime(tmp_path / f"x-{me}-old", (old, old))
    (tmp_path / "target").mkdir()
    (tmp_path / f"x-{dead}-link").symlink_to(tmp_path / "target")
    (tmp_path / f"y-{dead}-other").mkdir()
    assert safe_fs.sweep(tmp_path, "x-") == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"x-{me}-live", f"x-{dead}-link", "target", f"y-{dead}-other"])


@root_only
def test_sweep_never_takes_another_users_directory(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    theirs = _make(tmp_path / f"x-{gone.pid}-theirs", 0o700, ATTACKER, ATTACKER)
    safe_fs.sweep(tmp_path, "x-")
    assert theirs.exists()


@root_only
@pytest.mark.parametrize("owner, mode", [(0, 0o777), (ATTACKER, 0o1777)],
                         ids=["every-user-writes", "hers-sticky"])
def test_sweep_never_deletes_a_directory_another_user_renamed_to_look_dead(open_tmp, owner,
                                                                          mode):
    """A directory of yours in a place where another user can rename entries (every
    user can write it without the sticky bit, or it is hers: a ``$TMPDIR`` or cache
    there): she renamed it ``<prefix><dead pid>-x``, which she cannot delete herself (it
    is 0700 and not empty), and the next splice deleted it as a dead process's."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    place = _make(open_tmp / "place", mode, owner, owner)
    precious = _make(place / "precious", 0o700)
    (precious / "work").write_text("yours")
    two_users.as_user(ATTACKER, "mv", str(precious), str(place / f"x-{gone.pid}-y"))
    safe_fs.sweep(place, "x-")
    assert (place / f"x-{gone.pid}-y" / "work").read_text() == "yours"


def test_pch_bytes_count_against_the_bound(fresh_cache):
    """NVRTC's precompiled headers (19 MB for <cuda/std/limits>, 163 MB for a CUB sort)
    were not counted: the cache grew past its bound by them."""
    for k in "abc":
        cache.store("kernel", k, {}, b"x" * 1000)
    pch = safe_fs.process_dir(cache.PCH_PREFIX, fresh_cache)
    (pch / "pch").write_bytes(b"x" * 5000)
    n, total = cache.size()
    assert n == 3 and total >= 8000
    cache.prune(6500)
    n, total = cache.size()
    assert n == 1 and total <= 6500 and (pch / "pch").exists()


# ---------------------------------------------------------------------------------------------
# one build per key across processes (any user)


_ONE_OVERLAY = """
import os, sys, time
from pathlib import Path
from splice.system import tileiras_overlay, toolchain
build = tileiras_overlay._build_overlay
def logged(root, real, script):
    with open(os.environ["LOG"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(0.5)   # as a copy of tileiras (103 MB) takes
    return build(root, real, script)
tileiras_overlay._build_overlay = logged
tileiras_overlay._overlay_bases = lambda real: [Path(os.environ["BASE"])]
print("ready", flush=True)
sys.stdin.readline()
print(toolchain.overlay(), flush=True)
"""


def test_cold_processes_build_one_overlay(tmp_path):
    """Eight processes started at once built eight overlays (eight copies of tileiras,
    eight tileiras runs): now one builds, under a lock on the key, and the others wait
    and use it."""
    env = python_env(REPO / "tests", REPO, SPLICE_CACHE_DIR=str(tmp_path / "cache"),
                     BASE=str(tmp_path / "base"), LOG=str(tmp_path / "log"))
    procs = [subprocess.Popen([sys.executable, "-c", _ONE_OVERLAY], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
             for _ in range(8)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    roots = {p.communicate(timeout=300)[0].strip() for p in procs}
    assert len(roots) == 1
    assert len((tmp_path / "log").read_text().split()) == 1
