"""The one CCCL locator (splice/inputs/cccl.py) and its users: NVRTC's default include path
(splice/fragments.py), NVSHMEM's device headers (splice/nvshmem.py), the missing-header
hints. Where it looks, in which order; what a missing CCCL says; that the user's own
directories come before splice's on NVRTC's path, and that the cache key follows NVRTC."""

from pathlib import Path

import pytest

import splice
from splice.declare.externs import HEADER_PROVIDERS
from splice.inputs import cccl, nvshmem
from splice.inputs.fragments import CudaSource
from splice.system import toolchain

BODY = 'extern "C" __device__ float f(float x) { return x + (float)WHO; }\n'


def _fake_cccl(d: Path, who: int) -> Path:
    """A complete CCCL layout (what :func:`cccl._complete` asks for) whose
    ``<cuda/std/version>`` defines WHO."""
    (d / "cub").mkdir(parents=True)
    (d / "cub" / "cub.cuh").write_text("")
    (d / "cuda" / "std").mkdir(parents=True)
    (d / "cuda" / "__cccl_config").write_text("")
    (d / "cuda" / "std" / "version").write_text(f"#define WHO {who}\n")
    return d


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No CCCL anywhere the locator looks; returns a setter for each step."""
    steps = {"beside": [], "pathfinder": [], "roots": [str(tmp_path / "nothing")]}
    inc = tmp_path / "cuda_include"
    inc.mkdir()
    monkeypatch.setattr(toolchain, "cuda_include_dir", lambda: steps["beside"][0]
                        if steps["beside"] else inc)
    import cuda.pathfinder
    monkeypatch.setattr(cuda.pathfinder, "find_nvidia_header_directory",
                        lambda name: steps["pathfinder"][0] if steps["pathfinder"] else None)
    monkeypatch.setattr(cccl, "_roots", lambda: steps["roots"])
    monkeypatch.setattr(cccl, "_chosen", [])
    return steps


# --- where it looks ---------------------------------------------------------------------

def test_nothing_found(nowhere):
    assert cccl.installations() == [] and cccl.include_dirs() == []
    with pytest.raises(splice.SpliceToolchainError,
                       match=r"X needs? CCCL .* not installed: pip install "
                             r"'cuda-toolkit\[cccl\]'.*include_dirs="):
        cccl.require("X")


def test_beside_the_cuda_headers_then_the_roots_then_pathfinder(nowhere, tmp_path):
    # cuda.pathfinder last: its import (50-150 ms) is paid only when nothing cheaper answers
    wheel = tmp_path / "wheel" / "include"
    _fake_cccl(wheel / "cccl", 1)
    pf = _fake_cccl(tmp_path / "pathfinder" / "cccl", 2)
    tk = _fake_cccl(tmp_path / "tk" / "include" / "cccl", 3)
    nowhere["pathfinder"] = [str(pf)]
    assert cccl.include_dirs() == [str(pf)]
    nowhere["roots"] = [str(tmp_path / "tk")]
    cccl._chosen.clear()     # include_dirs() remembers its answer (next test)
    assert cccl.include_dirs() == [str(tk)]
    nowhere["beside"] = [wheel]
    cccl._chosen.clear()
    assert cccl.include_dirs() == [str(wheel / "cccl")]
    assert cccl.installations() == [[str(wheel / "cccl")], [str(tk)], [str(pf)]]
    nowhere["pathfinder"] = [str(tk)]   # found twice: listed once
    assert cccl.installations() == [[str(wheel / "cccl")], [str(tk)]]


def test_the_found_cccl_is_remembered_while_complete_and_none_is_not(nowhere, tmp_path,
                                                                     monkeypatch):
    # every CUDA C fragment's cache key asks, several times a build: the layouts are walked
    # again only when nothing was found (CCCL installed after a failed compile is found) or
    # what was found is gone
    walks = []
    real_found = cccl._found

    def counted():
        walks.append(1)
        yield from real_found()

    monkeypatch.setattr(cccl, "_found", counted)
    assert cccl.include_dirs() == [] and len(walks) == 1
    tk = _fake_cccl(tmp_path / "tk" / "include" / "cccl", 1)
    nowhere["roots"] = [str(tmp_path / "tk")]
    assert cccl.include_dirs() == [str(tk)] and len(walks) == 2
    assert cccl.include_dirs() == [str(tk)] and len(walks) == 2     # remembered
    (tk / "cub" / "cub.cuh").unlink()                  # no longer complete: looked up again
    assert cccl.include_dirs() == [] and len(walks) == 3


def test_the_located_cccl_needs_no_cuda_pathfinder_when_a_layout_answers():
    import subprocess
    import sys
    code = ("import sys; from splice.inputs import cccl; d = cccl.include_dirs(); "
            "print(bool(d), 'cuda.pathfinder' in sys.modules)")
    found, imported = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                     text=True, check=True).stdout.split()
    if found == "True" and cccl._in_roots() and any(cccl._complete(d)
                                                    for d in cccl._in_roots()):
        assert imported == "False"


def test_pathfinder_is_asked_for_cccl(nowhere, tmp_path, monkeypatch):
    import cuda.pathfinder
    asked = []
    pf = _fake_cccl(tmp_path / "pf", 2)
    monkeypatch.setattr(cuda.pathfinder, "find_nvidia_header_directory",
                        lambda name: asked.append(name) or str(pf))
    assert cccl.include_dirs() == [str(pf)] and asked == ["cccl"]


def test_a_pathfinder_that_fails_is_skipped(nowhere, monkeypatch):
    import cuda.pathfinder

    def boom(name):
        raise RuntimeError("UNKNOWN libname='cccl'")   # an old cuda-pathfinder
    monkeypatch.setattr(cuda.pathfinder, "find_nvidia_header_directory", boom)
    assert cccl.include_dirs() == []


def test_toolkit_and_cupy_layouts(nowhere, tmp_path):
    # a toolkit layout (one directory) and CuPy's (one per library), best first
    tk = tmp_path / "cuda" / "include" / "cccl" / "cub"
    tk.mkdir(parents=True)
    (tk / "cub.cuh").write_text("")
    cupy = tmp_path / "site" / "cupy" / "_core" / "include" / "cupy" / "_cccl"
    (cupy / "cub" / "cub").mkdir(parents=True)
    (cupy / "cub" / "cub" / "cub.cuh").write_text("")
    (cupy / "thrust").mkdir()
    nowhere["roots"] = [str(tmp_path / "cuda"), str(tmp_path / "site"), str(tmp_path)]
    # without libcu++ (<cuda/__cccl_config>, which CUB includes) neither counts: the GPU
    # image's CuPy carries cub/ and thrust/ but no libcudacxx/
    assert cccl.installations() == []
    (tk.parent / "cuda").mkdir()
    (tk.parent / "cuda" / "__cccl_config").write_text("")
    (cupy / "libcudacxx" / "include" / "cuda").mkdir(parents=True)
    (cupy / "libcudacxx" / "include" / "cuda" / "__cccl_config").write_text("")
    assert cccl.installations() == [[str(tmp_path / "cuda" / "include" / "cccl")],
                                    [str(cupy / "cub"), str(cupy / "libcudacxx" / "include"),
                                     str(cupy / "thrust")]]
    assert cccl.include_dirs() == [str(tmp_path / "cuda" / "include" / "cccl")]


# --- its users --------------------------------------------------------------------------

def default_include_dirs(*texts: str) -> list:
    """splice's own -I directories for a CUDA C source with ``texts`` (it and its headers)."""
    return CudaSource(text="", where="x.py:1",
                      providers=HEADER_PROVIDERS).default_include_dirs(texts)


def test_the_default_include_path_has_the_located_cccl(monkeypatch, tmp_path):
    fake = _fake_cccl(tmp_path / "cccl", 7)
    monkeypatch.setattr(cccl, "include_dirs", lambda: [str(fake)])
    inc = toolchain.cuda_include_dir()
    assert default_include_dirs() == [*([inc] if inc else []), fake]
    src = "#include <cuda/std/version>\n#if WHO != 7\n#error not the located CCCL\n#endif\n"
    frag = CudaSource(text=src + BODY, where="x.py:1", providers=HEADER_PROVIDERS)
    assert f"-I{fake}" in frag._options("sm_90")
    frag.module("sm_90")   # compiles: NVRTC found <cuda/std/version> in the located CCCL


def test_nvshmem_uses_the_same_cccl(monkeypatch, tmp_path):
    (tmp_path / "nvshmem.h").write_text("")
    monkeypatch.setattr(nvshmem, "include_dir", lambda: tmp_path)
    fake = _fake_cccl(tmp_path / "cccl", 7)
    monkeypatch.setattr(cccl, "include_dirs", lambda: [str(fake)])
    src = "#include <nvshmem.h>\n"
    assert default_include_dirs(src)[-2:] == [fake, tmp_path]
    monkeypatch.setattr(cccl, "include_dirs", lambda: [])
    with pytest.raises(splice.SpliceToolchainError,
                       match=r"<nvshmem.h>, whose device headers need CCCL.*"
                             r"pip install 'splice\[nvshmem\]' \(or pip install "
                             r"'cuda-toolkit\[cccl\]'"):
        default_include_dirs(src)


def test_missing_cccl_header_says_how_to_install(monkeypatch):
    monkeypatch.setattr(cccl, "include_dirs", lambda: [])
    frag = CudaSource(text="#include <cub/block/block_reduce.cuh>\n" + BODY.replace(
        "WHO", "1"), where="x.py:1", providers=HEADER_PROVIDERS)
    with pytest.raises(splice.SpliceCompileError,
                       match=r"<cub/block/block_reduce.cuh> is part of CCCL .* not installed: "
                             r"pip install 'cuda-toolkit\[cccl\]'"):
        frag.module("sm_90")


@pytest.mark.skipif(not cccl.include_dirs(), reason="no CCCL installed")
def test_libcuxx_compiles_without_include_dirs():
    src = ('#include <cuda/std/cstdint>\n#include <cuda/std/bit>\n'
           'extern "C" __device__ float pc(float x) {\n'
           '    return (float)cuda::std::popcount((cuda::std::uint32_t)x); }\n')
    assert "popc" in CudaSource(text=src, where="x.py:1",
                                providers=HEADER_PROVIDERS).module("sm_90").text


# --- precedence: the user's directories first ------------------------------------------

@pytest.mark.parametrize("how", ["include_dirs", "-I", "-I x", "--include-path="])
def test_the_users_cccl_comes_before_splices(monkeypatch, tmp_path, how):
    """A CCCL the user names (include_dirs= or -I in options=) is the one NVRTC reads, not
    the installed one splice adds (as nvcc's -I precede the toolkit's): before this order
    was fixed, -I of options came after the wheel's CCCL and silently lost to it."""
    splices = _fake_cccl(tmp_path / "installed", 1)
    users = _fake_cccl(tmp_path / "users", 2)
    monkeypatch.setattr(cccl, "include_dirs", lambda: [str(splices)])
    kw = {"include_dirs": (str(users),)} if how == "include_dirs" else {"options": {
        "-I": (f"-I{users}",), "-I x": ("-I", str(users)),
        "--include-path=": (f"--include-path={users}",)}[how]}
    src = "#include <cuda/std/version>\n#if WHO != 2\n#error splice's CCCL won\n#endif\n"
    frag = CudaSource(text=src + BODY, where="x.py:1", providers=HEADER_PROVIDERS, **kw)
    frag.module("sm_90")   # compiles: NVRTC read the user's
    opts = frag._options("sm_90")
    assert opts.index(f"-I{splices}") == len(opts) - 1   # splice's own come last
    # the key follows the one NVRTC reads: the user's header, by content
    k1 = frag.content_key("sm_90")
    (users / "cuda" / "std" / "version").write_text("#define WHO 2 /* edited */\n")
    assert frag.content_key("sm_90") != k1


def test_a_header_from_the_installed_cccl_is_in_the_key(monkeypatch, tmp_path):
    """Found in splice's CCCL, a header is identified by its size and mtime (a pip upgrade
    rewrites it in place); another CCCL is another -I, so another key."""
    one = _fake_cccl(tmp_path / "one", 1)
    two = _fake_cccl(tmp_path / "two", 1)
    monkeypatch.setattr(cccl, "include_dirs", lambda: [str(one)])
    frag = CudaSource(text="#include <cuda/std/version>\n" + BODY, where="x.py:1",
                      providers=HEADER_PROVIDERS)
    k1 = frag.content_key("sm_90")
    (one / "cuda" / "std" / "version").write_text("#define WHO 11\n")
    k2 = frag.content_key("sm_90")
    assert k2 != k1
    monkeypatch.setattr(cccl, "include_dirs", lambda: [str(two)])
    assert frag.content_key("sm_90") not in (k1, k2)


# --- the unroll limit of libcu++'s type lists ------------------------------------------

_UNROLL = "-D_CCCL_META_UNROLL_LIMIT=10"


def _opts(src: str, **kw) -> list[str]:
    return CudaSource(text=src, where="x.py:1", providers=HEADER_PROVIDERS, **kw)._options(
        "sm_90")


def test_a_source_that_includes_cccl_gets_nvccs_unroll_limit():
    assert _UNROLL in _opts("#include <cub/block/block_scan.cuh>\n")
    assert _UNROLL in _opts('  #  include "cuda/std/type_traits"\n')
    # a source without CCCL gets nothing (its key is as before)
    assert not any("UNROLL" in o for o in _opts("#include <cuda_fp16.h>\n// <cub/x.cuh>\n"))


@pytest.mark.parametrize("how", ["defines", "options", "source"])
def test_the_users_unroll_limit_wins(how):
    src = "#include <cuda/std/type_traits>\n"
    if how == "source":
        opts = _opts("#define _CCCL_META_UNROLL_LIMIT 4\n" + src)
        assert not any("UNROLL" in o for o in opts)
        return
    kw = {"defines": (("_CCCL_META_UNROLL_LIMIT", "4"),)} if how == "defines" else \
        {"options": ("-D_CCCL_META_UNROLL_LIMIT=4",)}
    opts = _opts(src, **kw)
    ours, theirs = opts.index(_UNROLL), opts.index("-D_CCCL_META_UNROLL_LIMIT=4")
    assert ours < theirs          # NVRTC takes a macro's last -D


@pytest.mark.skipif(not cccl.include_dirs(), reason="no CCCL installed")
def test_the_unroll_limit_changes_compile_time_not_code(monkeypatch):
    """CCCL's 16 (any compiler but nvcc) against nvcc's 10: the same PTX for a CUB block
    sort and scan; the compile with 10 takes about half the time (not asserted: timing)."""
    src = ("#include <cub/block/block_radix_sort.cuh>\n#include <cub/block/block_scan.cuh>\n"
           'extern "C" __device__ void f(float (&v)[8], int (&w)[4]) {\n'
           "    using S = cub::BlockRadixSort<float, 128, 8>;\n"
           "    using C = cub::BlockScan<int, 128>;\n"
           "    __shared__ typename S::TempStorage s; __shared__ typename C::TempStorage c;\n"
           "    S(s).SortDescending(v); C(c).InclusiveSum(w, w); }\n")
    ptx = []
    for value in ("16", "10"):
        monkeypatch.setattr(cccl, "UNROLL_LIMIT", ("_CCCL_META_UNROLL_LIMIT", value))
        frag = CudaSource(text=src, where="x.py:1", providers=HEADER_PROVIDERS)
        assert f"-D_CCCL_META_UNROLL_LIMIT={value}" in frag._options("sm_90")
        ptx.append(frag.module("sm_90").text)
    assert ptx[0] == ptx[1] and "bar.sync" in ptx[0]
