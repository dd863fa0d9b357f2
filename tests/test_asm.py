"""splice.asm: inline PTX, compiled without a GPU and (marker gpu) run against NumPy."""

import cuda.tile as ct
import numpy as np
import pytest

import splice
from support import kernels as K

ConstInt = ct.Constant[int]
I32 = K.signature(K.array(ct.int32), K.array(ct.int32), 256)


@splice.kernel
def bits_kernel(x, brev, bfind, popc, prmt, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    u = ct.bitcast(t, ct.uint32)
    ct.store(brev, index=(ct.bid(0),), tile=splice.asm("brev.b32 $0, $1;", u, dtype=ct.uint32))
    ct.store(bfind, index=(ct.bid(0),), tile=splice.asm("bfind.u32 $0, $1;", u,
                                                         dtype=ct.uint32))
    ct.store(popc, index=(ct.bid(0),), tile=splice.asm("popc.b32 $0, $1;", u, dtype=ct.uint32,
                                                        constraints="=r,r"))
    ct.store(prmt, index=(ct.bid(0),), tile=splice.asm("prmt.b32 $0, $1, 0, 0x0123;", u,
                                                        dtype=ct.uint32))


@splice.kernel
def mad_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.asm("mad.lo.s32 $0, $1, $2, $3;", t, t, 7,
                                                     dtype=ct.int32))


@splice.kernel
def split_kernel(x, hi, lo, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    h, lw = splice.asm("mov.b64 {$1, $0}, $2;", t, dtype=(ct.uint32, ct.uint32))
    ct.store(hi, index=(ct.bid(0),), tile=h)
    ct.store(lo, index=(ct.bid(0),), tile=lw)


@splice.kernel
def sreg_kernel(times, smids, TILE: ConstInt):
    t0 = splice.asm("mov.u64 $0, %globaltimer;", dtype=ct.uint64, pure=False)
    sm = splice.asm("mov.u32 $0, %smid;", dtype=ct.uint32, pure=False)
    t1 = splice.asm("mov.u64 $0, %globaltimer;", dtype=ct.uint64, pure=False)
    z = ct.full((TILE,), 0, dtype=ct.uint64)
    ct.store(times, index=(ct.bid(0), 0), tile=ct.reshape(z + t0, (1, TILE)))
    ct.store(times, index=(ct.bid(0), 1), tile=ct.reshape(z + t1, (1, TILE)))
    ct.store(smids, index=(ct.bid(0),), tile=ct.full((TILE,), 0, dtype=ct.uint32) + sm)


@splice.kernel
def red_kernel(x, counter: ct.ScalarInt64, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    splice.asm("red.global.add.u64 [$0], 1;", counter, t)  # no output: side effect only
    splice.asm("{ .reg .b64 v; cvt.u64.u32 v, $1; red.global.add.u64 [$0+8], v; }",
               counter, t)


# ----------------------------------------------------------------------------- CPU

@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_asm_compiles_inlined(arch):
    sig = K.signature(*[K.array(ct.int32)] + [K.array(ct.uint32)] * 4, 256)
    b = splice.compile(bits_kernel, sig, arch)
    assert all(s.inlined for s in b.sites) and len(b.sites) == 4
    assert b.sass is None or b.sass_call_count() == 0
    assert "brev.b32" in b.spliced_ptx and "prmt.b32" in b.spliced_ptx


def test_every_gpu_kernel_compiles():
    splice.compile(K.asm_tanh_kernel,
                   K.signature(K.array(ct.float32), K.array(ct.float32), 1024), "sm_90")
    splice.compile(sreg_kernel, K.signature(K.array(ct.uint64, 2), K.array(ct.uint32), 128),
                   "sm_90")
    splice.compile(mad_kernel, I32, "sm_90")


def test_multiple_outputs_and_side_effects_compile():
    splice.compile(split_kernel, K.signature(K.array(ct.uint64), K.array(ct.uint32),
                                             K.array(ct.uint32), 256), "sm_90")
    b = splice.compile(red_kernel, K.signature(K.array(ct.uint32), K.scalar(ct.int64), 64),
                       "sm_90")
    assert b.spliced_ptx.count("red.global.add.u64") >= 2


def _asm_kernel(template, dtype=ct.int32, constraints=None, nargs=1):
    @splice.kernel
    def kern(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        if nargs == 1:
            ct.store(y, index=(ct.bid(0),), tile=splice.asm(template, t, dtype=dtype,
                                                             constraints=constraints))
        else:
            ct.store(y, index=(ct.bid(0),), tile=splice.asm(template, t, t, dtype=dtype,
                                                             constraints=constraints))
    return kern


@pytest.mark.parametrize("template, constraints, needle", [
    ("add.s32 $0, $1, $5;", None, "operand $5 does not exist"),
    ("add.s32 $0, $1, $1;", "=r,f", "does not match operand $1 of dtype int32"),
    ("add.s32 $0, $1, $1;", "r,r", "must start with '='"),
    ("add.s32 $0, $1, $1;", "=r", "1 constraint(s)"),
])
def test_snippet_errors_before_tileiras(template, constraints, needle):
    with pytest.raises(splice.SpliceCallError) as e:
        splice.build(_asm_kernel(template, constraints=constraints), I32, "sm_90")
    assert needle in str(e.value) and "test_asm.py" in str(e.value)


@pytest.mark.parametrize("template, needle", [
    ("mov.b32 $0, $1; ret;", "'ret' leaves the snippet"),
    ("{ .reg .pred p; setp.eq.s32 p, $1, 0; mov.b32 $0, $1; @p ret; }", "'@p ret' leaves"),
    ("mov.b32 $0, $1; exit;", "'exit' leaves the snippet"),
    ("mov.b32 $0, $1; bra $$L_after;", "branches to a label the snippet does not define"),
    ("", "$0 are not written"),
    ("add.s32 $1, $1, 1;", "$0 are not written"),
    ("{ .reg .pred p; setp.eq.s32 p, $1, 0; @p mov.b32 $0, $1; }", "$0 are not written"),
])
def test_snippet_leaving_or_not_writing_is_refused_at_the_call(template, needle):
    with pytest.raises(splice.SpliceCallError) as e:
        splice.build(_asm_kernel(template), I32, "sm_90")
    msg = str(e.value)
    assert needle in msg and "test_asm.py" in msg
    assert f"snippet: {template.strip()}" in msg and "operands: $0 .b32 (int32 output)" in msg


def test_malformed_snippet_reports_ptxas_and_the_call_site():
    with pytest.raises(splice.SpliceCompileError) as e:
        splice.build(_asm_kernel("add.bogus.s32 $0, $1, $1;"), I32, "sm_90")
    msg = str(e.value)
    assert "rejected by ptxas" in msg and "add.bogus.s32" in msg and "test_asm.py" in msg


def test_too_many_outputs():
    @splice.kernel
    def kern(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        a, b, c = splice.asm("mov.b32 $0, $3; mov.b32 $1, $3; mov.b32 $2, $3;", t,
                             dtype=(ct.int32, ct.int32, ct.int32))
        ct.store(y, index=(ct.bid(0),), tile=a + b + c)
    with pytest.raises(splice.SpliceCallError, match="at most 64 bits of outputs"):
        splice.build(kern, I32, "sm_90")


def test_asm_from_python_raises():
    with pytest.raises(splice.SpliceError, match="device code"):
        splice.asm("mov.b32 $0, 1;", dtype=ct.int32)


# ----------------------------------------------------------------------------- GPU

from support.gpu import launch as _launch


@pytest.mark.gpu
def test_bit_tricks_match_numpy(torch):
    n, tile = 4096, 256
    x = np.random.default_rng(0).integers(-2 ** 31, 2 ** 31 - 1, n, dtype=np.int32)
    outs = [torch.empty(n, dtype=torch.uint32, device="cuda") for _ in range(4)]
    _launch(torch, (n // tile,), bits_kernel, (torch.from_numpy(x).cuda(), *outs, tile))
    u = x.view(np.uint32)
    brev = np.array([int(f"{v:032b}"[::-1], 2) for v in u], dtype=np.uint32)
    bfind = np.array([v.bit_length() - 1 if v else 0xFFFFFFFF for v in map(int, u)],
                     dtype=np.uint32)
    popc = np.array([bin(int(v)).count("1") for v in u], dtype=np.uint32)
    prmt = u.byteswap()
    for got, ref in zip(outs, (brev, bfind, popc, prmt)):
        np.testing.assert_array_equal(got.cpu().numpy(), ref)


@pytest.mark.gpu
def test_mad_and_multiple_outputs(torch):
    n, tile = 2048, 256
    x = np.random.default_rng(1).integers(-1000, 1000, n, dtype=np.int32)
    y = torch.empty(n, dtype=torch.int32, device="cuda")
    _launch(torch, (n // tile,), mad_kernel, (torch.from_numpy(x).cuda(), y, tile))
    np.testing.assert_array_equal(y.cpu().numpy(), x * x + 7)
    v = np.random.default_rng(2).integers(0, 2 ** 63, n, dtype=np.uint64)
    hi = torch.empty(n, dtype=torch.uint32, device="cuda")
    lo = torch.empty(n, dtype=torch.uint32, device="cuda")
    _launch(torch, (n // tile,), split_kernel, (torch.from_numpy(v).cuda(), hi, lo, tile))
    np.testing.assert_array_equal(hi.cpu().numpy(), (v >> np.uint64(32)).astype(np.uint32))
    np.testing.assert_array_equal(lo.cpu().numpy(), (v & np.uint64(0xFFFFFFFF))
                                  .astype(np.uint32))


@pytest.mark.gpu
def test_tanh_approx_within_its_documented_error(torch):
    n, tile = 1 << 16, 1024
    x = np.linspace(-8, 8, n, dtype=np.float32)
    y = torch.empty(n, dtype=torch.float32, device="cuda")
    _launch(torch, (n // tile,), K.asm_tanh_kernel, (torch.from_numpy(x).cuda(), y, tile))
    ref = np.tanh(x.astype(np.float64))
    # PTX ISA: tanh.approx.f32 max relative error 2^-10.987 (absolute near 0)
    err = np.abs(y.cpu().numpy() - ref)
    assert np.all(err <= 2 ** -10.987 * np.abs(ref) + 2 ** -20), err.max()


@pytest.mark.gpu
def test_special_registers(torch):
    tile, blocks = 128, 264
    times = torch.zeros((blocks, 2 * tile), dtype=torch.uint64, device="cuda")
    smids = torch.zeros(blocks * tile, dtype=torch.uint32, device="cuda")
    _launch(torch, (blocks,), sreg_kernel, (times, smids, tile))
    t = times.cpu().numpy().astype(np.int64).reshape(blocks, 2, tile)
    assert np.all(t[:, 1, :] >= t[:, 0, :]) and np.all(t > 0)
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    assert smids.cpu().numpy().max() < n_sm


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [1, 32, 64, 1024])
def test_side_effect_asm_runs_once_per_element(torch, tile):
    n = max(tile * 16, 4096)
    x = np.random.default_rng(tile).integers(0, 1000, n, dtype=np.uint32)
    counter = torch.zeros(2, dtype=torch.int64, device="cuda")
    _launch(torch, (n // tile,), red_kernel, (torch.from_numpy(x).cuda(), counter.data_ptr(),
                                              tile))
    calls, total = counter.cpu().numpy()
    assert calls == n and total == int(x.astype(np.uint64).sum())


@splice.kernel
def hadd2_kernel(a, b, y, TILE: ConstInt):
    ta = ct.load(a, index=(ct.bid(0),), shape=(TILE,))
    tb = ct.load(b, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.asm("add.rn.f16x2 $0, $1, $2;", ta, tb,
                                                     dtype=ct.float16, pack=2,
                                                     constraints="=r,r,r"))


@splice.kernel
def hadd2_scalar_kernel(a, y, s: float, TILE: ConstInt):
    ta = ct.load(a, index=(ct.bid(0),), shape=(TILE,))
    sh = ct.astype(s, ct.float16)
    one = splice.asm("add.rn.f16x2 $0, $1, $1;", sh, dtype=ct.float16, pack=2)  # scalar: pad
    ct.store(y, index=(ct.bid(0),), tile=ta + one)


@pytest.mark.parametrize("tile", [1, 2, 64, 1024])
def test_pack2_compiles(tile):
    sig = K.signature(K.array(ct.float16), K.array(ct.float16), K.array(ct.float16), tile)
    b = splice.compile(hadd2_kernel, sig, "sm_90")
    assert "add.rn.f16x2" in b.spliced_ptx and b.sites[0].inlined
    splice.compile(hadd2_scalar_kernel, K.signature(K.array(ct.float16), K.array(ct.float16),
                                                    K.scalar(ct.float32), tile), "sm_90")


def test_pack_errors():
    @splice.kernel
    def kern(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=splice.asm("mov.b32 $0, $1;", t, dtype=ct.int32,
                                                         pack=4))
    with pytest.raises(splice.SpliceCallError, match="must be 16, 32 or 64 bits"):
        splice.build(kern, I32, "sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [1, 2, 64, 1024])
def test_f16x2_pack(torch, tile):
    n = 4096
    rng = np.random.default_rng(tile)
    a = rng.standard_normal(n).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float16)
    y = torch.empty(n, dtype=torch.float16, device="cuda")
    _launch(torch, (n // tile,), hadd2_kernel, (torch.from_numpy(a).cuda(),
                                               torch.from_numpy(b).cuda(), y, tile))
    np.testing.assert_array_equal(y.cpu().numpy(), a + b)
    y2 = torch.empty(n, dtype=torch.float16, device="cuda")
    _launch(torch, (n // tile,), hadd2_scalar_kernel, (torch.from_numpy(a).cuda(), y2, 1.5,
                                                      tile))
    np.testing.assert_array_equal(y2.cpu().numpy(), a + np.float16(3.0))


def test_one_element_dtype_tuple_returns_a_tuple():
    @splice.kernel
    def kern(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        (a,) = splice.asm("mov.b32 $0, $1;", t, dtype=(ct.int32,))
        ct.store(y, index=(ct.bid(0),), tile=a)
    splice.compile(kern, I32, "sm_90")


def test_constraint_modifiers_and_spaces():
    splice.compile(_asm_kernel("mov.b32 $0, $1;", constraints=" = r , r"), I32, "sm_90")
    with pytest.raises(splice.SpliceCallError, match="no modifiers"):
        splice.build(_asm_kernel("mov.b32 $0, $1;", constraints="=&r,r"), I32, "sm_90")


def test_snippet_with_local_scratch_is_called_not_inlined():
    b = splice.compile(_asm_kernel("{ .local .b32 s; st.local.b32 [s], $1; "
                                   "ld.local.b32 $0, [s]; }"), I32, "sm_90")
    assert not b.sites[0].inlined and "local" in b.sites[0].why_not_inlined


def test_ptxas_error_lists_operand_types():
    @splice.kernel
    def kern(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        r = splice.asm("add.s64 $0, $1, $2;", ct.astype(t, ct.int64), 1, dtype=ct.int64)
        ct.store(y, index=(ct.bid(0),), tile=ct.astype(r, ct.int32))
    with pytest.raises(splice.SpliceCompileError, match=r"\$2 \.b32 \(int32\)"):
        splice.build(kern, I32, "sm_90")


def test_pack_refuses_bool_outputs_and_array_inputs():
    @splice.kernel
    def kern(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        b = splice.asm("setp.ne.b32 $0, $1, 0;", t, dtype=ct.bool_, pack=2)
        ct.store(y, index=(ct.bid(0),), tile=ct.where(b, t, 0))
    with pytest.raises(splice.SpliceCallError, match="cannot pack bool outputs"):
        splice.build(kern, I32, "sm_90")

    @splice.kernel
    def kern2(x, y, TILE: ConstInt):
        ct.store(y, index=(ct.bid(0),), tile=splice.asm("mov.b32 $0, $1;", x, dtype=ct.int32,
                                                         pack=2))
    with pytest.raises(splice.SpliceCallError, match="input 1 is a value of type"):
        splice.build(kern2, I32, "sm_90")



def test_pack_refuses_a_bool():
    @splice.kernel
    def kern(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=splice.asm("mov.b32 $0, $1;", t, dtype=ct.int32,
                                                         pack=True))
    with pytest.raises(splice.SpliceCallError, match="pack must be 1, 2, 4 or 8, got True"):
        splice.build(kern, I32, "sm_90")


def test_pointer_dtype_is_a_splice_error():
    @splice.kernel
    def kern(x, y, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=splice.asm("mov.b32 $0, $1;", t,
                                                         dtype=splice.pointer(ct.int32)))
    with pytest.raises(splice.SpliceCallError) as e:
        splice.build(kern, I32, "sm_90")
    said = f"at {__file__}:{_line_in(kern, 'splice.pointer(')}: it names a type for an extern's"
    assert f"splice.pointer() called inside a kernel {said} declaration" in str(e.value)


def _line_in(kernel, code: str = "splice.asm(") -> int:
    """The line of ``kernel``'s source that has ``code``."""
    import inspect

    from splice.system._cutile import python_function
    src, first = inspect.getsourcelines(python_function(kernel))
    return first + next(i for i, text in enumerate(src) if code in text)


@splice.kernel
def _bytes_template_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.asm(b"mov.b32 $0, $1;", t, dtype=ct.int32))


@splice.kernel
def _list_dtype_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.asm("mov.b32 $0, $1;", t, dtype=[ct.int32]))


@splice.kernel
def _unknown_keyword_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.asm("mov.b32 $0, $1;", t, dtype=ct.int32,
                                                     packk=2))


@pytest.mark.parametrize("kernel, said", [
    (_bytes_template_kernel, "Cannot create constant from value of type bytes"),
    (_list_dtype_kernel, "Unsupported syntax"),
    (_unknown_keyword_kernel, "asm(): got an unexpected keyword argument 'packk'"),
], ids=["bytes template", "dtype list", "unknown keyword"])
def test_arguments_cutile_refuses_are_cutile_errors_with_a_hint(fresh_cache, kernel, said):
    # cuTile checks a call's arguments before splice sees them: its refusal comes back as
    # cuTile's own error (also a SpliceError) at the call's line, with a line that says what
    # splice.asm takes
    line = _line_in(kernel)
    with pytest.raises(ct.TileError) as e:
        splice.build(kernel, I32, "sm_90")
    assert isinstance(e.value, splice.SpliceError)
    assert not isinstance(e.value, splice.SpliceCallError)
    assert said in e.value.message
    assert (e.value.loc.filename, e.value.loc.line) == (__file__, line)
    msg = str(e.value)
    assert "splice.asm takes a str template" in msg and "dtype= (a cuTile dtype" in msg
    assert not list(fresh_cache.rglob("*.cubin"))

# ----------------------------------------------------------------------------- CPU executor
# The GPU tests' kernels run on support.ptx_exec (sm_80: their 1-D loads are TMA on sm_90)

from support.ptx_exec import Pointer, run_build


def _exec(kernel, sig, grid, *args):
    return run_build(splice.compile(kernel, sig, "sm_80"), grid, *args)


def test_exec_bit_tricks_match_numpy():
    n, tile = 512, 256
    x = np.random.default_rng(0).integers(-2 ** 31, 2 ** 31 - 1, n, dtype=np.int32)
    outs = [np.zeros(n, np.uint32) for _ in range(4)]
    sig = K.signature(*[K.array(ct.int32)] + [K.array(ct.uint32)] * 4, tile)
    _exec(bits_kernel, sig, (n // tile,), x, *outs)
    u = x.view(np.uint32)
    brev = np.array([int(f"{v:032b}"[::-1], 2) for v in u], dtype=np.uint32)
    bfind = np.array([v.bit_length() - 1 if v else 0xFFFFFFFF for v in map(int, u)],
                     dtype=np.uint32)
    popc = np.array([bin(int(v)).count("1") for v in u], dtype=np.uint32)
    for got, ref in zip(outs, (brev, bfind, popc, u.byteswap())):
        np.testing.assert_array_equal(got, ref)


def test_exec_mad_and_multiple_outputs():
    n, tile = 512, 256
    x = np.random.default_rng(1).integers(-1000, 1000, n, dtype=np.int32)
    y = np.zeros(n, np.int32)
    _exec(mad_kernel, I32, (n // tile,), x, y)
    np.testing.assert_array_equal(y, x * x + 7)
    v = np.random.default_rng(2).integers(0, 2 ** 63, n, dtype=np.uint64)
    hi, lo = np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    _exec(split_kernel, K.signature(K.array(ct.uint64), K.array(ct.uint32), K.array(ct.uint32),
                                    tile), (n // tile,), v, hi, lo)
    np.testing.assert_array_equal(hi, (v >> np.uint64(32)).astype(np.uint32))
    np.testing.assert_array_equal(lo, (v & np.uint64(0xFFFFFFFF)).astype(np.uint32))


def test_exec_special_registers_and_ordering():
    tile, blocks = 128, 2
    times = np.zeros((blocks, 2 * tile), np.uint64)
    smids = np.zeros(blocks * tile, np.uint32)
    _exec(sreg_kernel, K.signature(K.array(ct.uint64, 2), K.array(ct.uint32), tile), (blocks,),
          times, smids)
    t = times.reshape(blocks, 2, tile)
    assert np.all(t[:, 1, :] > t[:, 0, :]) and np.all(t > 0)


@pytest.mark.parametrize("tile", [1, 32, 1024])
def test_exec_side_effect_asm_runs_once_per_element(tile):
    n = max(tile * 2, 64)
    x = np.random.default_rng(tile).integers(0, 1000, n, dtype=np.uint32)
    counter = np.zeros(2, np.int64)
    _exec(red_kernel, K.signature(K.array(ct.uint32), K.scalar(ct.int64), tile), (n // tile,),
          x, Pointer(counter))
    calls, total = counter
    assert calls == n and total == int(x.astype(np.uint64).sum())


@pytest.mark.parametrize("tile", [1, 2, 64, 1024])
def test_exec_f16x2_pack(tile):
    n = max(2 * tile, 64)
    rng = np.random.default_rng(tile)
    a = rng.standard_normal(n).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float16)
    y = np.zeros(n, np.float16)
    sig = K.signature(K.array(ct.float16), K.array(ct.float16), K.array(ct.float16), tile)
    _exec(hadd2_kernel, sig, (n // tile,), a, b, y)
    np.testing.assert_array_equal(y, a + b)
    y2 = np.zeros(n, np.float16)
    _exec(hadd2_scalar_kernel, K.signature(K.array(ct.float16), K.array(ct.float16),
                                           K.scalar(ct.float32), tile), (n // tile,), a, y2, 1.5)
    np.testing.assert_array_equal(y2, a + np.float16(3.0))


RELU_PREDICATED = ("{ .reg .pred p; setp.lt.s32 p, $1, 0; @p mov.b32 $0, 0; "
                   "@!p mov.b32 $0, $1; }")
RELU_BRANCHES = ("{ .reg .pred p; setp.lt.s32 p, $1, 0; @p bra NEG; mov.b32 $0, $1; "
                 "bra DONE; NEG: mov.b32 $0, 0; DONE: }")


ODD_OR_ZERO = ("{ .reg .b32 i; and.b32 i, $1, 1; ts: .branchtargets EVEN, ODD; brx.idx i, ts; "
               "EVEN: mov.b32 $0, 0; bra DONE; ODD: mov.b32 $0, $1; DONE: }")


@pytest.mark.parametrize("template", [RELU_PREDICATED, RELU_BRANCHES, ODD_OR_ZERO])
def test_outputs_written_on_every_path_compile(template):
    b = splice.compile(_asm_kernel(template), I32, "sm_90")
    assert b.sites[0].inlined


@pytest.mark.gpu
@pytest.mark.parametrize("template, ref", [
    (RELU_PREDICATED, lambda x: np.maximum(x, 0)), (RELU_BRANCHES, lambda x: np.maximum(x, 0)),
    (ODD_OR_ZERO, lambda x: np.where(x & 1, x, 0))], ids=["predicated", "branches", "brx"])
def test_outputs_written_on_every_path_values(torch, template, ref):
    n, tile = 1024, 256
    x = np.random.default_rng(4).integers(-1000, 1000, n, dtype=np.int32)
    y = torch.empty(n, dtype=torch.int32, device="cuda")
    _launch(torch, (n // tile,), _asm_kernel(template), (torch.from_numpy(x).cuda(), y, tile))
    np.testing.assert_array_equal(y.cpu().numpy(), ref(x))


@pytest.mark.parametrize("template, ref", [
    (RELU_PREDICATED, lambda x: np.maximum(x, 0)), (RELU_BRANCHES, lambda x: np.maximum(x, 0)),
    (ODD_OR_ZERO, lambda x: np.where(x & 1, x, 0))], ids=["predicated", "branches", "brx"])
def test_exec_outputs_written_on_every_path_values(template, ref):
    n, tile = 512, 256
    x = np.random.default_rng(4).integers(-1000, 1000, n, dtype=np.int32)
    y = np.zeros(n, np.int32)
    _exec(_asm_kernel(template), I32, (n // tile,), x, y)
    np.testing.assert_array_equal(y, ref(x))
