"""Content-keyed disk cache of linked kernels and compiled fragments.

The key (:func:`key_of`) is a SHA-256 over everything that changes the output: for a kernel,
its Tile IR bytecode and tileiras flags, every fragment's bytes and compile options, the
target architecture and the identity of tileiras, libnvvm and ptxas (for a CUDA C fragment,
of NVRTC; for LTO-IR and binary objects, of nvJitLink): see
:func:`splice.system.toolchain.tool_identity`. :func:`load` and :func:`store` add
:func:`code_identity`, a hash of splice's own source files, to every key, so an entry made
by other splice code is never served. Nothing that merely moves (a file path, a line number
of the kernel) is in it.

An entry is one file: a magic line, a JSON header, then the payload, with the header holding
the SHA-256 of its meta and the payload. It is written to a temporary file (``.tmp-*``) in
the same directory and ``os.replace``\\ d into place, so a reader sees either no entry or a
whole one; a file that fails its checksum (torn by a crash, edited, truncated) is deleted
and rebuilt.

The cache is bounded: when a store takes the entries past ``$SPLICE_CACHE_MAX_BYTES``
(default 4 GiB), the least recently *used* entries (a hit refreshes an entry's mtime) are
deleted until they total at most 90% of it; the entry just stored is kept even when it alone
is larger. A running byte count (``.size``, under ``flock`` of ``.lock``) spares a store the
scan of the whole cache until the limit is reached. Deleting is an ``unlink``: a reader
that opened the entry still reads all of it, a later one misses.
Temporary files of writers in progress are never touched (a writer that died leaves one,
removed after :data:`STALE_TEMP_SECONDS`).

The directory is ``$SPLICE_CACHE_DIR``, else ``$XDG_CACHE_HOME/splice``, else
``~/.cache/splice`` (without a home directory, a private temporary one, with one warning).
A cache directory that cannot be written makes splice compile without caching, with one
warning. On a shared machine (``docs/security.md``, :mod:`splice.system.safe_fs`) the cache's
directories are made 0700 and its files 0600; a directory or entry another user owns or can
write is refused, unless ``$SPLICE_CACHE_TRUST`` names that user or group; files are read
only when regular and written only through a fresh temporary file, never through a link.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import time
import warnings
from pathlib import Path

from ..errors import SpliceUnsafePathError
from . import identity, safe_fs, settings

_MAGIC = b"splice-cache-v2\n"  # v2: the checksum covers the meta
_warned_readonly = False
#: A temporary file older than this (seconds) was left by a writer that died; removed.
STALE_TEMP_SECONDS = 600
#: The default of ``$SPLICE_CACHE_MAX_BYTES``.
DEFAULT_MAX_BYTES = 4 << 30
#: Directories under the cache root that hold no entries (the tileiras overlay; in a shared
#: cache, each user's is ``toolchain-<uid>``).
_NOT_ENTRIES = ("toolchain",)
#: The start of the name of a process's directory of NVRTC's precompiled headers
#: (``pch-<pid>-<random>``, :mod:`splice.system.nvrtc_pch`): counted against the bound,
#: never evicted, removed by the process at exit or, when it was killed, by a later one.
PCH_PREFIX = "pch-"


def cache_root() -> Path:
    """``$SPLICE_CACHE_DIR`` (``~`` expanded: a value set from Python or a ``.env`` file
    is not expanded by a shell), else ``$XDG_CACHE_HOME/splice``, else
    ``~/.cache/splice``."""
    env = settings.cache_dir()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "splice"
    try:
        return Path.home() / ".cache" / "splice"
    except RuntimeError:   # no $HOME and no passwd entry (a container run with -u)
        return _temporary_root()


@functools.cache
def _temporary_root() -> Path:
    """A private temporary cache for this process (removed when it exits, or by a later
    one when it was killed: :func:`splice.system.safe_fs.process_dir`), said once in a
    warning."""
    root = safe_fs.process_dir("splice-cache-")
    warnings.warn(f"splice: no home directory (HOME unset, uid {os.getuid()} has no passwd "
                  f"entry); caching in {root} for this process only: set SPLICE_CACHE_DIR "
                  f"to keep compiled kernels", RuntimeWarning, stacklevel=3)
    return root


def _trusted_root() -> Path:
    """:func:`cache_root`, refused when it exists and is not trusted.

    Raises:
        SpliceUnsafePathError: another user owns it or can write it.
    """
    root = cache_root()
    try:
        os.close(safe_fs.walk(root, "the cache directory", safe_fs.cache_trust()))
    except OSError:
        pass   # missing (made by a store), or no directory (then stores warn)
    return root


def max_bytes() -> int:
    """``$SPLICE_CACHE_MAX_BYTES`` (a byte count; default :data:`DEFAULT_MAX_BYTES`). A value
    that is not a non-negative integer gives one warning and the default."""
    env = settings.cache_max_bytes()
    if env.isdecimal():  # not isdigit: int() refuses "²"
        return int(env)
    if env:
        _warn_bad_limit(env)
    return DEFAULT_MAX_BYTES


@functools.cache
def _warn_bad_limit(value: str) -> None:
    warnings.warn(f"splice: SPLICE_CACHE_MAX_BYTES={value!r} is not a byte count; using "
                  f"{DEFAULT_MAX_BYTES}", RuntimeWarning, stacklevel=3)


def code_identity() -> str:
    """SHA-256 of every ``*.py`` file of the imported splice package (relative path and
    bytes), taken when splice was imported: the code that runs is the code that was imported
    (:mod:`splice.system.identity`, which also refuses to load a module changed since)."""
    return identity.CODE_IDENTITY


def key_of(*parts) -> str:
    """SHA-256 hex digest of a sequence of bytes/str/JSON-able parts (length-prefixed)."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, str):
            b = p.encode()
        elif isinstance(p, (bytes, bytearray)):
            b = bytes(p)
        else:
            b = json.dumps(p, sort_keys=True, default=str).encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _entry_path(kind: str, key: str) -> Path:
    full = key_of(code_identity(), kind, key)
    return _trusted_root() / kind / full[:2] / f"{full}.bin"


def entry_file(kind: str, name: str) -> Path:
    """The file of the entry ``name`` (the SHA-256 hex digest :func:`store` names it by)
    of ``kind``.

    Raises:
        ValueError: ``kind`` or ``name`` is not one :func:`store` could have made.
        SpliceUnsafePathError: the cache directory is not trusted.
    """
    if not _KIND.fullmatch(kind) or not _holds_entries(kind) or not _ENTRY_NAME.fullmatch(name):
        raise ValueError(f"not a cache entry: {kind}/{name}")
    return _trusted_root() / kind / name[:2] / f"{name}.bin"


def entry_limit() -> int:
    """The most bytes an entry file may have to be read (a larger one is not splice's)."""
    return max(max_bytes(), 1 << 30)


def load(kind: str, key: str) -> tuple[dict, bytes] | None:
    """The (header, payload) stored under ``key``, or None. A hit marks the entry used; a
    corrupt entry is removed.

    Raises:
        SpliceUnsafePathError: the cache directory is not trusted (``docs/security.md``).
    """
    hit = read(_entry_path(kind, key))
    return None if hit is None else (hit[0]["meta"], hit[1])


def read(path: Path, touch: bool = True) -> tuple[dict, bytes] | None:
    """The (header, payload) of the entry file ``path``, or None when it is missing (an
    entry may be evicted at any time) or corrupt (then it is removed). ``touch`` marks it
    used (listing the cache does not). An entry that is a link, not a regular file, or
    written by a user the cache does not trust, or in a directory the cache does not
    trust (reached one name at a time: :func:`splice.system.safe_fs.open_dir`; a file
    has the group of a set-group-ID directory whoever writes it) is a miss (and left
    alone)."""
    try:
        with safe_fs.open_dir(path.parent, "the cache directory", safe_fs.cache_trust()) as d:
            return _read_in(d, path, touch)
    except (OSError, SpliceUnsafePathError):
        return None


def _read_in(directory: int, path: Path, touch: bool) -> tuple[dict, bytes] | None:
    """:func:`read` of ``path`` in its checked ``directory`` (a descriptor)."""
    try:
        data = safe_fs.read_regular(path, entry_limit(), "the cache entry",
                                    trust=safe_fs.cache_trust(), follow=False,
                                    dir_fd=directory)
    except (OSError, SpliceUnsafePathError):
        return None
    try:
        header, payload = decode(path.stem, data)
    except ValueError:
        try:
            os.unlink(path.name, dir_fd=directory)
        except OSError:
            pass
        return None
    if touch:
        try:   # used now: last to be evicted
            os.utime(path.name, dir_fd=directory, follow_symlinks=False)
        except OSError:
            pass  # evicted meanwhile, or a read-only cache
    return header, payload


def decode(name: str, data: bytes) -> tuple[dict, bytes]:
    """The (header, payload) of an entry file's bytes ``data``, whose file is named
    ``name`` (``<name>.bin``).

    Raises:
        ValueError: not an entry of that name, or its checksum fails (torn, edited).
    """
    if not data.startswith(_MAGIC):
        raise ValueError("not a splice cache entry")
    try:
        nl = data.index(b"\n", len(_MAGIC))
        header = json.loads(data[len(_MAGIC):nl])
    except ValueError:   # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError("its header is not JSON") from None
    payload = data[nl + 1:]
    if not isinstance(header, dict) or header.get("key") != name or \
            header.get("size") != len(payload) or not isinstance(header.get("meta"), dict):
        raise ValueError("its header does not describe it")
    if header.get("sha256") != _digest(header["meta"], payload):
        raise ValueError("its checksum fails")
    return header, payload


def encode(name: str, meta: dict, payload: bytes) -> bytes:
    """The bytes of the entry file ``<name>.bin`` holding ``meta`` and ``payload``, stamped
    with the splice code that wrote it (``code``: :func:`code_identity`)."""
    header = json.dumps({"key": name, "size": len(payload), "code": code_identity(),
                         "sha256": _digest(meta, payload), "meta": meta},
                        sort_keys=True).encode()
    return _MAGIC + header + b"\n" + payload


def _digest(meta: dict, payload: bytes) -> str:
    """SHA-256 of the meta (used on a hit as much as the payload) and the payload."""
    m = json.dumps(meta, sort_keys=True).encode()
    return hashlib.sha256(len(m).to_bytes(8, "little") + m + payload).hexdigest()


def store(kind: str, key: str, meta: dict, payload: bytes) -> bool:
    """Write an entry atomically; when the entries now pass :func:`max_bytes`, evict the
    least recently used (never this one). Returns False (after one warning per process)
    when the cache directory cannot be written.

    Raises:
        SpliceUnsafePathError: the cache directory, or one below it, is not trusted.
    """
    return _store_at(_entry_path(kind, key), meta, payload)


def store_entry(kind: str, name: str, meta: dict, payload: bytes) -> bool:
    """:func:`store` of an entry known by its file's name (``name``: the SHA-256 hex digest
    :func:`store` makes of the key and splice's code identity, a pack's member), with the
    same trust rules, atomicity and accounting.

    Raises:
        ValueError: ``kind`` or ``name`` is not one :func:`store` could have made.
        SpliceUnsafePathError: the cache directory, or one below it, is not trusted.
    """
    return _store_at(entry_file(kind, name), meta, payload)


def _store_at(path: Path, meta: dict, payload: bytes) -> bool:
    """:func:`store` at the entry file ``path``."""
    global _warned_readonly
    data = encode(path.stem, meta, payload)
    try:
        _cache_dirs(path.parent)
        # not fsync'ed (5-16 ms a store on a loaded disk, in every first compile): after a
        # power loss an entry is whole or fails its checksum (read() removes it)
        safe_fs.write_file(path, data, "the cache directory", trust=safe_fs.cache_trust())
    except OSError as e:
        if not _warned_readonly:
            _warned_readonly = True
            warnings.warn(f"splice: cannot write the cache directory {cache_root()} ({e}); "
                          f"compiling without caching", RuntimeWarning, stacklevel=2)
        return False
    _remove_stale_temps(path.parent)
    _account(len(data), keep=path)
    return True


def _cache_dirs(directory: Path) -> None:
    """The cache root, the kind's directory and ``directory`` (an entry's), created 0700
    (0770 shared) or checked.

    Raises:
        SpliceUnsafePathError: one of them is not trusted.
    """
    root = cache_root()
    trust = safe_fs.cache_trust()
    for d in (root, directory.parent, directory):
        safe_fs.private_dir(d, "the cache directory", trust)


@contextlib.contextmanager
def _locked():
    """Holds ``<root>/.lock`` (``flock``, 0600 in the 0700 root) for the byte count, at most
    :data:`splice.system.safe_fs.LOCK_TIMEOUT_SECONDS`; without locks (some network filesystems),
    or past the timeout (one warning naming the lock), runs unlocked: evicting concurrently
    is safe, only the count may be off."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(safe_fs.locked(cache_root() / ".lock", "the cache lock",
                                               safe_fs.cache_trust()))
        except TimeoutError as e:
            _warn_lock(str(e.strerror))
        except OSError:
            pass
        yield


@functools.cache
def _warn_lock(why: str) -> None:
    warnings.warn(f"splice: {why}; counting the cache's size without it", RuntimeWarning,
                  stacklevel=4)


def _read_ledger(ledger: Path) -> int | None:
    try:
        return int(safe_fs.read_regular(ledger, 64, "the cache size file",
                                        trust=safe_fs.cache_trust(), follow=False))
    except (OSError, ValueError, SpliceUnsafePathError):
        return None


def _write_ledger(ledger: Path, total: int) -> None:
    try:
        safe_fs.write_file(ledger, str(total), "the cache directory",
                           trust=safe_fs.cache_trust())
    except OSError:
        pass


def _account(added: int, keep: Path | None) -> None:
    """Add a stored entry's bytes to the running count in ``<root>/.size``; when the count
    passes the limit (or is missing), evict down to 90% of it by a full scan, which also
    recounts. The count never underestimates what was stored (an entry removed by someone
    else still counts until the next scan), so the entries stay within the limit, and a
    store scans the whole cache only about once per tenth of the limit stored."""
    limit = max_bytes()
    ledger = cache_root() / ".size"
    with _locked():
        total = _read_ledger(ledger)
        if total is not None:
            total += added
        if total is None or total > limit:
            total = _prune(limit - limit // 10, keep)[2]
        _write_ledger(ledger, total)


def add_bytes(added: int) -> None:
    """Count ``added`` more bytes of the cache directory against the bound (NVRTC's
    precompiled headers, written there by NVRTC, not by :func:`store`)."""
    _account(added, keep=None)


def _remove_stale_temps(directory: Path) -> None:
    now = time.time()
    for p in directory.glob(".tmp-*"):
        try:
            if now - p.lstat().st_mtime > STALE_TEMP_SECONDS:
                p.unlink()
        except OSError:
            pass


def entries(kind: str | None = None) -> list[Path]:
    """The entry files (of one kind, or all), sorted by path. Temporary files of writers
    in progress and the tileiras overlay are not entries."""
    root = cache_root()
    kinds = [kind] if kind else [p.name for p in _directories(root)]
    out = []
    for k in kinds:
        if _holds_entries(k):
            out.extend(sorted(p for d in _directories(root / k) if len(d.name) == 2
                              for p in d.glob("*.bin") if _is_entry_name(p)))
    return out


def _holds_entries(kind: str) -> bool:
    """Whether the cache's directory ``kind`` holds entries (not a tileiras overlay's, nor
    a process's precompiled headers)."""
    return kind not in _NOT_ENTRIES and not kind.startswith(("toolchain-", PCH_PREFIX))


def _directories(parent: Path) -> list[Path]:
    """The directories in ``parent``, never a link to one (what :func:`prune` deletes in
    stays in the cache)."""
    try:
        return [Path(e.path) for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


_ENTRY_NAME = re.compile(r"[0-9a-f]{64}")
#: The kinds of entry splice stores (``kernel``, ``fragment``, ``stages``, ``walk``...)
_KIND = re.compile(r"[a-z][a-z-]{0,31}")


def _is_entry_name(p: Path) -> bool:
    """``<xx>/<sha256 hex>.bin`` with ``xx`` its first two digits, as :func:`_entry_path`
    names it: with ``$SPLICE_CACHE_DIR`` a shared directory (``/tmp``, ``~/.cache``),
    another program's ``*/*/*.bin`` is never counted, evicted or cleared."""
    return bool(_ENTRY_NAME.fullmatch(p.stem)) and p.parent.name == p.stem[:2]


def _stats(paths) -> list[tuple[int, int, Path]]:
    """(mtime in ns, size, path) of each path still there."""
    out = []
    for p in paths:
        try:
            st = p.lstat()
        except OSError:
            continue  # evicted by another process meanwhile
        out.append((st.st_mtime_ns, st.st_size, p))
    return out


def size() -> tuple[int, int]:
    """(number of entries, the bytes of the entries and of NVRTC's precompiled headers
    of running processes)."""
    st = _stats(entries())
    return len(st), sum(s for _, s, _ in st) + pch_bytes()


def pch_bytes() -> int:
    """The bytes of the precompiled-header directories of running processes in the cache
    directory (:data:`PCH_PREFIX`); those that killed processes left are removed first."""
    root = cache_root()
    safe_fs.sweep(root, PCH_PREFIX)
    return sum(safe_fs.tree_bytes(d) for d in _directories(root)
               if d.name.startswith(PCH_PREFIX))


def prune(limit: int) -> tuple[int, int]:
    """Delete least recently used entries until the rest total at most ``limit`` bytes.
    Returns (entries removed, bytes freed). Safe while other processes read, store and
    prune: deleting is atomic, a file already gone is skipped, temporary files of writers
    are not entries."""
    with _locked():
        removed, freed, total = _prune(limit, None)
        _write_ledger(cache_root() / ".size", total)
    return removed, freed


def _prune(limit: int, keep: Path | None) -> tuple[int, int, int]:
    """:func:`prune` without the lock, never deleting ``keep``; also returns the bytes
    left."""
    st = sorted(_stats(entries()), key=lambda e: (e[0], str(e[2])))
    total = sum(s for _, s, _ in st) + pch_bytes()   # not evicted: counted
    removed = freed = 0
    for _, s, p in st:
        if total <= limit:
            break
        if p == keep:
            continue
        try:
            p.unlink()
        except FileNotFoundError:
            pass  # another process evicted it: it no longer counts either
        except OSError:
            continue
        else:
            removed += 1
            freed += s
        total -= s
    return removed, freed, total
