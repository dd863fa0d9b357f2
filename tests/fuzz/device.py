"""The splice side of a batch: one generated cuTile kernel calling every case's
``splice.cuda`` snippet, compiled by splice for sm_90 and run on the CPU PTX executor (or,
:func:`run_gpu`, launched on a GPU).

The kernel is Python source written to a private directory and imported (cuTile reads a
kernel's source): it loads each input tile once, calls each case's snippet on its inputs
(tiles, scalar parameters, Python constants, arrays) and stores each result in the case's
slot of the output array of the result's dtype.
"""

from __future__ import annotations

import atexit
import importlib.util
import itertools
import os
import re
import shutil
import tempfile
from pathlib import Path

import cuda.tile as ct
import numpy as np

import splice
from support import kernels as K
from support.ptx_exec import run_build

from .harness import BLOCKS, TILE, Layout, N

#: The directory of ``fuzz_ops.h``, the header every snippet includes.
INCLUDE_DIR = str(Path(__file__).resolve().parent / "include")

ARCH = "sm_90"

_HEAD = '''"""A batch of generated splice.cuda snippets (tests/fuzz)."""
import cuda.tile as ct
import splice

FZ_INC = ('"fuzz_ops.h"',)
FZ_DIR = {include!r}
NO_FMA = ("-fmad=false",)


@splice.kernel
def fuzz_batch({params}TILE: ct.Constant[int], NB: ct.Constant[int]):
    bid = ct.bid(0)
'''

_workdir: str | None = None
_modules = itertools.count()


def workdir() -> str:
    """This process's private (0700) directory for generated files, removed at exit."""
    global _workdir
    if _workdir is None:
        _workdir = tempfile.mkdtemp(prefix="splice-fuzz-")
        atexit.register(shutil.rmtree, _workdir, True)
    return _workdir


def parameters(lay: Layout) -> list[str]:
    """The kernel's runtime parameters, in order: input arrays, scalars loaded as tiles
    (arrays), scalar parameters, outputs."""
    return [*lay.arrays, *_scalars(lay, tiles=True), *_scalars(lay, tiles=False),
            *(f"out_{dt}" for dt in lay.outputs)]


def _scalars(lay: Layout, tiles: bool) -> list[str]:
    return [k for k in lay.scalars if (lay.scalar_form(k) != "param") == tiles]


def source(lay: Layout) -> tuple[str, dict[int, int]]:
    """The kernel module's text, and the case each ``splice.cuda`` call's line belongs to
    (line number -> case index)."""
    params = "".join(f"{p}, " for p in parameters(lay))
    lines = _HEAD.format(include=INCLUDE_DIR, params=params).splitlines()
    for key in lay.tiles():
        lines.append(f"    x_{key} = ct.load({key}, index=(bid,), shape=(TILE,), "
                     f"allow_tma=False)")
    for key in _scalars(lay, tiles=True):
        shape = "()" if lay.scalar_form(key) == "tile0" else "(1,)"
        lines.append(f"    x_{key} = ct.load({key}, index=(0,), shape={shape}, "
                     f"allow_tma=False)")
    where: dict[int, int] = {}
    for k, case in enumerate(lay.cases):
        for head, ind in _ARMS[case.placement]:
            if head:
                lines.append("    " + head)
            where[len(lines) + 1] = k
            lines.append(f"{ind}{_targets(lay, k)} = {_call(lay, k)}")
            for r, (dt, slot) in enumerate(lay.slots[k]):
                lines.append(f"{ind}ct.store(out_{dt}, index=({slot} * NB + bid,), "
                             f"tile={_result(lay, k, r)}, allow_tma=False)")
    return "\n".join(lines) + "\n", where


#: Each placement's (line opening a block, indentation of the call) pairs.
_ARMS = {"straight": [("", "    ")],
         "loop": [("for it in range(bid % 2 + 1):", "        ")],
         "branch": [("if bid % 2 == 0:", "        "), ("else:", "        ")]}


def _result(lay: Layout, k: int, r: int) -> str:
    return f"r{k}" if len(lay.slots[k]) == 1 else f"r{k}_{r}"


def _targets(lay: Layout, k: int) -> str:
    return ", ".join(_result(lay, k, r) for r in range(len(lay.slots[k])))


def _call(lay: Layout, k: int) -> str:
    case = lay.cases[k]
    res = case.results
    dtype = f"ct.{_ct(res[0])}" if len(res) == 1 else \
        "(" + ", ".join(f"ct.{_ct(d)}" for d in res) + ")"
    opts = ["dtype=" + dtype]
    if not case.pure:
        opts.append("pure=False")
    if case.options:
        assert case.options == ("-fmad=false",), case.options
        opts.append("options=NO_FMA")
    opts += ["includes=FZ_INC", "include_dirs=FZ_DIR"]
    for inp, key in zip(case.inputs, lay.sources[k]):
        opts.append(f"{inp.name}={_argument(lay, inp, key)}")
    return f"splice.cuda({case.code!r}, {', '.join(opts)})"


def _ct(dtype: str) -> str:
    return "bool_" if dtype == "bool" else dtype


def _argument(lay: Layout, inp, key) -> str:
    if inp.kind == "const":
        return repr(inp.values[0])
    loaded = inp.kind == "tile" or (inp.kind == "scalar" and lay.scalar_form(key) != "param")
    return f"x_{key}" if loaded else key


def kernel(lay: Layout):
    """The batch's kernel function: its module (:func:`source`) written to
    :func:`workdir` and imported."""
    text, _ = source(lay)
    name = f"splice_fuzz_batch_{os.getpid()}_{next(_modules)}"
    path = os.path.join(workdir(), name + ".py")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fuzz_batch


def signature(lay: Layout):
    params = [K.array(_dtype(dt)) for dt in lay.arrays.values()]
    params += [K.array(_dtype(lay.scalars[k])) for k in _scalars(lay, tiles=True)]
    params += [K.scalar(_dtype(lay.scalars[k])) for k in _scalars(lay, tiles=False)]
    params += [K.array(_dtype(dt)) for dt in lay.outputs]
    return K.signature(*params, TILE, BLOCKS)


def _dtype(name: str):
    return getattr(ct, _ct(name))


def compile_batch(lay: Layout):
    """``splice.compile`` of the batch's kernel for sm_90.

    Raises:
        SpliceError: splice refused a case (:func:`case_of_error` finds which).
    """
    return splice.compile(kernel(lay), signature(lay), arch=ARCH)


_LINE = re.compile(r'splice_fuzz_batch_\d+_\d+\.py(?::|", line )(\d+)')


def case_of_error(message: str, where: dict[int, int]) -> int | None:
    """The case whose call line a splice error names (None: it names none)."""
    for m in _LINE.finditer(message):
        k = where.get(int(m.group(1)))
        if k is not None:
            return k
    return None


def arguments(lay: Layout, data: dict) -> tuple[list, dict[str, np.ndarray]]:
    """The launch's arguments, and the output arrays (filled with 0xA5 bytes: an element
    no store reaches shows)."""
    outs = {dt: np.full(n * N * np.dtype(dt).itemsize, 0xA5, np.uint8).view(dt)
            for dt, n in lay.outputs.items()}
    args = [data[k] for k in lay.arrays]
    args += [np.resize(data[k], 16) for k in _scalars(lay, tiles=True)]   # 16: cuTile's
    args += [data[k][0] for k in _scalars(lay, tiles=False)]      # shape_divisible_by
    return args + list(outs.values()), outs


def run_executor(build, lay: Layout, data: dict):
    """The outputs (dtype -> array) of the build run on the CPU executor, and its launch
    (``.approx``: the approximate instructions that ran)."""
    args, outs = arguments(lay, data)
    launch = run_build(build, (BLOCKS,), *args)
    return outs, launch


def run_gpu(fn, lay: Layout, data: dict, dev) -> dict[str, np.ndarray]:
    """The outputs of the batch's kernel ``fn`` launched on the GPU (``dev``: the tests'
    :class:`support.gpu.Dev`)."""
    args, outs = arguments(lay, data)
    on_gpu = [dev.arr(a) if isinstance(a, np.ndarray) else a for a in args]
    dev.launch((BLOCKS,), fn, (*on_gpu, TILE, BLOCKS))
    n_out = len(outs)
    return {dt: dev.host(g) for dt, g in zip(outs, on_gpu[len(on_gpu) - n_out:])}
