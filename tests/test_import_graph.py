"""The shape of the ``splice`` package's imports: no cycles, and ``import splice`` leaves
cuTile's compiler unloaded until a kernel is traced (issue 11).

The graph has an edge a -> b for every ``import``/``from ... import`` of splice module b in
module a, at module level *or inside a function*: a function-level import is still a
dependency (it only runs later), and a cycle through one is as hard to follow as any other.
Imports under ``if TYPE_CHECKING:`` count too: they never run, but a type one module names
and the other defines is a dependency all the same (and a cycle of them hides two modules
that need each other).
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

import splice
from support.env import python_env

PKG = Path(splice.__file__).resolve().parent


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node of ``tree``, ``if TYPE_CHECKING:`` ones included."""
    return (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def module_imports(source: str, modules: set[str], package: tuple[str, ...] = ("splice",)
                   ) -> set[str]:
    """The splice modules (of ``modules``, a subpackage's as "forms" and "forms.base";
    "__init__" for the package) that ``source``, a module of ``package``, imports, anywhere
    in it."""
    deps: set[str] = set()
    for node in _imports(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            assert node.level <= len(package), "a relative import above the package"
            parts = list(package[:len(package) - node.level + 1]) if node.level else []
            base = ".".join(parts + ([node.module] if node.module else []))
            # ``from . import x`` is an edge to x only, not to the package it names
            targets = ([] if node.level and not node.module else [base]) + \
                [f"{base}.{a.name}" for a in node.names]
        for parts in (t.split(".") for t in targets):
            if parts[0] != "splice":
                continue
            name = next((".".join(parts[1:k]) for k in (3, 2)
                         if len(parts) >= k and ".".join(parts[1:k]) in modules), None)
            if name is not None:
                deps.add(name)
            elif len(parts) == 1:
                deps.add("__init__")      # "import splice" / "from splice import x"
    return deps


def _sources() -> dict[str, tuple[Path, tuple[str, ...]]]:
    """{module name: (file, package)}: splice/*.py, and each subpackage's modules as
    "forms" (its __init__.py) and "forms.base"."""
    out = {p.stem: (p, ("splice",)) for p in PKG.glob("*.py")}
    for init in PKG.glob("*/__init__.py"):
        sub = init.parent.name
        for p in init.parent.glob("*.py"):
            name = sub if p.stem == "__init__" else f"{sub}.{p.stem}"
            out[name] = (p, ("splice", sub))
    return out


def import_graph() -> dict[str, set[str]]:
    """{module: the splice modules it imports}, modules named as in ``splice/`` ("pipeline",
    "__init__" for the package itself, "forms.base" in a subpackage)."""
    sources = _sources()
    modules = set(sources)
    return {m: module_imports(p.read_text(), modules, pkg) - {m}
            for m, (p, pkg) in sorted(sources.items())}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of modules, the first repeated last), or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_splice_has_no_import_cycle():
    # "__init__" is a node too: a module that imports the package (``import splice``) and
    # is imported by it closes a cycle; ``from . import x`` is an edge to x only
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle in splice/: " + " -> ".join(cycle or [])


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_checker_resolves_a_subpackages_relative_imports():
    source = ("from . import block\nfrom .base import Marker\nfrom .. import ptx\n"
              "from ..calls import call_block\n")
    assert module_imports(source, {"forms", "forms.block", "forms.base", "ptx", "calls",
                                   "block"}, ("splice", "forms")) == {
        "forms.block", "forms.base", "ptx", "calls"}
    assert "forms.fma_proof" in import_graph()["forms.element"]


def test_the_checker_counts_function_level_and_type_checking_imports():
    source = ("import os\nimport splice.ptx\nfrom .link import x\n"
              "def f():\n    from . import pipeline, nothing\n"
              "if TYPE_CHECKING:\n    from . import rewrite\n"
              "from splice import cache\nfrom splice.result import Build\n")
    assert module_imports(source, {"ptx", "link", "pipeline", "rewrite", "cache",
                                   "result"}) == {"ptx", "link", "pipeline", "rewrite",
                                                  "cache", "result", "__init__"}


def test_a_cycle_through_type_checking_imports_is_a_cycle():
    graph = {"forms.base": module_imports(
                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                 "    from ..sites import SiteInfo\n", {"sites", "forms.base"},
                 ("splice", "forms")),
             "sites": module_imports("from .forms.base import Marker\n",
                                     {"sites", "forms.base"})}
    assert find_cycle(graph) == ["forms.base", "sites", "forms.base"]


def _loaded_by_import_splice(*prefixes: str) -> list[str]:
    """The modules of ``prefixes`` that ``import splice`` loads, in a new process."""
    code = (f"import sys, splice\n"
            f"print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))")
    env = python_env(PKG.parent)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return ast.literal_eval(r.stdout)


def test_import_splice_loads_only_its_errors_and_code_identity():
    # every other public name is loaded on first use (splice.__getattr__): `import splice`
    # within 1.2x of `import cuda.tile` (issue 11)
    assert _loaded_by_import_splice("splice") == ["splice", "splice.errors", "splice.system",
                                                  "splice.system.identity"]


def test_no_lazy_public_name_is_a_submodule_name():
    # importing splice/<name>.py sets the package attribute <name> to the module: a public
    # function of that name, loaded lazily, would be replaced by it
    for name, (module, attr) in splice._LAZY.items():
        if attr is not None:
            assert not (PKG / f"{name}.py").exists() and not (PKG / name).is_dir(), name
        else:
            assert module == name


def test_a_documented_module_path_that_moved_still_imports():
    # ``from splice import cache`` (docs/guide/cache.md): the module in its layer now
    from splice import cache
    from splice.system import cache as in_its_layer
    assert cache is in_its_layer and "cache" not in splice.__all__


def test_every_public_name_resolves_after_every_submodule_is_imported():
    import importlib
    for name in sorted(_sources()):
        if name not in ("__init__", "__main__", "jax"):
            importlib.import_module(f"splice.{name}")
    for name in splice.__all__:
        value = getattr(splice, name)
        module, attr = splice._LAZY.get(name, (None, ""))
        assert (type(value).__name__ == "module") == (attr is None), name
    assert callable(splice.asm) and callable(splice.extern) and splice.asm.__module__ == "splice"
    assert set(splice._LAZY) <= set(splice.__all__) and set(splice.__all__) <= set(dir(splice))


def test_import_splice_leaves_cutiles_compiler_unloaded():
    # cuTile's compiler (cuda.tile._compile, its IR and passes) is imported by the first
    # trace (splice.system._cutile), not by `import splice`: it takes longer than cuda.tile
    # itself
    assert _loaded_by_import_splice("cuda.tile._compile", "cuda.tile._ir",
                                    "cuda.tile._passes", "splice.tracing.tile_ir") == []


def test_the_generic_cuda_c_input_imports_no_header_library():
    # CCCL and NVSHMEM are header providers a CUDA C source is given (splice.externs), so
    # that the fragments sit below them (the module graph was 14 floors through them)
    assert not import_graph()["inputs.fragments"] & {"inputs.nvshmem", "inputs.cccl"}


#: splice's layers from the top down, each floor a tuple: a module imports only modules of
#: its own package (or module) and of the floors below its own, never one beside it on its
#: floor. A name is a subpackage of ``splice/`` or a module directly in it (the public
#: surface: ``__init__``, ``__main__``, ``errors``, ``types`` and the modules users import
#: by name). ``docs/design.md``'s module map is this table, row for row.
FLOORS = (
    ("__main__",),
    ("__init__", "testing"),
    ("jax", "cub", "integrations", "compat", "cccl", "toolchain"),
    ("declare", "driver"),
    ("tracing",),
    ("forms", "inputs"),
    ("analysis",),
    ("ptxtools",),
    ("types",),
    ("system",),
    ("errors",),
)
FLOOR = {layer: len(FLOORS) - i for i, floor in enumerate(FLOORS) for layer in floor}


def _layer(module: str) -> str:
    return module.split(".")[0]


def layer_breaches(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """{module: the modules it imports that are not below its floor nor in its own layer}."""
    bad = {m: sorted(d for d in deps if _layer(d) != _layer(m) and
                     FLOOR[_layer(d)] >= FLOOR[_layer(m)])
           for m, deps in graph.items()}
    return {m: d for m, d in bad.items() if d}


def test_every_module_has_a_floor():
    # every file of the package is a node of the graph (none in a package below a
    # subpackage, which _sources would not read), and every node's layer has a floor
    assert {p for p, _ in _sources().values()} == set(PKG.rglob("*.py"))
    assert sorted({_layer(m) for m in import_graph()} - set(FLOOR)) == []


def test_every_module_imports_only_the_floors_below_its_own():
    # function-level and TYPE_CHECKING imports included (import_graph)
    assert layer_breaches(import_graph()) == {}


def test_the_floor_rule_sees_an_import_up_and_one_beside():
    graph = {"forms.block": {"forms.base", "analysis.control", "inputs.fragments"},
             "inputs.fragments": {"system.cache", "declare.externs"},
             "system.cache": {"system.safe_fs", "errors"}}
    assert layer_breaches(graph) == {"forms.block": ["inputs.fragments"],
                                     "inputs.fragments": ["declare.externs"]}


def test_at_most_eight_modules_sit_directly_in_splice():
    # the public surface only; every other module is in its layer's package (issue 43)
    top = sorted(p.stem for p in PKG.glob("*.py"))
    assert len(top) <= 8, top
    assert set(top) <= {layer for floor in FLOORS for layer in floor}


def test_the_module_map_in_the_design_notes_is_the_floor_table():
    text = (PKG.parent / "docs" / "design.md").read_text()
    rows = text.split("## Module map", 1)[1].split("\n\n| floor |", 1)[1].split("\n\n")[0]
    floors = [tuple(re.findall(r"`([\w]+)(?:/|\.py)`", row.split("|")[2]))
              for row in rows.splitlines()[2:]]
    assert tuple(floors) == FLOORS


def test_the_input_kinds_import_no_tracing_form_declaration_or_driver():
    # the device code and its compile sit below what declares and calls it (issue 43)
    graph = import_graph()
    bad = {m: sorted(d for d in reached(graph, m)
                     if _layer(d) in ("tracing", "forms", "declare", "driver", "cub"))
           for m in graph if _layer(m) == "inputs"}
    assert not {m: d for m, d in bad.items() if d}


#: The PTX wing (issue 32): the PTX tools, the analyses, the forms and the rewriter work on
#: PTX alone, so that each can be loaded and tested on hand-written PTX.
PTX_WING = ("ptxtools", "analysis", "forms")
#: What of the toolchain and the store the PTX wing must not reach (the floors keep it
#: below the input kinds, the tracing and the driver): the compilers, the toolchain runner
#: and the cache.
NOT_BELOW_PTX = ("system.toolchain", "system.cuda_libs", "system.nvrtc_pch", "system.cache")


def reached(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every module ``module`` imports, directly or through others."""
    seen: set[str] = set()
    work = [module]
    while work:
        for d in graph.get(work.pop(), ()):
            if d not in seen:
                seen.add(d)
                work.append(d)
    return seen


def test_the_ptx_wing_reaches_no_compiler_toolchain_or_cache():
    graph = import_graph()
    bad = {m: sorted(d for d in reached(graph, m) if d in NOT_BELOW_PTX)
           for m in graph if _layer(m) in PTX_WING}
    assert not {m: d for m, d in bad.items() if d}


def test_no_form_reaches_the_rewriter():
    # the rewriter drives the forms; a form that needed it would be a cycle in waiting
    graph = import_graph()
    assert [m for m in graph if _layer(m) == "forms" and m != "forms.rewrite"
            and "forms.rewrite" in reached(graph, m)] == []


def test_the_rule_checker_sees_a_function_level_import_of_the_compiler():
    source = "def f():\n    from ..inputs import fragments\n    return fragments\n"
    deps = module_imports(source, {"inputs.fragments", "forms.block"}, ("splice", "forms"))
    assert deps == {"inputs.fragments"}
    graph = {"forms.block": deps, "inputs.fragments": {"system.toolchain"},
             "system.toolchain": set()}
    assert reached(graph, "forms.block") == {"inputs.fragments", "system.toolchain"}
    assert layer_breaches(graph) == {"forms.block": ["inputs.fragments"]}


def test_every_subpackage_says_its_job_and_what_it_may_import():
    for init in sorted(PKG.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "import" in doc.lower() and len(doc.splitlines()) >= 3, init.parent.name


#: The modules of splice/forms/ beside the forms (the rewriter, the callee effects, the CUB
#: names; moved there by issue 43): no form's code, so what holds outside the forms holds
#: for them (as in tests/test_forms.py).
BESIDE_THE_FORMS = ("rewrite.py", "effects.py", "cub_names.py")
#: A form's capability flags (splice.forms.base.CallForm): read only by the forms, which
#: answer the questions the other modules ask (``form.runs_convergently()``, ...).
FORM_FLAGS = ("runs_collectives", "per_function", "takes_tiles", "straight_line_snippets")


def flag_reads(source: str) -> list[str]:
    """The capability flags ``source`` reads as attributes (``x.per_function``)."""
    return [n.attr for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and n.attr in FORM_FLAGS]


def test_no_module_outside_the_forms_reads_a_forms_capability_flags():
    # the modules beside the forms in splice/forms/ (BESIDE_THE_FORMS) ask the form too
    found = {str(p.relative_to(PKG)): flag_reads(p.read_text())
             for p in sorted(PKG.rglob("*.py"))
             if p.parent.name != "forms" or p.name in BESIDE_THE_FORMS}
    assert not {p: f for p, f in found.items() if f}
    assert flag_reads("if site.form.per_function and f(ext.form.runs_collectives): pass") == [
        "per_function", "runs_collectives"]


def test_no_module_of_splice_is_longer_than_750_lines():
    # a module that grows past it has two jobs: split it along them (issue 32)
    long = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 750}
    assert not long


#: What the driver may import of the forms: the registry, the protocol and site records,
#: and the rewriter it runs. Every check of a site's callees is a form's answer
#: (``check_callees``, ``check_linked_callees``), never a check module the driver calls.
DRIVER_ASKS = ("forms", "forms.base", "forms.rewrite")


def driver_reaches_past_the_forms(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """{driver module: the analyses and form modules besides :data:`DRIVER_ASKS` it
    imports}."""
    bad = {m: sorted(d for d in deps if _layer(d) == "analysis" or
                     (_layer(d) == "forms" and d not in DRIVER_ASKS))
           for m, deps in graph.items() if _layer(m) == "driver"}
    return {m: d for m, d in bad.items() if d}


def test_the_driver_asks_the_forms_for_every_callee_check():
    # issue 43: stages.py imported memory_proof, effects, element_callees and staging
    assert driver_reaches_past_the_forms(import_graph()) == {}
    planted = {"driver.stages": {"forms.rewrite", "analysis.memory_proof", "forms.effects",
                                 "ptxtools.link"},
               "driver.pipeline": {"forms.base"}}
    assert driver_reaches_past_the_forms(planted) == {
        "driver.stages": ["analysis.memory_proof", "forms.effects"]}
