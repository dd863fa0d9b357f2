"""Warp collectives and wgmma in a warpgroup-scope callee (:mod:`splice.forms.warpgroup_callee`):
the full mask and the proven ``__activemask()`` pattern are accepted, any other membermask
is refused; a wgmma group closed (``wgmma.wait_group 0``) before every return is accepted,
an open one refused. Through the pipeline (the TMA matmul, whose epilogue group calls)
and on hand-written PTX."""

from __future__ import annotations

import cuda.tile as ct
import pytest

import splice
from splice.errors import SpliceLinkError
from splice.forms.warpgroup_callee import warp_refusal
from splice.ptxtools.ptx import Module
from support import kernels as K

f16 = ct.float16
ConstInt = ct.Constant[int]
SIG = K.signature(K.array(f16, 2), K.array(f16, 2), K.array(f16, 2), 128, 128, 64)


def _kernel(fn):
    @splice.kernel
    def matmul_wg(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
        acc = K.matmul_tile(A, B, tm, tn, tk)
        s = fn(ct.bid(0))
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc + s, C.dtype))
    return matmul_wg


def _callee(body: str, name: str):
    return splice.extern(source='#include <splice_group.h>\n' + body, name=name,
                         scope="warpgroup", signature="int32(int32)")(lambda a: None)


# a + the warp's sum of a over the lanes the mask names
PARTIAL = _callee(r'''
extern "C" __device__ int half_sum(int a) {
    int v = a;
    if ((splice_group_rank() & 31) < 16)
        for (int d = 8; d > 0; d /= 2) v += __shfl_xor_sync(0x0000ffffu, v, d);
    return v;
}''', "half_sum")
COMPUTED = _callee(r'''
extern "C" __device__ int masked_sum(int a) {
    unsigned m = __ballot_sync(0xffffffffu, a > 0);
    return a + __shfl_sync(m, a, 0);
}''', "masked_sum")
FULL = _callee(r'''
extern "C" __device__ int full_sum(int a) {
    int v = a;
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}''', "full_sum")
ACTIVE = _callee(r'''
extern "C" __device__ int active_sum(int a) {
    unsigned m = __activemask();
    return a + __shfl_sync(m, a, 0);
}''', "active_sum")


@pytest.mark.parametrize("fn, mask", [(PARTIAL, r"0x0000ffff|65535|%r\d+"), (COMPUTED, r"%r\d+")],
                         ids=["partial constant", "computed"])
def test_partial_mask_refused(fn, mask):
    with pytest.raises(SpliceLinkError,
                       match=rf"warpgroup-scope extern '{fn._splice_extern.name}'.* a warp "
                             rf"collective whose membermask is not the full mask "
                             rf"\('shfl\.sync[^']*', mask ({mask})\).*Use the full mask "
                             rf"0xffffffff .*__activemask\(\)"):
        splice.compile(_kernel(fn), SIG, "sm_90")


@pytest.mark.parametrize("fn", [FULL, ACTIVE], ids=["full mask", "activemask pattern"])
def test_full_or_active_mask_accepted(fn):
    b = splice.compile(_kernel(fn), SIG, "sm_90")
    assert [s.scope for s in b.sites] == ["warpgroup"]


HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def _ptx(body: str) -> str:
    return (HEAD + ".visible .func (.param .b32 r) f(.param .b32 a)\n{\n.reg .b32 %r<4>;\n"
            ".reg .pred %p<2>;\nld.param.b32 %r1, [a];\n" + body +
            "st.param.b32 [r], %r1;\nret;\n}\n")


@pytest.mark.parametrize("body, refused", [
    ("wgmma.fence.sync.aligned;\nwgmma.commit_group.sync.aligned;\n"
     "wgmma.wait_group.sync.aligned 0;\n", False),
    ("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 1;\n", True),
    ("wgmma.commit_group.sync.aligned;\n", True),
    # closed on one path only
    ("setp.eq.s32 %p1, %r1, 0;\nwgmma.commit_group.sync.aligned;\n@%p1 bra L1;\n"
     "wgmma.wait_group.sync.aligned 0;\nL1:\n", True),
    ("wgmma.fence.sync.aligned;\n", False),
    ("shfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;\n", False),
    ("shfl.sync.bfly.b32 %r2, %r1, 1, 31, 0xffffffff;\n", False),
    ("shfl.sync.bfly.b32 %r2, %r1, 1, 31, 0x7fffffff;\n", True),
    ("vote.sync.ballot.b32 %r2, %p1, %r3;\n", True),
    ("bar.warp.sync 3;\n", True),
    ("mov.b32 %r3, -1;\nshfl.sync.idx.b32 %r2, %r1, 0, 31, %r3;\n", False),
    ("mov.b32 %r3, -1;\n@%p1 mov.b32 %r3, 3;\nshfl.sync.idx.b32 %r2, %r1, 0, 31, %r3;\n",
     True),
    ("redux.sync.add.u32 %r2, %r1, -1;\n", False),
])
def test_warp_refusal_rules(body, refused):
    mod = Module(_ptx(body))
    assert (warp_refusal(mod, "f") is not None) == refused


def test_open_wgmma_group_refused_in_the_pipeline():
    fn = splice.extern.from_ptx(
        ptx=_ptx("wgmma.fence.sync.aligned;\nwgmma.commit_group.sync.aligned;\n")
        .replace("sm_90a", "sm_90"),
        name="f", signature="int32(int32)", scope="warpgroup")
    with pytest.raises(SpliceLinkError,
                       match=r"warpgroup-scope extern 'f'.*an open wgmma group at 'ret;'.*"
                             r"wgmma\.wait_group 0"):
        splice.compile(_kernel(fn), SIG, "sm_90")
