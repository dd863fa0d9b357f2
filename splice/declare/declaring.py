"""The checks of a declaration's arguments (``splice.extern``, ``from_ptx``, ``from_ltoir``,
``from_object``, ``splice.library``, ``splice.asm``'s ``memory=``), run once when it is
declared: a source given as text or as a path, a symbol, compiler options, include
directories and defines, and ``memory=``. Each refusal is a ``SpliceDeclarationError`` that
names the declaration."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SpliceDeclarationError, SpliceUnsafePathError
from ..forms import element

if TYPE_CHECKING:
    from ..forms.base import CallForm
    from ..types import Signature
from ..inputs.checks import is_cxx_name
from ..inputs.fragments import ENTRY_POINTS, FILE_KINDS
from ..system import safe_fs

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
    :data:`splice.inputs.fragments.FILE_KINDS` value).

    Raises:
        SpliceDeclarationError: text or bytes where a path goes, a suffix of another kind,
            a directory, or a missing file; each says which declaration to use instead.
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
    if p.is_absolute():
        candidates = [p]
    else:
        candidates = ([base / p] if base is not None else []) + [Path.cwd() / p]
    for c in candidates:
        try:
            st = os.stat(c)            # never opened here: a FIFO is refused by its type
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            raise SpliceDeclarationError(f"{what}: {os.fspath(path)!r} is a directory, not a "
                                         f"file ({c.resolve()})")
        if not stat.S_ISREG(st.st_mode):
            raise SpliceUnsafePathError(safe_fs.not_regular(c, st, f"{what}: the file"))
        return c.resolve()
    tried = ", ".join(dict.fromkeys(str(c.resolve()) for c in candidates))
    raise SpliceDeclarationError(f"{what}: file {os.fspath(path)!r} not found (tried {tried})")


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


def check_options(options, include_dirs, defines, what: str):
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
    if isinstance(include_dirs, (str, os.PathLike)):
        include_dirs = [include_dirs]
    if not isinstance(include_dirs, (list, tuple)) or \
            not all(isinstance(d, (str, os.PathLike)) for d in include_dirs):
        raise SpliceDeclarationError(f"{what}: include_dirs must be a list of directory paths, "
                                     f"got {include_dirs!r}")
    if defines is not None and not isinstance(defines, dict):
        raise SpliceDeclarationError(f"{what}: defines must be a dict such as {{'N': 4, "
                                     f"'FAST': None}}, got {defines!r}")
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
    return tuple(options), tuple(os.fspath(d) for d in include_dirs), tuple(defs)


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
            rel = "" if os.path.isabs(d) else \
                f" (a relative path is taken from the current directory, {os.getcwd()})"
            raise SpliceDeclarationError(
                f"{what}: include directory {d!r} ({source}) is not a directory{rel}")


#: ``memory=`` values of an extern: "any" (default): the call may touch any memory, and is
#: ordered against every memory operation of the kernel; "arguments": it touches global
#: memory only through its pointer arguments (and a tile call's staged tiles), and is
#: ordered only against the kernel's operations on arrays that may alias them.
MEMORY = ("any", "arguments")


#: ``memory=`` values of ``splice.asm``: "any" (default), as for an extern; "none": the
#: snippet touches no global memory (registers, shared and local memory, barriers,
#: shuffles, votes: ``splice.analysis.asm_check.check_snippet(..., memory="none")`` proves it) and
#: is ordered only against splice's other calls.
ASM_MEMORY = ("any", "none")


def check_memory(memory, pure: bool, what: str, values: tuple[str, ...] = MEMORY) -> None:
    """Check the ``memory=`` of a declaration against its ``values`` (:data:`MEMORY`,
    :data:`ASM_MEMORY`) and its ``pure`` (block and warpgroup scope make every call
    impure).

    Raises:
        SpliceDeclarationError: naming ``what``: a value not in ``values`` (with the one
            to use where it is the other kind's), or a value other than "any" on a pure
            declaration (its calls touch no memory and are ordered against nothing).
    """
    if not isinstance(memory, str) or memory not in values:
        hint = _MEMORY_HINTS[values].get(memory, "") if isinstance(memory, str) else ""
        raise SpliceDeclarationError(
            f"{what}: memory must be {' or '.join(repr(v) for v in values)}, got "
            f"{memory!r}{hint}")
    if memory != "any" and pure:
        raise SpliceDeclarationError(
            f"{what}: memory={memory!r} says which memory an impure call touches, but the "
            f"{'snippet' if values is ASM_MEMORY else 'extern'} is pure (it touches none "
            f"and is ordered against nothing); declare it pure=False, or leave memory= out")


#: Why a value of the other kind of declaration is not this one's (its value tuple's key).
_MEMORY_HINTS: dict[tuple[str, ...], dict[str, str]] = {
    MEMORY: {"none": "; memory='none' is splice.asm's: an extern without pointer "
                     "arguments declared memory='arguments' is ordered against no array"},
    ASM_MEMORY: {"arguments": "; a snippet has no pointer arguments: use memory='none' "
                              "for one that touches no global memory"},
}


#: The values of ``inline=``.
INLINE = ("auto", "always", "never")


def check_inline(inline, what: str) -> None:
    """Raise SpliceDeclarationError naming ``what`` unless ``inline`` is one of
    :data:`INLINE`."""
    if inline not in INLINE:
        raise SpliceDeclarationError(f"{what}: inline must be 'auto', 'always' or 'never', "
                                     f"got {inline!r}")


@dataclasses.dataclass(frozen=True)
class CallOptions:
    """How the calls of one extern run, as one record validated once, when the extern is
    declared (:meth:`declared`); the trace, the stages and the cache key read it, not the
    declaration's keywords.

    Attributes:
        pure: whether a call may be removed when unused, hoisted or duplicated (the form's
            answer: a block or warpgroup call never is).
        inline: ``"auto"``, ``"always"`` or ``"never"`` (:data:`INLINE`).
        form: the call form of the declaration's ``scope=`` (:mod:`splice.forms`).
        memory: the memory an impure call touches, which it is ordered against
            (:data:`MEMORY`; a ``splice.asm`` snippet's: :data:`ASM_MEMORY`).

    Example:
        >>> from splice.declare.declaring import CallOptions
        >>> from splice.types import parse_signature
        >>> o = CallOptions.declared(parse_signature("float32(float32)"), scope="block",
        ...                          pure=True, what="extern 'f'")
        >>> (o.pure, o.inline, str(o.form.scope), o.memory)
        (False, 'auto', 'block', 'any')
    """

    pure: bool
    inline: str = "auto"
    form: CallForm = element.ATOMIC
    memory: str = "any"

    @classmethod
    def declared(cls, sig: Signature, *, pure, scope="element", inline="auto", memory="any",
                 what: str, memory_values: tuple[str, ...] = MEMORY) -> CallOptions:
        """The options of a declaration of signature ``sig``, each checked.

        Args:
            sig: the extern's signature (the form's rules on results).
            pure, scope, inline, memory: the declaration's keywords.
            what: the declaration in messages ("extern 'f' at k.py:3").
            memory_values: the values ``memory`` may take.

        Returns:
            CallOptions: with the pure the form gives (block calls are never pure).

        Raises:
            SpliceDeclarationError: a keyword of the wrong type or value, naming ``what``.
        """
        from ..forms import form_of
        if not isinstance(pure, bool):
            raise SpliceDeclarationError(f"{what}: pure must be True or False")
        form = scope if not isinstance(scope, str) else form_of(scope, what)
        check_inline(inline, what)
        pure = form.declare(sig, pure, what)
        check_memory(memory, pure, what, memory_values)
        return cls(pure, inline, form, memory)
