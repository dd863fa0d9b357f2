"""The differential fuzzer of ``splice.cuda`` (``tests/fuzz``): a fixed-seed run, the GPU
against the executor on the same kernels (marker gpu), and the fuzzer's own checks (it
finds a wrong result, undefined behaviour and a refused snippet; its programs stay defined;
the minimiser shrinks).

Cases per run: ``SPLICE_CUDA_FUZZ_CASES`` (``.ci/run`` sets CI's count; locally 40), in
batches of :data:`BATCH` (one kernel, one host program each).
"""

from __future__ import annotations

import numpy as np
import pytest

from fuzz import device, host, minimise
from fuzz.cli import batch_seed, batch_snippets, regression_test
from fuzz.cmodel import FUNCTIONS, I32, TYPES
from fuzz.harness import Finding, N, inputs, layout, same
from fuzz.program import (
    Binary,
    Case,
    Cast,
    Input,
    Lit,
    Render,
    Return,
    Snippet,
    Unary,
    Var,
    call,
)
from fuzz.runner import check, run_cases
from support.fuzz import examples

SEED = 41
CASES = examples("SPLICE_CUDA_FUZZ_CASES", 40)
BATCH = 100
BATCHES = range(-(-CASES // BATCH))


def _report(found) -> str:
    return "\n\n".join(f"{f.kind}:\n{f.detail}\ncode:\n{f.case.code}\ninputs: {f.case.inputs}"
                       for f in found) + \
        f"\n(minimise: python -m tests.fuzz --seed {SEED} --batch {BATCH} --cases {CASES})"


def _batch(index: int) -> list[Case]:
    size = min(BATCH, CASES - index * BATCH)
    return list(dict.fromkeys(s.case() for s in batch_snippets(SEED, index, size)))


@pytest.mark.parametrize("index", BATCHES)
def test_generated_snippets_compute_what_the_host_compiler_computes(index):
    found = run_cases(_batch(index), batch_seed(SEED, index), ubsan=True)
    assert not found, _report(found)


@pytest.mark.gpu
@pytest.mark.parametrize("index", BATCHES)
def test_generated_snippets_on_the_gpu_compute_what_the_executor_computes(dev, index):
    """The same batches launched on the GPU, compared with the executor bit for bit (floats
    too: every operation generated is IEEE-exact and no float multiply is left for ptxas
    to contract; only libdevice's fmod/remainder run approximate or contractible
    instructions, inside algorithms whose result is exact; any NaN equals any NaN).
    Scalars reach the kernel as tiles here: a launch types a scalar parameter from a
    Python value, not a dtype."""
    lay = layout(_batch(index), scalar_forms=("tile0", "tile1"))
    data = inputs(lay, batch_seed(SEED, index))
    build = device.compile_batch(lay)
    cpu, launch = device.run_executor(build, lay, data)
    gpu = device.run_gpu(device.kernel(lay), lay, data, dev)
    for dt in cpu:
        bad = np.flatnonzero(~same(cpu[dt], gpu[dt]))
        if bad.size:
            [case] = [c for c, slots in zip(lay.cases, lay.slots) if (dt, bad[0] // N) in slots]
            # approximate instructions that ran, float add/sub/mul ptxas may contract: suspects
            pytest.fail(f"{dt} elements {bad[:8]}: executor {cpu[dt][bad[:8]]}, GPU "
                        f"{gpu[dt][bad[:8]]}; approximate {sorted(launch.approx)}, unrounded "
                        f"{launch.unrounded}\nfirst case: {case}")


#: Float inputs at the edges of every integer range, NaNs of both signs and the ties of
#: each rounding mode: where the CUDA intrinsics' float -> integer conversions (PTX cvt
#: .rni/.rzi/.rmi/.rpi) can differ between a model and the hardware.
_F2I_EDGES = (float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -0.5,
              1.5, -1.5, 2.5, -2.5, -1.0, 127.5, 255.5, 32767.5, 65535.5, 2.0 ** 31 - 0.5,
              2.0 ** 31, -(2.0 ** 31), -(2.0 ** 31) - 1, 2.0 ** 32 - 0.5, 2.0 ** 32, 2.0 ** 63,
              -(2.0 ** 63), 2.0 ** 64, -(2.0 ** 64), 1e30, -1e30, 1e300, -1e300)


def _f2i_cases(nan: bool = True) -> list[Case]:
    """Every float -> integer intrinsic on the edge values; NaNs where ``nan`` or where the
    result is 0 (F2I.NTZ: from float to 32 bits), the host model's value."""
    out = []
    for src, f in (("float32", "float"), ("float64", "double")):
        for dst, i in (("int32", "int"), ("uint32", "uint"), ("int64", "ll"),
                       ("uint64", "ull")):
            zero = src == "float32" and dst.endswith("32")
            values = tuple(v for v in _F2I_EDGES if (v == v or nan or zero)
                           and (src == "float64" or abs(v) < 3.4e38 or v != v))
            for m in ("rn", "rz", "ru", "rd"):
                out.append(Case(f"return __{f}2{i}_{m}(x);", (dst,),
                                (Input("x", src, "tile", values),)))
    return out


def _f2i_differences(cpu, gpu, lay) -> list[str]:
    """Every element where the two runs differ: the call, its input, both results."""
    out = []
    for case, slots in zip(lay.cases, lay.slots):
        [(dt, slot)] = slots
        [x] = case.inputs
        for e, v in enumerate(x.values):
            a, b = cpu[dt][slot * N + e], gpu[dt][slot * N + e]
            if a != b:
                out.append(f"{case.code} x={v!r}: executor {a}, GPU {b}")
    return out


def test_float_to_integer_conversions_at_their_edges_compute_what_the_host_computes():
    """The conversions' edge values (NaN, infinities, ties, the ranges' ends) through
    splice and the executor against the fuzzer's independent host definitions."""
    found = run_cases(_f2i_cases(nan=False), 0)
    assert not found, _report(found)


@pytest.mark.parametrize("src,dst,want", [
    ("f32", "s32", 0), ("f32", "u32", 0), ("f16", "s16", 0), ("f32", "u8", 0),   # F2I.NTZ
    ("f64", "u32", 0x80000000),                                   # measured on an H100
    ("f64", "s32", 0x80000000), ("f32", "s64", 1 << 63), ("f64", "u64", 1 << 63)])
def test_a_nan_converted_to_an_integer_is_what_the_hardware_gives(src, dst, want):
    """The executor's value for cvt of a NaN to an integer follows ptxas's F2I: 0 where it
    adds .NTZ, the destination's sign bit where it does not (measured for f64 -> u32)."""
    from support.ptx_exec.runtime import CVT
    nan = {"f16": 0x7e00, "f32": 0x7fc00000, "f64": 0x7ff8000000000000}[src]
    assert CVT(dst, src, ("rni",), nan) == want
    assert CVT(dst, src, ("rzi",), nan | (1 << {"f16": 15, "f32": 31, "f64": 63}[src])) == want


@pytest.mark.gpu
def test_float_to_integer_conversions_at_their_edges_on_the_gpu(dev):
    """The same conversions on the GPU against the executor, element by element, NaNs where
    the executor gives a value: the GPU fuzz batch found an H100 giving 2147483648 for
    ``__double2uint_rn(NaN)`` where the executor (and the host model) gave 0. The message
    lists every difference."""
    lay = layout(_f2i_cases(), scalar_forms=("tile0", "tile1"))
    data = inputs(lay, 0)
    build = device.compile_batch(lay)
    cpu, _ = device.run_executor(build, lay, data)
    gpu = device.run_gpu(device.kernel(lay), lay, data, dev)
    differences = _f2i_differences(cpu, gpu, lay)
    assert not differences, "\n".join(differences)


# ------------------------------------------------------------------- the fuzzer's checks

def _case(code: str, result="int32", **inputs) -> Case:
    return Case(code, (result,), tuple(Input(n, dt, "tile", vals)
                                       for n, (dt, vals) in inputs.items()))


_FUNCTION = host._function


def test_a_wrong_result_is_a_mismatch(monkeypatch):
    """The host side computing something else (``+ 2`` for ``+ 1``) is found, with the
    element, its input and both results."""
    case = _case("a + 1", a=("int32", (5, -7)))
    monkeypatch.setattr(host, "_function", lambda lay, k: [
        ln.replace("return a + 1", "return a + 2") for ln in _FUNCTION(lay, k)])
    [f] = run_cases([case, _case("a - 1", a=("int32", (3,)))], 0)
    assert f.kind == "mismatch" and f.case == case
    assert "inputs {'a': 5}; splice+executor 6, host C++ 7" in f.detail


def test_undefined_behaviour_is_a_host_finding():
    """A program with undefined behaviour (signed overflow) is caught by UBSan on the host
    side, named by its case, and the rest of the batch still runs."""
    bad = _case("a + 2147483647", a=("int32", (1,)))
    found = run_cases([_case("a * 3", a=("int32", (4,))), bad], 0, ubsan=True)
    assert [(f.kind, f.case) for f in found] == [("host", bad)]
    assert "signed integer overflow" in found[0].detail


#: Code the host compiles and NVRTC rejects: a snippet splice refuses.
NVRTC_ONLY_ERROR = "#ifdef __CUDACC__\n#error refused here\n#endif\nreturn a;"


def test_a_refused_snippet_is_a_finding():
    """A snippet splice refuses is a finding named by its case (the kernel line of its
    call), and the rest of the batch still runs."""
    bad = _case(NVRTC_ONLY_ERROR, a=("int32", (1,)))
    found = run_cases([_case("a ^ 5", a=("int32", (1, 2))), bad], 0)
    assert [(f.kind, f.case) for f in found] == [("refused", bad)]
    assert "refused here" in found[0].detail


def test_a_host_compile_error_is_a_finding():
    bad = _case("a + undefined_name", a=("int32", (1,)))
    found = run_cases([bad, _case("a ^ 5", a=("int32", (1, 2)))], 0)
    assert [(f.kind, f.case) for f in found] == [("host", bad)]
    assert "undefined_name" in found[0].detail


def test_check_passes_and_fails():
    check(_case("(a << 3) ^ b", a=("uint32", (1, 0xffffffff)), b=("uint32", (7, 9))))
    with pytest.raises(AssertionError, match="refused"):
        check(_case(NVRTC_ONLY_ERROR, a=("int32", (1,))))


@pytest.mark.parametrize("seed", range(3))
def test_generated_programs_are_well_defined_under_ubsan(seed):
    """Many programs on the host side alone, UBSan on: the generator's range rules keep
    every operation defined (signed overflow, shifts, division, float to integer)."""
    lay = layout([s.case() for s in batch_snippets(1000 + seed, 0, 150)])
    host.run(lay, inputs(lay, seed), ubsan=True)


def test_operations_are_plain_where_ranges_prove_them_defined():
    i16, i32, u8 = (Var(n, TYPES[t]) for n, t in (("s", "int16"), ("i", "int32"),
                                                   ("u", "uint8")))
    ctx = Render(contracts=False)
    assert Binary("+", i16, i16).render(ctx) == "(s + s)"            # promoted: fits int
    assert Binary("+", i32, i32).render(ctx) == "fz_add_int32(i, i)"
    assert Binary("*", u8, u8).render(ctx) == "(u * u)"
    assert Binary("<<", u8, Lit(I32, 23)).render(ctx) == "(u << 23)"
    assert Binary("<<", u8, Lit(I32, 24)).render(ctx) == "fz_shl_int32(u, 24)"
    assert Binary("<<", i16, i32).render(ctx) == "fz_shl_int32(s, (i & 31))"   # negative
    assert Binary("/", i32, Lit(I32, -1)).render(ctx) == "fz_div_int32(i, (-1))"
    assert Binary("/", i32, Lit(I32, 3)).render(ctx) == "(i / 3)"
    assert Unary("-", i16).render(ctx) == "(-s)"
    assert Unary("-", i32).render(ctx) == "fz_neg_int32(i)"


def test_a_float_division_by_a_constant_expression_goes_through_a_call():
    """A constant divisor the compiler evaluates to zero (``(float)(0 >> 2)``) is #39,
    which splice makes an error (C++: undefined); the generated program divides through
    fz_fdiv, whose divisor is no constant expression (the CI fuzz run found it)."""
    f = Var("f", TYPES["float32"])
    zero = Cast(TYPES["float32"], Binary(">>", Lit(TYPES["uint8"], 0), Lit(I32, 2)))
    ctx = Render(contracts=False)
    assert Binary("/", f, zero).render(ctx) == \
        "fz_fdiv((float)(f), (float)(((float)(((unsigned char)0) >> 2))))"
    assert Binary("/", f, f).render(ctx) == "(f / f)"
    check(Case(f"return {Binary('/', Var('a', TYPES['float32']), zero).render(ctx)};",
               ("float32",), (Input("a", "float32", "tile", (1.0, -2.0)),)))


def test_float_multiplies_are_never_contracted():
    f = Var("f", TYPES["float32"])
    assert Binary("*", f, f).render(Render(contracts=True)) == "__fmul_rn(f, f)"
    assert Binary("*", f, f).render(Render(contracts=False)) == "(f * f)"


def test_the_minimiser_keeps_what_fails(monkeypatch):
    """Delta debugging with a stand-in for the two sides ("fails" while the code calls
    fz_mul_int32): the statements around it and its other operand go."""
    a, b = Var("a", I32), Var("b", I32)
    body = (Return((Binary("+", Binary("*", a, b), Binary("^", a, Lit(I32, 7))),)),)
    snippet = Snippet((Input("a", "int32", "tile", (3,)), Input("b", "int32", "tile", (9,))),
                      (I32,), body, contracts=False, pure=False)

    def fake(cases, seed, ubsan=False, stats=None):
        return [Finding("mismatch", c, "", 0) for c in cases if "fz_mul_int32" in c.code]
    monkeypatch.setattr(minimise, "run_cases", fake)
    small, _ = minimise.minimise(snippet, fake([snippet.case()], 0)[0], 0, log=lambda *a: None)
    assert small.case().code == "fz_mul_int32(a, b)" and small.pure and small.contracts


def test_a_regression_test_is_printed_ready_to_paste():
    case = Case("int v = a;\nreturn v;", ("int32",), (Input("a", "int32", "tile", (1,)),),
                ("-fmad=false",), False)
    text = regression_test(case, "example", "seed 1")
    scope: dict = {"Case": Case, "Input": Input, "check": lambda c: scope.update(got=c)}
    exec(text, scope)
    scope["test_example"]()
    assert scope["got"] == case


def test_the_run_is_deterministic():
    """A batch is its seed, index and size: what CI ran, a developer reruns."""
    a = [s.case() for s in batch_snippets(SEED, 0, 30)]
    assert a == [s.case() for s in batch_snippets(SEED, 0, 30)]
    assert a != [s.case() for s in batch_snippets(SEED, 1, 30)]


# ------------------------------------------------------- findings in the fuzzer's reference

@pytest.mark.parametrize("opt", ["-O1", "-O2"])
def test_the_host_rounds_under_a_mode_only_the_operation(monkeypatch, opt):
    """Found by the fuzzer (seed 1): optimising, GCC computed the argument's int64 ->
    float conversion ``(float)b`` after ``fuzz_ops.h``'s fesetround(FE_TOWARDZERO)
    (GCC PR 34678), so the host's ``__fmaf_rz`` gave 0x6c7fffff for 2^90 + 1; the mode
    switch is an opaque call now."""
    monkeypatch.setattr(host, "FLAGS", [opt if f == "-O0" else f for f in host.FLAGS])
    check(Case("__fmaf_rz((float)((65537ull + (unsigned long long)b) >> 16), (float)b, 1.0f)",
               ("float32",), (Input("b", "int64", "tile", (2 ** 53 - 1, 3, -(2 ** 40) - 1)),)))


def test_saturatef_of_negative_zero_is_positive_zero():
    """Found by the fuzzer (seed 2): ``__saturatef(-0.0f)`` is +0.0 (libdevice: clamped to
    [+0.0, 1.0]; PTX's .sat, which the executor models); the host's mapping kept -0.0."""
    check(Case("__saturatef(0.0f / b)", ("float32",),
               (Input("b", "float32", "tile", (-0.5, 0.5, -0.0, 2.0)),)))


def test_no_result_shows_the_sign_of_a_nan_an_operation_made():
    """Found by the fuzzer (seed 4): ``copysignf(0.0f, inf * 0.0f)`` is -0.0 on x86 (its
    default NaN is negative) and +0.0 on a GPU (its canonical NaN is positive); IEEE 754
    leaves that sign to the implementation, so copysign's sign goes through ``fz_not_nan``."""
    a, b = Var("a", TYPES["float32"]), Var("b", TYPES["float32"])
    [copysignf] = [f for f in FUNCTIONS if f.name == "copysignf"]
    assert call(copysignf, [a, b]).render(Render(True)) == "copysignf(a, fz_not_nan(b))"
    check(Case("copysignf(0.0f, fz_not_nan(__fmul_ru(a, 0.0f)))", ("float32",),
               (Input("a", "float32", "tile", (float("inf"), -1.0, float("nan"))),)))
