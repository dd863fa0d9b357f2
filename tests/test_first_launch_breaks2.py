"""Second round of attacks on issue 11's compile path (threads and processes compiling at
once, the fallback, failures during a miss, the key, the command line) that found bugs or
pin what held up."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import cuda.tile as ct
import pytest

import splice
from support import kernels as K
from support.env import python_env

SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 256)
ROOT = Path(splice.__file__).resolve().parent.parent
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
    from splice import toolchain
    monkeypatch.setattr(toolchain, "_overlay_bases", lambda real: [fresh_cache / "toolchain"])
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
    from splice import toolchain
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
    from splice import toolchain
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
    from splice import toolchain
    monkeypatch.setattr(toolchain, "_overlay_bases", lambda real: [fresh_cache / "toolchain"])
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
    from splice import toolchain
    src, kern = _constants_kernel(
        tmp_path, "tr", 'extern "C" __device__ float tr(float x) { return x * 3.0f; }\n')
    real = toolchain.run_ptxas

    def removing(*args, **kwargs):
        src.unlink()
        return real(*args, **kwargs)

    monkeypatch.setattr(toolchain, "run_ptxas", removing)
    assert splice.build(kern, SIG, "sm_90").cubin
    assert not list((fresh_cache / "kernel").rglob("*.bin"))
