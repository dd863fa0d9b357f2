"""Exact NumPy references for what the GPU rounds once: fused multiply-add (tileiras and
NVRTC contract ``a * b + c`` into ``fma.rn``) and bfloat16 (NumPy has no such type)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def fma(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once (to nearest even), elementwise, in float32 or float64 (the
    dtype of the broadcast arrays)."""
    a, b, c = np.broadcast_arrays(np.asarray(a), np.asarray(b), np.asarray(c))
    dtype = np.result_type(a, b, c)
    exact = [Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r))
             for p, q, r in zip(a.ravel(), b.ravel(), c.ravel())]
    if dtype == np.float64:
        out = np.array([float(x) for x in exact])
    else:
        out = np.array([_nearest_f32(x) for x in exact], np.float32)
    return out.reshape(a.shape)


def _nearest_f32(x: Fraction) -> np.float32:
    f = np.float32(float(x))
    cands = (np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf)))
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - x),
                                     int(np.asarray(c).view(np.uint32)) & 1))


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even (finite input)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7fff + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(b: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32 values."""
    return (np.asarray(b).astype(np.uint32) << 16).view(np.float32)
