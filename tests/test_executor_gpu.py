"""The GPU against the CPU executor (marker gpu): the same cubin's PTX, the same inputs, the
results bit for bit where no approximate instruction ran (within the documented bounds
where one did). Kernels: the plain cuTile kernels of ``support.plain_kernels`` and the
spliced kernels of ``support.kernels`` (compiled for the GPU's architecture; those that are
warp-specialised there run on the executor from their sm_80 build, whose results are exact
too). And where an executor rule comes from the hardware: misaligned accesses trap on both."""

from __future__ import annotations

import cuda.tile as ct
import numpy as np
import pytest

import splice
from support import kernels as K
from support import plain_kernels as P
from support.ptx_exec import APPROX_BOUNDS, ExecError, Pointer, run, run_build
from support.ptx_snippets import (
    ALIGNED_VECTORS,
    CELL,
    MISALIGNED,
    MISALIGNED_PRELUDE,
    kernel,
)

pytestmark = pytest.mark.gpu
f16, f32, f64, i32 = ct.float16, ct.float32, ct.float64, ct.int32


def _arch() -> str:
    return splice.toolchain.gpu_arch()


def _executor(kernel, params, grid, args):
    """The executor's run of ``kernel`` for the GPU's architecture, or of its sm_80 build
    when tileiras warp-specialises it there."""
    sig = K.signature(*params)
    try:
        return run_build(splice.compile(kernel, sig, _arch()), grid, *args)
    except ExecError as e:
        if "out of the executor's scope" not in str(e):
            raise
        return run_build(splice.compile(kernel, sig, "sm_80"), grid, *args)


def _compare(dev, kernel, params, grid, inputs, outputs, launch_args=None):
    """Launch on the GPU and on the executor; compare every output array."""
    gpu_in = [dev.arr(a) if isinstance(a, np.ndarray) else a for a in inputs]
    out_params = params[len(inputs):len(inputs) + len(outputs)]
    gpu_out = [_gpu_array(dev, np.zeros_like(o), p) for o, p in zip(outputs, out_params)]
    consts = [p for p in params if isinstance(p, int)]
    dev.launch(grid, kernel, tuple(gpu_in + gpu_out + consts))
    cpu_out = [np.zeros_like(o) for o in outputs]
    launch = _executor(kernel, params, grid, list(inputs) + cpu_out)
    for g, c in zip(gpu_out, cpu_out):
        g = dev.host(g.view(dev.torch.int16) if g.dtype == dev.torch.bfloat16 else g)
        if not launch.approx and not launch.unrounded:
            np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), c.view(f"u{c.itemsize}"))
        else:      # approximations, or mul/add pairs ptxas may have contracted
            rtol = max([8 * APPROX_BOUNDS.get(k, APPROX_BOUNDS.get(k + "_abs", 0))
                        for k in launch.approx] + [2.0 ** -22])
            np.testing.assert_allclose(g, c, rtol=rtol, atol=rtol)


def _gpu_array(dev, a: np.ndarray, param):
    """``a`` on the GPU as the kernel parameter ``param`` takes it: a bfloat16 array (which
    NumPy has no type for; its bits travel as uint16) becomes a torch bfloat16 view."""
    t = dev.arr(a)
    return t.view(dev.torch.bfloat16) if getattr(param, "dtype", None) == ct.bfloat16 else t


def _f32(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("case", ["f32_arith", "f64_arith", "int_arith", "where_compare",
                                  "cumsum_kernel", "exp_kernel"])
def test_plain_elementwise(dev, case):
    n = 1024
    rng = np.random.default_rng(3)
    x32, y32 = _f32(n, 1), _f32(n, 2)
    inputs, dtype = {
        "f32_arith": ([x32, y32], f32), "f64_arith": ([x32.astype(np.float64),
                                                       y32.astype(np.float64)], f64),
        "int_arith": ([rng.integers(-1000, 1000, n).astype(np.int32),
                       rng.integers(1, 50, n).astype(np.int32)], i32),
        "where_compare": ([rng.integers(-5, 5, n), rng.integers(-5, 5, n)], ct.int64),
        "cumsum_kernel": ([rng.integers(-100, 100, n).astype(np.int32)], i32),
        "exp_kernel": ([x32], f32)}[case]
    params = [K.array(dtype)] * (len(inputs) + 1) + [128]
    _compare(dev, getattr(P, case), params, (n // 128,), inputs, [np.zeros(n, inputs[0].dtype)])


def test_plain_conversions(dev):
    x = _f32(1024) * np.float32(3)
    outs = [np.zeros(1024, t) for t in (np.float16, np.uint16, np.int32, np.uint8)]
    params = [K.array(f32), K.array(f16), K.array(ct.bfloat16), K.array(i32),
              K.array(ct.uint8), 128]
    _compare(dev, P.conversions, params, (8,), [x], outs)


def test_plain_row_reduction(dev):
    x = np.random.default_rng(4).standard_normal((4, 512)).astype(np.float32)
    params = [K.array(f32, 2), K.array(f32), K.array(f32), 512]
    _compare(dev, P.row_reduce, params, (4,), [x], [np.zeros(4, np.float32)] * 2)


@pytest.mark.parametrize("name", sorted(set(K.TYPE_EXTERNS) - {"bfloat16"}))
def test_every_element_type(dev, name):
    t = ct.bool_ if name == "bool" else getattr(ct, name)
    rng = np.random.default_rng(1)
    x = (rng.random(512) < 0.5) if name == "bool" else (
        rng.standard_normal(512) * 10).astype(name) if name.startswith("float") else \
        rng.integers(0, 100, 512).astype(name)
    _compare(dev, K.TYPE_KERNELS[name, "auto"], [K.array(t), K.array(t), 256], (2,), [x],
             [np.zeros_like(x)])


def test_mixed_and_control(dev):
    rng = np.random.default_rng(7)
    n = 512
    a = rng.integers(-128, 127, n, dtype=np.int8)
    b = rng.standard_normal(n).astype(np.float16)
    c = rng.random(n) < 0.5
    d = rng.integers(-1000, 1000, n, dtype=np.int32)
    e = rng.standard_normal(n).astype(np.float32)
    _compare(dev, K.mixed_kernel, [K.array(ct.int8), K.array(f16), K.array(ct.bool_),
                                   K.array(i32), K.array(f32), K.array(f64), 128], (4,),
             [a, b, c, d, e], [np.zeros(n)])
    _compare(dev, K.control_kernel, [K.array(f32), K.array(f32), 5, 256], (2,), [e],
             [np.zeros(n, np.float32)])


def test_executor_runs_what_the_gpu_runs_for_a_counter(dev):
    """A void impure extern's atomics: same counts from the GPU and from the executor."""
    x = np.random.default_rng(2).integers(0, 1000, 1024, dtype=np.uint32)
    counter = dev.torch.zeros(2, dtype=dev.torch.int64, device="cuda")
    dev.launch((8,), K.count_kernel, (dev.arr(x), counter.data_ptr(), 128))
    cpu = np.zeros(2, np.int64)
    sig = [K.array(ct.uint32), K.scalar(ct.int64), 128]
    _executor(K.count_kernel, sig, (8,), [x, Pointer(cpu)])
    np.testing.assert_array_equal(dev.host(counter), cpu)


def test_matmul_exact_on_small_integers(dev):
    """ct.mma: the GPU's TMA/wgmma build and the executor's run of its sm_80 build (mma.sync),
    bit for bit where every partial sum is exact."""
    rng = np.random.default_rng(0)
    A = rng.integers(-2, 3, (128, 96)).astype(np.float16)
    B = rng.integers(-2, 3, (96, 128)).astype(np.float16)
    params = [K.array(f16, 2), K.array(f16, 2), K.array(f16, 2), 64, 64, 32]
    gpu = dev.arr(np.zeros((128, 128), np.float16))
    dev.launch((2, 2), K.matmul_plain_kernel, (dev.arr(A), dev.arr(B), gpu, 64, 64, 32))
    cpu = np.zeros((128, 128), np.float16)
    _executor(K.matmul_plain_kernel, params, (2, 2), [A, B, cpu])
    np.testing.assert_array_equal(dev.host(gpu), cpu)


# A misaligned access on the GPU: the launch fails with CUDA_ERROR_MISALIGNED_ADDRESS, which
# leaves the CUDA context unusable, so each launch runs in a process of its own. The PTX
# (support.ptx_snippets.kernel, 32 threads, three 256-byte buffers holding 0, 1, 2, ...) goes
# to the driver's JIT; the process prints the error's name, or "ok" and out's first words.
_LAUNCH_PTX = r"""
import sys
import numpy as np
from cuda.bindings import driver as drv

def ok(r):
    err, *rest = r if isinstance(r, tuple) else (r,)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(err.name)
    return rest[0] if len(rest) == 1 else rest

ok(drv.cuInit(0))
ctx = ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))
ok(drv.cuCtxSetCurrent(ctx))
fn = ok(drv.cuModuleGetFunction(ok(drv.cuModuleLoadData(sys.stdin.read().encode() + b"\0")),
                                b"k"))
host = np.arange(64, dtype=np.uint32)
bufs = [ok(drv.cuMemAlloc(host.nbytes)) for _ in range(3)]
for b in bufs:
    ok(drv.cuMemcpyHtoD(b, host.ctypes.data, host.nbytes))
args = [np.array([int(b)], np.uint64) for b in bufs]
ptrs = np.array([a.ctypes.data for a in args], np.uint64)
(err,) = drv.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, drv.CUstream(0), ptrs.ctypes.data, 0)
if err == drv.CUresult.CUDA_SUCCESS:
    (err,) = drv.cuCtxSynchronize()
if err != drv.CUresult.CUDA_SUCCESS:
    print(err.name)
else:
    ok(drv.cuMemcpyDtoH(host.ctypes.data, bufs[0], host.nbytes))
    print("ok", *host[:32])
"""


def _gpu_launch_ptx(ptx: str) -> str:
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", _LAUNCH_PTX], input=ptx, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize("body,opcode", MISALIGNED)
def test_a_misaligned_access_traps_on_the_gpu_as_on_the_executor(body, opcode):
    ptx = kernel(MISALIGNED_PRELUDE + body, extra=CELL)
    assert _gpu_launch_ptx(ptx) == "CUDA_ERROR_MISALIGNED_ADDRESS"
    buf = np.arange(64, dtype=np.uint32)
    with pytest.raises(ExecError, match="misaligned address"):
        run(ptx, "k", (1,), Pointer(buf.copy()), Pointer(buf.copy()), Pointer(buf.copy()),
            block=(32,))


def test_aligned_vector_accesses_agree_with_the_gpu():
    # the control: the same widths at multiples of their size run on both, same words
    ptx = kernel(ALIGNED_VECTORS)
    gpu = _gpu_launch_ptx(ptx).split()
    assert gpu[0] == "ok", gpu
    out, a = np.arange(64, dtype=np.uint32), np.arange(64, dtype=np.uint32)
    run(ptx, "k", (1,), Pointer(out), Pointer(a), Pointer(a.copy()), block=(32,))
    assert [int(v) for v in gpu[1:]] == list(out[:32])
