"""Kernel functions cuTile refuses, one for each exception class cuTile raises for a kernel's
code, written as cuTile's own tests write them (plain functions: each test decorates one
with ``ct.kernel``, which the drop-in plugin makes ``splice.kernel``).

``REFUSED``: (function, cuTile's exception class, architecture, parameter text, the start of
cuTile's message)."""

import cuda.tile as ct


def _recurse(n):
    return _recurse(n)


def syntax(x):
    try:
        ct.store(x, (0,), ct.zeros((16,), ct.float32))
    except Exception:
        pass


def type_mismatch(x):
    t = ct.load(x, index=(0,), shape=(16,))
    ct.store(x, (0,), t + "a")


def recursion(x):
    _recurse(1)


def unpacking(x):
    a, b = (1, 2, 3)  # noqa: F841


def bf16_atomic_add_on_sm80(x):
    t = ct.load(x, index=(0,), shape=(16,))
    ct.atomic_add(x, (ct.arange(16, dtype=ct.int32),), t)


def static_iter_too_long(x):
    for i in ct.static_iter(range(100000)):
        pass


def static_eval_raises(x):
    n = ct.static_eval(1 // 0)  # noqa: F841


def static_exception(x):
    raise ct.static_exception(ValueError("bad size"))


def static_assert(x):
    ct.static_assert(False, "the tile is too large")


def host_call(x):
    sorted((1, 2))


#: the StaticException class (cuTile names it only in its private module)
def _static_exception_class():
    return next(c for c in ct.TileStaticEvalError.__subclasses__()
                if c.__name__ == "StaticException")


REFUSED = [
    (syntax, ct.TileSyntaxError, "sm_90", "array(float32)", "Unsupported syntax"),
    (type_mismatch, ct.TileTypeError, "sm_90", "array(float32)", "Unsupported operand types"),
    (recursion, ct.TileRecursionError, "sm_90", "array(float32)", "Maximum recursion depth"),
    (unpacking, ct.TileValueError, "sm_90", "array(float32)", "Too many values to unpack"),
    (bf16_atomic_add_on_sm80, ct.TileUnsupportedFeatureError, "sm_80", "array(bfloat16)",
     "bfloat16 is not supported by atomic add on sm_80"),
    (static_iter_too_long, ct.TileStaticEvalError, "sm_90", "array(float32)",
     "Maximum number of iterations"),
    (static_eval_raises, _static_exception_class(), "sm_90", "array(float32)",
     "Exception was raised inside static_eval() (ZeroDivisionError"),
    (static_exception, _static_exception_class(), "sm_90", "array(float32)",
     "Exception was raised at compile time (ValueError: bad size)"),
    (static_assert, ct.TileStaticAssertionError, "sm_90", "array(float32)",
     "Static assertion failed: the tile is too large"),
    (host_call, next(c for c in ct.TileError.__subclasses__()
                     if c.__name__ == "UnsupportedCallError"), "sm_90", "array(float32)",
     "sorted() is not supported in device code"),
]
