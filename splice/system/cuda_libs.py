"""NVRTC and nvJitLink, the CUDA compiler libraries splice calls in process (through
cuda-bindings), as :mod:`splice.system.toolchain` re-exports them: CUDA C to PTX or LTO-IR
(optionally with NVRTC's automatic precompiled header, :mod:`splice.system.nvrtc_pch`), and
linking with nvJitLink. It imports only splice's errors and, for a PCH compile,
:mod:`splice.system.nvrtc_pch`; the programs splice runs (tileiras, ptxas, nvdisasm), their
versions and the check that nvJitLink is as new as ptxas stay in :mod:`splice.system.toolchain`."""

from __future__ import annotations

import contextlib
import os
import threading

from ..errors import SpliceCompileError, SpliceToolchainError
from . import settings


class _Calls:
    """NVRTC and nvJitLink calls in flight, and a fork that waits for them: NVRTC holds
    locks of its own while it compiles (in a thread, while tileiras runs), and a child
    forked then (a ``multiprocessing`` pool, a fork server) would block for ever in its
    first NVRTC call. ``os.fork`` marks itself pending (no call starts after that), waits
    until none is in flight, and forks (:func:`os.register_at_fork`); the child starts
    with none (and :mod:`splice.system.nvrtc_pch` gives it a PCH directory of its own)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.count = 0
        self.forking = False
        self.depth = threading.local()    # calls this thread is in (a call inside a call)

    @contextlib.contextmanager
    def running(self):
        outer = not getattr(self.depth, "n", 0)
        with self.cond:
            while outer and self.forking:
                self.cond.wait()
            self.count += 1
        self.depth.n = getattr(self.depth, "n", 0) + 1
        try:
            yield
        finally:
            self.depth.n -= 1
            with self.cond:
                self.count -= 1
                if not self.count:
                    self.cond.notify_all()

    def before_fork(self) -> None:
        self.cond.acquire()
        self.forking = True
        while self.count:
            self.cond.wait()

    def after_fork_in_parent(self) -> None:
        self.forking = False
        self.cond.notify_all()
        self.cond.release()

    def after_fork_in_child(self) -> None:
        self.__init__()  # type: ignore[misc]


_calls = _Calls()
os.register_at_fork(before=_calls.before_fork, after_in_parent=_calls.after_fork_in_parent,
                    after_in_child=_calls.after_fork_in_child)


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    from cuda.bindings import nvrtc
    err, major, minor = nvrtc.nvrtcVersion()
    _check_nvrtc(err, "nvrtcVersion")
    return (major, minor)


def _check_nvrtc(err, what: str, log: str = ""):
    from cuda.bindings import nvrtc
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise SpliceToolchainError(f"{what} failed: {err.name}", log)


def nvrtc_compile_ltoir(source: bytes, name: str, options: list[str], *,
                       pch: bool | str = False) -> bytes:
    """Compile CUDA C to LTO-IR with NVRTC (``options`` must hold ``-dlto``); ``pch``: with
    NVRTC's automatic precompiled header (:mod:`splice.system.nvrtc_pch`; a string: the
    :func:`~splice.system.nvrtc_pch.state` of the source's headers).

    Raises:
        SpliceCompileError: the source did not compile; ``.log`` is NVRTC's log.
    """
    return _nvrtc(source, name, options, ltoir=True, pch=pch)[0]


def nvrtc_compile(source: bytes, name: str, options: list[str], *,
                  pch: bool | str = False) -> tuple[str, str]:
    """Compile CUDA C to PTX with NVRTC. Returns (ptx, log). ``pch``: with NVRTC's
    automatic precompiled header (:mod:`splice.system.nvrtc_pch`; a string: the
    :func:`~splice.system.nvrtc_pch.state` of the source's headers).

    Raises:
        SpliceCompileError: the source did not compile; ``.log`` is NVRTC's log.
    """
    out, log = _nvrtc(source, name, options, ltoir=False, pch=pch)
    return out.decode(), log


def _nvrtc(source: bytes, name: str, options: list[str], ltoir: bool,
           pch: bool | str = False):
    """NVRTC: (PTX or LTO-IR bytes, log). PCH compiles run one at a time
    (:data:`splice.system.nvrtc_pch._lock`)."""
    settings.refuse_if_never("NVRTC", name)
    from cuda.bindings import nvrtc
    with _calls.running():
        if not pch:
            return _nvrtc_program(nvrtc, source, name, options, ltoir, pch=False)
        from . import nvrtc_pch
        with nvrtc_pch._lock:
            extra = nvrtc_pch.options(nvrtc, pch if isinstance(pch, str) else "")
            return _nvrtc_program(nvrtc, source, name, options + extra, ltoir,
                                  pch=bool(extra))


def _nvrtc_program(nvrtc, source: bytes, name: str, options: list[str], ltoir: bool,
                   pch: bool):
    err, prog = nvrtc.nvrtcCreateProgram(source, name.encode(), 0, [], [])
    _check_nvrtc(err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (cerr,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if pch:
            from . import nvrtc_pch
            nvrtc_pch.after_compile(nvrtc, prog)
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        _check_nvrtc(err, "nvrtcGetProgramLogSize")
        # A fresh mutable buffer: NVRTC writes into it. (``b" " * 1`` would be CPython's
        # shared one-byte object, and NVRTC would overwrite it process-wide.)
        buf = bytearray(size)
        (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
        log = bytes(buf).rstrip(b"\0").decode(errors="replace")
        if pch:     # NVRTC's notes on its PCH file are no news to the user
            log = "".join(ln for ln in log.splitlines(keepends=True)
                          if "precompiled header file" not in ln)
        if cerr != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise SpliceCompileError(f"NVRTC: {cerr.name}", log)
        if ltoir:
            err, size = nvrtc.nvrtcGetLTOIRSize(prog)
            _check_nvrtc(err, "nvrtcGetLTOIRSize", log)
            buf = bytearray(size)
            (err,) = nvrtc.nvrtcGetLTOIR(prog, buf)
            _check_nvrtc(err, "nvrtcGetLTOIR", log)
            return bytes(buf), log
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check_nvrtc(err, "nvrtcGetPTXSize", log)
        buf = bytearray(size)
        (err,) = nvrtc.nvrtcGetPTX(prog, buf)
        _check_nvrtc(err, "nvrtcGetPTX", log)
        return bytes(buf).rstrip(b"\0"), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)



def nvjitlink_run(options: list[str], inputs: list[tuple[str, bytes, str]], output: str,
                  what: str) -> bytes:
    """Run nvJitLink on ``inputs`` ((input type name, bytes, name)) and return its linked
    ``output``: "cubin" or "ptx".

    Raises:
        SpliceLinkError: nvJitLink failed (its log attached).
        SpliceNotCachedError: ``SPLICE_COMPILE=never``.
    """
    settings.refuse_if_never("nvJitLink", what)
    with _calls.running():
        return _nvjitlink_run(options, inputs, output, what)


def _nvjitlink_run(options: list[str], inputs: list[tuple[str, bytes, str]], output: str,
                   what: str) -> bytes:
    from cuda.bindings import nvjitlink

    from ..errors import SpliceLinkError
    handle = nvjitlink.create(len(options), options)
    try:
        try:
            for kind, data, name in inputs:
                nvjitlink.add_data(handle, getattr(nvjitlink.InputType, kind), data, len(data),
                                   name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            if size:
                nvjitlink.get_error_log(handle, log)
            raise SpliceLinkError(f"nvJitLink could not link {what}: {e}",
                                  bytes(log).rstrip(b"\0").decode(errors="replace")) from None
        size = getattr(nvjitlink, f"get_linked_{output}_size")(handle)
        buf = bytearray(size)
        getattr(nvjitlink, f"get_linked_{output}")(handle, buf)
        return bytes(buf)
    finally:
        nvjitlink.destroy(handle)
