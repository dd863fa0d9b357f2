"""python -m splice: doctor, inspect, compile, cache."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.env import fake_dist, python_env

ROOT = Path(__file__).resolve().parent.parent
SAXPY = ROOT / "examples" / "ptx_import" / "saxpy_from_ptx.py"
SIG = "array(float32), array(float32), array(float32), scalar(float32), 1024"


def _run(*args, env_extra=None):
    env = python_env(ROOT)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "splice", *args], capture_output=True,
                          text=True, env=env, timeout=600, cwd=ROOT)


def test_doctor_reports_the_toolchain():
    out = _run("doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    for what in ("cuda-tile", "tileiras", "ptxas", "libnvvm", "NVRTC", "nvJitLink", "cache",
                 "toolchain set", "other packages' pins"):
        assert f"[ok] {what}" in out.stdout


def _doctor_beside(root: Path):
    return subprocess.run([sys.executable, "-m", "splice", "doctor"], capture_output=True,
                          text=True, env=python_env(root, ROOT), timeout=600, cwd=ROOT)


def _wheel_version(name: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{name} is not installed as a wheel here")


def test_doctor_names_what_torch_pins(tmp_path):
    nvrtc = _wheel_version("nvidia-cuda-nvrtc")
    fake_dist(tmp_path, "torch", "2.14.1", f"nvidia-cuda-nvrtc=={nvrtc}", "filelock")
    out = _doctor_beside(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    [pins] = [ln for ln in out.stdout.splitlines() if "other packages' pins" in ln]
    assert pins.startswith("[ok] other packages' pins: kept: ")
    assert f"torch 2.14.1: nvidia-cuda-nvrtc=={nvrtc}" in pins


def test_doctor_says_a_broken_torch_pin_and_how_to_restore_it(tmp_path):
    nvrtc = _wheel_version("nvidia-cuda-nvrtc")
    fake_dist(tmp_path, "torch", "2.14.1", "nvidia-cuda-nvrtc==12.8.*")
    out = _doctor_beside(tmp_path)
    assert out.returncode == 1
    assert (f"[!!] other packages' pins: torch 2.14.1 requires nvidia-cuda-nvrtc==12.8.*, "
            f"found {nvrtc} (pip install 'nvidia-cuda-nvrtc==12.8.*' restores it)") in out.stdout



def test_doctor_never_advises_splice_nvshmem_beside_a_torch_that_pins_nvshmem(tmp_path):
    """Found trying to break doctor (issue 46): beside torch 2.14, which pins
    nvidia-nvshmem-cu13==3.4.5, the NVSHMEM line said `pip install 'splice[nvshmem]'`
    (>= 3.8): pip would replace torch's NVSHMEM and report torch broken."""
    from splice.inputs import nvshmem
    if nvshmem.header_version() is not None:
        pytest.skip("NVSHMEM headers are installed here: doctor advises nothing")
    fake_dist(tmp_path, "torch", "2.14.1", 'nvidia-nvshmem-cu13==3.4.5; platform_system == '
              '"Linux"')
    out = _doctor_beside(tmp_path)
    [line] = [ln for ln in out.stdout.splitlines() if "NVSHMEM headers" in ln]
    assert "pip install" not in line, line
    assert "torch 2.14.1 requires nvidia-nvshmem-cu13==3.4.5" in line, line

def test_doctor_on_tileiras_wheels_of_different_minors_names_the_odd_one(tmp_path):
    # what pip leaves when an environment had nvcc 13.4 (JAX's) and splice brought tileiras
    # 13.5: cuTile then takes no tileiras from the wheels
    fake_dist(tmp_path, "nvidia-cuda-tileiras", "13.5.37")
    fake_dist(tmp_path, "nvidia-cuda-nvcc", "13.4.92")
    fake_dist(tmp_path, "nvidia-nvvm", "13.5.37")
    out = _doctor_beside(tmp_path)
    if "[ok] tileiras" in out.stdout:
        pytest.skip("cuTile found a system tileiras instead")
    assert out.returncode == 1
    assert "of different CUDA minors (nvidia-cuda-tileiras 13.5.37, nvidia-cuda-nvcc " \
           "13.4.92, nvidia-nvvm 13.5.37)" in out.stdout
    [verdict] = [ln for ln in out.stdout.splitlines() if "toolchain set" in ln]
    # NVRTC, nvJitLink and nvdisasm are this environment's own: the tested set the fewest
    # changes reach is 13.4's where they are 13.4 (CI's 13.4 run), 13.5's otherwise
    from splice.system import toolchain
    if toolchain.nvrtc_version() == (13, 4):
        assert verdict.startswith("[!!] toolchain set: untested combination: tileiras 13.5, "
                                  "libnvvm 13.5 "), verdict
        assert "Fix, for CUDA 13.4" in verdict
        assert verdict.endswith("pip install 'nvidia-cuda-tileiras==13.4.*' "
                                "'nvidia-nvvm==13.4.*'"), verdict
    else:
        assert verdict.startswith("[!!] toolchain set: untested combination: ptxas 13.4 "), \
            verdict
        assert "Fix, for CUDA 13.5" in verdict
        assert verdict.endswith("pip install 'nvidia-cuda-nvcc==13.5.*'"), verdict


def test_doctor_warns_about_cuda_home():
    out = _run("doctor", env_extra={"CUDA_HOME": "/opt/cuda-13.0"})
    assert "CUDA_HOME=/opt/cuda-13.0" in out.stdout


def test_inspect_prints_the_summary_and_stages(tmp_path):
    out = _run("inspect", str(SAXPY), "saxpy_kernel", "--sig", SIG, "--arch", "sm_90",
               "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "site 0: saxpy" in out.stdout
    [d] = list(tmp_path.iterdir())
    assert d.name.endswith(".sm_90") and any(p.suffix == ".cubin" for p in d.iterdir())
    out = _run("inspect", str(SAXPY), "saxpy_kernel", "--sig", SIG, "--stage", "spliced_ptx")
    assert ".entry saxpy_kernel" in out.stdout and "__splice_marker" not in \
        out.stdout.split(".nv_intermediate_source_section")[0]


def test_compile_writes_a_cubin_for_any_arch(tmp_path):
    for arch in ("sm_80", "sm_100"):
        cubin = tmp_path / f"k.{arch}.cubin"
        out = _run("compile", str(SAXPY), "saxpy_kernel", "--sig", SIG, "--arch", arch,
                   "-o", str(cubin))
        assert out.returncode == 0, out.stderr
        assert cubin.read_bytes()[:4] == b"\x7fELF"


def test_compile_without_o_replaces_a_link_at_its_cubin_name(tmp_path, monkeypatch):
    from splice.__main__ import main
    args = ["compile", str(SAXPY), "saxpy_kernel", "--sig", SIG, "--arch", "sm_90"]
    monkeypatch.chdir(tmp_path)
    assert main(args) == 0
    [cubin] = tmp_path.glob("*.cubin")     # <symbol>.sm_90.cubin: a predictable name
    cubin.unlink()
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    cubin.symlink_to(victim)               # planted first
    assert main(args) == 0
    assert victim.read_bytes() == b"keep"
    assert not cubin.is_symlink() and cubin.read_bytes()[:4] == b"\x7fELF"
    assert cubin.stat().st_mode & 0o077 == 0


def test_bad_arguments():
    out = _run("compile", str(SAXPY), "nope", "--sig", SIG)
    assert out.returncode != 0 and "no kernel named 'nope'" in out.stderr
    out = _run("compile", str(SAXPY), "saxpy_kernel", "--sig", "array(complex)")
    assert out.returncode != 0 and "--sig" in out.stderr


def test_cache_commands(tmp_path):
    env = {"SPLICE_CACHE_DIR": str(tmp_path / "c")}
    assert _run("compile", str(SAXPY), "saxpy_kernel", "--sig", SIG, "-o",
                str(tmp_path / "k.cubin"), env_extra=env).returncode == 0
    _run("inspect", str(SAXPY), "saxpy_kernel", "--sig", SIG, env_extra=env)
    listed = _run("cache", "list", env_extra=env).stdout
    assert "fragment" in listed or "kernel" in listed or listed.strip() == ""
    assert "entries" in _run("cache", "size", env_extra=env).stdout
    assert "removed" in _run("cache", "clear", env_extra=env).stdout
    assert "0 entries" in _run("cache", "size", env_extra=env).stdout


def test_cache_size_and_prune(tmp_path):
    env = {"SPLICE_CACHE_DIR": str(tmp_path / "c")}
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from splice.system import cache\n"
            "for k in 'abc': cache.store('kernel', k, {'what': k}, b'x' * 1000)")
    subprocess.run([sys.executable, "-c", code, str(ROOT)], check=True,
                   env=dict(os.environ, **env))
    size = _run("cache", "size", env_extra=env)
    assert "3 entries" in size.stdout and "limit 4294967296" in size.stdout
    alive = subprocess.Popen(   # a running process's precompiled headers count
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from splice."
         "system import cache, safe_fs; d = safe_fs.process_dir(cache.PCH_PREFIX, cache."
         "cache_root()); (d / 'p.pch').write_bytes(b'x' * 7000); print(d, flush=True); "
         "sys.stdin.read()", str(ROOT)], env=dict(os.environ, **env), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    alive.stdout.readline()
    try:
        size = _run("cache", "size", env_extra=env).stdout
    finally:
        alive.communicate("")
    assert "7000 of them NVRTC's precompiled headers" in size, size
    out = _run("cache", "prune", "--max-bytes", "1500", env_extra=env)
    assert out.returncode == 0 and "removed 2 entries" in out.stdout, out
    assert "1 entries" in _run("cache", "size", env_extra=env).stdout
    out = _run("cache", "prune", "--max-bytes", "-5", env_extra=env)
    assert out.returncode == 2 and "not a byte count" in out.stderr


def test_output_into_a_closed_pipe_exits_quietly(tmp_path):
    # `python -m splice cache list | head`: was "error: BrokenPipeError"
    env = python_env(ROOT, SPLICE_CACHE_DIR=str(tmp_path / "c"))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from splice.system import cache\n"
            "for i in range(20): cache.store('kernel', str(i), {'what': 'k' * 60}, b'x')")
    subprocess.run([sys.executable, "-c", code, str(ROOT)], check=True, env=env)
    for args in (("cache", "list"), ("cache", "size")):
        p = subprocess.Popen([sys.executable, "-m", "splice", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, cwd=ROOT)
        p.stdout.close()   # the reader is gone before the first line is written
        err = p.stderr.read().decode()
        assert p.wait(timeout=600) == 1
        assert err == "", err


def test_errors_are_messages_not_tracebacks(tmp_path):
    out = _run("compile", "no_such_file.py", "k", "--sig", SIG)
    assert out.returncode != 0 and "no such file" in out.stderr
    out = _run("compile", str(SAXPY), "saxpy_kernel", "--sig", "array(float32)")
    assert out.returncode != 0 and "lists 1 parameter(s), the kernel takes 5" in out.stderr
    out = _run("compile", str(SAXPY), "saxpy_kernel", "--sig", SIG, "--arch", "sm_70")
    assert out.returncode == 2 and "sm_80 and newer" in out.stderr
    assert "Traceback" not in out.stderr
    out = _run("compile", str(SAXPY), "saxpy_kernel", "--sig", SIG, "-o", str(tmp_path))
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_output_path_is_checked_before_compiling(tmp_path):
    cache = tmp_path / "cache"
    missing = tmp_path / "no" / "such" / "k.cubin"
    out = _run("compile", str(SAXPY), "saxpy_kernel", "--sig", SIG, "-o", str(missing),
               env_extra={"SPLICE_CACHE_DIR": str(cache)})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "which does not exist; create it first" in out.stderr
    assert "saxpy_from_ptx.py:" in out.stderr            # the kernel's file:line
    left = [p for p in cache.rglob("*") if p.is_file() and "toolchain" not in p.parts] \
        if cache.exists() else []
    assert left == [], left                               # nothing compiled, nothing cached


def test_doctor_reports_optional_headers():
    out = _run("doctor")
    assert "CCCL/CUB headers: " in out.stdout and "NVSHMEM headers: " in out.stdout


def test_sig_takes_fp8_and_tf32_arrays():
    import cuda.tile as ct

    from splice.tracing.signatures import parse_parameters
    params = parse_parameters("array(float8_e4m3fn), array(float8_e5m2, ndim=2), "
                              "array(tfloat32)")
    assert [p.dtype for p in params] == [ct.float8_e4m3fn, ct.float8_e5m2, ct.tfloat32]
    assert params[1].stride_divisible_by == (16, 1)     # 16 bytes of 1-byte elements
