"""splice's code identity is that of the code imported, not of the files on disk when the
first entry is stored: a session that imports splice, then has its files updated (a
``git pull``, a ``pip install -U`` in a long-running notebook) and only then compiles,
stored the old code's output under the new code's identity, and every fresh process of the
new code was served it."""

import shutil
import subprocess
import sys
from pathlib import Path

import splice

_EDIT_AFTER_IMPORT = """
import sys
sys.path.insert(0, sys.argv[1])
import splice
from splice.system import cache
assert splice.__file__.startswith(sys.argv[1])
with open(sys.argv[2], "a") as f:
    f.write("# edited after import\\n")
print(cache.code_identity())
"""

_IDENTITY = """
import sys
sys.path.insert(0, sys.argv[1])
from splice.system import cache
print(cache.code_identity())
"""


def test_identity_is_taken_at_import(tmp_path):
    copy = tmp_path / "pkg"
    shutil.copytree(Path(splice.__file__).parent, copy / "splice",
                    ignore=shutil.ignore_patterns("__pycache__"))

    def run(code, *args):
        out = subprocess.run([sys.executable, "-c", code, str(copy), *args],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    before = run(_IDENTITY)
    assert run(_EDIT_AFTER_IMPORT, str(copy / "splice" / "forms" / "rewrite.py")) == before
    assert run(_IDENTITY) != before


_EDIT_THEN_COMPILE = """
import sys
sys.path.insert(0, sys.argv[1])
import splice
assert "splice.forms.rewrite" not in sys.modules   # the rewriter is imported by a cache miss
with open(sys.argv[2], "a") as f:
    f.write("# edited after import\\n")
try:
    from splice.driver import stages   # what a cache miss imports
except splice.SpliceToolchainError as e:
    print("refused:", e)
"""


def test_a_module_changed_after_import_is_refused_when_first_loaded(tmp_path):
    # the pipeline is imported on first use; had its code changed since `import splice`,
    # the process would run code other than the one its cache entries are keyed by
    copy = tmp_path / "pkg"
    shutil.copytree(Path(splice.__file__).parent, copy / "splice",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-c", _EDIT_THEN_COMPILE, str(copy),
                          str(copy / "splice" / "forms" / "rewrite.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: splice/forms/rewrite.py changed on disk after this process imported splice" \
        in out.stdout
    assert "restart Python" in out.stdout


def test_an_unchanged_package_loads_lazily_even_when_touched(tmp_path):
    # a newer mtime with the same bytes (a checkout that rewrote the file) is not a change
    copy = tmp_path / "pkg"
    shutil.copytree(Path(splice.__file__).parent, copy / "splice",
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import os, sys\nsys.path.insert(0, sys.argv[1])\nimport splice\n"
            "p = os.path.join(sys.argv[1], 'splice', 'forms', 'rewrite.py')\n"
            "os.utime(p, ns=(os.stat(p).st_atime_ns, os.stat(p).st_mtime_ns + 10**9))\n"
            "from splice.driver import stages\n"
            "print(splice.build.__module__, 'splice.forms.rewrite' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["splice.driver.pipeline", "True"]
