"""The MoE routing and alignment of examples/recipes/moe_align.py written as plain CUDA C
kernels, what a user would write instead of splice (the benchmark's baseline, launched
through CuPy ``RawModule``): the same algorithm and outputs. Per block of TPB tokens a warp
routes a token at a time (its logits in the lanes, k rounds of a warp arg-max: ties to the
lower expert), a shared-memory histogram; then per block the offsets from every block's
histogram (``cub::BlockScan``) and a ``cub::BlockRadixSort`` of the block's (expert, pair)
over the expert's bits only, and the scatter. One kernel when the pairs fit one block.

:func:`source` is the CUDA C of one problem (its shapes as macros); the tests run it on the
CPU executor, the benchmark through CuPy."""

from __future__ import annotations

import math

SOURCE = r'''
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/std/limits>

// the problem's shapes (macros MOE_*: CUB's templates have parameters named E, K)
constexpr int E = MOE_E, K = MOE_K, KP = MOE_KP, BINS = MOE_BINS, TPB = MOE_TPB, TM = MOE_TM;
constexpr int THREADS = 128, WARPS = THREADS / 32;
constexpr float NEG_INF = -cuda::std::numeric_limits<float>::infinity();
constexpr int ITEMS = TPB * KP / THREADS;          // pairs per thread (TPB * KP >= 128)
constexpr int PER_LANE = (E + 31) / 32;            // logits per lane
constexpr int BIN_ITEMS = BINS / THREADS;          // experts per thread in the scans
constexpr int BITS = MOE_BITS;                     // bits of 0 ... BINS (the empty key)

// tokens t0 ... t0 + TPB - 1: ids and weights stored, their pairs counted into hist
__device__ void route(const float* logits, int tokens, int t0, int* ids, float* weights,
                      int* hist) {
    int lane = threadIdx.x % 32;
    for (int t = t0 + threadIdx.x / 32; t < min(t0 + TPB, tokens); t += WARPS) {
        float v[PER_LANE];
        for (int i = 0; i < PER_LANE; ++i) {
            int e = lane + 32 * i;
            v[i] = e < E ? logits[(long long)t * E + e] : NEG_INF;
        }
        float top[K];
        int id[K];
        for (int r = 0; r < K; ++r) {
            float best = NEG_INF;
            int at = 0x7fffffff;
            for (int i = 0; i < PER_LANE; ++i)
                if (lane + 32 * i < E && (v[i] > best || at == 0x7fffffff)) {
                    best = v[i]; at = lane + 32 * i;
                }
            for (int d = 16; d > 0; d /= 2) {          // arg-max, the lower expert on a tie
                float ob = __shfl_xor_sync(0xffffffffu, best, d);
                int oa = __shfl_xor_sync(0xffffffffu, at, d);
                if (ob > best || (ob == best && oa < at)) { best = ob; at = oa; }
            }
            top[r] = best;
            id[r] = at;
            if (at % 32 == lane) v[at / 32] = NEG_INF;
        }
        if (lane == 0) {
            float sum = 0.0f, e[K];
            for (int r = 0; r < K; ++r) { e[r] = expf(top[r] - top[0]); sum += e[r]; }
            for (int r = 0; r < K; ++r) {
                ids[(long long)t * K + r] = id[r];
                weights[(long long)t * K + r] = e[r] / sum;
                atomicAdd(&hist[id[r]], 1);
            }
        }
    }
}

// block b's pairs sorted by expert and scattered; tot/before/mine: per expert, the pairs
// of all blocks, of the blocks before b, of b
__device__ void place(const int* ids, int tokens, int b, const int (&tot)[BIN_ITEMS],
                      const int (&before)[BIN_ITEMS], const int (&mine)[BIN_ITEMS],
                      int* sorted_ids, int* expert_ids, int* num_post) {
    using Scan = cub::BlockScan<int, THREADS>;
    using Sort = cub::BlockRadixSort<int, THREADS, ITEMS, int>;
    __shared__ union { typename Scan::TempStorage scan; typename Sort::TempStorage sort; } tmp;
    __shared__ int base[BINS];
    int padded[BIN_ITEMS], start[BIN_ITEMS], own[BIN_ITEMS], within[BIN_ITEMS], total;
    for (int i = 0; i < BIN_ITEMS; ++i) {
        padded[i] = (tot[i] + TM - 1) / TM * TM;
        own[i] = mine[i];
    }
    Scan(tmp.scan).ExclusiveSum(padded, start, total);
    __syncthreads();
    Scan(tmp.scan).ExclusiveSum(own, within);
    for (int i = 0; i < BIN_ITEMS; ++i)
        base[threadIdx.x * BIN_ITEMS + i] = start[i] + before[i] - within[i];
    if (b == 0 && threadIdx.x == 0) *num_post = total;
    __syncthreads();
    int key[ITEMS], pair[ITEMS];
    for (int i = 0; i < ITEMS; ++i) {
        int p = threadIdx.x * ITEMS + i, t = b * TPB + p / KP, j = p % KP;
        bool used = t < tokens && j < K;
        key[i] = used ? ids[(long long)t * K + j] : BINS;
        pair[i] = t * K + j;
    }
    Sort(tmp.sort).Sort(key, pair, 0, BITS);           // stable: pairs in order per expert
    for (int i = 0; i < ITEMS; ++i) {
        if (key[i] >= E) continue;
        int dest = base[key[i]] + threadIdx.x * ITEMS + i;
        sorted_ids[dest] = pair[i];
        if (dest % TM == 0) expert_ids[dest / TM] = key[i];
    }
}

__device__ void fill(int* sorted_ids, int padded, int* expert_ids, int padded_blocks,
                     int sentinel) {
    int step = gridDim.x * THREADS;
    for (int i = blockIdx.x * THREADS + threadIdx.x; i < padded; i += step)
        sorted_ids[i] = sentinel;
    for (int i = blockIdx.x * THREADS + threadIdx.x; i < padded_blocks; i += step)
        expert_ids[i] = 0;
}

extern "C" __global__ void __launch_bounds__(THREADS) moe_one_block(
        const float* logits, int tokens, int* ids, float* weights, int* sorted_ids,
        int padded, int* expert_ids, int padded_blocks, int* num_post) {
    __shared__ int hist[BINS];
    for (int e = threadIdx.x; e < BINS; e += THREADS) hist[e] = 0;
    fill(sorted_ids, padded, expert_ids, padded_blocks, tokens * K);
    __syncthreads();
    route(logits, tokens, 0, ids, weights, hist);
    __syncthreads();                                   // ids and hist complete
    int counts[BIN_ITEMS], zero[BIN_ITEMS];
    for (int i = 0; i < BIN_ITEMS; ++i) {
        counts[i] = hist[threadIdx.x * BIN_ITEMS + i];
        zero[i] = 0;
    }
    place(ids, tokens, 0, counts, zero, counts, sorted_ids, expert_ids, num_post);
}

extern "C" __global__ void __launch_bounds__(THREADS) moe_route_count(
        const float* logits, int tokens, int* ids, float* weights, int* counts,
        int* sorted_ids, int padded, int* expert_ids, int padded_blocks) {
    __shared__ int hist[BINS];
    for (int e = threadIdx.x; e < BINS; e += THREADS) hist[e] = 0;
    fill(sorted_ids, padded, expert_ids, padded_blocks, tokens * K);
    __syncthreads();
    route(logits, tokens, blockIdx.x * TPB, ids, weights, hist);
    __syncthreads();
    for (int e = threadIdx.x; e < BINS; e += THREADS) counts[blockIdx.x * BINS + e] = hist[e];
}

extern "C" __global__ void __launch_bounds__(THREADS) moe_place(
        const int* ids, int tokens, const int* counts, int* sorted_ids, int* expert_ids,
        int* num_post) {
    int tot[BIN_ITEMS], before[BIN_ITEMS], mine[BIN_ITEMS];
    for (int i = 0; i < BIN_ITEMS; ++i) {
        int e = threadIdx.x * BIN_ITEMS + i;
        tot[i] = before[i] = mine[i] = 0;
        for (int r = 0; r < gridDim.x; ++r) {
            int c = counts[r * BINS + e];
            tot[i] += c;
            if (r < blockIdx.x) before[i] += c;
            if (r == blockIdx.x) mine[i] = c;
        }
    }
    place(ids, tokens, blockIdx.x, tot, before, mine, sorted_ids, expert_ids, num_post);
}
'''


def source(c: dict, experts: int) -> str:
    """The CUDA C of one problem (``c``: the recipe's ``config``)."""
    assert math.log2(c["bins"]).is_integer()
    return "".join(f"#define MOE_{k} {v}\n" for k, v in (
        ("E", experts), ("K", c["k"]), ("KP", c["kp"]), ("BINS", c["bins"]),
        ("TPB", c["tpb"]), ("TM", c["tile_m"]), ("BITS", c["bins"].bit_length()))) + SOURCE


def options(include_dirs) -> tuple:
    return ("-std=c++17",) + tuple(f"-I{d}" for d in include_dirs)


def launches(c: dict, experts: int, logits, out: dict, tokens: int) -> list:
    """(entry, grid, arguments) of the kernels, ``out`` the recipe's ``outputs`` (the
    arrays as the caller passes them: CuPy arrays, or the executor's Pointers)."""
    o = out
    if c["blocks"] == 1:
        return [("moe_one_block", (1,), (logits, tokens, o["topk_ids"], o["topk_weights"],
                                         o["sorted_token_ids"], c["padded"],
                                         o["sorted_expert_ids"], c["padded_blocks"],
                                         o["num_tokens_post_padded"]))]
    return [("moe_route_count", (c["blocks"],),
             (logits, tokens, o["topk_ids"], o["topk_weights"], o["counts"],
              o["sorted_token_ids"], c["padded"], o["sorted_expert_ids"],
              c["padded_blocks"])),
            ("moe_place", (c["blocks"],),
             (o["topk_ids"], tokens, o["counts"], o["sorted_token_ids"],
              o["sorted_expert_ids"], o["num_tokens_post_padded"]))]
