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

import contextlib
import dataclasses
import errno
import fcntl
import functools
import grp
import os
import pwd
import secrets
import stat
import time
from pathlib import Path

from ..errors import SpliceUnsafePathError
from . import settings

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
        fix = ("remove it (another user's file is never used)" if "owns" in why else
               f"chmod go-w {path}")
        raise SpliceUnsafePathError(
            f"splice refuses {what} {path}: it is {describe(st)}, and {why}; {fix}, or point "
            f"splice elsewhere (docs/security.md)")


def check_ancestors(path: Path, what: str, trust: Trust = PRIVATE) -> None:
    """Refuse ``path`` when one of the directories above it that exist could be renamed or
    replaced by another user: not trusted, and not sticky (``/tmp``: each user can rename
    only their own entries). What splice runs from ``path`` then stays what it checked.

    Args:
        path (Path): the directory whose ancestors are checked (not itself).
        what (str): what ``path`` is to splice, for the message.
        trust (Trust): who besides the user and root is trusted.

    Raises:
        SpliceUnsafePathError: naming the ancestor.
    """
    for d in Path(os.path.abspath(path)).parents:
        try:
            st = os.stat(d)
        except FileNotFoundError:
            continue   # made by splice, 0700
        why = untrusted_why(st, trust)
        if why is not None and not (st.st_mode & stat.S_ISVTX and "owns" not in why):
            check(d, st, f"a directory above {what} at", trust)


def private_dir(path: Path, what: str, trust: Trust = PRIVATE) -> Path:
    """``path`` created (with its missing parents) 0700 (0770 in a shared cache), or
    checked when it exists.

    Args:
        path (Path): the directory.
        what (str): what it is to splice, for the message.
        trust (Trust): who besides the user and root is trusted.

    Returns:
        Path: ``path``.

    Raises:
        SpliceUnsafePathError: it exists and is not trusted, or is not a directory.
        OSError: it cannot be created.
    """
    mode = 0o770 if trust.gids else 0o700
    missing = []
    p = Path(path)
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
            os.chmod(d, mode)   # umask took bits a shared cache needs
        except FileExistsError:
            pass   # another process made it: checked below
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise SpliceUnsafePathError(f"splice refuses {what} {path}: it is not a directory")
    check(path, st, what, trust)
    return Path(path)


@contextlib.contextmanager
def open_dir(path: Path, what: str, trust: Trust = PRIVATE):
    """A file descriptor of the trusted directory ``path`` (checked on the descriptor, so
    what is checked is what is written into)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        check(path, os.fstat(fd), what, trust)
        yield fd
    finally:
        os.close(fd)


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
                 follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``.

    Args:
        path: the file.
        limit (int): the most bytes it may have.
        what (str): what it is to splice, for the message.
        trust (Trust | None): also refuse a file this does not trust.
        follow (bool): False: refuse a symlink.

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
        first = os.stat(path) if follow else os.lstat(path)
        if not stat.S_ISREG(first.st_mode) and not (stat.S_ISLNK(first.st_mode) and not follow):
            raise SpliceUnsafePathError(not_regular(path, first, what))
        fd = os.open(path, flags)
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
        yield
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
                                   f"{timeout:g} s (by another splice, or another program)") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
