"""Installing splice beside PyTorch, JAX or CuPy (their CUDA 13 builds) keeps the build pip
picks for the framework alone: splice's requirements never make pip backtrack to a CPU-only or
older one (issue 46: ``pip install torch <checkout>`` gave torch 2.13.0+cpu while splice
required the cuda-toolkit metapackage).

The ``resolution`` tests ask the package index (``pip install --dry-run --report``: metadata
only, nothing installed), so they run only under ``-m resolution`` or
``SPLICE_RESOLUTION_CHECK=1`` (``.ci/run``); their reports go to
``$SPLICE_RESOLUTION_REPORTS`` when it names a directory (CI installs splice's side of the
torch one for its PyTorch-mix run)."""

import os
from pathlib import Path

import pytest

from support.resolution import (
    FRAMEWORKS,
    PYTORCH_LINE,
    ROOT,
    constraints,
    dry_run,
    picked,
    pip_args,
)


@pytest.fixture
def reports(tmp_path) -> Path:
    where = os.environ.get("SPLICE_RESOLUTION_REPORTS")
    return Path(where) if where else tmp_path


#: A project each framework's CUDA build brings: without it both dry runs could agree on a
#: CPU-only build and prove nothing.
CUDA_BUILD = {"torch": "cuda-toolkit", "jax": "jax-cuda13-plugin", "cupy": "cupy-cuda13x"}


@pytest.mark.resolution
@pytest.mark.parametrize("framework", FRAMEWORKS, ids=lambda f: f.name)
def test_splice_keeps_the_framework_pip_picks_alone(framework, reports):
    alone, t_alone = dry_run(list(framework.alone), reports / f"{framework.name}.json")
    both, t_both = dry_run(pip_args(framework.line), reports / f"{framework.name}-with-splice.json")
    a, b = picked(alone), picked(both)
    assert CUDA_BUILD[framework.name] in a, sorted(a)
    assert "splice" in b
    assert {n: b.get(n) for n in framework.compared} == {n: a.get(n) for n in framework.compared}
    print(f"{framework.name}: {', '.join(f'{n} {a[n]}' for n in framework.compared if n in a)}"
          f"; beside splice: NVRTC {b.get('nvidia-cuda-nvrtc')}, nvJitLink "
          f"{b.get('nvidia-nvjitlink')}, tileiras {b.get('nvidia-cuda-tileiras')} "
          f"(dry runs {t_alone:.0f} s and {t_both:.0f} s)")


def _report(**versions):
    return {"install": [{"metadata": {"name": n, "version": v}, "download_info": {"url": ""}}
                        for n, v in versions.items()]}


def test_constraints_pin_splice_s_side_of_a_resolution_but_not_the_framework():
    report = _report(torch="2.14.1", **{"nvidia-cuda-nvrtc": "13.0.88",
                                        "Nvidia-NvJitLink": "13.5.37", "splice": "0.1.0"})
    assert constraints(report) == "nvidia-cuda-nvrtc==13.0.88\nnvidia-nvjitlink==13.5.37\n"


def test_pip_args_make_the_dot_the_checkout():
    assert pip_args(PYTORCH_LINE) == ["torch", str(ROOT)]
    assert pip_args("pip install 'jax[cuda13]' .  # a comment") == ["jax[cuda13]", str(ROOT)]
