"""Attacks on issue 11's first-launch changes (lazy public names, the capturing ptxas script,
the one-match tokenizer) that found bugs or pin what held up."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import fuzz
import splice
from splice import pipeline, toolchain
from splice.errors import SpliceToolchainError
from splice.ptx import PTXSyntaxError, tokenize

ROOT = Path(splice.__file__).resolve().parent.parent

USER_SCRIPT = '''\
import cuda.tile as ct
import splice
from splice import extern, kernel


@splice.extern(source='extern "C" __device__ float f(float x) { return x; }')
def f(x: ct.float32) -> ct.float32: ...


@kernel
def k(x, y, TILE: ct.Constant[int]):
    ct.store(y, index=(ct.bid(0),), tile=f(ct.load(x, index=(ct.bid(0),), shape=(TILE,))))


@splice.kernel(occupancy=2)   # ct.kernel's decorator-with-options form
def k2(x, TILE: ct.Constant[int]):
    pass


g = extern(source="", name="g", signature="float32(float32)")
h = splice.asm("add.f32 %0, %1, %2;", "float32(float32, float32)")
root = splice.toolchain.overlay()
n: int = len(splice.ELEMENT_TYPES)
b: splice.Build = splice.build(k, None, "sm_90")
v: str = splice.__version__
splice.kernal(k)
'''


def test_mypy_flags_a_misspelt_splice_name(tmp_path):
    # splice.__getattr__ (the lazily loaded names) is hidden from type checkers: a module
    # __getattr__ makes every attribute of the module valid (typed Any) to mypy; and
    # @splice.kernel(occupancy=2) type-checks as @ct.kernel(occupancy=2) does
    pytest.importorskip("mypy")
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--config-file",
         str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"), str(script)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env=dict(os.environ, MYPYPATH=str(ROOT)))
    errors = [line for line in r.stdout.splitlines() if line.startswith("user.py:")]
    typo = USER_SCRIPT.splitlines().index("splice.kernal(k)") + 1
    assert [e.split(":")[1] for e in errors] == [str(typo)], r.stdout
    assert 'no attribute "kernal"' in errors[0]


def _capture_script(tmp_path: Path) -> Path:
    script = tmp_path / "ptxas"
    script.write_text(toolchain._CAPTURE_SCRIPT.format(real_ptxas="/bin/false"))
    script.chmod(0o755)
    return script


def test_capturing_ptxas_copies_when_ln_links_only_the_first_input(tmp_path):
    # `ln -f ptx host dir/` links the PTX, then fails on the host object (another
    # filesystem): cp then met the PTX's new link ("are the same file") and the script
    # exited 99, failing every compile
    script = _capture_script(tmp_path)
    bin_dir, tmp, cap = tmp_path / "bin", tmp_path / "tmp", tmp_path / "cap"
    for d in (bin_dir, tmp, cap):
        d.mkdir()
    real_ln = subprocess.run(["sh", "-c", "command -v ln"], capture_output=True,
                             text=True).stdout.strip()
    fake_ln = bin_dir / "ln"   # ln -f -- PTX HOST DIR/: links PTX, fails on HOST
    fake_ln.write_text(f'#!/bin/sh\n{real_ln} -f -- "$3" "$5" && exit 1\n')
    fake_ln.chmod(0o755)
    (tmp / "k-1.ptx").write_text(".version 8.0\n")
    (tmp / "tileir-1.o").write_bytes(b"\x7fELF\0host")
    argv = [str(script), str(tmp / "k-1.ptx"), "-o", str(tmp / "k.bin"),
            f"--nv-host={tmp / 'tileir-1.o'}"]
    env = {"SPLICE_CAPTURE_DIR": str(cap),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (cap / "k-1.ptx").read_text() == ".version 8.0\n"
    assert (cap / "tileir-1.o").read_bytes() == b"\x7fELF\0host"


def test_a_newline_in_the_temporary_directory_is_refused_clearly(tmp_path, monkeypatch):
    # the capture's argv file holds one argument a line: with a newline in TMPDIR the
    # --nv-host path was cut and the error said the host object "was not kept"
    toolchain.overlay()
    odd = tmp_path / "a\nb"
    odd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(odd))
    with pytest.raises(SpliceToolchainError, match="newline in its path; set TMPDIR"):
        toolchain.run_tileiras(b"", (), timeout=60, what="kernel 'k'")


def test_a_cache_hit_has_the_fields_of_the_build_it_cached(tmp_path, monkeypatch):
    # a hit said host_object_size 0 and no ptxas flags for a TMA kernel whose compile had
    # both; every field but the timings and the stages (kept by no cached build) agree
    import cuda.tile as ct
    from support import kernels as K
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    sig = K.signature(K.array(ct.float16, 2), K.array(ct.float16, 2), K.array(ct.float16, 2),
                      128, 128, 64)
    fresh, hit = (pipeline.build(K.matmul_gelu_kernel, sig, "sm_90") for _ in range(2))
    assert (fresh.from_cache, hit.from_cache) == (False, True)
    assert fresh.host_object_size > 0
    skip = {"from_cache", "seconds", "timings"}
    for f in dataclasses.fields(fresh):
        if f.name not in skip:
            assert getattr(hit, f.name) == getattr(fresh, f.name), f.name


_MIXED = r"""
import importlib.machinery, os, sys
sys.path.insert(0, sys.argv[1])
import splice


class Editable:   # as setuptools' editable-install finder: splice.* from another checkout
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("splice."):
            return importlib.machinery.PathFinder.find_spec(fullname, [sys.argv[2]], target)


sys.meta_path.append(Editable())
os.remove(os.path.join(sys.argv[1], "splice", "externs.py"))
for name in ("splice.stages", "splice.externs", "splice.no_such_module"):
    try:
        __import__(name)
        print(name, "loaded from", sys.modules[name].__file__)
    except splice.SpliceToolchainError as e:
        print(name, "refused:", e)
    except ModuleNotFoundError as e:
        print(name, "not found:", e)
"""


def test_a_submodule_is_never_loaded_from_another_copy_of_splice(tmp_path):
    # with splice loaded on first use, a module missing from the imported copy (removed by
    # an upgrade, or absent from this checkout) was found by a later finder -- an editable
    # install of another checkout -- and its code ran mixed with this copy's
    copy = tmp_path / "pkg"
    shutil.copytree(Path(splice.__file__).parent, copy / "splice",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "splice" / "stages.py").unlink()          # not in this copy from the start
    out = subprocess.run([sys.executable, "-c", _MIXED, str(copy),
                          str(Path(splice.__file__).parent)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    stages, externs, missing = out.stdout.splitlines()
    assert stages.startswith("splice.stages refused: splice.stages is not part of the splice")
    assert "another copy of splice" in stages
    assert externs.startswith("splice.externs refused: splice/externs.py changed on disk")
    assert missing.startswith("splice.no_such_module not found")


# --------------------------------------------------------------------------------------------
# The tokenizer against the one before issue 11 (one match for the whitespace, one for the
# token): same tokens, same errors, on PTX-like text.

_OLD_TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<badcomment>/\*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<directive>\.[A-Za-z_][A-Za-z0-9_$:]*)
  | (?P<reg>%[A-Za-z_$][A-Za-z0-9_$]*(?:\.[xyzw])?)
  | (?P<number>0[fFdD][0-9a-fA-F]+|0[xX][0-9a-fA-F]+U?|[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+(?:[eE][+-]?[0-9]+)?U?)
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z0-9_:]+)*)
  | (?P<punct>::|[;:,{}()\[\]<>@!+\-*/=|&^~?])
""", re.VERBOSE | re.DOTALL)


def _old_tokenize(text: str, pos: int) -> list:
    out: list = []
    while pos < len(text):
        m = _OLD_TOKEN_RE.match(text, pos)
        if m is None:
            if text.startswith("/*", pos):
                raise PTXSyntaxError(f"unterminated /* comment at {_lc(text, pos)}")
            if text[pos] == '"':
                raise PTXSyntaxError(f"unterminated string at {_lc(text, pos)}")
            raise PTXSyntaxError(f"unexpected character {text[pos]!r} at {_lc(text, pos)}")
        kind = m.lastgroup or ""
        if kind == "badcomment":
            raise PTXSyntaxError(f"unterminated /* comment at {_lc(text, pos)}")
        if kind == "nl" or (kind == "bcomment" and "\n" in m.group()):
            out.append("\n")
        elif kind not in ("ws", "lcomment", "bcomment"):
            out.append((kind, m.group(), m.start(), m.end()))
        pos = m.end()
    return out


def _lc(text: str, pos: int) -> str:
    return f"line {text.count(chr(10), 0, pos) + 1}, column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def _outcome(fn):
    try:
        return [t if isinstance(t, str) else tuple(t) for t in fn()], None
    except PTXSyntaxError as e:
        return None, str(e)


_PIECES = [" ", "\t", "\r", "\f", "\v", "\n", "\r\n", "//c", "/*", "*/", "/* x */", "/*\n*/",
           '"', '"s"', '"a\\"b"', "\\", ".reg", ".f32", "%r1", "%tid.x", "0f3F800000", "0x1F",
           "1.5e3", "12U", "abc", "a.b.c", "$x", "_", ";", ":", "::", ",", "{", "}", "(", ")",
           "[", "]", "<", ">", "@", "!", "+", "-", "*", "/", "=", "|", "&", "^", "~", "?",
           "#", "`", "\x00", "\u00e9", "'", "9", ".", "%"]


@settings(max_examples=fuzz.examples("SPLICE_TOKENIZER_FUZZ_EXAMPLES", 150), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_PIECES), max_size=25).map("".join), st.integers(0, 6))
def test_tokenizer_matches_the_two_match_tokenizer(text, pos):
    pos = min(pos, len(text))
    assert _outcome(lambda: tokenize(text, pos)) == _outcome(lambda: _old_tokenize(text, pos))
