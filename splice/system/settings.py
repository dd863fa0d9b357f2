"""The ``SPLICE_*`` environment variables, read in one place (each when it is needed, so
that a value set from Python after ``import splice`` counts).

=========================  ====================================================
``SPLICE_CACHE_DIR``       the cubin cache's directory (:func:`splice.system.cache.cache_root`)
``SPLICE_CACHE_MAX_BYTES`` the cache's size bound (:func:`splice.system.cache.max_bytes`)
``SPLICE_CACHE_TRUST``     users/groups whose cache entries are used (:mod:`splice.system.safe_fs`)
``SPLICE_DUMP_DIR``        write every build's stages there (:mod:`splice.driver.pipeline`)
``SPLICE_VERIFY``          check the linked cubin itself (:mod:`splice.driver.verify`)
``SPLICE_CHECK_TILES``     guard words around tile staging (:mod:`splice.inputs.tile_guards`)
``SPLICE_COMPILE``         ``never``: a build the cache lacks is an error (:func:`compile_never`)
``SPLICE_PROGRESS``        ``0``: no progress line on a terminal (:mod:`splice.system.progress`)
=========================  ====================================================
"""

from __future__ import annotations

import os

from ..errors import SpliceNotCachedError, SpliceToolchainError


def cache_dir() -> str | None:
    """``$SPLICE_CACHE_DIR``, or None when unset or empty."""
    return os.environ.get("SPLICE_CACHE_DIR") or None


def cache_max_bytes() -> str:
    """``$SPLICE_CACHE_MAX_BYTES`` as written (stripped; "" when unset)."""
    return os.environ.get("SPLICE_CACHE_MAX_BYTES", "").strip()


def cache_trust() -> str:
    """``$SPLICE_CACHE_TRUST`` as written (stripped; "" when unset): the other users and
    ``@groups`` a shared cache trusts (``docs/security.md``)."""
    return os.environ.get("SPLICE_CACHE_TRUST", "").strip()


def dump_dir() -> str | None:
    """``$SPLICE_DUMP_DIR``, or None when unset or empty."""
    return os.environ.get("SPLICE_DUMP_DIR") or None


def check_tiles() -> bool:
    """Whether ``$SPLICE_CHECK_TILES`` is set to anything but "", "0", "false" or "no"."""
    return os.environ.get("SPLICE_CHECK_TILES", "").strip() not in ("", "0", "false", "no")


def verify() -> bool:
    """Whether ``$SPLICE_VERIFY`` is set to anything but "", "0", "false" or "no"."""
    return os.environ.get("SPLICE_VERIFY", "").strip() not in ("", "0", "false", "no")


def compile_never() -> bool:
    """Whether ``$SPLICE_COMPILE`` is ``never`` (a build the cache lacks raises
    :class:`~splice.errors.SpliceNotCachedError`: nothing compiles); unset, empty or
    ``auto``: compile what the cache lacks.

    Raises:
        SpliceToolchainError: another value (a misspelt ``never`` must not compile).
    """
    value = os.environ.get("SPLICE_COMPILE", "").strip().lower()
    if value not in ("", "auto", "never"):
        raise SpliceToolchainError(
            f"SPLICE_COMPILE={os.environ['SPLICE_COMPILE']!r}: set it to 'never' (build "
            f"only from the cache) or 'auto' (compile what the cache lacks, the default)")
    return value == "never"


def refuse_if_never(tool: str, what: str) -> None:
    """Refuse to run ``tool`` (tileiras, ptxas, NVRTC, nvJitLink) for ``what`` while
    ``SPLICE_COMPILE=never``: every runner of a compiler calls this first, a backstop
    under the build's own check (which names the kernel's externs).

    Raises:
        SpliceNotCachedError: ``$SPLICE_COMPILE`` is ``never``.
        SpliceToolchainError: it is misspelt (:func:`compile_never`).
    """
    if compile_never():
        raise SpliceNotCachedError(
            f"{what} needs {tool}, and SPLICE_COMPILE=never forbids running it: compile "
            f"where compiling is allowed (a launch, python -m splice warmup) and bring the "
            f"cache: 'python -m splice cache export FILE' there, 'python -m splice cache "
            f"import FILE' here (the same splice and toolchain); or unset SPLICE_COMPILE")


def progress() -> bool:
    """Whether ``$SPLICE_PROGRESS`` allows a progress line on a terminal (anything but
    "0", "false", "no" or "off"; unset: yes)."""
    return os.environ.get("SPLICE_PROGRESS", "").strip().lower() not in (
        "0", "false", "no", "off")
