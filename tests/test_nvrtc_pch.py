"""splice.system.nvrtc_pch: NVRTC's automatic precompiled header for CUDA C that includes CCCL --
the same PTX as without it, written only to a private directory of splice's cache, counted
against the cache's bound -- and the INFO line of a compile that takes more than a second."""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

import pytest

from splice.declare.externs import HEADER_PROVIDERS
from splice.inputs import cccl, cuda_compile, fragments, headers
from splice.inputs.fragments import CudaSource
from splice.system import cache, nvrtc_pch, toolchain

_SOURCE = """#include <cuda/std/limits>
extern "C" __device__ int biggest(int x) {
    return x < cuda::std::numeric_limits<int>::max() ? x + 1 : x; }
"""


@pytest.fixture
def fresh_pch(monkeypatch, tmp_path):
    """A new PCH state (no directory chosen yet) and an empty cache directory."""
    root = tmp_path / "cache"
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(root))
    monkeypatch.setattr(nvrtc_pch, "_state", {})
    return root


def _options():
    if not cccl.include_dirs():
        pytest.skip(f"CCCL headers not found: {cccl.INSTALL_HINT}")
    return ["-arch=sm_90a", "-rdc=true", "-std=c++17",
            *(f"-I{d}" for d in cccl.include_dirs()), f"-I{toolchain.cuda_include_dir()}"]


def test_wanted_from_the_second_compile_of_cccl_includes(monkeypatch):
    monkeypatch.setattr(nvrtc_pch, "_prefixes", set())
    cub = "#  include <cub/block/block_scan.cuh>\n#include <cuda_fp16.h>\nint f(int x);\n"
    assert [nvrtc_pch.wanted(cub, ["-arch=sm_90a"]) for _ in range(3)] == [False, True, True]
    # another body after the same includes: the same PCH; other options: another
    assert nvrtc_pch.wanted(cub + "int g(int x);\n", ["-arch=sm_90a"])
    assert not nvrtc_pch.wanted(cub, ["-arch=sm_100a"])
    plain = "#include <cuda_fp16.h>\n// #include <cub/cub.cuh> no\n"
    assert [nvrtc_pch.wanted(plain, []) for _ in range(2)] == [False, False]
    # a user's header among them (quoted, or not the toolkit's): never
    for mine in ('#include "mine.h"\n', "#include <mine/cub.h>\n"):
        assert [nvrtc_pch.wanted(mine + cub, []) for _ in range(2)] == [False, False]


def test_pch_gives_the_same_ptx_from_a_private_directory(fresh_pch):
    opts = _options()
    with_pch = toolchain.nvrtc_compile(_SOURCE.encode(), "a.cu", opts, pch=True)[0]
    d = nvrtc_pch._state["dir"]
    if d is None:
        pytest.fail("no PCH directory in a fresh private cache")
    assert d.parent == fresh_pch and d.name.startswith("pch-") and d.name != "pch-"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert list(d.glob("*.pch")), "NVRTC created no PCH (heap too small?)"
    made = sum(p.stat().st_size for p in d.glob("*.pch"))   # 19 MB: against the bound
    assert cache.size()[1] >= made and int((fresh_pch / ".size").read_text()) >= made
    again = toolchain.nvrtc_compile(_SOURCE.encode(), "a.cu", opts, pch=True)[0]
    without = toolchain.nvrtc_compile(_SOURCE.encode(), "a.cu", opts)[0]
    assert with_pch == again == without


def test_no_pch_when_the_cache_directory_is_writable_by_others(fresh_pch):
    from cuda.bindings import nvrtc
    fresh_pch.mkdir(mode=0o700)
    os.chmod(fresh_pch, 0o777)
    with nvrtc_pch._lock:
        assert nvrtc_pch.options(nvrtc) == []
    assert list(fresh_pch.iterdir()) == []


def test_compile_of_more_than_a_second_logs_what_it_compiles(monkeypatch, caplog):
    def slow(source, name, options, pch=False):
        time.sleep(1.05)
        return ".version 8.0\n", ""
    monkeypatch.setattr(toolchain, "nvrtc_compile", slow)
    with caplog.at_level(logging.INFO, logger="splice"):
        cuda_compile.compile_source("int x;\n", "x.cu", "sm_90a", [], declared=(), dlto=False,
                                    roots=(), providers=(), what="CUDA C source declared at t:1")
    [rec] = [r for r in caplog.records if "NVRTC took" in r.getMessage()]
    assert rec.levelno == logging.INFO
    assert "CUDA C source declared at t:1" in rec.getMessage() and "sm_90a" in rec.getMessage()


# --- a header edited while the process runs (found by breaker4: NVRTC loaded the PCH of
# the header as it was, and the new key got the old PTX) --------------------------------

_FAKE_SRC = ('#include <cub/fake.cuh>\n'
       'extern "C" __device__ int f(int x) { return x + DEEP; }\n')


@pytest.fixture
def fresh(fresh_cache, monkeypatch):
    """An empty disk cache, process memo, walk memo and PCH history."""
    monkeypatch.setattr(fragments, "_memo", {})
    monkeypatch.setattr(fragments, "_along", fragments._Along())
    monkeypatch.setattr(headers, "_walks", {})
    monkeypatch.setattr(nvrtc_pch, "_prefixes", set())
    return fresh_cache


@pytest.fixture
def fake_cccl(monkeypatch, tmp_path, fresh) -> Path:
    """An installed CCCL holding <cub/fake.cuh> (a name splice's PCH takes for CCCL's)."""
    d = tmp_path / "cccl"
    (d / "cub").mkdir(parents=True)
    (d / "cub" / "fake.cuh").write_text("#pragma once\n#define DEEP 1\n")
    monkeypatch.setattr(cccl, "include_dirs", lambda: [str(d)])
    return d


def _adds(frag: CudaSource) -> list[str]:
    return [ln.split()[-1] for ln in frag.module("sm_90").text.splitlines()
            if ln.strip().startswith("add.s32")]


def _frag(**kw) -> CudaSource:
    return CudaSource(text=kw.pop("text", _FAKE_SRC), where="x.py:1", providers=HEADER_PROVIDERS,
                      **kw)



def test_an_edited_cccl_header_is_not_served_from_nvrtcs_pch(fake_cccl):
    """An edit changes the key (size, mtime) and the state of the headers, which names
    the PCH's directory: NVRTC creates a PCH for the new state rather than loading the
    old one, whose header it does not check (before: the new key got the old PTX, and
    kept it on disk)."""
    header = fake_cccl / "cub" / "fake.cuh"
    for value in (1, 22, 333):
        header.write_text(f"#pragma once\n#define DEEP {value}\n")
        assert _adds(_frag()) == [f"{value};"]


def test_an_edited_user_header_shadowing_cccl_is_not_served_from_nvrtcs_pch(fake_cccl,
                                                                           tmp_path):
    """A user -I directory that shadows <cub/...> (the documented way to patch one CUB
    header; keyed by content): a source with a user header compiles without the PCH."""
    user = tmp_path / "user"
    (user / "cub").mkdir(parents=True)
    for value in (7, 8, 9):
        (user / "cub" / "fake.cuh").write_text(f"#pragma once\n#define DEEP {value}\n")
        assert _adds(_frag(include_dirs=(str(user),))) == [f"{value};"]


