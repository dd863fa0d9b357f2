"""A header of splice's own include directories (CCCL, CUDA) several includes deep is in a
CUDA C fragment's cache key: CUB's <cub/block/block_reduce.cuh> reaches some hundreds of
headers, and an edit to any of them (a kernel engineer patching an installed CUB while
debugging, a partial upgrade) must not hit the fragment compiled before it. Only the
headers the source names were keyed before; the PTX of the old header came back."""

from pathlib import Path

import pytest

from splice.declare.externs import HEADER_PROVIDERS
from splice.inputs import cccl, headers
from splice.inputs.fragments import CudaSource

SRC = ('#include <lib/top.cuh>\n'
       'extern "C" __device__ int f(int x) { return x + DEEP; }\n')


@pytest.fixture
def installed(monkeypatch, tmp_path) -> Path:
    """An installed CCCL holding lib/top.cuh -> lib/detail/mid.cuh -> "inner.cuh"."""
    d = tmp_path / "cccl"
    (d / "lib" / "detail").mkdir(parents=True)
    (d / "lib" / "top.cuh").write_text("#pragma once\n#include <lib/detail/mid.cuh>\n")
    (d / "lib" / "detail" / "mid.cuh").write_text('#pragma once\n#include "inner.cuh"\n')
    (d / "lib" / "detail" / "inner.cuh").write_text("#pragma once\n#define DEEP 1\n")
    monkeypatch.setattr(cccl, "include_dirs", lambda: [str(d)])
    return d


def _adds(frag: CudaSource) -> list[str]:
    return [ln.split()[-1] for ln in frag.module("sm_90").text.splitlines()
            if ln.strip().startswith("add.s32")]


@pytest.mark.parametrize("edited", ["lib/detail/mid.cuh", "lib/detail/inner.cuh"])
def test_an_edit_deep_under_cccl_misses_the_cache(installed, edited):
    frag = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS)
    before = frag.content_key("sm_90")
    assert _adds(frag) == ["1;"]
    path = installed / edited
    if edited.endswith("inner.cuh"):
        path.write_text("#pragma once\n#define DEEP 1234\n")
    else:
        path.write_text('#pragma once\n#include "inner.cuh"\n#undef DEEP\n#define DEEP 1234\n')
    again = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS)
    assert again.content_key("sm_90") != before
    assert _adds(again) == ["1234;"]


def test_the_users_copy_of_a_deep_header_is_hashed(installed, tmp_path):
    """A user -I directory that shadows a header CCCL includes is searched first, as NVRTC
    does, and keyed by content (it was not followed through the installed top.cuh)."""
    user = tmp_path / "user"
    (user / "lib" / "detail").mkdir(parents=True)
    (user / "lib" / "detail" / "mid.cuh").write_text("#pragma once\n#define DEEP 5\n")
    frag = CudaSource(text=SRC, where="x.py:1",
                      providers=HEADER_PROVIDERS, include_dirs=(str(user),))
    assert _adds(frag) == ["5;"]
    k = frag.content_key("sm_90")
    (user / "lib" / "detail" / "mid.cuh").write_text("#pragma once\n#define DEEP 6\n")
    assert CudaSource(text=SRC, where="x.py:1",
                      providers=HEADER_PROVIDERS, include_dirs=(str(user),)) \
        .content_key("sm_90") != k


def test_a_quoted_include_of_cccl_is_found_beside_it_before_the_users_dirs(installed,
                                                                        tmp_path):
    """NVRTC looks for "inner.cuh" beside mid.cuh first: an inner.cuh in a user directory
    is not the one read, and an edit to CCCL's still misses."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "inner.cuh").write_text("#define DEEP 99\n")
    frag = CudaSource(text=SRC, where="x.py:1",
                      providers=HEADER_PROVIDERS, include_dirs=(str(user),))
    assert _adds(frag) == ["1;"]
    k = frag.content_key("sm_90")
    (installed / "lib" / "detail" / "inner.cuh").write_text("#pragma once\n#define DEEP 77\n")
    again = CudaSource(text=SRC, where="x.py:1",
                       providers=HEADER_PROVIDERS, include_dirs=(str(user),))
    assert again.content_key("sm_90") != k and _adds(again) == ["77;"]


def test_splices_own_cccl_named_by_the_user_is_keyed_by_stat(installed):
    """include_dirs=cccl.include_dirs() (the module's documented use) names splice's own
    directory: its headers are keyed by size and mtime like when splice adds it, not read
    and hashed on every key (622 of them for <cub/block/block_reduce.cuh>)."""
    for named in (str(installed), str(installed) + "/"):
        frag = CudaSource(text=SRC, where="x.py:1",
                          providers=HEADER_PROVIDERS, include_dirs=(named,))
        headers = frag._headers(SRC)
        assert len(headers) == 3 and all(h.startswith("stat ") for _, h in headers)


def test_an_include_name_with_a_nul_is_not_a_raw_error(installed):
    src = '#include "a\0b.h"\n' + SRC
    assert CudaSource(text=src, where="x.py:1", providers=HEADER_PROVIDERS)._headers(src)


# --- the walk of a source with only toolkit headers is remembered, and checked --------

@pytest.fixture
def walks(monkeypatch):
    """How many times the include walk runs (splice.inputs.headers._walk)."""
    from splice.inputs import headers
    monkeypatch.setattr(headers, "_walks", {})
    count = [0]
    real = headers._walk

    def counting(*a, **k):
        count[0] += 1
        return real(*a, **k)
    monkeypatch.setattr(headers, "_walk", counting)
    return count


def test_a_remembered_walk_is_checked_not_redone(installed, walks):
    import os
    frag = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS)
    k = frag.content_key("sm_90")
    assert frag.content_key("sm_90") == k and walks[0] == 1
    # a header the walk read, touched (same bytes, a new mtime): walked again, a new key
    inner = installed / "lib" / "detail" / "inner.cuh"
    st = os.stat(inner)
    os.utime(inner, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert frag.content_key("sm_90") != k and walks[0] == 2


def test_a_header_placed_in_front_of_a_remembered_one_is_seen(installed, tmp_path, walks):
    user = tmp_path / "user"
    user.mkdir()
    frag = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS,
                      include_dirs=(str(user),))
    k = frag.content_key("sm_90")
    assert frag.content_key("sm_90") == k and walks[0] == 1
    (user / "lib" / "detail").mkdir(parents=True)       # where the walk found nothing
    (user / "lib" / "detail" / "mid.cuh").write_text("#pragma once\n#define DEEP 5\n")
    assert frag.content_key("sm_90") != k
    assert _adds(CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS,
                            include_dirs=(str(user),))) == ["5;"]


def test_a_source_with_a_user_header_is_walked_every_time(installed, tmp_path, walks):
    (tmp_path / "mine.h").write_text("#define MINE 1\n")
    frag = CudaSource(text='#include "mine.h"\n' + SRC, where="x.py:1",
                      providers=HEADER_PROVIDERS, include_dirs=(str(tmp_path),))
    frag.content_key("sm_90")
    frag.content_key("sm_90")
    assert walks[0] == 2


# --- #include MACRO inside toolkit headers (thrust's system headers) ---------------------

def _thrust_like(installed: Path) -> Path:
    """top.cuh reaching lib/sys/fast/detail/policy.h only through ``#include TAG``, TAG a
    macro whose value has another macro in it (thrust's system headers, commit 2cb0212)."""
    (installed / "lib" / "sys" / "fast" / "detail").mkdir(parents=True)
    policy = installed / "lib" / "sys" / "fast" / "detail" / "policy.h"
    policy.write_text("#pragma once\n#define POLICY 1\n")
    (installed / "lib" / "config.h").write_text(
        "#pragma once\n#define SYS_NAME fast\n#define SYS_ROOT lib/sys/SYS_NAME\n")
    (installed / "lib" / "top.cuh").write_text(
        "#pragma once\n#include <lib/config.h>\n#define TAG <SYS_ROOT/detail/policy.h>\n"
        "#include TAG\n#include <lib/detail/mid.cuh>\n")
    return policy


def test_a_toolkit_header_named_by_macros_inside_a_macro_is_followed(installed, walks):
    """thrust: ``#define TAG <ROOT/detail/policy.h>``, ``ROOT`` defined to a path with
    another macro in it, ``#include TAG``: every name the macros can make is followed, so
    an edit of the header it names changes the key (and the PCH's directory)."""
    policy = _thrust_like(installed)
    frag = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS)
    k = frag.content_key("sm_90")
    found = dict(headers.included(frag, SRC))
    assert str(policy) in found and found[str(policy)].startswith(headers.STAT)
    policy.write_text("#pragma once\n#define POLICY 22\n")
    assert frag.content_key("sm_90") != k


def test_a_toolkit_macro_include_splice_cannot_follow_turns_off_memo_and_pch(installed,
                                                                            walks):
    from splice.system import nvrtc_pch
    (installed / "lib" / "top.cuh").write_text(
        "#pragma once\n#define PASTE(a) <lib/a.h>\n#include PASTE(x)\n"
        "#include <lib/detail/mid.cuh>\n")
    frag = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS)
    found = headers.included(frag, SRC)
    assert any(ident == headers.UNRESOLVED for _, ident in found)
    headers.included(frag, SRC)
    assert walks[0] == 2                         # walked again: not remembered
    src = "#include <cub/block/block_scan.cuh>\n"
    assert not nvrtc_pch.wanted(src, [], found) and not nvrtc_pch.wanted(src, [], found)


# --- the walk remembered on disk, for the next process (issue 47) -------------------------

def _new_process(monkeypatch) -> None:
    """What a new process knows of earlier walks: only the cache's ``walk`` entries."""
    monkeypatch.setattr(headers, "_walks", {})


@pytest.fixture
def stored(monkeypatch):
    """Every walk of only toolkit headers stored on disk (these walks find a few headers,
    CCCL's some hundreds)."""
    monkeypatch.setattr(headers, "STORED_FROM", 1)


def test_a_walk_of_a_few_headers_is_not_stored(installed, walks, fresh_cache):
    from splice.system import cache
    CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS).content_key("sm_90")
    assert walks[0] == 1 and cache.entries("walk") == []


def test_a_walk_stored_by_one_process_answers_the_next(installed, walks, fresh_cache, stored,
                                                       monkeypatch):
    frag = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS)
    k = frag.content_key("sm_90")
    assert walks[0] == 1
    _new_process(monkeypatch)
    assert CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS) \
        .content_key("sm_90") == k
    assert walks[0] == 1                     # checked against the disk, not walked


@pytest.mark.parametrize("edit", ["deep", "through a macro #include", "placed in front",
                                  "touched", "removed"])
def test_a_stored_walk_never_hides_an_edit_from_the_next_process(installed, walks, stored,
                                                                 fresh_cache, monkeypatch,
                                                                 tmp_path, edit):
    """Each edit made between two processes changes the key the second one takes, which
    is the key a process with no stored walk takes."""
    import os
    user = tmp_path / "user"
    user.mkdir()
    policy = _thrust_like(installed)
    frag = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS,
                      include_dirs=(str(user),))
    k = frag.content_key("sm_90")
    inner = installed / "lib" / "detail" / "inner.cuh"
    if edit == "deep":
        inner.write_text("#pragma once\n#define DEEP 1234\n")
    elif edit == "through a macro #include":
        policy.write_text("#pragma once\n#define POLICY 22\n")
    elif edit == "placed in front":        # where the walk found nothing before
        (user / "lib" / "detail").mkdir(parents=True)
        (user / "lib" / "detail" / "mid.cuh").write_text("#pragma once\n#define DEEP 5\n")
    elif edit == "touched":                # same bytes, a new mtime
        st = os.stat(policy)
        os.utime(policy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    else:
        inner.unlink()
    _new_process(monkeypatch)
    again = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS,
                       include_dirs=(str(user),)).content_key("sm_90")
    assert again != k and walks[0] == 2      # the stored walk did not answer
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path / "another-cache"))
    _new_process(monkeypatch)
    assert CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS,
                      include_dirs=(str(user),)).content_key("sm_90") == again


@pytest.mark.parametrize("payload", [b"not json", b'{"found": 3}', b'{"probes": []}',
                                     b'{"found": [["a"]], "probes": []}'])
def test_a_stored_walk_of_another_shape_is_walked_again(installed, walks, fresh_cache, stored,
                                                        monkeypatch, payload):
    from splice.system import cache
    frag = CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS)
    k = frag.content_key("sm_90")
    [entry] = cache.entries("walk")
    header, _ = cache.read(entry, touch=False)
    cache.store_entry("walk", entry.stem, header["meta"], payload)
    _new_process(monkeypatch)
    assert CudaSource(text=SRC, where="x.py:1", providers=HEADER_PROVIDERS) \
        .content_key("sm_90") == k and walks[0] == 2
