"""Why a splice call in the TMA matmul's epilogue makes tileiras split the kernel into three
warpgroups and stop pipelining its k-loop: a CPU probe (sm_90, no GPU), the evidence of
``benchmarks/warpgroup_tiles_cpu.md`` ("What the memory token costs").

Each variant compiles one kernel for sm_90 in a fresh process and prints the proxy that
predicts its GPU time (issue 21): ``.reqntid`` (256: the plain matmul's two warpgroups; 384:
an epilogue warpgroup split off), the ``wgmma.mma_async`` count and the
``wgmma.wait_group`` depths (``1`` in the loop: one wgmma group stays in flight across
iterations, as in the plain kernel; only ``0``: each iteration waits for its own group).

Some variants change what cuTile's token-order pass (``cuda.tile._passes.token_order``, a
private module) gives splice's markers as their input memory token, their memory order,
or the atomic they are: experiments on the cause, not something splice does. "entry
token": the kernel's first token, ordered after none of the kernel's loads and stores.

    python benchmarks/warpgroup_token_probe.py            # every variant
    python benchmarks/warpgroup_token_probe.py elem-root  # one (names: VARIANTS)
"""

import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import cuda.tile as ct

import splice

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from matmul_rowmax_fp8 import matmul_acc, matmul_fp8_scales, row_scales, signature

elem_max = splice.extern(
    name="elem_max", signature="int32(float32*, int32, float32)", pure=False,
    source=r'''extern "C" __device__ int elem_max(float* s, int i, float v) {
        atomicMax((int*)&s[i], __float_as_int(v)); return 0; }''')


@splice.kernel
def elem_epilogue(A, B, C, Mx, tm: ct.Constant[int], tn: ct.Constant[int],
                  tk: ct.Constant[int]):
    """An impure element call on the (tm,) row maxima after C's TMA store."""
    c = ct.astype(matmul_acc(A, B, tm, tn, tk), C.dtype)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)
    m = ct.astype(ct.max(ct.abs(c), axis=1), ct.float32)
    elem_max(Mx, ct.bid(0) * tm + ct.arange(tm, dtype=ct.int32), m)


@splice.kernel
def call_before_store(A, B, C, scales, amax, tm: ct.Constant[int], tn: ct.Constant[int],
                      tk: ct.Constant[int]):
    """The example's kernel with its tile call before C's store."""
    c = ct.astype(matmul_acc(A, B, tm, tn, tk), C.dtype)
    row_scales(ct.astype(ct.max(ct.abs(c), axis=1), ct.float32), scales, amax)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)


def _cas_kernel(order):
    @splice.kernel
    def cutile_cas(A, B, C, Mx, tm: ct.Constant[int], tn: ct.Constant[int],
                   tk: ct.Constant[int]):
        """cuTile's own atomic on the (tm,) row maxima (Mx: int32) after C's store."""
        c = ct.astype(matmul_acc(A, B, tm, tn, tk), C.dtype)
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)
        mi = ct.astype(ct.astype(ct.max(ct.abs(c), axis=1), ct.float32), ct.int32)
        ct.atomic_cas(Mx, ct.bid(0) * tm + ct.arange(tm, dtype=ct.int32), mi, mi + 1,
                      memory_order=order)
    return cutile_cas


def _rmw_kernel(order):
    @splice.kernel
    def cutile_max(A, B, C, Mx, tm: ct.Constant[int], tn: ct.Constant[int],
                   tk: ct.Constant[int]):
        """cuTile's own atomic max on the (tm,) row maxima (Mx: int32) after C's store."""
        c = ct.astype(matmul_acc(A, B, tm, tn, tk), C.dtype)
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)
        mi = ct.astype(ct.astype(ct.max(ct.abs(c), axis=1), ct.float32), ct.int32)
        ct.atomic_max(Mx, ct.bid(0) * tm + ct.arange(tm, dtype=ct.int32), mi,
                      memory_order=order)
    return cutile_max


def _elem_signature(mx_dtype=ct.float32):
    from cuda.tile.compilation import CallingConvention, KernelSignature
    params = list(signature().parameters[:4])
    params[3] = dataclasses.replace(params[3], dtype=mx_dtype)
    return KernelSignature(params + [128, 128, 64], CallingConvention.cutile_python_v1())


def _patch_tokens(choose) -> None:
    """Give every splice marker the input token ``choose(op, token_map, tokens)`` returns
    (``tokens``: those cuTile would join; a list to join, or None: the entry token)."""
    import cuda.tile._passes.token_order as to
    from cuda.tile._ir.ops import JoinTokens

    from splice.tracing.tile_ir import SpliceImpureCall
    original = to._get_input_token

    def get_input_token(token_key, op, token_map, memory_order, ctx):
        if not isinstance(op, SpliceImpureCall):
            return original(token_key, op, token_map, memory_order, ctx)
        tokens = to._collect_join_tokens(token_key, token_map, memory_order)
        keep = choose(op, token_map, tokens)
        if keep is None:
            return token_map[to.ACQUIRE_TOKEN_KEY], None
        if len(keep) == 1:
            return keep[0], None
        tok = to._make_token_var(ctx, op.loc)
        return tok, JoinTokens(tokens=tuple(keep), result_vars=(tok,), loc=op.loc)
    to._get_input_token = get_input_token


def _without_arrays(bits):
    """A ``choose`` that drops the tokens of the kernel arrays whose alias bits are
    ``bits`` (cuTile numbers the array parameters 1, 2, 4, ...: A, B, C, Mx)."""
    def choose(op, token_map, tokens):
        return [t for t in tokens if not any(getattr(k, "alias_set", None) in bits
                                             for k, v in token_map.items() if v is t)]
    return choose


def _roles(*roles):
    """A ``choose`` that gives the entry token to the tile staging's sites of ``roles``."""
    def choose(op, token_map, tokens):
        staging = op.site.extern.staging
        return None if staging and staging.role in roles else tokens
    return choose


def _exchange_markers() -> None:
    """Emit every atomic marker as an acq_rel exchange (of its operands' xor) instead of a
    compare-and-swap: its tokens as before. splice's rewriter does not take it, so these
    variants show tileiras's PTX only."""
    from splice.system import _cutile as cu
    from splice.tracing import tile_ir

    def exchange(ctx, site, pointer, args, token, order):
        tt = ctx.type_table
        ity = tile_ir._int_type(tt, site.marker_bits, site.shape)
        cmp, val = tile_ir._pack_operands(ctx, site, args)
        return cu.bc.encode_AtomicRMWTkoOp(
            ctx.builder, result_type=ity, result_token_type=tt.Token,
            pointers=ctx.get_value(pointer), arg=cu.bc.encode_XOrIOp(ctx.builder, ity, cmp, val),
            mask=None, token=None if token is None else ctx.get_value(token),
            memory_ordering_semantics=cu.memory_order_to_bytecode[order],
            memory_scope=cu.memory_scope_to_bytecode[cu.MemoryScope.DEVICE],
            mode=cu.bc.AtomicRMWMode.XCHG)
    tile_ir._marker_cas = exchange


def _relaxed_markers() -> None:
    import splice.tracing.trace as trace
    original = trace.cu.add_operation_variadic

    def add(op, types, **kw):
        if "memory_order" in kw:
            kw["memory_order"] = trace.cu.MemoryOrder.RELAXED
        return original(op, types, **kw)
    trace.cu.add_operation_variadic = add


def _plain_signature():
    from cuda.tile.compilation import CallingConvention, KernelSignature
    return KernelSignature(list(signature().parameters[:3]) + [128, 128, 64],
                           CallingConvention.cutile_python_v1())


def _bench(name):
    import bench_warpgroup
    return getattr(bench_warpgroup, name)


#: name: (what it is, how to set it up, the kernel, its signature)
VARIANTS = {
    "plain": ("the plain matmul", None, lambda: _bench("matmul_plain"), _plain_signature),
    "rowmax": ("its row maxima stored by ct.store, no call", None,
               lambda: _bench("matmul_rowmax"), _elem_signature),
    "fused": ("the example (warpgroup tile call after C's store)", None,
              lambda: matmul_fp8_scales, signature),
    "call-before-store": ("the example, the call before C's store", None,
                          lambda: call_before_store, signature),
    "elem": ("impure element call after C's store", None, lambda: elem_epilogue,
             _elem_signature),
    "elem-relaxed": ("  marker relaxed (its pointer still aliases every array)",
                     _relaxed_markers, lambda: elem_epilogue, _elem_signature),
    "elem-root": ("  marker acq_rel, on the entry token", lambda: _patch_tokens(
        lambda *a: None), lambda: elem_epilogue, _elem_signature),
    "elem-no-C": ("  token: the k-loop's loads, not C's store",
                  lambda: _patch_tokens(_without_arrays({4})), lambda: elem_epilogue,
                  _elem_signature),
    "elem-no-AB": ("  token: C's store, not the k-loop's loads",
                   lambda: _patch_tokens(_without_arrays({1, 2})), lambda: elem_epilogue,
                   _elem_signature),
    "fused-root-stores": ("the example, staging stores on the entry token",
                          lambda: _patch_tokens(_roles("store")), lambda: matmul_fp8_scales,
                          signature),
    "fused-root-stores-call": ("the example, staging stores and call on the entry token",
                               lambda: _patch_tokens(_roles("store", "call")),
                               lambda: matmul_fp8_scales, signature),
    "fused-exchange": ("the example, markers acq_rel exchanges (tileiras PTX)",
                       _exchange_markers, lambda: matmul_fp8_scales, signature),
    "elem-exchange": ("impure element call, marker an acq_rel exchange (tileiras PTX)",
                      _exchange_markers, lambda: elem_epilogue, _elem_signature),
    "cutile-max-acq_rel": ("cuTile's atomic_max on Mx, acq_rel", None,
                           lambda: _rmw_kernel(ct.MemoryOrder.ACQ_REL),
                           lambda: _elem_signature(ct.int32)),
    "cutile-cas-acq_rel": ("cuTile's atomic_cas on Mx, acq_rel", None,
                           lambda: _cas_kernel(ct.MemoryOrder.ACQ_REL),
                           lambda: _elem_signature(ct.int32)),
    "cutile-cas-relaxed": ("cuTile's atomic_cas on Mx, relaxed", None,
                           lambda: _cas_kernel(ct.MemoryOrder.RELAXED),
                           lambda: _elem_signature(ct.int32)),
}


def kloop_shape(ptx: str) -> tuple[int, int, tuple[int, ...]]:
    """(``.reqntid``, ``wgmma.mma_async`` count, the sorted ``wgmma.wait_group`` depths)
    of a kernel's PTX."""
    return (int(re.search(r"\.reqntid (\d+)", ptx).group(1)),
            len(re.findall(r"wgmma\.mma_async", ptx)),
            tuple(sorted({int(d) for d in
                          re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)})))


def probe(name: str) -> str:
    what, setup, kernel, sig = VARIANTS[name]
    if setup:
        setup()
    try:
        if "tileiras PTX" in what:
            from splice.system import toolchain
            from splice.tracing import trace
            traced = trace.trace_kernel(kernel(), sig(), "sm_90")
            ptx = toolchain.run_tileiras(traced.bytecode, traced.tileiras_flags,
                                         timeout=None, what=name).ptx
        else:
            ptx = splice.compile(kernel(), sig(), arch="sm_90").ptx
    except splice.SpliceError as e:
        return f"{name:24} {what:58} refused: {type(e).__name__}: {str(e)[:120]}"
    threads, mmas, waits = kloop_shape(ptx)
    return f"{name:24} {what:58} .reqntid {threads}, {mmas} mma_async, wait_group {waits}"


def main(argv) -> None:
    if argv:
        for name in argv:
            print(probe(name), flush=True)
        return
    env = dict(os.environ, SPLICE_CACHE_DIR=tempfile.mkdtemp(prefix="splice-probe-"))
    for name in VARIANTS:   # a process each: the patches stay in it
        subprocess.run([sys.executable, __file__, name], check=True, env=env)


if __name__ == "__main__":
    main(sys.argv[1:])
