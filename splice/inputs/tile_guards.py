"""``SPLICE_CHECK_TILES=1``: guard words around every staging buffer of a tile call, checked
after the call (:class:`splice.inputs.tile_fragment.TileFragment` adds this code to its call
function).

A cooperative callee that writes past its tile (``y[N] = -1.0f``) writes shared memory
splice or tileiras uses for something else, and nothing notices (compute-sanitizer does not
see an access that stays inside the block's shared memory). With the setting on, each
buffer is declared :data:`GUARD_BYTES` longer at both ends, and the call function

1. has the group's first thread (rank 0) fill both guards of every buffer with its
   *canary* (:func:`canary`: a word of the buffer's index and side and of a value read
   from ``%globaltimer_lo`` at this call, so that no two guards of a call hold the same
   word, and the words change from launch to launch), then meets the group (``bar.sync 0``
   at block scope, the group's ``barrier.sync 15, 128`` at warpgroup scope), so the guards
   are set before any thread runs the callee;
2. after the callee, meets the group again (every thread's callee is done), and rank 0
   reads every guard byte back: a byte that is not its canary's was written by the call
   (also where the call copied another buffer's guard over it: a callee that copies past
   the end of its input into its result), and rank 0 calls ``__assertfail`` with a
   message naming the extern, its call site, the tile (argument k, or the result) and the
   side (before its start, past its end).

On a GPU the launch then fails (``CUDA_ERROR_ASSERT``: cuTile raises it) and the message is
printed on the process's stderr as ``... Assertion `splice SPLICE_CHECK_TILES: ...` failed``;
the CPU executor (``tests/support/ptx_exec``) raises its ``ExecError`` with the same message.
It is a check mode: the barriers and the checks cost time, and a warpgroup call whose
registers tileiras cut (``setmaxnreg``: the epilogue of a warp-specialised ``ct.mma``
kernel) cannot call ``__assertfail`` and is refused there (step "registers" of
:mod:`splice.forms.warpgroup_proof`). The static check
(:func:`splice.analysis.memory_proof.check_tile_bounds`)
refuses a constant offset outside a tile in either mode.
"""

from __future__ import annotations

#: Bytes of guard before and after each staging buffer (a multiple of its 16-byte
#: alignment, so the buffer keeps it).
GUARD_BYTES = 16
#: An odd 32-bit constant (the golden ratio's): :func:`canary` multiplies by it.
_MIX = 0x9E3779B9
#: The group barrier of each scope (:data:`splice.forms.warpgroup_proof.GROUP_BARRIER`).
_BARRIER = {"block": "bar.sync \t0;", "warpgroup": "barrier.sync \t15, 128;"}
_REG = "%splice_guard_"


def enabled() -> bool:
    """Whether ``$SPLICE_CHECK_TILES`` asks for the guards (:mod:`splice.system.settings`).

    Returns:
        bool: True when the variable is set to anything but "", "0", "false", "no".

    Example:
        >>> isinstance(enabled(), bool)
        True
    """
    from ..system import settings
    return settings.check_tiles()


def canary(k: int, side: str) -> int:
    """The word that, xor the call's seed (``%globaltimer_lo``, read when the guards are
    set), fills the guard of buffer ``k`` on ``side``; byte ``i`` of the guard is byte
    ``i % 4`` of the word. Distinct for every buffer and side: a multiple of :data:`_MIX`
    (odd, so a bijection of 32-bit words) by ``2k + 1`` or ``2k + 2``.

    Example:
        >>> canary(0, "before") != canary(0, "after") != canary(1, "before")
        True
    """
    return (_MIX * (2 * k + (1 if side == "before" else 2))) & 0xFFFFFFFF


def message_symbol(group: int, k: int, side: str) -> str:
    return f"__splice_tile_{group}_guard_{k}_{side}"


def declarations(frag, base_text: str) -> list[str]:
    """The message strings (one per buffer and side) and ``__assertfail``'s declaration
    (unless the callee's PTX declares it)."""
    # imported here: the analysis (and the PTX parser it loads) is a miss's, never a hit's
    from ..analysis.memory_proof import tile_names
    out = []
    if "__assertfail" not in base_text:
        out.append(".extern .func __assertfail(.param .b64 message, .param .b64 file, "
                   ".param .b32 line, .param .b64 function, .param .b64 charSize);")
    for k, which in enumerate(tile_names(frag)):
        for side, words in (("before", "before the start of"), ("after", "past the end of")):
            text = (f"splice SPLICE_CHECK_TILES: the call of {frag.instance} wrote "
                    f"{words} {which}").encode() + b"\0"
            out.append(f".global .align 1 .b8 {message_symbol(frag.group, k, side)}"
                       f"[{len(text)}] = {{{', '.join(str(b) for b in text)}}};")
    return out


#: ``%splice_guard_p`` = whether this thread is the group's rank 0, by scope (at warpgroup
#: scope read as ``splice_group.h`` reads the rank, which the callee check accepts).
_RANK = {
    "block": [f"\tmov.u32 \t{_REG}r, %tid.x;", f"\tsetp.eq.u32 \t{_REG}p, {_REG}r, 0;"],
    "warpgroup": ["\t.reg .u32 \t%splice_group_tid;", "\tmov.u32 \t%splice_group_tid, %tid.x;",
                  f"\tand.b32 \t{_REG}r, %splice_group_tid, 127;",
                  f"\tsetp.eq.u32 \t{_REG}p, {_REG}r, 0;"],
}


def _guard_offsets(frag, k: int) -> list[tuple[str, int]]:
    """(side, byte offset from the buffer's symbol) of each guard byte of buffer ``k``."""
    end = GUARD_BYTES + frag.buffer_bytes(k)
    return [("before", i) for i in range(GUARD_BYTES)] + \
        [("after", end + i) for i in range(GUARD_BYTES)]


def _byte(side_off: int) -> int:
    """Which byte of its canary word a guard byte holds (its offset in the guard, mod 4)."""
    return (side_off % GUARD_BYTES) % 4


def prologue(frag) -> list[str]:
    """The call's seed read (into a register of the call function, which the epilogue
    reads again); rank 0 fills each guard with its canary; then the group (of
    ``frag.scope``) meets."""
    scope = frag.scope
    lines = [f"\t.reg .b32 \t{_REG}seed;",
             "\t{ // splice: SPLICE_CHECK_TILES, the guards set",
             f"\t.reg .b32 \t{_REG}r, {_REG}c, {_REG}v;", f"\t.reg .pred \t{_REG}p;",
             *_RANK[scope], f"\tmov.u32 \t{_REG}seed, %globaltimer_lo;"]
    for k in range(len(frag.buffers)):
        for side in ("before", "after"):
            lines.append(f"\txor.b32 \t{_REG}c, {_REG}seed, {canary(k, side)};")
            for s, off in _guard_offsets(frag, k):
                if s == side:
                    lines += [f"\tshr.b32 \t{_REG}v, {_REG}c, {8 * _byte(off)};",
                              f"\t@{_REG}p st.shared.b8 \t[{frag.buffer(k)}+{off}], {_REG}v;"]
    return lines + [f"\t{_BARRIER[scope]}", "\t}"]


def epilogue(frag) -> list[str]:
    """The group (of ``frag.scope``) meets; rank 0 reads every guard byte and asserts on
    the first side of a buffer whose bytes are not its canary's."""
    scope = frag.scope
    lines = ["\t{ // splice: SPLICE_CHECK_TILES, the guards checked",
             f"\t.reg .b32 \t{_REG}r, {_REG}x, {_REG}b, {_REG}c, {_REG}e;",
             f"\t.reg .pred \t{_REG}p, {_REG}q;", f"\t.reg .b64 \t{_REG}m;",
             f"\t{_BARRIER[scope]}", *_RANK[scope]]
    for k in range(len(frag.buffers)):
        for side in ("before", "after"):
            lines += [f"\tmov.u32 \t{_REG}x, 0;",
                      f"\txor.b32 \t{_REG}c, {_REG}seed, {canary(k, side)};"]
            for s, off in _guard_offsets(frag, k):
                if s == side:
                    lines += [f"\tld.shared.u8 \t{_REG}b, [{frag.buffer(k)}+{off}];",
                              f"\tbfe.u32 \t{_REG}e, {_REG}c, {8 * _byte(off)}, 8;",
                              f"\txor.b32 \t{_REG}b, {_REG}b, {_REG}e;",
                              f"\tor.b32 \t{_REG}x, {_REG}x, {_REG}b;"]
            lines += [f"\tsetp.ne.and.u32 \t{_REG}q, {_REG}x, 0, {_REG}p;",
                      *_assert(f"{_REG}q", message_symbol(frag.group, k, side))]
    return lines + ["\t}"]


def _assert(pred: str, symbol: str) -> list[str]:
    """``__assertfail(message, message, 0, message, 1)`` under ``pred``."""
    return ["\t{", f"\tmov.u64 \t{_REG}m, {symbol};",
            f"\tcvta.global.u64 \t{_REG}m, {_REG}m;",
            "\t.param .b64 \tg0;", "\t.param .b64 \tg1;", "\t.param .b32 \tg2;",
            "\t.param .b64 \tg3;", "\t.param .b64 \tg4;",
            f"\tst.param.b64 \t[g0], {_REG}m;", f"\tst.param.b64 \t[g1], {_REG}m;",
            "\tst.param.b32 \t[g2], 0;", f"\tst.param.b64 \t[g3], {_REG}m;",
            "\tst.param.b64 \t[g4], 1;",
            f"\t@{pred} call.uni \t__assertfail, (g0, g1, g2, g3, g4);", "\t}"]
