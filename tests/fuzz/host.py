"""The reference side of a batch: the same snippets compiled by the host C++ compiler (g++,
or clang++ where ``$CXX`` names it) and run on the same inputs.

Each case becomes a C++ function of the snippet's parameters (C types as splice gives them;
several results a struct, ``return {a, b};``), its text preceded by ``#line 1 "case K"`` so
that a compiler error or a sanitizer report names the case. ``main`` reads the inputs from
a file (the arrays and scalars at 8-byte aligned offsets, in :func:`device.parameters`
order), calls every case on every element and writes the outputs.

Compiled with ``-std=c++17`` (NVRTC's default), ``-O0`` (a defined program computes the
same at any level, and -O0 compiles a batch three times faster), ``-ffp-contract=off`` (no
fma the snippet does not call), ``-frounding-math`` (``fuzz_ops.h`` switches rounding
modes); with
``ubsan=True`` also ``-fsanitize=undefined,float-cast-overflow`` and no recovery, so
undefined behaviour the generator let through is reported as a host finding instead of
making the two sides differ.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np

from . import cmodel as C
from .device import INCLUDE_DIR, workdir
from .harness import Layout, N
from .program import const_type, literal

FLAGS = ["-std=c++17", "-O0", "-ffp-contract=off", "-frounding-math", "-fno-strict-aliasing",
         "-w"]
UBSAN = ["-fsanitize=undefined,float-cast-overflow", "-fno-sanitize-recover=all"]


def compiler() -> str:
    """``$CXX``, else g++, else clang++ (absolute path)."""
    for name in (os.environ.get("CXX"), "g++", "clang++"):
        path = shutil.which(name) if name else None
        if path:
            return path
    raise RuntimeError("no host C++ compiler (g++ or clang++) on PATH; set CXX")


def _offsets(lay: Layout, data: dict) -> tuple[dict[str, int], int]:
    offs, pos = {}, 0
    for key in [*lay.arrays, *lay.scalars]:
        offs[key] = pos
        pos += -(-data[key].nbytes // 8) * 8
    return offs, pos


def _out_offsets(lay: Layout) -> tuple[dict[str, int], int]:
    offs, pos = {}, 0
    for dt, n in lay.outputs.items():
        offs[dt] = pos
        pos += -(-n * N * np.dtype(dt).itemsize // 8) * 8
    return offs, pos


def source(lay: Layout, data: dict) -> str:
    """The C++ program of the batch."""
    lines = ['#include "fuzz_ops.h"', "#include <stdio.h>", "#include <stdlib.h>", ""]
    for k, case in enumerate(lay.cases):
        lines += _function(lay, k)
    lines += _main(lay, data)
    return "\n".join(lines) + "\n"


def _function(lay: Layout, k: int) -> list[str]:
    case = lay.cases[k]
    params = []
    for inp in case.inputs:
        t = const_type(inp) if inp.kind == "const" else inp.ctype
        params.append(f"{t.c}{'*' if inp.kind == 'array' else ''} {inp.name}")
    types = [C.TYPES[d] for d in case.results]
    out: list[str] = []
    if len(types) > 1:
        members = " ".join(f"{t.c} r{i};" for i, t in enumerate(types))
        out.append(f"struct fz_results_{k} {{ {members} }};")
        ret = f"fz_results_{k}"
    else:
        ret = types[0].c
    out.append(f"static {ret} fz_case_{k}({', '.join(params)}) {{")
    out.append(f'#line 1 "case {k}"')
    out.append(case.code if case.is_body else f"return {case.code};")
    out += ["}", ""]
    return out


def _main(lay: Layout, data: dict) -> list[str]:
    offs, size = _offsets(lay, data)
    oofs, osize = _out_offsets(lay)
    lines = ['#line 1 "main"', "int main(int argc, char** argv) {",
             f"  static unsigned long long in[{max(size, 8) // 8}], out[{max(osize, 8) // 8}];",
             '  FILE* f = fopen(argv[1], "rb");',
             f"  if (!f || fread(in, 1, {size}, f) != {size}) return 2;",
             "  fclose(f);",
             "  char* ib = (char*)in; char* ob = (char*)out;"]
    for key, dt in lay.arrays.items():
        lines.append(f"  {C.TYPES[dt].c}* {key} = ({C.TYPES[dt].c}*)(ib + {offs[key]});")
    for key, dt in lay.scalars.items():
        lines.append(f"  {C.TYPES[dt].c} {key} = *({C.TYPES[dt].c}*)(ib + {offs[key]});")
    for dt in lay.outputs:
        lines.append(f"  {C.TYPES[dt].c}* out_{dt} = ({C.TYPES[dt].c}*)(ob + {oofs[dt]});")
    lines.append(f"  for (long e = 0; e < {N}; ++e) {{")
    for k, case in enumerate(lay.cases):
        args = ", ".join(_argument(inp, key) for inp, key in zip(case.inputs, lay.sources[k]))
        lines.append(f"    {{ auto r = fz_case_{k}({args});")
        slots = lay.slots[k]
        for r, (dt, slot) in enumerate(slots):
            value = "r" if len(slots) == 1 else f"r.r{r}"
            lines.append(f"      out_{dt}[{slot * N} + e] = {value};")
        lines.append("    }")
    lines += ["  }",
              '  f = fopen(argv[2], "wb");',
              f"  if (!f || fwrite(out, 1, {osize}, f) != {osize}) return 3;",
              "  fclose(f);", "  return 0;", "}"]
    return lines


def _argument(inp, key) -> str:
    if inp.kind == "const":
        return literal(const_type(inp), inp.values[0])
    if inp.kind == "tile":
        return f"{key}[e]"
    return key


class HostError(Exception):
    """The host compiler rejected the program or its run failed; ``case``: the case a
    ``case K`` location in the message names (None: none)."""

    def __init__(self, message: str):
        super().__init__(message)
        m = re.search(r"\bcase (\d+):", message)
        self.case = int(m.group(1)) if m else None


def run(lay: Layout, data: dict, ubsan: bool = False) -> dict[str, np.ndarray]:
    """The outputs (dtype -> array) of the batch's C++ program.

    Raises:
        HostError: it did not compile or did not run to the end.
    """
    d = workdir()
    stem = os.path.join(d, f"host_{os.getpid()}_{id(lay)}")
    with open(os.open(stem + ".cpp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(source(lay, data))
    offs, size = _offsets(lay, data)
    blob = bytearray(size)
    for key, off in offs.items():
        raw = data[key].tobytes()
        blob[off:off + len(raw)] = raw
    with open(os.open(stem + ".in", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(blob)
    cmd = [compiler(), *FLAGS, *(UBSAN if ubsan else []), f"-I{INCLUDE_DIR}", stem + ".cpp",
           "-o", stem + ".exe"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise HostError(f"the host compiler rejected the program:\n{p.stderr[-4000:]}")
    p = subprocess.run([stem + ".exe", stem + ".in", stem + ".out"], capture_output=True,
                       text=True, timeout=600)
    if p.returncode:
        raise HostError(f"the host program failed ({p.returncode}):\n{p.stderr[-4000:]}")
    raw = open(stem + ".out", "rb").read()
    oofs, _ = _out_offsets(lay)
    out = {}
    for dt, n in lay.outputs.items():
        nbytes = n * N * np.dtype(dt).itemsize
        out[dt] = np.frombuffer(raw[oofs[dt]:oofs[dt] + nbytes], dtype=dt).copy()
    for ext in (".cpp", ".in", ".out", ".exe"):
        os.unlink(stem + ext)
    return out
