"""The bad-input catalogue: tables of distinct bad inputs, each row with the error type and
the message content it must produce (the fix, and the names the user wrote). Every row also
checks that its message names a file:line of the user's code (the declaration, the call
site or the kernel) and that the failure left nothing in the cache: no entry and no
temporary file (the only entries allowed are in ``FRAGMENT_KEPT``: NVRTC output of a source
that compiled, for rows whose mistake is found after it, e.g. at link time).

Declaration-time rows fail when the extern is declared; build-time rows when the kernel is
compiled (tracing, NVRTC, linking, rewriting, ptxas); usage rows when a splice function is
called wrongly (inspect, compile, calling device code from Python).
"""

import re
from pathlib import Path

import cuda.tile as ct
import pytest

import splice
from splice.system import cache
from support import kernels as K

f32 = ct.float32
HERE = Path(__file__).name
SRC = __file__
SIG = K.signature(K.array(f32), K.array(f32), 256)
PTX = K.PTX_SCALE


def _ptx(text=PTX, name="ptx_scale", sig="float32(float32, float32)", **kw):
    return splice.extern.from_ptx(ptx=text, name=name, signature=sig, **kw)


def _cu(src, name=None, sig="float32(float32)", **kw):
    return splice.extern(source=src, name=name or "f", signature=sig, **kw)(lambda *a: None)


CU = 'extern "C" __device__ float f(float x) { return x; }'
WHERE = re.compile(r"\w+\.py:\d+")


def _cu_path(path, **kw):
    def f(x: f32) -> f32: ...
    return splice.extern(path=path, **kw)(f)


def _from(entry, *args, **kw):
    return getattr(splice.extern, entry)(*args, name="f", signature="float32(float32)", **kw)


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


def _kscalar(ext):
    """``t * ext(sum(t))``: the 0-d call of a block- or warpgroup-scope extern, in a
    128-thread block (no TMA: not warp-specialised)."""
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        ct.store(y, index=(ct.bid(0),), tile=t * ext(ct.sum(t)), allow_tma=False)
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


def _karg(kind):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        if kind == "none":
            r = K.gelu_tanh(None)
        elif kind == "tuple":
            r = K.gelu_tanh((t, t))
        elif kind == "bool":
            r = K.gelu_tanh(ct.astype(t, ct.bool_))
        else:
            r = K.gelu_tanh(ct.bid(0))
        ct.store(y, index=(ct.bid(0),), tile=r)
    return kern


OVERLOADED = ('__device__ float sq(float x) { return x * x; }\n'
              '__device__ double sq(double x) { return x * x; }\n')


def _kclash():
    a, b = _ptx(), _ptx(PTX.replace("0f3F800000", "0f40000000"))

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=a(t, t) + b(t, t))
    return kern


VOID = 'extern "C" __device__ void v(float x) { }'
SHARED = ('extern "C" __device__ float f(float x) { __shared__ float s[32];\n'
          '  s[threadIdx.x % 32] = x; return s[(threadIdx.x + 1) % 32]; }')
# dynamic shared memory: cuTile gives its kernels none that splice can promise
DYNAMIC_SHARED = ('#include <splice_group.h>\n'
                  'extern "C" __device__ float f(float x) { extern __shared__ float d[];\n'
                  '  d[splice_group_rank()] = x; splice_group_sync(); return d[0]; }')
PAIR_STRUCT = 'struct R { float a; int b; };\nextern "C" __device__ R f(float x) { return {x, 1}; }'
AGGREGATE_PTX = PTX.replace("(.param .b32 func_retval0)", "(.param .align 4 .b8 func_retval0[12])")


def _kvoid_result(use):
    v = _cu(VOID, "v", "void(float32)")

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        r = v(t)
        ct.store(y, index=(ct.bid(0),), tile=r if use == "store" else r + 1.0)
    return kern


def _kpair(ext):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        a, b = ext(t)
        ct.store(y, index=(ct.bid(0),), tile=a + b)
    return kern


def _kpair2(ext):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        a, b = ext(t, t)
        ct.store(y, index=(ct.bid(0),), tile=a + b)
    return kern


def _ktwo_declarations():
    a = splice.extern(source=CU, name="f", signature="float32(float32)")
    b = splice.extern(source=CU, name="f", signature="float32(float32)", pure=False)

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=a(t) + b(t))
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
    ("sm_90 fragment on sm_80", lambda: (_k2(_ptx(PTX.replace(".target sm_80",
                                                              ".target sm_90"))), "sm_80"),
     splice.SpliceLinkError, [".target sm_90 cannot run on the kernel's sm_80",
                              f"called at {SRC}:"]),
    (".entry instead of .func", lambda: _kvoid(_ptx(
        PTX.replace(".visible .func  (.param .b32 func_retval0) ptx_scale(",
                    ".visible .entry ptx_scale(").replace(
            "st.param.f32 \t[func_retval0+0], %f3;", ""), sig="void(float32, float32)")),
     splice.SpliceLinkError, ["is a kernel (.entry)"]),
    ("PTX .version too new", lambda: _k2(_ptx(PTX.replace(".version 8.0", ".version 99.0"))),
     splice.SpliceLinkError, [".version 99.0 is newer", "extern 'ptx_scale' (declared at",
                              f"called at {SRC}:", "lower its .version to"]),
    ("sm_90a fragment on sm_80", lambda: (_k2(_ptx(PTX.replace(".target sm_80",
                                                               ".target sm_90a"))), "sm_80"),
     splice.SpliceLinkError, [".target sm_90a cannot run"]),
    ("sm_100 fragment on sm_90", lambda: _k2(_ptx(PTX.replace(".target sm_80",
                                                              ".target sm_100"))),
     splice.SpliceLinkError, [".target sm_100 cannot run", "extern 'ptx_scale' (declared at",
                              f"called at {SRC}:", "compile it for sm_90"]),
    ("sm_90a fragment on sm_100", lambda: (_k2(_ptx(PTX.replace(".target sm_80",
                                                                ".target sm_90a"))), "sm_100"),
     splice.SpliceLinkError, [".target sm_90a cannot run"]),
    ("unsupported .target option", lambda: _k2(_ptx(PTX.replace(
        ".target sm_80", ".target sm_80, map_f64_to_f32"))),
     splice.SpliceLinkError, ["unsupported .target option", f"called at {SRC}:",
                              "remove them"]),
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
     splice.SpliceToolchainError, ["unknown GPU architecture", "like 'sm_80'"]),
    # --- added for issue 9
    ("architecture older than sm_80", lambda: (K.ptx_kernel, "sm_70"),
     splice.SpliceToolchainError, ["targets sm_80 and newer"]),
    ("overloaded C++ function named plainly", lambda: _k1(_cu(OVERLOADED, "sq")),
     splice.SpliceCompileError, ["overloaded", 'name="::sq"', "extern 'sq'",
                                 "match the signature float32(float32)"]),
    ("LTO-IR bytes nvJitLink cannot read", lambda: _k1(splice.extern.from_ltoir(
        data=b"not LTO-IR", name="f", signature="float32(float32)")),
     splice.SpliceLinkError, ["is not LTO-IR", "nvcc -dlto"]),
    ("text that is not PTX", lambda: _k2(_ptx("hello world")),
     splice.SpliceLinkError, ["malformed PTX", "hello world"]),
    ("None as an extern argument", lambda: _karg("none"), splice.SpliceCallError,
     ["argument 1 is a value of type None", "extern 'gelu_tanh'", "in kernel 'kern'"]),
    ("tuple as an extern argument", lambda: _karg("tuple"), splice.SpliceCallError,
     ["argument 1 is a value of type Tuple", "tiles or scalars of float32"]),
    ("bool tile to a float32 parameter", lambda: _karg("bool"), splice.SpliceCallError,
     ["bool_ tile", ".astype(ct.float32)"]),
    ("int scalar to a float32 parameter", lambda: _karg("int"), splice.SpliceCallError,
     ["scalar int32", ".astype(ct.float32)"]),
    # --- element calls: results, snippets, what an element-scope callee may do
    ("void extern's result stored", lambda: _kvoid_result("store"), splice.SpliceCallError,
     ["InternalError (no message)", "void extern(s), whose result is None", "extern 'v'",
      "Do not use that result"]),
    ("void extern's result in arithmetic", lambda: _kvoid_result("add"),
     splice.SpliceCallError, ["Unsupported operand types for +: None",
                              "signature void(float32)", "Do not use that result"]),
    ("architecture tileiras lacks", lambda: (K.ptx_kernel, "sm_91"),
     splice.SpliceToolchainError, ["for sm_91: it supports sm_80", "sm_90", "pass one of them"]),
    ("fragment error names the arch asked for", lambda: _k1(_cu(
        'extern "C" __device__ float f(float x) { return y; }')),
     splice.SpliceCompileError, ["does not compile for sm_90 (PTX target sm_90a)"]),
    ("__global__ function under the extern's name", lambda: _k1(_cu(
        'extern "C" __global__ void f(float x) { }')), splice.SpliceCompileError,
     ["is a __global__ function, a kernel", 'declare it extern "C" __device__']),
    ("__shared__ in an element-scope extern", lambda: _k1(_cu(SHARED)),
     splice.SpliceLinkError, ["uses __shared__ memory", 'scope="block"', "called at"]),
    ("extern __shared__ in a warpgroup-scope extern", lambda: _kscalar(_cu(
        DYNAMIC_SHARED, scope="warpgroup")),
     splice.SpliceLinkError, ["uses dynamic shared memory ('d'", "extern __shared__",
                              "a static __shared__ array", "called at"]),
    ("extern __shared__ in a block-scope extern", lambda: _kscalar(_cu(
        DYNAMIC_SHARED.replace("splice_group_rank()", "threadIdx.x")
        .replace("splice_group_sync()", "__syncthreads()"), scope="block")),
     splice.SpliceLinkError, ["uses dynamic shared memory ('d'", "a static __shared__ array"]),
    ("pure extern with printf", lambda: _k1(_cu(
        'extern "C" __device__ float f(float x) { printf("%f", x); return x; }')),
     splice.SpliceLinkError, ["declared pure (the default)", "a printf", "pure=False"]),
    ("pure extern with an atomic", lambda: _k1(_cu(
        '__device__ int n;\nextern "C" __device__ float f(float x) { atomicAdd(&n, 1); '
        'return x; }')), splice.SpliceLinkError, ["an atomic or reduction", "pure=False"]),
    ("pure extern storing to global memory", lambda: _k1(_cu(
        '__device__ float g;\nextern "C" __device__ float f(float x) { g = x; return x; }')),
     splice.SpliceLinkError, ["a store to global memory", "st.global.f32", "pure=False"]),
    ("extern that exits the thread", lambda: _k1(_cu(
        'extern "C" __device__ float f(float x) { if (x < 0) asm volatile("exit;"); '
        'return x; }', pure=False)), splice.SpliceLinkError,
     ["executes 'exit;'", "Return from the function instead"]),
    ("#include <assert.h>", lambda: _k1(_cu('#include <assert.h>\nextern "C" __device__ '
                                            'float f(float x) { return x; }')),
     splice.SpliceCompileError, ["NVRTC declares device assert itself", "drop <assert.h>"]),
    ("one source declared twice", _ktwo_declarations, splice.SpliceLinkError,
     ["declared twice from one source", "splice.library(source=...)", "lib.extern('f'"]),
    ("result member of the wrong type", lambda: _kpair(_cu(
        PAIR_STRUCT, sig="(float32, float32)(float32)")), splice.SpliceCompileError,
     ["member 2 of the result of 'f' must be float"]),
    ("results from a function of other parameters", lambda: _kpair(_cu(
        PAIR_STRUCT.replace("float x", "double x"), sig="(float32, int32)(float32)")),
     splice.SpliceCompileError, ["must take exactly (float) (no conversion)"]),
    ("PTX aggregate result of the wrong size", lambda: _kpair2(_ptx(
        AGGREGATE_PTX, sig="(float32, float32)(float32, float32)")),
     splice.SpliceLinkError, ["12 bytes, aligned to 4", ".param .align 4 .b8 func_retval0[8]"]),
    ("asm ret", lambda: _kasm("mov.b32 $0, $1; ret;", dtype=f32), splice.SpliceCallError,
     ["'ret' leaves the snippet", "snippet: mov.b32 $0, $1; ret;"]),
    ("asm exit", lambda: _kasm("mov.b32 $0, $1; exit;", dtype=f32), splice.SpliceCallError,
     ["'exit' leaves the snippet"]),
    ("asm branch out of the snippet", lambda: _kasm("{ .reg .pred p; setp.eq.f32 p, $1, 0f0; "
                                                    "mov.b32 $0, $1; @p bra DONE; }",
                                                    dtype=f32),
     splice.SpliceCallError, ["DONE branches to a label the snippet does not define"]),
    ("asm output never written", lambda: _kasm("add.f32 $1, $1, 0f3F800000;", dtype=f32),
     splice.SpliceCallError, ["$0 are not written on every path"]),
]

#: Rows whose mistake is found after a CUDA C source compiled: its (correct) NVRTC output
#: may stay in the cache as a "fragment" entry; nothing else may.
FRAGMENT_KEPT = {"missing CUDA C symbol", "C++ name without extern C", "unresolved callee",
                 "inline='always' on a callee with a stack frame",
                 "__shared__ in an element-scope extern", "pure extern with printf",
                 "pure extern with an atomic", "pure extern storing to global memory",
                 "one source declared twice", "extern that exits the thread",
                 "extern __shared__ in a warpgroup-scope extern",
                 "extern __shared__ in a block-scope extern"}


#: Entries of facts about the installed toolchain, not results of the input: the include
#: walk of a source's CCCL headers and tileiras's bytecode version, each checked against
#: the files at every use (splice.inputs.headers, splice.system.toolchain.bytecode_version)
TOOLCHAIN_FACTS = {"walk", "probe"}


def _assert_nothing_cached(root: Path, row_id: str):
    kinds = {p.parent.parent.name for p in cache.entries()} - TOOLCHAIN_FACTS
    allowed = {"fragment"} if row_id in FRAGMENT_KEPT else set()
    assert kinds <= allowed, f"a failed {row_id!r} left cache entries: {cache.entries()}"
    assert list(root.rglob(".tmp-*")) == [], "a failed build left a temporary file"


def _assert_message(text: str, needles):
    for n in needles:
        assert n in text, f"{n!r} not in:\n{text}"
    assert WHERE.search(text), f"no file:line in:\n{text}"


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
    _assert_message(str(info.value), needles)
    _assert_nothing_cached(tmp_path / "cache", row[0])


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
    # --- added for issue 9: text or bytes where a path goes (every path-taking entry point)
    ("PTX text where from_ptx's path goes", lambda: splice.extern.from_ptx(
        PTX, name="ptx_scale", signature="float32(float32, float32)"),
     ["looks like PTX text", "splice.extern.from_ptx(ptx=...)", "extern 'ptx_scale'"]),
    ("PTX text where from_ltoir's path goes", lambda: _from("from_ltoir", PTX),
     ["looks like PTX text", "from_ptx(ptx=...)"]),
    ("PTX text where from_object's path goes", lambda: _from("from_object", PTX),
     ["looks like PTX text", "from_ptx(ptx=...)"]),
    ("CUDA C text where extern's path= goes", lambda: _cu_path(CU),
     ["looks like CUDA C text", "splice.extern(source=...)", "extern 'f'"]),
    ("CUDA C text where library's path= goes", lambda: splice.library(path=CU),
     ["looks like CUDA C text", "splice.library(source=...)", "library at"]),
    ("LTO-IR bytes where from_ltoir's path goes", lambda: _from("from_ltoir", b"\x7fELF" * 8),
     ["32 bytes, not a path", "from_ltoir(data=...)"]),
    ("string too long for a file name", lambda: _from("from_object", "x" * 300),
     ["too long for a file name"]),
    ("number as a path", lambda: _from("from_ptx", 42),
     ["a path must be a str or os.PathLike, got int"]),
    ("NUL in a path", lambda: _from("from_ptx", "a\0b.ptx"), ["newline or NUL"]),
    ("directory as a path", lambda: _from("from_ptx", "corpus"), ["is a directory"]),
    ("missing .cu file", lambda: _cu_path("no/such.cu"), ["not found", "no/such.cu"]),
    # --- a file of another kind: one table of suffixes (splice.fragments.FILE_KINDS)
    (".ptx file to extern(path=)", lambda: _cu_path("f.ptx"),
     ["f.ptx is a .ptx file", "use splice.extern.from_ptx"]),
    (".ltoir file to extern(path=)", lambda: _cu_path("f.ltoir"),
     ["use splice.extern.from_ltoir"]),
    (".cubin file to extern(path=)", lambda: _cu_path("f.cubin"),
     ["use splice.extern.from_object"]),
    (".o file to library(path=)", lambda: splice.library(path="f.o"),
     ["use splice.extern.from_object"]),
    (".cu file to from_ptx", lambda: _from("from_ptx", "f.cu"),
     ["use splice.extern(path=...) or splice.library(path=...)"]),
    (".a file to from_ltoir", lambda: _from("from_ltoir", "libf.a"),
     ["use splice.extern.from_object"]),
    (".ptx file to from_object", lambda: _from("from_object", "f.ptx"),
     ["use splice.extern.from_ptx"]),
    # --- a file name where text goes (the mirror image)
    ("file name as source=", lambda: _cu("kernels/f.cu"),
     ["source='kernels/f.cu' is a file name", "splice.extern(path=...)"]),
    ("file name as library source=", lambda: splice.library("f.cuh"),
     ["source='f.cuh' is a file name", "splice.library(path=...)"]),
    ("file name as ptx=", lambda: _ptx("f.ptx"),
     ["ptx='f.ptx' is a file name", "splice.extern.from_ptx(path, ...)"]),
    # --- arguments of the wrong kind
    ("empty ptx=", lambda: _ptx(""), ["ptx= is empty"]),
    ("empty LTO-IR data=", lambda: splice.extern.from_ltoir(data=b"", name="f",
                                                            signature="float32(float32)"),
     ["data= is empty", "nvcc -dlto"]),
    ("PTX as bytes", lambda: _ptx(PTX.encode()), ["ptx must be PTX text (str), got bytes"]),
    ("LTO-IR data as text", lambda: splice.extern.from_ltoir(data="x", name="f",
                                                             signature="float32(float32)"),
     ["data must be LTO-IR bytes, got str"]),
    ("LTO-IR path and data", lambda: _from("from_ltoir", "f.ltoir", data=b"x"),
     ["exactly one of a path or data="]),
    ("library with neither source nor path", lambda: splice.library(),
     ["exactly one of source= or path="]),
    ("CUDA C source as bytes", lambda: splice.extern(source=CU.encode(), name="f",
                                                     signature="float32(float32)")(
        lambda x: None), ["source must be CUDA C text (str), got bytes"]),
    ("include_dirs not a list", lambda: _cu(CU, include_dirs=3),
     ["include_dirs must be a list of directory paths"]),
    ("defines not a dict", lambda: _cu(CU, defines=["N=4"]), ["defines must be a dict"]),
    ("option that is not a string", lambda: _cu(CU, options=["-O3", 3]),
     ["options must be a list of strings"]),
    ("non-callable stub to lib.extern", lambda: splice.library(source=CU).extern("f")("f"),
     ["takes a typed stub function", "got str"]),
    ("extern used without arguments", lambda: splice.extern(_stub_f),
     ["@splice.extern(source=...)", "with arguments", f"{SRC}:"]),
    ("signature not a string", lambda: _ptx(sig=3), ["signature must be a string, got int"]),
    ("arrow-style signature", lambda: _ptx(sig="(float32) -> float32"),
     ["malformed signature", "'float32(float32, int32)'"]),
    ("no signature for PTX", lambda: _ptx(sig=None), ["signature= is required"]),
    ("pointer result", lambda: _ptx(sig="float32*(float32)"),
     ["an extern cannot return a pointer"]),
    ("stub arity differs from the signature", lambda: splice.extern(
        source=CU, signature="float32(float32, float32)")(_stub_f),
     ["the stub takes 1 parameter(s)", "has 2"]),
    ("stub without annotations", lambda: splice.extern(source=CU)(_stub_unannotated),
     ["parameter 'x' has no dtype annotation"]),
    # --- options, defines and include directories
    ("a define that is a list", lambda: _cu(CU, defines={"N": [1, 2]}),
     ["defines['N'] is [1, 2]", "a str, int, bool or None"]),
    ("a define that is a float", lambda: _cu(CU, defines={"N": 2.5}),
     ["write a float as text, e.g. '2.5f'"]),
    ("a macro in defines= and options", lambda: _cu(CU, options=["-DFOO=1.0f"],
                                                    defines={"FOO": "2.0f"}),
     ["macro 'FOO' is defined both in defines= and by option '-DFOO=1.0f'",
      "define it once"]),
    ("missing include directory", lambda: _cu(CU, include_dirs=["/no/such/dir"]),
     ["include directory '/no/such/dir' (include_dirs) is not a directory"]),
    ("missing -I directory", lambda: _cu(CU, options=["-I/no/such/dir"]),
     ["(option '-I/no/such/dir') is not a directory"]),
    ("-I without a directory", lambda: _cu(CU, options=["-I"]),
     ["option '-I' has no value", "'-I/path/to/dir'"]),
    # --- several results
    ("results over 64 bits", lambda: _ptx(sig="(float64, float32)(float32)"),
     ["need 96 bits", "at most 64 bits of results", "through a pointer argument"]),
    ("a tuple of one result", lambda: _ptx(sig="(float32,)(float32)"),
     ["at least two dtypes", "write one dtype"]),
    ("results from a binary object", lambda: splice.extern.from_object(
        "f.cubin", name="f", signature="(float32, float32)(float32)"),
     ["a binary object does not carry", "PTX, LTO-IR or CUDA C"]),
    ("results from a symbol that is no C identifier", lambda: _cu(
        CU, name="my f", sig="(float32, float32)(float32)"), ["not a C identifier"]),
    ("block-scope results", lambda: _cu(CU, sig="(float32, float32)(float32)", scope="block"),
     ["a block-scope extern returns one scalar"]),
]


def _stub_f(x: f32) -> f32: ...


def _stub_unannotated(x): ...


def _kern_for_usage():
    return _k1(K.gelu_tanh)


def _no_gpu(*_args):
    raise OSError("libcuda.so.1: cannot open shared object file: No such file or directory")


# (id, make, error type, message needles): a splice function called wrongly. Every row runs
# as on a machine without a GPU (cuTile's device query raises as it does there).
USAGE_ROWS = [
    ("stub-less extern called from Python", lambda: splice.extern(
        source=CU, name="f", signature="float32(float32)")(3), splice.SpliceCallError,
     ["extern 'f'", "called from Python at", f"{SRC}:", "inside a @splice.kernel"]),
    ("inspect(signature=) without arch= and no GPU", lambda: _kern_for_usage().inspect(
        signature=SIG), splice.SpliceToolchainError,
     ["kernel 'kern'", "without arch=", "arch='sm_90'", "libcuda.so.1"]),
    ("inspect(*args) without a GPU", lambda: _kern_for_usage().inspect(None, None, 256),
     splice.SpliceToolchainError, ["with launch arguments", "arch='sm_90'"]),
    ("inspect() with nothing", lambda: _kern_for_usage().inspect(),
     splice.SpliceDeclarationError, ["launch arguments, or signature="]),
    ("compile with a string signature", lambda: splice.compile(_kern_for_usage(),
                                                               "float32(float32)", "sm_90"),
     splice.SpliceDeclarationError, ["must be a cuda.tile.compilation.KernelSignature",
                                     "kernel 'kern'"]),
    ("compile with signature None", lambda: splice.compile(_kern_for_usage(), None, "sm_90"),
     splice.SpliceDeclarationError, ["must be a cuda.tile.compilation.KernelSignature",
                                     "kernel 'kern'", "got None"]),
    ("compile with [None] as signatures", lambda: splice.compile(_kern_for_usage(), [None],
                                                                 "sm_90"),
     splice.SpliceDeclarationError, ["must be a cuda.tile.compilation.KernelSignature"]),
    ("@splice.kernel on a non-function", lambda: splice.kernel(5),
     splice.SpliceDeclarationError, ["@splice.kernel", f"{SRC}:", "got int 5",
                                     "decorate a def"]),
    ("@splice.kernel opt_level out of range", lambda: splice.kernel(opt_level=9)(_stub_f),
     splice.SpliceDeclarationError, ["@splice.kernel '_stub_f'", "opt_level", "got 9"]),
    ("@splice.kernel num_ctas not a power of 2", lambda: splice.kernel(num_ctas=3)(_stub_f),
     splice.SpliceDeclarationError, ["@splice.kernel '_stub_f'", "num_ctas", "power of 2"]),
    ("@splice.kernel option of the wrong type", lambda: splice.kernel(opt_level="fast")(
        _stub_f), splice.SpliceDeclarationError, ["@splice.kernel '_stub_f'", "'fast'"]),
    ("@splice.kernel option given a bool", lambda: splice.kernel(num_worker_warps=True)(
        _stub_f), splice.SpliceDeclarationError, ["@splice.kernel '_stub_f'",
                                                  "num_worker_warps must be an int, not a bool"]),
    ("replace_hints with a bad value", lambda: _kern_for_usage().replace_hints(opt_level=9),
     splice.SpliceDeclarationError, ["@splice.kernel 'kern'", "opt_level=9"]),
    ("replace_hints with an unknown hint", lambda: _kern_for_usage().replace_hints(
        opt_levle=2), splice.SpliceDeclarationError, ["@splice.kernel 'kern'", "opt_levle"]),
    ("compile a plain function", lambda: splice.compile(_stub_f, SIG, "sm_90"),
     splice.SpliceDeclarationError, ["decorate the kernel function with @splice.kernel",
                                     "_stub_f"]),
    ("extern called from Python", lambda: K.gelu_tanh(1.0), splice.SpliceCallError,
     ["extern 'gelu_tanh'", f"called from Python at {SRC}:", "inside a @splice.kernel"]),
    ("splice.asm called from Python", lambda: splice.asm("mov.b32 $0, $1;", 1.0, dtype=f32),
     splice.SpliceCallError, [f"called from Python at {SRC}:", "inside a @splice.kernel"]),
    ("export_kernel to a directory", lambda: splice.export_kernel(
        _kern_for_usage(), [SIG], Path(SRC).parent, gpu_code="sm_90"),
     splice.SpliceDeclarationError, ["cannot write the cubin", "is a directory",
                                     "kernel 'kern'"]),
    ("export_kernel into a missing directory", lambda: splice.export_kernel(
        _kern_for_usage(), [SIG], "/no/such/dir/k.cubin", gpu_code="sm_90"),
     splice.SpliceDeclarationError, ["which does not exist; create it first"]),
]


@pytest.mark.parametrize("row", DECLARATION_ROWS, ids=[r[0] for r in DECLARATION_ROWS])
def test_declaration_time_bad_input(row, tmp_path, monkeypatch):
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path / "cache"))
    _, make, needles = row
    with pytest.raises(splice.SpliceDeclarationError) as info:
        make()
    _assert_message(str(info.value), needles)
    _assert_nothing_cached(tmp_path / "cache", row[0])


@pytest.mark.parametrize("row", USAGE_ROWS, ids=[r[0] for r in USAGE_ROWS])
def test_usage_bad_input(row, tmp_path, monkeypatch):
    from splice.system import _cutile
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_cutile, "get_compute_capability", _no_gpu)
    _, make, exc, needles = row
    with pytest.raises(exc) as info:
        make()
    _assert_message(str(info.value), needles)
    _assert_nothing_cached(tmp_path / "cache", row[0])


def test_catalogue_rows_are_distinct():
    rows = BUILD_ROWS + DECLARATION_ROWS + USAGE_ROWS
    assert len({r[0] for r in rows}) == len(rows)


def test_catalogue_size():
    assert len(BUILD_ROWS) + len(DECLARATION_ROWS) + len(USAGE_ROWS) >= 80


def test_user_error_comes_before_header_warnings_in_the_log():
    """CCCL and the CUDA headers warn (#1444-D, deprecated double4) in some forty lines
    before NVRTC reports the user's error: the log shows the error first."""
    from splice.inputs.cccl import include_dirs
    if not include_dirs():
        pytest.skip("needs CCCL")
    src = ('#include <cub/block/block_reduce.cuh>\n'
           'extern "C" __device__ float f(float x) { return x +* 1.0f; }')
    with pytest.raises(splice.SpliceCompileError) as e:
        splice.build(_k1(_cu(src, options=["-std=c++17"], include_dirs=include_dirs())),
                     SIG, "sm_90")
    log = e.value.log
    assert 'operand of "*" must be a pointer' in log
    assert "warning" not in log or log.index('operand of "*"') < log.index("warning")
    assert sorted(log.splitlines()) == sorted(
        splice.inputs.cuda_compile.errors_first(log).splitlines())


def test_errors_first_keeps_every_line():
    from splice.inputs.cuda_compile import errors_first
    log = ("h.hpp(1): warning #1444-D: deprecated\n  code\n     ^\n\n"
           "src(2): error: bad\n  x +* 1\n\n1 error detected\n")
    out = errors_first(log)
    assert out.startswith("src(2): error: bad\n  x +* 1")
    assert sorted(out.splitlines()) == sorted(log.splitlines())


def test_summary_names_a_register_call_target_as_such():
    b = splice.compile(_k1(_cu('extern "C" __device__ float f(float x) { printf("%f", x); '
                               'return x; }', pure=False)), SIG, "sm_90")
    if b.sass is None:
        pytest.skip("needs nvdisasm")
    text = b.summary()
    assert re.search(r"SASS CALLs through a register \(CUDA's printf calls vprintf so; or "
                     r"a function pointer\): U?R\d+: \d+", text), text
    assert not re.search(r"other device functions \(called by the fragments\): U?R\d+", text)


def test_one_function_with_two_scopes_from_a_library():
    """The fix the 'one source declared twice' row names: one library, one declaration per
    scope."""
    lib = splice.library(source='extern "C" __device__ float twice(float x) { return 2 * x; }')
    each = lib.extern("twice", signature="float32(float32)")
    block = lib.extern("twice", signature="float32(float32)", scope="block")

    @splice.kernel
    def kern(x, y, s: float, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=each(t) + block(s))
    b = splice.compile(kern, K.signature(K.array(f32), K.array(f32), K.scalar(f32), 256),
                       "sm_90")
    assert [site.scope for site in b.sites] == ["element", "block"]


def test_kernel_without_python_source_is_a_declaration_error(tmp_path, monkeypatch):
    """cuTile compiles a kernel from its Python source: a kernel (or a function it calls)
    defined where Python keeps none (exec, the interactive interpreter) is refused with a
    SpliceDeclarationError naming it and the fix, not inspect's OSError."""
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path / "cache"))
    scope = {"ct": ct, "splice": splice}
    exec("@splice.kernel\n"
         "def sourceless(x, y, TILE: ct.Constant[int]):\n"
         "    ct.store(y, index=(ct.bid(0),), tile=ct.load(x, index=(ct.bid(0),), "
         "shape=(TILE,)))\n", scope)
    with pytest.raises(splice.SpliceDeclarationError) as e:
        splice.compile(scope["sourceless"], SIG, "sm_90")
    msg = str(e.value)
    assert "kernel 'sourceless' (<string>:" in msg, msg
    assert "Python source" in msg and "define it in a .py file" in msg, msg
    _assert_nothing_cached(tmp_path / "cache", "sourceless kernel")
