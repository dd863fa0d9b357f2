"""The compile pipeline of a spliced kernel, top to bottom.

::

    trace     cuTile frontend -> Tile IR bytecode; each extern call is a marker   (_cutile)
    key       content key: bytecode, flags, fragments, arch, tool versions        (cache)
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

import dataclasses
import os
import re
import time
from pathlib import Path

from . import _cutile, cache, inline, link, nvshmem, rewrite, toolchain, verify
from .errors import SpliceLinkError, SpliceToolchainError
from .fragments import BinarySource, CudaSource
from .ptx import Module

__version__ = "0.1.0"


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

    def __str__(self) -> str:
        how = "inlined bod(ies)" if self.inlined else "call(s)"
        why = f" (not inlined: {self.why_not_inlined})" if self.why_not_inlined else ""
        marker = f"{self.marker} marker"
        if self.why_atomic:
            marker += f" (its fma marker was changed by tileiras: {self.why_atomic})"
        return (f"site {self.index}: {self.extern} -> {self.symbol} at {self.where}, tile "
                f"shape {self.shape}, {self.instances} {how} in PTX{why}, {marker}")


@dataclasses.dataclass
class Build:
    """The result of compiling one kernel signature for one architecture.

    Stages (``build[name]``): ``"tileir"`` (Tile IR text tileiras embeds in its PTX, or
    None), ``"ptx"`` (PTX as tileiras emitted it), ``"spliced_ptx"`` (the PTX ptxas
    assembled: calls spliced in, fragments merged), ``"cubin"`` (bytes), ``"sass"``
    (cuobjdump's listing, None without cuobjdump).
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

    def sass_call_count(self, symbol: str | None = None, kernel_body_only: bool = False
                        ) -> int | None:
        """Number of SASS ``CALL`` instructions, all or those calling ``symbol`` (None
        without nvdisasm); with ``kernel_body_only``, only those in the kernel's own body
        (not in the device functions it calls)."""
        s = self.sass
        if s is None:
            return None
        if kernel_body_only:
            # the body ends where the first device function of the kernel's section
            # (``$<kernel>$<function>``) is declared or labelled; CALL lines that name
            # one start with their address, not the name
            start = s.find(f".text.{self.symbol}:")
            m = re.compile(rf"^\s*(?:\.\w+\s+)?\${re.escape(self.symbol)}\$", re.M).search(
                s, start)
            s = s[start:m.start() if m else len(s)]
        calls = re.findall(r"\bCALL\.[A-Z.]+\s+`?\(?\$?([^)`;\s]*)", s)
        if symbol is None:
            return len(calls)
        return sum(1 for c in calls if c == symbol or c.endswith("$" + symbol))

    def summary(self) -> str:
        lines = [f"kernel {self.kernel_name} ({self.symbol}) for {self.arch}: "
                 f"{len(self.cubin)} bytes of cubin"]
        lines += [f"  {s}" for s in self.sites]
        n = self.sass_call_count()
        if n is None:
            lines.append("  SASS: n/a (nvdisasm not installed)")
        else:
            per = ", ".join(f"{sym}: {self.sass_call_count(sym)}"
                            for sym in sorted({s.symbol for s in self.sites}))
            lines.append(f"  SASS CALL instructions: {n} ({per or 'no externs'})")
        return "\n".join(lines)


def _kernel_desc(kernel) -> tuple[str, str]:
    f = kernel._pyfunc
    code = f.__code__
    return f.__name__, f"{code.co_filename}:{code.co_firstlineno}"


def _tileir_text(ptx: str) -> str | None:
    m = re.search(r"\.source_begin\n(.*?)\.source_end", ptx, re.S)
    return m.group(1) if m else None


_ARCH_RE = re.compile(r"^sm_?(\d{2,3})([af]?)$", re.I)


def normalize_arch(arch) -> str:
    """``"sm_90"`` for ``"sm_90"``, ``"sm_90a"``, ``"SM_90"``: cuTile compiles for the
    architecture (tileiras emits the arch-specific PTX target itself).

    Raises:
        SpliceToolchainError: not an ``sm_XY`` architecture name.
    """
    m = _ARCH_RE.match(str(arch).strip()) if isinstance(arch, str) else None
    if m is None:
        raise SpliceToolchainError(
            f"unknown GPU architecture {arch!r}: write it like 'sm_80', 'sm_90' or 'sm_100'")
    if int(m.group(1)) < 80:
        raise SpliceToolchainError(f"GPU architecture {arch!r}: cuTile (tileiras) targets "
                                   f"sm_80 and newer")
    return f"sm_{m.group(1)}"


def _lower_and_splice(traced, name: str, what: str):
    """tileiras, fragments for the kernel's PTX target, the call of every site, and the
    rewritten PTX: (capture, kernel module, target, linked fragments, calls, reasons for not
    inlining, rewrite report)."""
    capture = toolchain.run_tileiras(traced.bytecode, traced.tileiras_flags,
                                     timeout=traced.timeout_sec, what=what)
    kernel_mod = Module(capture.ptx, f"tileiras PTX of {what}")
    target = next((t for t in kernel_mod.target if t.startswith("sm_")), None)
    if target is None:
        raise SpliceLinkError(f"tileiras PTX of {what} names no sm_ target")

    # Fragments for the kernel's own PTX target, de-duplicated by content.
    frag_mods: dict[str, tuple[str, Module]] = {}
    for site in traced.sites:
        ext = site.extern
        fkey = ext.fragment.content_key(target)
        if fkey not in frag_mods:
            frag_mods[fkey] = (ext.fragment.describe(), ext.fragment.module(target))
        fdesc, fmod = frag_mods[fkey]
        decl = f"extern '{ext.name}' (declared at {ext.where})"
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
                                                 None, site.marker, site.marker_bits)
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
                                             body, site.marker, site.marker_bits)

    report = rewrite.splice_calls(kernel_mod, calls, kernel_name=name)
    return capture, kernel_mod, target, linked, calls, not_inlined, report


def build(kernel, signature, arch: str, context=None, *, keep_stages: bool = False) -> Build:
    """Compile ``kernel`` for ``signature`` on ``arch`` with every extern call spliced in.

    Args:
        kernel: a ``@splice.kernel``.
        signature: a ``cuda.tile.compilation.KernelSignature``.
        arch: ``"sm_80"``, ``"sm_90"``, ``"sm_100"``...
        context: cuTile's TileContext (compile timeout); default cuTile's.
        keep_stages: keep every intermediate stage (skips the cubin cache).

    Raises:
        SpliceCallError, SpliceCompileError, SpliceLinkError, SpliceRewriteError,
        SpliceToolchainError.
    """
    t0 = time.perf_counter()
    arch = normalize_arch(arch)
    name, where = _kernel_desc(kernel)
    what = f"kernel '{name}' ({where})"
    traced = _cutile.trace_kernel(kernel, signature, arch, context)
    dump_dir = os.environ.get("SPLICE_DUMP_DIR")
    keep_stages = keep_stages or bool(dump_dir)

    externs = {}
    for site in traced.sites:
        ext = site.extern
        if isinstance(ext.fragment, CudaSource):   # before compiling anything
            nvshmem.check_scope(ext, ext.fragment.read())
        prev = externs.get(ext.symbol)
        if prev is not None and prev is not ext and prev.fragment is not ext.fragment:
            externs[ext.symbol] = _check_same_symbol(prev, ext)
        externs.setdefault(ext.symbol, ext)

    key = cache.key_of(
        "kernel", __version__, traced.bytecode, traced.tileiras_flags, arch,
        [(e.symbol, str(e.signature), e.inline, e.fragment.kind,
          e.fragment.content_key(arch)) for e in externs.values()],
        toolchain.tileiras_version(), toolchain.ptxas_version(),
        list(toolchain.nvrtc_version()))
    if not keep_stages:
        hit = cache.load("kernel", key)
        if hit is not None:
            meta, cubin = hit
            if meta.get("symbol") == traced.symbol and \
                    len(meta.get("sites", ())) == len(traced.sites):
                sites = [SiteInfo(s.index, s.extern.name, s.extern.symbol, s.where, s.call_shape,
                                  *m) for s, m in zip(traced.sites, meta["sites"])]
                out = Build(name, arch, traced.symbol, cubin, sites,
                            traced.lifecycle_providers + nvshmem.lifecycle_providers(
                                what, frozenset(meta.get("host_filled", ()))),
                            entry_calls=meta.get("entry_calls", {}), from_cache=True,
                            seconds=time.perf_counter() - t0)
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
            traced = _cutile.trace_kernel(kernel, signature, arch, context,
                                          frozenset(fallback))
    spliced = Module(report.ptx, f"spliced PTX of {what}")
    entry_calls = _entry_calls(spliced, {c.callee for c in calls.values()})
    merged = link.insert(spliced, linked, name)
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
        raise _explain_ptxas_failure(e, merged, what) from None
    sites = [SiteInfo(s.index, s.extern.name, s.extern.symbol, s.where, s.call_shape,
                      report.replaced.get(s.index, 0), calls[s.index].inline is not None,
                      not_inlined.get(s.index), "fma" if s.marker == "fma" else "atomic",
                      fallback.get(s.index)) for s in traced.sites]
    out = Build(name, arch, traced.symbol, cubin, sites,
                traced.lifecycle_providers + nvshmem.lifecycle_providers(what,
                                                                         linked.host_filled),
                ptx=capture.ptx if keep_stages else None,
                spliced_ptx=merged if keep_stages else None,
                tileir=_tileir_text(capture.ptx) if keep_stages else None,
                ptxas_flags=tuple(flags),
                host_object_size=len(capture.host_object or b""), entry_calls=entry_calls,
                seconds=time.perf_counter() - t0)
    if verify.enabled():
        verify.verify_build(out)
    if not keep_stages:
        cache.store("kernel", key, {"symbol": traced.symbol, "entry_calls": entry_calls,
                                    "host_filled": sorted(linked.host_filled),
                                    "sites": [[s.instances, s.inlined, s.why_not_inlined,
                                               s.marker, s.why_atomic] for s in sites]},
                    cubin)
    if dump_dir:
        _dump(out, Path(dump_dir))
    return out


def _link_binaries(merged: str, flags, binaries, kernel_mod: Module, target: str, what: str,
                   timeout) -> bytes:
    """ptxas -c (relocatable) then nvJitLink with the binary objects. ptxas ignores
    --nv-host with -c (DESIGN.md F2), so this is refused for kernels whose launch needs
    tileiras's host callbacks: those with hidden (tensor-map) parameters."""
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
                if target in callees:
                    out[target] = out.get(target, 0) + 1
    return out


def _explain_ptxas_failure(e: SpliceToolchainError, merged: str, what: str):
    """ptxas's messages point at lines of a temporary merged file: say which fragment (or
    which call site, or the kernel's own PTX) each line belongs to, and quote it."""
    lines = merged.splitlines()
    m = re.search(r"Unresolved extern function '([^']+)'", e.log)
    if m:
        sym = m.group(1)
        owner = None
        for i, ln in enumerate(lines):
            if re.search(rf"\.extern\s+\.func[^;]*\b{re.escape(sym)}\b", ln):
                owner = _owner_of_line(lines, i)
                break
        return SpliceLinkError(
            f"{owner or 'a fragment'} calls '{sym}', which no fragment of {what} defines: "
            f"call an extern declared from the source that defines it in this kernel too, "
            f"or define it in the same source", e.log)
    notes = []
    for lm in re.finditer(r"line (\d+);\s*(error|warning)\s*:\s*(.*)", e.log):
        n = int(lm.group(1))
        if lm.group(2) != "error" or not 0 < n <= len(lines):
            continue
        notes.append(f"    {lm.group(3).strip()}\n      in {_owner_of_line(lines, n - 1)}: "
                     f"{lines[n - 1].strip()}")
        if len(notes) >= 5:
            break
    if not notes:
        return e
    return SpliceToolchainError(e.message + "\n" + "\n".join(notes), e.log)


def _owner_of_line(lines: list[str], i: int) -> str:
    """What produced line ``i`` of merged PTX: a fragment, a call site's block, or the
    kernel (tileiras)."""
    for j in range(i, -1, -1):
        ln = lines[j]
        if ln.startswith("// splice: end ") or ln.endswith("// splice: end call") and j < i:
            break
        if ln.startswith("// splice: begin "):
            return ln[len("// splice: begin "):]
        if "{ // splice: call " in ln:
            return f"the call sequence splice generated for {ln.split('{ // splice: call ')[1]}"
    return "the kernel's own PTX (tileiras output)"


def _check_same_symbol(a, b):
    """Two externs naming one symbol must come from the same code."""
    ka = (a.fragment.kind, a.fragment.content_key("any"))
    kb = (b.fragment.kind, b.fragment.content_key("any"))
    if ka != kb:
        raise SpliceLinkError(
            f"externs '{a.name}' (declared at {a.where}) and '{b.name}' (declared at "
            f"{b.where}) both name the symbol '{a.symbol}' but come from different code; "
            f"rename one")
    return a


def _dump(b: Build, root: Path) -> None:
    d = root / f"{b.symbol}.{b.arch}"
    d.mkdir(parents=True, exist_ok=True)
    for stage, suffix in (("tileir", ".tileir"), ("ptx", ".ptx"),
                          ("spliced_ptx", ".spliced.ptx"), ("sass", ".sass")):
        value = b[stage]
        if value is not None:
            (d / f"{b.symbol}{suffix}").write_text(value)
    (d / f"{b.symbol}.cubin").write_bytes(b.cubin)
