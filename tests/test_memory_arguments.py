"""``memory="arguments"``: an impure call ordered only against the kernel's memory
operations on arrays that may alias its pointer arguments. The token order cuTile gives the
call (read from cuTile's IR right after its token-order pass), the values on the CPU
executor, a planted fault, and the declaration errors."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import cuda.tile as ct
import numpy as np
import pytest

import splice
from support import kernels as K
from support.ptx_exec import run_build
from support.token_order import ordered_after, token_ordered_ir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

f32, i32 = ct.float32, ct.int32
ConstInt = ct.Constant[int]

# X[i] = 2 X[i] + 1: reads and writes only its pointer argument
BUMP_SRC = r'''extern "C" __device__ void bump(float* x, int i) { x[i] = 2.0f * x[i] + 1.0f; }'''
bump = splice.extern(source=BUMP_SRC, name="bump", signature="void(float32*, int32)",
                     pure=False, memory="arguments")
bump_any = splice.extern(source=BUMP_SRC, name="bump", signature="void(float32*, int32)",
                         pure=False)


def make_store_then_call(fn):
    @splice.kernel
    def store_then_call(X, Y, Out, TILE: ConstInt):
        """X = Y + 1 and Y = 3 Y (plain stores), then ``fn(X, i)`` on each element, then
        Out = X read back: X = Out = 2 (Y + 1) + 1, Y = 3 Y."""
        t = ct.load(Y, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(X, index=(ct.bid(0),), tile=t + 1.0, allow_tma=False)
        ct.store(Y, index=(ct.bid(0),), tile=t * 3.0, allow_tma=False)
        fn(X, ct.bid(0) * TILE + ct.arange(TILE, dtype=i32))
        u = ct.load(X, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(Out, index=(ct.bid(0),), tile=u, allow_tma=False)
    return store_then_call


store_then_bump = make_store_then_call(bump)
store_then_bump_any = make_store_then_call(bump_any)


def _sig(n=128):
    return K.signature(K.array(f32), K.array(f32), K.array(f32), n)


def _token_ordered_ir(monkeypatch, kernel):
    return token_ordered_ir(monkeypatch, kernel, _sig())


def _memory_ops(ops):
    """(the call, [store X, store Y, store Out], [load Y, load X]) in program order."""
    from splice.tracing.tile_ir import SpliceImpureCall
    [call] = [o for o in ops if isinstance(o, SpliceImpureCall)]
    stores = [o for o in ops if type(o).__name__ == "TileStore"]
    loads = [o for o in ops if type(o).__name__ == "TileLoad"]
    assert len(stores) == 3 and len(loads) == 2
    return call, stores, loads


def test_declared_call_is_ordered_against_its_arguments_only(monkeypatch):
    """After the store to X (its pointer argument), before the load of X that follows;
    not after the store to Y, which it is not given."""
    ops = _token_ordered_ir(monkeypatch, store_then_bump)
    call, (store_x, store_y, _out), (_load_y, load_x) = _memory_ops(ops)
    before = ordered_after(call, ops)
    assert id(store_x) in before
    assert id(store_y) not in before
    assert id(call) in ordered_after(load_x, ops)
    assert call.memory_order == ct.MemoryOrder.RELAXED        # the token pass's order


def test_undeclared_call_is_ordered_against_every_array(monkeypatch):
    ops = _token_ordered_ir(monkeypatch, store_then_bump_any)
    call, (store_x, store_y, _out), (_load_y, load_x) = _memory_ops(ops)
    before = ordered_after(call, ops)
    assert {id(store_x), id(store_y)} <= before
    assert id(call) in ordered_after(load_x, ops)
    assert call.memory_order == ct.MemoryOrder.ACQ_REL


def test_planted_missing_argument_alias_loses_the_store(monkeypatch):
    """The ordering test above can fail: a marker pointer that does not take its array
    arguments' alias sets is not ordered after the store to X."""
    from splice.system import _cutile
    from splice.tracing.tile_ir import SpliceMarkerPointer
    monkeypatch.setattr(SpliceMarkerPointer, "splice_alias_set",
                        lambda self, alias_set_of: _cutile.SPLICE_ALIAS_SET)
    ops = _token_ordered_ir(monkeypatch, store_then_bump)
    call, (store_x, _y, _out), _loads = _memory_ops(ops)
    assert id(store_x) not in ordered_after(call, ops)


def test_declared_marker_is_acq_rel_in_the_bytecode():
    """The token pass sees relaxed; the Tile IR and tileiras's PTX have the acq_rel
    marker, so that no plain access moves across it in a thread's program order."""
    b = splice.compile(store_then_bump, _sig(), "sm_90")
    [site] = b.sites
    assert re.findall(r"atomic_cas_tko (\w+)", b["tileir"]) == ["acq_rel"]
    assert re.findall(r"atom\.global\.(\w+)\.cas", b["ptx"]) == ["acq_rel"]


@pytest.mark.parametrize("kernel", [store_then_bump, store_then_bump_any],
                         ids=["arguments", "any"])
def test_exec_call_reads_the_kernels_store(kernel):
    """On the CPU executor (a 128-thread kernel, not warp-specialised): the call sees the
    kernel's store to X, and the load after it sees the call's."""
    n, blocks = 128, 2
    y = np.random.default_rng(3).integers(-50, 50, n * blocks).astype(np.float32)
    x = np.zeros_like(y)
    out = np.zeros_like(y)
    y0 = y.copy()
    b = splice.compile(kernel, _sig(n), "sm_90")
    assert ".reqntid 128" in b.ptx
    launch = run_build(b, (blocks,), x, y, out)
    assert not launch.approx
    np.testing.assert_array_equal(x, 2.0 * (y0 + 1.0) + 1.0)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(y, 3.0 * y0)


# y[i] = 2 x[N - 1 - i] + s, the group's threads taking the elements in turn: a tile
# result, no pointer argument
FLIP_SRC = r'''
#include <splice_group.h>
template <int N> __device__ void flip(const float (&x)[N], float s, float (&y)[N]) {
    for (unsigned i = splice_group_rank(); i < N; i += splice_group_size())
        y[i] = 2.0f * x[N - 1 - i] + s;
}'''
flip = splice.extern(source=FLIP_SRC, name="flip", scope="warpgroup", memory="arguments",
                     signature="tile(float32)(tile(float32), float32)")


@splice.kernel
def matmul_flip_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    """The TMA matmul, its row maxima flipped by the call and added to C's rows."""
    acc = K.matmul_tile(A, B, tm, tn, tk)
    m = flip(ct.max(ct.abs(acc), axis=1), 1.0)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc + m[:, None], C.dtype))


@splice.kernel
def flip_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=flip(t, 3.0), allow_tma=False)


def test_declared_tile_result_call_is_proven():
    """A warpgroup tile call with a tile result, declared "arguments" (no pointer
    argument: ordered only against its own staging), in the TMA matmul: the staging proof
    holds (a SpliceRewriteError otherwise), every result load after the exit barrier."""
    sig = K.signature(*[K.array(ct.float16, 2)] * 3, 128, 128, 64)
    b = splice.compile(matmul_flip_kernel, sig, "sm_90")
    store, call, load = b.sites
    assert call.scope == "warpgroup" and call.instances == 1
    assert store.instances == load.instances == 1          # 128 rows on the group's 128
    entry = b.spliced_ptx[b.spliced_ptx.index(".entry"):]
    loads = [m.start() for m in re.finditer(r"ld\.shared\.b32 \t%r\d+, \[%r\d+\];", entry)]
    assert loads and entry.index("barrier.sync \t15, 128;") < min(loads)


@pytest.mark.parametrize("n", [128, 256])
def test_exec_declared_warpgroup_tile_call(n):
    """The declared tile call on the CPU executor (a 128-thread kernel: the group is the
    block): y = 2 x reversed + 3 per block."""
    x = np.random.default_rng(n).integers(-50, 50, 2 * n).astype(np.float32)
    y = np.zeros_like(x)
    b = splice.compile(flip_kernel, K.signature(K.array(f32), K.array(f32), n), "sm_90")
    assert ".reqntid 128" in b.ptx
    launch = run_build(b, (2,), x, y)
    assert not launch.approx
    np.testing.assert_array_equal(y.reshape(2, n), 2.0 * x.reshape(2, n)[:, ::-1] + 3.0)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [store_then_bump, store_then_bump_any],
                         ids=["arguments", "any"])
def test_gpu_call_reads_the_kernels_store(dev, kernel):
    """On the GPU, 64 blocks: the call sees the kernel's store to X, the load after it
    the call's; Y, which the declared call is not ordered against, is stored as written."""
    n, blocks = 128, 64
    y0 = np.random.default_rng(5).integers(-50, 50, n * blocks).astype(np.float32)
    x, y, out = dev.arr(np.zeros_like(y0)), dev.arr(y0), dev.arr(np.zeros_like(y0))
    dev.launch((blocks, 1, 1), kernel, (x, y, out, n))
    np.testing.assert_array_equal(dev.host(x), 2.0 * (y0 + 1.0) + 1.0)
    np.testing.assert_array_equal(dev.host(out), dev.host(x))
    np.testing.assert_array_equal(dev.host(y), 3.0 * y0)


# ---------------------------------------------------------------------------------------------
# Declarations


def test_memory_is_recorded_on_every_declaration_kind():
    ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .func f(.param .b64 p) { ret; }"
    assert bump._splice_extern.memory == "arguments"
    assert bump_any._splice_extern.memory == "any"
    p = splice.extern.from_ptx(ptx=ptx, name="f", signature="void(float32*)", pure=False,
                               memory="arguments")
    assert p._splice_extern.memory == "arguments"
    lib = splice.library(source=BUMP_SRC)
    assert lib.extern("bump", signature="void(float32*, int32)", pure=False,
                      memory="arguments")._splice_extern.memory == "arguments"
    w = splice.extern(source=BUMP_SRC, name="bump", signature="void(float32*, int32)",
                      scope="warpgroup", memory="arguments")
    assert w._splice_extern.memory == "arguments" and not w._splice_extern.pure


def test_memory_on_a_pure_extern_is_refused():
    with pytest.raises(splice.SpliceDeclarationError,
                       match=r"extern 'twice' at .*test_memory_arguments\.py:\d+: "
                             r"memory='arguments' .* the extern is pure .* pure=False"):
        splice.extern(source='extern "C" __device__ float twice(float x) { return 2 * x; }',
                      name="twice", signature="float32(float32)", memory="arguments")


@pytest.mark.parametrize("memory", ["args", "", None, 1])
def test_wrong_memory_value_is_refused(memory):
    with pytest.raises(splice.SpliceDeclarationError,
                       match=r"extern 'bump' at .*: memory must be 'any' or 'arguments', "
                             rf"got {memory!r}"):
        splice.extern(source=BUMP_SRC, name="bump", signature="void(float32*, int32)",
                      pure=False, memory=memory)


def test_planted_unordered_staging_is_refused(monkeypatch, fresh_cache):
    """The tile staging's sites and the call share splice's alias set, which orders the
    call after the stores of its tiles: without it (each site ordered by its arrays alone)
    tileiras places the stores where the staging proof cannot find them before the call,
    and the example is refused, never miscompiled."""
    import matmul_rowmax_fp8 as fp8

    from splice.tracing.tile_ir import SpliceMarkerPointer

    def arrays_only(self, alias_set_of):
        alias_set = 0
        for array in self.arrays:
            alias_set |= alias_set_of(array)
        return alias_set
    monkeypatch.setattr(SpliceMarkerPointer, "splice_alias_set", arrays_only)
    with pytest.raises(splice.SpliceRewriteError, match=r"staging of a tile call"):
        splice.compile(fp8.matmul_fp8_scales, fp8.signature(), "sm_90")
