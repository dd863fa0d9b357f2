"""Tile code the benchmarks share (cuTile reads a helper's source from its own module)."""

import cuda.tile as ct


def matmul_tile(A, B, tm, tn, tk):
    """The (tm, tn) float32 accumulator of C = A @ B for this block (cuTile's MatMul
    sample, written anew): the TMA matmul the epilogue benchmarks build on."""
    num_k = ct.num_tiles(A, axis=1, shape=(tm, tk))
    acc = ct.full((tm, tn), 0, dtype=ct.float32)
    for k in range(num_k):
        a = ct.load(A, index=(ct.bid(0), k), shape=(tm, tk), padding_mode=ct.PaddingMode.ZERO)
        b = ct.load(B, index=(k, ct.bid(1)), shape=(tk, tn), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(a, b, acc)
    return acc
