"""A CUDA C fragment's cache key covers every user header NVRTC may read: found through
``include_dirs``, beside the ``.cu`` file, through ``-I``/``--include-path`` in ``options``,
pre-included with ``-include``/``--pre-include``, or (a text source) beside the file that
declares it. An edit to any of them must change the key, else the cache serves the old
header's cubin."""

import pytest

from splice.declare.externs import HEADER_PROVIDERS
from splice.inputs.fragments import CudaSource

BODY = "__device__ float f(float x) { return x + V; }\n"


def _edit_changes_key(frag, header):
    k1 = frag.content_key("sm_90a")
    header.write_text("#define V 2\n")
    return k1 != frag.content_key("sm_90a")


@pytest.mark.parametrize("opts", [lambda d: (f"-I{d}",), lambda d: ("-I", str(d)),
                                  lambda d: (f"--include-path={d}",),
                                  lambda d: ("--include-path", str(d))])
def test_header_found_through_an_include_option(tmp_path, opts):
    (tmp_path / "h.h").write_text("#define V 1\n")
    frag = CudaSource(text='#include "h.h"\n' + BODY, options=opts(tmp_path), where="x.py:1",
                      providers=HEADER_PROVIDERS)
    assert _edit_changes_key(frag, tmp_path / "h.h")


@pytest.mark.parametrize("opts", [lambda d: (f"--pre-include={d / 'h.h'}",),
                                  lambda d: ("-include", str(d / "h.h"))])
def test_pre_included_header(tmp_path, opts):
    (tmp_path / "h.h").write_text("#define V 1\n")
    frag = CudaSource(text=BODY, options=opts(tmp_path), where="x.py:1", providers=HEADER_PROVIDERS)
    assert _edit_changes_key(frag, tmp_path / "h.h")


def test_text_source_header_beside_the_declaring_file(tmp_path, monkeypatch):
    """NVRTC names a text source beside the file that declares it (as a ``.cu`` there
    would be), wherever the process runs: a quoted header there is read and hashed."""
    (tmp_path / "model.py").write_text("")
    (tmp_path / "h.h").write_text("#define V 1\n")
    monkeypatch.chdir(tmp_path.parent)
    frag = CudaSource(text='#include "h.h"\n' + BODY, where=f"{tmp_path / 'model.py'}:1",
                      providers=HEADER_PROVIDERS)
    assert frag.program_name().startswith(f"{tmp_path}/")
    assert _edit_changes_key(frag, tmp_path / "h.h")


def test_text_source_outside_a_file_never_reads_the_current_directory(tmp_path,
                                                                       monkeypatch):
    """Declared where the file name is no file (``python -c``, ``<stdin>``): no directory
    of its own, so a header in the current directory is neither compiled nor hashed (it
    was, before the include_dirs: whoever could write the directory the user ran from
    chose the header), and the error says where the header is looked up."""
    from splice.errors import SpliceCompileError
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.h").write_text("#define V 1\n")
    frag = CudaSource(text='#include "h.h"\n' + BODY, where="<string>:1",
                      providers=HEADER_PROVIDERS)
    assert not frag.program_name().startswith(str(tmp_path))
    assert not _edit_changes_key(frag, tmp_path / "h.h")
    with pytest.raises(SpliceCompileError, match="looked up in include_dirs= only"):
        frag.module("sm_90a")


def test_include_dirs_come_before_the_files_own_directory(tmp_path):
    """``<h.h>`` in both an ``include_dirs`` entry and the ``.cu``'s directory: NVRTC reads
    the include_dirs one (its -I comes first), so that is the one hashed."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "h.h").write_text("#define V 1\n")
    (tmp_path / "h.h").write_text("#define V 5\n")
    cu = tmp_path / "f.cu"
    cu.write_text("#include <h.h>\n" + BODY)
    frag = CudaSource(path=cu, include_dirs=(str(inc),), where="x.py:1", providers=HEADER_PROVIDERS)
    assert _edit_changes_key(frag, inc / "h.h")


def test_a_cuda_header_replaced_by_an_upgrade_changes_the_key(tmp_path, monkeypatch):
    """The CUDA headers come from a wheel (nvidia-cuda-runtime...) that pip upgrades apart
    from NVRTC's: a replaced ``cuda_fp16.h`` must miss although NVRTC is the same."""
    from splice.system import toolchain
    inc = tmp_path / "cuda_include"
    inc.mkdir()
    (inc / "cuda_fp16.h").write_text("#define V 1\n")
    monkeypatch.setattr(toolchain, "cuda_include_dir", lambda: inc)
    frag = CudaSource(text="#include <cuda_fp16.h>\n" + BODY, where="x.py:1",
                      providers=HEADER_PROVIDERS)
    assert _edit_changes_key(frag, inc / "cuda_fp16.h")
