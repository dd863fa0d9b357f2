"""A declaration's ``pure=``, ``inline=``, ``scope=`` and ``memory=`` become one frozen record,
:class:`splice.declare.declaring.CallOptions`, made once at the public door that took them
and validated in its ``__post_init__`` (issue 43, after Triton's ``CUDAOptions``): below the
doors no function takes them as keywords, and ``memory`` is an enum beside ``Scope``."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import cuda.tile as ct
import pytest

import splice
from splice.declare import declaring
from splice.declare.declaring import ASM_MEMORY, CallOptions
from splice.errors import SpliceDeclarationError
from splice.forms import FORMS
from splice.forms.base import Memory, Scope
from splice.types import parse_signature

PKG = Path(splice.__file__).resolve().parent
LOOSE = ("memory", "pure", "scope", "inline")
#: The public doors, which take the keywords as the user writes them (module, qualified
#: name), and the record's own constructor from them.
DOORS = {
    ("declare/externs.py", "extern"), ("declare/externs.py", "from_ptx"),
    ("declare/externs.py", "from_ltoir"), ("declare/externs.py", "from_object"),
    ("declare/externs.py", "Library.extern"),
    # splice.asm and splice.cuda: the public stubs, and the handlers cuTile's frontend
    # calls with their arguments inside a kernel
    ("declare/asm_frontend.py", "make_asm_function.asm"),
    ("declare/asm_frontend.py", "_handle_asm"),
    ("declare/cuda_frontend.py", "make_cuda_function.cuda"),
    ("declare/cuda_frontend.py", "_handle_cuda"),
    ("declare/declaring.py", "CallOptions.parse"),
}


def loose_keyword_functions(source: str) -> dict[str, list[str]]:
    """{qualified name: its parameters named like a declaration's options} of every
    function of ``source``, methods and nested functions included."""
    found: dict[str, list[str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    a = child.args
                    bad = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)
                           if p.arg in LOOSE]
                    if bad:
                        found[name] = bad
                visit(child, f"{name}.")
            else:
                visit(child, prefix)
    visit(ast.parse(source), "")
    return found


def test_no_function_below_the_doors_takes_the_options_as_keywords():
    found = {(str(p.relative_to(PKG)), name)
             for p in sorted(PKG.rglob("*.py"))
             for name in loose_keyword_functions(p.read_text())}
    assert found - DOORS == set()      # an internal function with a loose keyword
    assert DOORS - found == set()      # a door that no longer takes them: the list is stale


def test_the_rule_sees_parameters_methods_and_nested_functions():
    source = ("def f(x, *, memory='any'): pass\n"
              "class C:\n    def m(self, pure, /): pass\n"
              "def g():\n    def h(inline='auto', **kw): pass\n"
              "def ok(options, scope_name, memory_values): pass\n")
    assert loose_keyword_functions(source) == {"f": ["memory"], "C.m": ["pure"],
                                                "g.h": ["inline"]}


def test_each_public_door_makes_the_record_once(monkeypatch):
    made: list[str] = []
    parse = CallOptions.parse.__func__

    def counted(cls, what, **asked):
        made.append(what)
        return parse(cls, what, **asked)
    monkeypatch.setattr(CallOptions, "parse", classmethod(counted))
    src = 'extern "C" __device__ float f(float x) { return x; }'
    splice.extern(source=src, name="f", signature="float32(float32)", memory="any")
    splice.library(source=src).extern("f", signature="float32(float32)", scope="block")

    @splice.extern(source=src, inline="never")
    def f(x: ct.float32) -> ct.float32: ...
    assert [w.split(" at ")[0] for w in made] == ["extern 'f'"] * 3
    assert f._splice_extern.inline == "never"


def test_the_record_validates_what_it_is_given():
    what = "extern 'f' at k.py:3"
    for asked, says in [({"pure": 1}, "pure must be True or False"),
                        ({"inline": "sometimes"}, "inline must be 'auto', 'always' or 'never'"),
                        ({"scope": "warp"}, "scope must be 'element' or 'block' or"),
                        ({"scope": None}, "got None"),
                        ({"memory": "args"}, "memory must be 'any' or 'arguments', got 'args'"),
                        ({"memory": "none"}, "memory='none' is splice.asm's"),
                        ({"memory": None}, "got None")]:
        with pytest.raises(SpliceDeclarationError, match=f"^{what}: .*{says}"):
            CallOptions.parse(what, **asked)
    with pytest.raises(SpliceDeclarationError, match="a snippet has no pointer arguments"):
        CallOptions.parse(what, memory="arguments", memory_values=ASM_MEMORY)


def test_memory_is_an_enum_beside_scope_and_strings_are_taken_at_the_door():
    o = CallOptions.parse("x", scope=Scope.BLOCK, memory="arguments", pure=False)
    assert o.memory is Memory.ARGUMENTS and o.memory == "arguments"
    assert str(o.memory) == "arguments" and o.form is FORMS["block"]
    assert CallOptions.parse("x", memory=Memory.ARGUMENTS) == CallOptions.parse(
        "x", memory="arguments")
    assert CallOptions.parse("x", memory="none", memory_values=ASM_MEMORY).memory is \
        Memory.NONE
    bump = splice.extern(source='extern "C" __device__ void b(float *p) { *p += 1; }',
                         name="b", signature="void(float32*)", pure=False,
                         memory="arguments")
    assert bump._splice_extern.memory is Memory.ARGUMENTS


def test_the_record_is_frozen_and_a_changed_copy_is_validated_again():
    o = CallOptions.parse("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.pure = False      # type: ignore[misc]
    with pytest.raises(SpliceDeclarationError, match="inline must be"):
        dataclasses.replace(o, inline="sometimes")
    # the values a kind of declaration takes are not part of what the record compares
    assert CallOptions.parse("x") == CallOptions.parse("x", memory_values=ASM_MEMORY)


def test_declared_gives_the_forms_pure_and_refuses_memory_on_a_pure_declaration():
    sig = parse_signature("float32(float32)")
    block = CallOptions.parse("x", scope="block", memory="arguments")
    assert block.pure and not block.declared(sig, "x").pure   # a block call is never pure
    element = CallOptions.parse("x", memory="arguments")
    with pytest.raises(SpliceDeclarationError,
                       match=r"^y: memory='arguments' says .* the extern is pure"):
        element.declared(sig, "y")
    snippet = CallOptions.parse("x", memory="none", memory_values=ASM_MEMORY)
    with pytest.raises(SpliceDeclarationError, match=r"the snippet is pure"):
        snippet.declared(sig, "y")
    assert declaring.MEMORY == (Memory.ANY, Memory.ARGUMENTS)
