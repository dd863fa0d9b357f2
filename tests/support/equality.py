"""The byte-equality harness for refactors that must not change what splice emits (issue 32).

A pytest plugin, not a test: load it with ``-p support.equality`` and give it a directory in
``$SPLICE_EQUALITY_DIR``. Every call of the PTX rewriter (``splice_calls``) and of the
fragment merger (``link.insert``) that the selected tests make, on the corpus, the example
kernels, the test kernels and the fuzzers' cases, has its output (the rewritten PTX, the
sites it refused, or the error it raised) written there, one file per call, named by test
and call number. Run it before and after a change and diff the two directories::

    SPLICE_EQUALITY_DIR=/tmp/before PYTHONHASHSEED=0 PYTHONPATH=$PWD:$PWD/tests \\
        python -m pytest -q -p support.equality -p no:cacheprovider --hypothesis-seed=0 \\
        tests/test_corpus.py tests/test_block_scope.py ...
    diff -r /tmp/before /tmp/after

Run both from a checkout at the same path: the PTX names the kernels' source files (and a
fragment's tag hashes its text). The tests' cache starts empty (tests/conftest.py), so each
run splices the same builds; ``PYTHONHASHSEED`` and the hypothesis seed make the fuzzers'
cases (and a test that names a function by ``hash()``) the same in both runs.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from pathlib import Path

import pytest

_OUT = Path(os.environ.get("SPLICE_EQUALITY_DIR", "")) if os.environ.get(
    "SPLICE_EQUALITY_DIR") else None
_state = {"test": "collect", "n": 0}

# where the rewriter and the merger live (the first that exists): a refactor may move them
_REWRITERS = ("splice.forms.rewrite", "splice.forms.rewrite")
_LINKERS = ("splice.ptxtools.link", "splice.link")


def _module(names: tuple[str, ...], attr: str):
    for name in names:
        try:
            mod = importlib.import_module(name)
        except Exception:   # not there (splice refuses a module of another copy)
            continue
        if hasattr(mod, attr):
            return mod
    raise ImportError(f"none of {names} defines {attr}")


def _write(kind: str, text: str) -> None:
    assert _OUT is not None
    _state["n"] += 1
    name = re.sub(r"[^\w.\-\[\]]+", "_", _state["test"])[:180]
    path = _OUT / f"{name}.{_state['n']:03d}.{kind}"
    path.write_text(text)


def _recording(kind: str, fn, render):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            out = fn(*args, **kwargs)
        except Exception as e:
            _write(kind + ".error", f"{type(e).__name__}: {e}\n")
            raise
        _write(kind, render(out))
        return out
    return wrapper


def _render_report(r) -> str:
    if r.refused is not None:
        return f"REFUSED {r.refused!r}\n"
    spans = "".join(f"{s!r}\n" for s in r.spans)
    return f"found {dict(sorted(r.found.items()))} replaced {dict(sorted(r.replaced.items()))}" \
           f"\n{spans}---\n{r.ptx}"


def pytest_configure(config):
    if _OUT is None:
        return
    _OUT.mkdir(parents=True, exist_ok=True)
    rw = _module(_REWRITERS, "splice_calls")
    rw.splice_calls = _recording("rewritten.ptx", rw.splice_calls, _render_report)
    ln = _module(_LINKERS, "insert")
    ln.insert = _recording("spliced.ptx", ln.insert, lambda m: m.text)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _state["test"], _state["n"] = item.nodeid.removeprefix("tests/"), 0
