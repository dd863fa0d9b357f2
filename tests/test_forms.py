"""Call forms (splice.forms): the registry validates a declaration's scope, and a form defined
outside ``splice/forms/`` -- here one registered by this test only -- runs through the
declaration, the trace, its own callee check, the rewriter (its own span kind) and the report
without any other change to splice."""

from __future__ import annotations

import dataclasses

import cuda.tile as ct
import pytest

import splice
from splice import forms
from splice.errors import SpliceDeclarationError, SpliceLinkError
from splice.forms import element
from splice.forms.rewrite import splice_calls
from splice.ptxtools.ptx import Module, parse_instruction
from support import kernels as K
from support.sites import site_call

ConstInt = ct.Constant[int]


class VoidOnly(element.ElementAtomic):
    """A test form: an element call (atomic marker) of void externs whose callees store to
    no global memory (they count with atomics), whose snippets do not trap; own span kind."""

    scope = "test_void"   # type: ignore[assignment]
    span_kind = "test call"

    def __init__(self):
        self.checked: list[list[str]] = []    # the extern names of each check_callees call

    def check_callees(self, sites, fragments, target, keys, kernel):
        self.checked.append([s.extern.name for s in sites])
        for site in sites:
            ext = site.extern
            mod = fragments[keys[id(ext.fragment)]][1]
            fn = mod.functions[ext.symbol]
            stores = [st for st in mod.body_statements(fn)
                      if st.kind == "instruction" and parse_instruction(st, mod.text).base == "st"]
            if stores:
                raise SpliceLinkError(f"test_void extern '{ext.name}', called at "
                                      f"{site.where}, stores to memory: "
                                      f"{stores[0].text(mod.text).strip()}")
        super().check_callees(sites, fragments, target, keys, kernel)  # and every callee's

    def declare(self, sig, options, what):
        if sig.result is not None:
            raise SpliceDeclarationError(f"{what}: a test_void extern returns nothing")
        return False

    def for_call(self, pure_with_result, atomic):
        return self

    def with_marker(self, marker):
        return self

    def check_snippet(self, text, pack):
        return "a test_void snippet does not trap" if "trap" in text else None

    def describe(self, span):
        return f"test_void call of {span.owner}"

    def summary(self, info):
        return f"site {info.index}: {info.extern}, test_void, {info.instances} call(s)"


VOID_ONLY = VoidOnly()


@pytest.fixture
def void_form():
    forms.register("test_void", VOID_ONLY)
    VOID_ONLY.checked.clear()
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
    # the element sequence it inherits, under its own span kind
    assert [(s.kind, s.site, s.instance) for s in rep.spans] == [("test call", 0, 0)]
    assert forms.of_span(rep.spans[0]) is VOID_ONLY
    assert "\tcall callee0, (__splice_p0, __splice_p1);" in rep.spans[0].text(rep.ptx)
    Module(rep.ptx)


tick = None
put = None
twice = None


def _put():
    global put
    if put is None:
        put = splice.extern(
            source='extern "C" __device__ void put(int* c, int v) { c[v & 1] = v; }',
            name="put", signature="void(int32*, int32)", scope="test_void",
            inline="never")(lambda c, v: None)
    return put


def _twice():
    global twice
    if twice is None:
        twice = splice.extern(source='extern "C" __device__ int twice(int v) { return 2 * v; }',
                              name="twice", signature="int32(int32)")(lambda v: None)
    return twice


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
    assert [s.kind for s in b.spans if s.site == 0] == ["test call"] * info.instances
    assert void_form.checked == [["tick"]]


def test_a_registered_form_checks_its_own_callees(void_form):
    # the form's check_callees runs once, on its own sites only (not the element site beside
    # them), and its refusal is the build's error
    tick_fn, put_fn, twice_fn = _tick(), _put(), _twice()

    @splice.kernel
    def mixed(x, counter, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        tick_fn(counter, twice_fn(t))
        put_fn(counter, t)

    sig = K.signature(K.array(ct.int32), K.array(ct.int32), 128)
    with pytest.raises(SpliceLinkError, match=r"test_void extern 'put', called at .*"
                                              r"test_forms\.py:\d+, stores to memory: st\."):
        splice.compile(mixed, sig, "sm_90")
    assert void_form.checked == [["tick", "put"]]


def test_a_registered_form_checks_its_own_snippets(void_form):
    @splice.kernel
    def trapping(x, TILE: ConstInt):
        splice.asm("trap;", scope="test_void")

    with pytest.raises(splice.SpliceCallError, match=r"inline PTX at .*test_forms\.py:\d+: a "
                                                     r"test_void snippet does not trap"):
        splice.compile(trapping, K.signature(K.array(ct.int32), 128), "sm_90")


_BRANCH = ("'bra': move the control flow into the kernel (an if on a scalar) or into a CUDA "
           "C extern")
_STRAIGHT = "a block-scope snippet must be straight-line PTX, and this one has "


@pytest.mark.parametrize("text, pack, why", [
    ("add.s32 %a0, %a1, 1; // bra L; L:", 1, None),        # comments are not code
    ("/* ret; */ mov.b32 %a0, %a1;", 1, None),
    ("mov.b32 %a0, %a1;", 2, "pack=2 packs tile elements; a block-scope snippet takes scalars"),
    ("{ .reg .pred %p; setp.eq.s32 %p, %a1, 0; @%p bra L; mov.b32 %a0, %a1; L: }", 1,
     _STRAIGHT + _BRANCH),
    ("{ .reg .pred %p; setp.eq.s32 %p, %a1, 0; @%p bra L; mov.b32 %a0, %a1; }", 1,
     _STRAIGHT + _BRANCH),
    ("{ call.uni f, (); }", 1, _STRAIGHT + "'call': move the control flow into the kernel "
                                           "(an if on a scalar) or into a CUDA C extern"),
    ("mov.b32 %a0, %a1; exit;", 1, _STRAIGHT + "'exit': move the control flow into the "
                                               "kernel (an if on a scalar) or into a CUDA C "
                                               "extern"),
    ("L: mov.b32 %a0, %a1;", 1, _STRAIGHT + "a label"),
])
def test_cooperative_forms_take_straight_line_snippets(text, pack, why):
    # every thread of the group runs a cooperative snippet: control flow in it could send
    # them different ways around the barriers; an element snippet has no such rule. The
    # form's own rule (check_snippet: pack=) first, then asm_check's straight-line mode,
    # which the form asks for with straight_line_snippets
    from splice.analysis.asm_check import SnippetFault, check_snippet

    def refusal(form):
        why = form.check_snippet(text, pack)
        if why is not None:
            return why
        try:
            check_snippet(text, ["%a0"], [], straight_line=form.scope
                          if form.straight_line_snippets else None)
        except SnippetFault as e:
            return str(e)
        return None
    got = refusal(forms.FORMS["block"])
    assert got == why or (why is not None and got is not None and got.startswith(why)), got
    got_wg = refusal(forms.FORMS["warpgroup"])
    assert (got_wg is None) == (why is None)
    if why is not None:
        assert got_wg.startswith(why.replace("block-scope", "warpgroup-scope"))
    assert forms.FORMS["element"].check_snippet(text, pack) is None
    assert not forms.FORMS["element"].straight_line_snippets


@pytest.mark.parametrize("scope", ["block", "warpgroup"])
def test_cooperative_forms_refuse_a_tile_for_a_scalar_parameter(scope):
    # one rule (BlockForm.check_arguments) serves both cooperative scopes, named for each
    ext = splice.extern(source='extern "C" __device__ float f(float x) { return x; }',
                        name="f", signature="float32(float32)", scope=scope)

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=t + ext(t))
    with pytest.raises(splice.SpliceCallError) as e:
        splice.compile(kern, K.signature(K.array(ct.float32), K.array(ct.float32), 128),
                       "sm_90")
    assert (f"argument 1 is a float32 tile of shape (128,); a {scope}-scope extern "
            f"(scope=\"{scope}\") takes scalars (0-d tiles, Python constants) and pointers "
            f"(arrays) where its signature names them: declare the parameter "
            f"splice.tile(float32) to pass the whole tile (staged in shared memory), or "
            f"reduce the tile to a scalar") in str(e.value)
    assert "test_forms.py" in str(e.value)


#: The modules of splice/forms/ beside the forms (the rewriter, the callee effects, the CUB
#: names; moved there by issue 43): no form's code, so what holds outside the forms holds
#: for them (as in tests/test_import_graph.py).
BESIDE_THE_FORMS = ("rewrite.py", "effects.py", "cub_names.py")


def _outside_the_forms(pkg):
    """The modules of splice/ (its subpackages too) outside splice/forms/, and those beside
    the forms in it."""
    return [p for p in sorted(pkg.rglob("*.py"))
            if p.parent.name != "forms" or p.name in BESIDE_THE_FORMS]


def test_no_stage_outside_the_forms_tests_a_scope_or_a_marker():
    # the forms answer for themselves: a new form is one module and one registry line
    import re
    from pathlib import Path
    tests = re.compile(r"""(scope\s*[!=]=|[!=]=\s*["'](?:block|element)["']|\bMarker\.|"""
                       r"""getattr\([^)]*["']scope["']|\bis\s+Marker\b)""")
    pkg = Path(splice.__file__).resolve().parent
    found = [f"{p.relative_to(pkg)}:{n}: {line.strip()}" for p in _outside_the_forms(pkg)
             for n, line in enumerate(p.read_text().splitlines(), 1) if tests.search(line)]
    assert found == []
    assert tests.search('if ext.scope == "block":') and tests.search("s.marker is Marker.FMA")


def test_no_module_outside_the_forms_names_a_form():
    # only the default form (element, which a declaration without scope= gets) is named
    # outside splice/forms/: every other form is reached through the registry
    import re
    from pathlib import Path
    names = re.compile(
        r"""from\s+\.+forms(?:\.(?!base\b|marked\b|element\b|element_callees\b|staging\b)\w+"""
        r"""|\s+import\s+[^\n]*"""
        r"""\b(?:block|warpgroup|fma_proof)\b)"""          # importing a form's module
        r"""|from\s+\.(?:block|warpgroup|fma_proof)\b"""   # (beside it, in splice/forms/)
        r"""|(?<!splice\.)\bforms\.(?:block|warpgroup)\b"""  # naming it (not in a docstring)
        r"""|(?<!["'])\b(?:BLOCK|WARPGROUP)\b(?!["'])"""    # naming its instance
        r"""|Generated\(.*["'](?:block|warpgroup) call["']""")  # writing its span kind
    pkg = Path(splice.__file__).resolve().parent
    found = [f"{p.relative_to(pkg)}:{n}: {line.strip()}" for p in _outside_the_forms(pkg)
             for n, line in enumerate(p.read_text().splitlines(), 1) if names.search(line)]
    assert found == []
    for line in ("from .forms import warpgroup as warpgroup_form", "from ..forms.block import x",
                 "    warpgroup_form.check_callees(...)  # forms.warpgroup.check_callees",
                 "from .forms.block import BLOCK", "if s.extern.form is WARPGROUP:",
                 "from .warpgroup import WARPGROUP",
                 'Generated(text, site.label, "block call", site.index)'):
        assert names.search(line), line
