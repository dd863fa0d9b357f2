"""Call sequences, links and result paths on the executor, with values: a guarded marker
calls on exactly the threads its guard holds for (``@p`` and ``@!p``); two fragments
defining an internal ``.func`` and ``.global`` of one name each use their own; the barrier
after a block or warpgroup call orders the callee's writes before code between the join and
tileiras's barrier; 32-bit results reach their 64-bit slot zero-extended on the element (fma
and atomic markers, called and inlined) and block result paths."""

from __future__ import annotations

import dataclasses
import re

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.forms import FORMS
from splice.forms.base import SiteCall
from splice.forms.rewrite import splice_calls
from splice.ptxtools import link
from splice.ptxtools.ptx import Module, Param
from splice.types import parse_signature
from support import kernels as K
from support.ptx_exec import Pointer, run, run_build
from support.ptx_interp import HEADER
from support.sites import site_call

f32, i32 = ct.float32, ct.int32

# --------------------------------------------------------------------------- guarded markers

_GUARDED = HEADER + """.visible .global .align 4 .b8 __splice_marker_0[4];
.visible .entry k(.param .u64 k_out, .param .u64 k_in)
{
	.reg .pred %p<3>;
	.reg .b32 %r<9>;
	.reg .b64 %rd<9>;
	ld.param.u64 	%rd1, [k_out];
	ld.param.u64 	%rd2, [k_in];
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.b32 	%r2, [%rd4];
	and.b32 	%r5, %r1, 1;
	setp.ne.s32 	%p1, %r5, 0;
	mov.b32 	%r3, 777;
	mov.b32 	%r4, 555;
	@%p1 atom.global.cas.b32 	%r3, [__splice_marker_0], %r2, 0;
	@!%p1 atom.global.cas.b32 	%r4, [__splice_marker_0], %r2, 0;
	add.s64 	%rd5, %rd1, %rd3;
	st.global.b32 	[%rd5], %r3;
	add.s64 	%rd6, %rd5, 256;
	st.global.b32 	[%rd6], %r4;
	ret;
}
"""

_TRIPLE = HEADER + """.visible .func (.param .b32 ret) callee0(.param .b32 x)
{
	.reg .b32 %r<3>;
	ld.param.b32 	%r1, [x];
	mad.lo.s32 	%r2, %r1, 3, 1;
	st.param.b32 	[ret], %r2;
	ret;
}
"""


def test_a_guarded_marker_calls_on_exactly_the_threads_its_guard_holds_for():
    # odd threads: @%p1 calls (r3 = 3x + 1), r4 keeps 555; even threads the other way round
    sites = {0: site_call(0, "int32(int32)")}
    report = splice_calls(Module(_GUARDED), sites, kernel_name="k")
    merged = link.merge(report.module, [("the callee", Module(_TRIPLE))], "k")
    x = np.arange(64, dtype=np.int32) * 7 - 100
    out = np.zeros(128, np.int32)
    run(merged.text, "k", (1,), Pointer(out), Pointer(x), block=(64,))
    odd = np.arange(64) % 2 == 1
    np.testing.assert_array_equal(out[:64], np.where(odd, 3 * x + 1, 777))
    np.testing.assert_array_equal(out[64:], np.where(odd, 555, 3 * x + 1))


# --------------------------------------------------------------------------- link

def _fragment(name: str, body: str, konst: int) -> str:
    """A PTX fragment exporting ``name``, which calls an internal ``.func helper`` whose
    body is ``body`` (on %r1 and %r3, the fragment's internal ``.global konst``, into
    %r2)."""
    return HEADER.replace("sm_90a", "sm_80") + f"""
.global .align 4 .b32 konst = {konst};

.func (.param .b32 h) helper(.param .b32 x)
{{
	.reg .b32 %r<4>;
	ld.param.b32 	%r1, [x];
	ld.global.b32 	%r3, [konst];
	{body}
	st.param.b32 	[h], %r2;
	ret;
}}

.visible .func (.param .b32 r) {name}(.param .b32 x)
{{
	.reg .b32 %r<3>;
	ld.param.b32 	%r1, [x];
	{{
	.param .b32 hx;
	.param .b32 hr;
	st.param.b32 	[hx], %r1;
	call (hr), helper, (hx);
	ld.param.b32 	%r2, [hr];
	}}
	st.param.b32 	[r], %r2;
	ret;
}}
"""


@pytest.mark.parametrize("inline", ["always", "never"])
def test_two_fragments_with_internal_symbols_of_one_name_each_use_their_own(inline):
    times3 = splice.extern.from_ptx(ptx=_fragment("times3", "mul.lo.s32 \t%r2, %r1, %r3;", 3),
                                    name="times3", inline=inline, signature="int32(int32)")
    plus100 = splice.extern.from_ptx(ptx=_fragment("plus100", "add.s32 \t%r2, %r1, %r3;", 100),
                                     name="plus100", inline=inline, signature="int32(int32)")

    @splice.kernel
    def two_helpers_kernel(x, y, z, TILE: ct.Constant[int]):
        i = ct.bid(0)
        t = ct.load(x, index=(i,), shape=(TILE,))
        ct.store(y, index=(i,), tile=times3(t))
        ct.store(z, index=(i,), tile=plus100(t))

    x = np.arange(256, dtype=np.int32) - 77
    y, z = np.zeros_like(x), np.zeros_like(x)
    b = splice.compile(two_helpers_kernel, K.signature(K.array(i32), K.array(i32),
                                                       K.array(i32), 128), "sm_80")
    run_build(b, (2,), x, y, z)
    np.testing.assert_array_equal(y, 3 * x)
    np.testing.assert_array_equal(z, x + 100)


# --------------------------------------------------------------------------- block scope

# tileiras's shape of a block site (splice.block), with a load between the join and its
# barrier, as tileiras's scheduler may place one: each thread reads the word of the
# buffer its neighbour wrote in the callee. Only the barrier splice puts after the call
# orders that write before the read.
_BLOCK = HEADER + """.visible .global .align 8 .b8 __splice_marker_0[8];
.visible .entry k(.param .u64 k_p0)
.reqntid 128
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<16>;
	.shared .align 8 .b8 smem[8];
	.shared .align 4 .b8 buf[512];
	ld.param.b64 	%rd3, [k_p0];
	mov.u64 	%rd4, buf;
	cvta.shared.u64 	%rd5, %rd4;
	bar.sync 	0;
	mov.u32 	%r1, %tid.x;
	setp.ne.b32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;
	mov.b64 	%rd9, __splice_marker_0;
	atom.global.acq_rel.cas.b64 	%rd10, [%rd9], %rd5, %rd6;
	st.shared.b64 	[smem], %rd10;
$L__BB0_2:
	add.s32 	%r2, %r1, 1;
	and.b32 	%r2, %r2, 127;
	shl.b32 	%r3, %r2, 2;
	mov.u32 	%r4, buf;
	add.s32 	%r4, %r4, %r3;
	ld.shared.b32 	%r5, [%r4];
	bar.sync 	0;
	ld.shared.b64 	%rd11, [smem];
	mul.wide.u32 	%rd7, %r1, 4;
	add.s64 	%rd8, %rd3, %rd7;
	st.global.b32 	[%rd8], %r5;
	mul.wide.u32 	%rd7, %r1, 8;
	add.s64 	%rd8, %rd3, %rd7;
	st.global.b64 	[%rd8+512], %rd11;
	ret;
}
"""

# every thread writes p[tid] = 3 tid + k (through the generic pointer) and returns k - 100
_BLOCK_CALLEE = HEADER + """.visible .func (.param .b32 r) callee0(.param .b64 p0, .param .b32 p1)
{
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<4>;
	ld.param.b64 	%rd1, [p0];
	ld.param.b32 	%r1, [p1];
	mov.u32 	%r2, %tid.x;
	mad.lo.s32 	%r3, %r2, 3, %r1;
	mul.wide.u32 	%rd2, %r2, 4;
	add.s64 	%rd3, %rd1, %rd2;
	st.b32 	[%rd3], %r3;
	add.s32 	%r4, %r1, -100;
	st.param.b32 	[r], %r4;
	ret;
}
"""


def _block_site():
    sig = parse_signature("int32(int32*, int32)")
    return SiteCall(0, "callee0", (Param("p0", ".param .b64", None, ".b64", ".param"),
                                   Param("p1", ".param .b32", None, ".b32", ".param")),
                    Param("r", ".param .b32", None, ".b32", ".param"), sig,
                    "callee0 at test:1", None, FORMS["block"], 64)


def _run_block(k: int) -> np.ndarray:
    text = _BLOCK.replace("%rd10, [%rd9], %rd5, %rd6;", f"%rd10, [%rd9], %rd5, {k};")
    report = splice_calls(Module(text), {0: _block_site()}, kernel_name="k")
    merged = link.merge(report.module, [("the callee", Module(_BLOCK_CALLEE))], "k")
    out = np.zeros(128 + 128 * 2, np.uint32)
    run(merged.text, "k", (1,), Pointer(out), block=(128,))
    return out


def test_a_block_call_orders_the_callees_shared_writes_before_the_code_after_it():
    out = _run_block(7)
    np.testing.assert_array_equal(out[:128], 3 * ((np.arange(128) + 1) % 128) + 7)


@pytest.mark.parametrize("k", [7, 2 ** 31 - 50])
def test_a_block_calls_int32_result_reaches_every_thread_zero_extended(k):
    # k - 100 as int32: negative for k = 7, positive for the other; the 64-bit slot holds
    # the 32 bits zero-extended (tileiras reads the low half; the high half is splice's)
    out = _run_block(k)
    slot = out[128:].view(np.uint64)
    want = np.uint64(np.uint32(np.int64(k - 100) & 0xffffffff))
    assert (slot == want).all(), hex(int(slot[0]))


# --------------------------------------------------------------------------- element results

_MARKER = {
    "atomic": "\tatom.global.cas.b64 \t%rd2, [__splice_marker_0], %rd30, 0;\n",
    "fma": ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
            "\txor.b64 \t%rd4, %rd1, %rd30;\n"
            "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n"),
}


def _element_kernel(marker: str) -> str:
    """Each thread: x = in[tid] (64 bits), the marker's 64-bit result into out[tid] whole."""
    return HEADER + f""".visible .global .align 8 .b8 __splice_marker_0[8];
.visible .entry k(.param .u64 k_out, .param .u64 k_in)
{{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<32>;
	ld.param.u64 	%rd10, [k_out];
	ld.param.u64 	%rd11, [k_in];
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd12, %r1, 8;
	add.s64 	%rd13, %rd11, %rd12;
	ld.global.b64 	%rd30, [%rd13];
{_MARKER[marker]}	add.s64 	%rd14, %rd10, %rd12;
	st.global.b64 	[%rd14], %rd2;
	ret;
}}
"""


# the low 32 bits of the argument, minus 100
_LOW_MINUS_100 = HEADER + """.visible .func (.param .b32 ret) callee0(.param .b64 x)
{
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<2>;
	ld.param.b64 	%rd1, [x];
	cvt.u32.u64 	%r1, %rd1;
	add.s32 	%r2, %r1, -100;
	st.param.b32 	[ret], %r2;
	ret;
}
"""


@pytest.mark.parametrize("inline", [False, True], ids=["call", "inline"])
@pytest.mark.parametrize("marker", ["atomic", "fma"])
@pytest.mark.parametrize("result", ["int32", "uint32"])
def test_a_32_bit_result_fills_its_64_bit_slot_zero_extended(result, marker, inline):
    # results negative as int32 / with the top bit set as uint32, and small positive ones
    site = site_call(0, f"{result}(int64)", marker)
    kernel = Module(_element_kernel(marker))
    fragments = [("the callee", Module(_LOW_MINUS_100))]
    linked = link.prepare(kernel, fragments, "k")
    if inline:
        site = dataclasses.replace(site, inline=linked.functions["callee0"])
    report = splice_calls(kernel, {0: site}, kernel_name="k")
    assert report.replaced == {0: 1}
    merged = link.insert(report.module, link.prepare(report.module, fragments, "k"), "k")
    x = np.array([0, 1, 99, 100, 101, 2 ** 31 + 100, 2 ** 31 + 99, 2 ** 32 - 1,
                  2 ** 40 + 5, 2 ** 63 + 2 ** 31 + 7] * 4, np.uint64)
    out = np.zeros_like(x)
    run(merged.text, "k", (1,), Pointer(out), Pointer(x), block=(x.size,))
    want = ((x & np.uint64(0xffffffff)) - np.uint64(100)) & np.uint64(0xffffffff)
    np.testing.assert_array_equal(out, want)


# --------------------------------------------------------------------------- element arguments

# 2 x of a narrow signed argument read as the whole .b32 the ABI passes it in: right only if
# the call sequence sign-extended it (as C promotes it)
_WHOLE_WORD = HEADER.replace("90a", "80") + """.visible .func (.param .b32 r) pw(.param .b32 x)
{
	.reg .b32 	%r<3>;
	ld.param.b32 	%r1, [x];
	mul.lo.s32 	%r2, %r1, 2;
	st.param.b32 	[r], %r2;
	ret;
}
"""


@pytest.mark.parametrize("inline", ["always", "never"])
@pytest.mark.parametrize("name", ["int8", "int16"])
def test_a_signed_narrow_argument_reaches_its_32_bit_param_sign_extended(name, inline):
    ext = splice.extern.from_ptx(ptx=_WHOLE_WORD, name="pw", signature=f"int32({name})",
                                 inline=inline)
    dt = getattr(ct, name)

    @splice.kernel
    def whole_word_kernel(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(ct.bid(0),), tile=ext(t), allow_tma=False)

    bits = np.dtype(name).itemsize * 8
    x = np.random.default_rng(bits).integers(-(1 << (bits - 1)), 1 << (bits - 1),
                                             256).astype(name)
    x[:2] = (-(1 << (bits - 1)), -1)
    y = np.zeros(256, np.int32)
    b = splice.compile(whole_word_kernel, K.signature(K.array(dt), K.array(i32), 128), "sm_90")
    assert b.sites[0].inlined == (inline == "always")
    run_build(b, (2,), x, y)
    np.testing.assert_array_equal(y, 2 * x.astype(np.int32))


# --------------------------------------------------------------------------- warpgroup scope

# every thread of the group writes out[base + rank] and returns s, with no barrier of its own
group_write = splice.extern(
    source='#include <splice_group.h>\nextern "C" __device__ float group_write(int* out, '
           'int base, float s) { unsigned r = splice_group_rank(); out[base + (int)r] = '
           '3 * (int)r + 1; return s; }',
    name="group_write", scope="warpgroup",
    signature="float32(int32*, int32, float32)")(lambda o, b, s: None)


@splice.kernel
def group_write_kernel(x, out, y, TILE: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t * group_write(out, ct.bid(0) * 128, ct.sum(t)),
             allow_tma=False)


def test_a_warpgroup_call_orders_the_callees_writes_before_the_code_after_it():
    # tileiras's scheduler may put instructions between the join and its barrier (the proof
    # allows straight-line code there): one that reads the word the neighbouring thread
    # wrote in the callee is ordered only by the barrier splice puts after the call
    b = splice.compile(group_write_kernel, K.signature(K.array(f32), K.array(i32),
                                                       K.array(f32), 256), "sm_90")
    ptx = b["spliced_ptx"]
    end = ptx.index("} // splice: end warpgroup call")
    join = re.findall(r"@%__splice_q bra \t(\$L__\w+);", ptx[:end])[-1]
    out_param = re.search(r"\.param \.u64 [^,]*?(\w+_param_3),", ptx).group(1)
    read = (f"{join}:\n\t{{ .reg .b64 %__o, %__a; .reg .b32 %__t, %__c, %__v;\n"
            f"\tld.param.b64 \t%__o, [{out_param}];\n\tmov.u32 \t%__t, %tid.x;\n"
            "\tadd.u32 \t%__t, %__t, 1;\n\tand.b32 \t%__t, %__t, 127;\n"
            "\tmov.u32 \t%__c, %ctaid.x;\n\tmad.lo.u32 \t%__t, %__c, 128, %__t;\n"
            "\tmul.wide.u32 \t%__a, %__t, 4;\n\tadd.s64 \t%__o, %__o, %__a;\n"
            "\tld.global.b32 \t%__v, [%__o];\n\t}\n")
    assert ptx.count(f"{join}:\n") == 1
    ptx = ptx.replace(f"{join}:\n", read)
    x = np.random.default_rng(3).integers(-20, 20, 512).astype(np.float32)
    out, y = np.full(256, -1, np.int32), np.zeros(512, np.float32)
    run(ptx, b.symbol, (2,), x, out, y)
    np.testing.assert_array_equal(out, 3 * (np.arange(256) % 128) + 1)
    xv = x.reshape(2, 256)
    np.testing.assert_array_equal(y.reshape(2, 256), xv * xv.sum(1, keepdims=True))
