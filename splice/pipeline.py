"""The compile pipeline of a spliced kernel, top to bottom.

::

    trace     cuTile frontend -> Tile IR bytecode; each extern call is a marker   (_cutile)
    key       content key: bytecode, flags, fragments, arch, tool identities      (cache)
    lower     tileiras from the overlay -> PTX, --nv-host object, ptxas flags     (toolchain)
    compile   fragments -> PTX for the kernel's PTX target (NVRTC / as is)        (fragments)
    splice    every marker -> call of its extern, proven                         (rewrite)
    link      fragments merged into the kernel module, symbols checked           (link)
    assemble  ptxas with tileiras's flags and --nv-host -> cubin                 (toolchain)

:func:`build` runs it for one kernel signature and architecture and returns a
:class:`Build`, whose stages can be inspected (``build["ptx"]``, ``build.sass``) and are
written to ``$SPLICE_DUMP_DIR`` when that is set. Linked cubins are cached on disk by
content (:mod:`splice.cache`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import logging
import os
import re
import time
from pathlib import Path

from . import _cutile, cache, collectives, diagnose, inline, link, nvshmem, rewrite, toolchain, \
    verify
from .errors import SpliceLinkError, SpliceToolchainError
from .fragments import BinarySource, CudaSource, Fragment, PtxSource
from .ptx import Module
from .spans import Span

__version__ = "0.1.0"
log = logging.getLogger("splice")


@dataclasses.dataclass
class SiteInfo:
    """One call site of the built kernel: where it is, what it calls, how many marker
    instances (calls in PTX) it became, and its marker: "fma" (pure calls: elementwise,
    no layout change) or "atomic" (impure calls, and pure calls whose fma marker LLVM
    changed: ``why_atomic``)."""

    index: int
    extern: str
    symbol: str
    where: str
    shape: tuple[int, ...]
    instances: int
    inlined: bool = False
    why_not_inlined: str | None = None
    marker: str = "atomic"
    why_atomic: str | None = None
    scope: str = "element"

    def __str__(self) -> str:
        how = "inlined bod(ies)" if self.inlined else "call(s)"
        why = f" (not inlined: {self.why_not_inlined})" if self.why_not_inlined else ""
        marker = f"{self.marker} marker"
        if self.why_atomic:
            marker += f" (its fma marker was changed by tileiras: {self.why_atomic})"
        if self.scope == "block":
            return (f"site {self.index}: {self.extern} -> {self.symbol} at {self.where}, "
                    f"block scope: every thread of the block calls it once per execution, "
                    f"{self.instances} {how} in PTX{why}")
        return (f"site {self.index}: {self.extern} -> {self.symbol} at {self.where}, tile "
                f"shape {self.shape}, {self.instances} {how} in PTX{why}, {marker}")


@dataclasses.dataclass
class Build:
    """The result of compiling one kernel signature for one architecture.

    Stages (``build[name]``): ``"tileir"`` (Tile IR text tileiras embeds in its PTX, or
    None), ``"ptx"`` (PTX as tileiras emitted it), ``"spliced_ptx"`` (the PTX ptxas
    assembled: calls spliced in, fragments merged), ``"cubin"`` (bytes), ``"sass"``
    (nvdisasm's listing, None without nvdisasm).
    """

    kernel_name: str
    arch: str
    symbol: str
    cubin: bytes
    sites: list[SiteInfo]
    lifecycle_providers: tuple = ()
    ptx: str | None = None
    spliced_ptx: str | None = None
    tileir: str | None = None
    ptxas_flags: tuple[str, ...] = ()
    host_object_size: int = 0
    entry_calls: dict = dataclasses.field(default_factory=dict)
    from_cache: bool = False
    seconds: float = 0.0
    symbols: tuple[str, ...] = ()   # every entry (several signatures: splice.export_kernel)
    spans: tuple[Span, ...] = ()    # of spliced_ptx: what wrote which lines (splice.spans)
    _sass: str | None = dataclasses.field(default=None, repr=False)

    STAGES = ("tileir", "ptx", "spliced_ptx", "cubin", "sass")

    @property
    def sass(self) -> str | None:
        if self._sass is None:
            self._sass = toolchain.disassemble(self.cubin)
        return self._sass

    def __getitem__(self, stage: str):
        if stage not in self.STAGES:
            raise KeyError(f"unknown stage {stage!r}; stages: {', '.join(self.STAGES)}")
        return getattr(self, stage)

    def _sass_calls(self, kernel_body_only: bool, entry: str | None) -> list[str] | None:
        """The callee of every SASS ``CALL`` as written (``$<kernel>$<function>`` for
        functions in a kernel's section, ``$__internal_<n>_$<name>`` for CUDA's internal
        helpers); with ``kernel_body_only``, only those in ``entry``'s own body (default:
        the first entry), not in the device functions it calls. None without nvdisasm."""
        s = self.sass
        if s is None:
            return None
        if kernel_body_only:
            # the body ends where the first device function of the kernel's section
            # (``$<kernel>$<function>``) is declared or labelled; CALL lines that name
            # one start with their address, not the name
            entry = entry or self.symbol
            start = s.find(f".text.{entry}:")
            m = re.compile(rf"^\s*(?:\.\w+\s+)?\${re.escape(entry)}\$", re.M).search(
                s, start)
            s = s[start:m.start() if m else len(s)]
        return re.findall(r"\bCALL\.[A-Z.]+\s+`?\(?\$?([^)`;\s]*)", s)

    def sass_call_count(self, symbol: str | None = None, kernel_body_only: bool = False,
                        entry: str | None = None) -> int | None:
        """Number of SASS ``CALL`` instructions, all or those calling ``symbol`` (None
        without nvdisasm); with ``kernel_body_only``, only those in the body of ``entry``
        (default: the kernel's first entry), not in the device functions it calls."""
        calls = self._sass_calls(kernel_body_only, entry)
        if calls is None or symbol is None:
            return None if calls is None else len(calls)
        return sum(1 for c in calls if c == symbol or c.endswith("$" + symbol))

    def sass_call_targets(self) -> dict[str, int] | None:
        """SASS ``CALL``\\ s per callee name, section prefixes removed (``g``,
        ``__cuda_sm3x_div_rn_noftz_f32_slowpath``); None without nvdisasm."""
        calls = self._sass_calls(False, None)
        if calls is None:
            return None
        out: dict[str, int] = {}
        for c in calls:
            name = c.rsplit("$", 1)[-1] if "$" in c else c
            out[name] = out.get(name, 0) + 1
        return out

    def summary(self) -> str:
        """Sites, and every SASS ``CALL`` by callee: splice's externs, and calls that are
        not splice's (CUDA's own helpers that tileiras or NVRTC emit, e.g. the IEEE
        division slow path ``__cuda_sm3x_div_rn_noftz_f32_slowpath``)."""
        lines = [f"kernel {self.kernel_name} ({self.symbol}) for {self.arch}: "
                 f"{len(self.cubin)} bytes of cubin"]
        if len(self.symbols) > 1:
            lines.append(f"  entries: {', '.join(self.symbols)}")
        lines += [f"  {s}" for s in self.sites]
        targets = self.sass_call_targets()
        if targets is None:
            lines.append("  SASS: n/a (nvdisasm not installed)")
            return "\n".join(lines)
        ours = sorted({s.symbol for s in self.sites})
        per = ", ".join(f"{sym}: {self.sass_call_count(sym)}" for sym in ours)
        lines.append(f"  SASS CALL instructions: {sum(targets.values())} "
                     f"({per or 'no externs'})")
        helpers = {n: k for n, k in targets.items() if n not in ours and _is_cuda_helper(n)}
        others = {n: k for n, k in targets.items() if n not in ours and n not in helpers}
        if helpers:
            lines.append("  SASS CALLs that are not externs (CUDA's internal helpers that "
                         "tileiras or NVRTC emit): " + ", ".join(f"{n}: {k}{_helper_note(n)}"
                                               for n, k in sorted(helpers.items())))
        if others:
            lines.append("  SASS CALLs of other device functions (called by the fragments): "
                         + ", ".join(f"{n}: {k}" for n, k in sorted(others.items())))
        return "\n".join(lines)


def _is_cuda_helper(name: str) -> bool:
    return name.startswith(("__cuda_", "__internal_", "__nv_", "__nvvm_"))


def _helper_note(name: str) -> str:
    """What a CUDA internal helper a SASS CALL names does, where the name says it."""
    for pattern, what in ((r"div_rn.*slowpath", "IEEE division slow path"),
                          (r"rcp.*slowpath", "IEEE reciprocal slow path"),
                          (r"sqrt.*slowpath", "IEEE square root slow path"),
                          (r"internal_trig_reduction", "trigonometric argument reduction")):
        if re.search(pattern, name):
            return f" ({what})"
    return ""


def _kernel_desc(kernel) -> tuple[str, str]:
    f = kernel._pyfunc
    code = f.__code__
    return f.__name__, f"{code.co_filename}:{code.co_firstlineno}"


def _tileir_text(ptx: str) -> str | None:
    m = re.search(r"\.source_begin\n(.*?)\.source_end", ptx, re.S)
    return m.group(1) if m else None


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


#: The PTX target tileiras emitted for each --gpu-name, as seen in this process.
_PTX_TARGETS: dict[str, str] = {}


def _gpu_name(traced) -> str:
    flags = traced.tileiras_flags
    return flags[flags.index("--gpu-name") + 1] if "--gpu-name" in flags else ""


def predicted_ptx_target(gpu_name: str) -> str:
    """The PTX target tileiras 13.x emits for ``--gpu-name``: the arch-specific ``sm_90a``,
    ``sm_100a``... from sm_90 on, ``sm_80``... before (what it emitted before in this process
    where known). A guess: the pipeline checks it against tileiras's PTX."""
    seen = _PTX_TARGETS.get(gpu_name)
    if seen is not None:
        return seen
    m = re.fullmatch(r"sm_(\d+)", gpu_name)
    return f"{gpu_name}a" if m and int(m.group(1)) >= 90 else gpu_name


@contextlib.contextmanager
def _fragments_compiled_ahead(traced, target: str):
    """Compile the kernel's fragments (NVRTC, nvJitLink, ptxas for inline PTX: these release
    the GIL) in threads for the predicted PTX target while the body (tileiras, a subprocess)
    runs. Only fills the fragments' memo and cache: the pipeline then asks each fragment for
    the *actual* target and gets the result, or compiles anew after a wrong guess, and a
    fragment that failed here fails again there with the same error, in site order."""
    frags: dict[int, Fragment] = {}
    for site in traced.sites:
        frag = site.extern.fragment
        if not isinstance(frag, (PtxSource, BinarySource)):  # those compile nothing
            frags.setdefault(id(frag), frag)
    if not frags:
        yield
        return
    pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=min(len(frags), os.cpu_count() or 1),
        thread_name_prefix="splice-fragment")
    try:
        for frag in frags.values():
            pool.submit(frag.module, target)
        yield
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _lower_and_splice(traced, name: str, what: str):
    """tileiras, fragments for the kernel's PTX target, the call of every site, and the
    rewritten PTX: (capture, kernel module, target, linked fragments, calls, reasons for not
    inlining, rewrite report)."""
    guess = predicted_ptx_target(_gpu_name(traced))
    with _fragments_compiled_ahead(traced, guess):
        capture = toolchain.run_tileiras(traced.bytecode, traced.tileiras_flags,
                                         timeout=traced.timeout_sec, what=what)
    kernel_mod = Module(capture.ptx, f"tileiras PTX of {what}")
    target = next((t for t in kernel_mod.target if t.startswith("sm_")), None)
    if target is None:
        raise SpliceLinkError(f"tileiras PTX of {what} names no sm_ target")
    if target != guess:
        log.debug("%s: tileiras emitted PTX for %s, fragments were compiled ahead for %s",
                   what, target, guess)
    _PTX_TARGETS[_gpu_name(traced)] = target

    # Fragments for the kernel's own PTX target, de-duplicated by content.
    frag_mods: dict[str, tuple[str, Module]] = {}
    for site in traced.sites:
        ext = site.extern
        fkey = ext.fragment.content_key(target)
        if fkey not in frag_mods:
            frag_mods[fkey] = (ext.fragment.describe(), ext.fragment.module(target))
        fdesc, fmod = frag_mods[fkey]
        decl = f"extern '{ext.name}' (declared at {ext.where})"
        link.check_compatible(fmod, kernel_mod, f"{decl}, called at {site.where}: {fdesc}")
        fn = fmod.functions.get(ext.symbol)
        if isinstance(ext.fragment, BinarySource):
            continue
        if fn is None or not fn.is_definition:
            defined = sorted(f.name for f in fmod.functions.values() if f.is_definition)
            raise SpliceLinkError(
                f"{decl}: {fdesc} does not define the device function '{ext.symbol}'"
                f" (it defines: {', '.join(defined) or 'nothing'}). The symbol must be the C "
                f"name of an extern \"C\" __device__ function that the fragment defines and "
                f"emits: functions declared only, inline/__forceinline__ or static ones are "
                f"not emitted unless used, and -dlto output holds no PTX")
        link.check_prototype(fn, ext.signature, f"{decl}, {fdesc}", fmod.text)
    collectives.check_element_sites(traced.sites, frag_mods, target)
    linked = link.prepare(kernel_mod, list(frag_mods.values()), name,
                          frozenset(s.extern.symbol for s in traced.sites),
                          host_filled=nvshmem.HOST_FILLED)

    calls: dict[int, rewrite.SiteCall] = {}
    not_inlined: dict[int, str] = {}
    for site in traced.sites:
        ext = site.extern
        if isinstance(ext.fragment, BinarySource):
            fn = frag_mods[ext.fragment.content_key(target)][1].functions[ext.symbol]
            if ext.inline == "always":
                raise SpliceLinkError(f"extern '{ext.name}' (declared at {ext.where}) has "
                                      f"inline=\"always\" but its code is a binary object")
            not_inlined[site.index] = "binary object: no PTX body"
            calls[site.index] = rewrite.SiteCall(site.index, ext.symbol, fn.params,
                                                 fn.results[0] if fn.results else None,
                                                 ext.signature, f"{ext.name} at {site.where}",
                                                 None, site.marker, site.marker_bits,
                                                 ext.scope)
            continue
        pmod, fn = linked.functions[ext.symbol]
        body = None
        if ext.inline != "never":
            reason = inline.why_not_inlinable(pmod, fn, linked.functions)
            if reason is None:
                body = (pmod, fn)
            elif ext.inline == "always":
                raise SpliceLinkError(
                    f"extern '{ext.name}' (declared at {ext.where}) has inline=\"always\" but "
                    f"'{ext.symbol}' cannot be inlined: {reason}")
            else:
                not_inlined[site.index] = reason
        else:
            not_inlined[site.index] = "inline=\"never\""
        calls[site.index] = rewrite.SiteCall(site.index, ext.symbol, fn.params,
                                             fn.results[0] if fn.results else None,
                                             ext.signature, f"{ext.name} at {site.where}",
                                             body, site.marker, site.marker_bits,
                                             ext.scope)

    report = rewrite.splice_calls(kernel_mod, calls, kernel_name=name)
    return capture, kernel_mod, target, linked, calls, not_inlined, report


def build(kernel, signature, arch: str, context=None, *, keep_stages: bool = False) -> Build:
    """Compile ``kernel`` for ``signature`` on ``arch`` with every extern call spliced in.

    Args:
        kernel: a ``@splice.kernel``.
        signature: a ``cuda.tile.compilation.KernelSignature``, or a list of them (one
            cubin with an entry each, as :func:`splice.export_kernel` writes).
        arch: ``"sm_80"``, ``"sm_90"``, ``"sm_100"``...
        context: cuTile's TileContext (compile timeout); default cuTile's.
        keep_stages: keep every intermediate stage (skips the cubin cache).

    Raises:
        SpliceCallError, SpliceCompileError, SpliceLinkError, SpliceRewriteError,
        SpliceToolchainError.
    """
    with _gc_paused():
        return _build(kernel, signature, arch, context, keep_stages)


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


def _build(kernel, signature, arch: str, context, keep_stages: bool) -> Build:
    t0 = time.perf_counter()
    _cutile.check_build_args(kernel, signature)
    name, where = _kernel_desc(kernel)
    what = f"kernel '{name}' ({where})"
    arch = normalize_arch(arch, what)
    traced = _cutile.trace_kernel(kernel, signature, arch, context)
    dump_dir = os.environ.get("SPLICE_DUMP_DIR")
    keep_stages = keep_stages or bool(dump_dir)

    externs: dict = {}  # symbol -> ExternFunction
    for site in traced.sites:
        ext = site.extern
        if isinstance(ext.fragment, CudaSource):   # before compiling anything
            nvshmem.check_scope(ext, ext.fragment.read())
        prev = externs.get(ext.symbol)
        if prev is not None and prev is not ext and prev.fragment is not ext.fragment:
            _check_same_symbol(prev, ext)
        externs.setdefault(ext.symbol, ext)

    # cache.load/store add splice's code identity; each fragment's key names its tools.
    # Per site, not per symbol: two externs of one library symbol may differ in scope,
    # inline or signature, which the bytecode does not always show.
    content = {id(e.fragment): e.fragment.content_key(arch) for e in externs.values()}
    key = cache.key_of(
        "kernel", traced.bytecode, traced.tileiras_flags, arch,
        [(e.symbol, str(e.signature), e.inline, e.fragment.kind,
          content.get(id(e.fragment)) or e.fragment.content_key(arch), e.scope)
         for e in (site.extern for site in traced.sites)],
        toolchain.tool_identity("tileiras", "ptxas"))
    if not keep_stages:
        hit = cache.load("kernel", key)
        if hit is not None:
            meta, cubin = hit
            if meta.get("symbol") == traced.symbol and \
                    len(meta.get("sites", ())) == len(traced.sites):
                sites = [_cached_site(s, m) for s, m in zip(traced.sites, meta["sites"])]
                out = Build(name, arch, traced.symbol, cubin, sites,
                            traced.lifecycle_providers + nvshmem.lifecycle_providers(
                                what, frozenset(meta.get("host_filled", ()))),
                            entry_calls=meta.get("entry_calls", {}), from_cache=True,
                            seconds=time.perf_counter() - t0, symbols=traced.symbols)
                log.info("%s for %s: cubin from the cache in %.3f s", what, arch, out.seconds)
                if verify.enabled():
                    verify.verify_build(out)
                return out

    # Pure calls get fma markers (no layout conversion around them). Where LLVM changed
    # their form (e.g. merged two sites' markers from the arms of a branch), compile again
    # with atomic markers for the sites involved, then for every pure site, before failing.
    fallback: dict[int, str] = {}   # site index -> why it has the atomic marker
    while True:
        try:
            capture, kernel_mod, target, linked, calls, not_inlined, report = \
                _lower_and_splice(traced, name, what)
            break
        except rewrite.FmaMarkerError as e:
            pure = {s.index for s in traced.sites if s.marker == "fma"}
            named = e.sites & pure or pure     # always grows: the loop ends
            if not named:
                raise
            fallback.update((i, e.reason) for i in named)
            log.info("%s: site(s) %s get the atomic marker and the kernel is compiled again "
                     "(tileiras changed their fma marker: %s)", what, sorted(named), e.reason)
            traced = _cutile.trace_kernel(kernel, signature, arch, context,
                                          frozenset(fallback))
    spliced = report.module  # parsed once, by the rewriter's check
    entry_calls = _entry_calls(spliced, {c.callee for c in calls.values()})
    merged_ptx = link.insert(spliced, linked, name, report.spans)
    merged = merged_ptx.text
    flags = toolchain.ptxas_flags(capture)
    binaries = [ext.fragment for ext in externs.values()
                if isinstance(ext.fragment, BinarySource)]
    try:
        if binaries:
            cubin = _link_binaries(merged, flags, binaries, kernel_mod, target, what,
                                   traced.timeout_sec)
        else:
            cubin = toolchain.run_ptxas(merged, flags, capture.host_object,
                                        timeout=traced.timeout_sec, what=what)
    except SpliceToolchainError as e:
        raise diagnose.explain_ptxas_failure(e, merged, merged_ptx.spans, what) from None
    if binaries:
        collectives.check_binary_sites(traced.sites, cubin, target)
    sites = [SiteInfo(s.index, s.extern.name, s.extern.symbol, s.where, s.call_shape,
                      report.replaced.get(s.index, 0), calls[s.index].inline is not None,
                      not_inlined.get(s.index), "fma" if s.marker == "fma" else "atomic",
                      fallback.get(s.index), s.extern.scope)
             for s in traced.sites]
    out = Build(name, arch, traced.symbol, cubin, sites,
                traced.lifecycle_providers + nvshmem.lifecycle_providers(what,
                                                                         linked.host_filled),
                ptx=capture.ptx if keep_stages else None,
                spliced_ptx=merged if keep_stages else None,
                spans=merged_ptx.spans if keep_stages else (),
                tileir=_tileir_text(capture.ptx) if keep_stages else None,
                ptxas_flags=tuple(flags),
                host_object_size=len(capture.host_object or b""), entry_calls=entry_calls,
                seconds=time.perf_counter() - t0, symbols=traced.symbols)
    log.info("%s for %s: compiled in %.3f s, %d call site(s), %d bytes of cubin", what, arch,
             out.seconds, len(sites), len(cubin))
    for s in sites:
        log.debug("%s: %s", what, s)
    if verify.enabled():
        verify.verify_build(out)
    if not keep_stages:
        cache.store("kernel", key, {"symbol": traced.symbol, "entry_calls": entry_calls,
                                    "host_filled": sorted(linked.host_filled),
                                    "sites": [[s.instances, s.inlined, s.why_not_inlined,
                                               s.marker, s.why_atomic] for s in sites]},
                    cubin)
    if dump_dir:
        try:
            _dump(out, Path(dump_dir))
        except OSError as e:
            raise SpliceToolchainError(
                f"{what}: cannot write its stages to SPLICE_DUMP_DIR={dump_dir} "
                f"({e.strerror or e}): point it at a writable directory, or unset it") from None
    return out


def _cached_site(site, stored: list) -> SiteInfo:
    """A :class:`SiteInfo` from a traced call site and what a cached entry stored of it."""
    instances, inlined, why_not_inlined, marker, why_atomic = stored
    return SiteInfo(site.index, site.extern.name, site.extern.symbol, site.where,
                    site.call_shape, instances, inlined, why_not_inlined, marker, why_atomic,
                    site.extern.scope)


def _link_binaries(merged: str, flags, binaries, kernel_mod: Module, target: str, what: str,
                   timeout) -> bytes:
    """ptxas -c (relocatable) then nvJitLink with the binary objects. ptxas ignores
    --nv-host with -c (``docs/design.md#binary-objects``), so this is refused for kernels
    whose launch needs tileiras's host callbacks: those with hidden (tensor-map)
    parameters."""
    for fn in kernel_mod.entries():
        hidden = [p for p in fn.params if ".hidden" in p.decl]
        if hidden:
            raise SpliceLinkError(
                f"{what} cannot be linked with {binaries[0].describe()}: the kernel has "
                f"{len(hidden)} hidden tensor-map parameter(s) (TMA) that tileiras's host "
                f"callbacks fill at launch, and those callbacks survive only a whole-program "
                f"ptxas run, not nvJitLink. Ship the device code as PTX "
                f"(splice.extern.from_ptx) or LTO-IR (splice.extern.from_ltoir) instead")
    relocatable = toolchain.run_ptxas(merged, [*flags, "-c"], None, timeout=timeout,
                                      what=what)
    inputs = [("CUBIN", relocatable, "kernel.cubin")]
    inputs += [(b.input_type, b.read(), b.path.name) for b in binaries]
    try:
        return toolchain.nvjitlink_link(inputs, target, what)
    except SpliceLinkError as e:
        objs = "; ".join(f"{b.describe()} for {', '.join(s for s, _ in b.roots)}"
                         for b in binaries)
        raise SpliceLinkError(
            f"{e.message}\n    objects: {objs}\n    each must be relocatable device code "
            f"(-rdc=true) for {target} and define its extern \"C\" symbols", e.log) from None


def _entry_calls(mod: Module, callees) -> dict[str, int]:
    """``call`` instructions per extern symbol in the kernel's entry function(s), after
    splicing: the rewriter's calls plus calls made by inlined bodies."""
    from .ptx import parse_instruction
    out: dict[str, int] = {}
    for fn in mod.entries():
        for st in mod.body_statements(fn):
            if st.kind == "instruction":
                ins = parse_instruction(st, mod.text)
                target = ins.call_target
                if target is not None and target in callees:
                    out[target] = out.get(target, 0) + 1
    return out


def _check_same_symbol(a, b):
    """Two externs naming one symbol must come from the same code."""
    ka = (a.fragment.kind, a.fragment.content_key("any"))
    kb = (b.fragment.kind, b.fragment.content_key("any"))
    text = [getattr(x.fragment, "read", lambda: None)() for x in (a, b)]
    if ka != kb and text[0] is not None and text[0] == text[1]:
        raise SpliceLinkError(
            f"extern '{a.symbol}' is declared twice from one source (at {a.where} and at "
            f"{b.where}); each declaration compiles its own copy, checked against its own "
            f"signature, and the kernel module would define '{a.symbol}' twice: declare it "
            f"once (one module-level name) and import it everywhere")
    if ka != kb:
        raise SpliceLinkError(
            f"externs '{a.name}' (declared at {a.where}) and '{b.name}' (declared at "
            f"{b.where}) both name the symbol '{a.symbol}' but come from different code; "
            f"rename one")


def _dump(b: Build, root: Path) -> None:
    d = root / f"{b.symbol}.{b.arch}"
    d.mkdir(parents=True, exist_ok=True)
    for stage, suffix in (("tileir", ".tileir"), ("ptx", ".ptx"),
                          ("spliced_ptx", ".spliced.ptx"), ("sass", ".sass")):
        value = b[stage]
        if value is not None:
            (d / f"{b.symbol}{suffix}").write_text(value)
    (d / f"{b.symbol}.cubin").write_bytes(b.cubin)
