"""Freshness of vectors: was each made by the store's current model, from the entry's text as it is now?

Every entry records the model and the hash of the text its vector was made from. A vector is stale when
either differs: the store moved to another model (same vector size), or the text changed behind the
engine's back. ``reembed`` embeds the stale ones again, in batches, each batch one transaction (the vectors,
the records of what they were made from, one audit row, the wings' generations); when the configured model
differs from the store's, it re-embeds every entry with it and then makes it the store's model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.errors import MemlensError
from memlens.models import Entry, content_hash
from memlens.replay import storage

if TYPE_CHECKING:
    from memlens.replay.context import ReplayContext

BATCH = 256


def stale_count(mem: ReplayContext) -> int:
    return len(storage.stale_rows(mem, mem.model_id))


def hit_freshness(mem: ReplayContext, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per id: ``{model, current_model, hash_matches, fresh}``."""
    return storage.freshness(mem, ids, mem.model_id)


def reembed(mem: ReplayContext, *, wing: str | None = None, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Re-embed the stale entries (of ``wing``) with the configured model; ``{"stale", "reembedded", "model"}``."""
    if wing is not None and wing not in mem.wings():
        raise MemlensError(f"unknown wing {wing!r} (known wings: {', '.join(mem.wings()) or 'none yet'})")
    target = mem.embedder.model_id
    switching = target != mem.model_id
    if switching and mem.embedder.dim != mem.dim:
        raise MemlensError(f"the configured model {target} makes {mem.embedder.dim}-dimensional vectors and the store "
                           f"holds {mem.dim}; a new store is needed (memlens export, then import into it)")
    if switching and wing is not None:
        raise MemlensError(f"the configured model {target} is not the store's ({mem.model_id}): re-embed every wing "
                           "(without --wing) so that the store never mixes two models")
    rows = storage.stale_rows(mem, target, wing)
    done = 0
    if progress:
        progress(0, len(rows))
    for i in range(0, len(rows), BATCH):
        batch = rows[i : i + BATCH]
        texts = [Entry.model_construct(wing="", title=t, text=x).embed_text for _, _, _, t, x in batch]
        vecs = mem.embedder.embed(texts)
        storage.write_vectors(mem, batch, [np.asarray(v, dtype="<f4").tobytes() for v in vecs],
                              [content_hash(t) for t in texts], target)
        done += len(batch)
        if progress:
            progress(done, len(rows))
    if switching:
        storage.set_store_model(mem, target)
    return {"stale": len(rows), "reembedded": done, "model": target}
