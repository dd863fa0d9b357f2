"""The k largest elements of every row of X and where they are, with
``splice.cub.top_k`` (CUB ``BlockRadixSort`` of (value, index) pairs on the row's tile,
staged in shared memory by splice): no CUDA C to write.

With a GPU the result is checked against ``torch.topk``. Without one, the kernel is
compiled for sm_90 and the call sites and the SASS CALL count are printed.
"""

import sys

import cuda.tile as ct

import splice


@splice.kernel
def top_k_rows(x, values, indices, N: ct.Constant[int], K: ct.Constant[int]):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(N,), allow_tma=False)    # row bid of a flat array
    v, i = splice.cub.top_k(t, K)                                 # largest first
    ct.store(values, index=(bid,), tile=v)
    ct.store(indices, index=(bid,), tile=i)


def run_on_gpu(M=4096, N=1024, K=8):
    import torch
    x = torch.randperm(M * N, device="cuda").float().view(M, N)   # distinct values
    v = torch.empty(M, K, device="cuda")
    i = torch.empty(M, K, device="cuda", dtype=torch.int32)
    ct.launch(torch.cuda.current_stream(), (M,), top_k_rows,
              (x.view(-1), v.view(-1), i.view(-1), N, K))
    torch.cuda.synchronize()
    ref = torch.topk(x, K, dim=-1)
    assert torch.equal(v, ref.values) and torch.equal(i.long(), ref.indices)
    print(f"top_k_rows on {splice.toolchain.gpu_arch()}: k={K} of {M}x{N}, equal to "
          f"torch.topk")
    print("OK")


def compile_only(N=1024, K=8):
    sig = splice.kernel_signature("array(float32)", "array(float32)", "array(int32)", N, K)
    build = splice.compile(top_k_rows, sig, arch="sm_90")
    print("no GPU: compiled for sm_90 without launching")
    print(build.summary())


if __name__ == "__main__":
    if splice.toolchain.gpu_arch() is not None and "--compile-only" not in sys.argv:
        run_on_gpu()
    else:
        compile_only()
