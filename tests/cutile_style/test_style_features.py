"""Kernels using cuTile's language features, compiled to cubins in cuTile's test style: plain
they test cuTile, through ``-p splice.testing.dropin`` that splice compiles what cuTile does
(static_eval, static_iter, constant folding, unpacking, tuple comprehensions, enums,
helper functions, closures, tuple parameters, loops)."""

import enum
from io import BytesIO

import cuda.tile as ct
import pytest


def signature(*params):
    import splice
    return splice.kernel_signature(*params)


def export(kernel, params, arch="sm_90"):
    out = BytesIO()
    ct.compilation.export_kernel(kernel, [signature(*params)], out, gpu_code=arch,
                                 output_format="cubin")
    assert out.getvalue()[:4] == b"\x7fELF"


class Mode(enum.IntEnum):
    ADD = 1
    MUL = 2


def _combine(a, b, mode):
    if mode == Mode.ADD:
        return a + b
    return a * b


def test_static_eval_and_static_iter():
    @ct.kernel
    def kernel(x, n: ct.Constant[int]):
        t = ct.load(x, index=(0,), shape=(16,)) * ct.static_eval(n * 2)
        for i in ct.static_iter(range(n)):
            t = t + i
        ct.store(x, index=(0,), tile=t)

    export(kernel, ["array(float32)", 3])


def test_constant_folding_and_unpacking():
    @ct.kernel
    def kernel(x):
        shape = (8, 2)
        a, b = shape
        t = ct.load(x, index=(0,), shape=(a * b,))
        ct.store(x, index=(0,), tile=t * (a - b))

    export(kernel, ["array(float32)"])


def test_tuple_comprehension_and_helper():
    @ct.kernel
    def kernel(x, y):
        ts = tuple(ct.load(x, index=(i,), shape=(16,)) for i in ct.static_iter(range(2)))
        ct.store(y, index=(0,), tile=_combine(ts[0], ts[1], Mode.MUL))

    export(kernel, ["array(float32)", "array(float32)"])


@pytest.mark.parametrize("mode", [Mode.ADD, Mode.MUL])
def test_enum_constant(mode):
    @ct.kernel
    def kernel(x, m: ct.Constant[int]):
        t = ct.load(x, index=(0,), shape=(16,))
        ct.store(x, index=(0,), tile=_combine(t, t, m))

    export(kernel, ["array(float32)", int(mode)])


def test_closure_and_loop():
    k = 3

    @ct.kernel
    def kernel(x, y, n: ct.int32):
        acc = ct.zeros((16,), ct.float32)
        for i in range(n):
            acc = acc + ct.load(x, index=(i,), shape=(16,)) * k
        ct.store(y, index=(0,), tile=acc)

    export(kernel, ["array(float32)", "array(float32)", "scalar(int32)"])


def test_type_inference_across_branches():
    @ct.kernel
    def kernel(x, y, flag: ct.Constant[bool]):
        t = ct.load(x, index=(ct.bid(0),), shape=(16,))
        if flag:
            u = ct.astype(t, ct.float16)
        else:
            u = ct.astype(t * 2, ct.float16)
        ct.store(y, index=(ct.bid(0),), tile=u)

    export(kernel, ["array(float32)", "array(float16)", True])
    export(kernel, ["array(float32)", "array(float16)", False])


def test_two_dimensional_tiles_and_reduction():
    @ct.kernel
    def kernel(x, s):
        t = ct.load(x, index=(ct.bid(0), 0), shape=(4, 32))
        ct.store(s, index=(ct.bid(0),), tile=ct.sum(t, axis=1))

    export(kernel, ["array(float32, ndim=2)", "array(float32)"])


def test_one_compile_per_export_as_cutiles_dispatcher_tests_count():
    # cuTile's own tests count calls of its compile_tile by patching it
    from unittest.mock import patch

    import cuda.tile._compile

    @ct.kernel
    def kernel(x):
        ct.store(x, index=(0,), tile=ct.load(x, index=(0,), shape=(16,)) + 1)

    with patch("cuda.tile._compile.compile_tile",
               side_effect=cuda.tile._compile.compile_tile) as mock_compile:
        export(kernel, ["array(float32)"])
        assert mock_compile.call_count == 1
