"""splice's exception types.

Every error splice raises is a :class:`SpliceError`. Each names what the user wrote (the
extern, its declaration's file:line, the kernel and the call site's file:line where known) and
carries the log of the tool that failed (NVRTC, nvJitLink, tileiras, ptxas) in ``.log``.

Errors found while cuTile traces a kernel (wrong arity, wrong dtypes) are also cuTile
``TileTypeError``\\ s, so cuTile prints the call site with its source line and the chain of
helper functions that led to it.

cuTile's own refusals of a kernel's code keep cuTile's class: through ``@splice.kernel`` a
``ct.static_assert`` that fails raises an instance of cuTile's ``TileStaticAssertionError``
that is also a :class:`SpliceError` (a :class:`CuTileError`, made by
:func:`as_cutile_error`), with cuTile's message; tileiras failing raises
:class:`SpliceTileirasError` (a ``TileCompilerExecutionError``) or
:class:`SpliceTileirasTimeout` (a ``TileCompilerTimeoutError``).
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

from cuda.tile import (
    TileCompilerExecutionError,
    TileCompilerTimeoutError,
    TileError,
    TileTypeError,
)

_SPLICE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep   # the splice package


def user_frame() -> FrameType | None:
    """The frame of the user's code that called into splice: the first frame, from the
    caller's up, whose code is outside the splice package.

    Example:
        >>> user_frame().f_code.co_filename != __file__
        True
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
            _SPLICE_DIR):
        frame = frame.f_back
    return frame


def user_location() -> str:
    """"file:line" of the user's code that called into splice (:func:`user_frame`), for
    messages.

    Example:
        >>> ":" in user_location()
        True
    """
    frame = user_frame()
    return "<unknown location>" if frame is None else \
        f"{frame.f_code.co_filename}:{frame.f_lineno}"


class SpliceError(Exception):
    """Base class of every error splice raises.

    Attributes:
        message (str): what went wrong, naming the user's function, file and line.
        log (str): the failing tool's own output (may be empty).
    """

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.message = message
        self.log = log

    def __str__(self) -> str:
        if self.log.strip():
            return f"{self.message}\n--- tool log ---\n{self.log.rstrip()}"
        return self.message


class SpliceDeclarationError(SpliceError, TypeError):
    """An extern's declaration is invalid: bad signature string, unsupported dtype,
    missing annotation, bad option, text where a path goes, a file of another kind. Raised
    when the declaration is made. Also raised when ``splice.compile``/``build``/``inspect``
    are given something other than a kernel and a ``KernelSignature``."""


class SpliceOptionValueError(SpliceDeclarationError, ValueError):
    """A kernel option cuTile refuses with a ``ValueError`` (``num_ctas=3``, an
    ``opt_level`` out of range), or an argument of :func:`splice.export_kernel` that
    cuTile's ``export_kernel`` refuses so (no ``gpu_code``, an unknown ``output_format``):
    a :class:`SpliceDeclarationError` that is also the ``ValueError`` cuTile raises, so
    ``except ValueError`` catches it as for cuTile.

    Example:
        >>> from splice.errors import SpliceOptionValueError, SpliceDeclarationError
        >>> issubclass(SpliceOptionValueError, ValueError)
        True
    """


class SpliceCallError(SpliceError, TileTypeError):
    """A call of an extern inside a kernel does not match its declaration (arity, dtypes,
    shapes), or an extern is called where it cannot be (from Python, from a plain
    ``@ct.kernel``). Raised while cuTile traces the kernel; cuTile's formatting adds the
    call site and its source line."""

    def __init__(self, message: str, loc=None):
        # without a loc, cuTile's own default (its "unknown location"): no private import
        TileTypeError.__init__(self, message, *(() if loc is None else (loc,)))
        SpliceError.__init__(self, message)

    def __str__(self) -> str:
        if self.loc.is_unknown():   # raised outside tracing: no source line to show
            return SpliceError.__str__(self)
        return TileTypeError.__str__(self)


class SpliceCompileError(SpliceError):
    """A CUDA C fragment did not compile (NVRTC). ``.log`` holds NVRTC's log, whose line
    numbers refer to the user's source."""


class SpliceLinkError(SpliceError):
    """A fragment cannot be linked into the kernel: missing symbol, prototype that does not
    match the declared signature, PTX ``.version`` newer than the kernel's, a target the
    kernel's architecture cannot run, or two fragments defining one symbol differently."""


class SpliceRewriteError(SpliceError):
    """The PTX rewriter could not prove that it replaced every call-site marker. splice never
    launches such a kernel."""


class ProofRefusal(SpliceError):
    """A step of a proof on the PTX that does not hold (a block site's guard or join, a
    warpgroup site's barrier): raised by the proofs of :mod:`splice.forms` and turned by
    the form into the :class:`SpliceRewriteError` naming the call site, so that a bug's
    ``ValueError`` stays a traceback and is never taken for a refusal."""


class SpliceToolchainError(SpliceError):
    """A compiler tool is missing or failed (tileiras, ptxas, libnvvm, NVRTC, nvJitLink).
    ``.log`` holds its output."""


class SpliceLaunchError(SpliceError):
    """A built kernel cannot be loaded or launched in this process as it stands (e.g. its
    externs call NVSHMEM and NVSHMEM is not initialised)."""


class CuTileError(SpliceError):
    """cuTile's own refusal of a ``@splice.kernel``'s code (a failed ``ct.static_assert``,
    unsupported syntax, a value cuTile rejects...), raised as an instance of a subclass of
    cuTile's own exception class and of this one, so that ``except ct.TileStaticAssertionError``
    (or any cuTile class) catches it exactly as for a ``@ct.kernel``. ``.message`` and
    ``.loc`` are cuTile's; ``str()`` is cuTile's text followed by a line naming the kernel
    (and a hint where splice has one). Made by :func:`as_cutile_error`.

    Example:
        >>> import cuda.tile as ct, splice
        >>> @splice.kernel
        ... def k(x):
        ...     ct.static_assert(False, "no")
        >>> try:
        ...     splice.compile(k, splice.kernel_signature("array(float32)"), arch="sm_90")
        ... except ct.TileStaticAssertionError as e:
        ...     print(type(e).__name__, isinstance(e, splice.SpliceError), e.message)
        StaticAssertionError True Static assertion failed: no
    """

    #: the kernel named in ``str()`` and what splice adds (set by :func:`as_cutile_error`)
    context: str = ""

    def __init__(self, *args, **kwargs):   # made by as_cutile_error only
        raise TypeError("CuTileError is made by splice.errors.as_cutile_error(e, context)")

    def __str__(self) -> str:
        text = super(SpliceError, self).__str__()   # cuTile's class's own text
        return f"{text.rstrip()}\n{self.context}" if self.context else text


#: cuTile's exception class -> its CuTileError subclass (made once each)
_CUTILE_CLASSES: dict[type, type] = {}


def cutile_error_class(cls: type) -> type:
    """The class of :func:`as_cutile_error`'s errors for cuTile's exception class ``cls``:
    a subclass of both ``cls`` and :class:`CuTileError`, named as ``cls``.

    Args:
        cls (type): a subclass of ``cuda.tile.TileError``.

    Returns:
        type: the subclass (the same object for the same ``cls``).

    Raises:
        TypeError: ``cls`` is not a ``cuda.tile.TileError`` class.

    Example:
        >>> import cuda.tile as ct
        >>> from splice.errors import cutile_error_class
        >>> issubclass(cutile_error_class(ct.TileValueError), ct.TileValueError)
        True
    """
    if not (isinstance(cls, type) and issubclass(cls, TileError)):
        raise TypeError(f"not a cuda.tile.TileError class: {cls!r}")
    if issubclass(cls, CuTileError):
        return cls
    sub = _CUTILE_CLASSES.get(cls)
    if sub is None:
        sub = type(cls.__name__, (CuTileError, cls), {
            "__module__": __name__, "__qualname__": f"CuTileError.{cls.__name__}",
            "__doc__": f"cuTile's {cls.__name__} raised through splice (see CuTileError)."})
        _CUTILE_CLASSES[cls] = sub
    return sub


def as_cutile_error(e: TileError, context: str = "") -> TileError:
    """cuTile's error ``e`` as an instance of ``cutile_error_class(type(e))``: the same
    class for ``except`` (and a :class:`SpliceError`), the same ``.message``, ``.loc`` and
    attributes, ``context`` added as a last line of ``str()``.

    Args:
        e (cuda.tile.TileError): the error cuTile raised.
        context (str): what splice adds (the kernel's name and file:line, a hint).

    Returns:
        cuda.tile.TileError: the new error (raise it ``from e.__cause__``: cuTile prints a
        ``static_eval`` error's traceback from its cause).

    Raises:
        TypeError: ``e`` is not a ``cuda.tile.TileError``.

    Example:
        >>> import cuda.tile as ct
        >>> from splice.errors import as_cutile_error, SpliceError
        >>> err = as_cutile_error(ct.TileValueError("bad shape"), "in kernel 'k'")
        >>> isinstance(err, ct.TileValueError), isinstance(err, SpliceError), err.message
        (True, True, 'bad shape')
    """
    cls: Any = cutile_error_class(type(e))
    err = cls.__new__(cls)
    err.__dict__.update(e.__dict__)
    err.args = e.args
    err.log = getattr(e, "log", "")
    err.context = context
    return err


class _TileirasFailure(SpliceToolchainError):
    """tileiras failing: a SpliceToolchainError with the attributes of cuTile's
    ``InternalCompilerError`` (``compiler_flags``, ``compiler_version``)."""

    def __init__(self, message: str, log: str = "", *, flags: str = ""):
        Exception.__init__(self, message)   # (cuTile's __init__s take other arguments)
        self.loc = TileError("").loc      # cuTile's unknown location
        self.message = message
        self.log = log
        self.compiler_flags = flags
        self.compiler_version = None

    __str__ = SpliceError.__str__


class SpliceTileirasError(_TileirasFailure, TileCompilerExecutionError):
    """tileiras failed on a kernel's Tile IR: a ``SpliceToolchainError`` (``.log`` holds
    tileiras's output) that is also cuTile's ``TileCompilerExecutionError``, as cuTile
    raises when tileiras fails for a ``@ct.kernel``.

    Example:
        >>> import cuda.tile as ct
        >>> from splice.errors import SpliceTileirasError
        >>> issubclass(SpliceTileirasError, ct.TileCompilerExecutionError)
        True
    """


class SpliceTileirasTimeout(_TileirasFailure, TileCompilerTimeoutError):
    """tileiras exceeded the compile timeout (``CUDA_TILE_COMPILER_TIMEOUT_SEC``): a
    ``SpliceToolchainError`` that is also cuTile's ``TileCompilerTimeoutError``.

    Example:
        >>> import cuda.tile as ct
        >>> from splice.errors import SpliceTileirasTimeout
        >>> issubclass(SpliceTileirasTimeout, ct.TileCompilerTimeoutError)
        True
    """


class SpliceNotCachedError(SpliceError):
    """A kernel to build is not in the cache while ``SPLICE_COMPILE=never`` forbids
    compiling (a service or a CI job that must start from a pack, ``docs/guide/cache.md``).
    The message names the kernel, its architecture, the externs it calls and the commands
    that make and load a pack (``python -m splice cache export`` where it compiled,
    ``python -m splice cache import`` here). Nothing ran: no tileiras, NVRTC or ptxas.

    Example:
        >>> from splice.errors import SpliceNotCachedError, SpliceError
        >>> issubclass(SpliceNotCachedError, SpliceError)
        True
    """


class SplicePackError(SpliceError):
    """A pack (:func:`splice.import_pack`, ``python -m splice cache import``) is refused
    whole, nothing of it imported: built by another splice or toolchain (the message names
    both), not a pack, a member that is not a regular file or has a name splice does not
    write, an entry whose checksum fails, or more than the cache holds. Also raised when
    :func:`splice.export_pack` cannot write its file.

    Example:
        >>> from splice.errors import SplicePackError, SpliceError
        >>> issubclass(SplicePackError, SpliceError)
        True
    """


class SpliceUnsafePathError(SpliceError):
    """A directory or file splice would run, load or write is not safe on a shared machine:
    another user owns it or can write it, it is a link where splice writes, or it is not a
    regular file (a FIFO, a device) where splice reads. The message names the path, its
    owner and mode, and the fix (``docs/security.md``).

    Example:
        >>> from splice.errors import SpliceUnsafePathError, SpliceError
        >>> issubclass(SpliceUnsafePathError, SpliceError)
        True
    """
