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


def _header_extern(inc: Path, include_line: str):
    return splice.extern(
        source=f'{include_line}\nextern "C" __device__ float hs(float x) {{ return x * SCALE; }}',
        name="hs", signature="float32(float32)", include_dirs=[str(inc)])(lambda x: None)


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
    pytest.param('#define HDR_NAME "myscale.h"\n#include HDR_NAME', marks=pytest.mark.xfail(
        strict=True, reason="a header named by a macro is not in the key: a stale hit")),
])
def test_an_edited_user_header_recompiles(fresh_cache, tmp_path, include_line):
    inc = tmp_path / "inc"
    inc.mkdir()
    kern = _header_kernel(_header_extern(inc, include_line))
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
