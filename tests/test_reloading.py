"""A re-declared extern is never silently ignored (issue 30). A notebook cell that declares
a module-level extern again (here: a second file executed in the module's namespace, as
IPython does) makes every later compilation of a kernel that calls it compile the new body:
``splice.compile``, ``inspect()``, ``export_kernel``, ``replace_hints()``, the cache, and
``kernel._compile`` (what ``ct.launch`` calls for a signature it has not launched). A kernel
object ``ct.launch`` has already launched keeps cuTile's cached cubin: re-declaring warns,
naming it and the fix. Values are checked on the CPU PTX executor."""

import importlib.util
import io
import sys
import textwrap
import uuid
import warnings

import numpy as np
import pytest

import splice
from splice.tracing.reloading import StaleKernelWarning
from support.ptx_exec import run_build

SIG = splice.kernel_signature("array(float32)", "array(float32)")

MODULE = '''
import cuda.tile as ct
import splice

{extern}

@splice.kernel
def k(x, y):
    t = ct.load(x, index=(ct.bid(0),), shape=(16,))
    ct.store(y, index=(ct.bid(0),), tile=f(t))
'''

DEF_FORM = '''
@splice.extern(source='extern "C" __device__ float f(float x) {{ return x * {k}.0f; }}')
def f(x: ct.float32) -> ct.float32: ...
'''

NAME_FORM = '''
f = splice.extern(source='extern "C" __device__ float times(float x) {{ return x * {k}.0f; }}',
                  name="times", signature="float32(float32)")
'''


def _module(tmp_path, form, k=5):
    name = f"splice_reload_{uuid.uuid4().hex}"
    path = tmp_path / f"{name}.py"
    path.write_text(MODULE.format(extern=form.format(k=k)))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _rerun_cell(tmp_path, mod, source):
    """What running a notebook cell again does: its code, from a new file, in the module's
    namespace."""
    cell = tmp_path / f"cell_{uuid.uuid4().hex}.py"
    cell.write_text(textwrap.dedent(source))
    exec(compile(cell.read_text(), str(cell), "exec"), vars(mod))


def _value(build) -> float:
    x, y = np.full(16, 2.0, np.float32), np.zeros(16, np.float32)
    run_build(build, (1,), x, y)
    return float(y[0])


@pytest.mark.parametrize("form", [DEF_FORM, NAME_FORM], ids=["def", "name="])
def test_compile_after_redeclaring_compiles_the_new_body(fresh_cache, tmp_path, form):
    mod = _module(tmp_path, form, k=5)
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, mod, form.format(k=7))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0
    assert _value(splice.compile(mod.k.replace_hints(), SIG, "sm_80")) == 14.0
    assert _value(mod.k.inspect(signature=SIG, arch="sm_80")) == 14.0
    # the cache holds both bodies now, each under its own key
    _rerun_cell(tmp_path, mod, form.format(k=5))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, mod, form.format(k=7))
    again = splice.compile(mod.k, SIG, "sm_80")
    assert _value(again) == 14.0


def test_export_after_redeclaring_exports_the_new_body(fresh_cache, tmp_path):
    mod = _module(tmp_path, DEF_FORM, k=5)
    first = io.BytesIO()
    splice.export_kernel(mod.k, [SIG], first, gpu_code="sm_80")
    _rerun_cell(tmp_path, mod, DEF_FORM.format(k=3))
    second = io.BytesIO()
    splice.export_kernel(mod.k, [SIG], second, gpu_code="sm_80")
    new = splice.compile(mod.k, SIG, "sm_80")
    assert _value(new) == 6.0
    assert second.getvalue() == new.cubin != first.getvalue()


def test_launch_path_compiles_the_new_body_and_warns_for_launched_kernels(fresh_cache,
                                                                          tmp_path):
    mod = _module(tmp_path, DEF_FORM, k=5)
    # ct.launch compiles a signature it has not launched with kernel._compile(sig, ctx, cc)
    cubin, symbol, _, _ = mod.k._compile(SIG, None, (8, 0))
    assert symbol
    with pytest.warns(StaleKernelWarning, match=r"extern 'f' declared at .*cell_.*"
                      r"kernel\(s\) k, launched.*kernel\.replace_hints\(\)") as caught:
        _rerun_cell(tmp_path, mod, DEF_FORM.format(k=9))
    assert caught[0].filename.startswith(str(tmp_path / "cell_"))   # the user's line
    new_cubin, *_ = mod.k._compile(SIG, None, (8, 0))
    assert new_cubin != cubin
    assert new_cubin == splice.compile(mod.k, SIG, "sm_80").cubin
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 18.0


def test_redeclaring_an_extern_no_launched_kernel_reached_does_not_warn(fresh_cache, tmp_path):
    mod = _module(tmp_path, DEF_FORM, k=5)
    splice.compile(mod.k, SIG, "sm_80")      # compiled, never launched
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _rerun_cell(tmp_path, mod, DEF_FORM.format(k=4))


def test_an_alias_still_bound_keeps_the_declaration_it_names(fresh_cache, tmp_path):
    # Python's own rule: g = f, then f declared again: g is still the first extern
    mod = _module(tmp_path, DEF_FORM + "\ng = f\n", k=5)
    _rerun_cell(tmp_path, mod, MODULE.format(extern="").replace("f(t)", "g(t)"))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, mod, DEF_FORM.format(k=7))       # f is a new extern; g is not
    assert mod.f is not mod.g
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0


def test_externs_a_factory_declares_are_not_redeclarations(fresh_cache, tmp_path):
    factory = '''
def make(k):
    @splice.extern(source='extern "C" __device__ float f(float x) { return x * %d.0f; }' % k)
    def f(x: ct.float32) -> ct.float32: ...
    return f

f = make(5)
other = make(8)
'''
    mod = _module(tmp_path, factory.replace("{", "{{").replace("}", "}}"), k=0)
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0


def test_redeclared_extern_used_by_a_helper_function(fresh_cache, tmp_path):
    helper = DEF_FORM + '''
def helper(t):
    return f(t)
'''
    mod = _module(tmp_path, helper, k=5)
    _rerun_cell(tmp_path, mod, '''
@splice.kernel
def k(x, y):
    t = ct.load(x, index=(ct.bid(0),), shape=(16,))
    ct.store(y, index=(ct.bid(0),), tile=helper(t))
''')
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, mod, DEF_FORM.format(k=6))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 12.0


@pytest.mark.gpu
def test_gpu_ct_launch_after_redeclaring(torch, tmp_path, fresh_cache):
    import cuda.tile as ct
    mod = _module(tmp_path, DEF_FORM, k=5)
    x = torch.full((16,), 2.0, device="cuda")
    y = torch.zeros(16, device="cuda")

    def launch(kernel):
        ct.launch(torch.cuda.current_stream(), (1,), kernel, (x, y))
        torch.cuda.synchronize()
        return y[0].item()
    assert launch(mod.k) == 10.0
    with pytest.warns(StaleKernelWarning, match="kernel\\(s\\) k, launched"):
        _rerun_cell(tmp_path, mod, DEF_FORM.format(k=7))
    assert launch(mod.k) == 10.0            # cuTile's launch cache: what the warning says
    assert launch(mod.k.replace_hints()) == 14.0   # the fix it names





def test_ipython_output_history_is_not_a_binding(fresh_cache, tmp_path):
    # a cell that displayed the extern leaves it in _ and _3: it was still declared again
    mod = _module(tmp_path, DEF_FORM, k=5)
    mod._ = mod._3 = mod.f
    _rerun_cell(tmp_path, mod, DEF_FORM.format(k=7))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0


FILE_FORM = '''
@splice.extern(path="f.cu")
def f(x: ct.float32) -> ct.float32: ...
'''


def test_edited_cu_file_and_header_are_compiled_anew(fresh_cache, tmp_path):
    (tmp_path / "scale.h").write_text("#define SCALE 5.0f\n")
    cu = tmp_path / "f.cu"
    cu.write_text('#include "scale.h"\n'
                  'extern "C" __device__ float f(float x) { return x * SCALE; }\n')
    mod = _module(tmp_path, FILE_FORM)
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    (tmp_path / "scale.h").write_text("#define SCALE 6.0f\n")          # the header
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 12.0
    cu.write_text('#include "scale.h"\n'
                  'extern "C" __device__ float f(float x) { return x * SCALE + 1.0f; }\n')
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 13.0          # the .cu file
    assert _value(mod.k.inspect(signature=SIG, arch="sm_80")) == 13.0


# --------------------------------------------------------------------------------------------
# Python's rule: a kernel compiles what its names hold when it is compiled (issue 41)

EXTERN_K = ('splice.extern(source=\'extern "C" __device__ float f(float x) '
            '{{ return x * {k}.0f; }}\', name="f", signature="float32(float32)")')
#: the same, for a function of k
EXTERN_OF_K = ('splice.extern(source=\'extern "C" __device__ float f(float x) '
               '{{ return x * %d.0f; }}\' % k, name="f", signature="float32(float32)")')


def test_an_alias_anywhere_does_not_keep_the_old_body(fresh_cache, tmp_path):
    # g = f, then f declared again: the kernel calls f, which holds the new extern
    mod = _module(tmp_path, DEF_FORM + "\ng = f\n", k=5)
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, mod, DEF_FORM.format(k=7))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0
    assert _value(splice.compile(mod.k.replace_hints(), SIG, "sm_80")) == 14.0


@pytest.mark.parametrize("rebind", [
    "def declare(m, k):\n    m.f = " + EXTERN_OF_K + "\n",
    "def declare(m, k):\n    global f\n    f = " + EXTERN_OF_K + "\n"],
    ids=["attribute", "global"])
def test_an_extern_bound_by_a_helper_function(fresh_cache, tmp_path, rebind):
    mod = _module(tmp_path, "f = " + EXTERN_K + "\n" + rebind, k=5)
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    mod.declare(mod, 7)
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0
    assert _value(mod.k.inspect(signature=SIG, arch="sm_80")) == 14.0


def _other_module(tmp_path, import_line):
    """Module ``lib`` declares f; a kernel module imports it with ``import_line``."""
    lib = _module(tmp_path, "f = " + EXTERN_K, k=5)
    mod = _module(tmp_path, import_line.format(lib=lib.__name__))
    return lib, mod


def test_an_extern_of_another_module_through_its_attribute(fresh_cache, tmp_path):
    lib, mod = _other_module(tmp_path, "import {lib} as lib")
    _rerun_cell(tmp_path, mod, MODULE.format(extern="").replace("f(t)", "lib.f(t)"))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, lib, "f = " + EXTERN_K.format(k=7))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0


def _of_k(k: int) -> str:
    """An extern of ``k``, as a cell's text."""
    return EXTERN_OF_K.replace("{{", "{").replace("}}", "}").replace("% k", f"% {k}")


@pytest.mark.parametrize("holder, use, rebind", [
    ("module", "lib.f(t)", "f = " + _of_k(7)),
    ("class", "Ops.f(t)", "Ops.f = " + _of_k(7)),
], ids=["module", "class"])
def test_recorded_reads_follow_an_attribute(fresh_cache, tmp_path, holder, use, rebind):
    """What splice.jax keeps a build by: ``lib.f`` rebound in ``lib`` (or a class's
    attribute rebound) leaves the name ``lib`` holding the same module, but the kept build
    is stale, as compiling again shows."""
    from splice.driver import pipeline
    from splice.tracing.reloading import recording, still_bound
    lib, mod = _other_module(tmp_path, "import {lib} as lib")
    _rerun_cell(tmp_path, mod, "class Ops:\n    f = " + _of_k(5) + "\n" +
                MODULE.format(extern="").replace("f(t)", use))
    with recording() as reads:
        pipeline.build(mod.k, SIG, "sm_80")
    assert still_bound(reads)
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, lib if holder == "module" else mod, rebind)
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0
    assert not still_bound(reads)


@pytest.mark.parametrize("import_line", ["from {lib} import f", "from {lib} import *"])
def test_an_imported_name_holds_what_the_import_bound(fresh_cache, tmp_path, import_line):
    # Python's rule: `from lib import f` binds the kernel module's own f; declaring lib.f
    # again leaves it, importing again rebinds it
    lib, mod = _other_module(tmp_path, import_line)
    _rerun_cell(tmp_path, lib, "f = " + EXTERN_K.format(k=7))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, mod, import_line.format(lib=lib.__name__))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0


CLOSURE = '''
def make(first):
    f = first

    @splice.kernel
    def kc(x, y):
        t = ct.load(x, index=(ct.bid(0),), shape=(16,))
        ct.store(y, index=(ct.bid(0),), tile=f(t))

    def rebind(new):
        nonlocal f
        f = new
    return kc, rebind


def declare(k):
    return ''' + EXTERN_OF_K + "\n"


def test_a_closure_cell_is_read_when_the_kernel_is_compiled(fresh_cache, tmp_path):
    mod = _module(tmp_path, CLOSURE)
    kernel, rebind = mod.make(mod.declare(5))
    assert _value(splice.compile(kernel, SIG, "sm_80")) == 10.0
    rebind(mod.declare(7))
    assert _value(splice.compile(kernel, SIG, "sm_80")) == 14.0


def test_a_builtin_name_is_read_when_the_kernel_is_compiled(fresh_cache, tmp_path):
    import builtins
    name = f"splice_builtin_{uuid.uuid4().hex}"
    mod = _module(tmp_path, f"declare = lambda k: {EXTERN_OF_K}\n")
    _rerun_cell(tmp_path, mod, MODULE.format(extern="").replace("f(t)", f"{name}(t)"))
    setattr(builtins, name, mod.declare(5))
    try:
        assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
        setattr(builtins, name, mod.declare(7))
        assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0
        mod.__dict__[name] = mod.declare(3)          # a global hides the builtin (LEGB)
        assert _value(splice.compile(mod.k, SIG, "sm_80")) == 6.0
    finally:
        delattr(builtins, name)


def test_a_function_nested_in_the_kernel_reads_the_names_now(fresh_cache, tmp_path):
    mod = _module(tmp_path, DEF_FORM, k=5)
    _rerun_cell(tmp_path, mod, '''
@splice.kernel
def k(x, y):
    def apply(v):
        return f(v)
    t = ct.load(x, index=(ct.bid(0),), shape=(16,))
    ct.store(y, index=(ct.bid(0),), tile=apply(t))
''')
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, mod, DEF_FORM.format(k=7))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0


SNIPPET_HELPER = '''
def scale(t):
    return splice.cuda("return x * {k}.0f;", dtype=ct.float32, x=t)
'''


def test_a_snippet_helper_defined_again(fresh_cache, tmp_path):
    mod = _module(tmp_path, SNIPPET_HELPER.format(k=5).replace("{", "{{").replace("}", "}}"))
    _rerun_cell(tmp_path, mod, MODULE.format(extern="").replace("f(t)", "scale(t)"))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 10.0
    _rerun_cell(tmp_path, mod, SNIPPET_HELPER.format(k=7))
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 14.0


def test_a_changed_constant_is_read_when_the_kernel_is_compiled(fresh_cache, tmp_path):
    mod = _module(tmp_path, DEF_FORM.replace("x * {k}.0f", "x") + "\nSCALE = 2.0\n")
    _rerun_cell(tmp_path, mod, MODULE.format(extern="").replace(
        "f(t)", "f(t) * SCALE * ct.static_eval(TWO)"))
    mod.TWO = 1.0
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 4.0
    mod.SCALE = 3.0
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 6.0
    mod.TWO = 2.0                                      # read by ct.static_eval
    assert _value(splice.compile(mod.k, SIG, "sm_80")) == 12.0


def test_a_name_bound_nowhere_now_is_an_error(fresh_cache, tmp_path):
    mod = _module(tmp_path, DEF_FORM, k=5)
    splice.compile(mod.k, SIG, "sm_80")
    del mod.f
    with pytest.raises(splice.SpliceDeclarationError,
                       match=r"'k' \(.*splice_reload_\w+\.py:\d+\) reads the name 'f', "
                             r"which nothing binds now"):
        splice.compile(mod.k, SIG, "sm_80")


def test_recorded_reads_say_when_a_kept_build_is_stale(fresh_cache, tmp_path):
    # what splice.jax keeps a built kernel by: the names its trace read, still bound
    from splice.driver import pipeline
    from splice.tracing.reloading import recording, still_bound
    mod = _module(tmp_path, DEF_FORM + "\ng = f\n", k=5)
    with recording() as reads:
        pipeline.build(mod.k, SIG, "sm_80")
    assert any(r.name == "f" and r.value is mod.f for r in reads)
    assert still_bound(reads)
    mod.SOMETHING_ELSE = 1                             # a name the kernel does not read
    assert still_bound(reads)
    _rerun_cell(tmp_path, mod, DEF_FORM.format(k=7))
    assert not still_bound(reads)


def test_a_launched_kernel_warns_when_a_helper_rebinds_its_extern(fresh_cache, tmp_path):
    rebind = "def declare(m, k):\n    m.f = " + EXTERN_OF_K + "\n"
    mod = _module(tmp_path, "f = " + EXTERN_K + "\n" + rebind, k=5)
    mod.k._compile(SIG, None, (8, 0))
    with pytest.warns(StaleKernelWarning, match=r"kernel\(s\) k, launched"):
        mod.declare(mod, 7)
