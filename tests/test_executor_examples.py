"""The examples' and the README's kernels run on the CPU executor and checked as their GPU
runs check them (examples' ``run_on_gpu``, README's asserts). Kernels with TMA loads by
default are compiled for sm_80 (on sm_90 tileiras warp-specialises them)."""

from __future__ import annotations

import re
from pathlib import Path

import cuda.tile as ct
import numpy as np
import pytest

import splice
from support import kernels as K
from support.exact import fma
from support.ptx_exec import ExecError, run_build
from support.scripts import load_script as _module

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("approx", ["exact", "bound"])
def test_layernorm_gelu_example(monkeypatch, approx):
    ex = _module(ROOT / "examples" / "layernorm_gelu.py", "ex_layernorm_gelu", monkeypatch)
    M, N, eps = 2, 256, 1e-5
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, N)).astype(np.float32)
    w = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    y = np.zeros_like(x)
    sig = K.signature(K.array(ct.float32, 2), K.array(ct.float32), K.array(ct.float32),
                      K.array(ct.float32, 2), K.scalar(ct.float32), N)
    launch = run_build(splice.compile(ex.layernorm_gelu, sig, "sm_80"), (M,), x, w, b, y, eps,
                       approx=approx)
    assert set(launch.approx) <= {"rsqrt.f32", "ex2.f32", "rcp.f32", "lg2.f32", "div.f32"}
    assert np.abs(y - ex.reference(x, w, b, eps)).max() < 1e-4     # run_on_gpu's bound


def test_block_reduce_rows_example(monkeypatch):
    ex = _module(ROOT / "examples" / "block_reduce_rows.py", "ex_block_reduce_rows",
                 monkeypatch)
    M, N = 2, 256
    x = np.random.default_rng(0).uniform(0.5, 1.5, (M, N)).astype(np.float32)
    y = np.zeros_like(x)
    sig = K.signature(K.array(ct.float32, 2), K.array(ct.float32, 2), K.scalar(ct.int32), N)
    run_build(splice.compile(ex.normalise_rows, sig, "sm_90"), (M,), x, y, N)
    ref = x / x.astype(np.float64).sum(axis=1, keepdims=True)
    assert np.abs(y - ref).max() < 1e-6


def test_saxpy_from_ptx_example(monkeypatch):
    ex = _module(ROOT / "examples" / "ptx_import" / "saxpy_from_ptx.py", "ex_saxpy_from_ptx",
                 monkeypatch)
    n, tile, a = 512, 256, 2.5
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.array(ct.float32),
                      K.scalar(ct.float32), tile)
    run_build(splice.compile(ex.saxpy_kernel, sig, "sm_80"), (n // tile,), x, y, out, a)
    np.testing.assert_array_equal(out, fma(np.float32(a), x, y))


def test_row_sort_example(monkeypatch):
    ex = _module(ROOT / "examples" / "row_sort.py", "ex_row_sort", monkeypatch)
    M, N = 2, 256                    # run_on_gpu's rows, fewer and shorter
    x = np.random.default_rng(3).standard_normal((M, N)).astype(np.float32)
    y = np.zeros_like(x)
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), N)
    run_build(splice.compile(ex.sort_rows, sig, "sm_90"), (M,), x.reshape(-1), y.reshape(-1))
    np.testing.assert_array_equal(y, np.sort(x, axis=-1))          # torch.sort's check


def test_row_top_k_example(monkeypatch):
    ex = _module(ROOT / "examples" / "row_top_k.py", "ex_row_top_k", monkeypatch)
    M, N, k = 2, 256, 8
    x = np.random.default_rng(4).permutation(M * N).astype(np.float32).reshape(M, N)
    v, i = np.zeros((M, k), np.float32), np.zeros((M, k), np.int32)
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.array(ct.int32), N, k)
    run_build(splice.compile(ex.top_k_rows, sig, "sm_90"), (M,), x.reshape(-1),
              v.reshape(-1), i.reshape(-1))
    order = np.argsort(-x, axis=-1)[:, :k]                          # torch.topk's check
    np.testing.assert_array_equal(i, order)
    np.testing.assert_array_equal(v, np.take_along_axis(x, order, axis=-1))


def _python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.S)


#: The README's two example kernels, each ``gelu``: (a marker of its block, where its code
#: stops before compiling or launching, the sigmoid GELU it computes).
README_KERNELS = {
    "splice.cuda": ("splice.cuda(", "try:", lambda x: x / (1.0 + np.exp(-1.702 * x))),
    "extern": ("@splice.extern", "build = ", lambda x: x / (1.0 + np.exp(-1.702 * x))),
}


@pytest.mark.parametrize("approx", ["exact", "bound"])
@pytest.mark.parametrize("example", list(README_KERNELS))
def test_readme_example(tmp_path, monkeypatch, example, approx):
    """The README's example kernels (the first: ``splice.cuda`` with inline CUDA C; then
    ``fast_gelu(t)`` as an extern) compute GELU's sigmoid form on the CPU executor (the
    README compiles them for sm_90 and, with a GPU, checks the first against torch)."""
    marker, stop, expected = README_KERNELS[example]
    code = next(b for b in _python_blocks("README.md") if marker in b)
    code = code[:code.index(stop)]
    path = tmp_path / "readme_example.py"
    path.write_text(code)
    mod = _module(path, f"readme_example_{example.replace('.', '_')}", monkeypatch)
    n, tile = 2048, 1024
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), tile)
    launch = run_build(splice.compile(mod.gelu, sig, "sm_80"), (n // tile,), x, y,
                       approx=approx)
    assert set(launch.approx) <= {"ex2.f32", "rcp.f32", "div.f32"}
    np.testing.assert_allclose(y, expected(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def _scale_kernel(tmp_path, monkeypatch):
    """The ``scale`` kernel of the guide's ahead-of-time page (also its PyTorch and JAX
    pages' kernel), without the lines that compile it."""
    code = _python_blocks("docs/guide/aot.md")[0]
    code = code[:code.index("sig = ")]
    path = tmp_path / "docs_scale.py"
    path.write_text(code)
    return _module(path, "docs_scale", monkeypatch).scale


SCALE_SIG = K.signature(K.array(ct.float32), K.array(ct.float32), 1024)


def test_docs_scale_kernel(tmp_path, monkeypatch):
    scale = _scale_kernel(tmp_path, monkeypatch)
    x = np.random.default_rng(2).standard_normal(2048).astype(np.float32)
    y = np.zeros_like(x)
    run_build(splice.compile(scale, SCALE_SIG, "sm_80"), (2,), x, y)
    np.testing.assert_array_equal(y, 2 * x)         # the PyTorch page's assert


def test_a_tma_kernel_is_out_of_scope():
    """tileiras's TMA + wgmma matmul (warp-specialised, sm_90): a clear error, never a wrong
    result."""
    f16 = ct.float16
    sig = K.signature(K.array(f16, 2), K.array(f16, 2), K.array(f16, 2), 128, 128, 64)
    b = splice.compile(K.matmul_plain_kernel, sig, "sm_90")
    a = np.zeros((128, 128), np.float16)
    with pytest.raises(ExecError, match="out of the executor's scope"):
        run_build(b, (1, 1), a, a.copy(), a.copy())
