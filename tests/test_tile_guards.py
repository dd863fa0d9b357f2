"""Out-of-tile accesses of a cooperative tile call: refused on the PTX where the offset is a
constant (:func:`splice.analysis.memory_proof.check_tile_bounds`), caught at run time by the guard
words of ``SPLICE_CHECK_TILES=1`` (:mod:`splice.inputs.tile_guards`) where it is not: on the CPU
executor and, marked gpu, on the GPU."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import cuda.tile as ct
import numpy as np
import pytest

import splice
from support import kernels as K
from support.env import python_env
from support.ptx_exec import ExecError, run_build

f32 = ct.float32
ConstInt = ct.Constant[int]
ROOT = Path(__file__).resolve().parent.parent

# y[i] = 2 x[N - 1 - i] + s over the group's ranks, then the planted access
FLIP_SRC = r'''
#include <splice_group.h>
template <int N> __device__ void flip(const float (&x)[N], float s, float (&y)[N]) {
    for (unsigned i = splice_group_rank(); i < N; i += splice_group_size())
        y[i] = 2.0f * x[N - 1 - i] + s;
    PLANT
}'''
# s is 3.0 at the call: N - 3 + (int)s is N, an offset the PTX does not show as a constant
PAST_END = "y[N - 3 + (int)s] = -1.0f;"
BEFORE_START = "y[-4 + (int)s] = -1.0f;"


# a store through the 32-bit shared-window address of an element (__cvta_generic_to_shared)
SHARED_32 = ('if (splice_group_rank() == 0) asm volatile("st.shared.f32 [%0], %1;" :: '
             '"r"((unsigned)__cvta_generic_to_shared(&{})), "f"(s));')


def _kernel(plant: str, scope: str):
    flip = splice.extern(source=FLIP_SRC.replace("PLANT", plant), name="flip", scope=scope,
                         signature="tile(float32)(tile(float32), float32)")

    @splice.kernel
    def flip_kernel(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(ct.bid(0),), tile=flip(t, 3.0), allow_tma=False)
    return flip_kernel


SIG = K.signature(K.array(f32), K.array(f32), 128)


def _run(kernel, blocks=2, n=128):
    x = np.random.default_rng(blocks).integers(-50, 50, blocks * n).astype(np.float32)
    y = np.zeros_like(x)
    b = splice.compile(kernel, K.signature(K.array(f32), K.array(f32), n), "sm_90")
    launch = run_build(b, (blocks,), x, y)
    return b, launch, x, y


# ---------------------------------------------------------------------------------------------
# Static: a constant offset outside the tile


@pytest.mark.parametrize("check_tiles", ["", "1"], ids=["static", "with-guards"])
@pytest.mark.parametrize("scope", ["block", "warpgroup"])
@pytest.mark.parametrize("plant, what", [
    ("y[N] = -1.0f;", r"'st\.(u32|f32|b32) \[%rd\d+\+512\], %(r|f)\d+;' in its own body "
                      r"accesses bytes 512\.\.515 of the tile result \(128 x float32, 512 "
                      r"bytes\): past the end of the tile"),
    ("y[0] = x[N];", r"accesses bytes 512\.\.515 of tile argument 1 .*past the end"),
    ("y[-1] = 0.0f;", r"accesses bytes -4\.\.-1 of the tile result .*before the start"),
    # past the guard words too: only the static check can see it
    ("y[N + 16] = -1.0f;", r"accesses bytes 576\.\.579 of the tile result .*past the end"),
    ("y[-5] = 0.0f;", r"accesses bytes -20\.\.-17 of the tile result .*before the start"),
    # through a 32-bit shared-window address, as inline PTX takes one (ldmatrix, cp.async)
    (SHARED_32.format("y[N + 16]"),
     r"'st\.shared\.f32 \[%r\d+\], %f\d+;' in its own body accesses bytes 576\.\.579 of the "
     r"tile result .*past the end"),
    (SHARED_32.format("y[-1]"), r"accesses bytes -4\.\.-1 of the tile result .*before the start"),
    # the tiles guide's __isShared assumption: NVVM addresses the tiles through the window,
    # with a 32-bit address (NVRTC 13.5) or a 64-bit one (13.0, PyTorch's: CI's third venv)
    ("__builtin_assume(__isShared(&x[0])); y[0] = x[N];",
     r"'ld\.shared\.f32 %f\d+, \[%rd?\d+\+512\];' in its own body accesses bytes 512\.\.515 of "
     r"tile argument 1 .*past the end"),
])
def test_constant_offset_outside_the_tile_refused(scope, plant, what, check_tiles,
                                                  monkeypatch):
    # the static check is always on: SPLICE_CHECK_TILES's guard words are an addition
    monkeypatch.setenv("SPLICE_CHECK_TILES", check_tiles)
    with pytest.raises(splice.SpliceLinkError, match=r"tile call of extern 'flip .*" + what +
                       r".*Index the tile within its shape"):
        splice.compile(_kernel(plant, scope), SIG, "sm_90")


@pytest.mark.parametrize("plant, value", [
    ("if (splice_group_rank() == 0) y[N - 1] = -1.0f;", -1.0),
    (SHARED_32.format("y[N - 1]"), 3.0),
], ids=["generic", "shared-32"])
def test_constant_offset_inside_the_tile_accepted(plant, value):
    """The last element (y[N - 1]) is inside: no refusal, and the value lands."""
    _b, launch, x, y = _run(_kernel("splice_group_sync(); " + plant, "block"))
    want = (2.0 * x.reshape(2, 128)[:, ::-1] + 3.0)
    want[:, -1] = value
    np.testing.assert_array_equal(y.reshape(2, 128), want)


# ---------------------------------------------------------------------------------------------
# SPLICE_CHECK_TILES: guard words, on the CPU executor


@pytest.fixture
def guards(monkeypatch):
    monkeypatch.setenv("SPLICE_CHECK_TILES", "1")


@pytest.mark.parametrize("scope", ["block", "warpgroup"])
@pytest.mark.parametrize("plant, side", [(PAST_END, "past the end of"),
                                         (BEFORE_START, "before the start of")])
def test_exec_guard_catches_the_write(guards, scope, plant, side):
    with pytest.raises(ExecError, match=r"__assertfail.*splice SPLICE_CHECK_TILES: the call "
                                        r"of 'flip' \(declared at .*test_tile_guards\.py:\d+\) "
                                        rf"called at .*test_tile_guards\.py:\d+.* wrote {side} "
                                        r"the tile result"):
        _run(_kernel(plant, scope))


@pytest.mark.parametrize("scope", ["block", "warpgroup"])
def test_exec_guarded_call_keeps_its_values(guards, scope):
    b, launch, x, y = _run(_kernel("", scope))
    assert "__assertfail" in b["spliced_ptx"]          # the guards are there
    assert not launch.approx
    np.testing.assert_array_equal(y.reshape(2, 128), 2.0 * x.reshape(2, 128)[:, ::-1] + 3.0)


def test_exec_without_the_setting_no_guard(monkeypatch):
    """The setting is read: without it there are no guards, and the planted write is not
    reported as one (the executor sees it as whatever it lands on)."""
    monkeypatch.delenv("SPLICE_CHECK_TILES", raising=False)
    kernel = _kernel(PAST_END, "warpgroup")
    b = splice.compile(kernel, SIG, "sm_90")
    assert "__assertfail" not in b["spliced_ptx"]
    with pytest.raises(ExecError) as e:
        run_build(b, (2,), np.zeros(256, np.float32), np.zeros(256, np.float32))
    assert "SPLICE_CHECK_TILES" not in str(e.value)


# A callee that copies 258 floats from its 256-float input into its result reads the
# input's trailing guard and writes it over the result's: each guard has its own canary
COPY_SRC = r'''
#include <splice_group.h>
template <int N> __device__ void cp(const float (&x)[N], int n, float (&y)[N]) {
    if (splice_group_rank() == 0) memcpy(y, x, COUNT * sizeof(float));
    splice_group_sync();
}'''
COPY_SIG = K.signature(K.array(f32), K.array(f32), K.scalar(ct.int32), 256)


def _copy_kernel(count: str, scope: str):
    cp = splice.extern(source=COPY_SRC.replace("COUNT", count), name="cp", scope=scope,
                       signature="tile(float32)(tile(float32), int32)")

    @splice.kernel
    def copy_kernel(x, y, n: ct.int32, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(ct.bid(0),), tile=cp(t, n), allow_tma=False)
    return copy_kernel


@pytest.mark.parametrize("scope", ["block", "warpgroup"])
@pytest.mark.parametrize("count", ["258", "n"], ids=["constant", "run-time"])
def test_exec_guard_copied_from_another_buffer_is_caught(guards, scope, count):
    b = splice.compile(_copy_kernel(count, scope), COPY_SIG, "sm_90")
    x, y = np.arange(512, dtype=np.float32), np.zeros(512, np.float32)
    with pytest.raises(ExecError, match=r"__assertfail.*splice SPLICE_CHECK_TILES: the call "
                                        r"of 'cp' .* wrote past the end of the tile result"):
        run_build(b, (2,), x, y, 258)


@pytest.mark.parametrize("scope", ["block", "warpgroup"])
def test_exec_a_copy_within_the_tile_keeps_its_values(guards, scope):
    b = splice.compile(_copy_kernel("n", scope), COPY_SIG, "sm_90")
    x, y = np.arange(512, dtype=np.float32), np.zeros(512, np.float32)
    run_build(b, (2,), x, y, 256)
    np.testing.assert_array_equal(y, x)


def test_canaries_differ_per_buffer_and_side():
    from splice.inputs.tile_guards import canary
    words = [canary(k, side) for k in range(64) for side in ("before", "after")]
    assert len(set(words)) == len(words)


def test_the_seed_is_read_at_each_call(guards):
    """The canaries are xor a value read at each call (``%globaltimer_lo``): a callee
    cannot write the guard's bytes by knowing splice's code."""
    ptx = splice.compile(_copy_kernel("n", "block"), COPY_SIG, "sm_90")["spliced_ptx"]
    assert re.search(r"mov\.u32\s+%splice_guard_seed, %globaltimer_lo;", ptx)


# ---------------------------------------------------------------------------------------------
# On the GPU (a trap ends the context: each launch in a process of its own)

GPU_SCRIPT = textwrap.dedent('''
    import sys, numpy as np, torch, cuda.tile as ct
    sys.path.insert(0, {tests!r})
    import test_tile_guards as T
    kernel = T._kernel({plant!r}, {scope!r})
    x = torch.from_numpy(np.arange(256, dtype=np.float32)).cuda()
    y = torch.zeros(256, dtype=torch.float32, device="cuda")
    ct.launch(torch.cuda.current_stream(), (2, 1, 1), kernel, (x, y, 128))
    torch.cuda.synchronize()
    got = y.cpu().numpy().reshape(2, 128)
    want = 2.0 * np.arange(256, dtype=np.float32).reshape(2, 128)[:, ::-1] + 3.0
    print("VALUES", bool(np.array_equal(got, want)))
''')


def _gpu_run(plant: str, scope: str):
    script = GPU_SCRIPT.format(tests=str(ROOT / "tests"), plant=plant, scope=scope)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, env=python_env(ROOT, SPLICE_CHECK_TILES="1"))


@pytest.mark.gpu
@pytest.mark.parametrize("scope", ["block", "warpgroup"])
def test_gpu_guard_catches_the_write(torch, scope):
    r = _gpu_run(PAST_END, scope)
    assert r.returncode != 0, r.stdout
    assert "splice SPLICE_CHECK_TILES: the call of 'flip'" in r.stderr + r.stdout
    assert "wrote past the end of the tile result" in r.stderr + r.stdout


COPY_GPU_SCRIPT = textwrap.dedent('''
    import sys, numpy as np, torch, cuda.tile as ct
    sys.path.insert(0, {tests!r})
    import test_tile_guards as T
    kernel = T._copy_kernel("n", {scope!r})
    x = torch.arange(512, dtype=torch.float32, device="cuda")
    y = torch.zeros(512, dtype=torch.float32, device="cuda")
    ct.launch(torch.cuda.current_stream(), (2, 1, 1), kernel, (x, y, {n}, 256))
    torch.cuda.synchronize()
    print("VALUES", bool(torch.equal(x, y)))
''')


@pytest.mark.gpu
@pytest.mark.parametrize("scope", ["block", "warpgroup"])
@pytest.mark.parametrize("n", [258, 256])
def test_gpu_guard_copied_from_another_buffer_is_caught(torch, scope, n):
    script = COPY_GPU_SCRIPT.format(tests=str(ROOT / "tests"), scope=scope, n=n)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=600, env=python_env(ROOT, SPLICE_CHECK_TILES="1"))
    if n == 256:                                    # within the tile: the values
        assert r.returncode == 0 and "VALUES True" in r.stdout, r.stderr
        return
    assert r.returncode != 0, r.stdout
    assert "wrote past the end of the tile result" in r.stderr + r.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("scope", ["block", "warpgroup"])
def test_gpu_guarded_call_keeps_its_values(torch, scope):
    r = _gpu_run("", scope)
    assert r.returncode == 0, r.stderr
    assert "VALUES True" in r.stdout
