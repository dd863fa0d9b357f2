"""``defines`` values are what a C preprocessor user means by them: ``True``/``False`` are 1
and 0 (``-DFAST=True`` made ``#if FAST`` false: ``True`` is an unknown identifier, 0 in
``#if``, so the fast path was silently compiled out)."""

import pytest

from splice.declare.declaring import check_options as _check_options
from splice.declare.externs import HEADER_PROVIDERS
from splice.inputs.fragments import CudaSource

SRC = """extern "C" __device__ int pick() {
#if FAST
    return 2;
#else
    return 1;
#endif
}
"""


@pytest.mark.parametrize("value, expect", [(True, "2"), (False, "1"), (1, "2"), (None, None)])
def test_a_bool_define_is_one_or_zero(value, expect):
    _, _, defs = _check_options((), (), {"FAST": value}, "t", None)
    if expect is None:
        assert defs == (("FAST", None),)
        return
    ptx = CudaSource(text=SRC, defines=defs, where="x.py:1",
                     providers=HEADER_PROVIDERS).module("sm_90").text
    assert f"mov.u32 \t%r1, {expect};" in ptx or f"mov.b32 \t%r1, {expect};" in ptx, ptx[-400:]
