"""Module-level locks that a forked child gets free.

splice compiles in threads (fragments while tileiras runs, a user's own threads), and a
process may fork meanwhile (a ``multiprocessing`` pool, a fork server): a lock another
thread held at that moment stays held in the child, by a thread the child does not have,
and the child's first compile blocks for ever. Each module's lock is made by
:func:`lock`, which replaces it with a free one in a forked child
(:func:`os.register_at_fork`). What the locks guard are caches a thread updates in one
step; NVRTC's and nvJitLink's own locks are waited for before a fork instead
(:mod:`splice.system.cuda_libs`). It imports nothing of splice.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable


def lock(namespace: dict[str, Any], name: str,
         factory: Callable[[], Any] = threading.Lock) -> Any:
    """A new lock, set as ``namespace[name]`` now and again, new, in every forked child.

    Args:
        namespace: the module's ``globals()``.
        name: the global the lock is kept in (code takes it by that name at each use).
        factory: ``threading.Lock`` or ``threading.RLock``.

    Returns:
        The lock.

    Example:
        >>> _lock = lock(globals(), "_lock")
        >>> with _lock:
        ...     pass
    """
    namespace[name] = factory()
    os.register_at_fork(after_in_child=lambda: namespace.__setitem__(name, factory()))
    return namespace[name]
