"""Stored vectors that cannot be compared: all zeros, NaN or infinite.

The model never produces one, but a store can hold one however it got there
(an older import, a hand-edited file, a foreign tool). Such a vector has no
direction, so it has no cosine similarity to anything. Search treats the entry
as having no vector: the KNN never returns it, and where a similarity is
needed (a text-only match, dedup, explain) it counts as 0. Nothing downstream
ever sees a NaN.
"""

from __future__ import annotations

import numpy as np


def degenerate(v: np.ndarray) -> bool:
    """True when ``v`` is all zeros or has a NaN or infinite component."""
    return not bool(np.isfinite(v).all()) or not bool(np.any(v))


def degenerate_rows(m: np.ndarray) -> np.ndarray:
    """Row mask of a 2-D matrix: True for each degenerate row."""
    if not len(m):
        return np.zeros(0, dtype=bool)
    return ~np.isfinite(m).all(axis=1) | ~m.any(axis=1)


def clean(v: np.ndarray) -> np.ndarray:
    """``v`` itself, or a zero vector of its size when it is degenerate (similarity 0 to anything)."""
    return np.zeros(v.shape, dtype=np.float32) if degenerate(v) else v


def from_blob(blob: bytes) -> np.ndarray:
    """A stored float32 vector, cleaned."""
    return clean(np.frombuffer(blob, dtype="<f4"))
