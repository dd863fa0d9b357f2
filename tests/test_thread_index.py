"""splice.analysis.thread_index: a guard's derivation from %tid.x evaluated for every thread, with
PTX's integer semantics (each checked against NumPy's), and what it refuses to evaluate."""

from __future__ import annotations

import numpy as np
import pytest

from splice.analysis.thread_index import guard_values
from splice.ptxtools.ptx import Module

THREADS = 128
_tid = np.arange(THREADS, dtype=np.uint32)


def _guard(lines: str, threads: int = THREADS, guard: str = "%p1"):
    """guard_values of ``guard`` before ``@guard bra`` after ``lines`` in a kernel."""
    text = (f".visible .entry k(.param .u64 k_p0) .reqntid {threads} {{\n"
            ".reg .pred %p<4>; .reg .b16 %rs<8>; .reg .b32 %r<8>; .reg .b64 %rd<8>;\n"
            f"{lines}\n@{guard} bra $L;\n$L:\nret;\n}}\n")
    m = Module(text)
    body = m.body(m.functions["k"])
    use = next(i for i, (_, ins) in enumerate(body.parsed) if ins and ins.base == "bra")
    return guard_values(guard, body, use, threads)


def _where(values) -> np.ndarray:
    return np.array(values, dtype=bool)


# each derivation, the same computation in NumPy
_SEMANTICS = {
    "signed shift right of a negative value":
        ("mov.u32 %r1, %tid.x; sub.s32 %r2, %r1, 64; shr.s32 %r3, %r2, 3;"
         "setp.lt.s32 %p1, %r3, -4;", (_tid.astype(np.int32) - 64) >> 3 < -4),
    "unsigned shift right of the same bits":
        ("mov.u32 %r1, %tid.x; sub.s32 %r2, %r1, 64; shr.u32 %r3, %r2, 28;"
         "setp.ne.b32 %p1, %r3, 0;", ((_tid - np.uint32(64)) >> np.uint32(28)) != 0),
    "sign extension of a 16-bit value":
        ("mov.u32 %r1, %tid.x; cvt.u16.u32 %rs1, %r1; sub.s16 %rs2, %rs1, 100;"
         "cvt.s64.s16 %rd1, %rs2; setp.lt.s64 %p1, %rd1, 0;",
         (_tid.astype(np.int16) - np.int16(100)) < 0),
    "zero extension of the same value":
        ("mov.u32 %r1, %tid.x; cvt.u16.u32 %rs1, %r1; sub.s16 %rs2, %rs1, 100;"
         "cvt.u64.u16 %rd1, %rs2; setp.gt.u64 %p1, %rd1, 65500;",
         (_tid.astype(np.uint16) - np.uint16(100)).astype(np.uint64) > 65500),
    "signed wide product":
        ("mov.u32 %r1, %tid.x; sub.s32 %r2, %r1, 100; mul.wide.s32 %rd1, %r2, 1000000;"
         "setp.lt.s64 %p1, %rd1, -5000000;",
         (_tid.astype(np.int64) - 100) * 1000000 < -5000000),
    "low product wraps":
        ("mov.u32 %r1, %tid.x; mul.lo.u32 %r2, %r1, 0x4000000; setp.eq.b32 %p1, %r2, 0;",
         (_tid * np.uint32(0x4000000)) == 0),
    "unsigned compare of a signed value (lo)":
        ("mov.u32 %r1, %tid.x; sub.s32 %r2, %r1, 10; setp.lo.s32 %p1, %r2, 5;",
         (_tid - np.uint32(10)) < 5),
    "shift amount past the width clamps":
        ("mov.u32 %r1, %tid.x; shl.b32 %r2, %r1, 40; setp.eq.b32 %p1, %r2, 0;",
         np.ones(THREADS, bool)),
    "xor, or, not":
        ("mov.u32 %r1, %tid.x; xor.b32 %r2, %r1, 0x55; or.b32 %r3, %r2, 0b11;"
         "not.b32 %r4, %r3; setp.hi.u32 %p1, %r4, 0xFFFFFFA0;",
         ~((_tid ^ np.uint32(0x55)) | np.uint32(3)) > np.uint32(0xFFFFFFA0)),
}


@pytest.mark.parametrize("case", sorted(_SEMANTICS))
def test_evaluated_like_numpy(case):
    lines, expect = _SEMANTICS[case]
    assert expect.any() and not expect.all() or case.startswith("shift amount")
    np.testing.assert_array_equal(_where(_guard(lines)), expect)


def test_negated_guard():
    got = _guard("mov.u32 %r1, %tid.x; setp.eq.b32 %p1, %r1, 0;", guard="!%p1")
    assert got == tuple(t != 0 for t in range(THREADS))


def test_block_size_bounds_the_threads():
    # cvt.u8 keeps every tid.x of 256 threads, not of 257
    lines = ("mov.u32 %r1, %tid.x; cvt.u8.u32 %rs1, %r1; cvt.u32.u8 %r2, %rs1;"
             "setp.ne.b32 %p1, %r2, 0;")
    assert _guard(lines, 256) == tuple(t != 0 for t in range(256))
    assert _guard(lines, 257)[256] is False


@pytest.mark.parametrize("lines", [
    "mov.u32 %r1, %ntid.x; setp.ne.b32 %p1, %r1, 0;",                       # not tid.x
    "ld.param.u32 %r1, [k_p0]; setp.ne.b32 %p1, %r1, 0;",                   # a load
    "mov.u32 %r1, %tid.x; cvt.rni.u32.u32 %r2, %r1; setp.ne.b32 %p1, %r2, 0;",  # rounding
    "mov.u32 %r1, %tid.x; add.sat.s32 %r2, %r1, 1; setp.ne.b32 %p1, %r2, 0;",   # .sat
    "mov.u32 %r1, %tid.x; add.cc.u32 %r2, %r1, 1; setp.ne.b32 %p1, %r2, 0;",    # .cc
    "mov.u32 %r1, %tid.x; setp.ne.b64 %p1, %r1, 0;",                        # width mismatch
    "mov.u32 %r1, %tid.x; add.u32 %r2, %r3, 1; add.u32 %r3, %r2, 1;"
    "setp.ne.b32 %p1, %r2, 0;",                                              # a cycle
    "mov.u32 %r1, %tid.x; setp.ne.f32 %p1, %r1, 0f00000000;",               # floats
    "mov.u32 %r1, %tid.x; setp.ne.and.b32 %p1, %r1, 0, %p2;",               # combined
    "mov.u32 %r1, %tid.x; setp.ne.b32 %p1|%p2, %r1, 0;",                    # a pair
    "mov.u32 %r1, %tid.x; selp.b32 %r2, 1, 0, %p3; setp.ne.b32 %p1, %r2, 0;",
    "mov.u32 %r1, %tid.x; call (%r1), f, (%r1); setp.ne.b32 %p1, %r1, 0;",  # a call's return
])
def test_not_evaluated(lines):
    assert _guard(lines) is None
