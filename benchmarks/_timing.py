"""Side-by-side timing of cuTile kernels: interleaved launches, CUDA events, medians."""

import statistics
import time

import cuda.tile as ct


def time_side_by_side(torch, cases, reps=50, warmup=5):
    """Median seconds per launch of each case, timed interleaved in one stream.

    Args:
        torch: the torch module (events and the stream come from it).
        cases: {name: (grid, kernel, args)}.
    """
    stream = torch.cuda.current_stream()
    for _ in range(warmup):
        for grid, kern, args in cases.values():
            ct.launch(stream, grid, kern, args)
    times = {name: [] for name in cases}
    for _ in range(reps):
        for name, (grid, kern, args) in cases.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(stream)
            ct.launch(stream, grid, kern, args)
            e.record(stream)
            e.synchronize()
            times[name].append(s.elapsed_time(e) * 1e-3)
    return {name: statistics.median(v) for name, v in times.items()}


def time_callable_side_by_side(torch, fns, reps=50, warmup=5, flush_l2=False):
    """Like :func:`time_side_by_side` for arbitrary launch callables {name: fn()}.

    Args:
        flush_l2: before each timed launch, overwrite a 256 MiB buffer (5x the H200's
            50 MiB L2; untimed), so that every case starts with the same, cold L2, whatever
            ran before it in the interleaving (the flush of Triton's ``do_bench``).
    """
    stream = torch.cuda.current_stream()
    scratch = torch.empty(256 << 20, dtype=torch.uint8, device="cuda") if flush_l2 else None
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            if scratch is not None:
                scratch.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(stream)
            fn()
            e.record(stream)
            e.synchronize()
            times[name].append(s.elapsed_time(e) * 1e-3)
    return {name: statistics.median(v) for name, v in times.items()}


def first_launch(torch, kernel, args, grid):
    """Seconds for the first launch (trace, compile, link, load, run)."""
    stream = torch.cuda.current_stream()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ct.launch(stream, grid, kernel, args)
    torch.cuda.synchronize()
    return time.perf_counter() - t0
