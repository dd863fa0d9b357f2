"""The bad-input catalogue: one table, each row a distinct bad input with the error type
and message content it must produce. Rows that reach a kernel build also check that the
cache holds no kernel entry afterwards (nothing half-written).

Declaration-time rows fail when the extern is declared; build-time rows when the kernel is
compiled (tracing, NVRTC, linking, rewriting, ptxas).
"""

from pathlib import Path

import cuda.tile as ct
import pytest

from support import kernels as K
import splice
from splice import cache

f32 = ct.float32
HERE = Path(__file__).name
SIG = K.signature(K.array(f32), K.array(f32), 256)
PTX = K.PTX_SCALE


def _ptx(text=PTX, name="ptx_scale", sig="float32(float32, float32)", **kw):
    return splice.extern.from_ptx(ptx=text, name=name, signature=sig, **kw)


def _cu(src, name=None, sig="float32(float32)", **kw):
    return splice.extern(source=src, name=name or "f", signature=sig, **kw)(lambda *a: None)


def _k1(ext):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t))
    return kern


def _k2(ext):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t, t))
    return kern


def _kvoid(ext):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ext(t, t)
        ct.store(y, index=(ct.bid(0),), tile=t)
    return kern


def _kasm(template, dtype, constraints=None, pack=1):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=splice.asm(template, t, dtype=dtype,
                                                         constraints=constraints, pack=pack))
    return kern


def _k2_64(ext):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t, ct.astype(t, ct.float64)))
    return kern


def _kwrong_dtype():
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=K.gelu_tanh(ct.astype(t, ct.float16)))
    return kern


def _kbroadcast():
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        a = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        b = ct.load(x, index=(ct.bid(0),), shape=(TILE // 2,))
        ct.store(y, index=(ct.bid(0),), tile=K.saxpy(1.0, a, b))
    return kern


def _karray():
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=K.gelu_tanh(x))
    return kern


def _kconst(value):
    small = _cu('extern "C" __device__ signed char sm(signed char x) { return x; }', "sm",
                "int8(int8)")

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=ct.load(x, index=(ct.bid(0),), shape=(TILE,)) +
                 ct.astype(small(value), ct.float32))
    return kern


def _kkw():
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=K.saxpy(1.0, t, y=t))
    return kern


def _kclash():
    a, b = _ptx(), _ptx(PTX.replace("0f3F800000", "0f40000000"))

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=a(t, t) + b(t, t))
    return kern


# (id, builder of a kernel -> (kernel, signature, arch), error type, message needles)
BUILD_ROWS = [
    ("wrong arity", lambda: _k1(K.saxpy), splice.SpliceCallError,
     ["expected 3 argument(s)", "in kernel 'kern'", HERE]),
    ("wrong dtype", _kwrong_dtype, splice.SpliceCallError,
     ["float16 tile of shape (256,)", ".astype(ct.float32)"]),
    ("shapes do not broadcast", _kbroadcast, splice.SpliceCallError, ["do not broadcast"]),
    ("array as argument", _karray, splice.SpliceCallError, ["argument 1 is a value of type"]),
    ("int constant out of range", lambda: _kconst(1000), splice.SpliceCallError,
     ["not representable as int8"]),
    ("keyword argument", _kkw, splice.SpliceCallError, ["keyword argument(s) y"]),
    ("NVRTC syntax error", lambda: _k1(_cu('extern "C" __device__ float f(float x) {\n'
                                           '  return x +* 2.0f;\n}')),
     splice.SpliceCompileError, ["line 2:", "return x +* 2.0f;"]),
    ("unknown NVRTC option", lambda: _k1(_cu('extern "C" __device__ float f(float x) '
                                             '{ return x; }', options=["--nope"])),
     splice.SpliceCompileError, ["does not compile"]),
    ("include not found", lambda: _k1(_cu('#include "nope.h"\nextern "C" __device__ float '
                                          'f(float x) { return x; }')),
     splice.SpliceCompileError, ["nope.h", "line 1:"]),
    ("empty source", lambda: _k1(_cu("  \n")), splice.SpliceCompileError, ["is empty"]),
    ("C return type mismatch", lambda: _k1(_cu('extern "C" __device__ int f(float x) '
                                               '{ return x; }')),
     splice.SpliceCompileError, ["'f' must return float"]),
    ("C parameter type mismatch", lambda: _k1(_cu('extern "C" __device__ float f(int x) '
                                                  '{ return x; }')),
     splice.SpliceCompileError, ["parameter 1 of 'f' must be float"]),
    ("C parameter count mismatch", lambda: _k1(_cu('extern "C" __device__ float f(float x, '
                                                   'float y) { return x; }')),
     splice.SpliceCompileError, ["of 1 parameter(s)"]),
    ("missing CUDA C symbol", lambda: _k1(_cu('extern "C" __device__ float g(float x) '
                                              '{ return x; }')),
     splice.SpliceLinkError, ["does not define the device function 'f'", "(it defines: g)"]),
    ("C++ name without extern C", lambda: _k1(_cu('__device__ float f(float x) '
                                                  '{ return x; }')),
     splice.SpliceLinkError, ['extern "C"']),
    ("missing PTX symbol", lambda: _k2(_ptx(name="nope")), splice.SpliceLinkError,
     ["does not define the device function 'nope'", "ptx_scale"]),
    ("PTX prototype arity", lambda: _k1(_ptx(sig="float32(float32)")), splice.SpliceLinkError,
     ["2 parameter(s), signature has 1"]),
    ("PTX parameter too small", lambda: _k2_64(_ptx(sig="float32(float32, float64)")),
     splice.SpliceLinkError, ["parameter 2 is", "cannot carry float64"]),
    ("PTX void mismatch", lambda: _kvoid(_ptx(sig="void(float32, float32)")),
     splice.SpliceLinkError, ["returns a value but the signature is void"]),
    (".entry instead of .func", lambda: _kvoid(_ptx(
        PTX.replace(".visible .func  (.param .b32 func_retval0) ptx_scale(",
                    ".visible .entry ptx_scale(").replace(
            "st.param.f32 \t[func_retval0+0], %f3;", ""), sig="void(float32, float32)")),
     splice.SpliceLinkError, ["is a kernel (.entry)"]),
    ("PTX .version too new", lambda: _k2(_ptx(PTX.replace(".version 8.0", ".version 99.0"))),
     splice.SpliceLinkError, [".version 99.0 is newer"]),
    ("sm_90a fragment on sm_80", lambda: (_k2(_ptx(PTX.replace(".target sm_80",
                                                               ".target sm_90a"))), "sm_80"),
     splice.SpliceLinkError, [".target sm_90a cannot run"]),
    ("sm_100 fragment on sm_90", lambda: _k2(_ptx(PTX.replace(".target sm_80",
                                                              ".target sm_100"))),
     splice.SpliceLinkError, [".target sm_100 cannot run"]),
    ("sm_90a fragment on sm_100", lambda: (_k2(_ptx(PTX.replace(".target sm_80",
                                                                ".target sm_90a"))), "sm_100"),
     splice.SpliceLinkError, [".target sm_90a cannot run"]),
    ("unsupported .target option", lambda: _k2(_ptx(PTX.replace(
        ".target sm_80", ".target sm_80, map_f64_to_f32"))),
     splice.SpliceLinkError, ["unsupported .target option"]),
    ("no .address_size", lambda: _k2(_ptx(PTX.replace(".address_size 64", ""))),
     splice.SpliceLinkError, [".address_size 64"]),
    ("no .version", lambda: _k2(_ptx(PTX.replace(".version 8.0", ""))),
     splice.SpliceLinkError, ["no .version"]),
    ("unbalanced braces", lambda: _k2(_ptx(PTX.replace("ret;\n}", "ret;\n"))),
     splice.SpliceLinkError, ["malformed PTX"]),
    ("unterminated comment", lambda: _k2(_ptx(PTX + "/* open")),
     splice.SpliceLinkError, ["unterminated /* comment"]),
    ("function defined twice", lambda: _k2(_ptx(PTX + PTX.split(".address_size 64")[1])),
     splice.SpliceLinkError, ["defined twice"]),
    ("instruction ptxas rejects", lambda: _k2(_ptx(PTX.replace("fma.rn.f32", "fma.bogus.f32"),
                                                   inline="never")),
     splice.SpliceToolchainError, ["ptxas rejected", "PTX text declared at"]),
    ("same symbol, different code", _kclash, splice.SpliceLinkError,
     ["both name the symbol 'ptx_scale'"]),
    ("fragment defines a kernel symbol", lambda: _k2(_ptx(
        PTX + "\n.visible .global .align 8 .b8 ___NV_TILE_LAUNCH_META_DATA___[64];\n")),
     splice.SpliceLinkError, ["which the kernel 'kern' itself defines"]),
    ("unresolved callee", lambda: _k1(_cu('extern "C" __device__ float h(float);\n'
                                          'extern "C" __device__ float f(float x) '
                                          '{ return h(x); }')),
     splice.SpliceLinkError, ["calls 'h'"]),
    ("inline='always' on a callee with a stack frame", lambda: _k1(_cu(
        'extern "C" __device__ float f(float x) { volatile float a[16];\n'
        '  for (int i = 0; i < 16; ++i) a[i] = x * i;\n  return a[(int)x & 15]; }',
        inline="always")), splice.SpliceLinkError, ["cannot be inlined", "stack frame"]),
    ("asm operand out of range", lambda: _kasm("mov.b32 $0, $3;", dtype=f32),
     splice.SpliceCallError, ["operand $3 does not exist"]),
    ("asm constraint mismatch", lambda: _kasm("mov.b32 $0, $1;", dtype=f32,
                                              constraints="=r,r"),
     splice.SpliceCallError, ["does not match operand $0"]),
    ("asm ptxas error", lambda: _kasm("mov.bogus $0, $1;", dtype=f32),
     splice.SpliceCompileError, ["rejected by ptxas", "mov.bogus"]),
    ("asm bad pack", lambda: _kasm("mov.b32 $0, $1;", dtype=f32, pack=3),
     splice.SpliceCallError, ["pack must be 1, 2, 4 or 8"]),
    ("asm outputs over 64 bits", lambda: _kasm("mov.b64 $0, 0;", dtype=(ct.float64, f32)),
     splice.SpliceCallError, ["at most 64 bits of outputs"]),
    ("unknown architecture", lambda: (K.ptx_kernel, "compute_90"),
     splice.SpliceToolchainError, ["unknown GPU architecture"]),
]


def _run(builder):
    made = builder()
    arch = "sm_90"
    if isinstance(made, tuple):
        made, arch = made
    splice.build(made, SIG, arch)


@pytest.mark.parametrize("row", BUILD_ROWS, ids=[r[0] for r in BUILD_ROWS])
def test_build_time_bad_input(row, tmp_path, monkeypatch):
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path / "cache"))
    _, builder, exc, needles = row
    with pytest.raises(exc) as info:
        _run(builder)
    text = str(info.value)
    for n in needles:
        assert n in text, f"{n!r} not in:\n{text}"
    assert cache.entries("kernel") == [], "a failed build left a kernel cache entry"
    assert list((tmp_path / "cache").rglob(".tmp-*")) == []


DECLARATION_ROWS = [
    ("malformed signature", lambda: _ptx(sig="float32(float32"), ["malformed signature"]),
    ("unsupported dtype", lambda: _ptx(sig="float32(complex64)"), ["unsupported extern"]),
    ("empty argument", lambda: _ptx(sig="float32(float32,)"), ["empty argument type"]),
    ("over 128 bits", lambda: _ptx(sig="float64(float64, float64, float64)"),
     ["at most 128 bits"]),
    ("C++ name for PTX", lambda: _ptx(name="my::f"), ["is a C++ name"]),
    ("bad symbol", lambda: _ptx(name="my f"), ["not a C identifier"]),
    ("reserved symbol", lambda: _ptx(name="__splice_x"), ["reserved"]),
    ("missing file", lambda: splice.extern.from_ptx("no/such.ptx", name="f",
                                                    signature="float32(float32)"),
     ["not found"]),
    ("path and text", lambda: splice.extern.from_ptx("x.ptx", ptx=PTX, name="f",
                                                     signature="float32(float32)"),
     ["exactly one of a path or ptx="]),
    ("bad pure", lambda: _ptx(pure="yes"), ["pure must be True or False"]),
    ("bad inline", lambda: _ptx(inline="sometimes"), ["inline must be"]),
    ("-arch option", lambda: _cu("x", options=["-arch=sm_80"]), ["set by splice"]),
    ("-Xptxas option", lambda: _cu("x", options=["-Xptxas", "-v"]), ["would be ignored"]),
    ("options as a string", lambda: _cu("x", options="-O3"), ["list of strings"]),
    ("bad macro name", lambda: _cu("x", defines={"1X": 2}), ["bad macro name"]),
    ("lambda without a name", lambda: splice.extern(source="x", signature="void()")(
        lambda: None), ["name="]),
]


@pytest.mark.parametrize("row", DECLARATION_ROWS, ids=[r[0] for r in DECLARATION_ROWS])
def test_declaration_time_bad_input(row):
    _, make, needles = row
    with pytest.raises(splice.SpliceDeclarationError) as info:
        make()
    for n in needles:
        assert n in str(info.value)


def test_catalogue_size():
    assert len(BUILD_ROWS) + len(DECLARATION_ROWS) >= 40
