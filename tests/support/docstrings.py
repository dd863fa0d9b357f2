"""Reading a public function's docstring against its signature (tests/test_docstrings.py,
tests/test_cub_ops.py)."""

import inspect
import re


def undocumented(fn) -> list[str]:
    """The parameters of ``fn`` its docstring's ``Args:`` section does not name."""
    doc = inspect.getdoc(fn) or ""
    args = re.split(r"^(?:Returns|Raises):", doc.split("Args:", 1)[-1], flags=re.M)[0] \
        if "Args:" in doc else ""
    return [p for p in inspect.signature(fn).parameters if p != "self"
            and not re.search(rf"(?<![\w.`]){re.escape(p)} \(|^\s*\**{re.escape(p)}\b", args,
                             re.M)]
