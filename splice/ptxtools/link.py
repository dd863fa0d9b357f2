"""Merging fragment PTX into a kernel's PTX module.

The kernel's final cubin must come from one whole-program ptxas run with tileiras's own
flags and ``--nv-host`` object (``docs/design.md#nv-host``), so fragments are merged as PTX
text: each fragment's functions and variables are inserted after the kernel module's
header, with

- its ``.version`` no newer than the kernel's and a ``.target`` the kernel's can run
  (:func:`check_compatible`);
- its internal (non-``.visible``) module symbols renamed with a per-fragment prefix, so two
  fragments' helpers (``__internal_trig_reduction_slowpathd``, ``$str``...) cannot clash;
- its visible symbols checked against the kernel's own and every other fragment's: the same
  definition twice is kept once, two different definitions are an error naming both;
- its ``.file`` indices renumbered past the kernel's;
- its ``.extern .const`` declarations of *host-filled* symbols (``prepare``'s
  ``host_filled``: e.g. NVSHMEM's device state, which the host library fills in each loaded
  module) that no fragment defines replaced by one ``.visible`` definition in the merged
  module, after checking that every fragment declares the same size and alignment.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Sequence

from ..errors import SpliceLinkError
from ..types import ElementType, Signature, results_struct
from .ptx import (
    Function,
    Module,
    Param,
    PTXSyntaxError,
    Statement,
    apply_edits,
    arch_words,
    declared_variable_name,
)
from .spans import Generated, Span, shift_spans

_TARGET_RE = re.compile(r"^sm_(\d+)([af]?)$")


def _arch(target: str) -> tuple[int, str]:
    m = _TARGET_RE.match(target)
    if not m:
        raise SpliceLinkError(f"unknown PTX target {target!r}")
    return int(m.group(1)), m.group(2)


def check_compatible(frag: Module, kernel: Module, what: str) -> None:
    """Raise SpliceLinkError unless ``frag`` can be merged into ``kernel``: PTX version not
    newer, 64-bit addressing, and a target the kernel's target can run (a plain ``sm_XY``
    at most the kernel's; an arch-specific ``sm_XYa`` only on exactly that arch; a family
    ``sm_XYf`` on the same major family, at least that minor). ``what`` names the fragment
    and, where the check is made for a call site, the extern with its declaration's
    file:line and the call site's; each message says how to fix the fragment."""
    if frag.address_size != 64:
        raise SpliceLinkError(f"{what}: PTX must declare '.address_size 64' (found "
                              f"{frag.address_size})")
    if frag.version is None:
        raise SpliceLinkError(f"{what}: PTX has no .version directive")
    if kernel.version is not None and frag.version > kernel.version:
        fv, kv = frag.version, kernel.version
        raise SpliceLinkError(
            f"{what}: PTX .version {fv[0]}.{fv[1]} is newer than the kernel's .version "
            f"{kv[0]}.{kv[1]} (tileiras); compile the fragment with a CUDA toolkit no newer "
            f"than tileiras's, or lower its .version to {kv[0]}.{kv[1]} if it uses nothing "
            f"newer")
    ftargets = [t for t in frag.target if t.startswith("sm_")]
    ktargets = [t for t in kernel.target if t.startswith("sm_")]
    if not ftargets or not ktargets:
        raise SpliceLinkError(f"{what}: PTX .target {' '.join(frag.target)!r} names no sm_ "
                              f"architecture")
    unsupported = [t for t in frag.target if not t.startswith("sm_") and t != "debug"]
    if unsupported:
        raise SpliceLinkError(f"{what}: unsupported .target option(s) {unsupported}; "
                              f"remove them (only 'debug' may follow the sm_ target)")
    fnum, fsuf = _arch(ftargets[0])
    knum, ksuf = _arch(ktargets[0])
    ok = fnum == knum and fsuf == ksuf if fsuf == "a" else (
        fnum // 10 == knum // 10 and fnum <= knum if fsuf == "f" else fnum <= knum)
    if not ok:
        fix = (f"an arch-specific target runs only on exactly that architecture: compile it "
               f"for plain sm_{knum}" if fsuf == "a" else
               f"compile it for {ktargets[0].rstrip('af')} or an older plain sm_ target "
               f"(nvcc -arch=sm_{min(fnum, knum)}, or edit its .target)")
        raise SpliceLinkError(
            f"{what}: PTX .target {ftargets[0]} cannot run on the kernel's "
            f"{arch_words(ktargets[0])}; "
            f"{fix}")


def check_prototype(fn: Function, sig: Signature, what: str, source_text: str) -> None:
    """Raise SpliceLinkError unless the ``.func`` prototype passes the declared signature's
    arguments and result (PTX ABI: ints narrower than 32 bits travel in ``.b32``,
    ``__half``/``__nv_bfloat16`` in ``.b8[2]``)."""
    proto = fn.prototype(source_text)

    def bad(msg):
        return SpliceLinkError(f"{what}: the .func prototype does not match the declared "
                               f"signature {sig}: {msg}\n    prototype: {proto}")
    if fn.kind != ".func":
        raise SpliceLinkError(f"{what}: '{fn.name}' is a kernel (.entry), not a device "
                              f"function (.func)")
    if len(fn.params) != len(sig.args):
        raise bad(f"{len(fn.params)} parameter(s), signature has {len(sig.args)}")
    for i, (p, t) in enumerate(zip(fn.params, sig.args)):
        if not _param_fits(p, t):
            raise bad(f"parameter {i + 1} is '{p.declare(p.name)}' ({p.size_bytes} bytes), "
                      f"which cannot carry {t}")
    if sig.result is None:
        if fn.results:
            raise bad("it returns a value but the signature is void")
    else:
        if len(fn.results) != 1:
            raise bad("it returns nothing" if not fn.results else "it returns several values")
        if sig.results:
            why = _results_mismatch(fn.results[0], sig)
            if why:
                raise bad(why)
        elif not _param_fits(fn.results[0], sig.result):
            r = fn.results[0]
            raise bad(f"the result is '{r.declare(r.name)}', which cannot carry "
                      f"{sig.result}")


def _results_mismatch(p: Param, sig: Signature) -> str | None:
    """Why the return ``.param`` ``p`` cannot carry the several results of ``sig`` (None:
    it can): the C struct of them (``.param .align A .b8 r[N]``: N its size, A at least
    its alignment), or one ``.b32``/``.b64`` of the packed carrier."""
    assert sig.result is not None
    size, align = results_struct(sig.results)
    shown = f"'{p.declare(p.name)}'"
    struct = f"'.param .align {align} .b8 {p.name}[{size}]'"
    if p.space != ".param":
        return f"the result is {shown}, not a .param"
    if p.array is None:
        if p.size_bytes * 8 == sig.result.bits and p.type in (".b32", ".b64", ".u32", ".u64"):
            return None
        return (f"the result is {shown}; several results ({', '.join(map(str, sig.results))}) "
                f"are returned as their struct, {struct}, or packed in one "
                f".b{sig.result.bits}")
    m = re.search(r"\.align\s+(\d+)", p.decl)
    have = int(m.group(1)) if m else 1
    if p.size_bytes != size or have < align:
        return (f"the result is {shown} ({p.size_bytes} bytes, aligned to {have}), but the "
                f"struct of ({', '.join(map(str, sig.results))}) is {size} bytes aligned to "
                f"{align}: {struct}")
    return None


def _param_fits(p: Param, t: ElementType) -> bool:
    if p.space != ".param" or p.array == 0:
        return False
    bits = p.size_bytes * 8
    if t.kind == "f":
        return bits == t.bits
    return bits == t.bits or (t.bits < 32 and bits == 32)


@dataclasses.dataclass
class _Prepared:
    what: str
    module: Module
    text: str
    visible: dict[str, str]   # visible symbol -> its normalised definition


def _visible_defs(mod: Module, exported=frozenset()) -> dict[str, str]:
    out = {}
    for fn in mod.function_order:
        if fn.is_definition and (".visible" in fn.linkage or ".weak" in fn.linkage or
                                 fn.name in exported):
            assert fn.body is not None
            a, b = fn.body
            start = fn.header.start
            end = mod.statements[b].end
            out[fn.name] = " ".join(mod.text[start:end].split())
    for s in mod.statements:
        if s.depth == 0 and s.kind == "directive" and s.head in (".visible", ".weak",
                                                                 ".common"):
            name = declared_variable_name(s)
            if name:
                out[name] = " ".join(s.text(mod.text).split())
    return out


def _prepare(mod: Module, what: str, file_offset: int,
             defined: frozenset[str] = frozenset(),
             exported: frozenset[str] = frozenset()) -> _Prepared:
    """Fragment text after its header directives, internal symbols renamed (except the
    ``exported`` ones: the externs' own symbols), declarations (``.extern`` or not) of
    functions that ``defined`` holds removed (whole-program ptxas rejects an ``.extern``
    declaration of a function defined in the same module), ``.file`` indices shifted by
    ``file_offset``."""
    text = mod.text
    tag = hashlib.sha256(text.encode()).hexdigest()[:8]
    internal = _internal_symbols(mod, exported)
    edits = []
    for s in mod.statements:
        replacement = _replaced_whole(mod, s, defined)
        if replacement is not None:
            edits.append((s.start, s.end, replacement))
            continue
        if s.kind == "directive" and s.head in (".file", ".loc", ".loc_intermediate") and \
                file_offset and len(s.tokens) > 1 and s.tokens[1].kind == "number":
            t = s.tokens[1]
            edits.append((t.start, t.end, str(int(t.text) + file_offset)))
        for t in s.tokens:
            if t.kind == "ident" and t.text in internal:
                edits.append((t.start, t.end, f"__splice_{tag}_{t.text}"))
    new = apply_edits(text, edits)
    return _Prepared(what, mod, new.strip() + "\n", _visible_defs(mod, exported))


def _internal_symbols(mod: Module, exported: frozenset[str]) -> set[str]:
    """The functions without linkage (but ``exported``) and the module-level variables of
    ``mod``: the names :func:`_prepare` renames."""
    internal = set()
    for fn in mod.function_order:
        if not fn.linkage and fn.name not in exported:
            internal.add(fn.name)
    for s in mod.statements:
        if s.depth == 0 and s.kind == "directive" and s.head in (".global", ".const",
                                                                 ".shared", ".local"):
            name = declared_variable_name(s)
            if name:
                internal.add(name)
    return internal


def _replaced_whole(mod: Module, s: Statement, defined: frozenset[str]) -> str | None:
    """What :func:`_prepare` puts in place of the whole statement ``s``: nothing for the
    header directives and opaque blocks, a comment for a declaration of a function or
    variable that ``defined`` holds; None when ``s`` stays."""
    if s.depth == 0 and s.kind == "directive" and s.head in (".version", ".target",
                                                             ".address_size"):
        return ""
    if s.kind == "opaque":
        return ""
    if s.kind == "decl" and s.depth == 0:
        decl = next((f for f in mod.function_order if f.header is s), None)
        if decl is not None and decl.name in defined:
            return f"// splice: declaration of {decl.name} hoisted"
    if s.depth == 0 and s.kind == "directive" and s.head == ".extern" and \
            declared_variable_name(s) in defined:
        return f"// splice: {declared_variable_name(s)} is defined once for the merged module"
    return None


def _max_file_index(mod: Module) -> int:
    out = 0
    for s in mod.statements:
        if s.kind == "directive" and s.head == ".file" and len(s.tokens) > 1:
            try:
                out = max(out, int(s.tokens[1].text))
            except ValueError:
                pass
    return out


@dataclasses.dataclass
class Linked:
    """Fragments prepared for one kernel: the text to insert; per visible function, the
    prepared module defining it (internal symbols already renamed, so its body can be
    inlined as it stands); and the spans of ``text`` (:class:`splice.ptxtools.spans.Span`: each
    fragment, kind ``"fragment"``; the prototypes and host-filled definitions,
    ``"splice"``)."""

    text: str
    functions: dict[str, tuple[Module, Function]]
    host_filled: frozenset[str] = frozenset()   # host-filled symbols the text defines
    spans: tuple[Span, ...] = ()


@dataclasses.dataclass(frozen=True)
class Merged:
    """The merged module's PTX, and the spans of what splice wrote into it: the linker's
    (:attr:`Linked.spans`) and the rewriter's (:attr:`splice.forms.rewrite.SpliceReport.spans`),
    at their lines in ``text``, in text order."""

    text: str
    spans: tuple[Span, ...] = ()


def _extern_variables(mod: Module, names: frozenset[str]) -> dict[str, str]:
    """``.extern`` variable declarations of ``names`` -> the declaration without
    ``.extern``, whitespace normalised (``.const .align 8 .b8 x[848];``)."""
    out = {}
    for s in mod.statements:
        if s.depth == 0 and s.kind == "directive" and s.head == ".extern":
            name = declared_variable_name(s)
            if name in names:
                out[name] = " ".join(s.text(mod.text).split()[1:])
    return out


def _host_filled_definitions(kernel_syms, fragments, names: frozenset[str],
                             kernel_name: str) -> dict[str, str]:
    """Symbol -> the definition the merged module gets, for each host-filled symbol that
    fragments declare ``.extern .const`` and none defines.

    Raises:
        SpliceLinkError: two fragments declare it differently, or the kernel defines it.
    """
    decls: dict[str, tuple[str, str]] = {}
    defined_by_fragment = set()
    for what, mod in fragments:
        defined_by_fragment |= set(_visible_defs(mod)) & names
        for sym, decl in _extern_variables(mod, names).items():
            if not decl.startswith(".const"):
                continue
            if sym in decls and decls[sym][1] != decl:
                raise SpliceLinkError(
                    f"{decls[sym][0]} declares '.extern {decls[sym][1]}' but {what} declares "
                    f"'.extern {decl}': the fragments were compiled against different "
                    f"versions of the library that fills '{sym}'; compile them against one")
            decls.setdefault(sym, (what, decl))
    out = {}
    for sym, (what, decl) in decls.items():
        if sym in defined_by_fragment:
            continue
        if sym in kernel_syms:
            raise SpliceLinkError(f"{what} declares '{sym}', which the kernel "
                                  f"'{kernel_name}' itself defines; rename it")
        out[sym] = f".visible {decl}"
    return out


def prepare(kernel: Module, fragments: Sequence[tuple[str, Module]],
            kernel_name: str, exported: frozenset[str] = frozenset(),
            host_filled: frozenset[str] = frozenset()) -> Linked:
    """Check and prepare fragments for merging into ``kernel``. ``exported`` names the
    externs' symbols: never renamed, even when a PTX fragment defines them without
    ``.visible``. ``host_filled`` names ``.const`` variables that a host library fills in
    the loaded module: declared ``.extern`` by fragments, defined once by the merged module.

    Raises:
        SpliceLinkError: incompatible fragment, a symbol clash, or two different
            declarations of a host-filled symbol.
    """
    kernel_syms = kernel.module_symbols()
    file_offset = _max_file_index(kernel)
    owners: dict[str, _Prepared] = {}
    for what, mod in fragments:
        check_compatible(mod, kernel, what)
    filled = _host_filled_definitions(kernel_syms, fragments, host_filled, kernel_name)
    defined = frozenset(f.name for _, mod in fragments for f in mod.function_order
                        if f.is_definition and (f.linkage or f.name in exported)) | set(filled)
    prototypes: dict[str, str] = {}
    functions: dict[str, tuple[Module, Function]] = {}
    chunks: list[Generated] = []
    for what, mod in fragments:
        prep = _prepare(mod, what, file_offset, defined, exported)
        drop = _claim_visible(prep, owners, kernel_syms, kernel_name)
        if drop:
            prep = _prepare(_without(mod, drop), what, file_offset, defined, exported)
        file_offset += _max_file_index(mod)
        for fn in mod.function_order:
            if fn.is_definition and (fn.linkage or fn.name in exported) and \
                    fn.name not in drop:
                prototypes.setdefault(fn.name, fn.header.text(mod.text).strip() + ";")
        header = "".join(f"{s.text(mod.text)}\n" for s in mod.statements
                         if s.depth == 0 and s.kind == "directive" and
                         s.head in (".version", ".target", ".address_size"))
        pmod = Module(header + prep.text, f"prepared {what}")
        for fn in pmod.function_order:
            if fn.is_definition and (fn.linkage or fn.name in exported) and \
                    fn.name not in drop:
                functions.setdefault(fn.name, (pmod, fn))
        chunks.append(Generated(f"// splice: begin {what}\n{prep.text}// splice: end {what}",
                                what, "fragment"))
    if prototypes:
        chunks.insert(0, Generated("// splice: prototypes of the fragments' functions\n" +
                                   "\n".join(prototypes.values()),
                                   "splice's prototypes of the fragments' functions", "splice"))
    if filled:
        chunks.insert(0, Generated("// splice: defined here, filled by the host library on "
                                   "load\n" + "\n".join(filled.values()),
                                   "splice's definitions of host-filled variables", "splice"))
    spans, line = [], 1
    for c in chunks:
        spans.append(c.span(line))
        line += c.count("\n") + 1
    return Linked("".join(c + "\n" for c in chunks), functions, frozenset(filled),
                  tuple(spans))


def _claim_visible(prep: _Prepared, owners: dict[str, _Prepared], kernel_syms,
                   kernel_name: str) -> list[str]:
    """Record ``prep`` in ``owners`` as the owner of each visible symbol it defines first.
    Returns the symbols another fragment already defines the same way (or both weakly,
    as template instances): the first definition is kept, as a linker would.

    Raises:
        SpliceLinkError: the kernel defines the symbol too, or another fragment defines it
            differently.
    """
    drop = []
    for sym, definition in prep.visible.items():
        if sym in kernel_syms:
            raise SpliceLinkError(f"{prep.what} defines '{sym}', which the kernel "
                                  f"'{kernel_name}' itself defines; rename it")
        if sym in owners:
            if owners[sym].visible[sym] == definition or (
                    _is_weak(owners[sym].module, sym) and _is_weak(prep.module, sym)):
                drop.append(sym)
                continue
            raise SpliceLinkError(
                f"symbol clash: '{sym}' is defined differently by {owners[sym].what} and "
                f"by {prep.what}; give one of them another name")
        owners[sym] = prep
    return drop


def _is_weak(mod: Module, sym: str) -> bool:
    fn = mod.functions.get(sym)
    if fn is not None:
        return ".weak" in fn.linkage
    return any(s.depth == 0 and s.kind == "directive" and s.head == ".weak" and
               declared_variable_name(s) == sym for s in mod.statements)


def insert(kernel: Module, linked: Linked, kernel_name: str,
           spans: Sequence[Span] = ()) -> Merged:
    """The kernel's PTX with the prepared fragments inserted after its header directives
    (so definitions precede the kernel's calls), and the spans of what splice wrote in it:
    ``linked``'s and the kernel's own ``spans`` (the rewriter's, which lie after the
    header), moved to their lines in the merged text. The result must parse: the kernel
    module is parsed already and ends its header at a statement boundary, so the inserted
    text is parsed after that header (not the whole, often large, merged module again) and
    must define no function the kernel defines."""
    insert_at = 0
    for s in kernel.statements:
        if s.depth == 0 and s.kind == "directive" and s.head in (".version", ".target",
                                                                 ".address_size"):
            insert_at = s.end
        elif s.kind != "directive" or s.head not in (".version", ".target", ".address_size"):
            break
    head = kernel.text[:insert_at] + "\n\n" + linked.text
    inserted = Module(head, f"merged PTX of {kernel_name}")  # must still parse
    for name, fn in inserted.functions.items():
        own = kernel.functions.get(name)
        if fn.is_definition and own is not None and own.is_definition:
            raise PTXSyntaxError(f"merged PTX of {kernel_name}: function {name!r} defined "
                                 f"twice")
    before = kernel.text.count("\n", 0, insert_at) + 2   # lines above linked.text
    added = head.count("\n") - kernel.text.count("\n", 0, insert_at)
    return Merged(head + kernel.text[insert_at:],
                  tuple(shift_spans(linked.spans, before)) +
                  tuple(shift_spans(spans, added)))


def merge(kernel: Module, fragments: Sequence[tuple[str, Module]],
          kernel_name: str) -> Merged:
    """:func:`prepare` then :func:`insert`."""
    return insert(kernel, prepare(kernel, fragments, kernel_name), kernel_name)


def _without(mod: Module, symbols: Sequence[str]) -> Module:
    """The module minus the definitions of ``symbols`` (duplicates kept elsewhere)."""
    edits = []
    for fn in mod.function_order:
        if fn.name in symbols and fn.body is not None:
            edits.append((fn.header.start, mod.statements[fn.body[1]].end, ""))
    for s in mod.statements:
        if s.depth == 0 and s.kind == "directive":
            if s.head in (".visible", ".weak", ".common") and \
                    declared_variable_name(s) in symbols:
                edits.append((s.start, s.end, ""))
    return Module(apply_edits(mod.text, edits), mod.name)
