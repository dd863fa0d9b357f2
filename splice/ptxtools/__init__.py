"""PTX tools: the PTX text as splice reads and writes it.

:mod:`.ptx` parses a module into statements and function bodies (:class:`~.ptx.Body`),
:mod:`.link` merges fragments into the kernel's PTX, :mod:`.inline` inlines a callee's body
at a call, :mod:`.asm_check` checks a ``splice.asm`` snippet, :mod:`.tma_store_reads` finds
the reads a TMA store makes.

May import: :mod:`splice.errors`, :mod:`splice.names`, :mod:`splice.spans`,
:mod:`splice.types` and each other (and :mod:`.asm_check` the ``memory="none"`` rule of
:mod:`splice.analysis.memory_proof`, the one module of both ``memory=`` rules); nothing of a call site, a form, an input kind, the
compilers, the toolchain runner or the cache (``tests/test_import_graph.py``).
"""
