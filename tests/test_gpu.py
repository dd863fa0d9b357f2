"""Spliced kernels launched on a GPU and checked against NumPy (marker: gpu)."""

import numpy as np
import pytest

from support import kernels as K

pytestmark = pytest.mark.gpu


_TORCH_DTYPES = {
    "bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
}


@pytest.mark.parametrize("inline", ["auto", "never"])
@pytest.mark.parametrize("name", sorted(K.TYPE_EXTERNS))
def test_every_element_type(dev, name, inline):
    torch = dev.torch
    rng = np.random.default_rng(1)
    n, tile = 4096, 256
    x = K.random_values(name, n, rng)
    tdt = getattr(torch, _TORCH_DTYPES[name])
    if name == "bfloat16":
        xt = torch.from_numpy(x).cuda().to(torch.bfloat16)
        x_exact = xt.float().cpu().numpy()
        ref = torch.from_numpy(x_exact * 2 + 1).to(torch.bfloat16).float().numpy()
    else:
        xt = dev.arr(x)
        ref = K.TYPE_EXTERNS[name][1](x)
    y = torch.empty(n, dtype=tdt, device="cuda")
    dev.launch((n // tile,), K.TYPE_KERNELS[name, inline], (xt, y, tile))
    out = y.float().cpu().numpy() if name == "bfloat16" else dev.host(y)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("kernel", ["saxpy_kernel", "saxpy_call_kernel"])
@pytest.mark.parametrize("tile", [1, 2, 16, 32, 64, 128, 256, 1024, 4096])
def test_tile_sizes_including_replicated_layouts(dev, tile, kernel):
    torch = dev.torch
    n = max(tile * 8, 4096)
    rng = np.random.default_rng(tile)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = torch.empty(n, dtype=torch.float32, device="cuda")
    dev.launch((n // tile,), getattr(K, kernel), (dev.arr(x), dev.arr(y), out, 1.5, tile))
    np.testing.assert_allclose(dev.host(out), np.float32(1.5) * x + y, rtol=1e-6, atol=1e-6)


def test_mixed_argument_types(dev):
    torch = dev.torch
    rng = np.random.default_rng(7)
    n, tile = 2048, 128
    a = rng.integers(-128, 127, n, dtype=np.int8)
    b = rng.standard_normal(n).astype(np.float16)
    c = rng.random(n) < 0.5
    d = rng.integers(-1000, 1000, n, dtype=np.int32)
    e = rng.standard_normal(n).astype(np.float32)
    y = torch.empty(n, dtype=torch.float64, device="cuda")
    dev.launch((n // tile,), K.mixed_kernel, tuple(dev.arr(v) for v in (a, b, c, d, e)) +
               (y, tile))
    np.testing.assert_array_equal(dev.host(y), K.mixed_ref(a, b, c, d, e))


def test_same_value_in_both_payload_slots(dev):
    torch = dev.torch
    x = np.random.default_rng(3).standard_normal(1024)
    y = torch.empty(1024, dtype=torch.float64, device="cuda")
    dev.launch((4,), K.same_arg_kernel, (dev.arr(x), y, 256))
    np.testing.assert_array_equal(dev.host(y), x * x + 0.25)


def test_broadcast_2d_scalar_and_constant(dev):
    torch = dev.torch
    M, N, TM, TN = 128, 256, 32, 64
    rng = np.random.default_rng(5)
    col = rng.standard_normal((M, 1)).astype(np.float32)
    row = rng.standard_normal((1, N)).astype(np.float32)
    out = torch.empty((M, N), dtype=torch.float32, device="cuda")
    dev.launch((M // TM, N // TN), K.broadcast_kernel, (dev.arr(col), dev.arr(row), out, 2.0,
                                                       TM, TN))
    ref = (np.float32(2) * col + row) + (np.float32(2) * np.float32(0.5) + row)
    np.testing.assert_allclose(dev.host(out), ref, rtol=1e-6, atol=1e-6)


def test_scalar_call(dev):
    torch = dev.torch
    out = torch.zeros(16, dtype=torch.float32, device="cuda")
    dev.launch((1,), K.scalar_kernel, (out, 3.0, 4.0))
    assert dev.host(out)[0] == np.float32(13.0)


def test_loops_branches_helpers_several_sites(dev):
    torch = dev.torch
    n, tile, iters = 4096, 256, 5
    x = np.random.default_rng(11).standard_normal(n).astype(np.float32)
    y = torch.empty(n, dtype=torch.float32, device="cuda")
    dev.launch((n // tile,), K.control_kernel, (dev.arr(x), y, iters, tile))
    np.testing.assert_allclose(dev.host(y), K.control_ref(x, iters, tile), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("tile", [1, 32, 64, 128, 1024, 4096])
def test_void_impure_extern_runs_once_per_element(dev, tile):
    torch = dev.torch
    n = max(tile * 16, 8192)
    x = np.random.default_rng(tile).integers(0, 1000, n, dtype=np.uint32)
    counter = torch.zeros(2, dtype=torch.int64, device="cuda")
    dev.launch((n // tile,), K.count_kernel, (dev.arr(x), counter.data_ptr(), tile))
    calls, total = dev.host(counter)
    assert calls == n, f"{calls} calls for {n} elements"
    assert total == int(x.astype(np.uint64).sum())


def test_void_impure_extern_2d_replicated(dev):
    torch = dev.torch
    TM, TN, blocks = 4, 8, 64  # 32 elements on 128 threads: replicated 4x
    x = np.random.default_rng(2).integers(0, 100, (TM * blocks, TN), dtype=np.uint32)
    counter = torch.zeros(2, dtype=torch.int64, device="cuda")
    dev.launch((blocks,), K.count_2d_kernel, (dev.arr(x), counter.data_ptr(), TM, TN))
    calls, total = dev.host(counter)
    assert calls == x.size and total == int(x.astype(np.uint64).sum())


def test_prebuilt_ptx(dev):
    torch = dev.torch
    x = np.random.default_rng(4).standard_normal(2048).astype(np.float32)
    y = torch.empty(2048, dtype=torch.float32, device="cuda")
    dev.launch((4,), K.ptx_kernel, (dev.arr(x), y, 512))
    np.testing.assert_allclose(dev.host(y), x * np.float32(3) + 1, rtol=1e-6, atol=1e-6)


def test_tma_matmul_with_extern_epilogue(dev):
    torch = dev.torch
    M = N = 512
    Kd = 768
    g = torch.Generator(device="cuda").manual_seed(0)
    A = torch.randn(M, Kd, dtype=torch.float16, device="cuda", generator=g)
    B = torch.randn(Kd, N, dtype=torch.float16, device="cuda", generator=g)
    C = torch.empty(M, N, dtype=torch.float16, device="cuda")
    dev.launch((M // 128, N // 128), K.matmul_gelu_kernel, (A, B, C, 128, 128, 64))
    ref = K.gelu_tanh_ref((A.float() @ B.float()).cpu().numpy())
    np.testing.assert_allclose(C.float().cpu().numpy(), ref, rtol=2e-2, atol=5e-2)


def test_inspect_from_launch_args(dev):
    torch = dev.torch
    x = torch.ones(1024, device="cuda")
    y = torch.ones(1024, device="cuda")
    out = torch.empty(1024, device="cuda")
    b = K.saxpy_kernel.inspect(x, y, out, 2.0, 256)
    assert b.cubin and b.ptx and b.spliced_ptx
    assert b.sites[0].instances >= 1
