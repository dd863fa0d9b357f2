"""Element types that cross the boundary between a cuTile kernel and an extern, and extern
signatures.

An extern's signature names one dtype per argument and a return dtype (or ``None``: void).
Each dtype maps to one cuTile dtype, one C type (the type the CUDA C function must be declared
with) and one size in the PTX ABI. Signatures come from annotations
(``def f(x: ct.float32) -> ct.float32``) or from a numba-style string
(``"float32(float32, int32)"``, ``"void(uint64)"``).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Sequence

import cuda.tile as ct

from .errors import SpliceDeclarationError


@dataclasses.dataclass(frozen=True)
class ElementType:
    """One element type allowed as an extern argument or result.

    Attributes:
        name: the dtype's name as in cuTile (``"float32"``).
        dtype: the cuTile dtype.
        bits: size of the value in the call's ABI, in bits (8 for bool, as C ``bool``).
        c_type: the C/C++ type the CUDA C function must use for it (see also
            :data:`C_TYPE_ALTERNATIVES`).
        c_header: header that declares ``c_type`` (``cuda_fp16.h`` for ``__half``) or None.
        kind: ``"b"`` bool, ``"s"`` signed int, ``"u"`` unsigned int, ``"f"`` float,
            ``"p"`` pointer to ``pointee``.
        pointee: for a pointer, the element type it points to.
    """

    name: str
    dtype: object
    bits: int
    c_type: str
    c_header: str | None
    kind: str
    pointee: ElementType | None = None

    def __str__(self) -> str:
        return self.name


ELEMENT_TYPES: dict[str, ElementType] = {
    t.name: t for t in (
        ElementType("bool", ct.bool_, 8, "bool", None, "b"),
        ElementType("int8", ct.int8, 8, "signed char", None, "s"),
        ElementType("int16", ct.int16, 16, "short", None, "s"),
        ElementType("int32", ct.int32, 32, "int", None, "s"),
        ElementType("int64", ct.int64, 64, "long long", None, "s"),
        ElementType("uint8", ct.uint8, 8, "unsigned char", None, "u"),
        ElementType("uint16", ct.uint16, 16, "unsigned short", None, "u"),
        ElementType("uint32", ct.uint32, 32, "unsigned int", None, "u"),
        ElementType("uint64", ct.uint64, 64, "unsigned long long", None, "u"),
        ElementType("float16", ct.float16, 16, "__half", "cuda_fp16.h", "f"),
        ElementType("bfloat16", ct.bfloat16, 16, "__nv_bfloat16", "cuda_bf16.h", "f"),
        ElementType("float32", ct.float32, 32, "float", None, "f"),
        ElementType("float64", ct.float64, 64, "double", None, "f"),
    )
}

#: Other C types with the same size and meaning, accepted by the compile-time check:
#: ``long`` is 64-bit on Linux (LP64), so ``int64_t`` is ``long`` there; ``char`` is signed
#: on the platforms NVRTC targets.
C_TYPE_ALTERNATIVES = {
    "int8": ("char",),
    "int64": ("long",),
    "uint64": ("unsigned long",),
}


def c_type_alternatives(t: ElementType) -> tuple[str, ...]:
    """Every C type the compile-time check accepts for ``t``."""
    if t.kind == "p":
        assert t.pointee is not None
        base = (t.pointee.c_type, *C_TYPE_ALTERNATIVES.get(t.pointee.name, ()))
        return tuple(f"{c}*" for c in base) + tuple(f"const {c}*" for c in base)
    return (t.c_type, *C_TYPE_ALTERNATIVES.get(t.name, ()))

# Spellings accepted in signature strings besides the canonical names.
_ALIASES = {
    "bool_": "bool", "b1": "bool",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "half": "float16", "bf16": "bfloat16",
    "f32": "float32", "float": "float32", "f64": "float64", "double": "float64",
}

_BY_DTYPE = {t.dtype: t for t in ELEMENT_TYPES.values()}

#: The arguments of one call travel in the two operands (compare, swap) of an atomic
#: compare-and-swap on the call site's marker, or the two non-key operands of its fma marker
#: (``docs/design.md#markers``): two 32-bit operands when
#: every argument and the result fit (so a float32 tile keeps its register layout: tileiras
#: lays 64-bit tiles out differently, which costs a shared-memory layout conversion), else
#: two 64-bit operands.
SLOTS = 2
PAYLOAD_BITS = 128


def pointer(elem) -> ElementType:
    """The pointer type ``T*`` to an element type (``splice.pointer(ct.float32)``, or
    ``float32*`` in a signature string): an array argument passed as its base address.

    ABI: the C function receives the array's base pointer (global memory, generic address)
    as ``T*`` (or ``const T*``), the same for every element of the call; index into it
    with indices you pass as further (int32/int64) arguments.

    Args:
        elem: the element's cuTile dtype (``ct.float32``) or its name (``"float32"``), for
            a stub's annotation or ``signature=``; not a kernel-side function.

    Returns:
        ElementType: the 64-bit pointer type ``float32*``.

    Raises:
        SpliceDeclarationError: an unsupported dtype, a pointer or a tile type.

    Example:
        ```python
        import cuda.tile as ct
        import splice

        print(splice.pointer(ct.float32))            # float32*

        @splice.extern(source=r'''
        extern "C" __device__ float at(const float *p, int i) { return p[i]; }''')
        def at(p: splice.pointer(ct.float32), i: ct.int32) -> ct.float32: ...

        @splice.kernel
        def k(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
            ct.store(y, index=(ct.bid(0),), tile=t + at(x, 0))

        sig = splice.kernel_signature("array(float32)", "array(float32)", 128)
        print(splice.compile(k, sig, "sm_90").summary())
        ```
    """
    elem = element_type(elem)
    if elem.kind == "p":
        raise SpliceDeclarationError("pointers to pointers are not supported")
    if elem.kind == "t":
        raise SpliceDeclarationError("pointers to tiles are not supported: pass the tile "
                                     "(splice.tile) itself")
    return ElementType(f"{elem.name}*", ct.uint64, 64, f"{elem.c_type}*", elem.c_header, "p",
                       elem)


@dataclasses.dataclass(frozen=True)
class TileType(ElementType):
    """A whole tile passed to or returned from a block-scope extern (``splice.tile``): an
    :class:`ElementType` of kind ``"t"`` whose ``pointee`` is the tile's element type and
    whose ABI (``bits``, ``c_type``) is the pointer it travels as.

    ABI: splice stages the tile in shared memory it owns, row-major, and the C++ function
    receives it as a reference to an array of the tile's shape (``const float (&x)[N]``,
    ``float (&y)[16][16]``); a PTX or LTO-IR function receives the generic address of the
    buffer's first element (``.param .b64``; it lies in the shared window:
    ``isspacep.shared`` holds and ``cvta.to.shared.u64`` gives its shared address). A tile
    result is the function's last parameter (the function returns void, or a scalar).

    Attributes:
        shape: the tile's shape, or None: the call site's (for a result: the shape of the
            call's first tile argument).
    """

    shape: tuple[int, ...] | None = None

    @property
    def elem(self) -> ElementType:
        """The tile's element type."""
        assert self.pointee is not None
        return self.pointee

    @classmethod
    def of(cls, elem: ElementType, shape: tuple[int, ...] | None) -> TileType:
        name = f"tile({elem.name})" if shape is None else f"tile({elem.name}, {shape})"
        return cls(name, elem.dtype, 64, f"{elem.c_type}*", elem.c_header, "t", elem, shape)


@dataclasses.dataclass(frozen=True)
class TileTuple(ElementType):
    """Several tile results of a block-scope extern (``-> (splice.tile(ct.float32),
    splice.tile(ct.int32))``, ``"(tile(float32), tile(int32))(...)"`` in a signature
    string): the function takes one last pointer per result, in order, and returns void;
    the call returns a tuple of tiles.

    Attributes:
        tiles: the results.
    """

    tiles: tuple[TileType, ...] = ()

    @classmethod
    def of(cls, tiles) -> TileTuple:
        tiles = tuple(tiles)
        name = f"({', '.join(t.name for t in tiles)})"
        return cls(name, None, 0, "void", None, "r", None, tiles)


def result_tiles(sig: Signature) -> tuple[TileType, ...]:
    """The tile results of ``sig``, in order (none for a scalar or void result)."""
    r = sig.result
    return r.tiles if isinstance(r, TileTuple) else (r,) if isinstance(r, TileType) else ()


def tile(dtype, shape=None) -> TileType:
    """A tile parameter or result of a block-scope extern: ``x: splice.tile(ct.float32)``
    (any shape), ``splice.tile(ct.float32, (16, 16))``, ``-> splice.tile(ct.int32, (8,))``.
    See :class:`TileType` for what the function receives, README "Block-scope calls".

    Args:
        dtype: a cuTile dtype (or its name) other than a pointer.
        shape (tuple[int, ...] | None): the exact shape (each dimension a power of two, as
            cuTile's tiles), or None: the call site's.

    Returns:
        TileType: the tile type, for a stub's annotation (or ``tile(float32)`` in a
        signature string).

    Raises:
        SpliceDeclarationError: a pointer dtype or a bad shape.

    Example:
        ```python
        import cuda.tile as ct
        import splice

        print(splice.tile(ct.float32), splice.tile(ct.int32, (16, 16)))

        @splice.extern(scope="block", source=r'''
        template <int N> __device__ void rev(const float (&x)[N], float (&y)[N]) {
            for (int i = threadIdx.x; i < N; i += blockDim.x) y[i] = x[N - 1 - i];
        }''')
        def rev(x: splice.tile(ct.float32)) -> splice.tile(ct.float32): ...

        @splice.kernel
        def k(x, y, TILE: ct.Constant[int]):
            t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
            ct.store(y, index=(ct.bid(0),), tile=rev(t))

        sig = splice.kernel_signature("array(float32)", "array(float32)", 128)
        print(splice.compile(k, sig, "sm_90").summary())
        ```
    """
    from .errors import user_location
    try:
        elem = element_type(dtype)
    except SpliceDeclarationError as e:
        raise SpliceDeclarationError(f"splice.tile at {user_location()}: {e.message}") from None
    if elem.kind in ("p", "t"):
        raise SpliceDeclarationError(f"splice.tile({elem}) at {user_location()}: the elements "
                                     f"of a tile are scalars (a dtype such as ct.float32)")
    if shape is not None:
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not shape or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 and d & (d - 1) == 0
                for d in shape):
            raise SpliceDeclarationError(
                f"splice.tile({elem}, {shape!r}) at {user_location()}: the shape must be a "
                f"non-empty tuple of powers of two, e.g. (128,) or (16, 16), or None for the "
                f"call's shape")
        shape = tuple(shape)
    return TileType.of(elem, shape)


def _is_tile(t) -> bool:
    return isinstance(t, (TileType, TileTuple))


def element_type(spec) -> ElementType:
    """The :class:`ElementType` for a cuTile dtype, an ElementType or a dtype name
    (``"float32*"`` for a pointer).

    Raises:
        SpliceDeclarationError: the type is not one splice can pass to or from an extern.
    """
    if isinstance(spec, ElementType):
        return spec
    if isinstance(spec, str) and spec.strip().endswith("*"):
        return pointer(spec.strip()[:-1])
    if isinstance(spec, str):
        name = _ALIASES.get(spec.strip(), spec.strip())
        if name in ELEMENT_TYPES:
            return ELEMENT_TYPES[name]
    else:
        try:
            if spec in _BY_DTYPE:
                return _BY_DTYPE[spec]
        except TypeError:
            pass
    allowed = ", ".join(ELEMENT_TYPES)
    raise SpliceDeclarationError(
        f"unsupported extern argument/result type {spec!r}; allowed: {allowed}")


@dataclasses.dataclass(frozen=True)
class ArgSlot:
    """Where one argument travels inside the call-site marker's 128-bit payload.

    ``slot`` is 0 or 1 (the compare or the swap operand), ``offset`` the bit offset in that
    64-bit operand, ``bits`` the argument's ABI size."""

    slot: int
    offset: int
    bits: int


@dataclasses.dataclass(frozen=True)
class Signature:
    """An extern's typed signature.

    Attributes:
        args: the argument element types.
        result: the result's element type (None: void). For several results, the
            unsigned integer *carrier* of them all (uint32, or uint64 past 32 bits:
            :func:`results_layout`).
        results: for several results, their element types in order (else empty).
    """

    args: tuple[ElementType, ...]      # TileType among them: a tile call (splice.forms.staging)
    result: ElementType | None
    results: tuple[ElementType, ...] = ()

    def __str__(self) -> str:
        ret = "void" if self.result is None else self.result.name
        if self.results:
            ret = f"({', '.join(t.name for t in self.results)})"
        return f"{ret}({', '.join(a.name for a in self.args)})"

    @property
    def has_tiles(self) -> bool:
        """Whether a tile is passed or returned (a block-scope call staged through shared
        memory: :mod:`splice.forms.staging`)."""
        return any(map(_is_tile, (*self.args, self.result)))

    @property
    def tile_result(self) -> bool:
        """Whether the result is one or several tiles (the function returns void)."""
        return isinstance(self.result, (TileType, TileTuple))

    @property
    def scalar_args(self) -> tuple[ElementType, ...]:
        """The arguments that travel in the call's marker: all but the tiles."""
        return tuple(a for a in self.args if not _is_tile(a))

    @property
    def offsets(self) -> tuple[int, ...]:
        """Each result's bit offset in the carrier (several results only)."""
        return results_layout(self.results)[1] if self.results else ()

    @property
    def marker_bits(self) -> int:
        """Width of the marker's operands and result: 32 when the arguments fit in two
        32-bit operands and the result in one, else 64."""
        if self.result is not None and not _is_tile(self.result) and self.result.bits > 32:
            return 64
        try:
            pack_arguments(self.scalar_args, 32)
        except SpliceDeclarationError:
            return 64
        return 32

    def packing(self) -> tuple[ArgSlot, ...]:
        """Assign each argument a naturally aligned bit range of the marker's two operands
        (each :attr:`marker_bits` wide), first fit in argument order.

        Raises:
            SpliceDeclarationError: the arguments need more than 128 bits together.
        """
        return pack_arguments(self.scalar_args, self.marker_bits)


#: How many bits of several results one call returns: one 64-bit carrier register (the
#: marker's widest operand, ``docs/design.md#markers``).
RESULT_BITS = 64


def results_layout(types: Sequence[ElementType]) -> tuple[ElementType, tuple[int, ...]]:
    """The carrier of several results and each one's bit offset in it: C struct layout
    (each at the next multiple of its own size, in order), so that the carrier's
    little-endian bytes are the struct's; uint32 when they end within 32 bits, else uint64
    (``docs/design.md#several-results``).

    Raises:
        SpliceDeclarationError: a pointer among them, or more than :data:`RESULT_BITS`
            bits (padding included).
    """
    offsets, pos = [], 0
    for t in types:
        if t.kind == "p":
            raise SpliceDeclarationError("a result cannot be a pointer")
        pos = -(-pos // t.bits) * t.bits
        offsets.append(pos)
        pos += t.bits
    if pos > RESULT_BITS:
        raise SpliceDeclarationError(
            f"the results ({', '.join(t.name for t in types)}) need {pos} bits (each aligned "
            f"to its size); at most {RESULT_BITS} bits of results are supported, since they "
            f"travel in one 64-bit register of the call-site marker. Return fewer or "
            f"narrower results, or write the rest through a pointer argument")
    return ELEMENT_TYPES["uint32" if pos <= 32 else "uint64"], tuple(offsets)


def results_struct(types: Sequence[ElementType]) -> tuple[int, int]:
    """(size, alignment) in bytes of the C struct whose members are ``types`` in order
    (each aligned to its size, the struct to its widest member)."""
    _, offsets = results_layout(types)
    align = max(t.bits for t in types) // 8
    end = (offsets[-1] + types[-1].bits) // 8
    return -(-end // align) * align, align


def several_results(types: Sequence, what: str) -> Signature:
    """A void-argument :class:`Signature` holding ``types`` (dtypes or names, at least two)
    as several results; ``what`` names them in errors.

    Raises:
        SpliceDeclarationError: fewer than two, or :func:`results_layout`'s errors.
    """
    elems = tuple(element_type(t) for t in types)
    if len(elems) < 2:
        raise SpliceDeclarationError(
            f"{what}: a tuple of results needs at least two dtypes; write one dtype "
            f"(float32, not (float32,)) for a single result")
    carrier, _ = results_layout(elems)
    return Signature((), carrier, elems)


def pack_arguments(args: Sequence[ElementType], slot_bits: int = 64) -> tuple[ArgSlot, ...]:
    """Place arguments widest first (power-of-two widths then pack without gaps: any set
    of at most ``2 * slot_bits`` bits fits), each at a naturally aligned offset; returned
    in argument order."""
    cursor = [0] * SLOTS
    placed: dict[int, ArgSlot] = {}
    order = sorted(range(len(args)), key=lambda i: -args[i].bits)
    for i in order:
        arg = args[i]
        for slot, used in enumerate(cursor):
            offset = -(-used // arg.bits) * arg.bits
            if offset + arg.bits <= slot_bits:
                cursor[slot] = offset + arg.bits
                placed[i] = ArgSlot(slot, offset, arg.bits)
                break
        else:
            total = sum(a.bits for a in args)
            raise SpliceDeclarationError(
                f"the arguments ({', '.join(a.name for a in args)}) need {total} bits; an "
                f"extern call carries at most {PAYLOAD_BITS} bits of arguments (e.g. two "
                f"float64, four float32, eight float16). Pass fewer or narrower arguments.")
    return tuple(placed[i] for i in range(len(args)))


_SIG_RE = re.compile(r"^\s*(\w+\s*\*?|\([^()]*\))\s*\((.*)\)\s*$")


def parse_signature(text: str) -> Signature:
    """Parse a numba-style signature string: ``"float32(float32, int32)"``, ``"void()"``.

    Args:
        text (str): ``result(arguments)``: element types, ``T*`` pointers, ``tile(T)`` and
            ``tile(T, (16, 16))`` tiles, a ``(T, U)`` tuple of results, ``void``.

    Returns:
        Signature: the argument types and the result type.

    Raises:
        SpliceDeclarationError: malformed string or unsupported dtype.

    Example:
        ```python
        import splice

        sig = splice.parse_signature("float32(float32*, int32)")
        print(sig, [str(a) for a in sig.args], sig.result)
        assert str(sig.result) == "float32" and len(sig.args) == 2
        ```
    """
    if not isinstance(text, str):
        raise SpliceDeclarationError(f"signature must be a string, got {type(text).__name__}")
    parts = _split_signature(text)
    if parts is None:
        raise SpliceDeclarationError(
            f"malformed signature {text!r}; expected e.g. 'float32(float32, int32)', "
            f"'(float32, float32)(float32)', 'void(uint64)' or "
            f"'void(tile(float32), tile(int32, (8,)))'")
    ret_name, args_text = parts
    result, results = _grammar_result(ret_name, text)
    if result is not None and result.kind == "p":
        raise SpliceDeclarationError(f"signature {text!r}: an extern cannot return a pointer")
    arg_names = _split_top_level(args_text) if args_text.strip() else []
    if any(not a for a in arg_names):
        raise SpliceDeclarationError(f"malformed signature {text!r}: empty argument type")
    sig = Signature(tuple(_grammar_type(a, text) for a in arg_names), result, results)
    sig.packing()
    return sig


_TILE_RE = re.compile(r"^tile\s*\((.*)\)$", re.S)


def _split_signature(text: str) -> tuple[str, str] | None:
    """(the result type's text, the arguments' text) of a signature string, or None. The
    result may be ``tile(...)``, whose parentheses are matched."""
    m = re.match(r"^\s*(?:tile\s*)?\(", text)
    if m is None:
        m2 = _SIG_RE.match(text)
        return None if m2 is None else (m2.group(1), m2.group(2))
    depth, i = 0, m.end() - 1
    for i in range(m.end() - 1, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            break
    rest = re.match(r"^\s*\((.*)\)\s*$", text[i + 1:], re.S)
    return None if depth or rest is None else (text[:i + 1].strip(), rest.group(1))


def _split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses, each part stripped."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _grammar_result(text: str, signature: str):
    """The result of a signature string: ``(result, results)`` of :class:`Signature`. A
    tuple of tiles is a :class:`TileTuple`; a tuple of element types is several results
    (:func:`several_results`); void is ``None``."""
    text = text.strip()
    if text in ("void", "None"):
        return None, ()
    if text.startswith("(") and text.endswith(")"):
        parts = [p for p in _split_top_level(text[1:-1])]
        parts = parts[:-1] if len(parts) > 1 and not parts[-1].strip() else parts
        if any(not p.strip() for p in parts):
            raise SpliceDeclarationError(f"malformed signature {signature!r}: empty result type")
        if not any(_TILE_RE.match(p.strip()) for p in parts):
            several = several_results([p.strip() for p in parts], f"signature {signature!r}")
            return several.result, several.results
    return _grammar_type(text, signature), ()


def _grammar_type(text: str, signature: str):
    """One type of a signature string: a dtype name, ``T*``, ``tile(T)`` or
    ``tile(T, (d0, d1...))``."""
    import ast
    text = text.strip()
    if text.startswith("("):
        if not text.endswith(")"):
            raise SpliceDeclarationError(f"malformed signature {signature!r}: {text!r}")
        parts = _split_top_level(text[1:-1])
        results = [_grammar_type(p, signature) for p in parts]
        if len(results) < 2 or not all(isinstance(r, TileType) for r in results):
            raise SpliceDeclarationError(
                f"malformed signature {signature!r}: a tuple of results {text!r} must hold "
                f"two or more tiles, e.g. (tile(float32), tile(int32))")
        return TileTuple.of(results)
    m = _TILE_RE.match(text)
    if m is None:
        return element_type(text)
    parts = _split_top_level(m.group(1))
    if len(parts) not in (1, 2) or not parts[0]:
        raise SpliceDeclarationError(
            f"malformed signature {signature!r}: {text!r}; write tile(float32) or "
            f"tile(float32, (16, 16))")
    shape = None
    if len(parts) == 2:
        try:
            shape = ast.literal_eval(parts[1])
        except (ValueError, SyntaxError):
            raise SpliceDeclarationError(
                f"malformed signature {signature!r}: the shape {parts[1]!r} of {text!r} is "
                f"not a tuple of integers such as (16, 16)") from None
    return tile(parts[0], shape)


def signature_from_annotations(func) -> Signature:
    """The signature of a typed Python stub: every parameter annotated with a cuTile dtype,
    the return annotated with a dtype or ``None``.

    Raises:
        SpliceDeclarationError: a missing or unsupported annotation, or *args/**kwargs.
    """
    try:
        sig = inspect.signature(func, eval_str=True)
    except (NameError, TypeError) as e:
        raise SpliceDeclarationError(
            f"cannot read the annotations of {func.__qualname__}: {e}") from e
    args = []
    for p in sig.parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise SpliceDeclarationError(
                f"{func.__qualname__}: parameter {p.name!r} must be a plain positional "
                f"parameter (no *args, **kwargs or keyword-only)")
        if p.annotation is inspect.Parameter.empty:
            raise SpliceDeclarationError(
                f"{func.__qualname__}: parameter {p.name!r} has no dtype annotation; write "
                f"e.g. '{p.name}: ct.float32' or pass signature='float32(float32)'")
        args.append(p.annotation if _is_tile(p.annotation) else element_type(p.annotation))
    ret = sig.return_annotation
    if ret is inspect.Signature.empty:
        raise SpliceDeclarationError(
            f"{func.__qualname__}: missing return annotation; write '-> ct.float32' or "
            f"'-> None' for a void extern")
    results: tuple[ElementType, ...] = ()
    result: ElementType | None
    if isinstance(ret, tuple) and len(ret) > 1 and all(isinstance(r, TileType) for r in ret):
        result = TileTuple.of(ret)      # -> (splice.tile(...), splice.tile(...)): tile results
    elif isinstance(ret, tuple):        # -> (ct.float32, ct.float32): several results
        several = several_results(ret, f"{func.__qualname__}: the return annotation")
        result, results = several.result, several.results
    else:
        result = None if ret is None or ret is type(None) else \
            ret if _is_tile(ret) else element_type(ret)
    if result is not None and result.kind == "p":
        raise SpliceDeclarationError(f"{func.__qualname__}: an extern cannot return a pointer")
    out = Signature(tuple(args), result, results)
    out.packing()
    return out


def _declaration_only(fn, name: str) -> None:
    """Make a call of ``fn`` (a type constructor for declarations) inside a kernel a
    :class:`SpliceCallError` at the call, not cuTile's "Raised exception must be wrapped in
    static_exception()" (cuTile would trace into its body)."""
    from .errors import SpliceCallError
    from .system import _cutile as cu

    def handler(callee, *args):
        loc = cu.current_loc()
        at = "<unknown location>" if loc is None or loc.is_unknown() else \
            f"{loc.filename}:{loc.line}"
        raise SpliceCallError(
            f"splice.{name}() called inside a kernel at {at}: it names a type for an "
            f"extern's declaration (a stub's annotation or signature=), outside the kernel. "
            f"splice.asm's dtype= takes cuTile dtypes (ct.int32, or a tuple of them); a "
            f"pointer in a snippet is a ct.uint64 (its address)", loc)
    cu.resolve_calls(fn, handler)


_declaration_only(pointer, "pointer")
_declaration_only(tile, "tile")
