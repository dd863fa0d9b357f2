"""Input kinds: the device code splice links into a kernel, and how it gets its PTX.

:mod:`.fragments` (the fragment kinds: CUDA C, PTX, LTO-IR, binary objects, snippets)
compiled by :mod:`.cuda_compile` (NVRTC) with header providers (:mod:`.headers`, CCCL's
:mod:`.cccl`, :mod:`.nvshmem`) and checked against their declarations by :mod:`.checks`; a
tile call's generated fragment (:mod:`.tile_fragment`), with the guard words of
``SPLICE_CHECK_TILES`` (:mod:`.tile_guards`). What declares them is :mod:`splice.declare`.

May import: the PTX tools, the analyses, :mod:`splice.types`, the toolchain and the store
(:mod:`splice.system`) and each other; nothing of the tracing, the forms, the declarations
or the driver (``tests/test_import_graph.py``).
"""
