"""NVRTC's PCH follows the state of every header it holds (one reached through a macro
#include in a toolkit header included), a forked child gets a PCH directory of its own
and leaves its parent's alone, and a fork waits for NVRTC calls without waiting for ever
behind calls that overlap (splice.system.nvrtc_pch, splice.system.cuda_libs._Calls). Each
test failed when it was written (found by trying to break them)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from splice.declare.externs import HEADER_PROVIDERS
from splice.inputs import cccl, fragments, headers
from splice.inputs.fragments import CudaSource
from splice.system import nvrtc_pch

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


def _run_script(code: str, tmp_path: Path, timeout: float = 120) -> str:
    env = dict(os.environ, SPLICE_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_forked_child_leaves_the_parents_pch_directory_alone(tmp_path):
    """The PCH directory is ``tempfile.mkdtemp`` once per process with an ``atexit``
    rmtree; a forked child keeps both (the fork hooks reset the locks, not
    ``nvrtc_pch._state``). So the child compiles into the parent's directory (two
    processes creating the same PCH file, which :data:`nvrtc_pch._lock` serialises only
    within one), and a child that exits normally removes the parent's directory while
    the parent uses it. The child should get a directory of its own."""
    out = _run_script("""
        import os, sys, time
        from splice.system import nvrtc_pch
        parent = nvrtc_pch._private_dir()
        assert parent is not None and parent.is_dir()
        pid = os.fork()
        if pid == 0:
            print("child", nvrtc_pch._private_dir(), flush=True)
            sys.exit(0)          # a normal exit: atexit runs
        for _ in range(600):
            p, status = os.waitpid(pid, os.WNOHANG)
            if p:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
        print("parent", parent, parent.is_dir(), flush=True)
    """, tmp_path)
    lines = dict(ln.split(" ", 1) for ln in out.splitlines())
    parent_dir, exists = lines["parent"].rsplit(" ", 1)
    assert exists == "True", "the child's exit removed the parent's PCH directory"
    assert lines["child"] != parent_dir, "the child compiles into the parent's PCH directory"


def test_fork_does_not_wait_for_ever_behind_overlapping_compiles(tmp_path):
    """``_Calls.before_fork`` waits on a Condition, which releases its lock while it
    waits: new NVRTC calls start meanwhile (the docstring says none starts until it has
    forked), and with two compiling threads whose calls overlap the count never reaches 0,
    so ``os.fork`` waits until every thread has stopped compiling (here: for ever)."""
    out = _run_script("""
        import os, threading, time
        from splice.system import cuda_libs
        stop = threading.Event()
        def compiles(delay):
            time.sleep(delay)
            while not stop.is_set():
                with cuda_libs._calls.running():   # what every NVRTC call runs in
                    time.sleep(0.2)
        workers = [threading.Thread(target=compiles, args=(d,), daemon=True)
                   for d in (0, 0.1)]
        for w in workers:
            w.start()
        time.sleep(0.3)
        forked = []
        def fork():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            forked.append(pid)
        f = threading.Thread(target=fork, daemon=True)
        start = time.monotonic()
        f.start()
        f.join(timeout=5)
        print("forked" if forked else "blocked", round(time.monotonic() - start, 1),
              flush=True)
        stop.set()
        f.join(timeout=5)
        for pid in forked:
            os.waitpid(pid, 0)
    """, tmp_path)
    assert out.startswith("forked"), out


@pytest.mark.skipif(not cccl.include_dirs(), reason="no CCCL installed")
def test_a_fork_pool_compiles_while_the_parents_threads_compile(tmp_path):
    """Two threads of the parent compile CUDA C without a pause while a multiprocessing
    pool (fork) compiles in its workers: every lock a parent's thread held at a fork (the
    CCCL locator's, the memo's, the include walk's, the PCH's) is free in the child
    (splice.system.forksafe), and NVRTC's own are waited for (before: the workers blocked for
    ever in the CCCL locator)."""
    out = _run_script("""
        import multiprocessing as mp, threading
        from splice.inputs.fragments import CudaSource
        from splice.declare.externs import HEADER_PROVIDERS
        SRC = ('#include <cuda/std/limits>\\nextern "C" __device__ int f%d(int x) '
               '{ return x < cuda::std::numeric_limits<int>::max() ? x + %d : x; }\\n')
        def compile_one(i):
            return f"f{i}(" in CudaSource(text=SRC % (i, i), where=f"w{i}.py:1",
                                          providers=HEADER_PROVIDERS).module("sm_90").text
        compile_one(999)      # the imports done (CPython leaves a module's import lock
                              # held in a child forked while another thread imports it)
        stop = threading.Event()
        def loop(i):
            while not stop.is_set():
                compile_one(i)
                i += 2
        threads = [threading.Thread(target=loop, args=(1000 + k,), daemon=True)
                   for k in range(2)]
        for t in threads:
            t.start()
        with mp.get_context("fork").Pool(2) as pool:
            print(pool.map_async(compile_one, range(6)).get(timeout=60))
        stop.set()
        for t in threads:     # a daemon thread still inside NVRTC at interpreter exit
            t.join()          # crashes the exit (SIGSEGV), whatever splice does
    """, tmp_path, timeout=100)
    assert out.strip() == str([True] * 6)
