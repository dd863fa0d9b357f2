"""Launching kernels on the GPU from tests, with torch arrays."""

from __future__ import annotations

import numpy as np


def launch(torch, grid, kernel, args):
    """ct.launch on torch's current stream, then synchronize."""
    import cuda.tile as ct
    ct.launch(torch.cuda.current_stream(), grid, kernel, args)
    torch.cuda.synchronize()


class Dev:
    """The ``dev`` fixture: NumPy arrays to the GPU and back, and launches."""

    def __init__(self, torch):
        import cuda.tile as ct
        self.torch = torch
        self.ct = ct

    def arr(self, a):
        """A NumPy array on the GPU (bfloat16 arrays have no NumPy type: TypeError)."""
        a = np.ascontiguousarray(a)
        if a.dtype.str == "<V2" or a.dtype.name == "bfloat16":
            raise TypeError("no torch array from a NumPy bfloat16 array")
        return self.torch.from_numpy(a).cuda()

    def empty(self, shape, dtype):
        """An uninitialised GPU array of ``dtype`` (a torch dtype or a NumPy dtype)."""
        if not isinstance(dtype, self.torch.dtype):
            dtype = getattr(self.torch, np.dtype(dtype).name)
        return self.torch.empty(shape, dtype=dtype, device="cuda")

    def launch(self, grid, kernel, args):
        launch(self.torch, grid, kernel, args)

    def host(self, t):
        return t.cpu().numpy()
