"""A progress line on the terminal for work that takes a while: a compile (a ``splice.cub``
call's first compiles CUB), a warm-up, a pack's export or import.

A task shows nothing for its first :data:`DELAY` seconds (most compiles end before); then
one line on stderr, rewritten in place every :data:`INTERVAL` seconds by a daemon thread
(``splice: compiling kernel 'f' (k.py:12) for sm_90: lower, 1.4 s``), erased when the task
ends. Only where someone watches: stderr is a terminal, ``SPLICE_PROGRESS`` is not ``0``,
and logging is not configured (a handler on the ``splice`` logger or the root: a logged
run reads splice's INFO lines instead). One line at a time: a task started while another
shows (a build inside a warm-up, a second thread's build) only updates its own state.

What a task costs where nothing is shown (a pipe, a log, a test): one ``isatty`` when it
starts. A cache hit starts none.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time

from . import settings

#: Seconds before a task's line appears.
DELAY = 1.0
#: Seconds between two updates of the line.
INTERVAL = 0.2

_showing = threading.Lock()   # held by the task whose line is on the terminal


def wanted(stream=None) -> bool:
    """Whether a progress line would be shown on ``stream`` (default stderr) now."""
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream is not None and stream.isatty()
    except (AttributeError, ValueError):   # no isatty, or closed
        tty = False
    return tty and settings.progress() and not _logging_configured()


def _logging_configured() -> bool:
    """Whether splice's log records reach a handler (on the ``splice`` logger or above)."""
    return logging.getLogger("splice").hasHandlers()


class Task:
    """The state a task's line shows: ``what``, then ``detail`` (a stage, an item) and,
    with a ``total``, ``done/total``. Setting them is an attribute assignment."""

    def __init__(self, what: str, total: int | None = None) -> None:
        self.what = what
        self.total = total
        self.done = 0
        self.detail = ""
        self.started = time.monotonic()

    def line(self) -> str:
        """The line as shown (without the carriage return)."""
        parts = [f"splice: {self.what}"]
        if self.total:
            parts.append(f"{self.done}/{self.total}")
        if self.detail:
            parts.append(self.detail)
        return f"{': '.join(parts)}, {time.monotonic() - self.started:.1f} s"


@contextlib.contextmanager
def task(what: str, total: int | None = None, stream=None):
    """A :class:`Task` whose line is shown on ``stream`` (default stderr) while it runs,
    after :data:`DELAY` seconds, when :func:`wanted`.

    Args:
        what (str): what is done ("compiling kernel 'f' (k.py:12) for sm_90").
        total (int | None): the number of items, when it counts them.
        stream: where the line goes (default ``sys.stderr``).

    Yields:
        Task: set its ``detail`` and ``done`` as the work goes on.
    """
    t = Task(what, total)
    stream = sys.stderr if stream is None else stream
    if not wanted(stream) or not _showing.acquire(blocking=False):
        yield t
        return
    stop = threading.Event()
    shown = threading.Thread(target=_show, args=(t, stream, stop), daemon=True,
                             name="splice-progress")
    shown.start()
    try:
        yield t
    finally:
        stop.set()
        shown.join()
        _showing.release()


def _show(t: Task, stream, stop: threading.Event) -> None:
    """The line of ``t``, rewritten until ``stop``; erased then, if it was shown."""
    if stop.wait(DELAY):
        return
    width = 0
    try:
        while True:
            text = t.line()[:200]
            stream.write("\r" + text.ljust(width))
            stream.flush()
            width = len(text)
            if stop.wait(INTERVAL):
                break
        stream.write("\r" + " " * width + "\r")
        stream.flush()
    except (OSError, ValueError):   # the terminal went away (closed, a broken pipe)
        pass
