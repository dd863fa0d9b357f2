"""Content-keyed disk cache of linked kernels and compiled fragments.

The key (:func:`key_of`) is a SHA-256 over everything that changes the output: for a kernel,
its Tile IR bytecode and tileiras flags, every fragment's bytes and compile options, the
target architecture and the identity of tileiras, libnvvm and ptxas (for a CUDA C fragment,
of NVRTC; for LTO-IR and binary objects, of nvJitLink): see
:func:`splice.toolchain.tool_identity`. :func:`load` and :func:`store` add
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
``~/.cache/splice``. A cache directory that cannot be written makes splice compile without
caching, with one warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import tempfile
import time
import warnings
from pathlib import Path

from . import identity, settings

_MAGIC = b"splice-cache-v2\n"  # v2: the checksum covers the meta
_warned_readonly = False
#: A temporary file older than this (seconds) was left by a writer that died; removed.
STALE_TEMP_SECONDS = 600
#: The default of ``$SPLICE_CACHE_MAX_BYTES``.
DEFAULT_MAX_BYTES = 4 << 30
#: Directories under the cache root that hold no entries (the tileiras overlay).
_NOT_ENTRIES = ("toolchain",)


def cache_root() -> Path:
    """``$SPLICE_CACHE_DIR`` (``~`` expanded: a value set from Python or a ``.env`` file
    is not expanded by a shell), else ``$XDG_CACHE_HOME/splice``, else
    ``~/.cache/splice``."""
    env = settings.cache_dir()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "splice"


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
    (:mod:`splice.identity`, which also refuses to load a module changed since)."""
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
    return cache_root() / kind / full[:2] / f"{full}.bin"


def load(kind: str, key: str) -> tuple[dict, bytes] | None:
    """The (header, payload) stored under ``key``, or None. A hit marks the entry used; a
    corrupt entry is removed."""
    hit = read(_entry_path(kind, key))
    return None if hit is None else (hit[0]["meta"], hit[1])


def read(path: Path, touch: bool = True) -> tuple[dict, bytes] | None:
    """The (header, payload) of the entry file ``path``, or None when it is missing (an
    entry may be evicted at any time) or corrupt (then it is removed). ``touch`` marks it
    used (listing the cache does not)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        if not data.startswith(_MAGIC):
            raise ValueError("bad magic")
        nl = data.index(b"\n", len(_MAGIC))
        header = json.loads(data[len(_MAGIC):nl])
        payload = data[nl + 1:]
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
        if header.get("key") != path.stem or header.get("size") != len(payload) or \
                not isinstance(header.get("meta"), dict) or \
                header.get("sha256") != _digest(header["meta"], payload):
            raise ValueError("checksum mismatch")
    except (ValueError, json.JSONDecodeError):
        try:
            path.unlink()
        except OSError:
            pass
        return None
    if touch:
        try:
            os.utime(path)  # used now: last to be evicted
        except OSError:
            pass  # evicted meanwhile, or a read-only cache
    return header, payload


def _digest(meta: dict, payload: bytes) -> str:
    """SHA-256 of the meta (used on a hit as much as the payload) and the payload."""
    m = json.dumps(meta, sort_keys=True).encode()
    return hashlib.sha256(len(m).to_bytes(8, "little") + m + payload).hexdigest()


def store(kind: str, key: str, meta: dict, payload: bytes) -> bool:
    """Write an entry atomically; when the entries now pass :func:`max_bytes`, evict the
    least recently used (never this one). Returns False (after one warning per process)
    when the cache directory cannot be written."""
    global _warned_readonly
    path = _entry_path(kind, key)
    header = json.dumps({"key": path.stem, "size": len(payload),
                         "sha256": _digest(meta, payload), "meta": meta},
                        sort_keys=True).encode()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + header + b"\n" + payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if not _warned_readonly:
            _warned_readonly = True
            warnings.warn(f"splice: cannot write the cache directory {cache_root()} ({e}); "
                          f"compiling without caching", RuntimeWarning, stacklevel=2)
        return False
    _remove_stale_temps(path.parent)
    _account(len(_MAGIC) + len(header) + 1 + len(payload), keep=path)
    return True


@contextlib.contextmanager
def _locked():
    """Holds ``<root>/.lock`` (``flock``) for the byte count; without locks (some network
    filesystems) runs unlocked: evicting concurrently is safe, only the count may be off."""
    fd = None
    try:
        fd = os.open(cache_root() / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        pass
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _account(added: int, keep: Path) -> None:
    """Add a stored entry's bytes to the running count in ``<root>/.size``; when the count
    passes the limit (or is missing), evict down to 90% of it by a full scan, which also
    recounts. The count never underestimates what was stored (an entry removed by someone
    else still counts until the next scan), so the entries stay within the limit, and a
    store scans the whole cache only about once per tenth of the limit stored."""
    limit = max_bytes()
    ledger = cache_root() / ".size"
    with _locked():
        try:
            total = int(ledger.read_text()) + added
        except (OSError, ValueError):
            total = None
        if total is None or total > limit:
            total = _prune(limit - limit // 10, keep)[2]
        try:
            ledger.write_text(str(total))
        except OSError:
            pass


def _remove_stale_temps(directory: Path) -> None:
    now = time.time()
    for p in directory.glob(".tmp-*"):
        try:
            if now - p.stat().st_mtime > STALE_TEMP_SECONDS:
                p.unlink()
        except OSError:
            pass


def entries(kind: str | None = None) -> list[Path]:
    """The entry files (of one kind, or all), sorted by path. Temporary files of writers
    in progress and the tileiras overlay are not entries."""
    root = cache_root()
    if kind:
        kinds = [kind]
    else:
        try:
            kinds = [p.name for p in root.iterdir() if p.is_dir()]
        except OSError:
            kinds = []
    out = []
    for k in kinds:
        d = root / k
        if k not in _NOT_ENTRIES and d.is_dir():
            out.extend(sorted(p for p in d.glob("??/*.bin") if _is_entry_name(p)))
    return out


_ENTRY_NAME = re.compile(r"[0-9a-f]{64}")


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
            st = p.stat()
        except OSError:
            continue  # evicted by another process meanwhile
        out.append((st.st_mtime_ns, st.st_size, p))
    return out


def size() -> tuple[int, int]:
    """(number of entries, their total bytes)."""
    st = _stats(entries())
    return len(st), sum(s for _, s, _ in st)


def prune(limit: int) -> tuple[int, int]:
    """Delete least recently used entries until the rest total at most ``limit`` bytes.
    Returns (entries removed, bytes freed). Safe while other processes read, store and
    prune: deleting is atomic, a file already gone is skipped, temporary files of writers
    are not entries."""
    with _locked():
        removed, freed, total = _prune(limit, None)
        try:
            (cache_root() / ".size").write_text(str(total))
        except OSError:
            pass
    return removed, freed


def _prune(limit: int, keep: Path | None) -> tuple[int, int, int]:
    """:func:`prune` without the lock, never deleting ``keep``; also returns the bytes
    left."""
    st = sorted(_stats(entries()), key=lambda e: (e[0], str(e[2])))
    total = sum(s for _, s, _ in st)
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
