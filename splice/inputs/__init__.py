"""Input kinds: the device code a user declares, and how splice gets its PTX.

:mod:`.externs` (``splice.extern``, ``from_ptx``, ``from_ltoir``, ``from_object``,
``splice.library``; the arguments checked by :mod:`.declaring`), :mod:`.asm_frontend`
(``splice.asm``), :mod:`.fragments` (the fragment kinds: CUDA C, PTX, LTO-IR, binary
objects, snippets) compiled by :mod:`.cuda_compile` (NVRTC) with header providers
(:mod:`.headers`, :mod:`.nvshmem`; CCCL in :mod:`splice.cccl`) and checked against their
declarations by :mod:`.checks`; a tile call's generated fragment (:mod:`.tile_fragment`)
and its trace (:mod:`.tile_trace`), with the guard words of ``SPLICE_CHECK_TILES``
(:mod:`.tile_guards`).

May import: the layers below (the forms, to validate a declaration's ``scope``; the
tracing of cuTile; the PTX tools; the toolchain runner and the cache); not the driver.
"""
