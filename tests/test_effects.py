"""Which instructions ``splice.forms.effects`` counts as a side effect a pure extern may not have
(the kernel-level refusals are rows of ``test_bad_inputs.py``)."""

import pytest

from splice.forms.effects import _effect
from splice.ptxtools.ptx import Instruction


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
    # a bulk copy into shared memory: writes what other threads read, completes an mbarrier
    ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
     "an asynchronous write of shared memory"),
    ("cp.async.ca.shared.global", "an asynchronous write of shared memory"),
    ("cp.async.wait_group", "an asynchronous copy"),
    ("cp.async.bulk.prefetch.L2.global", None),
    ("stmatrix.sync.aligned.m8n8.x4.shared.b16", None),      # a collective: refused first
    ("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", None),
    ("tcgen05.st.sync.aligned.16x64b.x1.b32", None),
    ("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32",
     "an atomic or reduction"),
    ("sured.b.add.1d.u32.trap", "a surface reduction"),
    ("sust.b.1d.b32.trap", "a surface store"),
    ("suld.b.1d.b32.trap", None), ("tex.1d.v4.f32.s32", None),
    ("tensormap.replace.tile.global_address.global.b1024.b64", "a write of a tensor map"),
    ("discard.global.L2", "a discard of memory (its contents become undefined)"),
    ("mbarrier.arrive.shared::cta.b64", "an mbarrier operation"),
    ("mbarrier.try_wait.parity.shared::cta.b64", "an mbarrier operation"),
    ("fence.proxy.async", "a memory fence"), ("membar.gl", "a memory fence"),
    ("trap", "a trap (ends the launch)"), ("brkpt", "a breakpoint"),
    ("pmevent", "a performance-monitor event"),
    ("griddepcontrol.wait", "a grid dependency wait"),
    ("ld.mmio.relaxed.sys.global.b32", "a load of memory-mapped I/O"),
    ("clusterlaunchcontrol.query_cancel.is_canceled.pred.b128", None),
    ("ld.global.nc.v4.f32", None), ("ldu.global.f32", None), ("prefetch.global.L2", None),
    ("applypriority.global.L2::evict_normal", None), ("nanosleep.u32", None),
    ("alloca.u64", None), ("mapa.shared::cluster.u32", None), ("lop3.b32", None),
    ("vadd4.u32.u32.u32", None), ("fma.rn.f32", None),
    # not on the allow-list: a side effect until shown otherwise
    ("someday.new.op", "'someday', an instruction a pure call may not execute (it is not a "
                       "read, arithmetic or local-memory access)"),
])
def test_effect_of(opcode, what):
    assert _effect(Instruction(None, opcode, ("[x]", "y"))) == what


def test_printf_is_an_effect():
    call = Instruction(None, "call.uni", ("(retval0)", "vprintf", "(param0, param1)"))
    assert _effect(call) == "a printf"
    assert _effect(Instruction(None, "call", ("(r)", "helper", "(a)"))) is None


@pytest.mark.parametrize("target, what", [
    ("malloc", "a call of the device allocator (malloc)"),
    ("free", "a call of the device allocator (free)"),
    ("__assertfail", "an assertion (__assertfail ends the launch)"),
])
def test_device_runtime_calls_are_effects(target, what):
    assert _effect(Instruction(None, "call.uni", ("(retval0)", target, "(param0)"))) == what


# Writes of memory other threads or later kernels see: a pure extern doing one would be
# removed without a word when its result is unused.
@pytest.mark.parametrize("ins", [
    pytest.param(Instruction(None, "sust.b.1d.b32.trap", ("[s, {x}]", "{v}")), id="sust"),
    pytest.param(Instruction(None, "sured.b.add.1d.u32.trap", ("[s, {x}]", "v")),
                 id="sured"),
    pytest.param(Instruction(None, "tensormap.replace.tile.global_address.global.b1024.b64",
                             ("[tmap]", "addr")), id="tensormap.replace"),
    pytest.param(Instruction(None, "cp.async.bulk.shared::cluster.shared::cta.mbarrier::"
                                   "complete_tx::bytes", ("[dst]", "[src]", "16", "[bar]")),
                 id="cp.async.bulk to another CTA's shared memory"),
    pytest.param(Instruction(None, "discard.global.L2", ("[p]", "128")),
                 id="discard.global.L2"),
    pytest.param(Instruction(None, "call.uni", ("free", "(param0)")), id="free"),
])
def test_other_visible_writes_are_effects(ins):
    assert _effect(ins) is not None


_SURF_SRC = r'''
extern "C" __device__ float surf_put(unsigned long long surf, int i, float v) {
    surf1Dwrite(v, (cudaSurfaceObject_t)surf, i * 4);
    return v;
}'''


def test_pure_extern_writing_a_surface_is_refused():
    import cuda.tile as ct

    import splice
    from support import kernels as K
    surf_put = splice.extern(source=_SURF_SRC, name="surf_put",
                             signature="float32(uint64, int32, float32)")

    @splice.kernel
    def surf_kernel(x, y, surf: ct.uint64, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
        surf_put(surf, ct.bid(0), t)                  # result unused: a pure call may go
        ct.store(y, index=(ct.bid(0),), tile=t)
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.scalar(ct.uint64), 128)
    with pytest.raises(splice.SpliceLinkError, match=r"declared pure.*side effect.*pure=False"):
        splice.compile(surf_kernel, sig, "sm_90")
