"""Content-keyed disk cache of linked kernels.

The key (:func:`key_of`) is a SHA-256 over everything that changes the cubin: the kernel's
Tile IR bytecode and tileiras flags, every fragment's bytes and compile options, the target
architecture, the tileiras/ptxas/NVRTC versions and splice's own version. Nothing that
merely moves (a file path, a line number of the kernel) is in it.

An entry is one file: a magic line, a JSON header, then the payload, with the header holding
the payload's SHA-256. It is written to a temporary file in the same directory and
``os.replace``\\ d into place, so a reader sees either no entry or a whole one; a file that
fails its checksum (torn by a crash, edited, truncated) is deleted and rebuilt.

The directory is ``$SPLICE_CACHE_DIR``, else ``$XDG_CACHE_HOME/splice``, else
``~/.cache/splice``. A cache directory that cannot be written makes splice compile without
caching, with one warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

_MAGIC = b"splice-cache-v1\n"
_warned_readonly = False
#: A temporary file older than this (seconds) was left by a writer that died; removed.
STALE_TEMP_SECONDS = 600


def cache_root() -> Path:
    env = os.environ.get("SPLICE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "splice"


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
    return cache_root() / kind / key[:2] / f"{key}.bin"


def load(kind: str, key: str) -> tuple[dict, bytes] | None:
    """The (header, payload) stored under ``key``, or None. A corrupt entry is removed."""
    path = _entry_path(kind, key)
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
        if header.get("key") != key or header.get("size") != len(payload) or \
                header.get("sha256") != hashlib.sha256(payload).hexdigest():
            raise ValueError("checksum mismatch")
        return header["meta"], payload
    except (ValueError, KeyError, json.JSONDecodeError):
        try:
            path.unlink()
        except OSError:
            pass
        return None


def store(kind: str, key: str, meta: dict, payload: bytes) -> bool:
    """Write an entry atomically. Returns False (after one warning per process) when the
    cache directory cannot be written."""
    global _warned_readonly
    path = _entry_path(kind, key)
    header = json.dumps({"key": key, "size": len(payload),
                         "sha256": hashlib.sha256(payload).hexdigest(), "meta": meta},
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
        _remove_stale_temps(path.parent)
        return True
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


def _remove_stale_temps(directory: Path) -> None:
    import time
    now = time.time()
    for p in directory.glob(".tmp-*"):
        try:
            if now - p.stat().st_mtime > STALE_TEMP_SECONDS:
                p.unlink()
        except OSError:
            pass


def entries(kind: str | None = None) -> list[Path]:
    root = cache_root()
    kinds = [kind] if kind else [p.name for p in root.iterdir() if p.is_dir()] \
        if root.is_dir() else []
    out = []
    for k in kinds:
        d = root / k
        if d.is_dir() and k != "toolchain":
            out.extend(sorted(d.glob("*/*.bin")))
    return out
