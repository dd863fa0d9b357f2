"""PTX tools: the PTX text as splice reads and writes it.

:mod:`.ptx` parses a module into statements and function bodies (:class:`~.ptx.Body`),
:mod:`.link` merges fragments into the kernel's PTX, :mod:`.inline` inlines a callee's body
at a call, :mod:`.shared_memory` counts the kernel's static shared memory by owner,
:mod:`.tma_store_reads` finds the reads a TMA store makes, :mod:`.names` holds the names
splice writes into a kernel's PTX, :mod:`.spans` where each piece of that PTX came from.
(A ``splice.asm`` snippet's check, which uses the ``memory=`` proofs, is an analysis:
:mod:`splice.analysis.asm_check`.)

May import: :mod:`splice.errors`, :mod:`splice.types`, :mod:`splice.system.forksafe`,
:mod:`splice.system._cutile` and each other; nothing of the analyses, a call site, a form,
an input kind, the compilers, the toolchain runner or the cache
(``tests/test_import_graph.py``).
"""
