"""splice.cub's first compiles (issue 37): a call on one tile length compiles every other
documented length of the same op and dtype in the same NVRTC program, each cut to what it
uses and cached on its own (``CudaSource.batch``), so that a sweep over sizes parses CCCL
once -- also when two sizes ask at once (one kernel, two threads) and when the disk cache
is off or too small to hold them; the PTX of one instantiation is the same at every call
site; a program that does not compile with its other sizes falls back to the call's own;
the values of a size compiled along are right (CPU executor)."""

from __future__ import annotations

import logging
import os
import threading

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.inputs import cccl, fragments
from splice.system import toolchain
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
    monkeypatch.setattr(fragments, "_along", fragments._Along())
    calls: list[str] = []
    lock = threading.Lock()
    real = toolchain.nvrtc_compile

    def counting(source, name, options, **kw):
        with lock:
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
    monkeypatch.setattr(fragments.cache, "store", lambda *a, **k: False)   # off
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


def test_a_batch_that_does_not_compile_falls_back_to_the_call_alone(nvrtc_calls, monkeypatch,
                                                                   fresh_cache):
    # top_k with sizes below k compiled along: static_assert(K <= N) fails for them
    monkeypatch.setattr(splice.cub, "_externs", {})
    real = splice.cub._extern
    monkeypatch.setattr(splice.cub, "_extern",
                        lambda name, sig, smallest=128: real(name, sig, 128))
    b = splice.compile(top_k_kernel, _sig(f32, f32, ct.int32, consts=(256, 256)), "sm_90")
    assert len(nvrtc_calls) == 2                 # the batch, then the call alone
    assert [n for _, n in _trampolines(nvrtc_calls[1])] == ["256"]
    assert "splice_cub5top_k" in b.spliced_ptx
    # a batch that failed is not tried again: a call whose own code does not compile
    # (compiled ahead, then again in the build) runs it once
    monkeypatch.setattr(fragments, "_memo", {})
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(fresh_cache.parent / "another"))
    splice.compile(top_k_kernel, _sig(f32, f32, ct.int32, consts=(256, 256)), "sm_90")
    assert len(nvrtc_calls) == 3


def test_the_info_line_names_the_sizes_compiled_along(nvrtc_calls, caplog, monkeypatch):
    from splice.inputs import cuda_compile
    monkeypatch.setattr(cuda_compile.time, "perf_counter",
                        iter(range(0, 10 ** 6, 5)).__next__)   # every compile "slow"
    with caplog.at_level(logging.INFO, logger="splice"):
        splice.compile(sort_kernel, _sig(f32, f32, consts=(256,)), "sm_90")
    line = next(r.getMessage() for r in caplog.records if "NVRTC took" in r.getMessage())
    assert "'splice_cub::sort_keys<float, false>'" in line and "float32[256]" in line
    assert "its other sizes, with tiles float32[128], float32[128]; float32[512]" in line


@pytest.mark.parametrize("n", [256, 1024])
def test_a_size_compiled_along_is_the_code_compiled_alone(nvrtc_calls, monkeypatch, tmp_path,
                                                          n):
    """Batching changes how many sizes NVRTC compiles at once, not the code of any: the
    kernel with float32[n] cut out of the six-size program is byte for byte the kernel
    with float32[n] compiled alone."""
    along = splice.compile(sort_kernel, _sig(f32, f32, consts=(n,)), "sm_90").spliced_ptx
    from splice.inputs import tile_fragment
    monkeypatch.setattr(tile_fragment, "_other_sizes", lambda ext, shapes: [])
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path / "another"))
    monkeypatch.setattr(fragments, "_memo", {})
    monkeypatch.setattr(fragments, "_along", fragments._Along())
    alone = splice.compile(sort_kernel, _sig(f32, f32, consts=(n,)), "sm_90").spliced_ptx
    assert [len(_trampolines(c)) for c in nvrtc_calls] == [6, 1]
    assert alone == along


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


# --- one program, also when two sizes ask at once or the cache cannot keep them ----------
# (found by trying to break it: each compiled the six-size program more than once)

def _instances(calls) -> list[int]:
    return [len(_trampolines(c)) for c in calls]


@splice.kernel
def two_sizes_kernel(x, y, z, N: ConstInt, M: ConstInt):
    a = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    b = ct.load(x, index=(ct.bid(0),), shape=(M,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(a))
    ct.store(z, index=(ct.bid(0),), tile=splice.cub.sort(b))


def test_two_sizes_of_one_op_in_one_kernel_compile_cub_once(nvrtc_calls):
    """Their fragments compile ahead in parallel threads: the second waits for the first's
    program, which holds its size."""
    build = splice.compile(two_sizes_kernel, _sig(f32, f32, f32, consts=(256, 512)), "sm_90")
    assert _instances(nvrtc_calls) == [6]
    x = np.random.default_rng(5).standard_normal(512).astype(np.float32)
    y, z = np.zeros(256, np.float32), np.zeros(512, np.float32)
    run_build(build, (1,), x, y, z)
    np.testing.assert_array_equal(y, np.sort(x[:256]))
    np.testing.assert_array_equal(z, np.sort(x))


def test_threads_compiling_sizes_of_one_op_compile_cub_once(nvrtc_calls):
    errors: list[BaseException] = []

    def compile_one(n):
        try:
            splice.compile(sort_kernel, _sig(f32, f32, consts=(n,)), "sm_90")
        except Exception as e:      # reported below
            errors.append(e)
    threads = [threading.Thread(target=compile_one, args=(n,)) for n in (128, 1024, 4096)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _instances(nvrtc_calls) == [6]


def test_a_sweep_under_a_small_cache_bound_compiles_cub_once(nvrtc_calls, monkeypatch):
    """A store past $SPLICE_CACHE_MAX_BYTES succeeds and evicts the sizes its batch has
    just stored: they are kept in memory too, until their calls take them."""
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", "200000")     # about two entries
    for n in splice.cub.SIZES:
        splice.compile(sort_kernel, _sig(f32, f32, consts=(n,)), "sm_90")
    assert _instances(nvrtc_calls) == [6]


def test_what_is_kept_in_memory_is_bounded(monkeypatch):
    along = fragments._Along()
    monkeypatch.setattr(fragments._Along, "LIMIT", 10)
    claim = along.claim(["own", "a", "b", "c"])
    assert claim is not None and along.claim(["a"]) is None      # a: being compiled
    along.done(claim, {"a": "xxxx", "b": "yyyy", "c": "zzzz"})
    assert along.take("a") is None and along.take("b") == "yyyy"   # the oldest dropped
    assert along.take("b") is None and along.claim(["a"]) is not None


def test_a_forked_child_does_not_wait_for_its_parents_batch():
    along = fragments._Along()
    claim = along.claim(["own", "a"])
    assert claim is not None
    along.forget()                    # what os.register_at_fork runs in the child
    assert along.take("a") is None    # returns at once: nothing pending


@pytest.mark.gpu
def test_gpu_sizes_compiled_along_sort(torch, fresh_cache, monkeypatch):
    """On the GPU, in an empty cache: the first launch (128) compiles every size; the
    others launch from what it compiled along, and sort like torch.sort."""
    from support.gpu import launch
    monkeypatch.setattr(fragments, "_memo", {})
    monkeypatch.setattr(fragments, "_along", fragments._Along())
    rows = 64
    for n in splice.cub.SIZES:
        x = torch.randn(rows * n, device="cuda")
        y = torch.empty_like(x)
        launch(torch, (rows,), sort_kernel, (x, y, n))
        ref = torch.sort(x.view(rows, n), dim=-1).values.reshape(-1)
        torch.testing.assert_close(y, ref, rtol=0, atol=0)


# --- two calls of one size at once; a fork while CUB compiles (found by breaker4) --------

@splice.kernel
def two_sorts_of_one_size(x, y, z, N: ConstInt):
    a = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    b = ct.load(y, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(a))
    ct.store(z, index=(ct.bid(0),), tile=splice.cub.sort(b))


def test_two_calls_of_one_size_in_one_kernel_compile_cub_once(nvrtc_calls):
    """Two sorts of (256,) tiles: two fragments of one key, compiled ahead in two threads.
    The second waits for the first's batch, which caches its own key and hands it over
    before it wakes the second (before: NVRTC programs of [6, 1] instantiations, 3.5 s instead
    of 1.2 s)."""
    splice.compile(two_sorts_of_one_size, _sig(f32, f32, f32, consts=(256,)), "sm_90")
    assert _instances(nvrtc_calls) == [6]


def test_threads_compiling_one_size_compile_cub_once(nvrtc_calls):
    """An autotuner's threads compiling the same config: same as above."""
    errors: list[BaseException] = []

    def compile_one():
        try:
            splice.compile(sort_kernel, _sig(f32, f32, consts=(1024,)), "sm_90")
        except BaseException as e:      # reported below
            errors.append(e)
    threads = [threading.Thread(target=compile_one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "hung"
    assert not errors
    assert _instances(nvrtc_calls) == [6]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_batch_compiles_can_compile(nvrtc_calls):
    """A fork while NVRTC compiles in another thread waits for it to return (NVRTC's own
    locks would be held in the child for ever: splice.system.cuda_libs._Calls), and the child
    forgets the parent's pending batches (no thread of its own will end them): the
    child compiles. Before, it hung in its first NVRTC call."""
    import time
    started = threading.Event()
    real = toolchain.nvrtc_compile

    def slow_start(source, name, options, **kw):
        started.set()
        return real(source, name, options, **kw)
    toolchain.nvrtc_compile = slow_start   # monkeypatched by nvrtc_calls already
    parent = threading.Thread(target=splice.compile,
                              args=(sort_kernel, _sig(f32, f32, consts=(128,)), "sm_90"))
    parent.start()
    try:
        assert started.wait(60)
        time.sleep(0.3)                               # inside NVRTC now
        pid = os.fork()
        if pid == 0:                                  # the child: compile another size
            code = 1
            try:
                splice.compile(sort_kernel, _sig(f32, f32, consts=(256,)), "sm_90")
                code = 0
            except splice.SpliceError:
                code = 0                              # a clear error is fine too
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.2)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung in NVRTC for 60 s")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        parent.join(timeout=120)
