"""The toolchain and the store: what splice uses outside its own code, on the machine it runs
on.

:mod:`.toolchain` (the programs splice runs: tileiras through its overlay, ptxas, nvdisasm;
their versions and identities), :mod:`.tileiras_overlay` (the directory tileiras runs
from, checked before each run), :mod:`.cuda_libs` (NVRTC and nvJitLink in process),
:mod:`.nvrtc_pch` (NVRTC's precompiled header for CUDA C that includes CCCL),
:mod:`._cutile` (the one module on cuTile's private API), :mod:`.cache` (the content-keyed
disk cache), :mod:`.identity` (the identity of splice's own code, for the cache's keys),
:mod:`.safe_fs` (files and directories another user could have placed), :mod:`.settings`
(the ``SPLICE_*`` environment variables), :mod:`.forksafe` (module-level locks a forked
child gets free). The public face of the toolchain is :mod:`splice.toolchain`.

May import: :mod:`splice.errors` and each other; nothing of PTX, a form, an input kind,
the tracing, a declaration or the driver (``tests/test_import_graph.py``).
"""
