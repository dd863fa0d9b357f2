"""The checks of a declaration's arguments (``splice.extern``, ``from_ptx``, ``from_ltoir``,
``from_object``, ``splice.library``, ``splice.asm`` and ``splice.cuda``), run once when it
is declared: a source given as text or as a path, a symbol, compiler options, include
directories and defines; and :class:`CallOptions`, the record of ``pure=``, ``inline=``,
``scope=`` and ``memory=`` each door makes once. Each refusal is a
``SpliceDeclarationError`` that names the declaration."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SpliceDeclarationError, SpliceUnsafePathError
from ..forms import element, form_of
from ..forms.base import Memory
from ..inputs.checks import is_cxx_name
from ..inputs.fragments import ENTRY_POINTS, FILE_KINDS
from ..system import safe_fs

if TYPE_CHECKING:
    from ..forms.base import CallForm
    from ..types import Signature

_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_LANG = {"ptx": "PTX", "cuda": "CUDA C"}


_CODE_HINTS = (("ptx", re.compile(r"(^|\n)\s*\.(version|target|address_size|visible|func|entry)"
                                  r"\b")),
               ("cuda", re.compile(r"extern\s+\"C\"|__device__|__global__|#include")))


def not_a_path(path, kind: str) -> tuple[str, str] | None:
    """Why ``path`` cannot be a file name (text or bytes where a path goes) and the kind of
    text it looks like (``kind`` if it looks like none), or None."""
    if isinstance(path, (bytes, bytearray)):
        return f"got {len(path)} bytes, not a path", kind
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        return f"a path must be a str or os.PathLike, got {type(path).__name__}", kind
    text = os.fspath(path)
    for looks, pattern in _CODE_HINTS:
        if pattern.search(text):
            return f"the path looks like {_LANG[looks]} text", looks
    if "\n" in text or "\0" in text:
        return "the path holds a newline or NUL: it is text, not a file name", kind
    if len(text) > 4096 or any(len(p) > 255 for p in text.split(os.sep)):
        return f"a {len(text)}-character string is too long for a file name", kind
    return None


def check_text(text, what: str, arg: str, kind: str) -> None:
    """``text`` (the ``arg=`` of a declaration taking ``kind`` text) is text, not bytes or
    a file name.

    Raises:
        SpliceDeclarationError: not a str, or a one-line file name such as "f.cu"; says
            which declaration takes the file instead.
    """
    if text is None:
        return
    lang = _LANG[kind]
    if not isinstance(text, str):
        raise SpliceDeclarationError(
            f"{what}: {arg} must be {lang} text (str), got {type(text).__name__}; a file "
            f"goes to {ENTRY_POINTS[kind][0]}")
    name = text.strip()
    file_kind = FILE_KINDS.get(Path(name).suffix.lower())
    if file_kind and "\n" not in name and not re.search(r"[;{}()]", name):
        raise SpliceDeclarationError(
            f"{what}: {arg}={name!r} is a file name, not {lang} text; declare the file "
            f"with {ENTRY_POINTS[file_kind][0]}")


def resolve_path(path, base: Path | None, what: str, kind: str) -> Path:
    """The file ``path`` names, for a declaration taking files of ``kind`` (a
    :data:`splice.inputs.fragments.FILE_KINDS` value); a relative path is resolved
    against ``base`` (:func:`anchored`), never the current directory.

    Raises:
        SpliceDeclarationError: text or bytes where a path goes, a suffix of another kind,
            a directory, a missing file, or a relative path declared in no file; each says
            what to do instead.
        SpliceUnsafePathError: a FIFO, a device or a socket (never opened).
    """
    bad = not_a_path(path, kind)
    if bad is not None:
        why, looks = bad
        raise SpliceDeclarationError(f"{what}: {why}; {ENTRY_POINTS[looks][1]}")
    p = Path(os.fspath(path))
    other = FILE_KINDS.get(p.suffix.lower())
    if other is not None and other != kind:
        raise SpliceDeclarationError(
            f"{what}: {p.name} is a {p.suffix} file, which {ENTRY_POINTS[kind][0]} does not "
            f"take: use {ENTRY_POINTS[other][0]}")
    c = Path(anchored(p, base, what, "the file"))
    try:
        st = os.stat(c)            # never opened here: a FIFO is refused by its type
    except OSError:
        raise SpliceDeclarationError(f"{what}: file {os.fspath(path)!r} not found ({c}{_BESIDE})"
                                     if not p.is_absolute() else
                                     f"{what}: file {os.fspath(path)!r} not found") from None
    if stat.S_ISDIR(st.st_mode):
        raise SpliceDeclarationError(f"{what}: {os.fspath(path)!r} is a directory, not a "
                                     f"file ({c.resolve()})")
    if not stat.S_ISREG(st.st_mode):
        raise SpliceUnsafePathError(safe_fs.not_regular(c, st, f"{what}: the file"))
    return c.resolve()


#: How a relative name of a declaration is resolved, for its messages
_BESIDE = ": a relative path is taken from the directory of the file that declares it, " \
    "never from the current directory"


def anchored(path, base: Path | None, what: str, role: str) -> str:
    """``path`` (a file or directory a declaration names: ``path=``, ``include_dirs=``, a
    path in ``options=``), made absolute: a relative one is taken from ``base``, the
    directory of the file the declaration is in
    (:func:`splice.system.safe_fs.declaring_dir`), as ``#include "..."`` is taken from
    the including file's; never from the current directory, which another user may be
    able to write (``/tmp``, a team directory).

    Args:
        path: the path as given.
        base (Path | None): the declaring file's directory; None: declared in no file.
        what (str): the declaration, for the message.
        role (str): what the path is ("the file", "include directory"), for the message.

    Returns:
        str: the absolute path (not normalised: ``..`` stays for the kernel to resolve).

    Raises:
        SpliceDeclarationError: a relative path declared in no file (``python -c``,
            ``<stdin>``, a notebook cell); says to give an absolute path.

    Example:
        >>> from pathlib import Path
        >>> anchored("inc", Path("/proj"), "extern 'f'", "include directory")
        '/proj/inc'
    """
    text = os.fspath(path)
    if os.path.isabs(text):
        return text
    if base is None:
        raise SpliceDeclarationError(
            f"{what}: {role} {text!r} is a relative path, and the declaration is in no "
            f"file to take it from (python -c, <stdin>, a notebook cell); give an absolute "
            f"path (os.path.abspath({text!r}) if you mean the current directory)")
    return os.path.join(base, text)


def check_stub(stub, where: str) -> None:
    if not callable(stub):
        raise SpliceDeclarationError(
            f"extern declared at {where}: the decorator takes a typed stub function "
            f"(def f(x: ct.float32) -> ct.float32: ...), got {type(stub).__name__} "
            f"{stub!r:.80}")


def check_symbol(symbol, what: str) -> str:
    if is_cxx_name(symbol):
        raise SpliceDeclarationError(
            f"{what}: {symbol!r} is a C++ name; C++ names are resolved for CUDA C sources "
            f"(splice.extern(source=/path=, name=...) or splice.library); for PTX, LTO-IR or "
            f"binary objects give the mangled (or extern \"C\") symbol")
    if not isinstance(symbol, str) or not _C_IDENT.fullmatch(symbol):
        raise SpliceDeclarationError(
            f"{what}: symbol {symbol!r} is not a C identifier; name the extern \"C\" "
            f"function with name='...'")
    if symbol.startswith("__splice"):
        raise SpliceDeclarationError(f"{what}: the prefix '__splice' is reserved for splice")
    return symbol


def check_options(options, include_dirs, defines, what: str, base: Path | None):
    """The checked (options, include directories, defines) of a CUDA C declaration:
    relative directories of ``include_dirs`` and ``-I``, and relative files of NVRTC's
    other path options, taken from ``base`` (:func:`anchored`); NVRTC's own precompiled
    header options refused.

    Raises:
        SpliceDeclarationError: named by ``what``."""
    if isinstance(options, str) or not isinstance(options, (list, tuple)) or \
            not all(isinstance(o, str) for o in options):
        raise SpliceDeclarationError(f"{what}: options must be a list of strings such as "
                                     f"['-std=c++17'], got {options!r}")
    for o in options:
        if o.startswith(("-arch", "--gpu-architecture", "-rdc", "--relocatable-device-code")):
            raise SpliceDeclarationError(
                f"{what}: option {o!r} is set by splice (the kernel's architecture, -rdc=true)")
        if o.startswith(("-Xptxas", "--ptxas-options")):
            raise SpliceDeclarationError(
                f"{what}: option {o!r} would be ignored: NVRTC makes PTX here, and splice "
                f"assembles the kernel with tileiras's own ptxas flags")
        if o.split("=", 1)[0] in _PCH_OPTIONS:
            raise SpliceDeclarationError(
                f"{what}: option {o!r}: splice gives NVRTC its precompiled headers itself, "
                f"in a directory of its own (docs/security.md); a header file NVRTC loads "
                f"is code it would not check, and not in the cache key")
    if isinstance(include_dirs, (str, os.PathLike)):
        include_dirs = [include_dirs]
    if not isinstance(include_dirs, (list, tuple)) or \
            not all(isinstance(d, (str, os.PathLike)) for d in include_dirs):
        raise SpliceDeclarationError(f"{what}: include_dirs must be a list of directory paths, "
                                     f"got {include_dirs!r}")
    if defines is not None and not isinstance(defines, dict):
        raise SpliceDeclarationError(f"{what}: defines must be a dict such as {{'N': 4, "
                                     f"'FAST': None}}, got {defines!r}")
    include_dirs = [anchored(d, base, what, "include directory") for d in include_dirs]
    options = [_anchored_option(o, base, what) for o in options]
    check_include_options(options, include_dirs, what)
    defs = []
    in_options = macros_in(options)
    for k, v in (defines or {}).items():
        if not isinstance(k, str) or not _C_IDENT.fullmatch(k):
            raise SpliceDeclarationError(f"{what}: bad macro name {k!r} in defines")
        if isinstance(v, float) or not isinstance(v, (str, int, bool, type(None))):
            hint = " (write a float as text, e.g. '2.5f')" if isinstance(v, float) else ""
            raise SpliceDeclarationError(
                f"{what}: defines[{k!r}] is {v!r}; a macro's value is a str, int, bool or "
                f"None (no value){hint}")
        if k in in_options:
            raise SpliceDeclarationError(
                f"{what}: macro {k!r} is defined both in defines= and by option "
                f"{in_options[k]!r}; NVRTC would keep one silently: define it once")
        # True/False as 1/0: '-DFAST=True' is 0 in '#if FAST' (an unknown identifier)
        defs.append((k, None if v is None else str(int(v)) if isinstance(v, bool)
                     else str(v)))
    return tuple(options), tuple(include_dirs), tuple(defs)


#: NVRTC's options for its own precompiled headers (with or without ``=value``)
_PCH_OPTIONS = frozenset(f"{dash}{name}" for dash in ("-", "--") for name in
                         ("pch", "create-pch", "use-pch", "pch-dir"))
#: NVRTC's options whose value is a path (a directory to search, a file to write), as
#: written before it: resolved as a declaration's relative paths are (:func:`anchored`)
_PATH_OPTIONS = ("-I", "--include-path=", "--time=", "-time=", "--fdevice-time-trace=",
                 "-fdevice-time-trace=")


def _anchored_option(option: str, base: Path | None, what: str) -> str:
    """``option`` with the relative path of a :data:`_PATH_OPTIONS` option taken from
    ``base``; NVRTC would take it from the current directory."""
    for head in _PATH_OPTIONS:
        value = option[len(head):]
        if option.startswith(head) and value and not value.startswith("="):
            return head + anchored(value, base, what, f"the path of option {option!r}")
    return option


def macros_in(options) -> dict[str, str]:
    """{macro name: the option defining it} for the ``-D`` options of ``options``."""
    out = {}
    for o in options:
        m = re.match(r"(?:-D|--define-macro=)([A-Za-z_][A-Za-z0-9_]*)", o)
        if m:
            out[m.group(1)] = o
    return out


def check_include_options(options, include_dirs, what: str) -> None:
    """Refuse an include directory that does not exist and an ``-I`` with no directory
    (NVRTC takes each option as one string: ``-I dir`` would be two)."""
    for o in options:
        if o in ("-I", "--include-path", "--include-path=", "-D", "--define-macro",
                 "--define-macro="):
            raise SpliceDeclarationError(
                f"{what}: option {o!r} has no value; write it as one string, "
                f"'-I/path/to/dir' or '-DNAME=value' (or use include_dirs=/defines=)")
    dirs = [(os.fspath(d), "include_dirs") for d in include_dirs]
    dirs += [(o[2:] if o.startswith("-I") else o.split("=", 1)[1], f"option {o!r}")
             for o in options if o.startswith(("-I", "--include-path="))]
    for d, source in dirs:
        if not os.path.isdir(d):
            raise SpliceDeclarationError(
                f"{what}: include directory {d!r} ({source}) is not a directory")


#: ``memory=`` values of an extern (and of ``splice.cuda``): :attr:`~Memory.ANY` (the
#: default) and :attr:`~Memory.ARGUMENTS`.
MEMORY = (Memory.ANY, Memory.ARGUMENTS)


#: ``memory=`` values of ``splice.asm``: :attr:`~Memory.ANY` (the default) and
#: :attr:`~Memory.NONE` (``splice.analysis.asm_check.check_snippet`` proves it).
ASM_MEMORY = (Memory.ANY, Memory.NONE)


#: Why a value of the other kind of declaration is not this one's (its value tuple's key).
_MEMORY_HINTS: dict[tuple[Memory, ...], dict[str, str]] = {
    MEMORY: {"none": "; memory='none' is splice.asm's: an extern without pointer "
                     "arguments declared memory='arguments' is ordered against no array"},
    ASM_MEMORY: {"arguments": "; a snippet has no pointer arguments: use memory='none' "
                              "for one that touches no global memory"},
}


#: The values of ``inline=``.
INLINE = ("auto", "always", "never")


@dataclasses.dataclass(frozen=True)
class CallOptions:
    """How the calls of one declaration run: its ``pure=``, ``inline=``, ``scope=`` (as the
    form) and ``memory=``, as one record made once, at the public door that took them
    (``splice.extern``, ``from_ptx``, ``from_ltoir``, ``from_object``, ``Library.extern``;
    ``splice.asm`` and ``splice.cuda`` at the call: :meth:`parse`), and validated there
    (``__post_init__``). The declaration, the trace, the stages and the cache key read the
    record; no function below the doors takes these as keywords.

    Attributes:
        pure: whether a call may be removed when unused, hoisted or duplicated (after
            :meth:`declared`: the form's answer; a block or warpgroup call never is).
        inline: ``"auto"``, ``"always"`` or ``"never"`` (:data:`INLINE`).
        form: the call form of the declaration's ``scope=`` (:mod:`splice.forms`).
        memory: the memory an impure call touches, which it is ordered against
            (:class:`~splice.forms.base.Memory`; a user's string is taken at the door).
        memory_values: the ``memory=`` values this kind of declaration takes
            (:data:`MEMORY`; a ``splice.asm`` snippet's: :data:`ASM_MEMORY`).

    Example:
        >>> from splice.declare.declaring import CallOptions
        >>> from splice.types import parse_signature
        >>> o = CallOptions.parse("extern 'f'", scope="block", memory="arguments")
        >>> o = o.declared(parse_signature("float32(float32)"), "extern 'f'")
        >>> (o.pure, o.inline, str(o.form.scope), str(o.memory))
        (False, 'auto', 'block', 'arguments')
    """

    pure: bool = True
    inline: str = "auto"
    form: CallForm = element.ATOMIC
    memory: Memory = Memory.ANY
    memory_values: tuple[Memory, ...] = dataclasses.field(default=MEMORY, compare=False,
                                                          repr=False)
    #: the declaration in the messages of ``__post_init__`` ("extern 'f' at k.py:3")
    what: dataclasses.InitVar[str] = "a declaration"

    @classmethod
    def parse(cls, what: str, *, pure=True, inline="auto", scope="element", memory="any",
              memory_values: tuple[Memory, ...] = MEMORY) -> CallOptions:
        """The record of a public door's keywords as the user gave them (``scope``: a
        :class:`~splice.forms.base.Scope`, its string or a form; ``memory``: a
        :class:`~splice.forms.base.Memory` or its string), validated.

        Raises:
            SpliceDeclarationError: a keyword of the wrong type or value, naming ``what``.
        """
        return cls(pure, inline, scope, memory, memory_values, what=what)

    def __post_init__(self, what: str) -> None:
        if not isinstance(self.pure, bool):
            raise SpliceDeclarationError(f"{what}: pure must be True or False")
        if not callable(getattr(self.form, "for_call", None)):     # a scope's name
            object.__setattr__(self, "form", form_of(self.form, what))
        if self.inline not in INLINE:
            raise SpliceDeclarationError(f"{what}: inline must be 'auto', 'always' or "
                                         f"'never', got {self.inline!r}")
        object.__setattr__(self, "memory", self._memory(what))

    def _memory(self, what: str) -> Memory:
        """:attr:`memory` as a :class:`~splice.forms.base.Memory`, one of
        :attr:`memory_values` (a value of the other kind of declaration named)."""
        memory, values = self.memory, self.memory_values
        if not isinstance(memory, str) or memory not in values:
            hint = _MEMORY_HINTS[values].get(str(memory), "") if isinstance(memory, str) \
                else ""
            raise SpliceDeclarationError(
                f"{what}: memory must be {' or '.join(repr(v.value) for v in values)}, got "
                f"{memory!r}{hint}")
        return Memory(memory)

    def declared(self, sig: Signature, what: str) -> CallOptions:
        """These options for a declaration of signature ``sig``: with the ``pure`` its form
        gives (block and warpgroup calls are never pure), a ``memory=`` other than
        :attr:`~splice.forms.base.Memory.ANY` refused on a pure one (its calls touch no
        memory and are ordered against nothing).

        Raises:
            SpliceDeclarationError: naming ``what``: the form's rules on ``sig``
                (:meth:`~splice.forms.base.CallForm.declare`), or ``memory=`` on a pure
                declaration.
        """
        pure = self.form.declare(sig, self, what)
        if self.memory is not Memory.ANY and pure:
            kind = "snippet" if Memory.NONE in self.memory_values else "extern"
            raise SpliceDeclarationError(
                f"{what}: memory={self.memory.value!r} says which memory an impure call "
                f"touches, but the {kind} is pure (it touches none and is ordered against "
                f"nothing); declare it pure=False, or leave memory= out")
        return dataclasses.replace(self, pure=pure)
