"""Tile operations cuTile lacks, on CUB's block algorithms and staged tiles
(:mod:`splice.forms.staging`): call them inside a ``@splice.kernel`` on a 1-D tile::

    y = splice.cub.sort(t)                          # ascending (descending=True)
    ks, vs = splice.cub.sort_pairs(keys, values)    # values follow their keys
    vals, idx = splice.cub.top_k(t, 8)              # the 8 largest, descending, and where
    s = splice.cub.inclusive_sum(t)                 # like ct.cumsum
    h = splice.cub.histogram(t, 256)                # counts of the values 0..255
    e = splice.cub.exclusive_sum(t, initial=0)      # and exclusive_scan(t, op, initial)
    m = splice.cub.inclusive_scan(t, "max")         # op "sum"/"max"/"min" or C++ text
    r = splice.cub.reduce(t, "cuda::minimum<>{}")   # a scalar, on every thread
    y = splice.cub.merge_sort(t, less="greater")    # stable, by a comparator (C++ text)
    vals, counts = splice.cub.unique_counts(t)      # runs; flag_heads, flag_tails,
    t = splice.cub.run_length_decode(vals, counts)  # and back

The scans, reductions, merge sorts and runs (CUB's ``BlockScan``, ``BlockReduce``,
``BlockMergeSort``, ``BlockDiscontinuity``) are documented function by function below and in
``docs/guide/cub.md``; what follows holds for all. (The package imports the declaration API,
:mod:`splice.declare`; :mod:`.sources` is its CUDA C, :mod:`.operators` a user's operator.)

Each is a block-scope call (``scope="block"``): every thread of the block runs CUB's
``BlockRadixSort`` / ``BlockScan`` (or, for ``histogram``, shared-memory atomics as CUB's
``BLOCK_HISTO_ATOMIC`` does) on the tile staged in shared memory. The first call of an op
and dtype (and operator, direction, ``k``) on a tile of one of :data:`SIZES` compiles all of
them in one NVRTC program, each cached on disk on its own: a sweep over tile sizes compiles
CUB once; a larger tile compiles alone. What they need:

- **CCCL's headers** (``pip install 'cuda-toolkit[cccl]'``, a CUDA toolkit, or CuPy's copy:
  :mod:`splice.cccl`).
- **A kernel tileiras does not warp-specialise** (``allow_tma=False`` on its loads, no
  ``ct.mma``), as any block-scope call; its block is tileiras's 128 threads
  (``.reqntid 128``), which the CUB code is compiled for: another block size is a
  ``SpliceRewriteError`` when the kernel compiles (and traps at launch, should it get
  through). Not at warpgroup scope: CUB's block algorithms synchronise with
  ``__syncthreads()`` (``CTA_SYNC``), a barrier of the whole block, which the warpgroup
  callee policy refuses (:func:`splice.forms.warpgroup_proof.callee_refusal`: the block's other
  warps never reach it in a warp-specialised kernel); a tile call there needs CUDA C written
  for the group (``splice_group_sync()``, ``examples/matmul_rowmax_fp8.py``).
- **Tiles**: 1-D, of 128 x 2**j elements (CUB's items per thread are ``n / 128``): every
  op and dtype below compiles at 128, 256, 512, 1024, 2048 and 4096 elements (the matrix
  of ``tests/test_cub_sizes.py``), aligned or not; larger tiles while shared memory holds
  them (below: a float32 ``sort`` of 16384 elements fits, a float64 one does not). A tile
  of fewer than 128 elements, or not a multiple of 128, is a ``SpliceCallError`` at the
  call. Dtypes: int8 ... int64, uint8 ... uint64, float16, bfloat16, float32, float64 for
  ``sort``/``sort_pairs``/``top_k`` keys (radix sort: -0.0 equal to +0.0, NaNs after +inf
  ascending but one with its sign bit set before -inf), any of those or bool for
  ``sort_pairs`` values, int32 indices for ``top_k``; ``inclusive_sum`` for int32, int64,
  uint32, uint64, float32, float64; ``histogram`` of integer tiles (values outside
  ``[0, bins)`` are not counted), ``bins`` a power of two up to 65536, int32 counts.
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

from ..errors import SpliceCallError
from ..system import _cutile as cu
from ..system import forksafe
from ..types import ElementType, element_type
from .operators import user_operator
from .sources import OPS_SOURCE as _OPS_SOURCE
from .sources import SORTS_SOURCE as _SOURCE

#: The block size the CUB code is compiled for (``THREADS`` in it): tileiras's for kernels
#: that are not warp-specialised; another is refused when the kernel compiles.
THREADS = 128

_SORTABLE = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "float16", "bfloat16", "float32", "float64")
_SUMMABLE = ("int32", "int64", "uint32", "uint64", "float32", "float64")
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")

#: The tile lengths every op compiles at (the matrix of ``tests/test_cub_sizes.py``): a
#: call on one of them compiles the others in the same NVRTC program, each cached on its
#: own (:attr:`splice.inputs.fragments.CudaSource.batch`): parsing CCCL dominates a compile,
#: and a sweep over sizes then parses it once.
SIZES = tuple(THREADS << j for j in range(6))

_lock = forksafe.lock(globals(), "_lock")
_library = None
_externs: dict[tuple, object] = {}


def _lib():
    """The one library of these templates (compiled per instantiation: ``forms/staging``)."""
    global _library
    from ..declare.externs import Library
    from ..inputs.cccl import include_dirs
    with _lock:
        if _library is None:
            _library = Library(_SOURCE, options=["-std=c++17"], include_dirs=include_dirs(),
                               _where=("splice.cub", None))
        return _library


def _extern(cxx_name: str, signature: str, smallest: int = THREADS):
    """The block-scope extern of one template instance (by C++ name and signature), its
    other sizes those of :data:`SIZES` from ``smallest``."""
    key = (cxx_name, signature)
    with _lock:
        hit = _externs.get(key)
    if hit is None:
        hit = _lib().extern(cxx_name, signature=signature, scope="block")._splice_extern
        hit.block_threads = THREADS
        hit.batch_sizes = tuple(m for m in SIZES if m >= smallest)
        with _lock:
            _externs[key] = hit
    return hit


def _tile(var, what: str, allowed, where: str, loc) -> ElementType:
    """The element type of tile argument ``var`` (1-D, one of ``allowed``)."""
    from ..tracing.trace import describe
    ty = var.get_type()
    if not isinstance(ty, cu.TileTy) or len(ty.shape) != 1:
        raise SpliceCallError(f"{what} at {where}: takes a 1-D tile, got {describe(var)}", loc)
    elem = element_type(ty.dtype)
    if elem.name not in allowed:
        raise SpliceCallError(f"{what} at {where}: {elem} tiles are not supported (CUB "
                              f"supports {', '.join(allowed)}); convert with .astype(...)",
                              loc)
    n = ty.shape[0]
    if n < THREADS or n % THREADS:
        raise SpliceCallError(f"{what} at {where}: a tile of {n} elements; splice.cub takes "
                              f"tiles of {THREADS} x 2**j elements (128, 256 ... 4096: each "
                              f"of tileiras's {THREADS} threads holds n / {THREADS}); load a "
                              f"larger tile (padded: padding_mode=)", loc)
    return elem


def _constant(var, what: str, where: str, loc):
    if var is None:
        return None
    if not var.is_constant():
        raise SpliceCallError(f"{what} at {where}: must be a compile-time constant", loc)
    return var.get_constant()


def _call(name: str, signature: str, args, loc, smallest: int = THREADS):
    from ..declare.tile_trace import emit_tile_call
    return emit_tile_call(_extern(name, signature, smallest), tuple(args), loc)


def _where():
    from ..tracing.trace import loc_str
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
                 f"(tile({elem}, ({kk},)), tile(int32, ({kk},)))(tile({elem}))", (t,), loc,
                 smallest=kk)


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


def _device_function(handler, doc: str, optional=("descending",)):
    """A function cuTile resolves to ``handler`` inside a kernel; called from Python it
    raises. Its parameters named in ``optional`` default to None."""
    import inspect
    params = list(inspect.signature(handler).parameters.values())[1:]

    def fn(*args, **kwargs):
        from ..tracing.trace import python_caller
        raise SpliceCallError(f"splice.cub.{fn.__name__} called from Python at "
                              f"{python_caller()}: it is device code; call it inside a "
                              f"@splice.kernel function")
    fn.__name__ = fn.__qualname__ = handler.__name__.removeprefix("_handle_")
    fn.__doc__ = doc
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [p.replace(default=None) if p.name in optional else p for p in params])
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


# --------------------------------------------------------------------------------------------
# Scans, reductions, merge sort and runs: CUB's BlockScan with an operator, BlockReduce,
# BlockMergeSort and BlockDiscontinuity. A library of their own (a smaller source to parse
# than the radix sort's), plus one per user operator: the operator's C++ text is part of
# that library's source, hence of every fragment's content key.

#: The operators ``op=`` names for scans and reductions (their C++ type in the source).
SCAN_OPS = {"sum": "splice_cub::op_sum", "max": "splice_cub::op_max",
            "min": "splice_cub::op_min"}
#: The orders ``less=`` names for the merge sorts.
ORDERS = {"less": "splice_cub::op_less", "greater": "splice_cub::op_greater"}
_SCANNABLE = _SUMMABLE
_ops_libraries: dict[str, object] = {}


def _ops_lib(user_op: str | None):
    """The library of :data:`_OPS_SOURCE`, with ``user_op``'s struct appended if given."""
    from ..declare.externs import Library
    from ..inputs.cccl import include_dirs
    key = user_op or ""
    with _lock:
        if key not in _ops_libraries:
            _ops_libraries[key] = Library(_OPS_SOURCE + key, options=["-std=c++17"],
                                          include_dirs=include_dirs(),
                                          _where=("splice.cub", None))
        return _ops_libraries[key]


def _ops_extern(cxx_name: str, signature: str, user_op: str | None = None):
    """The block-scope extern of one template instance of :data:`_OPS_SOURCE`."""
    key = (cxx_name, signature, user_op)
    with _lock:
        hit = _externs.get(key)
    if hit is None:
        hit = _ops_lib(user_op).extern(cxx_name, signature=signature,
                                       scope="block")._splice_extern
        hit.block_threads = THREADS
        hit.batch_sizes = SIZES
        with _lock:
            _externs[key] = hit
    return hit


def _ops_call(cxx_name: str, signature: str, args, loc, user_op: str | None = None):
    """Emit one call of a template instance of :data:`_OPS_SOURCE` on ``args`` (Vars)."""
    from ..declare.tile_trace import emit_tile_call
    return emit_tile_call(_ops_extern(cxx_name, signature, user_op), tuple(args), loc)


def _operator(value, named: dict, what: str, where: str, loc) -> tuple[str, str | None]:
    """(C++ type, source to append or None) of an ``op``/``less`` argument: a name of
    ``named`` or a user's C++ expression (:func:`user_operator`)."""
    if not isinstance(value, str):
        raise SpliceCallError(f"{what} at {where}: must be a string, one of "
                              f"{', '.join(map(repr, named))} or a C++ expression "
                              f"(\"cuda::maximum<>{{}}\"), got {value!r}", loc)
    if value in named:
        return named[value], None
    try:
        return user_operator(value)
    except ValueError as e:
        raise SpliceCallError(f"{what} at {where}: {e}; pass one of "
                              f"{', '.join(map(repr, named))} or one C++ expression of a "
                              f"callable, e.g. \"[](float a, float b) {{ return a < b ? b : a;"
                              f" }}\"", loc) from None


def _initial(initial, elem: ElementType, fn: str, loc):
    """``initial`` as a scalar Var of ``elem`` (a Python number is converted where the call
    is emitted; omitted, 0); a tile or a scalar of another dtype is refused at the call."""
    from ..tracing.trace import describe
    if initial is None or (initial.is_constant() and initial.get_constant() is None):
        return cu.strictly_typed_const(0.0 if elem.kind == "f" else 0, cu.TileTy(elem.dtype, ()))
    ty = initial.get_type()
    loose = isinstance(initial.get_loose_type(), cu.LooselyTypedScalar)
    if not loose and (not isinstance(ty, cu.TileTy) or ty.shape != () or ty.dtype != elem.dtype):
        _, where = _where()
        raise SpliceCallError(f"splice.cub.{fn} at {where}: initial must be a scalar of the "
                              f"tile's dtype {elem} or a Python number, got {describe(initial)}"
                              f"; convert it with .astype(ct.{elem.name})", loc)
    return initial


def _handle_exclusive_sum(callee, t, initial):
    loc, where = _where()
    elem = _tile(t, "splice.cub.exclusive_sum", _SCANNABLE, where, loc)
    return _ops_call(f"splice_cub::exclusive_sum<{elem.c_type}>",
                     f"tile({elem})(tile({elem}), {elem})",
                     (t, _initial(initial, elem, "exclusive_sum", loc)), loc)


def _scan_operands(fn: str, t, op):
    """(loc, element type, operator's C++ type, operator source or None) of a call of
    ``splice.cub.<fn>(t, op, ...)``."""
    loc, where = _where()
    elem = _tile(t, f"splice.cub.{fn}", _SCANNABLE, where, loc)
    what = f"splice.cub.{fn}: op"
    name, src = _operator(_constant(op, what, where, loc), SCAN_OPS, what, where, loc)
    return loc, elem, name, src


def _handle_inclusive_scan(callee, t, op):
    loc, elem, name, src = _scan_operands("inclusive_scan", t, op)
    return _ops_call(f"splice_cub::inclusive_scan<{elem.c_type}, {name}>",
                     f"tile({elem})(tile({elem}))", (t,), loc, src)


def _handle_exclusive_scan(callee, t, op, initial):
    loc, elem, name, src = _scan_operands("exclusive_scan", t, op)
    return _ops_call(f"splice_cub::exclusive_scan<{elem.c_type}, {name}>",
                     f"tile({elem})(tile({elem}), {elem})",
                     (t, _initial(initial, elem, "exclusive_scan", loc)), loc, src)


def _handle_reduce(callee, t, op):
    loc, elem, name, src = _scan_operands("reduce", t, op)
    return _ops_call(f"splice_cub::reduce<{elem.c_type}, {name}>",
                     f"{elem}(tile({elem}))", (t,), loc, src)


def _order(less, what, where, loc):
    value = _constant(less, what, where, loc)
    return _operator("less" if value is None else value, ORDERS, what, where, loc)


def _handle_merge_sort(callee, t, less):
    loc, where = _where()
    elem = _tile(t, "splice.cub.merge_sort", _SORTABLE, where, loc)
    name, src = _order(less, "splice.cub.merge_sort: less", where, loc)
    return _ops_call(f"splice_cub::merge_sort<{elem.c_type}, {name}>",
                     f"tile({elem})(tile({elem}))", (t,), loc, src)


def _handle_merge_sort_pairs(callee, keys, values, less):
    loc, where = _where()
    k = _tile(keys, "splice.cub.merge_sort_pairs (keys)", _SORTABLE, where, loc)
    v = _tile(values, "splice.cub.merge_sort_pairs (values)", _SORTABLE + ("bool",), where,
              loc)
    if keys.get_type().shape != values.get_type().shape:
        raise SpliceCallError(f"splice.cub.merge_sort_pairs at {where}: keys and values must "
                              f"have one shape, got {keys.get_type().shape} and "
                              f"{values.get_type().shape}", loc)
    name, src = _order(less, "splice.cub.merge_sort_pairs: less", where, loc)
    return _ops_call(f"splice_cub::merge_sort_pairs<{k.c_type}, {v.c_type}, {name}>",
                     f"(tile({k}), tile({v}))(tile({k}), tile({v}))", (keys, values), loc, src)


def _runs_call(template: str, result: str, t):
    loc, where = _where()
    elem = _tile(t, f"splice.cub.{template}", _SORTABLE, where, loc)
    return _ops_call(f"splice_cub::{template}<{elem.c_type}>",
                     result.format(e=elem) + f"(tile({elem}))", (t,), loc)


def _handle_run_length_decode(callee, values, counts):
    loc, where = _where()
    elem = _tile(values, "splice.cub.run_length_decode (values)", _SORTABLE, where, loc)
    _tile(counts, "splice.cub.run_length_decode (counts)", ("int32",), where, loc)
    if values.get_type().shape != counts.get_type().shape:
        raise SpliceCallError(f"splice.cub.run_length_decode at {where}: values and counts "
                              f"must have one shape, got {values.get_type().shape} and "
                              f"{counts.get_type().shape}", loc)
    return _ops_call(f"splice_cub::run_length_decode<{elem.c_type}>",
                     f"tile({elem})(tile({elem}), tile(int32))", (values, counts), loc)


def _handle_flag_heads(callee, t):
    return _runs_call("flag_heads", "tile(int32)", t)


def _handle_flag_tails(callee, t):
    return _runs_call("flag_tails", "tile(int32)", t)


def _handle_unique_counts(callee, t):
    return _runs_call("unique_counts", "(tile({e}), tile(int32))", t)


_SCAN_LIMITS = """1-D, of 128 x 2**j elements (128 ... 4096, larger while shared
            memory holds them; ``n / 128`` items per thread), int32, int64, uint32,
            uint64, float32 or float64"""
_OP_DOC = """``"sum"``, ``"max"``, ``"min"`` (floats: ``fmaxf``/``fminf``, a NaN
            ignored as by ``ct.max``, NaN if all are; integers: ``a < b ? b : a``), or a
            C++ expression of an associative binary callable, compiled by NVRTC with CUB
            (``"cuda::maximum<>{}"``, ``"[](float a, float b) { return a * b; }"``; one
            expression: brackets that close, no ``#`` or comments; it is code, and the
            compile is cached under its text). A compile-time constant string"""
_SORT_LIMITS = """1-D, of 128 x 2**j elements (128 ... 4096, larger while shared
            memory holds them), int8 ... int64, uint8 ... uint64, float16, bfloat16,
            float32 or float64"""
_LESS_DOC = """the order: ``"less"`` (ascending, the default), ``"greater"``
            (descending) or a C++ expression of a strict weak ordering ``less(a, b)``
            (true when ``a`` goes before ``b``; e.g. ``"[](float a, float b) { return
            fabsf(a) < fabsf(b); }"``), compiled by NVRTC as for :func:`inclusive_scan`'s
            ``op``. NaNs are not ordered by ``"less"``/``"greater"`` (a tile with NaNs has
            no defined order: use :func:`sort`)"""
_RUN_DOC = """Runs are maximal stretches of equal neighbours (``!=``: -0.0 equals
    +0.0, every NaN is a run of its own). """

def _doc(text: str) -> str:
    """A docstring with its shared parts (``{_SCAN_LIMITS}``...) filled in (not an
    f-string: the C++ examples have braces)."""
    for name in ("_SCAN_LIMITS", "_OP_DOC", "_SORT_LIMITS", "_LESS_DOC", "_RUN_DOC"):
        text = text.replace("{" + name + "}", globals()[name])
    return text


exclusive_sum = _device_function(_handle_exclusive_sum, _doc("""The exclusive prefix sum of a
    1-D tile: ``y[0] = initial``, ``y[i] = initial + t[0] + ... + t[i-1]`` (CUB
    ``BlockScan::ExclusiveScan`` with ``+``).

    Args:
        t: a tile, {_SCAN_LIMITS}.
        initial: the first element of the result and the start of every sum: a scalar of
            ``t``'s dtype, or a Python number (converted; refused if not representable).
            Default 0.

    Returns:
        A tile of ``t``'s shape and dtype. Integers wrap on overflow; floats are added in
        CUB's order (per thread, then across threads), not left to right.

    Raises:
        SpliceCallError: a tile that is not 1-D, of another dtype or not a multiple of 128
            elements; ``initial`` of another dtype (convert it with ``.astype``).

    Example:
        ``offsets = splice.cub.exclusive_sum(counts)`` (``torch.cumsum(x, 0) - x``)
    """), optional=("initial",))

inclusive_scan = _device_function(_handle_inclusive_scan, _doc("""The inclusive scan of a 1-D
    tile with an operator: ``y[i] = t[0] op t[1] op ... op t[i]`` (CUB
    ``BlockScan::InclusiveScan``).

    Args:
        t: a tile, {_SCAN_LIMITS}.
        op: {_OP_DOC}. Its arguments are two elements of ``t``'s dtype; its result is
            converted to that dtype.

    Returns:
        A tile of ``t``'s shape and dtype (``op="max"``: ``torch.cummax(t, 0).values``).
        ``op`` is applied in CUB's order (per thread, then across threads): an operator
        that is not associative gives an order-dependent result.

    Raises:
        SpliceCallError: a tile that is not 1-D, of another dtype or not a multiple of 128
            elements; ``op`` not a constant string, or not one C++ expression.
        SpliceCompileError: an ``op`` that does not compile for the dtype (NVRTC's message,
            after the call).

    Example:
        ``running_max = splice.cub.inclusive_scan(t, "max")``
    """))

exclusive_scan = _device_function(_handle_exclusive_scan, _doc("""The exclusive scan of a 1-D
    tile with an operator: ``y[0] = initial``, ``y[i] = initial op t[0] op ... op t[i-1]``
    (CUB ``BlockScan::ExclusiveScan``).

    Args:
        t: a tile, {_SCAN_LIMITS}.
        op: {_OP_DOC}.
        initial: the first element of the result and the left operand of every other: a
            scalar of ``t``'s dtype or a Python number (for ``"max"``, the dtype's lowest
            value, e.g. ``-math.inf``, makes it a running maximum of the elements before).

    Returns:
        A tile of ``t``'s shape and dtype.

    Raises:
        SpliceCallError: as :func:`inclusive_scan`, and ``initial`` of another dtype.
        SpliceCompileError: as :func:`inclusive_scan`.

    Example:
        ``before = splice.cub.exclusive_scan(t, "min", math.inf)``
    """))

reduce = _device_function(_handle_reduce, _doc("""The reduction of a 1-D tile with an operator
    (CUB ``BlockReduce::Reduce``): ``t[0] op t[1] op ... op t[n-1]``, in CUB's order.

    Args:
        t: a tile, {_SCAN_LIMITS}.
        op: {_OP_DOC}.

    Returns:
        A scalar of ``t``'s dtype, the same on every thread (``ct.max(t, 0)`` for
        ``"max"``).

    Raises:
        SpliceCallError: as :func:`inclusive_scan`.
        SpliceCompileError: as :func:`inclusive_scan`.

    Example:
        ``m = splice.cub.reduce(t, "[](float a, float b) { return fmaxf(fabsf(a), fabsf(b)); }")``
    """))


merge_sort = _device_function(_handle_merge_sort, _doc("""The tile's elements in the order of
    a comparator (CUB ``BlockMergeSort::StableSort``): stable, equal elements keep their
    order.

    Args:
        t: a tile, {_SORT_LIMITS}.
        less: {_LESS_DOC}.

    Returns:
        A tile of ``t``'s shape and dtype.

    Raises:
        SpliceCallError: a tile that is not 1-D, of another dtype or not a multiple of 128
            elements; ``less`` not a constant string or not one C++ expression.
        SpliceCompileError: a comparator that does not compile for the dtype.

    Example:
        ``by_magnitude = splice.cub.merge_sort(t, "[](float a, float b) { return fabsf(a) <
        fabsf(b); }")``
    """), optional=("less",))

merge_sort_pairs = _device_function(_handle_merge_sort_pairs, _doc("""``(sorted keys, values in
    the keys' order)`` by a comparator on the keys (CUB ``BlockMergeSort::StableSort`` with
    values): stable, equal keys keep their values' order (``torch.sort(stable=True)``).

    Args:
        keys: a tile, {_SORT_LIMITS}.
        values: a tile of ``keys``' shape, any of those dtypes or bool.
        less: {_LESS_DOC}.

    Returns:
        tuple: (keys sorted, values permuted alike), tiles of the inputs' shapes and dtypes.

    Raises:
        SpliceCallError: as :func:`merge_sort`, and keys and values of different shapes.
        SpliceCompileError: as :func:`merge_sort`.

    Example:
        ``ks, idx = splice.cub.merge_sort_pairs(k, ct.arange(1024, dtype=ct.int32),
        "greater")`` (an argsort, descending, ties by index)
    """), optional=("less",))


flag_heads = _device_function(_handle_flag_heads, _doc("""1 where a run of equal elements
    starts, else 0 (CUB ``BlockDiscontinuity::FlagHeads``): ``f[0] = 1``,
    ``f[i] = t[i] != t[i-1]``. {_RUN_DOC}

    Args:
        t: a tile, {_SORT_LIMITS}.

    Returns:
        An int32 tile of ``t``'s shape.

    Raises:
        SpliceCallError: a tile that is not 1-D, of another dtype or not a multiple of 128
            elements.

    Example:
        ``segment_ids = splice.cub.inclusive_scan(splice.cub.flag_heads(t), "sum") - 1``
    """))

flag_tails = _device_function(_handle_flag_tails, _doc("""1 where a run of equal elements
    ends, else 0 (CUB ``BlockDiscontinuity::FlagTails``): ``f[n-1] = 1``,
    ``f[i] = t[i] != t[i+1]``. {_RUN_DOC}

    Args:
        t: a tile, {_SORT_LIMITS}.

    Returns:
        An int32 tile of ``t``'s shape.

    Raises:
        SpliceCallError: a tile that is not 1-D, of another dtype or not a multiple of 128
            elements.

    Example:
        ``last = splice.cub.flag_tails(t)``
    """))

unique_counts = _device_function(_handle_unique_counts, _doc("""The runs of equal elements of a
    1-D tile and their lengths (``torch.unique_consecutive(t, return_counts=True)``, padded
    to the tile's size): a run-length encoding, on CUB's ``BlockDiscontinuity`` and
    ``BlockScan``. {_RUN_DOC}

    Args:
        t: a tile, {_SORT_LIMITS}.

    Returns:
        tuple: ``(values, counts)``, tiles of ``t``'s shape: run ``r``'s value and length
        for ``r`` below the number of runs, then zeros (``values`` 0 of its dtype,
        ``counts`` 0); ``ct.sum(counts > 0)`` is the number of runs, ``ct.sum(counts)``
        the tile's size. Sort first (:func:`sort`) for the counts of each distinct value.

    Raises:
        SpliceCallError: a tile that is not 1-D, of another dtype or not a multiple of 128
            elements.

    Example:
        ``vals, counts = splice.cub.unique_counts(splice.cub.sort(t))``
    """))

run_length_decode = _device_function(_handle_run_length_decode, _doc("""The inverse of
    :func:`unique_counts`: ``values[0]`` repeated ``counts[0]`` times, then ``values[1]``
    ``counts[1]`` times... (``torch.repeat_interleave(values, counts)``), cut or padded to
    the tile's size: CUB ``BlockScan`` for the runs' starts, then a binary search per
    element (CUB's ``BlockRunLengthDecode`` takes runs of length 0 only as trailing padding;
    here any count may be 0).

    Args:
        values: a tile, {_SORT_LIMITS}.
        counts: an int32 tile of ``values``' shape; a negative count counts as 0.

    Returns:
        A tile of ``values``' shape and dtype: the first ``n`` decoded items; past the sum
        of the counts, 0 of its dtype.

    Raises:
        SpliceCallError: tiles that are not 1-D, of another dtype (``counts`` must be int32:
            ``.astype(ct.int32)``), of different shapes, or not a multiple of 128 elements.

    Example:
        ``expanded = splice.cub.run_length_decode(*splice.cub.unique_counts(t))`` (``t``)
    """))

__all__ += ["exclusive_sum", "inclusive_scan", "exclusive_scan", "reduce", "merge_sort",
            "merge_sort_pairs", "flag_heads", "flag_tails", "unique_counts",
            "run_length_decode"]
