"""The CUDA tools splice runs, as a user asks about them: where tileiras, ptxas and nvdisasm
are, their versions and NVRTC's, the architectures tileiras compiles for, the GPU's
architecture and the CUDA headers' directory; NVRTC itself, to compile CUDA C to PTX or
LTO-IR for ``splice.extern.from_ptx`` / ``from_ltoir``. The public face of
:mod:`splice.system.toolchain`, which runs them (tileiras through an overlay directory that
captures its PTX, ptxas with the captured flags, NVRTC and nvJitLink in process:
``docs/design.md#tileiras-ptxas``)::

    import splice
    print(splice.toolchain.gpu_arch(), splice.toolchain.tileiras_version())
"""

from .system.toolchain import (
    cuda_include_dir,
    gpu_arch,
    nvdisasm,
    nvrtc_compile,
    nvrtc_compile_ltoir,
    nvrtc_version,
    ptxas,
    ptxas_version,
    tileiras,
    tileiras_architectures,
    tileiras_version,
)

__all__ = ["cuda_include_dir", "gpu_arch", "nvdisasm", "nvrtc_compile", "nvrtc_compile_ltoir",
           "nvrtc_version", "ptxas", "ptxas_version", "tileiras", "tileiras_architectures",
           "tileiras_version"]
