"""``@splice.kernel``: :class:`SpliceKernel`, a ``ct.kernel`` whose compilation is splice's.

cuTile's launcher calls ``ct.kernel._compile`` for each new signature and caches what it
returns; :class:`SpliceKernel` overrides it to return the cubin of
:func:`splice.driver.pipeline.build`, so ``ct.launch``, its launch cache and its argument checks
work unchanged (``docs/design.md#cutile-hooks``).
"""

from __future__ import annotations

import inspect
import types

import cuda.tile as ct

from ..errors import (
    SpliceDeclarationError,
    SpliceOptionValueError,
    SpliceToolchainError,
)
from ..system import _cutile


def signature_from_args(kernel, args):
    """The ``cuda.tile.compilation.KernelSignature`` cuTile makes of launch arguments.

    Raises:
        SpliceToolchainError: no CUDA driver (cuTile asks it about array arguments).
        TypeError, ValueError, cuda.tile.TileError: cuTile cannot type the arguments.
    """
    from cuda.tile.compilation import CallingConvention, KernelSignature
    try:
        return KernelSignature.from_kernel_args(kernel, args,
                                                CallingConvention.cutile_python_v1())
    except OSError as e:   # libcuda cannot be loaded
        raise SpliceToolchainError(f"no CUDA driver to describe the arguments ({e})") from None


class SpliceKernel(ct.kernel):
    """``@splice.kernel``: a ``@ct.kernel`` whose compiled cubin has every extern call
    spliced in. Same options as ``ct.kernel``; launch it with ``ct.launch``.

    Args:
        function: the kernel's Python function (``@splice.kernel``), or None with options
            (``@splice.kernel(num_worker_warps=8)``).
        **options: ``ct.kernel``'s options (``num_ctas``, ``occupancy``, ``opt_level``,
            ``num_worker_warps``...).

    Raises:
        SpliceDeclarationError: not applied to a function, or an option cuTile refuses.

    Example:
        ```python
        import cuda.tile as ct
        import splice

        @splice.kernel(opt_level=3)
        def copy(x, y, TILE: ct.Constant[int]):
            ct.store(y, index=(ct.bid(0),), tile=ct.load(x, index=(ct.bid(0),), shape=(TILE,)))

        b = copy.inspect(signature=splice.kernel_signature("array(float32)", "array(float32)",
                                                           128), arch="sm_90")
        print(b.summary())
        ```
    """

    def __new__(cls, function=None, /, **kwargs):
        if function is None:
            def decorate(func):
                return cls(func, **kwargs)
            return decorate
        if not isinstance(function, types.FunctionType):
            caller = next(f for f in inspect.stack() if f.filename != __file__)
            raise SpliceDeclarationError(
                f"@splice.kernel at {caller.filename}:{caller.lineno}: got "
                f"{type(function).__name__} {function!r:.80}; decorate a def (a Python "
                f"function) with @splice.kernel")
        return super().__new__(cls, function, **kwargs)

    def __init__(self, function=None, /, **options):   # None: see __new__ (for type checkers)
        try:
            bools = [k for k, v in options.items() if isinstance(v, bool)]
            if bools:   # cuTile takes True for 1
                raise TypeError(f"{', '.join(bools)} must be an int, not a bool")
            super().__init__(function, **options)
        except (TypeError, ValueError) as e:  # cuTile checks the options
            code = function.__code__
            given = ", ".join(f"{k}={v!r}" for k, v in options.items())
            # cuTile's class kept: ValueError for a bad value, TypeError for a bad type
            cls = SpliceOptionValueError if isinstance(e, ValueError) else \
                SpliceDeclarationError
            raise cls(
                f"@splice.kernel '{function.__name__}' ({code.co_filename}:"
                f"{code.co_firstlineno}): cuTile refuses the options {given}: {e}; num_ctas, "
                f"occupancy, opt_level and num_worker_warps take ints (or ct.ByTarget)"
            ) from None

    def _compile(self, signature, context, compute_capability=None):
        from . import pipeline
        arch = _cutile.arch_name(compute_capability or _cutile.get_compute_capability())
        from ..tracing.reloading import launching
        with launching(self):    # externs reached: a re-declaration warns (StaleKernelWarning)
            built = pipeline.build(self, signature, arch, context)
        return built.cubin, built.symbol, None, built.lifecycle_providers

    def replace_hints(self, **hints):
        # through __init__, which turns cuTile's refusal of a hint into a SpliceError
        options = {**_cutile.kernel_options(self), **hints}
        return type(self)(_cutile.python_function(self), **options)

    def inspect(self, *args, signature=None, arch: str | None = None):
        """Every stage of this kernel's compilation, as a :class:`splice.driver.pipeline.Build`.

        Pass the launch arguments (needs a GPU to derive the signature), or a
        ``cuda.tile.compilation.KernelSignature`` and an ``arch`` such as ``"sm_90"`` (no
        GPU needed).

        Args:
            *args: the launch arguments (arrays, scalars, constants), as for ``ct.launch``.
            signature (KernelSignature | None): instead of ``args``, on any machine.
            arch (str | None): ``"sm_90"``...; default this machine's GPU.

        Returns:
            Build: the cubin, the call sites and every stage's text.

        Raises:
            SpliceDeclarationError: neither arguments nor ``signature=``, or arguments cuTile
                cannot make a signature of.
            SpliceToolchainError: no ``arch=`` (or launch arguments) on a machine without a
                GPU; and as for :func:`splice.build`.
        """
        from . import pipeline
        name, where = pipeline._kernel_desc(self)
        what = f"kernel '{name}' ({where}): inspect()"
        if signature is None and not args:
            raise SpliceDeclarationError(
                f"{what} needs the kernel's launch arguments, or signature= (a "
                f"cuda.tile.compilation.KernelSignature) and arch='sm_90'")
        if arch is None or signature is None:
            try:
                arch = arch or _cutile.current_arch()
                signature = signature or signature_from_args(self, args)
            except SpliceToolchainError as e:
                raise SpliceToolchainError(
                    f"{what} {'with launch arguments ' if args else 'without arch= '}needs "
                    f"this machine's GPU: {e.message}; pass "
                    f"signature=KernelSignature(...) and arch='sm_90' (or 'sm_80', 'sm_100') "
                    f"to compile without a GPU") from None
            except (TypeError, ValueError, ct.TileError) as e:   # cuTile cannot type them
                raise SpliceDeclarationError(
                    f"{what}: cuTile cannot make a kernel signature of the arguments given "
                    f"({type(e).__name__}: {e}); pass them as for ct.launch") from None
        return pipeline.build(self, signature, arch, None, keep_stages=True)
