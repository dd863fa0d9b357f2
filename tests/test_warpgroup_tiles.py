"""Tiles into and out of warpgroup-scope calls (scope="warpgroup" with splice.tile): the
epilogue of tileiras's TMA matmul on a (TM,) row vector (fp16/bf16, two tile shapes), a
reduction-then-call kernel, the staging proof's refusals on tileiras's PTX, the shared-memory
limit, kernels run on the CPU executor, planted faults, and GPU kernels against PyTorch."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.errors import SpliceLinkError, SpliceRewriteError
from splice.forms import FORMS
from splice.forms.base import SiteCall
from splice.forms.rewrite import splice_calls
from splice.forms.staging import Staging
from splice.forms.warpgroup_proof import GROUP_SIZE, site_identity
from splice.ptxtools.ptx import Module, Param
from splice.system import toolchain
from splice.types import parse_signature
from support import kernels as K
from support.ptx_exec import ExecError, run_build

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import matmul_rowmax_fp8 as fp8

f16, bf16, f32, i32 = ct.float16, ct.bfloat16, ct.float32, ct.int32
ConstInt = ct.Constant[int]

# ---------------------------------------------------------------------------------------------
# Externs

# y[i] = 1 / x[i] for the group's rows: a tile result, no scalar argument
RECIP_SRC = r'''
#include <splice_group.h>
template <int N> __device__ void recip(const float (&x)[N], float (&y)[N]) {
    for (unsigned r = splice_group_rank(); r < N; r += splice_group_size()) y[r] = 1.0f / x[r];
}'''
recip = splice.extern(source=RECIP_SRC, name="recip", scope="warpgroup",
                      signature="tile(float32)(tile(float32))")

# y[i] = x[N - 1 - i] + s + (the group's size): every thread of the group moves its
# elements, then the group's size is counted with shuffles (a cooperative value)
REVERSE_SRC = r'''
#include <splice_group.h>
template <int N> __device__ void wg_reverse(const float (&x)[N], float s, float (&y)[N]) {
    __shared__ int per_warp[4];
    const unsigned rank = splice_group_rank();
    int v = 1;
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    if (rank % 32 == 0) per_warp[rank / 32] = v;
    splice_group_sync();
    const float size = per_warp[0] + per_warp[1] + per_warp[2] + per_warp[3];
    for (unsigned i = rank; i < N; i += splice_group_size()) y[i] = x[N - 1 - i] + s + size;
    splice_group_sync();
}'''
wg_reverse = splice.extern(source=REVERSE_SRC, name="wg_reverse", scope="warpgroup",
                           signature="tile(float32)(tile(float32), float32)")

# the whole 128x128 float32 accumulator in and out: 64 KB each way
ACC_SRC = r'''
#include <splice_group.h>
template <int R, int C> __device__ void acc_copy(const float (&a)[R][C], float (&y)[R][C]) {
    for (unsigned i = splice_group_rank(); i < R * C; i += splice_group_size())
        y[i / C][i % C] = a[i / C][i % C];
}'''
acc_copy = splice.extern(source=ACC_SRC, name="acc_copy", scope="warpgroup",
                         signature="tile(float32)(tile(float32))")

# ---------------------------------------------------------------------------------------------
# Kernels


def make_matmul_recip(fn):
    @splice.kernel
    def matmul_recip_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
        # the call's tile result feeds C: C = acc / max|acc| per row, a TMA store
        acc = K.matmul_tile(A, B, tm, tn, tk)
        inv = fn(ct.max(ct.abs(acc), axis=1))
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc * inv[:, None], C.dtype))
    return matmul_recip_kernel


matmul_recip_kernel = make_matmul_recip(recip)


# the example's callee declared without memory= ("any"): ordered against every memory
# operation of the kernel, which makes tileiras split off an epilogue warpgroup
row_scales_any = splice.extern(source=fp8.ROW_SCALES_SRC, name="row_scales", scope="warpgroup",
                               signature="void(tile(float32), float32*, float32*)")


@splice.kernel
def matmul_fp8_scales_any(A, B, C, scales, amax, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    """The example's kernel (examples/matmul_rowmax_fp8.py) calling ``row_scales_any``."""
    c = ct.astype(fp8.matmul_acc(A, B, tm, tn, tk), C.dtype)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)
    row_scales_any(ct.astype(ct.max(ct.abs(c), axis=1), ct.float32), scales, amax)


@splice.kernel
def matmul_acc_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = acc_copy(K.matmul_tile(A, B, tm, tn, tk))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype))


@splice.kernel
def sum_then_tile_call_kernel(x, y, TILE: ConstInt):
    # the ct.sum-then-call kernel with the tile itself as an argument: a TMA load,
    # warp-specialised on sm_90
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=wg_reverse(t, ct.sum(t)))


@splice.kernel
def plain_reverse_kernel(x, y, TILE: ConstInt):
    # no TMA: not warp-specialised, a 128-thread block, the group is the block
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=wg_reverse(t, ct.sum(t)) * 2.0, allow_tma=False)


def _mm_sig(dtype, tm, tn=128, tk=64):
    return K.signature(K.array(dtype, 2), K.array(dtype, 2), K.array(dtype, 2), tm, tn, tk)


def _vec_sig(n):
    return K.signature(K.array(f32), K.array(f32), n)


SHAPES = {"fp16 128x128x64": (f16, 128), "bf16 128x128x64": (bf16, 128),
          "fp16 256x128x64": (f16, 256), "bf16 256x128x64": (bf16, 256)}


def _entry(b) -> str:
    ptx = b.spliced_ptx.split(".nv_intermediate_source_section")[0]
    return ptx[ptx.index(".entry"):]


def _group_calls(b) -> list[str]:
    return [span.text(b.spliced_ptx) for span in b.spans if span.kind == "warpgroup call"]


def _staging_bytes(b) -> list[int]:
    return sorted(int(m.group(1)) for m in re.finditer(
        r"^\s*\.shared\s+\.align\s+\d+\s+\.b8\s+\w*__splice_tile_\d+_buf\d+\[(\d+)\];",
        b.spliced_ptx, re.M))


def _check_tile_call(b, tm: int) -> None:
    """The store site's instances are the (tm,) vector's elements per thread of the
    group (128 threads, not the block's), the call is one warpgroup call between splice's
    counting barriers, every store before its entry barrier."""
    store, call = b.sites[:2]
    assert call.scope == "warpgroup" and store.scope == "element"
    assert store.instances == tm // GROUP_SIZE and call.instances == 1
    [text] = _group_calls(b)
    assert "barrier.red.popc.u32 \t%__splice_n, 15, 128, %__splice_p;" in text
    entry = _entry(b)
    stores = [m.start() for m in re.finditer(r"st\.shared\.b32 \t\[%r2\], %r3;", entry)]
    assert len(stores) == tm // GROUP_SIZE
    assert max(stores) < entry.index("barrier.red.popc.u32 \t%__splice_n, 15, 128")


# ---------------------------------------------------------------------------------------------
# Declarations


def test_warpgroup_tile_declaration():
    e = wg_reverse._splice_extern
    assert e.scope == "warpgroup" and e.signature.has_tiles and not e.pure
    assert str(e.signature) == "tile(float32)(tile(float32), float32)"
    p = splice.extern.from_ptx(ptx=".version 8.0\n", name="f", scope="warpgroup",
                               signature="void(tile(float32, (128,)))")._splice_extern
    assert p.signature.has_tiles


# ---------------------------------------------------------------------------------------------
# The proof accepts tileiras's sites


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_tma_matmul_epilogue_row_vector(case):
    """The FP8-scale example's kernel: a (TM,) row maximum passed to a warpgroup tile call
    in the epilogue; C still a TMA store."""
    dtype, tm = SHAPES[case]
    b = splice.compile(fp8.matmul_fp8_scales, fp8.signature(dtype, tm), "sm_90")
    assert "setmaxnreg.dec" in b.ptx and "wgmma.mma_async" in b.ptx    # warp-specialised
    _check_tile_call(b, tm)
    assert _staging_bytes(b) == [4 * tm]                  # the (tm,) float32 vector in
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.global\.shared", _entry(b))
    # no SASS CALL of splice's functions (the callee's m / 448.0f may call CUDA's IEEE
    # division slow path)
    calls = b.sass_call_targets()
    assert set(calls) <= {"__cuda_sm3x_div_rn_noftz_f32_slowpath"}, calls


@pytest.mark.parametrize("case", ["fp16 128x128x64", "bf16 256x128x64"])
def test_tma_matmul_tile_result_feeds_the_store(case):
    dtype, tm = SHAPES[case]
    b = splice.compile(matmul_recip_kernel, _mm_sig(dtype, tm), "sm_90")
    _check_tile_call(b, tm)
    store, call, load = b.sites
    assert load.instances == tm // GROUP_SIZE
    assert _staging_bytes(b) == [4 * tm, 4 * tm]           # in and out
    entry = _entry(b)
    loads = [m.start() for m in re.finditer(r"ld\.shared\.b32 \t%r3, \[%r2\];", entry)]
    assert len(loads) == tm // GROUP_SIZE
    assert entry.index("barrier.sync \t15, 128;") < min(loads)


def test_reduction_then_tile_call():
    b = splice.compile(sum_then_tile_call_kernel, _vec_sig(256), "sm_90")
    assert "setmaxnreg" in b.ptx                           # warp-specialised
    store, call, load = b.sites
    assert call.scope == "warpgroup" and call.instances == 1
    assert store.instances == load.instances == 2          # 256 elements on the group's 128


def test_plain_matmul_kloop_is_pipelined():
    """The baseline of the proxy: tileiras's plain 128x128x64 TMA matmul runs on two
    warpgroups (256 threads), issues a k-step's 8 wgmma before its loop and 8 in it, and
    keeps one group in flight across iterations (``wait_group 1`` in the loop)."""
    b = splice.compile(K.matmul_plain_kernel, _mm_sig(f16, 128), "sm_90")
    assert K.kloop_shape(b.ptx) == (256, 16, (0, 1))


def test_fused_epilogue_keeps_the_plain_kloop():
    """The example's callee is declared memory="arguments" (it writes only scales and
    amax): its call is ordered against neither the k-loop's loads nor C's store, and
    tileiras compiles the fused kernel to the plain matmul's shape. Declared "any", the
    same kernel splits off an epilogue warpgroup and drains the k-loop."""
    plain = splice.compile(K.matmul_plain_kernel, _mm_sig(f16, 128), "sm_90")
    fused = splice.compile(fp8.matmul_fp8_scales, fp8.signature(), "sm_90")
    assert K.kloop_shape(fused.ptx) == K.kloop_shape(plain.ptx) == (256, 16, (0, 1))
    _check_tile_call(fused, 128)                           # the staging still proven
    undeclared = splice.compile(matmul_fp8_scales_any, fp8.signature(), "sm_90")
    assert K.kloop_shape(undeclared.ptx) == (384, 8, (0,))


def test_epilogue_group_is_the_second_warpgroup():
    """With a reduction in the epilogue tileiras splits off an epilogue warpgroup (threads
    128-255) after a setmaxnreg.dec; its site's guard tests tid.x - 128 (the leader is
    thread 128), and the call there is an inlined body without calls."""
    b = splice.compile(matmul_fp8_scales_any, fp8.signature(), "sm_90")
    assert ".reqntid 384" in b.ptx
    [text] = _group_calls(b)
    assert "sub.u32 \t%__splice_rank, %__splice_tid, 128;" in text
    assert "setp.ne.u32 \t%__splice_q, %__splice_tid, 128;" in text
    assert not re.search(r"^\s*call", text, re.M)


# ---------------------------------------------------------------------------------------------
# Broken variants, made from tileiras's PTX of matmul_recip_kernel


def _b32(name):
    return Param(name, ".param .b32", None, ".b32", ".param")


# the call's callee as an inlined body that calls nothing: what the registers step accepts
# after tileiras's setmaxnreg.dec
_CALL0 = Module(".version 8.0\n.target sm_90a\n.address_size 64\n"
                ".visible .func call0()\n{\n\tret;\n}\n")


def _recip_sites(elements=128):
    inline = (_CALL0, _CALL0.functions["call0"])
    return {
        0: SiteCall(0, "st0", (_b32("p0"), _b32("p1")), None,
                    parse_signature("void(float32, int32)"), "store at test:1", None,
                    FORMS["element"], 32,
                    staging=Staging("store", 0, elements, "tile argument 1 of 'recip'")),
        1: SiteCall(1, "call0", (), None, parse_signature("void()"), "call at test:1", inline,
                    FORMS["warpgroup"], 32, staging=Staging("call", 0, 0, "the call")),
        2: SiteCall(2, "ld0", (_b32("p0"),), _b32("r"), parse_signature("float32(int32)"),
                    "load at test:1", None, FORMS["element"], 32,
                    staging=Staging("load", 0, elements, "the tile result of 'recip'")),
    }


@pytest.fixture(scope="module")
def recip_ptx() -> str:
    return splice.compile(matmul_recip_kernel, _mm_sig(f16, 128), "sm_90").ptx


def _marker(ptx: str, k: int) -> str:
    """The two statements of marker ``k``: its address and its atom."""
    m = re.search(rf"\tmov\.b64 \t(%rd\d+), __splice_marker_{k};\n(?:\s*\.loc[^\n]*\n)*"
                  rf"\s*atom\.global\.acq_rel\.cas\.b\d+ \t[^\n]*\[\1\][^\n]*\n", ptx)
    assert m, k
    return m.group(0)


def _move(ptx: str, k: int, before: str) -> str:
    text = _marker(ptx, k)
    ptx = ptx.replace(text, "", 1)
    at = ptx.index(before)
    return ptx[:at] + text + ptx[at:]


def _store_out_of_stretch(ptx):
    # before the mbarrier wait loop that opens the epilogue's straight-line code
    loop = re.findall(r"(\$L__BB\d+_\d+):\n", ptx[:ptx.index("__splice_marker_0;")])[-1]
    return _move(ptx, 0, f"{loop}:\n")


def _store_into_producer_branch(ptx):
    # into the code of the warps after the epilogue warpgroup (tileiras's TMA producer)
    m = list(re.finditer(r"setmaxnreg\.dec\.sync\.aligned\.u32 \t\d+;\n", ptx))[-1]
    return _move(ptx, 0, ptx[m.end():ptx.index("\n", m.end()) + 1])


def _load_before_the_join(ptx):
    # into the straight-line code before the call's guard (before the group's call)
    call = ptx.index(_marker(ptx, 1))
    guard = list(re.finditer(r"\t@%p\d+ bra \t\$L__BB\d+_\d+;\n", ptx[:call]))[-1]
    return _move(ptx, 2, guard.group(0))


BROKEN = {
    "store moved out of the stretch": (_store_out_of_stretch,
                                       r"stores before the call': tile argument 1 of 'recip' "
                                       r"has 0 store instance\(s\) per thread.*not 1 \(128 "
                                       r"elements on 128 threads\)"),
    "store in the producer branch": (_store_into_producer_branch,
                                     r"stores before the call'.*has 0 store instance"),
    "load before the join": (_load_before_the_join,
                             r"loads after the call'.*has 0 load instance"),
}


def test_unedited_ptx_is_accepted(recip_ptx):
    rep = splice_calls(Module(recip_ptx), _recip_sites(), kernel_name="k")
    assert rep.replaced == {0: 1, 1: 1, 2: 1}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_variant_refused(recip_ptx, case):
    edit, msg = BROKEN[case]
    text = edit(recip_ptx)
    assert text != recip_ptx
    with pytest.raises(SpliceRewriteError, match=r"cannot prove the shared-memory staging of "
                                                 r"a tile call: step '" + msg):
        splice_calls(Module(text), _recip_sites(), kernel_name="k")


def test_epilogue_guard_needs_an_immediate_offset(recip_ptx):
    # tid.x - 128 is the rank; tid.x + a register is not a known thread
    m = re.search(r"add\.s32 \t(%r\d+), (%r\d+), -128;", recip_ptx)
    assert m
    text = recip_ptx.replace(m.group(0), f"add.s32 \t{m.group(1)}, {m.group(2)}, %r1;", 1)
    with pytest.raises(SpliceRewriteError, match=r"at step 'site shape': the branch before "
                                                 r"the marker .* does not skip exactly the "
                                                 r"threads with tid.x != c"):
        splice_calls(Module(text), _recip_sites(), kernel_name="k")


def test_element_count_counts_the_group(recip_ptx):
    # 256 elements on the group's 128 threads are 2 stores per thread: one is missing
    with pytest.raises(SpliceRewriteError, match=r"1 store instance\(s\) per thread .* "
                                                 r"warpgroup call .* not 2 \(256 elements on "
                                                 r"128 threads\)"):
        splice_calls(Module(recip_ptx), _recip_sites(256), kernel_name="k")


def test_planted_wrong_thread_count_is_caught(monkeypatch, fresh_cache):
    """The form gives the staging proof the group's 128 threads; the block's 384 there
    (the fault of taking .reqntid at warpgroup scope) refuses tileiras's 256-row matmul."""
    from splice.forms.warpgroup import WarpgroupForm
    real = WarpgroupForm.call_ends

    def block_threads(self, body, i):
        g, j, _n = real(self, body, i)
        return g, j, int(body.module.text.split(".reqntid ")[1].split()[0])
    monkeypatch.setattr(WarpgroupForm, "call_ends", block_threads)
    with pytest.raises(SpliceRewriteError, match=r"on 384 threads"):
        splice.compile(matmul_fp8_scales_any, fp8.signature(f16, 256), "sm_90")


def test_called_callee_after_setmaxnreg_is_refused():
    called = splice.extern(source=RECIP_SRC.replace("__device__ void recip",
                                                    "__device__ __noinline__ void recip"),
                           name="recip", scope="warpgroup", inline="never",
                           signature="tile(float32)(tile(float32))")
    k = make_matmul_recip(called)
    with pytest.raises(SpliceRewriteError, match=r"step 'registers': the call site is reached "
                                                 r"after a setmaxnreg.dec.*only an inlined "
                                                 r"body that calls nothing"):
        splice.compile(k, _mm_sig(f16, 128), "sm_90")


# ---------------------------------------------------------------------------------------------
# The shared-memory limit


# a CTA barrier two calls deep: in a helper the template calls, and PTX that calls a
# function no fragment defines
HELPER_SYNC_SRC = r'''
__device__ __noinline__ void helper_sync() { __syncthreads(); }
template <int N> __device__ void sync_rows(const float (&m)[N], float* out) { helper_sync(); }'''
CALLS_OUTSIDE_PTX = """.version 8.0
.target sm_90
.address_size 64
.extern .func outside_f();
.visible .func sync_rows(.param .b64 m, .param .b64 out)
{
\tcall outside_f, ();
\tret;
}
"""


@pytest.mark.parametrize("case", ["barrier in a helper", "call outside the PTX"])
def test_callee_refusal_names_the_users_functions(case):
    """The chain of calls a refusal names starts at the user's function, not at splice's
    staging call and trampoline (``__splice_tile_0_call``, ``splice_tile_<hash>``), and
    reads as C++ names."""
    if case == "barrier in a helper":
        fn = splice.extern(source=HELPER_SYNC_SRC, name="sync_rows", scope="warpgroup",
                           signature="void(tile(float32), float32*)")
        want = r"in '(helper_sync\(\)|_Z11helper_syncv)', reached through sync_rows -> " \
               r"(helper_sync\(\)|_Z11helper_syncv)\."
    else:
        fn = splice.extern.from_ptx(ptx=CALLS_OUTSIDE_PTX, name="sync_rows", scope="warpgroup",
                                    signature="void(tile(float32), float32*)")
        want = r"calls 'outside_f' \(through sync_rows -> outside_f\)"

    @splice.kernel
    def sync_rows_kernel(x, out, TILE: ConstInt):
        fn(ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False), out)
    with pytest.raises(SpliceLinkError) as e:
        splice.compile(sync_rows_kernel, _vec_sig(128), "sm_90")
    assert re.search(want, e.value.message), e.value.message
    assert "splice_tile" not in e.value.message


def test_accumulator_does_not_fit_beside_tileiras(monkeypatch):
    def no_ptxas(*a, **kw):
        raise AssertionError("ptxas ran")
    monkeypatch.setattr(toolchain, "run_ptxas", no_ptxas)
    with pytest.raises(SpliceLinkError) as e:
        splice.compile(matmul_acc_kernel, _mm_sig(f16, 128), "sm_90")
    msg = e.value.message
    assert "more than the 232448 the GPU allows" in msg
    assert "splice's tile staging buffers: 131072 bytes" in msg      # 2 x 128 x 128 x 4
    tileiras = int(re.search(r"the kernel's own PTX \(tileiras output\): (\d+) bytes",
                             msg).group(1))
    assert tileiras > 190_000
    assert f"alone: {tileiras + 131072} bytes" in msg
    assert "matmul_acc_kernel" in msg


def test_row_vector_fits_beside_tileiras():
    b = splice.compile(fp8.matmul_fp8_scales, fp8.signature(), "sm_90")
    sizes = {m.group(1): int(m.group(2)) for m in re.finditer(
        r"^\s*(?:\.weak\s+)?\.shared\s+\.align\s+\d+\s+\.b8\s+([\w$]+)\[(\d+)\];",
        b.spliced_ptx, re.M)}
    assert [v for k, v in sizes.items() if "__splice_tile_0_buf" in k] == [512]
    assert any("per_warp" in k for k in sizes)               # the callee's __shared__
    assert 196_000 < sum(sizes.values()) <= 232_448


# ---------------------------------------------------------------------------------------------
# CPU executor: the 128-thread kernel without warp specialisation (the group is the block)


@pytest.mark.parametrize("n", [128, 256])
def test_exec_warpgroup_tile_call(n):
    x = np.random.default_rng(n).integers(-50, 50, 2 * n).astype(np.float32)
    y = np.zeros_like(x)
    b = splice.compile(plain_reverse_kernel, _vec_sig(n), "sm_90")
    assert ".reqntid 128" in b.ptx and len(_group_calls(b)) == 1
    launch = run_build(b, (2,), x, y)
    assert not launch.approx
    xv = x.reshape(2, n)
    want = (xv[:, ::-1] + xv.sum(1, keepdims=True) + 128.0) * 2.0
    np.testing.assert_array_equal(y.reshape(2, n), want)


@splice.kernel
def abs_row_scales_kernel(x, scales, amax, TILE: ConstInt):
    # the example's callee (examples/matmul_rowmax_fp8.py) on |x| of one (TILE,) tile per
    # block; no TMA: a 128-thread block, the group is the block
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    fp8.row_scales(ct.abs(t), scales, amax)


def _exec_row_scales(src=None, blocks=3):
    """(x, scales, amax) after the example's ``row_scales`` (or ``src`` in its place) ran
    on the executor over ``blocks`` tiles of 128 values of x."""
    kernel = abs_row_scales_kernel
    if src is not None:
        ext = splice.extern(source=src, name="row_scales", scope="warpgroup",
                            signature="void(tile(float32), float32*, float32*)",
                            memory="arguments")

        @splice.kernel
        def kernel(x, scales, amax, TILE: ConstInt):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
            ext(ct.abs(t), scales, amax)
    x = (np.random.default_rng(7).standard_normal(blocks * 128) * 100).astype(np.float32)
    scales, amax = np.zeros_like(x), np.zeros(1, np.float32)
    b = splice.compile(kernel, K.signature(K.array(f32), K.array(f32), K.array(f32), 128),
                       "sm_90")
    assert ".reqntid 128" in b.ptx and len(_group_calls(b)) == 1
    run_build(b, (blocks,), x, scales, amax)
    return x, scales, amax


def test_exec_example_row_scales():
    """The example's callee computes what its reference says: each row's |max| / 448
    (IEEE division) by an atomic max per row, and the tensor's |max| through the warp
    reduction, the group barrier and one atomic per block (global reductions, REDUX)."""
    x, scales, amax = _exec_row_scales()
    np.testing.assert_array_equal(scales, np.abs(x) / np.float32(448.0))
    assert amax[0] == np.abs(x).max()


def test_exec_example_row_scales_without_its_barrier_is_caught():
    """The test above can fail: without ``splice_group_sync()`` thread 0 reads the other
    warps' maxima with no barrier after their writes, which the executor refuses."""
    src = fp8.ROW_SCALES_SRC.replace("    splice_group_sync();\n", "")
    assert src != fp8.ROW_SCALES_SRC
    with pytest.raises(ExecError, match="shared-memory race"):
        _exec_row_scales(src)


def test_planted_wrong_slot_index_changes_the_values(monkeypatch, fresh_cache):
    """The executor test above can fail: staging each element one slot off (the store's
    address of element i + 1) gives other values."""
    from splice.inputs import tile_fragment as tiles
    real = tiles._address

    def off_by_one(buf, elem):
        lines = real(buf, elem)
        return lines[:1] + [f"\tadd.u32 \t%r2, %r2, {tiles.byte_size(elem)};"] + lines[1:]
    monkeypatch.setattr(tiles, "_address", off_by_one)
    n = 128
    x = np.arange(2 * n, dtype=np.float32)
    y = np.zeros_like(x)
    b = splice.compile(plain_reverse_kernel, _vec_sig(n), "sm_90")
    assert "add.u32 \t%r2, %r2, 4;" in b.spliced_ptx
    run_build(b, (2,), x, y)
    xv = x.reshape(2, n)
    want = (xv[:, ::-1] + xv.sum(1, keepdims=True) + 128.0) * 2.0
    assert not np.array_equal(y.reshape(2, n), want)


# ---------------------------------------------------------------------------------------------
# A persistent matmul (a for loop over C's row tiles) and an epilogue with two calls

# scales[tile * N + r] = max(scales[...], m[r] / 448): the tile's rows by the tile index
# passed in (a persistent block works on several tiles; blockIdx.x names none of them)
TILE_SCALES_SRC = r'''
#include <splice_group.h>
template <int N> __device__ void tile_scales(const float (&m)[N], float* scales, int tile) {
    __builtin_assume(__isGlobal(scales));
    for (unsigned r = splice_group_rank(); r < N; r += splice_group_size())
        atomicMax((int*)&scales[(long long)tile * N + r], __float_as_int(m[r] / 448.0f));
}'''
tile_scales = splice.extern(source=TILE_SCALES_SRC, name="tile_scales", scope="warpgroup",
                            signature="void(tile(float32), float32*, int32)",
                            memory="arguments")


@splice.kernel
def persistent_scales_kernel(A, B, C, scales, amax, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    # the example's signature (amax unused): a warpgroup tile call per row tile of C
    for i in range(ct.bid(0), ct.num_tiles(C, axis=0, shape=(tm, tn)), ct.num_blocks(0)):
        acc = ct.full((tm, tn), 0, dtype=ct.float32)
        for k in range(ct.num_tiles(A, axis=1, shape=(tm, tk))):
            a = ct.load(A, index=(i, k), shape=(tm, tk), padding_mode=ct.PaddingMode.ZERO)
            b = ct.load(B, index=(k, 0), shape=(tk, tn), padding_mode=ct.PaddingMode.ZERO)
            acc = ct.mma(a, b, acc)
        c = ct.astype(acc, C.dtype)
        ct.store(C, index=(i, 0), tile=c)
        tile_scales(ct.astype(ct.max(ct.abs(c), axis=1), ct.float32), scales, i)


def _persistent_reference(A, B):
    """(C, scales) of the persistent kernel, in NumPy (A, B: float16 with small integer
    values, so that C is exact)."""
    c = (A.astype(np.float32) @ B.astype(np.float32)).astype(np.float16)
    return c, np.abs(c).astype(np.float32).max(axis=1) / np.float32(448.0)


def test_persistent_loop_call_site():
    """On sm_90 (warp-specialised) the call in the persistent loop is proven at every copy
    tileiras makes of the loop's epilogue (2, measured): each a group call whose (128,)
    tile is one store per thread of the group."""
    b = splice.compile(persistent_scales_kernel, fp8.signature(f16, 128), "sm_90")
    assert "wgmma.mma_async" in b.ptx and "setmaxnreg.dec" in b.ptx
    store, call = b.sites
    assert call.scope == "warpgroup" and call.instances >= 1
    assert store.instances == call.instances == len(_group_calls(b))


def test_exec_persistent_loop_call():
    """The persistent kernel on the CPU executor (sm_80: not warp-specialised, mma.sync, a
    128-thread block): 2 blocks over 4 row tiles, each tile's scales exactly NumPy's."""
    b = splice.compile(persistent_scales_kernel, fp8.signature(f16, 128), "sm_80")
    assert ".reqntid 128" in b.ptx and len(_group_calls(b)) == 1
    rng = np.random.default_rng(3)
    A = rng.integers(-3, 4, (512, 64)).astype(np.float16)
    B = rng.integers(-3, 4, (64, 128)).astype(np.float16)
    C = np.zeros((512, 128), np.float16)
    scales, amax = np.zeros(512, np.float32), np.zeros(1, np.float32)
    run_build(b, (2, 1, 1), A, B, C, scales, amax)
    want_c, want_scales = _persistent_reference(A, B)
    np.testing.assert_array_equal(C, want_c)
    np.testing.assert_array_equal(scales, want_scales)


@splice.kernel
def two_call_epilogue_kernel(A, B, C, sums, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    # C = acc / max|acc| per row (a tile result), and the rows' sums added into sums
    acc = K.matmul_tile(A, B, tm, tn, tk)
    inv = recip(ct.max(ct.abs(acc), axis=1))
    row_sums(ct.sum(acc, axis=1), sums)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc * inv[:, None], C.dtype))


ROW_SUMS_SRC = r'''
#include <splice_group.h>
template <int N> __device__ void row_sums(const float (&s)[N], float* sums) {
    __builtin_assume(__isGlobal(sums));
    for (unsigned r = splice_group_rank(); r < N; r += splice_group_size())
        atomicAdd(&sums[blockIdx.x * N + r], s[r]);
}'''
row_sums = splice.extern(source=ROW_SUMS_SRC, name="row_sums", scope="warpgroup",
                         signature="void(tile(float32), float32*)", memory="arguments")


def _two_call_sig(dtype, tm):
    return K.signature(K.array(dtype, 2), K.array(dtype, 2), K.array(dtype, 2), K.array(f32),
                       tm, 128, 64)


@pytest.mark.parametrize("case", ["bf16 64x128x64", "fp16 256x128x64"])
def test_two_warpgroup_calls_in_one_epilogue(case):
    """Two tile calls in the TMA matmul's epilogue: two group calls, each counting its own
    site identity at its second entry barrier."""
    dtype, tm = {"bf16 64x128x64": (bf16, 64), "fp16 256x128x64": (f16, 256)}[case]
    b = splice.compile(two_call_epilogue_kernel, _two_call_sig(dtype, tm), "sm_90")
    assert "wgmma.mma_async" in b.ptx
    calls = _group_calls(b)
    assert len(calls) == 2
    idents = sorted(int(m.group(1)) for t in calls for m in
                    [re.search(r"setp\.lt\.u32 \t%__splice_p, %__splice_rank, (\d+);", t)])
    assert idents == sorted({site_identity(s) for s in b.sites
                             if s.scope == "warpgroup"})
    assert len(set(idents)) == 2


# ---------------------------------------------------------------------------------------------
# GPU: against PyTorch


@pytest.mark.gpu
def test_gpu_persistent_loop_call(torch):
    """The persistent kernel on sm_90 (warp-specialised): fewer blocks than row tiles."""
    from support.gpu import launch
    rng = np.random.default_rng(3)
    A_np = rng.integers(-3, 4, (1024, 128)).astype(np.float16)
    B_np = rng.integers(-3, 4, (128, 128)).astype(np.float16)
    A, B = torch.from_numpy(A_np).cuda(), torch.from_numpy(B_np).cuda()
    C = torch.zeros(1024, 128, device="cuda", dtype=torch.float16)
    scales = torch.zeros(1024, device="cuda", dtype=torch.float32)
    amax = torch.zeros(1, device="cuda", dtype=torch.float32)
    launch(torch, (3, 1, 1), persistent_scales_kernel, (A, B, C, scales, amax, 128, 128, 64))
    want_c, want_scales = _persistent_reference(A_np, B_np)
    np.testing.assert_array_equal(C.cpu().numpy(), want_c)
    np.testing.assert_array_equal(scales.cpu().numpy(), want_scales)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["bf16 64x128x64", "fp16 256x128x64"])
def test_gpu_two_warpgroup_calls_in_one_epilogue(torch, case):
    from support.gpu import launch
    dtype, tm = {"bf16 64x128x64": (bf16, 64), "fp16 256x128x64": (f16, 256)}[case]
    dt = getattr(torch, "float16" if dtype is f16 else "bfloat16")
    A = torch.randint(-3, 4, (2 * tm, 128), device="cuda").to(dt)
    B = torch.randint(-3, 4, (128, 256), device="cuda").to(dt)
    C = torch.empty(2 * tm, 256, device="cuda", dtype=dt)
    sums = torch.zeros(2 * tm, device="cuda", dtype=torch.float32)
    launch(torch, (2, 2, 1), two_call_epilogue_kernel, (A, B, C, sums, tm, 128, 64))
    acc = A.float() @ B.float()                       # exact: small integers
    blocks = acc.view(2 * tm, 2, 128).abs().amax(dim=2, keepdim=True)
    want = (acc.view(2 * tm, 2, 128) / blocks).view(2 * tm, 256).to(dt)
    torch.testing.assert_close(C, want, rtol=2e-2, atol=2e-2)
    assert torch.equal(sums, acc.sum(dim=1)), (sums - acc.sum(dim=1)).abs().max()


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["fp16 128x128x64", "bf16 256x128x64"])
def test_gpu_matmul_tile_result(torch, case):
    from support.gpu import launch
    dtype, tm = SHAPES[case]
    dt = getattr(torch, "float16" if dtype is f16 else "bfloat16")
    A = torch.randn(2 * tm, 128, device="cuda", dtype=dt)
    B = torch.randn(128, 256, device="cuda", dtype=dt)
    C = torch.empty(2 * tm, 256, device="cuda", dtype=dt)
    launch(torch, (2, 2, 1), matmul_recip_kernel, (A, B, C, tm, 128, 64))
    acc = A.float() @ B.float()
    blocks = acc.view(2 * tm, 2, 128).abs().amax(dim=2, keepdim=True)
    want = (acc.view(2 * tm, 2, 128) / blocks).view(2 * tm, 256).to(dt)
    torch.testing.assert_close(C, want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [sum_then_tile_call_kernel, plain_reverse_kernel])
def test_gpu_reverse_tile_call(torch, kernel):
    from support.gpu import launch
    x = torch.randint(-50, 50, (4 * 256,), device="cuda").float()
    y = torch.empty_like(x)
    launch(torch, (4,), kernel, (x, y, 256))
    xv = x.view(4, 256)
    want = xv.flip(1) + xv.sum(1, keepdim=True) + 128.0
    if kernel is plain_reverse_kernel:
        want = want * 2.0
    assert torch.equal(y.view(4, 256), want)


# ---------------------------------------------------------------------------------------------
# CPU executor: a tile call in each group position of a warp-specialised block (tileiras's
# PTX of the 128-thread kernel given the shape of a 256-thread block whose warpgroup at
# threads 0-127 or 128-255 runs it: support.group_positions), results used after the call

# sum_i x[i] (i % 5 + 1), every thread of the group the whole sum: a scalar result
TILE_DOT_SRC = r'''
template <int N> __device__ float tile_dot(const float (&x)[N]) {
    float s = 0.0f;
    for (int i = 0; i < N; ++i) s += x[i] * (float)(i % 5 + 1);
    return s;
}'''
tile_dot = splice.extern(source=TILE_DOT_SRC, name="tile_dot", scope="warpgroup",
                         signature="float32(tile(float32))")


@splice.kernel
def plain_dot_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t + tile_dot(t), allow_tma=False)


def _want_reverse(xv):
    return (xv[:, ::-1] + xv.sum(1, keepdims=True) + 128.0) * 2.0


def _want_dot(xv):
    return xv + (xv * (np.arange(xv.shape[1]) % 5 + 1)).sum(1, keepdims=True)


@pytest.mark.parametrize("n", [128, 256])
@pytest.mark.parametrize("kernel, want", [(plain_reverse_kernel, _want_reverse),
                                          (plain_dot_kernel, _want_dot)],
                         ids=["tile result", "scalar result"])
@pytest.mark.parametrize("first", [0, 128], ids=["threads 0-127", "threads 128-255"])
def test_exec_tile_call_in_each_group_position(first, kernel, want, n, fresh_cache,
                                               monkeypatch):
    """The group's elements staged in, every thread of the group (and no other: the reverse
    adds the group's size it counts) calling once, the tile result read back by the group's
    threads and the scalar result broadcast from the leader, used after the call."""
    from support.group_positions import compile_in_group
    b = compile_in_group(kernel, _vec_sig(n), first, monkeypatch)
    [text] = _group_calls(b)
    assert f"sub.u32 \t%__splice_rank, %__splice_tid, {first};" in text
    x = np.random.default_rng(n + first).integers(-50, 50, 2 * n).astype(np.float32)
    y = np.zeros_like(x)
    run_build(b, (2,), x, y)
    np.testing.assert_array_equal(y.reshape(2, n), want(x.reshape(2, n)))
