"""The declaration API: what a user writes to declare device code and call it.

:mod:`.externs` (``splice.extern``, ``from_ptx``, ``from_ltoir``, ``from_object``,
``splice.library``; the arguments checked by :mod:`.declaring`), :mod:`.asm_frontend`
(``splice.asm``), :mod:`.cuda_frontend` (``splice.cuda``; a snippet's text by C++'s rules:
:mod:`.snippet_text`), :mod:`.tile_trace` (a tile call
traced: its staging and its generated fragment, :mod:`splice.inputs.tile_fragment`).
Each declaration is a fragment of an input kind (:mod:`splice.inputs`) with a call form
(:mod:`splice.forms`), called through the tracing (:mod:`splice.tracing`).

May import: the tracing, the input kinds, the forms and everything below them; not the
driver, nor :mod:`splice.cub` (which declares through this package).
"""
