"""Kernel signatures without a GPU: :func:`kernel_signature` reads one parameter per argument
in a short grammar, the same one ``python -m splice --sig`` reads.

::

    sig = splice.kernel_signature("array(float32)", "array(float32)", "scalar(float32)", 1024)
    cubin = splice.compile(saxpy, sig, "sm_90").cubin

Grammar of one parameter (text; Python-like, parsed, never evaluated):

- ``array(DTYPE)`` / ``array(DTYPE, ndim=N)``: a C-contiguous array of N dimensions
  (default 1): int32 indices, innermost stride 1, other strides divisible by 16 bytes (4
  float32 elements, 8 float16: what ``ct.launch`` assumes of such an array), base address
  divisible by 16 bytes, non-negative strides, aliasing no other parameter;
- ``scalar(DTYPE)``: a runtime scalar;
- a constant (``1024``, ``-2``, ``2.5``, ``True``) for a ``ct.Constant`` parameter.

DTYPE is a name: bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16,
bfloat16, float32, float64, tfloat32, and the fp8 dtypes float8_e4m3fn, float8_e5m2,
float8_e5m3fnu, float8_e8m0fnu (arrays of these are kernel parameters; externs take the
element types of :mod:`splice.types`).
"""

from __future__ import annotations

import ast
import re
from typing import NoReturn

from ..errors import SpliceDeclarationError

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "tfloat32", "float8_e4m3fn",
          "float8_e5m2", "float8_e5m3fnu", "float8_e8m0fnu")


def _fail(text: str, why: str) -> NoReturn:
    raise SpliceDeclarationError(
        f"kernel signature parameter {text!r}: {why}. Write array(float32), "
        f"array(float16, ndim=2), scalar(int32) or a constant such as 1024")


def _dtype(node, text: str):
    import cuda.tile as ct
    if not isinstance(node, ast.Name) or node.id not in DTYPES:
        shown = ast.unparse(node) if isinstance(node, ast.AST) else node
        _fail(text, f"unknown dtype {shown!r} (known: {', '.join(DTYPES)})")
    return getattr(ct, "bool_" if node.id == "bool" else node.id)


def _array(dtype, ndim: int):
    import cuda.tile as ct
    from cuda.tile.compilation import ArrayConstraint
    # Outer strides divisible by 16 *bytes*, as cuTile assumes of a launched array (its JAX
    # path: cuda/tile/jax/_jax.py); 16 elements would promise more than a launch checks.
    div = 128 // dtype.bitwidth if 128 % dtype.bitwidth == 0 else 1
    return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False,
                           stride_constant=(None,) * (ndim - 1) + (1,) if ndim else (),
                           stride_divisible_by=(div,) * (ndim - 1) + (1,) if ndim else (),
                           base_addr_divisible_by=16)


def _constant(node, text: str):
    try:
        value = ast.literal_eval(node)
    except ValueError:
        _fail(text, "not array(...), scalar(...) or a constant")
    if not isinstance(value, (bool, int, float)):
        _fail(text, f"a constant must be an int, float or bool, not {type(value).__name__}")
    return _checked_constant(value, text)


def _checked_constant(value, text: str):
    """``value``, unless an int no 64-bit integer type holds (cuTile refuses it later with
    "Unknown location")."""
    if isinstance(value, int) and not isinstance(value, bool) and \
            not -(1 << 63) <= value < (1 << 64):
        _fail(text, "an integer constant must fit a 64-bit integer (int64 or uint64)")
    return value


def _parameter(node, text: str):
    from cuda.tile.compilation import ScalarConstraint
    if not isinstance(node, ast.Call):
        return _constant(node, text)
    fn = node.func.id if isinstance(node.func, ast.Name) else None
    if fn not in ("array", "scalar") or len(node.args) != 1:
        _fail(text, "expected array(DTYPE[, ndim=N]) or scalar(DTYPE)")
    dtype = _dtype(node.args[0], text)
    if fn == "scalar":
        if node.keywords:
            _fail(text, "scalar() takes only a dtype")
        return ScalarConstraint(dtype)
    ndim = 1
    if [kw.arg for kw in node.keywords].count("ndim") > 1:
        _fail(text, "ndim given twice; array() takes ndim=N once")
    for kw in node.keywords:
        value = ast.literal_eval(kw.value) if isinstance(kw.value, ast.Constant) else None
        if kw.arg != "ndim" or isinstance(value, bool) or not isinstance(value, int) or \
                not 0 <= value <= 8:
            _fail(text, f"array() takes ndim=N (0 to 8), got {ast.unparse(kw)}")
        ndim = value
    return _array(dtype, ndim)


def parse_parameters(text: str) -> list:
    """The parameters listed, comma-separated, in ``text`` (``"array(float32), 1024"``), as
    cuTile parameter constraints (constants as plain values).

    Raises:
        SpliceDeclarationError: text outside the grammar (see the module docstring).
    """
    if not isinstance(text, str):
        raise SpliceDeclarationError(f"kernel signature: expected text, got "
                                     f"{type(text).__name__}")
    try:
        tree = ast.parse(f"({text},)", mode="eval").body
    except SyntaxError:
        _fail(text, "not valid syntax")
    if not isinstance(tree, ast.Tuple):  # pragma: no cover - "(x,)" always parses to one
        _fail(text, "not a list of parameters")
    return [_parameter(node, ast.unparse(node)) for node in tree.elts]


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def check_symbol(symbol, what: str) -> None:
    """Refuse an entry symbol tileiras cannot emit (it failed with "exit 5" and its log).

    Raises:
        SpliceDeclarationError: ``symbol`` is not None and not an identifier.
    """
    if symbol is not None and not (isinstance(symbol, str) and _SYMBOL.fullmatch(symbol)):
        raise SpliceDeclarationError(
            f"{what}: entry symbol {symbol!r} is not an identifier (letters, digits, _ and $, "
            f"not starting with a digit); pick another or pass symbol=None for cuTile's "
            f"mangled name")


def kernel_signature(*params, symbol: str | None = None):
    """A ``cuda.tile.compilation.KernelSignature`` for :func:`splice.compile` and
    :func:`splice.export_kernel`, without a GPU: one argument per kernel parameter, each
    text in the grammar of :mod:`splice.tracing.signatures` (``"array(float32)"``,
    ``"array(float16, ndim=2)"``, ``"scalar(int32)"``, ``"1024"``), a Python int/float/bool
    constant for a ``ct.Constant`` parameter, or any cuTile parameter constraint
    (``ArrayConstraint`` ...) as is.

    Args:
        *params: the kernel's parameters in order.
        symbol (str | None): the kernel's symbol in the cubin; None: cuTile's default.

    Returns:
        KernelSignature: calling convention ``cutile_python_v1``.

    Raises:
        SpliceDeclarationError: a parameter outside the grammar, a text naming more or
            fewer than one parameter, an integer constant outside 64 bits, or a symbol that
            is not an identifier.

    Example:
        ```python
        import splice

        sig = splice.kernel_signature("array(float16, ndim=2)", "scalar(int32)", 1024,
                                      symbol="my_kernel")
        print(sig)
        assert sig.symbol == "my_kernel"
        ```
    """
    from cuda.tile.compilation import CallingConvention, KernelSignature
    check_symbol(symbol, f"kernel signature {params!r}")
    out = []
    for p in params:
        if isinstance(p, str):
            parsed = parse_parameters(p)
            if len(parsed) != 1:
                _fail(p, f"names {len(parsed)} parameters; pass one text per parameter")
            p = parsed[0]
        elif isinstance(p, int):
            p = _checked_constant(p, repr(p))
        out.append(p)
    try:
        return KernelSignature(out, CallingConvention.cutile_python_v1(), symbol)
    except (TypeError, ValueError) as e:
        raise SpliceDeclarationError(f"kernel signature {params!r}: {e}") from None
