"""Scripts (examples, recipes, the README's blocks) imported as modules by the tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load_script(path: Path, name: str, monkeypatch):
    """Import a file as a module (cuTile reads a kernel's source from its file); relative
    paths in it resolve from its directory."""
    monkeypatch.chdir(path.parent)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, mod)
    spec.loader.exec_module(mod)
    return mod
