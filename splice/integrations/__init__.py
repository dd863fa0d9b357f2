"""Integrations: splice's kernels in other build and run systems.

:mod:`.export` (``splice.export_kernel``: a cubin and its launch description for code
outside Python). ``splice.jax`` (JAX) and ``splice.cub`` (CUB device algorithms as
externs) keep their documented module names at the package's top.

May import the driver and everything below it; nothing imports an integration but
:mod:`splice` itself (lazily) and the command line.
"""
