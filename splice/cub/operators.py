"""A user's operator or comparator of a :mod:`splice.cub` call (``op=``, ``less=``) as C++:
the checks that it is one expression, and the struct it becomes in the CUB source."""

from __future__ import annotations

_MAX_OP_CHARS = 2000


def _balanced(text: str) -> bool:
    """Whether ``text``'s brackets ``()[]{}`` nest and close (strings not considered)."""
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    for c in text:
        if c in "([{":
            stack.append(c)
        elif c in pairs and (not stack or stack.pop() != pairs[c]):
            return False
    return not stack


def _top_level_comma(text: str) -> bool:
    """Whether ``text`` has a comma outside its brackets ``()[]{}``, where no ``<`` outside
    them could open a template's arguments (``op<float, 2>{}``: NVRTC decides those)."""
    depth, commas, angles = 0, False, False
    for c in text:
        depth += c in "([{"
        depth -= c in ")]}"
        if depth == 0:
            commas |= c == ","
            angles |= c == "<"
    return commas and not angles


def user_operator(text: str) -> tuple[str, str]:
    """The C++ type name and the struct definition of a user's operator: a C++ expression
    whose value is a callable of two arguments, such as ``"cuda::maximum<>{}"`` or
    ``"[](float a, float b) { return a > b ? a : b; }"``.

    The text is compiled by NVRTC as the user's code (the trust of a
    :func:`splice.extern` source), as ``auto splice_op{`` ... ``}; return splice_op(a, b);``
    in a member function of a struct named by the text's hash (braced, so that two
    expressions separated by a comma are a compile error, never the comma operator, and an
    overloaded function name must be wrapped in a lambda); it must be one expression:
    brackets that nest and close, no comma outside them (a ``<`` outside them leaves a comma
    to NVRTC: template arguments),
    no ``#`` (preprocessor lines), no line-comment (``//``) or block comment, under
    2000 characters.

    Args:
        text (str): the operator's C++ expression.

    Returns:
        tuple[str, str]: (``"splice_cub::user_op_<hash>"``, the struct's C++ source).

    Raises:
        ValueError: text that is not one such expression (the handlers turn it into a
            :class:`~splice.errors.SpliceCallError` at the user's call).

    Example:
        >>> name, source = user_operator("cuda::maximum<>{}")
        >>> name.startswith("splice_cub::user_op_") and "cuda::maximum<>{}" in source
        True
    """
    import hashlib
    if not isinstance(text, str) or not text.strip():
        raise ValueError("must be a non-empty string of C++")
    bad = [why for why, hit in (("a '#'", "#" in text),
                                ("a comment", "//" in text or "/*" in text),
                                (f"more than {_MAX_OP_CHARS} characters",
                                 len(text) > _MAX_OP_CHARS),
                                ("brackets that do not nest and close", not _balanced(text)),
                                ("a comma outside brackets (two expressions)",
                                 _top_level_comma(text)))
           if hit]
    if bad:
        raise ValueError(f"must be one C++ expression, but has {' and '.join(bad)}")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    name = f"user_op_{digest}"
    source = ("\nnamespace splice_cub {\n"
              f"struct {name} {{   // the operator of a splice.cub call\n"
              "    template <class A, class B>\n"
              "    __device__ __forceinline__ auto operator()(const A &a, const B &b) const {\n"
              # braced: a comma at the top level of the text is a compile error, not the
              # comma operator (which would silently use its last operand)
              f"        auto splice_op{{\n{text}\n        }};\n"
              "        return splice_op(a, b);\n    }\n};\n}\n")
    return f"splice_cub::{name}", source
