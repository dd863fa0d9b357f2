"""Tiles into and out of cooperative calls: ``scope="block"`` and ``scope="warpgroup"``
externs whose parameters or result are ``splice.tile(dtype, shape=None)``.

A call ``y = f(t, k)`` of ``f(x: splice.tile(ct.float32), k: ct.int32) ->
splice.tile(ct.float32)`` is traced as three kinds of call sites, all of them externs of
one fragment splice generates for the call (:class:`TileFragment`)::

    idx = reshape(arange(N), t.shape)     # the row-major index, built by splice
    __splice_tile_<g>_store0(t, idx)      # element site, impure: buf0[idx] = t, exactly
                                          # once per element, on the thread that owns it
    __splice_tile_<g>_call(k)             # block (or warpgroup) site: every thread calls
                                          # f(*(float(*)[N])buf0, k, *(float(*)[N])out)
    y = __splice_tile_<g>_load(idx_r)     # element site, impure: y = out[idx_r]

``buf0`` and ``out`` are ``.shared`` buffers of that fragment (one per tile argument, one
for a tile result: separate in and out buffers, so that a call in a loop needs no extra
barrier), ``<g>`` numbers the tile calls of the trace. The element sites are impure, so
cuTile keeps them in program order with the block site (its memory token), and tileiras
puts a ``bar.sync 0`` between consecutive impure operations.

**Why the call sees every element and the kernel every result** (checked on the PTX by
:func:`check_staging`; anything else is a :class:`~splice.errors.SpliceRewriteError` naming
the step):

1. the block site is proven as any block site (:mod:`splice.block`): every thread of the
   block executes it once per execution, and its first barrier orders everything before it
   (the stores) before the call, its last barrier the call's stores before what follows;
2. *stores*: the instances of each store site lie in the straight-line stretch that ends at
   the block site's guard (no label, branch, call, exit before it up to the stretch's start:
   tileiras's barriers are allowed, and so are forward skips -- a predicated ``bra`` over
   straight-line code to a label nothing else names, which tileiras puts around the
   element operations of a tile smaller than the block: a thread runs them or not and
   goes on once either way; another block site's guard ends the stretch), so a thread that
   reaches the call executed all of its stores of this execution just before; their
   number per stretch is the tile's elements per thread (``ceil(elements / threads)``)
   and every instance of the site lies in such a stretch;
3. *loads*: the same for the load site, in the straight-line stretch after the block site's
   join.

**At warpgroup scope** (:mod:`splice.warpgroup`) the same staging and the same proof hold
with the warpgroup site in the block site's place: 1. is :func:`splice.warpgroup.prove_site`
(every thread of one warpgroup reaches it once; splice's counting entry barrier over the
group orders the stores before the call, its exit barrier the call before the loads), and
the elements per thread of 2. and 3. count the group's 128 threads, not the block's: the
``threads`` of :meth:`~splice.forms.base.CallForm.call_ends`, which each form answers.

**Shared memory**: the buffers of one call beyond :data:`MAX_SHARED_BYTES` are refused at
the call (:mod:`splice.tile_trace`); once the fragments are merged,
:func:`check_shared_memory` adds every static ``.shared`` declaration of the kernel (the
buffers, tileiras's own, the callee's ``__shared__``) and refuses a total beyond the
block's maximum before ptxas runs, naming each owner's bytes (next to the 128x128x64 TMA
matmul's 196,760 B that leaves about 35 KB: a (128,) float32 vector, 1 KB in and out,
fits; a 128x128 float32 accumulator, 64 KB each way, does not).

An element that is padding (a partial tile at an array's edge, loaded with ``ct.load``'s
padding) is staged like the others: the function sees the whole tile; pass the number of
valid elements as a scalar argument.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Mapping

from . import cache, tile_guards
from .errors import SpliceCompileError, SpliceLinkError
from .fragments import BinarySource, CudaSource, Fragment, _memoized, _parse
from .types import ElementType, Signature, TileType, pointer, result_tiles

#: The prefix of every symbol the staging defines (users cannot declare ``__splice`` names);
#: shared-memory reports know the buffers by it (:data:`splice.block.TILE_BUFFER_OWNER`).
PREFIX = "__splice_tile_"
#: The most static shared memory a block may have on any GPU splice targets (sm_90 and
#: sm_100: 227 KB); the buffers of one call beyond it are refused before tileiras runs.
MAX_SHARED_BYTES = 227 * 1024


#: The most shared memory one block may have, by PTX target without its ``a``/``f``
#: suffix (sm_90 and sm_100: 227 KB, the opt-in maximum, which static declarations may
#: use there: tileiras's TMA matmul declares 196,760 B). :func:`check_shared_memory`
#: checks against it; other targets are left to ptxas (its report names the owners too).
BLOCK_SHARED_LIMIT = {"sm_90": 232_448, "sm_100": 232_448}

#: The parts of a tile call (:attr:`Staging.role`).
ROLES = ("store", "call", "load")



@dataclasses.dataclass(frozen=True)
class Staging:
    """The part an extern plays in a tile call (``ExternFunction.staging``).

    Attributes:
        role: ``"store"`` (an element site storing a tile argument), ``"call"`` (the block
            site) or ``"load"`` (an element site loading the tile result).
        group: the tile call's number in its trace.
        elements: the elements of the tile the site stores or loads (0 for ``"call"``).
        what: the tile in messages ("tile argument 1 of 'sort' at k.py:12").
        threads: for ``"call"``, the block size the function needs, or None: any.
    """

    role: str
    group: int
    elements: int = 0
    what: str = ""
    threads: int | None = None


def byte_size(elem: ElementType) -> int:
    """Bytes per element in a staging buffer (bool: one byte, as C ``bool``)."""
    return max(elem.bits, 8) // 8


# --------------------------------------------------------------------------------------------
# The fragment of one tile call


@dataclasses.dataclass(eq=False)
class TileFragment(Fragment):
    """The device code of one tile call: the extern's own fragment (for CUDA C, with the
    trampoline of this call's shapes appended, :class:`splice.checks.TileDeclared`) and
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
                raise SpliceCompileError(f"{e.message}\n    instantiated for "
                                         f"{self.instance}", e.log) from None
            self._check_callee(base)
            return _parse(base.text.rstrip("\n") + "\n\n" + self.staging_ptx(base),
                          self.describe())
        return _memoized(key or self.content_key(target), make)

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
        from .link import check_prototype
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
                body.append(f"\tmov.u64 \t{reg}, {self.buffer(b)};")
                if self.guard_bytes:
                    body.append(f"\tadd.u64 \t{reg}, {reg}, {self.guard_bytes};")
                body.append(f"\tcvta.shared.u64 \t{reg}, {reg};")
                values.append((reg, 64))
            else:
                bits = _param_bits(t)
                reg = f"{_REG[bits]}{k}"
                body.append(f"\tld.param.b{bits} \t{reg}, [p{s}];")
                values.append((reg, bits))
                s += 1
        guard_in, guard_out = ((tile_guards.prologue(self, self.scope),
                                tile_guards.epilogue(self, self.scope))
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
        ``func_retval0`` (:mod:`splice.inline`), or None where it cannot be inlined."""
        from .inline import inline_body, why_not_inlinable
        if base is None:
            return None
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


def check_shared_memory(merged: str, owner_of_line, target: str, what: str) -> None:
    """Refuse, before ptxas runs, a kernel with tile calls whose static shared memory
    cannot fit in one block on ``target`` (:data:`BLOCK_SHARED_LIMIT`): ``merged`` is the
    merged PTX, ``owner_of_line`` the owner of each of its lines (a line number -> a name:
    :func:`splice.diagnose.owner_of_line` over the spans of :class:`splice.link.Merged`). The
    refusal counts what the kernel surely uses -- splice's staging buffers and tileiras's
    own declarations -- and names every owner's bytes, the callees' ``__shared__`` too
    (a total those push over the limit is ptxas's report, which names them alike).

    Raises:
        SpliceLinkError: naming ``what``, the bytes of each owner and the limit.
    """
    from . import block
    if block.TILE_BUFFER_MARK not in merged:
        return
    limit = BLOCK_SHARED_LIMIT.get(target.rstrip("af"))
    if limit is None:
        return
    owners = block.shared_owners(merged, owner_of_line)
    sure = owners.get(block.TILE_BUFFER_OWNER, 0) + owners.get(block.KERNEL_OWNER, 0)
    if sure > limit:
        raise SpliceLinkError(block.shared_memory_message(what, sum(owners.values()), limit,
                                                          owners) +
                              f" (tileiras's and the staging's alone: {sure} bytes)")


# --------------------------------------------------------------------------------------------
# Declaration


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
    """A tile parameter or result needs a call form that takes tiles (``form.takes_tiles``:
    ``scope="block"`` and ``scope="warpgroup"``) and device code splice can call with
    pointers into its shared memory (not a binary object: its link runs after ptxas, where
    the staging cannot be merged).

    Raises:
        SpliceDeclarationError: naming ``what``.
    """
    from .errors import SpliceDeclarationError
    if not sig.has_tiles:
        return
    if not form.takes_tiles:
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
    from .checks import TileDeclared
    frag = ext.fragment
    if not isinstance(frag, CudaSource):
        return frag, ext.symbol
    name = ext.cxx_name or ext.symbol
    symbol = "splice_tile_" + hashlib.sha256(
        f"{name}|{abi}|{shapes}".encode()).hexdigest()[:12]
    decl = TileDeclared(symbol, name, abi, shapes, ext.where, where)
    return dataclasses.replace(frag, declared=(decl,), roots=((symbol, abi),)), symbol


# --------------------------------------------------------------------------------------------
# The proof on the PTX (see the module docstring)

_STOP = ("bra", "brx", "ret", "exit", "call", "trap")


def check_staging(body, sites, at: Mapping[int, list[int]]) -> str | None:
    """Points 2 and 3 of the module docstring for every tile call of the function ``body``
    (a :class:`splice.ptx.Body`): ``at`` holds the statement indices of each atomic site's
    marker instances, ``sites`` the sites (``.staging``, ``.form``). The threads a call's
    elements are spread over come from its form (:meth:`~splice.forms.base.CallForm.call_ends`:
    the block's at block scope, the warpgroup's 128 at warpgroup scope). Returns why the
    staging is not proven, naming the step, or None."""
    from . import block
    groups: dict[int, dict[str, list[tuple[Any, list[int]]]]] = {}
    for idx, positions in at.items():
        st = sites[idx].staging
        if st is not None:
            assert st.role in ROLES, st
            groups.setdefault(st.group, {}).setdefault(st.role, []).append(
                (sites[idx], positions))
    parsed = body.parsed
    refs = _label_refs(parsed)
    ends = _call_ends(body, sites, at)
    skips = _Skips(parsed, refs, frozenset(e[0] for e in ends.values()))
    for group, roles in groups.items():
        missing = [sc for idx, sc in sites.items() if idx not in at and
                   sc.staging is not None and sc.staging.group == group]
        if missing:
            return (f"step 'every part in the function': {missing[0].staging.what} has no "
                    f"marker instance in it (tileiras removed or moved it)")
        [(call_site, call_at)] = roles["call"]     # present: every part is (above)
        counted: dict[int, int] = {}
        for i in call_at:
            if i not in ends:
                continue    # the call site's own proof reports it
            g, j, threads = ends[i]
            need = call_site.staging.threads
            if need is not None and need != threads:
                return (f"step 'block size': {call_site.staging.what} is compiled for blocks "
                        f"of {need} threads, and tileiras runs it on {threads} (.reqntid "
                        f"{block.block_dims(body.module, body.fn)})")
            lo, hi = skips.stretch_before(g), skips.stretch_after(j)
            for role, window in (("store", range(lo, g)), ("load", range(j + 1, hi))):
                for site, positions in roles.get(role, []):
                    n = sum(1 for p in positions if p in window)
                    why = _count(site, role, n, threads, call_site)
                    if why is not None:
                        return why
                    counted[site.index] = counted.get(site.index, 0) + n
        for role in ("store", "load"):
            for site, positions in roles.get(role, []):
                if counted.get(site.index, 0) != len(positions):
                    return (f"step '{role}s in one straight-line stretch with the call': "
                            f"{site.staging.what}: {len(positions) - counted.get(site.index, 0)}"
                            f" of its {len(positions)} {role} instance(s) lie outside the "
                            f"straight-line code around the call")
    return None


def _count(site, role: str, n: int, threads: int, call_site) -> str | None:
    """Why ``n`` instances of the store or load ``site`` in the stretch around one call
    instance are not the tile's elements per thread (``ceil(elements / threads)``)."""
    want = -(-site.staging.elements // threads)
    if n == want:
        return None
    return (f"step '{'stores before' if role == 'store' else 'loads after'} the call': "
            f"{site.staging.what} has {n} {role} instance(s) per thread in the straight-line "
            f"code {'before' if role == 'store' else 'after'} the {call_site.form.scope} call "
            f"(site {call_site.index}), not {want} ({site.staging.elements} elements on "
            f"{threads} threads)")


def _label_refs(parsed) -> dict[str, int]:
    """How often each label name appears in ``parsed`` (its definition included)."""
    refs: dict[str, int] = {}
    for s, _ins in parsed:
        for t in s.tokens:
            if t.text.startswith("$"):
                refs[t.text] = refs.get(t.text, 0) + 1
    return refs


def _call_ends(body, sites, at) -> dict[int, tuple[int, int, int]]:
    """Every proven instance of a call site whose form takes tiles: marker statement ->
    (guard, join, threads) (:meth:`~splice.forms.base.CallForm.call_ends`)."""
    out = {}
    for idx, positions in at.items():
        form = sites[idx].form
        if not form.takes_tiles:
            continue
        for i in positions:
            try:
                out[i] = form.call_ends(body, i)
            except ValueError:
                pass    # the call site's own proof reports it
    return out


@dataclasses.dataclass(frozen=True)
class _Skips:
    """Straight-line stretches of one function, with forward skips: ``parsed`` its
    statements, ``refs`` :func:`_label_refs`, ``guards`` the guards of its block sites
    (which end a stretch: another call)."""

    parsed: list
    refs: dict
    guards: frozenset

    def skip(self, k: int) -> tuple[int, int] | None:
        """``(k, j)`` when statement ``k`` is a forward skip: a predicated ``bra`` (not a
        block site's guard) to the label at ``j`` over straight-line code, the label named
        by nothing else. A thread runs the code between them or not, and reaches ``j``
        once either way (tileiras guards the element operations of a tile smaller than
        the block so: only the owner threads run them)."""
        parsed = self.parsed
        s, ins = parsed[k]
        if k in self.guards or ins is None or ins.base != "bra" or ins.guard is None or \
                len(ins.operands) != 1:
            return None
        target = ins.operands[0]
        j = k + 1
        while j < len(parsed) and _straight(parsed[j]):
            j += 1
        if j < len(parsed) and parsed[j][0].kind == "label" and \
                parsed[j][0].tokens[0].text == target and self.refs.get(target) == 2:
            return k, j
        return None

    def stretch_before(self, g: int) -> int:
        """The first statement of the straight-line code that ends at statement ``g``: no
        label, branch, call or exit in ``[result, g)`` (barriers and other instructions
        are), but for forward skips."""
        parsed, k = self.parsed, g
        while k > 0:
            if _straight(parsed[k - 1]):
                k -= 1
                continue
            if parsed[k - 1][0].kind == "label":
                b = k - 2
                while b >= 0 and _straight(parsed[b]):
                    b -= 1
                if b >= 0 and self.skip(b) == (b, k - 1):
                    k = b
                    continue
            break
        return k

    def stretch_after(self, j: int) -> int:
        """One past the last statement of the straight-line code that starts after ``j``,
        but for forward skips."""
        parsed, k = self.parsed, j + 1
        while k < len(parsed):
            if _straight(parsed[k]):
                k += 1
                continue
            hop = self.skip(k)
            if hop is None:
                break
            k = hop[1] + 1
        return k


def _straight(entry) -> bool:
    s, ins = entry
    if s.kind == "directive":
        return True
    return s.kind == "instruction" and ins is not None and ins.base not in _STOP
