"""The progress line of long work (splice.system.progress): shown on a terminal after a
second, rewritten in place and erased; never where no one watches (a pipe, a log, a
configured logger, SPLICE_PROGRESS=0), never on a cache hit, one line at a time."""

import io
import logging
import threading
import time

import cuda.tile as ct
import pytest

import splice
from splice.system import progress
from support import kernels as K


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self):
        return True


@pytest.fixture
def quick(monkeypatch):
    """A line after 10 ms, rewritten every 5 ms, on a terminal; logging taken as not
    configured (pytest's log capture puts handlers on the root logger in each phase)."""
    monkeypatch.setattr(progress, "DELAY", 0.01)
    monkeypatch.setattr(progress, "INTERVAL", 0.005)
    monkeypatch.delenv("SPLICE_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "_logging_configured", lambda: False)
    return Terminal()


def _run(stream, seconds: float, **kw) -> str:
    with progress.task("compiling kernel 'k'", stream=stream, **kw) as t:
        t.detail = "lower"
        time.sleep(seconds)
    return stream.getvalue()


def test_the_line_is_shown_rewritten_and_erased(quick):
    out = _run(quick, 0.1, total=3)
    assert "\rsplice: compiling kernel 'k': 0/3: lower, 0." in out
    assert out.count("\r") >= 3 and out.endswith("\r")
    assert out.rsplit("\r", 2)[-2].strip() == ""            # erased at the end


def test_a_task_that_ends_before_the_delay_shows_nothing(quick, monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 5.0)
    assert _run(quick, 0.0) == ""


@pytest.mark.parametrize("why", ["not a terminal", "SPLICE_PROGRESS=0",
                                 "a handler on the root logger",
                                 "a handler on the splice logger"])
def test_nothing_where_no_one_watches(quick, monkeypatch, why):
    stream = quick
    if why == "not a terminal":
        stream = io.StringIO()
    elif why == "SPLICE_PROGRESS=0":
        monkeypatch.setenv("SPLICE_PROGRESS", "0")
    else:
        monkeypatch.undo()                                  # the real check
        monkeypatch.setattr(progress, "DELAY", 0.01)
        name = None if "root" in why else "splice"
        monkeypatch.setattr(logging.getLogger(name), "handlers", [logging.NullHandler()])
        if name is None:
            monkeypatch.setattr(logging.getLogger("splice"), "handlers", [])
    assert _run(stream, 0.05) == ""


def test_one_line_at_a_time(quick):
    """A task started while another shows (a build inside a warm-up, a second thread's
    build) writes nothing of its own."""
    other = Terminal()
    inner_started = threading.Event()

    def second():
        with progress.task("another", stream=other):
            inner_started.set()
            time.sleep(0.05)

    with progress.task("first", stream=quick):
        th = threading.Thread(target=second)
        th.start()
        inner_started.wait()
        th.join()
    assert other.getvalue() == "" and "first" in quick.getvalue()


@splice.kernel
def doubled(x, y, TILE: ct.Constant[int]):
    ct.store(y, index=(ct.bid(0),), tile=ct.load(x, index=(ct.bid(0),), shape=(TILE,)) * 2)


def test_a_compile_shows_its_stage_and_a_hit_starts_no_task(quick, monkeypatch, fresh_cache):
    monkeypatch.setattr("sys.stderr", quick)
    started = []
    real = progress.task

    def task(what, *a, **k):
        started.append(what)
        return real(what, *a, **k)
    monkeypatch.setattr(progress, "task", task)
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), 128)
    assert not splice.compile(doubled, sig, "sm_90").from_cache
    assert len(started) == 1 and started[0].startswith("compiling kernel 'doubled' (")
    assert started[0].endswith(" for sm_90")
    shown = quick.getvalue()
    assert "splice: compiling kernel 'doubled'" in shown
    assert "lower (tileiras" in shown or "assemble (ptxas)" in shown or "splice, " in shown
    assert splice.compile(doubled, sig, "sm_90").from_cache
    assert len(started) == 1                          # the hit started none
