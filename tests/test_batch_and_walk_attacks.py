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


# --- splice.cub's batch (CudaSource.batch, fragments._Along) ------------------------------

import cuda.tile as ct   # noqa: E402

import splice            # noqa: E402
from splice import toolchain   # noqa: E402
from support import kernels as K   # noqa: E402

f32 = ct.float32
ConstInt = ct.Constant[int]


@pytest.fixture
def nvrtc_calls(fresh, monkeypatch):
    """The tile lengths each NVRTC program instantiates, in an empty cache and memo."""
    if not cccl.include_dirs():
        pytest.skip(f"CUB headers not found: {cccl.INSTALL_HINT}")
    calls: list[int] = []
    lock = threading.Lock()
    real = toolchain.nvrtc_compile

    def counting(source, name, options, **kw):
        with lock:
            calls.append(source.decode().count("// tiles in shared memory, by reference"))
        return real(source, name, options, **kw)
    monkeypatch.setattr(toolchain, "nvrtc_compile", counting)
    return calls


@splice.kernel
def sort_kernel(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t))


@splice.kernel
def two_sorts_of_one_size(x, y, z, N: ConstInt):
    a = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    b = ct.load(y, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(a))
    ct.store(z, index=(ct.bid(0),), tile=splice.cub.sort(b))


def _sig(*arrays, consts=()):
    return K.signature(*(K.array(d) for d in arrays), *consts)


def test_two_calls_of_one_size_in_one_kernel_compile_cub_once(nvrtc_calls):
    """Two sorts of (256,) tiles: two fragments of one key, compiled ahead in two threads.
    The second waits for the first's batch, which holds its key, but _Along.done releases
    it before the holder has cached its own PTX (_keep runs after done) and done keeps
    only the *other* sizes' texts: the waiter finds neither, claims its key again and
    compiles CUB a second time (alone, and with -pch: creating the PCH, ~1.6 s). Measured:
    NVRTC programs of [6, 1] instances, 3.5 s instead of 1.2 s."""
    splice.compile(two_sorts_of_one_size, _sig(f32, f32, f32, consts=(256,)), "sm_90")
    assert nvrtc_calls == [6]


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
    assert nvrtc_calls == [6]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_batch_compiles_can_compile(nvrtc_calls):
    """dc189f2 makes a forked child forget its parent's pending batches, so that it does
    not wait for them; but the child's own NVRTC call then hangs for ever: NVRTC's locks
    are held by the parent's compiling thread at the fork (the same with a plain NVRTC
    compile in flight). A multiprocessing.Pool (fork) started while a kernel compiles
    hangs its workers. splice should hold the fork until NVRTC calls in flight return
    (os.register_at_fork(before=...)), or fail the child's compile with a clear error,
    never hang."""
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
