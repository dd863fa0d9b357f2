"""The README's snippets run: those marked ``<!-- readme-snippet: NAME -->``, each after the
"setup" snippet, in a fresh Python in a temporary directory. CPU ones run everywhere, GPU ones
(PyTorch, CUDA graphs, torch.compile, JAX) on the GPU machine."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.env import python_env

ROOT = Path(__file__).resolve().parent.parent
_SNIPPET = re.compile(r"<!-- readme-snippet: (\w+) -->\n```python\n(.*?)```", re.S)


def snippets() -> dict[str, str]:
    return dict(_SNIPPET.findall((ROOT / "README.md").read_text()))


def _run(name: str, tmp_path: Path) -> subprocess.CompletedProcess:
    code = snippets()["setup"] + "\n" + snippets()[name]
    env = python_env(ROOT, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    script = tmp_path / f"readme_{name}.py"     # cuTile reads the kernel's source file
    script.write_text(code)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600)


def test_every_snippet_is_found():
    assert set(snippets()) == {"setup", "aot", "torch", "torch_compile", "jax"}


def test_aot_snippet_writes_a_cubin(tmp_path):
    out = _run("aot", tmp_path)
    assert out.returncode == 0, out.stderr
    from splice.driver.verify import elf_symbols
    blob = (tmp_path / "scale.cubin").read_bytes()
    assert any(n.startswith("scale_") for n in elf_symbols(blob))
    assert not any("__splice_marker" in n for n in elf_symbols(blob))


@pytest.mark.gpu
@pytest.mark.parametrize("name, needs", [("torch", "torch"), ("torch_compile", "torch"),
                                         ("jax", "jax")])
def test_gpu_snippet_runs(name, needs, tmp_path):
    pytest.importorskip(needs)
    out = _run(name, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
