"""The one place this backend reaches into the rest of the storage layer (the row mapping, the acting client).

The PostgreSQL tables hold the same columns as the SQLite ones, so entry rows
are encoded and decoded by the storage layer's one mapping (``memlens.store.rows``)
and the working-memory rows have the same columns (``memlens.store.task_rows``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memlens import attribution
from memlens.store import rows, task_rows

COLUMNS = rows.COLUMN_LIST  # id, wing, room, kind, type, status, title, text, key, salience, overrides, created_at, ...
TASK_COLUMNS = ", ".join(task_rows.TASK_COLUMNS)
BLOCKER_COLUMNS = ", ".join(task_rows.BLOCKER_COLUMNS)
row_to_entry = rows.row_to_entry  # a damaged row raises CorruptRowError, in one line
entry_values = rows.entry_values  # the values of COLUMNS, then content_hash and model
stamp = attribution.stamp  # ``detail`` with the acting client added, as the SQLite store's audit writer does


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
