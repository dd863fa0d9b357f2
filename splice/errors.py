"""splice's exception types.

Every error splice raises is a :class:`SpliceError`. Each names what the user wrote (the
extern, its declaration's file:line, the kernel and the call site's file:line where known) and
carries the log of the tool that failed (NVRTC, nvJitLink, tileiras, ptxas) in ``.log``.

Errors found while cuTile traces a kernel (wrong arity, wrong dtypes) are also cuTile
``TileTypeError``\\ s, so cuTile prints the call site with its source line and the chain of
helper functions that led to it.
"""

from __future__ import annotations

from cuda.tile import TileTypeError


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


class SpliceToolchainError(SpliceError):
    """A compiler tool is missing or failed (tileiras, ptxas, libnvvm, NVRTC, nvJitLink).
    ``.log`` holds its output."""


class SpliceLaunchError(SpliceError):
    """A built kernel cannot be loaded or launched in this process as it stands (e.g. its
    externs call NVSHMEM and NVSHMEM is not initialised)."""


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
