"""splice's contract with cuTile's private API (supported: cuda-tile >=1.7,<1.8).

Every private cuTile name splice uses is listed in :data:`_PRIVATE` and reached through
this module: ``from ._cutile import TileTy`` or ``_cutile.TileTy``. Nothing of it is
imported when splice is imported: the first use of any of these names imports all of them
(``cuda.tile._compile`` and its IR take longer to import than ``cuda.tile`` itself), after
checking the installed version, and a missing name then raises
:class:`~splice.errors.SpliceToolchainError` naming it -- at the first trace, so that
``import splice`` and ``python -m splice doctor`` work with any cuda-tile
(``tests/test_cutile_contract.py``).

What splice uses, and why (``docs/design.md#cutile-hooks``):

- ``_cutile_custom_implementation_handler``: a plain function carrying this attribute is
  resolved by cuTile's frontend (``hir2ir._try_find_function_impl``) to splice's handler
  (:func:`resolve_calls`), which adds splice's own IR operations for the call
  (:mod:`splice.tracing.trace`, :mod:`splice.declare.asm_frontend`).
- ``cuda.tile._ir``: ``Operation``, ``operand``/``attribute``, ``add_operation``,
  ``broadcast_to``, ``implicit_cast``, ``TileTy``...; ``TileAtomicCAS`` is subclassed so
  that cuTile's token-order pass orders impure calls against the kernel's memory operations.
- ``cuda.tile._bytecode`` encoders: each call site lowers to a per-site module global and a
  *marker* on it (``docs/design.md#markers``, :mod:`splice.tracing.tile_ir`).
- ``cuda.tile._compile``: ``compile_tile`` (bytecode only), the tileiras it would run, and its
  optimisation flags (:func:`lower_to_bytecode`, :func:`tileiras_path`); its
  ``dataflow_analysis`` is wrapped so that an operation may name the alias set of its
  result (:func:`lower_to_bytecode`, ``splice_alias_set``): how a call declared
  ``memory="arguments"`` is ordered only against the arrays it is given.
- ``ct.kernel._compile`` is overridden by :class:`splice.driver.splice_kernel.SpliceKernel` to
  return splice's cubin to cuTile's own launcher and launch cache.
- ``cuda.tile.jax._jax`` (``_array_constraint``, ``pack_scalar``,
  ``_calling_convention_for``, the ``cutile_launch`` FFI target) and
  ``cuda.tile._annotated_function``'s node types: :mod:`splice.jax` launches splice's cubin
  exactly as ``cuda.tile.jax.cutile_call`` launches cuTile's (:func:`jax_internals`).

splice's IR operations (:mod:`splice.tracing.tile_ir`) subclass cuTile's ``Operation`` and
``TileAtomicCAS`` and encode bytecode with ``cuda.tile._bytecode``; they live in their own
module and take every cuTile name from this one. This module stays the list of what splice
depends on, short enough to check against a new cuda-tile release in one reading, and
``tests/test_cutile_contract.py`` checks that no other module imports a private cuTile
module. Code that needs these names runs only while a kernel is traced, after
:func:`ensure_supported_cutile`.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from typing import Any

from ..errors import SpliceToolchainError

SUPPORTED_CUTILE = ((1, 7), (1, 8))  # [low, high)

#: Each private name splice uses: (module, attribute; None for the module itself).
_PRIVATE: dict[str, tuple[str, str | None]] = {
    "bc": ("cuda.tile._bytecode", None),
    "ir": ("cuda.tile._ir.ir", None),
    **{n: ("cuda.tile._compile", n) for n in (
        "compile_tile", "format_sm_arch", "_find_compiler_bin",
        "_tileiras_effective_opt_and_device_debug", "_get_max_supported_bytecode_version")},
    **{n: ("cuda.tile._cext", n) for n in ("default_tile_context",)},
    "_get_compute_capability": ("cuda.tile._cext", "get_compute_capability"),
    "pointer_dtype": ("cuda.tile._datatype", "pointer_dtype"),
    "broadcast_to": ("cuda.tile._ir.arithmetic_ops", "broadcast_to"),
    "reshape": ("cuda.tile._ir.arithmetic_ops", "reshape"),
    "implicit_cast": ("cuda.tile._ir.cast_ops", "implicit_cast"),
    **{n: ("cuda.tile._ir.core_ops", n) for n in (
        "strictly_typed_const", "loosely_typed_const", "build_tuple")},
    **{n: ("cuda.tile._ir.ir", n) for n in (
        "Operation", "Var", "add_operation", "add_operation_variadic", "attribute",
        "operand")},
    **{n: ("cuda.tile._ir.ops", n) for n in (
        "TileAtomicCAS", "TileStore", "arange", "cat", "extract")},
    **{n: ("cuda.tile._ir.ops_utils", n) for n in (
        "BroadcastError", "broadcast_shapes2", "memory_order_to_bytecode",
        "memory_scope_to_bytecode")},
    **{n: ("cuda.tile._ir.type", n) for n in (
        "LooselyTypedScalar", "TileTy", "TokenTy", "ArrayTy")},
    **{n: ("cuda.tile._memory_model", n) for n in (
        "MemoryOrder", "MemoryScope", "MemorySpace")},
    "typeid": ("cuda.tile._ir2bytecode", "typeid"),
    "_compile_module": ("cuda.tile._compile", None),
}


def cutile_version() -> str:
    """The installed cuda-tile's version: ``cuda.tile.__version__`` (free), else its
    distribution metadata (10-25 ms)."""
    import cuda.tile
    ver = getattr(cuda.tile, "__version__", None)
    if isinstance(ver, str) and ver[:1].isdigit():
        return ver
    import importlib.metadata
    return importlib.metadata.version("cuda-tile")


_loaded = False


def _load_private() -> None:
    """Import every name of :data:`_PRIVATE` into this module (once).

    Raises:
        SpliceToolchainError: one of them is missing (moved by a cuda-tile release)."""
    global _loaded
    if _loaded:
        return
    names = {}
    try:
        for name, (module, attr) in _PRIVATE.items():
            mod = importlib.import_module(module)
            names[name] = mod if attr is None else getattr(mod, attr)
    except (ImportError, AttributeError) as e:
        raise SpliceToolchainError(
            f"cuda-tile {cutile_version()} lacks an internal API splice uses: {e}") from None
    globals().update(names)
    _loaded = True


def check_supported_cutile() -> None:
    """Raise SpliceToolchainError unless the installed cuda-tile is in the supported range
    and exposes every private name splice uses (importing them)."""
    ver = cutile_version()
    parts = tuple(int(p) for p in ver.split(".")[:2])
    lo, hi = SUPPORTED_CUTILE
    if not (lo <= parts < hi):
        raise SpliceToolchainError(
            f"splice supports cuda-tile >={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}; found {ver}. "
            f"splice relies on cuTile internals that change between releases.")
    _load_private()


_supported = False


def ensure_supported_cutile() -> None:
    """:func:`check_supported_cutile` once per process, on first use (not at import, so
    that ``import splice`` and ``python -m splice doctor`` work with any cuda-tile)."""
    global _supported
    if not _supported:
        check_supported_cutile()
        _supported = True


def __getattr__(name: str) -> Any:
    """The private names of :data:`_PRIVATE`, imported (all of them) on first use."""
    if name not in _PRIVATE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    ensure_supported_cutile()
    return globals()[name]


_private = __getattr__   # within this module: a global name does not reach __getattr__


# --------------------------------------------------------------------------------------------
# What splice does with them


def resolve_calls(func, handler) -> None:
    """Make cuTile's frontend resolve calls of the plain function ``func`` inside a kernel
    to ``handler(func, *args)`` (which adds IR operations) instead of tracing into it."""
    handler._is_coroutine = False
    func._cutile_custom_implementation_handler = handler


def current_loc():
    """The source location of the call being traced (``.filename``, ``.line``,
    ``.call_site``: the location it was inlined at, or None)."""
    return _private("ir").Builder.get_current().loc


@dataclasses.dataclass
class Lowered:
    """A kernel traced by cuTile's frontend for one or more signatures."""

    bytecode: bytes
    symbols: tuple[str, ...]          # every entry's symbol, in signature order
    lifecycle_providers: tuple
    tileiras_flags: tuple[str, ...]   # as cuTile would pass them for the arch
    timeout_sec: float | None
    #: what the operations with a ``splice_tma_stored_reads`` method found (their own
    #: records: :func:`_install_alias_hook`), each once
    tma_stored_reads: tuple = ()


def max_bytecode_version() -> int:
    """The newest Tile IR bytecode version the installed tileiras takes, as cuTile's
    ``compile_tile`` finds it when not given one: by running tileiras on an empty module of
    each version, newest first, dev versions too when :func:`dev_features` (cached by cuTile
    in this process; :func:`splice.tracing.trace.bytecode_version` remembers it on disk)."""
    temp_dir = _private("default_tile_context").config.temp_dir
    return int(_private("_get_max_supported_bytecode_version")(temp_dir,
                                                               allow_dev=dev_features()))


def oldest_bytecode_version() -> int:
    """The oldest Tile IR bytecode version cuTile writes (no tileiras runs to find it)."""
    return int(min(_private("bc").BytecodeVersion))


def dev_features() -> bool:
    """Whether cuTile's dev features are on, as its ``compile_tile`` asks."""
    return bool(_private("_compile_module").dev_features_enabled())


def lower_to_bytecode(kernel, signatures: tuple, arch: str, context=None,
                      bytecode_version: int | None = None) -> Lowered:
    """cuTile's frontend on ``kernel`` (a ``ct.kernel``) for ``signatures``: Tile IR
    bytecode (one module, an entry per signature) and the tileiras flags cuTile would use
    for ``arch``. Extern calls in it reach splice's handlers (:func:`resolve_calls`).
    ``bytecode_version``: the Tile IR bytecode version to write (None: cuTile's choice,
    which runs tileiras once per process to find it)."""
    context = context or _private("default_tile_context")
    _install_alias_hook()
    options = kernel._compiler_options
    found: dict = {}
    _hook_state.found = found
    try:
        # looked up at each call, as cuTile's own kernel._compile imports it: a test that
        # patches cuda.tile._compile.compile_tile sees splice's calls too
        compile_tile = _private("_compile_module").compile_tile
        version = None if bytecode_version is None else \
            _private("bc").BytecodeVersion(bytecode_version)
        result = compile_tile(kernel._annotated_function, signatures, arch, options,
                              context, bytecode_version=version, return_bytecode=True,
                              return_cubin=False)
    finally:
        _hook_state.found = None
    opt, device_debug = _private("_tileiras_effective_opt_and_device_debug")(options, arch)
    flags = ("--gpu-name", arch, f"-O{opt}", "--device-debug" if device_debug
             else "--lineinfo")
    return Lowered(bytes(result.bytecode), tuple(s.symbol for s in result.kernel_signatures),
                   tuple(result.library_lifecycle_providers), flags,
                   context.config.compiler_timeout_sec, tuple(found))


#: An alias set of splice's own (cuTile's are ints, a bit per alias group counted from
#: bit 0; ``-1``, every bit, is the universe): the memory only splice's own code touches
#: (a tile call's staging buffers). It overlaps the universe -- an array of unknown
#: aliasing -- and no array cuTile gives a bit of its own (fewer than 1000 of them).
SPLICE_ALIAS_SET = 1 << 1000


def _install_alias_hook() -> None:
    """Wrap ``cuda.tile._compile.dataflow_analysis`` (once) so that every operation of the
    kernel with a ``splice_alias_set(alias_set_of)`` method gives its result the alias set
    that method returns (``alias_set_of(var)``: the alias set cuTile found for ``var``;
    None: leave cuTile's own). cuTile's token-order pass orders a memory operation by the
    alias set of its pointer (``token_order._get_input_var``): an operation with pointer
    ``p`` is joined with the earlier ones whose pointer's set overlaps ``p``'s. cuTile gives
    the result of an operation it does not know the universe, which overlaps everything.

    Then every operation with a ``splice_tma_stored_reads(stores, alias_set_of)`` method is
    given the kernel's ``ct.store`` operations that may use TMA (``stores``: (alias set of
    the stored array, "file:line") each); the records it returns are collected for
    :func:`lower_to_bytecode` (:mod:`splice.ptxtools.tma_store_reads`)."""
    compile_module = _private("_compile_module")
    original = compile_module.dataflow_analysis
    if getattr(original, "_splice_alias_hook", False):
        return

    def dataflow_analysis(root_block, parameter_constraints):
        result = original(root_block, parameter_constraints)

        def alias_set_of(var):
            return result[var.name].alias_set
        for op in _operations(root_block):
            rule = getattr(op, "splice_alias_set", None)
            alias_set = None if rule is None else rule(alias_set_of)
            if alias_set is not None:
                var = op.result_var
                result.predicates[var.name] = result[var.name].replace(alias_set=alias_set)
        _find_tma_stored_reads(root_block, alias_set_of)
        return result
    dataflow_analysis._splice_alias_hook = True
    compile_module.dataflow_analysis = dataflow_analysis


_hook_state = threading.local()


def _find_tma_stored_reads(root_block, alias_set_of) -> None:
    """Give the kernel's stores that may use TMA to the operations that ask for them
    (:func:`_install_alias_hook`), into the records of the running
    :func:`lower_to_bytecode`."""
    found = getattr(_hook_state, "found", None)
    if found is None:       # not a trace by splice
        return
    stores = tuple(_tma_stores(root_block, alias_set_of))
    if not stores:
        return
    for op in _operations(root_block):
        ask = getattr(op, "splice_tma_stored_reads", None)
        if ask is not None:
            found.update(dict.fromkeys(ask(stores, alias_set_of)))


def _tma_stores(root_block, alias_set_of):
    """(alias set of the array, "file:line") of each ``ct.store`` (``TileStore``) of the
    kernel whose ``allow_tma`` is not False (cuTile's default, None, allows TMA:
    ``BytecodeContext.load_store_hints``)."""
    for op in _operations(root_block):
        if isinstance(op, _private("TileStore")) and op.allow_tma is not False:
            array = op.view.get_aggregate().base_ptr  # as token_order._get_input_var
            yield alias_set_of(array), f"{op.loc.filename}:{op.loc.line}"


def _operations(block):
    """Every operation of ``block`` and of the blocks nested in it."""
    for op in block.operations:
        yield op
        for nested in op.nested_blocks:
            yield from _operations(nested)


def python_function(kernel):
    """The Python function ``kernel`` (a ``ct.kernel`` or ``splice.kernel``) was made from."""
    return kernel._pyfunc


def kernel_options(kernel) -> dict[str, Any]:
    """The options ``kernel`` (a ``ct.kernel``) was made with (``num_ctas=`` ...)."""
    return dataclasses.asdict(kernel._compiler_options)


def tileiras_path() -> str:
    """Path of the tileiras cuTile would run (pip package first, then PATH, CUDA_HOME)."""
    _load_private()   # not the version check: `python -m splice doctor` reports both
    try:
        return globals()["_find_compiler_bin"]().path
    except FileNotFoundError as e:
        raise SpliceToolchainError(str(e)) from None


def nvshmem_lifecycle():
    """cuTile's NVSHMEM library-lifecycle provider module (``library_init(handle)`` runs
    ``nvshmem.core.library_init`` on a loaded module; cuda-tile 1.7)."""
    from cuda.tile._library_lifecycle import nvshmem
    return nvshmem


def get_compute_capability() -> tuple[int, int]:
    """(major, minor) of the current GPU, as cuTile reads it (raises without a GPU)."""
    return _private("_get_compute_capability")()


def arch_name(compute_capability: tuple[int, int]) -> str:
    """cuTile's name of the architecture of ``compute_capability``: (9, 0) -> "sm_90"."""
    return _private("format_sm_arch")(*compute_capability)


def current_arch() -> str:
    """The architecture of the current GPU ("sm_90").

    Raises:
        SpliceToolchainError: no GPU or CUDA driver (libcuda) on this machine."""
    ensure_supported_cutile()
    try:
        return arch_name(get_compute_capability())
    except (OSError, RuntimeError) as e:  # no libcuda (OSError), a driver error
        raise SpliceToolchainError(
            f"no GPU to take the architecture from ({type(e).__name__}: {e})") from None


# --------------------------------------------------------------------------------------------
# cuTile's JAX integration (cuda.tile.jax), for splice.jax


@dataclasses.dataclass(frozen=True)
class JaxInternals:
    """What :mod:`splice.jax` reuses of ``cuda.tile.jax`` (cuda-tile 1.7), so that a spliced
    kernel sees exactly the signature, scalar packing and launch that cuTile's own
    ``cutile_call`` would give it: ``_array_constraint(aval, index_dtype, alias_group)``,
    ``pack_scalar(value, want_int64)``, ``_calling_convention_for(constraints)``, the
    annotation tree node types, and the name of the XLA FFI target cuTile registers
    (``cutile_launch``, api_version 4; attributes as in ``_cutile_call_ffi_p_lower``)."""

    array_constraint: Any
    pack_scalar: Any
    calling_convention_for: Any
    leaf_node: Any
    homogeneous_tuple_node: Any
    heterogeneous_tuple_node: Any
    ffi_target: str = "cutile_launch"


def jax_internals() -> JaxInternals:
    """cuTile's JAX internals (importing ``cuda.tile.jax`` registers its FFI target).

    Raises:
        SpliceToolchainError: JAX is not installed, or cuTile's JAX module lacks a name."""
    try:
        import cuda.tile.jax as cjax
        from cuda.tile._annotated_function import (
            HeterogeneousTupleNode,
            HomogeneousTupleNode,
            LeafAnnotationNode,
        )
        from cuda.tile.jax import _jax
        if not cjax.HAS_JAX:
            raise ImportError("JAX is not installed")
        return JaxInternals(_jax._array_constraint, _jax.pack_scalar,
                            _jax._calling_convention_for, LeafAnnotationNode,
                            HomogeneousTupleNode, HeterogeneousTupleNode)
    except (ImportError, AttributeError) as e:
        raise SpliceToolchainError(
            f"splice.jax needs JAX (with its CUDA plugin) and cuda-tile "
            f"{cutile_version()}'s cuda.tile.jax: {e}") from None


def parameter_annotations(kernel) -> tuple[list[str], list]:
    """The kernel's parameter names and cuTile's annotation tree for each."""
    ann = kernel._annotated_function
    return list(ann.pysig.parameters), list(ann.parameter_annotations)
