"""The first-launch speed-ups of the pipeline keep its results: fragments compiled ahead for
a predicted PTX target (and a wrong prediction), gc paused during a build and restored,
nvdisasm run only when asked; and the first-launch benchmark runs without a GPU."""

import dataclasses
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import cuda.tile as ct
import pytest

import splice
from splice.driver import pipeline, stages
from splice.errors import SpliceToolchainError
from splice.system import safe_fs, tileiras_overlay, toolchain
from support import kernels as K
from support.env import python_env

f32 = ct.float32
SIG = K.signature(K.array(f32), K.array(f32), 256)
_n = [0]


def _fresh_kernel(body: str = "return x * 2.0f + 1.0f;"):
    """A kernel calling a CUDA C extern whose source no other test compiles (so neither the
    fragment memo nor the disk cache answers)."""
    _n[0] += 1
    src = (f"// test_first_launch {_n[0]} {id(_n)}\n"
           f"extern \"C\" __device__ float fl_f(float x) {{ {body} }}\n")
    fl_f = splice.extern(source=src, name="fl_f", signature="float32(float32)")(lambda x: None)

    @splice.kernel
    def fl_kernel(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=fl_f(t))
    return fl_kernel


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_predicted_ptx_target_is_what_tileiras_emits(arch, monkeypatch):
    monkeypatch.setattr(stages, "_PTX_TARGETS", {})
    predicted = stages.predicted_ptx_target(arch)
    b = splice.compile(_fresh_kernel(), SIG, arch)
    assert f".target {predicted}" in b.ptx
    assert stages.predicted_ptx_target(arch) == predicted


def test_fragments_compile_in_a_thread_while_tileiras_runs(monkeypatch):
    seen = []
    real_nvrtc, real_tileiras = toolchain.nvrtc_compile, toolchain.run_tileiras

    def nvrtc(*a, **k):
        seen.append(("nvrtc", threading.current_thread().name, a[2][0]))
        return real_nvrtc(*a, **k)

    def tileiras(*a, **k):
        seen.append(("tileiras", threading.current_thread().name, None))
        return real_tileiras(*a, **k)

    monkeypatch.setattr(toolchain, "nvrtc_compile", nvrtc)
    monkeypatch.setattr(toolchain, "run_tileiras", tileiras)
    splice.compile(_fresh_kernel(), SIG, "sm_90")
    nvrtc_calls = [s for s in seen if s[0] == "nvrtc"]
    assert len(nvrtc_calls) == 1, seen
    assert nvrtc_calls[0][1].startswith("splice-fragment")
    assert nvrtc_calls[0][2] == "-arch=sm_90a"


def test_a_wrong_prediction_gives_the_same_cubin(monkeypatch, tmp_path):
    from splice.inputs import fragments
    kernel = _fresh_kernel("return x * 5.0f - 1.0f;")
    want = splice.compile(kernel, SIG, "sm_90")
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))  # no fragment cache entry...
    monkeypatch.setattr(fragments, "_memo", {})             # ...nor memo: NVRTC runs again
    targets = []
    real = toolchain.nvrtc_compile

    def nvrtc(*a, **k):
        targets.append(a[2][0])
        return real(*a, **k)

    monkeypatch.setattr(toolchain, "nvrtc_compile", nvrtc)
    monkeypatch.setattr(stages, "predicted_ptx_target", lambda gpu_name: "sm_86")
    got = splice.compile(kernel, SIG, "sm_90")
    assert targets == ["-arch=sm_86", "-arch=sm_90a"]  # the guess, then the real target
    assert got.cubin == want.cubin and got.spliced_ptx == want.spliced_ptx


def test_a_failing_fragment_fails_in_the_pipeline_not_in_the_thread():
    kernel = _fresh_kernel("return y;")   # no 'y': NVRTC error
    with pytest.raises(splice.SpliceCompileError,
                       match=r"does not compile for sm_90 \(PTX target sm_90a\)"):
        splice.compile(kernel, SIG, "sm_90")


def test_gc_is_paused_during_a_build_and_restored(monkeypatch):
    during = []
    real = toolchain.run_tileiras

    def tileiras(*a, **k):
        during.append(gc.isenabled())
        return real(*a, **k)

    monkeypatch.setattr(toolchain, "run_tileiras", tileiras)
    assert gc.isenabled()
    splice.compile(_fresh_kernel(), SIG, "sm_80")
    assert during == [False] and gc.isenabled()
    with pytest.raises(splice.SpliceCompileError):
        splice.compile(_fresh_kernel("return y;"), SIG, "sm_80")
    assert gc.isenabled()
    gc.disable()
    try:
        splice.compile(_fresh_kernel(), SIG, "sm_80")
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_the_fragments_stage_takes_each_content_key_once(monkeypatch, tmp_path):
    """The key of a CUDA C fragment walks its headers: the fragments stage takes it once per
    fragment and hands it to the callee checks (collectives, effects), not once per site
    and check."""
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    _n[0] += 1
    src = f'// three sites {_n[0]}\nextern "C" __device__ float g3(float x) {{ return x + 1.0f; }}'
    g3 = splice.extern(source=src, name="g3", signature="float32(float32)")(lambda x: None)

    @splice.kernel
    def three_sites(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=g3(g3(t) * 2.0) + g3(t))

    keys, inside = [], []
    real_key, real_stage = type(g3._splice_extern.fragment).content_key, \
        stages._compile_fragments
    monkeypatch.setattr(type(g3._splice_extern.fragment), "content_key",
                        lambda self, target: keys.append(bool(inside)) or
                        real_key(self, target))

    def stage(*a):
        inside.append(1)
        try:
            return real_stage(*a)
        finally:
            inside.pop()
    monkeypatch.setattr(stages, "_compile_fragments", stage)
    b = splice.build(three_sites, SIG, "sm_90")
    assert len(b.sites) == 3 and b.cubin
    assert keys.count(True) == 1


def test_nvdisasm_runs_only_when_asked(monkeypatch, tmp_path):
    if toolchain.nvdisasm() is None:
        pytest.skip("nvdisasm not installed")
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    calls = []
    real = toolchain.disassemble
    monkeypatch.setattr(toolchain, "disassemble", lambda cubin: calls.append(1) or real(cubin))
    kernel = _fresh_kernel()
    cubin = kernel._compile(SIG, None, (9, 0))[0]                        # built
    assert _fresh_kernel_again(kernel)._compile(SIG, None, (9, 0))[0] == cubin  # cache hit
    b = splice.compile(kernel, SIG, "sm_90")                             # every stage
    assert calls == []
    assert b.sass and b.sass                                             # asked: once
    assert len(calls) == 1
    monkeypatch.setenv("SPLICE_VERIFY", "1")
    _fresh_kernel_again(kernel)._compile(SIG, None, (9, 0))             # asked, cache hit
    _fresh_kernel_again(kernel)._compile(SIG, None, (8, 0))             # asked, built
    assert len(calls) == 3


def _fresh_kernel_again(kernel):
    """A new kernel object of the same function (cuTile's per-object cache is empty)."""
    return type(kernel)(kernel._pyfunc)


def test_first_launch_benchmark_runs_without_a_gpu(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path / "splice"))
    monkeypatch.setenv("CUDA_TILE_CACHE_DIR", str(tmp_path / "cutile"))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import bench_first_launch
    finally:
        sys.path.pop(0)
    assert bench_first_launch.main(["--cpu", "--reps", "1", "--cases", "b", "--stages"]) == 0
    out = capsys.readouterr().out
    assert "(b) elementwise + PTX extern" in out
    stages = re.search(r"splice stages, ms: (.*)", out).group(1)
    names = [part.split()[0] for part in stages.split("  ")]
    assert names[:2] == ["trace", "key"] and {"lower", "splice", "assemble"} <= set(names)
    assert names[-1] == "other"


_KERNEL_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .func g()
{
    ret;
}

.visible .entry k()
{
    call.uni g, ();
    ret;
}
"""


@pytest.mark.parametrize("inserted, error", [
    (".visible .func h()\n{\n    ret;\n}\n", None),
    (".visible .func g()\n{\n    ret;\n}\n", "function 'g' defined twice"),
    (".visible .func h()\n{\n    ret;\n", "not closed"),
    ("/* an unterminated comment\n", "unterminated /\\* comment"),
    ("mov.u32 %r1, 0\n", "unterminated statement"),
])
def test_inserted_fragments_are_parsed_after_the_kernel_header(inserted, error):
    # link.insert parses only the header plus the inserted text (the kernel is parsed); the
    # merged module must parse exactly when that does
    from splice.ptxtools import link
    from splice.ptxtools.ptx import Module, PTXSyntaxError
    kernel = Module(_KERNEL_PTX)
    linked = link.Linked(inserted, {})
    if error is None:
        merged = link.insert(kernel, linked, "k").text
        assert Module(merged).functions.keys() == {"g", "h", "k"}
        return
    with pytest.raises(PTXSyntaxError, match=error):
        Module(_KERNEL_PTX.replace(".address_size 64\n", ".address_size 64\n\n\n" + inserted))
    with pytest.raises(PTXSyntaxError, match=error):
        link.insert(kernel, linked, "k")


def test_a_cache_hit_in_a_new_process_loads_no_miss_stage(tmp_path):
    # the warm-cache process (issue 11): a hit runs trace, key and cache only; tileiras's
    # driver, the rewriter, the linker and the PTX parser (splice.stages and what it imports)
    # are loaded by a miss
    code = ("import sys\n"
            "from support import kernels as K\n"
            "from splice.driver import pipeline\n"
            "sig = K.signature(K.array(K.ct.float64), K.array(K.ct.float64), 256)\n"
            "b = pipeline.build(K.same_arg_kernel, sig, 'sm_90')\n"
            "miss = ('splice.driver.stages', 'splice.forms.rewrite', 'splice.ptxtools.link',\n"
            "        'splice.ptxtools.ptx', 'splice.ptxtools.inline',\n"
            "        'splice.analysis.collectives')\n"
            "print(b.from_cache, [m for m in miss if m in sys.modules])\n")
    env = python_env(Path(__file__).parent, Path(splice.__file__).parent.parent,
                     SPLICE_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=300) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr
    first, second = (r.stdout.strip().splitlines()[-1] for r in runs)
    assert first.startswith("False ['splice.driver.stages'")   # the miss loads them
    assert second == "True []"


def test_the_capturing_ptxas_keeps_argv_ptx_and_host_object(tmp_path):
    # the script tileiras runs instead of ptxas (tileiras_overlay._CAPTURE_SCRIPT): built-ins but
    # for one ln, which links tileiras's temporary inputs before tileiras deletes them
    real = tmp_path / "real-ptxas"
    real.write_text('#!/bin/sh\necho "real ptxas $*"\n')
    script = tmp_path / "ptxas"
    script.write_text(tileiras_overlay.capture_script(str(real)))
    for f in (real, script):
        f.chmod(0o755)
    tmp, cap = tmp_path / "tmp dir", tmp_path / "cap"
    tmp.mkdir(), cap.mkdir()
    (tmp / "k-1.ptx").write_text(".version 8.0\n")
    (tmp / "tileir-1.o").write_bytes(b"\x7fELF\0host")
    argv = [str(script), "-arch", "sm_90a", str(tmp / "k-1.ptx"), "-o", str(tmp / "k.bin"),
            f"--nv-host={tmp / 'tileir-1.o'}", "-uumn"]
    env = {"SPLICE_CAPTURE_DIR": str(cap), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for _ in range(2):
        assert subprocess.run(argv, env=env).returncode == 0
    assert (tmp / "k.bin").read_bytes() == b""                # tileiras reads an output
    assert (cap / "call0.argv").read_text().splitlines() == argv[1:]
    assert (cap / "call1.argv").is_file()                     # a second call: call1
    assert (cap / "k-1.ptx").read_text() == ".version 8.0\n"
    assert (cap / "tileir-1.o").read_bytes() == b"\x7fELF\0host"
    version = subprocess.run([str(script), "--version"], env=env, capture_output=True,
                             text=True)
    assert version.stdout.strip() == "real ptxas --version"   # the real ptxas answers
    unset = subprocess.run(argv, env={"PATH": env["PATH"]}, capture_output=True, text=True)
    assert unset.returncode == 97 and "SPLICE_CAPTURE_DIR is not set" in unset.stderr


def test_a_host_object_the_capture_did_not_keep_is_an_error(tmp_path, monkeypatch):
    # tileiras passed ptxas an --nv-host object (a TMA kernel's launch callbacks) that the
    # capture lacks: assembling without it would lose the callbacks, so no Capture is made
    from splice.errors import SpliceToolchainError
    fake = tmp_path / "overlay"
    (fake / "bin").mkdir(parents=True)
    tileiras = fake / "bin" / "tileiras"
    tileiras.write_text('#!/bin/sh\nd="$SPLICE_CAPTURE_DIR"\n'
                        'printf "%s\\n" -arch sm_90a "$TMPDIR/k.ptx" -o "$TMPDIR/k.bin" '
                        '"--nv-host=$TMPDIR/tileir-1.o" > "$d/call0.argv"\n'
                        'echo ".version 8.0" > "$d/k.ptx"\n')
    tileiras.chmod(0o755)
    monkeypatch.setattr(toolchain, "_runnable_tileiras",
                        lambda: os.open(fake / "bin" / "tileiras", os.O_PATH))
    with pytest.raises(SpliceToolchainError, match="--nv-host object tileiras passed ptxas "
                                                   "for kernel 'k' .* was not kept"):
        toolchain.run_tileiras(b"", (), timeout=60, what="kernel 'k' (k.py:1)")
    (fake / "bin" / "tileiras").write_text(tileiras.read_text().replace(
        "\"--nv-host=$TMPDIR/tileir-1.o\" ", ""))
    capture = toolchain.run_tileiras(b"", (), timeout=60, what="kernel 'k' (k.py:1)")
    assert capture.ptx == ".version 8.0\n" and capture.host_object is None


# --------------------------------------------------------------------------------------------
# Lazy public names (type checkers see them), the capturing ptxas script, cache hits, one
# splice package per process

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
root = splice.system.toolchain.overlay()
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


def _capture_script(tmp_path: Path, **tools: str) -> Path:
    script = tmp_path / "ptxas"
    script.write_text(tileiras_overlay.capture_script("/bin/false", **tools))
    script.chmod(0o755)
    return script


def test_capturing_ptxas_copies_when_ln_links_only_the_first_input(tmp_path):
    # `ln -f ptx host dir/` links the PTX, then fails on the host object (another
    # filesystem): cp then met the PTX's new link ("are the same file") and the script
    # exited 99, failing every compile
    bin_dir, tmp, cap = tmp_path / "bin", tmp_path / "tmp", tmp_path / "cap"
    for d in (bin_dir, tmp, cap):
        d.mkdir()
    fake_ln = bin_dir / "ln"   # ln -f -- PTX HOST DIR/: links PTX, fails on HOST
    fake_ln.write_text(f'#!/bin/sh\n{safe_fs.system_program("ln")} -f -- "$3" "$5" && exit 1\n')
    fake_ln.chmod(0o755)
    script = _capture_script(tmp_path, ln=str(fake_ln))
    (tmp / "k-1.ptx").write_text(".version 8.0\n")
    (tmp / "tileir-1.o").write_bytes(b"\x7fELF\0host")
    argv = [str(script), str(tmp / "k-1.ptx"), "-o", str(tmp / "k.bin"),
            f"--nv-host={tmp / 'tileir-1.o'}"]
    r = subprocess.run(argv, env={"SPLICE_CAPTURE_DIR": str(cap)}, capture_output=True,
                       text=True)
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
            where = os.path.join(sys.argv[2], *fullname.split(".")[1:-1])
            return importlib.machinery.PathFinder.find_spec(fullname, [where], target)


sys.meta_path.append(Editable())
os.remove(os.path.join(sys.argv[1], "splice", "declare", "externs.py"))
for name in ("splice.driver.stages", "splice.declare.externs", "splice.no_such_module"):
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
    (copy / "splice" / "driver" / "stages.py").unlink()          # not in this copy from the start
    out = subprocess.run([sys.executable, "-c", _MIXED, str(copy),
                          str(Path(splice.__file__).parent)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    stages, externs, missing = out.stdout.splitlines()
    assert stages.startswith("splice.driver.stages refused: splice.driver.stages is not part of "
                             "the splice") and "another copy of splice" in stages
    assert externs.startswith("splice.declare.externs refused: splice/declare/externs.py changed "
                              "on disk") and missing.startswith("splice.no_such_module not found")


# --------------------------------------------------------------------------------------------
# Compiles at once (threads, processes, after the main thread ended), inputs changed while
# compiling (the key), the overlay repaired

TESTS = ROOT / "tests"

_LATE = '''
import atexit, sys, threading, time
import cuda.tile as ct
from support import kernels as K
import splice
SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 256)
ext = splice.extern(source='extern "C" __device__ float late(float x) {{ return x * 3.0f; }}',
                    name="late", signature="float32(float32)")(lambda x: None)

@splice.kernel
def k_late(x, y, TILE: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=ext(t))

def work(wait):
    time.sleep(wait)
    try:
        b = splice.build(k_late, SIG, "sm_90")
        print("built", len(b.cubin), flush=True)
    except BaseException as e:
        print("raised", type(e).__name__, e, flush=True)

{how}
'''


@pytest.mark.parametrize("how", [
    # a compile thread the script started outlives its main thread (Python is shutting down:
    # concurrent.futures refuses new work)
    "threading.Thread(target=work, args=(1.0,)).start()",
    # a compile in an atexit handler
    "atexit.register(work, 0.0)",
])
def test_a_compile_after_the_main_thread_ended_builds(tmp_path, how):
    # the fragments compile ahead in a thread pool during tileiras: a pool that cannot start
    # raised a bare RuntimeError ("can't register atexit after shutdown")
    script = tmp_path / "late.py"
    script.write_text(_LATE.format(how=how))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True,
                          text=True, timeout=300, env=python_env(
                              ROOT, TESTS, SPLICE_CACHE_DIR=str(tmp_path / "cache")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("built "), proc.stdout + proc.stderr


def _header_extern(inc: Path, include_line: str, **options):
    return splice.extern(
        source=f'{include_line}\nextern "C" __device__ float hs(float x) {{ return x * SCALE; }}',
        name="hs", signature="float32(float32)", include_dirs=[str(inc)],
        **options)(lambda x: None)


def _header_kernel(ext):
    @splice.kernel
    def k_hdr(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t))
    return k_hdr


def _scale_constants(b) -> set[str]:
    return set(re.findall(r"0f[0-9A-F]{8}", b.spliced_ptx))


@pytest.mark.parametrize("include_line", [
    '#include "myscale.h"',
    # a header named by a macro was in no key: an edit to it gave a stale hit
    '#define HDR_NAME "myscale.h"\n#include HDR_NAME',
    '#define CONFIG <myscale.h>\n#define HDR_NAME CONFIG\n#include HDR_NAME  // chosen',
    ('#include HDR_NAME', {"defines": {"HDR_NAME": '"myscale.h"'}}),
    ('#include HDR_NAME', {"options": ['-DHDR_NAME="myscale.h"']}),
])
def test_an_edited_user_header_recompiles(fresh_cache, tmp_path, include_line):
    inc = tmp_path / "inc"
    inc.mkdir()
    line, options = include_line if isinstance(include_line, tuple) else (include_line, {})
    kern = _header_kernel(_header_extern(inc, line, **options))
    got = []
    for scale in ("3.0f", "5.0f"):
        (inc / "myscale.h").write_text(f"#define SCALE {scale}\n")
        b = splice.build(kern, SIG, "sm_90")
        got.append((b.from_cache, _scale_constants(splice.compile(kern, SIG, "sm_90"))))
    assert got == [(False, {"0f40400000"}), (False, {"0f40A00000"})]


def test_a_cache_directory_removed_while_the_process_runs_is_made_again(fresh_cache,
                                                                         monkeypatch):
    # `rm -rf ~/.cache/splice` beside a running notebook, or a temp-directory cleaner: the
    # overlay the process had built went with it, and every later build raised a bare
    # FileNotFoundError until the process restarted
    from splice.system import toolchain
    monkeypatch.setattr(tileiras_overlay, "_overlay_bases", lambda _: [fresh_cache / "toolchain"])
    toolchain.overlay.cache_clear()
    try:
        first = splice.build(K.ptx_kernel, SIG, "sm_90")
        shutil.rmtree(fresh_cache)
        again = splice.build(K.ptx_kernel, SIG, "sm_90")
        assert not again.from_cache and again.cubin == first.cubin
        assert (fresh_cache / "toolchain").is_dir()
        assert splice.build(K.ptx_kernel, SIG, "sm_90").from_cache
    finally:
        toolchain.overlay.cache_clear()


def _constants_kernel(tmp_path, name, text):
    src = tmp_path / f"{name}.cu"
    src.write_text(text)
    ext = splice.extern(path=str(src), name=name, signature="float32(float32)",
                        include_dirs=[str(tmp_path)])(lambda x: None)
    return src, _header_kernel(ext)


def test_a_source_saved_during_the_compile_is_not_cached_under_the_old_key(
        fresh_cache, tmp_path, monkeypatch):
    # the key is taken before tileiras runs; the fragment compiles from the file as it is
    # then: a save during the compile stored the new version's cubin under the old key, and
    # undoing the edit gave a stale hit
    from splice.system import toolchain
    body = 'extern "C" __device__ float tt(float x) {{ return x * {}f; }}\n'
    src, kern = _constants_kernel(tmp_path, "tt", body.format("3.0"))
    real = toolchain.run_tileiras

    def saving(*args, **kwargs):
        src.write_text(body.format("5.0"))
        return real(*args, **kwargs)

    monkeypatch.setattr(toolchain, "run_tileiras", saving)
    splice.build(kern, SIG, "sm_90")
    monkeypatch.setattr(toolchain, "run_tileiras", real)
    src.write_text(body.format("3.0"))
    b = splice.build(kern, SIG, "sm_90")
    assert not b.from_cache
    assert b.cubin == splice.build(kern, SIG, "sm_90").cubin
    assert _scale_constants(splice.compile(kern, SIG, "sm_90")) == {"0f40400000"}


def test_a_header_saved_while_nvrtc_runs_is_not_cached_under_the_old_key(
        fresh_cache, tmp_path, monkeypatch):
    # NVRTC reads the headers while it compiles: the PTX of a header saved meanwhile was
    # remembered and cached under the key of the header before the save
    from splice.system import toolchain
    _, kern = _constants_kernel(tmp_path, "th", '#include "th_scale.h"\n'
                                'extern "C" __device__ float th(float x) { return x * SCALE; }\n')
    header = tmp_path / "th_scale.h"
    header.write_text("#define SCALE 3.0f\n")
    real = toolchain.nvrtc_compile
    saved = []

    def saving(*args, **kwargs):
        if not saved:
            header.write_text("#define SCALE 5.0f\n")
            saved.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(toolchain, "nvrtc_compile", saving)
    splice.build(kern, SIG, "sm_90")
    header.write_text("#define SCALE 3.0f\n")
    b = splice.build(kern, SIG, "sm_90")      # (a compile first would cache it: a hit)
    assert not b.from_cache
    assert _scale_constants(splice.compile(kern, SIG, "sm_90")) == {"0f40400000"}
    assert _scale_constants(splice.compile(kern, SIG, "sm_90")) == {"0f40400000"}


def test_a_header_no_macro_definition_names_is_warned_about(fresh_cache, tmp_path, caplog):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "myscale.h").write_text("#define SCALE 3.0f\n")
    line = '#define STR(x) #x\n#define HDR(x) STR(x.h)\n#include HDR(myscale)'
    ext = _header_extern(inc, line)
    with caplog.at_level("WARNING", logger="splice"):
        splice.build(_header_kernel(ext), SIG, "sm_90")
    assert "'#include HDR(myscale)' names a header splice cannot tell" in caplog.text


_THREADS = '''
import hashlib, json, sys, threading
import cuda.tile as ct
import splice                      # nothing of the compile path loaded yet
from support import kernels as K
names = ["float32", "int32", "float32", "int32", "float64", "float64"]
barrier = threading.Barrier(len(names))
got = {}

def work(i):
    kern = K.TYPE_KERNELS[(names[i], "never")]
    barrier.wait()
    try:
        sig = K.signature(K.array(getattr(ct, names[i])), K.array(getattr(ct, names[i])), 256)
        got[i] = hashlib.sha256(splice.build(kern, sig, "sm_90").cubin).hexdigest()
    except BaseException as e:
        got[i] = repr(e)

threads = [threading.Thread(target=work, args=(i,)) for i in range(len(names))]
for t in threads:
    t.start()
for t in threads:
    t.join(240)
print(json.dumps({"alive": sum(t.is_alive() for t in threads), "got": got}))
'''


def test_threads_of_a_new_process_compile_at_once_as_one_thread_does(fresh_cache, tmp_path):
    # a new process: the lazy names, splice.stages (imported by build() on a miss), the
    # fragments' thread pools, the CCCL locator and the PTX-target memo all first used by
    # six threads at once, two per kernel; each cubin is the one a lone build makes
    import hashlib
    import json
    script = tmp_path / "threads.py"
    script.write_text(_THREADS)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=python_env(ROOT, TESTS, SPLICE_CACHE_DIR=str(
                              tmp_path / "child-cache")))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["alive"] == 0
    for i, name in enumerate(["float32", "int32", "float32", "int32", "float64", "float64"]):
        sig = K.signature(K.array(getattr(ct, name)), K.array(getattr(ct, name)), 256)
        alone = splice.build(K.TYPE_KERNELS[(name, "never")], sig, "sm_90").cubin
        assert out["got"][str(i)] == hashlib.sha256(alone).hexdigest(), name


def test_an_overlay_with_a_broken_capture_script_is_repaired(fresh_cache, monkeypatch):
    # an edited or truncated bin/ptxas of the overlay failed every tileiras run of every
    # later process ("failed to compile Tile IR program"), with no word of the overlay
    from splice.system import toolchain
    monkeypatch.setattr(tileiras_overlay, "_overlay_bases", lambda _: [fresh_cache / "toolchain"])
    toolchain.overlay.cache_clear()
    try:
        script = toolchain.overlay() / "bin" / "ptxas"
        script.write_text("")
        toolchain.overlay.cache_clear()     # a new process finds the overlay on disk
        assert splice.build(K.ptx_kernel, SIG, "sm_90").cubin
        assert script.read_text().startswith("#!/bin/sh")
    finally:
        toolchain.overlay.cache_clear()


def test_a_source_removed_during_the_compile_gives_the_build_uncached(fresh_cache, tmp_path,
                                                                     monkeypatch):
    # the key taken again before storing reads the extern's file: its removal while ptxas
    # ran must not turn a finished build into an error
    from splice.system import toolchain
    src, kern = _constants_kernel(
        tmp_path, "tr", 'extern "C" __device__ float tr(float x) { return x * 3.0f; }\n')
    real = toolchain.run_ptxas

    def removing(*args, **kwargs):
        src.unlink()
        return real(*args, **kwargs)

    monkeypatch.setattr(toolchain, "run_ptxas", removing)
    assert splice.build(kern, SIG, "sm_90").cubin
    assert not list((fresh_cache / "kernel").rglob("*.bin"))
