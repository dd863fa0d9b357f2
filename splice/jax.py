"""Spliced kernels inside ``jax.jit``: :func:`cutile_call`, the counterpart of
``cuda.tile.jax.cutile_call`` (same arguments and results), compiling through splice.

::

    import jax, splice
    from splice.jax import cutile_call, OutputPlaceholder, InputOutput

    @jax.jit
    def f(x):
        return cutile_call((x.shape[0] // 256,), gelu, (x, OutputPlaceholder(x.shape, x.dtype),
                                                         256))

``cuda.tile.jax.cutile_call`` runs cuTile's compiler directly and so cannot splice: given a
``@splice.kernel`` it raises :class:`splice.SpliceCallError` naming this function. Given a
plain ``@ct.kernel``, this function hands it to cuTile's.

The kernel is launched by cuTile's own XLA FFI handler (``cutile_launch``) with the cubin
splice built for the signature cuTile derives from the JAX arrays (row-major, 256-byte
aligned, divisibility by 16 where it holds), on the GPU JAX runs on. Needs JAX with its CUDA
plugin; ``import splice.jax`` raises ``ImportError`` without JAX, and
:class:`splice.SpliceToolchainError` when cuTile's ``cuda.tile.jax`` lacks a name splice uses.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import defaultdict
from functools import partial
from typing import Any

import jax
import jax.extend
import numpy as np
from cuda.tile.jax import InputOutput, OutputPlaceholder
from jax.interpreters import mlir

from .driver.splice_kernel import SpliceKernel
from .errors import SpliceDeclarationError
from .system import _cutile, forksafe

__all__ = ["cutile_call", "OutputPlaceholder", "InputOutput"]

_ct = _cutile.jax_internals()
log = logging.getLogger("splice")


#: CUDA's grid limits: x < 2**31, y and z <= 65535.
_GRID_MAX = ((1 << 31) - 1, 65535, 65535)


def _check_grid(grid) -> tuple[int, int, int]:
    """``grid`` padded to 3 dimensions, each a positive int within CUDA's limits (cuTile's
    launch takes them as int32: 4.5 became 4, silently leaving tiles uncomputed).

    Raises:
        SpliceDeclarationError: anything else.
    """
    ok = isinstance(grid, tuple) and 1 <= len(grid) <= 3 and all(
        isinstance(g, (int, np.integer)) and not isinstance(g, (bool, np.bool_)) and
        1 <= g <= top for g, top in zip(grid, _GRID_MAX))
    if not ok:
        raise SpliceDeclarationError(
            f"splice.jax.cutile_call: grid must be a tuple of 1 to 3 positive ints (x below "
            f"2**31, y and z at most 65535; compute it with ct.cdiv), got {grid!r}")
    return tuple(int(g) for g in grid) + (1,) * (3 - len(grid))  # type: ignore[return-value]


def cutile_call(grid: tuple[int, ...], kernel, args: tuple[Any, ...]):
    """Launch ``kernel`` from a JAX-traced function, as ``cuda.tile.jax.cutile_call``.

    Args:
        grid (tuple[int, ...]): up to 3 grid dimensions (padded with 1s).
        kernel: a ``@splice.kernel`` (a plain ``@ct.kernel`` goes to cuTile's cutile_call).
        args (tuple): one per kernel parameter: a ``jax.Array`` (read-only input), an
            :class:`OutputPlaceholder` (``shape``, ``dtype``: an output JAX allocates and
            returns), an :class:`InputOutput` (an input updated in place and returned), a
            static ``bool``/``int``/``float`` (a runtime scalar, or a ``ct.Constant``; pass it
            through ``static_argnums`` of ``jax.jit``), or a tuple of these for a tuple
            parameter.

    Returns:
        The output array, or a tuple of them in parameter order (several outputs).

    Raises:
        TypeError: an argument that does not fit its parameter (as cuTile's).
        SpliceDeclarationError: a grid that is not 1 to 3 positive ints within CUDA's
            limits.
        SpliceCallError: while JAX lowers the call (splice compiles the kernel then), as
            for :func:`splice.compile`; so are SpliceCompileError, SpliceLinkError,
            SpliceRewriteError and SpliceToolchainError.

    Example:
        ```python
        # requires: gpu
        import cuda.tile as ct
        import jax
        import jax.numpy as jnp

        import splice
        from splice.jax import OutputPlaceholder, cutile_call

        lib = splice.library(source='extern "C" __device__ float twice(float x) { return 2 * x; }')
        twice = lib.extern("twice", signature="float32(float32)")

        @splice.kernel
        def scale(x, y, TILE: ct.Constant[int]):
            block = ct.bid(0)
            ct.store(y, index=(block,), tile=twice(ct.load(x, index=(block,), shape=(TILE,))))

        x = jnp.arange(4096, dtype=jnp.float32)
        out = OutputPlaceholder(x.shape, x.dtype)
        y = jax.jit(lambda x: cutile_call((4,), scale, (x, out, 1024)))(x)
        assert bool((y == 2 * x).all())
        print("ok")
        ```
    """
    if not isinstance(kernel, SpliceKernel):
        from cuda.tile.jax import cutile_call as cutile_cutile_call
        return cutile_cutile_call(grid, kernel, args)
    grid = _check_grid(grid)
    sorted_args = _SortedArgs.of(kernel, args)
    roles, outputs = sorted_args.roles, tuple(sorted_args.outputs)
    constants, scalars = tuple(sorted_args.constants), tuple(sorted_args.scalars)
    alias_group = sorted_args.alias_group()

    @partial(jax.jit, inline=True)
    def wrapper(*input_args):
        out = _primitive().bind(*input_args, kernel=kernel, grid=grid,
                                output_shape_dtypes=outputs, constants=constants,
                                scalars=scalars, roles=roles, alias_group=alias_group)
        return out[0] if len(outputs) == 1 else out

    return wrapper(*sorted_args.inputs)


@dataclasses.dataclass
class _SortedArgs:
    """The arguments of one :func:`cutile_call`, sorted by role as the primitive takes them.

    ``roles`` mirrors the kernel's parameters (a tuple for a tuple parameter), each leaf one
    of "i" (input array), "o" (output placeholder), "io" (input updated in place), "s"
    (runtime scalar), "c" (``ct.Constant``)."""

    kernel_name: str
    inputs: list = dataclasses.field(default_factory=list)      # jax.Array, "i" and "io"
    outputs: list = dataclasses.field(default_factory=list)     # ShapeDtypeStruct, "o", "io"
    constants: list = dataclasses.field(default_factory=list)
    scalars: list = dataclasses.field(default_factory=list)
    roles: tuple = ()
    #: id of an input array -> its indices in ``inputs`` (one array passed several times)
    positions: defaultdict = dataclasses.field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, kernel, args: tuple) -> _SortedArgs:
        """The arguments ``args`` of ``kernel``, sorted.

        Raises:
            TypeError: an argument that does not fit its parameter (as cuTile's).
        """
        names, annotations = _cutile.parameter_annotations(kernel)
        self = cls(_cutile.python_function(kernel).__name__)
        if len(args) != len(names):
            raise TypeError(f"{self.kernel_name} expects {len(names)} arguments, got "
                            f"{len(args)}")
        self.roles = tuple(self._flatten(x, node, f"{i} ('{names[i]}')")
                           for i, (x, node) in enumerate(zip(args, annotations)))
        return self

    def alias_group(self) -> tuple[str | None, ...]:
        """Per input, the group of the inputs that are one array ("G<first index>"), or None
        for an array passed once."""
        return tuple(f"G{self.positions[id(x)][0]}" if len(self.positions[id(x)]) > 1
                     else None for x in self.inputs)

    def _flatten(self, x, node, path: str):
        if isinstance(node, _ct.leaf_node):
            return self._leaf_role(x, node, path)
        if not isinstance(x, tuple):
            raise TypeError(f"{self.kernel_name}: argument {path} is a tuple parameter; "
                            f"expected a tuple, got {type(x).__name__}")
        subs = _tuple_items(node, len(x))
        if len(subs) != len(x):
            raise TypeError(f"{self.kernel_name}: argument {path} expects a tuple of length "
                            f"{len(subs)}, got {len(x)}")
        return tuple(self._flatten(e, n, f"{path}[{i}]")
                     for i, (e, n) in enumerate(zip(x, subs)))

    def _leaf_role(self, x, node, path: str) -> str:
        if isinstance(x, OutputPlaceholder):
            self.outputs.append(jax.ShapeDtypeStruct(x.shape, x.dtype))
            role = "o"
        elif isinstance(x, jax.Array):
            self.positions[id(x)].append(len(self.inputs))
            self.inputs.append(x)
            role = "i"
        elif isinstance(x, InputOutput):
            self.positions[id(x.array)].append(len(self.inputs))
            self.inputs.append(x.array)
            self.outputs.append(jax.ShapeDtypeStruct(x.array.shape, x.array.dtype))
            role = "io"
        elif isinstance(x, (bool, int, float)):
            (self.constants if node.constant else self.scalars).append(x)
            role = "c" if node.constant else "s"
        else:
            raise TypeError(f"Unexpected type for argument {path}: {type(x)}")
        if node.constant and role != "c":
            raise TypeError(f"{self.kernel_name}: argument {path} is annotated ct.Constant; "
                            f"expected a static scalar argument")
        return role


def _tuple_items(node, n: int) -> list:
    if isinstance(node, _ct.homogeneous_tuple_node):
        return [node.each] * n
    if isinstance(node, _ct.heterogeneous_tuple_node):
        return list(node.items)
    raise TypeError(f"unsupported annotation {node!r} for a tuple argument")


# --------------------------------------------------------------------------------------------
# The primitive: abstract evaluation, and a CUDA lowering to cuTile's FFI launch of splice's
# cubin.

_lock = forksafe.lock(globals(), "_lock")
_prim = None


def _primitive():
    global _prim
    with _lock:
        if _prim is None:
            p = jax.extend.core.Primitive("splice_cutile_call")
            p.multiple_results = True
            p.def_abstract_eval(lambda *a, output_shape_dtypes, **kw: [
                jax.core.ShapedArray(x.shape, x.dtype) for x in output_shape_dtypes])
            mlir.register_lowering(p, _lower, platform="cuda")
            _prim = p
    return _prim


def _arch() -> str:
    """The architecture to compile for: the current GPU's (as cuTile's cutile_call)."""
    return _cutile.current_arch()


def _lower(ctx, *input_args, kernel, grid, output_shape_dtypes, constants, scalars, roles,
           alias_group):
    num_inputs, num_outputs = len(input_args), len(output_shape_dtypes)
    buffer_ids, index_bitwidths, scalar_packed = [], [], []
    aliases: dict[int, int] = {}
    count = {"i": 0, "o": 0, "c": 0, "s": 0}
    _, annotations = _cutile.parameter_annotations(kernel)

    def constraint(role, node):
        import cuda.tile as ct
        from cuda.tile.compilation import (
            ConstantConstraint,
            ScalarConstraint,
            TupleConstraint,
        )
        if isinstance(role, tuple):
            subs = _tuple_items(node, len(role)) if not isinstance(node, _ct.leaf_node) \
                else [node] * len(role)
            return TupleConstraint([constraint(r, n) for r, n in zip(role, subs)])
        wide = node.array is not None and node.array.index_dtype == ct.int64
        index_dtype = ct.int64 if wide else ct.int32
        if role in ("i", "io", "o"):
            k = count["i"] if role != "o" else count["o"]
            buffer_ids.append(k if role != "o" else k + num_inputs)
            index_bitwidths.append(64 if wide else 32)
            aval = ctx.avals_out[k] if role == "o" else ctx.avals_in[k]
            c = _ct.array_constraint(aval, index_dtype, None if role == "o" else alias_group[k])
            if role == "io":
                aliases[count["i"]] = count["o"]
            for r in (("i", "o") if role == "io" else (role,)):
                count[r] += 1
            return c
        if role == "s":
            buffer_ids.append(count["s"] + num_inputs + num_outputs)
            index_bitwidths.append(0)
            dtype, packed = _ct.pack_scalar(scalars[count["s"]], want_int64=(
                node.scalar is not None and node.scalar.dtype == ct.int64))
            scalar_packed.append(packed)
            count["s"] += 1
            return ScalarConstraint(dtype)
        c = ConstantConstraint(constants[count["c"]])
        count["c"] += 1
        return c

    constraints = [constraint(role, annotations[i]) for i, role in enumerate(roles)]
    symbol, cubin, cubin_id = _compile(kernel, constraints)
    return jax.ffi.ffi_lowering(_ct.ffi_target, operand_output_aliases=aliases or None,
                                api_version=4)(
        ctx, *input_args,
        buffer_ids=np.asarray(buffer_ids, dtype=np.int32),
        scalar_packed=np.asarray(scalar_packed, dtype=np.uint64),
        cubin_code=cubin,
        cubin_id=np.frombuffer(cubin_id, dtype=np.uint8),
        function_name=symbol,
        index_bitwidths=np.asarray(index_bitwidths, dtype=np.int32),
        num_inputs=np.int32(num_inputs),
        num_outputs=np.int32(num_outputs),
        grid_x=np.int32(grid[0]), grid_y=np.int32(grid[1]), grid_z=np.int32(grid[2]))


_compiled: dict = {}


def _constraint_key(c):
    from cuda.tile.compilation import ConstantConstraint, TupleConstraint
    if isinstance(c, ConstantConstraint):    # 1 == 1.0 == True: keep the types apart
        return ("const", type(c.value).__name__, c.value)
    if isinstance(c, TupleConstraint):
        return ("tuple", tuple(_constraint_key(x) for x in c.items))
    return c


def _compile(kernel, constraints) -> tuple[str, bytes, bytes]:
    """(symbol, cubin, sha256 of the cubin) of ``kernel`` for ``constraints``, built by
    splice for the current GPU; kept per kernel object and signature for the process, and
    built again once a global name its trace read holds another object
    (:func:`splice.tracing.reloading.still_bound`: what the kernel's names hold when it is
    compiled, as for ``splice.compile``)."""
    from cuda.tile.compilation import KernelSignature

    from .driver import pipeline
    from .tracing import reloading
    arch = _arch()
    key = (id(kernel), arch, tuple(_constraint_key(c) for c in constraints))
    hit = _compiled.get(key)
    if hit is not None and reloading.still_bound(hit[-1]):
        return hit[1:-1]
    signature = KernelSignature(constraints, _ct.calling_convention_for(constraints)) \
        .with_mangled_symbol(_cutile.python_function(kernel).__name__)
    with reloading.recording() as reads:
        b = pipeline.build(kernel, signature, arch)
    log.info("splice.jax.cutile_call: %s for %s (%s)", b.kernel_name, arch,
             "cached" if b.from_cache else f"compiled in {b.seconds:.3f} s")
    out = (kernel, b.symbol, b.cubin, hashlib.sha256(b.cubin).digest(), tuple(reads))
    _compiled[key] = out      # holds the kernel: its id stays unique while the entry lives
    return out[1:-1]
