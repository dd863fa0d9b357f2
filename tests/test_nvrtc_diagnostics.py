"""NVRTC's warnings that mean an undefined or silently changed result are errors
(:data:`splice.inputs.cuda_compile.UNDEFINED_RESULTS`, made so by NVRTC's ``--diag-error``)
for externs, libraries and ``splice.cuda`` snippets alike, with the user's location and
the warning's number; each has a probe here that NVRTC warns of, by number, without the
option. ``splice.cuda``'s several results are checked member by member, as an extern's."""

from __future__ import annotations

import re

import cuda.tile as ct
import numpy as np
import pytest

import splice
from splice.declare.externs import HEADER_PROVIDERS
from splice.inputs.cuda_compile import UNDEFINED_RESULTS, undefined_result_option
from splice.inputs.fragments import CudaSource
from splice.system.cuda_libs import nvrtc_compile
from support.ptx_exec import run_build

#: For each warning of UNDEFINED_RESULTS, an extern ``f`` NVRTC warns of with that number
#: (``F``: ``extern "C" __device__``).
PROBES = {
    39: "F int f(int x) { return x / 0; }",
    61: "F int f(int x) { return x + 2147483647 * 2; }",
    62: "F int f(int x) { return x << -1; }",
    63: "F int f(int x) { return x << 40; }",
    69: "F signed char f(int x) { return 300; }",
    117: "F float f(float x) { if (x > 0) return x; return; }",
    170: "F int f(int x) { int a[4] = {x, x, x, x}; int* p = a + 7; return *p; }",
    173: "F int f(int x) { return 3e10; }",
    179: "F int f(int x) { return x % 0; }",
    181: 'F int f(int x) { printf("%f\\n", x); return x; }',
    220: "F float f(float x) { float y = ((unsigned __int128)1 << 127) * 2 - 1; return x + y; }",
    221: "F float f(float x) { return 1e300; }",
    224: 'F int f(int x) { printf("%d %d\\n", x); return x; }',
    226: 'F int f(int x) { printf("%y\\n", x); return x; }',
    430: "__device__ const int& g(int v) { return v + 1; } F int f(int x) { return g(x); }",
    546: "F int f(int x) { if (x) goto L; { int y = 3; L: return y; } }",
    549: "F float f(float x) { float y; return x + y; }",
    836: "__device__ int& g(int v) { int y = v; return y; } F int f(int x) { return g(x); }",
    940: "F float f(float x) { if (x > 0) return x; }",
    1056: "__device__ int* g(int v) { int y = v; return &y; } F int f(int x) { return *g(x); }",
    1057: "struct S { int a; }; __device__ const S* g(int v) { return &(const S&)S{v}; } "
          "F int f(int x) { return g(x)->a; }",
    1305: "__device__ __attribute__((noreturn)) void g(int) {} "
          "F int f(int x) { if (x) g(x); return 0; }",
    2361: "F int f(float x) { int y{x}; return y; }",
    2362: "F float f(int x) { float y{1e300}; return y + x; }",
    2364: "F float f(int x) { float y{16777217}; return y + x; }",
}


def _source(probe: str) -> str:
    return '#define F extern "C" __device__\n' + probe + "\n"


def test_every_diagnostic_has_a_probe():
    assert set(PROBES) == set(UNDEFINED_RESULTS)


@pytest.mark.parametrize("number", sorted(PROBES))
def test_nvrtc_warns_of_each_probe_by_its_number(number):
    """The table's numbers are NVRTC's: without the option, a warning of that number."""
    _ptx, log = nvrtc_compile(_source(PROBES[number]).encode(), "p.cu",
                              ["-arch=sm_90", "-rdc=true", "--device-int128"])
    assert f"warning #{number}-D" in log, log


@pytest.mark.parametrize("number", sorted(PROBES))
def test_each_diagnostic_is_an_error_for_an_extern(number):
    frag = CudaSource(text=_source(PROBES[number]), options=("--device-int128",),
                      where="user.py:7", providers=HEADER_PROVIDERS)
    with pytest.raises(splice.SpliceCompileError,
                       match=rf"CUDA C source declared at user\.py:7 does not compile(.|\n)*"
                             rf"hint: NVRTC warns of this \(#{number}\); splice makes it an "
                             rf"error"):
        frag.module("sm_90a")


def test_a_users_own_option_may_take_one_back():
    """NVRTC takes the last option: ``--diag-warn=N`` among the extern's options."""
    frag = CudaSource(text=_source(PROBES[940]), options=("--diag-warn=940",),
                      where="user.py:7", providers=HEADER_PROVIDERS)
    assert "f" in frag.module("sm_90a").functions
    assert undefined_result_option() in frag._options("sm_90a")


@pytest.mark.parametrize("pragma", ["nv_diag_suppress 940", "nv_diag_warning 940"])
def test_a_pragma_in_the_source_may_take_one_back(pragma):
    """NVRTC's pragmas override its options from their line on: the errors page says so."""
    frag = CudaSource(text=f"#pragma {pragma}\n" + _source(PROBES[940]),
                      where="user.py:7", providers=HEADER_PROVIDERS)
    assert "f" in frag.module("sm_90a").functions


def test_a_change_of_sign_stays_a_warning():
    # __shfl_sync(-1, ...): a defined conversion CUDA code uses for the full mask (#68)
    frag = CudaSource(text='extern "C" __device__ float f(float x) '
                           '{ return __shfl_sync(-1, x, 0); }',
                      where="user.py:7", providers=HEADER_PROVIDERS)
    assert "f" in frag.module("sm_90a").functions


# --------------------------------------------------------------------------------------------
# through a kernel: the user's file and line

SIG = splice.kernel_signature("array(float32)", "array(float32)")


def test_an_extern_reading_an_uninitialised_variable_names_its_declaration():
    g = splice.extern(source='extern "C" __device__ float g(float x) { float y; return x + y; }',
                      name="g", signature="float32(float32)")

    @splice.kernel
    def k(x, y):
        ct.store(y, index=(ct.bid(0),), tile=g(ct.load(x, index=(ct.bid(0),), shape=(16,))))
    with pytest.raises(splice.SpliceCompileError,
                       match=r"CUDA C source declared at .*test_nvrtc_diagnostics\.py:\d+ "
                             r"(.|\n)*variable \"y\" is used before its value is set"
                             r"(.|\n)*#549"):
        splice.compile(k, SIG, "sm_90")


def _snippet_kernel(code: str, dtype):
    if isinstance(dtype, tuple):
        @splice.kernel
        def k2(x, y):
            t = ct.load(x, index=(ct.bid(0),), shape=(16,))
            a, b = splice.cuda(code, dtype=dtype, x=t)
            ct.store(y, index=(ct.bid(0),), tile=a + b.astype(ct.float32))
        return k2

    @splice.kernel
    def k(x, y):
        t = ct.load(x, index=(ct.bid(0),), shape=(16,))
        ct.store(y, index=(ct.bid(0),), tile=splice.cuda(code, dtype=dtype, x=t))
    return k


@pytest.mark.parametrize("code, number", [
    ("if (x > 0) return x;\nreturn;", 117),
    ("if (x > 0) return x;", 940),
    ("float z; return x + z;", 549),
    ("int v{x}; return v;", 2361),
    ('printf("%d %d\\n", (int)x); return x;', 224),
    ("float a[2] = {x, x}; return *(a + 3);", 170),
])
def test_each_diagnostic_is_an_error_for_a_snippet(code, number):
    with pytest.raises(splice.SpliceCompileError,
                       match=rf"inline CUDA C \(splice\.cuda\) at .*test_nvrtc_diagnostics\.py:"
                             rf"\d+ does not compile(.|\n)*hint: NVRTC warns of this "
                             rf"\(#{number}\)"):
        splice.compile(_snippet_kernel(code, ct.float32), SIG, "sm_90")


@pytest.mark.parametrize("code, k, got, want", [
    ("return {(int)x, x};", 1, "int", "float"),          # each would narrow (#2361)
    ("return {x, 1.5f};", 2, "float", "int"),
    ("return {x, (long long)x};", 2, "long long", "int"),
    ("return {(double)x, 1};", 1, "double", "float"),    # no narrowing warning: a type
])
def test_several_snippet_results_are_checked_member_by_member(code, k, got, want):
    with pytest.raises(splice.SpliceCompileError,
                       match=rf"at .*test_nvrtc_diagnostics\.py:\d+ does not compile(.|\n)*"
                             rf"line 1 of the snippet: result {k} has type {got}, but dtype= "
                             rf"asks for {want}"):
        splice.compile(_snippet_kernel(code, (ct.float32, ct.int32)), SIG, "sm_90")


def test_several_snippet_results_of_their_types_compute():
    b = splice.compile(_snippet_kernel("return {x * 2.0f, (int)x + 1};",
                                       (ct.float32, ct.int32)), SIG, "sm_90")
    x, y = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    run_build(b, (1,), x, y)
    np.testing.assert_array_equal(y, x * 2 + (x + 1))


def test_the_errors_page_lists_exactly_these_diagnostics():
    from pathlib import Path
    page = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    section = page.split("### NVRTC's warnings that are errors in splice")[1].split("\n## ")[0]
    listed = {int(n) for n in re.findall(r"^\| (\d+) \|", section, re.M)}
    assert listed == set(UNDEFINED_RESULTS)
