"""How many cases each fuzzer runs: CI's counts where ``.ci/run`` sets them, fewer locally.

``.ci/run`` exports each fuzzer's variable with the count CI runs; a local run without it
takes the smaller default, so that a targeted ``pytest tests/test_rewrite.py`` is quick.
Set the variable to run CI's count (or more) locally.
"""

import os


def examples(variable: str, local: int) -> int:
    """``$<variable>`` as an integer, else ``local``."""
    return int(os.environ.get(variable) or local)
