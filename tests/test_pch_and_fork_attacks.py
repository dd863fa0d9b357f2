"""Attacks on NVRTC's PCH keyed by the state of the headers (splice.nvrtc_pch) and on the
fork that waits for NVRTC calls (splice.cuda_libs._Calls): each test here failed when
written (breaker5)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from splice import cccl, cuda_libs, nvrtc_pch
from splice.inputs import fragments, headers
from splice.inputs.externs import HEADER_PROVIDERS
from splice.inputs.fragments import CudaSource

_SRC = ('#include <cub/fake.cuh>\n'
        'extern "C" __device__ int f(int x) { return x + DEEP; }\n')


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache directory, process memo, walk memo and PCH state."""
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fragments, "_memo", {})
    monkeypatch.setattr(fragments, "_along", fragments._Along())
    monkeypatch.setattr(headers, "_walks", {})
    monkeypatch.setattr(nvrtc_pch, "_prefixes", set())
    monkeypatch.setattr(nvrtc_pch, "_state", {})
    return tmp_path


@pytest.fixture
def fake_cccl(monkeypatch, fresh) -> Path:
    d = fresh / "cccl"
    (d / "cub").mkdir(parents=True)
    monkeypatch.setattr(cccl, "include_dirs", lambda: [str(d)])
    return d


def _adds(frag: CudaSource) -> list[str]:
    return [ln.split()[-1] for ln in frag.module("sm_90").text.splitlines()
            if ln.strip().startswith("add.s32")]


def test_cccl_header_reached_through_a_macro_include_is_not_stale(fake_cccl):
    """CCCL itself includes headers through macros (thrust: ``#include
    __THRUST_DEVICE_SYSTEM_VECTOR_HEADER``). The include walk follows ``#include MACRO``
    only in the user's files, never in a toolkit header, so an edit (new size, new mtime)
    of a CCCL header reached that way changes neither the content key nor the PCH's
    directory: the edited header's new value is never compiled (old PTX under the key,
    and NVRTC's PCH of the old header)."""
    (fake_cccl / "cub" / "fake.cuh").write_text(
        "#pragma once\n#define FAKE_DEEP_HEADER <cub/deep.cuh>\n#include FAKE_DEEP_HEADER\n")
    deep = fake_cccl / "cub" / "deep.cuh"
    got = []
    for value in (1, 22, 333):
        deep.write_text(f"#pragma once\n#define DEEP {value}\n")
        os.utime(deep, ns=(time.time_ns() + value * 10**9,) * 2)
        got.append(_adds(CudaSource(text=_SRC, where="x.py:1", providers=HEADER_PROVIDERS)))
    assert got == [["1;"], ["22;"], ["333;"]]
