"""Where CCCL's headers (CUB, Thrust, libcu++) are, for CUDA C externs that include them::

    from splice.cccl import include_dirs
    @splice.extern(source=CUB_SRC, include_dirs=include_dirs(), scope="block") ...

NVRTC does not search CCCL by itself everywhere: the CUDA toolkit keeps it under
``include/cccl``, the ``nvidia-cuda-cccl`` wheel (``pip install "cuda-toolkit[cccl]"``) and
CuPy carry their own copies.
"""

from __future__ import annotations

import glob
import os
import site
import sys


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


def installations() -> list[list[str]]:
    """Every CCCL found, each as the include directories it needs, best first."""
    found: list[list[str]] = []
    for root in _roots():
        for pat in _SINGLE:
            for d in sorted(glob.glob(os.path.join(root, *pat))):
                if os.path.isfile(os.path.join(d, "cub", "cub.cuh")):
                    found.append([d])
        base = os.path.join(root, *_CUPY)
        dirs = [os.path.join(base, "cub"), os.path.join(base, "libcudacxx", "include"),
                os.path.join(base, "thrust")]
        if os.path.isfile(os.path.join(dirs[0], "cub", "cub.cuh")):
            found.append([d for d in dirs if os.path.isdir(d)])
    out: list[list[str]] = []
    for dirs in found:
        if dirs not in out and _complete(dirs):
            out.append(dirs)
    return out


def _complete(dirs: list[str]) -> bool:
    """CUB and libcu++ are both there (CUB's headers include ``<cuda/__cccl_config>``; a
    CuPy build without libcu++ lacks it)."""
    def has(rel: str) -> bool:
        return any(os.path.isfile(os.path.join(d, rel)) for d in dirs)
    return has(os.path.join("cub", "cub.cuh")) and has(os.path.join("cuda", "__cccl_config"))


def include_dirs() -> list[str]:
    """The include directories of the first CCCL found (see :func:`installations`); empty
    when there is none. Pass them as ``include_dirs=`` of :func:`splice.extern`."""
    found = installations()
    return found[0] if found else []
