"""Device code in the forms splice links without compiling it: LTO-IR and relocatable
cubins, built with NVRTC for the tests."""

from __future__ import annotations

import re

LTO_SRC = b'extern "C" __device__ float lto_f(float x) { return x * 3.0f + 1.0f; }\n'
OBJ_SRC = b'extern "C" __device__ float obj_f(float x) { return x * 5.0f - 1.0f; }\n'


def ltoir(arch="sm_90a") -> bytes:
    """LTO-IR of ``lto_f`` (float32 -> x * 3 + 1) for ``arch``."""
    from splice.toolchain import nvrtc_compile_ltoir
    return nvrtc_compile_ltoir(LTO_SRC, "lto.cu", [f"-arch={arch}", "-rdc=true", "-dlto"])


def rdc_cubin(tmp_path, arch="sm_90a"):
    """A relocatable cubin of ``obj_f`` (float32 -> x * 5 - 1), written under ``tmp_path``;
    returns its path."""
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(OBJ_SRC, b"obj.cu", 0, [], [])
    opts = [f"-arch={arch}".encode(), b"-rdc=true"]
    assert nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] == 0
    err, n = nvrtc.nvrtcGetCUBINSize(prog)
    buf = bytearray(n)
    nvrtc.nvrtcGetCUBIN(prog, buf)
    p = tmp_path / "obj.cubin"
    p.write_bytes(bytes(buf))
    return p


def nvjitlink_too_old() -> bool:
    """nvJitLink older than tileiras's ptxas (splice refuses binary objects then)."""
    from cuda.bindings import nvjitlink

    from splice import toolchain
    m = re.search(r"release (\d+)\.(\d+)", toolchain.ptxas_version())
    return bool(m) and tuple(nvjitlink.version()) < (int(m.group(1)), int(m.group(2)))
