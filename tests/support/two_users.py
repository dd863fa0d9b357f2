"""Real other users for the shared-machine tests (``tests/test_shared_machine.py``,
``tests/test_checked_at_use.py``): unused uids, no accounts needed. A child of the test
process imports splice as root, then takes the uid for good (:func:`support.shared_machine.become`);
the test process itself (root) acts as another user with :func:`as_user`.

What a child reads after it changed its uid (splice's and the tests' modules, which cuTile
reads again for a kernel's source) is copied into the world directory, which every user can
read (:func:`new_world`): a checkout in a private directory (a ``mktemp -d``, a home
directory) is not readable by the other uids. The interpreter was started as root (pyenv's
under ``/root`` is fine); the CUDA toolkit, which the child runs and reads after it changed
its uid, is not copied: :func:`unusable_why` says when the other uids cannot read it, and
the tests skip with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The uids (and their own groups, of the same number) the tests play, and a group that
#: VICTIM and OTHER are members of (a team).
VICTIM, ATTACKER, OTHER, GROUP = 54321, 54322, 54323, 54320
REPO = Path(__file__).resolve().parent.parent.parent
#: How long a child is waited for (seconds)
CHILD_SECONDS = 400


def make_dir(path: Path, mode: int, owner: int = 0, group: int = 0) -> Path:
    """``path`` made with ``owner``, ``group`` and ``mode`` (umask aside)."""
    path.mkdir()
    os.chown(path, owner, group)
    path.chmod(mode)
    return path


def new_world(prefix: str) -> Path:
    """A fresh directory every user can read (0755), with ``lib/`` (splice and the tests'
    support package, copied: what the children import), ``marks/``, ``sync/``,
    ``results/`` (1777) and the homes ``victim/``, ``attacker/`` and ``other/``."""
    w = Path(tempfile.mkdtemp(prefix=prefix))
    w.chmod(0o755)
    lib = make_dir(w / "lib", 0o755)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "splice", lib / "splice", ignore=skip)
    shutil.copytree(REPO / "tests" / "support", lib / "support", ignore=skip)
    for p in lib.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    for name in ("marks", "sync", "results"):
        make_dir(w / name, 0o1777)
    for name, uid in (("victim", VICTIM), ("attacker", ATTACKER), ("other", OTHER)):
        make_dir(w / name, 0o755, uid, uid)
    (w / "group-gid").write_text(str(GROUP))
    return w


def fake_toolkit(pkgs: Path) -> None:
    """A copy of tileiras's toolkit under ``pkgs`` (``cu13/``: links, and tileiras itself),
    so that the directory the toolkit is in can be any one a test makes."""
    from splice.system import toolchain
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


def child_env(world: Path, uid: int, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a child that plays ``uid``: this one without splice's settings,
    importing from ``world/lib``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPLICE_", "XDG_")) and k not in ("HOME", "TMPDIR")}
    cutile = home / f"cutile-tmp-{uid}-{time.monotonic_ns()}"   # cuTile's, made on import
    make_dir(cutile, 0o700, uid, uid)
    env.update(PYTHONPATH=str(world / "lib"), HOME=str(home), PYTHONDONTWRITEBYTECODE="1",
               CUDA_TILE_TEMP_DIR=str(cutile), **extra)
    return env


def spawn(module: str, role: str, world: Path, uid: int, home: Path, **extra: str):
    """``python -m <module> ROLE WORLD UID`` (``support.shared_machine``,
    ``support.at_use``): it becomes ``uid`` and writes ``results/<role>.json``."""
    return subprocess.Popen([sys.executable, "-m", module, role, str(world), str(uid)],
                            cwd=world, env=child_env(world, uid, home, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def results(world: Path, role: str, proc) -> dict:
    """What the child ``proc`` playing ``role`` recorded, and the end of its output."""
    try:
        out = proc.communicate(timeout=CHILD_SECONDS)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0].decode(errors="replace")
    path = world / "results" / f"{role}.json"
    res = json.loads(path.read_text()) if path.exists() else {}
    res["output"] = out[-4000:]
    return res


def as_user(uid: int, *argv: str, groups: tuple[int, ...] = ()) -> str:
    """Run ``argv`` as ``uid`` (its own group, and ``groups``); its output.

    Raises:
        subprocess.CalledProcessError: it failed.
    """
    return subprocess.run(list(argv), user=uid, group=uid, extra_groups=list(groups),
                          check=True, capture_output=True, text=True, timeout=60).stdout


def wait_for(world: Path, name: str, proc) -> str:
    """What the child ``proc`` said when it reached ``name`` (``sync/<name>.ready``).

    Raises:
        TimeoutError: it ended, or took longer than :data:`CHILD_SECONDS`, before.
    """
    deadline = time.monotonic() + CHILD_SECONDS
    ready = world / "sync" / f"{name}.ready"
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.stdout.read().decode(errors="replace")[-3000:] if proc.stdout else ""
            raise TimeoutError(f"the child never reached {name}: {out}")
        time.sleep(0.05)
    return ready.read_text()


def go(world: Path, name: str) -> None:
    """Let a child waiting at ``name`` go on."""
    (world / "sync" / f"{name}.go").write_text("")


_PROBE = """import os, sys
os.setgroups([])
os.setgid(int(sys.argv[1]))
os.setuid(int(sys.argv[1]))
print([p for p in sys.argv[2:] if not os.access(p, os.R_OK)])
"""


def unusable_why() -> str | None:
    """Why the other uids cannot run splice here (the CUDA toolkit, which a child reads
    after it changed its uid, in a directory only this user can read: a virtual
    environment in a private checkout), or None."""
    from splice.system import toolchain
    if os.geteuid() != 0:
        return "playing other users takes setuid to unused uids: run as root (CI does)"
    inc = toolchain.cuda_include_dir()
    needed = [str(toolchain.tileiras()), str(toolchain.ptxas()),
              *(str(c) for c in toolchain._libnvvm_candidates() if c.exists()),
              *([str(inc / "cuda_fp16.h")] if inc is not None else [])]
    r = subprocess.run([sys.executable, "-c", _PROBE, str(VICTIM), *needed],
                       capture_output=True, text=True, timeout=60, cwd="/")
    unreadable = r.stdout.strip() if r.returncode == 0 else r.stderr.strip()[-300:]
    if unreadable != "[]":
        return (f"another uid cannot read the CUDA toolkit splice runs (in a private "
                f"directory: a virtual environment in a private checkout?): {unreadable}")
    return None
