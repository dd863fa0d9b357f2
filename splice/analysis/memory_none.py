"""``memory="none"`` (``splice.asm``): the instructions a snippet that claims to touch no
global memory may execute, an allowlist checked per instruction
(:func:`check_no_global_memory`). The proof of ``memory="arguments"`` over a callee's
whole PTX, which builds on these tables: :mod:`splice.analysis.memory_proof`."""

from __future__ import annotations

from ..ptxtools.ptx import Instruction


class MemoryFault(Exception):
    """Why an instruction breaks a ``memory=`` declaration (the caller names the call)."""


#: Instructions (opcode bases) that touch no memory (PTX ISA 8.x, chapter 9.7): integer,
#: floating-point, half, comparison, logic, video and conversion instructions, register
#: moves and address arithmetic (``cvta``, ``mapa``, ``isspacep``), warp and block
#: collectives on registers, branches, matrix instructions on registers and shared-memory
#: descriptors (``mma``, ``movmatrix``, ``wgmma``), ``alloca``/``stacksave``/
#: ``stackrestore`` (the thread's stack, local memory), and
#: ``trap``/``brkpt``/``nanosleep``/``pmevent``/``createpolicy``/``setmaxnreg``.
NO_MEMORY = frozenset("""
    add sub mul mad mul24 mad24 sad div rem abs neg min max popc clz bfind fns brev bfe bfi
    szext bmsk dp4a dp2a addc subc madc testp copysign fma rcp sqrt rsqrt sin cos lg2 ex2
    tanh set setp selp slct and or xor not cnot lop3 shf shl shr mov prmt cvt cvta isspacep
    mapa getctarank shfl vote match activemask redux elect bar barrier nanosleep bra brx
    mma movmatrix wgmma alloca stacksave stackrestore trap brkpt pmevent createpolicy
    setmaxnreg vadd vsub vabsdiff vmin vmax vshl vshr vmad vset vadd2 vsub2 vavrg2
    vabsdiff2 vmin2 vmax2 vset2 vadd4 vsub4 vavrg4 vabsdiff4 vmin4 vmax4 vset4""".split())


#: Instructions that access memory at an address in the state space their opcode names (a
#: generic address where it names none). ``wmma.mma`` and ``mbarrier.pending_count`` work
#: on registers only (:func:`check_no_global_memory`).
SPACED = frozenset({"ld", "ldu", "st", "atom", "red", "prefetch", "prefetchu", "mbarrier",
                    "ldmatrix", "stmatrix", "wmma"})


#: The state spaces a snippet of ``memory="none"`` may access: the block's shared memory,
#: the thread's local memory, parameters.
PRIVATE_SPACES = frozenset({"shared", "shared::cta", "local", "param", "param::func",
                            "param::entry"})


#: The state spaces PTX names in an opcode (those that are not private included).
SPACES = PRIVATE_SPACES | {"global", "const", "shared::cluster", "tex", "tensormap"}


#: Why the families splice knows touch (or may touch) global memory, by opcode base.
WHY_NOT = {
    "cp": "copies between memories asynchronously (cp.async, cp.async.bulk[.tensor], TMA, "
          "cp.reduce.async.bulk): its global operands are not ordered",
    "call": "calls a function splice does not read",
    "multimem": "accesses multicast (global) memory",
    "fence": "orders the kernel's memory operations, which memory='none' leaves unordered",
    "membar": "orders the kernel's memory operations, which memory='none' leaves unordered",
    "griddepcontrol": "orders the kernel's memory operations against another grid's",
    "tensormap": "reads or writes a tensor map (TMA descriptor) in memory",
    "discard": "discards global memory from the cache",
    "applypriority": "changes the cache priority of global memory",
    "tcgen05": "accesses tensor memory",
}


for _tex in ("tex", "tld4", "txq", "suld", "sust", "sured", "suq", "istypep"):
    WHY_NOT[_tex] = "accesses texture or surface memory (global memory)"


def _guard_text(ins: Instruction) -> str:
    return f"@{ins.guard} " if ins.guard else ""


def check_no_global_memory(ins: Instruction) -> None:
    """Refuse ``ins`` in code declared ``memory="none"`` unless it touches no memory or
    only memory of :data:`PRIVATE_SPACES`.

    Args:
        ins: one instruction of the snippet.

    Raises:
        MemoryFault: why ``ins`` may touch global memory, and the fix.

    Example:
        >>> from splice.ptx import Instruction
        >>> check_no_global_memory(Instruction(None, "ld.shared.f32", ("%f1", "[%r1]")))
    """
    base, mods = ins.base, ins.modifiers
    if base in NO_MEMORY or (base, mods[:1]) in (("wmma", ("mma",)),
                                                 ("mbarrier", ("pending_count",))):
        return
    if base in SPACED:
        spaces = [m for m in mods if m in SPACES]
        if spaces and all(m in PRIVATE_SPACES for m in spaces):
            return
        why = (f"accesses .{spaces[0]} memory" if spaces else
               "accesses memory through a generic address (its opcode names no state "
               "space), which may be global memory")
    else:
        why = WHY_NOT.get(base, "is not an instruction splice knows to touch no global "
                                "memory")
    raise MemoryFault(
        f"'{_guard_text(ins)}{ins.opcode}' {why}, but the snippet is declared "
        f"memory='none' (it touches no global memory, and is not ordered against the "
        f"kernel's loads and stores); declare memory='any' (the default), or access only "
        f".shared, .shared::cta, .local or .param memory, naming the state space")
