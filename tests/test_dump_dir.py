"""``$SPLICE_DUMP_DIR`` that cannot be written (a file, under a file): a SpliceError naming
the kernel and the variable, not a raw OSError out of the build (or the launch)."""

import cuda.tile as ct
import pytest

import splice
from support import kernels as K

SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 512)


@pytest.mark.parametrize("where", ["file", "under_a_file"])
def test_unwritable_dump_dir(fresh_cache, tmp_path, monkeypatch, where):
    f = tmp_path / "afile"
    f.write_text("x")
    monkeypatch.setenv("SPLICE_DUMP_DIR", str(f if where == "file" else f / "sub"))
    with pytest.raises(splice.SpliceToolchainError) as info:
        splice.build(K.ptx_kernel, SIG, "sm_90")
    msg = str(info.value)
    assert "SPLICE_DUMP_DIR" in msg and "kernel 'ptx_kernel'" in msg and "kernels.py:" in msg
    assert splice.system.cache.entries() == []
