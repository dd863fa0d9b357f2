"""Where CCCL's headers (CUB, Thrust, libcu++) are, for code of your own: the public face of
:mod:`splice.inputs.cccl`, the locator splice's CUDA C compiles use::

    from splice.cccl import include_dirs
    @splice.extern(source=CUB_SRC, include_dirs=include_dirs(), scope="block") ...
"""

from .inputs.cccl import include_dirs

__all__ = ["include_dirs"]
