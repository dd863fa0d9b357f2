"""Tile IR bytecode of every version cuTile can write with the installed tileiras: 13.5 is a
dev-only version in cuda-tile 1.7 (written when cuTile's dev features are on and tileiras 13.5
accepts it); splice's marker discovery, rewrite and proof must work on it as on 13.4."""

from __future__ import annotations

import tempfile

import cuda.tile as ct
import numpy as np
import pytest
from cuda.tile import _compile as cutile_compile

import splice
from splice.system import _cutile
from support import kernels as K
from support.exact import fma
from support.ptx_exec import run_build

f32 = ct.float32
SIG = K.signature(K.array(f32), K.array(f32), K.array(f32), K.scalar(f32), 256)


@pytest.fixture
def dev_bytecode(monkeypatch):
    """cuTile with its dev features on: it probes tileiras for the newest bytecode it takes,
    dev versions included (its probe is cached per process: cleared before and after)."""
    monkeypatch.setattr(cutile_compile, "dev_features_enabled", lambda: True)
    cutile_compile._get_max_supported_bytecode_version.cache_clear()
    newest = cutile_compile._get_max_supported_bytecode_version(tempfile.gettempdir(),
                                                                allow_dev=True)
    yield newest
    cutile_compile._get_max_supported_bytecode_version.cache_clear()


def _written_versions(monkeypatch, tmp_path) -> list[tuple[int, int]]:
    """The (major, minor) in the header of every bytecode module splice lowers (a cache of
    its own: a cubin cached from the other version is never a hit, but nothing is shared)."""
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path / "cache"))
    seen: list[tuple[int, int]] = []
    real = _cutile.lower_to_bytecode

    def spy(*args, **kwargs):
        lowered = real(*args, **kwargs)
        assert lowered.bytecode[:8] == b"\x7fTileIR\x00"
        seen.append((lowered.bytecode[8], lowered.bytecode[9]))
        return lowered
    monkeypatch.setattr(_cutile, "lower_to_bytecode", spy)
    return seen


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dev_bytecode_13_5_is_spliced_and_computes(dev_bytecode, monkeypatch, tmp_path, arch):
    if dev_bytecode.value < 130500:
        pytest.skip(f"tileiras takes bytecode up to {dev_bytecode.as_string()} (13.5 needs "
                    f"tileiras 13.5)")
    seen = _written_versions(monkeypatch, tmp_path)
    b = splice.compile(K.saxpy_kernel, SIG, arch)
    assert (13, 5) in seen, seen
    [site] = b.sites
    assert site.inlined and "fma.rn.f32" in b.spliced_ptx
    if arch == "sm_80":  # the executor runs the non-TMA shape
        n = 512
        rng = np.random.default_rng(5)
        x, y = rng.standard_normal((2, n)).astype(np.float32)
        out = np.zeros(n, np.float32)
        run_build(b, (n // 256,), x, y, out, 1.5)
        np.testing.assert_array_equal(out, fma(np.float32(1.5), x, y))


def test_default_bytecode_is_a_released_version(monkeypatch, tmp_path):
    seen = _written_versions(monkeypatch, tmp_path)
    splice.compile(K.saxpy_kernel, SIG, "sm_90")
    assert seen and all(v <= (13, 4) for v in seen), seen
