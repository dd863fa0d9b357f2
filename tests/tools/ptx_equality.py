"""Byte-equality harness: the spliced PTX of every kernel a test run builds, recorded, and two
records compared. For refactors that must not change what splice emits (issue 43).

What it records, keyed by the test's node id (a module or session fixture's builds go to the
first test that needs them):

- ``spliced``: the PTX ptxas assembles (the kernel with its fragments merged: the ``link``
  stage of :mod:`splice.driver.pipeline`), per kernel name, signature and architecture;
- ``cubin``: the SHA-256 of that build's cubin (the ``assemble`` stage);
- ``rewritten``: every output of the rewriter (``splice_calls``), called by the pipeline or
  directly: the PTX corpus (``tests/test_corpus.py``) and the PTX fuzzers
  (``tests/test_rewrite.py``, ``tests/test_fma_oracle.py``) call it on PTX alone.

It hooks the stage driver (``Job.run``, the seam ``$SPLICE_DUMP_DIR`` dumps through) and the
rewriter from outside, without ``$SPLICE_DUMP_DIR``: a dump directory makes every build keep
its stages, which changes what some tests check. Builds in child processes (the tests that
start a new Python) are not recorded, nor the GPU tests on a machine without one.

``record`` runs the suite on a copy of the checkout in a run directory, with the cache and
pytest's temporary directory under it; a second record ``--like`` the first runs in the same
directory (kept, empty, 0755 and this user's), so that the paths that reach the PTX
(``.file``, the comments naming a call site) and the cubin (its line table) are the same in
both runs, and texts and cubins compare byte for byte. The cache is new and empty (0700), so
every kernel is really built; Hypothesis runs at a fixed seed without its example database,
so the fuzzers draw the same cases in both runs, and Python's string hashes are fixed
(``PYTHONHASHSEED=0``). What still differs between two runs of one checkout: names a test
makes unique per run (``uuid4``, ``mkdtemp``: ``test_reloading.py``, the first-launch
benchmark's test), builds threads race for, and the line numbers of a test file whose lines
moved (its kernels' ``.loc`` and call-site comments): keep a changed test file's line count
where its kernels are::

    git worktree add /tmp/base 6de1406                 # the commit before the change
    python tests/tools/ptx_equality.py record /tmp/eq-before --checkout /tmp/base
    python tests/tools/ptx_equality.py record /tmp/eq-after --like /tmp/eq-before
    python tests/tools/ptx_equality.py compare /tmp/eq-before /tmp/eq-after

``record`` takes pytest's arguments after ``--`` (default: the whole suite, ``-q -p
no:cacheprovider``; ``SPLICE_SLOW_TESTS=1`` adds splice.cub's shape matrix) and returns
pytest's status; ``compare`` prints every key that differs (a unified diff of the PTX) or
is in one record only, then the counts, and exits 1 if any key differs. Use the project's
Python (``. /work/main/.venv/bin/activate``); a record is ``record.jsonl`` (one row per
artefact), ``texts/<sha256>`` and ``run-dir`` (where it ran).
"""

from __future__ import annotations

import argparse
import collections
import difflib
import hashlib
import importlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: Where the rewriter's ``splice_calls`` is, newest place first (a record of an older
#: checkout finds it where that checkout has it).
REWRITER = ("splice.forms.rewrite", "splice.rewrite")
#: The environment variable naming the record directory of a run (set by ``record``).
RECORD_ENV = "SPLICE_PTX_RECORD"
HERE = Path(__file__).resolve().parent

# --------------------------------------------------------------------------------------------
# the pytest plugin (``-p ptx_equality`` with $SPLICE_PTX_RECORD set)

_lock = threading.Lock()
_rows: list[dict] = []
_state = {"test": "<collection>"}


def _store(kind: str, key: dict, data: str | bytes) -> None:
    """One artefact: its row in the record, its text under ``texts/`` by content."""
    if isinstance(data, bytes):
        digest, text = hashlib.sha256(data).hexdigest(), None
    else:
        text = data
        digest = hashlib.sha256(text.encode()).hexdigest()
    with _lock:
        _rows.append({"test": _state["test"], "kind": kind, **key, "sha256": digest})
    if text is not None:
        path = Path(os.environ[RECORD_ENV]) / "texts" / digest
        if not path.exists():
            path.write_text(text)


def _wrap_stage_driver() -> None:
    from splice.driver import pipeline
    run = pipeline.Job.run

    def recorded_run(self, stage, fn, *args, **kwargs):
        out = run(self, stage, fn, *args, **kwargs)
        key = {"kernel": self.name, "signature": repr(self.signature),
               "arch": self.arch}
        if stage == "link":
            _store("spliced", key, out.text)
        elif stage == "assemble":
            _store("cubin", key, out)
        return out

    pipeline.Job.run = recorded_run


def _rewriter():
    """The module of the rewriter (the first of :data:`REWRITER` the checkout has)."""
    for name in REWRITER:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"no rewriter in {REWRITER}")


def _wrap_rewriter() -> None:
    mod = _rewriter()
    splice_calls = mod.splice_calls

    def recorded(module, calls, *args, **kwargs):
        report = splice_calls(module, calls, *args, **kwargs)
        key = {"kernel": str(kwargs.get("kernel_name", args[0] if args else "")),
               "signature": "", "arch": ""}
        _store("rewritten", key, report.ptx if report.refused is None else
               "refused: " + report.refused.message)
        return report

    mod.splice_calls = recorded


def pytest_configure(config):
    if not os.environ.get(RECORD_ENV):
        return
    (Path(os.environ[RECORD_ENV]) / "texts").mkdir(parents=True, exist_ok=True)
    _wrap_stage_driver()
    _wrap_rewriter()


def pytest_runtest_setup(item):
    _state["test"] = item.nodeid


def pytest_sessionfinish(session):
    if not os.environ.get(RECORD_ENV):
        return
    with open(Path(os.environ[RECORD_ENV]) / "record.jsonl", "w") as f:
        for row in _rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


if os.environ.get(RECORD_ENV):
    # the fuzzers draw the same cases in both runs: a fixed seed (``record`` passes
    # --hypothesis-seed) and no example database replaying an earlier run's failures
    from hypothesis import settings as _settings
    _settings.register_profile("ptx-equality", database=None)
    _settings.load_profile("ptx-equality")

# --------------------------------------------------------------------------------------------
# record and compare


def _run_dir(like: Path | None) -> Path:
    """Where a record runs: a new directory of an unpredictable name in the temporary
    directory, or (``like``) the one the earlier record ``like`` ran in, kept for this. Only
    this user may write it (the two-user tests of ``tests/test_shared_machine.py`` read the
    copy as other users, so it is 0755); refused if it is a link or another user's."""
    if like is None:
        path = Path(tempfile.mkdtemp(prefix="splice-ptx-equality-"))
    else:
        path = Path((like / "run-dir").read_text().strip())
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise SystemExit(f"{path} is not a directory of this user's that only it can "
                             f"write: record again without --like, and the earlier one too")
    path.chmod(0o755)
    _empty(path)
    return path


def _empty(path: Path) -> None:
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _copy_checkout(checkout: Path, to: Path) -> None:
    """The files of ``checkout`` git knows (tracked, or untracked and not ignored) to ``to``."""
    names = subprocess.run(["git", "-C", str(checkout), "ls-files", "-z", "--cached",
                            "--others", "--exclude-standard"], check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = checkout / name
        if src.is_file() and not src.is_symlink():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, to / name)


def record(out: Path, checkout: Path, like: Path | None, pytest_args: list[str]) -> int:
    """Run pytest on a copy of ``checkout`` in a run directory (the same for both records,
    ``like``: so that the paths in the PTX and the cubin are the same), with an empty
    cache directory and pytest's temporary directory there too, recording into ``out`` (a
    new directory)."""
    out.mkdir(mode=0o700, parents=True)
    at = _run_dir(like)
    (out / "run-dir").write_text(f"{at}\n")
    _copy_checkout(checkout, at / "checkout")
    (at / "cache").mkdir(mode=0o700)
    paths = [str(HERE), str(at / "checkout")] + ([os.environ["PYTHONPATH"]]
                                                 if os.environ.get("PYTHONPATH") else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), SPLICE_CACHE_DIR=str(at / "cache"),
               **{RECORD_ENV: str(out.resolve())})
    env.setdefault("PYTHONHASHSEED", "0")   # tests that name externs by hash() name them alike
    env.pop("SPLICE_DUMP_DIR", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "ptx_equality", "--hypothesis-seed=0",
           f"--basetemp={at / 'tmp'}",
           *(pytest_args or ["-q", "-p", "no:cacheprovider"])]
    try:
        return subprocess.run(cmd, cwd=at / "checkout", env=env).returncode
    finally:
        _empty(at)      # kept, empty, for a record --like this one


def _load(d: Path) -> dict[tuple, list[str]]:
    """{(test, kind, kernel, signature, arch): the sorted digests recorded under it}: sorted,
    as a test that builds in threads may build in another order."""
    out: dict[tuple, list[str]] = collections.defaultdict(list)
    for line in (d / "record.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[(r["test"], r["kind"], r["kernel"], r["signature"], r["arch"])].append(r["sha256"])
    return {k: sorted(v) for k, v in out.items()}


def _text(d: Path, digest: str) -> list[str]:
    p = d / "texts" / digest
    return p.read_text().splitlines(keepends=True) if p.exists() else [f"<{digest}>\n"]


def compare(a: Path, b: Path) -> int:
    """Print every difference between records ``a`` and ``b``; 0 if there is none."""
    ra, rb = _load(a), _load(b)
    differ = 0
    for key in sorted(set(ra) | set(rb)):
        da, db = ra.get(key), rb.get(key)
        if da == db:
            continue
        differ += 1
        print(f"DIFFERS {' | '.join(key)}: {len(da or ())} vs {len(db or ())} artefact(s)")
        for x, y in zip(da or (), db or ()):
            if x != y:
                sys.stdout.writelines(difflib.unified_diff(
                    _text(a, x), _text(b, y), str(a), str(b), n=2))
    equal: collections.Counter[str] = collections.Counter()
    for k, v in ra.items():
        if rb.get(k) == v:
            equal[k[1]] += len(v)
    print(f"{len(ra)} keys in {a}, {len(rb)} in {b}; {differ} differ; artefacts equal: "
          + ", ".join(f"{n} {kind}" for kind, n in sorted(equal.items())))
    return 1 if differ else 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="run pytest with the recorder")
    r.add_argument("out", type=Path)
    r.add_argument("--checkout", type=Path, default=HERE.parent.parent,
                   help="the checkout to test (default: this one)")
    r.add_argument("--like", type=Path,
                   help="an earlier record: run where it ran (the paths must be the same)")
    c = sub.add_parser("compare", help="compare two records")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    a = p.parse_args(argv[:len(argv) - len(rest) - (1 if rest or "--" in argv else 0)])
    if a.cmd == "record":
        return record(a.out, a.checkout.resolve(), a.like, rest)
    return compare(a.a, a.b)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
