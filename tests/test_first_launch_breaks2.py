"""Second round of attacks on issue 11's compile path (threads and processes compiling at
once, the fallback, failures during a miss, the key, the command line) that found bugs or
pin what held up."""

import subprocess
import sys
from pathlib import Path

import pytest

import splice
from support.env import python_env

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
