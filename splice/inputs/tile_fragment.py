"""The input kind of a tile call (:class:`TileFragment`): the device code splice generates
for one call of a ``splice.tile`` extern -- the extern's own fragment, the ``.shared``
staging buffers and the store, call and load functions -- and the declaration rules of tile
parameters. How the staged call is proven on the PTX: :mod:`splice.forms.staging`."""

from __future__ import annotations

import dataclasses
import hashlib

from ..errors import SpliceCompileError, SpliceLinkError
from ..system import cache
from ..types import ElementType, Signature, TileType, pointer, result_tiles
from . import tile_guards
from .fragments import BinarySource, CudaSource, Fragment, memoized_module, parse_module

#: The prefix of every symbol the staging defines (users cannot declare ``__splice`` names);
#: shared-memory reports know the buffers by it
#: (:data:`splice.ptxtools.shared_memory.TILE_BUFFER_OWNER`).
PREFIX = "__splice_tile_"


#: The most static shared memory a block may have on any GPU splice targets (sm_90 and
#: sm_100: 227 KB); the buffers of one call beyond it are refused before tileiras runs.
MAX_SHARED_BYTES = 227 * 1024


def byte_size(elem: ElementType) -> int:
    """Bytes per element in a staging buffer (bool: one byte, as C ``bool``)."""
    return max(elem.bits, 8) // 8


@dataclasses.dataclass(eq=False)
class TileFragment(Fragment):
    """The device code of one tile call: the extern's own fragment (for CUDA C, with the
    trampoline of this call's shapes appended, :class:`splice.inputs.checks.TileDeclared`) and
    splice's staging after it: the ``.shared`` buffers, one store function per tile
    argument, the call function (the block site's callee) and the load function.

    Attributes:
        base: the fragment defining ``callee``.
        callee: the symbol the call function calls, with the ABI ``abi``.
        abi: tiles as generic pointers into the buffers, a tile result as a last pointer.
        group: the tile call's number in its trace (names its symbols).
        buffers: (element type, elements) per tile parameter of ``abi``, in order.
        where: "file:line" of the call.
    """

    base: Fragment = None  # type: ignore[assignment]  # always given
    callee: str = ""
    abi: Signature = None  # type: ignore[assignment]
    group: int = 0
    buffers: tuple = ()
    tile_positions: tuple = ()   # the parameters of ``abi`` that are tiles
    results: int = 0            # the last ``results`` of ``buffers`` are the results
    where: str = ""
    guard_bytes: int = 0        # SPLICE_CHECK_TILES: guard bytes at each end of a buffer
    scope: str = "block"        # the call's scope ("block", "warpgroup")
    #: what the user called where the callee is splice's own ("splice.cub.sort at k.py:12"),
    #: which a compile error names first; "" for a user's extern (its declaration leads)
    call_name: str = ""
    kind = "tile"

    def describe(self) -> str:
        return f"{self.base.describe()}, staged for the tile call at {self.where}"

    def content_key(self, target: str) -> str:
        return cache.key_of("tile", self.base.content_key(target), self.staging_ptx())

    def module(self, target: str, key: str | None = None):
        def make(key):
            try:
                base = self.base.module(target)
            except SpliceCompileError as e:   # inside the function, for these shapes
                head = f"{self.call_name} does not compile: " if self.call_name else ""
                raise SpliceCompileError(f"{head}{e.message}\n    instantiated for "
                                         f"{self.instance}", e.log) from None
            self._check_callee(base)
            return parse_module(base.text.rstrip("\n") + "\n\n" + self.staging_ptx(base),
                          self.describe())
        return memoized_module(key or self.content_key(target), make)

    def function_name(self, symbol: str) -> str:
        """The staging's call function and the trampoline it calls are the user's function
        to a message (a chain of calls reads "sort_row -> helper", not
        "__splice_tile_0_call -> splice_tile_1a2b3c4d5e6f -> helper")."""
        if symbol in (self.symbol("call"), self.callee):
            declared = getattr(self.base, "declared", ())
            return declared[0].cxx_name if declared else self.callee
        return symbol

    @property
    def instance(self) -> str:
        """What the call instantiates, for messages: the function, its declaration, the
        call site and the tiles' C types (``float[1024]``)."""
        from .checks import TileDeclared
        declared = getattr(self.base, "declared", ())
        if declared and isinstance(declared[0], TileDeclared):
            return declared[0].label
        return f"the tile call at {self.where}"

    def _check_callee(self, base) -> None:
        from ..ptxtools.link import check_prototype
        fn = base.functions.get(self.callee)
        if fn is None or not fn.is_definition:
            raise SpliceLinkError(f"{self.base.describe()} does not define the device "
                                  f"function '{self.callee}' the tile call at {self.where} "
                                  f"calls")
        check_prototype(fn, self.abi, f"the tile call at {self.where}: {self.base.describe()}"
                                      f" (tiles are passed as generic pointers into shared "
                                      f"memory, a tile result as a last pointer)", base.text)

    # -- the staging PTX -------------------------------------------------------------------

    def symbol(self, role: str) -> str:
        return f"{PREFIX}{self.group}_{role}"

    def buffer(self, k: int) -> str:
        return f"{PREFIX}{self.group}_buf{k}"

    def buffer_bytes(self, k: int) -> int:
        """The bytes of buffer ``k``'s tile (without guards)."""
        elem, n = self.buffers[k]
        return n * byte_size(elem)

    def buffer_address(self, k: int) -> str:
        """The address of buffer ``k``'s first element (past its guard, in check mode)."""
        return self.buffer(k) + (f"+{self.guard_bytes}" if self.guard_bytes else "")

    def staging_ptx(self, base=None) -> str:
        """The staging functions and buffers; with ``base`` (the compiled base module), the
        callee's body pasted into the call function where it can be (no ``CALL`` in SASS):
        a function of ``base`` and of the text without it, which the content key holds."""
        lines = [f"// splice: tile staging of the call at {self.where}"]
        for k, (elem, n) in enumerate(self.buffers):
            lines.append(f".shared .align 16 .b8 {self.buffer(k)}"
                         f"[{n * byte_size(elem) + 2 * self.guard_bytes}];")
        if self.guard_bytes:
            lines += tile_guards.declarations(self, base.text if base is not None else "")
        first_result = len(self.buffers) - self.results
        for k, (elem, _n) in enumerate(self.buffers[:first_result]):
            lines.append(_store_function(self.symbol(f"store{k}"), elem,
                                         self.buffer_address(k)))
        lines.append(self._call_function(base))
        for j, (elem, _n) in enumerate(self.buffers[first_result:]):
            lines.append(_load_function(self.symbol(f"load{j}"), elem,
                                        self.buffer_address(first_result + j)))
        return "\n".join(lines) + "\n"

    def _call_function(self, base=None) -> str:
        """The block site's callee: the scalars from its parameters, each tile's generic
        address, the call of ``callee`` (its body, where ``base`` has one to inline); a
        scalar result passed back."""
        scalars = [t for k, t in enumerate(self.abi.args) if k not in self.tile_positions]
        res = self.abi.result
        head = f"({_param(res, 'func_retval0')}) " if res is not None else ""
        params = ", ".join(_param(t, f"p{i}") for i, t in enumerate(scalars))
        n = len(self.abi.args) + 1
        body = [f".visible .func {head}{self.symbol('call')}({params})", "{",
                f"\t.reg .b64 \t{_REG[64]}<{n}>;", f"\t.reg .b32 \t{_REG[32]}<{n}>;",
                f"\t.reg .b16 \t{_REG[16]}<{n}>;"]
        values, s = [], 0
        for k, t in enumerate(self.abi.args):
            if k in self.tile_positions:
                b = self.tile_positions.index(k)
                reg = f"{_REG[64]}{k}"
                # one definition of the address (past the guard): the static check
                # (memory_proof.check_tile_bounds) joins a register's definitions, and an
                # address seen at two offsets is at an unknown one it cannot check
                body.append(f"\tmov.u64 \t{reg}, {self.buffer_address(b)};")
                body.append(f"\tcvta.shared.u64 \t{reg}, {reg};")
                values.append((reg, 64))
            else:
                bits = _param_bits(t)
                reg = f"{_REG[bits]}{k}"
                body.append(f"\tld.param.b{bits} \t{reg}, [p{s}];")
                values.append((reg, bits))
                s += 1
        guard_in, guard_out = ((tile_guards.prologue(self),
                                tile_guards.epilogue(self))
                               if self.guard_bytes else ([], []))
        inlined = self._inlined_callee(base, values, res)
        if inlined is not None:
            return "\n".join(body + guard_in + inlined + guard_out + ["\tret;", "}"])
        body += guard_in
        body.append("\t{")
        for k, t in enumerate(self.abi.args):
            body.append(f"\t{_param(t, f'q{k}')};")
        if res is not None:
            body.append(f"\t{_param(res, 'q_ret')};")
        for k, (reg, bits) in enumerate(values):
            body.append(f"\tst.param.b{bits} \t[q{k}], {reg};")
        args = ", ".join(f"q{k}" for k in range(len(values)))
        if res is None:
            body.append(f"\tcall \t{self.callee}, ({args});")
        else:
            bits = _param_bits(res)
            reg = f"{_REG[bits]}{n - 1}"
            body.append(f"\tcall \t(q_ret), {self.callee}, ({args});")
            body.append(f"\tld.param.b{bits} \t{reg}, [q_ret];")
            body.append(f"\tst.param.b{bits} \t[func_retval0], {reg};")
        body += ["\t}", *guard_out, "\tret;", "}"]
        return "\n".join(body)


    def _inlined_callee(self, base, values, res) -> list[str] | None:
        """The callee's body with ``values`` as its arguments and its result stored to
        ``func_retval0`` (:mod:`splice.ptxtools.inline`), or None where it cannot be inlined."""
        if base is None:   # the content key's text (a hit loads no PTX tool)
            return None
        from ..ptxtools.inline import inline_body, why_not_inlinable
        functions = {f.name: (base, f) for f in base.function_order if f.is_definition}
        fn = base.functions[self.callee]
        if why_not_inlinable(base, fn, functions) is not None:
            return None
        # the pasted body declares its registers in a scope of its own: one named like an
        # argument's register would hide it (the argument moves would read the callee's)
        if any(t.text.startswith(_REG_PREFIX) for st in base.body_statements(fn)
               for t in st.tokens):
            return None
        result = None if res is None else (f"{_REG[_param_bits(res)]}{len(values)}",
                                           _param_bits(res))
        lines = inline_body(base, fn, list(values), result, f"tile{self.group}")
        if result is not None:
            lines.append(f"\tst.param.b{result[1]} \t[func_retval0], {result[0]};")
        return lines


#: The call function's registers, by width: a prefix no compiler emits (a callee that
#: names one is called, not inlined); not splice's reserved ``%__splice``, which would keep
#: the call function itself from being inlined at the block site.
_REG_PREFIX = "%splice_tile_"


_REG = {64: f"{_REG_PREFIX}d", 32: f"{_REG_PREFIX}w", 16: f"{_REG_PREFIX}h"}


def _param_bits(t) -> int:
    """The width of the ``.param`` access that passes ``t`` (16 for ``__half``)."""
    return 16 if t.kind == "f" and t.bits == 16 else 64 if t.bits == 64 else 32


def _param(t, name: str) -> str:
    """The ``.param`` declaration of ``name`` as NVCC's ABI passes ``t`` (integers narrower
    than 32 bits as ``.b32``, ``__half``/``__nv_bfloat16`` as ``.align 2 .b8[2]``)."""
    if t.kind == "f" and t.bits == 16:
        return f".param .align 2 .b8 {name}[2]"
    return f".param .b{max(t.bits, 32)} {name}"


def _param_register(t, n: int) -> tuple[str, int]:
    """A register of the staging functions holding ``t`` as its ``.param`` carries it, and
    the width of the ``.param`` access."""
    if t.kind == "f" and t.bits == 16:
        return f"%h{n}", 16
    if t.bits == 64:
        return f"%rd{n + 8}", 64
    return f"%r{n}", 32


def _address(buf: str, elem: ElementType) -> list[str]:
    """``%r2`` = the shared address of element ``%r1`` of ``buf`` (``sym+offset`` in check
    mode: the offset added, not written in the ``mov``)."""
    sym, _, offset = buf.partition("+")
    skip = [f"\tadd.u32 \t%r2, %r2, {offset};"] if offset else []
    return [f"\tmov.u32 \t%r2, {sym};", *skip,
            f"\tmad.lo.u32 \t%r2, %r1, {byte_size(elem)}, %r2;"]


def _store_function(symbol: str, elem: ElementType, buf: str) -> str:
    """``buf[i] = v``: the element site storing one tile argument."""
    reg, bits = _param_register(elem, 3)
    width = 8 * byte_size(elem)
    return "\n".join([
        f".visible .func {symbol}({_param(elem, 'p0')}, .param .b32 p1)",
        "{", "\t.reg .b32 \t%r<4>;", "\t.reg .b64 \t%rd<12>;", "\t.reg .b16 \t%h<4>;",
        "\tld.param.b32 \t%r1, [p1];", *_address(buf, elem),
        f"\tld.param.b{bits} \t{reg}, [p0];", f"\tst.shared.b{width} \t[%r2], {reg};",
        "\tret;", "}"])


def _load_function(symbol: str, elem: ElementType, buf: str) -> str:
    """``return buf[i]``: the element site loading the tile result (8/16-bit integers
    extended to the ``.b32`` the ABI returns them in, as C promotes them)."""
    reg, bits = _param_register(elem, 3)
    width = 8 * byte_size(elem)
    kind = "s" if elem.kind == "s" and width < 32 else "u" if width < 16 or \
        (width == 16 and elem.kind != "f") else "b"
    return "\n".join([
        f".visible .func ({_param(elem, 'func_retval0')}) {symbol}(.param .b32 p0)",
        "{", "\t.reg .b32 \t%r<4>;", "\t.reg .b64 \t%rd<12>;", "\t.reg .b16 \t%h<4>;",
        "\tld.param.b32 \t%r1, [p0];", *_address(buf, elem),
        f"\tld.shared.{kind}{width} \t{reg}, [%r2];",
        f"\tst.param.b{bits} \t[func_retval0], {reg};", "\tret;", "}"])


def abi_signature(sig: Signature) -> Signature:
    """What the function of a tile extern takes in the PTX ABI: each tile a pointer to its
    element type, a tile result a last pointer (the function then returns void)."""
    if not sig.has_tiles:
        return sig
    args = tuple(pointer(a.elem) if isinstance(a, TileType) else a for a in sig.args)
    if sig.tile_result:
        return Signature((*args, *(pointer(r.elem) for r in result_tiles(sig))), None)
    return Signature(args, sig.result)


def check_declaration(sig: Signature, form, fragment: Fragment, what: str) -> None:
    """A tile parameter or result needs a call form that takes tiles
    (``form.takes_tile_arguments()``: ``scope="block"`` and ``scope="warpgroup"``) and
    device code splice can call with pointers into its shared memory (not a binary object:
    its link runs after ptxas, where the staging cannot be merged).

    Raises:
        SpliceDeclarationError: naming ``what``.
    """
    from ..errors import SpliceDeclarationError
    if not sig.has_tiles:
        return
    if not form.takes_tile_arguments():
        raise SpliceDeclarationError(
            f"{what}: tile parameters and results (splice.tile) are for scope=\"block\" "
            f"externs, where every thread of the block calls the function on the whole "
            f"tile, and for scope=\"warpgroup\" externs (every thread of the warpgroup); "
            f"a {form.scope}-scope extern takes one element (write its dtype, e.g. "
            f"ct.float32)")
    if isinstance(fragment, BinarySource):
        raise SpliceDeclarationError(
            f"{what}: tile parameters need device code splice can merge its shared-memory "
            f"staging with (CUDA C, PTX or LTO-IR); a binary object is linked after ptxas. "
            f"Ship PTX (from_ptx) or LTO-IR (from_ltoir)")
    shapeless = [r for r in result_tiles(sig) if r.shape is None]
    if shapeless and not any(isinstance(a, TileType) for a in sig.args):
        dtype = shapeless[0].elem.name
        raise SpliceDeclarationError(
            f"{what}: the tile result has no shape and there is no tile argument to take it "
            f"from; give it one: splice.tile(ct.{dtype}, (8,)) (signature "
            f"'tile({dtype}, (8,))')")


def callee_fragment(ext, abi: Signature, shapes, where: str) -> tuple[Fragment, str]:
    """The fragment defining the function the staging calls and its symbol: for CUDA C, the
    extern's source with a trampoline instantiating it for ``shapes``; otherwise the
    extern's own code, which takes the tiles as pointers."""
    frag = ext.fragment
    if not isinstance(frag, CudaSource):
        return frag, ext.symbol
    name = ext.cxx_name or ext.symbol
    own = _instance(frag, name, abi, shapes, ext.where, where)
    if not ext.batch_sizes:
        return own, own.roots[0][0]
    # splice.cub: the other sizes in one NVRTC program, each cut out (CudaSource.batch)
    others = tuple(_instance(frag, name, abi, s, ext.where, where, batch=())
                   for s in _other_sizes(ext, shapes))
    return dataclasses.replace(own, batch=others), own.roots[0][0]


def _instance(frag: CudaSource, name: str, abi: Signature, shapes, declared_at: str,
              site: str, batch=None) -> CudaSource:
    """``frag`` with the trampoline instantiating ``name`` for ``shapes`` as its only
    declaration and root."""
    from .checks import TileDeclared
    symbol = "splice_tile_" + hashlib.sha256(
        f"{name}|{abi}|{shapes}".encode()).hexdigest()[:12]
    decl = TileDeclared(symbol, name, abi, shapes, declared_at, site)
    return dataclasses.replace(frag, declared=(decl,), roots=((symbol, abi),), batch=batch)


def _other_sizes(ext, shapes) -> list[tuple]:
    """The shapes of the same call on tiles of each other length of ``ext.batch_sizes``:
    every tile of the call's length ``n`` (the first tile argument's) takes the other
    length, except results whose shape the signature fixes (``top_k``'s ``(k,)``). None
    ([]) when a tile argument is not 1-D of length ``n``, or ``n`` is not one of the
    sizes."""
    sig: Signature = ext.signature
    fixed = [False] * len(sig.args) + [r.shape is not None for r in result_tiles(sig)]
    call_shaped = [i for i, s in enumerate(shapes) if s is not None and not fixed[i]]
    if not call_shaped:
        return []
    n = shapes[call_shaped[0]]
    if len(n) != 1 or n[0] not in ext.batch_sizes or \
            any(shapes[i] != n for i in call_shaped):
        return []
    return [tuple((m,) if i in call_shaped else s for i, s in enumerate(shapes))
            for m in ext.batch_sizes if m != n[0]]
