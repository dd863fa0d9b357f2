"""Regenerate saxpy.ptx from saxpy.cu with NVRTC (-rdc=true, -arch=sm_80)."""

from pathlib import Path

from splice.toolchain import nvrtc_compile

here = Path(__file__).resolve().parent
ptx, log = nvrtc_compile((here / "saxpy.cu").read_bytes(), "saxpy.cu",
                         ["-arch=sm_80", "-rdc=true"])
(here / "saxpy.ptx").write_text(ptx)
print(f"wrote {here / 'saxpy.ptx'} ({len(ptx)} bytes){log and ': ' + log}")
