"""Where CCCL's headers (CUB, Thrust, libcu++ ``<cuda/std/...>``, ``<nv/target>``) are: the
one locator every part of splice uses (NVRTC's default include path, NVSHMEM's device
headers, the missing-header hints).

NVRTC does not search CCCL by itself: the ``cuda-toolkit[cccl]`` wheel (``nvidia-cuda-cccl``)
keeps it under ``nvidia/cu13/include/cccl``, a CUDA toolkit under ``include/cccl``, CuPy
carries its own copy. splice puts the first one found on NVRTC's include path after the
user's own directories, so ``include_dirs=`` or ``-I`` in ``options=`` may name another::

    from splice.cccl import include_dirs
    @splice.extern(source=CUB_SRC, include_dirs=include_dirs(), scope="block") ...
"""

from __future__ import annotations

import glob
import os
import re
import site
import sys
from pathlib import Path
from typing import Iterator

from ..errors import SpliceToolchainError
from ..system import forksafe

#: How to install CCCL (quoted by every error and hint about missing CCCL headers).
INSTALL_HINT = "pip install 'cuda-toolkit[cccl]' (the nvidia-cuda-cccl wheel)"


def _roots() -> list[str]:
    roots = [*site.getsitepackages(), site.getusersitepackages(), sys.prefix]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(os.environ[var])
    roots.append("/usr/local/cuda")
    return roots


#: One directory holding cub/, thrust/ and cuda/ (libcu++).
_SINGLE = (
    ("nvidia", "cu*", "include", "cccl"),        # cuda-toolkit wheels
    ("nvidia", "cuda_cccl", "include"),          # nvidia-cuda-cccl
    ("nvidia", "cu*", "include"),
    ("include", "cccl"),                         # a CUDA toolkit
)
#: CuPy's copy: one directory per library.
_CUPY = ("cupy", "_core", "include", "cupy", "_cccl")


def _beside_cuda_headers() -> list[list[str]]:
    """The CCCL beside the CUDA headers splice compiles with (the wheel that matches NVRTC)."""
    from ..system import toolchain
    inc = toolchain.cuda_include_dir()
    return [] if inc is None else [[str(inc / "cccl")]]


def _pathfinder() -> list[list[str]]:
    """cuda-pathfinder's CCCL: the wheels, ``$CONDA_PREFIX``, ``$CUDA_PATH``/``$CUDA_HOME``,
    the toolkit of the system's libcudart, ``/usr/local/cuda*`` (in that order)."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        found = find_nvidia_header_directory("cccl")
    except (ImportError, RuntimeError):  # cuda-pathfinder missing, or too old to know it
        return []
    return [[found]] if found else []


def _in_roots() -> list[list[str]]:
    """The layouts of :data:`_SINGLE` and CuPy's under :func:`_roots`."""
    found: list[list[str]] = []
    for root in _roots():
        for pat in _SINGLE:
            found += [[d] for d in sorted(glob.glob(os.path.join(root, *pat)))]
        base = os.path.join(root, *_CUPY)
        found.append([d for d in (os.path.join(base, "cub"),
                                  os.path.join(base, "libcudacxx", "include"),
                                  os.path.join(base, "thrust")) if os.path.isdir(d)])
    return found


def installations() -> list[list[str]]:
    """Every complete CCCL found, each as the include directories it needs, best first: the
    one beside the CUDA headers splice compiles with (``toolchain.cuda_include_dir()/cccl``),
    the wheel, toolkit and CuPy layouts under site-packages, ``sys.prefix``,
    ``$CUDA_HOME``, ``$CUDA_PATH`` and ``/usr/local/cuda``, then cuda-pathfinder's (last:
    importing cuda.pathfinder costs 50-150 ms, ldconfig included, on the first launch of
    every process, where the cheap layouts above usually answer)."""
    return list(_found())


def _found() -> Iterator[list[str]]:
    seen: set[tuple[str, ...]] = set()
    for step in (_beside_cuda_headers, _in_roots, _pathfinder):
        for dirs in step():
            real = tuple(os.path.realpath(d) for d in dirs)
            if dirs and real not in seen and _complete(dirs):
                seen.add(real)
                yield dirs


def _complete(dirs) -> bool:
    """CUB and libcu++ are both there (CUB's headers include ``<cuda/__cccl_config>``; a
    CuPy build without libcu++ lacks it)."""
    def has(rel: str) -> bool:
        return any(os.path.isfile(os.path.join(d, rel)) for d in dirs)
    return has(os.path.join("cub", "cub.cuh")) and has(os.path.join("cuda", "__cccl_config"))


def include_dirs() -> list[str]:
    """The include directories of the CCCL splice compiles with: the first of
    :func:`installations`; empty when there is none. splice already puts them on NVRTC's
    include path (after the user's); passing them as ``include_dirs=`` of
    :func:`splice.extern` puts them first.

    The one found is remembered for the process and checked to be still complete at each
    call (two file tests): walking the layouts costs milliseconds, and every CUDA C
    fragment's cache key asks. None found is not remembered: CCCL installed after a failed
    compile is found by the next one."""
    with _lock:
        if _chosen and _complete(_chosen[0]):
            return list(_chosen[0])
    dirs = next(_found(), [])
    with _lock:
        _chosen[:] = [dirs] if dirs else []
    return list(dirs)


def version() -> tuple[int, int, int] | None:
    """The (major, minor, patch) of the CCCL in :func:`include_dirs`, from
    ``cuda/std/__cccl/version.h``'s ``CCCL_VERSION``; None where there is no CCCL or no such
    line (a file over 64 KiB is not read)."""
    for d in include_dirs():
        path = os.path.join(d, "cuda", "std", "__cccl", "version.h")
        if os.path.isfile(path) and os.path.getsize(path) < 65536:
            with open(path, encoding="utf-8", errors="replace") as f:
                m = re.search(r"#\s*define\s+CCCL_VERSION\s+(\d+)", f.read())
            if m:
                v = int(m.group(1))
                return (v // 1000000, v // 1000 % 1000, v % 1000)
    return None


_lock = forksafe.lock(globals(), "_lock")
_chosen: list[list[str]] = []    # include_dirs()'s answer, while complete


def require(what: str, install: str = INSTALL_HINT) -> list[str]:
    """:func:`include_dirs`, for ``what`` ("the source includes <nvshmem.h>, whose device
    headers") that cannot compile without CCCL; ``install`` says how to get it.

    Raises:
        SpliceToolchainError: no CCCL is installed; says how to install it.
    """
    dirs = include_dirs()
    if not dirs:
        raise SpliceToolchainError(
            f"{what} need CCCL (<cuda/std/...>, <nv/target>), which is not installed: "
            f"{install}; or name a CCCL checkout's include directory in include_dirs=")
    return dirs


# --------------------------------------------------------------------------------------------
# CCCL as a header provider of CUDA C sources

# libcu++ (CCCL) headers: <cuda/std/X> stands in for the standard <X> under NVRTC.
_LIBCUXX = frozenset(
    "algorithm array atomic barrier bit bitset cassert cfloat charconv chrono climits cmath "
    "complex concepts cstddef cstdint cstdlib cstring ctime expected functional "
    "initializer_list iterator latch limits mdspan memory numbers numeric optional random "
    "ranges ratio semaphore source_location span string_view tuple type_traits utility "
    "variant version".split())
_C_HEADERS = {"stdint.h": "cstdint", "stddef.h": "cstddef", "limits.h": "climits",
              "float.h": "cfloat", "assert.h": "cassert", "stdlib.h": "cstdlib",
              "string.h": "cstring", "time.h": "ctime"}
_CCCL_DIRS = ("cuda/", "cub/", "thrust/", "nv/")


def header_hint(header: str) -> str:
    """How to get ``header``, which NVRTC could not open: CCCL's (``<cuda/std/...>``,
    ``<cub/...>``, ``<thrust/...>``, ``<nv/target>``, which ``<cooperative_groups.h>``
    includes) comes with ``cuda-toolkit[cccl]``; NVRTC has no C++ standard library, whose
    headers have libcu++ stand-ins ``<cuda/std/...>``. "" for other headers."""
    found = include_dirs()
    std = _C_HEADERS.get(header, header)
    if std in _LIBCUXX and "/" not in std:
        hint = (f"NVRTC has no C++ standard library: include <cuda/std/{std}> (libcu++, "
                f"namespace cuda::std) instead of <{header}>")
        return hint + ("" if found else f"; it comes with CCCL: {INSTALL_HINT}")
    if header.startswith(_CCCL_DIRS):
        if found:
            return f"<{header}> is not in CCCL at {', '.join(found)}"
        return (f"<{header}> is part of CCCL (CUDA Core Compute Libraries), which is not "
                f"installed: {INSTALL_HINT}; splice then puts its headers on NVRTC's "
                f"include path")
    if "." not in header.rsplit("/", 1)[-1]:
        return (f"<{header}> is a C++ standard library header; NVRTC has none, and "
                f"libcu++ (CCCL, <cuda/std/...>) has no device version of it")
    return ""


#: libcu++'s unroll limit for its type-list metaprograms (``cuda/std/__type_traits/
#: type_list.h``): CCCL picks 10 under nvcc and 16 under any other compiler, NVRTC
#: included, and at 16 the preprocessor expansion of that one header takes about 0.9 s of
#: every NVRTC compile that includes CUB (0.05 s at 10; a ``splice.cub`` compile: 1.7 s ->
#: 0.7 s on the project's CPU). splice gives NVRTC nvcc's value; a source, ``defines=`` or
#: ``options=`` that sets it keeps its own.
UNROLL_LIMIT = ("_CCCL_META_UNROLL_LIMIT", "10")
_USES_CCCL = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:cub|thrust|cuda|nv)/', re.M)


class _Headers:
    """CCCL as a :class:`splice.inputs.headers.HeaderProvider`: on every CUDA C source's include
    path; its headers are hashed by the source's include walk (size and mtime)."""

    def include_dirs(self, texts) -> list[Path]:
        return [Path(d) for d in include_dirs()]

    def options(self, texts) -> list[str]:
        """``-D_CCCL_META_UNROLL_LIMIT=10`` (:data:`UNROLL_LIMIT`) for a source that
        includes a CCCL header and does not name the macro itself."""
        name, value = UNROLL_LIMIT
        if any(_USES_CCCL.search(t) for t in texts) and not any(name in t for t in texts):
            return [f"-D{name}={value}"]
        return []

    def key(self, texts) -> str:
        return ""

    def check_extern(self, ext, source: str) -> None:
        pass

    def compile_hint(self, log: str) -> str:
        return ""

    def header_hint(self, header: str) -> str:
        return header_hint(header)


HEADERS = _Headers()
