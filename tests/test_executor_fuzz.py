"""Differential fuzzer: generated externs (CUDA C expressions over one to three arguments of
mixed element types, tiles or scalars) spliced into a cuTile kernel, run on the CPU
executor, compared bit for bit with NumPy computing the same expression.

CUDA C is compiled with ``-fmad=false`` so every float operation rounds once, as NumPy's do;
integer arithmetic runs in the unsigned type of the computation (wrapping, as NumPy's
fixed-width integers) and converts at the end. Cases per run: ``SPLICE_EXEC_FUZZ_EXAMPLES``
(default 4; ``.ci/run`` sets it), each a NVRTC + tileiras build (about a second).
"""

from __future__ import annotations

import os

import cuda.tile as ct
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import splice
from support import kernels as K
from support.ptx_exec import run_build

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float32", "float64"]
COMPUTE = ["int32", "uint32", "int64", "uint64", "float32", "float64"]
C_TYPE = {n: splice.ELEMENT_TYPES[n].c_type for n in INTS + FLOATS + ["bool"]}
UNSIGNED = {"int32": "uint32", "uint32": "uint32", "int64": "uint64", "uint64": "uint64"}


@st.composite
def expressions(draw, names: list[str], compute: str, depth: int = 0):
    """(C text, NumPy function of the argument arrays) of an expression in ``compute``."""
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()) or not names:
            c = draw(st.integers(-100, 100)) if compute in FLOATS else draw(st.integers(0, 1000))
            cval = np.dtype(compute).type(c)
            text = f"({C_TYPE[compute]}){c}" + (".0" if compute in FLOATS else "")
            return text, lambda env, cval=cval: np.full_like(env["_like"], cval,
                                                             dtype=compute)
        name = draw(st.sampled_from(names))
        return name, lambda env, name=name: env[name]
    ops = ["+", "-", "*"] + (["^", "&", "|", ">>", "<<"] if compute not in FLOATS else [])
    op = draw(st.sampled_from(ops))
    lt, lf = draw(expressions(names, compute, depth + 1))
    rt, rf = draw(expressions(names, compute, depth + 1))
    bits = np.dtype(compute).itemsize * 8
    if op in (">>", "<<"):
        text = f"({lt} {op} ({rt} & {bits - 1}))"
        npop = {">>": np.right_shift, "<<": np.left_shift}[op]
        return text, lambda env: npop(lf(env), rf(env) & np.dtype(compute).type(bits - 1))
    npop = {"+": np.add, "-": np.subtract, "*": np.multiply, "^": np.bitwise_xor,
            "&": np.bitwise_and, "|": np.bitwise_or}[op]
    return f"({lt} {op} {rt})", lambda env: npop(lf(env), rf(env))


def _convertible(src: str, dst: str) -> bool:
    """C's conversion and NumPy's astype agree (no float -> integer: out of range is UB)."""
    return not (src in FLOATS and dst not in FLOATS)


@st.composite
def cases(draw):
    compute = draw(st.sampled_from(COMPUTE))
    work = UNSIGNED.get(compute, compute)       # integer arithmetic wraps in unsigned
    nargs = draw(st.integers(1, 3))
    types = [draw(st.sampled_from([t for t in INTS + FLOATS + ["bool"]
                                   if _convertible(t, work)])) for _ in range(nargs)]
    while sum(splice.ELEMENT_TYPES[t].bits for t in types) > 128:
        types.pop()
    names = [f"a{i}" for i in range(len(types))]
    text, fn = draw(expressions(names, work))
    result = draw(st.sampled_from([t for t in INTS + FLOATS if _convertible(compute, t)]))
    scalar_first = len(types) > 1 and types[0] != "bool" and draw(st.booleans())
    tile = draw(st.sampled_from([32, 128, 256]))
    inline = draw(st.sampled_from(["auto", "never"]))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return types, names, text, fn, work, compute, result, scalar_first, tile, inline, seed


def _source(types, names, text, work, compute, result) -> str:
    params = ", ".join(f"{C_TYPE[t]} x{i}" for i, t in enumerate(types))
    decls = "".join(f"    {C_TYPE[work]} {n} = ({C_TYPE[work]})x{i};\n"
                    for i, n in enumerate(names))
    return (f'extern "C" __device__ {C_TYPE[result]} gen({params}) {{\n{decls}'
            f"    return ({C_TYPE[result]})({C_TYPE[compute]})({text});\n}}\n")


def _kernel(fn, nargs: int, scalar_first: bool):
    if nargs == 1:
        @splice.kernel
        def k1(x0, y, TILE: ct.Constant[int]):
            i = ct.bid(0)
            ct.store(y, index=(i,), tile=fn(ct.load(x0, index=(i,), shape=(TILE,))))
        return k1
    if nargs == 2 and scalar_first:
        @splice.kernel
        def k2s(s0, x1, y, TILE: ct.Constant[int]):
            i = ct.bid(0)
            ct.store(y, index=(i,), tile=fn(s0, ct.load(x1, index=(i,), shape=(TILE,))))
        return k2s
    if nargs == 2:
        @splice.kernel
        def k2(x0, x1, y, TILE: ct.Constant[int]):
            i = ct.bid(0)
            ct.store(y, index=(i,), tile=fn(ct.load(x0, index=(i,), shape=(TILE,)),
                                            ct.load(x1, index=(i,), shape=(TILE,))))
        return k2
    if scalar_first:
        @splice.kernel
        def k3s(s0, x1, x2, y, TILE: ct.Constant[int]):
            i = ct.bid(0)
            ct.store(y, index=(i,), tile=fn(s0, ct.load(x1, index=(i,), shape=(TILE,)),
                                            ct.load(x2, index=(i,), shape=(TILE,))))
        return k3s

    @splice.kernel
    def k3(x0, x1, x2, y, TILE: ct.Constant[int]):
        i = ct.bid(0)
        ct.store(y, index=(i,), tile=fn(ct.load(x0, index=(i,), shape=(TILE,)),
                                        ct.load(x1, index=(i,), shape=(TILE,)),
                                        ct.load(x2, index=(i,), shape=(TILE,))))
    return k3


def _data(t: str, n: int, rng) -> np.ndarray:
    if t == "bool":
        return rng.random(n) < 0.5
    if t in FLOATS:
        return (rng.standard_normal(n) * 8).astype(t)
    info = np.iinfo(t)
    return rng.integers(info.min, info.max, n, dtype=t, endpoint=True)


def _ct(t: str):
    return ct.bool_ if t == "bool" else getattr(ct, t)


@settings(max_examples=int(os.environ.get("SPLICE_EXEC_FUZZ_EXAMPLES", "4")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_generated_externs_compute_what_numpy_computes(case):
    types, names, text, fn, work, compute, result, scalar_first, tile, inline, seed = case
    src = _source(types, names, text, work, compute, result)
    sig = f"{result}({', '.join(types)})"
    ext = splice.extern(source=src, name="gen", signature=sig, inline=inline,
                        options=["-fmad=false"])(lambda *a: None)
    kernel = _kernel(ext, len(types), scalar_first)
    rng = np.random.default_rng(seed)
    n = 2 * tile
    args = [_data(t, n, rng) for t in types]
    if scalar_first:
        args[0] = args[0][:1].repeat(n)
    params = [K.scalar(_ct(types[0])) if scalar_first else K.array(_ct(types[0]))] + \
        [K.array(_ct(t)) for t in types[1:]] + [K.array(_ct(result)), tile]
    b = splice.compile(kernel, K.signature(*params), "sm_80")
    y = np.zeros(n, result)
    launch_args = [args[0][0] if scalar_first else args[0], *args[1:], y]
    run_build(b, (n // tile,), *launch_args)
    env = {name: a.astype(work) for name, a in zip(names, args)}
    env["_like"] = env[names[0]]
    with np.errstate(all="ignore"):
        want = np.asarray(fn(env)).astype(work).astype(compute).astype(result)
    np.testing.assert_array_equal(y, want, err_msg=f"{sig}\n{src}")


@pytest.mark.parametrize("types", [["float32", "float32"], ["int32", "int16"]])
def test_scalar_and_tile_share_one_slot(types):
    """The README's ``saxpy(a, t, 1.0)`` shape: a scalar and a tile element, two 32-bit
    arguments packed in one 64-bit slot (the second read from the slot's high bits)."""
    case = (types, ["a0", "a1"], "(a0 - a1)", lambda env: env["a0"] - env["a1"],
            UNSIGNED.get(types[0], types[0]), types[0], types[0], True, 128, "auto", 5)
    test_generated_externs_compute_what_numpy_computes.hypothesis.inner_test(case)


@st.composite
def control_cases(draw):
    """An extern ``T f(T a0, T a1)`` called in a loop (its result carried) and in both arms
    of a branch on the block index."""
    t = draw(st.sampled_from(COMPUTE))
    work = UNSIGNED.get(t, t)
    text, fn = draw(expressions(["a0", "a1"], work))
    return t, work, text, fn, draw(st.integers(0, 4)), draw(st.sampled_from(["auto", "never"])), \
        draw(st.integers(0, 2 ** 32 - 1))


def _control_kernel(fn):
    @splice.kernel
    def control(x0, x1, y, ITERS: ct.Constant[int], TILE: ct.Constant[int]):
        i = ct.bid(0)
        a = ct.load(x0, index=(i,), shape=(TILE,))
        b = ct.load(x1, index=(i,), shape=(TILE,))
        for _ in range(ITERS):
            a = fn(a, b)
        if i % 2 == 0:
            r = fn(a, b)
        else:
            r = fn(b, a)
        ct.store(y, index=(i,), tile=r)
    return control


@settings(max_examples=int(os.environ.get("SPLICE_EXEC_FUZZ_EXAMPLES", "4")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(control_cases())
def test_generated_externs_in_loops_and_branches(case):
    t, work, text, fn, iters, inline, seed = case
    src = _source([t, t], ["a0", "a1"], text, work, t, t)
    ext = splice.extern(source=src, name="gen", signature=f"{t}({t}, {t})", inline=inline,
                        options=["-fmad=false"])(lambda *a: None)
    tile, n = 128, 512
    rng = np.random.default_rng(seed)
    x0, x1 = _data(t, n, rng), _data(t, n, rng)
    y = np.zeros(n, t)
    sig = K.signature(K.array(_ct(t)), K.array(_ct(t)), K.array(_ct(t)), iters, tile)
    run_build(splice.compile(_control_kernel(ext), sig, "sm_80"), (n // tile,), x0, x1, y)

    def f(a, b):
        with np.errstate(all="ignore"):
            return np.asarray(fn({"a0": a.astype(work), "a1": b.astype(work),
                                  "_like": a.astype(work)})).astype(work).astype(t)
    a = x0
    for _ in range(iters):
        a = f(a, x1)
    even = (np.arange(n) // tile) % 2 == 0
    want = np.where(even, f(a, x1), f(x1, a))
    np.testing.assert_array_equal(y, want, err_msg=f"{iters} iterations\n{src}")
