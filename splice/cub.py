"""Tile operations cuTile lacks, on CUB's block algorithms and staged tiles
(:mod:`splice.forms.staging`): call them inside a ``@splice.kernel`` on a 1-D tile::

    y = splice.cub.sort(t)                          # ascending (descending=True)
    ks, vs = splice.cub.sort_pairs(keys, values)    # values follow their keys
    vals, idx = splice.cub.top_k(t, 8)              # the 8 largest, descending, and where
    s = splice.cub.inclusive_sum(t)                 # like ct.cumsum
    h = splice.cub.histogram(t, 256)                # counts of the values 0..255

Each is a block-scope call (``scope="block"``): every thread of the block runs CUB's
``BlockRadixSort`` / ``BlockScan`` (or, for ``histogram``, shared-memory atomics as CUB's
``BLOCK_HISTO_ATOMIC`` does) on the tile staged in shared memory; one NVRTC compile per
tile shape and dtype (cached on disk). What they need:

- **CCCL's headers** (``pip install 'cuda-toolkit[cccl]'``, a CUDA toolkit, or CuPy's copy:
  :mod:`splice.cccl`).
- **A kernel tileiras does not warp-specialise** (``allow_tma=False`` on its loads, no
  ``ct.mma``), as any block-scope call; its block is tileiras's 128 threads
  (``.reqntid 128``), which the CUB code is compiled for: another block size is a
  ``SpliceRewriteError`` when the kernel compiles (and traps at launch, should it get
  through). Not at warpgroup scope: CUB's block algorithms synchronise with
  ``__syncthreads()`` (``CTA_SYNC``), a barrier of the whole block, which the warpgroup
  callee policy refuses (:func:`splice.forms.warpgroup_proof.callee_refusal`: the block's other warps
  never reach it in a warp-specialised kernel); a tile call there needs CUDA C written
  for the group (``splice_group_sync()``, ``examples/matmul_rowmax_fp8.py``).
- **Tiles**: 1-D, of 128 x 2**j elements (CUB's items per thread are ``n / 128``): every
  op and dtype below compiles at 128, 256, 512, 1024, 2048 and 4096 elements (the matrix
  of ``tests/test_cub_sizes.py``), aligned or not; larger tiles while shared memory holds
  them (below: a float32 ``sort`` of 16384 elements fits, a float64 one does not). A tile
  of fewer than 128 elements is a ``SpliceCompileError`` (``n`` must be a multiple of
  128). Dtypes: int8 ... int64, uint8 ... uint64, float16, bfloat16, float32, float64 for
  ``sort``/``sort_pairs``/``top_k`` keys (radix sort: -0.0 sorts before +0.0, NaNs after
  +inf ascending), any of those or bool for ``sort_pairs`` values, int32 indices for
  ``top_k``; ``inclusive_sum`` for int32, int64, uint32, uint64, float32, float64;
  ``histogram`` of integer tiles (values outside ``[0, bins)`` are not counted), ``bins``
  a power of two up to 65536, int32 counts.
- **Shared memory**: the staging buffers (the input tile(s) and the result(s)) plus CUB's
  temporary storage (``BlockRadixSort<T, 128, n / 128>::TempStorage``: about
  ``n * sizeof(T)`` bytes and more for 8-bit keys) plus tileiras's own: a (2048,) float32
  sort needs about 24 KB. A block gets at most 232448 bytes (227 KiB) on sm_90: staging
  buffers beyond it are a ``SpliceCallError`` when the kernel is traced, naming the
  nearest tiles that fit (a (16384,) float64 sort: 8192 elements); the total beyond what
  the GPU gives is a ``SpliceLinkError`` naming each owner.

A partial tile (the last one of an array, padded by ``ct.load``) is sorted with its
padding: load it with a padding value that sorts last (``padding_mode=ct.PaddingMode.
POS_INF`` or ``NEG_INF`` ascending/descending), or mask it yourself.
"""

from __future__ import annotations

import threading

from . import _cutile as cu
from .errors import SpliceCallError
from .types import ElementType, element_type

_SOURCE = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

namespace splice_cub {
constexpr int THREADS = 128;   // tileiras's block for kernels that are not warp-specialised

__device__ __forceinline__ void check_block() {
    if (blockDim.x != THREADS || blockDim.y != 1 || blockDim.z != 1) __trap();
}

template <int N> struct items {
    static_assert(N % THREADS == 0, "splice.cub: the tile must have a multiple of 128 elements "
                                    "(tileiras's 128 threads, n / 128 items each)");
    static constexpr int value = N / THREADS;
};

template <class T, bool DESCENDING, int N>
__device__ void sort_keys(const T (&x)[N], T (&y)[N]) {
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
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) h[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        long long s = (long long)x[i];
        if (s >= 0 && s < BINS) atomicAdd(&h[s], 1);
    }
}
}  // namespace splice_cub
'''

#: The block size the CUB code is compiled for (``THREADS`` in it): tileiras's for kernels
#: that are not warp-specialised; another is refused when the kernel compiles.
THREADS = 128

_SORTABLE = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "float16", "bfloat16", "float32", "float64")
_SUMMABLE = ("int32", "int64", "uint32", "uint64", "float32", "float64")
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")

_lock = threading.Lock()
_library = None
_externs: dict[tuple, object] = {}


def _lib():
    """The one library of these templates (compiled per instantiation: :mod:`splice.forms.staging`)."""
    global _library
    from .cccl import include_dirs
    from .inputs.externs import Library
    with _lock:
        if _library is None:
            _library = Library(_SOURCE, options=["-std=c++17"], include_dirs=include_dirs(),
                               _where=("splice.cub", None))
        return _library


def _extern(cxx_name: str, signature: str):
    """The block-scope extern of one template instance (by C++ name and signature)."""
    key = (cxx_name, signature)
    with _lock:
        hit = _externs.get(key)
    if hit is None:
        hit = _lib().extern(cxx_name, signature=signature, scope="block")._splice_extern
        hit.block_threads = THREADS
        with _lock:
            _externs[key] = hit
    return hit


def _tile(var, what: str, allowed, where: str, loc) -> ElementType:
    """The element type of tile argument ``var`` (1-D, one of ``allowed``)."""
    from .tracing.trace import describe
    ty = var.get_type()
    if not isinstance(ty, cu.TileTy) or len(ty.shape) != 1:
        raise SpliceCallError(f"{what} at {where}: takes a 1-D tile, got {describe(var)}", loc)
    elem = element_type(ty.dtype)
    if elem.name not in allowed:
        raise SpliceCallError(f"{what} at {where}: {elem} tiles are not supported (CUB "
                              f"supports {', '.join(allowed)}); convert with .astype(...)",
                              loc)
    return elem


def _constant(var, what: str, where: str, loc):
    if var is None:
        return None
    if not var.is_constant():
        raise SpliceCallError(f"{what} at {where}: must be a compile-time constant", loc)
    return var.get_constant()


def _call(name: str, signature: str, args, loc):
    from .inputs.tile_trace import emit_tile_call
    return emit_tile_call(_extern(name, signature), tuple(args), loc)


def _where():
    from .tracing.trace import loc_str
    loc = cu.current_loc()
    return loc, loc_str(loc)


def _bool(value, what, where, loc) -> bool:
    if not isinstance(value, bool):
        raise SpliceCallError(f"{what} at {where}: must be True or False", loc)
    return value


# --------------------------------------------------------------------------------------------
# The kernel-side functions (cuTile resolves each to its handler)


def _handle_sort(callee, t, descending):
    loc, where = _where()
    elem = _tile(t, "splice.cub.sort", _SORTABLE, where, loc)
    desc = _bool(_constant(descending, "descending", where, loc) or False,
                 "splice.cub.sort: descending", where, loc)
    return _call(f"splice_cub::sort_keys<{elem.c_type}, {str(desc).lower()}>",
                 f"tile({elem})(tile({elem}))", (t,), loc)


def _handle_sort_pairs(callee, keys, values, descending):
    loc, where = _where()
    k = _tile(keys, "splice.cub.sort_pairs (keys)", _SORTABLE, where, loc)
    v = _tile(values, "splice.cub.sort_pairs (values)", _SORTABLE + ("bool",), where, loc)
    if keys.get_type().shape != values.get_type().shape:
        raise SpliceCallError(f"splice.cub.sort_pairs at {where}: keys and values must have "
                              f"one shape, got {keys.get_type().shape} and "
                              f"{values.get_type().shape}", loc)
    desc = _bool(_constant(descending, "descending", where, loc) or False,
                 "splice.cub.sort_pairs: descending", where, loc)
    return _call(f"splice_cub::sort_pairs<{k.c_type}, {v.c_type}, {str(desc).lower()}>",
                 f"(tile({k}), tile({v}))(tile({k}), tile({v}))", (keys, values), loc)


def _handle_top_k(callee, t, k):
    loc, where = _where()
    elem = _tile(t, "splice.cub.top_k", _SORTABLE, where, loc)
    kk = _constant(k, "splice.cub.top_k: k", where, loc)
    n = t.get_type().shape[0]
    if not isinstance(kk, int) or isinstance(kk, bool) or kk < 1 or kk & (kk - 1) or kk > n:
        raise SpliceCallError(f"splice.cub.top_k at {where}: k must be a power of two from 1 "
                              f"to the tile's {n} elements (a tile's shape), got {kk!r}", loc)
    return _call(f"splice_cub::top_k<{elem.c_type}>",
                 f"(tile({elem}, ({kk},)), tile(int32, ({kk},)))(tile({elem}))", (t,), loc)


def _handle_inclusive_sum(callee, t):
    loc, where = _where()
    elem = _tile(t, "splice.cub.inclusive_sum", _SUMMABLE, where, loc)
    return _call(f"splice_cub::inclusive_sum<{elem.c_type}>",
                 f"tile({elem})(tile({elem}))", (t,), loc)


def _handle_histogram(callee, t, bins):
    loc, where = _where()
    elem = _tile(t, "splice.cub.histogram", _INTEGERS, where, loc)
    b = _constant(bins, "splice.cub.histogram: bins", where, loc)
    if not isinstance(b, int) or isinstance(b, bool) or b < 1 or b & (b - 1) or b > 65536:
        raise SpliceCallError(f"splice.cub.histogram at {where}: bins must be a power of two "
                              f"up to 65536 (a tile's shape), got {b!r}", loc)
    return _call(f"splice_cub::histogram<{elem.c_type}>",
                 f"tile(int32, ({b},))(tile({elem}))", (t,), loc)


def _device_function(handler, doc: str):
    """A function cuTile resolves to ``handler`` inside a kernel; called from Python it
    raises."""
    import inspect
    params = list(inspect.signature(handler).parameters.values())[1:]

    def fn(*args, **kwargs):
        from .tracing.trace import python_caller
        raise SpliceCallError(f"splice.cub.{fn.__name__} called from Python at "
                              f"{python_caller()}: it is device code; call it inside a "
                              f"@splice.kernel function")
    fn.__name__ = fn.__qualname__ = handler.__name__.removeprefix("_handle_")
    fn.__doc__ = doc
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [p.replace(default=None) if p.name in ("descending",) else p for p in params])
    cu.resolve_calls(fn, handler)
    return fn


sort = _device_function(_handle_sort, """The tile's elements in ascending order (descending
    with ``descending=True``): CUB ``BlockRadixSort``. ``t``: a 1-D tile of 128 x 2**j
    elements (128 ... 4096 for every dtype; larger while shared memory holds 2 tiles and
    CUB's storage) of an integer or floating dtype; returns a tile of its shape and
    dtype.""")
sort_pairs = _device_function(_handle_sort_pairs, """``(sorted keys, values in the keys'
    order)``: CUB ``BlockRadixSort`` with values, ascending (descending with
    ``descending=True``); ``keys`` and ``values`` 1-D tiles of one shape (128 x 2**j
    elements: 128 ... 4096 for every dtype; larger while shared memory holds 4 tiles and
    CUB's storage). Equal keys keep their order (the sort is stable, both ways).""")
top_k = _device_function(_handle_top_k, """``(values, indices)`` of the ``k`` largest
    elements of a 1-D tile, largest first (``torch.topk(t, k)``): tiles of shape ``(k,)``,
    the indices int32; ``k`` a power of two up to the tile's size. The tile: 128 x 2**j
    elements (128 ... 4096 for every dtype). Equal values: the lower index first.""")
inclusive_sum = _device_function(_handle_inclusive_sum, """The inclusive prefix sum of a
    1-D tile (``ct.cumsum``): CUB ``BlockScan::InclusiveSum``. The tile: 128 x 2**j
    elements (128 ... 4096 for every dtype) of int32, int64, uint32, uint64, float32 or
    float64.""")
histogram = _device_function(_handle_histogram, """The counts of the values
    ``0 .. bins - 1`` in an integer 1-D tile, as an int32 tile of shape ``(bins,)`` (shared
    -memory atomics); values outside are not counted. ``bins``: a power of two up to
    65536. The tile: 128 x 2**j elements (128 ... 4096 for every integer dtype).""")

__all__ = ["sort", "sort_pairs", "top_k", "inclusive_sum", "histogram"]
