"""Element-scope calls that execute warp-, warpgroup-, CTA- or cluster-collective
instructions are refused (DESIGN.md F13: accepted before, a silent miscompile): CUDA C,
PTX, LTO-IR, splice.asm and binary objects, reached directly or through callees of callees.
Look-alikes that run correctly on one thread are accepted."""

import inspect
import re
import types
from pathlib import Path

import cuda.tile as ct
import pytest

import splice
from splice.analysis import collectives
from splice.forms import element_callees
from splice.inputs import cccl
from splice.ptxtools.ptx import Module
from splice.system import cache, toolchain
from support import kernels as K

SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 256)
HERE = Path(__file__).name


def _kern(ext):
    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t))
    return kern


def _call_site_of(factory, text="ext(t)") -> str:
    """A pattern for "file:line" of the first line of ``factory`` holding ``text``."""
    lines, first = inspect.getsourcelines(factory)
    n = next(i for i, ln in enumerate(lines) if text in ln)
    return rf"\S*{re.escape(HERE)}:{first + n}\b"


def _refused(kernel, sig=SIG) -> str:
    """Build, expect the refusal, and check that nothing was cached for the kernel."""
    before = set(cache.entries("kernel"))
    with pytest.raises(splice.SpliceLinkError) as info:
        splice.build(kernel, sig, "sm_90")
    assert set(cache.entries("kernel")) == before
    return str(info.value)


def _cuda(body: str, pure=True, **kw):
    src = 'extern "C" __device__ float f(float x) {' + body + '}\n'
    return splice.extern(source=src, name="f", signature="float32(float32)", pure=pure,
                         **kw)(lambda x: None)


# ---------------------------------------------------------------------------------------------
# The table, against opcodes as the PTX ISA 9.4 spells them.

ISA_OPCODES = [
    # (opcode, the row it must match, or None: not collective)
    ("bar.sync", "bar"), ("bar.cta.sync", "bar"), ("bar.arrive", "bar"),
    ("bar.red.popc.u32", "bar"), ("bar.cta.red.and.pred", "bar"),
    ("barrier.sync", "barrier"), ("barrier.sync.aligned", "barrier"),
    ("barrier.cta.arrive.aligned", "barrier"), ("barrier.red.or.pred", "barrier"),
    ("barrier.cluster.arrive", "barrier.cluster"),
    ("barrier.cluster.arrive.release.aligned", "barrier.cluster"),
    ("barrier.cluster.wait.acquire", "barrier.cluster"),
    ("bar.warp.sync", "bar.warp.sync"),
    ("shfl.sync.bfly.b32", "shfl.sync"), ("shfl.sync.idx.b32", "shfl.sync"),
    ("shfl.down.b32", "shfl"),
    ("vote.sync.ballot.b32", "vote.sync"), ("vote.sync.all.pred", "vote.sync"),
    ("vote.any.pred", "vote"), ("vote.ballot.b32", "vote"),
    ("match.any.sync.b32", "match"), ("match.all.sync.b64", "match"),
    ("redux.sync.add.u32", "redux.sync"), ("redux.sync.min.abs.NaN.f32", "redux.sync"),
    ("activemask.b32", "activemask"), ("elect.sync", "elect.sync"),
    ("griddepcontrol.launch_dependents", "griddepcontrol.launch_dependents"),
    ("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned",
     "tensormap.cp_fenceproxy"),
    ("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128",
     "clusterlaunchcontrol.try_cancel"),
    ("wmma.load.a.sync.aligned.row.m16n16k16.f16", "wmma"),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", "wmma"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "mma"),
    ("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32", "mma"),
    ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix"),
    ("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "stmatrix"),
    ("movmatrix.sync.aligned.m8n8.trans.b16", "movmatrix"),
    ("wgmma.fence.sync.aligned", "wgmma"), ("wgmma.commit_group.sync.aligned", "wgmma"),
    ("wgmma.wait_group.sync.aligned", "wgmma"),
    ("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "wgmma"),
    ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32", "tcgen05"),
    ("tcgen05.ld.sync.aligned.16x64b.x1.b32", "tcgen05"),
    ("tcgen05.mma.cta_group::1.kind::f16", "tcgen05"),
    ("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64", "tcgen05"),
    ("setmaxnreg.inc.sync.aligned.u32", "setmaxnreg"),
    ("setmaxnreg.dec.sync.aligned.u32", "setmaxnreg"),
    # not collective
    ("membar.gl", None), ("membar.cta", None), ("fence.acq_rel.gpu", None),
    ("fence.sc.sys", None), ("fence.proxy.async.shared::cta", None),
    ("fence.proxy.tensormap::generic.acquire.gpu", None),
    ("atom.global.add.u32", None), ("atom.shared.cas.b64", None),
    ("red.global.add.f32", None), ("red.async.relaxed.cluster.shared::cluster.mbarrier::"
                                   "complete_tx::bytes.inc.u32", None),
    ("mbarrier.init.shared::cta.b64", None), ("mbarrier.arrive.expect_tx.shared::cta.b64", None),
    ("mbarrier.try_wait.parity.shared::cta.b64", None), ("mbarrier.inval.shared.b64", None),
    ("cp.async.ca.shared.global", None), ("cp.async.wait_all", None),
    ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes", None),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes", None),
    ("cp.async.bulk.commit_group", None), ("cp.async.bulk.wait_group.read", None),
    ("multimem.ld_reduce.relaxed.sys.global.add.u32", None), ("multimem.st.relaxed.sys."
                                                              "global.b32", None),
    ("griddepcontrol.wait", None),
    ("clusterlaunchcontrol.query_cancel.is_canceled.pred.b128", None),
    ("tensormap.replace.tile.global_address.global.b1024.b64", None),
    ("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32", None),
    ("nanosleep.u32", None), ("ld.shared.u32", None), ("st.global.f32", None),
    ("add.f32", None), ("mov.u32", None), ("call", None), ("call.uni", None), ("bra", None),
    ("mapa.shared::cluster.u32", None), ("getctarank.shared::cluster.u32", None),
    ("prefetch.global.L2", None), ("brkpt", None), ("trap", None), ("exit", None),
    ("barriers", None), ("bars.sync", None), ("mmax.f32", None),   # prefixes are per part
]


@pytest.mark.parametrize("opcode, row", ISA_OPCODES)
def test_table_against_isa_opcodes(opcode, row):
    hit = collectives.collective_of(opcode)
    assert (hit.opcode if hit else None) == row


def test_every_row_is_used_and_documented():
    used = {row for _, row in ISA_OPCODES}
    for c in collectives.COLLECTIVES:
        assert c.opcode in used, c
        assert re.fullmatch(r"9\.7\.\d+(\.\d+)*", c.section) and c.rule
        assert c.group in ("warp", "warpgroup", "CTA", "cluster")
    for opcode, section, why in collectives.NOT_COLLECTIVE:
        assert collectives.collective_of(opcode) is None, opcode
        assert re.fullmatch(r"9\.7\.\d+(\.\d+)*", section) and why


# ---------------------------------------------------------------------------------------------
# The walk over PTX call graphs

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def _mod(body: str, name="m") -> Module:
    return Module(HEADER + body, name)


def test_walk_finds_a_callee_of_a_callee_and_names_the_chain():
    m = _mod("""
.func (.param .b32 r) leaf(.param .b32 a) { .reg .b32 %r<2>; ld.param.b32 %r1, [a];
    @%p1 bar.sync 0; st.param.b32 [r], %r1; ret; }
.func (.param .b32 r) mid(.param .b32 a) { .reg .b32 %r<2>; ld.param.b32 %r1, [a];
    { .param .b32 p; .param .b32 q; st.param.b32 [p], %r1;
      call.uni (q), leaf, (p); ld.param.b32 %r1, [q]; }
    st.param.b32 [r], %r1; ret; }
.visible .func (.param .b32 r) root(.param .b32 a) { .reg .b32 %r<2>;
    { .param .b32 p; .param .b32 q; call (q), mid, (p); }  ret; }
.visible .func (.param .b32 r) clean(.param .b32 a) { ret; }
""")
    hit = collectives.find_collective(m, "root")
    assert hit.instruction == "@%p1 bar.sync 0;" and hit.function == "leaf"
    assert hit.chain == ("root", "mid", "leaf") and hit.collective.opcode == "bar"
    assert collectives.find_collective(m, "clean") is None
    assert collectives.find_collective(m, "not_there") is None


def test_walk_crosses_fragments_through_declarations():
    a = _mod(""".extern .func helper();
.visible .func root() { call helper, (); ret; }""", "a")
    b = _mod(".visible .func helper() { shfl.sync.bfly.b32 %r1, %r2, 1, 31, -1; ret; }", "b")
    c = _mod(".func helper() { bar.sync 0; ret; }", "c")   # internal: not reachable from a
    hit = collectives.find_collective(a, "root", [a, b, c])
    assert hit.function == "helper" and hit.module == "b" and hit.chain == ("root", "helper")
    assert collectives.find_collective(a, "root", [a, c]) is None


def test_walk_follows_indirect_calls_to_every_address_taken_function():
    m = _mod("""
.func target() { vote.sync.ballot.b32 %r1, %p1, -1; ret; }
.func unrelated() { bar.sync 0; ret; }
.visible .func root() { .reg .b64 %rd<2>; mov.u64 %rd1, target;
    proto: .callprototype ()_ ();
    call %rd1, (), proto; ret; }
""")
    hit = collectives.find_collective(m, "root")
    assert hit.function == "target" and hit.chain == ("root", "(indirect call)", "target")


def test_look_alikes_in_comments_names_and_labels_are_not_collective():
    m = _mod("""
// bar.sync 0; shfl.sync.bfly.b32 in a comment
/* barrier.sync.aligned 0; */
.func shfl_sync_helper() { ret; }
.visible .func root() { .reg .b32 %r<3>;
$bar_sync_label:
    call shfl_sync_helper, ();
    membar.gl; fence.acq_rel.gpu; fence.proxy.async.shared::cta;
    atom.global.add.u32 %r1, [%rd1], 1; red.global.add.u32 [%rd1], 1;
    mbarrier.arrive.shared::cta.b64 %rd2, [%rd3];
    griddepcontrol.wait;
    ret; }
""")
    assert collectives.find_collective(m, "root") is None


def test_an_extern_with_block_scope_is_not_refused_here():
    """The other scope (issue 10 part 2) is checked by its own rules: getattr keeps the
    check working before and after ExternFunction gains ``scope``."""
    ext = _cuda("__syncthreads(); return x;")._splice_extern
    target = "sm_90a"
    frags = {ext.fragment.content_key(target): ("d", ext.fragment.module(target))}
    site = types.SimpleNamespace(extern=ext, where="k.py:1")
    with pytest.raises(splice.SpliceLinkError):
        element_callees.check_element_sites([site], frags, target)
    ext.scope = "block"
    element_callees.check_element_sites([site], frags, target)
    ext.scope = "element"
    with pytest.raises(splice.SpliceLinkError):
        element_callees.check_element_sites([site], frags, target)


# ---------------------------------------------------------------------------------------------
# Through the pipeline: every input kind

CUDA_COLLECTIVES = [
    ("__syncthreads(); return x;", "bar.sync 0;"),
    ("return __shfl_sync(0xffffffffu, x, 0);", "shfl.sync.idx.b32"),
    ("return (float)__ballot_sync(0xffffffffu, x > 0.0f);", "vote.sync.ballot.b32"),
    ("return x + (float)__activemask();", "activemask.b32"),
    ("__syncwarp(); return x;", "bar.warp.sync"),
    ('asm volatile("bar.sync 0;"); return x;', "bar.sync 0;"),
    ('asm volatile("barrier.sync.aligned 1, 64;" ::: "memory"); return x;',
     "barrier.sync.aligned 1, 64;"),
]


@pytest.mark.parametrize("pure", [True, False])
@pytest.mark.parametrize("body, instruction", CUDA_COLLECTIVES)
def test_cuda_collectives_are_refused(body, instruction, pure):
    ext = _cuda(body, pure)
    msg = _refused(_kern(ext))
    where = ext._splice_extern.where
    assert "extern 'f'" in msg and f"declared at {where}" in msg and HERE in where
    assert instruction in msg and re.search(f"called at {_call_site_of(_kern)}", msg)
    assert 'scope="block"' in msg and "once per tile element" in msg
    assert "owns the element" in msg


def test_collective_in_a_callee_of_a_callee_is_refused():
    src = r'''
__device__ __noinline__ float leaf(float x) { __syncthreads(); return x + 1.0f; }
__device__ __noinline__ float mid(float x) { return leaf(x) * 2.0f; }
extern "C" __device__ float nested(float x) { return mid(x) - 1.0f; }
'''
    ext = splice.extern(source=src, name="nested", signature="float32(float32)",
                        pure=False)(lambda x: None)
    msg = _refused(_kern(ext))
    assert "bar.sync 0;" in msg and "nested" in msg
    assert re.search(r"nested -> (mid\(float\)|_Z3midf) -> (leaf\(float\)|_Z4leaff)", msg)


def test_collective_in_another_fragment_reached_through_a_declaration_is_refused():
    """Fragments are merged into one module: a PTX extern may call a function that a CUDA C
    fragment of the same kernel defines."""
    lib = splice.extern(source='extern "C" __device__ float sync_helper(float x) '
                               '{ __syncthreads(); return x; }',
                        name="sync_helper", signature="float32(float32)")(lambda x: None)
    ptx = HEADER + """
.extern .func (.param .b32 r) sync_helper(.param .b32 a);
.visible .func (.param .b32 r) via_ptx(.param .b32 a) {
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [a];
    { .param .b32 p; .param .b32 q; st.param.b32 [p], %r1;
      call (q), sync_helper, (p); ld.param.b32 %r2, [q]; }
    st.param.b32 [r], %r2; ret; }
"""
    via = splice.extern.from_ptx(ptx=ptx, name="via_ptx", signature="float32(float32)")

    @splice.kernel
    def both(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=via(t) + lib(t))
    msg = _refused(both)
    assert "via_ptx" in msg or "sync_helper" in msg
    assert "bar.sync 0;" in msg


@pytest.mark.parametrize("instruction", [
    "bar.sync 0;", "barrier.sync.aligned 0;", "shfl.sync.bfly.b32 %r1, %r1, 1, 31, -1;",
    # ptxas accepts blanks and comments between an opcode's parts: the row is the whole
    # opcode's, not its first part's (redux alone matched no row)
    "redux .sync .add.u32 %r1, %r1, -1;", "redux /* x */ .sync.add.u32 %r1, %r1, -1;",
    "@%p1 redux .sync.add.u32 %r1, %r1, -1;", "griddepcontrol .launch_dependents;"])
def test_ptx_collectives_are_refused(instruction):
    ptx = HEADER + f"""
.visible .func (.param .b32 r) pf(.param .b32 a) {{
    .reg .b32 %r<2>; .reg .pred %p<2>;
    ld.param.b32 %r1, [a];
    setp.ne.u32 %p1, %r1, 0;
    {instruction}
    st.param.b32 [r], %r1; ret; }}
"""
    ext = splice.extern.from_ptx(ptx=ptx, name="pf", signature="float32(float32)")
    msg = _refused(_kern(ext))
    assert "extern 'pf'" in msg and instruction in msg and 'scope="block"' in msg
    assert re.search(f"called at {_call_site_of(_kern)}", msg)


@pytest.mark.parametrize("snippet, dtype", [("bar.sync 0;", None),
                                            ("shfl.sync.bfly.b32 $0, $1, 1, 31, -1;",
                                             ct.int32)])
def test_asm_collectives_are_refused(snippet, dtype):
    def factory():
        @splice.kernel
        def kern(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,)).astype(ct.int32)
            if dtype is None:
                splice.asm(snippet, t)
                ct.store(y, index=(ct.bid(0),), tile=t.astype(ct.float32))
            else:
                r = splice.asm(snippet, t, dtype=dtype)
                ct.store(y, index=(ct.bid(0),), tile=r.astype(ct.float32))
        return kern
    msg = _refused(factory())
    call = _call_site_of(factory, "splice.asm(snippet, t" + (")" if dtype is None else ","))
    assert re.search(rf"inline PTX \(splice.asm\) at {call}, called at {call}", msg)
    assert snippet.split("$")[0].split()[0] in msg and 'scope="block"' in msg


def test_ltoir_collectives_are_refused():
    ext = _cuda("__syncthreads(); return x;", options=["-dlto"])
    msg = _refused(_kern(ext))
    assert "bar.sync 0;" in msg and "extern 'f'" in msg


CUB = {
    "WarpReduce": r'''#include <cub/warp/warp_reduce.cuh>
extern "C" __device__ float cub_sum(float x) {
    using R = cub::WarpReduce<float>;
    __shared__ typename R::TempStorage tmp;
    return R(tmp).Sum(x);
}''',
    "BlockReduce": r'''#include <cub/block/block_reduce.cuh>
extern "C" __device__ float cub_sum(float x) {
    using R = cub::BlockReduce<float, 128>;
    __shared__ typename R::TempStorage tmp;
    return R(tmp).Sum(x);
}''',
}


@pytest.mark.parametrize("pure", [True, False])
@pytest.mark.parametrize("which", sorted(CUB))
def test_cub_collectives_are_refused(which, pure):
    dirs = cccl.include_dirs()   # on NVRTC's path by default
    if not dirs:
        pytest.skip("no CCCL headers (cub/) found for NVRTC: install nvidia-cuda-cccl")
    ext = splice.extern(source=CUB[which], name="cub_sum", signature="float32(float32)",
                        pure=pure)(lambda x: None)
    try:
        msg = _refused(_kern(ext))
    except splice.SpliceCompileError as e:    # CUB headers of another CUDA release
        pytest.skip(f"CUB at {dirs} does not compile with this NVRTC: {e.message[:200]}")
    assert "extern 'cub_sum'" in msg and 'scope="block"' in msg
    assert re.search(r"'(bar|barrier|shfl\.sync|bar\.warp\.sync)[^']*'", msg)


NOT_COLLECTIVE_CUDA = [
    "__threadfence(); return x;",
    "__threadfence_block(); return x;",
    'asm volatile("membar.gl;" ::: "memory"); return x;',
    'asm volatile("fence.acq_rel.gpu;" ::: "memory"); return x;',
    "return x + (float)__popc(__float_as_uint(x));",
    "__nanosleep(10); return x;",
]


@pytest.mark.parametrize("body", NOT_COLLECTIVE_CUDA)
def test_non_collective_look_alikes_are_accepted(body):
    b = splice.compile(_kern(_cuda(body, pure=False)), SIG, "sm_90")
    assert b.sites[0].instances >= 1


def test_atomics_and_collective_looking_names_are_accepted():
    src = r'''
// __syncthreads(); bar.sync 0; shfl.sync in a comment
__device__ __noinline__ float shfl_sync_bar_sync(float x) { return x * 2.0f; }
extern "C" __device__ float vote_ballot(float *p, float x) {
    atomicAdd(p, x);
    return shfl_sync_bar_sync(x);
}'''
    ext = splice.extern(source=src, name="vote_ballot", signature="float32(float32*, float32)",
                        pure=False)(lambda *a: None)

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(y, t))
    b = splice.compile(kern, SIG, "sm_90")
    assert b.sites[0].instances >= 1


def test_a_refusal_is_raised_again_and_never_cached():
    kern = _kern(_cuda("__syncthreads(); return x;", pure=False))
    first = _refused(kern)
    assert _refused(kern) == first


# ---------------------------------------------------------------------------------------------
# Binary objects: SASS

def _cubin(src: bytes, arch="sm_90a") -> bytes:
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(src, b"obj.cu", 0, [], [])
    opts = [f"-arch={arch}".encode(), b"-rdc=true"]
    assert nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] == 0
    err, n = nvrtc.nvrtcGetCUBINSize(prog)
    buf = bytearray(n)
    nvrtc.nvrtcGetCUBIN(prog, buf)
    return bytes(buf)


OBJ = rb'''
__device__ __noinline__ float obj_leaf(float x) { __syncthreads(); return x + 1.0f; }
extern "C" __device__ float obj_sync(float x) { return obj_leaf(x) * 5.0f; }
extern "C" __device__ float obj_plain(float x) { return x * 5.0f; }
'''


def _nvjitlink_too_old():
    from cuda.bindings import nvjitlink
    m = re.search(r"release (\d+)\.(\d+)", toolchain.ptxas_version())
    return bool(m) and tuple(nvjitlink.version()) < (int(m.group(1)), int(m.group(2)))


def test_binary_object_collectives_are_refused_from_sass(tmp_path):
    if _nvjitlink_too_old() or toolchain.nvdisasm() is None:
        pytest.skip("needs nvJitLink as new as ptxas, and nvdisasm")
    p = tmp_path / "obj.cubin"
    p.write_bytes(_cubin(OBJ))
    bad = splice.extern.from_object(p, name="obj_sync", signature="float32(float32)")
    msg = _refused(_kern(bad))
    assert "extern 'obj_sync'" in msg and str(p) in msg and 'scope="block"' in msg
    assert re.search(r"'(BAR|WARPSYNC)[A-Z_.]*[^']*'", msg) and "obj_leaf" in msg
    assert re.search(f"called at {_call_site_of(_kern)}", msg)
    ok = splice.extern.from_object(p, name="obj_plain", signature="float32(float32)")
    assert splice.compile(_kern(ok), SIG, "sm_90").sites[0].instances >= 1


def test_binary_object_without_nvdisasm_is_an_error_not_a_pass(fresh_cache, tmp_path,
                                                               monkeypatch):
    # a fresh cache: an earlier splice.compile of this kernel cached it, and a hit is not
    # checked again
    if _nvjitlink_too_old():
        pytest.skip("needs nvJitLink as new as ptxas")
    p = tmp_path / "obj.cubin"
    p.write_bytes(_cubin(OBJ))
    ext = splice.extern.from_object(p, name="obj_plain", signature="float32(float32)")
    monkeypatch.setattr(toolchain, "nvdisasm", lambda: None)
    before = set(cache.entries("kernel"))
    with pytest.raises(splice.SpliceToolchainError, match="nvdisasm"):
        splice.build(_kern(ext), SIG, "sm_90")
    assert set(cache.entries("kernel")) == before


SASS_SAMPLES = {
    "bar.sync 0;": "", "bar.red.popc.u32 %r2, 0, %p1;": "",
    "bar.arrive 1, 64;": "", "bar.warp.sync %r1;": "WARPSYNC",
    "barrier.cluster.arrive.aligned; barrier.cluster.wait.aligned;": "",
    "shfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;": "", "vote.sync.ballot.b32 %r2, %p1, -1;": "",
    "match.any.sync.b32 %r2, %r1, -1;": "", "redux.sync.add.u32 %r2, %r1, -1;": "",
    "activemask.b32 %r2;": "VOTE", "elect.sync %r2|%p2, -1;": "",
    "griddepcontrol.launch_dependents;": "PREEXIT",
    "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r2}, [%rd1];": "",
    "movmatrix.sync.aligned.m8n8.trans.b16 %r2, %r1;": "", "wgmma.fence.sync.aligned;": "",
    "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned "
    "[%rd1], [%rd2], 128;": "",
    # not collective: no SASS hit
    "atom.global.add.u32 %r2, [%rd1], %r1;": None, "red.global.max.s32 [%rd1], %r1;": None,
    "membar.gl; fence.acq_rel.gpu;": None, "griddepcontrol.wait;": None,
    "mbarrier.arrive.shared::cta.b64 %rd3, [%rd1];": None,
}


@pytest.mark.parametrize("instruction, sass", SASS_SAMPLES.items())
def test_sass_table_catches_what_ptxas_makes_of_each_collective(instruction, sass):
    """Each PTX collective assembled by ptxas -c into a device function (as in a binary
    object) is found in nvdisasm's listing; non-collectives are not."""
    if toolchain.nvdisasm() is None:
        pytest.skip("nvdisasm not installed")
    ptx = HEADER.replace("8.0", "8.7") + f"""
.visible .func f(.param .b64 p) {{
    .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<4>;
    ld.param.u64 %rd1, [p]; ld.u32 %r1, [%rd1]; ld.u64 %rd2, [%rd1+8];
    setp.ne.u32 %p1, %r1, 0; mov.b32 %r2, %r1;
    {instruction}
    st.u32 [%rd1], %r2; ret; }}
"""
    cubin = toolchain.run_ptxas(ptx, ["-arch", "sm_90a", "-c"], None, timeout=120,
                                what="SASS sample")
    hit = collectives.find_sass_collective(toolchain.disassemble(cubin), "f")
    if sass is None:
        assert hit is None
    else:
        assert hit is not None and hit[0].startswith(sass or "")


OBJ_HELPERS = rb'''
extern "C" __device__ float obj_helper_sync(float x) { __syncthreads(); return x + 1.0f; }
extern "C" __device__ float obj_helper_plain(float x) { return x + 2.0f; }
extern "C" __device__ float obj_plain(float x) { return x * 5.0f; }
'''


@pytest.mark.parametrize("helper, refused", [("obj_helper_sync", True),
                                             ("obj_helper_plain", False)])
def test_cuda_c_calling_into_a_binary_object_is_checked_in_sass(tmp_path, helper, refused):
    """An element-scope CUDA C extern that calls a function only a linked binary object
    defines: the PTX walk cannot see the callee (accepted before, a silent miscompile when
    the callee synchronises), so its SASS in the linked cubin is checked."""
    if _nvjitlink_too_old() or toolchain.nvdisasm() is None:
        pytest.skip("needs nvJitLink as new as ptxas, and nvdisasm")
    p = tmp_path / "helpers.cubin"
    p.write_bytes(_cubin(OBJ_HELPERS))
    plain = splice.extern.from_object(p, name="obj_plain", signature="float32(float32)")
    src = (f'extern "C" __device__ float {helper}(float);\n'
           f'extern "C" __device__ float f(float x) {{ return {helper}(x); }}\n')
    f = splice.extern(source=src, name="f", signature="float32(float32)",
                      inline="never")(lambda x: None)

    def factory():
        @splice.kernel
        def kern(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=f(plain(t)))
        return kern
    if not refused:
        assert splice.compile(factory(), SIG, "sm_90").sites[1].instances >= 1
        return
    msg = _refused(factory())
    assert "extern 'f'" in msg and "obj_helper_sync" in msg and "f -> obj_helper_sync" in msg
    assert 'scope="block"' in msg and re.search(r"'(BAR|WARPSYNC)[A-Z_.]*[^']*'", msg)
    assert re.search(f"called at {_call_site_of(factory, 'f(plain(t))')}", msg)


def test_call_through_an_alias_is_followed():
    """``.alias a, b;`` makes a call of a run b: the walk saw a call of an undefined a and
    let b's bar.sync through (an element-scope from_ptx extern compiled and linked)."""
    m = _mod("""
.func (.param .b32 r) g(.param .b32 a) {
    .reg .b32 %r<2>; ld.param.b32 %r1, [a]; bar.sync 0; st.param.b32 [r], %r1; ret; }
.func (.param .b32 r) galias(.param .b32 a);
.alias galias, g;
.visible .func (.param .b32 r) root(.param .b32 a) {
    .reg .b32 %r<3>; ld.param.b32 %r1, [a];
    { .param .b32 pa; .param .b32 pr; st.param.b32 [pa], %r1;
      call (pr), galias, (pa); ld.param.b32 %r2, [pr]; }
    st.param.b32 [r], %r2; ret; }
""")
    hit = collectives.find_collective(m, "root")
    assert hit is not None and hit.function == "g" and hit.chain == ("root", "g")
    assert hit.instruction == "bar.sync 0;"


def test_weak_callee_defined_differently_elsewhere_is_followed():
    """Two fragments' weak definitions of one helper: the merged module keeps the first
    fragment's, so an element extern's call of its own clean weak helper may run another
    fragment's synchronising one (the walk looked at its own module's only)."""
    weak = ".weak .func (.param .b32 r) helper(.param .b32 a) {{ .reg .b32 %r<2>; " \
           "ld.param.b32 %r1, [a]; {} st.param.b32 [r], %r1; ret; }}\n"
    a = _mod(weak.format("bar.sync 0;"), "a")
    b = _mod(weak.format("") + """
.visible .func (.param .b32 r) root(.param .b32 a) {
    .reg .b32 %r<3>; ld.param.b32 %r1, [a];
    { .param .b32 pa; .param .b32 pr; st.param.b32 [pa], %r1;
      call (pr), helper, (pa); ld.param.b32 %r2, [pr]; }
    st.param.b32 [r], %r2; ret; }
""", "b")
    assert collectives.find_collective(b, "root", [b]) is None
    hit = collectives.find_collective(b, "root", [a, b])
    assert hit is not None and hit.module == "a" and hit.chain == ("root", "helper")


def test_function_pointer_call_in_a_kernel_linked_with_an_object_is_refused(tmp_path):
    """A call through a pointer may reach any of the object's functions, which the PTX walk
    cannot see: refused (never assumed clean), naming the extern and the call site."""
    if _nvjitlink_too_old() or toolchain.nvdisasm() is None:
        pytest.skip("needs nvJitLink as new as ptxas, and nvdisasm")
    p = tmp_path / "helpers.cubin"
    p.write_bytes(_cubin(OBJ_HELPERS))
    plain = splice.extern.from_object(p, name="obj_plain", signature="float32(float32)")
    src = r'''
__device__ float twice(float x) { return 2.0f * x; }
__device__ float (*volatile op)(float) = twice;
extern "C" __device__ float fp(float x) { return op(x); }'''
    fp = splice.extern(source=src, name="fp", signature="float32(float32)",
                       inline="never")(lambda x: None)

    def factory():
        @splice.kernel
        def kern(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=fp(plain(t)))
        return kern
    msg = _refused(factory())
    assert "extern 'fp'" in msg and "function pointer" in msg
    assert re.search(f"called at {_call_site_of(factory, 'fp(plain(t))')}", msg)


def test_binary_object_check_reads_the_fragments_that_were_linked(fresh_cache, tmp_path,
                                                                  monkeypatch):
    """The SASS check of a CUDA C extern calling into a binary object walks the PTX the
    fragments stage compiled and linked: a source saved mid-build (its content key changed)
    is neither keyed nor compiled again, and the call is still refused."""
    if _nvjitlink_too_old() or toolchain.nvdisasm() is None:
        pytest.skip("needs nvJitLink as new as ptxas, and nvdisasm")
    p = tmp_path / "helpers.cubin"
    p.write_bytes(_cubin(OBJ_HELPERS))
    plain = splice.extern.from_object(p, name="obj_plain", signature="float32(float32)")
    src = ('extern "C" __device__ float obj_helper_sync(float);\n'
           'extern "C" __device__ float f(float x) { return obj_helper_sync(x); }\n')
    f = splice.extern(source=src, name="f", signature="float32(float32)",
                      inline="never")(lambda x: None)
    from support.fragments import save_source_mid_build
    saved = save_source_mid_build(monkeypatch, f._splice_extern.fragment)

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=f(plain(t)))
    msg = _refused(kern)
    assert saved and "extern 'f'" in msg and "f -> obj_helper_sync" in msg
