"""``SPLICE_VERIFY=1``: check the linked cubin itself, after ptxas.

The rewriter proves its work on PTX; this checks what ptxas made of it:

- no symbol of the cubin's ELF symbol table names a marker global;
- the SASS (nvdisasm) mentions no marker (no relocation against one, so no marker atomic);
- in the kernel's own body (each entry's, for several signatures), every extern has
  exactly as many SASS ``CALL``\\ s as the spliced PTX has ``call``\\ s of it (the
  rewriter's plus those of inlined bodies): ptxas neither dropped nor duplicated a call.

Raises :class:`splice.errors.SpliceRewriteError` on any mismatch, and
:class:`splice.errors.SpliceToolchainError` when nvdisasm is missing.
"""

from __future__ import annotations

import struct
from collections import Counter

from ..errors import SpliceRewriteError, SpliceToolchainError
from ..ptxtools.names import MARKER_PREFIX
from ..system import settings

MARKER = MARKER_PREFIX


def enabled() -> bool:
    return settings.verify()


def elf_symbols(blob: bytes) -> list[str]:
    """Names in the ``.symtab`` of a 64-bit little-endian ELF (a cubin)."""
    if blob[:4] != b"\x7fELF" or blob[4] != 2 or blob[5] != 1:
        raise SpliceRewriteError("the linked kernel is not a 64-bit little-endian ELF cubin")
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", blob, 0x3A)
    sections = []
    for i in range(shnum):
        off = shoff + i * shentsize
        _name, stype, _flags, _addr, offset, size, link, _info, _align, entsize = \
            struct.unpack_from("<IIQQQQIIQQ", blob, off)
        sections.append((stype, offset, size, link, entsize))
    names = []
    for stype, offset, size, link, entsize in sections:
        if stype != 2 or not entsize:  # SHT_SYMTAB
            continue
        str_off = sections[link][1]
        for k in range(size // entsize):
            st_name, = struct.unpack_from("<I", blob, offset + k * entsize)
            end = blob.index(b"\0", str_off + st_name)
            names.append(blob[str_off + st_name:end].decode(errors="replace"))
    return names


def verify_build(build) -> None:
    """Check a :class:`splice.driver.pipeline.Build`'s cubin as described above."""
    what = f"kernel '{build.kernel_name}' ({build.symbol}, {build.arch})"
    bad = [n for n in elf_symbols(build.cubin) if MARKER in n]
    if bad:
        raise SpliceRewriteError(f"SPLICE_VERIFY: the cubin of {what} still defines marker "
                                 f"symbol(s) {bad}")
    sass = build.sass
    if sass is None:
        raise SpliceToolchainError("SPLICE_VERIFY needs nvdisasm (the nvidia-cuda-nvdisasm "
                                   "wheel of ptxas's CUDA minor) to read the SASS")
    if MARKER in sass:
        line = next(ln.strip() for ln in sass.splitlines() if MARKER in ln)
        raise SpliceRewriteError(f"SPLICE_VERIFY: the SASS of {what} still refers to a marker: "
                                 f"{line}")
    placed: Counter[str] = Counter()
    for s in build.sites:
        if not s.inlined:
            placed[s.symbol] += s.instances
    for symbol in {s.symbol for s in build.sites}:
        n = build.entry_calls.get(symbol, 0)
        if n < placed[symbol]:
            raise SpliceRewriteError(
                f"SPLICE_VERIFY: {what}: the spliced PTX has {n} call(s) of '{symbol}' but "
                f"the rewriter placed {placed[symbol]}")
        got = sum(build.sass_call_count(symbol, kernel_body_only=True, entry=e)
                  for e in (build.symbols or (build.symbol,)))
        if got != n:
            raise SpliceRewriteError(
                f"SPLICE_VERIFY: {what} has {got} SASS CALL(s) of '{symbol}' in its body but "
                f"its PTX has {n}")
