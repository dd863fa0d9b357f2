"""Warm-up: compile ahead of time what a user names, in parallel worker processes, so that
the first launch (and a pack made afterwards) finds it cached.

Two kinds of job:

- **a kernel** of a module, for a signature and an architecture: its whole build (the
  cubin is cached: the first launch of that kernel in a new process is a hit);
- **a** ``splice.cub`` **operation** (:data:`CUB_OPS`) on 1-D tiles of a dtype and sizes,
  for an architecture: CUB's code for it, compiled by NVRTC and cached (the expensive part
  of a first ``splice.cub`` compile). The call is traced in a generated kernel and its
  fragment compiled for the architecture's PTX target; no kernel is built or cached. A
  user's kernel with that call then compiles without NVRTC (its tileiras and ptxas still
  run, once).

The workers are spawned (never forked: a forked child would inherit the parent's threads'
locks, NVRTC's among them), at most one per CPU; each runs its jobs one after the other,
the sizes of one operation and dtype in one job (CUB compiles every size in one NVRTC
program). The parent shows progress (:mod:`splice.system.progress`) and prints one line per
job.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib.util
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..errors import SpliceDeclarationError, SpliceError
from ..system import progress

#: The ``splice.cub`` operations a warm-up compiles, as ``name`` or ``name:argument``, and
#: the expression of a tile (of the loaded tile ``t``'s length or the argument's) that
#: calls each: ``{arg}`` is the argument (an operator, k, bins).
CUB_OPS = {
    "sort": "splice.cub.sort(t)",
    "sort:descending": "splice.cub.sort(t, descending=True)",
    "sort_pairs": "splice.cub.sort_pairs(t, t)[1]",
    "top_k": "splice.cub.top_k(t, {arg})[0]",
    "inclusive_sum": "splice.cub.inclusive_sum(t)",
    "exclusive_sum": "splice.cub.exclusive_sum(t)",
    "inclusive_scan": "splice.cub.inclusive_scan(t, {arg!r})",
    "reduce": "t * 0 + splice.cub.reduce(t, {arg!r})",
    "merge_sort": "splice.cub.merge_sort(t)",
    "histogram": "splice.cub.histogram(t, {arg})",
    "flag_heads": "splice.cub.flag_heads(t)",
    "flag_tails": "splice.cub.flag_tails(t)",
    "unique_counts": "splice.cub.unique_counts(t)[1]",
}
#: The operations that take an argument (``top_k:8``, ``reduce:max``), and its kind.
_ARGUMENT = {"top_k": int, "inclusive_scan": str, "reduce": str, "histogram": int}


@dataclasses.dataclass(frozen=True)
class Job:
    """One unit of a warm-up, run in a worker.

    Attributes:
        label (str): how the progress and the report name it.
        arch (str): ``sm_90``...
        file (str | None): a kernel's module (a kernel job).
        kernel (str): the kernel's name in it.
        signature (str): its ``--sig`` text (:func:`splice.kernel_signature`'s grammar).
        op (str): a ``splice.cub`` operation (:data:`CUB_OPS`: a CUB job).
        dtype (str): the tiles' element type.
        sizes (tuple[int, ...]): the tiles' lengths.
    """

    label: str
    arch: str
    file: str | None = None
    kernel: str = ""
    signature: str = ""
    op: str = ""
    dtype: str = ""
    sizes: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Done:
    """A job's outcome: seconds, how many builds or fragments it compiled (not found
    cached), and the error's text when it failed."""

    job: Job
    seconds: float
    compiled: int
    error: str = ""


def kernel_jobs(file: str, kernel: str, signatures: list[str], archs: list[str]) -> list[Job]:
    """A job per signature and architecture of ``kernel`` in the module ``file``."""
    return [Job(f"{kernel}({sig}) for {arch}", arch, file=str(Path(file).resolve()),
                kernel=kernel, signature=sig)
            for arch in archs for sig in signatures]


def cub_jobs(ops: list[str], dtypes: list[str], sizes: list[int], archs: list[str]
             ) -> list[Job]:
    """A job per operation, dtype and architecture, each for every size in ``sizes``.

    Raises:
        SpliceDeclarationError: an operation :data:`CUB_OPS` does not name, or a missing
            or malformed argument (``top_k:8``, ``reduce:max``).
    """
    for op in ops:
        _cub_expression(op)
    return [Job(f"splice.cub.{op} {dtype}[{','.join(map(str, sizes))}] for {arch}", arch,
                op=op, dtype=dtype, sizes=tuple(sizes))
            for arch in archs for op in ops for dtype in dtypes]


def _cub_expression(op: str) -> str:
    """The tile expression of :data:`CUB_OPS` for ``op`` (``name`` or ``name:argument``)."""
    name, _, arg = op.partition(":")
    known = ", ".join(sorted({k.partition(':')[0] for k in CUB_OPS}))
    kind = _ARGUMENT.get(name)
    if op in CUB_OPS and kind is None:
        return CUB_OPS[op]
    if kind is None:
        raise SpliceDeclarationError(f"warm-up: {op!r} is not a splice.cub operation it "
                                     f"compiles ({known}; top_k:K, inclusive_scan:OP, "
                                     f"reduce:OP, histogram:BINS take an argument)")
    if not arg or (kind is int and not arg.isdecimal()):
        raise SpliceDeclarationError(f"warm-up: splice.cub.{name} takes an argument: write "
                                     f"{name}:{'8' if kind is int else 'max'}, got {op!r}")
    return CUB_OPS[name].format(arg=kind(arg))


def run(jobs: list[Job], workers: int | None = None,
        report: Callable[[Done], None] | None = None) -> list[Done]:
    """Run ``jobs`` in spawned worker processes (at most ``workers``, default one per CPU
    and job), showing progress on a terminal; ``report`` is called in the parent with each
    job's outcome as it ends. Returns the outcomes, in the order the jobs end."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    done: list[Done] = []
    context = multiprocessing.get_context("spawn")
    with progress.task(f"warming up {len(jobs)} builds in {workers} processes",
                       len(jobs)) as shown, \
            concurrent.futures.ProcessPoolExecutor(workers, mp_context=context,
                                                   initializer=_worker_started) as pool:
        pending = {pool.submit(run_job, job): job for job in jobs}
        for future in concurrent.futures.as_completed(pending):
            out = future.result()
            done.append(out)
            shown.done += 1
            shown.detail = out.job.label
            if report is not None:
                report(out)
    return done


def _worker_started() -> None:
    """In each worker: compiling is what it is for (``SPLICE_COMPILE`` as ``auto``), and
    only the parent shows progress."""
    os.environ["SPLICE_COMPILE"] = "auto"
    os.environ["SPLICE_PROGRESS"] = "0"


def run_job(job: Job) -> Done:
    """One job, in this process: its outcome (a failure's message instead of raising, so
    that the other jobs go on)."""
    t0 = time.perf_counter()
    try:
        compiled = _cub(job) if job.op else _kernel(job)
    except SpliceError as e:
        return Done(job, time.perf_counter() - t0, 0, str(e))
    return Done(job, time.perf_counter() - t0, compiled)


def _kernel(job: Job) -> int:
    """A kernel job: its build (1 when compiled, 0 when it was cached)."""
    from ..tracing.signatures import kernel_signature, parse_parameters
    from . import pipeline
    kern = _kernel_of(_module(Path(job.file or "")), job.kernel, job.file or "")
    build = pipeline.build(kern, kernel_signature(*parse_parameters(job.signature)), job.arch)
    return 0 if build.from_cache else 1


def _module(path: Path):
    """The module of the file ``path``, imported under its own name (its directory first on
    ``sys.path``, for its own imports), once per worker."""
    name = f"_splice_warmup_{path.stem}_{abs(hash(str(path)))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise SpliceDeclarationError(f"warm-up: no Python module at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _kernel_of(module, name: str, file: str):
    from .splice_kernel import SpliceKernel
    kern = getattr(module, name, None)
    if not isinstance(kern, SpliceKernel):
        raise SpliceDeclarationError(f"warm-up: {file} has no @splice.kernel named {name!r}")
    return kern


_CUB_KERNEL = '''import cuda.tile as ct
import splice


@splice.kernel
def warm(x, y, N: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=ct.astype({expression}, y.dtype))
'''


def _cub(job: Job) -> int:
    """A CUB job: the call traced in a generated kernel for each size, its fragments
    compiled for the architecture's PTX target (the number not found cached)."""
    from ..tracing.signatures import kernel_signature
    from . import pipeline, stages
    with tempfile.TemporaryDirectory(prefix="splice-warmup-") as d:
        path = Path(d) / f"warm_{job.op.replace(':', '_')}.py"
        path.write_text(_CUB_KERNEL.format(expression=_cub_expression(job.op)))
        kern = _kernel_of(_module(path), "warm", str(path))
        target = stages.predicted_ptx_target(pipeline.normalize_arch(job.arch))
        compiled = 0
        for n in job.sizes:
            sig = kernel_signature(f"array({job.dtype})", f"array({job.dtype})", n)
            task = pipeline.Job.start(kern, sig, job.arch, None, False)
            for site in task.trace(frozenset()).sites:
                frag = site.extern.fragment
                if frag.compiles_ahead and not _cached(frag, target):
                    frag.module(target)
                    compiled += 1
        return compiled


def _cached(frag, target: str) -> bool:
    """Whether the fragment's PTX for ``target`` is in the cache (or this process)."""
    from ..system import cache
    base = getattr(frag, "base", frag)    # a tile call's fragment: its NVRTC part
    return cache.load("fragment", base.content_key(target)) is not None
