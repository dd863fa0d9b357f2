"""A griffe extension for the API reference: splice's docstrings are Google style with a few
Sphinx habits (``:func:`extern```, ``::`` before an indented example). Rendered by
mkdocstrings as Markdown, a role is shown as code of its target (``extern``) and ``::`` as
``:``; the docstrings themselves stay as they are (``help()`` reads them as text)."""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:func|meth|class|mod|attr|data|exc|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"::$", re.M)


class RstRoles(griffe.Extension):
    """Rewrite Sphinx roles and literal-block markers in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is None:
            return
        text = _ROLE.sub(lambda m: f"`{m.group(1)}`", obj.docstring.value)
        obj.docstring.value = _LITERAL.sub(":", text)


class RuntimeDocstrings(griffe.Extension):
    """``splice.asm`` and ``splice.cuda`` are functions made at import (``_public_asm()``,
    ``_public_cuda()``) whose docstrings are assigned then: read statically they are bare
    attributes. Give the reference their docstrings from the imported objects."""

    NAMES = ("asm", "cuda")

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.path != "splice":
            return
        import importlib
        import inspect
        module = importlib.import_module("splice")
        for name in self.NAMES:
            attr = pkg.members[name]
            attr = attr.final_target if attr.is_alias else attr
            text = _ROLE.sub(lambda m: f"`{m.group(1)}`",
                             inspect.cleandoc(getattr(module, name).__doc__))
            attr.docstring = griffe.Docstring(_LITERAL.sub(":", text), parent=attr)
            attr.value = None
