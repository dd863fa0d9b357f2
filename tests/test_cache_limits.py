"""Odd values of the cache limit: whatever ``$SPLICE_CACHE_MAX_BYTES`` or ``--max-bytes``
holds, the answer is the limit, a warning and the default, or an argparse error: never a
raw ``ValueError`` out of a build or the CLI."""

import os

import pytest

from splice.__main__ import main
from splice.system import cache


@pytest.mark.parametrize("value", ["²", "4GiB", "-5", "1e9", "0x10", " "])
def test_a_bad_limit_never_raises(monkeypatch, value):
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", value)
    cache._warn_bad_limit.cache_clear()
    with pytest.warns(RuntimeWarning) if value.strip() else _no_warning():
        assert cache.max_bytes() == cache.DEFAULT_MAX_BYTES


def test_a_limit_with_spaces_and_zero(monkeypatch):
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", " 0 ")
    assert cache.max_bytes() == 0


@pytest.mark.parametrize("value", ["²", "-1", "4GiB"])
def test_prune_max_bytes_is_an_argparse_error(value, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as info:
        main(["cache", "prune", "--max-bytes", value])
    assert info.value.code == 2
    assert "not a byte count" in capsys.readouterr().err


class _no_warning:
    def __enter__(self):
        import warnings
        self._c = warnings.catch_warnings()
        self._c.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        self._c.__exit__(*exc)


def test_clear_resets_the_byte_count(tmp_path, monkeypatch, capsys):
    """``cache clear`` left ``.size`` at the old total, so the count no longer matched the
    (empty) cache: the next stores scanned the whole cache early."""
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    for i in range(3):
        cache.store("kernel", f"k{i}", {}, b"x" * 1000)
    assert int((tmp_path / ".size").read_text()) > 3000
    assert main(["cache", "clear"]) == 0
    assert "removed 3 entries" in capsys.readouterr().out
    assert cache.entries() == [] and (tmp_path / ".size").read_text() == "0"


def test_files_that_are_not_entries_are_never_evicted_or_cleared(tmp_path, monkeypatch):
    """SPLICE_CACHE_DIR pointed at a shared directory (/tmp, ~/.cache): a user's
    ``<dir>/proj/build/model.bin`` looked like an entry (``<kind>/<xx>/<name>.bin``), was
    counted, evicted first (oldest) and deleted by ``cache clear``."""
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    mine = tmp_path / "proj" / "ab" / "model.bin"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"weights" * 100)
    os.utime(mine, (1, 1))   # the oldest file: first to go
    lookalike = tmp_path / "proj" / "01" / ("0" * 64 + ".bin")   # wrong subdirectory
    lookalike.parent.mkdir()
    lookalike.write_bytes(b"x")
    monkeypatch.setenv("SPLICE_CACHE_MAX_BYTES", "0")
    cache.store("kernel", "k", {}, b"x" * 100)
    assert mine.exists() and lookalike.exists()
    assert [p.parent.parent.name for p in cache.entries()] == ["kernel"]
    assert main(["cache", "clear"]) == 0
    assert mine.exists() and lookalike.exists() and cache.entries() == []


@pytest.mark.parametrize("header", [b"[1]", b"3", b'"x"', b"null"])
def test_an_entry_whose_header_is_not_an_object_is_corrupt(tmp_path, monkeypatch, header):
    """An edited entry with a JSON header that is not an object raised AttributeError
    (``.get`` on a list) out of every load -- out of the user's build."""
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    cache.store("kernel", "k", {}, b"payload")
    [entry] = cache.entries()
    entry.write_bytes(cache._MAGIC + header + b"\npayload")
    assert cache.load("kernel", "k") is None and not entry.exists()


def test_an_edited_meta_fails_the_checksum(tmp_path, monkeypatch):
    """The header's meta (a kernel's call sites, its host-filled NVSHMEM state) is used on
    a hit as much as the cubin; the checksum covered only the payload, so a flipped
    digit in the meta was served."""
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    cache.store("kernel", "k", {"host_filled": ["a"], "n": 12}, b"payload")
    [entry] = cache.entries()
    data = entry.read_bytes()
    assert b'"n": 12' in data
    entry.write_bytes(data.replace(b'"n": 12', b'"n": 13'))
    assert cache.load("kernel", "k") is None and not entry.exists()


@pytest.mark.parametrize("action", ["size", "list", "clear"])
def test_max_bytes_outside_prune_is_refused(action, tmp_path, monkeypatch, capsys):
    """``cache clear --max-bytes N`` cleared everything and ``cache size --max-bytes N``
    reported the env limit: the option was silently ignored."""
    monkeypatch.setenv("SPLICE_CACHE_DIR", str(tmp_path))
    cache.store("kernel", "k", {}, b"x")
    assert main(["cache", action, "--max-bytes", "5"]) == 2
    assert "--max-bytes is an option of 'cache prune'" in capsys.readouterr().err
    assert len(cache.entries()) == 1


def test_a_cache_dir_with_a_tilde_is_under_home(tmp_path, monkeypatch):
    # SPLICE_CACHE_DIR="~/x" set from Python (or a .env file) reaches splice unexpanded:
    # it must not create a directory named "~" in the working directory
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SPLICE_CACHE_DIR", "~/splice-cache")
    monkeypatch.chdir(tmp_path)
    assert cache.cache_root() == tmp_path / "splice-cache"
    cache.store("kernel", "0" * 64, {"symbol": "k"}, b"cubin")
    assert (tmp_path / "splice-cache").is_dir() and not (tmp_path / "~").exists()
