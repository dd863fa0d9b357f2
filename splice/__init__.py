"""splice: call separately compiled CUDA C and PTX device functions from cuTile kernels.

::

    import cuda.tile as ct, splice

    @splice.extern(source=r'''
    extern "C" __device__ float fast_gelu(float x) { return x / (1.0f + __expf(-1.702f * x)); }''')
    def fast_gelu(x: ct.float32) -> ct.float32: ...

    @splice.kernel
    def gelu(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=fast_gelu(t))

    ct.launch(stream, (n // 1024,), gelu, (x, y, 1024))
"""

from typing import TYPE_CHECKING

from . import identity  # noqa: F401 (first: the code identity, a guard on later imports)
from .splice_kernel import SpliceKernel as kernel
from .errors import (
    SpliceCallError,
    SpliceCompileError,
    SpliceDeclarationError,
    SpliceError,
    SpliceLaunchError,
    SpliceLinkError,
    SpliceRewriteError,
    SpliceToolchainError,
)
from .extern import ExternFunction, Library, extern, library
from . import toolchain
from .asm import _public_asm

asm = _public_asm()
from .types import ELEMENT_TYPES, Signature, parse_signature, pointer
from .signatures import kernel_signature
from .export import export_kernel

#: Names imported on first use: the build pipeline (rewriter, linker, checks) is needed
#: only to compile a kernel, and ``import splice`` stays cheap (:mod:`splice.identity`
#: keeps the code that then loads the code that was imported).
_LAZY = {"Build": "result", "build": "pipeline", "__version__": "pipeline",
         "PTXSyntaxError": "ptx"}
if TYPE_CHECKING:
    from .ptx import PTXSyntaxError
    from .result import Build


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def compile(kernel, signature, arch: str = "sm_90") -> "Build":
    """Ahead-of-time compile a ``@splice.kernel`` for a
    ``cuda.tile.compilation.KernelSignature`` on ``arch`` ("sm_80", "sm_90", "sm_100";
    "sm_90a" is accepted). Needs no GPU.

    Returns:
        Build: ``.cubin`` (bytes), ``.symbol`` (the kernel's entry name), ``.sites`` and every
        stage (``build["ptx"]``, ``["spliced_ptx"]``, ``["sass"]``...).

    Raises:
        SpliceCallError, SpliceCompileError, SpliceLinkError, SpliceRewriteError,
        SpliceToolchainError: see :mod:`splice.errors`.
    """
    from .pipeline import build
    return build(kernel, signature, arch, None, keep_stages=True)


__all__ = [
    "kernel", "extern", "asm", "library", "Library", "compile", "build", "Build",
    "ExternFunction", "Signature", "parse_signature", "pointer", "ELEMENT_TYPES",
    "SpliceError", "SpliceCallError", "SpliceCompileError", "SpliceDeclarationError",
    "SpliceLaunchError", "SpliceLinkError", "SpliceRewriteError", "SpliceToolchainError",
    "PTXSyntaxError", "toolchain", "__version__", "kernel_signature", "export_kernel",
]
