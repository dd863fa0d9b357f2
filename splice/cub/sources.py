"""The CUDA C that :mod:`splice.cub` compiles: device templates (namespace ``splice_cub``)
around CUB's block algorithms, which :mod:`splice.cub` instantiates
per tile shape and dtype and calls at block scope. Text only: it imports nothing of splice
(:mod:`splice.cub` builds the libraries, :mod:`splice.forms.cub_names` maps the templates back to
``splice.cub``'s functions for messages)."""

#: The opening of both sources' namespace: the block size every op is written for, the
#: check that the block is that size, and the items per thread of an N-element tile.
_PRELUDE = r'''
namespace splice_cub {
constexpr int THREADS = 128;   // tileiras's block for kernels that are not warp-specialised

__device__ __forceinline__ void check_block() {
    if (blockDim.x != THREADS || blockDim.y != 1 || blockDim.z != 1) __trap();
}

// every tile these templates take is one of splice's staging buffers, in shared memory:
// said, NVVM reads and writes them with ld/st.shared instead of generic accesses (NVVM
// cannot see where a reference points). Not said for users' tile functions: the static
// out-of-tile check follows generic addresses (splice.analysis.memory_proof), not shared ones
template <class... Tile> __device__ __forceinline__ void in_shared(const Tile &... t) {
    (__builtin_assume(__isShared(&t[0])), ...);
}

template <int N> struct items {
    static_assert(N % THREADS == 0, "splice.cub: the tile must have a multiple of 128 elements "
                                    "(tileiras's 128 threads, n / 128 items each)");
    static constexpr int value = N / THREADS;
};
'''

#: The radix sorts, top-k, inclusive sum and histogram (CUB's ``BlockRadixSort``,
#: ``BlockScan``; the histogram with shared-memory atomics).
SORTS_SOURCE = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
''' + _PRELUDE + r'''
template <class T, bool DESCENDING, int N>
__device__ void sort_keys(const T (&x)[N], T (&y)[N]) {
    in_shared(x, y);
    constexpr int I = items<N>::value;
    using Sort = cub::BlockRadixSort<T, THREADS, I>;
    __shared__ typename Sort::TempStorage tmp;
    check_block();
    T v[I];
    for (int i = 0; i < I; ++i) v[i] = x[threadIdx.x * I + i];     // blocked arrangement
    if (DESCENDING) Sort(tmp).SortDescending(v); else Sort(tmp).Sort(v);
    for (int i = 0; i < I; ++i) y[threadIdx.x * I + i] = v[i];
}

template <class K, class V, bool DESCENDING, int N>
__device__ void sort_pairs(const K (&k)[N], const V (&v)[N], K (&ks)[N], V (&vs)[N]) {
    in_shared(k, v, ks, vs);
    constexpr int I = items<N>::value;
    using Sort = cub::BlockRadixSort<K, THREADS, I, V>;
    __shared__ typename Sort::TempStorage tmp;
    check_block();
    K a[I];
    V b[I];
    for (int i = 0; i < I; ++i) { a[i] = k[threadIdx.x * I + i]; b[i] = v[threadIdx.x * I + i]; }
    if (DESCENDING) Sort(tmp).SortDescending(a, b); else Sort(tmp).Sort(a, b);
    for (int i = 0; i < I; ++i) { ks[threadIdx.x * I + i] = a[i]; vs[threadIdx.x * I + i] = b[i]; }
}

template <class T, int N, int K>
__device__ void top_k(const T (&x)[N], T (&vals)[K], int (&idx)[K]) {
    in_shared(x, vals, idx);
    static_assert(K <= N, "splice.cub.top_k: k must be at most the tile's size");
    constexpr int I = items<N>::value;
    using Sort = cub::BlockRadixSort<T, THREADS, I, int>;
    __shared__ typename Sort::TempStorage tmp;
    check_block();
    T a[I];
    int b[I];
    for (int i = 0; i < I; ++i) { a[i] = x[threadIdx.x * I + i]; b[i] = threadIdx.x * I + i; }
    Sort(tmp).SortDescending(a, b);
    for (int i = 0; i < I; ++i) {
        int r = threadIdx.x * I + i;
        if (r < K) { vals[r] = a[i]; idx[r] = b[i]; }
    }
}

template <class T, int N>
__device__ void inclusive_sum(const T (&x)[N], T (&y)[N]) {
    in_shared(x, y);
    constexpr int I = items<N>::value;
    using Scan = cub::BlockScan<T, THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    check_block();
    T v[I];
    for (int i = 0; i < I; ++i) v[i] = x[threadIdx.x * I + i];
    Scan(tmp).InclusiveSum(v, v);
    for (int i = 0; i < I; ++i) y[threadIdx.x * I + i] = v[i];
}

template <class T, int N, int BINS>
__device__ void histogram(const T (&x)[N], int (&h)[BINS]) {
    in_shared(x, h);
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) h[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        long long s = (long long)x[i];
        if (s >= 0 && s < BINS) atomicAdd(&h[s], 1);
    }
}
}  // namespace splice_cub
'''


#: The scans with an operator, reductions, merge sorts and runs (CUB's ``BlockScan``,
#: ``BlockReduce``, ``BlockMergeSort``, ``BlockDiscontinuity``): a library of their own (a
#: smaller source to parse than the radix sort's), plus one per user operator, appended.
OPS_SOURCE = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda/functional>
#include <cuda/std/functional>
#include <cuda/std/type_traits>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_merge_sort.cuh>
#include <cub/block/block_discontinuity.cuh>
''' + _PRELUDE + r'''
// the named operators (a user's operator is a struct user_op_<hash> appended to this source)
struct op_sum {
    template <class T>
    __device__ __forceinline__ T operator()(const T &a, const T &b) const { return a + b; }
};
// max and min: for floats fmaxf / fminf (PTX max.f32 / min.f32, one FMNMX; a NaN is
// ignored, as by ct.max), whatever the CCCL: cuda::maximum<> is `a < b ? b : a` in older
// CCCL, and in newer CCCL cuda::std::fmax, which under NVRTC (no __builtin_fmaxf) is two
// isnan branches per combine
struct op_max {
    template <class T>
    __device__ __forceinline__ T operator()(const T &a, const T &b) const {
        if constexpr (cuda::std::is_same_v<T, float>) return fmaxf(a, b);
        else if constexpr (cuda::std::is_same_v<T, double>) return fmax(a, b);
        else return a < b ? b : a;
    }
};
struct op_min {
    template <class T>
    __device__ __forceinline__ T operator()(const T &a, const T &b) const {
        if constexpr (cuda::std::is_same_v<T, float>) return fminf(a, b);
        else if constexpr (cuda::std::is_same_v<T, double>) return fmin(a, b);
        else return b < a ? b : a;
    }
};
using op_less = cuda::std::less<>;
using op_greater = cuda::std::greater<>;

template <class T, int N> struct blocked {       // thread t holds elements t*I ... t*I+I-1
    static constexpr int I = items<N>::value;
    T v[I];
    __device__ __forceinline__ void load(const T (&x)[N]) {
        in_shared(x);
        for (int i = 0; i < I; ++i) v[i] = x[threadIdx.x * I + i];
    }
    __device__ __forceinline__ void store(T (&y)[N]) const {
        in_shared(y);
        for (int i = 0; i < I; ++i) y[threadIdx.x * I + i] = v[i];
    }
};

template <class T, class Op, int N>
__device__ void inclusive_scan(const T (&x)[N], T (&y)[N]) {
    using Scan = cub::BlockScan<T, THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    check_block();
    blocked<T, N> b;
    b.load(x);
    Scan(tmp).InclusiveScan(b.v, b.v, Op{});
    b.store(y);
}

template <class T, class Op, int N>
__device__ void exclusive_scan(const T (&x)[N], T initial, T (&y)[N]) {
    using Scan = cub::BlockScan<T, THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    check_block();
    blocked<T, N> b;
    b.load(x);
    Scan(tmp).ExclusiveScan(b.v, b.v, initial, Op{});
    b.store(y);
}

template <class T, int N>
__device__ void exclusive_sum(const T (&x)[N], T initial, T (&y)[N]) {
    exclusive_scan<T, op_sum, N>(x, initial, y);
}

template <class T, class Op, int N>
__device__ T reduce(const T (&x)[N]) {
    using Reduce = cub::BlockReduce<T, THREADS>;
    __shared__ typename Reduce::TempStorage tmp;
    __shared__ T total;
    check_block();
    blocked<T, N> b;
    b.load(x);
    T r = Reduce(tmp).Reduce(b.v, Op{});       // valid in thread 0 only
    if (threadIdx.x == 0) total = r;
    __syncthreads();
    return total;                              // every thread's result
}

template <class T, class Less, int N>
__device__ void merge_sort(const T (&x)[N], T (&y)[N]) {
    using Sort = cub::BlockMergeSort<T, THREADS, items<N>::value>;
    __shared__ typename Sort::TempStorage tmp;
    check_block();
    blocked<T, N> b;
    b.load(x);
    Sort(tmp).StableSort(b.v, Less{});
    b.store(y);
}

template <class K, class V, class Less, int N>
__device__ void merge_sort_pairs(const K (&k)[N], const V (&v)[N], K (&ks)[N], V (&vs)[N]) {
    using Sort = cub::BlockMergeSort<K, THREADS, items<N>::value, V>;
    __shared__ typename Sort::TempStorage tmp;
    check_block();
    blocked<K, N> a;
    blocked<V, N> b;
    a.load(k);
    b.load(v);
    Sort(tmp).StableSort(a.v, b.v, Less{});
    a.store(ks);
    b.store(vs);
}

template <class T, int N>
__device__ void flag_heads(const T (&x)[N], int (&f)[N]) {
    using Disc = cub::BlockDiscontinuity<T, THREADS>;
    __shared__ typename Disc::TempStorage tmp;
    check_block();
    blocked<T, N> b;
    blocked<int, N> h;
    b.load(x);
    Disc(tmp).FlagHeads(h.v, b.v, cuda::std::not_equal_to<>{});
    h.store(f);
}

template <class T, int N>
__device__ void flag_tails(const T (&x)[N], int (&f)[N]) {
    using Disc = cub::BlockDiscontinuity<T, THREADS>;
    __shared__ typename Disc::TempStorage tmp;
    check_block();
    blocked<T, N> b;
    blocked<int, N> t;
    b.load(x);
    Disc(tmp).FlagTails(t.v, b.v, cuda::std::not_equal_to<>{});
    t.store(f);
}

// runs of equal elements: run r's value in vals[r], its length in counts[r]; past the
// number of runs, T{} and 0
template <class T, int N>
__device__ void unique_counts(const T (&x)[N], T (&vals)[N], int (&counts)[N]) {
    in_shared(x, vals, counts);
    constexpr int I = items<N>::value;
    using Disc = cub::BlockDiscontinuity<T, THREADS>;
    using Scan = cub::BlockScan<int, THREADS>;
    __shared__ union { typename Disc::TempStorage disc; typename Scan::TempStorage scan; } tmp;
    check_block();
    blocked<T, N> b;
    int head[I], run[I];
    b.load(x);
    Disc(tmp.disc).FlagHeads(head, b.v, cuda::std::not_equal_to<>{});
    __syncthreads();                           // tmp is reused by the scan
    int runs;
    Scan(tmp.scan).ExclusiveSum(head, run, runs);
    for (int i = 0; i < I; ++i) {
        vals[threadIdx.x * I + i] = T{};
        counts[threadIdx.x * I + i] = 0;
    }
    __syncthreads();
    for (int i = 0; i < I; ++i)                // the run's value and where it starts
        if (head[i]) { vals[run[i]] = b.v[i]; counts[run[i]] = threadIdx.x * I + i; }
    __syncthreads();
    int len[I];
    for (int i = 0; i < I; ++i) {
        int r = threadIdx.x * I + i;
        len[i] = r < runs ? (r + 1 < runs ? counts[r + 1] : N) - counts[r] : 0;
    }
    __syncthreads();
    for (int i = 0; i < I; ++i) counts[threadIdx.x * I + i] = len[i];
}

// the inverse: value r repeated counts[r] times (a negative count as 0), the first N items,
// then T{}. Not CUB's BlockRunLengthDecode: within a thread's items it steps from a run to
// the next one, so a run of length 0 there (CUB allows them only as trailing padding) puts
// that run's value out (seen on the executor). Each element finds its run by a binary search
// of the runs' starts instead; 64-bit starts (N counts of up to 2**31 - 1 do not overflow).
template <class T, int N>
__device__ void run_length_decode(const T (&vals)[N], const int (&counts)[N], T (&y)[N]) {
    in_shared(vals, counts, y);
    constexpr int I = items<N>::value;
    using Scan = cub::BlockScan<unsigned long long, THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    __shared__ unsigned long long start[N];
    check_block();
    unsigned long long c[I], total;
    for (int i = 0; i < I; ++i) c[i] = (unsigned long long)max(counts[threadIdx.x * I + i], 0);
    Scan(tmp).ExclusiveSum(c, c, total);
    for (int i = 0; i < I; ++i) start[threadIdx.x * I + i] = c[i];
    __syncthreads();
    for (int i = 0; i < I; ++i) {
        unsigned long long j = threadIdx.x * I + i;
        int lo = 0, hi = N;                    // the first run that starts after j
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (start[mid] <= j) lo = mid + 1; else hi = mid;
        }
        y[j] = j < total ? vals[lo - 1] : T{};  // lo >= 1: start[0] = 0 <= j
    }
}
}  // namespace splice_cub
'''
