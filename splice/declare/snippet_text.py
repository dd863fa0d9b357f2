"""The text of a ``splice.cuda`` snippet, by C++'s rules: whether it is a body (it holds a
``return``), where its brackets do not balance, and which names its inputs may not have
(they name the generated function's parameters). :mod:`splice.declare.cuda_frontend`
applies them at the call."""

from __future__ import annotations

import re

_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RETURN = re.compile(r"\breturn\b")

#: A comment or a string or character literal: text in which a ``return`` is no statement.
_NOT_CODE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'",
                       re.DOTALL)

#: C and C++ keywords and alternative tokens, which an input cannot be named.
_RESERVED = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t
char32_t char8_t class compl concept const consteval constexpr constinit const_cast continue
co_await co_return co_yield decltype default delete do double dynamic_cast else enum explicit
export extern false float for friend goto if inline int long mutable namespace new noexcept
not not_eq nullptr operator or or_eq private protected public register reinterpret_cast
requires return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void
volatile wchar_t while xor xor_eq
""".split())

#: The macros NVRTC defines in every program (``#ifdef`` of each, measured with NVRTC 13):
#: an input of that name would be replaced in splice's generated parameter list. Macros of
#: headers the snippet includes are refused when it compiles
#: (:meth:`splice.declare.cuda_frontend.CudaSnippet.source`).
_NVRTC_MACROS = frozenset({"NULL", "assert", "va_start", "va_arg", "va_end", "va_copy"})


def is_body(code: str) -> bool:
    """Whether the snippet ``code`` is a function body: it holds ``return`` outside comments
    and literals (else it is an expression, whose value is returned).

    Example:
        >>> is_body("x > 0 ? x : 0.0f"), is_body("return x; // y"), is_body('"return"')
        (False, True, False)
    """
    return bool(_RETURN.search(_NOT_CODE.sub(" ", code)))


def input_name_refusal(name: str) -> str | None:
    """Why ``name`` cannot name an input of ``splice.cuda`` (a parameter of the generated
    function), or None.

    Args:
        name (str): the keyword argument's name.

    Returns:
        str | None: the reason, for the call's error.

    Example:
        >>> input_name_refusal("NULL")
        'a macro NVRTC defines (NULL)'
        >>> input_name_refusal("x") is None
        True
    """
    if not _C_IDENT.fullmatch(name):
        return "not a C identifier"
    if name in _RESERVED:
        return "a C++ keyword"
    if name in _NVRTC_MACROS:
        return f"a macro NVRTC defines ({name})"
    if "__" in name or re.match(r"_[A-Z]", name):
        return "an identifier C++ reserves (with '__', or '_' and a capital)"
    if name.startswith("splice_"):
        return "a name splice's generated code uses (splice_...)"
    return None


def bracket_refusal(code: str) -> str | None:
    """Where the brackets ``()[]{}`` of ``code`` (outside comments and literals) do not
    balance, or None.

    Args:
        code (str): a snippet.

    Returns:
        str | None: "'{' at line 1, column 12 is never closed" and the like.

    Example:
        >>> bracket_refusal("if (x > 0) { return x; return 0.0f;")
        "'{' at line 1, column 12 is never closed"
        >>> bracket_refusal('return x > 0 ? x : 0.0f; // }') is None
        True
    """
    text = _NOT_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)
    pairs = {")": "(", "]": "[", "}": "{"}
    open_: list[tuple[str, int]] = []
    for i, c in enumerate(text):
        if c in "([{":
            open_.append((c, i))
        elif c in pairs:
            if not open_:
                return f"'{c}' at {_line_col(text, i)} closes no '{pairs[c]}'"
            if open_[-1][0] != pairs[c]:
                o, j = open_[-1]
                return f"'{c}' at {_line_col(text, i)} does not close the '{o}' at " \
                       f"{_line_col(text, j)}"
            open_.pop()
    if open_:
        c, i = open_[-1]
        return f"'{c}' at {_line_col(text, i)} is never closed"
    return None


def _line_col(text: str, i: int) -> str:
    line = text.count("\n", 0, i) + 1
    return f"line {line}, column {i - (text.rfind(chr(10), 0, i) + 1) + 1}"
