"""splice.cub's first compiles (issue 37): a call on one tile length compiles every other
documented length of the same op and dtype in the same NVRTC program, each cut to what it
uses and cached on its own (``CudaSource.batch``), so that a sweep over sizes parses CCCL
once; the PTX of one instantiation is the same at every call site; a program that does not
compile with its other sizes falls back to the call's own; the values of a size compiled
along are right (CPU executor)."""

from __future__ import annotations

import logging

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice import cccl, toolchain
from splice.inputs import fragments
from support import kernels as K
from support.ptx_exec import run_build

f32 = ct.float32
ConstInt = ct.Constant[int]


@pytest.fixture(autouse=True)
def _cub_headers():
    if not cccl.include_dirs():
        pytest.skip(f"CUB headers not found: {cccl.INSTALL_HINT}")


@pytest.fixture
def nvrtc_calls(fresh_cache, monkeypatch):
    """The sources NVRTC compiles (PTX output), in an empty cache and process memo."""
    monkeypatch.setattr(fragments, "_memo", {})
    monkeypatch.setattr(fragments, "_compiled_along", {})
    calls: list[str] = []
    real = toolchain.nvrtc_compile

    def counting(source, name, options, **kw):
        calls.append(source.decode())
        return real(source, name, options, **kw)
    monkeypatch.setattr(toolchain, "nvrtc_compile", counting)
    return calls


@splice.kernel
def sort_kernel(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t))


@splice.kernel
def sort_kernel_elsewhere(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t))


@splice.kernel
def top_k_kernel(x, vals, idx, N: ConstInt, KK: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    v, i = splice.cub.top_k(t, KK)
    ct.store(vals, index=(ct.bid(0),), tile=v)
    ct.store(idx, index=(ct.bid(0),), tile=i)


def _sig(*arrays, consts=()):
    return K.signature(*(K.array(d) for d in arrays), *consts)


def _trampolines(source: str) -> list[str]:
    """The tile lengths a compiled source instantiates (its trampolines' comments)."""
    import re
    return re.findall(r"// tiles in shared memory, by reference: .* with tiles (\S+)\[(\d+)\]",
                      source)


def test_one_nvrtc_program_compiles_every_size_of_an_op(nvrtc_calls, caplog):
    with caplog.at_level(logging.INFO, logger="splice"):
        splice.compile(sort_kernel, _sig(f32, f32, consts=(512,)), "sm_90")
    assert len(nvrtc_calls) == 1
    sizes = sorted(int(n) for _, n in _trampolines(nvrtc_calls[0]))
    assert sizes == list(splice.cub.SIZES) == [128, 256, 512, 1024, 2048, 4096]
    # every other size is a hit (descending, another template, is not compiled along)
    for n in splice.cub.SIZES:
        b = splice.compile(sort_kernel, _sig(f32, f32, consts=(n,)), "sm_90")
        assert f"Li{n}E" in b.spliced_ptx
    assert len(nvrtc_calls) == 1, "a size compiled along was compiled again"
    # a size outside the documented ones compiles alone
    splice.compile(sort_kernel, _sig(f32, f32, consts=(8192,)), "sm_90")
    assert len(nvrtc_calls) == 2 and [n for _, n in _trampolines(nvrtc_calls[1])] == ["8192"]


def test_sizes_compiled_along_survive_a_new_process(nvrtc_calls):
    splice.compile(sort_kernel, _sig(f32, f32, consts=(128,)), "sm_90")
    assert len(nvrtc_calls) == 1
    fragments._memo.clear()                       # what a new process has: the disk cache
    splice.compile(sort_kernel, _sig(f32, f32, consts=(2048,)), "sm_90")
    assert len(nvrtc_calls) == 1


def test_sizes_compiled_along_without_a_cache(nvrtc_calls, monkeypatch):
    monkeypatch.setattr(fragments.cache, "store", lambda *a, **k: False)   # full, or off
    monkeypatch.setattr(fragments.cache, "load", lambda *a, **k: None)
    splice.compile(sort_kernel, _sig(f32, f32, consts=(256,)), "sm_90")
    splice.compile(sort_kernel, _sig(f32, f32, consts=(1024,)), "sm_90")
    assert len(nvrtc_calls) == 1


def test_one_instantiation_is_one_compile_at_every_call_site(nvrtc_calls):
    a = splice.compile(sort_kernel, _sig(f32, f32, consts=(1024,)), "sm_90")
    b = splice.compile(sort_kernel_elsewhere, _sig(f32, f32, consts=(1024,)), "sm_90")
    assert len(nvrtc_calls) == 1
    assert a.sites[1].extern == b.sites[1].extern


def test_top_k_compiles_along_only_sizes_that_hold_k(nvrtc_calls):
    splice.compile(top_k_kernel, _sig(f32, f32, ct.int32, consts=(1024, 512)), "sm_90")
    assert len(nvrtc_calls) == 1
    sizes = sorted(int(n) for _, n in _trampolines(nvrtc_calls[0]))
    assert sizes == [512, 1024, 2048, 4096]


def test_a_batch_that_does_not_compile_falls_back_to_the_call_alone(nvrtc_calls, monkeypatch):
    # top_k with sizes below k compiled along: static_assert(K <= N) fails for them
    monkeypatch.setattr(splice.cub, "_externs", {})
    real = splice.cub._extern
    monkeypatch.setattr(splice.cub, "_extern",
                        lambda name, sig, smallest=128: real(name, sig, 128))
    b = splice.compile(top_k_kernel, _sig(f32, f32, ct.int32, consts=(256, 256)), "sm_90")
    assert len(nvrtc_calls) == 2                 # the batch, then the call alone
    assert [n for _, n in _trampolines(nvrtc_calls[1])] == ["256"]
    assert "splice_cub5top_k" in b.spliced_ptx


def test_the_info_line_names_the_sizes_compiled_along(nvrtc_calls, caplog, monkeypatch):
    from splice.inputs import cuda_compile
    monkeypatch.setattr(cuda_compile.time, "perf_counter",
                        iter(range(0, 10 ** 6, 5)).__next__)   # every compile "slow"
    with caplog.at_level(logging.INFO, logger="splice"):
        splice.compile(sort_kernel, _sig(f32, f32, consts=(256,)), "sm_90")
    line = next(r.getMessage() for r in caplog.records if "NVRTC took" in r.getMessage())
    assert "'splice_cub::sort_keys<float, false>'" in line and "float32[256]" in line
    assert "its other sizes, with tiles float32[128], float32[128]; float32[512]" in line


@pytest.mark.parametrize("n", [256, 2048])
def test_a_size_compiled_along_sorts(nvrtc_calls, n):
    splice.compile(sort_kernel, _sig(f32, f32, consts=(128,)), "sm_90")
    build = splice.compile(sort_kernel, _sig(f32, f32, consts=(n,)), "sm_90")
    assert len(nvrtc_calls) == 1
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    x[3] = -0.0
    y = np.zeros_like(x)
    launch = run_build(build, (1,), x, y)
    assert not launch.approx
    np.testing.assert_array_equal(y, np.sort(x))
