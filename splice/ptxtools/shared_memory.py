"""The kernel's static shared memory, by owner: splice's tile staging buffers, tileiras's
own declarations and each fragment's ``__shared__`` (read from the merged PTX and its
spans), for the refusal before ptxas (:func:`splice.forms.staging.check_shared_memory`) and
the explanation of ptxas's "uses too much shared data" (:mod:`splice.driver.diagnose`)."""

from __future__ import annotations

import re
from typing import Callable

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
