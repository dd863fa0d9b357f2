"""What splice proves of the memory a call touches, for the two ``memory=`` declarations
that let cuTile order the call against less than every memory operation of the kernel
(:class:`splice.tile_ir.SpliceMarkerPointer`):

- **``memory="none"``** (``splice.asm``): the snippet touches no global memory. Every
  instruction must touch no memory at all (:data:`NO_MEMORY`), or name one of the private
  state spaces ``.shared``, ``.shared::cta``, ``.local``, ``.param`` (:data:`SPACED`);
  everything else (a generic address, ``.global``, ``cp.*``, textures, ``call``, any
  opcode splice does not know) is refused (:func:`check_no_global_memory`, applied to the
  snippet's text by :func:`splice.asm_check.check_snippet`).
- **``memory="arguments"``** (externs): the callee touches global memory only through its
  pointer arguments (and a tile call's staged tiles). Proven on the callee's PTX and on
  every function it reaches (:func:`splice.analysis.collectives.outside_ptx`) by an address
  analysis (:func:`prove_arguments_only`; the sites declared so are refused by
  :func:`splice.forms.effects.check_argument_sites`):

  1.-3. The address analysis (:mod:`splice.analysis.addresses`) gives each 64-bit register
     the *origins* it may be derived from: ``D`` (a pointer parameter, a staged tile, the
     stack or a ``.shared``/``.const`` variable, with its constant offset), ``Z`` (null),
     ``N`` (an integer), ``L`` (loaded from memory), ``G`` (a ``.global`` variable or a
     function), ``X`` (arithmetic splice does not follow on an address); its module
     docstring has the rules. A call of a function that is neither ``vprintf`` nor
     ``__assertfail`` nor ``malloc``/``free`` and that no PTX defines (code of a binary
     object), or a call through a register, is refused: splice cannot read what it
     touches.
  4. Then every access of ``.global`` or generic memory (``ld``, ``ldu``, ``st``,
     ``atom``, ``red``, ``multimem``, ``discard``, ``wmma`` loads and stores,
     ``mbarrier``, the global operand of a ``cp.*`` copy) must be at an address whose
     origins are only ``D`` (or ``Z``), and a ``D`` of the stack, a ``.shared`` or a
     ``.const`` variable at a constant offset inside it (a run-time offset through a
     generic address may reach any memory); a ``[symbol]`` operand of a ``.global``
     variable, a texture, surface or tensor-map access, a bulk tensor copy (its tensor map
     is not a pointer argument) and any instruction not known to leave global memory alone
     are refused.

  A refusal names the extern, its declaration, the instruction, the chain of functions
  that reaches it, the call site, and the fix (``memory="any"``).

- **Tile calls** (any ``memory=``): the same analysis tracks, for an address derived from
  one of splice's staging buffers (``__splice_tile_<g>_buf<k>``), its constant offset
  (``("D", "buf@8")``; ``add``/``sub`` of an immediate moves it, anything else makes it
  unknown, and a register seen at many offsets, as a loop's pointer, is at an unknown one),
  in a 64-bit register or a 32-bit shared-window one (:meth:`~.addresses.Proof.window`);
  an ``ld``/``st``/``atom``/``red`` at a known offset outside the tile is refused
  (:func:`check_tile_bounds`). Run time checks of the rest: :mod:`splice.inputs.tile_guards`.
"""

from __future__ import annotations

import re

from ..errors import SpliceLinkError
from ..ptxtools.ptx import Instruction, Module
from .addresses import FINE, Fn, Proof, int_value, proven, shift
from .collectives import chain_names, outside_ptx, reach_text
from .memory_none import NO_MEMORY, WHY_NOT

#: The prefix of splice's tile staging symbols (:data:`splice.inputs.tile_fragment.PREFIX`;
#: not imported: the analyses import no input kind).
TILE_PREFIX = "__splice_tile_"

# ---------------------------------------------------------------------------------------------
# memory="arguments" (externs): the accesses, on the address analysis

#: Calls of CUDA's device runtime the walk cannot read, allowed in a memory="arguments"
#: callee: printf's buffer and the assertion record are not the kernel's memory; malloc's
#: result is an address of unknown origin (``L``), so the callee may not access it.
_RUNTIME_CALLS = frozenset({"vprintf", "__assertfail", "malloc", "free"})

#: Instructions that access memory at their bracketed operands (the state space named in
#: the opcode, generic where none).
_ACCESSES = frozenset({"ld", "ldu", "st", "atom", "red", "multimem", "discard"})

#: Instructions that leave global memory alone, besides :data:`NO_MEMORY`: shared-memory
#: barriers and fences, tensor memory, cache hints (``prefetch``: no value depends on it).
_NO_GLOBAL = NO_MEMORY | frozenset({"mbarrier", "fence", "membar", "griddepcontrol",
                                    "tcgen05", "ret", "exit", "prefetch", "prefetchu",
                                    "applypriority", "ldmatrix", "stmatrix", "wmma",
                                    "getctarank", "elect", "clusterlaunchcontrol"})


def _access_operands(ins: Instruction) -> list[tuple[str, str]]:
    """(state space or "" for generic, bracketed operand) of each memory operand ``ins``
    accesses that is not in a private state space."""
    spaces = [m.split("::")[0] for m in ins.modifiers
              if m.split("::")[0] in ("global", "shared", "local", "param", "const")]
    bracketed = [o for o in ins.operands if o.strip().startswith("[")]
    if ins.base in _ACCESSES or ins.base == "mbarrier" or (
            ins.base == "wmma" and ("load" in ins.modifiers or "store" in ins.modifiers)):
        space = spaces[0] if spaces else ""
        return [(space, o) for o in bracketed[:1]] if space in ("", "global") else []
    if ins.base == "cp":
        return [(s, o) for s, o in zip(spaces, bracketed) if s == "global"]
    return []


def _refusal(ins: Instruction, text: str) -> str | None:
    """Why ``ins`` touches global memory other than through an address the analysis can
    check, or None."""
    base, mods = ins.base, ins.modifiers
    if base == "cp" and ("tensor" in mods or "prefetch" in mods):
        return None if "prefetch" in mods else \
            "copies through a tensor map (TMA), which is not one of its pointer arguments"
    if base in _ACCESSES or base == "cp" or base == "call":
        return None
    if base in WHY_NOT and base not in _NO_GLOBAL:
        return WHY_NOT[base]
    if base in _NO_GLOBAL or base == "cvta":
        return None
    return "is not an instruction splice knows to leave global memory alone"


def _address_fault(proof: Proof, f: Fn, ins: Instruction, op: str) -> str | None:
    inner = op.strip()[1:-1].replace(" ", "")
    head, _, offset = inner.partition("+")
    origins = proof.value(f, head)
    bad = [o for o in origins if o[0] not in FINE]
    if not bad:
        return "of no origin splice could trace" if not origins else \
            _private_fault(f, origins, int_value(offset or "0"), _access_bytes(ins))
    for kind in ("G", "X", "L", "N"):
        hit = next((o for o in sorted(bad) if o[0] == kind), None)
        if hit is not None:
            return _WHY[kind].format(why=hit[1])
    return None


def _private_fault(f: Fn, origins: frozenset, imm: int | None, size: int) -> str | None:
    """Why a generic (or global) access at an address of ``origins`` plus ``imm`` may leave
    the ``.local``, ``.shared`` or ``.const`` variable it is derived from: a run-time
    offset (through a generic address it may reach any memory), or constant bytes outside
    the variable's declared size. A staged tile's offsets are the tile call's
    (:func:`check_tile_bounds`, the guard words)."""
    for kind, why in sorted(origins):
        if kind != "D" or "@" not in why or why.startswith(TILE_PREFIX):
            continue
        sym, _, at = why.rpartition("@")
        space = f.symbols.get(sym, ".local")[1:]
        if at == "?" or imm is None:
            return (f"that is the address of the {space} variable '{sym}' plus a run-time "
                    f"offset: through a generic address that may reach any memory, and "
                    f"splice cannot prove it stays in '{sym}'")
        a, end = int(at) + imm, f.sizes.get(sym)
        if end is not None and (a < 0 or a + size > end):
            return (f"that is bytes {a}..{a + size - 1} of the {space} variable '{sym}' "
                    f"({end} bytes): outside it")
    return None


_WHY = {
    "G": "that is {why}, not one of its pointer arguments",
    "X": "computed by {why}",
    "L": "that is {why}: a pointer read from memory, not one of its pointer arguments",
    "N": "computed from integers only (an integer cast of unknown origin), not from a "
         "pointer argument",
}


def _first_fault(proof: Proof) -> tuple[Fn, str, str] | None:
    """(function, instruction text, why) of the first access (or instruction) that breaks
    rule 4, in the order the walk reached the functions."""
    for f in proof.fns:
        for ins, text in f.code:
            why = _refusal(ins, text)
            if why is not None:
                return f, text, why
            for _space, op in _access_operands(ins):
                fault = _address_fault(proof, f, ins, op)
                if fault is not None:
                    return f, text, f"accesses global (or generic) memory at an address {fault}"
    return None

def prove_arguments_only(ext, mod: Module, modules) -> tuple[str, str] | None:
    """Prove that ``ext``'s callee (``ext.symbol`` in ``mod``) and everything it reaches
    access global memory only at addresses derived from its pointer arguments (the module
    docstring's rules 1-4).

    Args:
        ext: the extern (``.symbol``, ``.signature``, ``.fragment``).
        mod: the PTX module of its fragment.
        modules: every fragment module of the kernel (callees may lie in another).

    Returns:
        None when it is proven; else (the instruction, why), the instruction with where it
        sits ("in its own body", "in 'g', reached through f -> g").

    Example:
        >>> prove_arguments_only(ext, module, [module])       # doctest: +SKIP
    """
    reach = outside_ptx(mod, ext.symbol, modules)
    if reach.indirect is not None:
        names = chain_names(ext, reach.indirect)
        return "a call through a function pointer", (
            f"{reach_text(names)}: splice cannot read what the called function touches")
    for name, chain in reach.undefined.items():
        if name not in _RUNTIME_CALLS:
            return f"call {name}", (
                f"{reach_text(chain_names(ext, chain[:-1]))} calls '{name}', which no PTX "
                f"fragment defines (code of a binary object): splice cannot read what it "
                f"touches")
    proof = proven(ext, reach)
    hit = _first_fault(proof) if proof is not None else None
    if hit is None:
        return None
    f, text, why = hit
    return text, f"{reach_text(chain_names(ext, f.chain))} {why}"


# ---------------------------------------------------------------------------------------------
# Tile calls: no constant offset outside a staged tile

_BITS_RE = re.compile(r"^[bsuf](\d+)$")


def tile_names(frag) -> list[str]:
    """What each staging buffer of a tile call's fragment stages, for messages ("tile
    argument 2", "the tile result").

    Args:
        frag: the tile call's fragment (``.buffers``, ``.results``, ``.tile_positions``).

    Returns:
        list[str]: one name per buffer, in order.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> tile_names(NS(buffers=[0, 0], results=1, tile_positions=(1, 2)))
        ['tile argument 2', 'the tile result']
    """
    first_result = len(frag.buffers) - frag.results
    return [f"tile argument {frag.tile_positions[k] + 1}" if k < first_result else
            "the tile result" if frag.results == 1 else
            f"tile result {k - first_result + 1}" for k in range(len(frag.buffers))]


def _access_bytes(ins: Instruction) -> int:
    """The bytes an ``ld``/``st``/``atom``/``red`` accesses (its type times its vector
    length)."""
    bits = next((int(m.group(1)) for mod in reversed(ins.modifiers)
                 if (m := _BITS_RE.match(mod))), 8)
    vec = next((int(mod[1:]) for mod in ins.modifiers if re.fullmatch(r"v\d", mod)), 1)
    return max(bits // 8, 1) * vec


def _tile_ranges(frag) -> dict[str, tuple[int, int, str]]:
    """Each staging buffer of a tile call's fragment -> (first byte, end byte, which tile)
    relative to its symbol (after the guard words in check mode)."""
    lead = getattr(frag, "guard_bytes", 0)
    out = {}
    for k, ((elem, n), which) in enumerate(zip(frag.buffers, tile_names(frag))):
        size = frag.buffer_bytes(k)
        out[frag.buffer(k)] = (lead, lead + size, f"{which} ({n} x {elem.name}, {size} bytes)")
    return out


def _out_of_tile(proof: Proof, f: Fn, ins: Instruction, ranges) -> str | None:
    if ins.base not in ("ld", "st", "atom", "red") or "param" in ins.modifiers or \
            "local" in ins.modifiers:
        return None
    op = next((o for o in ins.operands if o.strip().startswith("[")), None)
    if op is None:
        return None
    head, _, off = op.strip()[1:-1].replace(" ", "").partition("+")
    imm = int_value(off or "0")
    if imm is None or not head.startswith("%"):
        return None       # a symbol's own address: splice's staging code, not the callee's
    size = _access_bytes(ins)
    for kind, why in shift(proof.window(f, head), imm):
        sym, _, at = why.rpartition("@")
        if kind != "D" or sym not in ranges or at == "?":
            continue
        lo, hi, which = ranges[sym]
        a = int(at)
        if a < lo or a + size > hi:
            side = "before the start" if a < lo else "past the end"
            return (f"accesses bytes {a - lo}..{a - lo + size - 1} of {which}: {side} of "
                    f"the tile")
    return None


def check_tile_bounds(site, mod: Module, modules) -> None:
    """Refuse a tile call (``site.extern.staging.role == "call"``) whose callee, or a
    function it reaches, accesses a staged tile at a constant offset outside it: the
    address is the buffer's plus constants only (``y[N] = -1.0f``, one past a result of
    N elements), so it lands in other shared memory (splice's next buffer, tileiras's).

    Args:
        site: the tile call's block or warpgroup site (``.extern``, ``.where``).
        mod: the PTX module of its fragment (:class:`splice.inputs.tile_fragment.TileFragment`).
        modules: every fragment module of the kernel.

    Raises:
        SpliceLinkError: naming the call, the instruction, the tile, the bytes and the fix.

    Example:
        >>> check_tile_bounds(site, module, [module])          # doctest: +SKIP
    """
    ext = site.extern
    ranges = _tile_ranges(ext.fragment)
    proof = proven(ext, outside_ptx(mod, ext.symbol, modules))
    if proof is None:
        return
    for f in proof.fns:
        for ins, text in f.code:
            why = _out_of_tile(proof, f, ins, ranges)
            if why is not None:
                raise SpliceLinkError(
                    f"tile call of extern '{ext.name}' (declared at {ext.where}), called "
                    f"at {site.where}: '{text}' {reach_text(chain_names(ext, f.chain))} "
                    f"{why}, into shared memory splice or tileiras uses for something "
                    f"else. Index the tile within its shape (pass the number of valid "
                    f"elements as a scalar argument if it varies)")
