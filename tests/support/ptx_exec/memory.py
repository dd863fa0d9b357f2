"""Memory of the executor: global (NumPy arrays and module variables in one address
space), a CTA's shared memory, each thread's local memory, and the generic address space
that maps windows onto them.

Every access is bounds-checked against the allocation it falls in: an address outside every
allocation is an :class:`ExecError` (on the GPU an illegal address or a silent corruption).
Shared and global memory remember, for each byte a thread of the running CTA wrote, which
thread wrote it and how far that thread's synchronisation had got: a read or write by
another thread of the CTA that no barrier (or warp synchronisation, within a warp) has
ordered after it is a race, an :class:`ExecError` (:class:`Shadow`). CTAs run one after
another; races between CTAs are not seen.
"""

from __future__ import annotations

import bisect


class ExecError(Exception):
    """The executed kernel did something the GPU would not do reliably (an unknown or
    unsupported instruction, an illegal address, a race, a deadlock, ``trap``)."""


GLOBAL_BASE = 0x7f00_0000_0000
SHARED_WINDOW = 0x7e00_0000_0000     # generic address of shared-space address 0
LOCAL_WINDOW = 0x7d00_0000_0000      # generic address of local-space address 0
WINDOW_SIZE = 1 << 40


class GlobalMemory:
    """Allocations in one flat address space, each a ``bytearray``, 256-byte aligned."""

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.bufs: list[bytearray] = []
        self.names: list[str] = []
        self._next = GLOBAL_BASE

    def alloc(self, data: bytes | int, name: str, align: int = 256) -> int:
        size = data if isinstance(data, int) else len(data)
        base = (self._next + align - 1) // align * align
        buf = bytearray(data if not isinstance(data, int) else size)
        self.starts.append(base)
        self.ends.append(base + size)
        self.bufs.append(buf)
        self.names.append(name)
        self._next = base + max(size, 1) + 256    # a gap: an overrun is not a neighbour
        return base

    def buffer(self, base: int) -> bytearray:
        return self.bufs[self.starts.index(base)]

    def locate(self, addr: int, n: int) -> tuple[bytearray, int]:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or addr + n > self.ends[i]:
            raise ExecError(f"illegal global address {addr:#x} ({n} bytes): "
                            f"{self._describe(addr)}")
        return self.bufs[i], addr - self.starts[i]

    def _describe(self, addr: int) -> str:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0:
            return "below every allocation"
        off = addr - self.starts[i]
        return f"{off} bytes from the start of {self.names[i]} " \
               f"({self.ends[i] - self.starts[i]} bytes)"

    def read(self, addr: int, n: int, t=None, atomic: bool = False) -> int:
        """``n`` bytes at ``addr``; with the reading thread ``t``, checked for a race with
        the writes of the other threads of its CTA."""
        buf, off = self.locate(addr, n)
        if t is not None:
            t.cta.gshadow.read(addr, n, t, atomic)
        return int.from_bytes(buf[off:off + n], "little")

    def write(self, addr: int, n: int, value: int, t=None, atomic: bool = False) -> None:
        buf, off = self.locate(addr, n)
        new = (value & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
        if t is not None:
            t.cta.gshadow.write(addr, n, t, buf[off:off + n], new, atomic)
        buf[off:off + n] = new


class Shadow:
    """Which thread of the CTA last wrote, and last read, each byte, and how far its
    synchronisation had got then (its CTA-barrier and warp-synchronisation counts): a read of
    a byte another thread wrote, or a write of a byte another thread wrote or read, with no
    barrier between them, is a race. Writing the value the byte already holds is not
    (replicated tile elements store the same value twice); atomics race only with plain
    accesses."""

    def __init__(self, space: str):
        self.space = space
        self.writer: dict[int, tuple[int, int, int, bool]] = {}
        self.reader: dict[int, tuple[int, int, int, bool]] = {}

    def read(self, addr: int, n: int, t, atomic: bool = False) -> None:
        w = self.writer
        me = t.linear
        mark = (me, t.cta_epoch, t.warp_epoch, atomic)
        for a in range(addr, addr + n):
            m = w.get(a)
            if m is not None and m[0] != me and not (atomic and m[3]):
                self._check(a, m, t, "reads", "wrote")
            self.reader[a] = mark

    def write(self, addr: int, n: int, t, old: bytes, new: bytes, atomic: bool) -> None:
        w = self.writer
        me = t.linear
        mark = (me, t.cta_epoch, t.warp_epoch, atomic)
        for i, a in enumerate(range(addr, addr + n)):
            if old[i] != new[i]:
                m = w.get(a)
                if m is not None and m[0] != me and not (atomic and m[3]):
                    self._check(a, m, t, "writes", "wrote")
                m = self.reader.get(a)
                if m is not None and m[0] != me and not (atomic and m[3]):
                    self._check(a, m, t, "writes", "read")
            w[a] = mark

    def _check(self, a: int, m: tuple, t, what: str, did: str) -> None:
        other = t.cta.threads[m[0]]
        if other.cta_epoch > m[1]:
            return               # the other thread has passed a barrier since
        if other.warp == t.warp and other.warp_epoch > m[2]:
            return               # ... or a synchronisation of its warp
        raise ExecError(f"{self.space}-memory race in CTA {t.cta.ctaid}: thread {t.linear} "
                        f"{what} byte {a:#x} that thread {m[0]} {did}, with no barrier "
                        f"between them")


class SharedMemory:
    """One CTA's shared memory, with its race :class:`Shadow`."""

    def __init__(self, size: int):
        self.buf = bytearray(size)
        self.size = size
        self.shadow = Shadow("shared")

    def _check(self, addr: int, n: int) -> int:
        if addr < 0 or addr + n > self.size:
            raise ExecError(f"illegal shared address {addr:#x} ({n} bytes; the CTA has "
                            f"{self.size} bytes of shared memory)")
        return addr

    def read(self, addr: int, n: int, t, atomic: bool = False) -> int:
        self._check(addr, n)
        self.shadow.read(addr, n, t, atomic)
        return int.from_bytes(self.buf[addr:addr + n], "little")

    def write(self, addr: int, n: int, value: int, t, atomic: bool = False) -> None:
        self._check(addr, n)
        new = (value & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
        self.shadow.write(addr, n, t, self.buf[addr:addr + n], new, atomic)
        self.buf[addr:addr + n] = new


class LocalMemory:
    """One thread's local memory: a stack of frames (``.local`` depots)."""

    def __init__(self):
        self.buf = bytearray(0)
        self.top = 0

    def push(self, size: int, align: int) -> int:
        base = (self.top + align - 1) // align * align
        self.top = base + size
        if len(self.buf) < self.top:
            self.buf.extend(bytes(self.top - len(self.buf)))
        return base

    def pop(self, base: int) -> None:
        self.top = base

    def read(self, addr: int, n: int) -> int:
        if addr < 0 or addr + n > self.top:
            raise ExecError(f"illegal local address {addr:#x} ({n} bytes; {self.top} in use)")
        return int.from_bytes(self.buf[addr:addr + n], "little")

    def write(self, addr: int, n: int, value: int) -> None:
        if addr < 0 or addr + n > self.top:
            raise ExecError(f"illegal local address {addr:#x} ({n} bytes; {self.top} in use)")
        self.buf[addr:addr + n] = (value & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
