"""Ring all-gather written as a cuTile kernel that talks NVSHMEM from inside the kernel.

One process per GPU (torch.multiprocessing). NVSHMEM is bootstrapped with nvshmem4py's
unique-id initializer over torch.distributed (gloo); the symmetric buffers come from
``nvshmem.core.tensor`` and are passed to the kernel as ordinary arrays. Each of the P - 1
ring steps: every block loads one tile of the chunk it forwards (its own chunk first, then
the one that arrived in the previous step), puts it element by element to the next PE with
``nvshmem_float_p``, fences, and signals the tile's counter on that PE; before forwarding a
received tile it waits on its own counter. The result is checked against
``torch.distributed.all_gather`` (NCCL).

    pip install 'splice[nvshmem]' torch
    python examples/nvshmem_allgather.py                 # check, all visible GPUs
    python examples/nvshmem_allgather.py --bench         # 1 MiB ... 1 GiB per rank vs NCCL
    python examples/nvshmem_allgather.py --compile-only  # no GPU: compile, show call sites

NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0, NVSHMEM_DISABLE_NVLS=1.

Per element (the only scope splice has today) every thread signals once per element it
put, so the signal traffic is one remote atomic per element: correct, not yet NCCL's speed.
Block-scope externs (``nvshmemx_putmem_signal_block``) will remove that.
"""

import argparse
import ctypes
import os
import socket
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import cuda.tile as ct

import splice

TILE = 1024
ConstInt = ct.Constant[int]

_lib = splice.library(source=r'''
#include <nvshmem.h>
// out[g] on the next PE <- v; nvshmem_fence orders it before this thread's signal below.
extern "C" __device__ int put_next(float *out, int g, float v) {
    nvshmem_float_p(out + g, v, (nvshmem_my_pe() + 1) % nvshmem_n_pes());
    nvshmem_fence();
    return 0;
}
// +1 on the next PE's tile counter sig[slot] (after the put whose result is `after`).
extern "C" __device__ int signal_next(long long *sig, int slot, int after) {
    nvshmemx_signal_op((uint64_t *)sig + slot, 1, NVSHMEM_SIGNAL_ADD,
                      (nvshmem_my_pe() + 1) % nvshmem_n_pes());
    return after;
}
// Wait until this PE's sig[slot] >= expected; the tile it guards may then be loaded (TMA
// included: fence.proxy.async orders the async proxy after this acquire).
extern "C" __device__ int wait_tile(long long *sig, int slot, int expected) {
    nvshmem_signal_wait_until((uint64_t *)sig + slot, NVSHMEM_CMP_GE, (uint64_t)expected);
    asm volatile("fence.proxy.async;" ::: "memory");
    return 0;
}''')
put_next = _lib.extern("put_next", signature="int32(float32*, int32, float32)", pure=False)
signal_next = _lib.extern("signal_next", signature="int32(int64*, int32, int32)", pure=False)
wait_tile = _lib.extern("wait_tile", signature="int32(int64*, int32, int32)", pure=False)


@splice.kernel
def ring_allgather(out, sig, rank: int, world: int, epoch: int, n: int, TILE: ConstInt):
    """out: (world * n,) float32 symmetric, this rank's chunk already at out[rank * n:];
    sig: (world * n // TILE,) uint64 symmetric tile counters; epoch: how many all-gathers
    ran before (counters only grow). One block per tile of a chunk."""
    t = ct.bid(0)
    tiles = n // TILE
    lanes = ct.arange(TILE, dtype=ct.int32)
    for step in range(world - 1):
        c = (rank - step + world) % world           # the chunk forwarded at this step
        slot = c * tiles + t
        if step > 0:                                 # it arrived in the previous step
            w = wait_tile(sig, ct.full((TILE,), slot, dtype=ct.int32), (epoch + 1) * TILE)
        else:
            w = ct.full((TILE,), 0, dtype=ct.int32)
        v = ct.load(out, index=(c * tiles + t,), shape=(TILE,))
        done = put_next(out, c * n + t * TILE + lanes + w, v)
        signal_next(sig, ct.full((TILE,), slot, dtype=ct.int32), done)
    # the last chunk (from two steps back) must have arrived before the kernel ends
    last = (rank + 1) % world
    wait_tile(sig, ct.full((TILE,), last * tiles + t, dtype=ct.int32), (epoch + 1) * TILE)


class RingAllGather:
    """Symmetric buffers for ``n`` float32 per rank and the kernel launch."""

    def __init__(self, rank, world, n):
        import nvshmem.core
        import torch
        assert n % TILE == 0, f"n must be a multiple of {TILE}"
        assert world * n < 2 ** 31, "element indices are int32"
        self.rank, self.world, self.n, self.epoch = rank, world, n, 0
        self.out = nvshmem.core.tensor((world * n,), dtype=torch.float32)
        self.sig = nvshmem.core.tensor((world * n // TILE,), dtype=torch.int64)
        self.sig.zero_()
        torch.cuda.synchronize()

    def __call__(self, x, stream):
        self.out[self.rank * self.n:(self.rank + 1) * self.n].copy_(x)
        ct.launch(stream, (self.n // TILE,), ring_allgather,
                  (self.out, self.sig, self.rank,
                   self.world, self.epoch, self.n, TILE))
        self.epoch += 1
        return self.out

    def free(self):
        import nvshmem.core
        nvshmem.core.free_tensor(self.out)
        nvshmem.core.free_tensor(self.sig)


def bootstrap(rank, world):
    """NVSHMEM on GPU ``rank``: a unique id made on rank 0, sent over torch.distributed."""
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
    nvshmem.core.init(device=dev, uid=uid, rank=rank, nranks=world, initializer_method="uid")


def _check(rank, world, nccl, n):
    import torch
    import torch.distributed as dist
    x = torch.randn(n, device="cuda") + rank
    ag = RingAllGather(rank, world, n)
    for _ in range(2):   # twice: the second call reuses the counters (epoch)
        dist.barrier()
        got = ag(x, torch.cuda.current_stream())
        torch.cuda.synchronize()
    ref = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(ref, x, group=nccl)
    assert torch.equal(got, torch.cat(ref)), f"rank {rank}: all-gather differs from NCCL"
    dist.barrier()
    ag.free()
    if rank == 0:
        print(f"ok: ring all-gather of {n} float32 per rank on {world} GPUs equals NCCL's")


def _time(fn, iters):
    import torch
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def _bench(rank, world, nccl):
    import nvshmem.core
    import torch
    import torch.distributed as dist
    from cuda.core import Stream
    if rank == 0:
        print(f"{'per rank':>10} {'splice GB/s':>12} {'NCCL GB/s':>10} {'time ratio':>11}")
    size = 1 << 20
    while size <= 1 << 30:
        n = size // 4
        x = torch.randn(n, device="cuda")
        ag = RingAllGather(rank, world, n)
        ref = [torch.empty_like(x) for _ in range(world)]
        iters = max(3, min(50, (1 << 30) // size))
        stream = torch.cuda.current_stream()
        nv_stream = Stream.from_handle(stream.cuda_stream)

        def ours(ag=ag, x=x, stream=stream, nv_stream=nv_stream):
            # NVSHMEM's own barrier on the stream keeps the ranks' epochs in step
            nvshmem.core.barrier_all(stream=nv_stream)
            ag(x, stream)
        dist.barrier()
        t_ours = _time(ours, iters)
        dist.barrier()
        t_nccl = _time(lambda ref=ref, x=x: dist.all_gather(ref, x, group=nccl), iters)
        bytes_moved = size * (world - 1)
        if rank == 0:
            print(f"{size >> 20:>7} MiB {bytes_moved / t_ours / 1e9:>12.1f} "
                  f"{bytes_moved / t_nccl / 1e9:>10.1f} {t_ours / t_nccl:>11.2f}")
        dist.barrier()
        ag.free()
        size <<= 2


def _worker(rank, world, port, bench, n):
    import nvshmem.core
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            init_method=f"tcp://127.0.0.1:{port}")
    nccl = dist.new_group(backend="nccl")
    bootstrap(rank, world)
    try:
        _bench(rank, world, nccl) if bench else _check(rank, world, nccl, n)
    finally:
        nvshmem.core.finalize()
        dist.destroy_process_group()


def compile_only(arch="sm_90"):
    """No GPU needed: compile the kernel and show its call sites."""
    sig = splice.kernel_signature("array(float32)", "array(int64)",
                                  *["scalar(int32)"] * 4, TILE)
    build = splice.compile(ring_allgather, sig, arch=arch)
    print(f"compiled for {arch} without launching")
    print(build.summary())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", action="store_true", help="time 1 MiB..1 GiB per rank vs NCCL")
    p.add_argument("--compile-only", action="store_true", help="compile for sm_90, no GPU")
    p.add_argument("--gpus", type=int, default=None, help="default: every visible GPU")
    p.add_argument("--n", type=int, default=1 << 20, help="float32 per rank (check mode)")
    a = p.parse_args()
    if a.compile_only:
        return compile_only()
    import torch
    import torch.multiprocessing as mp
    a.gpus = torch.cuda.device_count() if a.gpus is None else a.gpus
    if a.gpus < 2:
        raise SystemExit("needs at least 2 GPUs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_worker, args=(a.gpus, port, a.bench, a.n), nprocs=a.gpus,
                       start_method="spawn", join=True)


if __name__ == "__main__":
    main()
