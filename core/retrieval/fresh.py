"""Freshness per hit: was each result's vector made by the store's model from the entry's text as it is now?

A vector is stale when the store moved to another model (``memlens reembed`` is under way or was never run)
or the text changed behind the engine's back. The pipeline already holds each hit's stored content hash
(its row); the model that made each vector is one indexed lookup for the final hits only (a long-lived
process keeps the models beside its rows, ``memlens.store.speed.rowcache``). A workspace
document (the fallback) has no stored vector: its ``vector`` stays None.
"""

from __future__ import annotations

from memlens.models import content_hash
from memlens.retrieval.policy import Candidate
from memlens.retrieval.run import Run

VERDICTS_KEPT = 20_000
# (rowid, stored content hash, hash of the stored title, hash of the stored text) -> do they agree? Hashing a
# long text costs ~8 µs a hit; a long-lived process meets the same rows (the same string objects, whose hashes
# Python keeps) search after search. Keyed by the values' hashes, so nothing here keeps a text alive.
_verdicts: dict[tuple[int, str, int, int], bool] = {}


def _same_text(c: Candidate) -> bool:
    """Does the stored content hash match the entry's text as it is now?"""
    key = (c.rowid, c.content_hash, hash(c.title), hash(c.text))
    got = _verdicts.get(key)
    if got is None:
        got = c.content_hash == content_hash(c.entry.embed_text)
        if len(_verdicts) >= VERDICTS_KEPT:
            _verdicts.clear()
        _verdicts[key] = got
    return got


def mark(run: Run) -> None:
    """Set ``Result.vector`` = ``{"fresh", "model", "hash_matches"}`` on every hit that has a stored vector."""
    assert run.bundle is not None
    pool = {c.id: c for c in run.pool}
    hits = [(r, pool[r.entry.id]) for r in run.bundle.results if r.entry.id in pool]
    if not hits:
        return
    models = run.store.vector_models([c.rowid for _, c in hits])
    current = run.ctx.model_id()
    for r, c in hits:
        made_by = models.get(c.rowid)
        same_text = _same_text(c)
        r.vector = {"fresh": made_by == current and same_text, "model": made_by, "hash_matches": same_text}
