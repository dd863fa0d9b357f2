"""pytest plugin: run a cuTile test directory with every ``@ct.kernel`` a ``@splice.kernel``.

::

    python -m pytest -p splice.testing.dropin path/to/cutile-python/test

Loaded before the test modules are imported, it replaces ``cuda.tile.kernel`` with
:class:`splice.kernel` (``@ct.kernel``, ``@ct.kernel(num_ctas=2)`` and ``ct.kernel(f)`` all
make splice kernels, launched by ``ct.launch`` through splice's pipeline) and
``cuda.tile.compilation.export_kernel`` with a function that exports a splice kernel to a
cubin through :func:`splice.export_kernel` (cuTile's own export still makes Tile IR bytecode,
and a cubin of a pinned ``bytecode_version``, which splice's export refuses). Both are put back
when pytest ends. ``benchmarks/cutile_suite.py`` runs a directory plain and through this
plugin and compares each test's outcome; ``tests/cutile_style/`` is the small directory, in
cuTile's style, that ``tests/test_dropin_plugin.py`` runs both ways in CI.
"""

from __future__ import annotations

import cuda.tile as ct
import cuda.tile.compilation as ctc

from ..driver.splice_kernel import SpliceKernel
from ..integrations.export import export_kernel as _splice_export

#: what this plugin replaced: (module, attribute, cuTile's own value)
_saved: list[tuple[object, str, object]] = []


def export_kernel(kernel, signatures, output_file, *, gpu_code=None, output_format="cubin",
                  bytecode_version=None):
    """``cuda.tile.compilation.export_kernel`` under the plugin: a splice kernel exported to
    a cubin (no ``bytecode_version``) goes through :func:`splice.export_kernel`; anything
    else through cuTile's own.

    Args:
        kernel: the kernel (``@ct.kernel``, a ``splice.kernel`` under the plugin).
        signatures: the KernelSignatures, as for cuTile's ``export_kernel``.
        output_file: a path or a binary file object.
        gpu_code (str | None): the target, e.g. ``"sm_90"``.
        output_format (str): ``"cubin"`` or ``"tileir_bytecode"``.
        bytecode_version (str | None): a pinned Tile IR bytecode version (cuTile's export).

    Returns:
        None: the output is written to ``output_file``.

    Raises:
        As :func:`splice.export_kernel` or cuTile's ``export_kernel``.

    Example:
        >>> from splice.testing.dropin import export_kernel
        >>> export_kernel.__name__
        'export_kernel'
    """
    if (isinstance(kernel, SpliceKernel) and output_format == "cubin"
            and bytecode_version is None):
        return _splice_export(kernel, signatures, output_file, gpu_code=gpu_code,
                              output_format=output_format)
    return _cutile_export(kernel, signatures, output_file, gpu_code=gpu_code,
                          output_format=output_format, bytecode_version=bytecode_version)


_cutile_export = ctc.export_kernel


def install() -> None:
    """Make ``ct.kernel`` splice's and route ``export_kernel`` (idempotent; :func:`uninstall`
    puts cuTile's back).

    Returns:
        None.

    Raises:
        Nothing.

    Example:
        >>> import cuda.tile as ct, splice
        >>> from splice.testing import dropin
        >>> dropin.install(); ct.kernel is splice.kernel
        True
        >>> dropin.uninstall(); ct.kernel is splice.kernel
        False
    """
    if _saved:
        return
    for module, name, value in ((ct, "kernel", SpliceKernel),
                                (ctc, "export_kernel", export_kernel)):
        _saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)


def uninstall() -> None:
    """Put back what :func:`install` replaced.

    Returns:
        None.

    Raises:
        Nothing.

    Example:
        >>> from splice.testing import dropin
        >>> dropin.uninstall()
    """
    while _saved:
        module, name, value = _saved.pop()
        setattr(module, name, value)


def pytest_configure(config) -> None:
    """pytest hook: install before any test module is imported."""
    install()
    config.addinivalue_line("markers", "splice_dropin: run with every ct.kernel a splice.kernel")


def pytest_report_header(config) -> str:
    """pytest hook: say that the kernels are splice's."""
    return "splice.testing.dropin: every @ct.kernel is a @splice.kernel"


def pytest_unconfigure(config) -> None:
    """pytest hook: put cuTile's names back."""
    uninstall()
