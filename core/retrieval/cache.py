"""Retrieval cache, correct across processes.

Key: sha256 over (query, user, wings, parameters). Each cached bundle remembers
the generation of every wing it searched. Writers bump their wing's generation
in the store (core/memory.py), so a lookup compares one small indexed read of
the ``wings`` table against the snapshot. A write to a searched wing, from this
process or any other, makes the entry stale, and the trace names that write.
A write to an unrelated wing leaves the entry valid.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from memlens.trace import Bundle, CacheInfo


def cache_key(query: str, user: str, wings: list[str] | None, params: dict[str, Any]) -> str:
    # layout: prefix:user:wings:query-hash:params-hash (user and wings readable when inspecting keys)
    q = hashlib.sha256(query.encode()).hexdigest()[:16]
    p = hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"retrieval:{user}:{','.join(wings) if wings is not None else '*'}:{q}:{p}"


@dataclass
class _Item:
    bundle: Bundle
    stored_at: float
    generations: dict[str, int]


class RetrievalCache:
    def __init__(self, ttl_seconds: float, max_entries: int = 512, clock: Any = time.monotonic) -> None:
        self.ttl = ttl_seconds
        self.clock = clock  # seconds, monotonic; tests pass a fake clock
        self.max_entries = max_entries
        self._items: OrderedDict[str, _Item] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, current: dict[str, int], lookup_write: Any) -> tuple[Bundle | None, CacheInfo]:
        """The cached bundle if still valid, and what the trace should say either way."""
        info = CacheInfo(enabled=True, key=key, ttl_s=self.ttl)
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None, info
            age = self.clock() - item.stored_at
            info.age_s = round(age, 3)
            if age > self.ttl:
                del self._items[key]
                info.invalidated_by = {"reason": "ttl", "age_s": round(age, 3)}
                return None, info
            changed = [w for w, g in current.items() if item.generations.get(w, 0) != g]
            if changed:
                del self._items[key]
                info.invalidated_by = lookup_write(changed)
                return None, info
            self._items.move_to_end(key)
            return item.bundle, info

    def put(self, key: str, bundle: Bundle, generations: dict[str, int]) -> None:
        with self._lock:
            self._items[key] = _Item(bundle, self.clock(), dict(generations))
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
