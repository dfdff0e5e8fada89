"""Every pair of stored vectors at least a threshold similar (cosine), for ``memlens lint``.

Up to ``EXACT_MAX`` vectors every pair is compared, in blocks (a 20k store: 200M products, a few
seconds). Above that an inverted file cuts the work: the vectors are clustered (k-means on a sample,
about sqrt(n) clusters), each vector is filed under its nearest cluster, and each is compared with
the vectors filed under its ``PROBES`` nearest clusters. Two vectors that similar almost always
share one of those clusters; a pair that does not is missed, which the lint benchmark measures on
planted near-duplicates (``tests/bench/review.py``). The result says which method ran.
"""

from __future__ import annotations

import numpy as np

EXACT_MAX = 20_000
PROBES = 3
BLOCK = 1024
SAMPLE = 10_000
ITERATIONS = 6
CLUSTERS = 1.0  # clusters per square root of the vectors (assigning costs n·k, comparing n·PROBES·n/k)

Pair = tuple[int, int, float]  # (i, j, cosine) with i < j, indexes into the matrix given


def _exact(vecs: np.ndarray, threshold: float) -> list[Pair]:
    out: list[Pair] = []
    n = len(vecs)
    for start in range(0, n, BLOCK):
        block = vecs[start : start + BLOCK]
        sims = block @ vecs[start:].T  # only the later vectors: each pair once
        rows, cols = np.nonzero(sims >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist()):
            i, j = start + r, start + c
            if i < j:
                out.append((i, j, float(sims[r, c])))
    return out


def _centroids(vecs: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Spherical k-means on a sample: unit centroids."""
    sample = vecs[rng.choice(len(vecs), size=min(SAMPLE, len(vecs)), replace=False)]
    cents = sample[rng.choice(len(sample), size=k, replace=False)].copy()
    for _ in range(ITERATIONS):
        nearest = np.argmax(sample @ cents.T, axis=1)
        order = np.argsort(nearest, kind="stable")
        used, starts = np.unique(nearest[order], return_index=True)
        sums = np.add.reduceat(sample[order], starts, axis=0)  # each used cluster's members summed
        cents[used] = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return cents.astype(np.float32)


def _probed(vecs: np.ndarray, threshold: float, seed: int) -> list[Pair]:
    rng = np.random.default_rng(seed)
    k = max(2, int(CLUSTERS * np.sqrt(len(vecs))))
    cents = _centroids(vecs, k, rng)
    probes = np.empty((len(vecs), PROBES), dtype=np.int64)
    for start in range(0, len(vecs), BLOCK * 8):
        sims = vecs[start : start + BLOCK * 8] @ cents.T
        top = np.argpartition(-sims, PROBES, axis=1)[:, :PROBES]
        best = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)  # the nearest cluster first
        probes[start : start + BLOCK * 8] = np.take_along_axis(top, best, axis=1)
    home = probes[:, 0]
    filed = [np.nonzero(home == c)[0] for c in range(k)]
    asking: list[list[int]] = [[] for _ in range(k)]
    for i, row in enumerate(probes.tolist()):
        for c in row:
            asking[c].append(i)
    found: dict[tuple[int, int], float] = {}
    for c in range(k):
        members, askers = filed[c], np.asarray(asking[c], dtype=np.int64)
        if len(members) == 0 or len(askers) == 0:
            continue
        sims = vecs[askers] @ vecs[members].T
        rows, cols = np.nonzero(sims >= threshold)
        for r, col in zip(rows.tolist(), cols.tolist()):
            i, j = int(askers[r]), int(members[col])
            if i != j:
                found[(min(i, j), max(i, j))] = float(sims[r, col])
    return [(i, j, s) for (i, j), s in sorted(found.items())]


def similar_pairs(vecs: np.ndarray, threshold: float, *, seed: int = 0) -> tuple[list[Pair], str]:
    """The pairs at least ``threshold`` similar among the rows of ``vecs`` (unit vectors), and the method used."""
    vecs = np.ascontiguousarray(vecs, dtype=np.float32)
    if len(vecs) < 2:
        return [], "exact"
    if len(vecs) <= EXACT_MAX:
        return _exact(vecs, threshold), "exact"
    return _probed(vecs, threshold, seed), f"clustered ({int(CLUSTERS * np.sqrt(len(vecs)))} clusters, {PROBES} probed)"
