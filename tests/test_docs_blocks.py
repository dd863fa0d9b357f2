"""Every ```python block of README.md and docs/**/*.md, and every ```python example in a
public docstring, runs ALONE, as printed, in a fresh Python process in a temporary directory;
every script under examples/ runs as a script (the tutorials; docs/examples.md shows them).

A block whose first line is ``# requires: gpu`` needs a GPU (skipped without one, run in the
GPU run, where it asserts its values); ``# requires: cccl`` needs CCCL's headers (CUB: skipped
where ``splice.cccl.include_dirs()`` finds none), ``# requires: nvshmem`` NVSHMEM's headers
(``pip install 'splice[nvshmem]'``). Every other block runs everywhere: without
a GPU it compiles for sm_90 and must print something. Nothing is shared between blocks but the
on-disk cache of the test session (``$SPLICE_CACHE_DIR``)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.env import python_env

ROOT = Path(__file__).resolve().parent.parent
_FENCE = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)
_REQUIRES = re.compile(r"\A# requires: (\w+)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _dedent(block: str, indent: str) -> str:
    return "".join(ln[len(indent):] if ln.startswith(indent) else ln
                   for ln in block.splitlines(keepends=True))


def page_blocks() -> list[tuple[str, str]]:
    """(``page:line``, code) for every ```python block of README.md and docs/**/*.md."""
    found = []
    for page in _pages():
        text = page.read_text()
        for m in _FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 2
            found.append((f"{page.relative_to(ROOT)}:{line}", _dedent(m.group(2), m.group(1))))
    return found


def _public_callables():
    import splice
    try:
        import splice.jax
        yield "splice.jax.cutile_call", splice.jax.cutile_call
    except ImportError:     # JAX is not installed: its example runs where it is
        pass
    for name in splice.__all__:
        obj = getattr(splice, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"splice.{name}", obj
        for attr in ("from_ptx", "from_ltoir", "from_object", "extern"):
            member = getattr(obj, attr, None) if obj is not None else None
            if callable(member) and not inspect.ismodule(obj):
                yield f"splice.{name}.{attr}", member


def docstring_blocks() -> list[tuple[str, str]]:
    """(``splice.name``, code) for every ```python example in a public docstring."""
    found = []
    for qualname, obj in _public_callables():
        doc = inspect.getdoc(obj) or ""
        for i, m in enumerate(_FENCE.finditer(doc)):
            found.append((f"{qualname}#{i}", _dedent(m.group(2), m.group(1))))
    return found


def _marks(code: str):
    need = _REQUIRES.match(code)
    if need is None:
        return []
    if need.group(1) == "gpu":
        return [pytest.mark.gpu]
    if need.group(1) == "cccl":
        from splice.inputs import cccl
        return [pytest.mark.skipif(not cccl.include_dirs(), reason="no CCCL installed")]
    if need.group(1) == "nvshmem":
        from splice.inputs import cccl, nvshmem
        return [pytest.mark.skipif(nvshmem.header_version() is None or not cccl.include_dirs(),
                                   reason="no NVSHMEM headers or CCCL installed")]
    raise AssertionError(f"unknown '# requires: {need.group(1)}'")


def _params(blocks):
    return [pytest.param(code, id=where, marks=_marks(code)) for where, code in blocks]


def run_block(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "block.py"          # cuTile reads a kernel's source from its file
    script.write_text(code)
    env = python_env(ROOT, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600)


@pytest.mark.parametrize("code", _params(page_blocks()))
def test_page_block_runs_as_printed(code, tmp_path):
    out = run_block(code, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip(), "a block prints or checks something"


@pytest.mark.parametrize("code", _params(docstring_blocks()))
def test_docstring_example_runs_as_printed(code, tmp_path):
    out = run_block(code, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip(), "an example prints or checks something"


def test_blocks_are_found():
    # the runner sees the README's example and the guide's pages: a fence it misses runs
    # nowhere
    where = [w for w, _ in page_blocks()]
    assert any(w.startswith("README.md:") for w in where)
    assert sum(w.startswith("docs/") for w, _ in page_blocks()) >= 20
    assert len(docstring_blocks()) >= 10


def test_every_public_function_has_an_example():
    missing = [q for q, obj in _public_callables()
               if inspect.isfunction(obj) and "```python" not in (inspect.getdoc(obj) or "")]
    assert missing == []


# ---------------------------------------------------------------------------------------------
# The examples: the tutorials, each runnable as a script

EXAMPLES = ROOT / "examples"
_EXAMPLE_NEEDS = {"nvshmem_allgather.py": "nvshmem", "row_sort.py": "cccl",
                  "row_top_k.py": "cccl", "block_reduce_rows.py": "cccl",
                  **{p.name: "cccl" for p in (EXAMPLES / "recipes").glob("*.py")}}


def example_scripts() -> list[Path]:
    """Every example script (not the helper that regenerates a committed input)."""
    return sorted(p for p in EXAMPLES.rglob("*.py") if p.name != "make_ptx.py")


def _example_params():
    out = []
    for p in example_scripts():
        need = _EXAMPLE_NEEDS.get(p.name)
        marks = _marks(f"# requires: {need}") if need else []
        out.append(pytest.param(p, id=str(p.relative_to(ROOT)), marks=marks))
    return out


def _run_example(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          cwd=EXAMPLES, env=python_env(ROOT), timeout=600)


@pytest.mark.parametrize("script", _example_params())
def test_example_compiles_and_reports_its_call_sites(script):
    out = _run_example(script, "--compile-only")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "site 0:" in out.stdout
    assert "in PTX" in out.stdout and "SASS" in out.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("script", [p for p in example_scripts()
                                    if p.name != "nvshmem_allgather.py"],   # several GPUs
                         ids=lambda p: p.name)
def test_example_runs_and_checks_on_the_gpu(script):
    pytest.importorskip("torch")
    out = _run_example(script)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK" in out.stdout


def test_every_example_is_on_the_examples_page():
    """Every script is shown whole on the examples page, or on a recipe's page (docs/recipes/,
    for examples/recipes/)."""
    pages = "".join(p.read_text() for p in [ROOT / "docs" / "examples.md",
                                             *(ROOT / "docs" / "recipes").glob("*.md")])
    missing = [str(p.relative_to(ROOT)) for p in example_scripts()
               if f'--8<-- "{p.relative_to(ROOT)}"' not in pages]
    assert missing == []


def test_committed_ptx_matches_its_source():
    """examples/ptx_import/saxpy.ptx is what make_ptx.py generates from saxpy.cu (modulo
    the NVRTC version line)."""
    from splice.system.toolchain import nvrtc_compile
    d = EXAMPLES / "ptx_import"
    ptx, _ = nvrtc_compile((d / "saxpy.cu").read_bytes(), "saxpy.cu",
                           ["-arch=sm_80", "-rdc=true"])

    def body(text):  # without the NVRTC banner and .version (NVRTC 13.0 writes 9.0)
        return [ln for ln in text.splitlines()
                if not ln.startswith("//") and not ln.startswith(".version")]
    assert body(ptx) == body((d / "saxpy.ptx").read_text())


# ---------------------------------------------------------------------------------------------
# The pages cover what they must

def test_every_error_class_has_a_section():
    import splice
    page = (ROOT / "docs" / "errors.md").read_text()
    errors = [n for n in splice.__all__ if n.startswith("Splice") and n.endswith("Error")
              and n != "SpliceError"]
    assert [n for n in errors if f"## `{n}`" not in page] == []


def test_readme_s_install_lines_are_the_ones_ci_resolves():
    # tests/test_install_resolution.py dry-runs these lines (.ci/run): PyTorch's is a console
    # line of the Install section, JAX's and CuPy's are named in its text
    from support.resolution import FRAMEWORKS, PYTORCH_LINE
    readme = (ROOT / "README.md").read_text()
    install = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    console = [ln.split("#", 1)[0].strip()
               for block in re.findall(r"```console\n(.*?)```", install, re.S)
               for ln in block.splitlines()]
    assert PYTORCH_LINE in console
    for framework in FRAMEWORKS[1:]:
        assert f"`{framework.line}`" in install, framework.line


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")]
    assert [p for p in pages if p not in nav] == []


def test_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_every_public_name_is_in_the_reference():
    import splice
    page = (ROOT / "docs" / "reference.md").read_text()
    missing = [n for n in splice.__all__ if n != "__version__" and f"::: splice.{n}\n" not in page]
    assert missing == []
