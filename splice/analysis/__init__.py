"""PTX analyses the forms' proofs and callee policies share, on PTX alone.

:mod:`.control` (a function body's control flow: a thread's next statements, paths between
instructions, which warps reach each statement, values as functions of the thread or warp
index), :mod:`.collectives` (the collective instructions of the PTX ISA and of SASS, the
call graph across modules and what a function reaches), :mod:`.activemask` (the
opportunistic ``__activemask()`` pattern proven warp-uniform), :mod:`.memory_none` and
:mod:`.memory_proof` (what ``memory="none"`` and ``memory="arguments"`` claim, proven on the PTX; a
tile call's accesses at constant offsets outside its tiles) on :mod:`.addresses` (which memory
each register may point into), :mod:`.asm_check` (what splice proves of a ``splice.asm``
snippet), :mod:`.thread_index` (what a register or guard holds in each
thread, evaluated).

May import: the PTX tools (:mod:`splice.ptxtools`), :mod:`splice.errors` and each other;
nothing of a form, a call site's declaration, an input kind, the compilers, the toolchain
runner or the cache (``tests/test_import_graph.py``).
"""
