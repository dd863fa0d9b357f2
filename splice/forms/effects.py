"""What an element-scope extern's code may not do besides collectives: end the thread
(``exit``), use ``__shared__`` memory, or, when it is declared pure, have a side effect the
program can see; and the memory any callee declared ``memory="arguments"`` may touch.
:func:`check_every_callee` runs these checks, which every call site gets whatever its form,
for each form's :meth:`~splice.forms.base.CallForm.check_callees`.

- **exit** (also at block scope). A thread that exits inside the call skips the kernel's
  code after it: its stores are lost, silently (a barrier excuses exited threads) (``splice.asm``
  snippets are checked for ``exit`` themselves, :mod:`splice.analysis.asm_check`; this covers what
  they and externs call).

- **Shared memory.** An element-scope call runs on each thread that owns an element, all
  at once and in no order splice controls, so one ``__shared__`` variable is shared by the
  calls of every thread of the block: a data race unless the code indexes it by thread
  (which splice cannot prove). Any ``.shared`` variable that the extern, or a function it
  calls, declares or names is refused; ``scope="block"`` is the form for shared memory.
- **Dynamic shared memory** (any scope). An ``extern __shared__`` array (``.extern
  .shared``) has the bytes the launch gives the block beyond its static shared memory;
  tileiras declares all of the kernel's shared memory statically and cuTile's launch
  reserves none for an extern, so nothing gives the callee's array a size: its accesses
  are out of range (the CPU executor: an illegal shared address), or land on memory no one
  reserved for it. Refused; a static ``__shared__`` array (which splice counts in the
  block's shared memory) is the fix.
- **Pure with side effects.** A pure call (the default) may be removed when its result is
  unused, hoisted or duplicated (``docs/design.md#fma-marker``). So a pure extern's code may
  execute only what :data:`PURE_BASES` allows (reads, arithmetic, local memory, cache
  hints); anything else (a store to global, shared or generic memory, an atomic or
  reduction, a surface write, an asynchronous copy, a tensor-map write, a discard, an
  mbarrier operation, a fence, a trap, a call of ``vprintf``/``malloc``/``free``/
  ``__assertfail``, an instruction the list does not know) would be lost, moved or repeated
  without a word, so it is refused with ``pure=False`` as the fix. Stores to ``.local``
  (the stack) and ``.param`` are not effects the program can see.

- **Memory** (any scope). A callee declared ``memory="arguments"`` may touch global memory
  only through its pointer arguments, proven on its PTX by
  :mod:`splice.analysis.memory_proof` (:func:`check_argument_sites`, which also refuses a
  tile call's constant offsets outside its tiles).

They walk the functions the extern reaches as the collective check does
(:func:`splice.analysis.collectives.outside_ptx`). The shared-memory and purity rules apply to the
call forms that do not run convergently (``form.runs_convergently()``, :mod:`splice.forms`):
a form whose threads call convergently (block) may use shared memory, and is never pure.
"""

from __future__ import annotations

from typing import Mapping

from ..analysis import memory_proof
from ..analysis.collectives import chain_names, collective_of, outside_ptx, reach_text
from ..errors import SpliceLinkError
from ..ptxtools.ptx import Module, declared_variable_name, parse_instruction
from .base import Memory, site_module

_PRINT = frozenset({"vprintf", "printf"})
#: Calls of CUDA's device runtime that act outside the thread: the callee is not PTX the
#: walk sees, so its name is the rule.
_EFFECT_CALLS = {**{p: "a printf" for p in _PRINT},
                 "malloc": "a call of the device allocator (malloc)",
                 "free": "a call of the device allocator (free)",
                 "__assertfail": "an assertion (__assertfail ends the launch)"}
_PRIVATE_SPACES = frozenset({"local", "param"})

#: What a pure callee may execute (PTX ISA 8.7, sm_90 and sm_100), by base opcode: integer,
#: floating-point, half, comparison, logic, video and conversion arithmetic; moves, reads
#: of memory (``ld`` other than ``.mmio``, ``ldu``), textures and surfaces (``tex``,
#: ``tld4``, ``txq``, ``suld``, ``suq``); address arithmetic (``cvta``, ``mapa``,
#: ``isspacep``, ``getctarank``, ``createpolicy``); control flow (``call``: its callee is
#: walked; ``exit`` is refused by its own rule); the stack (``alloca``, ``stacksave``,
#: ``stackrestore``, and ``st.local``/``st.param``, see :func:`_effect`); and cache hints
#: and timing that no value depends on (``prefetch``, ``prefetchu``, ``applypriority``,
#: ``nanosleep``). Every other instruction is a side effect: stores (``st``, ``st.async``,
#: ``stmatrix``, ``sust``), atomics and reductions (``atom``, ``red``, ``red.async``,
#: ``sured``, ``multimem``), asynchronous copies (``cp.*``), ``tensormap.replace``,
#: ``discard``, ``mbarrier``, fences (``fence``, ``membar``), ``griddepcontrol.wait``,
#: ``trap``, ``brkpt``, ``pmevent`` and any instruction this list does not know. The
#: warp-, warpgroup- and CTA-wide ones (``wgmma``, ``tcgen05``, ``setmaxnreg``,
#: ``elect``, ``bar``, ...) are refused first as collectives (:mod:`splice.analysis.collectives`).
PURE_BASES = frozenset("""
    add sub mul mad mul24 mad24 sad div rem abs neg min max popc clz bfind fns brev bfe bfi
    szext bmsk dp4a dp2a addc subc madc
    testp copysign fma rcp sqrt rsqrt sin cos lg2 ex2 tanh
    set setp selp slct and or xor not cnot lop3 shf shl shr
    mov ld ldu prmt cvt cvta mapa isspacep getctarank createpolicy istypep
    tex tld4 txq suld suq
    bra brx call ret exit alloca stacksave stackrestore
    prefetch prefetchu applypriority nanosleep
    vadd vsub vabsdiff vmin vmax vshl vshr vmad vset vadd2 vsub2 vavrg2 vabsdiff2 vmin2
    vmax2 vset2 vadd4 vsub4 vavrg4 vabsdiff4 vmin4 vmax4 vset4
    """.split())

#: Named side effects outside ``PURE_BASES`` (others: "an instruction a pure call may
#: not execute").
_NAMED = {"atom": "an atomic or reduction", "red": "an atomic or reduction",
          "multimem": "an atomic or reduction", "sured": "a surface reduction",
          "sust": "a surface store",
          "tensormap": "a write of a tensor map",
          "discard": "a discard of memory (its contents become undefined)",
          "mbarrier": "an mbarrier operation", "fence": "a memory fence",
          "membar": "a memory fence", "trap": "a trap (ends the launch)",
          "brkpt": "a breakpoint", "pmevent": "a performance-monitor event",
          "griddepcontrol": "a grid dependency wait",
          "clusterlaunchcontrol": "a cluster launch control operation"}


def _shared_names(mod: Module) -> frozenset[str]:
    """The module-level ``.shared`` variables of ``mod``."""
    out = set()
    for st in mod.statements:
        if st.depth == 0 and st.kind == "directive" and \
                any(t.text == ".shared" for t in st.tokens):
            idents = [t.text for t in st.tokens if t.kind == "ident"]
            if idents:
                out.add(idents[0])
    return frozenset(out)


def _dynamic_shared_names(mod: Module) -> frozenset[str]:
    """The module-level ``.extern .shared`` variables of ``mod`` (``extern __shared__``)."""
    return frozenset(name for st in mod.statements
                     if st.depth == 0 and st.kind == "directive" and st.head == ".extern"
                     and any(t.text == ".shared" for t in st.tokens)
                     and (name := declared_variable_name(st)) is not None)


def _first_use(mod: Module, fn_name: str, names: frozenset[str]) -> tuple[str, str] | None:
    """(the name, the statement) of the first statement of ``fn_name``'s body that names
    one of ``names``, or None."""
    for st in mod.body_statements(mod.functions[fn_name]):
        for t in st.tokens:
            if t.kind == "ident" and t.text in names:
                return t.text, " ".join(st.text(mod.text).split())
    return None


def _effect(ins) -> str | None:
    """The kind of visible side effect ``ins`` has, or None (:data:`PURE_BASES`)."""
    mods = set(ins.modifiers)
    spaces = {m.split("::")[0] for m in mods}
    if ins.base == "st":
        return None if spaces & _PRIVATE_SPACES else \
            "a store to global memory" if "global" in spaces else \
            "a store to shared memory" if "shared" in spaces else \
            "a store through a generic pointer"
    if ins.base == "ld" and "mmio" in mods:
        return "a load of memory-mapped I/O"
    if ins.base == "call":
        return _EFFECT_CALLS.get(ins.call_target or "")
    if ins.base == "cp":
        return None if "prefetch" in mods else _copy_effect(ins)
    if ins.base in PURE_BASES or ins.opcode.startswith("clusterlaunchcontrol.query_cancel") \
            or collective_of(ins.opcode) is not None:
        return None   # a collective: refused by splice.analysis.collectives, with its own reason
    return _NAMED.get(ins.base, f"'{ins.base}', an instruction a pure call may not execute "
                                f"(it is not a read, arithmetic or local-memory access)")


def _copy_effect(ins) -> str:
    """What a ``cp.*`` copy writes: its destination (the first state space named)."""
    order = [m for m in ins.modifiers if m == "global" or m.startswith("shared")]
    return "an asynchronous write of global memory" if order[:1] == ["global"] else \
        "an asynchronous write of shared memory" if order else "an asynchronous copy"


def _scan(mod: Module, fn_name: str, shared: frozenset[str]):
    """(the first ``.shared`` use, the first visible side effect, the first ``exit``) in
    ``fn_name``'s body, each as (instruction text, what) or None."""
    fn = mod.functions[fn_name]
    shared_use = effect = leaves = None
    for st in mod.body_statements(fn):
        text = " ".join(st.text(mod.text).split())
        if leaves is None and st.kind == "instruction" and \
                parse_instruction(st, mod.text).base == "exit":
            leaves = (text, "exit")
        if shared_use is None and (
                (st.kind == "directive" and any(t.text == ".shared" for t in st.tokens)) or
                any(t.kind == "ident" and t.text in shared for t in st.tokens)):
            shared_use = (text, "shared memory")
        if effect is None and st.kind == "instruction":
            what = _effect(parse_instruction(st, mod.text))
            if what:
                effect = (text, what)
    return shared_use, effect, leaves


def check_element_effects(sites, fragments: Mapping[str, tuple[str, Module]],
                          target: str, keys: Mapping[int, str] | None = None) -> None:
    """Refuse a call whose code ends the thread (``exit``, any scope), an element-scope one
    whose code uses ``__shared__`` memory, or a pure element-scope one whose code has a
    visible side effect (see the module docstring).

    Args:
        sites: the traced call sites (``.extern``, ``.where``).
        fragments: content key -> (description, PTX module) of every fragment of the
            kernel, compiled for ``target``.
        target: the kernel's PTX target.
        keys: id(fragment) -> its content key for ``target``
            (:func:`splice.forms.base.site_module`).

    Raises:
        SpliceLinkError: naming the extern, its declaration, the instruction, the chain of
            functions that reaches it, the call site and the fix.
    """
    modules = [m for _, m in fragments.values()]
    done: set[tuple[int, str, bool]] = set()
    for site in sites:
        ext = site.extern
        if not ext.fragment.has_ptx_body:   # a binary object: linked after ptxas
            continue
        mod = site_module(ext, fragments, target, keys)
        if (id(mod), ext.symbol, ext.pure) in done:
            continue
        done.add((id(mod), ext.symbol, ext.pure))
        what = (f"inline PTX (splice.asm) at {ext.where}" if ext.fragment.kind == "asm"
                else f"extern '{ext.name}' (declared at {ext.where})")
        _check_one(ext, mod, modules, f"{what}, called at {site.where},")


def _stages_a_tile(ext) -> bool:
    """Whether ``ext`` is splice's generated store or load of a tile call: its shared memory
    is the call's staging buffers, each element written by its owner thread once and read
    after the call's barriers (``splice.forms.staging.check_staging``, ``docs/design.md``)."""
    return ext.staging is not None and ext.staging.role in ("store", "load")


def _check_one(ext, mod: Module, modules, what: str) -> None:
    reach = outside_ptx(mod, ext.symbol, modules)
    for fmod, name, chain in reach.functions():
        shared_use, effect, leaves = _scan(fmod, name, _shared_names(fmod))
        where = reach_text(chain_names(ext, chain))
        if leaves is not None:
            raise SpliceLinkError(
                f"{what} executes '{leaves[0]}' {where}: the thread would end inside the "
                f"call, and the kernel's code after it (its stores) would not run for that "
                f"thread. Return from the function instead (or __trap() to abort the "
                f"launch)")
        dynamic = _dynamic_shared_names(fmod)
        use = _first_use(fmod, name, dynamic) if dynamic else None
        if use is not None:
            raise SpliceLinkError(
                f"{what} uses dynamic shared memory ('{use[0]}', an extern __shared__ array: "
                f"'{use[1]}' {where}): tileiras declares the kernel's shared memory "
                f"statically and cuTile's launch reserves no dynamic shared memory for an "
                f"extern, so the array has no size splice can promise. Declare a static "
                f"__shared__ array of the size it needs (splice counts it in the block's "
                f"shared memory)")
        if ext.form.runs_convergently() or _stages_a_tile(ext):
            continue   # a convergent (block) call: shared memory is its own, never pure; a
                       # tile's store/load site: splice's own buffers (splice.forms.staging
                       # proves them)
        if shared_use is not None:
            raise SpliceLinkError(
                f"{what} uses __shared__ memory ('{shared_use[0]}' {where}): an element-scope "
                f"call runs on every thread that owns an element at once, so the threads of "
                f"a block would share that variable. Declare it with scope=\"block\" (every "
                f"thread calls it once, convergently), or use local variables")
        if ext.pure and effect is not None:
            raise _impure(what, f"{effect[1]} ('{effect[0]}' {where})")
    if ext.pure and not ext.form.runs_convergently():
        for name, chain in reach.undefined.items():
            if name in _EFFECT_CALLS:
                raise _impure(what, f"{_EFFECT_CALLS[name]} ('{name}', reached through "
                                    f"{' -> '.join(chain)})")


def _impure(what: str, effect: str) -> SpliceLinkError:
    return SpliceLinkError(
        f"{what} is declared pure (the default) but has a side effect: {effect}. A pure "
        f"call may be removed when its result is unused, hoisted out of a loop or repeated, "
        f"which would lose, move or repeat it: declare it pure=False (kept, in place, once "
        f"per element)")


def check_every_callee(sites, fragments: Mapping[str, tuple[str, Module]], target: str,
                       keys: Mapping[int, str] | None = None) -> None:
    """The checks every call site's callee gets, whatever its form (each form's
    :meth:`~splice.forms.base.CallForm.check_callees` runs them after its own policy): what
    it may not execute (:func:`check_element_effects`) and the memory it is declared to
    touch (:func:`check_argument_sites`).

    Raises:
        SpliceLinkError: as those do.
    """
    check_element_effects(sites, fragments, target, keys)
    check_argument_sites(sites, fragments, target, keys)


def check_argument_sites(sites, fragments: Mapping[str, tuple[str, Module]], target: str,
                         keys: Mapping[int, str] | None = None) -> None:
    """Refuse every call site whose extern is declared ``memory="arguments"`` unless
    :func:`splice.analysis.memory_proof.prove_arguments_only` proves it, and every tile call
    that :func:`splice.analysis.memory_proof.check_tile_bounds` refuses (the arguments as
    for :func:`check_element_effects`).

    Raises:
        SpliceLinkError: naming the extern, its declaration, the instruction, the chain of
            functions that reaches it, the call site and the fix (``memory="any"``); or,
            for a tile call, the tile and the bytes outside it.
    """
    modules = [m for _, m in fragments.values()]
    done: set[tuple[int, str]] = set()
    for site in sites:
        ext = site.extern
        if ext.staging is not None and ext.staging.role == "call" and \
                ext.fragment.has_ptx_body:
            memory_proof.check_tile_bounds(site, site_module(ext, fragments, target, keys),
                                           modules)
        if ext.memory is not Memory.ARGUMENTS or (ext.staging is not None and
                                         ext.staging.role in ("store", "load")):
            continue
        what = f"extern '{ext.name}' (declared at {ext.where}), called at {site.where},"
        if not ext.fragment.has_ptx_body:
            raise SpliceLinkError(
                f"{what} is declared memory=\"arguments\", but its code is a binary object "
                f"({ext.fragment.describe()}) whose memory accesses splice cannot read. "
                f"Declare it memory=\"any\" (the default), or link its PTX")
        mod = site_module(ext, fragments, target, keys)
        if (id(mod), ext.symbol) in done:
            continue
        hit = memory_proof.prove_arguments_only(ext, mod, modules)
        if hit is not None:
            raise SpliceLinkError(
                f"{what} is declared memory=\"arguments\" (it touches global memory only "
                f"through its pointer arguments, so cuTile orders it against those arrays "
                f"alone), but '{hit[0]}' {hit[1]}. A later read of that memory could see a "
                f"stale value. Declare it memory=\"any\" (the default: ordered against "
                f"every load and store of the kernel), or pass the memory it touches as a "
                f"pointer argument")
        done.add((id(mod), ext.symbol))
