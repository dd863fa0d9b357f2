"""The identity of splice's own code (for cache keys), and the guarantee that the code that
runs is the code it names.

The identity is a SHA-256 over every ``*.py`` file of the package (relative path and bytes),
taken when splice is imported (``splice/__init__.py`` imports this module first): files
changed afterwards (a ``git pull``, a ``pip install -U`` under a running notebook) must not
change the identity of the code already running. Part of splice is imported later than
that, on first use (the build pipeline: ``import splice`` stays cheap); :class:`_SameCode`,
on ``sys.meta_path``, loads such a module only if its file still holds the bytes hashed at
import, and raises :class:`~splice.errors.SpliceToolchainError` otherwise -- a process
would run a mix of old and new code and store what it makes under the old code's identity.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys
from pathlib import Path

from ..errors import SpliceToolchainError

_PKG = Path(__file__).resolve().parents[1]   # the splice package
_TOP = __name__.partition(".")[0]            # its name, "splice"


def _hash_package(pkg: Path) -> tuple[str, dict[str, tuple[bytes, tuple[int, int]]]]:
    """(identity, {relative path: (SHA-256 of the file, (mtime_ns, size))}) of the package
    directory ``pkg`` as its files are now: the identity is the SHA-256 of each file's
    relative path and SHA-256, in path order."""
    files = {}
    for root, dirs, names in os.walk(pkg):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                st = os.stat(path)
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).digest()
                rel = Path(path).relative_to(pkg).as_posix()
                files[rel] = (digest, (st.st_mtime_ns, st.st_size))
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(len(rel).to_bytes(8, "little") + rel.encode() + files[rel][0])
    return h.hexdigest(), files


CODE_IDENTITY, _FILES = _hash_package(_PKG)


def check_unchanged(path: str | Path) -> None:
    """Raise SpliceToolchainError unless the package file ``path`` holds the bytes it held
    when splice was imported (an unchanged mtime and size, which is what Python itself
    trusts to reuse a ``.pyc``, spare reading it)."""
    p = Path(path).resolve()
    rel = p.relative_to(_PKG).as_posix()
    digest, stat = _FILES.get(rel, (None, None))
    try:
        st = p.stat()
        same = (st.st_mtime_ns, st.st_size) == stat or \
            hashlib.sha256(p.read_bytes()).digest() == digest
    except OSError:
        same = False
    if not same:
        raise SpliceToolchainError(
            f"splice/{rel} changed on disk after this process imported splice (from "
            f"{_PKG}): the code loaded now would not be the code imported; restart Python "
            f"to use the new splice")


class _SameCode:
    """A ``sys.meta_path`` finder (importlib.abc.MetaPathFinder's protocol; that module is
    not imported, to keep ``import splice`` cheap): finds splice's submodules as the
    standard path finder does, after :func:`check_unchanged` on their file."""

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith(f"{_TOP}.") or path is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.origin and _PKG in Path(spec.origin).resolve().parents:
            check_unchanged(spec.origin)     # a module of the package or of a subpackage
        elif spec is None:
            _refuse_another_copy(self, fullname, path, target)
        return spec


def _refuse_another_copy(finder, fullname: str, path, target) -> None:
    """A submodule not in the package: removed since the import (a ``pip install -U``), or
    one that a later finder (an editable install of another splice checkout) would load
    from another copy of splice. Either way the process would mix two splices: raise
    SpliceToolchainError. Nothing found anywhere stays a plain ModuleNotFoundError."""
    rel = fullname.partition(".")[2].replace(".", "/") + ".py"
    if rel in _FILES:
        check_unchanged(_PKG / rel)    # raises: the file is gone
    for other in sys.meta_path:
        find = getattr(other, "find_spec", None)
        if other is finder or isinstance(other, _SameCode) or find is None:
            continue
        spec = find(fullname, path, target)
        if spec is not None:
            raise SpliceToolchainError(
                f"{fullname} is not part of the splice this process imported ({_PKG}); "
                f"{spec.origin} belongs to another copy of splice (an editable install?), "
                f"whose code would run mixed with this one's: import one splice only")


if not any(isinstance(f, _SameCode) for f in sys.meta_path):
    sys.meta_path.insert(0, _SameCode())
