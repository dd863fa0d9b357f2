"""The element form's callee policy (:meth:`splice.forms.element.ElementForm.check_callees`):
an element-scope call runs once per tile element, on the thread that owns it, so its callee
may execute no warp- or CTA-collective instruction (found in its PTX by
:mod:`splice.analysis.collectives`; in a binary object's SASS after linking,
:func:`check_binary_sites`)."""

from __future__ import annotations

from typing import Callable, Mapping

from ..analysis import activemask
from ..analysis.collectives import (
    Hit,
    demangled,
    find_collective,
    find_sass_collective,
    outside_ptx,
    reach_text,
    sass_functions,
)
from ..errors import SpliceLinkError, SpliceToolchainError
from ..ptxtools.ptx import Module
from .base import site_module


def check_binary_sites(sites, cubin: bytes, target: str | None = None,
                       fragments: Mapping[str, tuple[str, Module]] | None = None,
                       keys: Mapping[int, str] | None = None, *,
                       disassemble: Callable[[bytes], str | None]) -> None:
    """Refuse every element-scope call site whose extern comes from a binary object
    (``from_object``) and executes a collective SASS instruction, found in the kernel's
    linked ``cubin`` (nvJitLink keeps each device function in its own section); and every
    element-scope site whose PTX calls a function that no PTX fragment defines (so the
    binary object defines it, and :func:`check_element_sites` could not look into it) that
    does, or that calls through a register (which may reach the object's functions).

    Args:
        target: the kernel's PTX target, for the PTX of the other sites' fragments; None:
            only the binary sites are checked.
        fragments: content key -> (description, PTX module) of every fragment of the
            kernel, compiled for ``target`` (the PTX that was linked).
        keys: id(fragment) -> its content key, as the fragments stage took them.
        disassemble: the cubin's SASS listing, None without nvdisasm
            (:func:`splice.system.toolchain.disassemble`; run only when some site needs it).

    Raises:
        SpliceLinkError: as :func:`check_element_sites`.
        SpliceToolchainError: nvdisasm is not installed, so the object cannot be checked.
    """
    element = [s for s in sites if not s.extern.form.runs_collectives]
    binary = [s for s in element if not s.extern.fragment.has_ptx_body]
    reaches = _ptx_reaches([s for s in element if s not in binary], target, fragments or {},
                           keys)
    if not binary and not reaches:
        return
    sass = _sass_or_refuse(disassemble, cubin, (binary or [s for s, _ in reaches])[0].extern)
    for site in binary:
        ext = site.extern
        if ext.symbol not in sass_functions(sass):
            raise SpliceLinkError(
                f"extern '{ext.name}' ({ext.fragment.describe()}), called at {site.where}: "
                f"the linked cubin has no section .text.{ext.symbol}, so splice cannot check "
                f"its machine code for collective instructions")
        _refuse_sass_hit(site, f"extern '{ext.name}' ({ext.fragment.describe()})", (),
                         find_sass_collective(sass, ext.symbol))
    for site, reach in reaches:
        ext = site.extern
        what = f"extern '{ext.name}' (declared at {ext.where})"
        if reach.indirect is not None:
            raise SpliceLinkError(
                f"{what}, called at {site.where}, calls through a function pointer (in "
                f"'{demangled(reach.indirect)[-1]}') in a kernel linked with a binary object, "
                f"whose functions splice cannot tell apart from the pointer's targets: it "
                f"cannot check that the call reaches no collective instruction. Call the "
                f"function directly, or ship the object's code as PTX or LTO-IR")
        for callee, chain in reach.undefined.items():
            if callee in sass_functions(sass):
                _refuse_sass_hit(site, what, chain[:-1], find_sass_collective(sass, callee))


def _ptx_reaches(sites, target, fragments, keys):
    """(site, :class:`Reach`) of each site's extern in its fragment's PTX (the module linked,
    :func:`site_module`), for the sites whose PTX calls functions no PTX fragment defines
    or calls through a register."""
    if target is None or not sites:
        return []
    mods = {id(m): m for m in (site_module(s.extern, fragments, target, keys) for s in sites)}
    out = []
    for s in sites:
        mod = site_module(s.extern, fragments, target, keys)
        reach = outside_ptx(mod, s.extern.symbol, list(mods.values()))
        if reach.undefined or reach.indirect is not None:
            out.append((s, reach))
    return out


def _sass_or_refuse(disassemble: Callable[[bytes], str | None], cubin: bytes, ext) -> str:
    sass = disassemble(cubin)
    if sass is None:
        raise SpliceToolchainError(
            f"extern '{ext.name}' (declared at {ext.where}) comes from or calls into "
            f"binary code ({ext.fragment.describe()} or a from_object file linked with it), "
            f"whose machine code splice checks for warp- and CTA-collective instructions with "
            f"nvdisasm, which is not installed: pip install nvidia-cuda-nvdisasm (a "
            f"dependency of splice)")
    return sass


def _refuse_sass_hit(site, what: str, before: tuple[str, ...], hit) -> None:
    if hit is None:
        return
    text, what_ptx, sass_chain = hit
    chain = (*before, *sass_chain)
    reach = reach_text(demangled(chain))
    raise SpliceLinkError(
        f"{what}, called at {site.where}, executes the SASS instruction '{text}' {reach}, "
        f"which is what {what_ptx} becomes: a collective instruction. {_WHY}")


def check_element_sites(sites, fragments: Mapping[str, tuple[str, Module]],
                        target: str, keys: Mapping[int, str] | None = None) -> None:
    """Refuse every element-scope call site whose extern (or ``splice.asm`` snippet) executes
    a collective instruction, itself or in anything it calls.

    Args:
        sites: the traced call sites (``.extern``, ``.where``); those whose form runs
            collectives (``extern.form.runs_collectives``, :mod:`splice.forms`) are not
            checked.
        fragments: content key -> (description, PTX module) of every fragment of the
            kernel, compiled for ``target`` (the pipeline's de-duplicated fragments).
        target: the kernel's PTX target (``"sm_90a"``).
        keys: id(fragment) -> its content key for ``target`` (:func:`site_module`).

    Raises:
        SpliceLinkError: naming the extern, its declaration, the instruction, the chain of
            functions that reaches it and the call site.
    """
    modules = [m for _, m in fragments.values()]
    done: set[tuple[int, str]] = set()
    for site in sites:
        ext = site.extern
        if ext.form.runs_collectives:
            continue
        if not ext.fragment.has_ptx_body:
            continue  # its SASS is checked by check_binary_sites
        mod = site_module(ext, fragments, target, keys)
        if (id(mod), ext.symbol) in done:
            continue
        hit = find_collective(mod, ext.symbol, modules)
        if hit is None:
            done.add((id(mod), ext.symbol))
            continue
        raise SpliceLinkError(_message(ext.fragment.naming(ext), site.where, hit))


_WHY = ("Element-scope calls run once per tile element, on the thread that owns the "
        "element only: which threads of a warp or CTA get there together is tileiras's "
        "layout, so collective instructions are undefined there (a hang or wrong data). "
        "Declare it with scope=\"block\" (every thread of the CTA calls it once, "
        "convergently), or remove the collective")


#: Rows whose instruction may be part of the opportunistic pattern (splice.analysis.activemask).
_PATTERN_ROWS = frozenset({"activemask", *activemask.MASKED})


_PATTERN_HINT = (
    ". Exempt is the opportunistic pattern, which splice could not prove here: a .sync "
    "instruction (__shfl_sync, __ballot_sync, __match_*_sync, __reduce_*_sync, "
    "__syncwarp) whose mask is the unchanged result of an __activemask() taken in the same "
    "function (not a constant, not computed from it, not passed in as a parameter: so "
    "not under -G either, which makes __activemask() and each sync a function of its "
    "own), with no per-lane if, return or loop between the two that lets some threads of "
    "the mask skip or repeat the sync")


def _message(what: str, where: str, hit: Hit) -> str:
    c = hit.collective
    reach = reach_text(demangled(hit.chain))
    hint = _PATTERN_HINT if c.opcode in _PATTERN_ROWS else ""
    return (f"{what}, called at {where}, executes the {c.group}-collective instruction "
            f"'{hit.instruction}' {reach} (PTX ISA 9.4 section {c.section}: {c.rule}). "
            f"{_WHY}{hint}")
