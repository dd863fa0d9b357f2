"""splice.cuda: inline CUDA C, compiled without a GPU and run on the PTX executor (marker
gpu: on the GPU against NumPy)."""

import os

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.errors import SpliceCallError, SpliceCompileError, SpliceLinkError
from support import kernels as K
from support.gpu import launch as _launch
from support.ptx_exec import run_build

ConstInt = ct.Constant[int]
F32x2 = K.signature(K.array(ct.float32), K.array(ct.float32), 128)
F32x3 = K.signature(K.array(ct.float32), K.array(ct.float32), K.array(ct.float32), 128)

#: A directory with a header for include_dirs= (a module global: a kernel reads it as a
#: constant).
HEADER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support",
                          "cuda_inline")


def _exec(kernel, sig, grid, *args):
    """Compile for sm_80 (1-D loads are not TMA there) and run on the executor."""
    b = splice.compile(kernel, sig, "sm_80")
    run_build(b, grid, *args)
    return b


def _x(n=256, lo=-2.0, hi=2.0, dtype=np.float32):
    return np.linspace(lo, hi, n).astype(dtype)


# ----------------------------------------------------------------------------- kernels

@splice.kernel
def gauss_kernel(x, y, z, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("__expf(-x * x)", dtype=ct.float32, x=t))
    ct.store(z, index=(ct.bid(0),), tile=splice.cuda(
        "float s, c;\n__sincosf(x, &s, &c);\nreturn s * c + k;", dtype=ct.float32, x=t, k=2.0))


@splice.kernel
def return_word_kernel(x, y, z, TILE: ConstInt):   # "return" not as a statement: expressions
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("x * 2.0f  /* return twice */",
                                                     dtype=ct.float32, x=t))
    ct.store(z, index=(ct.bid(0),), tile=splice.cuda("x * (float)sizeof(\"return\")",
                                                     dtype=ct.float32, x=t))


@splice.kernel
def gelu_kernel(x, y, TILE: ConstInt):   # the README's first example
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    g = splice.cuda("__fdividef(x, 1.0f + __expf(-1.702f * x))", dtype=ct.float32, x=t)
    ct.store(y, index=(ct.bid(0),), tile=g)


@splice.kernel
def sincos_kernel(x, s, c, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    a, b = splice.cuda("float s, c; sincosf(x, &s, &c); return {s, c};",
                       dtype=(ct.float32, ct.float32), x=t)
    ct.store(s, index=(ct.bid(0),), tile=a)
    ct.store(c, index=(ct.bid(0),), tile=b)


@splice.kernel
def divmod_kernel(x, q, r, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    a, b = splice.cuda("{r / memcpy, (short)(r % memcpy)}", dtype=(ct.int32, ct.int16), r=t,
                       memcpy=7)
    ct.store(q, index=(ct.bid(0),), tile=a)
    ct.store(r, index=(ct.bid(0),), tile=b)


@splice.kernel
def table_kernel(x, table, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("p[i & 7] * 10 + i", dtype=ct.int32,
                                                     p=table, i=t))


@splice.kernel
def count_kernel(x, counts, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    splice.cuda("atomicAdd(&c[v & 3], 1u)", dtype=None, c=counts, v=t)


@splice.kernel
def unused_kernel(x, counts, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    splice.cuda("atomicAdd(c, 1u) + v", dtype=ct.uint32, pure=False, c=counts, v=t)


@splice.kernel
def names_kernel(x, y, z, TILE: ConstInt):
    a = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    b = ct.load(y, index=(ct.bid(0),), shape=(TILE,))
    ct.store(z, index=(ct.bid(0),), tile=splice.cuda("a - 2.0f * b", dtype=ct.float32,
                                                     b=a, a=b))


@splice.kernel
def wide_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("(double)x * (double)x + 1e-12",
                                                     dtype=ct.float64, x=t))


@splice.kernel
def block_sum_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    s = splice.cuda("float s = 0;\nfor (int i = 0; i < 128; ++i) s += v[i];\nreturn s;",
                    dtype=ct.float32, scope="block", v=t)
    ct.store(y, index=(ct.bid(0),), tile=t + s)


@splice.kernel
def group_sum_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    s = splice.cuda("float s = 0;\nfor (int i = 0; i < 128; ++i) s += v[i];\nreturn s;",
                    dtype=ct.float32, scope="warpgroup", v=t)
    ct.store(y, index=(ct.bid(0),), tile=t + s)


@splice.kernel
def two_tiles_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    u = ct.reshape(t, (TILE // 16, 16))
    s = splice.cuda("return v[0] + w[TILE_ROWS - 1][15];", dtype=ct.float32, scope="block",
                    defines=(("TILE_ROWS", 8),), v=t, w=u)
    ct.store(y, index=(ct.bid(0),), tile=t + s)


#: Tile results of block snippets (module globals: a kernel reads them as constants).
F32_TILE = splice.tile(ct.float32)
I32_TILE = splice.tile(ct.int32, (128,))


@splice.kernel
def reverse_kernel(x, y, z, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    r = splice.cuda("for (int i = threadIdx.x; i < 128; i += blockDim.x) out[i] = v[127 - i];",
                    dtype=F32_TILE, scope="block", v=t)
    a, b = splice.cuda("for (int i = threadIdx.x; i < 128; i += blockDim.x) {\n"
                       "    out0[i] = 2.0f * v[i];\n"
                       "    out1[i] = (int)i * k;\n"
                       "}", dtype=(F32_TILE, I32_TILE), scope="block", v=t, k=3)
    ct.store(y, index=(ct.bid(0),), tile=r + a)
    ct.store(z, index=(ct.bid(0),), tile=b.astype(ct.float32))


@splice.kernel
def mismatch_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.load(x, index=(ct.bid(0),), shape=(TILE // 2,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("a + b", dtype=ct.float32, a=t, b=u))


@splice.kernel
def half_round_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda(
        "__half2float(__float2half_rn(x))", dtype=ct.float32, includes="cuda_fp16.h", x=t))


@splice.kernel
def header_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda(
        "splice_test_triple(x)", dtype=ct.float32, includes='"splice_test_inline.h"',
        include_dirs=HEADER_DIR, x=t))


@splice.kernel
def defines_kernel(x, y, z, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("x * SCALE", dtype=ct.float32,
                                                     defines=(("SCALE", 3),), x=t))
    ct.store(z, index=(ct.bid(0),), tile=splice.cuda("x * SCALE", dtype=ct.float32,
                                                     options=("-DSCALE=5",), x=t))


@splice.kernel
def twice_kernel(x, y, z, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("x * x + 1.0f", dtype=ct.float32, x=t))
    ct.store(z, index=(ct.bid(0),), tile=splice.cuda("x * x + 1.0f", dtype=ct.float32,
                                                     x=t + 1.0))


def _softsign(t, flag):
    return splice.cuda("flip ? -x / (1.0f + fabsf(x)) : x / (1.0f + fabsf(x))",
                       dtype=ct.float32, x=t, flip=flag)


@splice.kernel
def helper_kernel(x, y, z, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=_softsign(t, False))
    ct.store(z, index=(ct.bid(0),), tile=_softsign(ct.reshape(t, (TILE // 16, 16)), True)
             .reshape((TILE,)) + splice.cuda("r * 0.0f", dtype=ct.float32,
                                             r=ct.reshape(t, (1, TILE))).reshape((TILE,)))


# ----------------------------------------------------------------------------- values

def test_expression_and_body_values():
    x = _x()
    y, z = np.zeros_like(x), np.zeros_like(x)
    b = _exec(gauss_kernel, F32x3, (2,), x, y, z)
    np.testing.assert_allclose(y, np.exp(-x * x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, np.sin(x) * np.cos(x) + 2, rtol=1e-5, atol=1e-5)
    assert all(s.inlined for s in b.sites) and len(b.sites) == 2


def test_return_in_a_comment_or_string_leaves_an_expression():
    x = _x()
    y, z = np.zeros_like(x), np.zeros_like(x)
    _exec(return_word_kernel, F32x3, (2,), x, y, z)
    np.testing.assert_array_equal(y, x * 2)
    np.testing.assert_array_equal(z, x * 7)    # sizeof("return"): 6 letters and the NUL


def test_readme_example_values():
    x = _x(lo=-6.0, hi=6.0)
    y = np.zeros_like(x)
    b = _exec(gelu_kernel, F32x2, (2,), x, y)
    ref = x.astype(np.float64) / (1 + np.exp(-1.702 * x.astype(np.float64)))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    if b.sass is not None:
        assert b.sass_call_count() == 0    # no IEEE-division slow path either


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_no_sass_call(arch):
    b = splice.compile(gauss_kernel, F32x3, arch)
    assert all(s.inlined for s in b.sites)
    if b.sass is None:
        pytest.skip("no nvdisasm")
    assert b.sass_call_count() == 0


def test_in_a_helper_function_with_bool_constants_and_2d_tiles():
    x = _x()
    y, z = np.zeros_like(x), np.zeros_like(x)
    b = _exec(helper_kernel, F32x3, (2,), x, y, z)
    np.testing.assert_allclose(y, x / (1 + np.abs(x)), rtol=1e-6)
    np.testing.assert_allclose(z, -x / (1 + np.abs(x)), rtol=1e-6)
    assert len(b.sites) == 3 and all(s.inlined for s in b.sites)


def test_several_results_values():
    x = _x()
    s, c = np.zeros_like(x), np.zeros_like(x)
    _exec(sincos_kernel, F32x3, (2,), x, s, c)
    np.testing.assert_allclose(s, np.sin(x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(c, np.cos(x), rtol=1e-6, atol=1e-6)
    xi = np.arange(-128, 128, dtype=np.int32) * 37
    q, r = np.zeros(256, np.int32), np.zeros(256, np.int16)
    _exec(divmod_kernel, K.signature(K.array(ct.int32), K.array(ct.int32), K.array(ct.int16),
                                     128), (2,), xi, q, r)
    np.testing.assert_array_equal(q, np.trunc(xi / 7).astype(np.int32))
    np.testing.assert_array_equal(r, np.fmod(xi, 7).astype(np.int16))


def test_array_input_is_a_pointer():
    x = np.arange(256, dtype=np.int32)
    table = (np.arange(8, dtype=np.int32) * 3 + 1)
    y = np.zeros(256, np.int32)
    _exec(table_kernel, K.signature(K.array(ct.int32), K.array(ct.int32), K.array(ct.int32),
                                    128), (2,), x, table, y)
    np.testing.assert_array_equal(y, table[x & 7] * 10 + x)


@pytest.mark.parametrize("tile", [1, 32, 128])
def test_void_snippet_runs_once_per_element(tile):
    n = 256
    x = np.random.default_rng(tile).integers(0, 1000, n, dtype=np.int32)
    counts = np.zeros(4, np.uint32)
    _exec(count_kernel, K.signature(K.array(ct.int32), K.array(ct.uint32), tile),
          (n // tile,), x, counts)
    np.testing.assert_array_equal(counts, np.bincount(x & 3, minlength=4))


def test_pure_false_keeps_an_unused_call():
    x = np.arange(256, dtype=np.uint32)
    counts = np.zeros(1, np.uint32)
    _exec(unused_kernel, K.signature(K.array(ct.uint32), K.array(ct.uint32), 128), (2,), x,
          counts)
    assert counts[0] == 256


def test_inputs_are_bound_by_name():
    x, y = _x(), _x(lo=5.0, hi=-1.0)
    z = np.zeros_like(x)
    _exec(names_kernel, F32x3, (2,), x, y, z)
    np.testing.assert_allclose(z, y - 2.0 * x, rtol=1e-6)


def test_dtype_sets_the_result_type():
    x = _x(lo=1.0, hi=3.0)
    y = np.zeros(256, np.float64)
    _exec(wide_kernel, K.signature(K.array(ct.float32), K.array(ct.float64), 128), (2,), x, y)
    np.testing.assert_array_equal(y, x.astype(np.float64) ** 2 + 1e-12)


#: (dtype, NumPy dtype, snippet, reference): one of every dtype family.
DTYPES = [
    (ct.bool_, np.bool_, "!x", lambda x: ~x),
    (ct.int8, np.int8, "x * 3 - 1", lambda x: (x.astype(np.int32) * 3 - 1).astype(np.int8)),
    (ct.int16, np.int16, "x ^ 0x5a5a", lambda x: x ^ np.int16(0x5a5a)),
    (ct.int32, np.int32, "__brev(x)", None),
    (ct.int64, np.int64, "x * 1000000007LL", lambda x: x * np.int64(1000000007)),
    (ct.uint8, np.uint8, "x + 200", lambda x: (x.astype(np.int32) + 200).astype(np.uint8)),
    (ct.uint16, np.uint16, "x >> 3", lambda x: x >> 3),
    (ct.uint32, np.uint32, "__popc(x)", lambda x: np.array([bin(int(v)).count("1")
                                                           for v in x], np.uint32)),
    (ct.uint64, np.uint64, "x * 3ull", lambda x: x * np.uint64(3)),
    (ct.float16, np.float16, "__hmul(x, __float2half(2.0f))", lambda x: x * np.float16(2)),
    (ct.bfloat16, np.uint16, "__hneg(x)", lambda x: x ^ np.uint16(0x8000)),
    (ct.float32, np.float32, "__fmul_rn(x, 3.0f)", lambda x: x * np.float32(3)),
    (ct.float64, np.float64, "sqrt(fabs(x))", lambda x: np.sqrt(np.abs(x))),
]


def _dtype_kernel(code, dtype):
    @splice.kernel
    def k(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=splice.cuda(code, dtype=dtype, x=t))
    return k


def _family_input(npt, n=256, dtype=None):
    """``n`` random values of NumPy type ``npt`` over its whole range (normal floats); for
    ``dtype=ct.bfloat16`` (bits in ``np.uint16``) finite values only: a GPU's ``neg.bf16``
    of a NaN gives the canonical NaN 0x7fff, not the sign-flipped bits (seen on the H200),
    so a NaN input says nothing about the snippet."""
    rng = np.random.default_rng(0)
    if dtype == ct.bfloat16:
        bits = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
        nan_or_inf = (bits & 0x7F80) == 0x7F80
        return np.where(nan_or_inf, bits ^ np.uint16(0x4000), bits).astype(np.uint16)
    if npt == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    if np.issubdtype(npt, np.integer):
        info = np.iinfo(npt)
        return rng.integers(info.min, info.max, n, dtype=npt, endpoint=True)
    return rng.standard_normal(n).astype(npt)


def _brev(x):
    u = x.view(np.uint32)
    return np.array([int(f"{int(v):032b}"[::-1], 2) for v in u], np.uint32).view(np.int32)


@pytest.mark.parametrize("dtype, npt, code, ref", DTYPES, ids=[d[0].name for d in DTYPES])
def test_every_dtype_family(dtype, npt, code, ref):
    x = _family_input(npt, dtype=dtype)
    y = np.zeros_like(x)
    _exec(_dtype_kernel(code, dtype), K.signature(K.array(dtype), K.array(dtype), 128), (2,),
          x, y)
    np.testing.assert_array_equal(y, (ref or _brev)(x))


@pytest.mark.parametrize("kernel, scope", [(block_sum_kernel, "block"),
                                           (group_sum_kernel, "warpgroup")])
def test_block_scope_sees_the_tile_as_an_array(kernel, scope):
    x = _x()
    y = np.zeros_like(x)
    b = _exec(kernel, F32x2, (2,), x, y)
    sums = x.reshape(2, 128).sum(axis=1, dtype=np.float64)
    np.testing.assert_allclose(y, x + np.repeat(sums, 128), rtol=1e-5, atol=1e-4)
    assert [s.form.scope for s in b.sites if s.extern == f"splice.cuda ({scope} call on the "
            f"staged tiles)"] == [scope]


def test_block_scope_takes_tiles_of_different_shapes():
    x = _x()
    y = np.zeros_like(x)
    _exec(two_tiles_kernel, F32x2, (2,), x, y)
    ends = x.reshape(2, 128)[:, 0] + x.reshape(2, 128)[:, 127]
    np.testing.assert_allclose(y, x + np.repeat(ends, 128), rtol=1e-6)


def test_block_scope_tile_results():
    x = _x()
    y, z = np.zeros_like(x), np.zeros_like(x)
    b = _exec(reverse_kernel, F32x3, (2,), x, y, z)
    rows = x.reshape(2, 128)
    np.testing.assert_array_equal(y, (rows[:, ::-1] + 2 * rows).reshape(-1))
    np.testing.assert_array_equal(z, np.tile(np.arange(128, dtype=np.float32) * 3, 2))
    assert len([s for s in b.sites if "tile result" in s.extern]) == 3


def test_includes():
    x = _x(lo=-3.0, hi=3.0) + np.float32(1e-4)
    y = np.zeros_like(x)
    _exec(half_round_kernel, F32x2, (2,), x, y)
    np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))
    assert not np.array_equal(y, x)


def test_include_dirs():
    x = _x()
    y = np.zeros_like(x)
    _exec(header_kernel, F32x2, (2,), x, y)
    np.testing.assert_array_equal(y, x * np.float32(3))


def test_defines_and_options():
    x = _x()
    y, z = np.zeros_like(x), np.zeros_like(x)
    _exec(defines_kernel, F32x3, (2,), x, y, z)
    np.testing.assert_array_equal(y, x * np.float32(3))
    np.testing.assert_array_equal(z, x * np.float32(5))


# ----------------------------------------------------------------------------- one fragment

def test_identical_snippets_share_one_fragment(fresh_cache, monkeypatch):
    from splice.system import toolchain
    calls = []
    real = toolchain.nvrtc_compile

    def counting(source, name, options, **kw):
        calls.append(source)
        return real(source, name, options, **kw)
    monkeypatch.setattr(toolchain, "nvrtc_compile", counting)
    x = _x()
    y, z = np.zeros_like(x), np.zeros_like(x)
    b = _exec(twice_kernel, F32x3, (2,), x, y, z)
    np.testing.assert_allclose(y, x * x + 1, rtol=1e-6)
    np.testing.assert_allclose(z, (x + 1) * (x + 1) + 1, rtol=1e-6)
    assert len(b.sites) == 2 and b.sites[0].symbol == b.sites[1].symbol
    assert len([s for s in calls if b"splice_cuda_" in s]) == 1


# ----------------------------------------------------------------------------- refusals

@splice.kernel
def typo_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda(
        "float s = x;\nreturn s * yy;", dtype=ct.float32, x=t))  # the call's line


def test_compile_error_points_at_the_snippet_line_and_the_call(fresh_cache):
    with pytest.raises(SpliceCompileError) as e:
        splice.compile(typo_kernel, F32x2, "sm_90")
    msg = str(e.value)
    line = typo_kernel_line()
    assert f"splice.cuda) at {__file__}:{line}" in msg
    assert 'error at line 2, column 12 of the snippet: identifier "yy" is undefined' in msg
    assert "return s * yy;\n                 ^" in msg
    assert "snippet: float s = x;\n      return s * yy;" in msg
    assert "parameters (float x); returns float" in msg
    assert "splice_cuda.cu" not in msg.split("--- tool log")[0]
    assert not list(fresh_cache.rglob("*.cubin"))


def typo_kernel_line() -> int:
    import inspect
    src, first = inspect.getsourcelines(typo_kernel._pyfunc if hasattr(
        typo_kernel, "_pyfunc") else typo_kernel.__wrapped__)
    return first + next(i for i, ln in enumerate(src) if "the call's line" in ln) - 1


@splice.kernel
def lambda_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("[](float v) { return v * 3.0f; }(x)",
                                                     dtype=ct.float32, x=t))


def test_an_expression_with_a_lambda_says_to_write_return(fresh_cache):
    with pytest.raises(SpliceCompileError, match=r"pasted as a function body.*'return \[\]"):
        splice.compile(lambda_kernel, F32x2, "sm_90")


def test_a_path_without_return_is_a_compile_error():
    with pytest.raises(SpliceCompileError) as e:
        splice.compile(_dtype_kernel("float y = x;\nif (x > 0) return y;", ct.float32),
                       F32x2, "sm_90")
    assert "missing return statement" in str(e.value)
    assert "every path must return the result" in str(e.value)
    # the same body with a return on every path compiles
    splice.compile(_dtype_kernel("float y = x;\nif (x > 0) return y;\nreturn 0.0f;",
                                 ct.float32), F32x2, "sm_90")


def test_an_error_in_a_header_names_the_header():
    k = _options_kernel(code="splice_test_broken(x)", includes='"splice_test_broken.h"',
                        include_dirs=HEADER_DIR)
    with pytest.raises(SpliceCompileError) as e:
        splice.compile(k, F32x2, "sm_90")
    said = str(e.value).split("--- tool log")[0]
    assert f"error in {HEADER_DIR}/splice_test_broken.h: " in said
    assert 'identifier "undefined_name" is undefined' in said
    assert "snippet: splice_test_broken(x)" in said


@pytest.mark.parametrize("code", ["__shfl_sync(0xffffffff, x, 0)",
                                  "(__syncthreads(), x)"])
def test_collective_refused_per_element(code):
    k = _dtype_kernel(code, ct.float32)
    with pytest.raises(SpliceLinkError, match="inline CUDA C \\(splice.cuda\\) at .*"
                                              "(warp-collective|barrier|collective)"):
        splice.compile(k, F32x2, "sm_90")


def test_pure_snippet_with_an_effect_is_refused():
    @splice.kernel
    def k(x, counts, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(x, index=(ct.bid(0),), tile=splice.cuda("atomicAdd(c, 1u) + v",
                                                         dtype=ct.uint32, c=counts, v=t))
    with pytest.raises(SpliceLinkError, match="splice.cuda"):
        splice.compile(k, K.signature(K.array(ct.uint32), K.array(ct.uint32), 128), "sm_90")


def _options_kernel(code="x", dtype=ct.float32, pure=True, memory="any", scope=None,
                    includes=(), include_dirs=(), defines=(), options=()):
    """A kernel calling ``splice.cuda(code, ..., x=t)`` with these options (a kernel
    reads a factory's arguments as constants; it cannot call a lambda)."""
    @splice.kernel
    def k(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=splice.cuda(
            code, dtype=dtype, pure=pure, memory=memory, scope=scope, includes=includes,
            include_dirs=include_dirs, defines=defines, options=options, x=t))
    return k


@splice.kernel
def no_dtype_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("x", x=t))


@splice.kernel
def positional_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("x", t, dtype=ct.float32))


@splice.kernel
def tuple_input_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("x", dtype=ct.float32, x=(t, t)))


@splice.kernel
def keyword_name_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("x", dtype=ct.float32, int=t))


@splice.kernel
def null_input_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda("NULL", dtype=ct.float32, NULL=t))


def _code_kernel(code: str):
    @splice.kernel
    def code_kernel(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=splice.cuda(code, dtype=ct.float32, x=t))
    return code_kernel


@splice.kernel
def non_constant_code_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.cuda(t, dtype=ct.float32, x=t))


@pytest.mark.parametrize("kernel, said", [
    (no_dtype_kernel, "dtype= is required"),
    (positional_kernel, "inputs are passed by name"),
    (tuple_input_kernel, "input 'x' is"),
    (keyword_name_kernel, "input 'int' cannot name the snippet's C parameter: it is a C++ "
                          "keyword"),
    # a name that would break splice's generated code: refused at the call (issue 41)
    (null_input_kernel, "input 'NULL' cannot name the snippet's C parameter: it is a macro "
                        "NVRTC defines (NULL)"),
    # an unbalanced bracket is said as such, not as a missing return
    (_code_kernel("if (x > 0) { return x; return 0.0f;"),
     "'{' at line 1, column 12 is never closed"),
    (_code_kernel("if (x > 0) return x; } return 0.0f;"), "'}' at line 1, column 22 closes "
                                                           "no '{'"),
    (_code_kernel("return fmaxf(x, [0.0f);"), "')' at line 1, column 22 does not close the "
                                              "'[' at line 1, column 17"),
    (non_constant_code_kernel, "the code must be a compile-time constant"),
    (mismatch_kernel, "do not broadcast to a common shape: a (128,), b (64,)"),
    (_options_kernel(dtype=F32_TILE), "a tile result (splice.tile) is for scope=\"block\""),
    (_options_kernel(dtype=(F32_TILE, ct.float32), scope="block"), "do not mix"),
    (_options_kernel(code=""), "non-empty str"),
    (_options_kernel(dtype=(ct.float32,)), "at least two dtypes"),
    (_options_kernel(dtype=(ct.float64, ct.float64)), "64 bits"),
    (_options_kernel(dtype="float8"), "dtype"),
    (_options_kernel(memory="arguments"), "is pure"),
    (_options_kernel(memory="none", pure=False), "memory must be"),
    (_options_kernel(scope="grid"), "scope"),
    (_options_kernel(pure=1), "pure must be"),
    (_options_kernel(options=("-dlto",)), "-dlto"),
    (_options_kernel(includes=(1,)), "includes must"),
    (_options_kernel(defines=(1,)), "defines must"),
    (_options_kernel(include_dirs="/no/such/dir"), "not a directory"),
], ids=["no-dtype", "positional", "tuple-input", "keyword-name", "NULL", "open-brace",
        "close-brace", "crossed-brackets", "non-constant-code", "shapes",
        "tile-result-per-element", "tile-and-element-results", "empty",
        "one-tuple", "128-bit-results", "bad-dtype", "memory-on-pure", "memory-none", "scope",
        "pure", "dlto", "includes", "defines", "include-dirs"])
def test_bad_calls_are_call_errors(kernel, said, fresh_cache):
    with pytest.raises(SpliceCallError, match=r"inline CUDA C \(splice.cuda\) at ") as e:
        splice.compile(kernel, F32x2, "sm_90")
    assert said in str(e.value), str(e.value)
    assert f"{__file__}:" in str(e.value)
    assert not list(fresh_cache.rglob("*.cubin"))


@pytest.mark.parametrize("name, why", [
    ("NULL", "a macro NVRTC defines"), ("va_arg", "a macro NVRTC defines"),
    ("assert", "a macro NVRTC defines"), ("xor_eq", "a C++ keyword"),
    ("co_await", "a C++ keyword"), ("a__b", "an identifier C++ reserves"),
    ("_Value", "an identifier C++ reserves"), ("splice_x", "splice's generated code uses"),
    ("x1", None), ("_value", None), ("threadIdx_", None),
])
def test_input_names_that_would_break_the_generated_code(name, why):
    """The rule the call applies (null_input_kernel above runs it through a kernel)."""
    from splice.declare.cuda_frontend import input_name_refusal
    said = input_name_refusal(name)
    assert (said is None) if why is None else (why in said), said


def test_an_input_that_a_header_makes_a_macro_is_refused_when_it_compiles(fresh_cache):
    @splice.kernel
    def k(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=splice.cuda("k * 2.0f", dtype=ct.float32, k=t,
                                                         defines=(("k", "3"),)))
    with pytest.raises(splice.SpliceCompileError,
                       match=r"inline CUDA C \(splice\.cuda\) at .*test_cuda_inline\.py:\d+ "
                             r"does not compile(.|\n)*the input k is a macro here"):
        splice.compile(k, F32x2, "sm_90")


def test_called_from_python_is_an_error():
    with pytest.raises(SpliceCallError, match="device code"):
        splice.cuda("x", dtype=None)


def test_memory_arguments_is_passed_to_the_extern():
    @splice.kernel
    def k(x, counts, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        splice.cuda("atomicAdd(c, v)", dtype=None, memory="arguments", c=counts, v=t)
    from splice.tracing.trace import trace_kernel
    sig = K.signature(K.array(ct.uint32), K.array(ct.uint32), 128)
    assert [s.extern.memory for s in trace_kernel(k, sig, "sm_80").sites] == ["arguments"]
    x = np.arange(256, dtype=np.uint32)
    counts = np.zeros(1, np.uint32)
    _exec(k, sig, (2,), x, counts)
    assert counts[0] == x.sum()


# ----------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_gpu_expression_body_and_results(torch):
    x = _x(1024)
    xs = torch.from_numpy(x).cuda()
    y, z = torch.empty_like(xs), torch.empty_like(xs)
    _launch(torch, (8,), gauss_kernel, (xs, y, z, 128))
    np.testing.assert_allclose(y.cpu().numpy(), np.exp(-x * x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z.cpu().numpy(), np.sin(x) * np.cos(x) + 2, atol=1e-5)
    _launch(torch, (8,), sincos_kernel, (xs, y, z, 128))
    np.testing.assert_allclose(y.cpu().numpy(), np.sin(x), atol=1e-6)
    np.testing.assert_allclose(z.cpu().numpy(), np.cos(x), atol=1e-6)


@pytest.mark.gpu
def test_gpu_readme_example(torch):
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    _launch(torch, (x.numel() // 1024,), gelu_kernel, (x, y, 1024))
    torch.testing.assert_close(y, x * torch.sigmoid(1.702 * x), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_gpu_pointers_and_void(torch):
    x = np.random.default_rng(1).integers(0, 1000, 1024, dtype=np.int32)
    counts = torch.zeros(4, dtype=torch.uint32, device="cuda")
    _launch(torch, (8,), count_kernel, (torch.from_numpy(x).cuda(), counts, 128))
    np.testing.assert_array_equal(counts.cpu().numpy(), np.bincount(x & 3, minlength=4))


@pytest.mark.gpu
def test_gpu_block_scope(torch):
    x = _x(1024)
    xs = torch.from_numpy(x).cuda()
    y = torch.empty_like(xs)
    _launch(torch, (8,), block_sum_kernel, (xs, y, 128))
    sums = x.reshape(8, 128).sum(axis=1, dtype=np.float64)
    np.testing.assert_allclose(y.cpu().numpy(), x + np.repeat(sums, 128), rtol=1e-5,
                               atol=1e-4)


# ----------------------------------------------------------------------------- warpgroup

@splice.kernel
def group_size_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    n = splice.cuda("return splice_group_size() + a;", dtype=ct.int32, scope="warpgroup",
                    includes="splice_group.h", a=ct.bid(0))
    ct.store(y, index=(ct.bid(0),), tile=t + n)


@splice.kernel
def group_barrier_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    n = splice.cuda("__syncthreads(); return a;", dtype=ct.int32, scope="warpgroup",
                    a=ct.bid(0))
    ct.store(y, index=(ct.bid(0),), tile=t + n)


I32x2 = K.signature(K.array(ct.int32), K.array(ct.int32), 128)


def test_warpgroup_scope_values():
    x = np.arange(256, dtype=np.int32)
    y = np.zeros_like(x)
    b = _exec(group_size_kernel, I32x2, (2,), x, y)
    np.testing.assert_array_equal(y, x + 128 + np.repeat(np.arange(2, dtype=np.int32), 128))
    assert "warpgroup scope" in b.summary()


def test_warpgroup_snippet_with_a_block_barrier_is_refused():
    with pytest.raises(SpliceLinkError, match=r"splice.cuda.*(barrier|__syncthreads)"):
        splice.compile(group_barrier_kernel, I32x2, "sm_80")


@pytest.mark.parametrize("code, said", [
    ('asm volatile("exit;"); return x;', "executes 'exit;'"),
    ("__shared__ float s[128]; s[threadIdx.x] = x; return s[(threadIdx.x + 1) % 128];",
     "uses __shared__ memory")], ids=["exit", "shared"])
def test_exit_and_shared_memory_are_refused_per_element(code, said):
    with pytest.raises(SpliceLinkError, match="extern 'splice.cuda'") as e:
        splice.compile(_options_kernel(code=code, pure=False), F32x2, "sm_90")
    assert said in str(e.value)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, npt, code, ref", DTYPES, ids=[d[0].name for d in DTYPES])
def test_gpu_every_dtype_family(torch, dtype, npt, code, ref):
    x = _family_input(npt, dtype=dtype)
    xs = torch.from_numpy(x).cuda()
    if dtype == ct.bfloat16:
        xs = xs.view(torch.bfloat16)
    ys = torch.empty_like(xs)
    _launch(torch, (2,), _dtype_kernel(code, dtype), (xs, ys, 128))
    got = (ys.view(torch.uint16) if dtype == ct.bfloat16 else ys).cpu().numpy()
    np.testing.assert_array_equal(got, (ref or _brev)(x))


# ----------------------------------------------------------------------------- TMA matmul

@splice.kernel
def matmul_group_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = K.matmul_tile(A, B, tm, tn, tk)
    s = splice.cuda("return (float)splice_group_size() + a;", dtype=ct.float32,
                    scope="warpgroup", includes="splice_group.h", a=ct.bid(0))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc + s, C.dtype))


MATMUL_F16 = K.signature(K.array(ct.float16, 2), K.array(ct.float16, 2),
                         K.array(ct.float16, 2), 128, 128, 64)


def test_warpgroup_snippet_in_a_warp_specialised_matmul_compiles():
    b = splice.compile(matmul_group_kernel, MATMUL_F16, "sm_90")
    assert "warpgroup scope" in b.summary()
    if b.sass is not None:
        assert b.sass_call_count() == 0


@pytest.mark.gpu
def test_gpu_warpgroup_snippet_in_a_matmul(torch):
    A = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    B = torch.randn(128, 256, device="cuda", dtype=torch.float16)
    C = torch.empty(256, 256, device="cuda", dtype=torch.float16)
    _launch(torch, (2, 2, 1), matmul_group_kernel, (A, B, C, 128, 128, 64))
    want = (A.float() @ B.float() + torch.tensor([[0.0], [1.0]], device="cuda")
            .repeat_interleave(128, 0) + 128.0).half()
    torch.testing.assert_close(C, want, rtol=2e-2, atol=2e-1)
