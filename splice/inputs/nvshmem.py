"""NVSHMEM device calls from spliced kernels (``docs/design.md#nvshmem``).

A CUDA C extern whose source includes ``<nvshmem.h>`` or ``<nvshmemx.h>`` is compiled by
NVRTC in NVSHMEM's *inlined* mode: every device API is inlined into the extern, so the PTX
needs no NVSHMEM device library (whose bitcode libNVVM 13.x cannot read, and whose static
library could only go through nvJitLink, which TMA kernels cannot use). The only symbol such
PTX leaves undefined is the device state ``.extern .const .align 8 .b8
nvshmemi_device_state_d[N];``: the merged kernel module defines it once
(:func:`splice.ptxtools.link.prepare`, ``host_filled``), and ``nvshmem.core.library_init`` fills it
when the module is loaded (:func:`lifecycle_provider`). IBGDA and GPUNetIO (GPU-initiated
InfiniBand) are compiled out in this mode; NVLink peers and the proxy path work.

Install with ``pip install 'splice[nvshmem]'`` (``nvidia-nvshmem-cu13`` >= 3.8 for the
headers, ``nvshmem4py-cu13`` for ``nvshmem.core``, CCCL for ``cuda/std``).
"""

from __future__ import annotations

import functools
import re
import types
from pathlib import Path

from ..errors import SpliceDeclarationError, SpliceLaunchError, SpliceToolchainError
from . import cccl

#: The device state NVSHMEM's host library fills in each loaded module.
STATE_SYMBOL = "nvshmemi_device_state_d"
#: ``.extern .const`` symbols the merged kernel module defines (for :mod:`splice.ptxtools.link`).
HOST_FILLED = frozenset({STATE_SYMBOL})

INSTALL_HINT = "pip install 'splice[nvshmem]'"
#: What ``splice[nvshmem]`` asks of the headers' wheel (``pyproject.toml``).
REQUIREMENT = "nvidia-nvshmem-cu13>=3.8"
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:[^>"\n]*/)?(nvshmemx?\.h)[>"]',
                         re.M)
# Block- and warp-collective device APIs: nvshmemx_<anything>_block / _warp (put/get, signal
# variants, collectives, barrier/sync): every thread of the block/warp must call them.
_COLLECTIVE_RE = re.compile(r"\b(nvshmemx_\w*?_(?:block|warp))\s*\(")
_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def uses_nvshmem(*texts: str) -> bool:
    """Whether any of the CUDA C ``texts`` (a source and the user headers it includes)
    includes ``nvshmem.h`` or ``nvshmemx.h``."""
    return any(_INCLUDE_RE.search(_COMMENT_RE.sub("", t)) for t in texts)


def include_dir() -> Path:
    """The NVSHMEM headers of the installed ``nvidia-nvshmem-cu13`` wheel (or a system
    NVSHMEM that cuda-pathfinder finds).

    Raises:
        SpliceToolchainError: NVSHMEM is not installed.
    """
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        found = find_nvidia_header_directory("nvshmem")
    except (ImportError, RuntimeError):  # cuda-pathfinder missing, or too old to know it
        found = None
    if not found or not (Path(found) / "nvshmem.h").is_file():
        raise SpliceToolchainError(
            f"the source includes <nvshmem.h> but the NVSHMEM headers are not installed: "
            f"{INSTALL_HINT}")
    return Path(found)


def include_dirs_for(*texts: str) -> list[Path]:
    """NVSHMEM's include directory for a CUDA C source (and the user headers it includes,
    also in ``texts``) that includes NVSHMEM, else none. NVSHMEM's device headers include
    CCCL's (``cuda/std/...``), which splice puts on every source's include path
    (:mod:`splice.inputs.cccl`): it must be installed.

    Raises:
        SpliceToolchainError: NVSHMEM or CCCL is not installed.
    """
    if not uses_nvshmem(*texts):
        return []
    inc = include_dir()
    cccl.require("the source includes <nvshmem.h>, whose device headers",
                 f"{INSTALL_HINT} (or {cccl.INSTALL_HINT})")
    return [inc]


def nvrtc_options_for(*texts: str) -> list[str]:
    """Extra NVRTC options for a CUDA C source (and the user headers it includes, also in
    ``texts``): none unless it includes NVSHMEM, else ``-DNVSHMEM_ENABLE_ALL_DEVICE_INLINING``
    (``-rdc=true`` splice always passes; the include directories are
    :func:`include_dirs_for`'s)."""
    return ["-DNVSHMEM_ENABLE_ALL_DEVICE_INLINING"] if uses_nvshmem(*texts) else []


def headers_key(*texts: str) -> str:
    """For the cache key of a source that includes NVSHMEM: the NVSHMEM and CCCL versions
    (their headers are not user headers, and an upgrade in place keeps their paths); "" for
    other sources."""
    if not uses_nvshmem(*texts):
        return ""
    import hashlib
    h = hashlib.sha256()
    files = [include_dir() / "non_abi" / "nvshmem_version.h",
             include_dir() / "non_abi" / "nvshmem_build_options.h"]
    files += [Path(d) / "cuda" / "version" for d in cccl.include_dirs()]
    for f in files:
        h.update(f.read_bytes() if f.is_file() else b"-")
    return h.hexdigest()


def header_version() -> str | None:
    """``"3.8.0"``: the version of the NVSHMEM headers externs compile against (None when
    NVSHMEM is not installed)."""
    try:
        text = (include_dir() / "non_abi" / "nvshmem_version.h").read_text()
    except (SpliceToolchainError, OSError):
        return None
    parts = [re.search(rf"#define\s+NVSHMEM_VENDOR_{k}_VERSION\s+(\d+)", text)
             for k in ("MAJOR", "MINOR", "PATCH")]
    found = [m.group(1) for m in parts if m is not None]
    return ".".join(found) if len(found) == len(parts) else None


def explain_compile_failure(log: str) -> str:
    """A hint for an NVRTC log of an NVSHMEM source, or "": NVSHMEM < 3.8's headers include
    ``infiniband/mlx5dv.h`` even in the inlined mode (``docs/design.md#nvshmem``)."""
    if "mlx5dv.h" in log or "infiniband/" in log:
        return ("\n    NVSHMEM's headers before 3.8 include infiniband/mlx5dv.h even with "
                "NVSHMEM_ENABLE_ALL_DEVICE_INLINING, which NVRTC cannot compile: install "
                "nvidia-nvshmem-cu13>=3.8")
    return ""


#: NVSHMEM's headers (nvidia-nvshmem-cu13's include/): on NVRTC's path only for a source that
#: itself includes <nvshmem.h> or <nvshmemx.h> (:func:`uses_nvshmem`).
_HEADER_RE = re.compile(r"((device|host|device_host|device_host_transport|non_abi|"
                        r"bootstrap_device_host)/(\w+/)*)?nvshmem\w*\.(h|cuh)$")


def header_hint(header: str) -> str:
    """How to get ``header``, which NVRTC could not open, when it is NVSHMEM's; else ""."""
    if not _HEADER_RE.match(header):
        return ""
    return (f"<{header}> is NVSHMEM's: write #include <nvshmem.h> (or <nvshmemx.h>) "
            f"literally in the source, not through a macro; splice then adds NVSHMEM's "
            f"headers to the include path ({INSTALL_HINT})")


def collective_calls(source: str) -> list[tuple[int, str]]:
    """(line, API name) of each block- or warp-collective NVSHMEM call in ``source``
    (``nvshmemx_float_put_block``, ``nvshmemx_barrier_all_block``...), comments ignored."""
    out = []
    text = _COMMENT_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)
    for m in _COLLECTIVE_RE.finditer(text):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def check_scope(ext, source: str) -> None:
    """Refuse block/warp-collective NVSHMEM APIs in an element-scope extern: each tile
    element's call runs on the one thread that owns it (``docs/design.md#per-element``), so a
    collective would see a divergent subset of its threads (hang or wrong data).

    Raises:
        SpliceDeclarationError: naming the extern, the API and its source line.
    """
    if ext.form.runs_convergently() or not uses_nvshmem(source):
        return
    calls = collective_calls(source)
    if calls:
        line, api = calls[0]
        raise SpliceDeclarationError(
            f"extern '{ext.name}' (declared at {ext.where}) is called per tile element, but "
            f"its source calls {api} (source line {line}), an NVSHMEM API that every thread "
            f"of the {'warp' if api.endswith('_warp') else 'block'} must call together. "
            f"Per element, use the thread-scope API (e.g. nvshmem_float_put, "
            f"nvshmem_float_p, nvshmemx_signal_op); block-scope calls need a block-scope "
            f"extern")


class _Headers:
    """NVSHMEM as a :class:`splice.inputs.headers.HeaderProvider`: for a source that includes
    it, its include directory, inlined device API, versions in the key and scope check."""

    def include_dirs(self, texts) -> list[Path]:
        return include_dirs_for(*texts)

    def options(self, texts) -> list[str]:
        return nvrtc_options_for(*texts)

    def key(self, texts) -> str:
        return headers_key(*texts)

    def check_extern(self, ext, source: str) -> None:
        check_scope(ext, source)

    def compile_hint(self, log: str) -> str:
        return explain_compile_failure(log)

    def header_hint(self, header: str) -> str:
        return header_hint(header)


HEADERS = _Headers()

# ---------------------------------------------------------------------------------------
# Module load: nvshmem.core.library_init fills the device state


def _check_initialised(kernel: str, headers: str | None) -> None:
    try:
        import nvshmem.core as core
    except ImportError:
        raise SpliceLaunchError(
            f"{kernel} calls NVSHMEM, and loading it needs nvshmem4py (nvshmem.core) to "
            f"fill NVSHMEM's device state: {INSTALL_HINT}") from None
    try:
        status = core.init_status()
    except Exception as e:  # libnvshmem_host cannot be loaded, ...
        raise SpliceLaunchError(f"{kernel} calls NVSHMEM, but NVSHMEM's host library is not "
                                f"usable in this process: {e}") from None
    ready = {core.InitStatus.STATUS_IS_INITIALIZED, core.InitStatus.STATUS_LIMITED_MPG,
             core.InitStatus.STATUS_FULL_MPG}
    if status not in ready:
        raise SpliceLaunchError(
            f"{kernel} calls NVSHMEM, but NVSHMEM is not initialised in this process "
            f"(status {getattr(status, 'name', status)}): call nvshmem.core.init(...) on "
            f"this process's device before the kernel's first launch")
    try:
        library = core.get_version().libnvshmem_version
    except Exception:
        library = None
    if headers is not None and library is not None and library != headers:
        raise SpliceLaunchError(
            f"{kernel} was compiled against NVSHMEM {headers}'s headers, but this process "
            f"runs NVSHMEM {library}'s host library, which fills a device state of another "
            f"layout: install one NVSHMEM (nvidia-nvshmem-cu13=={headers}) for both")


@functools.cache
def lifecycle_provider(kernel: str, headers: str | None = None) -> types.ModuleType:
    """A library-lifecycle provider (cuTile calls ``library_init(handle)`` on the loaded
    module, ``library_finalize(handle)`` when unloading it; cuTile requires a module) for
    ``kernel`` ("kernel 'name' (file:line)") compiled against NVSHMEM ``headers``
    ("3.8.0"; None: unknown): checks that NVSHMEM is initialised and that its host library
    is that version, then runs cuTile's own NVSHMEM provider (``nvshmem.core.library_init``).

    Raises (at load time, from ``library_init``):
        SpliceLaunchError: nvshmem4py missing, NVSHMEM not initialised, its host
            library another version than the headers, or library_init failing.
    """
    from ..system import _cutile
    mod = types.ModuleType(f"splice.nvshmem.lifecycle[{kernel}]")

    initialised: set[int] = set()

    def library_init(culibrary_handle: int) -> None:
        _check_initialised(kernel, headers)
        try:
            _cutile.nvshmem_lifecycle().library_init(culibrary_handle)
        except Exception as e:  # NvshmemError from nvshmem.core
            raise SpliceLaunchError(f"{kernel}: nvshmem.core.library_init failed on its "
                                    f"module: {type(e).__name__}: {e}") from None
        initialised.add(int(culibrary_handle))

    def library_finalize(culibrary_handle: int) -> None:
        if int(culibrary_handle) in initialised:  # not when library_init failed
            initialised.discard(int(culibrary_handle))
            _cutile.nvshmem_lifecycle().library_finalize(culibrary_handle)

    setattr(mod, "library_init", library_init)   # noqa: B010 (a module built at run time)
    setattr(mod, "library_finalize", library_finalize)  # noqa: B010
    return mod


def lifecycle_providers(kernel: str, defined: frozenset[str] | set[str]) -> tuple:
    """The providers a kernel whose merged module defines the host-filled symbols
    ``defined`` needs."""
    if STATE_SYMBOL not in defined:
        return ()
    return (lifecycle_provider(kernel, header_version()),)
