"""``python -m splice warmup`` (splice.driver.warmup): what a user names compiles ahead of
time in spawned worker processes, so that the first build in a new process hits (a kernel)
or runs no NVRTC (a ``splice.cub`` operation); a failing job is reported and the others
go on; an unknown operation is refused before anything runs (issue 47)."""

import json
import subprocess
import sys
import threading
from pathlib import Path

import cuda.tile as ct
import pytest

import splice
from splice.driver import warmup
from splice.errors import SpliceDeclarationError
from splice.inputs import cccl, fragments
from splice.system import toolchain
from support import kernels as K
from support.env import python_env

TESTS = Path(__file__).resolve().parent

_MODULE = r'''
import json, os, sys
import cuda.tile as ct
import splice

# where this module is imported: a spawned worker has not loaded pytest
with open(os.path.join(os.path.dirname(__file__), f"imported.{os.getpid()}"), "w") as f:
    json.dump({"pytest": "pytest" in sys.modules, "pid": os.getpid()}, f)

twice = splice.extern(source='extern "C" __device__ float tw(float x) { return 2 * x; }',
                      name="tw", signature="float32(float32)")
broken = splice.extern(source='extern "C" __device__ float br(float x) { return x +* 2; }',
                       name="br", signature="float32(float32)")

@splice.kernel
def good(x, y, N: ct.Constant[int]):
    ct.store(y, index=(ct.bid(0),), tile=twice(ct.load(x, index=(ct.bid(0),), shape=(N,))))

@splice.kernel
def bad(x, y, N: ct.Constant[int]):
    ct.store(y, index=(ct.bid(0),), tile=broken(ct.load(x, index=(ct.bid(0),), shape=(N,))))

SPLICE_WARMUP = {"good": ["array(float32), array(float32), 256",
                          "array(float32), array(float32), 512"]}
'''

_HIT = r'''
import json, sys
import splice, kernels
hits = [splice.build(kernels.good, splice.kernel_signature("array(float32)", "array(float32)",
                                                           n), "sm_90").from_cache
        for n in (256, 512)]
print(json.dumps(hits))
'''


def _cli(*args, cwd, env):
    return subprocess.run([sys.executable, "-m", "splice", *args], capture_output=True,
                          text=True, cwd=cwd, env=python_env(TESTS.parent, **env))


def test_warmup_compiles_kernels_in_spawned_workers_and_a_new_process_hits(tmp_path):
    (tmp_path / "kernels.py").write_text(_MODULE)
    env = {"SPLICE_CACHE_DIR": str(tmp_path / "cache"), "SPLICE_COMPILE": "never"}
    out = _cli("warmup", "kernels.py", "-j", "2", "--arch", "sm_90", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("compiled ") == 2 and "2 compiled, 0 failed" in out.stdout
    workers = [json.loads(p.read_text()) for p in tmp_path.glob("imported.*")]
    assert workers and not any(w["pytest"] for w in workers)
    (tmp_path / "hit.py").write_text(_HIT)
    hit = subprocess.run([sys.executable, str(tmp_path / "hit.py")], capture_output=True,
                         text=True, env=python_env(TESTS.parent, tmp_path, **env))
    assert hit.returncode == 0, hit.stderr[-2000:]
    assert json.loads(hit.stdout.splitlines()[-1]) == [True, True]
    again = _cli("warmup", "kernels.py", cwd=tmp_path, env=env)
    assert again.stdout.count("cached ") == 2


def test_a_failing_job_is_reported_and_the_others_still_run(tmp_path):
    (tmp_path / "kernels.py").write_text(_MODULE)
    jobs = warmup.kernel_jobs(str(tmp_path / "kernels.py"), "bad",
                              ["array(float32), array(float32), 128"], ["sm_90"]) + \
        warmup.kernel_jobs(str(tmp_path / "kernels.py"), "good",
                           ["array(float32), array(float32), 128"], ["sm_90"])
    seen = []
    done = warmup.run(jobs, workers=1, report=seen.append)
    assert seen == done and len(done) == 2
    by = {d.job.kernel: d for d in done}
    assert "NVRTC" in by["bad"].error or "rejected" in by["bad"].error or \
        "br" in by["bad"].error
    assert by["good"].error == "" and by["good"].compiled == 1
    out = _cli("warmup", "kernels.py", "bad", "--sig", "array(float32), array(float32), 128",
               cwd=tmp_path, env={"SPLICE_CACHE_DIR": str(tmp_path / "c2")})
    assert out.returncode == 1 and "FAILED" in out.stdout and "0 compiled, 1 failed" in out.stdout


@pytest.mark.parametrize("op, says", [("sortt", "not a splice.cub operation"),
                                      ("top_k", "takes an argument"),
                                      ("histogram:many", "takes an argument")])
def test_an_unknown_operation_is_refused_before_anything_runs(op, says):
    with pytest.raises(SpliceDeclarationError, match=says):
        warmup.cub_jobs([op], ["float32"], [128], ["sm_90"])


def test_the_command_says_what_it_needs(tmp_path):
    out = _cli("warmup", cwd=tmp_path, env={"SPLICE_CACHE_DIR": str(tmp_path / "c")})
    assert out.returncode == 2 and "needs FILE" in out.stderr
    (tmp_path / "kernels.py").write_text(_MODULE.replace("SPLICE_WARMUP", "OTHER"))
    out = _cli("warmup", "kernels.py", cwd=tmp_path, env={"SPLICE_CACHE_DIR": str(tmp_path)})
    assert out.returncode != 0 and "SPLICE_WARMUP" in out.stderr
    out = _cli("warmup", "--cub", "sort:up", cwd=tmp_path, env={})
    assert out.returncode == 2 and "not a splice.cub operation" in out.stderr


@splice.kernel
def user_sort(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t))


@pytest.mark.skipif(not cccl.include_dirs(), reason="needs CCCL's headers")
def test_a_cub_warmup_leaves_a_users_kernel_nothing_to_compile_with_nvrtc(fresh_cache,
                                                                          monkeypatch):
    """splice.cub.sort on float32 tiles warmed (in a worker) for 256 elements: the batch
    compiled every documented size, and a user's kernel sorting 1024 elements then runs
    no NVRTC (only its own tileiras and ptxas)."""
    [done] = warmup.run(warmup.cub_jobs(["sort"], ["float32"], [256], ["sm_90"]), workers=1)
    assert done.error == "" and done.compiled == 1
    monkeypatch.setattr(fragments, "_memo", {})
    calls = []
    lock = threading.Lock()
    real = toolchain.nvrtc_compile

    def counting(*a, **k):
        with lock:
            calls.append(a[1])
        return real(*a, **k)
    monkeypatch.setattr(toolchain, "nvrtc_compile", counting)
    b = splice.compile(user_sort, K.signature(K.array(ct.float32), K.array(ct.float32), 1024),
                       "sm_90")
    assert not b.from_cache and calls == []
