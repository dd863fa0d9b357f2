"""The kernel's static shared memory, by owner: splice's tile staging buffers, tileiras's
own declarations and each fragment's ``__shared__`` (read from the merged PTX and its
spans), for the refusal before ptxas (:func:`check_block_limit`) and the explanation of
ptxas's "uses too much shared data" (:mod:`splice.driver.diagnose`)."""

from __future__ import annotations

import re
from typing import Callable

from ..errors import SpliceLinkError

#: The most shared memory one block may have, by PTX target without its ``a``/``f``
#: suffix (sm_90 and sm_100: 227 KB, the opt-in maximum, which static declarations may
#: use there: tileiras's TMA matmul declares 196,760 B). :func:`check_block_limit` checks
#: against it; other targets are left to ptxas (its report names the owners too).
BLOCK_SHARED_LIMIT = {"sm_90": 232_448, "sm_100": 232_448}

#: The tile calls' staging buffers (:mod:`splice.forms.staging`): their names hold this, and
#: shared-memory reports name them so.
TILE_BUFFER_MARK = "__splice_tile_"


TILE_BUFFER_OWNER = "splice's tile staging buffers"


#: The owner of the kernel's own declarations in those reports.
KERNEL_OWNER = "the kernel's own PTX (tileiras output)"


_SMEM_RE = re.compile(r"uses too much shared data \((0x[0-9a-fA-F]+) bytes, (0x[0-9a-fA-F]+) "
                      r"max\)")


_SHARED_DECL_RE = re.compile(r"^\s*(?:\.(?:weak|visible)\s+)?\.shared\b[^;]*?\.[bfsu](\d+)\s+"
                             r"([\w$]+)(?:\[(\d+)\])?\s*;")


def shared_memory_report(merged: str, log: str, owner_of_line: Callable[[int], str],
                         what: str) -> str | None:
    """For ptxas's "uses too much shared data": a message saying how much the block needs,
    the limit, and which code declares how much (tileiras's own buffers, each fragment's
    ``__shared__`` variables, splice's argument scratch: ``owner_of_line(n)`` names the
    code that wrote line ``n``, 1-based, of ``merged``); None for other failures."""
    m = _SMEM_RE.search(log)
    if m is None:
        return None
    return shared_memory_message(what, int(m.group(1), 16), int(m.group(2), 16),
                                 shared_owners(merged, owner_of_line))


def shared_owners(merged: str, owner_of_line: Callable[[int], str]) -> dict[str, int]:
    """Static shared memory by declaring code in the PTX ``merged``: owner -> bytes
    (splice's tile buffers as :data:`TILE_BUFFER_OWNER`, the rest by ``owner_of_line``)."""
    owners: dict[str, int] = {}
    for i, line in enumerate(merged.split("\n")):
        d = _SHARED_DECL_RE.match(line)
        if d:
            size = int(d.group(1)) // 8 * int(d.group(3) or 1)
            owner = TILE_BUFFER_OWNER if TILE_BUFFER_MARK in d.group(2) else \
                owner_of_line(i + 1)
            owners[owner] = owners.get(owner, 0) + size
    return owners


def shared_memory_message(what: str, used: int, limit: int, owners: dict[str, int]) -> str:
    """The message of a block needing ``used`` bytes of shared memory, over ``limit``."""
    parts = "; ".join(f"{o}: {n} bytes" for o, n in sorted(owners.items(), key=lambda x: -x[1]))
    return (f"{what} needs {used} bytes of shared memory per block, more than the {limit} "
            f"the GPU allows (static shared memory by declaration: {parts}). Use less "
            f"__shared__ memory in the extern(s), or smaller tiles in the kernel")


def check_block_limit(merged: str, owner_of_line: Callable[[int], str], target: str,
                      what: str) -> None:
    """Refuse, before ptxas runs, a kernel with tile calls whose static shared memory
    cannot fit in one block on ``target`` (:data:`BLOCK_SHARED_LIMIT`): ``merged`` is the
    merged PTX, ``owner_of_line`` the owner of each of its lines (a line number -> a name:
    :func:`splice.driver.diagnose.owner_of_line` over the spans of
    :class:`splice.ptxtools.link.Merged`). The refusal counts what the kernel surely uses --
    splice's staging buffers (:mod:`splice.forms.staging`) and tileiras's own declarations
    -- and names every owner's bytes, the callees' ``__shared__`` too (a total those push
    over the limit is ptxas's report, which names them alike).

    Raises:
        SpliceLinkError: naming ``what``, the bytes of each owner and the limit.
    """
    if TILE_BUFFER_MARK not in merged:
        return
    limit = BLOCK_SHARED_LIMIT.get(target.rstrip("af"))
    if limit is None:
        return
    owners = shared_owners(merged, owner_of_line)
    sure = owners.get(TILE_BUFFER_OWNER, 0) + owners.get(KERNEL_OWNER, 0)
    if sure > limit:
        raise SpliceLinkError(shared_memory_message(what, sum(owners.values()), limit, owners)
                              + f" (tileiras's and the staging's alone: {sure} bytes)")
