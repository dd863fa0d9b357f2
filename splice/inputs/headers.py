"""The headers of a CUDA C source: the libraries that provide some (:class:`HeaderProvider`:
CCCL, NVSHMEM) and the include walk that finds every user header it includes, as NVRTC finds
it (:func:`included`), for its cache key (:meth:`splice.inputs.fragments.CudaSource.content_key`)
and its providers (:func:`texts`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
from pathlib import Path
from typing import Protocol, Sequence

from ..errors import SpliceCompileError, SpliceUnsafePathError
from ..system import cache, forksafe, safe_fs
from ..system.nvrtc_pch import STAT

log = logging.getLogger("splice")

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
_lock = forksafe.lock(globals(), "_lock")


class HeaderProvider(Protocol):
    """A library of headers that a CUDA C source may include besides the CUDA toolkit's
    (CCCL, NVSHMEM: ``splice.declare.externs.HEADER_PROVIDERS``), asked by the source at each step
    of its compile. ``texts``: the source and the text of every user header it includes.
    """

    def include_dirs(self, texts: Sequence[str]) -> list[Path]:
        """Its ``-I`` directories for the source (none when it does not use the library).

        Raises:
            SpliceToolchainError: the source uses the library, which is not installed.
        """

    def options(self, texts: Sequence[str]) -> list[str]:
        """Its extra NVRTC options for the source."""

    def key(self, texts: Sequence[str]) -> str:
        """What identifies its headers in the source's cache key, beyond the headers the
        include walk hashes ("" when nothing)."""

    def check_extern(self, ext, source: str) -> None:
        """Check an extern declared from ``source`` (e.g. its calls fit the scope).

        Raises:
            SpliceDeclarationError: naming the extern.
        """

    def compile_hint(self, log: str) -> str:
        """A hint (``"\\n    ..."``) for NVRTC's failure ``log``, or ""."""

    def header_hint(self, header: str) -> str:
        """How to get (or what to include instead of) ``header``, which NVRTC could not
        open, when it is the library's; else ""."""


def included(source, src: str) -> list[tuple[str, str]]:
    """(path, sha256) of every user header ``src`` (the text of ``source``, a
    :class:`splice.inputs.fragments.CudaSource`) includes, transitively, found as NVRTC finds it:
    a quoted name beside the including file (for a text source, the directory of its NVRTC
    name, ``fragments.CudaSource.program_name``), then the ``-I`` directories in NVRTC's
    order (``CudaSource._options``: ``include_dirs``, beside ``path``,
    ``-I``/``--include-path`` of ``options``, then splice's own); ``-include``/
    ``--pre-include`` files too. A header found in splice's own directories (CUDA, CCCL) is
    identified by its size and mtime, and what it includes is followed too (an edit to a
    CCCL header several includes deep must not hit a stale entry); NVSHMEM's, last on the
    path, are not searched: its version is in the key. An ``#include`` inside a disabled
    ``#if`` is still hashed: the key may change when it need not, never the reverse; so for
    ``#include MACRO`` in a user file, every quoted or ``<>`` name the macro is defined to
    (in the files read, ``defines`` or ``-D``), directly or through other macros, is
    followed (:class:`_Macros`)."""
    dirs, toolkit = search_path(source)
    pre = "".join(f'#include "{f}"\n' for f in option_values(pre_included(source), PRE_OPTS))
    here = Path(source.program_name()).parent   # NVRTC looks there first
    walk = (src, pre, str(here), tuple(dirs), tuple(toolkit), tuple(source.defines),
            tuple(source.options))
    hit = _remembered(walk)
    if hit is not None:
        return hit
    probes: dict[str, tuple | None] = {}
    found_headers = _walk(source, src, pre, here, dirs, toolkit, probes)
    if all(h.startswith(STAT) for _, h in found_headers) and \
            not _MACROINCLUDE_RE.search(pre + src):
        _remember(walk, found_headers, tuple(probes.items()))
    return found_headers


def search_path(source) -> tuple[list[str], list[str]]:
    """The directories NVRTC searches for the headers of ``source`` (a
    :class:`splice.inputs.fragments.CudaSource`) after the including file's own, in
    NVRTC's order (``CudaSource._options``: ``include_dirs``, beside ``path``,
    ``-I``/``--include-path`` of ``options``, then splice's own); and splice's own."""
    toolkit = [str(d) for d in source.default_include_dirs()]
    dirs = [str(d) for d in source.include_dirs]
    if source.path is not None:
        dirs.append(str(source.path.parent))
    return dirs + option_values(source.options, INCLUDE_OPTS) + toolkit, toolkit


def pre_included(source) -> list[str]:
    """The options of ``source`` with the file of each ``-include``/``--pre-include``
    made absolute. NVRTC, as gcc, looks a relative one up in the current directory first,
    then in the include path; splice looks it up in the directory of the file that
    declares the source instead (:func:`splice.system.safe_fs.declaring_dir`, as for the
    declaration's other relative paths), then in the include path (:func:`search_path`),
    and gives NVRTC the file found: NVRTC never looks in the current directory.

    Raises:
        SpliceCompileError: a relative one is in none of those directories.
    """
    out: list[str] = []
    it = iter(source.options)
    for o in it:
        opt = next((n for n in PRE_OPTS if o == n or o.startswith(n + "=")), None)
        if opt is None:
            out.append(o)
        elif o == opt:
            out += [o, _pre_include_file(source, next(it, ""))]
        else:
            out.append(f"{opt}={_pre_include_file(source, o[len(opt) + 1:])}")
    return out


def _pre_include_file(source, name: str) -> str:
    """The absolute path of the pre-included header ``name`` (:func:`pre_included`)."""
    if not name or os.path.isabs(name):
        return name
    first = safe_fs.declaring_dir(source.where.rpartition(":")[0])
    dirs = ([str(first)] if first is not None else []) + search_path(source)[0]
    hit = _find_header(name, [(d, False) for d in dirs])
    if hit is None:
        raise SpliceCompileError(
            f"{source.describe()}: the pre-included header {name!r} is in none of "
            f"{', '.join(dirs)} (a relative one is looked up beside the declaring file, "
            f"then in the include path; never in the current directory)")
    return hit[0]


#: :func:`included`'s walks of sources that include only toolkit headers (CUDA, CCCL:
#: splice.cub's): (the walk's inputs) -> (its result, every path it stat'ed and what it
#: found there). A source's key is taken several times per build; the walk reads and
#: stats some hundreds of CCCL headers (80 ms for a splice.cub source on a 2-CPU machine),
#: a check of the same paths a few ms. Also on disk (the cache's ``walk`` entries), for the
#: next process: a warm start's key of a splice.cub kernel is that check, not the walk.
_walks: dict[tuple, tuple[list, tuple]] = {}


def _remembered(walk: tuple) -> list[tuple[str, str]] | None:
    """The result of a walk of ``walk``'s inputs made before, in this process or (from the
    cache) in an earlier one, when every path it stat'ed still is what it was; else None."""
    with _lock:
        hit = _walks.get(walk)
    if hit is None:
        hit = _stored_walk(walk)
    if hit is None or not _unchanged(hit[1]):
        return None
    with _lock:
        _walks[walk] = hit
    return list(hit[0])


#: A walk that found fewer headers is not stored on disk: its check costs about what the
#: walk does, and a store is a file written in every first compile of a new source.
STORED_FROM = 32


def _remember(walk: tuple, found: list[tuple[str, str]], probes: tuple) -> None:
    """Remember a walk in this process, and in the cache when it found
    :data:`STORED_FROM` headers or more (nothing on disk when the cache cannot be written
    or is not trusted: the build says so where it stores the cubin)."""
    with _lock:
        _walks[walk] = (found, probes)
    if len(found) < STORED_FROM:
        return
    try:
        cache.store("walk", cache.key_of("walk", *walk), {},
                    json.dumps({"found": found, "probes": probes}).encode())
    except SpliceUnsafePathError:
        pass


def _stored_walk(walk: tuple) -> tuple[list, tuple] | None:
    """The walk of ``walk``'s inputs an earlier process stored, or None (none stored, an
    untrusted cache, or an entry not of the shape :func:`_remember` writes)."""
    try:
        hit = cache.load("walk", cache.key_of("walk", *walk))
    except SpliceUnsafePathError:
        return None
    if hit is None:
        return None
    try:
        data = json.loads(hit[1])
        found = [(str(p), str(h)) for p, h in data["found"]]
        probes = tuple((str(p), None if s is None else tuple(s)) for p, s in data["probes"])
    except (ValueError, KeyError, TypeError):
        return None
    return found, probes


def _signature(st: os.stat_result | None) -> tuple | None:
    """What a walk remembers of a path it stat'ed: the file's type and mode, size and mtime
    (what the key holds of a toolkit header), not where it lives on the device (so that
    another container of one image, or a pack's walk, checks the same)."""
    return None if st is None else (st.st_mode, st.st_size, st.st_mtime_ns)


def _unchanged(probes) -> bool:
    """Whether every path a remembered walk stat'ed still is what it was (a header added
    where one was missing, removed, rewritten or replaced: not)."""
    for path, was in probes:
        try:
            now = _signature(os.stat(path))
        except (OSError, ValueError):
            now = None
        if now != was:
            return False
    return True


def _walk(source, src: str, pre: str, here: Path, dirs: list[str], toolkit: list[str],
          probes: dict) -> list[tuple[str, str]]:
    """:func:`included`'s walk (``probes``: each path stat'ed, with :func:`_signature`)."""
    seen: dict[str, str] = {}
    todo = [(pre + src, str(here), False)]
    mine = {os.path.normpath(d) for d in toolkit}   # splice's own (the user may name one)
    tagged = [(d, os.path.normpath(d) in mine) for d in dirs]
    found: dict[tuple[str, bool, str], tuple[str, bool, os.stat_result] | None] = {}
    macros = _Macros(source.defines, option_values(source.options, ("-D", "--define-macro")))
    while todo or (todo := macros.follow()):
        text, here_, in_toolkit = todo.pop()
        macros.read(text, here_, in_toolkit)
        for m in INCLUDE_RE.finditer(text):
            quoted, name = m.group(1) == '"', m.group(2)
            where = (here_, in_toolkit, name) if quoted else ("", False, name)
            if where not in found:   # CUB's headers include each other hundreds of times
                found[where] = _find_header(
                    name, ([(here_, in_toolkit)] if quoted else []) + tagged, probes)
            hit = found[where]
            if hit is None:
                continue
            path, own, st = hit
            if own:   # a wheel pip may upgrade apart from NVRTC's: size and mtime
                path = os.path.normpath(path)
                if path not in seen:
                    seen[path] = f"{STAT}{st.st_size} {st.st_mtime_ns}"
                    todo.append((_toolkit_text(path, st), os.path.dirname(path), True))
                continue
            key = str(Path(path).resolve())
            if key not in seen:
                data = _read(path)
                seen[key] = hashlib.sha256(data).hexdigest()
                todo.append((data.decode("utf-8", "replace"), os.path.dirname(path),
                             False))
    macros.warn_unresolved(source.describe())
    def exists(name: str, includer: str) -> bool:   # a header name a macro is defined to
        quoted = name.startswith('"')
        return found.get((includer, False, name[1:-1]) if quoted else
                         ("", False, name[1:-1])) is not None
    for macro, includer in macros.unresolved_in_toolkit(exists):   # thrust's computed names
        seen[f"#include {macro} in {includer}"] = UNRESOLVED
    return sorted(seen.items())


def texts(src: str, headers: Sequence[tuple[str, str]]) -> list[str]:
    """``src`` and the text of every user header of ``headers`` (:func:`included`), which
    the providers read to tell whether the source uses their library."""
    return [src, *(_read(p).decode(errors="replace") for p, h in headers
                   if not h.startswith(STAT))]


def _read(path: str) -> bytes:
    """A user header: a regular file of at most :data:`splice.system.safe_fs.MAX_SOURCE_BYTES`."""
    return safe_fs.read_regular(path, safe_fs.MAX_SOURCE_BYTES, "the #include'd file")


def _find_header(name: str, dirs, probes: dict | None = None
                 ) -> tuple[str, bool, os.stat_result] | None:
    """The first regular file ``name`` in ``dirs`` ((directory, splice's own) pairs): its
    path, whether the directory is splice's own, its stat; None when none has it.
    ``probes``: each path stat'ed, with what was there (:func:`_signature`)."""
    for d, own in dirs:
        path = os.path.join(d, name)
        try:
            st = os.stat(path)
        except (OSError, ValueError):   # ValueError: a NUL in the name
            if probes is not None:
                probes[path] = None
            continue
        if probes is not None:
            probes[path] = _signature(st)
        if stat.S_ISREG(st.st_mode):
            return path, own, st
        if not stat.S_ISDIR(st.st_mode):   # NVRTC would open it: a FIFO hangs it
            raise SpliceUnsafePathError(
                f"splice refuses the #include'd file {path}: it is not a regular file (a "
                f"FIFO, a device or a socket); give a file")
    return None


#: ``#include MACRO`` (or an expression such as ``MACRO(x)``, which is not followed)
_MACROINCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+([A-Za-z_][^\n]*?)[ \t]*'
                               r'(?:/[/*].*)?$', re.M)
_DEFINE_RE = re.compile(r'^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(\S.*?)[ \t]*$', re.M)
_HEADER_NAME_RE = re.compile(r'"[^"\n]+"|<[^>\n]+>')


class _Macros:
    """The ``#include MACRO`` lines of the user's files, followed to every header name the
    macro is defined to in any file read, ``defines`` or ``-D`` (conservative: a
    definition under a disabled ``#if`` counts too). One defined to no header name (a
    function-like macro, token pasting) stays out of the key, with a warning."""

    def __init__(self, defines, options):
        self.values: dict[str, set[str]] = {}
        for name, value in defines:
            self.values.setdefault(name, set()).add("1" if value is None else str(value))
        for o in options:
            name, _, value = o.partition("=")
            self.values.setdefault(name, set()).add(value or "1")
        self.sites: set[tuple[str, str]] = set()     # (macro, directory of the includer)
        self.toolkit_sites: set[tuple[str, str]] = set()   # those in toolkit headers
        self.followed: set[tuple[str, str]] = set()  # (header name, directory)

    def read(self, text: str, here: str, toolkit: bool = False) -> None:
        """Learn ``text``'s definitions and its ``#include MACRO`` lines (``toolkit``: a
        toolkit header's, never warned about: :meth:`unresolved_in_toolkit`)."""
        for m in _DEFINE_RE.finditer(text):
            self.values.setdefault(m.group(1), set()).add(m.group(2))
        found = {(m.group(1), here) for m in _MACROINCLUDE_RE.finditer(text)}
        self.sites.update(found)
        if toolkit:
            self.toolkit_sites.update(found)

    def unresolved_in_toolkit(self, exists) -> list[tuple[str, str]]:
        """The ``#include MACRO`` sites of toolkit headers whose macro names no header
        found (``exists(name, includer)``): thrust pastes tokens and defines macros to
        names with macros in them; the walk cannot say what they include."""
        return sorted((macro, here) for macro, here in self.toolkit_sites
                      if not any(exists(n, here) for n in self._names(macro)))

    def follow(self) -> list[tuple[str, str, bool]]:
        """``#include <name>`` texts, for :func:`included`, of the header names
        not followed before."""
        out = []
        for macro, here in sorted(self.sites):
            for name in sorted(self._names(macro)):
                if (name, here) not in self.followed:
                    self.followed.add((name, here))
                    out.append((f"#include {name}\n", here, False))
        return out

    def _names(self, macro: str) -> set[str]:
        names, todo, seen = set(), [macro], set()
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                for v in self.values.get(m, ()):
                    if _HEADER_NAME_RE.fullmatch(v):
                        names.update(self._expanded(v))
                    elif re.fullmatch(r"[A-Za-z_]\w*", v):
                        todo.append(v)
        return names

    def _expanded(self, name: str, limit: int = 64) -> set[str]:
        """``name`` (``<a/MACRO/b.h>``) with every macro in it replaced by each value it
        is defined to, again until none is left (thrust: ``<__THRUST_DEVICE_SYSTEM_ROOT/
        detail/execution_policy.h>``); at most ``limit`` names, and ``name`` itself."""
        out, todo = {name}, [name]
        while todo and len(out) < limit:
            n = todo.pop()
            for m in re.finditer(r"[A-Za-z_]\w*", n):
                for v in sorted(self.values.get(m.group(0), ())):
                    if re.fullmatch(r"[\w./-]+", v):    # a part of a path
                        e = n[:m.start()] + v + n[m.end():]
                        if e not in out and len(out) < limit:
                            out.add(e)
                            todo.append(e)
        return out

    def warn_unresolved(self, what: str) -> None:
        for macro in sorted({m for m, _ in self.sites - self.toolkit_sites
                             if not self._names(m)}):
            if (what, macro) not in _warned_macros:
                _warned_macros.add((what, macro))
                log.warning("%s: '#include %s' names a header splice cannot tell (the macro "
                            "is not #define'd to a quoted or <> name), so an edit to that "
                            "header does not change the cache key: write its name in the "
                            "#include", what, macro)


_warned_macros: set[tuple[str, str]] = set()


#: How :func:`included` marks an ``#include MACRO`` of a toolkit header it cannot follow:
#: not a header known by its stat (:data:`~splice.system.nvrtc_pch.STAT`), so the source's
#: walk is not remembered nor NVRTC's PCH used for it
UNRESOLVED = "unresolved"
_toolkit_texts: dict[tuple[str, int, int], str] = {}
#: The lines of a toolkit header the walk reads: its #include lines (by name or by macro)
#: and its #define lines (what a macro #include names)
_KEPT_RE = re.compile(r'^[ \t]*#[ \t]*(?:include|define)\b[^\n]*', re.M)


def _toolkit_text(path: str, st) -> str:
    """The ``#include`` and ``#define`` lines of a toolkit header (CUDA, CCCL), read once
    per process per version of the file (CUB's block headers include some hundreds)."""
    key = (path, st.st_size, st.st_mtime_ns)
    with _lock:
        text = _toolkit_texts.get(key)
    if text is None:
        try:
            full = Path(path).read_text(errors="replace")
        except OSError:   # unreadable: NVRTC says so; its size and mtime are in the key
            full = ""
        text = "\n".join(m.group(0) for m in _KEPT_RE.finditer(full))
        with _lock:
            _toolkit_texts[key] = text
    return text


INCLUDE_OPTS = ("-I", "--include-path")
PRE_OPTS = ("-include", "--pre-include")


def option_values(options, names) -> list[str]:
    """The values of NVRTC options ``names`` in ``options``: ``-Ix``, ``-I x``,
    ``--include-path=x``, ``--include-path x``."""
    out = []
    it = iter(options)
    for o in it:
        for n in names:
            if o == n:
                out.append(next(it, ""))
            elif o.startswith(n + "="):
                out.append(o[len(n) + 1:])
            elif len(n) == 2 and o.startswith(n):
                out.append(o[len(n):])
    return [v for v in out if v]
