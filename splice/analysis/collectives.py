"""Collective instructions: what an element-scope call cannot run.

An element-scope call runs once per tile element, on the thread that owns the element
(``docs/design.md#per-element``): which threads of a warp or CTA execute it together is
tileiras's layout decision, not the user's. An instruction whose PTX ISA semantics need other
threads of the warp, warpgroup, CTA or cluster to execute it too (``bar.sync``, ``shfl.sync``,
``mma``, ...) is undefined there: a hang, or wrong data. :func:`find_collective` finds one in a
function or anything it calls; :func:`check_element_sites` refuses such calls with a
:class:`SpliceLinkError` that points at ``scope="block"``. Exempt: the opportunistic
pattern, ``__activemask()`` feeding the membermask of ``.sync`` instructions, which is
correct at any divergence where :mod:`splice.analysis.activemask` proves it
(``docs/design.md#active-mask``).

:data:`COLLECTIVES` is the table, made from the PTX ISA 9.4 document (section numbers are
that version's); :data:`NOT_COLLECTIVE` lists the look-alikes that were considered and
why each runs correctly on one thread. Both are data: a new ISA instruction is one row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
from typing import Iterable, Mapping, Sequence

from ..ptxtools.ptx import Function, Module, opcode_at, parse_instruction
from ..system import forksafe, safe_fs
from . import activemask


@dataclasses.dataclass(frozen=True)
class Collective:
    """One row of the table.

    Attributes:
        opcode: dotted opcode prefix; it matches an opcode whose ``.``-separated parts start
            with these parts (``"bar"`` matches ``bar.sync``, ``bar.red.popc.u32``...).
        group: the threads that must execute it together: "warp", "warpgroup", "CTA",
            "cluster".
        section: the PTX ISA 9.4 section that says so.
        rule: what the ISA requires, in a few words (quoted in the error message).
    """

    opcode: str
    group: str
    section: str
    rule: str

    def matches(self, opcode: str) -> bool:
        want = self.opcode.split(".")
        return opcode.split(".")[:len(want)] == want


#: Instructions whose ISA semantics involve other threads than the executing one. Most
#: specific prefix first: the first matching row names the instruction.
COLLECTIVES: tuple[Collective, ...] = (
    # 9.7.15.2: "will cause executing thread to wait until all threads corresponding to
    # membermask have executed a bar.warp.sync with the same membermask value".
    Collective("bar.warp.sync", "warp", "9.7.15.2",
               "every thread in membermask must execute it (__syncwarp)"),
    # 9.7.15.3: "barrier.cluster.wait instruction causes the executing thread to wait for
    # all non-exited threads of the cluster to perform barrier.cluster.arrive".
    Collective("barrier.cluster", "cluster", "9.7.15.3",
               "every non-exited thread of the cluster must arrive"),
    # 9.7.15.1: bar/barrier{.cta}.{sync,arrive,red}: "If no thread count is specified, all
    # threads in the CTA participate"; bar{.cta}.X is barrier{.cta}.X.aligned ("all threads
    # in CTA will execute the same barrier instruction"); .red reduces across the CTA.
    Collective("bar", "CTA", "9.7.15.1",
               "all threads of the CTA (or of the thread count) must arrive, and .aligned "
               "(bar is barrier.aligned) means all execute the same instruction "
               "(__syncthreads)"),
    Collective("barrier", "CTA", "9.7.15.1",
               "all threads of the CTA (or of the thread count) must arrive"),
    # 9.7.10.6: shfl.sync "causes executing thread to wait until all non-exited threads
    # corresponding to membermask have executed shfl.sync with the same qualifiers and
    # same membermask value"; 9.7.10.5 (deprecated shfl): reads registers of other lanes.
    Collective("shfl.sync", "warp", "9.7.10.6",
               "every thread in membermask must execute it (__shfl_*_sync)"),
    Collective("shfl", "warp", "9.7.10.5",
               "reads registers of other lanes of the warp (deprecated shfl)"),
    # 9.7.15.10 vote.sync / 9.7.15.9 vote (deprecated): a reduction of a predicate "across
    # all active threads in a warp".
    Collective("vote.sync", "warp", "9.7.15.10",
               "every thread in membermask must execute it (__ballot_sync, __all_sync, "
               "__any_sync)"),
    Collective("vote", "warp", "9.7.15.9",
               "reduces a predicate across the active threads of the warp (deprecated "
               "vote)"),
    # 9.7.15.11 match.{any,all}.sync, 9.7.15.13 redux.sync, 9.7.15.15 elect.sync: the
    # mandatory .sync waits until all threads in membermask execute the same instruction.
    Collective("match", "warp", "9.7.15.11",
               "every thread in membermask must execute it (__match_any_sync)"),
    Collective("redux.sync", "warp", "9.7.15.13",
               "every thread in membermask must execute it (__reduce_*_sync)"),
    Collective("elect.sync", "warp", "9.7.15.15",
               "every thread in membermask must execute it"),
    # 9.7.15.12: "activemask queries predicated-on active threads from the executing warp".
    # Not a synchronisation, but its result is the set of threads executing the call
    # together, which for an element call is tileiras's layout; it exists to feed the
    # membermask of the .sync instructions above.
    Collective("activemask", "warp", "9.7.15.12",
               "returns which threads of the warp execute it together (__activemask)"),
    # 9.7.15.14: .launch_dependents lets dependent grids start "as soon as all other CTAs
    # in the grid issue the same instruction or have completed"; "Repeated invocations ...
    # by threads in the current CTA will have no additional side effects past that of the
    # first invocation": the first element's call would release the kernel's dependents
    # before the kernel's other threads have stored anything. (griddepcontrol.wait only
    # makes the executing thread wait: not collective, see NOT_COLLECTIVE.)
    Collective("griddepcontrol.launch_dependents", "CTA", "9.7.15.14",
               "acts for the whole CTA at its first execution by any thread"),
    # 9.7.15.17: tensormap.cp_fenceproxy ... .sync.aligned (warp).
    Collective("tensormap.cp_fenceproxy", "warp", "9.7.15.17",
               ".sync.aligned: every thread of the warp must execute it"),
    # 9.7.15.18: try_cancel cancels the launch of another cluster, whose work then falls to
    # the requesting CTA; "If the executing CTA has already observed the completion of a
    # clusterlaunchcontrol.try_cancel instruction as failed, then the behavior of issuing a
    # subsequent ... is undefined": a per-CTA protocol, not a per-element one.
    Collective("clusterlaunchcontrol.try_cancel", "CTA", "9.7.15.18",
               "cancels another cluster's launch for the whole CTA"),
    # 9.7.16: "mma also requires computation to be performed collectively by all threads
    # in the warp"; wmma, ldmatrix, stmatrix, movmatrix: "The mandatory .aligned qualifier
    # indicates that all threads in the warp must execute the same ... instruction".
    Collective("wmma", "warp", "9.7.16.4",
               ".sync.aligned: all threads of the warp execute it collectively"),
    Collective("mma", "warp", "9.7.16.5",
               ".sync.aligned: all threads of the warp execute it collectively"),
    Collective("ldmatrix", "warp", "9.7.16.5",
               ".sync.aligned: all threads of the warp execute it collectively"),
    Collective("stmatrix", "warp", "9.7.16.5",
               ".sync.aligned: all threads of the warp execute it collectively"),
    Collective("movmatrix", "warp", "9.7.16.5",
               ".sync.aligned: all threads of the warp execute it collectively"),
    # 9.7.17: every wgmma instruction (fence, commit_group, wait_group, mma_async) is
    # .sync.aligned: "all threads in the warpgroup must execute the same" instruction.
    Collective("wgmma", "warpgroup", "9.7.17",
               ".sync.aligned: all threads of the warpgroup execute it"),
    # 9.7.18: tcgen05.alloc/dealloc/relinquish_alloc_permit/ld/st/wait are .sync.aligned
    # (warp). .mma/.cp/.shift/.commit are issued by one thread *per CTA* ("An issue from a
    # single thread in the current CTA would initiate the base operation", Issue
    # Granularity) on Tensor Memory that only the warp-collective tcgen05.alloc provides,
    # so none of the family can be correct once per element: the whole family is refused.
    Collective("tcgen05", "warp", "9.7.18",
               "Tensor Memory is allocated and accessed by whole warps (.sync.aligned); "
               ".mma/.cp/.shift/.commit are issued once per CTA"),
    # 9.7.21.5: "The same setmaxnreg instruction must be executed by all warps in a
    # warpgroup"; .aligned: "all threads in the warpgroup must execute" it.
    Collective("setmaxnreg", "warpgroup", "9.7.21.5",
               "all warps of the warpgroup must execute it (.sync.aligned)"),
)


#: Considered and not collective: each runs correctly on the executing thread alone.
NOT_COLLECTIVE: tuple[tuple[str, str, str], ...] = (
    ("membar", "9.7.15.4", "a fence orders the executing thread's own memory accesses"),
    ("fence", "9.7.15.4", "likewise, fence.proxy.async included (a proxy fence of the "
                          "executing thread)"),
    ("atom", "9.7.15.5", "an atomic of the executing thread"),
    ("red", "9.7.15.6", "a reduction to memory by the executing thread (red.async too)"),
    ("multimem", "9.7.10.15", "per-thread access to multicast memory"),
    # 9.7.15.16: every mbarrier operation is "A thread executing mbarrier.X performs ...":
    # none needs another thread to execute it. Their cooperative uses (an mbarrier shared
    # by the CTA, initialised by one thread) need a CTA barrier between init and use
    # (9.7.15.16.12's examples), and that bar.sync is refused by its own row; a thread
    # that inits, arrives and waits on an mbarrier of its own is correct per element.
    ("mbarrier", "9.7.15.16", "per-thread operations on a shared-memory object"),
    ("cp.async", "9.7.10.28", "asynchronous copies issued and awaited by one thread "
                              "(cp.async.bulk, .tensor, commit/wait_group included)"),
    ("griddepcontrol.wait", "9.7.15.14", "the executing thread waits for prerequisite "
                                         "grids"),
    ("clusterlaunchcontrol.query_cancel", "9.7.15.19", "decodes a response in registers"),
    ("tensormap.replace", "9.7.10.29", "per-thread write of a tensor map"),
    ("st.async", "9.7.10.12", "per-thread asynchronous store"),
    ("nanosleep", "9.7.21.2", "suspends the executing thread"),
)



_BY_BASE: dict[str, tuple[Collective, ...]] = {}
for _c in COLLECTIVES:
    _BY_BASE[_c.opcode.split(".")[0]] = _BY_BASE.get(_c.opcode.split(".")[0], ()) + (_c,)


def collective_of(opcode: str) -> Collective | None:
    """The table row an opcode (``"bar.sync"``, ``"shfl.sync.bfly.b32"``) matches, or None."""
    for c in _BY_BASE.get(opcode.split(".", 1)[0], ()):
        if c.matches(opcode):
            return c
    return None


# ---------------------------------------------------------------------------------------------
# Facts per module, memoised by content; the walk over them is dictionary look-ups.


@dataclasses.dataclass(frozen=True)
class _Facts:
    """What the walk needs from one module: per defined function, its first collective
    instruction (text, row) and its direct callees in order, and whether it calls through a
    register; the functions it exports (.visible/.weak) and those whose address it takes."""

    first: dict[str, tuple[str, Collective] | None]
    calls: dict[str, tuple[str, ...]]
    indirect: frozenset[str]
    exported: frozenset[str]
    address_taken: tuple[str, ...]
    weak: frozenset[str] = frozenset()


_facts_memo: dict[str, _Facts] = {}
_facts_lock = forksafe.lock(globals(), "_facts_lock")


def _facts(mod: Module) -> _Facts:
    key = hashlib.sha256(mod.text.encode()).hexdigest()
    with _facts_lock:
        hit = _facts_memo.get(key)
    if hit is None:
        hit = _scan(mod)
        with _facts_lock:
            _facts_memo[key] = hit
    return hit


def _scan(mod: Module) -> _Facts:
    """The facts of ``mod`` (:class:`_Facts`), from one pass over its statements."""
    names = {f.name for f in mod.function_order}
    aliases = _aliases(mod)
    first: dict[str, tuple[str, Collective] | None] = {}
    calls: dict[str, tuple[str, ...]] = {}
    indirect = set()
    taken: dict[str, None] = {}
    for fn in mod.function_order:
        if not fn.is_definition:
            continue
        hit, callees, through_register = _scan_body(mod, fn, names, aliases, taken)
        first[fn.name] = hit
        calls[fn.name] = callees
        if through_register:
            indirect.add(fn.name)
    for st in mod.statements:
        if st.depth == 0 and st.kind not in ("header", "decl"):
            _note_taken(st.tokens, names, taken)
    exported = frozenset(f.name for f in mod.function_order if f.is_definition and
                         (".visible" in f.linkage or ".weak" in f.linkage))
    weak = frozenset(f.name for f in mod.function_order if f.is_definition and
                     ".weak" in f.linkage)
    return _Facts(first, calls, frozenset(indirect), exported, tuple(taken), weak)


def _aliases(mod: Module) -> dict[str, str]:
    """``.alias a, b;``: a call of a runs b (which must be defined in the same module)."""
    aliases = {}
    for st in mod.statements:
        if st.depth == 0 and st.kind == "directive" and st.head == ".alias":
            pair = [t.text for t in st.tokens if t.kind == "ident"]
            if len(pair) == 2:
                aliases[pair[0]] = pair[1]
    return aliases


def _scan_body(mod: Module, fn: Function, names: set[str], aliases: Mapping[str, str],
               taken: dict[str, None]
               ) -> tuple[tuple[str, Collective] | None, tuple[str, ...], bool]:
    """One defined function's facts: its first collective instruction that
    :func:`activemask.proven` does not exempt (text, row), its direct callees in order
    (aliases resolved), whether it calls through a register. The functions of ``names``
    its body names other than as a call target are added to ``taken``."""
    hit = None
    callees: dict[str, None] = {}
    through_register = False
    exempt: frozenset[int] | None = None
    for st in mod.body_statements(fn):
        if st.kind != "instruction":
            _note_taken(st.tokens, names, taken)
            continue
        toks = st.tokens
        k = 0 if toks[0].text != "@" else (3 if toks[1].text == "!" else 2)
        opcode, _ = opcode_at(toks, k)
        row = collective_of(opcode)
        if row is not None and hit is None:
            if exempt is None:   # the opportunistic pattern: correct at any divergence
                exempt = activemask.proven(mod, fn)
            if st.start not in exempt:
                hit = (" ".join(st.text(mod.text).split()), row)
        target = None
        if opcode.split(".", 1)[0] == "call":
            target = parse_instruction(st, mod.text).call_target
        if target is not None and target.startswith("%"):
            through_register = True
        elif target is not None:
            callees[aliases.get(target, target)] = None
        _note_taken([t for t in st.tokens if t.text != target], names, taken)
    return hit, tuple(callees), through_register


def _note_taken(tokens, names, taken: dict) -> None:
    for t in tokens:
        if t.kind == "ident" and t.text in names:
            taken[t.text] = None


# ---------------------------------------------------------------------------------------------
# The walk


@dataclasses.dataclass(frozen=True)
class Hit:
    """A collective instruction reachable from a root function.

    Attributes:
        instruction: its PTX text, whitespace normalised (``"bar.sync 0;"``).
        collective: its row of :data:`COLLECTIVES`.
        function: the function it sits in.
        chain: the functions from the root to ``function`` (both included); an indirect call
            shows as ``"(indirect call)"`` before the function it may reach.
        module: the name of the PTX module defining ``function``.
    """

    instruction: str
    collective: Collective
    function: str
    chain: tuple[str, ...]
    module: str


def find_collective(root_module: Module, root: str,
                    others: Sequence[Module] = ()) -> Hit | None:
    """The first collective instruction that ``root`` (defined in ``root_module``) executes
    itself or through any function it calls, directly or through callees of callees, found
    breadth first (so the shortest chain). A function a module only declares is looked up
    among the definitions that ``others`` export (the pipeline merges every fragment of a
    kernel into one module); a call through a register may reach any function whose
    address any module takes.

    Returns None when there is none, or when ``root`` is not defined in ``root_module``.
    """
    mods = [root_module, *[m for m in others if m is not root_module]]
    facts = [_facts(m) for m in mods]
    for (mi, name), chain in _reach(facts, root).reached:
        first = facts[mi].first[name]
        if first is not None:
            text, row = first
            return Hit(text, row, name, chain, mods[mi].name)
    return None


@dataclasses.dataclass(frozen=True)
class Reach:
    """What a root function reaches: ``reached``, the PTX definitions (module index, name)
    with their chains from the root, breadth first; ``undefined``, the functions it calls
    that no module defines (code linked from a binary object, or a system call such as
    ``vprintf``) with their chains; ``indirect``, a chain to a call through a register, or
    None; ``modules``, the modules the indices of ``reached`` count (:func:`outside_ptx`:
    the root's first)."""

    reached: tuple[tuple[tuple[int, str], tuple[str, ...]], ...]
    undefined: dict[str, tuple[str, ...]]
    indirect: tuple[str, ...] | None
    modules: tuple[Module, ...] = ()

    def functions(self):
        """(module, function name, chain from the root) of each of ``reached``."""
        for (mi, name), chain in self.reached:
            yield self.modules[mi], name, chain


def outside_ptx(root_module: Module, root: str,
                others: Sequence[Module] = ()) -> Reach:
    """:class:`Reach` of ``root`` (as :func:`find_collective` walks it): what of its callees
    the PTX walk cannot see."""
    mods = (root_module, *[m for m in others if m is not root_module])
    return dataclasses.replace(_reach([_facts(m) for m in mods], root), modules=mods)


def _reach(facts: Sequence[_Facts], root: str) -> Reach:
    if root not in facts[0].first:
        return Reach((), {}, None)
    start = (0, root)
    seen = {start}
    order = []
    undefined: dict[str, tuple[str, ...]] = {}
    indirect = None
    queue: list[tuple[tuple[int, str], tuple[str, ...]]] = [(start, (root,))]
    while queue:
        (mi, name), chain = queue.pop(0)
        order.append(((mi, name), chain))
        f = facts[mi]
        nexts: list[tuple[tuple[int, str], tuple[str, ...]]] = []
        for callee in f.calls[name]:
            found = _resolve(facts, mi, callee)
            if not found:
                undefined.setdefault(callee, chain + (callee,))
            nexts += [(node, chain + (node[1],)) for node in found]
        if name in f.indirect:
            indirect = indirect or chain
            nexts += [((i, n), chain + ("(indirect call)", n)) for i, g in enumerate(facts)
                      for n in g.address_taken if n in g.first]
        for node, c in nexts:
            if node not in seen:
                seen.add(node)
                queue.append((node, c))
    return Reach(tuple(order), undefined, indirect)


def _resolve(facts: Sequence[_Facts], mi: int, name: str) -> Iterable[tuple[int, str]]:
    """Definitions a call of ``name`` from module ``mi`` may reach: its own module's, else
    every other module's exported one (weak duplicates: all of them, also when the module
    has its own weak one: the merged module keeps the first fragment's)."""
    own = [(mi, name)] if name in facts[mi].first else []
    if own and name not in facts[mi].weak:
        return own
    return own + [(i, name) for i, f in enumerate(facts) if i != mi and name in f.exported]


# ---------------------------------------------------------------------------------------------
# Binary objects: their SASS, in the linked cubin


#: SASS opcodes (first ``.`` part, sm_80..sm_100) that the rows of :data:`COLLECTIVES` become
#: in a device function, measured with ptxas -c and nvdisasm 13.4 on sm_90a: every warp
#: collective in a function ptxas cannot prove convergent gets a WARPSYNC.ALL or
#: WARPSYNC.COLLECTIVE (bar.warp.sync, shfl/vote/match/redux/elect.sync, mma, ldmatrix,
#: movmatrix, wgmma, tensormap.cp_fenceproxy all did); activemask is a bare VOTE.ANY;
#: griddepcontrol.launch_dependents is PREEXIT. Left out on purpose: VOTEU, REDUX and MATCH,
#: which ptxas also emits for its own warp-aggregated atomics (atomicAdd/atomicMax in a
#: kernel became VOTEU.ANY + UFLO + POPC and REDUX.SUM/REDUX.MAX), correct at any
#: convergence; the user-written forms are still caught by their WARPSYNC.
SASS_COLLECTIVES: dict[str, str] = {
    "BAR": "bar/barrier (9.7.15.1)",
    "WARPSYNC": "bar.warp.sync or a warp-synchronous .sync instruction (9.7.15.2)",
    "UCGABAR_ARV": "barrier.cluster.arrive (9.7.15.3)",
    "UCGABAR_WAIT": "barrier.cluster.wait (9.7.15.3)",
    "SHFL": "shfl.sync (9.7.10.6)",
    "VOTE": "vote.sync or activemask (9.7.15.10, 9.7.15.12)",
    "ELECT": "elect.sync (9.7.15.15)",
    "PREEXIT": "griddepcontrol.launch_dependents (9.7.15.14)",
    "HMMA": "mma (9.7.16.5)", "IMMA": "mma (9.7.16.5)", "DMMA": "mma (9.7.16.5)",
    "BMMA": "mma (9.7.16.5)", "LDSM": "ldmatrix (9.7.16.5)", "STSM": "stmatrix (9.7.16.5)",
    "MOVM": "movmatrix (9.7.16.5)",
    "HGMMA": "wgmma (9.7.17)", "IGMMA": "wgmma (9.7.17)", "QGMMA": "wgmma (9.7.17)",
    "BGMMA": "wgmma (9.7.17)", "WARPGROUP": "wgmma.fence/commit/wait (9.7.17)",
    "USETMAXREG": "setmaxnreg (9.7.21.5)",
    "LDTM": "tcgen05.ld (9.7.18)", "STTM": "tcgen05.st (9.7.18)",
}
#: Prefixes of SASS opcode families: UTC* is tcgen05's (UTCHMMA, UTCBAR, ...).
SASS_PREFIXES: dict[str, str] = {"UTC": "tcgen05 (9.7.18)"}

_SASS_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)", re.M)
_SASS_INSTR = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)([^;]*;)",
                         re.M)
_SASS_CALL = re.compile(r"`\(([^)]+)\)")


def sass_collective_of(opcode: str) -> str | None:
    """What PTX instruction a SASS opcode (``"BAR.SYNC.DEFER_BLOCKING"``) comes from, when
    it is in :data:`SASS_COLLECTIVES`; else None."""
    base = opcode.split(".", 1)[0]
    if base in SASS_COLLECTIVES:
        return SASS_COLLECTIVES[base]
    return next((v for p, v in SASS_PREFIXES.items() if base.startswith(p)), None)


def sass_functions(sass: str) -> dict[str, list[tuple[str, str]]]:
    """Function name -> its instructions (opcode, rest) in nvdisasm's listing, one
    ``.text.<name>`` section per function."""
    bodies: dict[str, list[tuple[str, str]]] = {}
    sections = list(_SASS_SECTION.finditer(sass))
    for i, m in enumerate(sections):
        end = sections[i + 1].start() if i + 1 < len(sections) else len(sass)
        bodies[m.group(1)] = _SASS_INSTR.findall(sass, m.end(), end)
    return bodies


def find_sass_collective(sass: str, root: str) -> tuple[str, str, tuple[str, ...]] | None:
    """The first collective SASS instruction ``root`` (a ``.text.<root>`` section of
    nvdisasm's listing) executes itself or through the functions it calls: (instruction,
    what it comes from, chain of functions). A call through a register may reach any
    function of the listing."""
    bodies = sass_functions(sass)
    if root not in bodies:
        return None
    seen = {root}
    queue: list[tuple[str, tuple[str, ...]]] = [(root, (root,))]
    while queue:
        name, chain = queue.pop(0)
        callees: list[str] = []
        for base, rest in bodies[name]:
            what = sass_collective_of(base)
            if what is not None:
                return f"{base}{rest}".replace(" ;", ";"), what, chain
            if base == "CALL":
                m = _SASS_CALL.search(rest)
                callees += [m.group(1)] if m else [n for n in bodies if n != name]
        for c in callees:
            if c in bodies and c not in seen:
                seen.add(c)
                queue.append((c, chain + (c,)))
    return None


# ---------------------------------------------------------------------------------------------
# The pipeline's check


def chain_names(ext, chain: Sequence[str]) -> list[str]:
    """The functions of ``chain`` (a call chain from ``ext``'s symbol) as the user wrote
    them: splice's generated functions by the user's (:meth:`Fragment.function_name`, once
    for a run of them), C++ names demangled."""
    names: list[str] = []
    for symbol in chain:
        name = ext.fragment.function_name(symbol)
        if not names or names[-1] != name:
            names.append(name)
    return demangled(names)


def reach_text(names: Sequence[str]) -> str:
    """Where a refused instruction sits, for a message: "in its own body", or "in 'g',
    reached through f -> g" (``names``: the readable call chain from the extern to the
    function holding it, both included: :func:`chain_names`)."""
    if len(names) == 1:
        return "in its own body"
    return f"in '{names[-1]}', reached through {' -> '.join(names)}"


def demangled(names: Sequence[str]) -> list[str]:
    """C++ names readable (the system's ``c++filt`` when installed, never one found in
    PATH: :func:`splice.system.safe_fs.system_program`; error messages only)."""
    tool = safe_fs.system_program("c++filt")
    if tool is None or not any(n.startswith("_Z") for n in names):
        return list(names)
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True,
                             timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return list(names)
    return out if len(out) == len(names) else list(names)
