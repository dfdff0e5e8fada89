"""An in-memory store implementing ``memlens.store.reads.Reads``, and a minimal engine around it.

For unit tests of the retrieval stages: no SQLite, no model. Vectors come from
the deterministic hashing embedder (bag of words, 64 dimensions); the lexical
scorer counts the query's distinct terms in an entry's title and text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memlens.embed import HashEmbedder
from memlens.models import Entry, content_hash
from memlens.retrieval.cache import RetrievalCache
from memlens.store.reads import Knn, Rows, Scope, StoredRow
from memlens.store.rows import damaged_note, row_problem
from memlens.vocab import TYPES

_ORDER = {"invariant": 0, "decision": 1, "pattern": 2}


def stored_row(rowid: int, e: Entry) -> StoredRow:
    """The row a store returns for ``e``: (rowid, content_hash, *entry columns)."""
    r = e.to_record()
    meta = json.dumps(e.meta, ensure_ascii=False, sort_keys=True)
    return (rowid, content_hash(e.embed_text), r["id"], r["wing"], r["room"], r["kind"], r["type"], r["status"],
            r["title"], r["text"], r["key"], r["salience"], r["overrides"], r["created_at"], r["updated_at"], meta)


@dataclass
class FakeStore:
    """``Reads`` over plain lists. ``staged`` rowids belong to an import in progress: never visible."""

    embedder: HashEmbedder = field(default_factory=lambda: HashEmbedder(dim=64))
    backend: str = "fake"
    lexical_scorer: str = "fake-term-count"
    rows_by_rowid: dict[int, StoredRow] = field(default_factory=dict)
    vecs: dict[int, np.ndarray] = field(default_factory=dict)
    gens: dict[str, int] = field(default_factory=dict)
    staged: set[int] = field(default_factory=set)
    models: dict[int, str] = field(default_factory=dict)  # a vector made by another model than the embedder's
    calls: list[str] = field(default_factory=list)

    def add(self, text: str, *, wing: str, vector: np.ndarray | None = None, **fields: Any) -> Entry:
        e = Entry(text=text, wing=wing, **fields)
        rowid = len(self.rows_by_rowid) + 1
        self.rows_by_rowid[rowid] = stored_row(rowid, e)
        self.vecs[rowid] = self.embedder.embed([e.embed_text])[0] if vector is None else vector
        self.gens[wing] = self.gens.get(wing, 0) + 1
        return e

    def damage(self, entry_id: str, **columns: Any) -> None:
        """Change stored columns behind the engine's back (as a hand edit would)."""
        names = ("rowid", "content_hash", "id", "wing", "room", "kind", "type", "status", "title", "text", "key",
                 "salience", "overrides", "created_at", "updated_at", "meta")
        for rowid, r in self.rows_by_rowid.items():
            if r[2] == entry_id:
                row = list(r)
                for k, v in columns.items():
                    row[names.index(k)] = v
                self.rows_by_rowid[rowid] = tuple(row)

    def rowid(self, entry_id: str) -> int:
        return next(r for r, row in self.rows_by_rowid.items() if row[2] == entry_id)

    # -- Reads ----------------------------------------------------------------------------------
    def _visible(self, scope: Scope | None = None) -> list[StoredRow]:
        return [r for rowid, r in self.rows_by_rowid.items()
                if rowid not in self.staged and (scope is None or scope.contains(*r[3:8]))]

    def _read(self, rows: Iterable[StoredRow]) -> Rows:
        out = Rows()
        for r in rows:
            problem = row_problem(r[2:])
            if problem is None:
                out.rows.append(r)
            else:
                out.damaged.append(damaged_note(r[2], problem))
        return out

    def wings(self) -> list[str]:
        return sorted({r[3] for r in self._visible()})

    def rooms(self) -> list[str]:
        return sorted({r[4] for r in self._visible() if r[4]})

    def generations(self, wings: Iterable[str] | None = None) -> dict[str, int]:
        return dict(self.gens) if wings is None else {w: self.gens.get(w, 0) for w in wings}

    def settled(self) -> AbstractContextManager[None]:
        return nullcontext()

    def vector_index(self) -> str:
        return "fake"

    def lexical_beside(self, scope) -> bool:
        return False

    def knn(self, qvec: np.ndarray, scope: Scope, n: int) -> Knn:
        self.calls.append("knn")
        hits: list[tuple[int, float]] = []
        for wing in scope.wings if scope.wings is not None else self.wings():
            inside = [r[0] for r in self._visible(scope) if r[3] == wing and self.vecs[r[0]].any()]
            hits += sorted(((r, float(self.vecs[r] @ qvec)) for r in inside), key=lambda h: -h[1])[:n]
        return Knn(sorted(hits, key=lambda h: -h[1]), "fake")

    def lexical(self, text: str, scope: Scope, n: int, gens: dict[str, int] | None = None) -> list[tuple[int, float]]:
        self.calls.append("lexical")
        terms = set(re.findall(r"\w+", text.lower()))
        scored = []
        for r in self._visible(scope):
            words = set(re.findall(r"\w+", f"{r[8]} {r[9]}".lower()))
            if terms & words:
                scored.append((r[0], float(len(terms & words))))
        return sorted(scored, key=lambda h: (-h[1], h[0]))[:n]

    def listing(self, scope: Scope, n: int) -> list[int]:
        rows = sorted(self._visible(scope), key=lambda r: r[14], reverse=True)
        rows = sorted(rows, key=lambda r: (_ORDER.get(r[6], 3), -r[11]))
        return [r[0] for r in rows[:n]]

    def rows(self, rowids: Sequence[int]) -> Rows:
        return self._read(self.rows_by_rowid[r] for r in rowids if r in self.rows_by_rowid and r not in self.staged)

    def vector_models(self, rowids: Sequence[int]) -> dict[int, str]:
        return {r: self.models.get(r, self.embedder.model_id) for r in rowids if r in self.rows_by_rowid}

    def vectors(self, need: dict[int, str]) -> dict[int, np.ndarray]:
        return {r: self.vecs[r] for r in need if r in self.vecs}

    def mandatory_invariants(self, wing: str, rooms: list[str] | None) -> set[int]:
        return {r[0] for r in self._visible() if r[3] == wing and r[6] == "invariant" and r[7] == "active"
                and (not rooms or r[4] in rooms)}

    def related(self, ids: list[str], keys: Iterable[str], scope: Scope) -> list[int]:
        keys = set(keys)
        return [r[0] for r in self._visible(scope) if r[12] in ids or (r[10] is not None and r[10] in keys)]

    def latest(self, scope: Scope) -> Rows:
        rows = sorted(self._visible(scope), key=lambda r: (r[13], r[0]), reverse=True)
        return self._read(rows[:1])

    def _session(self, r: StoredRow) -> Any:
        try:
            return json.loads(r[15]).get("session_id")
        except (ValueError, AttributeError):
            return None

    def session_turns(self, session: Any, wings: list[str] | None, n: int) -> Rows:
        rows = [r for r in self._visible(Scope(wings=wings)) if r[5] == "turn" and self._session(r) == session]
        return self._read(sorted(rows, key=lambda r: (r[13], r[0]), reverse=True)[:n])

    def session_vectors(self, session: str) -> list[np.ndarray]:
        return [self.vecs[r[0]] for r in self._visible() if r[5] == "turn" and self._session(r) == session]

    def top_salient(self, scope: Scope, n: int) -> Rows:
        rows = sorted(self._visible(scope), key=lambda r: r[14], reverse=True)
        return self._read(sorted(rows, key=lambda r: -r[11])[:n])

    def scope_vectors(self, wings: list[str], statuses: list[str]) -> list[np.ndarray]:
        return [self.vecs[r[0]] for r in self._visible(Scope(wings=wings, statuses=statuses))]

    def text_matches(self, text: str, wings: list[str]) -> list[str]:
        found = self.lexical(text, Scope(wings=wings), len(self.rows_by_rowid))
        return [self.rows_by_rowid[r][2] for r, _ in found]


class FakeEngine:
    """What the pipeline asks of the engine besides storage: settings, profiles, embedder, cache, retrieval log."""

    def __init__(self, settings: Any, store: FakeStore | None = None) -> None:
        from memlens.profiles import load_profiles

        self.settings = settings
        self.reads = store or FakeStore()
        self.embedder = self.reads.embedder
        self.model_id = self.embedder.model_id
        self.profiles = load_profiles(settings.profiles)
        self.cache = RetrievalCache(settings.cache.ttl_seconds, settings.cache.max_entries)
        self.logged: list[Any] = []  # the bundles logged
        self.records: list[Any] = []  # and their records
        self.tasks = None

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embedder.embed(texts)

    def describe_write(self, wings: list[str]) -> dict[str, Any]:
        return {"reason": "write", "wings": wings}

    def log_retrieval(self, record: Any) -> None:
        self.logged.append(record.bundle)  # a RetrievalRecord
        self.records.append(record)

    def context(self) -> Any:
        """The pipeline's view of this engine (``memlens.retrieval.context.SearchContext``)."""
        from memlens.retrieval.context import SearchContext

        return SearchContext(settings=self.settings, reads=self.reads, profiles=self.profiles, embed=self.embed,
                             model_id=lambda: self.model_id, count_tokens=self.embedder.count_tokens, cache=self.cache,
                             describe_write=self.describe_write, working_memory=lambda: "", log=self.log_retrieval)


assert set(_ORDER) < set(TYPES)
