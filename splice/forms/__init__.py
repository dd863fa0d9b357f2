"""Call forms: one module for each way a call site runs.

A form (:class:`~splice.forms.base.CallForm`) answers every question the pipeline asks of a
call site, so that no stage tests a scope or a marker itself:

=====================  ==========================================================
declaration            :meth:`declare` (result rules; whether the call stays pure)
arguments              :meth:`check_arguments` (while tracing); a ``splice.asm``
                       snippet's rules: :meth:`check_snippet`
Tile IR marker         :meth:`for_call` / :attr:`marker` (which variant a call gets)
PTX analysis           :meth:`global_edit`, :meth:`instance_edits` (per marker
                       instance) or :meth:`key_load` + :meth:`function_edits` (per
                       function, ``per_function``): edits, or a ``Refusal`` value
callee checks          :attr:`runs_collectives`, :meth:`check_callees` (every check
                       of a site's callees, on PTX), :meth:`check_linked_callees`
                       (what only the cubin shows: a binary object's machine code)
span kind, messages    :attr:`span_kind`, :meth:`describe`
summary text           :meth:`summary` (``SiteInfo.__str__``)
=====================  ==========================================================

The forms: :mod:`.element` (``scope="element"``: :data:`element.ATOMIC` and
:data:`element.FMA`, whose proof is :mod:`.fma_proof`, whose callee policy is
:mod:`.element_callees`), :mod:`.block` (``scope="block"``: its proof and call sequence in
:mod:`.block_proof`, which also holds the steps the warpgroup form shares) and
:mod:`.warpgroup` (``scope="warpgroup"``: :mod:`.warpgroup_proof`, its callees' warp and wgmma
rules :mod:`.warpgroup_callee`). Around them:
:mod:`.base` (the protocol, the site records), :mod:`.marked` (a function body with its
markers), :mod:`.calls` (the PTX call sequence of one site), :mod:`.staging` (the proof of a
tile call's staging, for the forms that take tiles).
:data:`FORMS` maps a declaration's ``scope=`` to the form a declaration of that scope gets
(:func:`form_of` validates it, once, when the extern is declared); each traced call then
takes its marker variant (``form.for_call(...)``), which ``CallSite``, ``SiteCall`` and
``SiteInfo`` carry.

**Adding a form** (e.g. ``scope="warpgroup"``, a cooperative call joined at a named barrier
in a warp-specialised kernel):

1. Write ``splice/forms/<name>.py`` with a class that has every attribute and method of
   :class:`~splice.forms.base.CallForm` and one instance of it. Copy :mod:`.block` for a
   cooperative call: its ``instance_edits`` runs :func:`splice.forms.block_proof.prove_instance`
   (thread 0's guard, straight-line code to the join) and emits
   :func:`.block_proof.thread0_block` / :func:`.block_proof.all_threads_block`; a
   warpgroup form reuses that proof with its own join barrier (the named ``bar.sync N,
   128`` instead of ``bar.sync 0``) and its own policy on the callee's barriers
   (:meth:`~base.CallForm.check_callees`, which the fragments stage runs for each form
   present, and which ends with :func:`.effects.check_every_callee`, the checks every
   callee gets; :meth:`~base.CallForm.check_linked_callees` for a binary object's machine
   code); its
   spans get its :attr:`span_kind`; with ``takes_tiles`` and
   :meth:`~base.CallForm.call_ends` (the guard and join of a proven instance) its calls
   take tiles, staged by :mod:`.staging`.
2. Add its scope to :class:`~splice.forms.base.Scope` and one line to :data:`FORMS`
   (``Scope.WARPGROUP: warpgroup.WARPGROUP``). Nothing else dispatches on the scope: the
   declaration (``splice.extern(scope=...)``), the trace, the rewriter, the collective
   checks and the reports ask the form. (A form for a test only: :func:`register`.)
3. Test it as ``tests/test_block_scope.py`` does block: declaration, the PTX a site
   becomes, every refusal (CPU), a GPU check against NumPy.

Beside the forms: :mod:`.rewrite` (the PTX rewriter: every marker becomes its form's call,
proven), :mod:`.effects` (what an element-scope callee may not do: exit, shared memory, a
side effect of a pure call), :mod:`.cub_names` (the ``splice.cub`` function a CUB template
is, for messages).

May import: the analyses (:mod:`splice.analysis`), the PTX tools (:mod:`splice.ptxtools`),
:mod:`splice.types` and :mod:`splice.errors`; nothing of the input kinds, the compilers,
the toolchain runner, the cache or the header providers (a callee's fragment is asked, not
imported: ``fragment.has_ptx_body``, ``fragment.kind``). No form imports the rewriter.
Outside this package no module reads a form's capability flags: it asks the form.
"""

from __future__ import annotations

from ..errors import SpliceDeclarationError
from . import block, element, warpgroup
from .base import CallForm, Marker, Refusal, Scope

FORMS: dict[str, CallForm] = {
    Scope.ELEMENT.value: element.ATOMIC,
    Scope.BLOCK.value: block.BLOCK,
    Scope.WARPGROUP.value: warpgroup.WARPGROUP,
}


def form_of(name, what: str) -> CallForm:
    """The form of a declaration whose ``scope=`` is ``name`` (a :class:`Scope` or its
    string).

    Raises:
        SpliceDeclarationError: an unknown scope, naming ``what`` (the extern and where it
            is declared).
    """
    if isinstance(name, str) and name in FORMS:
        return FORMS[name]
    names = " or ".join(repr(str(s)) for s in FORMS)
    raise SpliceDeclarationError(f"{what}: scope must be {names}, got {name!r}")


def of_span(span) -> CallForm | None:
    """The form whose generated code ``span`` (a :class:`splice.ptxtools.spans.Span`) is, or None
    (a fragment, or splice's own declarations)."""
    return next((f for f in FORMS.values() if f.span_kind == span.kind), None)


def register(name: str, form: CallForm) -> None:
    """Make ``form`` the form of declarations whose ``scope=`` is ``name`` (a form defined
    outside ``splice/forms/``, e.g. in a test)."""
    FORMS[name] = form


__all__ = ["FORMS", "CallForm", "Marker", "Refusal", "Scope", "form_of", "register"]
