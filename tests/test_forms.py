"""Call forms (splice.forms): the registry validates a declaration's scope, and a form defined
outside ``splice/forms/`` -- here one registered by this test only -- runs through the
declaration, the trace, the rewriter and the report without any other change to splice."""

from __future__ import annotations

import dataclasses

import cuda.tile as ct
import pytest

import splice
from splice import forms
from splice.errors import SpliceDeclarationError
from splice.forms import element
from splice.ptx import Module
from splice.rewrite import splice_calls
from support import kernels as K
from support.sites import site_call

ConstInt = ct.Constant[int]


class VoidOnly(element.ElementAtomic):
    """A test form: an element call on an atomic marker that takes void externs only and
    reports itself by its own summary."""

    scope = "test_void"   # type: ignore[assignment]
    span_kind = "test call"

    def declare(self, sig, pure, what):
        if sig.result is not None:
            raise SpliceDeclarationError(f"{what}: a test_void extern returns nothing")
        return False

    def for_call(self, pure_with_result, atomic):
        return self

    def with_marker(self, marker):
        return self

    def describe(self, span):
        return f"test_void call of {span.owner}"

    def summary(self, info):
        return f"site {info.index}: {info.extern}, test_void, {info.instances} call(s)"


VOID_ONLY = VoidOnly()


@pytest.fixture
def void_form():
    forms.register("test_void", VOID_ONLY)
    yield VOID_ONLY
    del forms.FORMS["test_void"]


TICK_SRC = 'extern "C" __device__ void tick(int* c, int v) { atomicAdd(c, v); }'


def test_scope_is_validated_against_the_registry(void_form):
    ext = splice.extern(source=TICK_SRC, name="tick", signature="void(int32*, int32)",
                        scope="test_void")(lambda c, v: None)._splice_extern
    assert ext.form is VOID_ONLY and ext.scope == "test_void" and not ext.pure
    with pytest.raises(SpliceDeclarationError, match="a test_void extern returns nothing"):
        splice.extern(source="", name="f", signature="int32(int32)", scope="test_void")(
            lambda x: None)
    del forms.FORMS["test_void"]
    try:
        with pytest.raises(SpliceDeclarationError,
                           match="scope must be 'element' or 'block' or 'warpgroup', "
                                 "got 'test_void'"):
            splice.extern(source=TICK_SRC, name="tick", signature="void(int32*, int32)",
                          scope="test_void")(lambda c, v: None)
    finally:
        forms.register("test_void", VOID_ONLY)


def test_builtin_scopes_map_to_their_forms():
    assert forms.form_of("element", "x") is element.ATOMIC
    assert forms.form_of(forms.Scope.BLOCK, "x") is forms.FORMS["block"]
    assert element.ATOMIC.for_call(True, False) is element.FMA
    assert element.ATOMIC.for_call(True, True) is element.ATOMIC
    assert element.ATOMIC.for_call(False, False) is element.ATOMIC
    assert element.FMA.with_marker(forms.Marker.ATOMIC) is element.ATOMIC


def test_a_registered_form_rewrites_its_sites(void_form):
    text = (".version 8.0\n.target sm_90a\n.address_size 64\n"
            ".visible .global .align 8 .b8 __splice_marker_0[8];\n"
            ".visible .entry k()\n{\n\t.reg .b64 %rd<9>;\n"
            "\tmov.u64 \t%rd1, __splice_marker_0;\n"
            "\tatom.global.cas.b64 \t%rd2, [%rd1], %rd3, %rd4;\n\tret;\n}\n")
    site = site_call(0, "void(int64, uint32)")
    site = dataclasses.replace(site, form=VOID_ONLY)
    rep = splice_calls(Module(text), {0: site}, kernel_name="k")
    assert rep.replaced == {0: 1}
    assert "call callee0, (__splice_p0, __splice_p1);" in rep.ptx
    assert [s.kind for s in rep.spans] == ["call"]   # the element sequence it inherits
    Module(rep.ptx)


tick = None


def _tick():
    global tick
    if tick is None:
        tick = splice.extern(source=TICK_SRC, name="tick", signature="void(int32*, int32)",
                             scope="test_void", inline="never")(lambda c, v: None)
    return tick


def test_a_registered_form_compiles_through_the_pipeline(void_form):
    fn = _tick()

    @splice.kernel
    def tick_kernel(x, counter, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        fn(counter, t)

    sig = K.signature(K.array(ct.int32), K.array(ct.int32), 128)
    b = splice.compile(tick_kernel, sig, "sm_90")
    [info] = b.sites
    assert info.form is VOID_ONLY
    assert str(info) == f"site 0: tick, test_void, {info.instances} call(s)"
    assert info.instances > 0 and not info.inlined
    assert b.spliced_ptx.count("\tcall tick, (") == info.instances


def test_no_stage_outside_the_forms_tests_a_scope_or_a_marker():
    # the forms answer for themselves: a new form is one module and one registry line
    import re
    from pathlib import Path
    tests = re.compile(r"""(scope\s*[!=]=|[!=]=\s*["'](?:block|element)["']|\bMarker\.|"""
                       r"""getattr\([^)]*["']scope["']|\bis\s+Marker\b)""")
    pkg = Path(splice.__file__).resolve().parent
    found = [f"{p.name}:{n}: {line.strip()}" for p in sorted(pkg.glob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if tests.search(line)]
    assert found == []
    assert tests.search('if ext.scope == "block":') and tests.search("s.marker is Marker.FMA")
