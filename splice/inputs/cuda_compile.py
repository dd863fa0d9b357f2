"""Compiling a CUDA C source (:class:`splice.inputs.fragments.CudaSource`): NVRTC on its text plus
the signature checks and trampolines splice generates for its externs (:mod:`splice.inputs.checks`),
nvJitLink for ``-dlto`` (:func:`lto_link_to_ptx`, also LTO-IR inputs'), and the error a
failed compile becomes: the first error with the line it points at and the hints that fit
(:func:`compile_source`).
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import SpliceCompileError, SpliceUnsafePathError
from ..system import safe_fs, toolchain

if TYPE_CHECKING:
    from .headers import HeaderProvider

log = logging.getLogger("splice")

#: The directory of an NVRTC program that has none of its own (a source declared outside a
#: file, code splice generates): ``/dev/null`` is no directory, so NVRTC looks a quoted
#: ``#include`` up in the ``-I`` directories only. Never a relative name: NVRTC looks a
#: quoted name up beside the program first, and a relative program is in the current
#: directory, which another user may be able to write (``/tmp``, a team directory).
NO_DIRECTORY = "/dev/null"


def program_name(where: str, tag: str) -> str:
    """The NVRTC name of CUDA C text declared at ``where`` (``"file:line"``): an absolute
    path in the declaring file's resolved directory, as a ``.cu`` file beside it would be
    (its quoted ``#include`` names are looked up there first, then in the ``-I``
    directories); in :data:`NO_DIRECTORY` when the declaration is in no file
    (:func:`splice.system.safe_fs.declaring_dir`: ``python -c``, ``<stdin>``, a notebook
    cell).

    Example:
        >>> program_name("<string>:3", "extern_source")
        '/dev/null/extern_source@<string>:3'
    """
    file, _, line = where.rpartition(":")
    home = safe_fs.declaring_dir(file) or Path(NO_DIRECTORY)
    return str(home / f"{tag}@{Path(file).name}:{line}")


def compile_source(full: str, name: str, target: str, options: list[str], *, declared,
                   dlto: bool, roots, providers: Sequence[HeaderProvider], what: str,
                   headers=()) -> str:
    """The PTX of CUDA C text ``full`` (NVRTC file name ``name``) for ``target`` with NVRTC
    ``options``, the checks of the externs ``declared`` from it appended; with ``dlto``,
    compiled to LTO-IR and linked to PTX holding ``roots`` ((symbol, Signature) pairs). A C
    symbol the type check cannot see at global scope is checked by redeclaration instead
    (never dropped: see :mod:`splice.inputs.checks`). ``headers``: the source's include walk
    (:func:`splice.inputs.headers.included`), which decides whether NVRTC's PCH may be used
    and names its directory (:func:`splice.system.nvrtc_pch.wanted`); () never uses it.

    Raises:
        SpliceCompileError: naming ``what`` (the source), the first error and its line,
            with the hints that fit (``providers``' among them) and NVRTC's log, errors
            first.
        SpliceLinkError: nvJitLink rejected the LTO-IR.
    """
    from ..ptxtools.ptx import arch_words
    from ..system.nvrtc_pch import state, wanted
    from .checks import generated_blocks, lookup_failures, results_hint
    pch = state(headers) if wanted(full, options, headers) else ""
    start = time.perf_counter()
    redeclare: frozenset = frozenset()
    c_symbols = {d.symbol for d in declared if d.cxx_name is None}
    while True:
        blocks = generated_blocks(declared, redeclare)
        code = "".join(text for _, text in blocks)
        try:
            if dlto:
                ltoir = toolchain.nvrtc_compile_ltoir((full + code).encode(), name,
                                                      options + ["-dlto"], pch=pch)
                return _slow(lto_link_to_ptx([(ltoir, name)], target, roots, what),
                             start, _what_for_log(what, declared), target)
            return _slow(toolchain.nvrtc_compile((full + code).encode(), name, options,
                                                 pch=pch)[0], start,
                         _what_for_log(what, declared), target)
        except SpliceCompileError as e:
            missing = (lookup_failures(e.log) & c_symbols) - redeclare
            if missing:
                redeclare = redeclare | missing
                continue
            raise SpliceCompileError(
                f"{what} does not compile for {arch_words(target)}: "
                f"{_first_error(e.log, full, name, blocks)}"
                f"{undefined_result_hint(e.log)}"
                f"{_overload_hint(e.log, declared)}"
                f"{results_hint(e.log, declared)}"
                f"{_kernel_hint(full, declared)}"
                f"{header_hint(e.log, providers)}"
                f"{''.join(p.compile_hint(e.log) for p in providers)}",
                errors_first(e.log)) from None


#: NVRTC's warnings that mean an undefined or silently changed result, which splice makes
#: errors (``--diag-error``, NVRTC's own option, :func:`undefined_result_option`): number ->
#: (a regular expression NVRTC's message starts with, what it means). ``docs/errors.md``
#: lists them; the CUDA headers and CCCL compile with them
#: (``tests/test_nvrtc_diagnostics.py``). Not among
#: them: #68 ("integer conversion resulted in a change of sign": ``__shfl_sync(-1, ...)``,
#: a defined conversion CUDA code uses for a full mask) and the warnings on code that is
#: well defined (unused variables, ``=`` in a condition, deprecations).
UNDEFINED_RESULTS: dict[int, tuple[str, str]] = {
    39: ("division by zero", "division by a constant zero is undefined"),
    61: ("integer operation result is out of range",
         "signed integer overflow is undefined"),
    62: ("shift count is negative", "a negative shift count is undefined"),
    63: ("shift count is too large",
         "a shift by the type's width or more is undefined"),
    69: ("integer conversion resulted in truncation",
         "the constant does not fit its type: its value changes"),
    117: ("non-void .* should return a value",
          "a 'return;' in a function with a result returns garbage"),
    170: ("pointer points outside of underlying object",
          "pointer arithmetic past the object's end (or before it) is undefined"),
    173: ("floating-point value does not fit in required integral type",
          "a float out of an integer type's range converts to an undefined value"),
    179: ('right operand of "%" is zero', "remainder by a constant zero is undefined"),
    181: ("argument is incompatible with corresponding format string conversion",
          "printf reads the argument as another type: undefined"),
    220: ("integral value does not fit in required floating-point type",
          "an integer out of the float type's range converts to an undefined value"),
    221: ("floating-point value does not fit in required floating-point type",
          "a float out of the narrower type's range converts to an undefined value"),
    224: ("the format string requires additional arguments",
          "printf reads arguments that were not passed: undefined"),
    226: ("invalid format string conversion", "an unknown printf conversion is undefined"),
    430: ("returning reference to local temporary",
          "the reference dangles: reading it is undefined"),
    546: ("transfer of control bypasses initialization",
          "the jump skips a variable's initialisation: its value is undefined"),
    549: (".* is used before its value is set",
          "reading an uninitialised variable gives an undefined value"),
    836: ("returning reference to local variable",
          "the reference dangles: reading it is undefined"),
    940: ("missing return statement at end of non-void function",
          "a path that reaches the end of a function with a result returns garbage"),
    1056: ("returning pointer to local variable",
           "the pointer dangles: reading through it is undefined"),
    1057: ("returning pointer to local temporary",
           "the pointer dangles: reading through it is undefined"),
    1305: ('function declared with "noreturn" does return',
           "returning from a noreturn function is undefined"),
    2361: ("invalid narrowing conversion (?!.*: constant value)",
           "the braced value is converted to a type that cannot hold it: its value changes"),
    2362: ("invalid narrowing conversion .*: constant value does not fit",
           "the braced constant does not fit its type"),
    2364: ("invalid narrowing conversion .*: constant value cannot be represented exactly",
           "the braced constant cannot be represented exactly in its type"),
}


def undefined_result_option() -> str:
    """NVRTC's option making each warning of :data:`UNDEFINED_RESULTS` an error.

    Returns:
        str: ``--diag-error=39,61,...``.

    Example:
        >>> undefined_result_option().startswith("--diag-error=39,")
        True
    """
    return "--diag-error=" + ",".join(str(n) for n in UNDEFINED_RESULTS)


def undefined_result_hint(log: str) -> str:
    """Why the first error of NVRTC's ``log`` is an error in splice, where it is one of the
    warnings of :data:`UNDEFINED_RESULTS`; else "".

    Example:
        >>> undefined_result_hint('f.cu(2): error: shift count is too large')[:40]
        '\\n    hint: NVRTC warns of this (#63); sp'
    """
    for ln in log.splitlines():
        m = _ERR_RE.match(ln.strip())
        if m is None:
            continue
        said = ln.strip()[m.end():].lstrip(": ")
        for number, (text, why) in UNDEFINED_RESULTS.items():
            if re.match(text, said):
                return (f"\n    hint: NVRTC warns of this (#{number}); splice makes it an "
                        f"error: {why}")
        return ""
    return ""


def _what_for_log(what: str, declared) -> str:
    """``what``, and the instantiations it holds (``'f' ... with tiles float[1024]``); the
    other sizes of the first one, compiled along (:attr:`~splice.inputs.fragments.CudaSource.
    batch`), by their tiles only."""
    from .checks import TileDeclared
    if not declared:
        return what
    first = declared[0]
    along = [d for d in declared[1:] if isinstance(first, TileDeclared) and
             isinstance(d, TileDeclared) and d.cxx_name == first.cxx_name]
    rest = [d.label for d in declared[1:] if d not in along]
    sizes = f" (and its other sizes, with tiles {'; '.join(d.tiles for d in along)})" \
        if along else ""
    return f"{what}: {', '.join([first.label + sizes, *rest])}"


def _slow(ptx: str, start: float, what: str, target: str) -> str:
    """``ptx``, after an INFO line when its compile took more than a second."""
    seconds = time.perf_counter() - start
    if seconds > 1.0:
        log.info("splice: NVRTC took %.1f s to compile %s for %s", seconds, what, target)
    return ptx


_ERR_RE = re.compile(r"^(.*)\((\d+)\): (?:catastrophic )?error")


_DIAGNOSTIC_RE = re.compile(r"^\S.*\(\d+\): (?:catastrophic )?(error|warning|remark|note)")


def errors_first(log: str) -> str:
    """NVRTC's log with its error diagnostics (each with the lines under it) before its
    warnings: CCCL's and the CUDA headers' own deprecation warnings (``#1444-D``, some
    forty lines) would otherwise bury the user's error. Nothing is dropped."""
    blocks: list[list[str]] = [[]]
    end = "\n" if log.endswith("\n") else ""
    for ln in log[:len(log) - len(end)].split("\n"):
        if _DIAGNOSTIC_RE.match(ln):
            blocks.append([])
        blocks[-1].append(ln)
    head, body = blocks[0], blocks[1:]
    is_error = [bool(re.match(r"^\S.*\(\d+\): (?:catastrophic )?error", b[0])) for b in body]
    ordered = [b for b, e in zip(body, is_error) if e] + \
        [b for b, e in zip(body, is_error) if not e]
    return "\n".join(ln for b in (head, *ordered) for ln in b) + end


def _errors(log: str):
    for ln in log.splitlines():
        m = _ERR_RE.match(ln.strip())
        if m:
            yield ln.strip(), m.group(1), int(m.group(2))


def _first_error(log: str, source: str, name: str, generated=()) -> str:
    """The first error line of an NVRTC log, with the source line it points at: the user's
    source, a header (read from disk), or the code splice generated for an extern (named
    with its declaration; ``generated``: :func:`splice.inputs.checks.generated_blocks`)."""
    from .checks import owner_of_line
    lines = source.splitlines()
    for ln, file, n in _errors(log):
        if file == name:
            if 0 < n <= len(lines):
                return f"{ln}\n    line {n}: {lines[n - 1].strip()}"
            gen = "".join(text for _, text in generated).splitlines()
            k = n - len(lines)
            owner = owner_of_line(list(generated), k)
            text = gen[k - 1].strip() if 0 < k <= len(gen) else ""
            return (f"{ln}\n    in the code splice generated for extern "
                    f"{owner or '(unknown)'}: {text}")
        try:   # a regular file only: a FIFO at that name would hang the error message
            text = safe_fs.read_regular(file, safe_fs.MAX_SOURCE_BYTES, "the header").decode(
                errors="replace").splitlines()[n - 1].strip()
        except (OSError, IndexError, SpliceUnsafePathError):
            text = ""
        return f"{ln}\n    {file}:{n}: {text}"
    for ln in log.splitlines():
        if "error" in ln:
            return ln.strip()
    return log.strip().splitlines()[0] if log.strip() else "unknown NVRTC error"


_OVERLOADED = re.compile(r'cannot determine which instance of overloaded function "([^"]+)"')


def _overload_hint(log: str, declared) -> str:
    """How to call an overloaded C++ function declared by its plain (C) name."""
    for m in _OVERLOADED.finditer(log):
        for d in declared:
            if d.cxx_name is None and d.symbol == m.group(1).lstrip(":"):
                return (f"\n    '{d.symbol}' (extern declared at {d.where}) is an overloaded "
                        f"C++ function, not one extern \"C\" symbol: declare it by its "
                        f"qualified C++ name, name=\"::{d.symbol}\" (or \"ns::{d.symbol}\" "
                        f"in a namespace), and splice calls the overload whose parameters "
                        f"match the signature {d.sig}")
    return ""


def _kernel_hint(source: str, declared) -> str:
    """The fix when an extern names a ``__global__`` function (a kernel, which the type
    check reports as returning the wrong type)."""
    for d in declared:
        name = (d.cxx_name or d.symbol).split("::")[-1].split("<")[0]
        if re.search(rf"__global__[^;{{}}]*\b{re.escape(name)}\s*\(", source):
            return (f"\n    '{name}' (extern declared at {d.where}) is a __global__ function, "
                    f"a kernel: an extern calls a __device__ function; declare it "
                    f"extern \"C\" __device__ (a kernel cannot be called from a kernel "
                    f"without dynamic parallelism)")
    return ""


def _known_header_hint(header: str) -> str:
    """The hint for headers that nvcc code often includes and NVRTC does without (math,
    printf); "" for others."""
    if header == "math.h":
        return ("CUDA's math functions (expf, sqrtf, __fmaf_rn...) are built into NVRTC and "
                "need no include: drop <math.h> (libcu++'s <cuda/std/cmath> has the C++ "
                "overloads)")
    if header in ("stdio.h", "cstdio"):
        return f"NVRTC declares device printf itself: drop <{header}>"
    if header in ("assert.h", "cassert"):
        return (f"NVRTC declares device assert itself: drop <{header}> (a failed assert "
                f"traps the launch)")
    return ""


_CANNOT_OPEN = re.compile(r'cannot open source file "([^"]+)"')


def header_hint(log: str, providers: Sequence[HeaderProvider]) -> str:
    """How to get a header NVRTC could not open (``providers``: the source's, which know
    their own headers: CCCL's, NVSHMEM's), or what to include instead; "" when the log
    names no such header."""
    m = _CANNOT_OPEN.search(log)
    if m is None:
        return ""
    header = m.group(1)
    for hint in (_known_header_hint(header), *(p.header_hint(header) for p in providers),
                 _no_directory_hint(log, header)):
        if hint:
            return f"\n    hint: {hint}"
    return ""


def _no_directory_hint(log: str, header: str) -> str:
    """The hint when a program in :data:`NO_DIRECTORY` (declared outside a file, or a
    ``splice.cuda`` snippet) quoted a header the ``-I`` directories do not have."""
    said = re.search(rf'^{re.escape(NO_DIRECTORY)}/[^\n]*cannot open source file '
                     rf'"{re.escape(header)}"', log, re.M)
    if said is None or f'#include "{header}"' not in log:
        return ""
    return (f'"{header}" is looked up in include_dirs= only: CUDA C given as text outside a '
            f".py file (python -c, <stdin>) or in splice.cuda has no directory of its own "
            f"(the current directory is never searched); give the header's directory in "
            f"include_dirs=")


def lto_link_to_ptx(inputs: list[tuple[bytes, str]], target: str, roots, what: str) -> str:
    """Link LTO-IR with nvJitLink (``-lto -ptx``) into PTX holding the functions ``roots``
    ((symbol, Signature) pairs).

    LTO drops every function no kernel uses, so a generated root kernel takes the address
    of each requested function; the root is removed from the PTX afterwards.

    Raises:
        SpliceLinkError: nvJitLink rejected the inputs (its log attached).
    """
    from ..ptxtools.ptx import Module, apply_edits, arch_words
    from .checks import c_declaration, include_headers
    keep = " ".join(f"p[{i}] = (void *)&{sym};" for i, (sym, _) in enumerate(roots))
    root_src = (include_headers(sig for _, sig in roots)
                + "".join(c_declaration(sym, sig) for sym, sig in roots)
                + f"extern \"C\" __global__ void __splice_lto_root(void **p) {{ {keep} }}\n")
    opts = [f"-arch={target}", "-rdc=true", "-dlto"]
    inc = toolchain.cuda_include_dir()
    if inc is not None:
        opts.append(f"-I{inc}")
    root = toolchain.nvrtc_compile_ltoir(root_src.encode(),
                                         f"{NO_DIRECTORY}/splice_lto_root.cu", opts)
    buf = toolchain.nvjitlink_run(
        [f"-arch={target}", "-lto", "-ptx"],
        [("LTOIR", data, name) for data, name in [*inputs, (root, "splice_lto_root.ltoir")]],
        "ptx", f"the LTO-IR of {what} for {arch_words(target)}")
    text = bytes(buf).rstrip(b"\0").decode()
    mod = Module(text, f"nvJitLink output for {what}")
    fn = mod.functions.get("__splice_lto_root")
    if fn is not None and fn.body is not None:
        text = apply_edits(text, [(fn.header.start, mod.statements[fn.body[1]].end, "")])
    return text
