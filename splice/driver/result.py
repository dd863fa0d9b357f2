"""The result of a build: :class:`Build`, its stages, its call sites and its SASS calls."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from ..forms.base import SiteInfo
from ..ptxtools.spans import Span
from ..system import safe_fs, toolchain


def tileir_text(ptx: str) -> str | None:
    """The Tile IR text tileiras embeds in its PTX (``.source_begin`` ... ``.source_end``),
    or None."""
    m = re.search(r"\.source_begin\n(.*?)\.source_end", ptx, re.S)
    return m.group(1) if m else None


@dataclasses.dataclass
class Build:
    """The result of compiling one kernel signature for one architecture.

    Stages (``build[name]``): ``"tileir"`` (Tile IR text tileiras embeds in its PTX, or
    None), ``"ptx"`` (PTX as tileiras emitted it), ``"spliced_ptx"`` (the PTX ptxas
    assembled: calls spliced in, fragments merged), ``"cubin"`` (bytes), ``"sass"``
    (nvdisasm's listing, None without nvdisasm). The PTX stages are kept by
    :func:`splice.compile`, ``kernel.inspect()`` and with ``$SPLICE_DUMP_DIR`` set (and
    cached with the cubin: such a build hits the cache, stages and all).

    ``timings``: wall seconds per pipeline stage (``"trace"``, ``"key"``, ``"lower"``,
    ``"fragments"``, ``"splice"``, ``"link"``, ``"assemble"``; ``"cache"`` for a cache
    hit), summed over ``lowerings`` rounds (2 when some fma markers became atomic ones).
    ``"lower"`` includes the fragments compiled in threads while tileiras runs.
    """

    # the cubin, the stages and the spans (hundreds of KB) stay out of repr: a build shown
    # in a REPL or a log is its kernel, architecture, symbol, sites and timings
    kernel_name: str
    arch: str
    symbol: str
    cubin: bytes = dataclasses.field(repr=False)
    sites: list[SiteInfo]
    lifecycle_providers: tuple = dataclasses.field(default=(), repr=False)
    ptx: str | None = dataclasses.field(default=None, repr=False)
    spliced_ptx: str | None = dataclasses.field(default=None, repr=False)
    tileir: str | None = dataclasses.field(default=None, repr=False)
    ptxas_flags: tuple[str, ...] = ()
    host_object_size: int = 0
    entry_calls: dict = dataclasses.field(default_factory=dict, repr=False)
    from_cache: bool = False
    seconds: float = 0.0
    symbols: tuple[str, ...] = ()   # every entry (several signatures: splice.export_kernel)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    lowerings: int = 1
    # of spliced_ptx: what wrote which lines (splice.ptxtools.spans)
    spans: tuple[Span, ...] = dataclasses.field(default=(), repr=False)
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
        lines.append(f"  {self.timing_line()}")
        targets = self.sass_call_targets()
        if targets is None:
            lines.append("  SASS: n/a (nvdisasm not installed)")
            return "\n".join(lines)
        ours = sorted({s.symbol for s in self.sites})
        counts = {sym: self.sass_call_count(sym) or 0 for sym in ours}
        per = ", ".join(f"{sym}: {k}" for sym, k in counts.items())
        rest = sum(targets.values()) - sum(counts.values())
        lines.append(f"  SASS CALLs of externs: {sum(counts.values())} "
                     f"({per or 'no externs'})" +
                     (f"; {rest} other SASS CALL(s), below" if rest else ""))
        indirect = {n: k for n, k in targets.items() if _REGISTER.fullmatch(n)}
        helpers = {n: k for n, k in targets.items() if n not in ours and _is_cuda_helper(n)}
        others = {n: k for n, k in targets.items()
                  if n not in ours and n not in helpers and n not in indirect}
        if indirect:
            lines.append("  SASS CALLs through a register (CUDA's printf calls vprintf "
                         "so; or a function pointer): "
                         + ", ".join(f"{n}: {k}" for n, k in sorted(indirect.items())))
        if helpers:
            lines.append("  SASS CALLs that are not externs (CUDA's internal helpers that "
                         "tileiras or NVRTC emit): " + ", ".join(f"{n}: {k}{_helper_note(n)}"
                                               for n, k in sorted(helpers.items())))
        if others:
            lines.append("  SASS CALLs of other device functions (called by the fragments): "
                         + ", ".join(f"{n}: {k}" for n, k in sorted(others.items())))
        return "\n".join(lines)

    def timing_line(self) -> str:
        """``"compiled in 0.412 s: trace 0.051, key 0.001, lower 0.301, ..."``."""
        how = "from the cache" if self.from_cache else "compiled"
        stages = ", ".join(f"{k} {v:.3f}" for k, v in self.timings.items())
        rounds = f" ({self.lowerings} lowerings)" if self.lowerings > 1 else ""
        return f"{how} in {self.seconds:.3f} s{rounds}" + (f": {stages}" if stages else "")

    def dump(self, root: Path) -> Path:
        """Write the stages this build kept, its SASS and its timings to
        ``root/<symbol>.<arch>/``; return that directory.

        Raises:
            OSError: the directory cannot be written.
            SpliceUnsafePathError: ``root/<symbol>.<arch>`` is another user's, or others
                can write it (``docs/security.md``).
        """
        d = dump_dir(root, self.symbol, self.arch)
        for stage, suffix in (("tileir", ".tileir"), ("ptx", ".ptx"),
                              ("spliced_ptx", ".spliced.ptx"), ("sass", ".sass")):
            value = self[stage]
            if value is not None:
                dump_file(d, f"{self.symbol}{suffix}", value)
        dump_file(d, f"{self.symbol}.cubin", self.cubin)
        dump_file(d, f"{self.symbol}.timings.json", self.timings_json())
        return d

    def timings_json(self) -> str:
        """Total seconds, lowerings and seconds per stage, as JSON."""
        return json.dumps({"seconds": self.seconds, "lowerings": self.lowerings,
                           "from_cache": self.from_cache, "stages": self.timings}, indent=1)


def dump_dir(root: Path, symbol: str, arch: str) -> Path:
    """``root/<symbol>.<arch>``, created 0700 (with ``root`` when missing), or checked:
    its name is predictable, so in a shared ``root`` (``/tmp``) another user could have
    made it first."""
    return safe_fs.private_dir(Path(root) / f"{symbol}.{arch}", "the dump directory")


def dump_file(directory: Path, name: str, data: str | bytes) -> None:
    """Write a stage to ``directory/name`` (0600) through a fresh temporary file: a link
    planted at the name is replaced, never followed."""
    safe_fs.write_file(directory / name, data, "the dump directory")


#: A SASS register operand (``CALL.ABS.NOINC R8``): a call target held in a register.
_REGISTER = re.compile(r"U?R\d+")


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
