"""The test suite's own shape (issue 13): shared helpers live in ``tests/support/``; no test
module imports another (an import of a test module runs its module-level code and couples
two subjects)."""

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_no_test_module_imports_another():
    test_modules = {p.stem for p in TESTS.glob("test_*.py")}
    offenders = {p.name: sorted(_imported_modules(p) & (test_modules | {"conftest"}))
                 for p in sorted(TESTS.rglob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}, \
        "move what they share into tests/support/"


def test_every_design_section_the_code_cites_exists():
    import re
    root = TESTS.parent
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', (root / "docs" / "design.md").read_text()))
    cited = {(p.name, a) for p in (root / "splice").rglob("*.py")
             for a in re.findall(r"docs/design\.md#([\w-]+)", p.read_text())}
    assert cited and not {c for c in cited if c[1] not in anchors}
    assert not [p.name for p in (root / "splice").rglob("*.py") if "DESIGN.md" in p.read_text()]
