"""NVRTC's automatic precompiled header (PCH) for CUDA C that includes CCCL.

Parsing CCCL's headers dominates a ``splice.cub`` compile, and every dtype or op is its
own NVRTC program (:mod:`splice.inputs.tile_fragment` appends a trampoline per tile size,
every documented size of an op and dtype in one program) that parses them again. With
``-pch``, NVRTC saves the parsed state of the source's leading ``#include`` lines the first
time and loads it for every later program that starts with the same lines and options, in
this process: measured on the six sizes of a radix sort (nvcc's unroll limit,
:data:`splice.inputs.cccl.UNROLL_LIMIT`), 1.2-1.3 s without, 1.65 s creating the PCH (163 MB),
0.75-0.8 s loading it (``benchmarks/cub_first_compile.md``). splice turns it on from the
second compile of the same include lines (:func:`wanted`): a process that compiles one CUB
program does not pay for creating it.

Two details make it work and keep it safe:

- **The heap.** NVRTC builds the PCH in a heap of 256 MB by default; CCCL's radix sort
  needs about 340 MB, and on a full heap NVRTC silently creates nothing. splice raises it
  to :data:`HEAP_BYTES` before the first PCH compile, and to what NVRTC reports it needed
  (``nvrtcGetPCHHeapSizeRequired``) after a compile that ran out of it.
- **Where the file goes.** NVRTC writes the PCH to ``--pch-dir`` and reads it back from
  there. That directory is this process's own (``pch-<pid>-<random>``, 0700:
  :func:`splice.system.safe_fs.process_dir`) inside splice's cache directory
  (:func:`splice.system.cache.cache_root`), used only when that directory is the user's,
  not writable by anyone else and under no directory another user could rename entries
  of (NVRTC opens the file by name), and checked again before each compile. It is removed
  at exit by the process that made it, else (``kill -9``) by a later one, and counted
  against the cache's size bound. Never a predictable name in a shared temporary
  directory.

PCH compiles are serialised (:data:`_lock`): resizing the heap frees the one NVRTC is
using, and two programs creating the same header's PCH at once would race on its file.
Without a usable directory, or with an NVRTC older than 12.8, sources compile as before.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path

from . import forksafe

#: How a header walk (:func:`splice.inputs.headers.included`) marks a toolkit header, keyed
#: by its size and mtime: a source whose headers are all marked so may use the PCH.
STAT = "stat "
#: The PCH heap splice asks for: above the ~340 MB CCCL's BlockRadixSort needs.
HEAP_BYTES = 512 << 20

_USES_CCCL = re.compile(r"^\s*#\s*include\s*[<\"](cub|thrust|cuda|nv)/", re.M)
_INCLUDE = re.compile(r"^\s*#\s*include\s*(\S+).*$", re.M)
#: The headers a PCH may cover: CCCL's and the CUDA toolkit's, which do not change while
#: the process runs (a user's header could, and NVRTC would have to notice).
_TOOLKIT_HEADER = re.compile(r"<(?:(?:cub|thrust|cuda|nv)/[\w/.]+|cuda_\w+\.hp?p?)>")
_prefixes: set[str] = set()     # the include prefixes (and options) compiled so far
_lock = forksafe.lock(globals(), "_lock", threading.RLock)
_state: dict[str, object] = {}


def wanted(source: str, options: list[str], headers=()) -> bool:
    """Whether to compile ``source`` with the PCH: it includes a CCCL header
    (``<cub/...>``, ``<thrust/...>``, ``<cuda/...>``, ``<nv/...>``), every header it
    includes is CCCL's or the toolkit's (``<cuda_fp16.h>``: none of the user's, which could
    change while the process runs), and this process has compiled a source with the same
    leading ``#include`` lines and ``options`` before.
    The first such compile runs without (creating the PCH costs more than it saves for a
    single compile: about 1.65 s against 1.25 s for CUB's radix sort); the second creates
    it, the later ones load it.

    NVRTC loads a PCH without looking at the headers in it again: ``headers`` (the
    source's include walk, :func:`splice.inputs.headers.included`) must be the toolkit's
    only (a user's header, even one named like CCCL's in front of it on the include
    path, could change while the process runs), and they are part of the key, as they
    name the PCH's directory (:func:`state`): an edited CCCL header gets a PCH of its own.

    Args:
        source: CUDA C text.
        options: NVRTC's options for it.
        headers: (path, identity) of every header it includes, from the include walk.

    Returns:
        True when the PCH pays.

    Example:
        >>> src = "#include <cub/block/block_scan.cuh>\\nint x;\\n"
        >>> wanted(src, ["-arch=sm_90a"]), wanted(src, ["-arch=sm_90a"])
        (False, True)
        >>> wanted("#include <cuda_fp16.h>\\n", []), wanted("#include <cuda_fp16.h>\\n", [])
        (False, False)
    """
    if _USES_CCCL.search(source) is None or \
            not all(_TOOLKIT_HEADER.fullmatch(m.group(1)) for m in _INCLUDE.finditer(source)) \
            or not all(ident.startswith(STAT) for _, ident in headers):
        return False
    last = max(m.end() for m in _INCLUDE.finditer(source))
    key = hashlib.sha256("\0".join([source[:last], *options, state(headers)]).encode()
                         ).hexdigest()
    with _lock:
        seen = key in _prefixes
        _prefixes.add(key)
    return seen


def _private_dir() -> Path | None:
    """This process's PCH directory (made once), or None when the cache root is not a
    directory only this user (or root) can write, or sits under a directory another user
    could rename entries of (NVRTC opens the PCH by name: :func:`splice.system.safe_fs.walk`)."""
    if "dir" in _state:
        return _state["dir"]  # type: ignore[return-value]
    from ..errors import SpliceUnsafePathError
    from . import cache, safe_fs
    found = None
    try:
        root = safe_fs.private_dir(cache.cache_root(), "the cache directory",   # never shared
                                   ancestors=True)
        found = safe_fs.process_dir(cache.PCH_PREFIX, root)   # removed by this process only
    except (OSError, SpliceUnsafePathError):
        found = None
    _state["dir"] = found
    return found


# a forked child makes a PCH directory of its own (two processes creating one PCH file
# would race) when it first needs one
os.register_at_fork(after_in_child=lambda: _state.pop("dir", None))


def _set_heap(nvrtc, size: int) -> bool:
    """Whether NVRTC's PCH heap is now at least ``size`` bytes (False: an NVRTC without
    PCH)."""
    try:
        err, current = nvrtc.nvrtcGetPCHHeapSize()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False
        if current < size:
            (err,) = nvrtc.nvrtcSetPCHHeapSize(size)
            return err == nvrtc.nvrtcResult.NVRTC_SUCCESS
        return True
    except AttributeError:     # cuda-bindings or NVRTC before 12.8
        return False


def state(headers) -> str:
    """The name of the PCH directory for a source's ``headers`` (its include walk: each
    toolkit header's path, size and mtime): another state of the headers, another PCH."""
    return hashlib.sha256(repr(sorted(headers)).encode()).hexdigest()[:16]


def options(nvrtc, headers_state: str = "") -> list[str]:
    """The options that turn the PCH on (``-pch --pch-dir=...``), the heap raised first;
    [] when it cannot be used. Call it holding :data:`_lock`.

    Args:
        nvrtc: ``cuda.bindings.nvrtc``.
        headers_state: :func:`state` of the source's headers: the PCH directory is its
            subdirectory of this process's private one ("": that one).

    Returns:
        NVRTC options, or [].

    Example:
        >>> from cuda.bindings import nvrtc
        >>> with _lock:
        ...     opts = options(nvrtc)
        >>> opts == [] or opts[0] == "-pch"
        True
    """
    from ..errors import SpliceUnsafePathError
    from . import safe_fs
    d = _private_dir()
    if d is None or not _set_heap(nvrtc, int(_state.get("heap", HEAP_BYTES))):  # type: ignore[call-overload]
        return []
    d = d / headers_state if headers_state else d
    try:   # made, or checked again now: NVRTC opens the PCH by this name
        safe_fs.private_dir(d, "the PCH directory", ancestors=True)
    except (OSError, SpliceUnsafePathError):
        _state.pop("dir", None)   # removed or changed: another one for the next compile
        return []
    _state["used"] = d
    return ["-pch", f"--pch-dir={d}"]


def after_compile(nvrtc, prog) -> None:
    """After a PCH compile: a PCH created is counted against the cache's bound; when NVRTC
    ran out of heap creating it, the size it needed is remembered, for the next compile
    (which then creates it)."""
    try:
        (err,) = nvrtc.nvrtcGetPCHCreateStatus(prog)
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _count(_state.get("used"))
        if err != nvrtc.nvrtcResult.NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED:
            return
        err, need = nvrtc.nvrtcGetPCHHeapSizeRequired(prog)
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS and need:
            _state["heap"] = max(int(need) + (16 << 20), HEAP_BYTES)
    except AttributeError:
        pass


def _count(directory) -> None:
    """Count what NVRTC added to ``directory`` (a PCH it created) against the cache's bound
    (:func:`splice.system.cache.add_bytes`)."""
    if directory is None:
        return
    from . import cache, safe_fs
    now = safe_fs.tree_bytes(directory)
    counted: dict = _state.setdefault("counted", {})  # type: ignore[assignment]
    added, counted[directory] = now - counted.get(directory, 0), now
    if added > 0:
        cache.add_bytes(added)
