"""Which NVRTC / nvJitLink file the cache key names, without importing cuda.pathfinder in
the common case (``toolchain._unambiguous_library``): the copy mapped into the process, else
the only site-packages copy; any choice (two copies, a conda environment) is left to
cuda.pathfinder. ``test_cache.py`` checks the answer against the library cuda-bindings
actually loads, in a fresh process."""

import site
import sys

import pytest

from splice.system import toolchain

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux library search")


def _wheel(root, sub="nvidia/cu13/lib", name="libnvrtc.so.13"):
    d = root / sub
    d.mkdir(parents=True)
    (d / name).write_bytes(b"\x7fELF nvrtc")
    return (d / name).resolve()


@pytest.fixture
def sites(tmp_path, monkeypatch):
    roots = [tmp_path / "a", tmp_path / "b"]
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(roots[0])])
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(roots[1]))
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.setattr("builtins.open", _no_maps(open))
    return roots


def _no_maps(real_open):
    def fake(path, *a, **k):
        if path == "/proc/self/maps":
            import io
            return io.StringIO("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n")
        return real_open(path, *a, **k)
    return fake


def test_the_only_site_packages_copy(sites):
    lib = _wheel(sites[0])
    assert toolchain._unambiguous_library("nvrtc") == lib


def test_two_copies_are_cuda_pathfinders_choice(sites):
    _wheel(sites[0])
    _wheel(sites[1], "nvidia/cuda_nvrtc/lib", "libnvrtc.so.12")
    assert toolchain._unambiguous_library("nvrtc") is None


def test_a_symlinked_soname_is_one_copy(sites):
    lib = _wheel(sites[0], name="libnvrtc.so.13.4.1")
    (lib.parent / "libnvrtc.so.13").symlink_to(lib)
    assert toolchain._unambiguous_library("nvrtc") == lib


def test_conda_is_cuda_pathfinders_choice(sites, monkeypatch):
    _wheel(sites[0])
    monkeypatch.setenv("CONDA_PREFIX", "/opt/conda")
    assert toolchain._unambiguous_library("nvrtc") is None


def test_nothing_found_is_cuda_pathfinders_choice(sites):
    assert toolchain._unambiguous_library("nvJitLink") is None


def test_a_copy_already_loaded_wins(tmp_path, monkeypatch):
    loaded = tmp_path / "elsewhere" / "libnvrtc.so.13"
    maps = (f"7f00-7f01 r-xp 0 08:01 1 {loaded}\n"
            f"7f02-7f03 r-xp 0 08:01 2 /x/libnvrtc-builtins.so.13\n")
    real_open = open

    def fake(path, *a, **k):
        if path == "/proc/self/maps":
            import io
            return io.StringIO(maps)
        return real_open(path, *a, **k)
    monkeypatch.setattr("builtins.open", fake)
    assert toolchain._unambiguous_library("nvrtc") == loaded


def test_the_real_library_is_found_without_cuda_pathfinder():
    import subprocess
    code = ("import sys; from splice.system import toolchain; "
            "p = toolchain._library_path('nvrtc'); "
            "print(p is not None, 'cuda.pathfinder' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    if out[0] == "True":   # an NVRTC in site-packages: found without importing pathfinder
        assert out[1] == "False"
