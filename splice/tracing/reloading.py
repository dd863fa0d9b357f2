"""What a kernel compiles after code changed (a notebook cell run again): Python's rule.

A kernel compiles what its global names hold when it is compiled. cuTile keeps, for the
process, the values a function's global names held when it first read the function; in a
trace by splice, every global name the traced code loads (the kernel's, its helpers',
their closures' and builtins, as Python looks a name up) is read again at that moment
(:func:`splice.system._cutile.lower_to_bytecode`), so ``splice.compile``, ``inspect()``,
``export_kernel``, ``replace_hints()``, a new signature's ``ct.launch``, the cache key
(each site's extern) and ``splice.jax`` (:func:`recording`, :func:`still_bound`) all
compile what the names hold now: an extern declared again, an alias bound to another
extern, a helper function defined again, a constant changed.

The one exception: ``ct.launch`` does not call into Python for a signature a kernel object
has launched (cuTile's launcher keeps that cubin in the kernel object), so a declaration of
an extern of the same name as one a launched kernel reached warns
(:class:`StaleKernelWarning`), naming the kernels and the fix:
``kernel = kernel.replace_hints()`` (a new kernel object, traced anew), or run the
kernel's definition again. ``docs/guide/reloading.md`` says it for users.
"""

from __future__ import annotations

import contextlib
import dataclasses
import dis
import sys
import threading
import types
import warnings
import weakref
from pathlib import Path

from ..errors import user_frame
from ..system import _cutile as cu

_SPLICE_DIR = str(Path(__file__).resolve().parents[1])   # the splice package


class StaleKernelWarning(UserWarning):
    """An extern was declared with the name of one that kernels launched with ``ct.launch``
    reached: they keep the code they were launched with in cuTile's launch cache; make them
    anew (``kernel = kernel.replace_hints()``) to launch the new code.

    Example:
        >>> import warnings
        >>> from splice.tracing.reloading import StaleKernelWarning
        >>> issubclass(StaleKernelWarning, UserWarning)
        True
    """


_local = threading.local()


@contextlib.contextmanager
def recording():
    """Context manager: the global names every trace on this thread reads inside it
    (:class:`splice.system._cutile.Read`), collected in the list it yields.

    Yields:
        list: the reads, in trace order.

    Raises:
        Nothing.

    Example:
        >>> from splice.tracing.reloading import recording
        >>> with recording() as reads:
        ...     pass
        >>> reads
        []
    """
    reads: list = []
    outer = getattr(_local, "reads", None)
    _local.reads = reads
    try:
        yield reads
    finally:
        _local.reads = outer
        if outer is not None:
            outer.extend(reads)


def read(reads) -> None:
    """Called with what a trace read (:func:`splice.tracing.trace.trace_kernel`)."""
    collected = getattr(_local, "reads", None)
    if collected is not None:
        collected.extend(reads)
    record = _launch_record()
    if record is not None:
        record.reads.extend(reads)


def still_bound(reads) -> bool:
    """Whether every name in ``reads`` still holds the value a trace read: a kernel built
    from them is what compiling it again would give.

    Args:
        reads: what :func:`recording` collected.

    Returns:
        bool: True when no name was bound to another object since.

    Raises:
        Nothing.

    Example:
        >>> from splice.tracing.reloading import still_bound
        >>> still_bound([])
        True
    """
    return all(r.holds() for r in reads)


# --------------------------------------------------------------------------------------------
# ct.launch: what launched kernels read, and the declarations that rebind it


@dataclasses.dataclass
class _Launched:
    """What the traces of one kernel object compiled for ``ct.launch`` read."""

    reads: list = dataclasses.field(default_factory=list)
    externs: list = dataclasses.field(default_factory=list)   # every extern a call reached


#: every kernel object compiled for ct.launch (by ``SpliceKernel._compile``)
_launched: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_launched_lock = threading.Lock()


class launching:
    """Context manager: while ``kernel`` is compiled for ``ct.launch``
    (``SpliceKernel._compile``), what its traces read and the externs they reach are kept
    for :func:`declared`."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __enter__(self):
        self.outer = getattr(_local, "kernel", None)
        _local.kernel = self.kernel
        return self

    def __exit__(self, *exc):
        _local.kernel = self.outer


def _launch_record() -> _Launched | None:
    kernel = getattr(_local, "kernel", None)
    if kernel is None:
        return None
    with _launched_lock:
        return _launched.setdefault(kernel, _Launched())


def reached(callee) -> None:
    """Called for each extern call a trace compiles."""
    record = _launch_record()
    if record is not None:
        record.externs.append(callee)


def declared(new) -> None:
    """Called for each extern object as it is declared: where the statement declaring it
    binds it (Python's store that takes the call's result: a name, a closure cell, an
    attribute; :func:`_binding`) where a kernel launched with ``ct.launch`` read a name or
    reached an attribute, warn (:class:`StaleKernelWarning`), naming the kernels and the
    fix. A declaration whose store cannot be read from the code (stacked decorators) warns
    for the launched kernels that reached an extern of its name."""
    if not _launched:
        return
    target = _binding(user_frame())
    name = new._splice_extern.name
    with _launched_lock:
        kernels = sorted({cu.python_function(k).__name__ for k, record in _launched.items()
                          if _rebinds(target, record, name)})
    if kernels:
        warnings.warn(StaleKernelWarning(
            f"extern '{name}' declared at {new._splice_extern.where} rebinds what kernel(s) "
            f"{', '.join(kernels)}, launched with ct.launch, compiled: each keeps the code it "
            f"was launched with in cuTile's launch cache; make each anew to launch what its "
            f"names hold now: kernel = kernel.replace_hints(), or run its definition again"),
            stacklevel=_user_level())


def _rebinds(target, record: _Launched, name: str) -> bool:
    """Whether the store ``target`` (:func:`_binding`) replaces something ``record`` read."""
    if target is None:
        return any(x._splice_extern.name == name for x in record.externs)
    kind, where, bound = target
    if kind == "attr":
        if any(getattr(where, bound, None) is x for x in record.externs):
            return True
        if not isinstance(where, types.ModuleType):
            return False
        kind, where = "name", vars(where)
    if kind == "name":
        return any(r.name == bound and r.function.__globals__ is where
                   and bound not in r.function.__code__.co_freevars for r in record.reads)
    return kind == "cell" and any(     # a cell: ``where`` is the value it holds until stored
        r.name == bound and bound in r.function.__code__.co_freevars and r.value is where
        for r in record.reads)


#: the stores that bind a name: (kind, the namespace they store into)
_NAME_STORES = {"STORE_NAME": "locals", "STORE_GLOBAL": "globals", "STORE_DEREF": "cell",
                "STORE_FAST": "local"}


def _binding(frame):
    """Where the statement running in ``frame`` stores the result of the call it is in
    (through the callers a ``return`` hands it to):
    ("name", namespace dict, name), ("cell", its value now, name), ("attr", object, name),
    ("local", None, name) (a function's own variable, which no kernel reads), or None (a
    store not made right after the call: another decorator, a tuple)."""
    after = _after_call(frame)
    while after and after[0].opname == "RETURN_VALUE":   # the caller stores it
        frame = frame.f_back
        if frame is None or frame.f_code.co_filename.startswith(_SPLICE_DIR):
            return None
        after = _after_call(frame)
    if after and after[0].opname in _NAME_STORES:
        store = _NAME_STORES[after[0].opname]
        name = after[0].argval
        if store in ("cell", "local"):
            return store, frame.f_locals.get(name), name
        return "name", frame.f_locals if store == "locals" else frame.f_globals, name
    chain: list[str] = []
    for ins in after:
        if ins.opname == "STORE_ATTR" and chain:
            obj = _load(frame, chain[0])
            for attr in chain[1:]:
                obj = getattr(obj, attr, None)
            return "attr", obj, ins.argval
        if not (ins.opname in ("LOAD_NAME", "LOAD_GLOBAL", "LOAD_FAST", "LOAD_DEREF")
                and not chain or ins.opname == "LOAD_ATTR" and chain):
            return None
        chain.append(ins.argval)
    return None


def _after_call(frame) -> list:
    """The instructions of ``frame`` after the call it is in (a few)."""
    if frame is None:
        return []
    return [i for i in dis.get_instructions(frame.f_code) if i.offset > frame.f_lasti][:8]


def _load(frame, name: str):
    """What ``name`` holds in ``frame`` (locals, globals, builtins)."""
    for namespace in (frame.f_locals, frame.f_globals, frame.f_builtins):
        if name in namespace:
            return namespace[name]
    return None


def _user_level() -> int:
    """The ``stacklevel`` of the user's code that called into splice (for warnings)."""
    level, frame = 2, sys._getframe(2)   # type: int, types.FrameType | None
    while frame is not None and frame.f_code.co_filename.startswith(_SPLICE_DIR):
        level, frame = level + 1, frame.f_back
    return level
