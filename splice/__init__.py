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

from .errors import (
    SpliceCallError,
    SpliceCompileError,
    SpliceDeclarationError,
    SpliceError,
    SpliceLaunchError,
    SpliceLinkError,
    SpliceNotCachedError,
    SplicePackError,
    SpliceRewriteError,
    SpliceToolchainError,
    SpliceUnsafePathError,
)
from .system import identity  # noqa: F401 (the code identity, a guard on later imports)

#: Every other public name -> (its module, its name there; None: the module itself), loaded
#: on first use (PEP 562): ``import splice`` costs little more than ``import cuda.tile``
#: (issue 11), and a script pays for what it uses. No public name is also the name of a
#: submodule (``splice.asm`` lives in ``declare.asm_frontend``, ``splice.extern`` in
#: ``declare.externs``):
#: importing a submodule would rebind the package attribute of that name
#: (``docs/design.md#first-launch``).
_LAZY = {
    "kernel": ("driver.splice_kernel", "SpliceKernel"),
    "extern": ("declare.externs", "extern"), "library": ("declare.externs", "library"),
    "Library": ("declare.externs", "Library"),
    "ExternFunction": ("declare.externs", "ExternFunction"),
    "asm": ("declare.asm_frontend", "asm"), "cuda": ("declare.cuda_frontend", "cuda"),
    "Signature": ("types", "Signature"), "parse_signature": ("types", "parse_signature"),
    "pointer": ("types", "pointer"), "tile": ("types", "tile"),
    "ELEMENT_TYPES": ("types", "ELEMENT_TYPES"),
    "kernel_signature": ("tracing.signatures", "kernel_signature"),
    "export_kernel": ("integrations.export", "export_kernel"),
    "export_pack": ("system.packs", "export_pack"),
    "import_pack": ("system.packs", "import_pack"),
    "toolchain": ("toolchain", None), "cub": ("cub", None),
    "Build": ("driver.result", "Build"), "build": ("driver.pipeline", "build"),
    "__version__": ("driver.pipeline", "__version__"),
    "PTXSyntaxError": ("ptxtools.ptx", "PTXSyntaxError"),
}
if TYPE_CHECKING:
    from . import cub, toolchain
    from .declare.asm_frontend import asm
    from .declare.cuda_frontend import cuda
    from .declare.externs import ExternFunction, Library, extern, library
    from .driver.pipeline import __version__, build
    from .driver.result import Build
    from .driver.splice_kernel import SpliceKernel as kernel
    from .integrations.export import export_kernel
    from .ptxtools.ptx import PTXSyntaxError
    from .system.packs import export_pack, import_pack
    from .tracing.signatures import kernel_signature
    from .types import ELEMENT_TYPES, Signature, parse_signature, pointer, tile


#: Modules the documentation imports from ``splice`` that live in a layer now (``from splice
#: import cache``: ``docs/guide/cache.md``), loaded on first use; not public names.
_MOVED = {"cache": "system.cache"}


if not TYPE_CHECKING:   # hidden from type checkers: they flag a misspelt name (splice.kernal)
    def __getattr__(name: str):
        if name not in _LAZY and name not in _MOVED:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib
        module, attr = _LAZY.get(name, (_MOVED.get(name), None))
        mod = importlib.import_module(f"{__name__}.{module}")
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def compile(kernel, signature, arch: str = "sm_90") -> "Build":
    """Ahead-of-time compile a ``@splice.kernel`` for a
    ``cuda.tile.compilation.KernelSignature`` on ``arch``. Needs no GPU.

    Args:
        kernel: a ``@splice.kernel`` function.
        signature (KernelSignature | list[KernelSignature]): the kernel's parameters
            (:func:`splice.kernel_signature` makes one from text), or a non-empty list of
            them (one cubin with an entry per signature, named in ``.symbols``).
        arch (str): the GPU architecture, "sm_80", "sm_90", "sm_100" ... ("sm_90a" is
            accepted); the architectures tileiras supports.

    Returns:
        Build: ``.cubin`` (bytes), ``.symbol`` (the kernel's entry name), ``.sites`` and every
        stage (``build["ptx"]``, ``["spliced_ptx"]``, ``["sass"]``...).

    Raises:
        SpliceDeclarationError: ``kernel`` is not a ``@splice.kernel``, or ``signature`` is
            not a KernelSignature (or a list of them).
        SpliceCallError: a call in the kernel does not fit its extern's declaration.
        SpliceCompileError: NVRTC rejected a CUDA C fragment.
        SpliceLinkError: a fragment cannot be linked, or its code breaks a rule of its scope.
        SpliceRewriteError: splice cannot prove the rewrite of a call site.
        SpliceToolchainError: a tool failed, or an architecture tileiras cannot compile for.
        cuda.tile.TileError: cuTile refuses the kernel's code: an instance of cuTile's own
            class (``ct.TileStaticAssertionError``, ``ct.TileSyntaxError``...) that is also
            a SpliceError (:class:`splice.errors.CuTileError`), with cuTile's message.

    Example:
        ```python
        import cuda.tile as ct
        import splice

        twice = splice.extern(source='extern "C" __device__ float twice(float x) { return 2 * x; }',
                              name="twice", signature="float32(float32)")

        @splice.kernel
        def scale(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=twice(t))

        b = splice.compile(scale, splice.kernel_signature("array(float32)", "array(float32)", 128),
                           "sm_90")
        print(b.symbol, len(b.cubin), "bytes of cubin")
        assert b.sites[0].instances >= 1
        ```
    """
    from .driver.pipeline import build
    return build(kernel, signature, arch, None, keep_stages=True)


__all__ = [
    "kernel", "extern", "asm", "cuda", "library", "Library", "compile", "build", "Build",
    "ExternFunction", "Signature", "parse_signature", "pointer", "tile", "ELEMENT_TYPES",
    "SpliceError", "SpliceCallError", "SpliceCompileError", "SpliceDeclarationError",
    "SpliceLaunchError", "SpliceLinkError", "SpliceNotCachedError", "SplicePackError",
    "SpliceRewriteError", "SpliceToolchainError", "SpliceUnsafePathError",
    "PTXSyntaxError", "toolchain", "cub", "__version__", "kernel_signature", "export_kernel",
    "export_pack", "import_pack",
]
