"""The users of ``tests/test_checked_at_use.py``, run by children that changed uid:
``python -m support.at_use ROLE WORLD UID``. A victim compiles, stops at a named point
(:func:`pause`) while the test acts as another user (re-points a link, re-creates a
removed directory), then compiles again in the same process; each writes what happened to
``WORLD/results/<role>.json``. Written against splice's public behaviour and the internals
every version has (``toolchain.overlay``), so that the same script shows the attacks
working on a splice without the checks."""

from __future__ import annotations

import atexit
import os
import subprocess
import tempfile
import time
from pathlib import Path

import cuda.tile as ct

import splice
from splice.system import toolchain
from support.shared_machine import (
    FORGED_TAIL,
    attempt,
    build,
    env,
    main,
    marks,
    plant_overlay,
    toolkit,
)
from support.shared_machine import SIG as SIG
from support.two_users import CHILD_SECONDS

#: SCALE in the victim's header (3.0f) and in the one planted in the working directory (7.0f)
GENUINE_SCALE, PLANTED_SCALE = "0f40400000", "0f40E00000"


def pause(world: Path, name: str, said: str = "") -> None:
    """Say that this child reached ``name`` (with ``said``), and wait for the test's go."""
    (world / "sync" / f"{name}.ready").write_text(said)
    deadline = time.monotonic() + CHILD_SECONDS
    while not (world / "sync" / f"{name}.go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no go at {name}")
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# the attacker


def attacker_overlays(world: Path) -> dict:
    """Her overlays of the toolkits the victims use, each with a capturing ptxas that
    leaves a mark, under ``attacker/evil-<toolkit>/``: named as splice names an overlay
    of that toolkit."""
    own = Path(os.environ["SPLICE_CACHE_DIR"])
    names = {}
    for pkgs, mark in (("pkgs-sticky", "repointed"), ("pkgs-root", "recreated")):
        with toolkit(world / pkgs), env(SPLICE_CACHE_DIR=str(own / pkgs)):
            ov = toolchain.overlay()
        plant_overlay(ov, world / "attacker" / f"evil-{pkgs}" / ov.name, world / "marks" / mark)
        names[pkgs] = ov.name
    return names


# ---------------------------------------------------------------------------------------------
# the victims


def victim_repointed(world: Path) -> dict:
    """A toolkit in a sticky directory every user can write (``pkgs-sticky``), its
    ``.splice-overlay`` the attacker's link to a directory of the victim's: a compile,
    then (after the attacker re-points the link at her overlay) another."""
    with toolkit(world / "pkgs-sticky"), env(SPLICE_CACHE_DIR=str(world / "ro-cache")):
        first = attempt(lambda: build(str(world), "a").symbol)
        pause(world, "repoint")
        second = attempt(lambda: build(str(world), "b").symbol)
    return {"first": first, "second": second, "marks": marks(world)}


def victim_forked(world: Path) -> dict:
    """The overlay in a private temporary directory (no cache or toolkit directory can hold
    it); a child of ``os.fork`` that exits normally (its exit handlers run); then (after a
    temporary-directory cleaner removed the overlay, if it was still there, and the
    attacker made her own at its name) another compile."""
    tempfile.tempdir = str(world / "tmp-private")
    try:
        with toolkit(world / "pkgs-root"), env(SPLICE_CACHE_DIR=str(world / "ro-cache")):
            first = attempt(lambda: build(str(world), "a").symbol)
            private = toolchain.overlay()
            child = os.fork()
            if child == 0:
                atexit._run_exitfuncs()   # what a normal exit runs
                os._exit(0)
            os.waitpid(child, 0)
            kept = private.is_dir()
            pause(world, "recreate", str(private))
            second = attempt(lambda: build(str(world), "b").symbol)
    finally:
        tempfile.tempdir = None
    return {"first": first, "kept": kept, "second": second, "marks": marks(world)}


def _scaled(world: Path):
    """A kernel calling an extern declared from text (in this file) that includes
    "scale.h", found in the victim's ``include_dirs``."""
    scaled = splice.extern(source='#include "scale.h"\nextern "C" __device__ float '
                                  'scaled(float x) { return SCALE * x; }\n',
                           include_dirs=[str(world / "victim-inc")], name="scaled",
                           signature="float32(float32)")(lambda x: None)

    @splice.kernel
    def kernel_scaled(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=scaled(ct.load(x, index=(ct.bid(0),),
                                                             shape=(TILE,))))
    return kernel_scaled


def victim_cwd(world: Path) -> dict:
    """A compile run from a directory every user can write (``scratch``)."""
    os.chdir(world / "scratch")
    with env(SPLICE_CACHE_DIR=str(world / "victim" / "cwd-cache")):
        b = splice.build(_scaled(world), SIG, "sm_90", keep_stages=True)
    return {"genuine": GENUINE_SCALE in b.spliced_ptx, "planted": PLANTED_SCALE in b.spliced_ptx}


def victim_tmpdir(world: Path) -> dict:
    """A compile with ``$TMPDIR`` a directory every user can write, not sticky
    (``shared-tmp``: a team scratch directory), stopped when ptxas has written the cubin
    into its work directory there (while another user renames that directory and puts
    her own in its place), then on: whether the cubin built is hers."""
    run = subprocess.run

    def paused(argv, *args, **kwargs):
        proc = run(argv, *args, **kwargs)
        out = Path(argv[argv.index("-o") + 1]) if "-o" in argv else Path()
        if out.parent.name.startswith("splice-ptxas-"):   # ptxas's cubin, not tileiras's
            pause(world, "swap", str(out.parent))
        return proc
    tempfile.tempdir = str(world / "shared-tmp")
    subprocess.run = paused
    try:
        with env(SPLICE_CACHE_DIR=str(world / "victim" / "tmpdir-cache")):
            return build(str(world), "a").cubin.endswith(FORGED_TAIL)
    finally:
        subprocess.run = run
        tempfile.tempdir = None


def team(world: Path) -> dict:
    """A build in the cache that ``$SPLICE_CACHE_DIR`` and ``$SPLICE_CACHE_TRUST`` name."""
    b = build(str(world), "a")
    return {"from_cache": b.from_cache}


ROLES = {
    "attacker-overlays": [attacker_overlays],
    "victim-repointed": [victim_repointed],
    "victim-forked": [victim_forked],
    "victim-cwd": [victim_cwd],
    "victim-tmpdir": [victim_tmpdir],
    "team-first": [team],
    "team-second": [team],
}


if __name__ == "__main__":
    main(ROLES)
