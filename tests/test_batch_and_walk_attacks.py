"""Attacks on the remembered include walk (splice.inputs.headers._walks), splice.cub's
batched compiles (splice.inputs.fragments._Along) and the PTX they give: each test here
failed when written (breaker4)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from splice import cccl, nvrtc_pch
from splice.inputs import fragments, headers
from splice.inputs.externs import HEADER_PROVIDERS
from splice.inputs.fragments import CudaSource

SRC = ('#include <cub/fake.cuh>\n'
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
    return CudaSource(text=kw.pop("text", SRC), where="x.py:1", providers=HEADER_PROVIDERS,
                      **kw)


# --- NVRTC's PCH (splice.nvrtc_pch) ------------------------------------------------------

def test_an_edited_cccl_header_is_not_served_from_nvrtcs_pch(fake_cccl):
    """The key changes with the edit (size, mtime), NVRTC compiles again, but from the
    second compile on with -pch: NVRTC loads the PCH of the header as it was (it does not
    check the header), and the stale PTX is cached under the new key. A kernel engineer
    patching an installed CUB in a notebook gets the old code, silently, from then on."""
    header = fake_cccl / "cub" / "fake.cuh"
    for value in (1, 22, 333):
        header.write_text(f"#pragma once\n#define DEEP {value}\n")
        assert _adds(_frag()) == [f"{value};"]


def test_an_edited_user_header_shadowing_cccl_is_not_served_from_nvrtcs_pch(fake_cccl,
                                                                           tmp_path):
    """A user -I directory that shadows <cub/...> (keyed by content, the documented way to
    patch one CUB header): nvrtc_pch.wanted looks only at the source's own #include names,
    so the user's header goes into the PCH, and its edits are not seen."""
    user = tmp_path / "user"
    (user / "cub").mkdir(parents=True)
    for value in (7, 8, 9):
        (user / "cub" / "fake.cuh").write_text(f"#pragma once\n#define DEEP {value}\n")
        assert _adds(_frag(include_dirs=(str(user),))) == [f"{value};"]
