"""The examples compile (without a GPU: --compile-only) and report their call sites."""

import subprocess
import sys
from pathlib import Path

import pytest

from support.env import python_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("script", ["examples/layernorm_gelu.py",
                                    "examples/ptx_import/saxpy_from_ptx.py",
                                    "examples/block_reduce_rows.py",
                                    "examples/row_sort.py", "examples/row_top_k.py",
                                    "examples/matmul_rowmax_fp8.py"])
def test_example_compiles(script):
    env = python_env(ROOT)
    out = subprocess.run([sys.executable, str(ROOT / script), "--compile-only"],
                         capture_output=True, text=True, cwd=ROOT / "examples", timeout=600,
                         env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "site 0:" in out.stdout
    assert "in PTX" in out.stdout and "SASS" in out.stdout


def test_committed_ptx_matches_its_source():
    """examples/ptx_import/saxpy.ptx is what make_ptx.py generates from saxpy.cu (modulo
    the NVRTC version line)."""
    from splice.toolchain import nvrtc_compile
    d = ROOT / "examples" / "ptx_import"
    ptx, _ = nvrtc_compile((d / "saxpy.cu").read_bytes(), "saxpy.cu",
                           ["-arch=sm_80", "-rdc=true"])

    def body(text):  # without the NVRTC banner and .version (NVRTC 13.0 writes 9.0)
        return [ln for ln in text.splitlines()
                if not ln.startswith("//") and not ln.startswith(".version")]
    assert body(ptx) == body((d / "saxpy.ptx").read_text())


@pytest.mark.gpu
@pytest.mark.parametrize("script", ["examples/row_sort.py", "examples/row_top_k.py"])
def test_gpu_tile_example_checks_against_torch(script):
    env = python_env(ROOT)
    out = subprocess.run([sys.executable, str(ROOT / script)], capture_output=True,
                         text=True, cwd=ROOT / "examples", timeout=600, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "equal to torch." in out.stdout and "OK" in out.stdout
