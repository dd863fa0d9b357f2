"""``memory="arguments"`` proven on the callee's PTX (:mod:`splice.analysis.memory_proof`): every
global or generic access of the callee, and of every function it reaches, is at an address
derived from its pointer arguments. Refusals through the whole pipeline (an unpassed
``__device__`` global, a pointer loaded from memory), accepted forms (offsets, loops,
selects, a helper that returns an address) with the CPU executor's values, and the
analysis's rules on hand-written PTX."""

from __future__ import annotations

import re

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.analysis.memory_proof import prove_arguments_only
from splice.ptxtools.ptx import Module
from support import kernels as K
from support.ptx_exec import run_build

f32, i32 = ct.float32, ct.int32
ConstInt = ct.Constant[int]

# X[i] = 2 X[i] + 1 through an offset, a loop of calls of a helper that returns an
# address, and a select between two derived addresses
WALK_SRC = r'''
__device__ __noinline__ float* step(float* p, int k) { return p + k; }
extern "C" __device__ void walk(float* x, int i) {
    float* q = x + (i & ~7);
    for (int k = 0; k < (i & 7); ++k) q = step(q, 1);
    float* r = (i & 1) ? q : x + i;
    r[0] = 2.0f * r[0] + 1.0f;
}'''
# writes a __device__ global it is not given
GLOBAL_SRC = r'''
__device__ float g_amax[16];
extern "C" __device__ void keep_max(float* x, int i) {
    x[i] = 2.0f * x[i] + 1.0f;
    g_amax[i & 15] = x[i];
}'''
# reads through a pointer it loads from memory (x holds a pointer at x[0..1])
LOADED_SRC = r'''
extern "C" __device__ void chase(float* x, int i) {
    float* p = *reinterpret_cast<float**>(x);
    x[i + 2] = p[i];
}'''


def _declare(src, name, memory="arguments"):
    return splice.extern(source=src, name=name, signature="void(float32*, int32)",
                         pure=False, memory=memory)


walk = _declare(WALK_SRC, "walk")
keep_max = _declare(GLOBAL_SRC, "keep_max")
keep_max_any = _declare(GLOBAL_SRC, "keep_max", memory="any")
chase = _declare(LOADED_SRC, "chase")


def _kernel(fn):
    @splice.kernel
    def call_then_read(X, Out, TILE: ConstInt):
        """``fn(X, i)`` on each element, then Out = X read back."""
        fn(X, ct.bid(0) * TILE + ct.arange(TILE, dtype=i32))
        u = ct.load(X, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(Out, index=(ct.bid(0),), tile=u, allow_tma=False)
    return call_then_read


walk_kernel, keep_max_kernel = _kernel(walk), _kernel(keep_max)
keep_max_any_kernel, chase_kernel = _kernel(keep_max_any), _kernel(chase)


def _sig(n=128):
    return K.signature(K.array(f32), K.array(f32), n)


def _module(decl):
    ext = decl._splice_extern
    return ext, ext.fragment.module("sm_90", ext.fragment.content_key("sm_90"))


def test_unpassed_global_is_refused():
    with pytest.raises(splice.SpliceLinkError) as e:
        splice.compile(keep_max_kernel, _sig(), "sm_90")
    msg = str(e.value)
    assert re.search(r"extern 'keep_max' \(declared at .*test_memory_proof\.py:\d+\)", msg)
    assert "memory=\"arguments\"" in msg and "memory=\"any\"" in msg
    assert re.search(r"'st\.global\.f32 \[%rd\d+\], %f\d+;' in its own body", msg)
    assert "the global variable 'g_amax'" in msg


def test_unpassed_global_compiles_as_any():
    """The fix the refusal names: the same callee declared memory="any"."""
    b = splice.compile(keep_max_any_kernel, _sig(), "sm_90")
    assert [s.symbol for s in b.sites] == ["keep_max"]


def test_pointer_loaded_from_memory_is_refused():
    with pytest.raises(splice.SpliceLinkError,
                       match=r"extern 'chase' .* '(ld|st)\.f32 [^']*' in its own body "
                             r"accesses global \(or generic\) memory at an address that is a "
                             r"value loaded from memory \('ld\.u64 .*'\): a pointer read "
                             r"from memory.*memory=\"any\""):
        splice.compile(chase_kernel, _sig(), "sm_90")


def test_accepted_forms_are_in_the_callee():
    """The accepted test below runs what it says: a loop calling the helper, whose result
    is the address, and a select of 64-bit addresses."""
    ext, mod = _module(walk)
    body = mod.text[mod.text.index(".func walk"):]
    assert "call.uni (retval0)" in body and re.search(r"selp\.b64", body)
    assert prove_arguments_only(ext, mod, [mod]) is None


@pytest.mark.parametrize("blocks", [1, 3])
def test_exec_accepted_forms(blocks):
    n = 128
    x = np.random.default_rng(blocks).integers(-50, 50, n * blocks).astype(np.float32)
    x0, out = x.copy(), np.zeros_like(x)
    b = splice.compile(walk_kernel, _sig(n), "sm_90")
    launch = run_build(b, (blocks,), x, out)
    assert not launch.approx
    np.testing.assert_array_equal(x, 2.0 * x0 + 1.0)
    np.testing.assert_array_equal(out, x)


# The three escapes of issue 41, in CUDA C: an address the proof took for the argument's
ESCAPES = {
    # (x & m) + a: a run-time mask m == 0 leaves the address a
    "and": (r'''extern "C" __device__ void esc(float* x, int i) {
    unsigned long long m = (unsigned long long)(long long)i;
    *(float*)(((unsigned long long)x & m) + (m >> 1)) = 1.0f; }''',
            r"'and\.b64 [^']*', an 'and' of an address with what is not a constant alignment"),
    # null or the argument, plus an integer: the integer itself where i > 4096
    "null": (r'''extern "C" __device__ void esc(float* x, int i) {
    unsigned long long b = i > 4096 ? 0ull : (unsigned long long)x;
    *(float*)(b + (unsigned long long)i) = 1.0f; }''',
             r"an offset added to a value that may be the null pointer"),
    # the stack plus a run-time offset, stored through a generic address
    "stack": (r'''__device__ __noinline__ void put(float* p, int a) { p[a] = 1.0f; }
extern "C" __device__ void esc(float* x, int i) {
    float t[4] = {0, 0, 0, 0}; put(t, i & 3); put(x, i); x[i] += t[0] + t[1]; }''',
              r"in 'put\(float\*, int\)', reached through esc -> put.* the address of the "
              r"local variable '__local_depot\d+' plus a run-time offset"),
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escapes_are_refused_with_the_instruction_and_the_fix(name):
    src, why = ESCAPES[name]
    with pytest.raises(splice.SpliceLinkError,
                       match=r"extern 'esc' \(declared at .*test_memory_proof\.py:\d+\), called "
                             r"at .*test_memory_proof\.py:\d+, is declared memory=\"arguments\""
                             r".*'st\.[^']*'.*" + why + r".*Declare it memory=\"any\""):
        splice.compile(_kernel(_declare(src, "esc")), _sig(), "sm_90")
    # the fix the refusal names
    assert splice.compile(_kernel(_declare(src, "esc", memory="any")), _sig(), "sm_90").sites


# the stack at a constant offset, given to a helper that also takes the argument: proven;
# X[i] = 2 X[i] + 1 through a stack slot
STACK_SRC = r'''__device__ __noinline__ void put(float* p, float v) { p[1] = v; }
extern "C" __device__ void stacked(float* x, int i) {
    float t[4] = {0, 0, 0, 0}; put(t, x[i]); put(x + i - 1, 2.0f * t[1] + 1.0f); }'''


def test_exec_the_stack_at_a_constant_offset_is_proven():
    n = 128
    x = np.random.default_rng(5).integers(-50, 50, n).astype(np.float32)
    x0, out = x.copy(), np.zeros_like(x)
    b = splice.compile(_kernel(_declare(STACK_SRC, "stacked")), _sig(n), "sm_90")
    assert "__local_depot" in b["spliced_ptx"]            # the stack slot is there
    launch = run_build(b, (1,), x, out)
    assert not launch.approx
    np.testing.assert_array_equal(x, 2.0 * x0 + 1.0)
    np.testing.assert_array_equal(out, x)


# ---------------------------------------------------------------------------------------------
# The rules, on hand-written PTX

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
PROTO = ".visible .func f(.param .b64 f_param_0, .param .b64 f_param_1)\n"
REGS = (".reg .b64 %rd<16>;\n.reg .b32 %r<8>;\n.reg .f32 %f<4>;\n.reg .f64 %fd<4>;\n"
        ".reg .pred %p<4>;\n")
LOAD_ARGS = "ld.param.u64 %rd1, [f_param_0];\nld.param.u64 %rd2, [f_param_1];\n"


def _prove(body, signature="void(float32*, int64)", extra=""):
    ptx = HEAD + extra + PROTO + "{\n" + REGS + LOAD_ARGS + body + "\nret;\n}\n"
    decl = splice.extern.from_ptx(ptx=ptx, name="f", signature=signature, pure=False,
                                  memory="arguments")
    ext = decl._splice_extern
    mod = Module(ptx, "test")
    return prove_arguments_only(ext, mod, [mod])


@pytest.mark.parametrize("body", [
    "st.global.f32 [%rd1+16], %f1;",                                   # offset
    "mad.lo.s64 %rd3, %rd2, 4, %rd1;\nld.global.nc.f32 %f1, [%rd3];",  # scaled index
    "sub.s64 %rd3, %rd1, %rd2;\ncvta.to.global.u64 %rd4, %rd3;\n"
    "atom.global.add.f32 %f1, [%rd4], 1.0;",                            # sub, cvta, atom
    "ld.u64 %rd3, [%rd1];\nadd.s64 %rd4, %rd1, %rd3;\nst.f32 [%rd4], %f1;",  # loaded index
    "and.b64 %rd3, %rd1, -16;\nred.global.add.f32 [%rd3], %f1;",       # aligned down
    "setp.eq.s64 %p1, %rd2, 0;\nselp.b64 %rd3, %rd1, 0, %p1;\nst.f32 [%rd3], %f1;",  # null
    # a loop: %rd3 joins the parameter and itself plus 4
    "mov.u64 %rd3, %rd1;\nL1:\nst.f32 [%rd3], %f1;\nadd.s64 %rd3, %rd3, 4;\n"
    "setp.ne.s64 %p1, %rd3, %rd2;\n@%p1 bra L1;",
    # the stack and a .const table are not the kernel's global memory
    ".local .align 4 .b8 __local_depot0[16];\nmov.u64 %rd3, __local_depot0;\n"
    "cvta.local.u64 %rd4, %rd3;\nst.f32 [%rd4], %f1;\nld.const.f32 %f2, [tab];",
])
def test_rule_accepts(body):
    assert _prove(body, extra=".const .align 4 .b8 tab[16];\n") is None


LOCAL = ".local .align 4 .b8 __local_depot0[16];\nmov.u64 %rd3, __local_depot0;\n" \
        "cvta.local.u64 %rd4, %rd3;\n"


@pytest.mark.parametrize("body", [
    "and.b64 %rd3, %rd1, -4096;\nst.f32 [%rd3+12], %f1;",            # the widest alignment
    LOCAL + "st.f32 [%rd4+12], %f1;",                                  # inside the stack
    LOCAL + "add.s64 %rd5, %rd4, 8;\nst.u64 [%rd5], %rd1;",             # a constant offset
    # the stack at two constant offsets through one register: both inside
    LOCAL + "add.s64 %rd5, %rd4, 4;\n@%p1 add.s64 %rd5, %rd4, 8;\nst.f32 [%rd5], %f1;",
    "cvt.u64.u64 %rd3, %rd1;\nst.f32 [%rd3], %f1;",                    # an integer cvt
])
def test_rule_proves(body):
    """What the escapes' rules still prove (issue 41)."""
    assert _prove(body) is None


@pytest.mark.parametrize("body, why", [
    # (x & m) + a with a run-time mask m == 0 is the address a
    ("and.b64 %rd3, %rd1, %rd2;\nadd.s64 %rd4, %rd3, %rd2;\nst.f32 [%rd4], %f1;",
     r"computed by 'and\.b64 %rd3, %rd1, %rd2;', an 'and' of an address with what is not a "
     r"constant alignment mask"),
    ("and.b64 %rd3, %rd1, 65535;\nst.f32 [%rd3], %f1;", r"not a constant alignment mask"),
    ("and.b64 %rd3, %rd1, -1048576;\nst.f32 [%rd3], %f1;", r"not a constant alignment"),
    # a select of null and the argument, plus an integer: an absolute address
    ("setp.eq.s64 %p1, %rd2, 0;\nselp.b64 %rd3, 0, %rd1, %p1;\nadd.s64 %rd4, %rd3, %rd2;\n"
     "st.f32 [%rd4], %f1;", r"'add\.s64 %rd4, %rd3, %rd2;', an offset added to a value that "
                            r"may be the null pointer"),
    # the same through a join (a register set on two paths)
    ("mov.u64 %rd3, 0;\nsetp.eq.s64 %p1, %rd2, 0;\n@%p1 mov.u64 %rd3, %rd1;\n"
     "sub.s64 %rd4, %rd3, %rd2;\nst.f32 [%rd4], %f1;", r"may be the null pointer"),
    ("mov.u64 %rd3, 0;\nmad.lo.s64 %rd4, %rd2, 4, %rd3;\nselp.b64 %rd5, %rd1, %rd4, %p1;\n"
     "st.f32 [%rd5], %f1;", r"integers only"),              # null plus an index: an integer
    # the stack plus a run-time offset, stored through a generic address
    (LOCAL + "add.s64 %rd5, %rd4, %rd2;\nst.f32 [%rd5], %f1;",
     r"the address of the local variable '__local_depot0' plus a run-time offset"),
    (LOCAL + "st.f32 [%rd4+16], %f1;",
     r"bytes 16\.\.19 of the local variable '__local_depot0' \(16 bytes\): outside it"),
    (LOCAL + "st.f32 [%rd4+-4], %f1;", r"bytes -4\.\.-1 of the local variable"),
    (".shared .align 4 .b8 sm[64];\nmov.u64 %rd3, sm;\ncvta.shared.u64 %rd4, %rd3;\n"
     "shl.b64 %rd6, %rd2, 2;\nadd.s64 %rd5, %rd4, %rd6;\nst.f32 [%rd5], %f1;",
     r"the shared variable 'sm' plus a run-time offset"),
    ("mov.u64 %rd3, tab;\ncvta.const.u64 %rd4, %rd3;\nadd.s64 %rd5, %rd4, %rd2;\n"
     "ld.f32 %f1, [%rd5];", r"the const variable 'tab' plus a run-time offset"),
    # floating-point arithmetic on an address, and a round trip through a double
    ("mov.b64 %fd1, %rd1;\nadd.f64 %fd2, %fd1, 0d4000000000000000;\nmov.b64 %rd3, %fd2;\n"
     "st.f32 [%rd3], %f1;", r"floating-point arithmetic on an address"),
    ("cvt.rn.f64.u64 %fd1, %rd1;\ncvt.rzi.u64.f64 %rd3, %fd1;\nst.f32 [%rd3], %f1;",
     r"floating-point arithmetic on an address"),
    # a .param that is neither a parameter, a call's result nor a stored argument
    ("{\n.param .b64 other;\nld.param.b64 %rd3, [other];\n}\nst.f32 [%rd3], %f1;",
     r"a \.param value splice does not follow"),
    # a cvt to or from a narrower integer type truncates the address (PTX lets a cvt read
    # and write registers wider than its types): the low bits are not the argument's memory
    ("cvt.u64.u32 %rd3, %rd1;\nst.f32 [%rd3], %f1;", r"truncates an address"),
    ("cvt.s64.s8 %rd3, %rd1;\nst.f32 [%rd3], %f1;", r"truncates an address"),
    ("cvt.u32.u64 %rd3, %rd1;\nst.f32 [%rd3], %f1;", r"truncates an address"),
    # null minus the argument is its negation, not a distance between two addresses: added
    # back to the argument it is the null pointer, and then any integer is any address
    ("sub.s64 %rd3, 0, %rd1;\nadd.s64 %rd4, %rd1, %rd3;\nadd.s64 %rd5, %rd4, %rd2;\n"
     "st.f32 [%rd5], %f1;", r"computed by 'sub\.s64 %rd3, 0, %rd1;'"),
    ("mov.u64 %rd6, 0;\nselp.b64 %rd3, %rd1, %rd6, %p1;\nsub.s64 %rd4, %rd3, %rd1;\n"
     "add.s64 %rd5, %rd1, %rd4;\nst.f32 [%rd5], %f1;", r"computed by 'sub\.s64 %rd4"),
    # instructions that take a generic address besides ld/st
    ("mbarrier.arrive.b64 %rd3, [%rd2];", r"integers only"),
    ("wmma.store.d.sync.aligned.row.m16n16k16.f32 [%rd2], {%f1, %f1, %f1, %f1, %f1, %f1, "
     "%f1, %f1}, 16;", r"integers only"),
])
def test_rule_refuses_the_escapes(body, why):
    hit = _prove(body, extra=".const .align 4 .b8 tab[16];\n")
    assert hit is not None, body
    assert re.search(why, hit[1]), hit


def test_a_param_reloaded_after_a_call_is_not_its_result():
    """A ``ld.param`` of a ``.param`` the call did not return is not the call's result."""
    body = _call_h("%rd1").replace("st.f32 [%rd9], %f1;", "") + \
        "\n{\n.param .b64 other;\nst.param.b64 [other], %rd2;\n}\n" \
        "{\n.param .b64 more;\nld.param.b64 %rd8, [more];\n}\nst.f32 [%rd8], %f1;"
    hit = _prove(body, extra=CALLEE.replace(".reg .f32 %f1;\n", ""))
    assert hit is not None and "a .param value splice does not follow" in hit[1]


@pytest.mark.parametrize("body, why", [
    ("st.global.f32 [%rd2], %f1;", r"integers only \(an integer cast of unknown origin\)"),
    ("cvt.u64.u32 %rd3, %r1;\nst.f32 [%rd3], %f1;", r"integers only"),
    ("add.s64 %rd3, %rd1, %rd1;\nst.f32 [%rd3], %f1;", r"computed by 'add\.s64 %rd3"),
    ("mul.lo.s64 %rd3, %rd1, 2;\nst.f32 [%rd3], %f1;", r"computed by 'mul\.lo\.s64"),
    ("mov.u64 %rd3, g;\nsub.s64 %rd4, %rd3, %rd1;\nadd.s64 %rd5, %rd1, %rd4;\n"
     "st.f32 [%rd5], %f1;", r"computed by 'sub\.s64 %rd4"),
    ("st.global.f32 [g+4], %f1;", r"the global variable 'g'"),
    # a linked-list walk: the loop's join takes the loaded value
    ("mov.u64 %rd3, %rd1;\nL1:\nld.u64 %rd3, [%rd3];\nsetp.ne.s64 %p1, %rd3, 0;\n"
     "@%p1 bra L1;\nst.f32 [%rd3], %f1;", r"a value loaded from memory \('ld\.u64 %rd3"),
    ("mov.u64 %rd3, f;\nst.f32 [%rd3], %f1;", r"the function 'f'"),
    ("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes "
     "[%rd1], [%rd2, {%r1}], [%rd1];", r"tensor map"),
    ("tex.1d.v4.f32.s32 {%f1, %f1, %f1, %f1}, [%rd2, {%r1}];", r"texture"),
    ("cp.async.ca.shared.global [%rd1], [%rd2], 4;", r"integers only"),
])
def test_rule_refuses(body, why):
    hit = _prove(body, extra=".global .align 4 .b8 g[16];\n")
    assert hit is not None
    assert re.search(why, hit[1]), hit


CALLEE = (".func (.param .b64 h_ret) h(.param .b64 h_param_0)\n{\n.reg .b64 %rd<4>;\n"
          "ld.param.u64 %rd1, [h_param_0];\nst.f32 [%rd1+4], %f1;\n"
          "add.s64 %rd2, %rd1, 8;\nst.param.b64 [h_ret], %rd2;\nret;\n}\n"
          ".reg .f32 %f1;\n")


def _call_h(arg):
    return ("{\n.param .b64 param0;\nst.param.b64 [param0], " + arg + ";\n"
            ".param .b64 retval0;\ncall.uni (retval0), h, (param0);\n"
            "ld.param.b64 %rd9, [retval0];\n}\nst.f32 [%rd9], %f1;")


def test_callee_of_a_derived_argument_is_proven():
    """The helper's parameter has what its caller passes, its result what it returns."""
    assert _prove(_call_h("%rd1"), extra=CALLEE.replace(".reg .f32 %f1;\n", "")) is None


def test_callee_of_a_global_is_refused_in_the_callee():
    body = _call_h("%rd5").replace("st.f32 [%rd9], %f1;", "")     # the result unused
    hit = _prove("mov.u64 %rd5, g;\n" + body,
                 extra=".global .align 4 .b8 g[16];\n" + CALLEE.replace(".reg .f32 %f1;\n", ""))
    assert hit is not None and hit[0].startswith("st.f32 [%rd1+4]")
    assert re.search(r"in 'h', reached through f -> h .* global variable 'g'", hit[1])


def test_call_of_code_no_ptx_defines_is_refused():
    hit = _prove("{\n.param .b64 param0;\nst.param.b64 [param0], %rd1;\n"
                 "call.uni mystery, (param0);\n}",
                 extra=".extern .func mystery(.param .b64 p);\n")
    assert hit is not None and "calls 'mystery', which no PTX fragment defines" in hit[1]


def test_malloc_result_is_not_an_argument():
    hit = _prove("{\n.param .b64 param0;\nst.param.b64 [param0], %rd2;\n"
                 ".param .b64 retval0;\ncall.uni (retval0), malloc, (param0);\n"
                 "ld.param.b64 %rd3, [retval0];\n}\nst.f32 [%rd3], %f1;",
                 extra=".extern .func (.param .b64 r) malloc(.param .b64 n);\n")
    assert hit is not None and "the result of 'malloc'" in hit[1]
