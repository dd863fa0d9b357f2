"""splice's contract with cuTile's private API (splice/system/_cutile.py). These fail loudly when a
cuda-tile release moves what splice relies on."""

import dataclasses
import importlib.metadata
import inspect

import cuda.tile as ct
import pytest

import splice
from splice.system import _cutile
from splice.tracing import tile_ir, trace
from support import kernels as K
from support.env import python_env


def test_installed_cutile_is_supported():
    _cutile.check_supported_cutile()
    lo, hi = _cutile.SUPPORTED_CUTILE
    ver = tuple(int(p) for p in importlib.metadata.version("cuda-tile").split(".")[:2])
    assert lo <= ver < hi


def test_unsupported_cutile_version_is_refused(monkeypatch):
    monkeypatch.setattr(_cutile, "cutile_version", lambda: "1.8.0")
    with pytest.raises(splice.SpliceToolchainError, match="supports cuda-tile >=1.7,<1.8"):
        _cutile.check_supported_cutile()


def test_frontend_hook_resolves_extern_stubs():
    from cuda.tile._ir.ops import tile_impl_registry
    from cuda.tile._passes.hir2ir import _try_find_function_impl
    with tile_impl_registry.as_current():
        impl = _try_find_function_impl(K.saxpy)
    assert impl is not None and impl._is_coroutine is False


def test_atomic_cas_fields_and_token_order_hook():
    from cuda.tile._ir.ops import TileAtomicCAS
    from cuda.tile._passes import token_order
    names = {f.name for f in dataclasses.fields(TileAtomicCAS)}
    assert {"memory_order", "memory_scope", "pointer", "expected", "desired", "mask",
            "token"} <= names
    assert issubclass(tile_ir.SpliceImpureCall, TileAtomicCAS)
    assert "TileAtomicCAS" in inspect.getsource(token_order._to_token_order_in_block)


def test_dataflow_hook_reaches_the_token_pass():
    """memory="arguments" rests on these: cuTile's pipeline calls dataflow_analysis by its
    module-global name (so the wrapper runs), the token pass orders an atomic by its
    pointer operand's predicate, and a predicate's alias set is an int field."""
    import cuda.tile._compile as compile_module
    from cuda.tile._passes import dataflow_analysis, token_order
    assert "dataflow_analysis(func_body" in inspect.getsource(compile_module._transform_ir)
    assert "op.pointer" in inspect.getsource(token_order._get_input_var)
    assert "alias_set" in {f.name for f in dataclasses.fields(dataflow_analysis.DataPredicate)}
    assert dataflow_analysis.ALIAS_UNIVERSE & _cutile.SPLICE_ALIAS_SET


def test_compile_tile_and_kernel_compile_signatures():
    from cuda.tile._compile import compile_tile
    params = inspect.signature(compile_tile).parameters
    assert {"return_bytecode", "return_cubin", "compiler_options"} <= set(params)
    assert list(inspect.signature(ct.kernel._compile).parameters) == [
        "self", "signature", "context", "compute_capability"]


def test_trace_emits_one_marker_global_per_call_site():
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), 3, 256)
    traced = trace.trace_kernel(K.control_kernel, sig, "sm_90")
    assert len(traced.sites) == 4
    for site in traced.sites:
        assert site.marker_symbol.encode() in traced.bytecode
    assert traced.tileiras_flags[:2] == ("--gpu-name", "sm_90")


def test_unused_pure_call_is_removed_and_impure_call_kept():
    @splice.extern(source='extern "C" __device__ float pure_f(float x) { return x; }')
    def pure_f(x: ct.float32) -> ct.float32: ...

    @splice.extern(source='extern "C" __device__ float impure_f(float x) { return x; }',
                   pure=False)
    def impure_f(x: ct.float32) -> ct.float32: ...

    @splice.kernel
    def kern(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        pure_f(t)      # result unused: removed
        impure_f(t)    # result unused: kept
        ct.store(y, index=(ct.bid(0),), tile=t)
    b = splice.compile(kern, K.signature(K.array(ct.float32), K.array(ct.float32), 256),
                       "sm_90")
    counts = {s.symbol: s.instances for s in b.sites}
    assert counts.get("pure_f", 0) == 0
    assert counts["impure_f"] >= 1


def test_pure_call_is_hoisted_out_of_a_loop_impure_is_not():
    @splice.extern(source='extern "C" __device__ float inv_f(float x) { return x; }')
    def inv_f(x: ct.float32) -> ct.float32: ...

    @splice.extern(source='extern "C" __device__ float inv_g(float x) { return x; }',
                   pure=False)
    def inv_g(x: ct.float32) -> ct.float32: ...

    @splice.kernel
    def kern(x, y, N: ct.Constant[int], TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        acc = ct.full((TILE,), 0, dtype=ct.float32)
        for i in range(ct.bid(1) + N):
            acc = acc + inv_f(t) + inv_g(t)
        ct.store(y, index=(ct.bid(0),), tile=acc)
    traced = trace.trace_kernel(kern, K.signature(K.array(ct.float32), K.array(ct.float32),
                                                    4, 128), "sm_90")
    from cuda.tile._compile import compile_tile
    with trace.trace_session("kern"):
        res = compile_tile(kern._annotated_function,
                           (K.signature(K.array(ct.float32), K.array(ct.float32), 4, 128),),
                           "sm_90", kern._compiler_options, return_final_ir=True,
                           return_bytecode=False, return_cubin=False)
    text = res.final_ir[0].to_string(include_loc=False)
    loop_at = text.index(" = for ")
    assert text.index("splice_pure_call") < loop_at < text.index("splice_impure_call")
    assert len(traced.sites) == 2


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_pure_call_reaches_ptx_as_keyed_f64_fma(arch):
    # The fma marker (splice.tile_ir.SplicePureCall) as tileiras lowers it: one load of the
    # key from the marker global, each element one fma.rn.f64 with the key a multiplicand.
    # An f32 fma would be paired into fma.rn.f32x2 on sm_100: FMA_MARKER_BITS is 64.
    import re

    from splice.system import toolchain
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.array(ct.float32),
                      K.scalar(ct.float32), 256)
    traced = trace.trace_kernel(K.saxpy_kernel, sig, arch)
    [site] = traced.sites
    assert site.marker == "fma" and site.marker_bits == trace.FMA_MARKER_BITS == 64
    ptx = toolchain.run_tileiras(traced.bytecode, traced.tileiras_flags, timeout=120,
                                 what="contract").ptx
    ptx = ptx.split(".nv_intermediate_source_section")[0]
    [key] = re.findall(r"ld\.global\.b64 \s*(%\w+), \[__splice_marker_0\];", ptx)
    fmas = re.findall(r"fma\.rn\.f64 \s*%\w+, (%\w+), (%\w+), (%\w+);", ptx)
    assert fmas and all(key in (x, y) for x, y, _z in fmas)
    assert "f32x2" not in ptx and "atom." not in ptx


# ------------------------------------------------------------------ the contract check is lazy

def _run_python(code: str, tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    env = python_env(root, root / "tests", SPLICE_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)


_FAKE_VERSION = """
import importlib.metadata as md
real = md.version
md.version = lambda n: "1.9.0" if n == "cuda-tile" else real(n)
import cuda.tile
cuda.tile.__version__ = "1.9.0"
"""


def test_doctor_reports_an_unsupported_cutile_instead_of_dying(tmp_path):
    # issue 9: the check ran at import, so `python -m splice doctor` died before reporting
    r = _run_python(_FAKE_VERSION + "import sys\nfrom splice.__main__ import main\n"
                    "sys.exit(main(['doctor']))", tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    assert "[!!] cuda-tile: splice supports cuda-tile >=1.7,<1.8; found 1.9.0" in r.stdout
    assert r.returncode == 1


def test_unsupported_cutile_is_refused_at_first_trace(tmp_path):
    r = _run_python(_FAKE_VERSION + """
from support import kernels as K
import splice
sig = K.signature(K.array(K.ct.float32), K.array(K.ct.float32), 256)
try:
    splice.compile(K.ptx_kernel, sig, "sm_90")
except splice.SpliceToolchainError as e:
    print("refused:", e)
""", tmp_path)
    assert "refused: splice supports cuda-tile >=1.7,<1.8; found 1.9.0" in r.stdout, r.stderr
    assert not list((tmp_path / "cache").rglob("*.cubin"))


def test_moved_private_name_is_reported_by_doctor_and_refused_at_first_trace(tmp_path):
    r = _run_python("""
import cuda.tile._ir.ops as ops
del ops.TileAtomicCAS            # as if a cuda-tile release had moved it
from support import kernels as K
import splice
from splice.__main__ import main
main(['doctor'])
try:
    splice.compile(K.ptx_kernel, K.signature(K.array(K.ct.float32), K.array(K.ct.float32), 256),
                   "sm_90")
except splice.SpliceToolchainError as e:
    print("refused:", e)
""", tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    assert "[!!] cuda-tile: cuda-tile 1.7" in r.stdout and "TileAtomicCAS" in r.stdout
    assert "refused: cuda-tile 1.7" in r.stdout


def test_only_the_contract_module_imports_cutile_private_names():
    import re
    from pathlib import Path
    pkg = Path(splice.__file__).parent
    offenders = [f"{p.name}:{i}" for p in sorted(pkg.rglob("*.py")) if p.name != "_cutile.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"\bcuda\.tile\._\w|\bct\._\w", line)]
    assert offenders == []


def test_every_cutile_name_the_package_uses_is_in_the_contract():
    # trace.py, asm_frontend.py, tile_ir.py... reach cuTile's names as `cu.<name>` /
    # `_cutile.<name>` or `from ..system._cutile import <name>`: each must be in the table
    # that the first trace imports and checks (a typo in a rarely traced path would
    # otherwise fail only there). Every module is read (before the moves of issue 43, only
    # the modules directly in splice/ were)
    import ast
    from pathlib import Path
    pkg = Path(splice.__file__).parent
    known = set(_cutile._PRIVATE) | {n for n in vars(_cutile) if not n.startswith("__")}
    used = set()
    for p in sorted(pkg.rglob("*.py")):     # every module, splice.system's own included
        tree = ast.parse(p.read_text())
        # `from ..system import _cutile as cu` (`from . import _cutile` inside system/)
        aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                   and n.level and n.module in (None, "system") for a in n.names
                   if a.name == "_cutile"}
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and \
                    n.value.id in aliases:
                used.add((p.name, n.attr))
            if isinstance(n, ast.ImportFrom) and n.level and \
                    n.module in ("_cutile", "system._cutile"):
                used |= {(p.name, a.name) for a in n.names}
    assert used and {u for u in used if u[1] not in known} == set()


def test_cutile_version_is_the_distributions(monkeypatch):
    import cuda.tile
    assert _cutile.cutile_version() == importlib.metadata.version("cuda-tile")
    monkeypatch.delattr(cuda.tile, "__version__")   # an older cuda-tile: the metadata's
    assert _cutile.cutile_version() == importlib.metadata.version("cuda-tile")


def test_globals_hook_reaches_every_reader_of_a_functions_hir():
    """A kernel compiles what its names hold when it is compiled (docs/guide/reloading.md)
    rests on these: every cuTile module that gets a function's HIR does so through a
    module-level name get_function_hir that splice's wrapper replaces (core_ops imports it
    from ast2hir at each call), and a global name's value is read from the HIR's
    frozen_global_values alone."""
    from pathlib import Path

    import cuda.tile
    from cuda.tile._ir import core_ops
    from cuda.tile._passes import ast2hir
    root = Path(cuda.tile.__file__).parent
    users = {p.relative_to(root).as_posix() for p in root.rglob("*.py")
             if "get_function_hir" in p.read_text()}
    assert users == {"_passes/ast2hir.py", "_passes/hir2ir.py", "_compile.py",
                     "_ir/core_ops.py"}
    assert "from cuda.tile._passes.ast2hir import get_function_hir" in \
        inspect.getsource(core_ops.enter_context_generator_impl)
    readers = {p.relative_to(root).as_posix() for p in root.rglob("*.py")
               if "frozen_global_values" in p.read_text()}
    assert readers == {"_passes/ast2hir.py", "_ir/hir.py", "_ir/core_ops.py"}
    assert "frozen_global_values[rn.index]" in inspect.getsource(core_ops.load_var_impl)
    _cutile._install_globals_hook()
    from cuda.tile import _compile
    from cuda.tile._passes import hir2ir
    assert ast2hir.get_function_hir is hir2ir.get_function_hir is \
        _compile.get_function_hir
    assert ast2hir.get_function_hir._splice_globals_hook
