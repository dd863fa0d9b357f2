"""Files and directories another user could have placed: what splice trusts, and how it
reads and writes without being led elsewhere (``docs/security.md``).

- A directory or file is *trusted* when the current user or root owns it and no one else
  can write it. A shared cache (``$SPLICE_CACHE_TRUST``, :func:`cache_trust`) also trusts
  the users and groups it names, for the cache and its entries only: never for what splice
  runs (the tileiras overlay).
- splice creates its directories 0700 and its files 0600 (0770/0640 in a shared cache).
- Writes go to a fresh temporary file (``O_EXCL``/``O_NOFOLLOW``) in a trusted directory,
  opened as a file descriptor whose owner and mode were checked, then ``rename``\\ d over
  the name: a symlink planted at the name is replaced, never followed.
- Reads take regular files only, opened without blocking (a FIFO does not hang) and up to a
  size limit (``/dev/zero`` does not exhaust memory).

Anything else is a :class:`~splice.errors.SpliceUnsafePathError` naming the path, its
owner and mode, and the fix.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import fcntl
import functools
import grp
import linecache
import os
import pwd
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

from ..errors import SpliceUnsafePathError
from . import forksafe, settings

#: The largest source, header or fragment file splice reads (a ``/dev/zero`` link stops here).
MAX_SOURCE_BYTES = 1 << 30
#: How long a lock is waited for before giving up (seconds).
LOCK_TIMEOUT_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class Trust:
    """Owners besides the current user and root, and groups that may write, that a
    directory or file is trusted with."""

    uids: frozenset[int] = frozenset()
    gids: frozenset[int] = frozenset()

    @property
    def shared(self) -> bool:
        return bool(self.uids or self.gids)


#: Only the current user and root.
PRIVATE = Trust()


def cache_trust() -> Trust:
    """The users and groups ``$SPLICE_CACHE_TRUST`` names (comma-separated: a user name or
    uid, ``@group`` name or ``@gid``); :data:`PRIVATE` when unset.

    Raises:
        SpliceUnsafePathError: a name that is no user or group.
    """
    return _parse_trust(settings.cache_trust())


@functools.cache
def _parse_trust(text: str) -> Trust:
    uids: set[int] = set()
    gids: set[int] = set()
    for item in filter(None, (t.strip() for t in text.split(","))):
        group = item.startswith("@")
        name = item[1:] if group else item
        try:
            ident = int(name) if name.isdecimal() else (
                grp.getgrnam(name).gr_gid if group else pwd.getpwnam(name).pw_uid)
        except KeyError:
            raise SpliceUnsafePathError(
                f"SPLICE_CACHE_TRUST={text!r}: {'group' if group else 'user'} {name!r} does "
                f"not exist; name users (alice) and groups (@gpu-team) that exist") from None
        (gids if group else uids).add(ident)
    return Trust(frozenset(uids), frozenset(gids))


def describe(st: os.stat_result) -> str:
    """``"owned by alice (uid 1001), mode 0775"``."""
    try:
        name = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        name = "no user"
    return f"owned by {name} (uid {st.st_uid}), mode {stat.S_IMODE(st.st_mode):04o}"


def untrusted_why(st: os.stat_result, trust: Trust = PRIVATE) -> str | None:
    """Why ``st`` (of a directory or file) is not trusted, or None when it is. A trusted
    group's file is trusted whoever owns it (only its members, or writers of a directory of
    the group's, which is trusted only when no one else can write it, give it that group)."""
    if st.st_uid not in (os.geteuid(), 0) and st.st_uid not in trust.uids and \
            st.st_gid not in trust.gids:
        return "another user owns it"
    if st.st_mode & stat.S_IWOTH:
        return "every user can write it"
    if st.st_mode & stat.S_IWGRP and st.st_gid not in trust.gids:
        return "its group can write it"
    return None


def check(path: Path | str, st: os.stat_result, what: str, trust: Trust = PRIVATE) -> None:
    """Refuse ``path`` unless trusted.

    Args:
        path: the path, for the message.
        st (os.stat_result): its stat (of an open descriptor where there is one).
        what (str): what it is to splice ("the cache directory"), for the message.
        trust (Trust): who besides the user and root is trusted.

    Raises:
        SpliceUnsafePathError: naming the path, its owner and mode, and the fix.
    """
    why = untrusted_why(st, trust)
    if why is not None:
        raise SpliceUnsafePathError(
            f"splice refuses {what} {path}: it is {describe(st)}, and {why}; "
            f"{_fix(path, st, why, trust)}, or point splice elsewhere (docs/security.md)")


def _fix(path: Path | str, st: os.stat_result, why: str, trust: Trust) -> str:
    """What makes ``path`` trusted, for the cause ``why`` (:func:`untrusted_why`)."""
    if "owns" in why:
        return "remove it (another user's file is never used)"
    if "every user" in why:
        return f"chmod o-w {path}"
    if not trust.gids:
        return f"chmod g-w {path}"
    group = _group_name(st.st_gid)
    named = sorted(_group_name(g) for g in trust.gids)
    return (f"its group {group} (gid {st.st_gid}) is not one SPLICE_CACHE_TRUST names "
            f"({', '.join('@' + g for g in named)}): chgrp {named[0]} {path}, and chmod g+s "
            f"the cache directory so that directories made in it keep its group "
            f"(docs/security.md#sharing-a-cache); or chmod g-w {path}")


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


#: How :func:`walk` opens each directory: a descriptor that names it (no read needed),
#: never through a link at the name
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: The most links :func:`walk` follows in one path (the kernel's own limit)
_MAX_LINKS = 40


def walk(path: Path | str, what: str, trust: Trust = PRIVATE, *, create: bool = False,
         ancestors: bool = False, place: bool = False) -> int:
    """A descriptor (``O_PATH``) of the directory ``path``, reached one name at a time from
    ``/`` (``openat``-style: what is checked is what the descriptor holds, no name is
    resolved twice). A symbolic link on the way is followed only when you or root own it
    (another user's link, in ``/tmp`` say, is never followed); the directory itself must
    be trusted. The caller closes the descriptor.

    Args:
        path: the directory (relative: to the current directory, once, here).
        what (str): what it is to splice ("the cache directory"), for the message.
        trust (Trust): who besides the user and root is trusted.
        create (bool): make the directories that are missing, 0700 (2770 in a directory
            of a trusted group, a shared cache's: its group, which the files in them keep).
        ancestors (bool): also refuse a directory on the way that another user could
            rename entries of: one neither trusted nor sticky (``/tmp``: users rename only
            their own entries) with you or root as owner. For what another program opens
            by name after splice checked it (tileiras its ``ptxas``, NVRTC its PCH).
        place (bool): ``path`` is not trusted with what is in it, only a place for
            entries of yours (``$TMPDIR``): refused, as a directory on the way with
            ``ancestors``, when another user could rename an entry of it.

    Returns:
        int: the descriptor, ``O_PATH | O_DIRECTORY``: for ``dir_fd=`` and ``fstat``.

    Raises:
        SpliceUnsafePathError: another user's link on the way, an untrusted directory (at
            the end, or on the way with ``ancestors``), or ``path`` is not a directory.
        OSError: a directory is missing (without ``create``), cannot be made, or a name on
            the way is not a directory.
    """
    todo = _names(os.path.join(os.getcwd(), os.fspath(path)))
    fd, here, links = os.open("/", _DIR_FLAGS), "/", 0
    try:
        st = os.fstat(fd)
        while todo:
            if ancestors:
                check_no_renames(here, st, f"a directory above {what} {path} at", trust)
            name = todo.pop()
            lst = _lstat_or_make(fd, name, st, trust, create)
            if stat.S_ISLNK(lst.st_mode):
                links += 1
                target = _followed(fd, name, lst, os.path.join(here, name), links, what)
                todo.extend(_names(target))
                if target.startswith("/"):
                    os.close(fd)
                    fd, here = os.open("/", _DIR_FLAGS), "/"
                    st = os.fstat(fd)
                continue
            if not todo and not stat.S_ISDIR(lst.st_mode):
                raise SpliceUnsafePathError(f"splice refuses {what} {path}: it is not a "
                                            f"directory")
            nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)   # a link put there meanwhile: ENOTDIR
            os.close(fd)
            fd, here = nfd, os.path.normpath(os.path.join(here, name))
            st = os.fstat(fd)
        if place:
            check_no_renames(path, st, what, trust)
        else:
            check(path, st, what, trust)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _names(path: str) -> list[str]:
    """The names of ``path``, last first (a stack for :func:`walk`)."""
    return [c for c in path.split("/") if c not in ("", ".")][::-1]


def _lstat_or_make(fd: int, name: str, parent: os.stat_result, trust: Trust,
                   create: bool) -> os.stat_result:
    """The ``lstat`` of ``name`` in the directory ``fd``; made first when missing and
    ``create``: 0700, or 2770 with ``parent``'s group when that is a trusted group (a
    shared cache: a ``chmod 0770`` would clear the set-group-ID bit it inherited, and the
    members' entries in it would then have their own primary groups)."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o700, dir_fd=fd)
    except FileExistsError:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)   # another process made it
    made = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                   dir_fd=fd)
    try:
        if parent.st_gid in trust.gids:   # in a shared cache's directory: its group's
            os.fchown(made, -1, parent.st_gid)
            os.fchmod(made, 0o2770)
        else:
            os.fchmod(made, 0o700)   # (a umask took no bit of 0700; the mode is stated)
        return os.fstat(made)
    finally:
        os.close(made)


def _followed(fd: int, name: str, st: os.stat_result, shown: str, links: int,
              what: str) -> str:
    """The target of the link ``name`` in ``fd``, when it may be followed: you or root own
    it (in a directory others can write, only its owner can replace it: sticky, or checked
    as an ancestor)."""
    if st.st_uid not in (os.geteuid(), 0):
        raise SpliceUnsafePathError(
            f"splice refuses {what} at {shown}: it is a symbolic link {describe(st)}, and "
            f"another user's link is never followed; remove it, or point splice elsewhere "
            f"(docs/security.md)")
    if links > _MAX_LINKS:
        raise OSError(errno.ELOOP, f"too many links on the way to {what}", shown)
    return os.readlink(name, dir_fd=fd)


def check_no_renames(directory: Path | str, st: os.stat_result, what: str,
                     trust: Trust = PRIVATE) -> None:
    """Refuse ``directory`` (``st`` its stat) when another user could rename an entry of
    it (and put hers in its place): not trusted, and not sticky with you or root as owner
    (``/tmp``: users rename only their own entries).

    Raises:
        SpliceUnsafePathError: as :func:`check`, ``what`` naming it.
    """
    why = untrusted_why(st, trust)
    if why is None or st.st_mode & stat.S_ISVTX and "owns" not in why:
        return
    fix = "point splice elsewhere" if "owns" in why else \
        f"chmod +t {directory} (as /tmp), or point splice elsewhere"
    raise SpliceUnsafePathError(
        f"splice refuses {what} {directory}: it is {describe(st)}, and {why}"
        f"{'' if 'owns' in why else ', without the sticky bit'}: another user could rename "
        f"an entry of it and put hers in its place; {fix} (docs/security.md)")


def private_dir(path: Path, what: str, trust: Trust = PRIVATE, *,
                ancestors: bool = False) -> Path:
    """``path`` created (with its missing parents) 0700 (2770 in a shared cache's
    directory), or checked when it exists, as :func:`walk` does.

    Args:
        path (Path): the directory.
        what (str): what it is to splice, for the message.
        trust (Trust): who besides the user and root is trusted.
        ancestors (bool): also refuse it under a directory others could rename entries of
            (:func:`walk`).

    Returns:
        Path: ``path``.

    Raises:
        SpliceUnsafePathError: it exists and is not trusted, is not a directory, or
            another user's link is on the way.
        OSError: it cannot be created.
    """
    os.close(walk(path, what, trust, create=True, ancestors=ancestors))
    return Path(path)


@contextlib.contextmanager
def open_dir(path: Path, what: str, trust: Trust = PRIVATE):
    """A file descriptor of the trusted directory ``path`` (:func:`walk`: what is checked
    is what is written into)."""
    fd = walk(path, what, trust)
    try:
        yield fd
    finally:
        os.close(fd)


def declaring_dir(file: str) -> Path | None:
    """The resolved directory of ``file``, the file a declaration is in (a code object's
    ``co_filename``), against which the declaration's relative names are resolved; None
    when it is in no file: a name that is not an absolute path of a regular file
    (``<stdin>``, ``<string>``), or one IPython gave a notebook cell
    (``/tmp/ipykernel_<pid>/<hash>.py``, registered in :mod:`linecache` without a modification
    time: a file of that name is no cell of yours, and another user can create it).
    Never the current directory.

    Example:
        >>> declaring_dir("<stdin>") is None
        True
    """
    cached = linecache.cache.get(file)
    if cached is not None and len(cached) == 4 and cached[1] is None:
        return None   # code IPython compiled from a cell, not read from this file
    path = Path(file)
    if not path.is_absolute() or not path.is_file():
        return None
    return path.resolve().parent


#: Where :func:`system_program` takes a program from: the system's own directories
SYSTEM_BIN = ("/usr/bin", "/bin")


def system_program(name: str) -> str | None:
    """The absolute path of the system's program ``name`` (``ln``, ``c++filt``): the first
    of :data:`SYSTEM_BIN` that has it as a file root owns and no one else can write; None
    when none has. For the programs splice runs of its own accord (never looked up in
    ``PATH``, where a directory someone else can write may come first)."""
    for d in SYSTEM_BIN:
        path = os.path.join(d, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022:
            return path
    return None


#: A directory of :func:`process_dir` older than this (seconds) is removed whoever made it
#: (a process alive that long finds it gone at its next use, and makes another)
STALE_PROCESS_DIR_SECONDS = 24 * 3600


def temporary_parent() -> Path:
    """The temporary directory (``$TMPDIR``, :func:`tempfile.gettempdir`), where splice
    makes directories of its own (:func:`work_dir`, :func:`process_dir`), checked now: a
    tool reads and writes files there by name, so it must be one where no other user can
    rename your entries (and put hers in their place), it and every directory above it:
    trusted, or sticky with you or root as owner (``/tmp``).

    Raises:
        SpliceUnsafePathError: another user could; the message names the directory.
    """
    parent = Path(tempfile.gettempdir())
    os.close(walk(parent, "the temporary directory ($TMPDIR)", ancestors=True, place=True))
    return parent


@contextlib.contextmanager
def work_dir(prefix: str):
    """A fresh directory of yours (0700, ``<prefix><random>``) in the checked temporary
    directory (:func:`temporary_parent`) for one run of a tool, removed after by a thread,
    off the compile's critical path (on a 2-CPU machine the removal of tileiras's and
    ptxas's files took 5-11 ms of a 110-160 ms first compile); the process waits for the
    removals at exit.

    Raises:
        SpliceUnsafePathError: another user could rename it in ``$TMPDIR``.
    """
    work = tempfile.mkdtemp(prefix=prefix, dir=temporary_parent())
    try:
        yield Path(work)
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


def process_dir(prefix: str, parent: Path | None = None) -> Path:
    """A fresh directory of this process: 0700, an unpredictable name
    (``<prefix><pid>-<random>``, :func:`tempfile.mkdtemp`) in ``parent`` (default: the
    temporary directory), removed at exit by this process only (a child made by
    ``os.fork`` inherits the exit handler, not the directory). Those that dead processes
    left (``kill -9``, a fork child's ``os._exit``) are removed first (:func:`sweep`).

    Args:
        prefix (str): the name's start (``"pch-"``).
        parent (Path | None): where (a trusted directory; default
            :func:`temporary_parent`).

    Returns:
        Path: the directory.

    Raises:
        SpliceUnsafePathError: the temporary directory is one where another user could
            rename it.
        OSError: it cannot be made.
    """
    parent = Path(parent) if parent is not None else temporary_parent()
    sweep(parent, prefix)
    made = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
    atexit.register(_remove_own, made, os.getpid())
    return made


def _remove_own(directory: Path, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(directory, ignore_errors=True)


def sweep(parent: Path, prefix: str) -> int:
    """Remove the directories :func:`process_dir` made in ``parent`` with ``prefix`` for
    processes that are gone, or longer ago than :data:`STALE_PROCESS_DIR_SECONDS`: yours
    only, real directories only (never a link), and only where no other user can rename
    entries (:func:`check_no_renames`: there she could give a directory of yours such a
    name, for splice to delete). Returns the bytes freed."""
    freed = 0
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    try:
        os.close(walk(parent, "a directory splice sweeps", place=True, ancestors=True))
        found = [(e, m) for e in os.scandir(parent) if (m := pattern.match(e.name))]
    except (OSError, SpliceUnsafePathError):
        return 0
    for entry, m in found:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or \
                _alive(int(m.group(1))) and \
                time.time() - st.st_mtime < STALE_PROCESS_DIR_SECONDS:
            continue
        freed += tree_bytes(Path(entry.path))
        shutil.rmtree(entry.path, ignore_errors=True)
    return freed


def _alive(pid: int) -> bool:
    """Whether ``pid`` may still be the process that made a directory of yours (a process
    of another user is not: the pid was reused)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError, OverflowError):
        return False
    return True


def tree_bytes(directory: Path) -> int:
    """The bytes of the regular files under ``directory`` (links not followed)."""
    total = 0
    for top, _, files in os.walk(directory):
        for f in files:
            try:
                st = os.lstat(os.path.join(top, f))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def write_file(path: Path, data: bytes | str, what: str, *, trust: Trust = PRIVATE,
               executable: bool = False, sync: bool = False) -> None:
    """Write ``path`` whole: a fresh temporary file in its (trusted) directory renamed over
    it; a link at ``path`` is replaced, not followed. 0600 (0700 ``executable``; group
    read in a shared cache).

    Args:
        path (Path): the file.
        data (bytes | str): its whole content (str: UTF-8).
        what (str): what its directory is to splice, for the message.
        trust (Trust): who besides the user and root is trusted.
        executable (bool): a program (the capturing ptxas).
        sync (bool): on disk before it is renamed (cache entries).

    Raises:
        SpliceUnsafePathError: the directory is not trusted.
        OSError: it cannot be written.
    """
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    mode = (0o700 if executable else 0o600) | (0o040 if trust.gids else 0)
    with open_dir(path.parent, what, trust) as d:
        tmp = f".tmp-{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                os.fchmod(f.fileno(), mode)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path.name, src_dir_fd=d, dst_dir_fd=d)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=d)
            raise


def read_regular(path: Path | str, limit: int, what: str, *, trust: Trust | None = None,
                 follow: bool = True, dir_fd: int | None = None) -> bytes:
    """The bytes of the regular file ``path``.

    Args:
        path: the file.
        limit (int): the most bytes it may have.
        what (str): what it is to splice, for the message.
        trust (Trust | None): also refuse a file this does not trust.
        follow (bool): False: refuse a symlink.
        dir_fd (int | None): the directory (a descriptor, :func:`open_dir`) ``path``'s
            last name is opened in, instead of ``path`` itself.

    Returns:
        bytes: its content.

    Raises:
        SpliceUnsafePathError: not a regular file (a FIFO, a device), larger than
            ``limit``, or not trusted.
        OSError: it cannot be opened.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        # the type before it is opened: opening a FIFO to read releases a writer waiting
        # on it (O_NONBLOCK only keeps the open from waiting); the fstat below checks the
        # file that was opened
        name, at = (path, None) if dir_fd is None else (Path(path).name, dir_fd)
        first = os.stat(name, dir_fd=at, follow_symlinks=follow)
        if not stat.S_ISREG(first.st_mode) and not (stat.S_ISLNK(first.st_mode) and not follow):
            raise SpliceUnsafePathError(not_regular(path, first, what))
        fd = os.open(name, flags, dir_fd=at)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise SpliceUnsafePathError(f"splice refuses {what} {path}: it is a symlink; "
                                        f"remove it") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpliceUnsafePathError(not_regular(path, st, what))
        if trust is not None:
            check(path, st, what, trust)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise SpliceUnsafePathError(f"splice refuses {what} {path}: it is larger than "
                                    f"{limit} bytes")
    return data


def not_regular(path, st: os.stat_result, what: str) -> str:
    """The refusal of ``path`` (its stat ``st``), which is not a regular file.

    Example:
        >>> import os
        >>> not_regular("/dev/null", os.stat("/dev/null"), "the file")[:44]
        'splice refuses the file /dev/null: it is a c'
    """
    kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a character device"
            if stat.S_ISCHR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
            else "a socket" if stat.S_ISSOCK(st.st_mode) else "a directory"
            if stat.S_ISDIR(st.st_mode) else "not a regular file")
    return (f"splice refuses {what} {path}: it is {kind}, not a regular file, and splice "
            f"reads regular files only (a FIFO or a device could block or never end); give "
            f"a file")


@contextlib.contextmanager
def locked(path: Path, what: str, trust: Trust = PRIVATE,
           timeout: float | None = None):
    """Holds ``flock`` of the lock file ``path`` (created 0600, never through a link, in a
    trusted directory).

    Args:
        path (Path): the lock file.
        what (str): what it is to splice, for the message.
        trust (Trust): who besides the user and root is trusted (0660 when a group is).
        timeout (float | None): the most seconds to wait (default
            :data:`LOCK_TIMEOUT_SECONDS`).

    Raises:
        SpliceUnsafePathError: the lock file or its directory is not trusted.
        TimeoutError: the lock stayed held; the message names it.
        OSError: it cannot be created.
    """
    path = Path(path)
    mode = 0o660 if trust.gids else 0o600
    with open_dir(path.parent, what, trust) as d:
        fd = os.open(path.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, mode, dir_fd=d)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpliceUnsafePathError(f"splice refuses {what} {path}: not a regular file")
        check(path, st, what, trust)
        _wait(fd, path, LOCK_TIMEOUT_SECONDS if timeout is None else timeout)
        try:
            yield
        finally:
            # released, not only closed: the lock belongs to the open file description,
            # which a child forked meanwhile shares; its copy of the descriptor would hold
            # the lock for ever after this close (its first cache store then waited 60 s)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _wait(fd: int, path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(errno.ETIMEDOUT, f"the lock {path} stayed held for "
                                   f"{timeout:g} s (by another splice, or another "
                                   f"program)") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
