"""What pip would install: ``pip install --dry-run --report`` (nothing installed; each
wheel's metadata read, not the wheel downloaded), the versions a report picks, and a
constraints file that installs those versions elsewhere.

``.ci/run`` installs splice's side of ``pip install torch <checkout>`` (NVRTC and the CUDA
runtime headers at PyTorch's pins) with ``python -m support.resolution constraints REPORT``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Framework:
    """A framework installed with its CUDA 13 wheels, as its own docs say.

    Attributes:
        name: what the test is called by.
        alone: the ``pip install`` arguments without splice.
        line: the README's line that installs it with splice ("." is the checkout).
        compared: the projects whose versions must be the same with splice (the framework's
            own and, where it pins one, the cuda-toolkit metapackage).
    """
    name: str
    alone: tuple[str, ...]
    line: str
    compared: tuple[str, ...]


FRAMEWORKS = (
    Framework("torch", ("torch",), "pip install torch .", ("torch", "cuda-toolkit")),
    # jax[cuda13]: jaxlib, the CUDA 13 plugin and PJRT, with the plugin's CUDA wheels
    Framework("jax", ("jax[cuda13]",), "pip install 'jax[cuda13]' .",
              ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt")),
    # [ctk]: CuPy's CUDA wheels through cuda-toolkit[...]==13.*
    Framework("cupy", ("cupy-cuda13x[ctk]",), "pip install 'cupy-cuda13x[ctk]' .",
              ("cupy-cuda13x", "cuda-toolkit")),
)
#: The README's line for a PyTorch environment.
PYTORCH_LINE = FRAMEWORKS[0].line


def pip_args(line: str) -> list[str]:
    """The requirements of a ``pip install`` console line, ``.`` made the checkout's path."""
    words = shlex.split(line, comments=True)
    assert words[:2] == ["pip", "install"], line
    return [str(ROOT) if w == "." else w for w in words[2:]]


def dry_run(args: list[str], report: Path) -> tuple[dict, float]:
    """(the report of ``pip install --dry-run --ignore-installed args``, seconds taken):
    what pip would install into an empty environment of this Python.

    With ``fast-deps``: where the index serves no metadata files (PEP 658; the index CI
    reaches serves none), pip reads each wheel's metadata with HTTP range requests instead
    of downloading it (``jax[cuda13]``: 4 MiB in 3 s, not 2.3 GB)."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run",
                          "--ignore-installed", "--use-feature=fast-deps", "--quiet",
                          "--report", str(report), *args],
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(report.read_text()), time.perf_counter() - start


def picked(report: dict) -> dict[str, str]:
    """{project (lower case): version} of what the report would install."""
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}


def constraints(report: dict, leave_out: tuple[str, ...] = ("torch", "splice")) -> str:
    """A pip constraints file: every version the report picked but ``leave_out``'s (the
    framework itself, and splice, installed from the checkout as it is)."""
    return "".join(f"{name}=={version}\n" for name, version in picked(report).items()
                   if name not in leave_out)


if __name__ == "__main__":
    cmd, path = sys.argv[1:]
    assert cmd == "constraints", cmd
    sys.stdout.write(constraints(json.loads(Path(path).read_text())))
