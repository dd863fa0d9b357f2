"""``python -m splice``: inspect, compile ahead of time, manage the cache, check the setup.

    python -m splice doctor
    python -m splice inspect k.py my_kernel --sig "array(float32), array(float32), 1024"
                                            [--arch sm_90] [--stage ptx|spliced_ptx|sass|tileir]
                                            [--out DIR]
    python -m splice compile k.py my_kernel --sig "..." --arch sm_100 -o my_kernel.cubin
    python -m splice cache list|size|prune [--max-bytes N]|clear
    python -m splice cache export FILE [--used-within 2h]   # the cache's entries, one file
    python -m splice cache import FILE                     # into this user's cache
    python -m splice warmup k.py my_kernel --sig "..." [--sig "..."] [--arch sm_90] [-j N]
    python -m splice warmup k.py              # every kernel and signature of its SPLICE_WARMUP
    python -m splice warmup --cub sort,reduce:max --dtype float32,int32 [--size 1024] [--arch sm_90]

``--sig`` lists the kernel's parameters, comma-separated, in the grammar of
:func:`splice.kernel_signature`: ``array(dtype, ndim=1)`` (a C-contiguous array),
``scalar(dtype)``, or a constant (``1024``, ``2.5``, ``True``) for a ``ct.Constant``
parameter. dtypes are names: float32, int64, bfloat16...
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path


def _load_module(path: str):
    p = Path(path).resolve()
    if not p.is_file():
        raise SystemExit(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(p.stem, p)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(p.parent))
    spec.loader.exec_module(module)
    return module


def _load_kernel(path: str, name: str):
    kern = getattr(_load_module(path), name, None)
    if kern is None:
        raise SystemExit(f"{path} has no kernel named {name!r}")
    from .driver.splice_kernel import SpliceKernel
    if not isinstance(kern, SpliceKernel):
        raise SystemExit(f"{name!r} in {path} is not a @splice.kernel")
    return kern


def parse_signature(text: str):
    """A ``KernelSignature`` from ``--sig`` text: :func:`splice.kernel_signature`'s grammar,
    comma-separated."""
    from .errors import SpliceDeclarationError
    from .tracing.signatures import kernel_signature, parse_parameters
    try:
        return kernel_signature(*parse_parameters(text))
    except SpliceDeclarationError as e:
        raise SystemExit(f"--sig: {e.message}") from None


def _check_arity(kern, sig, text):
    import inspect

    from .system import _cutile
    n = len(inspect.signature(_cutile.python_function(kern)).parameters)
    if len(sig.parameters) != n:
        raise SystemExit(f"--sig lists {len(sig.parameters)} parameter(s), the kernel takes "
                         f"{n}: {text!r}")


def _cmd_inspect(a) -> int:
    import splice
    kern = _load_kernel(a.file, a.kernel)
    sig = parse_signature(a.sig)
    _check_arity(kern, sig, a.sig)
    b = splice.compile(kern, sig, a.arch)
    if a.out:
        print(f"stages written to {b.dump(Path(a.out))}")
    if a.stage:
        value = b[a.stage]
        if value is None:
            print(f"stage {a.stage} is not available", file=sys.stderr)
            return 1
        sys.stdout.write(value if isinstance(value, str) else value.hex())
    else:
        print(b.summary())
    return 0


def _cmd_compile(a) -> int:
    import splice

    from .integrations.export import check_output_path
    from .system import _cutile
    kern = _load_kernel(a.file, a.kernel)
    sig = parse_signature(a.sig)
    _check_arity(kern, sig, a.sig)
    if a.output:
        code = _cutile.python_function(kern).__code__
        check_output_path(a.output, f"python -m splice compile {a.file} {a.kernel} "
                                    f"({code.co_filename}:{code.co_firstlineno}): -o")
    b = splice.compile(kern, sig, a.arch)
    if a.output:            # a path the user named, written as cc -o does (docs/security.md)
        out = Path(a.output)
        out.write_bytes(b.cubin)
    else:                   # a predictable name: never through a link planted there
        from .system import safe_fs
        out = Path(f"{b.symbol}.{b.arch}.cubin")
        safe_fs.write_file(Path.cwd() / out, b.cubin, "the current directory (compile "
                           "writes its cubin there without -o PATH)")
    print(f"{out}: {len(b.cubin)} bytes, kernel symbol {b.symbol}")
    return 0


def _cmd_cache(a) -> int:
    from .system import cache
    root = cache.cache_root()
    wrong = _cache_usage(a)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    if a.action in ("export", "import"):
        return _cmd_pack(a)
    if a.action == "list":
        for p in cache.entries():
            hit = cache.read(p, touch=False)
            if hit is None:
                continue  # evicted meanwhile, or corrupt (then removed)
            meta = hit[0]["meta"]
            print(f"{p.parent.parent.name:11} {p.stem[:16]}  {len(hit[1]):>9} bytes  "
                  f"{meta.get('symbol') or meta.get('what') or ''}")
    elif a.action == "size":
        n, total = cache.size()
        pch = cache.pch_bytes()
        print(f"{root}: {n} entries, {total} bytes (limit {cache.max_bytes()})" +
              (f"; {pch} of them NVRTC's precompiled headers of running processes" if pch
               else ""))
    elif a.action == "prune":
        limit = cache.max_bytes() if a.max_bytes is None else a.max_bytes
        removed, freed = cache.prune(limit)
        n, total = cache.size()
        print(f"removed {removed} entries ({freed} bytes) from {root}; {n} entries, "
              f"{total} bytes left")
    elif a.action == "clear":
        n, _ = cache.prune(0)  # under the lock, and the byte count goes to 0
        print(f"removed {n} entries from {root}")
        left = cache.size()[0]
        if left:
            print(f"error: {left} entries could not be removed (permissions?)", file=sys.stderr)
            return 1
    return 0


def _cache_usage(a) -> str:
    """What is wrong with a ``cache`` command's arguments ("" when nothing)."""
    if a.max_bytes is not None and a.action != "prune":
        return f"--max-bytes is an option of 'cache prune', not of 'cache {a.action}'"
    if a.used_within is not None and a.action != "export":
        return f"--used-within is an option of 'cache export', not of 'cache {a.action}'"
    if (a.file is None) == (a.action in ("export", "import")):
        return (f"'cache {a.action}' takes a FILE" if a.file is None else
                f"'cache {a.action}' takes no FILE (export and import do)")
    return ""


def _cmd_pack(a) -> int:
    """``cache export FILE`` / ``cache import FILE`` (:mod:`splice.system.packs`)."""
    from .system import packs
    if a.action == "export":
        pack = packs.export_pack(a.file, used_within=a.used_within)
        print(f"{pack.path}: {pack.entries} entries, {pack.bytes} bytes, kernels for "
              f"{', '.join(pack.architectures) or 'no architecture'}")
    else:
        pack = packs.import_pack(a.file)
        print(f"{pack.path}: {pack.entries} entries imported ({pack.bytes} bytes), kernels "
              f"for {', '.join(pack.architectures) or 'no architecture'}")
    return 0


def _duration(text: str) -> float:
    """Seconds of ``90``, ``90s``, ``30m``, ``2h`` or ``1d``."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (write 90s, 30m, 2h, 1d)")
    return value * units[unit]


def _cmd_warmup(a) -> int:
    """``warmup``: the jobs :mod:`splice.driver.warmup` makes of the arguments, run in
    worker processes; one line per job; 1 when one failed."""
    from .driver import warmup
    from .system import toolchain
    archs = a.arch or [toolchain.gpu_arch() or "sm_90"]
    jobs = []
    if a.file is not None:
        jobs += [j for kernel, sigs in _warmup_kernels(a) for j in
                 warmup.kernel_jobs(a.file, kernel, sigs, archs)]
    if a.cub:
        jobs += warmup.cub_jobs(_listed(a.cub), _listed(a.dtype or "float32"),
                                [int(n) for n in _listed(a.size)] if a.size else
                                [128 << j for j in range(6)], archs)
    if not jobs:
        print("error: warmup needs FILE [KERNEL --sig ...] or --cub OPS (see --help)",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()

    def report(done) -> None:
        state = "FAILED" if done.error else "compiled" if done.compiled else "cached"
        print(f"{state:8} {done.seconds:7.2f} s  {done.job.label}"
              + (f"\n    {done.error}" if done.error else ""), flush=True)
    outcomes = warmup.run(jobs, a.jobs, report)
    failed = sum(1 for d in outcomes if d.error)
    print(f"{len(jobs)} jobs in {time.perf_counter() - t0:.1f} s: "
          f"{sum(1 for d in outcomes if d.compiled and not d.error)} compiled, {failed} failed")
    return 1 if failed else 0


def _listed(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _warmup_kernels(a) -> list[tuple[str, list[str]]]:
    """(kernel, signatures) of ``warmup FILE KERNEL --sig ...``, or of the module's
    ``SPLICE_WARMUP`` (a dict: kernel name -> list of signature texts) without KERNEL."""
    if a.kernel is not None:
        if not a.sig:
            raise SystemExit(f"warmup {a.file} {a.kernel}: give its signature(s) with --sig")
        _check_arity(_load_kernel(a.file, a.kernel), parse_signature(a.sig[0]), a.sig[0])
        return [(a.kernel, a.sig)]
    spec = _load_module(a.file)
    table = getattr(spec, "SPLICE_WARMUP", None)
    if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and
            all(isinstance(s, str) for s in v) for k, v in table.items()):
        raise SystemExit(f"{a.file} has no SPLICE_WARMUP dict (kernel name -> list of "
                         f"signatures, as --sig writes them); or name a kernel and --sig")
    return [(k, list(v)) for k, v in table.items()]


def _cmd_doctor(a) -> int:
    problems = 0

    def line(ok, what, detail):
        nonlocal problems
        problems += 0 if ok else 1
        print(f"[{'ok' if ok else '!!'}] {what}: {detail}")

    _doctor_compilers(line)
    _doctor_versions(line)
    _doctor_files(line)
    _doctor_optional()
    print(_doctor_gpu())
    print("no problems found" if not problems else f"{problems} problem(s)")
    return 0 if not problems else 1


def _doctor_compilers(line) -> None:
    """cuda-tile and the compilers splice runs, each reported by ``line(ok, what, detail)``."""
    from .system import _cutile, toolchain
    try:
        _cutile.check_supported_cutile()
        line(True, "cuda-tile", _cutile.cutile_version())
    except Exception as e:
        line(False, "cuda-tile", e)
    try:
        line(True, "tileiras", f"{toolchain.tileiras()} ({toolchain.tileiras_version()})")
        line(True, "ptxas", f"{toolchain.ptxas()} ({toolchain.ptxas_version()})")
        nvvm = [c for c in toolchain._libnvvm_candidates() if c.exists()]
        line(bool(nvvm), "libnvvm", nvvm[0] if nvvm else "missing beside tileiras")
    except Exception as e:
        line(False, "tileiras/ptxas", e)
    try:
        line(True, "NVRTC", ".".join(map(str, toolchain.nvrtc_version())))
    except Exception as e:
        line(False, "NVRTC", e)
    try:
        from cuda.bindings import nvjitlink
        major, minor = nvjitlink.version()
        line(True, "nvJitLink", f"{major}.{minor}")
    except Exception as e:
        line(False, "nvJitLink", e)


def _doctor_versions(line) -> None:
    """Each component's version, whether the set is one splice is tested on (with the pip
    command that installs one when it is not, keeping what other packages pin), and what
    the other installed packages (PyTorch, JAX, CuPy...) pin of the parts splice uses."""
    from . import compat
    components = compat.installed()
    print("versions: " + ", ".join(
        f"{c.name} {'.'.join(map(str, c.version)) if c.version else 'missing'}"
        for c in components))
    dists = compat.distributions()
    tested, text = compat.assess(components, dists)
    line(tested, "toolchain set", text)
    ok, text = compat.beside(dists)
    line(ok, "other packages' pins", text)


def _doctor_files(line) -> None:
    """nvdisasm, the CUDA headers, CUDA_HOME/CUDA_PATH (a warning, not a problem) and the
    cache directory, each reported by ``line(ok, what, detail)``."""
    from .errors import SpliceToolchainError, SpliceUnsafePathError
    from .system import cache, safe_fs, toolchain
    try:
        dis = toolchain.nvdisasm()
        line(dis is not None, "nvdisasm", dis or "not found (no SASS listings)")
    except SpliceToolchainError:   # it is looked for beside tileiras
        line(False, "nvdisasm", "not looked for: no tileiras (see above)")
    inc = toolchain.cuda_include_dir()
    line(inc is not None, "CUDA headers", inc or "cuda_fp16.h not found")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            print(f"[!!] {var}={os.environ[var]}: splice and cuTile remove it when running "
                  f"tileiras (it would load that toolkit's libnvvm/ptxas), but other tools "
                  f"may pick it up")
    root = cache.cache_root()
    try:
        safe_fs.private_dir(root, "the cache directory", safe_fs.cache_trust())
        probe = root / ".doctor-probe"
        safe_fs.write_file(probe, "ok", "the cache directory", trust=safe_fs.cache_trust())
        probe.unlink()
        line(True, "cache", root)
    except OSError as e:
        line(False, "cache", f"{root} not writable ({e}); splice compiles without caching")
    except SpliceUnsafePathError as e:
        line(False, "cache", e)


def _doctor_optional() -> None:
    """The optional headers (not problems when missing): CCCL/CUB and NVSHMEM."""
    from .inputs import cccl, nvshmem
    found = cccl.include_dirs()
    print(f"[{'ok' if found else '--'}] CCCL/CUB headers: " +
          (", ".join(found) if found else f"not found (optional, for <cub/...> and "
                                          f"<cuda/std/...>: {cccl.INSTALL_HINT})"))
    version = nvshmem.header_version()
    where = nvshmem.include_dir() if version else None
    print(f"[{'ok' if version else '--'}] NVSHMEM headers: " +
          (f"{where} ({version})" if version else
           f"not found (optional, for <nvshmem.h>: {_nvshmem_hint()})"))


def _nvshmem_hint() -> str:
    """splice[nvshmem]'s pip command, or, where an installed package's pin refuses its
    NVSHMEM (torch 2.14 pins 3.4.5), which pin: the command would break it."""
    from . import compat
    from .inputs import nvshmem
    refused = compat.refusing(compat.distributions(), nvshmem.REQUIREMENT)
    if not refused:
        return nvshmem.INSTALL_HINT
    return (f"splice[nvshmem] needs {nvshmem.REQUIREMENT}, which what is installed refuses: "
            + "; ".join(f"{p.by} requires {p.requirement}" for p in refused))


def _doctor_gpu() -> str:
    """The GPU line: its architecture and the CUDA driver, or that there is none (not a
    problem: splice compiles without a GPU)."""
    from .system import toolchain
    arch = toolchain.gpu_arch()
    try:
        from cuda.bindings import driver
        err, ver = driver.cuDriverGetVersion()
        drv = f"CUDA driver {ver // 1000}.{ver % 1000 // 10}"
    except Exception:
        drv = "no CUDA driver"
    return f"[{'ok' if arch else '--'}] GPU: {arch or 'none (compile-only: splice.compile)'}; {drv}"


def _byte_count(text: str) -> int:
    if not text.isdecimal():  # not isdigit: int() refuses "²"
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r}")
    return int(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m splice", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("inspect", "compile"):
        s = sub.add_parser(name)
        s.add_argument("file")
        s.add_argument("kernel")
        s.add_argument("--sig", required=True, help="the kernel's parameters, see --help")
        s.add_argument("--arch", default="sm_90")
        if name == "inspect":
            s.add_argument("--stage", choices=("tileir", "ptx", "spliced_ptx", "sass"))
            s.add_argument("--out", help="write every stage to this directory")
        else:
            s.add_argument("-o", "--output")
    c = sub.add_parser("cache")
    c.add_argument("action", choices=("list", "size", "prune", "clear", "export", "import"))
    c.add_argument("file", nargs="?", help="export, import: the pack file")
    c.add_argument("--max-bytes", type=_byte_count, help="prune: the limit (default "
                   "$SPLICE_CACHE_MAX_BYTES or 4 GiB)")
    c.add_argument("--used-within", type=_duration, help="export: only the entries made "
                   "or used in the last DURATION (90s, 30m, 2h, 1d); default all")
    w = sub.add_parser("warmup", help="compile ahead of time, in parallel processes")
    w.add_argument("file", nargs="?", help="a module of @splice.kernel's")
    w.add_argument("kernel", nargs="?", help="the kernel (default: the module's "
                   "SPLICE_WARMUP dict, kernel name -> signatures)")
    w.add_argument("--sig", action="append", help="a signature of the kernel (repeat)")
    w.add_argument("--cub", help="splice.cub operations, comma-separated: sort, "
                   "sort:descending, sort_pairs, top_k:K, inclusive_sum, exclusive_sum, "
                   "inclusive_scan:OP, reduce:OP, merge_sort, histogram:BINS, flag_heads, "
                   "flag_tails, unique_counts")
    w.add_argument("--dtype", help="--cub: the tiles' dtypes, comma-separated (float32)")
    w.add_argument("--size", help="--cub: the tiles' lengths (128,256,...,4096)")
    w.add_argument("--arch", action="append", help="repeat for several (default: this "
                   "machine's GPU, else sm_90)")
    w.add_argument("-j", "--jobs", type=int, help="worker processes (default: one per CPU)")
    sub.add_parser("doctor")
    a = p.parse_args(argv)
    from .errors import SpliceError
    try:
        rc = {"inspect": _cmd_inspect, "compile": _cmd_compile, "cache": _cmd_cache,
              "warmup": _cmd_warmup, "doctor": _cmd_doctor}[a.cmd](a)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return rc
    except BrokenPipeError:
        # the reader went away (`... | head`): stop quietly, as the Python docs recommend
        # (https://docs.python.org/3/library/signal.html#note-on-sigpipe)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except SpliceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError, TypeError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
