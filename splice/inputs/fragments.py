"""Fragments: the device code externs come from, one class per input kind.

- :class:`CudaSource` -- CUDA C/C++ text or a ``.cu`` file, compiled by NVRTC to relocatable
  device code PTX (``-rdc=true``) for the kernel's own PTX target (e.g. ``sm_90a``). Its
  jobs have their own modules: the header walk behind its content key and the header
  libraries (:mod:`splice.inputs.headers`), the NVRTC compile and its error messages
  (:mod:`splice.inputs.cuda_compile`), the signature checks and trampolines appended to the source
  (:mod:`splice.inputs.checks`).
- :class:`PtxSource` -- PTX text or a ``.ptx`` file, used as it is.
- :class:`AsmSource` -- the ``.func`` wrapping a :func:`splice.asm` snippet.
- :class:`LtoirSource` -- LTO-IR, linked to PTX by nvJitLink.
- :class:`BinarySource` -- relocatable device code already compiled, linked after ptxas.

Each fragment yields a parsed :class:`splice.ptxtools.ptx.Module` for a target and a content key
(its bytes and options) for the cache. Files are read at every build, so an edit made while
the process runs is seen.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import (
    SpliceCompileError,
    SpliceDeclarationError,
    SpliceLinkError,
    SpliceToolchainError,
)
from ..system import cache, forksafe, safe_fs, toolchain
from . import headers
from .cuda_compile import (
    compile_source,
    lto_link_to_ptx,
    program_name,
    undefined_result_option,
)

if TYPE_CHECKING:
    from ..ptxtools.ptx import Module

_memo: dict[str, Module] = {}
_memo_lock = forksafe.lock(globals(), "_memo_lock")
log = logging.getLogger("splice")


class _Along:
    """The PTX of fragments compiled along with another (:attr:`CudaSource.batch`), by
    content key, kept in memory until a call asks for it (the disk cache may be off, or
    full and evict it before then), at most :data:`LIMIT` characters, oldest dropped
    first; and the keys a batch being compiled will give, which a call for one of them
    waits for rather than compiling it again (two sizes of one op in a kernel, whose
    fragments compile in parallel; an autotuner's threads)."""

    LIMIT = 64 << 20

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.pending: dict[str, threading.Event] = {}
        self.failed: set[str] = set()    # keys whose batch did not compile: alone now

    def take(self, key: str) -> str | None:
        """The PTX of ``key`` if compiled along, after waiting for a batch compiling it."""
        with _memo_lock:
            event = self.pending.get(key)
        if event is not None:
            event.wait()
        with _memo_lock:
            return self.texts.pop(key, None)

    def claim(self, keys) -> tuple[threading.Event, list[str]] | None:
        """Mark ``keys[0]`` (the call's own) and those of ``keys[1:]`` no batch holds yet as
        being compiled: (the event to set when done, the keys claimed); None when another
        batch holds ``keys[0]`` already (wait for it: :meth:`take`)."""
        with _memo_lock:
            if keys[0] in self.pending:
                return None
            event = threading.Event()
            mine = [k for k in keys if k not in self.pending and k not in self.texts]
            for k in mine:
                self.pending[k] = event
            return event, mine

    def done(self, claim, texts: dict[str, str]) -> None:
        """A claimed batch is compiled (``texts``: the PTX of its keys, none on failure)."""
        event, keys = claim
        with _memo_lock:
            self.texts.update((k, t) for k, t in texts.items() if k in keys)
            total = sum(map(len, self.texts.values()))
            while total > self.LIMIT:
                total -= len(self.texts.pop(next(iter(self.texts))))
            for k in keys:
                self.pending.pop(k, None)
        event.set()

    def forget(self) -> None:
        """In a forked child: no thread of its own compiles the pending batches."""
        self.texts.clear()
        self.pending.clear()
        self.failed.clear()


_along = _Along()


# the child of a fork has only the thread that forked: no batch of another thread will end
os.register_at_fork(after_in_child=lambda: _along.forget())


def parse_module(text: str, what: str) -> Module:
    """``text`` as a :class:`splice.ptxtools.ptx.Module` (the PTX parser is imported by the first
    build, not by ``import splice``)."""
    from ..ptxtools.ptx import Module
    return Module(text, what)


def memoized_module(key: str, make, still=None) -> Module:
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
    """A source or fragment file: a regular file, of at most
    :data:`splice.system.safe_fs.MAX_SOURCE_BYTES` (a FIFO or a device is refused, not read)."""
    try:
        return safe_fs.read_regular(path, safe_fs.MAX_SOURCE_BYTES, f"{what}: the file")
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

    def function_name(self, symbol: str) -> str:
        """How a message names ``symbol``, a function of this fragment's PTX, in a chain of
        calls: as is (a generated fragment names its own functions after the user's)."""
        return symbol

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
        from ..ptxtools.ptx import PTXSyntaxError
        try:
            return parse_module(text, self.describe())
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
        declared: the externs declared from this source (:class:`splice.inputs.checks.Declared`):
            splice appends their signature checks and C++ trampolines to the source.
        providers: the header libraries it may include
            (:class:`splice.inputs.headers.HeaderProvider`), in include-path order, after the CUDA
            headers.
        batch: None: compiled as it is. Otherwise (``splice.cub``'s instantiations) the PTX
            is cut to what its roots reach (:func:`splice.ptxtools.reachable.cut`), and the
            fragments of ``batch`` (this source with other declarations: other tile sizes)
            are compiled in the same NVRTC program (parsing CCCL dominates; an instance
            more costs little) and cut out, each cached under its own content key, which
            ``batch`` is not part of. Should that program fail, this fragment compiles
            alone, for its own error.
    """

    text: str | None = None
    path: Path | None = None
    options: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    defines: tuple[tuple[str, str | None], ...] = ()
    where: str = "<unknown>"
    declared: tuple = ()
    roots: tuple = ()   # (symbol, Signature) to keep when linking -dlto output
    providers: tuple[headers.HeaderProvider, ...] = dataclasses.field(kw_only=True)
    batch: tuple[CudaSource, ...] | None = None

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

    def program_name(self) -> str:
        """Its NVRTC program's name, the directory of which NVRTC looks quoted
        ``#include`` names up in first: the file's path; for text, a name beside the file
        that declares it (:func:`splice.inputs.cuda_compile.program_name`), never one
        relative to the current directory."""
        return str(self.path) if self.path is not None else \
            program_name(self.where, "extern_source")

    def check_extern(self, ext) -> None:
        src = self.read()
        for p in self.providers:
            p.check_extern(ext, src)

    def _options(self, target: str, found=None) -> list[str]:
        """NVRTC's options. The include path: ``include_dirs``, the directory of ``path``,
        ``-I`` of ``options``, then splice's own (:meth:`default_include_dirs`): the user's
        directories come first, as nvcc's ``-I`` precede the toolkit's. The macros:
        the providers' (:mod:`splice.inputs.cccl`'s unroll limit), then ``defines``, then
        ``options``: NVRTC takes a macro's last ``-D``, so the user's win. The warnings that
        mean an undefined result are errors
        (:func:`splice.inputs.cuda_compile.undefined_result_option`), before ``options``:
        a ``--diag-warn`` of the user's own overrides it, as NVRTC takes the last."""
        opts = [f"-arch={target}", "-rdc=true", undefined_result_option()]
        for d in self.include_dirs:
            opts.append(f"-I{d}")
        if self.path is not None:
            opts.append(f"-I{self.path.parent}")
        texts = self._texts(found)
        for p in self.providers:
            opts.extend(p.options(texts))
        for name, value in self.defines:     # after the providers': the user's -D wins
            opts.append(f"-D{name}" if value is None else f"-D{name}={value}")
        opts.extend(o for o in headers.pre_included(self) if o not in ("-dlto", "--dlto"))
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
        if any("splice_group.h" in t for t in texts):   # splice.forms.warpgroup_proof's header
            found.append(Path(__file__).parent.parent / "include")
        return list(dict.fromkeys(found))

    def _texts(self, found=None) -> list[str]:
        """The source and the text of every user header it includes (``found``:
        :meth:`_headers` of the source, when already found)."""
        src = self.read()
        return headers.texts(src, self._headers(src) if found is None else found)

    @property
    def dlto(self) -> bool:
        """Compiled to LTO-IR (``-dlto``) and linked to PTX by nvJitLink."""
        return any(o in ("-dlto", "--dlto") for o in self.options)

    def _nvrtc(self, full: str, name: str, target: str, found) -> str:
        """NVRTC (and nvJitLink for -dlto) on ``full``, the source's text, plus the
        generated checks (:func:`splice.inputs.cuda_compile.compile_source`); ``found``:
        :meth:`_headers` of the source."""
        return compile_source(full, name, target, self._options(target, found),
                              declared=self.declared, dlto=self.dlto, roots=self.roots,
                              providers=self.providers, what=self.describe(), headers=found)

    def content_key(self, target: str, found=None) -> str:
        """The cache key of its PTX for ``target`` (``found``: :meth:`_headers` of its
        source, when already found)."""
        src = self.read()
        found = self._headers(src) if found is None else found
        tools = ("nvrtc", "nvJitLink") if self.dlto else ("nvrtc",)
        texts = self._texts(found)
        return cache.key_of("cuda", src, self.checks, self._options(target, found),
                            toolchain.tool_identity(*tools), found,
                            [p.key(texts) for p in self.providers])

    def _headers(self, src: str) -> list[tuple[str, str]]:
        """(path, sha256) of every user header ``src`` (its text) includes
        (:func:`splice.inputs.headers.included`)."""
        return headers.included(self, src)

    def module(self, target: str, key: str | None = None) -> Module:
        """The PTX for ``target``, compiled once per content key. Not remembered nor cached
        when the source or a header it includes changed while NVRTC ran (a file saved
        during a compile): NVRTC may have read either version, so the PTX belongs to
        neither key."""
        kept: list[bool] = []   # _compile: whether the key held while NVRTC ran
        return memoized_module(key or self.content_key(target),
                         lambda key: self._compile(key, target, kept), lambda key: all(kept))

    def _compile(self, key: str, target: str, kept: list[bool]) -> Module:
        return parse_module(self._ptx(key, target, kept), f"NVRTC output for {self.describe()}")

    def _ptx(self, key: str, target: str, kept: list[bool]) -> str:
        """The PTX of ``key``: compiled along with another size (or being: waited for),
        cached, or compiled now."""
        while True:
            text = _along.take(key) if self.batch is not None else None
            if text is not None:
                return text
            stored = cache.load("fragment", key)
            if stored is not None:
                return stored[1].decode()
            text = self._build(key, target, kept)
            if text is not None:
                return text

    def _build(self, key: str, target: str, kept: list[bool]) -> str | None:
        """NVRTC's PTX for this fragment, cut when it has a batch, and the batch's, cached;
        None when another thread has just started compiling it along."""
        src = self.read()
        if not src.strip():
            raise SpliceCompileError(f"{self.describe()} is empty")
        name = self.program_name()
        full = src if src.endswith("\n") else src + "\n"
        found = self._headers(src)
        if self.batch and key not in _along.failed:
            others = {m.content_key(target, found): m for m in self.batch}
            claim = _along.claim([key, *others])
            if claim is None:
                return None
            texts: dict[str, str] = {}
            try:
                texts = self._nvrtc_batch(full, name, target, found, key,
                                          {k: others[k] for k in claim[1] if k in others})
                if texts:   # cached before done wakes a call waiting for one of them
                    self._keep(key, texts, target, kept)
            finally:   # its own too: a waiting call of the same key takes it
                _along.done(claim, texts if all(kept) else {})
            if texts:
                return texts[key]
        text = self._nvrtc(full, name, target, found)
        if self.batch is not None:
            text = self._cut(parse_module(text, f"NVRTC output for {self.describe()}"))
        self._keep(key, {key: text}, target, kept)
        return text

    def _keep(self, key: str, texts: dict[str, str], target: str, kept: list[bool]) -> None:
        """Cache ``texts`` (PTX by content key) when the source and its headers still have
        ``key`` (not edited while NVRTC ran: the include walk is taken again)."""
        kept.append(self.content_key(target) == key)
        if kept[-1]:
            for k, text in texts.items():
                cache.store("fragment", k, {"what": self.describe()}, text.encode())

    def _nvrtc_batch(self, full: str, name: str, target: str, found, key: str,
                     others: dict) -> dict[str, str]:
        """This fragment (``key``) and ``others`` (by key) in one NVRTC program: each
        one's PTX, cut, by key; {} when the program does not compile (this fragment then
        compiles alone, for its own error, now and from then on)."""
        members = {key: self, **others}
        whole = dataclasses.replace(
            self, declared=sum((m.declared for m in members.values()), ()),
            roots=sum((m.roots for m in members.values()), ()), batch=None)
        try:
            mod = parse_module(whole._nvrtc(full, name, target, found), f"NVRTC output for "
                                                                  f"{self.describe()}")
        except SpliceCompileError as e:
            log.debug("splice: %s did not compile with its other sizes (%s); alone now",
                      self.describe(), e.message)
            _along.failed.add(key)
            return {}
        return {k: m._cut(mod) for k, m in members.items()}

    def _cut(self, mod: Module) -> str:
        """What this fragment's roots reach of ``mod`` (:func:`splice.ptxtools.reachable.cut`)."""
        from ..ptxtools.reachable import cut
        return cut(mod, [symbol for symbol, _ in self.roots])


# PTX ISA version a generated wrapper declares for a target: at least what the target needs,
# at most what tileiras 13.x emits (9.x).
_PTX_VERSION_FOR = {80: "7.0", 86: "7.1", 87: "7.4", 89: "7.8", 90: "8.0", 100: "8.6",
                    101: "8.6", 103: "8.8", 110: "9.0", 120: "8.7", 121: "8.8"}


@dataclasses.dataclass(eq=False)
class AsmSource(Fragment):
    """The ``.func`` wrapping a :func:`splice.asm` snippet, generated for the kernel's own
    PTX target and checked by ptxas on its own, so that a malformed snippet is reported at
    its call site with ptxas's message."""

    spec: Any = None  # splice.declare.asm_frontend.AsmSpec, always given
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
        return memoized_module(key or self.content_key(target),
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
        return parse_module(text, self.describe())


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
            return parse_module(text, self.describe())
        return memoized_module(key or self.content_key(target), link)


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
    callbacks (no TMA tensor maps), see :func:`splice.driver.pipeline.build`."""

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
        return parse_module(text, self.describe())
