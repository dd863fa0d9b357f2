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
