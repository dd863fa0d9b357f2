"""Where CCCL's headers (CUB, Thrust, libcu++) are, for CUDA C externs that include them::

    from splice.cccl import include_dirs
    @splice.extern(source=CUB_SRC, include_dirs=include_dirs(), scope="block") ...

NVRTC does not search CCCL by itself everywhere: the CUDA toolkit keeps it under
``include/cccl``, the ``nvidia-cuda-cccl`` wheel (``pip install nvidia-cuda-cccl``) and CuPy
carry their own copies.
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


_PATTERNS = (
    ("nvidia", "cu*", "include", "cccl"),        # cuda-toolkit wheels
    ("nvidia", "cuda_cccl", "include"),          # nvidia-cuda-cccl
    ("nvidia", "cu*", "include"),
    ("include", "cccl"),                         # a CUDA toolkit
    ("cupy", "_core", "include", "cupy", "_cccl", "cub"),
)


def include_dirs() -> list[str]:
    """Directories that hold ``cub/cub.cuh`` (and the rest of CCCL), best first; empty
    when none is found. Pass them as ``include_dirs=`` of :func:`splice.extern`."""
    found = []
    for root in _roots():
        for pat in _PATTERNS:
            found += sorted(glob.glob(os.path.join(root, *pat)))
    return [d for d in dict.fromkeys(found)
            if os.path.isfile(os.path.join(d, "cub", "cub.cuh"))]
