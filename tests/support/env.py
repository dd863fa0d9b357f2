"""The environment of a child Python process a test starts."""

from __future__ import annotations

import os


def python_env(*paths, **variables: str) -> dict[str, str]:
    """``os.environ`` plus ``variables``, with ``paths`` first on ``PYTHONPATH`` and the
    parent's ``PYTHONPATH`` after them: a machine may keep the dependencies there (the GPU
    machine's cuda-tile is in ``/tmp/site``), and the child must still find them."""
    parent = os.environ.get("PYTHONPATH")
    search = [str(p) for p in paths] + ([parent] if parent else [])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(search), **variables)
