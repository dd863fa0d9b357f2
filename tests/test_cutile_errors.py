"""cuTile's own errors keep cuTile's class through ``@splice.kernel``: every exception cuTile
raises for a kernel's code reaches the user as an instance of cuTile's class (a subclass that
is also a ``splice.SpliceError``) with cuTile's message and location, through
``splice.compile`` and through ``kernel._compile``, what ``ct.launch`` calls for a new
signature (given the compute capability, so no GPU is needed)."""

import inspect
import io

import cuda.tile as ct
import pytest
from cutile_style.refused_kernels import REFUSED

import splice
from splice.errors import CuTileError, as_cutile_error, cutile_error_class

IDS = [r[0].__name__ for r in REFUSED]


def _plain_error(func, arch, param):
    """cuTile's own error for ``func`` as a @ct.kernel."""
    with pytest.raises(ct.TileError) as e:
        ct.compilation.export_kernel(ct.kernel(func), [splice.kernel_signature(param)],
                                     io.BytesIO(), gpu_code=arch, output_format="cubin")
    return e.value


def _check_same(got, plain, exc):
    assert isinstance(got, exc) and isinstance(got, splice.SpliceError)
    assert type(plain) is exc and cutile_error_class(exc) is type(got)
    assert got.message == plain.message
    assert (got.loc.filename, got.loc.line, got.loc.col) == \
        (plain.loc.filename, plain.loc.line, plain.loc.col)
    # cuTile's text (message, then the source lines), then the kernel splice compiled
    assert str(got).startswith(str(plain).rstrip())
    assert "compiled by @splice.kernel" in str(got)


@pytest.mark.parametrize("func, exc, arch, param, said", REFUSED, ids=IDS)
def test_compile_raises_cutiles_class(fresh_cache, func, exc, arch, param, said):
    with pytest.raises(exc) as e:
        splice.compile(splice.kernel(func), splice.kernel_signature(param), arch=arch)
    assert e.value.message.startswith(said)
    assert f"kernel '{func.__name__}'" in str(e.value)
    _check_same(e.value, _plain_error(func, arch, param), exc)
    assert not list(fresh_cache.rglob("*.cubin"))


@pytest.mark.parametrize("func, exc, arch, param, said", REFUSED, ids=IDS)
def test_launch_path_raises_cutiles_class(fresh_cache, func, exc, arch, param, said):
    # ct.launch compiles a new signature with kernel._compile(signature, context, cc)
    cc = (int(arch[3]), int(arch[4:]))
    with pytest.raises(exc) as e:
        splice.kernel(func)._compile(splice.kernel_signature(param), None, cc)
    _check_same(e.value, _plain_error(func, arch, param), exc)


def test_static_eval_error_keeps_its_compile_time_traceback(fresh_cache):
    # cuTile prints a static_eval error's Python traceback from its __cause__
    func = next(r[0] for r in REFUSED if r[0].__name__ == "static_eval_raises")
    with pytest.raises(ct.TileStaticEvalError) as e:
        splice.compile(splice.kernel(func), splice.kernel_signature("array(float32)"),
                       arch="sm_90")
    assert isinstance(e.value.__cause__, ZeroDivisionError)
    assert "Entering compile-time evaluation" in str(e.value)


def _cutile_classes():
    """Every exception class cuTile defines under TileError (its public names and the ones
    only its private module names: StaticException, UnsupportedCallError)."""
    seen, todo = [], [ct.TileError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo += cls.__subclasses__()
    return {c for c in seen if c.__module__.startswith("cuda.tile")}


#: cuTile's classes no kernel's code raises through cuTile's frontend, and where each is
#: tested instead
NOT_FROM_KERNEL_CODE = {
    "TileError": "the base class: cuTile raises its subclasses",
    "InternalError": "a cuTile bug (TileInternalError); converted like every class below",
    "InternalCompilerError": "the base of tileiras's two errors",
    "CompilerExecutionError": "tileiras failing: tests/test_faults.py::test_tileiras_exits_nonzero",
    "CompilerTimeoutError": "tileiras timing out: tests/test_faults.py::test_tileiras_times_out",
}


def test_every_cutile_class_is_tested_from_a_kernel_or_listed():
    from_kernels = {r[1] for r in REFUSED}
    names = {c.__name__ for c in _cutile_classes()
             if c not in from_kernels and not issubclass(c, splice.SpliceError)}
    assert names == set(NOT_FROM_KERNEL_CODE)


def _instance(cls):
    e = cls.__new__(cls)
    ct.TileError.__init__(e, f"a {cls.__name__}")
    return e


@pytest.mark.parametrize("cls", sorted(_cutile_classes(), key=lambda c: c.__name__),
                         ids=lambda c: c.__name__)
def test_as_cutile_error_keeps_each_class(cls):
    plain = _instance(cls)
    plain.extra = 42
    got = as_cutile_error(plain, "in kernel 'k'")
    assert isinstance(got, cls) and isinstance(got, CuTileError)
    assert type(got).__name__ == cls.__name__
    assert (got.message, got.loc, got.extra) == (plain.message, plain.loc, 42)
    assert str(got) == f"{str(plain).rstrip()}\nin kernel 'k'"
    assert cutile_error_class(type(got)) is type(got) is cutile_error_class(cls)
    try:
        raise got
    except cls as caught:   # the way user code catches cuTile's errors
        assert caught is got


_twice = splice.extern(
    source='extern "C" __device__ float twice(float x) { return 2.0f * x; }',
    name="twice", signature="float32(float32)")(lambda x: None)


def _wrong_arity(x):
    t = ct.load(x, index=(0,), shape=(16,))
    ct.store(x, index=(0,), tile=_twice(t, t))


def test_splices_own_call_errors_stay_splice_call_errors(fresh_cache):
    with pytest.raises(splice.SpliceCallError, match="twice") as e:
        splice.compile(splice.kernel(_wrong_arity), splice.kernel_signature("array(float32)"),
                       arch="sm_90")
    assert not isinstance(e.value, CuTileError)


def test_cutile_error_is_made_only_by_as_cutile_error():
    with pytest.raises(TypeError, match="as_cutile_error"):
        CuTileError("x")
    with pytest.raises(TypeError, match="not a cuda.tile.TileError class"):
        cutile_error_class(ValueError)
    assert inspect.getdoc(CuTileError)


@pytest.mark.parametrize("options", [{"num_ctas": 3}, {"opt_level": 9},
                                     {"num_worker_warps": 3}], ids=str)
def test_kernel_options_cutile_refuses_keep_its_value_error(options):
    def body():
        pass
    with pytest.raises(ValueError) as plain:
        ct.kernel(body, **options)
    with pytest.raises(ValueError) as e:
        splice.kernel(body, **options)
    assert isinstance(e.value, splice.SpliceDeclarationError)
    assert str(plain.value) in str(e.value)


def test_kernel_option_of_the_wrong_type_keeps_its_type_error():
    def body():
        pass
    with pytest.raises(TypeError):
        ct.kernel(body, opt_level="fast")
    with pytest.raises(TypeError) as e:
        splice.kernel(body, opt_level="fast")
    assert isinstance(e.value, splice.SpliceDeclarationError)
    assert not isinstance(e.value, ValueError)
