"""Hand-written PTX kernels for the executor's semantic tests: an entry ``k`` with three
global pointers, and a per-element runner of a PTX snippet."""

from __future__ import annotations

import numpy as np

from .ptx_exec import Pointer, run

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"


def kernel(body: str, params: str = ".param .u64 out, .param .u64 a, .param .u64 b",
           regs: str = "", extra: str = "") -> str:
    """An entry ``k`` whose body may use %rd_out/%rd_a/%rd_b (the three pointers, global) and
    %idx (tid.x * 4 in a 64-bit register, added to each)."""
    return HEAD + extra + f"""
.visible .entry k({params})
{{
    .reg .b64 %rd_out, %rd_a, %rd_b, %idx, %rd<16>;
    .reg .b32 %r<32>;
    .reg .b16 %h<8>;
    .reg .f32 %f<16>;
    .reg .f64 %fd<8>;
    .reg .pred %p<8>;
    {regs}
    ld.param.u64 %rd_out, [out];
    ld.param.u64 %rd_a, [a];
    ld.param.u64 %rd_b, [b];
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %idx, %r0, 4;
    add.s64 %rd_out, %rd_out, %idx;
    add.s64 %rd_a, %rd_a, %idx;
    add.s64 %rd_b, %rd_b, %idx;
{body}
    ret;
}}
"""


def elementwise(op: str, a: np.ndarray, b: np.ndarray, out_dtype=None) -> np.ndarray:
    """Run ``op`` (PTX using %r1 = a[i], %r2 = b[i] as bits, writing %r3) on each element."""
    out = np.zeros(a.shape, out_dtype or a.dtype)
    body = f"""
    ld.global.b32 %r1, [%rd_a];
    ld.global.b32 %r2, [%rd_b];
    {op}
    st.global.b32 [%rd_out], %r3;"""
    run(kernel(body), "k", (1,), Pointer(out), Pointer(a), Pointer(b), block=(a.size,))
    return out
