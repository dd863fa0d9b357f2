"""Which instructions ``splice.effects`` counts as a side effect a pure extern may not have
(the kernel-level refusals are rows of ``test_bad_inputs.py``)."""

import pytest

from splice.effects import _effect
from splice.ptx import Instruction


@pytest.mark.parametrize("opcode, what", [
    ("st.global.f32", "a store to global memory"),
    ("st.global.relaxed.gpu.b32", "a store to global memory"),
    ("st.f32", "a store through a generic pointer"),
    ("st.volatile.b32", "a store through a generic pointer"),
    ("st.shared::cta.b32", "a store to shared memory"),
    ("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32", "a store to shared memory"),
    ("atom.global.add.u32", "an atomic or reduction"),
    ("atom.cas.b64", "an atomic or reduction"),
    ("red.shared.add.u32", "an atomic or reduction"),
    ("multimem.st.global.f32", "an atomic or reduction"),
    ("cp.async.bulk.global.shared::cta.bulk_group", "an asynchronous write of global memory"),
    ("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32",
     "an asynchronous write of global memory"),
    ("st.local.f32", None), ("st.param.b32", None), ("ld.global.f32", None),
    ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes", None),
    ("fma.rn.f32", None),
])
def test_effect_of(opcode, what):
    assert _effect(Instruction(None, opcode, ("[x]", "y"))) == what


def test_printf_is_an_effect():
    call = Instruction(None, "call.uni", ("(retval0)", "vprintf", "(param0, param1)"))
    assert _effect(call) == "a printf"
    assert _effect(Instruction(None, "call", ("(r)", "helper", "(a)"))) is None
