"""The executor's own semantics, on hand-written PTX: IEEE rounding against NumPy and exact
bounds, bit instructions against the PTX ISA's definitions, conversions, warp collectives,
calls with a stack frame, and the errors it owes the tests: races, deadlocks, illegal
addresses, traps, instructions it does not implement."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fuzz.program import Case, Input
from fuzz.runner import check
from support.ptx_exec import ExecError, Pointer, run
from support.ptx_snippets import HEAD, elementwise, kernel


def _special_f32(rng, n):
    x = rng.standard_normal(n).astype(np.float32) * np.float32(2.0) ** rng.integers(
        -30, 30, n).astype(np.float32)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, 1e-40, -1e-40, 3.4e38, 1.0]
    return x


@pytest.mark.parametrize("op,ref", [
    ("add.rn.f32", np.add), ("sub.rn.f32", np.subtract), ("mul.rn.f32", np.multiply),
    ("div.rn.f32", np.divide)])
def test_f32_round_to_nearest_matches_numpy(op, ref):
    rng = np.random.default_rng(0)
    a, b = _special_f32(rng, 128), _special_f32(rng, 128)[::-1].copy()
    got = elementwise(f"{op} %r3, %r1, %r2;", a.view(np.uint32), b.view(np.uint32))
    with np.errstate(all="ignore"):
        want = ref(a, b)
    nan = np.isnan(want)
    np.testing.assert_array_equal(got[~nan], want.view(np.uint32)[~nan])
    assert (got[nan] == 0x7fffffff).all()     # the canonical NaN


@pytest.mark.parametrize("mode", ["rz", "rm", "rp"])
@pytest.mark.parametrize("op", ["add", "mul", "div"])
def test_f32_directed_rounding_brackets_the_exact_value(op, mode):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(128) * 100).astype(np.float32)
    b = (rng.standard_normal(128) * 7).astype(np.float32)
    got = elementwise(f"{op}.{mode}.f32 %r3, %r1, %r2;", a.view(np.uint32), b.view(np.uint32))
    for x, y, g in zip(a, b, got.view(np.float32)):
        fx, fy = Fraction(float(x)), Fraction(float(y))
        exact = {"add": fx + fy, "mul": fx * fy, "div": fx / fy}[op]
        gq = Fraction(float(g))
        lo, hi = (np.nextafter(g, np.float32(-np.inf)), np.nextafter(g, np.float32(np.inf)))
        if mode == "rm" or (mode == "rz" and exact > 0):
            assert gq <= exact < Fraction(float(hi)), (x, y, g)
        else:
            assert Fraction(float(lo)) < exact <= gq, (x, y, g)


def test_an_exact_zero_sum_has_the_sign_ieee_754_gives_it():
    """Found by the splice.cuda fuzzer (seed 2): ``__fadd_rd(0.0f, -0.0f)`` is -0 (an exact
    zero sum of opposite signs, or x - x, is -0 rounding toward -inf, +0 otherwise; zeros
    of one sign keep it); the executor gave +0 when both addends were zeros. Checked
    against the host C++ compiler's fesetround (tests/fuzz)."""
    a = (0.0, -0.0, 0.0, -0.0, 1.5, -2.0, 0.0)
    b = (-0.0, 0.0, 0.0, -0.0, -1.5, -2.0, 1.0)
    check(*(Case(f"{fn}_{mode}(a, b)", (t,), (Input("a", t, "tile", a), Input("b", t, "tile", b)))
            for fn, t in (("__fadd", "float32"), ("__fsub", "float32"), ("__dadd", "float64"),
                          ("__dsub", "float64"))
            for mode in ("rn", "rz", "rd", "ru")))


def test_an_exact_zero_fma_has_the_sign_ieee_754_gives_it():
    """Found by the splice.cuda fuzzer (seed 41): ``__fmaf_rd(0.0f, -2.0f, 0.0f)`` is -0
    (the product -0 plus +0 is an exact zero of opposite signs: -0 rounding toward -inf);
    the executor computed the sign and lost it rounding -0.0 to the format (f32 in every
    directed mode, f64 in .rz/.rm/.rp)."""
    a = (0.0, -0.0, 0.0, 2.0, -0.0, 3.0)
    b = (-2.0, 5.0, 0.0, 0.5, -1.0, -2.0)
    c = (0.0, 0.0, -0.0, -1.0, -0.0, 6.0)
    inputs = tuple(Input(n, "float32", "tile", v) for n, v in (("a", a), ("b", b), ("c", c)))
    check(*(Case(code.format(mode=mode), (t,), inputs)   # three float64 pass no call: cast
            for code, t in (("__fmaf_{mode}(a, b, c)", "float32"),
                            ("__fma_{mode}((double)a, (double)b, (double)c)", "float64"))
            for mode in ("rn", "rz", "rd", "ru")))


def test_an_fma_adding_an_infinity_to_a_finite_product_is_the_infinity():
    """Found by the splice.cuda fuzzer (seed 5): ``__fma_ru(b, b, -inf)`` with b = 1.4e167
    is -inf (the product is exact and finite inside an fma); the executor multiplied in
    float64, overflowed to inf, and gave inf - inf = NaN."""
    b = (1.446991711796173e+167, -3.0e200, 2.0, 1.0e300)
    c = (-np.inf, np.inf, np.nan, np.inf)
    inputs = (Input("b", "float64", "tile", b), Input("c", "float32", "tile", c))
    check(*(Case(f"__fma_{mode}(b, b, (double)c)", ("float64",), inputs)
            for mode in ("rn", "rz", "rd", "ru")))


def test_f32_fma_rounds_once():
    # a * b + c whose float64 rounding is an exact float32 midpoint: rounding twice is wrong
    a = np.array([1 + 2.0 ** -12] * 32, np.float32)
    b = np.array([1 + 2.0 ** -12] * 32, np.float32)
    c = np.array([2.0 ** -60] * 32, np.float32)
    out = np.zeros(32, np.float32)
    body = """
    ld.global.f32 %f1, [%rd_a];
    ld.global.f32 %f2, [%rd_b];
    mov.f32 %f3, 0f21800000;
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd_out], %f4;"""
    run(kernel(body), "k", (1,), Pointer(out), Pointer(a), Pointer(b), block=(32,))
    exact = Fraction(float(a[0])) ** 2 + Fraction(float(c[0]))
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: a midpoint, pushed up by c
    assert Fraction(float(out[0])) == 1 + Fraction(1, 2 ** 11) + Fraction(1, 2 ** 23)
    assert Fraction(float(out[0])) > exact - Fraction(1, 2 ** 24)


def test_ftz_flushes_subnormal_inputs_and_results():
    a = np.array([1e-40, 1e-20, -1e-40, 2.0] * 8, np.float32)
    b = np.array([1.0, 1e-20, 1.0, 3.0] * 8, np.float32)
    got = elementwise("mul.rn.ftz.f32 %r3, %r1, %r2;", a.view(np.uint32), b.view(np.uint32))
    assert list(got[:4].view(np.float32)) == [0.0, 0.0, -0.0, 6.0]
    assert got[2] == 0x80000000


def test_bit_instructions_as_the_isa_defines_them():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    cases = {
        "lop3.b32 %r3, %r1, %r2, 0x0f0f0f0f, 0x96;": a ^ b ^ np.uint32(0x0f0f0f0f),
        "lop3.b32 %r3, %r1, %r2, %r1, 0xe8;": (a & b) | (a & a) | (b & a),   # majority
        "shf.l.wrap.b32 %r3, %r1, %r2, 8;": (b << np.uint32(8)) | (a >> np.uint32(24)),
        "shf.r.clamp.b32 %r3, %r1, %r2, 40;": b,
        "prmt.b32 %r3, %r1, %r2, 0x3210;": a,
        "prmt.b32 %r3, %r1, %r2, 0x7654;": b,
        "prmt.b32 %r3, %r1, %r2, 0x0123;": a.byteswap(),
        "brev.b32 %r3, %r1;": np.array([int(f"{int(v):032b}"[::-1], 2) for v in a], np.uint32),
        "popc.b32 %r3, %r1;": np.array([bin(int(v)).count("1") for v in a], np.uint32),
        "clz.b32 %r3, %r1;": np.array([32 - int(v).bit_length() for v in a], np.uint32),
        "bfe.u32 %r3, %r1, 4, 12;": (a >> np.uint32(4)) & np.uint32(0xfff),
        "bfi.b32 %r3, %r1, %r2, 8, 4;": (b & ~np.uint32(0xf00)) | ((a & np.uint32(15)) << 8),
        "mul.hi.u32 %r3, %r1, %r2;": ((a.astype(np.uint64) * b) >> np.uint64(32)).astype(
            np.uint32),
    }
    for op, want in cases.items():
        np.testing.assert_array_equal(elementwise(op, a, b), want, err_msg=op)
    # signed forms
    sa = a.view(np.int32)
    np.testing.assert_array_equal(elementwise("bfe.s32 %r3, %r1, 28, 4;", a, b).view(np.int32),
                                  sa >> 28, err_msg="bfe.s32")
    np.testing.assert_array_equal(elementwise("shr.s32 %r3, %r1, 7;", a, b).view(np.int32),
                                  sa >> 7, err_msg="shr.s32")
    np.testing.assert_array_equal(
        elementwise("prmt.b32 %r3, %r1, %r2, 0x8888;", a, b),
        np.where((a & 0x80) != 0, np.uint32(0xffffffff), np.uint32(0)), err_msg="prmt sign")


def test_conversions_against_numpy():
    rng = np.random.default_rng(3)
    x = _special_f32(rng, 128)
    with np.errstate(all="ignore"):
        f16 = x.astype(np.float16)
        rzi = np.clip(np.nan_to_num(np.trunc(x.astype(np.float64)), posinf=2 ** 31 - 1,
                                    neginf=-2 ** 31), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    got = elementwise("cvt.rn.f16.f32 %h1, %r1;\n    cvt.u32.u16 %r3, %h1;", x.view(np.uint32),
                      x.view(np.uint32))
    np.testing.assert_array_equal(got.astype(np.uint16), f16.view(np.uint16))
    got = elementwise("cvt.rzi.s32.f32 %r3, %r1;", x.view(np.uint32), x.view(np.uint32))
    np.testing.assert_array_equal(got.view(np.int32), rzi)
    back = elementwise("cvt.u16.u32 %h1, %r1;\n    cvt.f32.f16 %f1, %h1;\n"
                       "    mov.b32 %r3, %f1;", f16.view(np.uint16).astype(np.uint32),
                       x.view(np.uint32))
    np.testing.assert_array_equal(back.view(np.float32), f16.astype(np.float32))
    big = rng.integers(-2 ** 62, 2 ** 62, 64, dtype=np.int64)
    out = np.zeros(64, np.float32)
    body = """
    mul.wide.u32 %rd1, %r0, 8;
    ld.param.u64 %rd2, [a];
    add.s64 %rd2, %rd2, %rd1;
    ld.global.s64 %rd3, [%rd2];
    cvt.rn.f32.s64 %f1, %rd3;
    st.global.f32 [%rd_out], %f1;"""
    run(kernel(body), "k", (1,), Pointer(out), Pointer(big), Pointer(out), block=(64,))
    np.testing.assert_array_equal(out, big.astype(np.float32))


def test_warp_collectives():
    out = np.zeros(64 * 6, np.uint32)
    body = """
    and.b32 %r1, %r0, 31;
    shfl.sync.bfly.b32 %r2, %r0, 1, 31, -1;
    shfl.sync.up.b32 %r3|%p1, %r0, 3, 0, -1;
    setp.lt.u32 %p2, %r1, 5;
    vote.sync.ballot.b32 %r4, %p2, -1;
    and.b32 %r5, %r0, 3;
    match.any.sync.b32 %r6, %r5, -1;
    redux.sync.add.u32 %r7, %r0, -1;
    mul.wide.u32 %rd1, %r0, 24;
    ld.param.u64 %rd2, [out];
    add.s64 %rd2, %rd2, %rd1;
    st.global.v2.b32 [%rd2], {%r2, %r3};
    st.global.v2.b32 [%rd2+8], {%r4, %r6};
    selp.b32 %r8, 1, 0, %p1;
    st.global.v2.b32 [%rd2+16], {%r7, %r8};"""
    run(kernel(body), "k", (1,), Pointer(out), Pointer(out), Pointer(out), block=(64,))
    o = out.reshape(64, 6)
    t = np.arange(64, dtype=np.uint32)
    lane = t % 32
    np.testing.assert_array_equal(o[:, 0], t ^ 1)
    np.testing.assert_array_equal(o[:, 1], np.where(lane >= 3, t - 3, t))
    np.testing.assert_array_equal(o[:, 5], (lane >= 3).astype(np.uint32))
    assert (o[:, 2] == 0x1f).all()
    np.testing.assert_array_equal(o[:, 3], np.uint32(0x11111111) << (lane & 3))
    np.testing.assert_array_equal(o[:, 4], np.where(t < 32, sum(range(32)),
                                                    sum(range(32, 64))))


def test_activemask_is_the_lanes_that_arrive_together():
    out = np.zeros(32, np.uint32)
    body = """
    setp.lt.u32 %p1, %r0, 5;
    @!%p1 bra DONE;
    activemask.b32 %r3;
    st.global.b32 [%rd_out], %r3;
DONE:"""
    run(kernel(body), "k", (1,), Pointer(out), Pointer(out), Pointer(out), block=(32,))
    assert list(out[:5]) == [0x1f] * 5 and not out[5:].any()


def test_call_with_params_and_a_stack_frame():
    extra = """
.func (.param .b32 ret) pick(.param .b32 x, .param .b32 i)
{
    .local .align 4 .b8 depot[32];
    .reg .b64 %sp, %q;
    .reg .b32 %v<4>;
    mov.u64 %sp, depot;
    ld.param.b32 %v1, [x];
    ld.param.b32 %v2, [i];
    st.local.b32 [%sp], %v1;
    add.s32 %v3, %v1, 100;
    st.local.b32 [%sp+4], %v3;
    and.b32 %v2, %v2, 1;
    mul.wide.u32 %q, %v2, 4;
    add.s64 %q, %sp, %q;
    cvta.local.u64 %q, %q;
    ld.b32 %v1, [%q];
    st.param.b32 [ret], %v1;
    ret;
}
"""
    out = np.zeros(64, np.int32)
    body = """
    {
    .param .b32 p0;
    .param .b32 p1;
    .param .b32 r;
    st.param.b32 [p0], %r0;
    st.param.b32 [p1], %r0;
    call.uni (r), pick, (p0, p1);
    ld.param.b32 %r3, [r];
    }
    st.global.b32 [%rd_out], %r3;"""
    run(kernel(body, extra=extra), "k", (1,), Pointer(out), Pointer(out), Pointer(out),
        block=(64,))
    t = np.arange(64)
    np.testing.assert_array_equal(out, np.where(t % 2, t + 100, t))


def test_shared_memory_race_is_an_error_and_a_barrier_orders_it():
    extra = ".shared .align 4 .b32 cell;\n"
    racy = """
    st.shared.b32 [cell], %r0;
    ld.shared.b32 %r3, [cell];
    st.global.b32 [%rd_out], %r3;"""
    out = np.zeros(64, np.uint32)
    with pytest.raises(ExecError, match="shared-memory race"):
        run(kernel(racy, extra=extra), "k", (1,), Pointer(out), Pointer(out), Pointer(out),
            block=(64,))
    ordered = """
    setp.eq.u32 %p1, %r0, 7;
    @%p1 st.shared.b32 [cell], %r0;
    bar.sync 0;
    ld.shared.b32 %r3, [cell];
    st.global.b32 [%rd_out], %r3;"""
    run(kernel(ordered, extra=extra), "k", (1,), Pointer(out), Pointer(out), Pointer(out),
        block=(64,))
    assert (out == 7).all()


def test_global_memory_race_within_a_cta_is_an_error():
    # thread i reads what thread i + 1 stored, with no barrier between
    body = """
    st.global.b32 [%rd_out], %r0;
    ld.global.b32 %r3, [%rd_out+4];
    st.global.b32 [%rd_a], %r3;"""
    out = np.zeros(65, np.uint32)
    a = np.zeros(64, np.uint32)
    with pytest.raises(ExecError, match="global-memory race"):
        run(kernel(body), "k", (1,), Pointer(out), Pointer(a), Pointer(a), block=(64,))


def test_barrier_that_not_every_counted_thread_reaches_deadlocks():
    body = """
    setp.lt.u32 %p1, %r0, 64;
    @%p1 bra LOW;
    bar.sync 1, 128;
    bra.uni DONE;
LOW:
    bar.sync 2, 128;
DONE:"""
    out = np.zeros(1, np.uint32)
    with pytest.raises(ExecError, match="deadlock"):
        run(kernel(body), "k", (1,), Pointer(out), Pointer(out), Pointer(out), block=(128,))


def test_exited_threads_are_excused_from_a_barrier():
    body = """
    setp.ge.u32 %p1, %r0, 64;
    @%p1 exit;
    bar.sync 0;
    bar.red.popc.u32 %r3, 0, %p1;
    st.global.b32 [%rd_out], %r3;"""
    out = np.ones(128, np.uint32)
    run(kernel(body), "k", (1,), Pointer(out), Pointer(out), Pointer(out), block=(128,))
    assert (out[:64] == 0).all() and (out[64:] == 1).all()


@pytest.mark.parametrize("body,match", [
    ("ld.global.b32 %r3, [%rd_out+4096];", "illegal global address"),
    ("trap;", "trap in thread 0"),
    ("wgmma.fence.sync.aligned;", "out of the executor's scope"),
    ("frobnicate.b32 %r3, %r1;", "unknown instruction 'frobnicate.b32'"),
])
def test_errors(body, match):
    out = np.zeros(32, np.uint32)
    with pytest.raises(ExecError, match=match):
        run(kernel(body), "k", (1,), Pointer(out), Pointer(out), Pointer(out), block=(32,))


def test_an_unknown_instruction_that_never_runs_is_no_error():
    body = """
    setp.eq.u32 %p1, %r0, 1000;
    @%p1 frobnicate.b32 %r3, %r1;
    st.global.b32 [%rd_out], %r0;"""
    out = np.zeros(32, np.uint32)
    run(kernel(body), "k", (1,), Pointer(out), Pointer(out), Pointer(out), block=(32,))
    np.testing.assert_array_equal(out, np.arange(32))


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_and_stmatrix(trans):
    """Two 8x8 b16 matrices (x2) in shared memory, element (r, c) of matrix j = 256j + 8r + c:
    lane i gets (i/4, 2(i%4)) and the next column (transposed with .trans); stmatrix writes
    them back to the rows another set of addresses names."""
    t = ".trans" if trans else ""
    extra = ".shared .align 16 .b8 m[1024];\n"
    body = f"""
    and.b32 %r1, %r0, 7;
    shr.u32 %r2, %r0, 3;
    and.b32 %r2, %r2, 1;
    mov.u32 %r3, m;
    shl.b32 %r4, %r0, 4;
    add.s32 %r4, %r3, %r4;
    // every thread writes its row: 8 elements 256j + 8r + c (row t of matrix t / 8 % 2)
    shl.b32 %r5, %r2, 8;
    shl.b32 %r6, %r1, 3;
    add.s32 %r5, %r5, %r6;
    setp.lt.u32 %p1, %r0, 16;
    @!%p1 bra SKIP;
    add.s32 %r7, %r5, 1;
    shl.b32 %r7, %r7, 16;
    or.b32 %r7, %r7, %r5;
    add.s32 %r8, %r7, 0x20002;
    add.s32 %r9, %r7, 0x40004;
    add.s32 %r10, %r7, 0x60006;
    st.shared.v4.b32 [%r4], {{%r7, %r8, %r9, %r10}};
SKIP:
    bar.sync 0;
    ldmatrix.sync.aligned.m8n8.x2{t}.shared.b16 {{%r11, %r12}}, [%r4];
    mul.wide.u32 %rd1, %r0, 8;
    ld.param.u64 %rd2, [out];
    add.s64 %rd2, %rd2, %rd1;
    st.global.v2.b32 [%rd2], {{%r11, %r12}};
    add.s32 %r13, %r4, 256;
    stmatrix.sync.aligned.m8n8.x2{t}.shared.b16 [%r13], {{%r11, %r12}};
    bar.sync 0;
    ld.shared.v4.b32 {{%r7, %r8, %r9, %r10}}, [%r13];
    mul.wide.u32 %rd1, %r0, 16;
    ld.param.u64 %rd3, [a];
    add.s64 %rd3, %rd3, %rd1;
    @%p1 st.global.v4.b32 [%rd3], {{%r7, %r8, %r9, %r10}};"""
    out = np.zeros(64, np.uint32)
    back = np.zeros(64, np.uint32)
    run(kernel(body, extra=extra), "k", (1,), Pointer(out), Pointer(back), Pointer(out),
        block=(32,))
    lane = np.arange(32)
    r, c = lane // 4, 2 * (lane % 4)
    for j in range(2):
        if trans:
            lo, hi = 256 * j + 8 * c + r, 256 * j + 8 * (c + 1) + r
        else:
            lo, hi = 256 * j + 8 * r + c, 256 * j + 8 * r + c + 1
        np.testing.assert_array_equal(out.reshape(32, 2)[:, j], lo | (hi << 16))
    # stmatrix of what ldmatrix loaded restores the rows (the transpose twice is identity)
    rows = back.view(np.uint16).reshape(16, 8)
    want = np.array([[256 * (t // 8) + 8 * (t % 8) + k for k in range(8)] for t in range(16)])
    np.testing.assert_array_equal(rows, want)


def test_param_space_through_a_register_and_a_struct_parameter():
    """``ld.param`` of an entry's aggregate parameter at an offset, and through its generic
    address (``cvta.param``)."""
    ptx = HEAD + """
.visible .entry k(.param .u64 out, .param .align 8 .b8 s[16])
{
    .reg .b64 %rd<8>;
    .reg .b32 %r<4>;
    ld.param.u64 %rd1, [out];
    ld.param.b32 %r1, [s+8];
    mov.b64 %rd2, s;
    cvta.param.u64 %rd3, %rd2;
    ld.u32 %r2, [%rd3+12];
    st.global.v2.b32 [%rd1], {%r1, %r2};
    ret;
}
"""
    out = np.zeros(2, np.uint32)
    from support.ptx_exec.cutile import program
    from support.ptx_exec.machine import Launch
    from support.ptx_exec.memory import GlobalMemory
    mem = GlobalMemory()
    base = mem.alloc(out.tobytes(), "out")
    # out at offset 0; s (aligned to 8) at 8: s+8 holds 7, s+12 holds 9
    params = base.to_bytes(8, "little") + bytes(8) + (7).to_bytes(4, "little") + \
        (9).to_bytes(4, "little")
    Launch(program(ptx), "k", (1,), (1,), params, mem).run()
    got = np.frombuffer(bytes(mem.buffer(base)), np.uint32)
    assert list(got) == [7, 9]


def test_brx_idx_jumps_through_a_table():
    body = """
    and.b32 %r1, %r0, 3;
    brx.idx %r1, TABLE;
TABLE: .branchtargets L0, L1, L2, L3;
L0:
    mov.u32 %r3, 100;
    bra.uni DONE;
L1:
    mov.u32 %r3, 101;
    bra.uni DONE;
L2:
    mov.u32 %r3, 102;
    bra.uni DONE;
L3:
    mov.u32 %r3, 103;
DONE:
    st.global.b32 [%rd_out], %r3;"""
    out = np.zeros(32, np.uint32)
    run(kernel(body), "k", (1,), Pointer(out), Pointer(out), Pointer(out), block=(32,))
    np.testing.assert_array_equal(out, 100 + np.arange(32) % 4)


def test_approximate_instructions_exact_or_at_their_bound():
    x = np.linspace(-3, 3, 32).astype(np.float32)
    body = """
    ld.global.f32 %f1, [%rd_a];
    ex2.approx.f32 %f2, %f1;
    st.global.f32 [%rd_out], %f2;"""
    got = {}
    for mode in ("exact", "bound"):
        out = np.zeros(32, np.float32)
        launch = run(kernel(body), "k", (1,), Pointer(out), Pointer(x), Pointer(x), block=(32,),
                     approx=mode)
        assert launch.approx == {"ex2.f32": 32}
        got[mode] = out
    exact = np.exp2(x.astype(np.float64))
    np.testing.assert_array_equal(got["exact"], exact.astype(np.float32))
    rel = np.abs(got["bound"] - exact) / exact
    assert (rel <= 2.0 ** -22 + 2.0 ** -24).all() and (rel >= 2.0 ** -22 - 2.0 ** -24).all()


@pytest.mark.parametrize("sync,ok", [("bar.warp.sync -1;", True),
                                     ("shfl.sync.idx.b32 %r5, %r0, 0, 31, -1;", False)])
def test_within_a_warp_only_bar_warp_sync_orders_shared_memory(sync, ok):
    extra = ".shared .align 4 .b8 cells[128];\n"
    body = f"""
    mov.u32 %r1, cells;
    shl.b32 %r2, %r0, 2;
    add.s32 %r3, %r1, %r2;
    st.shared.b32 [%r3], %r0;
    {sync}
    xor.b32 %r4, %r2, 4;
    add.s32 %r4, %r1, %r4;
    ld.shared.b32 %r3, [%r4];
    st.global.b32 [%rd_out], %r3;"""
    out = np.zeros(32, np.uint32)
    args = (kernel(body, extra=extra), "k", (1,), Pointer(out), Pointer(out), Pointer(out))
    if ok:
        run(*args, block=(32,))
        np.testing.assert_array_equal(out, np.arange(32) ^ 1)
    else:
        with pytest.raises(ExecError, match="shared-memory race"):
            run(*args, block=(32,))
