"""splice.cub's scans, reductions, merge sorts and runs (exclusive_sum, inclusive_scan,
exclusive_scan, reduce, merge_sort, merge_sort_pairs, flag_heads, flag_tails,
unique_counts): values on the CPU executor against NumPy, every parameter, the refusals,
and the GPU against PyTorch.

Each kernel is compiled once per module (one NVRTC compile of CUB per call: seconds on a
shared CPU), at one size and a couple of dtypes."""

from __future__ import annotations

import re

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.errors import SpliceCallError, SpliceCompileError
from splice.inputs import cccl
from support import kernels as K
from support.ptx_exec import run_build

f16, f32, i32 = ct.float16, ct.float32, ct.int32
ConstInt = ct.Constant[int]

#: user operators: C++ expressions of callables (module constants, as a user would write)
XOR = "[](int a, int b) { return a ^ b; }"
ABS_LESS = "[](float a, float b) { return fabsf(a) < fabsf(b); }"
BAD_OP = "[](float a, float b) { return a.no_such_member; }"


@pytest.fixture(scope="module", autouse=True)
def _cub_headers():
    if not cccl.include_dirs():
        pytest.skip(f"CUB headers not found: {cccl.INSTALL_HINT}")


def _row(x, n):
    return ct.load(x, index=(ct.bid(0),), shape=(n,), allow_tma=False)


def _put(y, t):
    ct.store(y, index=(ct.bid(0),), tile=t)


@splice.kernel
def exclusive_sum_kernel(x, y, init, N: ConstInt):
    _put(y, splice.cub.exclusive_sum(_row(x, N), initial=init))


@splice.kernel
def exclusive_sum_default_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.exclusive_sum(_row(x, N)))


@splice.kernel
def cummax_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.inclusive_scan(_row(x, N), "max"))


@splice.kernel
def xor_scan_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.inclusive_scan(_row(x, N), XOR))


@splice.kernel
def exclusive_max_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.exclusive_scan(_row(x, N), "max", 0.5))


@splice.kernel
def reduce_min_kernel(x, y, N: ConstInt):
    _put(y, ct.full((N,), 0, dtype=f32) + splice.cub.reduce(_row(x, N), "min"))


@splice.kernel
def reduce_user_kernel(x, y, N: ConstInt):
    _put(y, ct.full((N,), 0, dtype=i32) + splice.cub.reduce(_row(x, N), "cuda::maximum<>{}"))



@splice.kernel
def max_min_kernel(x, y, N: ConstInt):
    """splice.cub's "max" and "min" and cuTile's ct.max and ct.min of one tile, y[0:4];
    added to -0.0, which keeps the sign of a zero."""
    t = _row(x, N)
    r = ct.full((4,), -0.0, dtype=f32)
    r = ct.where(ct.arange(4, dtype=i32) == 0, r + splice.cub.reduce(t, "max"), r)
    r = ct.where(ct.arange(4, dtype=i32) == 1, r + ct.max(t, axis=0), r)
    r = ct.where(ct.arange(4, dtype=i32) == 2, r + splice.cub.reduce(t, "min"), r)
    r = ct.where(ct.arange(4, dtype=i32) == 3, r + ct.min(t, axis=0), r)
    ct.store(y, index=(0,), tile=r, allow_tma=False)

@splice.kernel
def merge_sort_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.merge_sort(_row(x, N)))


@splice.kernel
def merge_sort_abs_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.merge_sort(_row(x, N), less=ABS_LESS))


@splice.kernel
def merge_sort_pairs_kernel(k, v, ks, vs, N: ConstInt):
    a, b = splice.cub.merge_sort_pairs(_row(k, N), _row(v, N), less="greater")
    _put(ks, a)
    _put(vs, b)


@splice.kernel
def flags_kernel(x, heads, tails, N: ConstInt):
    t = _row(x, N)
    _put(heads, splice.cub.flag_heads(t))
    _put(tails, splice.cub.flag_tails(t))


@splice.kernel
def unique_counts_kernel(x, vals, counts, N: ConstInt):
    v, c = splice.cub.unique_counts(_row(x, N))
    _put(vals, v)
    _put(counts, c)


def _sig(*params):
    return K.signature(*(K.array(p) if not isinstance(p, (int, tuple)) else
                         K.scalar(p[0]) if isinstance(p, tuple) else p for p in params))


_builds: dict = {}


def _build(kernel, sig):
    """One compile for sm_90 per kernel and signature in this module."""
    key = (kernel, repr(sig))
    if key not in _builds:
        _builds[key] = splice.compile(kernel, sig, "sm_90")
    return _builds[key]


def _exec(kernel, sig, *args):
    """Run one CTA (one row) of the sm_90 build on the CPU executor."""
    launch = run_build(_build(kernel, sig), (1,), *args)
    assert not launch.approx


_rng = np.random.default_rng(11)
N = 256


# ---------------------------------------------------------------------------------------------
# Scans and reductions


def test_exclusive_sum_starts_at_initial():
    x = _rng.integers(-8, 8, N).astype(np.float32)                 # exact in float32
    y = np.zeros_like(x)
    _exec(exclusive_sum_kernel, _sig(f32, f32, (f32,), N), x, y, np.float32(2.5))
    np.testing.assert_array_equal(y, 2.5 + np.concatenate([[0], np.cumsum(x)[:-1]]))


def test_exclusive_sum_default_initial_is_zero():
    x = _rng.integers(-1000, 1000, N).astype(np.int32)
    y = np.full_like(x, 7)
    _exec(exclusive_sum_default_kernel, _sig(i32, i32, N), x, y)
    np.testing.assert_array_equal(y, np.concatenate([[0], np.cumsum(x)[:-1]]).astype(np.int32))


def test_inclusive_scan_max_is_a_running_maximum():
    x = _rng.standard_normal(N).astype(np.float32)
    y = np.zeros_like(x)
    _exec(cummax_kernel, _sig(f32, f32, N), x, y)
    np.testing.assert_array_equal(y, np.maximum.accumulate(x))


def test_max_and_min_ignore_nans_whatever_the_cccl():
    """"max" and "min" on floats are fmaxf / fminf (a NaN is ignored, as by ct.max), not
    whatever cuda::maximum<> is in the CCCL found (`a < b ? b : a` in older ones, NaN
    branches under NVRTC in newer ones): the result does not depend on where a NaN is."""
    x = _rng.standard_normal(N).astype(np.float32)
    x[[0, 5, 77, 200]] = np.nan                                     # the first one too
    y = np.zeros_like(x)
    _exec(cummax_kernel, _sig(f32, f32, N), x, y)
    np.testing.assert_array_equal(y, np.fmax.accumulate(x))        # NaN only at [0]
    _exec(reduce_min_kernel, _sig(f32, f32, N), x, y)
    np.testing.assert_array_equal(y, np.full(N, np.nanmin(x), np.float32))
    sass = _build(reduce_min_kernel, _sig(f32, f32, N)).sass
    if sass is not None:                       # one FMNMX a combine, no isnan tests (+INF)
        assert "FMNMX" in sass and "+INF" not in sass



@pytest.mark.parametrize("case", ["nans", "only nans", "signed zeros"])
def test_max_and_min_are_ct_max_s_and_ct_min_s_but_on_a_tile_of_only_nans(case):
    """What the docs promise of "max" and "min" against ct.max and ct.min, on the executor:
    a NaN is ignored by both; -0.0 is below +0.0 for both (PTX max.f32 and min.f32); a tile
    of only NaNs is NaN for splice's "max" and "min" and ct.min, but -inf for ct.max
    (cuTile's cross-warp maximum is an integer atomic on the float's bits)."""
    x, want = _max_min_case(case)
    y = np.zeros(4, np.float32)
    _exec(max_min_kernel, _sig(f32, f32, N), x, y)
    _assert_same_floats(y, want)


def _max_min_case(case: str):
    """(a tile, [splice's max, ct.max, splice's min, ct.min] of it)."""
    x = np.random.default_rng(12).standard_normal(N).astype(np.float32)
    if case == "nans":
        x[[0, 9, 130]] = np.nan
        return x, [np.nanmax(x)] * 2 + [np.nanmin(x)] * 2
    if case == "only nans":
        x[:] = np.nan
        return x, [np.nan, -np.inf, np.nan, np.nan]
    x[:] = -0.0
    x[1::3] = 0.0
    return x, [0.0, 0.0, -0.0, -0.0]


def _assert_same_floats(y, want):
    """Bit for bit where ``want`` is a number (signed zeros), NaN where it is NaN."""
    want = np.float32(want)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(y), nan)
    np.testing.assert_array_equal(y[~nan].view(np.uint32), want[~nan].view(np.uint32))

def test_inclusive_scan_with_a_user_lambda():
    x = _rng.integers(0, 1 << 30, N).astype(np.int32)
    y = np.zeros_like(x)
    _exec(xor_scan_kernel, _sig(i32, i32, N), x, y)
    np.testing.assert_array_equal(y, np.bitwise_xor.accumulate(x))


def test_exclusive_scan_uses_its_operator_and_initial():
    x = _rng.standard_normal(N).astype(np.float32)                 # some above 0.5, most not
    y = np.zeros_like(x)
    _exec(exclusive_max_kernel, _sig(f32, f32, N), x, y)
    want = np.maximum.accumulate(np.concatenate([[0.5], x[:-1]]).astype(np.float32))
    np.testing.assert_array_equal(y, want)


def test_reduce_min_reaches_every_thread():
    x = _rng.standard_normal(N).astype(np.float32)
    y = np.zeros_like(x)
    _exec(reduce_min_kernel, _sig(f32, f32, N), x, y)
    np.testing.assert_array_equal(y, np.full(N, x.min(), np.float32))


#: a load or store without a state space: generic (``ld.f32``, not ``ld.shared.f32``)
_GENERIC_ACCESS = re.compile(
    r"^\s*(?:@!?%\w+\s+)?(?:ld|st)(?!\.(?:global|shared|param|local|const))\.[\w.]+", re.M)


@pytest.mark.parametrize("kernel,sig", [
    (reduce_min_kernel, _sig(f32, f32, N)),
    (cummax_kernel, _sig(f32, f32, N)),
    (unique_counts_kernel, _sig(i32, i32, i32, N))])
def test_staged_tiles_are_read_as_shared_memory(kernel, sig):
    """splice.cub's templates say that their tiles are in shared memory (they are splice's
    staging buffers), so CUB reads and writes them with ld/st.shared, not with generic
    accesses (issue 44: the reduction read its tile with generic LD.E.128)."""
    ptx = _build(kernel, sig).spliced_ptx
    entry = ptx[ptx.index(".entry"):].split(".nv_intermediate_source_section")[0]
    assert _GENERIC_ACCESS.findall(entry) == []


def test_reduce_with_a_user_functor():
    x = _rng.integers(-(1 << 30), 1 << 30, N).astype(np.int32)
    y = np.zeros_like(x)
    _exec(reduce_user_kernel, _sig(i32, i32, N), x, y)
    np.testing.assert_array_equal(y, np.full(N, x.max(), np.int32))


# ---------------------------------------------------------------------------------------------
# Merge sorts


def test_merge_sort_default_is_ascending_float16():
    x = _rng.standard_normal(N).astype(np.float16)
    y = np.zeros_like(x)
    _exec(merge_sort_kernel, _sig(f16, f16, N), x, y)
    np.testing.assert_array_equal(y, np.sort(x))


def test_merge_sort_with_a_user_comparator_is_stable():
    # |v| ties between v and -v: stability keeps their input order
    mags = _rng.integers(1, 20, N).astype(np.float32)
    x = np.where(_rng.random(N) < 0.5, -mags, mags).astype(np.float32)
    y = np.zeros_like(x)
    _exec(merge_sort_abs_kernel, _sig(f32, f32, N), x, y)
    np.testing.assert_array_equal(y, x[np.argsort(np.abs(x), kind="stable")])


def test_merge_sort_pairs_greater_is_stable():
    k = _rng.integers(0, 10, N).astype(np.float32)                 # ties
    v = np.arange(N, dtype=np.int32)
    ks, vs = np.zeros_like(k), np.zeros_like(v)
    _exec(merge_sort_pairs_kernel, _sig(f32, i32, f32, i32, N), k, v, ks, vs)
    order = np.argsort(-k, kind="stable")
    np.testing.assert_array_equal(ks, k[order])
    np.testing.assert_array_equal(vs, v[order])


@splice.kernel
def sort_pairs_descending_kernel(k, v, ks, vs, N: ConstInt):
    a, b = splice.cub.sort_pairs(_row(k, N), _row(v, N), descending=True)
    _put(ks, a)
    _put(vs, b)


def test_radix_sort_pairs_descending_is_stable():
    # splice.cub.sort_pairs's descending (issue 37: ignoring it passed every test)
    k = _rng.integers(0, 10, N).astype(np.float32)                 # ties
    v = np.arange(N, dtype=np.int32)
    ks, vs = np.zeros_like(k), np.zeros_like(v)
    _exec(sort_pairs_descending_kernel, _sig(f32, i32, f32, i32, N), k, v, ks, vs)
    order = np.argsort(-k, kind="stable")
    np.testing.assert_array_equal(ks, k[order])
    np.testing.assert_array_equal(vs, v[order])


# ---------------------------------------------------------------------------------------------
# Runs


def _runs_input():
    return np.repeat(_rng.integers(0, 4, N), _rng.integers(1, 6, N))[:N].astype(np.int32)


def test_flag_heads_and_tails():
    x = _runs_input()
    heads, tails = np.full(N, 9, np.int32), np.full(N, 9, np.int32)
    _exec(flags_kernel, _sig(i32, i32, i32, N), x, heads, tails)
    np.testing.assert_array_equal(heads, np.concatenate([[1], x[1:] != x[:-1]]))
    np.testing.assert_array_equal(tails, np.concatenate([x[1:] != x[:-1], [1]]))


def test_unique_counts_is_a_run_length_encoding():
    x = _runs_input().astype(np.float32) - 1.5
    vals, counts = np.full(N, 9, np.float32), np.full(N, 9, np.int32)
    _exec(unique_counts_kernel, _sig(f32, f32, i32, N), x, vals, counts)
    starts = np.flatnonzero(np.concatenate([[True], x[1:] != x[:-1]]))
    runs = len(starts)
    np.testing.assert_array_equal(vals[:runs], x[starts])
    np.testing.assert_array_equal(counts[:runs], np.diff(np.append(starts, N)))
    assert not vals[runs:].any() and not counts[runs:].any()


@splice.kernel
def run_length_decode_kernel(v, c, y, N: ConstInt):
    _put(y, splice.cub.run_length_decode(_row(v, N), _row(c, N)))


@pytest.mark.parametrize("most", [3, 1], ids=["cut", "padded"])
def test_run_length_decode_repeats_each_value_its_count(most):
    # counts 0..3 sum past the tile (cut at n); 0..1 short of it (padded with 0)
    v = _rng.standard_normal(N).astype(np.float32)
    c = _rng.integers(0, most + 1, N).astype(np.int32)
    c[5] = -4                                                       # counts as 0
    y = np.full(N, 9, np.float32)
    _exec(run_length_decode_kernel, _sig(f32, i32, f32, N), v, c, y)
    want = np.repeat(v, np.maximum(c, 0))[:N]
    np.testing.assert_array_equal(y, np.concatenate([want, np.zeros(N - len(want), np.float32)]))


# ---------------------------------------------------------------------------------------------
# Refusals


@splice.kernel
def scan_op_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.inclusive_scan(_row(x, N), 3))


@splice.kernel
def scan_hash_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.inclusive_scan(_row(x, N), "#include <x>\ncuda::maximum<>{}"))


@splice.kernel
def scan_escape_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.inclusive_scan(_row(x, N), "cuda::maximum<>{})(a, b); } }; int x = (0"))


@splice.kernel
def bad_op_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.inclusive_scan(_row(x, N), BAD_OP))


@splice.kernel
def pairs_shapes_kernel(k, v, ks, vs, N: ConstInt):
    a, b = splice.cub.merge_sort_pairs(_row(k, N), _row(v, 2 * N))
    _put(ks, a)


@splice.kernel
def reduce_2d_kernel(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0), 0), shape=(N, N), allow_tma=False)
    _put(y, ct.full((N,), 0, dtype=f32) + splice.cub.reduce(t, "sum"))


def _line_of(code: str) -> int:
    return next(n for n, line in enumerate(open(__file__), 1) if code in line)


@splice.kernel
def scan_comma_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.inclusive_scan(_row(x, N), "fmaxf(a, b), a"))


@splice.kernel
def scan_undefined_kernel(x, y, N: ConstInt):
    _put(y, splice.cub.inclusive_scan(_row(x, N), "[](float a, float b) { return a + nope; }"))


def test_operator_refusals_name_the_call_and_the_fix():
    cases = [(scan_op_kernel, "scan_op_kernel", "must be a string, one of 'sum', 'max', 'min'"),
             (scan_hash_kernel, "scan_hash_kernel", r"must be one C\+\+ expression, but has a '#'"),
             (scan_escape_kernel, "scan_escape_kernel", "brackets that do not nest and close"),
             # a comma would be two expressions: said so at the call, not NVRTC's
             # "braced initialization ... requires exactly one element"
             (scan_comma_kernel, "scan_comma_kernel", "a comma outside brackets")]
    for kernel, name, msg in cases:
        with pytest.raises(SpliceCallError, match=msg) as e:
            splice.compile(kernel, _sig(f32, f32, 128), "sm_90")
        assert f"test_cub_ops.py:{_line_of(f'def {name}(') + 1}" in str(e.value)
        assert "cuda::maximum<>{}" in str(e.value) or "[](float a" in str(e.value)


def test_an_operator_that_does_not_compile_leads_with_the_call():
    with pytest.raises(splice.SpliceCompileError) as e:
        splice.compile(scan_undefined_kernel, _sig(f32, f32, 128), "sm_90")
    line = _line_of("def scan_undefined_kernel(") + 1
    assert re.match(rf"splice\.cub\.inclusive_scan at \S*test_cub_ops\.py:{line} does not "
                    rf"compile: ", e.value.message), e.value.message
    assert 'identifier "nope" is undefined' in e.value.message


def test_user_operator_commas_inside_brackets_or_template_arguments_are_left_to_cpp():
    from splice.cub.operators import user_operator
    for text in ("[](float a, float b) { return a < b ? b : a; }", "cuda::maximum<>{}",
                 "my_op<float, 2>{}"):
        assert user_operator(text)[0].startswith("splice_cub::user_op_")
    with pytest.raises(ValueError, match="a comma outside brackets"):
        user_operator("a, b")


def test_other_refusals():
    with pytest.raises(SpliceCallError, match="float16 tiles are not supported"):
        splice.compile(cummax_kernel, _sig(f16, f16, 128), "sm_90")
    with pytest.raises(SpliceCallError, match="must have one shape"):
        splice.compile(pairs_shapes_kernel, _sig(f32, f32, f32, f32, 128), "sm_90")
    with pytest.raises(SpliceCallError, match="takes a 1-D tile"):
        splice.compile(reduce_2d_kernel, K.signature(K.array(f32, 2), K.array(f32), 16),
                       "sm_90")
    with pytest.raises(SpliceCallError, match=r"splice.cub.exclusive_sum at .*: initial must "
                                              r"be a scalar of the tile's dtype float32 .*"
                                              r"convert it with .astype\(ct.float32\)"):
        splice.compile(exclusive_sum_kernel, _sig(f32, f32, (i32,), 128), "sm_90")
    with pytest.raises(SpliceCallError, match="device code"):
        splice.cub.merge_sort(None)


def test_an_operator_that_does_not_compile_is_a_compile_error_at_the_call():
    with pytest.raises(SpliceCompileError) as e:
        splice.compile(bad_op_kernel, _sig(f32, f32, 128), "sm_90")
    msg = e.value.message
    assert "no_such_member" in msg                            # NVRTC's message on the op
    assert f"test_cub_ops.py:{_line_of('BAD_OP))')}" in msg   # the user's call
    # nothing cached: the same call fails again the same way
    with pytest.raises(SpliceCompileError):
        splice.compile(bad_op_kernel, _sig(f32, f32, 128), "sm_90")


@splice.kernel
def comma_op_kernel(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),),
             tile=splice.cub.inclusive_scan(t, "cuda::maximum<>{}, cuda::minimum<>{}"))


def test_two_operators_separated_by_a_comma_are_a_compile_error_not_the_last_one():
    # pasted as `(text)(a, b)` the comma operator silently used the minimum (found by a
    # new user); braced, it is refused
    with pytest.raises(SpliceCompileError):
        splice.compile(comma_op_kernel, _sig(f32, f32, 128), "sm_90")


def test_a_user_operator_is_part_of_the_code_it_keys():
    from splice.cub.operators import user_operator
    a, src_a = user_operator(XOR)
    b, src_b = user_operator(XOR.replace("^", "|"))
    assert a != b and XOR in src_a and XOR not in src_b
    assert user_operator(XOR) == (a, src_a)
    with pytest.raises(ValueError, match="a comment"):
        user_operator("cuda::maximum<>{} // x")
    # the operator is in the compiled source, so in the content key of what is cached
    keys = {splice.cub._ops_lib(src).fragment.content_key("sm_90") for src in (None, src_a, src_b)}
    assert len(keys) == 3


def test_every_new_template_names_its_public_function():
    import re

    from splice.forms import cub_names
    templates = set(re.findall(r"__device__ \w+ (\w+)\(", splice.cub._OPS_SOURCE))
    assert templates <= set(cub_names.PUBLIC)
    assert {cub_names.PUBLIC[t] for t in templates} == {
        "exclusive_sum", "inclusive_scan", "exclusive_scan", "reduce", "merge_sort",
        "merge_sort_pairs", "flag_heads", "flag_tails", "unique_counts", "run_length_decode"}



def test_every_new_op_documents_its_parameters_returns_raises_and_an_example():
    from support.docstrings import undocumented as _undocumented
    for name in ("exclusive_sum", "inclusive_scan", "exclusive_scan", "reduce", "merge_sort",
                 "merge_sort_pairs", "flag_heads", "flag_tails", "unique_counts",
                 "run_length_decode"):
        fn = getattr(splice.cub, name)
        assert _undocumented(fn) == [], name
        assert all(f"\n    {part}:" in fn.__doc__ for part in ("Returns", "Raises", "Example"))
        assert name in splice.cub.__all__


# ---------------------------------------------------------------------------------------------
# GPU: against PyTorch (rows of 1024, one block per row)

ROWS, GN = 64, 1024


@pytest.mark.gpu
def test_gpu_scans(torch):
    from support.gpu import launch
    x = torch.randint(-8, 8, (ROWS * GN,), device="cuda").float()
    y = torch.empty_like(x)
    rows = x.view(ROWS, GN)
    launch(torch, (ROWS,), exclusive_sum_kernel, (x, y, 3.0, GN))
    assert torch.equal(y.view(ROWS, GN), 3.0 + torch.cumsum(rows, -1) - rows)
    launch(torch, (ROWS,), cummax_kernel, (x, y, GN))
    assert torch.equal(y.view(ROWS, GN), torch.cummax(rows, -1).values)
    launch(torch, (ROWS,), exclusive_max_kernel, (x, y, GN))
    shifted = torch.cat([torch.full((ROWS, 1), 0.5, device="cuda"), rows[:, :-1]], 1)
    assert torch.equal(y.view(ROWS, GN), torch.cummax(shifted, -1).values)
    launch(torch, (ROWS,), reduce_min_kernel, (x, y, GN))
    assert torch.equal(y.view(ROWS, GN), rows.min(-1, keepdim=True).values.expand(ROWS, GN))
    xi = torch.randint(0, 1 << 30, (ROWS * GN,), device="cuda", dtype=torch.int32)
    yi = torch.empty_like(xi)
    launch(torch, (ROWS,), xor_scan_kernel, (xi, yi, GN))
    want = np.bitwise_xor.accumulate(xi.view(ROWS, GN).cpu().numpy(), axis=1)
    assert np.array_equal(yi.view(ROWS, GN).cpu().numpy(), want)
    launch(torch, (ROWS,), exclusive_sum_default_kernel, (xi, yi, GN))
    want = torch.cumsum(xi.view(ROWS, GN).long(), -1) - xi.view(ROWS, GN)
    assert torch.equal(yi.view(ROWS, GN), want.int())       # int32 wraps as int64 -> int32
    launch(torch, (ROWS,), reduce_user_kernel, (xi, yi, GN))
    assert torch.equal(yi.view(ROWS, GN), xi.view(ROWS, GN).max(-1, keepdim=True).values
                       .expand(ROWS, GN))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["nans", "only nans", "signed zeros"])
def test_gpu_max_and_min_against_ct_max_and_ct_min(torch, case):
    """The executor's reading of "max"/"min" against ct.max/ct.min, on the GPU."""
    from support.gpu import launch
    x, want = _max_min_case(case)
    y = torch.zeros(4, device="cuda")
    launch(torch, (1,), max_min_kernel, (torch.from_numpy(x).cuda(), y, N))
    _assert_same_floats(y.cpu().numpy(), want)

@pytest.mark.gpu
def test_gpu_merge_sorts(torch):
    from support.gpu import launch
    x = torch.randn(ROWS * GN, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    launch(torch, (ROWS,), merge_sort_kernel, (x, y, GN))
    assert torch.equal(y.view(ROWS, GN), torch.sort(x.view(ROWS, GN), -1).values)
    xa = torch.randint(-20, 20, (ROWS * GN,), device="cuda").float()
    ya = torch.empty_like(xa)
    launch(torch, (ROWS,), merge_sort_abs_kernel, (xa, ya, GN))
    order = torch.sort(xa.view(ROWS, GN).abs(), dim=-1, stable=True).indices
    assert torch.equal(ya.view(ROWS, GN), xa.view(ROWS, GN).gather(1, order))
    k = torch.randint(0, 50, (ROWS * GN,), device="cuda").float()
    v = torch.arange(ROWS * GN, device="cuda", dtype=torch.int32)
    ks, vs = torch.empty_like(k), torch.empty_like(v)
    launch(torch, (ROWS,), merge_sort_pairs_kernel, (k, v, ks, vs, GN))
    ref = torch.sort(k.view(ROWS, GN), dim=-1, descending=True, stable=True)
    assert torch.equal(ks.view(ROWS, GN), ref.values)
    assert torch.equal(vs.view(ROWS, GN), v.view(ROWS, GN).gather(1, ref.indices))


@pytest.mark.gpu
def test_gpu_run_length_decode(torch):
    from support.gpu import launch
    v = torch.randn(ROWS * GN, device="cuda")
    c = torch.randint(0, 3, (ROWS * GN,), device="cuda", dtype=torch.int32)
    y = torch.empty_like(v)
    launch(torch, (ROWS,), run_length_decode_kernel, (v, c, y, GN))
    for i in range(ROWS):
        r = slice(i * GN, (i + 1) * GN)
        want = torch.repeat_interleave(v[r], c[r])[:GN]
        assert torch.equal(y[r][:len(want)], want) and not y[r][len(want):].any()


@pytest.mark.gpu
def test_gpu_runs(torch):
    from support.gpu import launch
    x = torch.randint(0, 3, (ROWS * GN,), device="cuda", dtype=torch.int32)
    heads, tails = torch.empty_like(x), torch.empty_like(x)
    launch(torch, (ROWS,), flags_kernel, (x, heads, tails, GN))
    r = x.view(ROWS, GN)
    one = torch.ones((ROWS, 1), device="cuda", dtype=torch.int32)
    assert torch.equal(heads.view(ROWS, GN), torch.cat([one, (r[:, 1:] != r[:, :-1]).int()], 1))
    assert torch.equal(tails.view(ROWS, GN), torch.cat([(r[:, 1:] != r[:, :-1]).int(), one], 1))
    xf = x.float()
    vals, counts = torch.empty_like(xf), torch.empty_like(x)
    launch(torch, (ROWS,), unique_counts_kernel, (xf, vals, counts, GN))
    for i in range(ROWS):
        u, c = torch.unique_consecutive(xf.view(ROWS, GN)[i], return_counts=True)
        assert torch.equal(vals.view(ROWS, GN)[i, :len(u)], u)
        assert torch.equal(counts.view(ROWS, GN)[i, :len(u)], c.int())
        assert not counts.view(ROWS, GN)[i, len(u):].any()
