"""``splice.asm(..., memory="none")``: a snippet that touches no global memory, ordered
against none of the kernel's loads and stores. The declaration errors; the proof that such a
snippet touches no global memory (every PTX family that can, refused; the private state
spaces, accepted); the token order after cuTile's pass, with a planted fault; the acq_rel
marker kept in the bytecode; the TMA matmul's k-loop kept pipelined; values on the CPU
executor and (marker gpu) on the GPU."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.analysis.asm_check import SnippetFault, check_snippet
from support import kernels as K
from support.ptx_exec import run_build
from support.token_order import ordered_after, token_ordered_ir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import matmul_rowmax_fp8 as fp8

f16, f32, i32, u32 = ct.float16, ct.float32, ct.int32, ct.uint32
ConstInt = ct.Constant[int]
HERE = r"test_asm_memory\.py:\d+"


def _elem_kernel(template, memory="none", pure=False, dtype=u32):
    """y = snippet(x) per element, after a plain store of x + 1 to z."""
    @splice.kernel
    def kern(x, y, z, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(z, index=(ct.bid(0),), tile=t + 1, allow_tma=False)
        r = splice.asm(template, t, dtype=dtype, pure=pure, memory=memory)
        ct.store(y, index=(ct.bid(0),), tile=r, allow_tma=False)
    return kern


def _sig(n=128):
    return K.signature(K.array(u32), K.array(u32), K.array(u32), n)


MAD = "mad.lo.u32 $0, $1, 3, 1;"


# ---------------------------------------------------------------------------------------------
# Declarations


@pytest.mark.parametrize("memory, said", [
    ("arguments", r"memory must be 'any' or 'none', got 'arguments'; a snippet has no "
                  r"pointer arguments: use memory='none'"),
    ("nothing", r"memory must be 'any' or 'none', got 'nothing'\n"),
    (1, r"memory must be 'any' or 'none', got 1\n"),
])
def test_wrong_memory_value_is_refused_at_the_call(memory, said):
    with pytest.raises(splice.SpliceCallError, match=rf"inline PTX at .*{HERE}: {said}"):
        splice.compile(_elem_kernel(MAD, memory=memory), _sig(), "sm_80")


def test_memory_none_on_a_pure_snippet_is_refused():
    """As for externs: memory= says what an impure call touches; a pure snippet (the
    default for one with outputs) touches none."""
    with pytest.raises(splice.SpliceCallError,
                       match=rf"inline PTX at .*{HERE}: memory='none' says which memory an "
                             r"impure call touches, but the snippet is pure .* pure=False"):
        splice.compile(_elem_kernel(MAD, pure=True), _sig(), "sm_80")


def test_extern_refuses_none_and_names_arguments():
    """memory="none" is splice.asm's (a snippet's PTX is proven to touch no global
    memory); an extern says "arguments", which without pointer arguments means the same."""
    with pytest.raises(splice.SpliceDeclarationError,
                       match=r"extern 'f' at .*: memory must be 'any' or 'arguments', got "
                             r"'none'; memory='none' is splice.asm's: an extern without "
                             r"pointer arguments declared memory='arguments'"):
        splice.extern(source='extern "C" __device__ void f(int x) {}', name="f",
                      signature="void(int32)", memory="none")


def test_memory_is_recorded_on_the_snippets_extern(monkeypatch):
    ops = token_ordered_ir(monkeypatch, _elem_kernel(MAD), _sig())
    from splice.tracing.tile_ir import SpliceImpureCall
    [call] = [o for o in ops if isinstance(o, SpliceImpureCall)]
    assert call.site.extern.memory == "none" and not call.site.extern.pure


# ---------------------------------------------------------------------------------------------
# The proof: every PTX instruction that touches (or may touch) global memory is refused


def _check(body: str) -> None:
    check_snippet(body, [], [], no_global_memory=True)


#: One or more forms of every PTX ISA (8.x) family that can touch global memory, by family
#: (section of the ISA): each is refused under memory="none".
REFUSED = {
    "ld (9.7.9.8)": ["ld.global.u32 %r1, [%rd1];", "ld.u32 %r1, [%rd1];",
                     "ld.weak.u32 %r1, [%rd1];", "ld.relaxed.gpu.global.u32 %r1, [%rd1];",
                     "ld.acquire.sys.u32 %r1, [%rd1];", "ld.volatile.u32 %r1, [%rd1];",
                     "ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];",
                     "ld.global.L1::no_allocate.u32 %r1, [%rd1];",
                     "ld.const.u32 %r1, [%rd1];", "ld.shared::cluster.u32 %r1, [%r2];",
                     "@%p1 ld.global.u32 %r1, [%rd1+8];", "@!%p1 ld.u64 %rd2, [%rd1];"],
    "ld.global.nc (9.7.9.9)": ["ld.global.nc.u32 %r1, [%rd1];",
                               "ld.global.nc.L1::evict_last.v2.u32 {%r1, %r2}, [%rd1];"],
    "ldu (9.7.9.10)": ["ldu.global.u32 %r1, [%rd1];", "ldu.u32 %r1, [%rd1];"],
    "st (9.7.9.11)": ["st.global.u32 [%rd1], %r1;", "st.u32 [%rd1], %r1;",
                      "st.release.gpu.u32 [%rd1], %r1;", "st.global.wb.u32 [%rd1], %r1;",
                      "st.volatile.global.u32 [%rd1], %r1;",
                      "st.shared::cluster.u32 [%r2], %r1;"],
    "st.async (9.7.9.12)": ["st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 "
                            "[%r1], %r2, [%r3];"],
    "st.bulk (9.7.9.13)": ["st.bulk.weak.global [%rd1], 64, 0;"],
    "multimem (9.7.9.14)": ["multimem.ld_reduce.relaxed.sys.global.add.u32 %r1, [%rd1];",
                            "multimem.st.relaxed.sys.global.u32 [%rd1], %r1;",
                            "multimem.red.relaxed.sys.global.add.u32 [%rd1], %r1;"],
    "prefetch (9.7.9.15)": ["prefetch.global.L2 [%rd1];", "prefetch.L1 [%rd1];",
                            "prefetch.global.L2::evict_last [%rd1];",
                            "prefetch.tensormap [%rd1];", "prefetchu.L1 [%rd1];"],
    "applypriority/discard (9.7.9.16-17)": ["applypriority.global.L2::evict_normal [%rd1], 128;",
                                            "discard.global.L2 [%rd1], 128;"],
    "createpolicy-free cache ops": ["ld.global.L2::cache_hint.u32 %r1, [%rd1], %rd2;"],
    "cp.async (9.7.9.25)": ["cp.async.ca.shared.global [%r1], [%rd1], 16;",
                            "cp.async.cg.shared.global.L2::128B [%r1], [%rd1], 16, 8;",
                            "cp.async.commit_group;", "cp.async.wait_group 0;",
                            "cp.async.wait_all;",
                            "cp.async.mbarrier.arrive.b64 [%rd1];"],
    "cp.async.bulk (9.7.9.25.4)": [
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], "
        "64, [%r2];",
        "cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r1], 64;",
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r1], "
        "[%r2], 64, [%r3];",
        "cp.async.bulk.commit_group;", "cp.async.bulk.wait_group.read 0;",
        "cp.async.bulk.prefetch.L2.global [%rd1], 64;"],
    "cp.reduce.async.bulk (9.7.9.25.4)": [
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [%r1], 64;",
        "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%rd1, "
        "{%r1, %r2}], [%r3];"],
    "cp.async.bulk.tensor (TMA, 9.7.9.25.5)": [
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[%r1], [%rd1, {%r2, %r3}], [%r4];",
        "cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%rd1, {%r2}], [%r1];",
        "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd1, {%r2, %r3}];"],
    "tensormap (9.7.9.26-27)": [
        "tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2;",
        "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync."
        "aligned [%rd1], [%r1], 128;"],
    "texture (9.7.10)": ["tex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [%rd1, {%r1}];",
                         "tld4.r.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];",
                         "txq.width.b32 %r1, [%rd1];", "istypep.texref %p1, %rd1;"],
    "surface (9.7.11)": ["suld.b.1d.v4.b32.trap {%r1, %r2, %r3, %r4}, [%rd1, {%r5}];",
                         "sust.b.1d.v4.b32.trap [%rd1, {%r5}], {%r1, %r2, %r3, %r4};",
                         "sured.b.add.1d.trap.u32 [%rd1, {%r5}], %r1;",
                         "suq.width.b32 %r1, [%rd1];"],
    "atom (9.7.13.5)": ["atom.global.add.u32 %r1, [%rd1], 1;", "atom.add.u32 %r1, [%rd1], 1;",
                        "atom.relaxed.gpu.global.cas.b32 %r1, [%rd1], %r2, %r3;",
                        "atom.global.v2.f32.add {%f1, %f2}, [%rd1], {%f3, %f4};",
                        "atom.shared::cluster.add.u32 %r1, [%r2], 1;",
                        "@%p1 atom.global.exch.b32 %r1, [%rd1], 0;"],
    "red (9.7.13.6)": ["red.global.add.u32 [%rd1], 1;", "red.add.u32 [%rd1], 1;",
                       "red.release.gpu.global.max.s32 [%rd1], %r1;"],
    "red.async (9.7.13.7)": ["red.async.relaxed.cluster.shared::cluster.mbarrier::"
                             "complete_tx::bytes.add.u32 [%r1], %r2, [%r3];"],
    "mbarrier, generic (9.7.13.15)": ["mbarrier.init.b64 [%rd1], 32;",
                                      "mbarrier.arrive.b64 %rd2, [%rd1];",
                                      "mbarrier.try_wait.parity.b64 %p1, [%rd1], %r1;",
                                      "mbarrier.arrive.shared::cluster.b64 _, [%r1];"],
    "ldmatrix/stmatrix, generic (9.7.14.5)": [
        "ldmatrix.sync.aligned.m8n8.x1.b16 {%r1}, [%rd1];",
        "stmatrix.sync.aligned.m8n8.x1.b16 [%rd1], {%r1};"],
    "wmma.load/store (9.7.14.4)": [
        "wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r1, %r2}, [%rd1];",
        "wmma.store.d.sync.aligned.row.m16n16k16.f32 [%rd1], {%f1, %f2};"],
    "fences (9.7.13.4)": ["membar.gl;", "membar.cta;", "fence.acq_rel.gpu;",
                          "fence.sc.sys;", "fence.proxy.async;",
                          "fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;"],
    "griddepcontrol (9.7.13.13)": ["griddepcontrol.wait;", "griddepcontrol.launch_dependents;"],
    "tcgen05 (9.7.16)": ["tcgen05.ld.sync.aligned.16x64b.x1.b32 {%r1}, [%r2];",
                         "tcgen05.st.sync.aligned.16x64b.x1.b32 [%r2], {%r1};"],
    "call (9.7.12.5)": ["call f, (%r1);", "call (%r2), f, (%r1);"],
    "unknown": ["ld2.global.u32 %r1, [%rd1];", "frobnicate.u32 %r1;"],
}


@pytest.mark.parametrize("body", [b for forms in REFUSED.values() for b in forms])
def test_global_memory_forms_are_refused(body):
    words = body.rstrip(";").split()
    opcode = " ".join(words[:2]) if body.startswith("@") else words[0]
    with pytest.raises(SnippetFault, match=rf"^'{re.escape(opcode)}' .*memory='none'.*declare "
                                           r"memory='any'"):
        _check(body)


#: Private memory and no memory: accepted under memory="none".
ACCEPTED = [
    "ld.shared.u32 %r1, [%r2];", "ld.shared::cta.u32 %r1, [%r2];",
    "ld.volatile.shared.v2.u32 {%r1, %r3}, [%r2+4];", "st.shared.u32 [%r2], %r1;",
    "st.shared::cta.b64 [%r2], %rd1;", "ld.local.u32 %r1, [%rd1];", "st.local.u32 [%rd1], %r1;",
    "ld.param.u32 %r1, [p];", "st.param.b32 [p], %r1;", "ld.param::func.u32 %r1, [p];",
    "atom.shared.add.u32 %r1, [%r2], 1;", "atom.shared::cta.cas.b32 %r1, [%r2], %r3, %r4;",
    "red.shared.add.u32 [%r2], 1;", "prefetch.local.L1 [%rd1];",
    "mbarrier.init.shared::cta.b64 [%r1], 32;", "mbarrier.arrive.shared.b64 %rd1, [%r1];",
    "mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r2;",
    "mbarrier.pending_count.b64 %r1, %rd1;",
    "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%r2];",
    "stmatrix.sync.aligned.m8n8.x1.shared::cta.b16 [%r2], {%r1};",
    "wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {%r1, %r2}, [%r3];",
    "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32 {%f1}, {%r1}, {%r2}, {%f2};",
    "add.u32 %r1, %r2, 1;", "mad.lo.s32 %r1, %r2, %r3, %r4;", "fma.rn.f32 %f1, %f2, %f3, %f4;",
    "cvt.rn.f16.f32 %h1, %f1;", "mov.u64 %rd1, %globaltimer;", "mov.u32 %r1, %laneid;",
    "cvta.to.global.u64 %rd1, %rd2;", "isspacep.global %p1, %rd1;",
    "shfl.sync.bfly.b32 %r1, %r2, 1, 31, -1;", "redux.sync.max.u32 %r1, %r2, -1;",
    "vote.sync.ballot.b32 %r1, %p1, -1;", "match.any.sync.b32 %r1, %r2, -1;",
    "activemask.b32 %r1;", "bar.sync 0;", "barrier.sync 15, 128;", "bar.warp.sync -1;",
    "elect.sync %r1|%p1, -1;", "nanosleep.u32 100;", "lop3.b32 %r1, %r2, %r3, %r4, 0x96;",
    "setp.lt.u32 %p1, %r1, 3;", "selp.b32 %r1, 1, 0, %p1;", "prmt.b32 %r1, %r2, 0, 0x0123;",
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f2};",
    "wgmma.fence.sync.aligned;", "createpolicy.fractional.L2::evict_last.b64 %rd1, 1.0;",
    "trap;",
]


@pytest.mark.parametrize("body", ACCEPTED)
def test_private_memory_and_register_forms_are_accepted(body):
    _check(body)


#: The instructions that address memory in the state space their opcode names, and
#: modifiers that do not change which memory they touch.
_ADDRESSED = ("ld", "ldu", "st", "atom", "red", "prefetch", "mbarrier.arrive",
              "ldmatrix.sync.aligned", "wmma.load.a.sync.aligned")
_QUALIFIERS = ("", ".weak", ".relaxed.gpu", ".acquire.cta", ".volatile", ".nc",
               ".L1::no_allocate", ".v4")
_GLOBAL_SPACES = ("", ".global", ".const", ".shared::cluster", ".tex")
_PRIVATE = (".shared", ".shared::cta", ".local", ".param")


def test_every_addressed_form_is_refused_unless_private():
    """The cross product of the addressed instructions, order/cache/vector qualifiers and
    state spaces (either side of the qualifiers, and generic: none): refused exactly when
    the space is not private."""
    cases = 0
    for base, qual, space, first in itertools.product(
            _ADDRESSED, _QUALIFIERS, _GLOBAL_SPACES + _PRIVATE, (True, False)):
        opcode = base + (space + qual if first else qual + space) + ".u32"
        body = f"{opcode} %r1, [%rd1];"
        if space in _PRIVATE:
            _check(body)
        else:
            with pytest.raises(SnippetFault, match=r"memory='none'"):
                _check(body)
        cases += 1
    assert cases == len(_ADDRESSED) * len(_QUALIFIERS) * 9 * 2


def test_memory_any_accepts_every_form():
    """The check is memory="none"'s alone: the default accepts the refused forms."""
    for body in (b for forms in REFUSED.values() for b in forms if "call" not in b):
        check_snippet(body, [], [])


@pytest.mark.parametrize("template, opcode", [
    ("ld.global.u32 $0, [$1];", "ld.global.u32"),
    ("{ .reg .b64 a; cvt.u64.u32 a, $1; st.u32 [a], 0; mov.u32 $0, 0; }", "st.u32"),
    ("{ .reg .b64 a; cvt.u64.u32 a, $1; atom.global.add.u32 $0, [a], 1; }",
     "atom.global.add.u32"),
])
def test_refusal_names_the_call_the_instruction_and_the_fix(template, opcode):
    with pytest.raises(splice.SpliceCallError) as e:
        splice.compile(_elem_kernel(template), _sig(), "sm_80")
    msg = str(e.value)
    assert re.search(rf"inline PTX at .*{HERE}: '{re.escape(opcode)}' ", msg), msg
    assert "declare memory='any'" in msg and "snippet: " in msg


def test_block_scope_snippet_is_checked_too():
    @splice.kernel
    def kern(x, y, z, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        s = splice.asm("{ .reg .b64 a; cvt.u64.u32 a, $1; ld.u32 $0, [a]; }", ct.sum(t),
                       dtype=u32, scope="block", memory="none")
        ct.store(y, index=(ct.bid(0),), tile=t + s, allow_tma=False)
    with pytest.raises(splice.SpliceCallError, match=rf"{HERE}: 'ld.u32' accesses memory "
                                                     r"through a generic address"):
        splice.compile(kern, _sig(), "sm_80")


# ---------------------------------------------------------------------------------------------
# The token order after cuTile's pass, and the bytecode


def _calls_and_stores(ops):
    from splice.tracing.tile_ir import SpliceImpureCall
    calls = [o for o in ops if isinstance(o, SpliceImpureCall)]
    stores = [o for o in ops if type(o).__name__ == "TileStore"]
    return calls, stores


@splice.kernel
def two_snippets_kernel(x, y, z, TILE: ConstInt):
    """z = x + 1 (a plain store), then two memory="none" snippets, then y."""
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(z, index=(ct.bid(0),), tile=t + 1, allow_tma=False)
    a = splice.asm(MAD, t, dtype=u32, pure=False, memory="none")
    b = splice.asm("xor.b32 $0, $1, 5;", t, dtype=u32, pure=False, memory="none")
    ct.store(y, index=(ct.bid(0),), tile=a + b, allow_tma=False)


def test_none_snippet_is_ordered_against_no_array(monkeypatch):
    """After neither the load of x nor the store of z; the second snippet after the first
    (splice's own alias set); the token pass sees both relaxed."""
    ops = token_ordered_ir(monkeypatch, two_snippets_kernel, _sig())
    (first, second), (store_z, _store_y) = _calls_and_stores(ops)
    assert id(store_z) not in ordered_after(first, ops)
    assert id(store_z) not in ordered_after(second, ops)
    assert id(first) in ordered_after(second, ops)
    assert first.memory_order == second.memory_order == ct.MemoryOrder.RELAXED


def test_any_snippet_is_ordered_after_the_store(monkeypatch):
    ops = token_ordered_ir(monkeypatch, _elem_kernel(MAD, memory="any"), _sig())
    [call], (store_z, _y) = _calls_and_stores(ops)
    assert id(store_z) in ordered_after(call, ops)
    assert call.memory_order == ct.MemoryOrder.ACQ_REL


def test_planted_universe_alias_orders_after_the_store(monkeypatch):
    """The ordering test above can fail: a marker pointer of cuTile's own (universe) alias
    set, relaxed, is ordered after the store of z again."""
    from splice.tracing.tile_ir import SpliceMarkerPointer
    monkeypatch.setattr(SpliceMarkerPointer, "splice_alias_set", lambda self, of: None)
    ops = token_ordered_ir(monkeypatch, two_snippets_kernel, _sig())
    (first, _second), (store_z, _y) = _calls_and_stores(ops)
    assert id(store_z) in ordered_after(first, ops)


def test_none_marker_is_acq_rel_in_the_bytecode():
    b = splice.compile(two_snippets_kernel, _sig(), "sm_90")
    assert re.findall(r"atomic_cas_tko (\w+)", b["tileir"]) == ["acq_rel"] * 2
    assert re.findall(r"atom\.global\.(\w+)\.cas", b["ptx"]) == ["acq_rel"] * 2


# ---------------------------------------------------------------------------------------------
# Values on the CPU executor (kernels that are not warp-specialised)


LOCAL_MAD = ("{ .reg .b32 v; .local .b32 s; st.local.b32 [s], $1; ld.local.b32 v, [s]; "
             "mad.lo.u32 $0, v, 3, 1; }")


@pytest.mark.parametrize("template", [MAD, LOCAL_MAD], ids=["registers", "local"])
def test_exec_element_snippet_values(template):
    n, blocks = 128, 2
    x = np.random.default_rng(7).integers(0, 2 ** 20, n * blocks).astype(np.uint32)
    y, z = np.zeros_like(x), np.zeros_like(x)
    b = splice.compile(_elem_kernel(template), _sig(n), "sm_80")
    assert ".reqntid 128" in b.ptx
    launch = run_build(b, (blocks,), x, y, z)
    assert not launch.approx
    np.testing.assert_array_equal(y, x * np.uint32(3) + np.uint32(1))
    np.testing.assert_array_equal(z, x + np.uint32(1))


#: The group's lane sum (0 + ... + 31 = 496, one warp reduction) added to the input.
LANE_SUM = ("{ .reg .b32 l; mov.u32 l, %laneid; redux.sync.add.u32 l, l, 0xffffffff; "
            "add.u32 $0, $1, l; }")


@splice.kernel
def warpgroup_snippet_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    s = splice.asm(LANE_SUM, ct.max(t), dtype=u32, scope="warpgroup", memory="none")
    ct.store(y, index=(ct.bid(0),), tile=t + s, allow_tma=False)


def test_exec_warpgroup_snippet_values():
    """A 128-thread kernel (the group is the block): y = x + max(x of the block) + 496."""
    n, blocks = 128, 2
    x = np.random.default_rng(9).integers(0, 2 ** 20, n * blocks).astype(np.uint32)
    y = np.zeros_like(x)
    b = splice.compile(warpgroup_snippet_kernel, K.signature(K.array(u32), K.array(u32), n),
                       "sm_90")
    assert ".reqntid 128" in b.ptx
    launch = run_build(b, (blocks,), x, y)
    assert not launch.approx
    xs = x.reshape(blocks, n)
    np.testing.assert_array_equal(y.reshape(blocks, n), xs + xs.max(axis=1)[:, None] + 496)


# ---------------------------------------------------------------------------------------------
# The TMA matmul: a warpgroup snippet in its epilogue keeps the plain k-loop


def _matmul_lane_sum(memory):
    @splice.kernel
    def matmul_lane_sum(A, B, C, Mx, tm: ConstInt, tn: ConstInt, tk: ConstInt):
        """C = A @ B by TMA; Mx[block] = the bits of max |C tile| (float32) + 496, by a
        warpgroup snippet."""
        c = ct.astype(fp8.matmul_acc(A, B, tm, tn, tk), C.dtype)
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)
        m = ct.bitcast(ct.astype(ct.max(ct.abs(c)), f32), u32)
        r = splice.asm(LANE_SUM, m, dtype=u32, scope="warpgroup", memory=memory)
        ct.store(Mx, index=(ct.bid(0), ct.bid(1)), tile=ct.reshape(ct.bitcast(r, i32), (1, 1)))
    return matmul_lane_sum


matmul_lane_sum = _matmul_lane_sum("none")
matmul_lane_sum_any = _matmul_lane_sum("any")


def _mm_sig():
    return K.signature(K.array(f16, 2), K.array(f16, 2), K.array(f16, 2), K.array(i32, 2),
                       fp8.TM, fp8.TN, fp8.TK)


def _matmul_row_snippet(memory):
    @splice.kernel
    def matmul_row_snippet(A, B, C, Mx, tm: ConstInt, tn: ConstInt, tk: ConstInt):
        """C = A @ B by TMA; an impure element snippet on the (tm,) row maxima, stored."""
        c = ct.astype(fp8.matmul_acc(A, B, tm, tn, tk), C.dtype)
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)
        m = ct.bitcast(ct.astype(ct.max(ct.abs(c), axis=1), f32), u32)
        r = splice.asm("add.u32 $0, $1, 1;", m, dtype=u32, pure=False, memory=memory)
        ct.store(Mx, index=(ct.bid(0),), tile=ct.bitcast(r, i32))   # compiled, not run
    return matmul_row_snippet


def _plain_shape():
    plain = splice.compile(K.matmul_plain_kernel,
                           K.signature(*[K.array(f16, 2)] * 3, fp8.TM, fp8.TN, fp8.TK), "sm_90")
    return K.kloop_shape(plain.ptx)


def test_warpgroup_snippet_keeps_the_plain_kloop():
    """memory="none": the plain matmul's shape (256 threads, one wgmma group in flight
    across iterations: wait_group 0 and 1). memory="any" (ordered after the k-loop's loads
    and C's store): the k-loop drains each iteration (wait_group 0 only)."""
    b = splice.compile(matmul_lane_sum, _mm_sig(), "sm_90")
    [site] = b.sites
    assert site.scope == "warpgroup"
    assert K.kloop_shape(b.ptx) == _plain_shape() == (256, 16, (0, 1))
    assert "redux.sync.add.u32" in b.spliced_ptx
    undeclared = splice.compile(matmul_lane_sum_any, _mm_sig(), "sm_90")
    assert K.kloop_shape(undeclared.ptx) == (256, 16, (0,))


def test_element_snippet_on_row_maxima_keeps_the_plain_kloop():
    """An impure element snippet on the row maxima: memory="none" keeps the plain shape;
    memory="any" splits off an epilogue warpgroup (384 threads) and drains the k-loop."""
    sig = K.signature(*[K.array(f16, 2)] * 3, K.array(i32), fp8.TM, fp8.TN, fp8.TK)
    b = splice.compile(_matmul_row_snippet("none"), sig, "sm_90")
    assert K.kloop_shape(b.ptx) == _plain_shape()
    undeclared = splice.compile(_matmul_row_snippet("any"), sig, "sm_90")
    assert K.kloop_shape(undeclared.ptx) == (384, 8, (0,))


@pytest.mark.gpu
def test_gpu_matmul_warpgroup_snippet(torch):
    M, N, Kd = 512, 256, 256
    torch.manual_seed(1)
    A = torch.randn(M, Kd, device="cuda", dtype=torch.float16)
    B = torch.randn(Kd, N, device="cuda", dtype=torch.float16)
    C = torch.empty(M, N, device="cuda", dtype=torch.float16)
    gm, gn = M // fp8.TM, N // fp8.TN
    Mx = torch.zeros(gm, gn, device="cuda", dtype=torch.int32)
    ct.launch(torch.cuda.current_stream(), (gm, gn, 1), matmul_lane_sum,
              (A, B, C, Mx, fp8.TM, fp8.TN, fp8.TK))
    torch.cuda.synchronize()
    torch.testing.assert_close(C, (A.float() @ B.float()).half(), rtol=1e-2, atol=1e-1)
    tiles = C.float().abs().reshape(gm, fp8.TM, gn, fp8.TN).amax(dim=(1, 3))
    assert torch.equal(Mx, tiles.view(torch.int32) + 496)


def test_memory_is_in_the_bytecode_and_refused_before_the_cache(fresh_cache):
    """memory= reaches the cache key through the bytecode (the token order differs); the
    refusal runs at the trace, so a cached build of the same snippet under "any" does not
    let it through under "none"."""
    from splice.tracing import trace
    kinds = {m: trace.trace_kernel(_elem_kernel(MAD, memory=m), _sig(), "sm_90").bytecode
             for m in ("any", "none")}
    assert kinds["any"] != kinds["none"]
    template = "{ .reg .b64 a; cvt.u64.u32 a, $1; ld.global.u32 $0, [a]; }"
    splice.compile(_elem_kernel(template, memory="any"), _sig(), "sm_80")
    with pytest.raises(splice.SpliceCallError, match=r"'ld\.global\.u32' accesses \.global"):
        splice.compile(_elem_kernel(template), _sig(), "sm_80")
