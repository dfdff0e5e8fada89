"""What a search asks a store for and gets back, whatever the backend: a scope, rows, KNN hits."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

StoredRow = tuple[Any, ...]  # (rowid, content_hash, *ENTRY_COLUMNS)


@dataclass(frozen=True)
class Scope:
    """Where a search looks: each filter is a list of allowed values, or None for any."""

    wings: list[str] | None = None
    rooms: list[str] | None = None
    kinds: list[str] | None = None
    types: list[str] | None = None
    statuses: list[str] | None = None

    def columns(self) -> tuple[tuple[str, list[str] | None], ...]:
        return (("wing", self.wings), ("room", self.rooms), ("kind", self.kinds), ("type", self.types),
                ("status", self.statuses))

    def index_filters(self) -> dict[str, list[str]]:
        """The filters other than the wing, as the in-process vector index applies them."""
        return {c: v for c, v in self.columns()[1:] if v is not None}

    def contains(self, wing: str, room: str, kind: str, type_: str, status: str) -> bool:
        return all(vals is None or v in vals for v, vals in zip((wing, room, kind, type_, status),
                                                              (self.wings, self.rooms, self.kinds, self.types, self.statuses)))


@dataclass
class Rows:
    """Rows read, in the order asked for, and a note per damaged row left out."""

    rows: list[StoredRow] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)


@dataclass
class Knn:
    """A KNN answer: (rowid, cosine similarity) best first; which index ranked them; the wing generations read
    on the way (None if none were), so the lexical generator can reuse them; a note for the trace, if any."""

    hits: list[tuple[int, float]]
    index: str
    gens: dict[str, int] | None = None
    note: str | None = None
    # the similarities the scan computed beyond its hits (rowid -> wing asked; only rows it ranked), when the
    # index scanned every row of the scope (the in-process index); asked once, on this thread, before its next KNN
    scanned: Callable[[dict[int, str]], dict[int, float]] | None = None


def query_terms(text: str) -> list[str]:
    """The distinct lexical terms of free text, in order of appearance (all of them; see fts_query)."""
    return list(dict.fromkeys(t.lower() for t in re.findall(r"\w+", text) if len(t) > 1 or t.isdigit()))


__all__ = ["Knn", "Rows", "Scope", "StoredRow", "query_terms"]
