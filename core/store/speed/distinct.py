"""Distinct wings and rooms, cached until the next write.

DISTINCT over a large table costs milliseconds and searches ask on every
call, so the values are kept until the store's write stamp (the sum of the
wing generations) changes: a write by any process moves it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memlens.store.base import Writes


class DistinctValues:
    def __init__(self, store: Writes) -> None:
        self._store = store
        self._cache: dict[tuple[str, str | None, bool], tuple[tuple[int, int], list[str]]] = {}
        self._lock = threading.Lock()

    def values(self, column: str, wing: str | None = None, *, named_only: bool = False) -> list[str]:
        """The values of ``column`` that visible entries hold (in ``wing``; ``named_only``: not ``''``), in order."""
        stamp = self._store.write_stamp()
        key = (column, wing, named_only)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == stamp:
                return list(hit[1])
        values = [v for v, _ in self._store.groups(column, wing, named_only=named_only)]
        with self._lock:
            self._cache[key] = (stamp, values)
        return list(values)
