"""A declaration's relative names (``path=``, ``include_dirs=``, ``-I``, ``-include`` and
NVRTC's output files in ``options=``, ``splice.cuda``'s ``include_dirs=``) are taken from
the directory of the file that declares it, never from the current directory: whoever can
write the directory a user runs from (``/tmp``, a team scratch directory) would otherwise
choose the code. Each test plants a file of the same name in the current directory, with
another value, and checks which value the compiled PTX holds. A declaration in no file
(``python -c``, a notebook cell) refuses a relative name."""

from __future__ import annotations

import linecache
import os
import runpy
import shutil
import textwrap
from pathlib import Path

import pytest

import splice
from splice.declare.externs import HEADER_PROVIDERS
from splice.inputs.cuda_compile import NO_DIRECTORY, program_name
from splice.inputs.fragments import CudaSource
from splice.system import safe_fs

#: SCALE in the declaring file's directory (3.0f) and in the current directory (7.0f), as
#: the PTX writes them
GENUINE, PLANTED = "0f40400000", "0f40E00000"
SCALED = 'extern "C" __device__ float scaled(float x) { return SCALE * x; }\n'
PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .func (.param .b32 r) {name}(.param .b32 x)
{{
    .reg .b32 %f<2>;
    ld.param.b32 %f0, [x];
    st.param.b32 [r], %f0;
    ret;
}}
"""


@pytest.fixture
def places(tmp_path, monkeypatch):
    """(the declaring file's directory ``proj``, the current directory ``cwd``), each with
    ``scale.h`` (and ``inc/scale.h``): 3.0f in ``proj``, 7.0f in ``cwd``."""
    proj, cwd = tmp_path / "proj", tmp_path / "cwd"
    for d, value in ((proj, "3.0f"), (cwd, "7.0f")):
        (d / "inc").mkdir(parents=True)
        for h in (d / "scale.h", d / "inc" / "scale.h"):
            h.write_text(f"#define SCALE {value}\n")
        (d / "k.cu").write_text(f"#define SCALE {value}\n" + SCALED)
        (d / "k.ptx").write_text(PTX.format(name="genuine" if d == proj else "planted"))
    monkeypatch.chdir(cwd)
    return proj, cwd


def declared(proj: Path, code: str) -> dict:
    """The globals of ``code`` run as the file ``proj/decl.py``."""
    f = proj / "decl.py"
    f.write_text("import splice\n" + textwrap.dedent(code))
    return runpy.run_path(str(f))


def ptx_of(ext) -> str:
    return ext._splice_extern.fragment.module("sm_90a").text


@pytest.mark.parametrize("declare", [
    "ext = splice.extern(path='k.cu', name='scaled', signature='float32(float32)')",
    "ext = splice.library(path='k.cu').extern('scaled', signature='float32(float32)')",
])
def test_relative_cu_file_is_the_declaring_files(places, declare):
    proj, _ = places
    ext = declared(proj, declare)["ext"]
    assert ext._splice_extern.fragment.path == proj / "k.cu"
    text = ptx_of(ext)
    assert GENUINE in text and PLANTED not in text


def test_relative_ptx_file_is_the_declaring_files(places):
    proj, _ = places
    ext = declared(proj, "ext = splice.extern.from_ptx('k.ptx', name='genuine', "
                         "signature='float32(float32)')")["ext"]
    assert ext._splice_extern.fragment.path == proj / "k.ptx"


def test_a_file_only_in_the_current_directory_is_not_found(places):
    """Before, a relative path missing beside the declaring file was taken from the
    current directory."""
    proj, cwd = places
    (cwd / "only.cu").write_text(SCALED)
    with pytest.raises(splice.SpliceDeclarationError) as e:
        declared(proj, "splice.extern(path='only.cu', name='scaled', "
                       "signature='float32(float32)')")
    assert str(proj / "only.cu") in e.value.message
    assert "never from the current directory" in e.value.message
    assert str(cwd) not in e.value.message


@pytest.mark.parametrize("how", ["include_dirs=['inc']", "options=['-Iinc']",
                                 "options=['--include-path=inc']",
                                 "options=['-include', 'scale.h']",
                                 "options=['--pre-include=inc/scale.h']"])
def test_relative_include_paths_are_the_declaring_files(places, how):
    """NVRTC takes a relative ``-I`` directory, and looks a relative ``-include`` file up
    first, in the current directory: splice gives it absolute paths. (``<scale.h>``: not
    beside the file, where a quoted name would be found first.)"""
    proj, cwd = places
    src = ("#include <scale.h>\n" if "include_dirs" in how or "-I" in how or "path" in how
           else "") + SCALED
    ext = declared(proj, f"ext = splice.extern(source={src!r}, name='scaled', "
                         f"signature='float32(float32)', {how})")["ext"]
    text = ptx_of(ext)
    assert GENUINE in text and PLANTED not in text
    assert not any(str(cwd) in o for o in ext._splice_extern.fragment._options("sm_90a"))


def test_a_pre_included_header_is_looked_up_in_the_include_path_after_the_file(places):
    """A relative ``-include`` name not beside the declaring file is found in the include
    path (as gcc and NVRTC find it after the current directory), never in the current
    directory; in neither, a compile error that says where it was looked up."""
    proj, cwd = places
    (proj / "scale.h").unlink()
    ext = declared(proj, f"ext = splice.extern(source={SCALED!r}, name='scaled', "
                         f"signature='float32(float32)', options=['-include', 'scale.h'], "
                         f"include_dirs=['inc'])")["ext"]
    assert GENUINE in ptx_of(ext)
    lost = declared(proj, f"ext = splice.extern(source={SCALED!r}, name='scaled', "
                          f"signature='float32(float32)', options=['-include', "
                          f"'scale.h'])")["ext"]
    with pytest.raises(splice.SpliceCompileError, match="never in the current directory"):
        lost._splice_extern.fragment.module("sm_90a")


def test_nvrtc_time_file_is_written_beside_the_declaring_file(places):
    """``--time=t.csv`` names a file NVRTC writes (following a link there): taken from the
    declaring file's directory, as the declaration's other relative paths."""
    proj, cwd = places
    ext = declared(proj, f"ext = splice.extern(source={SCALED!r}, name='scaled', "
                         f"signature='float32(float32)', options=['--time=t.csv'], "
                         f"defines={{'SCALE': '3.0f'}})")["ext"]
    ptx_of(ext)
    assert (proj / "t.csv").is_file() and not (cwd / "t.csv").exists()


@pytest.mark.parametrize("option", ["-pch", "--pch", "--use-pch=x.pch", "-use-pch=x.pch",
                                    "--create-pch=x.pch", "--pch-dir=d", "-pch-dir=/tmp"])
def test_nvrtc_precompiled_header_options_are_refused(option):
    """NVRTC would load a precompiled header (code splice does not check, whose bytes are
    not in the cache key) from a relative path in the current directory, or (``-pch``
    alone) keep its own in ``/tmp``: splice manages the PCH (``splice.system.nvrtc_pch``)."""
    with pytest.raises(splice.SpliceDeclarationError, match="precompiled headers itself"):
        splice.extern(source=SCALED, name="scaled", signature="float32(float32)",
                      options=[option])


@pytest.mark.parametrize("kw", [dict(path="k.cu"), dict(source=SCALED, include_dirs=["inc"]),
                                dict(source=SCALED, options=["-Iinc"]),
                                dict(source=SCALED, options=["--time=t.csv"])])
def test_a_declaration_in_no_file_refuses_relative_names(places, kw):
    """``python -c``, ``<stdin>``: no file to take a relative name from (before, the
    current directory was taken); an absolute one is fine."""
    code = compile(f"splice.extern(name='scaled', signature='float32(float32)', **{kw!r})",
                   "<string>", "exec")
    with pytest.raises(splice.SpliceDeclarationError, match="in no file to take it from"):
        exec(code, {"splice": splice})
    with pytest.raises(splice.SpliceDeclarationError, match="in no file to take it from"):
        exec(compile("splice.extern.from_ptx('k.ptx', name='genuine', signature="
                     "'float32(float32)')", "<string>", "exec"), {"splice": splice})


def test_a_notebook_cell_is_no_file_even_where_one_was_planted(places, tmp_path):
    """IPython names a cell ``/tmp/ipykernel_<pid>/<hash>.py`` (in :mod:`linecache`, with
    no modification time) and writes no such file; another user can create the directory
    and the file. Its directory is never the declaration's."""
    cell = tmp_path / "ipykernel_4242" / "123456.py"
    cell.parent.mkdir()
    cell.write_text("")
    (cell.parent / "k.cu").write_text(SCALED)
    assert safe_fs.declaring_dir(str(cell)) == cell.parent   # a file: its directory
    src = "splice.extern(path='k.cu', name='scaled', signature='float32(float32)')\n"
    linecache.cache[str(cell)] = (len(src), None, [src], str(cell))   # as IPython's
    try:
        assert safe_fs.declaring_dir(str(cell)) is None
        assert program_name(f"{cell}:1", "extern_source").startswith(NO_DIRECTORY + "/")
        with pytest.raises(splice.SpliceDeclarationError, match="in no file to take it"):
            exec(compile(src, str(cell), "exec"), {"splice": splice})
    finally:
        del linecache.cache[str(cell)]


def test_dot_dot_beside_a_program_in_no_directory_is_never_resolved_by_its_text(tmp_path):
    """A text source declared in no file is named under ``/dev/null/``: a quoted
    ``#include "../shm/x/h.h"`` there is ``/dev/null/../shm/...``, which the kernel
    refuses (``/dev/null`` is no directory); read as text it would be ``/dev/shm/x/h.h``,
    which every user can write. NVRTC and the include walk both take it from
    ``include_dirs`` only."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        pytest.skip("no writable /dev/shm")
    name = f"splice-test-{os.getpid()}-{tmp_path.name}"
    planted, genuine = shm / name, tmp_path / "shm" / name
    for d, value in ((planted, "7.0f"), (genuine, "3.0f")):
        d.mkdir(parents=True)
        (d / "h.h").write_text(f"#define SCALE {value}\n")
    (tmp_path / "inc").mkdir()
    try:
        frag = CudaSource(text=f'#include "../shm/{name}/h.h"\n' + SCALED, where="<string>:1",
                          include_dirs=(str(tmp_path / "inc"),), providers=HEADER_PROVIDERS)
        text = frag.module("sm_90a").text
        assert GENUINE in text and PLANTED not in text
        walked = [p for p, _ in frag._headers(frag.read())]
        assert walked == [str(genuine / "h.h")]
    finally:
        shutil.rmtree(planted)


def test_splice_cuda_include_dirs_are_the_kernels_files(places):
    """``splice.cuda(..., include_dirs=("inc",))`` in a kernel: from the kernel's file's
    directory."""
    proj, _ = places
    g = declared(proj, """
        import cuda.tile as ct
        from support.shared_machine import SIG

        @splice.kernel
        def k(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=splice.cuda(
                "return SCALE * v;", dtype=ct.float32, v=t, includes='"scale.h"',
                include_dirs=("inc",)))

        b = splice.build(k, SIG, "sm_90", keep_stages=True)
        """)
    assert GENUINE in g["b"].spliced_ptx and PLANTED not in g["b"].spliced_ptx
