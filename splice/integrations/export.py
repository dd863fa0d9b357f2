"""Ahead-of-time export of a ``@splice.kernel``: :func:`export_kernel`, the counterpart of
``cuda.tile.compilation.export_kernel`` (which runs cuTile's compiler directly and so cannot
splice; given a spliced kernel it raises :class:`splice.SpliceCallError` naming this one).

::

    sig = splice.kernel_signature("array(float32)", "array(float32)", 1024)
    splice.export_kernel(gelu, [sig], "gelu.cubin", gpu_code="sm_90")
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import IO, Sequence

from ..errors import SpliceDeclarationError, SpliceOptionValueError

log = logging.getLogger("splice")


def export_kernel(kernel, signatures: Sequence, output_file: IO | str | bytes | os.PathLike,
                  *, gpu_code: str | None = None, output_format: str = "cubin",
                  bytecode_version: str | None = None) -> None:
    """Compile ``kernel`` for every signature into one cubin and write it, as
    ``cuda.tile.compilation.export_kernel(..., output_format="cubin")`` does: one ELF cubin
    with one entry per signature (its symbol: ``signature.symbol``, or cuTile's mangled
    name when that is None), every extern call spliced in. Needs no GPU.

    Args:
        kernel: a ``@splice.kernel``.
        signatures (Sequence[KernelSignature]): non-empty; see :func:`splice.kernel_signature`.
        output_file (str | bytes | os.PathLike | binary file object): where to write the
            cubin (``io.BytesIO`` keeps it in memory).
        gpu_code (str): the target, e.g. ``"sm_90"`` (required).
        output_format (str): ``"cubin"`` only: Tile IR bytecode cannot hold spliced calls.
        bytecode_version: must be None (cuTile's own bytecode version is used).

    Returns:
        None: the cubin is written to ``output_file``.

    Raises:
        SpliceOptionValueError: no ``gpu_code``, an output format other than cubin or a
            ``bytecode_version``: a :class:`SpliceDeclarationError` that is also the
            ``ValueError`` cuTile's ``export_kernel`` raises for the first two.
        SpliceDeclarationError: not a ``@splice.kernel``, no signatures, two signatures with
            one symbol, or an ``output_file`` that cannot be written (or is a text file).
        SpliceCallError: as :func:`splice.compile`.
        SpliceCompileError: as :func:`splice.compile`.
        SpliceLinkError: as :func:`splice.compile`.
        SpliceRewriteError: as :func:`splice.compile`.
        SpliceToolchainError: as :func:`splice.compile`.

    Example:
        ```python
        import io

        import cuda.tile as ct
        import splice

        @splice.kernel
        def scale(x, y, TILE: ct.Constant[int]):     # inline PTX: splice.asm
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=splice.asm("add.f32 $0, $1, $1;", t,
                                                             dtype=ct.float32))

        out = io.BytesIO()
        sig = splice.kernel_signature("array(float32)", "array(float32)", 128,
                                      symbol="scale_128")
        splice.export_kernel(scale, [sig], out, gpu_code="sm_90")
        print(len(out.getvalue()), "bytes")
        assert b"scale_128" in out.getvalue()
        ```
    """
    from ..driver.pipeline import build
    from ..driver.splice_kernel import SpliceKernel
    from ..system import _cutile

    if not isinstance(kernel, SpliceKernel):
        raise SpliceDeclarationError(
            f"splice.export_kernel: {kernel!r} is not a @splice.kernel; export a plain "
            f"@ct.kernel with cuda.tile.compilation.export_kernel")
    fn = _cutile.python_function(kernel)
    what = (f"splice.export_kernel of kernel '{fn.__name__}' "
            f"({fn.__code__.co_filename}:{fn.__code__.co_firstlineno})")
    # the refusals cuTile's export_kernel makes with a ValueError (an unknown output_format,
    # no gpu_code, a bytecode_version it cannot parse) are ValueErrors here too
    if output_format != "cubin":
        raise SpliceOptionValueError(
            f"{what}: output_format={output_format!r}: only 'cubin' can be exported, Tile IR "
            f"bytecode cannot hold the spliced calls (they are made after tileiras)")
    if bytecode_version is not None:
        raise SpliceOptionValueError(f"{what}: bytecode_version must be None for a cubin")
    if gpu_code is None:
        raise SpliceOptionValueError(f"{what}: gpu_code is required, e.g. gpu_code='sm_90'")
    signatures = _signature_list(kernel, signatures, what)
    if isinstance(output_file, (str, bytes, os.PathLike)):
        check_output_path(output_file, what)
    b = build(kernel, signatures, gpu_code)
    log.info("exported %s for %s: %d signature(s), %d bytes", b.kernel_name, b.arch,
             len(signatures), len(b.cubin))
    _write(output_file, b.cubin, what)


def _signature_list(kernel, signatures, what: str) -> list:
    """``signatures`` (one KernelSignature or a sequence) as a non-empty list whose entry
    symbols differ.

    Raises:
        SpliceDeclarationError: no signatures, anything but a KernelSignature, or two
            signatures with one symbol.
    """
    from cuda.tile.compilation import KernelSignature
    if isinstance(signatures, KernelSignature):
        signatures = [signatures]
    signatures = list(signatures)
    if not signatures or not all(isinstance(s, KernelSignature) for s in signatures):
        raise SpliceDeclarationError(
            f"{what}: signatures must be a non-empty list of KernelSignature "
            f"(splice.kernel_signature(...) makes one), got {signatures!r}")
    from ..system import _cutile
    name = _cutile.python_function(kernel).__name__
    symbols = [s.symbol or s.with_mangled_symbol(name).symbol for s in signatures]
    twice = sorted({x for x in symbols if symbols.count(x) > 1})
    if twice:
        raise SpliceDeclarationError(
            f"{what}: two signatures give the entry symbol(s) {', '.join(twice)}; give each "
            f"signature a different symbol (signature.with_symbol(...)) or drop the duplicate")
    return signatures


def check_output_path(path, what: str) -> None:
    """Refuse, before anything is compiled, an output path that cannot be written: a
    directory, or a file in a directory that does not exist or is not writable.

    Raises:
        SpliceDeclarationError: naming ``what`` and the path.
    """
    p = Path(os.fsdecode(path))
    parent = p.parent if str(p.parent) else Path(".")
    why = ("is a directory; give a file name such as "
           f"{str(p / 'kernel.cubin')!r}" if p.is_dir() else
           f"is in {str(parent)!r}, which does not exist; create it first"
           if not parent.is_dir() else
           f"is in {str(parent)!r}, which is not writable" if not os.access(parent, os.W_OK)
           else None)
    if why:
        raise SpliceDeclarationError(f"{what}: cannot write the cubin to {str(p)!r}: it {why}")


def _write(output_file, cubin: bytes, what: str) -> None:
    """Write ``cubin`` to a path or a binary file object; OSError and a text file become
    SpliceDeclarationError."""
    try:
        if isinstance(output_file, (str, bytes, os.PathLike)):
            with open(output_file, "wb") as f:
                f.write(cubin)
        else:
            output_file.write(cubin)
    except OSError as e:
        raise SpliceDeclarationError(
            f"{what}: cannot write the cubin to {output_file!r}: {e.strerror or e}") from None
    except TypeError as e:
        raise SpliceDeclarationError(
            f"{what}: output_file must be a path or a binary file object (open(..., 'wb'), "
            f"io.BytesIO()), got {type(output_file).__name__}: {e}") from None
