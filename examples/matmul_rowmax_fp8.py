"""A TMA matmul C = A @ B (float16) whose epilogue computes FP8 scales: per row of C, the
absolute maximum divided by 448 (the largest float8 e4m3 value), the scale that quantises
the row to FP8 without overflow; and the absolute maximum of the whole of C (the
per-tensor amax of delayed FP8 scaling).

The epilogue works on tiles, not on C in global memory: ``m = ct.max(ct.abs(c), axis=1)``
is the (TM,) row maximum of this block's C tile, and ``row_scales(m, ...)`` is a
warpgroup-scope tile call (``scope="warpgroup"``, a ``splice.tile`` parameter): splice
stages ``m`` in shared memory, and every thread of the warpgroup tileiras runs the
epilogue on calls ``row_scales`` once per tile with ``m`` as ``const float (&m)[TM]``.
Thread ``r`` of the group folds row ``r``'s scale into ``scales`` with an atomic max (the
row's other column tiles belong to other blocks); the group reduces the rows' maxima with
a warp reduction (``__reduce_max_sync``) and the group barrier, and one thread folds the
tile's maximum into ``amax``. C itself is stored exactly as the plain matmul stores it (a
TMA store).

On sm_90 tileiras warp-specialises this kernel as it does the plain matmul (256 threads):
warps 0-3 (one warpgroup) run the k-loop's wgmma and the epilogue, so the call runs on
them; warp 4 issues the TMA loads, warp 5 the TMA store. ``memory="arguments"`` (the callee
touches global memory only through ``scales`` and ``amax``) keeps it so: an impure call
that may touch any memory is ordered after every load and store of the kernel, and tileiras
then splits off an epilogue warpgroup (384 threads) and stops pipelining the k-loop
(``benchmarks/warpgroup_tiles_cpu.md``).

With a GPU the result is checked against PyTorch. Without one, the kernel is compiled for
sm_90 and the call sites and the SASS CALL count are printed.
"""

import sys

import cuda.tile as ct

import splice

TM, TN, TK = 128, 128, 64

ROW_SCALES_SRC = r'''
#include <splice_group.h>
// m: the absolute maximum of each of this block's N rows of C (N = TM), rows
// blockIdx.x * N on.
template <int N>
__device__ void row_scales(const float (&m)[N], float* scales, float* amax) {
    // cuTile arrays live in global memory: saying so lets NVVM emit global reductions
    // (RED) for the atomics below, where a generic pointer gives generic ATOMs.
    __builtin_assume(__isGlobal(scales));
    __builtin_assume(__isGlobal(amax));
    __shared__ float per_warp[4];
    const long long row0 = (long long)blockIdx.x * N;
    const unsigned rank = splice_group_rank();          // 0..127: 4 warps of 32 lanes
    float t = 0.0f;                                      // this thread's rows' maximum
    for (unsigned r = rank; r < N; r += splice_group_size()) {
        t = fmaxf(t, m[r]);      // non-negative floats order as their bits: atomicMax
        atomicMax((int*)&scales[row0 + r], __float_as_int(m[r] / 448.0f));
    }
    // the warp's maximum: one warp reduction over the bits (REDUX), as atomicMax above
    t = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(t)));
    if (rank % 32 == 0) per_warp[rank / 32] = t;
    splice_group_sync();
    if (rank == 0)
        atomicMax((int*)amax, __float_as_int(fmaxf(fmaxf(per_warp[0], per_warp[1]),
                                                   fmaxf(per_warp[2], per_warp[3]))));
    // No barrier after reading per_warp: splice's exit barrier after the call, and the
    // entry barrier of any next call, order this read before the next call's writes.
}'''

row_scales = splice.extern(source=ROW_SCALES_SRC, name="row_scales", scope="warpgroup",
                           signature="void(tile(float32), float32*, float32*)",
                           memory="arguments")


def matmul_acc(A, B, tm, tn, tk):
    """The (tm, tn) float32 accumulator of A @ B for this block: TMA loads, ct.mma."""
    num_k = ct.num_tiles(A, axis=1, shape=(tm, tk))
    acc = ct.full((tm, tn), 0, dtype=ct.float32)
    for k in range(num_k):
        a = ct.load(A, index=(ct.bid(0), k), shape=(tm, tk), padding_mode=ct.PaddingMode.ZERO)
        b = ct.load(B, index=(k, ct.bid(1)), shape=(tk, tn), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(a, b, acc)
    return acc


@splice.kernel
def matmul_fp8_scales(A, B, C, scales, amax, tm: ct.Constant[int], tn: ct.Constant[int],
                      tk: ct.Constant[int]):
    c = ct.astype(matmul_acc(A, B, tm, tn, tk), C.dtype)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=c)          # TMA, as the plain matmul
    # the row maxima of the stored (rounded) values: the scales are exact for C
    m = ct.astype(ct.max(ct.abs(c), axis=1), ct.float32)        # (tm,)
    row_scales(m, scales, amax)


def reference(C):
    """(scales, amax) of C as the kernel computes them (torch): IEEE division, as the
    callee's m / 448.0f (torch divides a tensor by a Python scalar as a multiplication by
    its reciprocal, which can differ in the last bit)."""
    import torch
    m = C.float().abs().amax(dim=1)
    return m / torch.full_like(m, 448.0), m.max().reshape(1)


def run_on_gpu(M=1024, N=512, K=256):
    import torch
    torch.manual_seed(0)
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16)
    C = torch.empty(M, N, device="cuda", dtype=torch.float16)
    scales = torch.zeros(M, device="cuda", dtype=torch.float32)
    amax = torch.zeros(1, device="cuda", dtype=torch.float32)
    ct.launch(torch.cuda.current_stream(), (M // TM, N // TN, 1), matmul_fp8_scales,
              (A, B, C, scales, amax, TM, TN, TK))
    torch.cuda.synchronize()
    torch.testing.assert_close(C, (A.float() @ B.float()).half(), rtol=1e-2, atol=1e-1)
    want_scales, want_amax = reference(C)
    assert torch.equal(scales, want_scales), (scales - want_scales).abs().max()
    assert torch.equal(amax, want_amax), (amax, want_amax)
    q = (C.float() / scales[:, None]).to(torch.float8_e4m3fn)     # no overflow: |q| <= 448
    assert torch.isfinite(q.float()).all()
    print(f"matmul_fp8_scales on {splice.toolchain.gpu_arch()}: {M}x{N}x{K}, C, the {M} "
          f"FP8 scales and the amax match PyTorch")
    print("OK")


def signature(dtype=ct.float16, tm=TM, tn=TN, tk=TK):
    """The kernel's compile-time signature (for splice.compile without a GPU)."""
    from cuda.tile.compilation import (
        ArrayConstraint,
        CallingConvention,
        KernelSignature,
    )

    def array(dt, ndim):
        return ArrayConstraint(dt, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                               alias_groups=(), may_alias_internally=False,
                               stride_constant=(None,) * (ndim - 1) + (1,),
                               stride_divisible_by=(16,) * (ndim - 1) + (1,),
                               base_addr_divisible_by=16, shape_divisible_by=16)
    return KernelSignature([array(dtype, 2), array(dtype, 2), array(dtype, 2),
                            array(ct.float32, 1), array(ct.float32, 1), tm, tn, tk],
                           CallingConvention.cutile_python_v1())


def compile_only():
    build = splice.compile(matmul_fp8_scales, signature(), arch="sm_90")
    print("no GPU: compiled for sm_90 without launching")
    print(build.summary())
    return build


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
