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


def fake_dist(root, name: str, version: str, *requires: str, extras=()) -> None:
    """A distribution's metadata under ``root`` (a directory put first on ``sys.path`` or a
    child's ``PYTHONPATH``): what ``pip install`` of it leaves for ``importlib.metadata``,
    without its files."""
    from pathlib import Path
    info = Path(root) / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Provides-Extra: {x}\n" for x in extras)
        + "".join(f"Requires-Dist: {r}\n" for r in requires))
