"""The toolchain sets splice is tested on (splice/compat.py) and doctor's verdict on them."""

import pytest

from splice import compat
from splice.compat import Component


def _set(toolkit=(13, 5), cutile=(1, 7), **override):
    parts = {"cuda-tile": cutile, **{n: toolkit for n in compat.TOOLKIT_PARTS}, **override}
    return [Component(n, v, "missing" if v is None else ".".join(map(str, v)))
            for n, v in parts.items()]


@pytest.mark.parametrize("minor", compat.TESTED_TOOLKITS)
def test_every_tested_toolkit_is_a_tested_set(minor):
    tested, text = compat.assess(_set(minor))
    assert tested, text
    assert f"CUDA {minor[0]}.{minor[1]} toolchain" in text


def test_the_tested_toolkits_are_13_4_and_13_5():
    # the pins in pyproject.toml admit exactly these (>=13.4,<13.6)
    assert compat.TESTED_TOOLKITS == ((13, 4), (13, 5))


def test_a_part_of_another_minor_is_untested_and_the_fix_names_tileiras_minor():
    tested, text = compat.assess(_set((13, 5), NVRTC=(13, 4)))
    assert not tested
    assert "NVRTC 13.4" in text and "tileiras" not in text.split("Fix:")[0]
    assert "cuda-toolkit[tileiras,nvcc,nvvm,nvrtc,nvjitlink,nvdisasm]==13.5.*" in text
    assert "'nvidia-nvjitlink==13.5.*'" in text


def test_an_untested_toolkit_asks_for_the_newest_tested_one():
    tested, text = compat.assess(_set((13, 6)))
    assert not tested
    for part in compat.TOOLKIT_PARTS:
        assert f"{part} 13.6" in text
    assert "==13.5.*" in text


def test_an_untested_cutile_is_named():
    tested, text = compat.assess(_set((13, 4), cutile=(1, 8)))
    assert not tested and "cuda-tile 1.8" in text and "==13.4.*" in text


def test_a_missing_optional_part_does_not_make_the_set_untested():
    tested, text = compat.assess(_set((13, 4), nvdisasm=None))
    assert tested, text


@pytest.mark.parametrize("text, want", [
    ("Cuda compilation tools, release 13.5, V13.5.37", (13, 5)),
    ("Cuda compilation tools, release 13.4, V13.4.92", (13, 4)),
    ("tileiras: no version", None),
])
def test_release_reads_the_tool_version_line(text, want):
    assert compat.release(text) == want


def test_installed_reports_the_running_toolchain():
    from cuda.bindings import nvjitlink

    from splice.system import toolchain
    by = {c.name: c for c in compat.installed()}
    assert by["tileiras"].version == compat.release(toolchain.tileiras_version())
    assert by["ptxas"].version == compat.release(toolchain.ptxas_version())
    assert by["NVRTC"].version == toolchain.nvrtc_version()
    assert by["nvJitLink"].version == tuple(nvjitlink.version())
    assert by["tileiras"].version in compat.TESTED_TOOLKITS  # CI's venvs are tested sets
