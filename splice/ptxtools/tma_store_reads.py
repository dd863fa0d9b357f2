"""Impure calls that read, through a pointer argument, an array the kernel stores by TMA:
refused.

The hazard, a silent stale read. On sm_90 and later tileiras turns a ``ct.store`` that
allows TMA (cuTile's default, ``allow_tma=True``) into a bulk store,
``cp.async.bulk.tensor.Nd.global.shared::cta...``, issued by one thread, which then waits
only with ``cp.async.bulk.wait_group.read 0``: the bulk operation's *reads of shared
memory* are complete, not its writes to global memory. Those writes are performed by the
async proxy (PTX ISA, "Memory Consistency Model", "Proxies"), and only
``cp.async.bulk.wait_group`` without ``.read`` waits for them to complete (PTX ISA, "Data
Movement and Conversion Instructions", "Completion mechanisms for asynchronous copy
operations", bulk async-group), in the issuing thread only. cuTile's
memory token orders a later impure call after the store in program order, but nothing in
the PTX orders the bulk writes before the call's loads: a call that reads the stored
array through a pointer can read the values from before the store.

The rule, narrow and conservative where it is cheap. An impure call (any scope, any
``memory=``) is refused when one of its array arguments may alias (cuTile's alias sets:
the same array, or one of unknown aliasing) an array the kernel stores with a ``ct.store``
that allows TMA -- anywhere in the kernel, before or after the call (in a loop "after"
is "before" the next iteration) -- and the kernel's PTX issues a bulk store to global
memory (:data:`BULK_GLOBAL_STORE`). Not refused: kernels without a bulk global store
(sm_80, or every store ``allow_tma=False``), and calls given arrays the kernel only loads.

The trace finds the candidates
(:meth:`splice.tracing.tile_ir.SpliceMarkerPointer.splice_tma_stored_reads`, through the dataflow
hook of :mod:`splice.system._cutile`); :func:`check` decides on the PTX.
"""

from __future__ import annotations

import dataclasses
import re

from ..errors import SpliceCallError

__all__ = ["BULK_GLOBAL_STORE", "StoredArrayRead", "check"]

#: A bulk (async proxy) write to global memory from shared memory: a TMA tensor store, a
#: non-tensor bulk copy, a bulk reduction (``cp.reduce.async.bulk``, tensor or not).
BULK_GLOBAL_STORE = re.compile(
    r"^\s*(?:@!?%\w+\s+)?cp\.(?:reduce\.)?async\.bulk(?:\.tensor\.\dd)?\.global\.shared",
    re.M)


@dataclasses.dataclass(frozen=True)
class StoredArrayRead:
    """An impure call given an array the kernel may store by TMA.

    Attributes:
        call: the call, for messages ("call of extern 'f' (declared at m.py:3) in kernel
            'k' at k.py:12").
        argument: which argument ("argument 1 (C)").
        stores: "file:line" of each ``ct.store`` allowing TMA to an array that may alias it.
    """

    call: str
    argument: str
    stores: tuple[str, ...]


def check(reads, ptx: str) -> None:
    """Refuse the first of ``reads`` (:class:`StoredArrayRead`) when the kernel's PTX
    ``ptx`` issues a bulk store to global memory.

    Raises:
        SpliceCallError: naming the call, the argument, the stores and the fixes."""
    if not reads or BULK_GLOBAL_STORE.search(ptx) is None:
        return
    read = reads[0]
    lines = ", ".join(read.stores)
    raise SpliceCallError(
        f"{read.call}: {read.argument} is an array the kernel stores with ct.store at "
        f"{lines}, which allows TMA, and the kernel's PTX issues TMA bulk stores "
        f"(cp.async.bulk...global.shared): their writes to global memory are not ordered "
        f"before the call's reads (tileiras waits only for a bulk store's reads of shared "
        f"memory, cp.async.bulk.wait_group.read), so the call could read the values from "
        f"before the store. Give that store allow_tma=False (ct.store(..., "
        f"allow_tma=False)), or better, pass the stored tile itself to the extern (a tile "
        f"argument) instead of reading it back from memory")
