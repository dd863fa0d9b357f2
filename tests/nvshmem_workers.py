"""Multi-GPU NVSHMEM cases for tests/test_nvshmem.py: one process per GPU (spawned by
torch.multiprocessing), NVSHMEM bootstrapped with nvshmem4py's unique-id initializer over
torch.distributed (gloo). NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
NVSHMEM_DISABLE_NVLS=1). A failing assertion in any rank fails ``run``."""

import ctypes
import os
import socket

import cuda.tile as ct

import splice

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

N = 4096        # elements per rank
TILE = 256
ConstInt = ct.Constant[int]

# splice dtype name -> (NVSHMEM type name, C type)
TYPES = {
    "int8": ("int8", "int8_t"), "int16": ("int16", "int16_t"), "int32": ("int32", "int32_t"),
    "int64": ("int64", "int64_t"), "uint8": ("uint8", "uint8_t"),
    "uint16": ("uint16", "uint16_t"), "uint32": ("uint32", "uint32_t"),
    "uint64": ("uint64", "uint64_t"), "float16": ("half", "__half"),
    "bfloat16": ("bfloat16", "__nv_bfloat16"), "float32": ("float", "float"),
    "float64": ("double", "double"),
}

RMA_SRC = """
#include <nvshmem.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
// buf[n + i] on the next PE <- buf[i] here (the value read on this PE)
extern "C" __device__ int put_{t}({c} *buf, int i, int n) {{
    nvshmem_{nv}_p(buf + n + i, buf[i], (nvshmem_my_pe() + 1) % nvshmem_n_pes());
    return 0;
}}
extern "C" __device__ {c} get_{t}(const {c} *buf, int i, int n) {{
    return nvshmem_{nv}_g(buf + n + i, (nvshmem_my_pe() + 1) % nvshmem_n_pes());
}}
"""


def _rma_externs(t):
    """put_<t>, get_<t>: one source per type, so that a kernel links only its own."""
    nv, c = TYPES[t]
    lib = splice.library(source=RMA_SRC.format(t=t, nv=nv, c=c))
    return (lib.extern(f"put_{t}", signature=f"int32({t}*, int32, int32)", pure=False),
            lib.extern(f"get_{t}", signature=f"{t}({t}*, int32, int32)", pure=False))


def _put_get_kernel(t):
    put, get = _rma_externs(t)

    @splice.kernel
    def put_kernel(buf, flags, n: int, TILE: ConstInt):
        idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
        ct.store(flags, index=(ct.bid(0),), tile=put(buf, idx, n))

    @splice.kernel
    def get_kernel(buf, out, n: int, TILE: ConstInt):
        idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
        ct.store(out, index=(ct.bid(0),), tile=get(buf, idx, n))
    return put_kernel, get_kernel


SYNC_SRC = r'''
#include <nvshmem.h>
// data[i] on the next PE <- v, then (after nvshmem_fence: ordered before the signal) add 1
// to that PE's sig[0]
extern "C" __device__ int put_then_signal(float *data, int i, float v) {
    int peer = (nvshmem_my_pe() + 1) % nvshmem_n_pes();
    nvshmem_float_p(data + i, v, peer);
    nvshmem_fence();
    return 0;
}
extern "C" __device__ int signal_add(long long *sig, int after) {
    nvshmemx_signal_op((uint64_t *)sig, 1, NVSHMEM_SIGNAL_ADD,
                      (nvshmem_my_pe() + 1) % nvshmem_n_pes());
    return after;
}
// wait until this PE's sig[0] >= expected; then the data it guards is visible (also to TMA)
extern "C" __device__ int wait_signal(long long *sig, long long expected) {
    nvshmem_signal_wait_until((uint64_t *)sig, NVSHMEM_CMP_GE, (uint64_t)expected);
    asm volatile("fence.proxy.async;" ::: "memory");
    return 0;
}
extern "C" __device__ int atomic_add_next(int *counter, int i) {
    nvshmem_int_atomic_add(counter + i, 1, (nvshmem_my_pe() + 1) % nvshmem_n_pes());
    return 0;
}
extern "C" __device__ int quiet(int after) { nvshmem_quiet(); return after; }
'''
_sync = splice.library(source=SYNC_SRC)
put_then_signal = _sync.extern("put_then_signal", signature="int32(float32*, int32, float32)",
                               pure=False)
signal_add = _sync.extern("signal_add", signature="int32(int64*, int32)", pure=False)
wait_signal = _sync.extern("wait_signal", signature="int32(int64*, int64)", pure=False)
atomic_add_next = _sync.extern("atomic_add_next", signature="int32(int32*, int32)",
                               pure=False)
quiet = _sync.extern("quiet", signature="int32(int32)", pure=False)


@splice.kernel
def signal_kernel(x, data, sig, flags, TILE: ConstInt):
    # every element: put x[i] to the peer's data[i], fence, signal +1 (data-dependent on the
    # put, so after it in every thread that signals)
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    done = put_then_signal(data, idx, t)
    ct.store(flags, index=(ct.bid(0),), tile=signal_add(sig, done))


@splice.kernel
def wait_kernel(data, sig, out, expected: int, TILE: ConstInt):
    # every element waits for all of the peer's signals, then reads what they guard
    w = wait_signal(sig, ct.full((TILE,), expected, dtype=ct.int64))
    t = ct.load(data, index=(ct.bid(0),), shape=(TILE,))
    ct.store(out, index=(ct.bid(0),), tile=t + ct.astype(w, ct.float32))


@splice.kernel
def atomic_kernel(counter, flags, TILE: ConstInt):
    idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    ct.store(flags, index=(ct.bid(0),), tile=quiet(atomic_add_next(counter, idx)))


_mm = splice.library(source=r'''
#include <nvshmem.h>
extern "C" __device__ int put_acc(float *dst, int i, float v) {
    nvshmem_float_p(dst + i, v, (nvshmem_my_pe() + 1) % nvshmem_n_pes());
    return 0;
}''')
put_acc = _mm.extern("put_acc", signature="int32(float32*, int32, float32)", pure=False)


@splice.kernel
def matmul_put_kernel(A, B, C, P, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    num_k = ct.num_tiles(A, axis=1, shape=(tm, tk))
    acc = ct.full((tm, tn), 0, dtype=ct.float32)
    for k in range(num_k):
        a = ct.load(A, index=(ct.bid(0), k), shape=(tm, tk), padding_mode=ct.PaddingMode.ZERO)
        b = ct.load(B, index=(k, ct.bid(1)), shape=(tk, tn), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(a, b, acc)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype))
    rows = ct.bid(0) * tm + ct.arange(tm, dtype=ct.int32)
    cols = ct.bid(1) * tn + ct.arange(tn, dtype=ct.int32)
    put_acc(P, rows[:, None] * C.shape[1] + cols[None, :], acc)


# ---------------------------------------------------------------------------------------
# Process setup


def bootstrap(rank: int, world: int):
    """torch.distributed (gloo) is up: set the device, initialise NVSHMEM with a unique id
    made on rank 0 and broadcast as bytes."""
    import nvshmem.core
    import torch
    import torch.distributed as dist
    from cuda.core import Device
    dev = Device(rank)
    dev.set_current()
    torch.cuda.set_device(rank)
    uid = nvshmem.core.get_unique_id(empty=rank != 0)
    nbytes = uid._data.nbytes
    payload = [ctypes.string_at(uid.ptr, nbytes) if rank == 0 else None]
    dist.broadcast_object_list(payload, src=0)
    if rank != 0:
        ctypes.memmove(uid.ptr, payload[0], nbytes)
    nvshmem.core.init(device=dev, uid=uid, rank=rank, nranks=world,
                      initializer_method="uid")
    return dev


def _launch(kernel, grid, args):
    import torch
    ct.launch(torch.cuda.current_stream(), grid, kernel, args)
    torch.cuda.synchronize()


def _barrier():
    import torch
    import torch.distributed as dist
    torch.cuda.synchronize()
    dist.barrier()


def _pattern(rank, tdt):
    """N values that differ per rank, made on the CPU (CUDA lacks some ops on uint16..64)."""
    import torch
    return ((torch.arange(N) % 100) + 10 * rank + 1).to(tdt)


def _same_bytes(a, b) -> bool:
    import torch
    return torch.equal(a.cpu().contiguous().view(torch.uint8),
                       b.cpu().contiguous().view(torch.uint8))


def case_put_get(rank, world, dtype):
    import nvshmem.core
    import torch
    tdt = getattr(torch, dtype)
    buf = nvshmem.core.tensor((2 * N,), dtype=tdt)
    buf.copy_(torch.cat([_pattern(rank, tdt), torch.zeros(N, dtype=tdt)]))
    flags = torch.ones(N, dtype=torch.int32, device="cuda")
    put_kernel, get_kernel = _put_get_kernel(dtype)
    _barrier()
    _launch(put_kernel, (N // TILE,), (buf, flags, N, TILE))
    _barrier()
    prev = (rank - 1) % world
    assert _same_bytes(buf[N:], _pattern(prev, tdt)), f"rank {rank}: put {dtype} wrong"
    assert int(flags.abs().sum()) == 0
    out = torch.zeros(N, dtype=tdt).cuda()
    _launch(get_kernel, (N // TILE,), (buf, out, N, TILE))
    # the next PE's buf[N:] holds what this PE put there: our own pattern
    assert _same_bytes(out, _pattern(rank, tdt)), f"rank {rank}: get {dtype} wrong"
    _barrier()
    nvshmem.core.free_tensor(buf)


def case_signal_wait(rank, world):
    # the producer puts and signals while the consumer is already waiting in its kernel
    import nvshmem.core
    import torch
    data = nvshmem.core.tensor((N,), dtype=torch.float32)
    sig = nvshmem.core.tensor((1,), dtype=torch.int64)
    data.zero_()
    sig.zero_()
    _barrier()
    x = torch.arange(N, dtype=torch.float32, device="cuda") + 1000 * rank
    out = torch.zeros(N, dtype=torch.float32, device="cuda")
    flags = torch.ones(N, dtype=torch.int32, device="cuda")
    waiter = torch.cuda.Stream()
    with torch.cuda.stream(waiter):
        ct.launch(waiter, (N // TILE,), wait_kernel, (data, sig, out, N, TILE))
    ct.launch(torch.cuda.current_stream(), (N // TILE,), signal_kernel,
              (x, data, sig, flags, TILE))
    torch.cuda.synchronize()
    prev = (rank - 1) % world
    expect = torch.arange(N, dtype=torch.float32, device="cuda") + 1000 * prev
    assert torch.equal(out, expect), f"rank {rank}: data read before its signal"
    assert int(sig.item()) == N
    _barrier()
    nvshmem.core.free_tensor(data)
    nvshmem.core.free_tensor(sig)


def case_atomic_add(rank, world):
    import nvshmem.core
    import torch
    counter = nvshmem.core.tensor((N,), dtype=torch.int32)
    counter.zero_()
    flags = torch.ones(N, dtype=torch.int32, device="cuda")
    _barrier()
    for _ in range(3):
        _launch(atomic_kernel, (N // TILE,), (counter, flags, TILE))
    _barrier()
    assert torch.equal(counter, torch.full_like(counter, 3)), \
        f"rank {rank}: counts {torch.bincount(counter.long().cpu())}"
    nvshmem.core.free_tensor(counter)


def case_matmul_put(rank, world):
    import nvshmem.core
    import torch
    m = n = 512
    k = 256
    g = torch.Generator(device="cuda").manual_seed(rank)
    A = torch.randn(m, k, device="cuda", generator=g).half()
    B = torch.randn(k, n, device="cuda", generator=g).half()
    C = torch.zeros(m, n, device="cuda", dtype=torch.float16)
    P = nvshmem.core.tensor((m * n,), dtype=torch.float32)
    P.zero_()
    _barrier()
    _launch(matmul_put_kernel, (m // 128, n // 128), (A, B, C, P, 128, 128, 64))
    _barrier()
    ref = A.float() @ B.float()
    torch.testing.assert_close(C.float(), ref, rtol=2e-2, atol=2e-2)
    import torch.distributed as dist
    refs = [None] * world
    dist.all_gather_object(refs, ref.cpu())
    prev = (rank - 1) % world   # the previous PE put its accumulator here
    torch.testing.assert_close(P.view(m, n).cpu(), refs[prev], rtol=1e-3, atol=1e-3)
    nvshmem.core.free_tensor(P)


def case_no_init(rank, world):
    # NVSHMEM never initialised in this process: the launch is a SpliceLaunchError
    import torch
    buf = torch.zeros(2 * N, dtype=torch.float32, device="cuda")
    flags = torch.ones(N, dtype=torch.int32, device="cuda")
    put_kernel, _ = _put_get_kernel("float32")
    try:
        _launch(put_kernel, (N // TILE,), (buf, flags, N, TILE))
    except splice.SpliceLaunchError as e:
        assert "not initialised" in str(e) or "not usable" in str(e), e
    else:
        raise AssertionError("launch without NVSHMEM initialised did not raise")


CASES = {"put_get": case_put_get, "signal_wait": case_signal_wait,
         "atomic_add": case_atomic_add, "matmul_put": case_matmul_put,
         "no_init": case_no_init}


def _worker(rank, world, port, case, kw):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            init_method=f"tcp://127.0.0.1:{port}")
    try:
        if case == "no_init":
            CASES[case](rank, world, **kw)
            return
        bootstrap(rank, world)
        try:
            CASES[case](rank, world, **kw)
        finally:
            import nvshmem.core
            nvshmem.core.finalize()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(case: str, world_size: int = 2, **kw) -> None:
    """Run ``case`` in ``world_size`` processes (GPU i in process i); raise if any fails."""
    import torch.multiprocessing as mp
    mp.start_processes(_worker, args=(world_size, _free_port(), case, kw),
                       nprocs=world_size, start_method="spawn", join=True)
