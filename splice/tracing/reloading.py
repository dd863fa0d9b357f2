"""Externs re-declared after a kernel was first traced (a notebook cell run again).

cuTile freezes a kernel's globals the first time it traces the kernel's function (its
``get_function_hir`` is cached by function): a kernel traced again sees the objects its
global names held then. For a splice extern that would be stale code, so splice resolves
each extern call to the extern its name now holds (:func:`latest`): when the module that
declared the extern at top level now binds that name to another extern of the same name,
declared at top level in the same module -- the extern was declared again -- the call
compiles the new declaration. The trace, the content key (each site's extern), the cache,
``splice.compile``, ``inspect()``, ``export_kernel`` and a kernel's first launch of a new
signature all follow, since each traces the kernel anew; ``splice.jax`` builds a kernel it
keeps again once an extern was declared again (:func:`generation`).

``ct.launch`` does not trace a kernel object again for a signature it has launched (cuTile's
launcher caches the cubin in the kernel object, out of Python's reach), so re-declaring an
extern that a launched kernel reached warns (:class:`StaleKernelWarning`), naming the kernels
and the fix: ``kernel = kernel.replace_hints()`` (a new kernel object, traced anew), or run
the kernel's definition again. ``docs/guide/reloading.md`` says what is picked up when.
"""

from __future__ import annotations

import re
import sys
import threading
import warnings
import weakref
from pathlib import Path
from types import FrameType

from ..system import _cutile as cu

_SPLICE_DIR = str(Path(__file__).resolve().parents[1])   # the splice package


class StaleKernelWarning(UserWarning):
    """An extern was declared again while kernels launched with ``ct.launch`` still hold the
    previous declaration's code in cuTile's launch cache; re-create them
    (``kernel = kernel.replace_hints()``) to launch the new code.

    Example:
        >>> import warnings
        >>> from splice.tracing.reloading import StaleKernelWarning
        >>> issubclass(StaleKernelWarning, UserWarning)
        True
    """


def home_of(pyfunc) -> str | None:
    """The module an extern is declared in at top level (its stub ``pyfunc``, or None for
    ``splice.extern(name=..., signature=...)``: the first caller outside splice), or None
    where it is declared inside a function (a factory's externs are not re-declarations)."""
    if pyfunc is not None:
        qualname = getattr(pyfunc, "__qualname__", "")
        return None if "<locals>" in qualname else getattr(pyfunc, "__module__", None)
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_SPLICE_DIR):
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != "<module>":
        return None
    return frame.f_globals.get("__name__")


#: IPython's output history (``_``, ``__``, ``_12``): a displayed extern is not a binding
_OUTPUT_HISTORY = re.compile(r"_+\d*")


def _module_globals(home: str | None) -> dict | None:
    module = sys.modules.get(home) if home else None
    return vars(module) if module is not None else None


def _same_extern(value, home: str, name: str) -> bool:
    """Whether ``value`` is an extern of Python name ``name`` declared at top level in
    ``home``."""
    ext = getattr(value, "_splice_extern", None)
    return ext is not None and ext.name == name and getattr(value, "_splice_home", None) == home


def _redeclared(callee) -> object | None:
    """The extern that re-declared ``callee`` in its module, or None."""
    home = getattr(callee, "_splice_home", None)
    g = _module_globals(home)
    if g is None or home is None:
        return None
    if any(v is callee for n, v in list(g.items()) if not _OUTPUT_HISTORY.fullmatch(n)):
        return None          # still bound (maybe under another name): not re-declared
    name = callee._splice_extern.name
    bound = g.get(getattr(callee, "__name__", name))
    if _same_extern(bound, home, name):
        return bound
    others = [v for v in list(g.values()) if v is not callee and _same_extern(v, home, name)]
    return others[0] if len(others) == 1 else None


def latest(callee):
    """The extern a kernel's call of ``callee`` (the object cuTile froze in the kernel's
    globals) compiles: the declaration that now holds its name in its module, where it was
    declared again; else ``callee``.

    Args:
        callee: an extern (the object ``splice.extern`` returned).

    Returns:
        The extern to compile (``callee`` itself, or its re-declaration).

    Raises:
        Nothing.

    Example:
        >>> from splice.tracing.reloading import latest
        >>> latest(print) is print
        True
    """
    seen = {id(callee)}
    while (newer := _redeclared(callee)) is not None and id(newer) not in seen:
        seen.add(id(newer))
        callee = newer
    _note_reached(callee)
    return callee


# --------------------------------------------------------------------------------------------
# ct.launch: which launched kernels reached which extern


_launching = threading.local()


class launching:
    """Context manager: while ``kernel`` is compiled for ``ct.launch``
    (``SpliceKernel._compile``), each extern its trace reaches records it."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __enter__(self):
        self.outer = getattr(_launching, "kernel", None)
        _launching.kernel = self.kernel
        return self

    def __exit__(self, *exc):
        _launching.kernel = self.outer


def _note_reached(callee) -> None:
    kernel = getattr(_launching, "kernel", None)
    if kernel is None:
        return
    try:
        reached = callee.__dict__.setdefault("_splice_launched", weakref.WeakSet())
        reached.add(kernel)
    except (AttributeError, TypeError):
        pass


#: how many re-declarations this process has seen (:func:`generation`)
_generation = 0


def generation() -> int:
    """A number that changes whenever an extern is declared again: a cache of compiled
    kernels kept by kernel object (``splice.jax``'s) is stale when it changed since the
    entry was made.

    Returns:
        int: the count of re-declarations so far.

    Raises:
        Nothing.

    Example:
        >>> from splice.tracing.reloading import generation
        >>> generation() >= 0
        True
    """
    return _generation


def declared(new, pyfunc) -> None:
    """Called for each extern object as it is declared: set its home module and warn
    (:class:`StaleKernelWarning`) where it re-declares an extern that launched kernels
    reached, naming them and the fix."""
    new._splice_home = home_of(pyfunc)
    g = _module_globals(new._splice_home)
    if g is None:
        return
    name = new._splice_extern.name
    olds = [v for v in list(g.values()) if v is not new and _same_extern(v, new._splice_home, name)]
    if olds:
        global _generation
        _generation += 1
    for old in olds:
        kernels = sorted(cu.python_function(k).__name__
                         for k in getattr(old, "_splice_launched", ()))
        if kernels:
            warnings.warn(StaleKernelWarning(
                f"extern '{name}' declared again at {new._splice_extern.where} (it was "
                f"declared at {old._splice_extern.where}): kernel(s) {', '.join(kernels)} "
                f"were launched with ct.launch and keep the previous code in cuTile's launch "
                f"cache; make each anew to launch the new code: kernel = "
                f"kernel.replace_hints(), or run its definition again"), stacklevel=4)
