"""The *overlay* tileiras runs from (``docs/design.md#tileiras-ptxas``,
``docs/security.md``): a directory laid out like tileiras's toolkit, with tileiras hard-linked
(or copied) into its own ``bin/`` beside a capturing ``ptxas`` script, every other file of
the toolkit linked in place, so that tileiras finds libnvvm and libdevice as usual. A
symlinked tileiras does not work (it resolves its directory through ``/proc/self/exe``).

Where it is kept, and how it is checked before each run (:func:`checked_tileiras`: reached
from ``/`` through descriptors, run through the descriptor checked), is what makes it safe
on a shared machine. :mod:`splice.system.toolchain` runs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shlex
import shutil
import stat
import tempfile
import time
import warnings
from pathlib import Path

from ..errors import SpliceToolchainError, SpliceUnsafePathError
from . import safe_fs

_CAPTURE_SCRIPT = """#!/bin/sh
# splice: stands in for ptxas while tileiras runs; keeps what it would assemble. It runs on
# every kernel's first compile: shell built-ins only, but for one ln (or cp) of its inputs
# (tileiras deletes them when ptxas returns) into the capture directory, under their names.
# Each program it runs is named by its absolute path: none is looked up in PATH.
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
{ln} -f -- "$@" "$d/" 2>/dev/null || {{
  # cp will not copy onto a link ln made before failing on the other input
  for f; do {rm} -f -- "$d/${{f##*/}}"; done; {cp} -- "$@" "$d/"; }} || exit 99
exit 0
"""


def capture_script(real_ptxas: str, **tools: str) -> str:
    """:data:`_CAPTURE_SCRIPT` for ``real_ptxas`` (the ptxas beside tileiras),
    with ``ln``, ``cp`` and ``rm`` by absolute path (default: the system's,
    :func:`splice.system.safe_fs.system_program`: a program of that name in a directory
    on your PATH that someone else can write would otherwise run as you at every first
    compile).

    Raises:
        SpliceToolchainError: the system has no ``ln``, ``cp`` or ``rm`` of root's.
    """
    paths = {t: tools.get(t) or safe_fs.system_program(t) for t in ("ln", "cp", "rm")}
    missing = [t for t, p in paths.items() if p is None]
    if missing:
        raise SpliceToolchainError(
            f"splice's capturing ptxas needs {', '.join(missing)}: none in "
            f"{' or '.join(safe_fs.SYSTEM_BIN)} that root owns and only root can write")
    return _CAPTURE_SCRIPT.format(real_ptxas=shlex.quote(real_ptxas),
                                  **{t: shlex.quote(str(p)) for t, p in paths.items()})


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


def found(real: Path, real_ptxas: str) -> Path:
    """The overlay of the tileiras ``real`` (its ptxas ``real_ptxas``): a directory laid out
    like tileiras's own toolkit root, with a capturing ptxas. Built once per tileiras binary
    (keyed by its path, size and mtime), in the first of :func:`_overlay_bases` that this
    user owns (or root does), no one else can write and no other user can rename a
    directory above (:func:`splice.system.safe_fs.walk`); else in a fresh private temporary
    directory for this process (one warning). One process builds it; others wait for it (a
    lock on the key). Not a cache entry: never counted nor evicted.

    Raises:
        SpliceUnsafePathError: an overlay found in a trusted place is not trusted itself
            (the message names the path to delete).
        SpliceToolchainError: no overlay can be made anywhere.
    """
    st = real.stat()
    key = hashlib.sha256(f"{real}|{st.st_size}|{st.st_mtime_ns}|v6".encode()).hexdigest()[:16]
    script = capture_script(real_ptxas)
    safe_fs.sweep(Path(tempfile.gettempdir()), PRIVATE_PREFIX)   # those killed processes left
    why = [f"one changed while this process used it: {changed[-1]}"] if changed else []
    for base in [] if changed else _overlay_bases(real):
        root = _overlay_in(base, f"overlay-{key}", real, script, why)
        if root is not None:
            return root
    return _private_overlay(f"overlay-{key}", real, script, "; ".join(why))


#: The start of a private overlay's directory name: ``<prefix><pid>-<random>``
PRIVATE_PREFIX = "splice-overlay-"
#: What changed under this process in an overlay it ran (then it builds private ones only:
#: :func:`distrust`)
changed: list[str] = []


def distrust(root: Path, why: Exception) -> None:
    """Say (once) that the overlay ``root`` changed while this process used it: from now
    on :func:`found` builds one in a new private directory."""
    if not changed:
        warnings.warn(f"splice: the tileiras overlay {root} changed while this process used "
                      f"it ({why}); building a new one in a private directory",
                      RuntimeWarning, stacklevel=4)
    changed.append(str(why))


def _overlay_in(base: Path, name: str, real: Path, script: str,
                why: list[str]) -> Path | None:
    """The valid overlay ``name`` in ``base``, found or built (under a lock on ``name``:
    other processes wait, then find it); None (the reason appended to ``why``) when
    ``base`` is not trusted or cannot be written."""
    try:
        # PRIVATE, not the cache's trust: a member of a trusted group who can write the
        # shared cache could rename toolchain-<uid> and put their own tileiras there
        safe_fs.private_dir(base, "the tileiras overlay directory", ancestors=True)
    except (OSError, SpliceUnsafePathError) as e:
        why.append(f"{base}: {e}")
        return None
    try:
        with _build_lock(base / f"{name}.lock"):
            _remove_leftovers(base)
            root = base / name
            if os.path.lexists(root):
                if _valid_overlay(root, real, script):
                    return root
                _discard(root)   # tileiras deleted, truncated or replaced: built again
            return _build_overlay(root, real, script)
    except OSError as e:
        why.append(f"{base}: {e.strerror or e}")
        return None


@contextlib.contextmanager
def _build_lock(path: Path):
    """Holds the lock ``path`` while an overlay is found or built; a lock that stays held
    (a stuck process) is given up after :data:`splice.system.safe_fs.LOCK_TIMEOUT_SECONDS`:
    the build then races (each builds aside and renames; the last finds the first's)."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(safe_fs.locked(path, "the tileiras overlay directory"))
        except TimeoutError:
            pass
        yield


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


def _valid_overlay(root: Path, real: Path, script: str) -> bool:
    """Whether the overlay ``root`` found on disk can run (:func:`checked_tileiras`). A
    capturing ptxas that is not ``script`` is rewritten (an edited or truncated one failed
    every tileiras run with "failed to compile Tile IR program").

    Raises:
        SpliceUnsafePathError: its directory is another user's, or others can write it
            (what is inside a directory of this user's is rebuilt instead).
    """
    try:
        os.close(checked_tileiras(root, real))
    except (Changed, FileNotFoundError):
        return False
    _check_script(root / "bin" / "ptxas", script)
    return True


class Changed(Exception):
    """An overlay is not what splice built: a link, a file of another user, another
    tileiras."""


#: What :func:`checked_tileiras` opens each directory of an overlay with: never through
#: a link; ``O_PATH``: a descriptor to check and to run through
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def checked_tileiras(root: Path, real: Path) -> int:
    """A descriptor (``O_PATH``) of the overlay's tileiras, reached from ``/`` one checked
    directory at a time (:func:`splice.system.safe_fs.walk`): the directories above
    ``root`` trusted or sticky, and links on the way yours; ``root``, ``bin/``, ``lib/``,
    ``bin/tileiras`` and ``bin/ptxas`` no links, yours (or root's) and no one else can
    write them; tileiras the size and mtime of ``real``. Running the descriptor
    (``/proc/self/fd/N``) runs the file checked, and tileiras, which finds ptxas and
    libnvvm through ``/proc/self/exe``, finds them beside it by a path no other user can
    change.

    Raises:
        Changed: one of them is not so.
        FileNotFoundError: one is missing (removed: an overlay is made again).
        SpliceUnsafePathError: ``root`` or a directory above it is not trusted.
    """
    fds = [safe_fs.walk(root.parent, "the tileiras overlay directory", ancestors=True)]
    try:
        fds.append(_opened(fds[0], root.name, root, os.O_DIRECTORY))
        safe_fs.check(root, os.fstat(fds[1]), "the tileiras overlay")   # named: delete it
        fds.append(_opened(fds[1], "bin", root, os.O_DIRECTORY))
        _trusted(os.fstat(fds[2]), stat.S_ISDIR, root / "bin")
        _trusted(os.stat("lib", dir_fd=fds[1], follow_symlinks=False), stat.S_ISDIR,
                 root / "lib")
        _trusted(os.stat("ptxas", dir_fd=fds[2], follow_symlinks=False), stat.S_ISREG,
                 root / "bin" / "ptxas")
        tool = _opened(fds[2], "tileiras", root, 0)
        try:
            st, want = os.fstat(tool), real.stat()
            _trusted(st, stat.S_ISREG, root / "bin" / "tileiras")
            if (st.st_size, st.st_mtime_ns) != (want.st_size, want.st_mtime_ns):
                raise Changed(f"{root / 'bin' / 'tileiras'} is not {real}")
        except BaseException:
            os.close(tool)
            raise
        return tool
    finally:
        for fd in fds:
            os.close(fd)


def _opened(directory: int, name: str, root: Path, flags: int) -> int:
    """``name`` in ``directory`` opened ``O_PATH``, never through a link."""
    try:
        return os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | flags,
                       dir_fd=directory)
    except FileNotFoundError:
        raise
    except OSError as e:   # ENOTDIR: a link or a file where a directory belongs
        raise Changed(f"{name} in {root}: {e.strerror}") from None


def _trusted(st: os.stat_result, kind, path: Path) -> None:
    """Raise :class:`Changed` unless ``st`` is of ``kind`` (``stat.S_ISDIR``...), not a
    link, and yours or root's that no one else can write."""
    if not kind(st.st_mode):
        raise Changed(f"{path} is not a {'directory' if kind is stat.S_ISDIR else 'file'}")
    why = safe_fs.untrusted_why(st)
    if why is not None:
        raise Changed(f"{path} is {safe_fs.describe(st)}, and {why}")


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


def _private_overlay(name: str, real: Path, script: str, why: str) -> Path:
    """The overlay in a fresh private temporary directory of this process
    (:func:`splice.system.safe_fs.process_dir`: removed when it exits, or by a later
    process when it was killed); said once in a warning."""
    global _warned_private
    try:
        base = safe_fs.process_dir(PRIVATE_PREFIX)
        safe_fs.private_dir(base, "the tileiras overlay directory", ancestors=True)
        root = _build_overlay(base / name, real, script)
    except OSError as e:
        raise SpliceToolchainError(f"cannot create the tileiras overlay in "
                                   f"{tempfile.gettempdir()}: {e.strerror or e} (and "
                                   f"{why})") from None
    if not _warned_private:
        _warned_private = True
        warnings.warn(f"splice: the tileiras overlay cannot be kept ({why}); building it in "
                      f"{base} for this process", RuntimeWarning, stacklevel=4)
    return root


def _check_script(path: Path, script: str) -> None:
    """The capturing ptxas of an overlay found on disk, rewritten (atomically, never
    through a link) when it is not ``script``."""
    try:
        if safe_fs.read_regular(path, 1 << 16, "the capturing ptxas",
                                follow=False).decode() == script:
            return
        safe_fs.write_file(path, script, "the tileiras overlay", executable=True)
    except (OSError, UnicodeDecodeError, SpliceUnsafePathError):
        pass   # unreadable or read-only: tileiras's error says what went wrong


def _build_overlay(root: Path, real: Path, script: str) -> Path:
    """The overlay ``root``: built aside (``overlay-tmp-*``) and renamed into place. Its
    ``bin/`` and ``lib/`` are directories of its own (links to the toolkit's files in
    them), tileiras a hard link (or a copy) of ``real``, ptxas the capturing script."""
    real_root = real.parent.parent
    tmp = Path(tempfile.mkdtemp(prefix="overlay-tmp-", dir=root.parent))
    try:
        for entry in real_root.iterdir():
            if entry.name not in ("bin", "lib"):
                os.symlink(entry, tmp / entry.name)
        for sub, own in (("bin", ("tileiras", "ptxas")), ("lib", ())):
            (tmp / sub).mkdir(0o700)
            for entry in (real_root / sub).iterdir() if (real_root / sub).is_dir() else ():
                if entry.name not in own:
                    os.symlink(entry, tmp / sub / entry.name)
        try:
            os.link(real, tmp / "bin" / "tileiras")
        except OSError:
            shutil.copy2(real, tmp / "bin" / "tileiras")
            os.chmod(tmp / "bin" / "tileiras", 0o700)
        safe_fs.write_file(tmp / "bin" / "ptxas", script, "the tileiras overlay",
                           executable=True)
        try:
            os.replace(tmp, root)
        except OSError:
            # another process finished first: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
            if not _valid_overlay(root, real, script):
                raise
    except BaseException:   # any failure, an interrupt too: no half-made overlay left
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root
