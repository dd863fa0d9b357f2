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
- ``cuda.tile._passes.ast2hir.get_function_hir`` (cuTile's cache of each function's HIR,
  with the values its global names held when it was first read) is wrapped, by its name in
  the modules that call it, so that a trace by splice reads each global name the code
  loads from the function's namespaces at that moment (:func:`_install_globals_hook`,
  ``docs/guide/reloading.md``).
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
import types
from typing import Any

from ..errors import SpliceDeclarationError, SpliceToolchainError

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
    "_ast2hir": ("cuda.tile._passes.ast2hir", None),
    "_hir2ir": ("cuda.tile._passes.hir2ir", None),
    "is_function_wrapper": ("cuda.tile._execution", "is_function_wrapper"),
    **{n: ("cuda.tile._ir.hir", n) for n in (
        "Block", "ResolvedName", "StaticEvalExpression")},
    "load_var": ("cuda.tile._ir.hir_stubs", "load_var"),
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
    #: every global name the traced code loaded, with the value it read (:class:`Read`)
    reads: tuple = ()


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
    _install_globals_hook()
    options = kernel._compiler_options
    found: dict = {}
    reads: list[Read] = []
    _hook_state.found, _hook_state.reads = found, reads
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
        _hook_state.found = _hook_state.reads = None
    opt, device_debug = _private("_tileiras_effective_opt_and_device_debug")(options, arch)
    flags = ("--gpu-name", arch, f"-O{opt}", "--device-debug" if device_debug
             else "--lineinfo")
    return Lowered(bytes(result.bytecode), tuple(s.symbol for s in result.kernel_signatures),
                   tuple(result.library_lifecycle_providers), flags,
                   context.config.compiler_timeout_sec, tuple(found), tuple(reads))


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


# --------------------------------------------------------------------------------------------
# Python's rule for names: a trace reads what each global name holds now


@dataclasses.dataclass(frozen=True, eq=False)   # compared by what they read, never by ==
class Read:
    """One global name the traced code of ``function`` (a Python function) loaded, and the
    value it read there; with ``attrs``, the attribute of it the code read (``lib.f``: a
    module's or a class's attribute, which cuTile reads at the trace)."""

    function: Any
    name: str
    value: Any
    attrs: tuple[str, ...] = ()

    def holds(self) -> bool:
        """Whether ``name`` (and its attributes ``attrs``) still holds ``value`` in
        ``function``'s namespaces."""
        return _attribute(lookup(self.function, self.name), self.attrs) is self.value


def _attribute(value, attrs: tuple[str, ...]):
    """``value.a.b`` for ``attrs`` ``("a", "b")``, through modules and classes only (what
    cuTile's ``getattr`` of a constant reads); :data:`UNBOUND` where one is missing or not
    a module or a class."""
    for a in attrs:
        if not isinstance(value, (types.ModuleType, type)):
            return UNBOUND
        value = getattr(value, a, UNBOUND)
    return value


#: what :func:`lookup` gives for a name bound nowhere
UNBOUND: Any = object()


def lookup(function, name: str):
    """What ``name`` holds in the code of the Python function ``function`` now, by
    Python's rule for a name the function does not assign: its closure cell, else its
    module's globals, else its builtins (LEGB); :data:`UNBOUND` where none binds it."""
    code = function.__code__
    if name in code.co_freevars and function.__closure__:
        cell = function.__closure__[code.co_freevars.index(name)]
        try:
            return cell.cell_contents
        except ValueError:      # an empty cell (assigned later, or deleted)
            return UNBOUND
    if name in function.__globals__:
        return function.__globals__[name]
    builtins = function.__builtins__
    if not isinstance(builtins, dict):
        builtins = vars(builtins)
    return builtins.get(name, UNBOUND)


def _install_globals_hook() -> None:
    """Wrap cuTile's ``get_function_hir`` (once) so that in a trace by splice each function
    cuTile compiles reads the global names its code loads as they are bound now, not as
    cuTile froze them when it first read the function (its cache is by function object,
    for the process): the kernel, the helpers it calls, their nested functions and their
    ``ct.static_eval`` expressions. The values read are recorded for
    :func:`lower_to_bytecode` (:class:`Read`).

    cuTile's HIR keeps a value per global name (``frozen_global_values``, read by its
    ``load_var``); the wrapper sets, in the cached HIR, the values of the names a
    ``load_var`` of the function's code reads, and the globals of the functions cuTile
    compiled for its ``static_eval`` expressions, before the trace uses them."""
    ast2hir = _private("_ast2hir")
    original = ast2hir.get_function_hir
    if getattr(original, "_splice_globals_hook", False):
        return

    def get_function_hir(pyfunc, mode):
        hir = original(pyfunc, mode)
        reads = getattr(_hook_state, "reads", None)
        if reads is not None:
            while _private("is_function_wrapper")(pyfunc):   # as cuTile unwraps it
                pyfunc = pyfunc.__wrapped__
            reads.extend(_read_globals(hir, pyfunc))
        return hir
    get_function_hir._splice_globals_hook = True
    get_function_hir.cache_clear = original.cache_clear
    for module in (ast2hir, _private("_hir2ir"), _private("_compile_module")):
        module.get_function_hir = get_function_hir


def _read_globals(hir, pyfunc) -> list[Read]:
    """Set the global names ``hir`` (and the functions nested in it) loads to what they
    hold in ``pyfunc``'s namespaces now; what was read.

    Raises:
        SpliceDeclarationError: a name the code loads is bound nowhere now (Python would
            raise NameError)."""
    loads, static_evals = _global_loads(hir)
    values = list(hir.frozen_global_values)
    reads = []
    for i in loads:
        name = hir.frozen_global_names[i]
        values[i] = _bound(pyfunc, name, hir)
        reads.append(Read(pyfunc, name, values[i]))
    hir.frozen_global_values = tuple(values)
    known = set(hir.frozen_global_names)
    for fn in static_evals:
        namespace = fn.__globals__           # cuTile's own copy, made for this function
        for name in _code_names(fn.__code__) & known:
            namespace[name] = _bound(pyfunc, name, hir)
            reads.append(Read(pyfunc, name, namespace[name]))
    reads.extend(_attribute_reads(hir, pyfunc, values))
    for nested in hir.nested_functions:
        reads.extend(_read_globals(nested, pyfunc))
    return reads


def _attribute_reads(hir, pyfunc, values) -> list[Read]:
    """The attributes of modules and classes ``hir``'s code reads from its global names
    (``getattr`` of a ``load_var``'s value, or of such an attribute), as they are bound
    now (``values``: the global names' values, by index)."""
    load_var, resolved = _private("load_var"), _private("ResolvedName")
    paths: dict[int, tuple[int, tuple[str, ...]]] = {}   # value id -> (global, attrs)
    reads = []
    for call in _calls(hir.body):
        rn = call.args[0] if call.args else None
        key = getattr(call.result, "id", None)
        if call.callee is load_var and isinstance(rn, resolved) and rn.depth < 0 \
                and rn.index >= 0 and key is not None:
            paths[key] = (rn.index, ())
        elif call.callee is getattr and len(call.args) == 2 and \
                isinstance(call.args[1], str) and key is not None and \
                getattr(call.args[0], "id", None) in paths:
            index, attrs = paths[call.args[0].id]
            paths[key] = (index, attrs + (call.args[1],))
            value = _attribute(values[index], paths[key][1])
            if value is not UNBOUND:
                reads.append(Read(pyfunc, hir.frozen_global_names[index], value,
                                  paths[key][1]))
    return reads


def _calls(block):
    """Every call of ``block`` and of the blocks nested in its calls' arguments."""
    for call in block.calls:
        yield call
        for arg in call.args:
            if isinstance(arg, _private("Block")):
                yield from _calls(arg)


def _bound(pyfunc, name: str, hir):
    value = lookup(pyfunc, name)
    if value is UNBOUND:
        desc = hir.desc
        raise SpliceDeclarationError(
            f"'{desc.name}' ({desc.filename}:{desc.line}) reads the name '{name}', which "
            f"nothing binds now (it was bound when cuTile first read the function; Python "
            f"would raise NameError): bind it again, or remove its use")
    return value


def _global_loads(hir) -> tuple[list[int], list]:
    """The indices (into ``frozen_global_names``) of the global names ``hir``'s own code
    loads, and the functions of its ``static_eval`` expressions; found once per HIR."""
    found = hir.__dict__.get("_splice_global_loads")
    if found is None:
        loads: set[int] = set()
        static_evals: list = []
        _scan(hir.body, loads, static_evals)
        found = hir._splice_global_loads = (sorted(loads), static_evals)
    return found


def _scan(block, loads: set[int], static_evals: list) -> None:
    load_var, resolved = _private("load_var"), _private("ResolvedName")
    for call in _calls(block):
        rn = call.args[0] if call.args else None
        if call.callee is load_var and isinstance(rn, resolved) and rn.depth < 0 \
                and rn.index >= 0:
            loads.add(rn.index)
        static_evals.extend(arg.compiled_expr for arg in call.args
                            if isinstance(arg, _private("StaticEvalExpression")))


def _code_names(code) -> set[str]:
    """The global names ``code`` and the code nested in it (lambdas, comprehensions) may
    load."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


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


#: The wheels cuTile takes tileiras from, only when all share one CUDA minor (else it falls
#: back to ``tileiras`` on PATH or in $CUDA_HOME): cuda-tile 1.7's ``_PIP_TILEIRAS_PACKAGES``.
PIP_TILEIRAS_WHEELS = ("nvidia-cuda-tileiras", "nvidia-cuda-nvcc", "nvidia-nvvm")


def pip_tileiras_wheels() -> tuple[str, ...]:
    """:data:`PIP_TILEIRAS_WHEELS` as the installed cuda-tile names them."""
    _load_private()
    return tuple(getattr(_private("_compile_module"), "_PIP_TILEIRAS_PACKAGES",
                         PIP_TILEIRAS_WHEELS))


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
