"""Tiles into and out of block-scope calls (splice.tile): every declaration form, the PTX
of (128,), (16, 16) and (1024,) tiles, each refusal and limit, the staging proof on
hand-written PTX, and kernels checked against PyTorch (GPU)."""

from __future__ import annotations

import dataclasses
import re

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.errors import (
    SpliceCallError,
    SpliceCompileError,
    SpliceDeclarationError,
    SpliceLinkError,
    SpliceRewriteError,
)
from splice.forms import FORMS
from splice.forms.base import SiteCall
from splice.forms.rewrite import splice_calls
from splice.forms.staging import Staging
from splice.ptxtools.ptx import Module, Param
from splice.types import TileType, parse_signature
from support import kernels as K
from support.ptx_exec import run_build

f32, i32 = ct.float32, ct.int32
ConstInt = ct.Constant[int]

# ---------------------------------------------------------------------------------------------
# Externs: templates instantiated for each call's shape

REVERSE_SRC = r'''
template <int N> __device__ void reverse_tile(const float (&x)[N], float (&y)[N]) {
    for (int i = threadIdx.x; i < N; i += blockDim.x) y[i] = x[N - 1 - i];
}'''

# y[c][r] = x[r][c] + k: a 2-D tile, a scalar between the tiles, a result of another shape
TRANSPOSE_SRC = r'''
template <int R, int C>
__device__ void transpose_tile(const float (&x)[R][C], int k, float (&y)[C][R]) {
    for (int i = threadIdx.x; i < R * C; i += blockDim.x) y[i % C][i / C] = x[i / C][i % C] + k;
}'''

# in place (the input buffer is the callee's to use), a scalar result: the tile's sum
SUM_SRC = r'''
template <int N> __device__ float tile_sum(float (&x)[N]) {
    __shared__ float total;
    for (int d = N / 2; d > 0; d /= 2) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) x[i] += x[i + d];
        __syncthreads();
    }
    if (threadIdx.x == 0) total = x[0];
    __syncthreads();
    return total;
}'''


@splice.extern(source=REVERSE_SRC, name="reverse_tile", scope="block")
def reverse_tile(x: splice.tile(f32)) -> splice.tile(f32): ...


@splice.extern(source=TRANSPOSE_SRC, name="transpose_tile", scope="block")
def transpose_tile(x: splice.tile(f32, (16, 16)), k: i32) -> splice.tile(f32): ...


tile_sum = splice.extern(source=SUM_SRC, name="tile_sum", scope="block",
                         signature="float32(tile(float32))")


@splice.kernel
def reverse_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=reverse_tile(t) + 1.0)


@splice.kernel
def transpose_kernel(x, y, k: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0), 0), shape=(TILE, TILE), allow_tma=False)
    ct.store(y, index=(ct.bid(0), 0), tile=transpose_tile(t, k))


@splice.kernel
def sum_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t * 0.0 + tile_sum(t))


@splice.kernel
def loop_branch_kernel(x, y, reps: int, flag: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    for i in range(reps):            # a tile call in a loop
        t = reverse_tile(t) + 1.0
    if flag > 0:                     # ... and under a branch on a uniform scalar
        t = reverse_tile(t) * 2.0
    ct.store(y, index=(ct.bid(0),), tile=t)


def _vec_sig(n):
    return K.signature(K.array(f32), K.array(f32), n)


def _tile_kernel(fn):
    """A kernel storing ``fn(t)`` for each block's 1-D tile ``t`` of ``x``."""
    @splice.kernel
    def tile_kernel(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(ct.bid(0),), tile=fn(t))
    return tile_kernel


def _entry(b) -> str:
    ptx = b.spliced_ptx.split(".nv_intermediate_source_section")[0]
    return ptx[ptx.index(".entry"):]


def _shared_bytes(b) -> dict[str, int]:
    """Static shared memory by declaration in the merged PTX: name -> bytes."""
    ptx = b.spliced_ptx.split(".nv_intermediate_source_section")[0]
    return {m.group(2): int(m.group(3)) for m in re.finditer(
        r"^\s*\.shared\s+\.align\s+(\d+)\s+\.b8\s+([\w$]+)\[(\d+)\];", ptx, re.M)}


def _barriers(b) -> int:
    return len(re.findall(r"^\s*(?:bar|barrier)\.", _entry(b), re.M))


def _exec(kernel, sig, grid, *args):
    """Compile for sm_90 and run on the CPU executor (``args`` NumPy arrays and scalars,
    updated in place); every instruction the tile kernels use is exact."""
    launch = run_build(splice.compile(kernel, sig, "sm_90"), grid, *args)
    assert not launch.approx
    return launch


def _rows(n, rows=2, seed=0):
    return np.random.default_rng(seed).standard_normal(rows * n).astype(np.float32)


def test_user_tile_call_on_an_unaligned_16384_tile():
    """Issue 37: a block tile call on a (16384,) float32 tile of arrays not known to be
    aligned was refused ("does not skip exactly the threads with tid.x != 0": tileiras
    takes tid.x through cvt.u64.u32 and back); the proof evaluates that round trip."""
    n = 16384
    sig = K.signature(K.unaligned_array(f32), K.unaligned_array(f32), n)
    b = splice.compile(reverse_kernel, sig, "sm_90")
    assert re.search(r"cvt\.u32\.u64\s+%r\d+, %rd\d+;", b.ptx)
    x, y = _rows(n, rows=1), np.zeros(n, np.float32)
    launch = run_build(b, (1,), x, y)
    assert not launch.approx
    np.testing.assert_array_equal(y, x[::-1] + 1.0)


# ---------------------------------------------------------------------------------------------
# Declarations


def test_tile_types_and_grammar():
    t = splice.tile(f32)
    assert isinstance(t, TileType) and t.shape is None and t.elem.name == "float32"
    assert str(splice.tile(ct.int32, (8,))) == "tile(int32, (8,))"
    assert splice.tile("float16", 16).shape == (16,)
    sig = parse_signature("void(tile(float32), int32, tile(float32, (16, 16)))")
    assert [str(a) for a in sig.args] == ["tile(float32)", "int32", "tile(float32, (16, 16))"]
    assert sig.has_tiles and [str(a) for a in sig.scalar_args] == ["int32"]
    sig = parse_signature("tile(int32, (8,))(tile(float32), int32)")
    assert str(sig.result) == "tile(int32, (8,))"
    assert str(parse_signature(str(sig))) == str(sig)       # round trip
    assert not parse_signature("float32(float32*, int32)").has_tiles


@pytest.mark.parametrize("text,msg", [
    ("void(tile(float32, (3,)))", "powers of two"),
    ("void(tile(float32, 16x16))", "not a tuple of integers"),
    ("void(tile())", "malformed"),
    ("void(tile(float32*))", "scalars"),
    ("void(tile(tile(float32)))", "unsupported extern argument.*tile"),
    ("void(tile(float32), )", "empty argument"),
    ("tile(float32(tile(float32))", "malformed"),
])
def test_grammar_refusals(text, msg):
    with pytest.raises(SpliceDeclarationError, match=msg):
        parse_signature(text)


def test_declaration_forms():
    for ext in (reverse_tile, transpose_tile, tile_sum):
        e = ext._splice_extern
        assert e.scope == "block" and e.signature.has_tiles and not e.pure
        assert e.fragment.declared == ()       # checked and instantiated per call site
    lib = splice.library(source="namespace ns {" + REVERSE_SRC + "}")
    e = lib.extern("ns::reverse_tile", signature="tile(float32)(tile(float32))",
                   scope="block")._splice_extern
    assert e.cxx_name == "ns::reverse_tile" and lib.fragment.declared == ()
    p = splice.extern.from_ptx(ptx=REVERSE_PTX, name="reverse_ptx", scope="block",
                               signature="tile(float32)(tile(float32))")._splice_extern
    assert str(p.signature) == "tile(float32)(tile(float32))"
    lt = splice.extern.from_ltoir(data=b"x", name="g", scope="block",
                                  signature="float32(tile(float32), int32)")._splice_extern
    # nvJitLink keeps the function the ABI names: the tile as a pointer
    [(sym, abi)] = lt.fragment.roots
    assert sym == "g" and str(abi) == "float32(float32*, int32)"


def test_declaration_refusals(tmp_path):
    with pytest.raises(SpliceDeclarationError, match='for scope="block" externs'):
        splice.extern(source=REVERSE_SRC, name="r", signature="tile(float32)(tile(float32))")
    obj = tmp_path / "f.cubin"
    obj.write_bytes(b"\0")
    with pytest.raises(SpliceDeclarationError, match="binary object is linked after ptxas"):
        splice.extern.from_object(obj, name="f", scope="block",
                                  signature="void(tile(float32))")
    with pytest.raises(SpliceDeclarationError, match=r"no tile argument to take it from; "
                                                     r"give it one: splice.tile\(ct.float32, "
                                                     r"\(8,\)\) \(signature 'tile\(float32, "
                                                     r"\(8,\)\)'\)"):
        splice.extern(source=REVERSE_SRC, name="r", scope="block",
                      signature="tile(float32)(int32)")
    with pytest.raises(SpliceDeclarationError, match="pointers to tiles"):
        splice.pointer(splice.tile(f32))
    for bad in ((0,), (3,), (), "128"):     # each names the user's file and line
        with pytest.raises(SpliceDeclarationError,
                           match=rf"splice\.tile\(float32, .*\) at {re.escape(__file__)}:\d+: "
                                 rf"the shape must be .*powers of two"):
            splice.tile(f32, bad)
    with pytest.raises(SpliceDeclarationError, match=rf"splice\.tile at {re.escape(__file__)}"):
        splice.tile("float99")


# ---------------------------------------------------------------------------------------------
# The PTX of a tile call


@pytest.mark.parametrize("n,per_thread", [(128, 1), (1024, 8)])
def test_vector_tile_ptx(n, per_thread):
    b = splice.compile(reverse_kernel, _vec_sig(n), "sm_90")
    store, call, load = b.sites
    assert (store.instances, call.instances, load.instances) == (per_thread, 1, per_thread)
    assert call.scope == "block" and store.scope == load.scope == "element"
    smem = _shared_bytes(b)
    bufs = sorted(v for k, v in smem.items() if "__splice_tile_0_buf" in k)
    assert bufs == [4 * n, 4 * n]              # one in, one out: 4 bytes per element
    entry = _entry(b)
    # each thread stores its elements at their row-major index, all before the call ...
    stores = [m.start() for m in re.finditer(r"st\.shared\.b32 \t\[%r2\], %r3;", entry)]
    loads = [m.start() for m in re.finditer(r"ld\.shared\.b32 \t%r3, \[%r2\];", entry)]
    # ... the function's body pasted into the block call (no SASS CALL left) ...
    call_at = re.search(r"mov\.b64 \t%rd\d+, %splice_tile_d0;", entry).start()
    assert len(stores) == len(loads) == per_thread
    assert max(stores) < entry.index("bar.red.popc.u32") < call_at < min(loads)
    assert b.sass_call_count() == 0
    # the pasted body takes each buffer's address from the call function's own register,
    # which its scope cannot hide (a callee's %rd1 shadowing the call's %rd1 passed x as y)
    assert re.search(r"mov\.b64 \t%rd\d+, %splice_tile_d0;", entry)
    assert re.search(r"mov\.b64 \t%rd\d+, %splice_tile_d1;", entry)
    assert b.summary().count("block scope: every thread of the block calls it") == 1


@pytest.mark.parametrize("n", [32, 64])
def test_tile_smaller_than_the_block(n):
    # tileiras runs the stores and loads on the owner threads only, behind a branch
    b = splice.compile(reverse_kernel, _vec_sig(n), "sm_90")
    assert [s.instances for s in b.sites] == [1, 1, 1]
    entry = _entry(b)
    assert entry.index("st.shared.b32 \t[%r2], %r3;") < entry.index("bar.red.popc") < \
        entry.index("ld.shared.b32 \t%r3, [%r2];")


def test_2d_tile_ptx():
    b = splice.compile(transpose_kernel, K.signature(K.array(f32, 2), K.array(f32, 2),
                                                     K.scalar(i32), 16), "sm_90")
    store, call, load = b.sites
    assert (store.instances, call.instances, load.instances) == (2, 1, 2)   # 256 on 128
    assert sorted(v for k, v in _shared_bytes(b).items() if "__splice_tile_" in k) == \
        [1024, 1024]
    # the scalar travels through the block site's argument scratch; the call gets it with
    # both buffers' generic addresses
    entry = _entry(b)
    assert entry.count("cvta.shared.u64") == 2
    assert not re.search(r"^\s*call", entry, re.M) and b.sass_call_count() == 0


def test_ptx_counts_per_shape():
    """The numbers of the issue's closing note: barriers and static shared bytes."""
    rows = {}
    for name, kernel, sig in (
            ("(128,)", reverse_kernel, _vec_sig(128)),
            ("(1024,)", reverse_kernel, _vec_sig(1024)),
            ("(16, 16)", transpose_kernel, K.signature(K.array(f32, 2), K.array(f32, 2),
                                                       K.scalar(i32), 16))):
        b = splice.compile(kernel, sig, "sm_90")
        smem = _shared_bytes(b)
        rows[name] = (_barriers(b), sum(v for k, v in smem.items() if "__splice_tile" in k),
                      sum(v for k, v in smem.items() if "__splice_tile" not in k))
    print(rows)
    for name, (bars, staged, _other) in rows.items():
        assert bars >= 4        # tileiras's around the stores and loads, splice's two
    assert rows["(128,)"][1] == 1024 and rows["(1024,)"][1] == 8192
    assert rows["(16, 16)"][1] == 2048


def test_scalar_result_and_in_place_use():
    b = splice.compile(sum_kernel, _vec_sig(256), "sm_90")
    store, call = b.sites                   # no tile result: no load site
    assert store.instances == 2 and call.instances == 1


def test_tile_call_in_a_loop_and_under_a_uniform_branch():
    sig = K.signature(K.array(f32), K.array(f32), K.scalar(i32), K.scalar(i32), 128)
    b = splice.compile(loop_branch_kernel, sig, "sm_90")
    assert len(b.sites) == 6                # two tile calls, three sites each
    # tileiras unrolls the loop (4 x + the rest): each copy of the call is proven alone
    store, call, load = b.sites[:3]
    assert store.instances == call.instances == load.instances >= 1
    assert [s.instances for s in b.sites[3:]] == [1, 1, 1]
    # each call has buffers of its own
    assert len([k for k in _shared_bytes(b) if "__splice_tile_" in k]) == 4


REVERSE_PTX = r"""
.version 8.0
.target sm_80
.address_size 64
.visible .func reverse_ptx(.param .b64 x, .param .b64 y)
{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<6>;
	.reg .f32 	%f<2>;
	ld.param.b64 	%rd1, [x];
	ld.param.b64 	%rd2, [y];
	mov.u32 	%r1, %tid.x;
	mov.u32 	%r2, 127;
	sub.s32 	%r3, %r2, %r1;
	mul.wide.u32 	%rd3, %r3, 4;
	add.s64 	%rd4, %rd1, %rd3;
	ld.f32 	%f1, [%rd4];
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd5, %rd2, %rd3;
	st.f32 	[%rd5], %f1;
	ret;
}
"""

reverse_ptx = splice.extern.from_ptx(ptx=REVERSE_PTX, name="reverse_ptx", scope="block",
                                     signature="tile(float32, (128,))(tile(float32, (128,)))")


reverse_ptx_kernel = _tile_kernel(reverse_ptx)


def test_ptx_input_takes_generic_pointers():
    b = splice.compile(reverse_ptx_kernel, _vec_sig(128), "sm_90")
    assert [s.instances for s in b.sites] == [1, 1, 1]
    assert not re.search(r"^\s*call", _entry(b), re.M) and b.sass_call_count() == 0


# ---------------------------------------------------------------------------------------------
# Refusals at the call and at compile time


@splice.kernel
def wrong_dtype_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=reverse_tile(t.astype(ct.float16)))


@splice.kernel
def wrong_shape_kernel(x, y, k: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0), 0), shape=(TILE, TILE), allow_tma=False)
    ct.store(y, index=(ct.bid(0), 0), tile=transpose_tile(t, k))


@splice.kernel
def scalar_for_tile_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t + tile_sum(ct.sum(t)))


def test_call_refusals():
    with pytest.raises(SpliceCallError, match=r"argument 1 is a float16 tile .* takes "
                                              r"tile\(float32\); convert it"):
        splice.compile(wrong_dtype_kernel, _vec_sig(128), "sm_90")
    with pytest.raises(SpliceCallError, match=r"takes exactly the shape \(16, 16\)"):
        splice.compile(wrong_shape_kernel, K.signature(K.array(f32, 2), K.array(f32, 2),
                                                       K.scalar(i32), 32), "sm_90")
    with pytest.raises(SpliceCallError, match=r"argument 1 is a scalar float32.*takes a tile"):
        splice.compile(scalar_for_tile_kernel, _vec_sig(128), "sm_90")


# a tile, then a pointer and a scalar: a bad scalar argument is the user's argument 2 or 3
STAMP_SRC = r'''
template <int N> __device__ void stamp(const float (&x)[N], float* out, int k) {
    for (int i = threadIdx.x; i < N; i += blockDim.x) out[i] = x[i] + k;
}'''


def _stamp(scope):
    return splice.extern(source=STAMP_SRC, name="stamp", scope=scope,
                         signature="void(tile(float32), float32*, int32)")


def _stamp_kernel(fn, case):
    @splice.kernel
    def stamp_kernel(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        if case == "tile for pointer":
            fn(t, t, 1)
        elif case == "tile for scalar":
            fn(t, y, ct.astype(t, ct.int32))
        elif case == "array for scalar":
            fn(t, y, x)
        elif case == "float for int":
            fn(t, y, ct.sum(t))
        elif case == "constant out of range":
            fn(t, y, 1 << 40)
        else:
            ct.store(y, index=(ct.bid(0),), tile=t + fn(t, y, 1))
    return stamp_kernel


_STAMP_REFUSALS = {
    "tile for pointer": r"argument 2 is a float32 tile of shape \(128,\), but the signature "
                        r"expects an array of float32",
    "tile for scalar": r"argument 3 is a int32 tile of shape \(128,\); a {scope}-scope extern",
    "array for scalar": r"argument 3 is a value of type Array",
    "float for int": r"argument 3 is a scalar float32, but the signature "
                     r"void\(tile\(float32\), float32\*, int32\) expects int32",
    "constant out of range": r"argument 3: constant not representable as int32: "
                             r"1099511627776 is out of range of int32$",
    "void result used": r"The kernel calls void extern\(s\), whose result is None: extern "
                        r"'stamp' \(declared at .*test_block_tiles.py:\d+, signature "
                        r"void\(tile\(float32\), float32\*, int32\)\) called at "
                        r"[^;]*test_block_tiles.py:\d+\. Do not",
}


@pytest.mark.parametrize("scope", ["block", "warpgroup"])
@pytest.mark.parametrize("case", sorted(_STAMP_REFUSALS))
def test_scalar_argument_refusals_name_the_users_call(scope, case):
    """A bad pointer or scalar argument of a tile call is named as the user wrote the call
    (its extern, its position among all the arguments, its signature), not as the staging
    site that carries the scalars ("stamp (block call on the staged tiles)", argument 1)."""
    with pytest.raises(SpliceCallError) as e:
        splice.compile(_stamp_kernel(_stamp(scope), case), _vec_sig(128), "sm_90")
    msg = e.value.message
    assert re.search(_STAMP_REFUSALS[case].format(scope=scope), msg, re.M), msg
    assert "stamp (" not in msg, msg          # no staging site's name
    assert "Unknown location" not in msg, msg


fixed_256 = splice.extern(source=r'''
__device__ void fixed_256(const float (&x)[256], float (&y)[256]) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) y[i] = x[i];
}''', name="fixed_256", scope="block", signature="tile(float32)(tile(float32))")

returns_int = splice.extern(source=r'''
template <int N> __device__ int returns_int(const float (&x)[N]) { return 1; }''',
                            name="returns_int", scope="block",
                            signature="float32(tile(float32))")


fixed_kernel = _tile_kernel(fixed_256)


@splice.kernel
def returns_int_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t + returns_int(t))


def test_shape_the_function_cannot_take_is_a_compile_error():
    with pytest.raises(SpliceCompileError) as e:
        splice.compile(fixed_kernel, _vec_sig(128), "sm_90")
    msg = e.value.message
    assert "'fixed_256'" in msg and "called at" in msg and "with tiles float32[128]" in msg
    assert "test_block_tiles.py" in msg
    splice.compile(fixed_kernel, _vec_sig(256), "sm_90")      # its own shape compiles


def test_result_type_is_checked_exactly():
    with pytest.raises(SpliceCompileError, match="must return float to match"):
        splice.compile(returns_int_kernel, _vec_sig(128), "sm_90")


big_scratch = splice.extern(source=r'''
template <int N> __device__ void big_scratch(float (&x)[N], float (&y)[N]) {
    __shared__ float scratch[50000];
    for (int i = threadIdx.x; i < N; i += blockDim.x) { scratch[i] = x[i]; y[i] = scratch[i]; }
}''', name="big_scratch", scope="block", signature="tile(float32)(tile(float32))")


big_kernel = _tile_kernel(big_scratch)


def test_shared_memory_limit_names_the_owners():
    with pytest.raises(SpliceLinkError) as e:
        splice.compile(big_kernel, _vec_sig(4096), "sm_90")
    msg = e.value.message
    assert "shared memory per block" in msg
    assert "splice's tile staging buffers: 32768 bytes" in msg      # 2 x 4096 x 4
    assert "200000 bytes" in msg                                     # the callee's


def test_tile_too_large_for_any_gpu_is_refused_before_tileiras():
    with pytest.raises(SpliceCallError, match="shared memory"):
        splice.compile(reverse_kernel, _vec_sig(65536), "sm_90")


# ---------------------------------------------------------------------------------------------
# The staging proof on hand-written PTX: stores, the block site, loads

_TILE_GOOD = """
.version 8.0
.target sm_90a
.address_size 64
.visible .global .align 4 .b8 __splice_marker_0[4];
.visible .global .align 4 .b8 __splice_marker_1[4];
.visible .global .align 4 .b8 __splice_marker_2[4];
.visible .entry k(.param .u64 k_p0)
.reqntid 128
{
\t.reg .pred \t%p<4>;
\t.reg .b32 \t%r<8>;
\t.reg .b64 \t%rd<12>;
\tld.param.b64 \t%rd5, [k_p0];
\tmov.u32 \t%r1, %tid.x;
\tld.global.b32 \t%r2, [%rd5];
\tbar.sync \t0;
\tmov.b64 \t%rd1, __splice_marker_0;
\tatom.global.acq_rel.cas.b32 \t%r3, [%rd1], %r2, %r1;
\tbar.sync \t0;
\tsetp.ne.b32 \t%p1, %r1, 0;
\t@%p1 bra \t$L__BB0_2;
\tmov.b64 \t%rd2, __splice_marker_1;
\tatom.global.acq_rel.cas.b32 \t%r4, [%rd2], 0, 0;
$L__BB0_2:
\tbar.sync \t0;
\tmov.b64 \t%rd3, __splice_marker_2;
\tatom.global.acq_rel.cas.b32 \t%r5, [%rd3], %r1, 0;
\tst.global.b32 \t[%rd5], %r5;
\tret;
}
"""


def _b32(name):
    return Param(name, ".param .b32", None, ".b32", ".param")


def _tile_sites(elements=128):
    what = "tile argument 1 of 'f' at test:1"
    return {
        0: SiteCall(0, "st0", (_b32("p0"), _b32("p1")), None,
                    parse_signature("void(float32, int32)"), "store at test:1", None,
                    FORMS["element"], 32, staging=Staging("store", 0, elements, what)),
        1: SiteCall(1, "call0", (), None, parse_signature("void()"), "call at test:1", None,
                    FORMS["block"], 32, staging=Staging("call", 0, 0, "the call")),
        2: SiteCall(2, "ld0", (_b32("p0"),), _b32("r"), parse_signature("float32(int32)"),
                    "load at test:1", None, FORMS["element"], 32,
                    staging=Staging("load", 0, elements, "the tile result")),
    }


def test_hand_written_tile_staging():
    rep = splice_calls(Module(_TILE_GOOD), _tile_sites(), kernel_name="k")
    assert rep.replaced == {0: 1, 1: 1, 2: 1}
    ptx = rep.ptx
    order = [ptx.index(s) for s in ("call st0,", "bar.red.popc", "call call0,",
                                    "call (__splice_r), ld0,")]
    assert order == sorted(order)


_STORE = "\tmov.b64 \t%rd1, __splice_marker_0;\n\tatom.global.acq_rel.cas.b32 \t%r3, [%rd1], " \
         "%r2, %r1;\n"
_LOAD = "\tmov.b64 \t%rd3, __splice_marker_2;\n\tatom.global.acq_rel.cas.b32 \t%r5, [%rd3], " \
        "%r1, 0;\n"

_TILE_BROKEN = {
    "a label between the stores and the call": (
        "\tbar.sync \t0;\n\tsetp.ne", "$L__X:\n\tbar.sync \t0;\n\tsetp.ne", "stores before"),
    # a label both a skip and another branch reach: a thread may get there twice
    "a branch between the stores and the call, its label reached twice": (
        "\tbar.sync \t0;\n\tsetp.ne", "\t@%p2 bra \t$L__X;\n$L__X:\n\tbar.sync \t0;\n"
                                       "\t@%p3 bra \t$L__X;\n\tsetp.ne", "stores before"),
    "a store after the call": (_STORE, "", "stores before"),
    "a branch between the call and the loads, its label reached twice": (
        "$L__BB0_2:\n\tbar.sync \t0;\n", "$L__BB0_2:\n\tbar.sync \t0;\n\t@%p2 bra \t$L__Y;\n"
                                         "\t@%p3 bra \t$L__Y;\n$L__Y:\n", "loads after"),
    "two stores for one element per thread": (_STORE, _STORE + _STORE.replace("%r3", "%r6"),
                                              "2 store instance"),
    "a load in a loop after the stretch": (
        "\tret;", "$L__Z:\n" + _LOAD.replace("%r5", "%r7") + "\t@%p2 bra \t$L__Z;\n\tret;",
        "outside the straight-line code"),
}


@pytest.mark.parametrize("case", sorted(_TILE_BROKEN))
def test_hand_written_staging_refusals(case):
    old, new, msg = _TILE_BROKEN[case]
    assert old in _TILE_GOOD
    text = _TILE_GOOD.replace(old, new, 1)
    if case == "a store after the call":
        text = text.replace("$L__BB0_2:\n\tbar.sync \t0;\n",
                            "$L__BB0_2:\n\tbar.sync \t0;\n" + _STORE, 1)
    with pytest.raises(SpliceRewriteError, match=msg):
        splice_calls(Module(text), _tile_sites(), kernel_name="k")


def test_hand_written_forward_skips_are_straight_line():
    # tileiras guards the element operations of a tile smaller than the block by a branch
    # over them: the owner threads run them, the others skip to a label nothing else names
    text = _TILE_GOOD.replace(_STORE, "\t@%p2 bra \t$L__S;\n" + _STORE + "$L__S:\n", 1)
    text = text.replace(_LOAD, "\t@%p2 bra \t$L__T;\n" + _LOAD + "$L__T:\n", 1)
    rep = splice_calls(Module(text), _tile_sites(), kernel_name="k")
    assert rep.replaced == {0: 1, 1: 1, 2: 1}


def test_hand_written_element_count_mismatch():
    # 256 elements on 128 threads are two stores per thread: one is missing
    with pytest.raises(SpliceRewriteError, match=r"1 store instance\(s\) per thread .* not 2"):
        splice_calls(Module(_TILE_GOOD), _tile_sites(256), kernel_name="k")


def test_hand_written_block_size_the_function_needs():
    sites = _tile_sites()
    sites[1] = dataclasses.replace(sites[1], staging=Staging("call", 0, 0, "the call", 256))
    with pytest.raises(SpliceRewriteError, match=r"step 'block size': the call is compiled "
                                                 r"for blocks of 256 threads.*\.reqntid"):
        splice_calls(Module(_TILE_GOOD), sites, kernel_name="k")
    sites[1] = dataclasses.replace(sites[1], staging=Staging("call", 0, 0, "the call", 128))
    assert splice_calls(Module(_TILE_GOOD), sites, kernel_name="k").replaced[1] == 1


def test_hand_written_load_missing():
    text = _TILE_GOOD.replace(_LOAD, "")
    with pytest.raises(SpliceRewriteError, match="step 'every part in the function': the "
                                                 "tile result has no marker instance"):
        splice_calls(Module(text), _tile_sites(), kernel_name="k")


def test_hand_written_call_missing():
    text = _TILE_GOOD.replace("\tmov.b64 \t%rd2, __splice_marker_1;\n"
                              "\tatom.global.acq_rel.cas.b32 \t%r4, [%rd2], 0, 0;\n", "")
    with pytest.raises(SpliceRewriteError, match="step 'every part in the function': the "
                                                 "call has no marker instance"):
        splice_calls(Module(text), _tile_sites(), kernel_name="k")


# ---------------------------------------------------------------------------------------------
# GPU: values against PyTorch


@pytest.mark.gpu
@pytest.mark.parametrize("n", [32, 64, 128, 1024])
def test_gpu_reverse(torch, n):
    from support.gpu import launch
    x = torch.randn(64 * n, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (64,), reverse_kernel, (x, y, n))
    torch.testing.assert_close(y, x.view(64, n).flip(1).reshape(-1) + 1.0, rtol=0, atol=0)


@pytest.mark.parametrize("n", [32, 64, 128, 1024])
def test_exec_reverse(n):
    x = _rows(n)
    y = np.zeros_like(x)
    _exec(reverse_kernel, _vec_sig(n), (2,), x, y)
    np.testing.assert_array_equal(y, np.flip(x.reshape(2, n), 1).reshape(-1) + 1)


@pytest.mark.gpu
def test_gpu_transpose_2d(torch):
    from support.gpu import launch
    x = torch.randn(16 * 8, 16, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (8,), transpose_kernel, (x, y, 3, 16))
    ref = x.view(8, 16, 16).transpose(1, 2).reshape(128, 16) + 3
    torch.testing.assert_close(y, ref, rtol=0, atol=0)


def test_exec_transpose_2d():
    x = _rows(256).reshape(32, 16)
    y = np.zeros_like(x)
    _exec(transpose_kernel, K.signature(K.array(f32, 2), K.array(f32, 2), K.scalar(i32), 16),
          (2,), x, y, 3)
    ref = x.reshape(2, 16, 16).transpose(0, 2, 1).reshape(32, 16) + np.float32(3)
    np.testing.assert_array_equal(y, ref)


# y[r][c] = x[r][C - 1 - c] * (r + 1): unlike a transpose, not the same function when both the
# stores and the loads index the staging buffers column-major
FLIP_ROWS_SRC = r'''
template <int R, int C> __device__ void flip_rows(const float (&x)[R][C], float (&y)[R][C]) {
    for (int i = threadIdx.x; i < R * C; i += blockDim.x)
        y[i / C][i % C] = x[i / C][C - 1 - i % C] * (i / C + 1);
}'''
flip_rows = splice.extern(source=FLIP_ROWS_SRC, name="flip_rows", scope="block",
                          signature="tile(float32)(tile(float32))")


@splice.kernel
def flip_rows_kernel(x, y, TM: ConstInt, TN: ConstInt):
    t = ct.load(x, index=(ct.bid(0), 0), shape=(TM, TN), allow_tma=False)
    ct.store(y, index=(ct.bid(0), 0), tile=flip_rows(t))


def _flip_rows_ref(x, tm):
    r = np.arange(x.shape[0], dtype=np.float32)[:, None] % tm + 1
    return np.flip(x, 1) * r


def test_exec_2d_staging_is_row_major():
    """A (8, 32) tile: its row-major order, not its transpose's, on both sides of the call."""
    x = _rows(256).reshape(16, 32)
    y = np.zeros_like(x)
    _exec(flip_rows_kernel, K.signature(K.array(f32, 2), K.array(f32, 2), 8, 32), (2,), x, y)
    np.testing.assert_array_equal(y, _flip_rows_ref(x, 8))


@pytest.mark.gpu
def test_gpu_tile_sum(torch):
    from support.gpu import launch
    x = torch.randn(32 * 256, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (32,), sum_kernel, (x, y, 256))
    ref = x.view(32, 256).sum(1, keepdim=True).expand(32, 256).reshape(-1)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-4)


def test_exec_tile_sum():
    x = _rows(256)
    y = np.zeros_like(x)
    _exec(sum_kernel, _vec_sig(256), (2,), x, y)
    ref = np.repeat(x.reshape(2, 256).astype(np.float64).sum(1), 256)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("reps,flag", [(0, 0), (3, 0), (2, 1)])
def test_gpu_loop_and_branch(torch, reps, flag):
    from support.gpu import launch
    x = torch.randn(16 * 128, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (16,), loop_branch_kernel, (x, y, reps, flag, 128))
    ref = x.view(16, 128)
    for _ in range(reps):
        ref = ref.flip(1) + 1.0
    if flag > 0:
        ref = ref.flip(1) * 2.0
    torch.testing.assert_close(y, ref.reshape(-1), rtol=0, atol=0)


@pytest.mark.parametrize("reps,flag", [(0, 0), (3, 0), (2, 1), (5, 1)])
def test_exec_loop_and_branch(reps, flag):
    x = _rows(128)
    y = np.zeros_like(x)
    _exec(loop_branch_kernel, K.signature(K.array(f32), K.array(f32), K.scalar(i32),
                                          K.scalar(i32), 128), (2,), x, y, reps, flag)
    ref = x.reshape(2, 128)
    for _ in range(reps):
        ref = np.flip(ref, 1) + np.float32(1)
    if flag > 0:
        ref = np.flip(ref, 1) * np.float32(2)
    np.testing.assert_array_equal(y, ref.reshape(-1))


@pytest.mark.gpu
def test_gpu_ptx_input(torch):
    from support.gpu import launch
    x = torch.randn(8 * 128, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (8,), reverse_ptx_kernel, (x, y, 128))
    torch.testing.assert_close(y, x.view(8, 128).flip(1).reshape(-1), rtol=0, atol=0)


def test_exec_ptx_input():
    x = _rows(128)
    y = np.zeros_like(x)
    _exec(reverse_ptx_kernel, _vec_sig(128), (2,), x, y)
    np.testing.assert_array_equal(y, np.flip(x.reshape(2, 128), 1).reshape(-1))


# ---------------------------------------------------------------------------------------------
# Every element type through the staging

REVERSE_ANY_SRC = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <class T, int N> __device__ void reverse_any(const T (&x)[N], T (&y)[N]) {
    for (int i = threadIdx.x; i < N; i += blockDim.x) y[i] = x[N - 1 - i];
}'''
_DTYPES = ("bool", "int8", "uint16", "int32", "uint64", "float16", "bfloat16", "float64")
_reverse_any = splice.library(source=REVERSE_ANY_SRC)
_REVERSE_ANY = {
    d: _reverse_any.extern(f"reverse_any<{splice.ELEMENT_TYPES[d].c_type}>", scope="block",
                           signature=f"tile({d})(tile({d}))") for d in _DTYPES}


def _reverse_any_kernel(dtype):
    return _tile_kernel(_REVERSE_ANY[dtype])


@pytest.mark.parametrize("dtype", _DTYPES)
def test_every_dtype_is_staged_at_its_size(dtype):
    dt = getattr(ct, "bool_" if dtype == "bool" else dtype)
    b = splice.compile(_reverse_any_kernel(dtype), K.signature(K.array(dt), K.array(dt), 256),
                       "sm_90")
    assert [s.instances for s in b.sites] == [2, 1, 2]
    size = max(splice.ELEMENT_TYPES[dtype].bits, 8) // 8
    assert sorted(v for k, v in _shared_bytes(b).items() if "__splice_tile_" in k) == \
        [256 * size, 256 * size]
    entry = _entry(b)
    assert len(re.findall(rf"st\.shared\.b{8 * size} \t\[%r2\]", entry)) == 2
    assert len(re.findall(rf"ld\.shared\.[bsu]{8 * size} \t%\w+, \[%r2\]", entry)) == 2


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", _DTYPES)
def test_gpu_every_dtype_round_trips(torch, dtype):
    from support.gpu import launch
    tdt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(1)
    if dtype == "bool":
        x = torch.rand(16 * 256, device="cuda", generator=g) > 0.5
    elif tdt.is_floating_point:
        x = torch.randn(16 * 256, device="cuda", generator=g).to(tdt)
    else:
        x = torch.randint(0, 100, (16 * 256,), device="cuda", generator=g).to(tdt)
    y = torch.empty_like(x)
    launch(torch, (16,), _reverse_any_kernel(dtype), (x, y, 256))
    # compared as integers of the same size (torch has few operations on uint16/uint64)
    iv = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    assert torch.equal(y.view(iv), x.view(iv).view(16, 256).flip(1).reshape(-1))


@pytest.mark.parametrize("dtype", _DTYPES)
def test_exec_every_dtype_round_trips(dtype):
    dt = getattr(ct, "bool_" if dtype == "bool" else dtype)
    rng = np.random.default_rng(1)
    size = max(splice.ELEMENT_TYPES[dtype].bits, 8) // 8
    iv = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[size]
    # every bit pattern of the size (bool: 0 and 1), compared as integers of that size
    bits = rng.integers(0, 2 if dtype == "bool" else 1 << min(8 * size, 63), 2 * 256,
                        dtype=np.uint64).astype(iv)
    x = bits.view(np.bool_ if dtype == "bool" else iv)
    y = np.zeros_like(x)
    _exec(_reverse_any_kernel(dtype), K.signature(K.array(dt), K.array(dt), 256), (2,), x, y)
    np.testing.assert_array_equal(y.view(iv), np.flip(bits.reshape(2, 256), 1).reshape(-1))


# ---------------------------------------------------------------------------------------------
# Other declaration forms, compiled: library + C++ name, LTO-IR; a partial tile

_lib = splice.library(source="namespace ns {" + REVERSE_SRC + "}")
ns_reverse = _lib.extern("ns::reverse_tile", signature="tile(float32)(tile(float32))",
                         scope="block")


ns_reverse_kernel = _tile_kernel(ns_reverse)


def test_library_cxx_name_compiles():
    b = splice.compile(ns_reverse_kernel, _vec_sig(256), "sm_90")
    assert [s.instances for s in b.sites] == [2, 1, 2]
    assert not re.search(r"^\s*call", _entry(b), re.M)   # the trampoline, inlined


def _ltoir_reverse():
    from splice.system import toolchain
    src = REVERSE_SRC + r'''
extern "C" __device__ void reverse128(float* x, float* y) {
    reverse_tile(*reinterpret_cast<float (*)[128]>(x), *reinterpret_cast<float (*)[128]>(y));
}'''
    inc = toolchain.cuda_include_dir()
    return toolchain.nvrtc_compile_ltoir(src.encode(), "rev.cu", [
        "-arch=sm_90a", "-rdc=true", "-dlto", *([f"-I{inc}"] if inc else [])])


def test_ltoir_input_compiles():
    rev = splice.extern.from_ltoir(data=_ltoir_reverse(), name="reverse128", scope="block",
                                   signature="tile(float32, (128,))(tile(float32, (128,)))")
    b = splice.compile(_tile_kernel(rev), _vec_sig(128), "sm_90")
    assert [s.instances for s in b.sites] == [1, 1, 1]
    assert not re.search(r"^\s*call", _entry(b), re.M) and b.sass_call_count() == 0


@splice.kernel
def tma_tile_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = K.matmul_tile(A, B, tm, tn, tk)             # a TMA + wgmma pipeline on sm_90
    s = tile_sum(ct.full((128,), 1.0, f32))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc + s, C.dtype))


def test_warp_specialised_kernel_refused():
    sig = K.signature(K.array(ct.float16, 2), K.array(ct.float16, 2), K.array(ct.float16, 2),
                      128, 128, 64)
    with pytest.raises(SpliceRewriteError, match="warp-specialised"):
        splice.compile(tma_tile_kernel, sig, "sm_90")


# the sum of the first n elements: the padding of a partial tile is passed too
valid_sum = splice.extern(source=r'''
template <int N> __device__ float valid_sum(const float (&x)[N], int n) {
    __shared__ float total;
    if (threadIdx.x == 0) { float s{}; for (int i = 0; i < n && i < N; ++i) s += x[i]; total = s; }
    __syncthreads();
    return total;
}''', name="valid_sum", scope="block", signature="float32(tile(float32), int32)")


@splice.kernel
def partial_kernel(x, y, n: int, TILE: ConstInt):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(TILE,), allow_tma=False,
                padding_mode=ct.PaddingMode.NAN)                # NaN past the end of x
    s = valid_sum(t, ct.minimum(n - bid * TILE, TILE))
    ct.store(y, index=(bid,), tile=ct.full((1,), s, f32))


def test_partial_tile_compiles():
    b = splice.compile(partial_kernel, K.signature(K.array(f32), K.array(f32), K.scalar(i32),
                                                   256), "sm_90")
    assert [s.instances for s in b.sites] == [2, 1]


@pytest.mark.gpu
def test_gpu_partial_tile_with_an_element_count(torch):
    from support.gpu import launch
    n = 1000                       # 3 full tiles of 256 and one of 232 (+ 24 NaN padding)
    x = torch.randn(n, device="cuda")
    y = torch.empty(4, device="cuda")
    launch(torch, (4,), partial_kernel, (x, y, n, 256))
    ref = torch.stack([x[i * 256:(i + 1) * 256].sum() for i in range(4)])
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-4)


def test_exec_partial_tile_with_an_element_count():
    n = 488                        # one full tile of 256 and one of 232 (+ 24 NaN padding)
    x = _rows(n, rows=1)
    y = np.zeros(2, np.float32)
    _exec(partial_kernel, K.signature(K.array(f32), K.array(f32), K.scalar(i32), 256), (2,),
          x, y, n)
    ref = [x[i * 256:(i + 1) * 256].astype(np.float64).sum() for i in range(2)]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def _staging_of(ptx: str, roles, elements):
    """check_staging on tileiras's PTX of a one-tile-call kernel: sites by marker index
    (``roles``: index -> role), each atomic marker instance found by its global."""
    from types import SimpleNamespace

    from splice.forms import staging
    from splice.forms.rewrite import MARKER_RE
    mod = Module(ptx)
    [fn] = [f for f in mod.function_order if f.kind == ".entry"]
    b = mod.body(fn)
    regs: dict[str, int] = {}
    at: dict[int, list[int]] = {}
    for i, (s, ins) in enumerate(b.parsed):
        if ins is None:
            continue
        m = next((MARKER_RE.search(op) for op in ins.operands if MARKER_RE.search(op)), None)
        if m and ins.base == "mov":
            regs[ins.operands[0]] = int(m.group(1))
        elif ins.base == "atom" and ins.operands[1].strip("[]") in regs:
            at.setdefault(regs[ins.operands[1].strip("[]")], []).append(i)
    sites = {k: SimpleNamespace(index=k, form=FORMS["block" if r == "call" else "element"],
                                staging=Staging(r, 0, 0 if r == "call" else elements, r))
             for k, r in roles.items()}
    return staging.check_staging(mod.body(fn), sites, at), at


def test_staging_proof_on_real_ptx_counts_and_refuses():
    b = splice.compile(reverse_kernel, _vec_sig(1024), "sm_90")
    roles = {0: "store", 1: "call", 2: "load"}
    why, at = _staging_of(b.ptx, roles, 1024)
    assert why is None and [len(at[k]) for k in (0, 1, 2)] == [8, 1, 8]
    # a label before the third store's marker: the first two are cut off from the call
    lines = b.ptx.split("\n")
    third = [i for i, ln in enumerate(lines) if "atom.global" in ln][2]   # stores come first
    broken = "\n".join(lines[:third] + ["$L__cut:"] + lines[third:])
    why, _ = _staging_of(broken, roles, 1024)
    assert why is not None and "step 'stores before the call'" in why and "has 6 store" in why
    # told the tile had 2048 elements, it finds 8 stores per thread, not 16
    why, _ = _staging_of(b.ptx, roles, 2048)
    assert why is not None and "not 16" in why


def test_cache_hit_and_the_shape_in_the_key(fresh_cache):
    """A tile call's instantiation is part of the kernel's key: the same kernel at another
    tile size is not served the first one's cubin; the same one again is."""
    first = splice.build(reverse_kernel, _vec_sig(128), "sm_90")
    other = splice.build(reverse_kernel, _vec_sig(256), "sm_90")
    again = splice.build(reverse_kernel, _vec_sig(128), "sm_90")
    assert not first.from_cache and not other.from_cache and other.cubin != first.cubin
    assert again.from_cache and again.cubin == first.cubin
    assert [s.instances for s in again.sites] == [1, 1, 1]


def _ptx_reverse(name: str, extra: str) -> str:
    return REVERSE_PTX.replace("reverse_ptx", name).replace("\t.reg .f32 \t%f<2>;",
                                                            "\t.reg .f32 \t%f<2>;\n" + extra)


@pytest.mark.parametrize("why,extra", [
    ("a .local buffer", "\t.local .align 4 .b8 scratch[16];"),
    ("a register named like the call function's", "\t.reg .b32 \t%splice_tile_w<2>;"),
])
def test_a_callee_that_cannot_be_inlined_stays_a_call(why, extra):
    name = "rev_" + str(abs(hash(why)))[:8]
    fn = splice.extern.from_ptx(ptx=_ptx_reverse(name, extra), name=name, scope="block",
                                signature="tile(float32, (128,))(tile(float32, (128,)))")
    b = splice.compile(_tile_kernel(fn), _vec_sig(128), "sm_90")
    assert re.search(rf"call \t{name}, \(q0, q1\);", _entry(b)), why
    assert b.sass_call_count() == 1


_rev_called = splice.extern.from_ptx(
    ptx=_ptx_reverse("rev_called", "\t.local .align 4 .b8 s[16];"), name="rev_called",
    scope="block", signature="tile(float32, (128,))(tile(float32, (128,)))")


@pytest.mark.gpu
def test_gpu_called_not_inlined(torch):
    from support.gpu import launch
    fn = _rev_called
    x = torch.randn(8 * 128, device="cuda")
    y = torch.empty_like(x)
    launch(torch, (8,), _tile_kernel(fn), (x, y, 128))
    torch.testing.assert_close(y, x.view(8, 128).flip(1).reshape(-1), rtol=0, atol=0)


def test_exec_called_not_inlined():
    kernel = _tile_kernel(_rev_called)
    assert splice.compile(kernel, _vec_sig(128), "sm_90").sass_call_count() == 1
    x = _rows(128)
    y = np.zeros_like(x)
    _exec(kernel, _vec_sig(128), (2,), x, y)
    np.testing.assert_array_equal(y, np.flip(x.reshape(2, 128), 1).reshape(-1))


# ---------------------------------------------------------------------------------------------
# The refusal of a tile call in a warp-specialised kernel names a fix that works


@splice.kernel
def warp_specialised_tile_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))          # a TMA load, and a reduction
    ct.store(y, index=(ct.bid(0),), tile=reverse_tile(t) * ct.sum(t))


REVERSE_GROUP_SRC = r'''
#include <splice_group.h>
template <int N> __device__ void reverse_tile(const float (&x)[N], float (&y)[N]) {
    for (int i = splice_group_rank(); i < N; i += splice_group_size()) y[i] = x[N - 1 - i];
}'''


def test_tile_call_in_warp_specialised_kernel_names_a_fix_that_works():
    with pytest.raises(SpliceRewriteError) as e:
        splice.compile(warp_specialised_tile_kernel, _vec_sig(256), "sm_90")
    msg = str(e.value)
    assert "allow_tma=False" in msg and 'Declare the extern scope="warpgroup"' in msg
    assert "splice_group_rank()" in msg and "splice_group_size()" in msg
    # following the advice compiles: the tile call on the warpgroup that runs the site
    reverse_group = splice.extern(source=REVERSE_GROUP_SRC, name="reverse_tile",
                                  scope="warpgroup", signature="tile(float32)(tile(float32))")

    @splice.kernel
    def group_tile_kernel(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=reverse_group(t) * ct.sum(t))
    b = splice.compile(group_tile_kernel, _vec_sig(256), "sm_90")
    assert "warpgroup call on the staged tiles" in b.summary()
    assert "setmaxnreg" in b.ptx                                 # still warp-specialised


# ---------------------------------------------------------------------------------------------
# inline="never" on a tile extern: the block call stays a real call (it passes no parameters:
# the tiles are in splice's buffers), and the rewrite's call count agrees


reverse_never = splice.extern(source=REVERSE_SRC, name="reverse_tile", scope="block",
                              signature="tile(float32)(tile(float32))", inline="never")
reverse_never_kernel = _tile_kernel(reverse_never)


def test_never_inlined_tile_call_runs():
    b = splice.compile(reverse_never_kernel, _vec_sig(128), "sm_90")
    assert re.search(r"^\s*call __splice_tile_\d+_call, \(\);", _entry(b), re.M)
    x = _rows(128)
    y = np.zeros_like(x)
    assert not run_build(b, (2,), x, y).approx
    np.testing.assert_array_equal(y.reshape(2, 128), x.reshape(2, 128)[:, ::-1])
