"""The fma-marker rewrite checked against a PTX interpreter (``support.ptx_interp``):
hand-written kernels of the forms LLVM produces, forms the rewriter must refuse (naming
the site, so that the pipeline falls back to the atomic marker), and hypothesis fuzzers
of marker programs with one and two sites (key loads, copies, xors, forward branches,
counted loops, guards). The original PTX run with random keys gives each marker's
slots; the rewrite must pass the same ones on every path."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splice.forms.rewrite import splice_calls
from splice.ptxtools.ptx import Module
from support import fuzz
from support.ptx_interp import (
    check_rewrite_semantics,
    check_two_sites,
    hand_kernel,
    run_ptx,
)
from support.sites import fma_sites, site_call

# Each body: (PTX between the parameter loads and ret, what is being probed)
HANDWRITTEN = {
    # a loop-carried blinded value coalesced with a *copy* of the key: the copy must not be
    # taken for the key (the real key would then be passed as slot 0 = 0)
    "copy_of_key_before_blinding": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\tmov.b64 \t%rd3, %rd1;\n"
        "\t@%p1 bra \t$L1;\n"
        "\txor.b64 \t%rd1, %rd3, %rd30;\n"
        "$L1:\n"
        "\tfma.rn.f64 \t%rd2, %rd1, %rd3, %rd3;\n"),
    # the key loaded straight into the register that is blinded on another path (the register
    # coalescer does this for a phi(K, v ^ K)), a second load as the multiplicand: the load
    # of %rd1 must still leave 0 in it on the path that skips the xor
    "key_load_into_blinded_register": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\tld.global.b64 \t%rd3, [__splice_marker_0];\n"
        "\t@%p1 bra \t$L1;\n"
        "\txor.b64 \t%rd1, %rd3, %rd30;\n"
        "$L1:\n"
        "\tfma.rn.f64 \t%rd2, %rd1, %rd3, %rd3;\n"),
    "key_load_into_blinded_register_addend": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\tld.global.b64 \t%rd3, [__splice_marker_0];\n"
        "\txor.b64 \t%rd4, %rd3, %rd31;\n"
        "\t@%p1 bra \t$L1;\n"
        "\txor.b64 \t%rd1, %rd30, %rd3;\n"
        "$L1:\n"
        "\tfma.rn.f64 \t%rd2, %rd4, %rd3, %rd1;\n"),
    # the key loaded on one path only (LLVM loads it where it is used)
    "conditional_key_load": (
        "\t@%p1 bra \t$L1;\n"
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\txor.b64 \t%rd4, %rd1, %rd30;\n"
        "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n"
        "$L1:\n"),
    # copies of the key rotated through an unrolled loop, a blinded value written back into
    # a register that held a copy of the key
    "rotated_copies": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\tmov.b64 \t%rd5, %rd1;\n"
        "\tmov.b64 \t%rd6, %rd5;\n"
        "\tmov.b64 \t%rd7, %rd1;\n"
        "$L0:\n"
        "\tmov.b64 \t%rd8, %rd6;\n"
        "\tmov.b64 \t%rd6, %rd5;\n"
        "\tfma.rn.f64 \t%rd2, %rd7, %rd8, %rd8;\n"
        "\txor.b64 \t%rd7, %rd8, %rd31;\n"
        "\tsetp.eq.u64 \t%p3, %rd7, %rd7;\n"
        "\t@%p2 bra \t$L9;\n"
        "\tmov.b64 \t%rd31, 0;\n"
        "\tbra \t$L0;\n"
        "$L9:\n"),
    # both slots the key (every argument 0) and a guarded marker
    "all_key_guarded": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\t@!%p1 fma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n"),
    # slot 0 blinded twice (xor with a constant, then with the key)
    "double_blinding": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\txor.b64 \t%rd4, %rd1, -9223372036854775808;\n"
        "\txor.b64 \t%rd5, %rd4, %rd30;\n"
        "\tfma.rn.f64 \t%rd2, %rd1, %rd5, %rd4;\n"),
}


# LLVM's forms of a blinded constant xor(K, C), which the proof accepts: each is C, the
# key being 0 (the rewrite moves C into the register). Each compiled kernel named below
# lowered twice before the proof knew the form.
XOR_FORMS = {
    # the argument -1 (int64) as not.b64 of the key (seen: const_ll[-1,None], all_const)
    "not_of_key": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\tnot.b64 \t%rd4, %rd1;\n"
        "\txor.b64 \t%rd5, %rd30, %rd1;\n"
        "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd5;\n"),
    # the sign bit (-0.0, INT64_MIN) as neg.f64 of the key, slot 0 and slot 1 (seen:
    # const_dd[-0.0,None], const_dd[None,-0.0], const_ll[-9223372036854775808,None])
    "neg_f64_of_key": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\tneg.f64 \t%rd4, %rd1;\n"
        "\txor.b64 \t%rd5, %rd31, %rd1;\n"
        "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd5;\n"
        "\txor.b64 \t%rd6, %rd1, %rd2;\n"),
    "neg_f64_of_key_addend": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\tmov.b64 \t%rd3, %rd1;\n"
        "\tneg.f64 \t%rd4, %rd3;\n"
        "\txor.b64 \t%rd5, %rd30, %rd1;\n"
        "\tfma.rn.f64 \t%rd2, %rd5, %rd1, %rd4;\n"),
    # the sign bit as an add or sub (x + 2^63 == x - 2^63 == x ^ 2^63)
    "add_sign_bit_to_key": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\tadd.s64 \t%rd4, %rd1, -9223372036854775808;\n"
        "\tadd.u64 \t%rd5, 0x8000000000000000, %rd1;\n"
        "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd5;\n"),
    "sub_sign_bit_from_key": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\tsub.s64 \t%rd4, %rd1, -9223372036854775808;\n"
        "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n"),
    # exact on every value, so also of a blinded argument: ~(x ^ K), (x ^ K) + 2^63
    "not_and_add_of_blinded": (
        "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
        "\txor.b64 \t%rd3, %rd1, %rd30;\n"
        "\tnot.b64 \t%rd4, %rd3;\n"
        "\txor.b64 \t%rd6, %rd31, %rd1;\n"
        "\tadd.s64 \t%rd5, %rd6, -9223372036854775808;\n"
        "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd5;\n"),
}

# (the constant each form's statement must become, or None where the statement stays)
XOR_FORM_CONSTANTS = {
    "not_of_key": ["mov.b64 \t%rd4, -1;"],
    "neg_f64_of_key": ["mov.b64 \t%rd4, -9223372036854775808;"],
    "neg_f64_of_key_addend": ["mov.b64 \t%rd4, -9223372036854775808;"],
    "add_sign_bit_to_key": ["mov.b64 \t%rd4, -9223372036854775808;",
                            "mov.b64 \t%rd5, -9223372036854775808;"],
    "sub_sign_bit_from_key": ["mov.b64 \t%rd4, -9223372036854775808;"],
    "not_and_add_of_blinded": ["not.b64 \t%rd4, %rd3;",
                               "add.s64 \t%rd5, %rd6, -9223372036854775808;"],
}


@pytest.mark.parametrize("name", sorted(XOR_FORMS))
def test_forms_of_a_blinded_constant_are_accepted(name):
    out = check_rewrite_semantics(hand_kernel(XOR_FORMS[name]))
    assert out is not None, f"{name} refused"
    for want in XOR_FORM_CONSTANTS[name]:
        assert want in out, (want, out)


@pytest.mark.parametrize("name", sorted(HANDWRITTEN))
def test_handwritten_fma_rewrites_keep_their_slots(name):
    check_rewrite_semantics(hand_kernel(HANDWRITTEN[name]))


def test_interpreter_sees_a_key_copy_passed_as_slot0():
    # the oracle itself: a rewrite that passes the key copy as slot 0 is caught
    src = hand_kernel(HANDWRITTEN["copy_of_key_before_blinding"])
    bad = src.replace("\tfma.rn.f64 \t%rd2, %rd1, %rd3, %rd3;\n",
                      "\tmov.b64 \t%rd9, 0;\n\tfma.rn.f64 \t%rd2, %rd9, %rd9, %rd9;\n"
                      ).replace("ld.global.b64 \t%rd1, [__splice_marker_0]", "mov.b64 \t%rd1, 0")
    want = run_ptx(src, {"k_p0": 5, "k_p1": 0}, (77,))
    assert want == [(0, 5, 0)]
    got = run_ptx(bad, {"k_p0": 5, "k_p1": 0}, (77,))
    assert got != want




def xor_forms(dest: str, src: str):
    """LLVM's forms of an xor with a constant (and near misses: neg.f64 of a value that
    is not a key, an add of another constant, the sign bit minus a register)."""
    return st.sampled_from([
        f"\tnot.b64 \t{dest}, {src};\n",
        f"\tneg.f64 \t{dest}, {src};\n",
        f"\tadd.s64 \t{dest}, {src}, -9223372036854775808;\n",
        f"\tadd.u64 \t{dest}, 0x8000000000000000, {src};\n",
        f"\tsub.s64 \t{dest}, {src}, -9223372036854775808;\n",
        f"\tsub.s64 \t{dest}, -9223372036854775808, {src};\n",
        f"\tadd.s64 \t{dest}, {src}, 1;\n",
    ])


@st.composite
def marker_programs(draw):
    """Random straight-line/branching code over key loads, copies, xors (with the kernel's
    parameters, constants and each other), forward branches and marker fmas."""
    # few registers, so that values share registers as the register coalescer makes them
    regs = [f"%rd{i}" for i in range(1, draw(st.integers(3, 6)))]
    srcs = ["%rd30", "%rd31", "%rd30", "%rd31", "0", "-1", "-9223372036854775808",
            "4607182418800017408"]
    lines = [f"\tmov.b64 \t%rd{20 + k}, 0;\n" for k in range(3)]   # loop counters
    n_labels = 0
    open_labels = []
    loops = []
    for _ in range(draw(st.integers(2, 16))):
        kind = draw(st.sampled_from(["key", "key", "mov", "xor", "xor", "fma", "fma",
                                     "branch", "close", "loop", "endloop", "xorform"]))
        r = draw(st.sampled_from(regs))
        if kind == "xorform":   # often straight into a marker with the source as the key
            src = draw(st.sampled_from(regs))
            lines.append(draw(xor_forms(r, src)))
            if r != src and draw(st.booleans()):
                lines.append(f"\tfma.rn.f64 \t%rd4{len(lines) % 10}, {r}, {src}, {src};\n")
        elif kind == "key":
            guard = draw(st.sampled_from(["", "", "@%p2 "]))
            lines.append(f"\t{guard}ld.global.b64 \t{r}, [__splice_marker_0];\n")
        elif kind == "loop" and len(loops) < 3:
            loops.append((len(loops), draw(st.integers(1, 3))))
            lines.append(f"$Lloop{len(loops) - 1}:\n")
        elif kind == "endloop" and loops:
            k, trips = loops.pop()
            lines.append(f"\tadd.s64 \t%rd{20 + k}, %rd{20 + k}, 1;\n"
                         f"\tsetp.lt.u64 \t%p3, %rd{20 + k}, {trips};\n"
                         f"\t@%p3 bra \t$Lloop{k};\n")
        elif kind == "mov":
            lines.append(f"\tmov.b64 \t{r}, {draw(st.sampled_from(regs))};\n")
        elif kind == "xor":
            a = draw(st.sampled_from(regs))
            b = draw(st.sampled_from(srcs))
            a, b = (a, b) if draw(st.booleans()) else (b, a)
            lines.append(f"\txor.b64 \t{r}, {a}, {b};\n")
        elif kind == "fma":
            x, y, z = (draw(st.sampled_from(regs)) for _ in range(3))
            guard = draw(st.sampled_from(["", "@%p1 ", "@!%p2 "]))
            rnd = draw(st.sampled_from(["rn", "rn", "rn", "rz"]))   # rz: not the site's
            lines.append(f"\t{guard}fma.{rnd}.f64 \t%rd4{len(lines) % 10}, {x}, {y}, {z};\n")
        elif kind == "branch":
            n_labels += 1
            open_labels.append(n_labels)
            lines.append(f"\t@{draw(st.sampled_from(['%p1', '!%p2']))} bra \t$L{n_labels};\n")
        elif kind == "close" and open_labels:
            lines.append(f"$L{open_labels.pop()}:\n")
    for lab in reversed(open_labels):
        lines.append(f"$L{lab}:\n")
    while loops:
        k, trips = loops.pop()
        lines.append(f"\tadd.s64 \t%rd{20 + k}, %rd{20 + k}, 1;\n"
                     f"\tsetp.lt.u64 \t%p3, %rd{20 + k}, {trips};\n\t@%p3 bra \t$Lloop{k};\n")
    return "".join(lines)


@settings(max_examples=fuzz.examples("SPLICE_FMA_FUZZ_EXAMPLES", 100), deadline=None,
          derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(marker_programs())
def test_random_marker_programs_keep_their_slots(body):
    check_rewrite_semantics(hand_kernel(body))



# ---------------------------------------------------------------------------------------------
# The rewriter on hand-written PTX

KEY = "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"


def test_xor_of_two_key_copies_defined_later_is_refused():
    # %rd3 is a copy of the key defined in a block placed after its use: when the fixpoint
    # first meets the xor only %rd1 is derived, so the xor is taken as "blinded by one key";
    # once %rd3 is derived the xor is never looked at again. Both operands are then pure
    # key registers and the rewrite of the xor ([other] = ...) raises ValueError.
    body = (KEY + "\tbra \t$L1;\n$L0:\n"
            "\txor.b64 \t%rd5, %rd1, %rd3;\n"
            "\tfma.rn.f64 \t%rd2, %rd5, %rd1, %rd1;\n"
            "\tbra \t$L9;\n$L1:\n"
            "\tmov.b64 \t%rd3, %rd1;\n"
            "\tbra \t$L0;\n$L9:\n")
    check_rewrite_semantics(hand_kernel(body))   # refused (None) or right; never a crash


def test_xor_of_key_and_a_later_key_copy_straight_line():
    # the smallest form (found by the two-site fuzzer below at SPLICE_FMA_FUZZ_EXAMPLES=6000):
    # refused (the report names the site) or rewritten, never an exception
    body = KEY + "\txor.b64 \t%rd2, %rd1, %rd3;\n\tmov.b64 \t%rd3, %rd1;\n"
    report = splice_calls(Module(hand_kernel(body)), fma_sites(), kernel_name="k")
    assert report.refused is None or report.refused.sites == {0}


def test_xor_of_key_and_blinded_value_defined_later_rewrites_right():
    # the same form with a blinded value xor-ed with a key copy defined later in the text:
    # may be accepted (harmless: every key is 0 at run time). Checked for semantics only.
    body = (KEY + "\txor.b64 \t%rd4, %rd1, %rd30;\n\tbra \t$L1;\n$L0:\n"
            "\txor.b64 \t%rd5, %rd4, %rd3;\n"
            "\txor.b64 \t%rd6, %rd5, %rd31;\n"
            "\tfma.rn.f64 \t%rd2, %rd6, %rd1, %rd4;\n"
            "\tbra \t$L9;\n$L1:\n"
            "\tmov.b64 \t%rd3, %rd1;\n"
            "\tbra \t$L0;\n$L9:\n")
    check_rewrite_semantics(hand_kernel(body))


@pytest.mark.parametrize("load", [
    "ld.global.b32 \t%r1, [__splice_marker_0+4];",
    "ld.global.b64 \t%rd1, [__splice_marker_0+8];",
    "mov.u64 \t%rd9, __splice_marker_0;\n\tld.global.b32 \t%r1, [%rd9+4];",
])
def test_offset_key_load_of_an_fma_site_falls_back(load):
    # every unexpected use of an fma site's marker global names the site, so that the
    # pipeline gives it the atomic marker instead of failing the build: also a load at an
    # offset (e.g. the high half of the key)
    src = hand_kernel("\t.reg .b32 %r<4>;\n" + KEY + f"\t{load}\n"
                       "\tfma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n")
    refused = splice_calls(Module(src), fma_sites(), kernel_name="k").refused
    assert refused is not None and refused.sites == {0}


REFUSED = {
    "fma_ftz": KEY + "\txor.b64 \t%rd4, %rd1, %rd30;\n\tfma.rn.ftz.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "fma_rz": KEY + "\txor.b64 \t%rd4, %rd1, %rd30;\n\tfma.rz.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "fma_dest_is_key": KEY + "\tfma.rn.f64 \t%rd1, %rd1, %rd1, %rd1;\n",
    "setp_on_key": KEY + "\tsetp.eq.u64 \t%p3, %rd1, 0;\n\tfma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n",
    "selp_blinded": KEY + "\txor.b64 \t%rd4, %rd1, %rd30;\n\tselp.b64 \t%rd5, %rd4, %rd1, %p1;\n"
                          "\tfma.rn.f64 \t%rd2, %rd5, %rd1, %rd1;\n",
    "unpack_key_halves": "\t.reg .b32 %r<4>;\n" + KEY + "\tmov.b64 \t{%r1, %r2}, %rd1;\n"
                         "\tmov.b64 \t%rd4, {%r1, %r2};\n\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "cvt_key": "\t.reg .b32 %r<4>;\n" + KEY + "\tcvt.u32.u64 \t%r1, %rd1;\n"
               "\tfma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n",
    "guarded_xor": KEY + "\tmov.b64 \t%rd4, %rd1;\n\t@%p1 xor.b64 \t%rd4, %rd1, %rd30;\n"
                         "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "guarded_mov": KEY + "\txor.b64 \t%rd4, %rd1, %rd30;\n\t@%p1 mov.b64 \t%rd4, %rd1;\n"
                         "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "key_as_address": KEY + "\tld.global.b64 \t%rd5, [%rd1];\n"
                            "\tfma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n",
    "key_overwritten_by_param": KEY + "\tld.param.b64 \t%rd1, [k_p0];\n"
                                      "\tfma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n",
    "key_only_addend": KEY + "\txor.b64 \t%rd4, %rd1, %rd30;\n"
                             "\tfma.rn.f64 \t%rd2, %rd4, %rd4, %rd1;\n",
    "immediate_multiplicand": KEY + "\tfma.rn.f64 \t%rd2, 0d3FF0000000000000, %rd1, %rd1;\n",
    "vector_key_load": "\t.reg .b32 %r<4>;\n"
                       "\tld.global.v2.b32 \t{%r1, %r2}, [__splice_marker_0];\n",
    "relaxed_key_load": "\tld.relaxed.gpu.global.b64 \t%rd1, [__splice_marker_0];\n"
                        "\tfma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n",
    # near misses of the forms of a blinded constant: neg.f64 of a blinded argument (of a
    # NaN, neg.f64 "yields an unspecified NaN": the argument's bits could change)
    "neg_f64_of_blinded": KEY + "\txor.b64 \t%rd4, %rd1, %rd30;\n\tneg.f64 \t%rd5, %rd4;\n"
                                "\tfma.rn.f64 \t%rd2, %rd5, %rd1, %rd1;\n",
    "neg_f32_of_key": "\t.reg .f32 %f<4>;\n" + KEY + "\tmov.b64 \t{%f1, %f2}, %rd1;\n"
                      "\tneg.f32 \t%f3, %f1;\n\tfma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n",
    "add_other_constant": KEY + "\tadd.s64 \t%rd4, %rd1, 1;\n"
                                "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "add_register": KEY + "\tadd.s64 \t%rd4, %rd1, %rd30;\n"
                          "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "sub_key_from_sign_bit": KEY + "\tsub.s64 \t%rd4, -9223372036854775808, %rd1;\n"
                                   "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "add_sign_bit_32": "\t.reg .b32 %r<4>;\n" + KEY + "\tcvt.u32.u64 \t%r1, %rd1;\n"
                       "\tadd.s32 \t%r2, %r1, -2147483648;\n"
                       "\tfma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n",
    "neg_s64_of_key": KEY + "\tneg.s64 \t%rd4, %rd1;\n\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "guarded_not": KEY + "\tmov.b64 \t%rd4, %rd1;\n\t@%p1 not.b64 \t%rd4, %rd1;\n"
                         "\tfma.rn.f64 \t%rd2, %rd4, %rd1, %rd1;\n",
    "not_of_key_to_store": KEY + "\tnot.b64 \t%rd4, %rd1;\n\tst.global.b64 \t[%rd30], %rd4;\n"
                                 "\tfma.rn.f64 \t%rd2, %rd1, %rd1, %rd1;\n",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unprovable_fma_forms_name_their_site(name):
    refused = splice_calls(Module(hand_kernel(REFUSED[name])), fma_sites(),
                           kernel_name="k").refused
    assert refused is not None and refused.sites == {0}



@st.composite
def two_site_programs(draw):
    regs = [f"%rd{i}" for i in range(1, draw(st.integers(3, 7)))]
    srcs = ["%rd30", "%rd31", "0", "-1", "5"]
    lines = [f"\tmov.b64 \t%rd{20 + k}, 0;\n" for k in range(3)]
    # most registers start as a key of either site (defined, and derived): what follows
    # blinds, copies and overwrites them
    lines += [f"\tld.global.b64 \t{r}, [__splice_marker_{draw(st.integers(0, 1))}];\n"
              for r in regs if draw(st.integers(0, 3))]
    first = len(lines)
    n_labels, open_labels, loops = 0, [], []

    def loop_end(k, trips):
        return (f"\tadd.s64 \t%rd{20 + k}, %rd{20 + k}, 1;\n\tsetp.lt.u64 \t%p3, "
                f"%rd{20 + k}, {trips};\n\t@%p3 bra \t$Lloop{k};\n")

    for _ in range(draw(st.integers(2, 18))):
        kind = draw(st.sampled_from(["key", "key", "mov", "xor", "xor", "xor2", "fma", "fma",
                                     "branch", "close", "loop", "endloop", "xorform",
                                     "result"]))
        r = draw(st.sampled_from(regs))
        if kind == "xorform":   # often straight into a marker with the source as the key
            src = draw(st.sampled_from(regs))
            lines.append(draw(xor_forms(r, src)))
            if r != src and draw(st.booleans()):
                lines.append(f"\tfma.rn.f64 \t%rd4{len(lines) % 10}, {r}, {src}, {src};\n")
        elif kind == "result":
            # a call's result xor-ed into a register: unblinded, reassociated with keys
            lines.append(f"\txor.b64 \t{r}, %rd4{draw(st.integers(0, 9))}, "
                         f"{draw(st.sampled_from(regs))};\n")
        elif kind == "key":
            lines.append(f"\tld.global.b64 \t{r}, [__splice_marker_{draw(st.integers(0, 1))}];\n")
        elif kind == "mov":
            lines.append(f"\tmov.b64 \t{r}, {draw(st.sampled_from(regs))};\n")
        elif kind == "xor":
            a, b = draw(st.sampled_from(regs)), draw(st.sampled_from(srcs))
            a, b = (a, b) if draw(st.booleans()) else (b, a)
            lines.append(f"\txor.b64 \t{r}, {a}, {b};\n")
        elif kind == "xor2":
            lines.append(f"\txor.b64 \t{r}, {draw(st.sampled_from(regs))}, "
                         f"{draw(st.sampled_from(regs))};\n")
        elif kind == "fma":
            x, y, z = (draw(st.sampled_from(regs)) for _ in range(3))
            guard = draw(st.sampled_from(["", "", "@%p1 "]))
            rnd = draw(st.sampled_from(["rn", "rn", "rn", "rz"]))   # rz: not the site's
            lines.append(f"\t{guard}fma.{rnd}.f64 \t%rd4{len(lines) % 10}, {x}, {y}, {z};\n")
        elif kind == "branch":
            n_labels += 1
            open_labels.append(n_labels)
            lines.append(f"\t@{draw(st.sampled_from(['%p1', '!%p2']))} bra \t$L{n_labels};\n")
        elif kind == "close" and open_labels:
            lines.append(f"$L{open_labels.pop()}:\n")
        elif kind == "loop" and len(loops) < 2:
            loops.append((len(loops), draw(st.integers(1, 3))))
            lines.append(f"$Lloop{len(loops) - 1}:\n")
        elif kind == "endloop" and loops:
            lines.append(loop_end(*loops.pop()))
    lines += [f"$L{lab}:\n" for lab in reversed(open_labels)]
    while loops:
        lines.append(loop_end(*loops.pop()))
    # one straight-line instruction moved into a block placed after the code that follows
    # it (reached by branches): definitions textually after their uses
    movable = [i for i in range(first, len(lines))
               if not re.search(r"\$|bra|add\.s64", lines[i])]
    if movable and draw(st.booleans()):
        late = lines.pop(draw(st.sampled_from(movable)))
        at = draw(st.integers(first, len(lines)))
        lines.insert(at, "\tbra \t$Llate;\n$Lback:\n")
        lines.append(f"\tbra \t$Lend;\n$Llate:\n{late}\tbra \t$Lback;\n$Lend:\n")
    # half of the programs with both sites making the same call (LLVM may then merge them)
    return "".join(lines), draw(st.booleans())


@settings(max_examples=fuzz.examples("SPLICE_FMA_FUZZ_EXAMPLES", 100), deadline=None,
          derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_site_programs())
def test_random_two_site_programs_keep_their_sites_and_slots(case):
    body, same_call = case
    check_two_sites(hand_kernel(body, 2), _same_callee_sites() if same_call else None)


def test_two_site_oracle_sees_a_swapped_callee():
    body = ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
            "\tld.global.b64 \t%rd2, [__splice_marker_1];\n"
            "\txor.b64 \t%rd3, %rd1, %rd30;\n\tfma.rn.f64 \t%rd4, %rd3, %rd1, %rd1;\n"
            "\txor.b64 \t%rd5, %rd2, %rd31;\n\tfma.rn.f64 \t%rd6, %rd2, %rd5, %rd2;\n")
    src = hand_kernel(body, 2)
    out = check_two_sites(src)
    assert out is not None
    params = {"k_p0": 7, "k_p1": 9}
    assert run_ptx(src, params, (11, 13)) == [(0, 7, 0), (1, 9, 0)]
    bad = out.replace("callee1, (", "callee0, (")
    assert run_ptx(bad, params, (0, 0)) != [(0, 7, 0), (1, 9, 0)]



# ---------------------------------------------------------------------------------------------
# Results and keys of two sites combined by xor, as LLVM reassociates them: a result counts
# as holding its site's key (the Tile IR unblinds it by xor K), so a value is free when each
# key in it is matched by that site's result, and a blinded value of a site when one key is
# left over (splice.forms.fma_proof._fma_derived_values).

TWO_KEYS = ("\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
            "\tld.global.b64 \t%rd2, [__splice_marker_1];\n"
            "\txor.b64 \t%rd3, %rd1, %rd30;\n\tfma.rn.f64 \t%rd4, %rd3, %rd1, %rd1;\n"
            "\txor.b64 \t%rd5, %rd2, %rd31;\n\tfma.rn.f64 \t%rd6, %rd5, %rd2, %rd2;\n")
# a third call of site 0 whose slot 0 is %rd9: what reaches it is checked by the oracle
USE_RD9 = "\txor.b64 \t%rd10, %rd9, %rd1;\n\tfma.rn.f64 \t%rd11, %rd10, %rd1, %rd1;\n"

NETWORK_FORMS = {
    # hash(a, b) ^ hash(c, d) as (K1 ^ K0) ^ r0 ^ r1 (seen: tile_sizes[*], asm_const)
    "results_xor_reassociated": TWO_KEYS + "\txor.b64 \t%rd7, %rd2, %rd1;\n"
                                "\txor.b64 \t%rd8, %rd7, %rd4;\n"
                                "\txor.b64 \t%rd9, %rd8, %rd6;\n"
                                "\tst.global.b64 \t[%rd30], %rd9;\n" + USE_RD9,
    # r1 unblinded and blinded for site 0 as (K0 ^ r1) ^ K1 (seen: loop_if_inside)
    "unblind_and_blind_reassociated": TWO_KEYS + "\txor.b64 \t%rd7, %rd1, %rd6;\n"
                                      "\txor.b64 \t%rd8, %rd7, %rd2;\n"
                                      "\tfma.rn.f64 \t%rd12, %rd8, %rd1, %rd1;\n"
                                      "\txor.b64 \t%rd9, %rd4, %rd1;\n" + USE_RD9,
    # a result passed on to the same site as itself (K0 cancelled), and unblinded
    "result_as_slot_of_its_site": TWO_KEYS + "\tfma.rn.f64 \t%rd12, %rd4, %rd1, %rd1;\n"
                                  "\txor.b64 \t%rd9, %rd12, %rd1;\n" + USE_RD9,
}

NETWORK_REFUSED = {
    # keys of two sites left over: neither a slot nor free
    "two_sites_left_as_slot": (TWO_KEYS + "\txor.b64 \t%rd7, %rd2, %rd1;\n"
                               "\tfma.rn.f64 \t%rd8, %rd7, %rd1, %rd1;\n", "mixes the values",
                               {0, 1}),
    "two_sites_left_stored": (TWO_KEYS + "\txor.b64 \t%rd7, %rd2, %rd4;\n"
                              "\txor.b64 \t%rd8, %rd7, %rd30;\n"
                              "\tst.global.b64 \t[%rd30], %rd8;\n", "not a marker", {0, 1}),
    # r0 ^ K1 (site 0's key not matched): a blinded value of both sites
    "result_with_other_key_stored": (TWO_KEYS + "\txor.b64 \t%rd7, %rd4, %rd2;\n"
                                     "\tst.global.b64 \t[%rd30], %rd7;\n", "not a marker", {0, 1}),
    "result_with_other_key_as_slot": (TWO_KEYS + "\txor.b64 \t%rd7, %rd4, %rd2;\n"
                                      "\tfma.rn.f64 \t%rd8, %rd7, %rd2, %rd2;\n",
                                      "mixes the values", {0, 1}),
    # a register free on one path and blinded on another
    "free_or_blinded": (TWO_KEYS + "\txor.b64 \t%rd7, %rd4, %rd1;\n"
                        "\t@%p1 bra \t$L1;\n\txor.b64 \t%rd7, %rd2, %rd31;\n$L1:\n"
                        "\tfma.rn.f64 \t%rd8, %rd7, %rd2, %rd2;\n",
                        "also written by other instructions", {1}),
}


@pytest.mark.parametrize("name", sorted(NETWORK_FORMS))
def test_results_and_keys_reassociated_by_llvm_are_accepted(name):
    src = hand_kernel(NETWORK_FORMS[name], 2)
    assert check_two_sites(src) is not None, f"{name} refused"
    # the oracle checks something: the last call's slot 0 is a result (or a mix of them)
    params = {"k_p0": 7, "k_p1": 9}
    want = run_ptx(src, params, (0x1111, 0x2222), fma_result=0x4242)
    assert want == run_ptx(src, params, (0x3333, 0x5555), fma_result=0x4242)
    assert want[-1][1] not in (0, 7, 9), want


@pytest.mark.parametrize("name", sorted(NETWORK_REFUSED))
def test_results_and_keys_near_misses_are_refused(name):
    body, needle, sites = NETWORK_REFUSED[name]
    refused = splice_calls(Module(hand_kernel(body, 2)), fma_sites(2),
                           kernel_name="k").refused
    assert refused is not None and needle in refused.reason, refused
    assert refused.sites == sites


# ---------------------------------------------------------------------------------------------
# Two sites of the same call in the arms of a branch, their markers merged by LLVM into one
# fma whose key is either site's key (seen: an if/else calling one float32 extern in both
# arms): whichever arm ran, that fma is the same call.

def _same_callee_sites(sig1: str = "float64(float64, float64)"):
    return {0: site_call(0, "float64(float64, float64)", "fma"),
            1: dataclasses.replace(site_call(1, sig1, "fma"), callee="callee0",
                                   params=site_call(0, sig1, "fma").params)}


MERGED_ARMS = (
    "\t@%p1 bra \t$L1;\n"
    "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
    "\tmov.b64 \t%rd5, 1065353216;\n"
    "\tbra.uni \t$L2;\n$L1:\n"
    "\tld.global.b64 \t%rd1, [__splice_marker_1];\n"
    "\tmov.b64 \t%rd5, 1073741824;\n"
    "$L2:\n"
    "\txor.b64 \t%rd3, %rd1, %rd30;\n"
    "\txor.b64 \t%rd4, %rd5, %rd1;\n"
    "\tfma.rn.f64 \t%rd2, %rd3, %rd1, %rd4;\n"
    "\txor.b64 \t%rd9, %rd2, %rd1;\n")
# each arm blinds its own argument, the blinded values and the keys merged
MERGED_ARMS_BLINDED = (
    "\t@%p1 bra \t$L1;\n"
    "\tld.global.b64 \t%rd1, [__splice_marker_0];\n"
    "\txor.b64 \t%rd3, %rd1, %rd30;\n"
    "\tbra.uni \t$L2;\n$L1:\n"
    "\tld.global.b64 \t%rd6, [__splice_marker_1];\n"
    "\tnot.b64 \t%rd3, %rd6;\n"
    "\tmov.b64 \t%rd1, %rd6;\n"
    "$L2:\n"
    "\tfma.rn.f64 \t%rd2, %rd3, %rd1, %rd1;\n"
    "\txor.b64 \t%rd9, %rd2, %rd1;\n")


@pytest.mark.parametrize("body", [MERGED_ARMS, MERGED_ARMS_BLINDED])
def test_merged_markers_of_the_same_call_are_accepted(body):
    src = hand_kernel(body + USE_RD9, 2)
    sites = _same_callee_sites()
    out = check_two_sites(src, sites)
    assert out is not None
    report = splice_calls(Module(src), sites, kernel_name="k")
    assert report.found == report.replaced == {0: 2}
    assert "or site(s) [1] (LLVM merged their markers: the same call)" in out
    # the oracle sees which arm ran: path p1 is site 1, the other site 0 (same callee)
    assert run_ptx(src, {"k_p0": 7, "k_p1": 9}, (0x11, 0x22))[0][0] == 0
    assert run_ptx(src, {"k_p0": 0, "k_p1": 9}, (0x11, 0x22))[0][0] == 1


@pytest.mark.parametrize("sites, why", [
    (lambda: fma_sites(2), "other callees"),
    (lambda: _same_callee_sites("uint64(float64, float64)"), "other signature"),
    (lambda: {0: site_call(0, "float64(float64, float64)", "fma"),
              1: dataclasses.replace(site_call(1, "float64(float64, float64)", "fma"),
                                     callee="callee0")}, "other parameter names"),
])
def test_merged_markers_of_different_calls_are_refused(sites, why):
    refused = splice_calls(Module(hand_kernel(MERGED_ARMS, 2)), sites(),
                           kernel_name="k").refused
    assert refused is not None and "holds the keys of sites 0 and 1" in refused.reason, why
    assert refused.sites == {0, 1}


def test_merged_markers_and_a_third_site_of_another_call():
    # sites 0 and 1 merged (the same call), site 2 its own: each call takes its site's slots
    sites = _same_callee_sites()
    sites[2] = site_call(2, "float64(float64, float64)", "fma")
    body = (MERGED_ARMS + "\tld.global.b64 \t%rd10, [__splice_marker_2];\n"
            "\txor.b64 \t%rd11, %rd9, %rd10;\n\tfma.rn.f64 \t%rd12, %rd11, %rd10, %rd10;\n")
    src = hand_kernel(body, 3)
    report = splice_calls(Module(src), sites, kernel_name="k")
    assert report.refused is None and report.replaced == {0: 1, 2: 1}
    for p0, arm in ((0, 1), (7, 0)):   # %p1 (k_p0 == 0): the arm of site 1
        params = {"k_p0": p0, "k_p1": 9}
        want = run_ptx(src, params, (0x11, 0x22, 0x33), fma_result=0x4242, callees=(0, 0, 2))
        assert want == run_ptx(src, params, (0x44, 0x55, 0x66), fma_result=0x4242,
                               callees=(0, 0, 2))
        got = run_ptx(report.ptx, params, (0, 0, 0), fma_result=0x4242)
        assert [c[0] for c in want] == [arm, 2] and got == [(0,) + want[0][1:], want[1]]


# ---------------------------------------------------------------------------------------------
# An fma marker's rounding is its site's (SiteCall.fma_rounding): sites of different roundings
# are fmas of different intrinsics to LLVM, which it does not merge across the arms of a
# branch.

@pytest.mark.parametrize("rounding", ["rn", "rz", "rm", "rp"])
def test_fma_marker_with_its_sites_rounding_is_accepted(rounding):
    body = KEY + f"\txor.b64 \t%rd4, %rd1, %rd30;\n\tfma.{rounding}.f64 \t%rd2, %rd4, %rd1, %rd1;\n"
    sites = {0: dataclasses.replace(site_call(0, "float64(float64, float64)", "fma"),
                                    fma_rounding=rounding)}
    out = check_rewrite_semantics(hand_kernel(body), sites)
    assert out is not None and "fma." not in out.split("ld.param.u64 \t%rd31")[1]


@pytest.mark.parametrize("rounding, marker", [("rn", "rz"), ("rz", "rn"), ("rm", "rp"),
                                              ("rz", "rz.ftz")])
def test_fma_marker_with_another_rounding_is_refused(rounding, marker):
    body = KEY + f"\txor.b64 \t%rd4, %rd1, %rd30;\n\tfma.{marker}.f64 \t%rd2, %rd4, %rd1, %rd1;\n"
    sites = {0: dataclasses.replace(site_call(0, "float64(float64, float64)", "fma"),
                                    fma_rounding=rounding)}
    refused = splice_calls(Module(hand_kernel(body)), sites, kernel_name="k").refused
    assert refused is not None and refused.sites == {0} and "not a marker" in refused.reason


def test_merged_markers_of_the_same_call_with_other_roundings_are_refused():
    sites = _same_callee_sites()
    sites[1] = dataclasses.replace(sites[1], fma_rounding="rz")
    refused = splice_calls(Module(hand_kernel(MERGED_ARMS, 2)), sites, kernel_name="k").refused
    assert refused is not None and refused.sites == {0, 1}
