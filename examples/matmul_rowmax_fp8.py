"""A TMA matmul C = A @ B (float16) whose epilogue computes FP8 scales: per row of C, the
absolute maximum divided by 448 (the largest float8 e4m3 value), the scale that quantises
the row to FP8 without overflow.

The epilogue is a warpgroup-scope call (``scope="warpgroup"``): tileiras warp-specialises
this kernel on sm_90 (a TMA producer warp, a TMA store warp and one consumer warpgroup of
128 threads that runs the tile code), and every thread of that warpgroup calls
``row_scales`` once per tile. Each warp takes 32 rows of the C tile the block just stored;
its lanes read 4 columns each and combine their maxima with warp shuffles; lane 0 folds the
row's maximum into ``scales`` with an atomic max (the row's other column tiles belong to
other blocks).

With a GPU the result is checked against PyTorch. Without one, the kernel is compiled for
sm_90 and the call site and the SASS CALL count are printed.
"""

import sys

import cuda.tile as ct

import splice

TM, TN, TK = 128, 128, 64


def make_row_scales(ldc: int):
    """The epilogue extern for a C with ``ldc`` columns (a compile-time constant: the two
    pointers take the call's 128 argument bits)."""
    return splice.extern(scope="warpgroup", defines={"LDC": ldc, "TM": TM, "TN": TN},
                         name="row_scales", signature="void(float16*, float32*)",
                         source=r'''
#include <cuda_fp16.h>
#include <splice_group.h>
extern "C" __device__ void row_scales(const __half* C, float* scales) {
    const unsigned rank = splice_group_rank();          // 0..127: 4 warps of 32 lanes
    const unsigned warp = rank / 32, lane = rank % 32;
    const long long row0 = (long long)blockIdx.x * TM, col0 = (long long)blockIdx.y * TN;
    for (unsigned r = warp; r < TM; r += splice_group_size() / 32) {
        const __half2* p = (const __half2*)(C + (row0 + r) * LDC + col0) + 2 * lane;
        __half2 a = __habs2(p[0]), b = __habs2(p[1]);   // 4 columns per lane
        float m = fmaxf(fmaxf(__low2float(a), __high2float(a)),
                        fmaxf(__low2float(b), __high2float(b)));
        for (int d = 16; d > 0; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
        if (lane == 0)   // non-negative floats order as their bits
            atomicMax((int*)&scales[row0 + r], __float_as_int(m / 448.0f));
    }
}''')


def matmul_acc(A, B, tm, tn, tk):
    """The (tm, tn) float32 accumulator of A @ B for this block: TMA loads, ct.mma."""
    num_k = ct.num_tiles(A, axis=1, shape=(tm, tk))
    acc = ct.full((tm, tn), 0, dtype=ct.float32)
    for k in range(num_k):
        a = ct.load(A, index=(ct.bid(0), k), shape=(tm, tk), padding_mode=ct.PaddingMode.ZERO)
        b = ct.load(B, index=(k, ct.bid(1)), shape=(tk, tn), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(a, b, acc)
    return acc


def make_kernel(row_scales):
    @splice.kernel
    def matmul_fp8_scales(A, B, C, scales, tm: ct.Constant[int], tn: ct.Constant[int],
                          tk: ct.Constant[int]):
        acc = matmul_acc(A, B, tm, tn, tk)
        # stored by the warpgroup's own threads (not the TMA store warp), so that the
        # call's entry barrier makes the tile visible to every thread of the group
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype),
                 allow_tma=False)
        row_scales(C, scales)
    return matmul_fp8_scales


def run_on_gpu(M=1024, N=512, K=256):
    import torch
    kernel = make_kernel(make_row_scales(N))
    torch.manual_seed(0)
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16)
    C = torch.empty(M, N, device="cuda", dtype=torch.float16)
    scales = torch.zeros(M, device="cuda", dtype=torch.float32)
    ct.launch(torch.cuda.current_stream(), (M // TM, N // TN, 1), kernel,
              (A, B, C, scales, TM, TN, TK))
    torch.cuda.synchronize()
    torch.testing.assert_close(C, (A.float() @ B.float()).half(), rtol=1e-2, atol=1e-1)
    # IEEE division, as the callee's m / 448.0f (torch divides a tensor by a Python scalar
    # as a multiplication by its reciprocal, which can differ in the last bit)
    want = C.float().abs().amax(dim=1) / torch.full((M,), 448.0, device="cuda")
    assert torch.equal(scales, want), (scales - want).abs().max()
    q = (C.float() / scales[:, None]).to(torch.float8_e4m3fn)     # no overflow: |q| <= 448
    assert torch.isfinite(q.float()).all()
    print(f"matmul_fp8_scales on {splice.toolchain.gpu_arch()}: {M}x{N}x{K}, C and the "
          f"{M} FP8 scales match PyTorch")
    print("OK")


def compile_only(N=512):
    from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature

    def array(dtype, ndim):
        return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                               alias_groups=(), may_alias_internally=False,
                               stride_constant=(None,) * (ndim - 1) + (1,),
                               stride_divisible_by=(16,) * (ndim - 1) + (1,),
                               base_addr_divisible_by=16, shape_divisible_by=16)
    sig = KernelSignature([array(ct.float16, 2), array(ct.float16, 2), array(ct.float16, 2),
                           array(ct.float32, 1), TM, TN, TK],
                          CallingConvention.cutile_python_v1())
    build = splice.compile(make_kernel(make_row_scales(N)), sig, arch="sm_90")
    print("no GPU: compiled for sm_90 without launching")
    print(build.summary())
    return build


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
