"""The stages of a cache miss, run by :func:`splice.driver.pipeline.build`: lower, fragments,
splice (and the fma -> atomic marker fallback), link, assemble, the result.

They live apart from the driver so that a cache hit -- a new process compiling a kernel it
has compiled before -- loads neither the rewriter, the linker nor the PTX parser (issue 11:
the warm-cache process within 1.1x of plain cuTile's).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import re
from typing import Any, Callable, Protocol

from ..errors import SpliceLinkError, SpliceToolchainError
from ..forms import rewrite
from ..forms.base import CallForm, SiteCall, SiteInfo
from ..inputs import nvshmem
from ..inputs.fragments import Fragment
from ..ptxtools import inline, link, shared_memory, tma_store_reads
from ..ptxtools.ptx import Module, opcode_head, parse_instruction
from ..system import toolchain
from . import diagnose
from .result import Build, tileir_text

__all__ = ["Driver", "Spliced", "assemble", "link_fragments", "lower_and_splice",
           "predicted_ptx_target", "result"]
log = logging.getLogger("splice")


#: The files a stage's artefact is dumped as (``$SPLICE_DUMP_DIR``): (suffix, data) pairs.
Dumps = Callable[[Any], "list[tuple[str, str | bytes | None]]"]


class Driver(Protocol):
    """What the stages need of the build that runs them (:class:`splice.driver.pipeline.Job`)."""

    arch: str
    name: str
    what: str               # "kernel 'f' (file.py:12)", for messages
    keep_stages: bool
    lowerings: int
    timings: dict[str, float]

    def run(self, stage: str, fn: Callable, *args, dumps: Dumps | None = None,
            **kwargs): ...

    def trace(self, atomic: frozenset[str]): ...


def lower_and_splice(job: Driver, traced) -> Spliced:
    """lower, fragments, splice; while the proof refuses some fma markers, give those sites
    the atomic marker (which LLVM does not merge or fold), trace and lower again. Each round
    adds at least one site to the atomic set, so the loop ends."""
    atomic: dict[str, str] = {}     # site key (CallSite.key) -> why it has the atomic marker
    while True:
        lowered = job.run("lower", _lower, job, traced, dumps=_Lowered.files)
        compiled = job.run("fragments", _compile_fragments, job, traced, lowered,
                           dumps=_Compiled.files)
        report = job.run("splice", rewrite.splice_calls, lowered.module, compiled.calls,
                         kernel_name=job.name, dumps=_rewritten_files)
        if report.refused is None:
            assert report.module is not None   # the rewritten PTX, parsed by its check
            return Spliced(traced, lowered, compiled, report, report.module, atomic)
        atomic = _give_atomic_markers(job, traced, report.refused, atomic)
        job.lowerings += 1
        traced = job.trace(frozenset(atomic))


def link_fragments(job: Driver, sp: Spliced) -> link.Merged:
    """The fragments merged into the rewritten PTX."""
    return link.insert(sp.module, sp.compiled.linked, job.name, sp.report.spans)


def merged_files(merged: link.Merged) -> list[tuple[str, str | bytes | None]]:
    """What the link stage dumps: the PTX ptxas assembles."""
    return [(".spliced.ptx", merged.text)]


def _rewritten_files(report: rewrite.SpliceReport) -> list[tuple[str, str | bytes | None]]:
    """What the splice stage dumps: the rewritten PTX (nothing for a refusal: the kernel is
    lowered again)."""
    return [(".rewritten.ptx", report.ptx)] if report.refused is None else []


def assemble(job: Driver, sp: Spliced, merged: link.Merged) -> bytes:
    """The kernel's static shared memory checked (before ptxas, naming each owner's bytes);
    ptxas with tileiras's flags and host object; with binary objects, ptxas -c and
    nvJitLink; then each form's check of what only the cubin shows (the SASS of the sites
    that call into binary objects)."""
    shared_memory.check_block_limit(merged.text,
                                    lambda n: diagnose.owner_of_line(merged.spans, n),
                                    sp.lowered.target, job.what)
    flags = list(sp.lowered.ptxas_flags)
    binaries = [f for f in _fragments(sp.traced) if f.link_input is not None]
    timeout = sp.traced.timeout_sec
    try:
        if not binaries:
            return toolchain.run_ptxas(merged.text, flags, sp.lowered.capture.host_object,
                                       timeout=timeout, what=job.what)
        cubin = _link_binaries(merged.text, flags, binaries, sp.lowered.module,
                               sp.lowered.target, job.what, timeout)
    except SpliceToolchainError as e:
        raise diagnose.explain_ptxas_failure(e, merged.text, merged.spans, job.what) from None
    for form, sites in _sites_by_form(sp.traced.sites).items():
        form.check_linked_callees(sites, cubin, sp.lowered.target, sp.compiled.modules,
                                  sp.compiled.keys, toolchain.disassemble)
    return cubin


def result(job: Driver, sp: Spliced, merged: link.Merged, cubin: bytes) -> Build:
    traced, report, capture = sp.traced, sp.report, sp.lowered.capture
    sites = [SiteInfo.of(s, instances=report.replaced.get(s.index, 0),
                         inlined=sp.compiled.calls[s.index].inline is not None,
                         why_not_inlined=sp.compiled.not_inlined.get(s.index),
                         why_atomic=sp.atomic.get(s.key)) for s in traced.sites]
    keep = job.keep_stages
    return Build(job.name, job.arch, traced.symbol, cubin, sites,
                 traced.lifecycle_providers + nvshmem.lifecycle_providers(
                     job.what, sp.compiled.linked.host_filled),
                 ptx=capture.ptx if keep else None,
                 spliced_ptx=merged.text if keep else None,
                 spans=merged.spans if keep else (),
                 tileir=tileir_text(capture.ptx) if keep else None,
                 ptxas_flags=sp.lowered.ptxas_flags,
                 host_object_size=len(capture.host_object or b""),
                 entry_calls=_entry_calls(sp.module, {c.callee for c in
                                                          sp.compiled.calls.values()}),
                 symbols=traced.symbols, timings=job.timings, lowerings=job.lowerings)


# --------------------------------------------------------------------------------------------
# What the stages hand each other


@dataclasses.dataclass(frozen=True)
class _Lowered:
    """tileiras's output: the capture (PTX, host object, ptxas argv), its parsed PTX, and
    the ptxas flags to assemble it with."""

    capture: toolchain.Capture
    module: Module
    target: str                    # the PTX target, e.g. "sm_90a"
    ptxas_flags: tuple[str, ...]   # tileiras's, without its input/output/host paths

    def files(self) -> list[tuple[str, str | bytes | None]]:
        """What the lower stage dumps: tileiras's PTX and the Tile IR it embeds."""
        return [(".ptx", self.capture.ptx), (".tileir", tileir_text(self.capture.ptx))]


@dataclasses.dataclass(frozen=True)
class _Compiled:
    """The fragments for the kernel's PTX target, and how each site calls its extern."""

    modules: dict[str, tuple[str, Module]]    # fragment content key -> (describe(), PTX)
    linked: link.Linked
    calls: dict[int, SiteCall]        # site index -> call (or inlined body)
    not_inlined: dict[int, str]               # site index -> why its body is not inlined
    keys: dict[int, str]                      # id(fragment) -> its content key (modules')

    def files(self) -> list[tuple[str, str | bytes | None]]:
        """What the fragments stage dumps: each fragment's PTX, in the order compiled."""
        return [(f".fragment{i}.ptx", m.text) for i, (_, m) in enumerate(self.modules.values())]


@dataclasses.dataclass(frozen=True)
class Spliced:
    """The last round of lower/fragments/splice, which the proof accepted."""

    traced: Any                    # trace.TracedKernel
    lowered: _Lowered
    compiled: _Compiled
    report: rewrite.SpliceReport
    module: Module                 # the rewritten PTX
    atomic: dict[str, str]         # site key -> why the pure call has the atomic marker

# --------------------------------------------------------------------------------------------
# lower, fragments, the atomic-marker fallback


def _lower(job: Driver, traced) -> _Lowered:
    """tileiras on the bytecode, the fragments compiling ahead in threads meanwhile."""
    guess = predicted_ptx_target(_gpu_name(traced))
    with _fragments_compiled_ahead(traced, guess):
        capture = toolchain.run_tileiras(traced.bytecode, traced.tileiras_flags,
                                         timeout=traced.timeout_sec, what=job.what)
    module = Module(capture.ptx, f"tileiras PTX of {job.what}")
    target = next((t for t in module.target if t.startswith("sm_")), None)
    if target is None:
        raise SpliceLinkError(f"tileiras PTX of {job.what} names no sm_ target")
    if target != guess:
        log.debug("%s: tileiras emitted PTX for %s, fragments were compiled ahead for %s",
                  job.what, target, guess)
    _PTX_TARGETS[_gpu_name(traced)] = target
    return _Lowered(capture, module, target, tuple(toolchain.ptxas_flags(capture)))


def _compile_fragments(job: Driver, traced, lowered: _Lowered) -> _Compiled:
    """Each fragment's PTX for the kernel's target (de-duplicated by content), checked
    against the kernel and each extern's declaration, prepared for merging; the call of
    every site. First, the impure calls that read an array the PTX may have stored by TMA
    are refused (:mod:`splice.ptxtools.tma_store_reads`)."""
    tma_store_reads.check(traced.tma_stored_reads, lowered.capture.ptx)
    # id(fragment) -> its content key, taken once a build (for CUDA C, a header walk)
    fkeys = {id(f): f.content_key(lowered.target) for f in _fragments(traced)}
    modules: dict[str, tuple[str, Module]] = {}
    for site in traced.sites:
        frag = site.extern.fragment
        fkey = fkeys[id(frag)]
        if fkey not in modules:
            modules[fkey] = (frag.describe(), frag.module(lowered.target, fkey))
        _check_fragment(site, *modules[fkey], lowered)
    for form, sites in _sites_by_form(traced.sites).items():    # every callee check
        form.check_callees(sites, modules, lowered.target, fkeys, lowered.module)
    linked = link.prepare(lowered.module, list(modules.values()), job.name,
                          frozenset(s.extern.symbol for s in traced.sites),
                          host_filled=nvshmem.HOST_FILLED)
    calls: dict[int, SiteCall] = {}
    not_inlined: dict[int, str] = {}
    for site in traced.sites:
        fmod = modules[fkeys[id(site.extern.fragment)]][1]
        calls[site.index], why = _site_call(site, fmod, linked)
        if why is not None:
            not_inlined[site.index] = why
    return _Compiled(modules, linked, calls, not_inlined, fkeys)


def _check_fragment(site, fdesc: str, fmod: Module, lowered: _Lowered) -> None:
    """The fragment fits the kernel's PTX and defines the extern's symbol with a prototype
    matching the declared signature (binary objects: checked when linked)."""
    ext = site.extern
    decl = f"extern '{ext.name}' (declared at {ext.where})"
    link.check_compatible(fmod, lowered.module, f"{decl}, called at {site.where}: {fdesc}")
    if not ext.fragment.has_ptx_body:
        return
    fn = fmod.functions.get(ext.symbol)
    if fn is None or not fn.is_definition:
        defined = sorted(f.name for f in fmod.functions.values() if f.is_definition)
        raise SpliceLinkError(
            f"{decl}: {fdesc} does not define the device function '{ext.symbol}'"
            f" (it defines: {', '.join(defined) or 'nothing'}). The symbol must be the C "
            f"name of an extern \"C\" __device__ function that the fragment defines and "
            f"emits: functions declared only, inline/__forceinline__ or static ones are "
            f"not emitted unless used, and -dlto output holds no PTX")
    link.check_prototype(fn, ext.signature, f"{decl}, {fdesc}", fmod.text)


def _site_call(site, fmod: Module, linked: link.Linked) -> tuple[SiteCall, str | None]:
    """How the rewriter calls ``site``'s extern, and why its body is not inlined (None:
    inlined)."""
    ext = site.extern
    body = None
    if not ext.fragment.has_ptx_body:
        fn = fmod.functions[ext.symbol]
        if ext.inline == "always":
            raise SpliceLinkError(f"extern '{ext.name}' (declared at {ext.where}) has "
                                  f"inline=\"always\" but its code is a binary object")
        why: str | None = "binary object: no PTX body"
    else:
        pmod, fn = linked.functions[ext.symbol]
        why = "inline=\"never\"" if ext.inline == "never" else \
            inline.why_not_inlinable(pmod, fn, linked.functions)
        if why is None:
            body = (pmod, fn)
        elif ext.inline == "always":
            raise SpliceLinkError(
                f"extern '{ext.name}' (declared at {ext.where}) has inline=\"always\" but "
                f"'{ext.symbol}' cannot be inlined: {why}")
    call = SiteCall(site.index, ext.symbol, fn.params,
                            fn.results[0] if fn.results else None, ext.signature,
                            f"{ext.name} at {site.where}", body, site.form,
                            site.marker_bits, site.fma_rounding, ext.staging)
    return call, why


def _give_atomic_markers(job: Driver, traced, refused: rewrite.Refusal,
                         atomic: dict[str, str]) -> dict[str, str]:
    """``atomic`` plus the pure sites the proof refused (all pure sites when it named
    none of them). Raises the refusal's error when no pure site is left to change."""
    pure = {s.index: s.key for s in traced.sites if s.form.proves_per_function()}
    named = (refused.sites & pure.keys()) or pure.keys()
    if not named:
        raise refused.error()
    log.info("%s: site(s) %s get the atomic marker and the kernel is lowered again "
             "(tileiras changed their fma marker: %s)", job.what, sorted(named),
             refused.reason)
    return {**atomic, **{pure[i]: refused.reason for i in named}}

# --------------------------------------------------------------------------------------------
# helpers


#: The PTX target tileiras emitted for each --gpu-name, as seen in this process.
_PTX_TARGETS: dict[str, str] = {}


def _fragments(traced) -> list[Fragment]:
    """The kernel's fragments, each once, in the order of its sites."""
    return list({id(s.extern.fragment): s.extern.fragment for s in traced.sites}.values())


def _sites_by_form(sites) -> dict[CallForm, list]:
    """``sites`` by their extern's declared form (in the order each form first appears)."""
    out: dict[CallForm, list] = {}
    for site in sites:
        out.setdefault(site.extern.form, []).append(site)
    return out


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
    frags = [f for f in _fragments(traced) if f.compiles_ahead]
    pool = _started_pool(frags, target) if frags else None
    if pool is None:
        yield
        return
    try:
        yield
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _started_pool(frags: list[Fragment], target: str):
    """A thread pool compiling ``frags`` for ``target``; None where Python refuses new
    threads: a compile after the main thread ended (in a thread that outlived it, or an
    atexit handler), where concurrent.futures raises RuntimeError. The fragments then
    compile after tileiras, as without the pool."""
    try:
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(len(frags), os.cpu_count() or 1),
            thread_name_prefix="splice-fragment")
    except RuntimeError:    # importing concurrent.futures.thread registers an exit hook
        return None
    try:
        for frag in frags:
            pool.submit(frag.module, target)
    except RuntimeError:    # "cannot schedule new futures after interpreter shutdown"
        pool.shutdown(wait=True, cancel_futures=True)
        return None
    return pool


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
    inputs += [(b.link_input, b.read(), b.path.name) for b in binaries]
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
    out: dict[str, int] = {}
    for fn in mod.entries():
        for st in mod.body_statements(fn):
            if st.kind == "instruction" and opcode_head(st) == "call":
                target = parse_instruction(st, mod.text).call_target
                if target is not None and target in callees:
                    out[target] = out.get(target, 0) + 1
    return out
