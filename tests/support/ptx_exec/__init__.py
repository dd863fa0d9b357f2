"""A CPU executor of the PTX splice hands to ptxas: the end-to-end oracle without a GPU.

Run a kernel::

    from support import kernels as K
    from support.ptx_exec import run_build
    b = splice.compile(K.saxpy_kernel, sig, "sm_80")      # or "sm_90" (no TMA: allow_tma=False)
    x, y, out = ...                                        # NumPy arrays
    run_build(b, (n // 128,), x, y, out, np.float32(2.0))  # out now holds the result

``run(ptx, entry, grid, *args)`` does the same for any PTX text (``build["ptx"]`` is
tileiras's own output, the plain-kernel reference). Pass the runtime arguments in launch
order, leaving out ``ct.Constant`` ones; arrays are bound as cuTile binds them (base,
extents, strides in elements) and copied back after the launch; scalars as the entry's
parameter types (``Pointer(array)`` for an address passed as a scalar). The result's
``.approx`` names the approximate instructions that ran (bounds in ``runtime.APPROX_BOUNDS``)
and ``.unrounded`` counts float add/sub/mul without a rounding modifier (ptxas may fuse such
a pair into an fma): compare bit for bit with a GPU when both are empty.

One CTA at a time, each thread interpreted on its own (decoded blocks of generated Python,
:mod:`.decode`) and scheduled between barriers and warp collectives (:mod:`.machine`);
memory in :mod:`.memory`, instructions to Python in :mod:`.ops` (the modifiers each one
models in :mod:`.modifiers`), their semantics in :mod:`.runtime` and :mod:`.values`.
Errors (:class:`ExecError`): an instruction it does not implement (TMA, ``wgmma``,
``mbarrier``, ``setmaxnreg`` are out of scope; ``cp.async``, ``ldmatrix`` and ``mma.sync``
m16n8k16, which ``ct.mma`` on sm_80 uses, are in) or a modifier it does not model (refused,
never ignored), an illegal address, a misaligned one (not a multiple of the access's whole
width: a GPU traps), a shared-memory race, a deadlocked barrier or collective, an
``.aligned`` barrier reached by a diverged warp (undefined in the PTX ISA), ``trap``. Not
modelled: calls into binary objects (``from_object``: no PTX to run), races between CTAs
(they run one after another), memory ordering beyond barriers (every access is seen at once
by every thread).
"""

from .cutile import Pointer, run, run_build
from .memory import ExecError
from .runtime import APPROX_BOUNDS

__all__ = ["run", "run_build", "Pointer", "ExecError", "APPROX_BOUNDS"]
