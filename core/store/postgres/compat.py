"""The one place this backend reaches into the rest of the engine (rows, entries, the acting client).

When the storage layer's shared helpers move, only this module changes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from memlens.models import Entry, content_hash
from memlens.store.reads import ENTRY_COLUMNS

COLUMNS = ENTRY_COLUMNS  # id, wing, room, kind, type, status, title, text, key, salience, overrides, created_at, updated_at, meta
TASK_COLUMNS = "task_id, intent, summary, outcome, completed_at, requires_context, validation_report"
BLOCKER_COLUMNS = "task_id, reason, blocked_at, resolved_at, resolution"


def row_to_entry(row: tuple[Any, ...]) -> Entry:
    """An Entry from a row selected as ``COLUMNS`` (a damaged row raises CorruptRowError, in one line)."""
    from memlens.store.rows import row_to_entry as decode

    return decode(row)


def entry_values(entry: Entry, model: str | None) -> list[Any]:
    """The values of ``COLUMNS`` for ``entry``, then content_hash and model (as the SQLite store writes them)."""
    rec = entry.to_record()
    values = [rec[f] for f in Entry.model_fields if f != "meta"]
    values += [json.dumps(entry.meta, ensure_ascii=False, sort_keys=True), content_hash(entry.embed_text), model]
    return values


def stamp(detail: dict[str, Any] | None) -> dict[str, Any] | None:
    """``detail`` with the acting client added, as the SQLite store's audit writer does."""
    from memlens.store import attribution

    return attribution.stamp(detail)


def as_vector(vec: np.ndarray | bytes) -> np.ndarray:
    """A float32 vector from an array or a stored little-endian blob."""
    if isinstance(vec, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(vec), dtype="<f4").astype(np.float32)
    return np.asarray(vec, dtype=np.float32)


def from_pg(value: Any) -> np.ndarray:
    """A ``vector`` column's value (pgvector's ``Vector``, or an array) as float32."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)
