"""The compile pipeline of a spliced kernel, top to bottom.

::

    trace      cuTile frontend -> Tile IR bytecode; each extern call a marker  (trace)
    key        content key: bytecode, flags, fragments, arch, tool identities  (cache)
    lower      tileiras -> PTX, --nv-host object, ptxas flags; meanwhile the
               fragments compile in threads for the predicted PTX target      (toolchain)
    fragments  each fragment's PTX for the kernel's target, checked, prepared
               for merging; how each site calls (or inlines) its extern        (fragments,
                                                                                link, inline)
    splice     every marker -> call of its extern, proven; or the fma markers
               the proof refuses, which become atomic markers: trace again     (rewrite)
    link       fragments merged into the kernel's PTX                          (link)
    assemble   the static shared memory checked; ptxas with tileiras's flags
               and --nv-host -> cubin (nvJitLink
               for binary objects)                                             (toolchain)

:func:`build` runs it for one kernel signature and architecture: trace, key and cache here,
the stages of a miss in :mod:`splice.driver.stages` (a cache hit does not load them). :class:`Job`
times each stage (``Build.timings``, the ``splice`` logger at DEBUG) and writes each stage's
artefact to ``$SPLICE_DUMP_DIR/<symbol>.<arch>/`` as the stage returns it (the stages return
their artefacts and dump nothing themselves), so that a failed build leaves the stages
before the failure. A build that keeps its stages (:func:`splice.compile`,
``inspect()``, a dump directory) caches their texts beside the cubin and hits like a launch. Linked
cubins are cached on disk by content (:mod:`splice.system.cache`); fragments by their own content
(:mod:`splice.inputs.fragments`). What each stage costs against plain cuTile, and why:
``docs/design.md#first-launch``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from cuda.tile import TileError

from ..errors import (
    SpliceError,
    SpliceLinkError,
    SpliceNotCachedError,
    SpliceToolchainError,
    as_cutile_error,
)
from ..forms.base import SiteInfo
from ..inputs import nvshmem
from ..ptxtools.spans import Span
from ..system import _cutile, cache, progress, settings, toolchain
from ..tracing import trace
from . import verify
from .result import Build, dump_dir, dump_file, tileir_text

if TYPE_CHECKING:
    from .stages import Spliced

__version__ = "0.1.0"
__all__ = ["Build", "Job", "SiteInfo", "build", "normalize_arch"]
log = logging.getLogger("splice")


def build(kernel, signature, arch: str, context=None, *, keep_stages: bool = False) -> Build:
    """Compile ``kernel`` for ``signature`` on ``arch`` with every extern call spliced in.

    Args:
        kernel: a ``@splice.kernel``.
        signature: a ``cuda.tile.compilation.KernelSignature``, or a list of them (one
            cubin with an entry each, as :func:`splice.export_kernel` writes).
        arch: ``"sm_80"``, ``"sm_90"``, ``"sm_100"``...
        context: cuTile's TileContext (compile timeout); default cuTile's.
        keep_stages: keep every intermediate stage: a miss caches their texts with the
            cubin, a hit returns them (an entry cached without them is a miss).

    Returns:
        Build: the cubin, its entry symbol(s), the call sites and (with ``keep_stages``)
        every stage's text.

    Raises:
        SpliceCallError: a call in the kernel does not fit its extern's declaration.
        SpliceCompileError: NVRTC rejected a CUDA C fragment.
        SpliceLinkError: a fragment cannot be linked, or its code breaks a rule of its scope.
        SpliceRewriteError: splice cannot prove the rewrite of a call site.
        SpliceToolchainError: a tool failed, or an architecture tileiras cannot compile for.
        cuda.tile.TileError: cuTile's own class where cuTile refuses the kernel's code
            (:func:`splice.errors.as_cutile_error`).

    Example:
        ```python
        import cuda.tile as ct
        import splice

        @splice.kernel
        def scale(x, y, TILE: ct.Constant[int]):     # inline CUDA C: splice.cuda
            doubled = splice.cuda("2 * x", dtype=ct.float32,
                                  x=ct.load(x, index=(ct.bid(0),), shape=(TILE,)))
            ct.store(y, index=(ct.bid(0),), tile=doubled)

        sig = splice.kernel_signature("array(float32)", "array(float32)", 128)
        b = splice.build(scale, sig, "sm_90", keep_stages=True)
        print(b.symbol, [s.instances for s in b.sites], sorted(b.timings))
        assert b.cubin[:4] == b"\x7fELF" and "call" in b["spliced_ptx"]
        ```
    """
    with _gc_paused():
        job = Job.start(kernel, signature, arch, context, keep_stages)
        traced = job.trace(frozenset())
        key = job.run("key", _cache_key, job, traced)
        hit = job.run("cache", _from_cache, job, traced, key)
        if hit is not None:
            _dump_hit(job, hit)
            return hit
        if settings.compile_never():
            raise _not_cached(job, traced)
        with progress.task(f"compiling {job.what} for {job.arch}") as job.shown:
            return _compile(job, traced, key)


def _compile(job: Job, traced, key: str) -> Build:
    """A miss: tileiras, the fragments, the rewriter, the linker, ptxas (not loaded on a
    hit); cached under ``key`` when the inputs still have it."""
    from . import stages
    sp = stages.lower_and_splice(job, traced)
    merged = job.run("link", stages.link_fragments, job, sp, dumps=stages.merged_files)
    cubin = job.run("assemble", stages.assemble, job, sp, merged,
                    dumps=lambda cubin: [(".cubin", cubin)])
    out = stages.result(job, sp, merged, cubin)
    _finish(job, out, key if _key_held(job, traced, key) else None, sp)
    return out


def _key_held(job: Job, traced, key: str) -> bool:
    """Whether the kernel's inputs still have ``key`` after compiling: an extern's file or
    header saved (or removed) meanwhile makes a cubin of either version, cached under
    neither key."""
    try:
        return job.run("key", _cache_key, job, traced) == key
    except SpliceError:   # a file removed meanwhile: the build stands, uncached
        return False


# --------------------------------------------------------------------------------------------
# The driver's state


@dataclasses.dataclass
class Job:
    """One build: its inputs, the name errors give it, and the stage driver (timings,
    dumps)."""

    kernel: Any
    signature: Any
    arch: str
    context: Any
    keep_stages: bool
    name: str
    what: str              # "kernel 'f' (file.py:12)", for messages
    dump_root: str | None
    started: float
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    lowerings: int = 1
    symbol: str = ""
    shown: progress.Task | None = None   # a miss: its line on the terminal

    @classmethod
    def start(cls, kernel, signature, arch, context, keep_stages: bool) -> Job:
        t0 = time.perf_counter()
        trace.check_build_args(kernel, signature)
        name, where = _kernel_desc(kernel)
        what = f"kernel '{name}' ({where})"
        dump_root = settings.dump_dir()
        return cls(kernel, signature, normalize_arch(arch, what), context,
                   keep_stages or dump_root is not None, name, what, dump_root, t0)

    def run(self, stage: str, fn: Callable, *args,
            dumps: Callable[[Any], list[tuple[str, str | bytes | None]]] | None = None,
            **kwargs):
        """``fn(*args, **kwargs)``, the stage's artefact: its wall time added to
        ``timings[stage]``, and the files ``dumps(artefact)`` names written to
        ``$SPLICE_DUMP_DIR`` (:meth:`dump`) once the stage has made it."""
        t = time.perf_counter()
        if self.shown is not None:
            self.shown.detail = _DOING.get(stage, stage)
        try:
            out = fn(*args, **kwargs)
        finally:
            dt = time.perf_counter() - t
            self.timings[stage] = self.timings.get(stage, 0.0) + dt
            log.debug("%s: %s took %.3f s", self.what, stage, dt)
        if dumps is not None and self.dump_root is not None:
            for suffix, data in dumps(out):
                self.dump(suffix, data)
        return out

    def trace(self, atomic: frozenset[str]):
        """The ``trace`` stage: pure sites whose key is in ``atomic`` get the atomic
        marker (the fallback of :func:`splice.driver.stages.lower_and_splice` traces again)."""
        return self.run("trace", _trace, self, atomic,
                        dumps=lambda traced: [(".tilebc", traced.bytecode)])

    def dump(self, suffix: str, data: str | bytes | None) -> None:
        """Write one stage's output to ``$SPLICE_DUMP_DIR/<symbol>.<arch>/<symbol><suffix>``
        (nothing without the variable).

        Raises:
            SpliceToolchainError: the directory cannot be written.
            SpliceUnsafePathError: ``<symbol>.<arch>`` is another user's, or others can
                write it.
        """
        if self.dump_root is None or data is None:
            return
        try:
            d = dump_dir(Path(self.dump_root), self.symbol, self.arch)
            dump_file(d, f"{self.symbol}{suffix}", data)
        except OSError as e:
            raise SpliceToolchainError(
                f"{self.what}: cannot write its stages to SPLICE_DUMP_DIR={self.dump_root} "
                f"({e.strerror or e}): point it at a writable directory, or unset it") from None

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

# --------------------------------------------------------------------------------------------
# trace, key, cache


def _cutile_refusal(job: Job, e) -> TileError:
    """cuTile's frontend refusing the kernel's code (``e``: a ``cuda.tile.TileError``) as an
    error of cuTile's own class that is also a SpliceError (:func:`errors.as_cutile_error`):
    cuTile's message and location, a line naming the kernel, and what splice.asm takes when
    the line calls it (cuTile checks a call's arguments before splice sees them)."""
    import linecache
    loc = e.loc
    line = "" if loc is None or loc.is_unknown() else linecache.getline(loc.filename, loc.line)
    hint = ("; splice.asm takes a str template (a literal, not bytes), tiles or scalars as "
            "inputs, and the keywords dtype= (a cuTile dtype such as ct.int32, or a tuple of "
            "them), constraints=, pure=, pack= and scope=" if "asm(" in line else "")
    return as_cutile_error(e, f"(cuTile refused the code of {job.what}, compiled by "
                              f"@splice.kernel{hint})")


def _trace(job: Job, atomic: frozenset[str]):
    """The kernel's Tile IR bytecode and call sites (pure sites whose key is in ``atomic``
    get the atomic marker); checks each extern before anything compiles."""
    try:
        traced = trace.trace_kernel(job.kernel, job.signature, job.arch, job.context, atomic)
    except TileError as e:
        if isinstance(e, SpliceError):
            raise
        raise _cutile_refusal(job, e) from e.__cause__
    job.symbol = traced.symbol
    externs: dict[str, Any] = {}     # symbol -> ExternFunction
    for site in traced.sites:
        ext = site.extern
        ext.fragment.check_extern(ext)
        prev = externs.setdefault(ext.symbol, ext)
        if prev is not ext and prev.fragment is not ext.fragment:
            _check_same_symbol(prev, ext)
    return traced


def _cache_key(job: Job, traced) -> str:
    """The cubin's content key: bytecode, tileiras flags, arch, every site's extern (per
    site: two externs of one library symbol may differ in scope, inline or signature,
    which the bytecode does not always show: the extern's options record gives the first
    two; ``pure`` and ``memory`` are in the bytecode), the tools. cache.load/store add splice's
    code identity; each fragment's key names its own tools."""
    content: dict[int, str] = {}
    for site in traced.sites:
        frag = site.extern.fragment
        if id(frag) not in content:
            content[id(frag)] = frag.content_key(job.arch)
    return cache.key_of(
        "kernel", traced.bytecode, traced.tileiras_flags, job.arch,
        [(e.symbol, str(e.signature), e.options.inline, e.fragment.kind,
          content[id(e.fragment)], str(e.options.form.scope))
         for e in (site.extern for site in traced.sites)],
        toolchain.tool_identity("tileiras", "ptxas"))


def _from_cache(job: Job, traced, key: str) -> Build | None:
    """The cached build of ``key``, or None; for a build that keeps its stages, None also
    where the stages' texts are not cached with it (an entry a launch cached)."""
    hit = cache.load("kernel", key)
    if hit is None:
        return None
    meta, cubin = hit
    stored = meta.get("sites", ())
    if meta.get("symbol") != traced.symbol or len(stored) != len(traced.sites):
        return None
    kept = _stages_from_cache(key) if job.keep_stages else {}
    if kept is None:
        return None
    out = Build(job.name, job.arch, traced.symbol, cubin,
                [SiteInfo.of(s, **m) for s, m in zip(traced.sites, stored)],
                traced.lifecycle_providers + nvshmem.lifecycle_providers(
                    job.what, frozenset(meta.get("host_filled", ()))),
                entry_calls=meta.get("entry_calls", {}), from_cache=True,
                ptxas_flags=tuple(meta.get("ptxas_flags", ())),
                host_object_size=meta.get("host_object_size", 0),
                symbols=traced.symbols, timings=job.timings,
                lowerings=meta.get("lowerings", 1), **kept)
    out.seconds = job.seconds
    log.info("%s for %s: cubin from the cache in %.3f s", job.what, job.arch, out.seconds)
    if verify.enabled():
        verify.verify_build(out)
    return out


def _not_cached(job: Job, traced) -> SpliceNotCachedError:
    """The error of a build the cache lacks under ``SPLICE_COMPILE=never``: the kernel, its
    externs, and how to bring their code."""
    calls = list(dict.fromkeys(s.extern.fragment.naming(s.extern) for s in traced.sites))
    kept = " with its stages (splice.compile, inspect(), SPLICE_DUMP_DIR)" \
        if job.keep_stages else ""
    return SpliceNotCachedError(
        f"{job.what} for {job.arch} is not in the cache{kept} and SPLICE_COMPILE=never "
        f"forbids compiling it; it calls {', '.join(calls) or 'no extern'}. Compile it "
        f"where compiling is allowed (a launch, python -m splice warmup) and bring the "
        f"cache: 'python -m splice cache export FILE' there, 'python -m splice cache "
        f"import FILE' here (the same splice and toolchain); or unset SPLICE_COMPILE")


def _stages_from_cache(key: str) -> dict[str, Any] | None:
    """The PTX stages and spans cached under ``key`` as :class:`Build`'s fields, or None."""
    hit = cache.load("stages", key)
    if hit is None:
        return None
    meta, payload = hit
    texts = json.loads(payload)
    return {"ptx": texts["ptx"], "spliced_ptx": texts["spliced_ptx"],
            "tileir": tileir_text(texts["ptx"]),
            "spans": tuple(Span(**s) for s in meta["spans"])}


def _store_stages(key: str, out: Build) -> None:
    """Cache ``out``'s PTX stages and spans under ``key``, beside its cubin."""
    texts = {"ptx": out.ptx, "spliced_ptx": out.spliced_ptx}
    cache.store("stages", key, {"spans": [dataclasses.asdict(s) for s in out.spans]},
                json.dumps(texts).encode())


def _dump_hit(job: Job, out: Build) -> None:
    """A hit's stages to ``$SPLICE_DUMP_DIR``: those it has (not the fragments' PTX or the
    PTX before the fragments were merged)."""
    if job.dump_root is None:
        return
    job.dump(".ptx", out.ptx)
    job.dump(".tileir", out.tileir)
    job.dump(".spliced.ptx", out.spliced_ptx)
    job.dump(".cubin", out.cubin)
    job.dump(".sass", out.sass)
    job.dump(".timings.json", out.timings_json())


def _finish(job: Job, out: Build, key: str | None, sp: Spliced) -> None:
    """Log, verify (``SPLICE_VERIFY=1``), cache (under ``key``, with the stages' texts when
    they are kept; None: not cached, an input changed while compiling), and dump the SASS
    and timings."""
    out.seconds = job.seconds
    log.info("%s for %s: compiled in %.3f s, %d call site(s), %d bytes of cubin", job.what,
             job.arch, out.seconds, len(out.sites), len(out.cubin))
    log.debug("%s: seconds per stage: %s", job.what,
              ", ".join(f"{k} {v:.3f}" for k, v in out.timings.items()))
    for s in out.sites:
        log.debug("%s: %s", job.what, s)
    if verify.enabled():
        verify.verify_build(out)
    if key is not None:
        cache.store("kernel", key, {"symbol": out.symbol, "arch": out.arch,
                                    "entry_calls": out.entry_calls,
                                    "host_filled": sorted(sp.compiled.linked.host_filled),
                                    "ptxas_flags": list(out.ptxas_flags),
                                    "host_object_size": out.host_object_size,
                                    "lowerings": out.lowerings,
                                    "sites": [s.stored() for s in out.sites]}, out.cubin)
        if job.keep_stages:
            _store_stages(key, out)
    if job.dump_root is not None:
        job.dump(".sass", out.sass)
        job.dump(".timings.json", out.timings_json())

# --------------------------------------------------------------------------------------------
# helpers


@contextlib.contextmanager
def _gc_paused():
    """The cyclic garbage collector off (a build allocates many small objects and frees
    them by reference counting; the collector's passes over them are pure cost), back on
    afterwards, also on an error."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _kernel_desc(kernel) -> tuple[str, str]:
    f = _cutile.python_function(kernel)
    code = f.__code__
    return f.__name__, f"{code.co_filename}:{code.co_firstlineno}"


_ARCH_RE = re.compile(r"^sm_?(\d{2,3})([af]?)$", re.I)


def normalize_arch(arch, what: str = "") -> str:
    """``"sm_90"`` for ``"sm_90"``, ``"sm_90a"``, ``"SM_90"``: cuTile compiles for the
    architecture (tileiras emits the arch-specific PTX target itself).

    Raises:
        SpliceToolchainError: not an ``sm_XY`` architecture name.
    """
    m = _ARCH_RE.match(str(arch).strip()) if isinstance(arch, str) else None
    what = f"{what}: " if what else ""
    if m is None:
        raise SpliceToolchainError(f"{what}unknown GPU architecture {arch!r}: write it like "
                                   f"'sm_80', 'sm_90' or 'sm_100'")
    if int(m.group(1)) < 80:
        raise SpliceToolchainError(f"{what}GPU architecture {arch!r}: cuTile (tileiras) "
                                   f"targets sm_80 and newer")
    return f"sm_{m.group(1)}"


#: What the progress line says of a stage that runs a tool
_DOING = {"lower": "lower (tileiras, and NVRTC for the externs)", "assemble": "assemble (ptxas)"}


def _check_same_symbol(a, b):
    """Two externs naming one symbol must come from the same code."""
    ka = (a.fragment.kind, a.fragment.content_key("any"))
    kb = (b.fragment.kind, b.fragment.content_key("any"))
    text = [x.fragment.read() for x in (a, b)]
    if ka != kb and text[0] is not None and text[0] == text[1]:
        raise SpliceLinkError(
            f"extern '{a.symbol}' is declared twice from one source (at {a.where} and at "
            f"{b.where}); each declaration compiles its own copy, checked against its own "
            f"signature, and the kernel module would define '{a.symbol}' twice: declare it "
            f"once (one module-level name) and import it everywhere; to call it with two "
            f"scopes or signatures, compile the source once as a library, lib = "
            f"splice.library(source=...), and declare each form from it with "
            f"lib.extern('{a.symbol}', signature=..., scope=...)")
    if ka != kb:
        raise SpliceLinkError(
            f"externs '{a.name}' (declared at {a.where}) and '{b.name}' (declared at "
            f"{b.where}) both name the symbol '{a.symbol}' but come from different code; "
            f"rename one")
