"""The compiler tools splice runs, and how it runs them.

- **tileiras** lowers Tile IR bytecode to PTX through libnvvm and then runs ``ptxas`` from
  its own directory (``docs/design.md#tileiras-ptxas``). splice runs it from an *overlay*
  directory: a hard link (or copy) of tileiras beside a capturing ``ptxas`` script, every
  other file of the toolkit directory linked in place, so tileiras finds libnvvm and
  libdevice as usual. The capture keeps the PTX, the ``--nv-host`` host-callback object
  and ptxas's flags (``docs/design.md#nv-host``) instead of assembling. A symlinked
  tileiras does not work (it resolves its directory through ``/proc/self/exe``).
- tileiras and ptxas always run with ``CUDA_HOME``/``CUDA_PATH``/``CUDA_ROOT`` removed from
  the environment (another toolkit's libnvvm would be picked up:
  ``docs/design.md#environment``).
- **ptxas** (the real one, beside tileiras) assembles the spliced PTX with the captured
  flags, ``--nv-host`` included: re-assembling is exact (``docs/design.md#nv-host``).
- **NVRTC** (cuda-bindings) compiles CUDA C fragments to relocatable-device-code PTX, and
  **nvJitLink** links: both run in process, in :mod:`splice.system.cuda_libs` (re-exported here).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hashlib
import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from ..errors import (
    SpliceTileirasError,
    SpliceTileirasTimeout,
    SpliceToolchainError,
    SpliceUnsafePathError,
)
from . import forksafe, safe_fs, settings

# NVRTC and nvJitLink moved to splice.system.cuda_libs; their callers (and tests) use them from here
from .cuda_libs import nvjitlink_run as nvjitlink_run
from .cuda_libs import nvrtc_compile as nvrtc_compile
from .cuda_libs import nvrtc_compile_ltoir as nvrtc_compile_ltoir
from .cuda_libs import nvrtc_version as nvrtc_version

_STRIPPED_ENV = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment tileiras and ptxas run in: ours minus CUDA_HOME/CUDA_PATH/CUDA_ROOT
    (``docs/design.md#environment``), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _STRIPPED_ENV}
    env.update(extra)
    return env


@functools.cache
def tileiras() -> Path:
    """The tileiras cuTile itself would run."""
    from . import _cutile
    p = Path(_cutile.tileiras_path())
    if not p.is_file():
        raise SpliceToolchainError(f"tileiras not found at {p}")
    return p


@functools.cache
def ptxas() -> Path:
    """The ptxas tileiras runs: the one beside it (``docs/design.md#tileiras-ptxas``), not
    the one on PATH."""
    p = tileiras().resolve().parent / "ptxas"
    if not p.is_file():
        raise SpliceToolchainError(
            f"ptxas not found beside tileiras ({p}); install cuda-tile[tileiras]")
    return p


def run_version(path: Path) -> str:
    """The version line that a CUDA tool prints for ``--version`` (``... release 13.5, V13.5.37``)."""
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             env=clean_env(), timeout=60)
    except OSError as e:
        raise SpliceToolchainError(f"cannot run {path}: {e}") from None
    lines = [ln for ln in out.stdout.splitlines() if "release" in ln or "V" in ln]
    return (lines[-1] if lines else out.stdout).strip()


def cuda_release(text: str) -> tuple[int, int] | None:
    """The (major, minor) of a CUDA tool's ``--version`` text (``release 13.5, V13.5.37``)."""
    m = re.search(r"release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def tileiras_version() -> str:
    return run_version(tileiras())


@functools.cache
def ptxas_version() -> str:
    return run_version(ptxas())


@functools.cache
def _file_identity(path: Path) -> list:
    """(resolved path, size, mtime_ns) of a file: changes whenever the file is replaced."""
    real = path.resolve()
    st = real.stat()
    return [str(real), st.st_size, st.st_mtime_ns]


def tool_identity(*names: str) -> list:
    """What identifies the tools ``names`` for a cache key, cheaply: ``"tileiras"`` (the
    tileiras binary the overlay runs and the libnvvm beside it), ``"ptxas"``, ``"nvrtc"``,
    ``"nvJitLink"``. Each is the (resolved path, size, mtime_ns) of the files actually used
    -- no subprocess, no import of NVRTC. A library that cannot be located without loading
    it is identified by its version instead (slower, exact).

    Raises:
        SpliceToolchainError: tileiras or ptxas is missing.
    """
    out = []
    for name in names:
        if name == "tileiras":
            # the overlay's hard link (or copy) is the file that runs: same size and mtime
            ran = _live_overlay() / "bin" / "tileiras"
            st = ran.stat()
            out.append([name, str(tileiras().resolve()), st.st_size, st.st_mtime_ns,
                        *[_file_identity(c) for c in _libnvvm_candidates() if c.exists()]])
        elif name == "ptxas":
            out.append([name, *_file_identity(ptxas())])
        else:
            path = _library_path(name)
            out.append([name, *_file_identity(path)] if path is not None else
                       [name, "version", *_library_version(name)])
    return out


@functools.cache
def _library_path(name: str) -> Path | None:
    """The NVRTC / nvJitLink shared library cuda-bindings uses or will load, found the way
    cuda.pathfinder's ``load_nvidia_dynamic_lib`` (which cuda-bindings 13 loads them with)
    finds it, without loading it: one already loaded in the process, else the first found
    in site-packages or conda. None when it would come from the system search (only
    loading tells which file that is). :func:`_unambiguous_library` answers the common
    case without importing cuda.pathfinder (whose import costs 50-150 ms)."""
    quick = _unambiguous_library(name)
    if quick is not None:
        return quick
    try:
        from cuda.pathfinder._dynamic_libs.lib_descriptor import LIB_DESCRIPTORS
        from cuda.pathfinder._dynamic_libs.platform_loader import LOADER
        from cuda.pathfinder._dynamic_libs.search_steps import (
            EARLY_FIND_STEPS,
            SearchContext,
            run_find_steps,
        )
        desc = LIB_DESCRIPTORS[name]
        loaded = LOADER.check_if_already_loaded_from_elsewhere(desc)
        if loaded is not None and loaded.abs_path:
            return Path(loaded.abs_path)
        found = run_find_steps(SearchContext(desc), EARLY_FIND_STEPS)
        return Path(found.abs_path) if found is not None else None
    except (ImportError, AttributeError, KeyError, TypeError):
        # another cuda.pathfinder (its private API moved): identify by version instead
        return None


#: Where cuda.pathfinder looks for each library in site-packages on Linux, and its file
#: names (its ``LIB_DESCRIPTORS[name].site_packages_linux`` / ``linux_sonames``).
_WHEEL_LIBS = {"nvrtc": (("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"), "libnvrtc.so."),
               "nvJitLink": (("nvidia/cu13/lib", "nvidia/nvjitlink/lib"), "libnvJitLink.so.")}


def _unambiguous_library(name: str) -> Path | None:
    """The library cuda.pathfinder would pick when there is no choice to make: on Linux,
    the copy already mapped into this process, else the only copy in site-packages when
    there is exactly one and no conda environment. None otherwise (ask cuda.pathfinder)."""
    if sys.platform != "linux" or name not in _WHEEL_LIBS:
        return None
    dirs, prefix = _WHEEL_LIBS[name]
    try:
        with open("/proc/self/maps") as f:
            mapped = {ln.split(None, 5)[5].strip() for ln in f if ln.count(" ") >= 5 and
                      f"/{prefix}" in ln}
    except (OSError, IndexError):
        return None
    if mapped:
        return Path(mapped.pop()) if len(mapped) == 1 else None
    if os.environ.get("CONDA_PREFIX"):
        return None
    import site
    roots = [*site.getsitepackages(), site.getusersitepackages()]
    found = {p.resolve() for r in roots for d in dirs
             for p in Path(r, d).glob(f"{prefix}[0-9]*") if p.is_file()}
    return found.pop() if len(found) == 1 else None


def _library_version(name: str) -> tuple[int, ...]:
    if name == "nvrtc":
        return nvrtc_version()
    if name == "nvJitLink":
        from cuda.bindings import nvjitlink
        return tuple(nvjitlink.version())
    raise ValueError(f"unknown tool {name!r}")


@functools.cache
def cuda_include_dir() -> Path | None:
    """A directory with the CUDA headers (``cuda_fp16.h``, ``cuda_bf16.h``...): the
    installed ``nvidia.cu13`` wheels' first (they match NVRTC), then tileiras's toolkit,
    ``$CUDA_HOME`` and ``/usr/local/cuda``."""
    candidates = []
    try:
        import nvidia.cu13 as cu13
        candidates += [Path(p) / "include" for p in cu13.__path__]
    except ImportError:
        pass
    try:
        candidates.append(tileiras().resolve().parent.parent / "include")
    except SpliceToolchainError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for c in candidates:
        if (c / "cuda_fp16.h").is_file():
            return c
    return None


# ---------------------------------------------------------------------------------------------
# tileiras overlay

_CAPTURE_SCRIPT = """#!/bin/sh
# splice: stands in for ptxas while tileiras runs; keeps what it would assemble. It runs on
# every kernel's first compile: shell built-ins only, but for one ln (or cp) of its inputs
# (tileiras deletes them when ptxas returns) into the capture directory, under their names.
if [ "$1" = "--version" ]; then exec {real_ptxas} "$@"; fi
d="$SPLICE_CAPTURE_DIR"
if [ -z "$d" ] || [ ! -d "$d" ]; then
  echo "splice capture ptxas: SPLICE_CAPTURE_DIR is not set" >&2; exit 97
fi
set -C   # noclobber: creating call<n>.argv claims the number n, atomically
n=0
until {{ for a in "$@"; do printf '%s\\n' "$a"; done; }} 2>/dev/null >"$d/call$n.argv"; do
  n=$((n + 1))
  if [ "$n" -gt 99 ]; then echo "splice capture ptxas: cannot write to $d" >&2; exit 98; fi
done
ptx=""; host=""; prev=""
for a in "$@"; do
  case "$a" in
    --nv-host=*) host="${{a#--nv-host=}}" ;;
    *.ptx) ptx="$a" ;;
  esac
  if [ "$prev" = "-o" ]; then : >| "$a"; fi
  prev="$a"
done
if [ -z "$ptx" ]; then exit 0; fi
if [ -n "$host" ]; then set -- "$ptx" "$host"; else set -- "$ptx"; fi
ln -f -- "$@" "$d/" 2>/dev/null || {{
  # cp will not copy onto a link ln made before failing on the other input
  for f; do rm -f -- "$d/${{f##*/}}"; done; cp -- "$@" "$d/"; }} || exit 99
exit 0
"""


def _capture_script() -> str:
    """:data:`_CAPTURE_SCRIPT` for this process's real ptxas."""
    return _CAPTURE_SCRIPT.format(real_ptxas=shlex.quote(str(ptxas())))


def _overlay_bases(real: Path) -> list[Path]:
    """Where the overlay may live, best first: on tileiras's filesystem, so that tileiras
    is hard-linked rather than copied (about 100 MB). The cache directory when it is on
    that filesystem, else a directory beside the toolkit (``<toolkit>/../.splice-overlay``),
    then the cache directory. In a shared cache (``$SPLICE_CACHE_TRUST``) each user has
    their own (``toolchain-<uid>``): the overlay is never shared (and a cache its group can
    write is refused by :func:`_overlay_in`)."""
    from .cache import cache_root
    shared = safe_fs.cache_trust().shared
    in_cache = cache_root() / (f"toolchain-{os.geteuid()}" if shared else "toolchain")
    near = real.parent.parent.parent / ".splice-overlay"
    return [in_cache, near] if _same_filesystem(in_cache, real) else [near, in_cache]


def _same_filesystem(directory: Path, file: Path) -> bool:
    d = directory
    while not d.exists() and d != d.parent:
        d = d.parent
    try:
        return d.stat().st_dev == file.stat().st_dev
    except OSError:
        return False


@functools.cache
def overlay() -> Path:
    """Directory laid out like tileiras's own toolkit root, with a capturing ptxas.
    Built once per tileiras binary (keyed by its path, size and mtime), in the first
    of :func:`_overlay_bases` that this user owns (or root does) and no one else can write;
    else in a fresh private temporary directory for this process (one warning). Not a
    cache entry: never counted nor evicted.

    Raises:
        SpliceUnsafePathError: an overlay found in a trusted place is not trusted itself
            (the message names the path to delete).
        SpliceToolchainError: no overlay can be made anywhere.
    """
    real = tileiras().resolve()
    st = real.stat()
    key = hashlib.sha256(f"{real}|{st.st_size}|{st.st_mtime_ns}|v5".encode()).hexdigest()[:16]
    why: list[str] = []
    for base in _overlay_bases(real):
        root = _overlay_in(base, f"overlay-{key}", real, why)
        if root is not None:
            return root
    return _private_overlay(f"overlay-{key}", real, "; ".join(why))


def _overlay_in(base: Path, name: str, real: Path, why: list[str]) -> Path | None:
    """The valid overlay ``name`` in ``base``, found or built; None (the reason appended to
    ``why``) when ``base`` is not trusted or cannot be written."""
    try:
        # PRIVATE, not the cache's trust: a member of a trusted group who can write the
        # shared cache could rename toolchain-<uid> and put their own tileiras there
        safe_fs.check_ancestors(base, "the tileiras overlay")
        safe_fs.private_dir(base, "the tileiras overlay directory")
    except (OSError, SpliceUnsafePathError) as e:
        why.append(f"{base}: {e}")
        return None
    _remove_leftovers(base)
    root = base / name
    if os.path.lexists(root):
        if _valid_overlay(root, real):
            return root
        _discard(root)   # tileiras deleted, truncated or replaced: built again
    try:
        return _build_overlay(root, real)
    except OSError as e:
        why.append(f"{base}: {e.strerror or e}")
        return None


#: An ``overlay-tmp-*`` directory older than this (seconds) was left by a killed build.
STALE_BUILD_SECONDS = 600


def _remove_leftovers(base: Path) -> None:
    """Remove what killed builds left in ``base`` (a trusted directory)."""
    now = time.time()
    for p in base.glob("overlay-tmp-*"):
        try:
            if now - p.lstat().st_mtime > STALE_BUILD_SECONDS:
                shutil.rmtree(p)
        except OSError:
            pass


def _valid_overlay(root: Path, real: Path) -> bool:
    """Whether the overlay ``root`` found on disk can run: its directories and tools
    trusted, its tileiras the same size and mtime as the real one. A capturing ptxas that
    is not splice's is rewritten (an edited or truncated one failed every tileiras run with
    "failed to compile Tile IR program").

    Raises:
        SpliceUnsafePathError: its directory is another user's, or others can write it
            (what is inside a directory of this user's is rebuilt instead).
    """
    tool, script = root / "bin" / "tileiras", root / "bin" / "ptxas"
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode):
        return False
    safe_fs.check(root, st, "the tileiras overlay", safe_fs.PRIVATE)
    for p in (root / "bin", tool, script):   # in a directory of this user's: rebuilt
        try:
            st = p.lstat()
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode) or safe_fs.untrusted_why(st) is not None:
            return False
    real_st, st = real.stat(), tool.stat()
    if (st.st_size, st.st_mtime_ns) != (real_st.st_size, real_st.st_mtime_ns):
        return False
    _check_script(script)
    return True


def _discard(root: Path) -> None:
    """Remove a broken overlay of this user (renamed aside first: atomic for readers)."""
    aside = root.with_name(f"overlay-tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.rename(root, aside)
    except OSError as e:
        raise SpliceToolchainError(
            f"the tileiras overlay {root} is broken and cannot be removed "
            f"({e.strerror or e}): delete it") from None
    shutil.rmtree(aside, ignore_errors=True)


_warned_private = False


def _private_overlay(name: str, real: Path, why: str) -> Path:
    """The overlay in a fresh private temporary directory, removed when the process
    exits; said once in a warning."""
    global _warned_private
    base = Path(tempfile.mkdtemp(prefix="splice-overlay-"))
    atexit.register(shutil.rmtree, base, True)
    if not _warned_private:
        _warned_private = True
        warnings.warn(f"splice: the tileiras overlay cannot be kept ({why}); building it in "
                      f"{base} for this process", RuntimeWarning, stacklevel=4)
    try:
        return _build_overlay(base / name, real)
    except OSError as e:
        raise SpliceToolchainError(f"cannot create the tileiras overlay in {base}: "
                                   f"{e.strerror or e} (and {why})") from None


def _live_overlay() -> Path:
    """:func:`overlay`, built again when it was removed since this process built or found
    it (the cache directory deleted beside a running process, a temporary-directory
    cleaner): one file test per call."""
    root = overlay()
    if not (root / "bin" / "tileiras").is_file():
        overlay.cache_clear()
        root = overlay()
    return root


def _check_script(script: Path) -> None:
    """The capturing ptxas of an overlay found on disk, rewritten (atomically, never
    through a link) when it is not splice's."""
    text = _capture_script()
    try:
        if safe_fs.read_regular(script, 1 << 16, "the capturing ptxas",
                                follow=False).decode() == text:
            return
        safe_fs.write_file(script, text, "the tileiras overlay", executable=True)
    except (OSError, UnicodeDecodeError, SpliceUnsafePathError):
        pass   # unreadable or read-only: tileiras's error says what went wrong


def _build_overlay(root: Path, real: Path) -> Path:
    real_root = real.parent.parent
    tmp = Path(tempfile.mkdtemp(prefix="overlay-tmp-", dir=root.parent))
    try:
        for entry in real_root.iterdir():
            if entry.name != "bin":
                os.symlink(entry, tmp / entry.name)
        (tmp / "bin").mkdir(0o700)
        for entry in real.parent.iterdir():
            if entry.name not in ("tileiras", "ptxas"):
                os.symlink(entry, tmp / "bin" / entry.name)
        try:
            os.link(real, tmp / "bin" / "tileiras")
        except OSError:
            shutil.copy2(real, tmp / "bin" / "tileiras")
            os.chmod(tmp / "bin" / "tileiras", 0o700)
        safe_fs.write_file(tmp / "bin" / "ptxas", _capture_script(), "the tileiras overlay",
                           executable=True)
        try:
            os.replace(tmp, root)
        except OSError:
            # another process finished first: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
            if not _valid_overlay(root, real):
                raise
    except BaseException:   # any failure, an interrupt too: no half-made overlay left
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def _libnvvm_candidates() -> list[Path]:
    root = tileiras().resolve().parent.parent
    return [root / "lib" / "libnvvm.so.4", root / "nvvm" / "lib64" / "libnvvm.so"]


def _missing_libnvvm_hint() -> str:
    cands = _libnvvm_candidates()
    if any(c.exists() for c in cands):
        return ""
    return (f". libnvvm is missing: tileiras looks for it at "
            f"{' or '.join(str(c) for c in cands)} (reinstall cuda-tile[tileiras])")


@dataclasses.dataclass
class Capture:
    """What tileiras would have assembled: its PTX, the ``--nv-host`` object (or None) and
    ptxas's arguments (with tileiras's temporary paths)."""

    ptx: str
    host_object: bytes | None
    ptxas_argv: tuple[str, ...]


def run_tileiras(bytecode: bytes, flags: tuple[str, ...], *, timeout: float | None,
                 what: str) -> Capture:
    """Lower Tile IR bytecode with tileiras, capturing PTX, host object and ptxas flags.

    Raises:
        SpliceTileirasError: tileiras failed (also cuTile's TileCompilerExecutionError).
        SpliceTileirasTimeout: it timed out (also cuTile's TileCompilerTimeoutError).
        SpliceToolchainError: it cannot run, or did not call ptxas exactly once.
        SpliceNotCachedError: ``SPLICE_COMPILE=never``.
    """
    settings.refuse_if_never("tileiras", what)
    ov = _live_overlay()
    with _scratch("splice-tileiras-") as work:
        w = Path(work)
        if "\n" in work:   # the capture's argv is one argument a line
            raise SpliceToolchainError(
                f"cannot run tileiras for {what}: the temporary directory {work!r} has a "
                f"newline in its path; set TMPDIR to a directory without one")
        cap = w / "capture"
        cap.mkdir()
        tmpdir = w / "tmp"
        tmpdir.mkdir()
        src = w / "kernel.tileirbc"
        src.write_bytes(bytecode)
        argv = [str(ov / "bin" / "tileiras"), str(src), "-o", str(w / "kernel.cubin"), *flags]
        env = clean_env(SPLICE_CAPTURE_DIR=str(cap), TMPDIR=str(tmpdir))
        try:
            proc = subprocess.run(argv, capture_output=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SpliceTileirasTimeout(
                f"tileiras exceeded the compile timeout of {timeout}s on {what} "
                f"(CUDA_TILE_COMPILER_TIMEOUT_SEC)", flags=shlex.join(flags)) from None
        except OSError as e:
            raise SpliceToolchainError(f"cannot run tileiras for {what}: {e}") from None
        log = (proc.stdout + proc.stderr).decode(errors="replace")
        if proc.returncode != 0:
            unsupported = re.search(r"--gpu-name option: Cannot find option named '([^']*)'",
                                    log)
            if unsupported:
                raise SpliceToolchainError(
                    f"tileiras cannot compile {what} for {unsupported.group(1)}: it supports "
                    f"{', '.join(tileiras_architectures()) or '(see tileiras --help)'}; pass "
                    f"one of them as arch=", log)
            raise SpliceTileirasError(
                f"tileiras failed (exit {proc.returncode}) on {what}; command: "
                f"{shlex.join(argv[1:])}{_missing_libnvvm_hint()}", log,
                flags=shlex.join(flags))
        calls = sorted(cap.glob("call*.argv"))
        if len(calls) != 1:
            raise SpliceToolchainError(
                f"expected tileiras to run ptxas once for {what}, it ran it {len(calls)} "
                f"times; this tileiras is not one splice supports", log)
        ptxas_argv = tuple(calls[0].read_text().splitlines())
        ptx_path = next((cap / Path(a).name for a in ptxas_argv if a.endswith(".ptx")), None)
        if ptx_path is None or not ptx_path.is_file():
            raise SpliceToolchainError(f"tileiras passed ptxas no PTX file for {what}", log)
        host = next((cap / Path(a[len("--nv-host="):]).name for a in ptxas_argv
                     if a.startswith("--nv-host=")), None)
        if host is not None and not host.is_file():   # its launch callbacks would be lost
            raise SpliceToolchainError(f"the --nv-host object tileiras passed ptxas for "
                                       f"{what} was not kept", log)
        return Capture(ptx_path.read_text(), host.read_bytes() if host else None,
                       ptxas_argv)


@contextlib.contextmanager
def _scratch(prefix: str):
    """A private temporary directory for one tool run (``mkdtemp``: 0700, a name no one
    can predict), removed afterwards by a thread, off the compile's critical path (on a
    2-CPU machine the removal of tileiras's and ptxas's files took 5-11 ms of a 110-160 ms
    first compile). The process waits for the removals at exit."""
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    finally:
        remover = threading.Thread(target=shutil.rmtree, args=(work, True), daemon=True,
                                   name="splice-scratch-removal")
        with _removals_lock:
            _removals[:] = [t for t in _removals if t.is_alive()] + [remover]
        remover.start()


_removals: list[threading.Thread] = []
_removals_lock = forksafe.lock(globals(), "_removals_lock")


@atexit.register
def _wait_for_removals() -> None:
    with _removals_lock:
        pending = list(_removals)
    for t in pending:
        if t.is_alive():
            t.join(timeout=10)


def tileiras_architectures() -> list[str]:
    """The ``--gpu-name`` values tileiras lists in its ``--help`` (empty if it lists none)."""
    try:
        out = subprocess.run([str(tileiras()), "--help"], capture_output=True, timeout=60,
                             env=clean_env()).stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return []
    return re.findall(r"^\s*=(sm_\d+[af]?)\s", out, re.M)


def ptxas_flags(capture: Capture) -> list[str]:
    """tileiras's ptxas flags without the input, output and host-object paths."""
    out = []
    skip = False
    for a in capture.ptxas_argv:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a.endswith(".ptx") or a.startswith("--nv-host="):
            continue
        out.append(a)
    return out


def run_ptxas(ptx: str, flags: list[str], host_object: bytes | None, *,
              timeout: float | None, what: str) -> bytes:
    """Assemble whole-program PTX to a cubin with tileiras's flags and host object.

    Raises:
        SpliceToolchainError: ptxas rejected the PTX; ``.log`` holds its messages.
        SpliceNotCachedError: ``SPLICE_COMPILE=never``.
    """
    settings.refuse_if_never("ptxas", what)
    with _scratch("splice-ptxas-") as work:
        w = Path(work)
        src = w / "kernel.ptx"
        src.write_text(ptx)
        out = w / "kernel.cubin"
        argv = [str(ptxas()), *flags, str(src), "-o", str(out)]
        if host_object is not None:
            host = w / "host.o"
            host.write_bytes(host_object)
            argv.append(f"--nv-host={host}")
        try:
            proc = subprocess.run(argv, capture_output=True, env=clean_env(), timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SpliceToolchainError(f"ptxas exceeded {timeout}s on {what}") from None
        except OSError as e:
            raise SpliceToolchainError(f"cannot run ptxas for {what}: {e}") from None
        log = (proc.stdout + proc.stderr).decode(errors="replace")
        if proc.returncode != 0 or not out.is_file():
            raise SpliceToolchainError(
                f"ptxas rejected the spliced PTX of {what} (exit {proc.returncode})", log)
        return out.read_bytes()


def nvjitlink_link(inputs: list[tuple[str, bytes, str]], target: str, what: str) -> bytes:
    """Link relocatable device code into a cubin with nvJitLink, which must be as new as
    tileiras's ptxas (it reads the kernel's relocatable cubin).

    Raises:
        SpliceToolchainError: nvJitLink is older than ptxas.
        SpliceLinkError: nvJitLink failed (its log attached).
    """
    from cuda.bindings import nvjitlink

    have = tuple(nvjitlink.version())
    need = cuda_release(ptxas_version()) or have
    if have < need:
        raise SpliceToolchainError(
            f"linking {what} with a binary object needs nvJitLink {need[0]}.{need[1]} or newer "
            f"(as new as tileiras's ptxas, whose relocatable cubin it reads); found "
            f"{have[0]}.{have[1]}: pip install 'nvidia-nvjitlink=={need[0]}.{need[1]}.*'")
    return nvjitlink_run([f"-arch={target}"], inputs, "cubin", what)


def nvdisasm() -> Path | None:
    """nvdisasm beside tileiras (the ``nvidia-cuda-nvdisasm`` wheel) or on PATH, if any."""
    cand = tileiras().resolve().parent / "nvdisasm"
    if cand.is_file():
        return cand
    found = shutil.which("nvdisasm")
    return Path(found) if found else None


def disassemble(cubin: bytes) -> str | None:
    """SASS of a cubin (``nvdisasm``), or None when nvdisasm is not installed."""
    tool = nvdisasm()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory(prefix="splice-sass-") as work:
        p = Path(work) / "k.cubin"
        p.write_bytes(cubin)
        proc = subprocess.run([str(tool), "-c", str(p)], capture_output=True, text=True,
                              env=clean_env())
        if proc.returncode != 0:
            raise SpliceToolchainError("nvdisasm failed", proc.stdout + proc.stderr)
        return proc.stdout


@functools.cache
def gpu_arch() -> str | None:
    """The compute capability of GPU 0 as ``"sm_XY"``, or None without a GPU or driver."""
    try:
        from cuda.bindings import driver
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, dev = driver.cuDeviceGet(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        attr = driver.CUdevice_attribute
        err, major = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        err2, minor = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        if err != driver.CUresult.CUDA_SUCCESS or err2 != driver.CUresult.CUDA_SUCCESS:
            return None
        return f"sm_{major}{minor}"
    except (ImportError, OSError, RuntimeError):   # no cuda.bindings, or no libcuda
        return None

