import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Every test session gets its own cache directory unless one is given.
if "SPLICE_CACHE_DIR" not in os.environ:
    os.environ["SPLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="splice-test-cache-")


def _gpu_available() -> bool:
    try:
        from cuda.bindings import driver
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, n = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and n > 0
    except Exception:
        return False


HAVE_GPU = _gpu_available()


def pytest_collection_modifyitems(config, items):
    _skip_unless_asked(config, items, "slow", "SPLICE_SLOW_TESTS")
    _skip_unless_asked(config, items, "resolution", "SPLICE_RESOLUTION_CHECK")
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _skip_unless_asked(config, items, marker: str, variable: str):
    """``marker`` tests (``slow``: the full splice.cub shape matrix; ``resolution``: what pip
    picks from the package index) run only under ``-m marker`` (or an expression naming
    it) or ``variable=1``."""
    if marker in (config.getoption("markexpr") or "") or \
            os.environ.get(variable, "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason=f"{marker}: run with -m {marker} or {variable}=1")
    for item in items:
        if marker in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def torch():
    """torch, for GPU tests (skips without torch or a GPU)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    return torch


@pytest.fixture(scope="module")
def dev(torch):
    """A :class:`support.gpu.Dev` (skips without torch or a GPU)."""
    from support.gpu import Dev
    return Dev(torch)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory for this test (``$SPLICE_CACHE_DIR``)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(d))
    return d


@pytest.fixture
def one_fma_rounding(monkeypatch):
    """Every pure site's fma marker rounds to nearest (as before sites got different
    roundings): LLVM then merges the markers of the arms of an if/else, so that the tests of
    the atomic-marker fallback and of the merged-arm proof still meet those forms."""
    from splice.forms import base
    monkeypatch.setattr(base, "FMA_ROUNDINGS", ("rn",))
