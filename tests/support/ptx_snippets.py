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


#: Module-level shared memory for :data:`MISALIGNED`'s shared-space cases.
CELL = ".shared .align 16 .b8 cell[64];\n"

#: Bodies for :func:`kernel` (with :data:`CELL`) whose access is not a multiple of its
#: whole width (a vector's included; what is loaded is stored, so that ptxas keeps the
#: load), and the opcode an error must name: a GPU traps with
#: "misaligned address" (CUDA_ERROR_MISALIGNED_ADDRESS).
MISALIGNED = [
    ("ld.global.b32 %r3, [%rd_a+2]; st.global.b32 [%rd_out], %r3;", "ld.global.b32"),
    ("ld.global.u16 %h1, [%rd_a+1]; st.global.u16 [%rd_out], %h1;", "ld.global.u16"),
    ("ld.global.v2.b32 {%r3, %r4}, [%rd_a+4]; add.u32 %r3, %r3, %r4;\n"
     "st.global.b32 [%rd_out], %r3;", "ld.global.v2.b32"),
    ("ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd_a+8]; add.rn.f32 %f1, %f1, %f2;\n"
     "add.rn.f32 %f3, %f3, %f4; add.rn.f32 %f1, %f1, %f3; st.global.f32 [%rd_out], %f1;",
     "ld.global.v4.f32"),
    ("st.global.b64 [%rd_out+4], %rd1;", "st.global.b64"),
    ("st.global.v2.f32 [%rd_out+4], {%f1, %f2};", "st.global.v2.f32"),
    ("atom.global.add.u32 %r3, [%rd_out+2], 1;", "atom.global.add.u32"),
    ("red.global.add.u64 [%rd_out+4], 1;", "red.global.add.u64"),
    ("ld.b32 %r3, [%rd_a+1]; st.global.b32 [%rd_out], %r3;", "ld.b32"),  # generic, onto global
    ("mov.u32 %r5, cell; ld.shared.b32 %r3, [%r5+2]; st.global.b32 [%rd_out], %r3;",
     "ld.shared.b32"),
    ("mov.u32 %r5, cell; st.shared.v4.b32 [%r5+4], {%r1, %r1, %r1, %r1};",
     "st.shared.v4.b32"),
    ("mov.u64 %rd5, cell; cvta.shared.u64 %rd5, %rd5; ld.b32 %r3, [%rd5+2];\n"
     "st.global.b32 [%rd_out], %r3;", "ld.b32"),
]

#: What :data:`MISALIGNED`'s bodies start with: the registers they read, defined.
MISALIGNED_PRELUDE = "mov.u64 %rd1, 0; mov.f32 %f1, 0f00000000; mov.f32 %f2, 0f00000000;\n" \
    "mov.u32 %r1, 0;\n"

#: A body for :func:`kernel` with the vector widths of :data:`MISALIGNED` at multiples of
#: their size: thread i stores a[b] + a[b + 3] + a[b + 2] + a[b + 3], b = (4 i & 0x70) / 4.
ALIGNED_VECTORS = """
    and.b64 %rd5, %idx, 0x70;
    sub.s64 %rd6, %rd_a, %idx;
    add.s64 %rd6, %rd6, %rd5;
    ld.global.v4.b32 {%r3, %r4, %r5, %r6}, [%rd6];
    ld.global.v2.b32 {%r7, %r8}, [%rd6+8];
    add.u32 %r3, %r3, %r6;
    add.u32 %r3, %r3, %r7;
    add.u32 %r3, %r3, %r8;
    st.global.b32 [%rd_out], %r3;"""
