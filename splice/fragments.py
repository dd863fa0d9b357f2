"""Fragments: the device code externs come from, one class per input kind.

- :class:`CudaSource` -- CUDA C/C++ text or a ``.cu`` file, compiled by NVRTC to relocatable
  device code PTX (``-rdc=true``) for the kernel's own PTX target (e.g. ``sm_90a``).
- :class:`PtxSource` -- PTX text or a ``.ptx`` file, used as it is.

Each fragment yields a parsed :class:`splice.ptx.Module` for a target and a content key
(its bytes and options) for the cache. Files are read at every build, so an edit made while
the process runs is seen.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from . import cache, toolchain
from .errors import SpliceCompileError, SpliceDeclarationError, SpliceLinkError, \
    SpliceToolchainError

log = logging.getLogger("splice")

if TYPE_CHECKING:
    from .ptx import Module

_memo: dict[str, Module] = {}
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
_memo_lock = threading.Lock()


def _parse(text: str, what: str) -> Module:
    """``text`` as a :class:`splice.ptx.Module` (the PTX parser is imported by the first
    build, not by ``import splice``)."""
    from .ptx import Module
    return Module(text, what)


def _memoized(key: str, make, still=None) -> Module:
    """The parsed fragment module for a content key, made once per process; not remembered
    when ``still(key)`` says the inputs no longer have that key after ``make``."""
    with _memo_lock:
        hit = _memo.get(key)
    if hit is None:
        hit = make(key)
        if still is None or still(key):
            with _memo_lock:
                _memo[key] = hit
    return hit


def _read_bytes(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise SpliceDeclarationError(f"{what}: cannot read {path}: {e.strerror}") from None


def _read_text(path: Path, what: str) -> str:
    data = _read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpliceDeclarationError(
            f"{what}: {path} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 4]!r})"
        ) from None


class HeaderProvider(Protocol):
    """A library of headers that a CUDA C source may include besides the CUDA toolkit's
    (CCCL, NVSHMEM: ``splice.externs.HEADER_PROVIDERS``), asked by the source at each step
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


class Fragment:
    """Base of the fragment kinds. ``describe`` names it in error messages; the pipeline
    asks it, not its class, what it can do:

    - :attr:`has_ptx_body`: :meth:`module` holds the code's PTX (False: declarations only,
      the code is linked by nvJitLink after ptxas, :attr:`link_input`);
    - :attr:`compiles_ahead`: :meth:`module` compiles (NVRTC, nvJitLink, ptxas), so the
      pipeline runs it in a thread while tileiras runs;
    - :meth:`read`, :meth:`check_extern`, :meth:`naming`.
    """

    kind = "fragment"
    has_ptx_body = True
    compiles_ahead = True

    @property
    def link_input(self) -> str | None:
        """nvJitLink's input kind (``"CUBIN"``, ``"FATBIN"``, ``"OBJECT"``, ``"LIBRARY"``)
        for code linked after ptxas; None: merged into the kernel's PTX."""
        return None

    def read(self) -> str | bytes | None:
        """The code as declared (text, or a file's bytes); None for generated code."""
        return None

    def check_extern(self, ext) -> None:
        """Check an extern of this fragment before anything compiles (the CUDA C source:
        its NVSHMEM collectives fit the extern's scope).

        Raises:
            SpliceDeclarationError: naming the extern.
        """

    def naming(self, ext) -> str:
        """How a message names ``ext``, an extern of this fragment."""
        return f"extern '{ext.name}' (declared at {ext.where})"

    def describe(self) -> str:
        raise NotImplementedError

    def content_key(self, target: str) -> str:
        raise NotImplementedError

    def module(self, target: str, key: str | None = None) -> Module:
        """The fragment's PTX for ``target``; ``key``: its :meth:`content_key` for
        ``target``, when the caller has just taken it (a header walk, for CUDA C)."""
        raise NotImplementedError


@dataclasses.dataclass(eq=False)
class PtxSource(Fragment):
    """PTX device code (text or a ``.ptx`` file), merged into the kernel as written."""

    text: str | None = None
    path: Path | None = None
    where: str = "<unknown>"
    kind = "ptx"
    compiles_ahead = False    # parsed as written

    def describe(self) -> str:
        return f"PTX file {self.path} (declared at {self.where})" if self.path else \
            f"PTX text declared at {self.where}"

    def read(self) -> str:
        if self.path is not None:
            return _read_text(self.path, self.describe())
        assert self.text is not None  # declared with text or path
        return self.text

    def content_key(self, target: str) -> str:
        return cache.key_of("ptx", self.read())

    def module(self, target: str, key: str | None = None) -> Module:
        text = self.read()
        from .ptx import PTXSyntaxError
        try:
            return _parse(text, self.describe())
        except PTXSyntaxError as e:
            raise SpliceLinkError(e.message) from None


@dataclasses.dataclass(eq=False)
class CudaSource(Fragment):
    """CUDA C/C++ device code (text or a ``.cu`` file) compiled with NVRTC.

    Attributes:
        options: extra NVRTC options (``-std=c++17``, ``--use_fast_math``, ...); NVRTC
            rejects unknown ones, and so does splice.
        include_dirs: extra ``-I`` directories; the CUDA headers from the installed wheels
            are always on the path.
        defines: ``-D`` macros.
        declared: the externs declared from this source (:class:`splice.checks.Declared`):
            splice appends their signature checks and C++ trampolines to the source.
        providers: the header libraries it may include (:class:`HeaderProvider`), in
            include-path order, after the CUDA headers.
    """

    text: str | None = None
    path: Path | None = None
    options: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    defines: tuple[tuple[str, str | None], ...] = ()
    where: str = "<unknown>"
    declared: tuple = ()
    roots: tuple = ()   # (symbol, Signature) to keep when linking -dlto output
    providers: tuple[HeaderProvider, ...] = dataclasses.field(kw_only=True)

    @property
    def checks(self) -> str:
        from .checks import generated_code
        return generated_code(self.declared)
    kind = "cuda"

    def describe(self) -> str:
        return f"CUDA C file {self.path} (declared at {self.where})" if self.path else \
            f"CUDA C source declared at {self.where}"

    def read(self) -> str:
        if self.path is not None:
            return _read_text(self.path, self.describe())
        assert self.text is not None  # declared with text or path
        return self.text

    def check_extern(self, ext) -> None:
        src = self.read()
        for p in self.providers:
            p.check_extern(ext, src)

    def _options(self, target: str, headers=None) -> list[str]:
        """NVRTC's options. The include path: ``include_dirs``, the directory of ``path``,
        ``-I`` of ``options``, then splice's own (:meth:`default_include_dirs`): the user's
        directories come first, as nvcc's ``-I`` precede the toolkit's."""
        opts = [f"-arch={target}", "-rdc=true"]
        for d in self.include_dirs:
            opts.append(f"-I{d}")
        if self.path is not None:
            opts.append(f"-I{self.path.parent}")
        for name, value in self.defines:
            opts.append(f"-D{name}" if value is None else f"-D{name}={value}")
        texts = self._texts(headers)
        for p in self.providers:
            opts.extend(p.options(texts))
        opts.extend(o for o in self.options if o not in ("-dlto", "--dlto"))
        opts.extend(f"-I{d}" for d in self.default_include_dirs(texts))
        return opts

    def default_include_dirs(self, texts: Sequence[str] = ()) -> list[Path]:
        """splice's own ``-I`` directories for the source (``texts``: it and the user
        headers it includes), after the user's: the CUDA headers
        (:func:`splice.toolchain.cuda_include_dir`), then each provider's.

        Raises:
            SpliceToolchainError: the source uses a provider's library, not installed.
        """
        inc = toolchain.cuda_include_dir()
        found = [inc] if inc is not None else []
        for p in self.providers:
            found += p.include_dirs(texts)
        if any("splice_group.h" in t for t in texts):   # splice.warpgroup's header
            found.append(Path(__file__).parent / "include")
        return list(dict.fromkeys(found))

    def _texts(self, headers=None) -> list[str]:
        """The source and the text of every user header it includes (``headers``:
        :meth:`_headers` of the source, when already found)."""
        src = self.read()
        headers = self._headers(src) if headers is None else headers
        return [src, *(Path(p).read_text(errors="replace") for p, h in headers
                       if not h.startswith(_STAT))]

    @property
    def dlto(self) -> bool:
        """Compiled to LTO-IR (``-dlto``) and linked to PTX by nvJitLink."""
        return any(o in ("-dlto", "--dlto") for o in self.options)

    def _nvrtc(self, full: str, name: str, target: str) -> str:
        """NVRTC (and nvJitLink for -dlto) on the source plus the generated checks. A C
        symbol the type check cannot see at global scope is checked by redeclaration
        instead (never dropped: see :mod:`splice.checks`)."""
        from .checks import generated_blocks, lookup_failures, results_hint
        from .ptx import arch_words
        redeclare: frozenset = frozenset()
        c_symbols = {d.symbol for d in self.declared if d.cxx_name is None}
        while True:
            blocks = generated_blocks(self.declared, redeclare)
            code = "".join(text for _, text in blocks)
            try:
                if self.dlto:
                    ltoir = toolchain.nvrtc_compile_ltoir((full + code).encode(), name,
                                                          self._options(target) + ["-dlto"])
                    return lto_link_to_ptx([(ltoir, name)], target, self.roots,
                                           self.describe())
                return toolchain.nvrtc_compile((full + code).encode(), name,
                                               self._options(target))[0]
            except SpliceCompileError as e:
                missing = (lookup_failures(e.log) & c_symbols) - redeclare
                if missing:
                    redeclare = redeclare | missing
                    continue
                raise SpliceCompileError(
                    f"{self.describe()} does not compile for {arch_words(target)}: "
                    f"{_first_error(e.log, full, name, blocks)}"
                    f"{_overload_hint(e.log, self.declared)}"
                    f"{results_hint(e.log, self.declared)}"
                    f"{_kernel_hint(full, self.declared)}"
                    f"{header_hint(e.log, self.providers)}"
                    f"{''.join(p.compile_hint(e.log) for p in self.providers)}",
                    errors_first(e.log)) from None

    def content_key(self, target: str) -> str:
        src = self.read()
        headers = self._headers(src)
        tools = ("nvrtc", "nvJitLink") if self.dlto else ("nvrtc",)
        texts = self._texts(headers)
        return cache.key_of("cuda", src, self.checks, self._options(target, headers),
                            toolchain.tool_identity(*tools), headers,
                            [p.key(texts) for p in self.providers])

    def _headers(self, src: str) -> list[tuple[str, str]]:
        """(path, sha256) of every user header the source includes, transitively, found as
        NVRTC finds it: a quoted name beside the including file (for a text source, the
        directory of its NVRTC name: the current one when ``where`` has none), then the
        ``-I`` directories in NVRTC's order (:meth:`_options`: ``include_dirs``, beside
        ``path``, ``-I``/``--include-path`` of ``options``, then splice's own);
        ``-include``/``--pre-include`` files too. A header found in splice's own directories
        (CUDA, CCCL) is identified by its size and mtime, and what it includes is followed
        too (an edit to a CCCL header several includes deep must not hit a stale entry);
        NVSHMEM's, last on the path, are not searched: its version is in the key. An
        ``#include`` inside a disabled ``#if`` is still hashed: the key may change when it
        need not, never the reverse; so for ``#include MACRO`` in a user file, every
        quoted or ``<>`` name the macro is defined to (in the files read, ``defines``
        or ``-D``), directly or through other macros, is followed
        (:class:`_Macros`)."""
        import hashlib
        toolkit = [str(d) for d in self.default_include_dirs()]
        dirs = [str(d) for d in self.include_dirs]
        if self.path is not None:
            dirs.append(str(self.path.parent))
        dirs += _option_values(self.options, _INCLUDE_OPTS) + toolkit
        pre = "".join(f'#include "{f}"\n' for f in _option_values(self.options, _PRE_OPTS))
        here = self.path.parent if self.path is not None else \
            Path(f"extern_source@{self.where}").parent
        seen: dict[str, str] = {}
        todo = [(pre + src, str(here), False)]
        mine = {os.path.normpath(d) for d in toolkit}   # splice's own (the user may name one)
        tagged = [(d, os.path.normpath(d) in mine) for d in dirs]
        found: dict[tuple[str, bool, str], tuple[str, bool, os.stat_result] | None] = {}
        macros = _Macros(self.defines, _option_values(self.options, ("-D", "--define-macro")))
        while todo or (todo := macros.follow()):
            text, here_, in_toolkit = todo.pop()
            if not in_toolkit:
                macros.read(text, here_)
            for m in _INCLUDE_RE.finditer(text):
                quoted, name = m.group(1) == '"', m.group(2)
                where = (here_, in_toolkit, name) if quoted else ("", False, name)
                if where not in found:   # CUB's headers include each other hundreds of times
                    found[where] = _find_header(
                        name, ([(here_, in_toolkit)] if quoted else []) + tagged)
                hit = found[where]
                if hit is None:
                    continue
                path, own, st = hit
                if own:   # a wheel pip may upgrade apart from NVRTC's: size and mtime
                    path = os.path.normpath(path)
                    if path not in seen:
                        seen[path] = f"{_STAT}{st.st_size} {st.st_mtime_ns}"
                        todo.append((_toolkit_text(path, st), os.path.dirname(path), True))
                    continue
                key = str(Path(path).resolve())
                if key not in seen:
                    data = Path(path).read_bytes()
                    seen[key] = hashlib.sha256(data).hexdigest()
                    todo.append((data.decode("utf-8", "replace"), os.path.dirname(path),
                                 False))
        macros.warn_unresolved(self.describe())
        return sorted(seen.items())

    def module(self, target: str, key: str | None = None) -> Module:
        """The PTX for ``target``, compiled once per content key. Not remembered nor cached
        when the source or a header it includes changed while NVRTC ran (a file saved
        during a compile): NVRTC may have read either version, so the PTX belongs to
        neither key."""
        kept: list[bool] = []   # _compile: whether the key held while NVRTC ran
        return _memoized(key or self.content_key(target),
                         lambda key: self._compile(key, target, kept), lambda key: all(kept))

    def _compile(self, key: str, target: str, kept: list[bool]) -> Module:
        stored = cache.load("fragment", key)
        if stored is not None:
            text = stored[1].decode()
        else:
            src = self.read()
            if not src.strip():
                raise SpliceCompileError(f"{self.describe()} is empty")
            name = str(self.path) if self.path else f"extern_source@{self.where}"
            full = src if src.endswith("\n") else src + "\n"
            text = self._nvrtc(full, name, target)
            kept.append(self.content_key(target) == key)
            if kept[-1]:
                cache.store("fragment", key, {"what": self.describe()}, text.encode())
        return _parse(text, f"NVRTC output for {self.describe()}")


def _find_header(name: str, dirs) -> tuple[str, bool, os.stat_result] | None:
    """The first regular file ``name`` in ``dirs`` ((directory, splice's own) pairs): its
    path, whether the directory is splice's own, its stat; None when none has it."""
    for d, own in dirs:
        path = os.path.join(d, name)
        try:
            st = os.stat(path)
        except (OSError, ValueError):   # ValueError: a NUL in the name
            continue
        if stat.S_ISREG(st.st_mode):
            return path, own, st
    return None


#: ``#include MACRO`` (or an expression such as ``MACRO(x)``, which is not followed)
_MACRO_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+([A-Za-z_][^\n]*?)[ \t]*'
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
        self.followed: set[tuple[str, str]] = set()  # (header name, directory)

    def read(self, text: str, here: str) -> None:
        """Learn ``text``'s definitions and its ``#include MACRO`` lines."""
        for m in _DEFINE_RE.finditer(text):
            self.values.setdefault(m.group(1), set()).add(m.group(2))
        self.sites.update((m.group(1), here) for m in _MACRO_INCLUDE_RE.finditer(text))

    def follow(self) -> list[tuple[str, str, bool]]:
        """``#include <name>`` texts, for :meth:`CudaSource._headers`, of the header names
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
                        names.add(v)
                    elif re.fullmatch(r"[A-Za-z_]\w*", v):
                        todo.append(v)
        return names

    def warn_unresolved(self, what: str) -> None:
        for macro in sorted({m for m, _ in self.sites if not self._names(m)}):
            if (what, macro) not in _warned_macros:
                _warned_macros.add((what, macro))
                log.warning("%s: '#include %s' names a header splice cannot tell (the macro "
                            "is not #define'd to a quoted or <> name), so an edit to that "
                            "header does not change the cache key: write its name in the "
                            "#include", what, macro)


_warned_macros: set[tuple[str, str]] = set()


#: How :meth:`CudaSource._headers` marks a toolkit header, keyed by its size and mtime.
_STAT = "stat "
_toolkit_texts: dict[tuple[str, int, int], str] = {}


def _toolkit_text(path: str, st) -> str:
    """The ``#include`` lines of a toolkit header (CUDA, CCCL), read once per process per
    version of the file (CUB's block headers include some hundreds)."""
    key = (path, st.st_size, st.st_mtime_ns)
    with _memo_lock:
        text = _toolkit_texts.get(key)
    if text is None:
        try:
            full = Path(path).read_text(errors="replace")
        except OSError:   # unreadable: NVRTC says so; its size and mtime are in the key
            full = ""
        text = "\n".join(m.group(0) for m in _INCLUDE_RE.finditer(full))
        with _memo_lock:
            _toolkit_texts[key] = text
    return text


_INCLUDE_OPTS = ("-I", "--include-path")
_PRE_OPTS = ("-include", "--pre-include")


def _option_values(options, names) -> list[str]:
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


_ERR_RE = re.compile(r"^(.*)\((\d+)\): (?:catastrophic )?error")


_DIAGNOSTIC_RE = re.compile(r"^\S.*\(\d+\): (?:catastrophic )?(error|warning|remark|note)")


def errors_first(log: str) -> str:
    """NVRTC's log with its error diagnostics (each with the lines under it) before its
    warnings: CCCL's and the CUDA headers' own deprecation warnings (``#1444-D``, some
    forty lines) would otherwise bury the user's error. Nothing is dropped."""
    blocks: list[list[str]] = [[]]
    end = "\n" if log.endswith("\n") else ""
    for ln in log[:len(log) - len(end)].split("\n"):
        if _DIAGNOSTIC_RE.match(ln):
            blocks.append([])
        blocks[-1].append(ln)
    head, body = blocks[0], blocks[1:]
    is_error = [bool(re.match(r"^\S.*\(\d+\): (?:catastrophic )?error", b[0])) for b in body]
    ordered = [b for b, e in zip(body, is_error) if e] + \
        [b for b, e in zip(body, is_error) if not e]
    return "\n".join(ln for b in (head, *ordered) for ln in b) + end


def _errors(log: str):
    for ln in log.splitlines():
        m = _ERR_RE.match(ln.strip())
        if m:
            yield ln.strip(), m.group(1), int(m.group(2))


def _first_error(log: str, source: str, name: str, generated=()) -> str:
    """The first error line of an NVRTC log, with the source line it points at: the user's
    source, a header (read from disk), or the code splice generated for an extern (named
    with its declaration; ``generated``: :func:`splice.checks.generated_blocks`)."""
    from .checks import owner_of_line
    lines = source.splitlines()
    for ln, file, n in _errors(log):
        if file == name:
            if 0 < n <= len(lines):
                return f"{ln}\n    line {n}: {lines[n - 1].strip()}"
            gen = "".join(text for _, text in generated).splitlines()
            k = n - len(lines)
            owner = owner_of_line(list(generated), k)
            text = gen[k - 1].strip() if 0 < k <= len(gen) else ""
            return (f"{ln}\n    in the code splice generated for extern "
                    f"{owner or '(unknown)'}: {text}")
        try:
            text = Path(file).read_text(errors="replace").splitlines()[n - 1].strip()
        except (OSError, IndexError):
            text = ""
        return f"{ln}\n    {file}:{n}: {text}"
    for ln in log.splitlines():
        if "error" in ln:
            return ln.strip()
    return log.strip().splitlines()[0] if log.strip() else "unknown NVRTC error"


_OVERLOADED = re.compile(r'cannot determine which instance of overloaded function "([^"]+)"')


def _overload_hint(log: str, declared) -> str:
    """How to call an overloaded C++ function declared by its plain (C) name."""
    for m in _OVERLOADED.finditer(log):
        for d in declared:
            if d.cxx_name is None and d.symbol == m.group(1).lstrip(":"):
                return (f"\n    '{d.symbol}' (extern declared at {d.where}) is an overloaded "
                        f"C++ function, not one extern \"C\" symbol: declare it by its "
                        f"qualified C++ name, name=\"::{d.symbol}\" (or \"ns::{d.symbol}\" "
                        f"in a namespace), and splice calls the overload whose parameters "
                        f"match the signature {d.sig}")
    return ""


def _kernel_hint(source: str, declared) -> str:
    """The fix when an extern names a ``__global__`` function (a kernel, which the type
    check reports as returning the wrong type)."""
    for d in declared:
        name = (d.cxx_name or d.symbol).split("::")[-1].split("<")[0]
        if re.search(rf"__global__[^;{{}}]*\b{re.escape(name)}\s*\(", source):
            return (f"\n    '{name}' (extern declared at {d.where}) is a __global__ function, "
                    f"a kernel: an extern calls a __device__ function; declare it "
                    f"extern \"C\" __device__ (a kernel cannot be called from a kernel "
                    f"without dynamic parallelism)")
    return ""


def _known_header_hint(header: str) -> str:
    """The hint for headers that nvcc code often includes and NVRTC does without (math,
    printf); "" for others."""
    if header == "math.h":
        return ("CUDA's math functions (expf, sqrtf, __fmaf_rn...) are built into NVRTC and "
                "need no include: drop <math.h> (libcu++'s <cuda/std/cmath> has the C++ "
                "overloads)")
    if header in ("stdio.h", "cstdio"):
        return f"NVRTC declares device printf itself: drop <{header}>"
    if header in ("assert.h", "cassert"):
        return (f"NVRTC declares device assert itself: drop <{header}> (a failed assert "
                f"traps the launch)")
    return ""


_CANNOT_OPEN = re.compile(r'cannot open source file "([^"]+)"')


def header_hint(log: str, providers: Sequence[HeaderProvider]) -> str:
    """How to get a header NVRTC could not open (``providers``: the source's, which know
    their own headers: CCCL's, NVSHMEM's), or what to include instead; "" when the log
    names no such header."""
    m = _CANNOT_OPEN.search(log)
    if m is None:
        return ""
    header = m.group(1)
    for hint in (_known_header_hint(header), *(p.header_hint(header) for p in providers)):
        if hint:
            return f"\n    hint: {hint}"
    return ""


# PTX ISA version a generated wrapper declares for a target: at least what the target needs,
# at most what tileiras 13.x emits (9.x).
_PTX_VERSION_FOR = {80: "7.0", 86: "7.1", 87: "7.4", 89: "7.8", 90: "8.0", 100: "8.6",
                    101: "8.6", 103: "8.8", 110: "9.0", 120: "8.7", 121: "8.8"}


@dataclasses.dataclass(eq=False)
class AsmSource(Fragment):
    """The ``.func`` wrapping a :func:`splice.asm` snippet, generated for the kernel's own
    PTX target and checked by ptxas on its own, so that a malformed snippet is reported at
    its call site with ptxas's message."""

    spec: Any = None  # splice.asm_frontend.AsmSpec, always given
    kind = "asm"

    def describe(self) -> str:
        return f"inline PTX at {self.spec.where}"

    def naming(self, ext) -> str:
        return f"inline PTX (splice.asm) at {ext.where}"

    def content_key(self, target: str) -> str:
        s = self.spec
        return cache.key_of("asm", s.template, [t.name for t in s.outputs],
                            [t.name for t in s.inputs], target, toolchain.tool_identity("ptxas"))

    def module(self, target: str, key: str | None = None) -> Module:
        return _memoized(key or self.content_key(target),
                         lambda key: self._generate(key, target))

    def _generate(self, key: str, target: str) -> Module:
        num = int(re.sub(r"\D", "", target) or 0)
        text = self.spec.ptx(target, _PTX_VERSION_FOR.get(num, "9.0"))
        if cache.load("asm-checked", key) is None:
            try:
                toolchain.run_ptxas(text, ["-arch", target, "-c"], None, timeout=120,
                                    what=self.describe())
            except SpliceToolchainError as e:   # with ptxas's log
                msgs = [re.split(r"error\s*:", ln, maxsplit=1)[-1].strip() for ln in
                        getattr(e, "log", "").splitlines() if re.search(r"error\s*:", ln)]
                raise SpliceCompileError(
                    f"inline PTX at {self.spec.where} rejected by ptxas: "
                    f"{'; '.join(msgs) or e}\n    snippet: {self.spec.template.strip()}\n"
                    f"    operands: {self.spec.operands_text()} (Python int constants are "
                    f"int32, floats float32: convert with e.g. ct.int64(1))",
                    getattr(e, "log", "")) from None
            cache.store("asm-checked", key, {}, b"ok")
        return _parse(text, self.describe())


def lto_link_to_ptx(inputs: list[tuple[bytes, str]], target: str, roots, what: str) -> str:
    """Link LTO-IR with nvJitLink (``-lto -ptx``) into PTX holding the functions ``roots``
    ((symbol, Signature) pairs).

    LTO drops every function no kernel uses, so a generated root kernel takes the address
    of each requested function; the root is removed from the PTX afterwards.

    Raises:
        SpliceLinkError: nvJitLink rejected the inputs (its log attached).
    """
    from .checks import c_declaration, include_headers
    from .ptx import apply_edits, arch_words
    keep = " ".join(f"p[{i}] = (void *)&{sym};" for i, (sym, _) in enumerate(roots))
    root_src = (include_headers(sig for _, sig in roots)
                + "".join(c_declaration(sym, sig) for sym, sig in roots)
                + f"extern \"C\" __global__ void __splice_lto_root(void **p) {{ {keep} }}\n")
    opts = [f"-arch={target}", "-rdc=true", "-dlto"]
    inc = toolchain.cuda_include_dir()
    if inc is not None:
        opts.append(f"-I{inc}")
    root = toolchain.nvrtc_compile_ltoir(root_src.encode(), "splice_lto_root.cu", opts)
    buf = toolchain.nvjitlink_run(
        [f"-arch={target}", "-lto", "-ptx"],
        [("LTOIR", data, name) for data, name in [*inputs, (root, "splice_lto_root.ltoir")]],
        "ptx", f"the LTO-IR of {what} for {arch_words(target)}")
    text = bytes(buf).rstrip(b"\0").decode()
    mod = _parse(text, f"nvJitLink output for {what}")
    fn = mod.functions.get("__splice_lto_root")
    if fn is not None and fn.body is not None:
        text = apply_edits(text, [(fn.header.start, mod.statements[fn.body[1]].end, "")])
    return text


@dataclasses.dataclass(eq=False)
class LtoirSource(Fragment):
    """LTO-IR (a ``.ltoir`` file or bytes, e.g. from ``nvcc -dlto`` or NVRTC ``-dlto``),
    linked by nvJitLink into PTX for the kernel's target."""

    data: bytes | None = None
    path: Path | None = None
    where: str = "<unknown>"
    roots: tuple = ()
    kind = "ltoir"

    def describe(self) -> str:
        return f"LTO-IR file {self.path} (declared at {self.where})" if self.path else \
            f"LTO-IR declared at {self.where}"

    def read(self) -> bytes:
        if self.path is not None:
            return _read_bytes(self.path, self.describe())
        assert self.data is not None  # declared with data or path
        return self.data

    def content_key(self, target: str) -> str:
        return cache.key_of("ltoir", self.read(), [(s, str(g)) for s, g in self.roots], target,
                            toolchain.tool_identity("nvJitLink"))

    def module(self, target: str, key: str | None = None) -> Module:
        def link(key):
            try:
                text = lto_link_to_ptx([(self.read(), self.path.name if self.path else "input")],
                                       target, self.roots, self.describe())
            except SpliceLinkError as e:
                if "_INPUT" not in e.message:
                    raise
                raise SpliceLinkError(
                    f"{e.message}: {self.describe()} is not LTO-IR that this nvJitLink reads; "
                    f"make it with nvcc -dlto or NVRTC -dlto of a CUDA version no newer than "
                    f"nvJitLink's (PTX goes to from_ptx, a cubin or object to from_object)",
                    e.log) from None
            return _parse(text, self.describe())
        return _memoized(key or self.content_key(target), link)


#: File suffixes of binary device-code inputs and their nvJitLink input types.
BINARY_SUFFIXES = {".cubin": "CUBIN", ".fatbin": "FATBIN", ".o": "OBJECT", ".obj": "OBJECT",
                   ".a": "LIBRARY", ".lib": "LIBRARY"}

#: The one table of device-code file kinds: suffix -> kind. A declaration refuses a file
#: whose suffix names another kind (``extern(path="f.ptx")`` -> "use from_ptx").
FILE_KINDS = {".cu": "cuda", ".cuh": "cuda", ".ptx": "ptx", ".ltoir": "ltoir",
              **{s: "binary" for s in BINARY_SUFFIXES}}

#: The declaration that takes each kind of file, and how to pass that kind as text/bytes.
ENTRY_POINTS = {
    "cuda": ("splice.extern(path=...) or splice.library(path=...)",
             "pass CUDA C text as splice.extern(source=...) or splice.library(source=...)"),
    "ptx": ("splice.extern.from_ptx(path, ...)",
            "pass PTX text as splice.extern.from_ptx(ptx=...)"),
    "ltoir": ("splice.extern.from_ltoir(path, ...)",
              "pass LTO-IR bytes as splice.extern.from_ltoir(data=...)"),
    "binary": ("splice.extern.from_object(path, ...)",
               "from_object takes a file; pass PTX text as from_ptx(ptx=...) or LTO-IR bytes "
               "as from_ltoir(data=...)"),
}


def abi_prototype(symbol: str, sig) -> str:
    """The ``.extern .func`` declaration of an ``extern "C"`` function with ``sig`` in the
    PTX ABI NVCC/NVRTC use (integers narrower than 32 bits promoted to ``.b32``,
    ``__half``/``__nv_bfloat16`` as ``.align 2 .b8[2]``)."""
    def decl(t, name):
        if t.kind == "f" and t.bits == 16:
            return f".param .align 2 .b8 {name}[2]"
        return f".param .b{max(t.bits, 32)} {name}"
    params = ", ".join(decl(t, f"{symbol}_param_{i}") for i, t in enumerate(sig.args))
    ret = "" if sig.result is None else f"({decl(sig.result, 'func_retval0')}) "
    return f".extern .func {ret}{symbol}({params});\n"


@dataclasses.dataclass(eq=False)
class BinarySource(Fragment):
    """Relocatable device code already compiled: a ``.cubin`` (``-rdc``), ``.fatbin``, host
    object ``.o`` with embedded device code, or static library ``.a``. nvJitLink links it
    with the kernel's relocatable cubin -- possible only for kernels without tileiras host
    callbacks (no TMA tensor maps), see :func:`splice.pipeline.build`."""

    path: Path = None  # type: ignore[assignment]  # always given
    where: str = "<unknown>"
    roots: tuple = ()
    kind = "binary"
    has_ptx_body = False
    compiles_ahead = False    # linked by nvJitLink after ptxas

    def describe(self) -> str:
        return f"{self.path.suffix} file {self.path} (declared at {self.where})"

    @property
    def link_input(self) -> str:
        return BINARY_SUFFIXES[self.path.suffix.lower()]

    def read(self) -> bytes:
        return _read_bytes(self.path, self.describe())

    def content_key(self, target: str) -> str:
        return cache.key_of("binary", self.read(), self.link_input,
                            [(s, str(g)) for s, g in self.roots],
                            toolchain.tool_identity("nvJitLink"))

    def module(self, target: str, key: str | None = None) -> Module:
        """Declarations only: the code is linked by nvJitLink after ptxas."""
        num = int(re.sub(r"\D", "", target) or 0)
        text = (f".version {_PTX_VERSION_FOR.get(num, '9.0')}\n.target {target}\n"
                f".address_size 64\n" + "".join(abi_prototype(s, g) for s, g in self.roots))
        return _parse(text, self.describe())
