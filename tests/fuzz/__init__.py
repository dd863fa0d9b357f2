"""A differential fuzzer for inline CUDA C (``splice.cuda``): random snippets compiled by
splice for sm_90 and run on the CPU PTX executor, against the same C++ compiled by the host
C++ compiler and run on the same inputs (``tests/fuzz/README.md``).

    python -m tests.fuzz --cases 2000 --seed 7      # from the repository root

Modules: :mod:`.cmodel` (C++ types and their rules, callable functions), :mod:`.program`
(the AST and its rendering), :mod:`.generate` (random snippets), :mod:`.harness` (batch
layout, inputs, comparison), :mod:`.device` (the splice side), :mod:`.host` (the C++ side),
:mod:`.runner` (a batch end to end, and ``check``, a regression test's body),
:mod:`.minimise` (delta debugging), :mod:`.cli` (the command line).

Nothing is imported here: ``python -m tests.fuzz`` puts ``tests/`` on ``sys.path`` first
(the harness imports the tests' ``support`` package), and the tests import the modules as
``fuzz.<module>``.
"""

