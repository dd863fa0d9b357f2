"""The driver: a ``@splice.kernel``'s build from the trace to the cubin, and its result.

:mod:`.splice_kernel` (``@splice.kernel``: the launch, the cache lookup),
:mod:`.pipeline` (one build: its stages in order, timed and dumped, and the cache),
:mod:`.stages` (lower, fragments, splice, link, assemble), :mod:`.result`
(:class:`~.result.Build`), :mod:`.diagnose` (a ptxas failure explained by the spans),
:mod:`.verify` (``$SPLICE_VERIFY``: the linked cubin checked).

May import every layer below: the input kinds, the tracing, the rewriter
(:mod:`splice.forms.rewrite`), the forms, the analyses, the PTX tools, the toolchain runner and the
cache. Nothing below imports the driver.
"""
