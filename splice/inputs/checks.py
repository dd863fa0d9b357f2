"""C++ that splice appends to a CUDA C fragment: compile-time signature checks for the
externs declared from it, and ``extern "C"`` trampolines for C++ names.

Each declaration becomes a block of its own (:func:`generated_blocks`, headed by a comment
naming the extern and where it was declared, for people reading it), so that an NVRTC
error inside generated code can be attributed to it (:func:`owner_of_line`).

- An ``extern "C"`` symbol is checked parameter by parameter against the C types of its
  declared signature (``decltype(&::f)``), accepting the documented alternatives (``long``
  for int64, ``const T*``...). When ``::f`` is not visible at global scope (an ``extern
  "C"`` function inside a namespace, or no such function), the check instead redeclares it
  at global scope with the canonical C types: C linkage makes that the same function, so a
  different type is still an error; a function that does not exist is then reported when
  linking.
- A C++ name (``my_ns::scale<float>``) is called through a trampoline that ``static_cast``\\ s
  it to the exact function-pointer type: no overload or template instance with exactly
  those C types is a compile error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from ..types import Signature, c_type_alternatives

_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CXX_NAME = re.compile(r"^[A-Za-z_:][^;{}\"'\\\n]*$")
_HEAD = "// splice: extern "


@dataclasses.dataclass(frozen=True)
class Declared:
    """One extern declared from a CUDA C fragment.

    Attributes:
        symbol: the C symbol splice calls (for a C++ name, the trampoline's).
        cxx_name: the C++ name, or None for an ``extern "C"`` function.
        sig: the declared signature.
        where: "file:line" of the declaration.
    """

    symbol: str
    cxx_name: str | None
    sig: Signature
    where: str

    @property
    def label(self) -> str:
        return f"'{self.cxx_name or self.symbol}' (declared at {self.where})"


@dataclasses.dataclass(frozen=True)
class TileDeclared:
    """One call site's instantiation of a block-scope extern taking or returning tiles
    (:mod:`splice.forms.staging`): an ``extern "C"`` trampoline ``symbol`` taking the tiles as
    pointers (``sig``, the call's ABI: tiles as ``T*``, a tile result as a last ``T*``)
    and calling ``cxx_name`` with each pointer cast to a reference to an array of its
    tile's shape, so that a template is instantiated for the call's shapes.

    Attributes:
        symbol: the trampoline's C symbol.
        cxx_name: the C or C++ name of the function called.
        sig: the ABI signature (pointers for tiles).
        shapes: per parameter of ``sig``, the tile shape its pointer points to, or None.
        where: "file:line" of the declaration.
        site: "file:line" of the call.
    """

    symbol: str
    cxx_name: str
    sig: Signature
    shapes: tuple
    where: str
    site: str

    @property
    def tiles(self) -> str:
        """The tiles' C types: ``float[1024], float[1024]``."""
        return ", ".join(f"{t.pointee}{''.join(f'[{d}]' for d in shape)}"
                         for t, shape in zip(self.sig.args, self.shapes) if shape)

    @property
    def label(self) -> str:
        return (f"'{self.cxx_name}' (declared at {self.where}) called at {self.site} with "
                f"tiles {self.tiles}")

    @property
    def code_label(self) -> str:
        """:attr:`label` without the call site, for the generated code: the code of one
        instantiation is the same at every site, and so is its cache key
        (:mod:`splice.cub` compiles sizes no call has asked for yet)."""
        return f"'{self.cxx_name}' (declared at {self.where}) with tiles {self.tiles}"


def tile_trampoline(d: TileDeclared) -> str:
    """The trampoline of a :class:`TileDeclared`: each tile pointer cast to a reference to
    its array type (a template's extents deduced from it); the result type checked
    exactly (a scalar result converted silently would be a wrong value)."""
    ret = "void" if d.sig.result is None else d.sig.result.c_type
    params = ", ".join(f"{t.c_type} a{i}" for i, t in enumerate(d.sig.args))

    def arg(i, t, shape):
        if not shape:
            return f"a{i}"
        dims = "".join(f"[{n}]" for n in shape)
        return f"*reinterpret_cast<{t.pointee.c_type} (*){dims}>(a{i})"
    args = ", ".join(arg(i, t, s) for i, (t, s) in enumerate(zip(d.sig.args, d.shapes)))
    call = f"{d.cxx_name}({args})"
    ns = f"__splice_check_{d.symbol}"
    return (f"// tiles in shared memory, by reference: {d.code_label}\n"
            f"namespace {ns} {{ template <class A, class B> struct same "
            f"{{ enum {{ value = 0 }}; }};\n"
            f"template <class A> struct same<A, A> {{ enum {{ value = 1 }}; }}; }}\n"
            f"extern \"C\" __device__ {ret} {d.symbol}({params}) {{\n"
            f"    static_assert({ns}::same<decltype({call}), {ret}>::value, \"splice: "
            f"'{d.cxx_name}' must return {ret} to match its signature\");\n"
            f"    {'' if d.sig.result is None else 'return '}{call};\n}}\n")


def is_cxx_name(name) -> bool:
    """A C++ name (``my_ns::scale<float>``, ``m::operator+``) rather than a C identifier."""
    return isinstance(name, str) and not _C_IDENT.fullmatch(name) and \
        bool(_CXX_NAME.match(name)) and ("::" in name or "<" in name)


def cxx_symbol(cxx_name: str, sig: Signature) -> str:
    """The C symbol of the trampoline calling ``cxx_name`` with ``sig``."""
    return "splice_cxx_" + hashlib.sha256(f"{cxx_name}|{sig}".encode()).hexdigest()[:12]


def generated_blocks(declared, redeclare=frozenset()) -> list[tuple[str | None, str]]:
    """The C++ appended to a fragment for its declarations, in blocks of whole lines:
    (None, the ``#include`` lines), then (the extern's label, its code) per declaration.
    The C symbols in ``redeclare`` are checked by redeclaration (see the module
    docstring)."""
    out: list[tuple[str | None, str]] = [(None, include_headers(d.sig for d in declared))]
    for d in declared:
        if isinstance(d, TileDeclared):
            code = tile_trampoline(d)
        elif d.cxx_name is not None:
            code = _trampoline(d)
        elif d.symbol in redeclare:
            code = _redeclaration(d)
        else:
            code = _type_check(d)
        head = d.code_label if isinstance(d, TileDeclared) else d.label
        out.append((d.label, f"{_HEAD}{head}\n{code}"))
    return out


def generated_code(declared, redeclare=frozenset()) -> str:
    """:func:`generated_blocks`, joined."""
    return "".join(code for _, code in generated_blocks(declared, redeclare))


def owner_of_line(blocks: list[tuple[str | None, str]], line: int) -> str | None:
    """The label of the extern whose block of ``blocks`` (:func:`generated_blocks`) holds
    ``line`` (1-based) of their joined code; None for the ``#include`` lines."""
    first = 1
    for label, code in blocks:
        n = code.count("\n")
        if first <= line < first + n:
            return label
        first += n
    return None


def lookup_failures(log: str) -> set[str]:
    """Symbols NVRTC could not find at global scope in the generated checks."""
    return set(re.findall(r'the global scope has no "([A-Za-z_][A-Za-z0-9_]*)"', log))


def include_headers(sigs) -> str:
    """``#include`` lines for the headers that declare the C types of ``sigs``."""
    headers = {t.c_header for sig in sigs for t in (*sig.args, sig.result, *sig.results)
               if t is not None and t.c_header}
    return "".join(f"#include <{h}>\n" for h in sorted(headers))


def c_declaration(symbol: str, sig: Signature) -> str:
    """``extern "C" __device__ R symbol(A...);`` with the canonical C types of ``sig``."""
    ret, ptypes = _c_signature(sig)
    return f"extern \"C\" __device__ {ret} {symbol}({ptypes});\n"


def _c_signature(sig: Signature) -> tuple[str, str]:
    ret = "void" if sig.result is None else sig.result.c_type
    return ret, ", ".join(t.c_type for t in sig.args) or "void"


def _trampoline(d: Declared) -> str:
    if d.sig.results:
        return _results_trampoline(d)
    ret, ptypes = _c_signature(d.sig)
    params = ", ".join(f"{t.c_type} a{i}" for i, t in enumerate(d.sig.args))
    args = ", ".join(f"a{i}" for i in range(len(d.sig.args)))
    call = f"static_cast<{ret} (*)({ptypes})>(&{d.cxx_name})({args})"
    return (f"// C++ names need a function with exactly these C types: {ret}({ptypes})\n"
            f"extern \"C\" __device__ {ret} {d.symbol}({params}) "
            f"{{ {'' if d.sig.result is None else 'return '}{call}; }}\n")


def _redeclaration(d: Declared) -> str:
    return (f"// '{d.symbol}' is not visible at global scope: redeclared with the C types of "
            f"{d.sig}; a different definition is a conflicting declaration\n"
            + c_declaration(d.symbol, d.sig))


def _type_check(d: Declared) -> str:
    sig, symbol = d.sig, d.symbol

    def accepts(t, expr):
        if t is None:
            return f"same<{expr}, void>::value"
        return " || ".join(f"same<{expr}, {c}>::value" for c in c_type_alternatives(t))
    ns = f"__splice_check_{symbol}_{hashlib.sha256(str(sig).encode()).hexdigest()[:6]}"
    lines = [
        f"namespace {ns} {{",
        "template <class A, class B> struct same { enum { value = 0 }; };",
        "template <class A> struct same<A, A> { enum { value = 1 }; };",
        "template <int I, class... R> struct nth { typedef void type; };",
        "template <class T, class... R> struct nth<0, T, R...> { typedef T type; };",
        "template <int I, class T, class... R> struct nth<I, T, R...> "
        "{ typedef typename nth<I - 1, R...>::type type; };",
        "template <class F> struct sig { enum { n = -1 }; typedef void ret; };",
        "template <class R, class... A> struct sig<R (*)(A...)> "
        "{ enum { n = sizeof...(A) }; typedef R ret; "
        "template <int I> struct arg { typedef typename nth<I, A...>::type type; }; };",
        "template <class R, class... A> struct sig<R (*)(A...) noexcept> "
        ": sig<R (*)(A...)> {};",
        f"typedef sig<decltype(&::{symbol})> S;",
        f"static_assert(S::n == {len(sig.args)}, \"splice: '{symbol}' must be an extern "
        f"\\\"C\\\" function of {len(sig.args)} parameter(s) to match its signature "
        f"{sig}\");",
        f"static_assert({accepts(sig.result, 'S::ret')}, \"splice: '{symbol}' must return "
        f"{'void' if sig.result is None else sig.result.c_type} to match its signature "
        f"{sig}\");",
    ]
    for i, t in enumerate(sig.args):
        lines.append(
            f"static_assert({accepts(t, f'S::arg<{i}>::type')}, \"splice: parameter {i + 1} "
            f"of '{symbol}' must be {t.c_type} ({t.name} in the signature {sig})\");")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _results_trampoline(d: Declared) -> str:
    """The ``extern "C"`` function splice calls for an extern of several results: it calls
    the user's function (found with exactly the signature's parameter types), takes its
    struct or CUDA vector result apart with a structured binding, checks each member's
    type, and packs the members into one unsigned integer at the offsets
    :func:`splice.types.results_layout` gives (the struct's own layout), which the kernel
    unpacks. NVRTC folds the packing into one ``bfi``/``mov.b64`` (measured)."""
    sig = d.sig
    assert d.cxx_name is not None and sig.result is not None
    target = d.cxx_name if is_cxx_name(d.cxx_name) else f"::{d.cxx_name}"
    carrier = sig.result.c_type
    ptypes = ", ".join(t.c_type for t in sig.args) or "void"
    params = ", ".join(f"{t.c_type} a{i}" for i, t in enumerate(sig.args))
    args = ", ".join(f"a{i}" for i in range(len(sig.args)))
    members = ", ".join(f"m{i}" for i in range(len(sig.results)))
    ns = f"__splice_results_{d.symbol}"
    lines = [
        f"// several results: '{d.cxx_name}' must take exactly ({ptypes}) and return a "
        f"struct or CUDA vector type of {len(sig.results)} members "
        f"({', '.join(t.c_type for t in sig.results)}), in this order",
        f"namespace {ns} {{",
        "template <class A, class B> struct same { enum { value = 0 }; };",
        "template <class A> struct same<A, A> { enum { value = 1 }; };",
        f"template <class R> __device__ auto pick(R (*f)({ptypes})) -> R (*)({ptypes}) "
        f"{{ return f; }}",
        f"template <class T> __device__ {carrier} bits(T v) {{ {carrier} u = 0; "
        f"memcpy(&u, &v, sizeof(T)); return u; }}",
        "}",
        f'extern "C" __device__ {carrier} {d.symbol}({params}) {{',
        f"    auto [{members}] = {ns}::pick(&{target})({args});",
    ]
    for i, t in enumerate(sig.results):
        ok = " || ".join(f"{ns}::same<decltype(m{i}), {c}>::value"
                         for c in c_type_alternatives(t))
        lines.append(
            f'    static_assert({ok}, "splice: '
            f"member {i + 1} of the result of '{d.cxx_name}' must be {t.c_type} to match "
            f'its signature {sig}");')
    packed = " | ".join(f"({ns}::bits(m{i}) << {off})" if off else f"{ns}::bits(m{i})"
                        for i, off in enumerate(sig.offsets))
    lines += [f"    return {packed};", "}"]
    return "\n".join(lines) + "\n"


def results_hint(log: str, declared) -> str:
    """What an NVRTC error in a several-results trampoline (:func:`_results_trampoline`)
    means for the user's function: the parameter types, or the shape of the result."""
    for d in declared:
        ns = f"__splice_results_{d.symbol}"
        if not d.sig.results or ns not in log:
            continue
        ptypes = ", ".join(t.c_type for t in d.sig.args) or "void"
        members = ", ".join(t.c_type for t in d.sig.results)
        shape = (f"return a struct or CUDA vector type of exactly {len(d.sig.results)} "
                 f"public members ({members}), in this order")
        if "pick" in log and "no instance of function template" in log:
            why = f"must take exactly ({ptypes}) (no conversion) and {shape}"
        elif re.search(r"binding names|structured binding|cannot be decomposed", log):
            why = f"must {shape}"
        else:
            continue
        return (f"\n    '{d.cxx_name}' (extern declared at {d.where}, signature {d.sig}) "
                f"{why}")
    return ""
