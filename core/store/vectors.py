"""Stored vectors that cannot be compared: all zeros, NaN or infinite.

The model never produces one, but a store can hold one however it got there
(an older import, a hand-edited file, a foreign tool). Such a vector has no
direction, so it has no cosine similarity to anything. Search treats the entry
as having no vector: the KNN never returns it, and where a similarity is
needed (a text-only match, dedup, explain) it counts as 0. Nothing downstream
ever sees a NaN. ``vec0_knn`` is the sqlite-vec KNN with that rule applied.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from memlens.limits import SQLITE_VEC_MAX_KNN


def degenerate(v: np.ndarray) -> bool:
    """True when ``v`` is all zeros or has a NaN or infinite component."""
    # one pass; positive and finite: neither case. A float32 vector is squared in float64, where its square can
    # neither overflow nor underflow to 0, so no floating-point warning needs silencing (np.errstate cost more)
    if v.ndim != 1:
        square = math.nan
    elif v.dtype.itemsize <= 4:
        square = float(np.dot(w := v.astype(np.float64), w))
    else:
        with np.errstate(all="ignore"):
            square = float(np.dot(v, v))
    if 0.0 < square < math.inf:
        return False
    return not bool(np.isfinite(v).all()) or not bool(np.any(v))  # (a square can also underflow or overflow)


def degenerate_rows(m: np.ndarray) -> np.ndarray:
    """Row mask of a 2-D matrix: True for each degenerate row."""
    if not len(m):
        return np.zeros(0, dtype=bool)
    mask: np.ndarray = ~np.isfinite(m).all(axis=1) | ~m.any(axis=1)
    return mask


def clean(v: np.ndarray) -> np.ndarray:
    """``v`` itself, or a zero vector of its size when it is degenerate (similarity 0 to anything)."""
    return np.zeros(v.shape, dtype=np.float32) if degenerate(v) else v


def from_blob(blob: bytes) -> np.ndarray:
    """A stored float32 vector, cleaned."""
    return clean(np.frombuffer(blob, dtype="<f4"))


def vec0_knn(conn: Any, blob: bytes, n: int, where: list[str], args: list[Any]) -> list[tuple[int, float]]:
    """sqlite-vec's top ``n`` as (rowid, similarity), best first (ties by rowid), without rows whose vector is degenerate.

    With a partition key, ``wing IN (...)`` yields up to ``n`` rows per wing; merged here.
    A degenerate stored vector comes back from vec0 with a NULL distance and
    can displace a real neighbour, so while they show up the query asks for more rows
    (at least ``n`` plus those seen, doubling, within sqlite-vec's limit: a few rounds at most).
    """
    sql = "SELECT rowid, distance FROM entries_vec WHERE embedding MATCH ? AND k = ?" + "".join(" AND " + w for w in where)
    k = n
    while True:
        rows = conn.execute(sql, [blob, k, *args]).fetchall()
        bad = sum(1 for _, d in rows if d is None or not math.isfinite(d))
        if not bad or k >= SQLITE_VEC_MAX_KNN or k >= n + bad:
            break
        k = min(max(n + bad, 2 * k), SQLITE_VEC_MAX_KNN)
    hits = [(r, 1.0 - float(d)) for r, d in rows if d is not None and math.isfinite(d)]
    # ties by rowid, as the in-process index orders them (two copies of one text have the same vector): the pool,
    # and so the final ranking, holds equal scores in this order (sqlite-vec returns them in either order)
    return sorted(hits, key=lambda h: (-h[1], h[0]))
