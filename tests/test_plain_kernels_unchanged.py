"""Importing splice changes nothing for plain ``@ct.kernel`` kernels: splice wraps cuTile's
dataflow analysis (``splice.system._cutile._install_alias_hook``) at its first trace, and a plain
kernel compiled in that process must give cuTile's Tile IR bytecode and cubin byte for byte.
Two fresh processes (``tests/plain_bytecode_child.py``): one never imports splice, the other
compiles spliced kernels (and the plain ones through splice) first; both export the plain
kernels with cuTile's own ``export_kernel``."""

import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).parent / "plain_bytecode_child.py"


def _hashes(*flags):
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, str(CHILD), *flags], capture_output=True,
                          text=True, env=env, timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_plain_kernels_bytecode_and_cubin_unchanged_by_splice():
    plain = _hashes()
    spliced = _hashes("--splice")
    assert plain.pop("splice imported") is False
    assert spliced.pop("splice imported") is True
    assert spliced.pop("hook installed") is True      # the hook ran for these kernels
    assert len(plain) == 9 and sum(k.endswith(".cubin") for k in plain) == 2
    assert spliced == plain
