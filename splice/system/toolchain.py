"""The compiler tools splice runs, and how it runs them.

- **tileiras** lowers Tile IR bytecode to PTX through libnvvm and then runs ``ptxas`` from
  its own directory (``docs/design.md#tileiras-ptxas``). splice runs it from an *overlay*
  directory (:mod:`splice.system.tileiras_overlay`): a hard link (or copy) of tileiras
  beside a capturing ``ptxas`` script, checked before every run and run through the
  descriptor checked. The capture keeps the PTX, the ``--nv-host`` host-callback object
  and ptxas's flags (``docs/design.md#nv-host``) instead of assembling.
- tileiras and ptxas always run with ``CUDA_HOME``/``CUDA_PATH``/``CUDA_ROOT`` removed from
  the environment (another toolkit's libnvvm would be picked up:
  ``docs/design.md#environment``).
- **ptxas** (the real one, beside tileiras) assembles the spliced PTX with the captured
  flags, ``--nv-host`` included: re-assembling is exact (``docs/design.md#nv-host``).
- **NVRTC** (cuda-bindings) compiles CUDA C fragments to relocatable-device-code PTX, and
  **nvJitLink** links: both run in process, in :mod:`splice.system.cuda_libs` (re-exported here).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import (
    SpliceTileirasError,
    SpliceTileirasTimeout,
    SpliceToolchainError,
    SpliceUnsafePathError,
)
from . import safe_fs, settings, tileiras_overlay

# NVRTC and nvJitLink moved to splice.system.cuda_libs; their callers (and tests) use them from here
from .cuda_libs import nvjitlink_run as nvjitlink_run
from .cuda_libs import nvrtc_compile as nvrtc_compile
from .cuda_libs import nvrtc_compile_ltoir as nvrtc_compile_ltoir
from .cuda_libs import nvrtc_version as nvrtc_version

_STRIPPED_ENV = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment tileiras and ptxas run in: ours minus CUDA_HOME/CUDA_PATH/CUDA_ROOT
    (``docs/design.md#environment``), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _STRIPPED_ENV}
    env.update(extra)
    return env


@functools.cache
def tileiras() -> Path:
    """The tileiras cuTile itself would run.

    Raises:
        SpliceToolchainError: cuTile finds none (with why, when its wheels are installed
            but of different CUDA minors, and the pip command that matches them).
    """
    from . import _cutile
    try:
        p = Path(_cutile.tileiras_path())
    except SpliceToolchainError as e:
        why = mismatched_tileiras_wheels()
        raise SpliceToolchainError(e.message.rstrip(".") + why if why else e.message) from None
    if not p.is_file():
        raise SpliceToolchainError(f"tileiras not found at {p}")
    return p


def mismatched_tileiras_wheels() -> str:
    """Why cuTile did not take tileiras from its wheels although they are installed: they
    are of different CUDA minors (pip cannot keep them matched without the cuda-toolkit
    metapackage, which PyTorch pins); "" otherwise."""
    from importlib import metadata

    from . import _cutile
    try:
        found = {n: metadata.version(n) for n in _cutile.pip_tileiras_wheels()}
    except (metadata.PackageNotFoundError, SpliceToolchainError):
        return ""
    minors = {n: ".".join(v.split(".")[:2]) for n, v in found.items()}
    want = minors.get("nvidia-cuda-tileiras", next(iter(minors.values())))
    odd = [n for n, m in minors.items() if m != want]
    if not odd:
        return ""
    fix = " ".join(f"'{n}=={want}.*'" for n in odd)
    return (f". The tileiras wheels are installed but of different CUDA minors ("
            f"{', '.join(f'{n} {v}' for n, v in found.items())}), and cuTile uses them only "
            f"when they match: pip install {fix}")


@functools.cache
def ptxas() -> Path:
    """The ptxas tileiras runs: the one beside it (``docs/design.md#tileiras-ptxas``), not
    the one on PATH."""
    p = tileiras().resolve().parent / "ptxas"
    if not p.is_file():
        raise SpliceToolchainError(
            f"ptxas not found beside tileiras ({p}); install cuda-tile[tileiras]")
    return p


def run_version(path: Path) -> str:
    """The version line that a CUDA tool prints for ``--version`` (``... release 13.5,
    V13.5.37``)."""
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             env=clean_env(), timeout=60)
    except OSError as e:
        raise SpliceToolchainError(f"cannot run {path}: {e}") from None
    lines = [ln for ln in out.stdout.splitlines() if "release" in ln or "V" in ln]
    return (lines[-1] if lines else out.stdout).strip()


def cuda_release(text: str) -> tuple[int, int] | None:
    """The (major, minor) of a CUDA tool's ``--version`` text (``release 13.5, V13.5.37``)."""
    m = re.search(r"release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def tileiras_version() -> str:
    return run_version(tileiras())


@functools.cache
def ptxas_version() -> str:
    return run_version(ptxas())


@functools.cache
def _file_identity(path: Path) -> list:
    """(resolved path, size, mtime_ns) of a file: changes whenever the file is replaced."""
    real = path.resolve()
    st = real.stat()
    return [str(real), st.st_size, st.st_mtime_ns]


def tool_identity(*names: str) -> list:
    """What identifies the tools ``names`` for a cache key, cheaply: ``"tileiras"`` (the
    tileiras binary the overlay runs and the libnvvm beside it), ``"ptxas"``, ``"nvrtc"``,
    ``"nvJitLink"``. Each is the (resolved path, size, mtime_ns) of the files actually used
    -- no subprocess, no import of NVRTC. A library that cannot be located without loading
    it is identified by its version instead (slower, exact).

    Raises:
        SpliceToolchainError: tileiras or ptxas is missing.
    """
    out = []
    for name in names:
        if name == "tileiras":
            # the overlay's hard link (or copy) runs only with the size and mtime of the
            # real one (_checked_tileiras): the real one's identify it, no overlay needed
            real = tileiras().resolve()
            st = real.stat()
            out.append([name, str(real), st.st_size, st.st_mtime_ns,
                        *[_file_identity(c) for c in _libnvvm_candidates() if c.exists()]])
        elif name == "ptxas":
            out.append([name, *_file_identity(ptxas())])
        else:
            path = _library_path(name)
            out.append([name, *_file_identity(path)] if path is not None else
                       [name, "version", *_library_version(name)])
    return out


@functools.cache
def _library_path(name: str) -> Path | None:
    """The NVRTC / nvJitLink shared library cuda-bindings uses or will load, found the way
    cuda.pathfinder's ``load_nvidia_dynamic_lib`` (which cuda-bindings 13 loads them with)
    finds it, without loading it: one already loaded in the process, else the first found
    in site-packages or conda. None when it would come from the system search (only
    loading tells which file that is). :func:`_unambiguous_library` answers the common
    case without importing cuda.pathfinder (whose import costs 50-150 ms)."""
    quick = _unambiguous_library(name)
    if quick is not None:
        return quick
    try:
        from cuda.pathfinder._dynamic_libs.lib_descriptor import LIB_DESCRIPTORS
        from cuda.pathfinder._dynamic_libs.platform_loader import LOADER
        from cuda.pathfinder._dynamic_libs.search_steps import (
            EARLY_FIND_STEPS,
            SearchContext,
            run_find_steps,
        )
        desc = LIB_DESCRIPTORS[name]
        loaded = LOADER.check_if_already_loaded_from_elsewhere(desc)
        if loaded is not None and loaded.abs_path:
            return Path(loaded.abs_path)
        found = run_find_steps(SearchContext(desc), EARLY_FIND_STEPS)
        return Path(found.abs_path) if found is not None else None
    except (ImportError, AttributeError, KeyError, TypeError):
        # another cuda.pathfinder (its private API moved): identify by version instead
        return None


#: Where cuda.pathfinder looks for each library in site-packages on Linux, and its file
#: names (its ``LIB_DESCRIPTORS[name].site_packages_linux`` / ``linux_sonames``).
_WHEEL_LIBS = {"nvrtc": (("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"), "libnvrtc.so."),
               "nvJitLink": (("nvidia/cu13/lib", "nvidia/nvjitlink/lib"), "libnvJitLink.so.")}


def _unambiguous_library(name: str) -> Path | None:
    """The library cuda.pathfinder would pick when there is no choice to make: on Linux,
    the copy already mapped into this process, else the only copy in site-packages when
    there is exactly one and no conda environment. None otherwise (ask cuda.pathfinder)."""
    if sys.platform != "linux" or name not in _WHEEL_LIBS:
        return None
    dirs, prefix = _WHEEL_LIBS[name]
    try:
        with open("/proc/self/maps") as f:
            mapped = {ln.split(None, 5)[5].strip() for ln in f if ln.count(" ") >= 5 and
                      f"/{prefix}" in ln}
    except (OSError, IndexError):
        return None
    if mapped:
        return Path(mapped.pop()) if len(mapped) == 1 else None
    if os.environ.get("CONDA_PREFIX"):
        return None
    import site
    roots = [*site.getsitepackages(), site.getusersitepackages()]
    try:
        found = {p.resolve() for r in roots for d in dirs
                 for p in Path(r, d).glob(f"{prefix}[0-9]*") if p.is_file()}
    except OSError:   # a directory this user cannot read (another user's $HOME)
        return None
    return found.pop() if len(found) == 1 else None


def _library_version(name: str) -> tuple[int, ...]:
    if name == "nvrtc":
        return nvrtc_version()
    if name == "nvJitLink":
        from cuda.bindings import nvjitlink
        return tuple(nvjitlink.version())
    raise ValueError(f"unknown tool {name!r}")


@functools.cache
def cuda_include_dir() -> Path | None:
    """A directory with the CUDA headers (``cuda_fp16.h``, ``cuda_bf16.h``...): the
    installed ``nvidia.cu13`` wheels' first (they match NVRTC), then tileiras's toolkit,
    ``$CUDA_HOME`` and ``/usr/local/cuda``."""
    candidates = []
    try:
        import nvidia.cu13 as cu13
        candidates += [Path(p) / "include" for p in cu13.__path__]
    except ImportError:
        pass
    try:
        candidates.append(tileiras().resolve().parent.parent / "include")
    except SpliceToolchainError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for c in candidates:
        if (c / "cuda_fp16.h").is_file():
            return c
    return None


# ---------------------------------------------------------------------------------------------
# tileiras overlay (splice.system.tileiras_overlay)


@functools.cache
def overlay() -> Path:
    """The directory tileiras runs from, laid out like its own toolkit root with a
    capturing ptxas (:func:`splice.system.tileiras_overlay.found`); checked again before
    every run (:func:`_runnable_tileiras`).

    Raises:
        SpliceUnsafePathError: an overlay found in a trusted place is not trusted itself
            (the message names the path to delete).
        SpliceToolchainError: no overlay can be made anywhere.
    """
    return tileiras_overlay.found(tileiras().resolve(), str(ptxas()))


def _runnable_tileiras() -> int:
    """A descriptor of the overlay's tileiras, checked now
    (:func:`splice.system.tileiras_overlay.checked_tileiras`), for one run: found or built
    again when the overlay was removed since this process found it (the cache directory
    deleted beside a running process, a temporary-directory cleaner); built in a new
    private directory, with one warning, when anything in it changed.

    Raises:
        SpliceToolchainError: it keeps changing.
        SpliceUnsafePathError: the overlay found is another user's.
    """
    for _ in range(3):
        root = overlay()
        try:
            return tileiras_overlay.checked_tileiras(root, tileiras().resolve())
        except FileNotFoundError:
            overlay.cache_clear()
        except (tileiras_overlay.Changed, SpliceUnsafePathError, OSError) as e:
            tileiras_overlay.distrust(root, e)
            overlay.cache_clear()
    raise SpliceToolchainError(f"the tileiras overlay keeps changing: "
                               f"{tileiras_overlay.changed[-1]}")


def _libnvvm_candidates() -> list[Path]:
    root = tileiras().resolve().parent.parent
    return [root / "lib" / "libnvvm.so.4", root / "nvvm" / "lib64" / "libnvvm.so"]


def _missing_libnvvm_hint() -> str:
    cands = _libnvvm_candidates()
    if any(c.exists() for c in cands):
        return ""
    return (f". libnvvm is missing: tileiras looks for it at "
            f"{' or '.join(str(c) for c in cands)} (reinstall cuda-tile[tileiras])")


@dataclasses.dataclass
class Capture:
    """What tileiras would have assembled: its PTX, the ``--nv-host`` object (or None) and
    ptxas's arguments (with tileiras's temporary paths)."""

    ptx: str
    host_object: bytes | None
    ptxas_argv: tuple[str, ...]


def run_tileiras(bytecode: bytes, flags: tuple[str, ...], *, timeout: float | None,
                 what: str) -> Capture:
    """Lower Tile IR bytecode with tileiras, capturing PTX, host object and ptxas flags.

    Raises:
        SpliceTileirasError: tileiras failed (also cuTile's TileCompilerExecutionError).
        SpliceTileirasTimeout: it timed out (also cuTile's TileCompilerTimeoutError).
        SpliceToolchainError: it cannot run, or did not call ptxas exactly once.
        SpliceUnsafePathError: ``$TMPDIR`` is a directory where another user could
            rename its work directory (:func:`splice.system.safe_fs.work_dir`).
        SpliceNotCachedError: ``SPLICE_COMPILE=never``.
    """
    settings.refuse_if_never("tileiras", what)
    with safe_fs.work_dir("splice-tileiras-") as w:
        work = str(w)
        if "\n" in work:   # the capture's argv is one argument a line
            raise SpliceToolchainError(
                f"cannot run tileiras for {what}: the temporary directory {work!r} has a "
                f"newline in its path; set TMPDIR to a directory without one")
        cap = w / "capture"
        cap.mkdir()
        tmpdir = w / "tmp"
        tmpdir.mkdir()
        src = w / "kernel.tileirbc"
        src.write_bytes(bytecode)
        args = [str(src), "-o", str(w / "kernel.cubin"), *flags]
        proc = _run_overlay(args, clean_env(SPLICE_CAPTURE_DIR=str(cap), TMPDIR=str(tmpdir)),
                            timeout=timeout, what=what, flags=flags)
        log = (proc.stdout + proc.stderr).decode(errors="replace")
        if proc.returncode != 0:
            unsupported = re.search(r"--gpu-name option: Cannot find option named '([^']*)'",
                                    log)
            if unsupported:
                raise SpliceToolchainError(
                    f"tileiras cannot compile {what} for {unsupported.group(1)}: it supports "
                    f"{', '.join(tileiras_architectures()) or '(see tileiras --help)'}; pass "
                    f"one of them as arch=", log)
            raise SpliceTileirasError(
                f"tileiras failed (exit {proc.returncode}) on {what}; command: "
                f"{shlex.join(args)}{_missing_libnvvm_hint()}", log,
                flags=shlex.join(flags))
        calls = sorted(cap.glob("call*.argv"))
        if len(calls) != 1:
            raise SpliceToolchainError(
                f"expected tileiras to run ptxas once for {what}, it ran it {len(calls)} "
                f"times; this tileiras is not one splice supports", log)
        ptxas_argv = tuple(calls[0].read_text().splitlines())
        ptx_path = next((cap / Path(a).name for a in ptxas_argv if a.endswith(".ptx")), None)
        if ptx_path is None or not ptx_path.is_file():
            raise SpliceToolchainError(f"tileiras passed ptxas no PTX file for {what}", log)
        host = next((cap / Path(a[len("--nv-host="):]).name for a in ptxas_argv
                     if a.startswith("--nv-host=")), None)
        if host is not None and not host.is_file():   # its launch callbacks would be lost
            raise SpliceToolchainError(f"the --nv-host object tileiras passed ptxas for "
                                       f"{what} was not kept", log)
        return Capture(ptx_path.read_text(), host.read_bytes() if host else None,
                       ptxas_argv)


def _run_overlay(args: list[str], env: dict[str, str], *, timeout: float | None, what: str,
                 flags: tuple[str, ...]) -> subprocess.CompletedProcess:
    """The overlay's tileiras run on ``args``, through the descriptor checked just before
    (:func:`_runnable_tileiras`): ``/proc/self/fd/N``, no name resolved again.

    Raises:
        SpliceTileirasTimeout: it timed out.
        SpliceToolchainError: it cannot run.
    """
    tool = _runnable_tileiras()
    try:
        return subprocess.run([f"/proc/self/fd/{tool}", *args], capture_output=True,
                              env=env, timeout=timeout, pass_fds=(tool,))
    except subprocess.TimeoutExpired:
        raise SpliceTileirasTimeout(
            f"tileiras exceeded the compile timeout of {timeout}s on {what} "
            f"(CUDA_TILE_COMPILER_TIMEOUT_SEC)", flags=shlex.join(flags)) from None
    except OSError as e:
        raise SpliceToolchainError(f"cannot run tileiras for {what}: {e}") from None
    finally:
        os.close(tool)


def tileiras_architectures() -> list[str]:
    """The ``--gpu-name`` values tileiras lists in its ``--help`` (empty if it lists none)."""
    try:
        out = subprocess.run([str(tileiras()), "--help"], capture_output=True, timeout=60,
                             env=clean_env()).stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return []
    return re.findall(r"^\s*=(sm_\d+[af]?)\s", out, re.M)


def ptxas_flags(capture: Capture) -> list[str]:
    """tileiras's ptxas flags without the input, output and host-object paths."""
    out = []
    skip = False
    for a in capture.ptxas_argv:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a.endswith(".ptx") or a.startswith("--nv-host="):
            continue
        out.append(a)
    return out


def run_ptxas(ptx: str, flags: list[str], host_object: bytes | None, *,
              timeout: float | None, what: str) -> bytes:
    """Assemble whole-program PTX to a cubin with tileiras's flags and host object.

    Raises:
        SpliceToolchainError: ptxas rejected the PTX; ``.log`` holds its messages.
        SpliceUnsafePathError: ``$TMPDIR`` is a directory where another user could
            rename its work directory (:func:`splice.system.safe_fs.work_dir`).
        SpliceNotCachedError: ``SPLICE_COMPILE=never``.
    """
    settings.refuse_if_never("ptxas", what)
    with safe_fs.work_dir("splice-ptxas-") as w:
        src = w / "kernel.ptx"
        src.write_text(ptx)
        out = w / "kernel.cubin"
        argv = [str(ptxas()), *flags, str(src), "-o", str(out)]
        if host_object is not None:
            host = w / "host.o"
            host.write_bytes(host_object)
            argv.append(f"--nv-host={host}")
        try:
            proc = subprocess.run(argv, capture_output=True, env=clean_env(), timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SpliceToolchainError(f"ptxas exceeded {timeout}s on {what}") from None
        except OSError as e:
            raise SpliceToolchainError(f"cannot run ptxas for {what}: {e}") from None
        log = (proc.stdout + proc.stderr).decode(errors="replace")
        if proc.returncode != 0 or not out.is_file():
            raise SpliceToolchainError(
                f"ptxas rejected the spliced PTX of {what} (exit {proc.returncode})", log)
        return out.read_bytes()


def nvjitlink_link(inputs: list[tuple[str, bytes, str]], target: str, what: str) -> bytes:
    """Link relocatable device code into a cubin with nvJitLink, which must be as new as
    tileiras's ptxas (it reads the kernel's relocatable cubin).

    Raises:
        SpliceToolchainError: nvJitLink is older than ptxas.
        SpliceLinkError: nvJitLink failed (its log attached).
    """
    from cuda.bindings import nvjitlink

    have = tuple(nvjitlink.version())
    need = cuda_release(ptxas_version()) or have
    if have < need:
        raise SpliceToolchainError(
            f"linking {what} with a binary object needs nvJitLink {need[0]}.{need[1]} or newer "
            f"(as new as tileiras's ptxas, whose relocatable cubin it reads); found "
            f"{have[0]}.{have[1]}: pip install 'nvidia-nvjitlink=={need[0]}.{need[1]}.*'")
    return nvjitlink_run([f"-arch={target}"], inputs, "cubin", what)


def nvdisasm() -> Path | None:
    """nvdisasm beside tileiras (the ``nvidia-cuda-nvdisasm`` wheel) or on PATH, if any."""
    cand = tileiras().resolve().parent / "nvdisasm"
    if cand.is_file():
        return cand
    found = shutil.which("nvdisasm")
    return Path(found) if found else None


def disassemble(cubin: bytes) -> str | None:
    """SASS of a cubin (``nvdisasm``), or None when nvdisasm is not installed."""
    tool = nvdisasm()
    if tool is None:
        return None
    with safe_fs.work_dir("splice-sass-") as work:
        p = work / "k.cubin"
        p.write_bytes(cubin)
        proc = subprocess.run([str(tool), "-c", str(p)], capture_output=True, text=True,
                              env=clean_env())
        if proc.returncode != 0:
            raise SpliceToolchainError("nvdisasm failed", proc.stdout + proc.stderr)
        return proc.stdout


@functools.cache
def gpu_arch() -> str | None:
    """The compute capability of GPU 0 as ``"sm_XY"``, or None without a GPU or driver."""
    try:
        from cuda.bindings import driver
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, dev = driver.cuDeviceGet(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        attr = driver.CUdevice_attribute
        err, major = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        err2, minor = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        if err != driver.CUresult.CUDA_SUCCESS or err2 != driver.CUresult.CUDA_SUCCESS:
            return None
        return f"sm_{major}{minor}"
    except (ImportError, OSError, RuntimeError):   # no cuda.bindings, or no libcuda
        return None

