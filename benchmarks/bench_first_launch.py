"""First launch (compile) of a spliced kernel vs. the same kernel in plain cuTile.

Both sides run in one process, after both have paid their one-time costs (imports, cuTile's
tileiras version probe, NVRTC's import, splice's tileiras overlay): every timed compile is
COLD -- a new kernel object from a newly generated module whose extern source (splice) or
float constant (plain) differs from every other, so neither cuTile's per-kernel cache, its
disk cache, splice's disk cache nor its fragment memo hits. Cases:

    a  elementwise y = f(x) with a CUDA C extern          (target splice/plain <= 1.3)
    b  elementwise with a PTX extern                       (target <= 1.3)
    c  four call sites of two externs, a loop, an if/else  (target <= 1.6)
    d  128x128x64 fp16 TMA matmul + extern GELU epilogue   (target <= 1.3, sm_90 and newer)
    warm    a new process compiling (a) from a warm splice cache vs. one compiling the
            plain kernel from a warm cuTile cache            (target <= 1.1)
    cub     the six-size sweep of ``splice.cub.sort`` on float32 tiles of 128 ... 4096
            elements vs. a plain kernel of each shape (load, add, store): the summed first
            compiles of six sizes, in a new process with cold caches (issue 37: target
            <= 3; ``--reps`` processes, median)
    starts  the first compile (launch) of a ``splice.cub.sort`` kernel on float32[1024]
            in a new process, after its imports, vs. the plain kernel of the same shape:
            cold (empty caches), warm (the caches an earlier process filled) and from a
            pack (an empty splice cache into which a pack of the warm one was imported,
            ``SPLICE_COMPILE=never``; against the plain kernel's warm cuTile cache), three
            rows (issue 47: warm and pack target <= 1.1); each rep a new pair of processes,
            interleaved
    import  ``import splice`` vs. ``import cuda.tile`` in a new process (target <= 1.2)
    declare ``import splice`` and first use of its declaration API (``splice.extern``,
            ``splice.kernel``, ``splice.asm``: loaded on first use) vs. ``import
            cuda.tile`` and ``ct.kernel``, in a new process (no target: what a script
            that declares an extern pays before it compiles anything)

Without a GPU (the default when none is visible) it times each kernel's ``_compile`` --
what ``ct.launch`` calls on a cache miss -- for ``--arch`` (default sm_90). With a GPU it
times the real first ``ct.launch`` (compile, load, run, synchronise).

``--stages`` adds, under each of (a)-(d), the median of each stage of the timed splice
builds (``Build.timings``, ms) and what the build spent outside them. ``--cases``: of
a,b,c,d,warm,cub,starts,import,declare (default: all)::
    python benchmarks/bench_first_launch.py [--arch sm_90] [--reps 7] [--cases a,b] [--stages]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

# Fresh caches for this run (children of the warm case get their own).
os.environ.setdefault("SPLICE_CACHE_DIR", tempfile.mkdtemp(prefix="splice-bench-"))
os.environ.setdefault("CUDA_TILE_CACHE_DIR", tempfile.mkdtemp(prefix="cutile-bench-"))

# benchmarks/_kernels.py: case (d)'s generated modules import matmul_tile from it, also
# after an importer took benchmarks/ off sys.path again
import _kernels  # noqa: F401

TARGETS = {"a": 1.3, "b": 1.3, "c": 1.6, "d": 1.3, "warm": 1.1, "cub": 3.0, "import": 1.2,
           "declare": None, "cub cold": None, "cub warm": 1.1, "cub pack": 1.1}
TITLES = {"a": "(a) elementwise + CUDA C extern", "b": "(b) elementwise + PTX extern",
          "c": "(c) 4 sites, 2 externs, if/else", "d": "(d) TMA matmul 128x128x64 + epilogue",
          "warm": "(e) new process, warm cache",
          "cub cold": "(g) cub.sort, new process, cold",
          "cub warm": "(h) cub.sort, new process, warm cache",
          "cub pack": "(i) cub.sort, new process, from a pack",
          "cub": "(f) cub.sort f32, 6 sizes 128..4096", "import": "import splice / cuda.tile",
          "declare": "import + declaration API"}

_HEADER = """\
import cuda.tile as ct
import splice
ConstInt = ct.Constant[int]
"""

# Each case: module source with {rep} (varied per compile) and {c} (a float constant for the
# plain kernel, exactly representable and different per rep); kernels named plain, spliced.
SOURCES = {
    "a": '''
@splice.extern(source=r"""
// rep {rep}
extern "C" __device__ float scale_shift(float x) {{ return x * 2.0f + 1.0f; }}""")
def scale_shift(x: ct.float32) -> ct.float32: ...

@splice.kernel
def spliced(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=scale_shift(t))

@ct.kernel
def plain(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=t * 2.0 + {c})
''',
    "b": '''
PTX = r"""
// rep {rep}
.version 8.0
.target sm_80
.address_size 64
.visible .func (.param .b32 func_retval0) ptx_scale(.param .b32 ptx_scale_param_0)
{{
    .reg .f32 %f<3>;
    ld.param.f32 %f1, [ptx_scale_param_0];
    fma.rn.f32 %f2, %f1, 0f40400000, 0f3F800000;
    st.param.f32 [func_retval0+0], %f2;
    ret;
}}
"""
ptx_scale = splice.extern.from_ptx(ptx=PTX, name="ptx_scale", signature="float32(float32)")

@splice.kernel
def spliced(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=ptx_scale(t))

@ct.kernel
def plain(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=t * 3.0 + {c})
''',
    "c": '''
@splice.extern(source=r"""
// rep {rep}
extern "C" __device__ float step(float acc, float x) {{ return acc * 0.5f + x; }}""")
def step(acc: ct.float32, x: ct.float32) -> ct.float32: ...

@splice.extern(source=r"""
// rep {rep}
extern "C" __device__ float saxpy(float a, float x, float y) {{ return a * x + y; }}""")
def saxpy(a: ct.float32, x: ct.float32, y: ct.float32) -> ct.float32: ...

@splice.kernel
def spliced(x, y, ITERS: ConstInt, TILE: ConstInt):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(TILE,))
    acc = ct.full((TILE,), 0, dtype=ct.float32)
    for i in range(ITERS):
        acc = step(acc, t)
    if bid % 2 == 0:
        acc = step(acc, 1.0)
    else:
        acc = saxpy(2.0, acc, t)
    acc = step(acc, 1.0)
    ct.store(y, index=(bid,), tile=acc)

@ct.kernel
def plain(x, y, ITERS: ConstInt, TILE: ConstInt):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(TILE,))
    acc = ct.full((TILE,), 0, dtype=ct.float32)
    for i in range(ITERS):
        acc = acc * 0.5 + t
    if bid % 2 == 0:
        acc = acc * 0.5 + 1.0
    else:
        acc = 2.0 * acc + t
    acc = acc * 0.5 + {c}
    ct.store(y, index=(bid,), tile=acc)
''',
    "d": '''
@splice.extern(source=r"""
// rep {rep}
extern "C" __device__ float gelu_tanh(float x) {{
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}}""")
def gelu_tanh(x: ct.float32) -> ct.float32: ...

from _kernels import matmul_tile

@splice.kernel
def spliced(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = matmul_tile(A, B, tm, tn, tk)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(gelu_tanh(acc), C.dtype))

@ct.kernel
def plain(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    x = matmul_tile(A, B, tm, tn, tk)
    g = 0.5 * x * (1.0 + ct.tanh(0.7978845608028654 * (x + {c} * x * x * x)))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(g, C.dtype))
''',
}
SOURCES["cub"] = '''
# rep {rep}
@splice.kernel
def spliced(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=splice.cub.sort(t))

@ct.kernel
def plain(x, y, N: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(N,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=t + {c})
'''
_C0 = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.044715, "cub": 1.0}
CUB_SIZES = (128, 256, 512, 1024, 2048, 4096)

_counter = [0]


def load_case(case: str, workdir: Path, rep: int | None = None):
    """A newly generated module of ``case`` (its own file, so cuTile can read the source):
    returns (plain kernel, spliced kernel)."""
    if rep is None:
        _counter[0] += 1
        rep = _counter[0]
    c = _C0[case] + rep * 2.0 ** -12
    path = workdir / f"case_{case}_{rep}.py"
    path.write_text(_HEADER + textwrap.dedent(SOURCES[case]).format(rep=rep, c=repr(c)))
    spec = importlib.util.spec_from_file_location(f"_bench_case_{case}_{rep}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.plain, mod.spliced


# ---------------------------------------------------------------------------------------------
# Without a GPU: each kernel object's _compile for an architecture

def _array(ct, dtype, ndim=1):
    from cuda.tile.compilation import ArrayConstraint
    return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False,
                           stride_constant=(None,) * (ndim - 1) + (1,),
                           stride_divisible_by=(16,) * (ndim - 1) + (1,),
                           base_addr_divisible_by=16, shape_divisible_by=16)


def signature(case: str, n: int = 1024):
    import cuda.tile as ct
    from cuda.tile.compilation import CallingConvention, KernelSignature
    params = {"cub": lambda: (_array(ct, ct.float32), _array(ct, ct.float32), n),
              **dict.fromkeys("ab", lambda: (_array(ct, ct.float32), _array(ct, ct.float32), 1024)),
              "c": lambda: (_array(ct, ct.float32), _array(ct, ct.float32), 3, 256),
              "d": lambda: (_array(ct, ct.float16, 2),) * 3 + (128, 128, 64)}[case]()
    return KernelSignature(params, CallingConvention.cutile_python_v1())


def compile_once(kernel, sig, arch: str) -> float:
    """Seconds of one ``_compile`` (cuTile's launch path on a cache miss)."""
    from cuda.tile._cext import default_tile_context  # what ct.launch passes
    cc = (int(arch[3:-1]), int(arch[-1]))
    t0 = time.perf_counter()
    kernel._compile(sig, default_tile_context, cc)
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# With a GPU: the real first ct.launch

def _gpu_launch(case: str, n: int = 1024):
    import torch
    if case == "cub":
        x = torch.randn(64 * n, device="cuda")
        return (64,), (x, torch.empty_like(x), n)
    if case in ("a", "b"):
        n, tile = 1 << 20, 1024
        x = torch.randn(n, device="cuda")
        return (n // tile,), (x, torch.empty_like(x), tile)
    if case == "c":
        n, tile = 1 << 20, 256
        x = torch.randn(n, device="cuda")
        return (n // tile,), (x, torch.empty_like(x), 3, tile)
    m = 1024
    a = torch.randn(m, m, device="cuda", dtype=torch.float16)
    b = torch.randn(m, m, device="cuda", dtype=torch.float16)
    return (m // 128, m // 128), (a, b, torch.empty_like(a), 128, 128, 64)


def launch_once(kernel, grid, args) -> float:
    import cuda.tile as ct
    import torch
    stream = torch.cuda.current_stream()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ct.launch(stream, grid, kernel, args)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


class StageTimes:
    """The ``Build.timings`` of every splice build while recording (``splice.pipeline.build``
    wrapped: ``_compile`` returns only the cubin), plus ``other``: the build's wall time
    outside its stages."""

    def __init__(self):
        self.builds: list[dict[str, float]] = []
        self.recording = False

    def install(self) -> None:
        import splice.driver.pipeline as pipeline
        real = pipeline.build

        def build(*args, **kwargs):
            t0 = time.perf_counter()
            out = real(*args, **kwargs)
            if self.recording:
                total = time.perf_counter() - t0
                self.builds.append({**out.timings, "other": total - sum(out.timings.values())})
            return out
        pipeline.build = build

    def medians(self) -> str:
        """``stage ms`` medians over the recorded builds, in stage order; then cleared."""
        names = list(dict.fromkeys(k for b in self.builds for k in b))
        out = "  ".join(f"{k} {statistics.median(b.get(k, 0.0) for b in self.builds) * 1e3:.1f}"
                        for k in names)
        self.builds.clear()
        return out


def cold_medians(case: str, reps: int, arch: str, gpu: bool, workdir: Path,
                 stages: StageTimes | None = None):
    """(plain, splice) median seconds of cold compiles, interleaved; one of each first to
    pay the one-time costs (``stages``: records the timed splice builds' stages)."""
    if gpu:
        grid, args = _gpu_launch(case)
        run = lambda k: launch_once(k, grid, args)
    else:
        sig = signature(case)
        run = lambda k: compile_once(k, sig, arch)
    plain_k, splice_k = load_case(case, workdir)
    run(plain_k), run(splice_k)
    if stages is not None:
        stages.recording = True
    plain, spliced = [], []
    for i in range(reps):
        plain_k, splice_k = load_case(case, workdir)
        if i % 2:
            plain.append(run(plain_k))
            spliced.append(run(splice_k))
        else:
            spliced.append(run(splice_k))
            plain.append(run(plain_k))
    if stages is not None:
        stages.recording = False
    return statistics.median(plain), statistics.median(spliced)


# ---------------------------------------------------------------------------------------------
# New processes: warm caches, imports

def _child(side: str, arch: str, workdir: Path, gpu: bool) -> None:
    """One compile of case (a)'s fixed module (rep 0), timed after the imports."""
    plain_k, splice_k = load_case("a", workdir, rep=0)
    k = splice_k if side == "splice" else plain_k
    if gpu:
        grid, args = _gpu_launch("a")
        t = launch_once(k, grid, args)
    else:
        t = compile_once(k, signature("a"), arch)
    print(json.dumps({"seconds": t}))


def _cub_child(arch: str, workdir: Path, gpu: bool) -> None:
    """Case (f) in this new process: one-time costs paid on case (a), then the plain and
    the splice sweeps of :data:`CUB_SIZES`, cold (the caches are this process's own)."""
    for k in load_case("a", workdir, rep=0):
        (launch_once(k, *_gpu_launch("a")) if gpu else compile_once(k, signature("a"), arch))
    plain_k, splice_k = load_case("cub", workdir, rep=0)
    out = {}
    for side, k in (("plain", plain_k), ("splice", splice_k)):
        t = 0.0
        for n in CUB_SIZES:
            t += launch_once(k, *_gpu_launch("cub", n)) if gpu else \
                compile_once(k, signature("cub", n), arch)
        out[side] = t
    print(json.dumps(out))


def cub_medians(reps: int, arch: str, gpu: bool, workdir: Path):
    """(plain, splice) seconds of the six-size sweeps, each rep a new process with its own
    cold caches (the CUB source is the same every time: only a fresh cache misses)."""
    plain, spliced = [], []
    for _ in range(reps):
        env = dict(os.environ, SPLICE_CACHE_DIR=tempfile.mkdtemp(prefix="splice-cub-"),
                   CUDA_TILE_CACHE_DIR=tempfile.mkdtemp(prefix="cutile-cub-"))
        argv = [sys.executable, __file__, "--child", "cub", "--arch", arch, "--workdir",
                str(workdir)] + (["--gpu"] if gpu else ["--cpu"])
        out = subprocess.run(argv, env=env, capture_output=True, text=True,
                             check=True).stdout
        got = json.loads(out.strip().splitlines()[-1])
        plain.append(got["plain"])
        spliced.append(got["splice"])
    return statistics.median(plain), statistics.median(spliced)


def _run_child(side: str, arch: str, workdir: Path, gpu: bool, env: dict) -> float:
    argv = [sys.executable, __file__, "--child", side, "--arch", arch, "--workdir",
            str(workdir)] + (["--gpu"] if gpu else ["--cpu"])
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["seconds"]


def warm_medians(reps: int, arch: str, gpu: bool, workdir: Path):
    """(plain, splice): a new process compiling (a) with a warm cuTile (plain) or splice
    (spliced) disk cache; the caches are warmed by a first child each."""
    env = dict(os.environ, SPLICE_CACHE_DIR=tempfile.mkdtemp(prefix="splice-warm-"),
               CUDA_TILE_CACHE_DIR=tempfile.mkdtemp(prefix="cutile-warm-"))
    load_case("a", workdir, rep=0)  # the module file the children import
    for side in ("plain", "splice"):
        _run_child(side, arch, workdir, gpu, env)
    plain, spliced = [], []
    for _ in range(reps):
        plain.append(_run_child("plain", arch, workdir, gpu, env))
        spliced.append(_run_child("splice", arch, workdir, gpu, env))
    return statistics.median(plain), statistics.median(spliced)


def _start_child(side: str, arch: str, workdir: Path, gpu: bool) -> None:
    """Case (g)-(i) in this new process: the first compile (launch) of the ``cub`` case's
    fixed module (rep 0) at 1024 elements, timed after the imports."""
    plain_k, splice_k = load_case("cub", workdir, rep=0)
    k = splice_k if side == "start-splice" else plain_k
    t = launch_once(k, *_gpu_launch("cub")) if gpu else \
        compile_once(k, signature("cub"), arch)
    print(json.dumps({"seconds": t}))


def _fresh_env(**extra) -> dict:
    """The environment of a new process with empty caches (``extra`` set over it)."""
    env = dict(os.environ, SPLICE_CACHE_DIR=tempfile.mkdtemp(prefix="splice-start-"),
               CUDA_TILE_CACHE_DIR=tempfile.mkdtemp(prefix="cutile-start-"))
    env.update(extra)
    return env


def start_medians(reps: int, arch: str, gpu: bool, workdir: Path) -> dict:
    """{"cub cold"|"cub warm"|"cub pack": (plain, splice) median seconds}: each rep a new
    process per side and row, interleaved; the warm caches are filled by a first pair of
    processes, the pack exported from the warm splice cache and imported into an empty
    one before each pack process (not timed: a service imports at deployment)."""
    load_case("cub", workdir, rep=0)
    warm = _fresh_env()
    for side in ("start-plain", "start-splice"):
        _run_child(side, arch, workdir, gpu, warm)
    pack = str(workdir / "starts.splice")
    # a splice without packs (an older tree, for comparison): no pack row
    packs = subprocess.run([sys.executable, "-m", "splice", "cache", "export", pack],
                           env=warm, capture_output=True).returncode == 0
    rows = ("cub cold", "cub warm") + (("cub pack",) if packs else ())
    times: dict[str, tuple[list[float], list[float]]] = {row: ([], []) for row in rows}
    for _ in range(reps):
        runs = {"cub cold": (_fresh_env(), _fresh_env()), "cub warm": (warm, warm)}
        if packs:
            packed = _fresh_env(SPLICE_COMPILE="never",
                                CUDA_TILE_CACHE_DIR=warm["CUDA_TILE_CACHE_DIR"])
            subprocess.run([sys.executable, "-m", "splice", "cache", "import", pack],
                           env=packed, check=True, capture_output=True)
            runs["cub pack"] = (warm, packed)
        for row, (plain_env, splice_env) in runs.items():
            times[row][0].append(_run_child("start-plain", arch, workdir, gpu, plain_env))
            times[row][1].append(_run_child("start-splice", arch, workdir, gpu, splice_env))
    return {row: (statistics.median(p), statistics.median(s))
            for row, (p, s) in times.items()}


_IMPORTS = {
    "import": ("import cuda.tile", "import splice"),
    "declare": ("import cuda.tile as ct; ct.kernel",
                "import splice; splice.extern; splice.kernel; splice.asm"),
}


def import_medians(case: str, reps: int):
    """(cuTile, splice): seconds of ``_IMPORTS[case]``'s statements in a new process."""
    code = "import time; t = time.perf_counter(); {s}; print(time.perf_counter() - t)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]))
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(reps + 1):  # the first of each warms the OS file cache
        for side, statements in enumerate(_IMPORTS[case]):
            out = subprocess.run([sys.executable, "-c", code.format(s=statements)], env=env,
                                 capture_output=True, text=True, check=True).stdout
            times[side].append(float(out.strip().splitlines()[-1]))
    return statistics.median(times[0][1:]), statistics.median(times[1][1:])


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", default=None, help="sm_90 (default: the GPU's, else sm_90)")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--cases", default="a,b,c,d,warm,cub,starts,import,declare")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--gpu", action="store_true", help="time ct.launch (default with a GPU)")
    g.add_argument("--cpu", action="store_true", help="time _compile (default without)")
    p.add_argument("--child", choices=("plain", "splice", "cub", "start-plain",
                                       "start-splice"), help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    p.add_argument("--stages", action="store_true",
                   help="under (a)-(d), the splice builds' median ms per stage")
    a = p.parse_args(argv)
    gpu = a.gpu or (not a.cpu and _has_gpu())
    if a.arch is None:
        if gpu:
            import torch
            a.arch = "sm_{}{}".format(*torch.cuda.get_device_capability())
        else:
            a.arch = "sm_90"
    workdir = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="bench-fl-"))
    if a.child == "cub":
        return _cub_child(a.arch, workdir, gpu)
    if a.child and a.child.startswith("start-"):
        return _start_child(a.child, a.arch, workdir, gpu)
    if a.child:
        return _child(a.child, a.arch, workdir, gpu)

    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    how = "first ct.launch" if gpu else f"_compile for {a.arch}, no GPU"
    print(f"first launch, splice vs. plain cuTile ({how}); medians of {a.reps} cold "
          f"compiles after one-time costs; {os.cpu_count()} CPUs")
    print(f"{'case':<38} {'plain ms':>9} {'splice ms':>10} {'ratio':>6} {'target':>7}")
    stages = StageTimes() if a.stages else None
    if stages is not None:
        stages.install()
    for case in cases:
        if case == "d" and int(a.arch[3:].rstrip("af")) < 90:
            continue
        for row, (plain, spliced) in _rows(case, a, gpu, workdir, stages).items():
            ratio = spliced / plain
            target = TARGETS[row]
            ok = "" if target is None else "ok" if ratio <= target else "MISS"
            print(f"{TITLES[row]:<38} {plain * 1e3:>9.1f} {spliced * 1e3:>10.1f} "
                  f"{ratio:>6.2f} {'-' if target is None else '<=' + str(target):>7} {ok}",
                  flush=True)
        if stages is not None and stages.builds:
            print(f"    splice stages, ms: {stages.medians()}", flush=True)
    return 0


def _rows(case: str, a, gpu: bool, workdir: Path, stages) -> dict:
    """{row: (plain, splice) seconds} of one case (``starts``: three rows)."""
    if case == "starts":
        return start_medians(a.reps, a.arch, gpu, workdir)
    if case == "warm":
        return {case: warm_medians(a.reps, a.arch, gpu, workdir)}
    if case == "cub":
        return {case: cub_medians(max(1, a.reps // 3), a.arch, gpu, workdir)}
    if case in _IMPORTS:
        return {case: import_medians(case, a.reps)}
    return {case: cold_medians(case, a.reps, a.arch, gpu, workdir, stages)}


if __name__ == "__main__":
    sys.exit(main())
