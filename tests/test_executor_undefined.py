"""What a GPU does not run reliably, refused by the executor: misaligned global, shared and
generic accesses (a GPU traps with "misaligned address"), an ``.aligned`` barrier reached
by a diverged warp (undefined behaviour in the PTX ISA), and instruction modifiers the
executor does not model (refused, never ignored)."""

from __future__ import annotations

import numpy as np
import pytest

from support.ptx_exec import ExecError, Pointer, run
from support.ptx_snippets import (
    ALIGNED_VECTORS,
    CELL,
    MISALIGNED,
    MISALIGNED_PRELUDE,
    kernel,
)


def _run(body: str, n: int = 32, extra: str = "", out=None):
    out = np.zeros(n + 8, np.uint32) if out is None else out
    a = np.arange(n + 8, dtype=np.uint32)
    run(kernel(body, extra=extra), "k", (1,), Pointer(out), Pointer(a), Pointer(a),
        block=(n,))
    return out


@pytest.mark.parametrize("body,opcode", MISALIGNED)
def test_a_misaligned_access_is_an_error_naming_the_instruction(body, opcode):
    with pytest.raises(ExecError, match="misaligned address") as e:
        _run(MISALIGNED_PRELUDE + body, extra=CELL)
    assert opcode in str(e.value)


def test_aligned_vector_accesses_at_their_full_width_run():
    # the same widths at multiples of their size: the values arrive (no false alarm)
    out = _run(ALIGNED_VECTORS)
    base = (np.arange(32) * 4 & 0x70) // 4
    np.testing.assert_array_equal(out[:32], 4 * base + 0 + 3 + 2 + 3)   # [b], [b+3], [b+2], [b+3]


_DIVERGED = """
    setp.lt.u32 %p1, %r0, 16;
    @%p1 bra LOW;
    {bar} 0;
    bra.uni DONE;
LOW:
    {bar} 0;
DONE:
    st.global.b32 [%rd_out], %r0;"""


@pytest.mark.parametrize("bar", ["bar.sync", "barrier.sync.aligned", "bar.cta.sync",
                                 "barrier.cta.sync.aligned"])
def test_an_aligned_barrier_reached_by_a_diverged_warp_is_an_error(bar):
    with pytest.raises(ExecError, match=r"reached by warp 0 diverged: lanes 0-15 at k") as e:
        _run(_DIVERGED.replace("{bar}", bar), n=64)
    assert "Undefined behaviour" in str(e.value) and "lanes 16-31" in str(e.value)


def test_an_aligned_barrier_reduction_reached_by_a_diverged_warp_is_an_error():
    body = """
    setp.lt.u32 %p1, %r0, 8;
    @%p1 bra LOW;
    bar.red.popc.u32 %r3, 0, %p1;
    bra.uni DONE;
LOW:
    bar.red.popc.u32 %r3, 0, %p1;
DONE:
    st.global.b32 [%rd_out], %r3;"""
    with pytest.raises(ExecError, match="diverged"):
        _run(body, n=32)


def test_an_unaligned_barrier_may_be_reached_by_a_diverged_warp():
    # barrier.sync without .aligned is the form for divergent code: it orders the store
    extra = ".shared .align 4 .b32 cell;\n"
    body = """
    setp.eq.u32 %p2, %r0, 40;
    @%p2 st.shared.b32 [cell], %r0;
    setp.lt.u32 %p1, %r0, 16;
    @%p1 bra LOW;
    barrier.sync 0;
    bra.uni DONE;
LOW:
    barrier.sync 0;
DONE:
    ld.shared.b32 %r3, [cell];
    st.global.b32 [%rd_out], %r3;"""
    out = _run(body, n=64, extra=extra)
    assert (out[:64] == 40).all()


def test_an_aligned_barrier_after_the_warp_reconverges_runs():
    body = """
    setp.lt.u32 %p1, %r0, 16;
    @%p1 bra LOW;
    add.u32 %r3, %r0, 1;
    bra.uni DONE;
LOW:
    add.u32 %r3, %r0, 2;
DONE:
    bar.sync 0;
    st.global.b32 [%rd_out], %r3;"""
    out = _run(body, n=64)
    np.testing.assert_array_equal(out[:64], np.arange(64) + np.where(np.arange(64) < 16, 2, 1))


def test_an_aligned_barrier_some_lanes_of_a_warp_skip_is_an_error():
    # lanes 0-15 reach the counted barrier; 16-31 wait at another one for a warp that
    # never comes: on the GPU the warp is not converged at either
    body = """
    setp.lt.u32 %p1, %r0, 16;
    @%p1 bra LOW;
    bar.sync 2, 32;
    bra.uni DONE;
LOW:
    bar.sync 1, 32;
    bar.sync 1, 32;
DONE:"""
    with pytest.raises(ExecError, match="diverged|deadlock"):
        _run(body, n=64)


@pytest.mark.parametrize("op,modifier", [
    ("cvt.rs.satfinite.f16x2.f32 %r3, %f1, %f2, %r1;", ".rs"),     # stochastic rounding
    ("mad24.lo.sat.s32 %r3, %r1, %r1, %r1;", ".sat"),
    ("slct.ftz.f32.f32 %r3, %r1, %r1, %f1;", ".ftz"),
    ("fma.rn.oob.f16 %h1, %h2, %h2, %h2;", ".oob"),
    ("ld.param::entry.u64 %rd5, [out];", ".param::entry"),
    ("atom.global.add.noftz.f16 %h1, [%rd_out], %h2;", ".noftz"),
    ("ld.global.L1::evict_sometimes.b32 %r3, [%rd_a];", ".L1::evict_sometimes"),
    ("add.s32.wrap %r3, %r1, %r1;", ".wrap"),
])
def test_a_modifier_the_executor_does_not_model_is_refused_naming_it(op, modifier):
    body = MISALIGNED_PRELUDE + "mov.b16 %h2, 0;\n" + op
    with pytest.raises(ExecError, match="the executor does not model") as e:
        _run(body)
    assert modifier in str(e.value) and op.split()[0] in str(e.value)


def test_hints_and_orders_without_effect_on_one_cta_are_accepted_and_compute():
    body = """
    ld.global.nc.L1::evict_last.L2::256B.b32 %r1, [%rd_a];
    ld.relaxed.gpu.global.b32 %r2, [%rd_a];
    add.u32 %r3, %r1, %r2;
    st.global.wb.L1::no_allocate.b32 [%rd_out], %r3;
    atom.relaxed.gpu.global.add.u32 %r4, [%rd_out], 1;"""
    out = _run(body)
    np.testing.assert_array_equal(out[:32], 2 * np.arange(32) + 1)


def test_every_opcode_the_executor_implements_lists_its_modifiers():
    from support.ptx_exec import modifiers, ops
    handlers = {n[3:] for n in dir(ops.Gen) if n.startswith("op_")}
    assert handlers == set(modifiers.KNOWN)
