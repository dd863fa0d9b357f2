"""What the tests share: kernels and externs (:mod:`support.kernels`), the kernels of the fma
marker tests (:mod:`support.fma`), call-site records (:mod:`support.sites`), the PTX
interpreter that is the rewriter's oracle (:mod:`support.ptx_interp`), the CPU executor of
whole spliced kernels (:mod:`support.ptx_exec`), plain cuTile kernels with NumPy references
(:mod:`support.plain_kernels`), exact fma and bfloat16 references (:mod:`support.exact`),
prebuilt fragments (:mod:`support.fragments`), GPU helpers (:mod:`support.gpu`) and the
environment of a child Python (:mod:`support.env`). Fixtures are in ``tests/conftest.py``.
Test modules import from here, never from each other."""
