"""Packs: the cache entries a set of kernels needs, in one file, for another cache (a CI job
or an image build compiles and exports; a service imports and, with
``SPLICE_COMPILE=never``, starts without running NVRTC, tileiras or ptxas).

A pack is a gzip-compressed tar archive. Its first member is ``manifest.json``: the format
(:data:`FORMAT`), the toolchain that made the entries (:func:`toolchain_record`), the
architectures of its kernels, and each entry's kind, name, size and SHA-256. Each entry
follows as a member ``entries/<kind>/<name>.bin`` holding the entry file's bytes
(:func:`splice.system.cache.encode`: its own header, checksum and the splice code that
wrote it).

An entry is made by one splice code and one toolchain, the tools identified as the cache
keys identify them (their files' path, size and mtime: :func:`splice.system.toolchain.
tool_identity`): a pack from another toolchain could never hit, and is refused with a
message naming both. Kernels' keys also hold their source files' paths (cuTile's bytecode
does): a pack serves the same code at the same place, the same image.

Importing reads an untrusted file. It is refused whole, nothing imported
(:class:`~splice.errors.SplicePackError`), when anything is not as :func:`export_pack`
writes it: the manifest not first or not the format, another toolchain, a member that is
not a regular file (a link, a directory, a device), a member name other than an entry's,
an entry not in the manifest or twice, a size or checksum that differs from the
manifest's, an entry that does not parse, more than :data:`MAX_MEMBERS` members or more
bytes than the cache holds. What is imported is written by the cache's own store
(:func:`splice.system.cache.store_entry`): the importing user's files, 0600 in 0700
directories (a shared cache's modes with ``SPLICE_CACHE_TRUST``), counted against the
cache's bound. A pack is compiled code: import packs you trust as you would a wheel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import hashlib
import io
import json
import os
import re
import stat
import tarfile
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable, Iterator

from ..errors import SplicePackError, SpliceToolchainError
from . import cache, progress

#: The manifest's ``format``.
FORMAT = "splice-pack-1"
#: The most members a pack may have.
MAX_MEMBERS = 200_000
#: The most bytes its manifest may have.
MAX_MANIFEST_BYTES = 64 << 20
_MEMBER = re.compile(r"entries/([a-z][a-z-]{0,31})/([0-9a-f]{64})\.bin")
_TOOLS = ("tileiras", "ptxas", "nvrtc", "nvJitLink")


@dataclasses.dataclass(frozen=True)
class Pack:
    """What :func:`export_pack` wrote or :func:`import_pack` imported.

    Attributes:
        path (Path): the pack file.
        entries (int): entries written (export), or imported (import: those the cache had
            already are not counted).
        bytes (int): their bytes.
        architectures (tuple[str, ...]): the architectures of its kernels (``sm_90``...).
        toolchain (dict): the toolchain that made them (:func:`toolchain_record`).
    """

    path: Path
    entries: int
    bytes: int
    architectures: tuple[str, ...]
    toolchain: dict


def toolchain_record() -> dict:
    """What a pack's entries were made by: splice's code identity, cuda-tile's version and
    each tool's identity (:func:`splice.system.toolchain.tool_identity`: the file's path,
    size and mtime; ``"missing"`` where not installed). Two toolchains with one record
    make entries of the same keys."""
    from . import _cutile, toolchain
    tools = {}
    for name in _TOOLS:
        try:
            tools[name] = toolchain.tool_identity(name)[0][1:]
        except (SpliceToolchainError, ImportError, OSError, RuntimeError):
            tools[name] = "missing"
    return {"splice": cache.code_identity(), "cuda-tile": _cutile.cutile_version(),
            "tools": json.loads(json.dumps(tools))}   # lists, as the manifest holds them


def export_pack(path: str | os.PathLike, *, used_within: float | None = None) -> Pack:
    """Write the cache's entries that this splice made into one pack file, for
    :func:`import_pack` in another cache (a CI job's compiles for a service, an image
    build's for its containers).

    Args:
        path: the pack file to write (replaced whole when it exists: a reader never sees
            half a pack).
        used_within (float | None): only the entries made or used in the last that many
            seconds (the runs that compiled what the pack is for); None: all of them.

    Returns:
        Pack: the file, how many entries and bytes it holds, its kernels' architectures.

    Raises:
        SplicePackError: the file cannot be written.
        SpliceUnsafePathError: the cache directory is not trusted (``docs/security.md``).

    Example:
        ```python
        import os
        import tempfile

        os.environ["SPLICE_CACHE_DIR"] = tempfile.mkdtemp()      # a fresh cache
        import cuda.tile as ct
        import splice

        twice = splice.extern(source='extern "C" __device__ float twice(float x) '
                                     '{ return 2 * x; }',
                              name="twice", signature="float32(float32)")

        @splice.kernel
        def scale(x, y, TILE: ct.Constant[int]):
            x_tile = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=twice(x_tile))

        splice.compile(scale, splice.kernel_signature("array(float32)", "array(float32)", 128),
                       "sm_90")
        pack = splice.export_pack(os.path.join(tempfile.mkdtemp(), "kernels.splice"))
        print(pack.entries, "entries,", pack.bytes, "bytes, for", pack.architectures)
        assert pack.architectures == ("sm_90",)
        ```
    """
    path = Path(path)
    since = None if used_within is None else time.time() - used_within
    entries = cache.entries()
    with progress.task(f"exporting the cache to {path}", len(entries)) as shown, \
            tempfile.SpooledTemporaryFile(64 << 20) as spool:
        listed: list[dict] = []
        archs: set[str] = set()
        for entry in entries:
            shown.done += 1
            hit = _exported(entry, since)
            if hit is None:
                continue
            data = cache.encode(entry.stem, hit["meta"], hit["payload"])
            spool.write(data)
            listed.append({"kind": entry.parent.parent.name, "name": entry.stem,
                           "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
            if listed[-1]["kind"] == "kernel" and isinstance(hit["meta"].get("arch"), str):
                archs.add(hit["meta"]["arch"])
        record = toolchain_record()
        manifest = {"format": FORMAT, "toolchain": record, "architectures": sorted(archs),
                    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                    "entries": listed}
        spool.seek(0)
        _write(path, manifest, spool)
    return Pack(path, len(listed), sum(e["size"] for e in listed), tuple(sorted(archs)),
                record)


def _exported(entry: Path, since: float | None) -> dict | None:
    """The meta and payload of the entry file ``entry`` when :func:`export_pack` takes it:
    written by this splice's code, made or used at ``since`` or later (None: any time);
    else None (also when it was evicted meanwhile)."""
    try:
        if since is not None and entry.stat().st_mtime < since:
            return None
    except OSError:
        return None
    hit = cache.read(entry, touch=False)
    if hit is None or hit[0].get("code") != cache.code_identity():
        return None
    return {"meta": hit[0]["meta"], "payload": hit[1]}


def _write(path: Path, manifest: dict, spool) -> None:
    """The pack file: the manifest, then each entry of ``spool`` (their bytes in the
    manifest's order), through a fresh temporary file beside ``path`` renamed over it."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".splice-pack-", dir=directory)
    except OSError as e:
        raise SplicePackError(f"cannot write the pack {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f, \
                tarfile.open(fileobj=f, mode="w:gz", compresslevel=6) as tar:
            _add(tar, "manifest.json", io.BytesIO(json.dumps(manifest).encode()))
            for listed in manifest["entries"]:
                _add(tar, f"entries/{listed['kind']}/{listed['name']}.bin", spool,
                     listed["size"])
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise SplicePackError(f"cannot write the pack {path}: {e.strerror or e}") from None


def _add(tar: tarfile.TarFile, name: str, data, size: int | None = None) -> None:
    """A regular-file member ``name`` of ``size`` bytes read from ``data`` (all of a
    BytesIO when None), with no owner, mode 0600 and time 0 (the same entries make the
    same members)."""
    info = tarfile.TarInfo(name)
    info.size = len(data.getvalue()) if size is None else size
    info.mode = 0o600
    tar.addfile(info, data)


def import_pack(path: str | os.PathLike) -> Pack:
    """Load a pack (:func:`export_pack`) into this user's cache, whole or not at all.

    Each entry is checked against the manifest (its size and SHA-256) and against itself
    (its own checksum, the splice code that wrote it), then written by the cache's own
    store: the importer's files, 0600 in 0700 directories, as if compiled here. Entries
    the cache has already are left as they are.

    Args:
        path: the pack file (an untrusted file: see :mod:`splice.system.packs`).

    Returns:
        Pack: the file, how many entries it added and their bytes, its kernels'
        architectures and the toolchain that made them.

    Raises:
        SplicePackError: the pack is refused (another splice or toolchain: the message
            names both; not a pack; a member that is a link, a directory or has a name
            splice does not write; a checksum that fails; more than the cache holds);
            nothing of it is imported.
        SpliceUnsafePathError: the cache directory is not trusted (``docs/security.md``).

    Example:
        ```python
        import os
        import tempfile

        os.environ["SPLICE_CACHE_DIR"] = tempfile.mkdtemp()      # where it compiles
        import cuda.tile as ct
        import splice

        inc = splice.extern(source='extern "C" __device__ int inc(int x) { return x + 1; }',
                            name="inc", signature="int32(int32)")

        @splice.kernel
        def bump(x, y, TILE: ct.Constant[int]):
            ct.store(y, index=(ct.bid(0),), tile=inc(ct.load(x, index=(ct.bid(0),), shape=(TILE,))))

        sig = splice.kernel_signature("array(int32)", "array(int32)", 128)
        splice.compile(bump, sig, "sm_90")
        pack = os.path.join(tempfile.mkdtemp(), "bump.splice")
        splice.export_pack(pack)

        os.environ["SPLICE_CACHE_DIR"] = tempfile.mkdtemp()      # another, empty cache
        got = splice.import_pack(pack)
        print(got.entries, "entries imported for", got.architectures)
        os.environ["SPLICE_COMPILE"] = "never"                   # nothing may compile now
        assert splice.compile(bump, sig, "sm_90").from_cache
        del os.environ["SPLICE_COMPILE"]
        ```
    """
    path = Path(path)
    added: list[Path] = []
    try:
        with _open(path) as f:
            members = _read(path, f)
            manifest = _manifest(path, next(members, None))
            with progress.task(f"importing {path}", len(manifest["entries"])) as shown:
                total = _import_entries(path, members, manifest, added, shown)
    except BaseException:
        _remove(added)
        raise
    return Pack(path, len(added), total, tuple(manifest["architectures"]),
                manifest["toolchain"])


#: What tarfile raises on a damaged or malicious file (a truncated gzip header is a
#: TypeError in Python 3.11's tarfile)
_UNREADABLE = (tarfile.TarError, EOFError, zlib.error, OSError, TypeError, ValueError)


def _read(path: Path, f) -> Iterator[tuple[tarfile.TarInfo, Callable[[], bytes]]]:
    """Each member of the pack file ``f`` with a function that reads its bytes (none for
    what is not a regular file), read as a stream: the caller checks the member's header
    before it reads (a member is read only once its header's size is the one its manifest
    lists: a zip bomb is refused by its header); the first at most
    :data:`MAX_MANIFEST_BYTES`, the others at most an entry's limit; a file tarfile cannot
    read is refused."""
    try:
        tar = tarfile.open(fileobj=f, mode="r|gz")
        for count, member in enumerate(tar):
            limit = MAX_MANIFEST_BYTES if count == 0 else cache.entry_limit()
            if count > MAX_MEMBERS or (member.isreg() and member.size > limit):
                raise _refuse(path, f"its member {member.name!r} is larger than "
                                    f"{limit} bytes, or one of more than {MAX_MEMBERS}")
            yield member, functools.partial(_bytes, path, tar, member)
    except _UNREADABLE as e:
        raise _unreadable(path, e) from None


def _bytes(path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """The bytes of the regular-file member ``member`` (b"" for another kind)."""
    try:
        got = tar.extractfile(member) if member.isreg() else None
        return got.read(member.size) if got is not None else b""
    except _UNREADABLE as e:
        raise _unreadable(path, e) from None


def _unreadable(path: Path, e: BaseException) -> SplicePackError:
    why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return _refuse(path, f"it cannot be read as a pack ({why or type(e).__name__})")


def _open(path: Path):
    """The pack file, opened for reading: a regular file (a FIFO would hang the import),
    by its type before it is opened (opening a FIFO to read releases a writer waiting on
    it) and again as opened."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise SplicePackError(f"splice refuses the pack {path}: it is not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise SplicePackError(f"cannot read the pack {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SplicePackError(f"splice refuses the pack {path}: it is not a regular file")
    return open(fd, "rb")


def _refuse(path: Path, why: str) -> SplicePackError:
    return SplicePackError(f"splice refuses the pack {path}: {why}; nothing of it was "
                           f"imported")


def _manifest(path: Path, first: tuple[tarfile.TarInfo, Callable[[], bytes]] | None
              ) -> dict:
    """The pack's manifest, checked: its first member, this format, this toolchain, and
    entries listed as :func:`export_pack` lists them."""
    if first is None or first[0].name != "manifest.json" or not first[0].isreg():
        raise _refuse(path, "its first member is not a splice pack's manifest.json")
    try:
        m = json.loads(first[1]())
    except ValueError:
        raise _refuse(path, "its manifest is not JSON") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise _refuse(path, f"its manifest is not of the format {FORMAT}")
    here = toolchain_record()
    if m.get("toolchain") != here:
        raise _refuse(path, _other_toolchain(m.get("toolchain"), here))
    entries, archs = m.get("entries"), m.get("architectures")
    if not isinstance(entries, list) or not isinstance(archs, list) or \
            not all(isinstance(a, str) for a in archs) or len(entries) >= MAX_MEMBERS or \
            not all(_listed(e) for e in entries) or \
            len({e["name"] for e in entries}) != len(entries):
        raise _refuse(path, "its manifest does not list its entries as splice lists them")
    total = sum(e["size"] for e in entries)
    if total > cache.max_bytes():
        raise _refuse(path, f"it holds {total} bytes, more than the cache's bound "
                            f"{cache.max_bytes()} (SPLICE_CACHE_MAX_BYTES)")
    return m


def _listed(e) -> bool:
    """Whether ``e`` is a manifest's entry as :func:`export_pack` writes one."""
    return isinstance(e, dict) and isinstance(e.get("kind"), str) and \
        isinstance(e.get("name"), str) and \
        _MEMBER.fullmatch(f"entries/{e['kind']}/{e['name']}.bin") is not None and \
        isinstance(e.get("size"), int) and 0 <= e["size"] <= cache.entry_limit() and \
        isinstance(e.get("sha256"), str)


def _other_toolchain(pack, here: dict) -> str:
    """Why a pack of the toolchain record ``pack`` is refused here (``here``'s)."""
    if not isinstance(pack, dict):
        return "its manifest names no toolchain"
    lines = []
    if pack.get("splice") != here["splice"]:
        lines.append(f"splice code: the pack's {str(pack.get('splice'))[:16]}, here "
                     f"{here['splice'][:16]} (another version or checkout of splice)")
    if pack.get("cuda-tile") != here["cuda-tile"]:
        lines.append(f"cuda-tile: the pack's {pack.get('cuda-tile')}, here "
                     f"{here['cuda-tile']}")
    tools = pack.get("tools")
    if not isinstance(tools, dict):
        tools = {}
    for name in _TOOLS:
        if tools.get(name) != here["tools"][name]:
            lines.append(f"{name}: the pack's {_tool(tools.get(name))}, here "
                         f"{_tool(here['tools'][name])}")
    return ("it was made by another toolchain than this one, whose cache keys its "
            "entries could never match:\n    " + "\n    ".join(lines) + "\nsplice knows a "
            "tool by its file (path, size, modification time), as its cache keys do: make "
            "the pack where this splice and toolchain are installed (the same image), or "
            "compile here (python -m splice warmup)")


def _tool(ident) -> str:
    """``/p/tileiras (107323288 bytes, modified 2026-12-05 06:11:02 UTC)``, or ``version
    13.5`` for a library known by its version."""
    if isinstance(ident, list) and ident[:1] == ["version"]:
        return "version " + ".".join(map(str, ident[1:]))
    if isinstance(ident, list) and len(ident) >= 3 and isinstance(ident[2], int):
        when = datetime.datetime.fromtimestamp(ident[2] / 1e9, datetime.timezone.utc)
        return f"{ident[0]} ({ident[1]} bytes, modified {when:%Y-%m-%d %H:%M:%S} UTC)"
    return str(ident)


def _import_entries(path: Path, members, manifest: dict, added: list[Path],
                    shown: progress.Task) -> int:
    """Check and store every entry member after the manifest (``added``: the files
    written, for the caller to remove should the pack be refused); their bytes."""
    listed = {f"entries/{e['kind']}/{e['name']}.bin": e for e in manifest["entries"]}
    seen: set[str] = set()
    total = 0
    for member, read in members:
        e = listed.get(member.name)
        if not member.isreg():
            raise _refuse(path, f"its member {member.name!r} is not a regular file (a link, "
                                f"a directory or a device)")
        if e is None or member.name in seen or member.size != e["size"]:
            raise _refuse(path, f"its member {member.name!r} is not an entry its manifest "
                                f"lists (another name, twice, or another size)")
        data = read()
        if len(data) != e["size"]:
            raise _refuse(path, f"its member {member.name!r} is shorter than its header "
                                f"says (a truncated file)")
        seen.add(member.name)
        shown.done += 1
        if hashlib.sha256(data).hexdigest() != e["sha256"]:
            raise _refuse(path, f"its entry {member.name} does not have the checksum its "
                                f"manifest gives (damaged or altered)")
        total += _store(path, e, data, added)
    missing = len(listed) - len(seen)
    if missing:
        raise _refuse(path, f"{missing} entries its manifest lists are not in it (a "
                            f"truncated file)")
    return total


def _store(path: Path, e: dict, data: bytes, added: list[Path]) -> int:
    """Store the entry ``e`` (its file's bytes ``data``) unless the cache has it; the
    bytes stored."""
    try:
        header, payload = cache.decode(e["name"], data)
    except ValueError as why:
        raise _refuse(path, f"its entry {e['kind']}/{e['name']} is not a cache entry "
                            f"({why})") from None
    if header.get("code") != cache.code_identity():
        raise _refuse(path, f"its entry {e['kind']}/{e['name']} was written by another "
                            f"splice code")
    try:
        target = cache.entry_file(e["kind"], e["name"])
    except ValueError:
        raise _refuse(path, f"its entry {e['kind']}/{e['name']} is of no kind splice "
                            f"stores") from None
    if cache.read(target, touch=False) is not None:
        return 0
    if not cache.store_entry(e["kind"], e["name"], header["meta"], payload):
        raise _refuse(path, f"the cache directory {cache.cache_root()} cannot be written")
    added.append(target)
    return len(data)


def _remove(paths: list[Path]) -> None:
    """Undo an import: the entries it wrote."""
    for p in paths:
        try:
            p.unlink()
        except OSError:
            pass


__all__ = ["FORMAT", "Pack", "export_pack", "import_pack", "toolchain_record"]
