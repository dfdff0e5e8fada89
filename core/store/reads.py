"""The read half of the storage interface: what the retrieval pipeline asks of a store.

``Reads`` names every read the pipeline makes, in the pipeline's own terms
(a ``Scope``, rowids, vectors); ``memlens.store.sqlite_reads.SqliteReads`` answers
them with SQLite, sqlite-vec and FTS5. A second backend (PostgreSQL + pgvector, say) implements
the same protocol; the trace says which lexical scorer ran (``lexical_scorer``).
The data types (``Scope``, ``Rows``, ``Knn``) live in ``memlens.store.scope``.

Rows come back as ``StoredRow`` tuples: ``(rowid, content_hash, *entry columns)``,
the entry columns in ``ENTRY_COLUMNS`` order. Only visible rows are returned
(none of an import still in progress), and a row that does not decode (a hand
edit, damage) is left out and reported in ``Rows.damaged``, one note each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from memlens.limits import MAX_QUERY_TERMS
from memlens.store import staging
from memlens.store.scope import Knn, Rows, Scope, StoredRow, query_terms

ENTRY_COLUMNS = (
    "id, wing, room, kind, type, status, title, text, key, salience, overrides, created_at, updated_at, meta"
)


class Reads(Protocol):
    """Every read the retrieval pipeline makes of a store."""

    backend: str  # "sqlite"
    lexical_scorer: str  # which lexical scorer ranks text matches ("fts5-bm25")

    def wings(self) -> list[str]:
        """Every wing holding a visible entry."""
        ...

    def rooms(self, wing: str | None = None) -> list[str]:
        """Every non-empty room of a visible entry (of ``wing``)."""
        ...

    def generations(self, wings: Iterable[str] | None = None) -> dict[str, int]:
        """Write counters per wing (every write bumps its wing's); all of them when ``wings`` is None."""
        ...

    def settled(self) -> AbstractContextManager[None]:
        """A block of reads (one search) that asks once, on entry, whether another process wrote: inside it the
        generations are those of that moment plus this connection's own writes. A backend whose check costs
        nothing may do nothing."""
        ...

    def vector_index(self) -> str:
        """The vector index a KNN would use now: "memory" (in process) or the backend's own ("sqlite-vec")."""
        ...

    def lexical_beside(self, scope: Scope) -> bool:
        """Whether ``lexical`` for ``scope`` may run now on another thread, beside this one's work, with the same
        answer (its own connection sees what this thread's does: no transaction open here), at little cost (a
        long-lived process, whose index is held in memory and current for the scope)."""
        ...

    def knn(self, qvec: np.ndarray, scope: Scope, n: int) -> Knn:
        """The ``n`` nearest visible entries of ``scope``, inside its filters, best first (an import in progress
        never hides a visible row nor shows a staged one). A backend may answer up to ``n`` per wing
        (sqlite-vec), the in-process index ``n`` in all: callers take the first ``n``."""
        ...

    def lexical(self, text: str, scope: Scope, n: int, gens: dict[str, int] | None = None) -> list[tuple[int, float]]:
        """The ``n`` best text matches inside ``scope``, as (rowid, score), higher is better, best first."""
        ...

    def listing(self, scope: Scope, n: int) -> list[int]:
        """Without free text: the scope's rowids, invariants, decisions, patterns then the rest, most salient first."""
        ...

    def rows(self, rowids: Sequence[int]) -> Rows:
        """The visible rows of these rowids."""
        ...

    def vector_models(self, rowids: Sequence[int]) -> dict[int, str]:
        """The model each of these rowids' stored vector was made by (an indexed lookup: a search asks for its hits)."""
        ...

    def vectors(self, need: dict[int, str]) -> dict[int, np.ndarray]:
        """Stored vectors of the rowids of ``need`` (rowid -> its wing); a degenerate one comes back as zeros."""
        ...

    def mandatory_invariants(self, wing: str, rooms: list[str] | None) -> set[int]:
        """Rowids of the active invariants of ``wing`` (in ``rooms`` when given)."""
        ...

    def related(self, ids: list[str], keys: Iterable[str], scope: Scope) -> list[int]:
        """Rowids inside ``scope`` of the entries that override one of ``ids`` or share one of ``keys``."""
        ...

    def latest(self, scope: Scope) -> Rows:
        """The most recently created entry of the scope (at most one row)."""
        ...

    def session_turns(self, session: Any, wings: list[str] | None, n: int) -> Rows:
        """The ``n`` latest turns of a conversation session, newest first."""
        ...

    def session_vectors(self, session: str) -> list[np.ndarray]:
        """The vectors of every turn of a conversation session."""
        ...

    def top_salient(self, scope: Scope, n: int) -> Rows:
        """The scope's ``n`` most salient entries, the most recently changed first among equals."""
        ...

    def scope_vectors(self, wings: list[str], statuses: list[str]) -> list[np.ndarray]:
        """The vectors of every visible entry of ``wings`` with one of ``statuses`` ("why not?" ranks an entry in them)."""
        ...

    def text_matches(self, text: str, wings: list[str]) -> list[str]:
        """The ids of every visible entry of ``wings`` matching ``text``, best first ("why not?")."""
        ...


def fts_query(text: str) -> str | None:
    """Free text → an FTS5 OR-query of quoted terms (no FTS syntax leaks through).

    Only the first ``MAX_QUERY_TERMS`` distinct terms are used: an FTS5 OR-query costs
    time in proportion to its terms, and the trace notes the cut.
    """
    terms = query_terms(text)[:MAX_QUERY_TERMS]
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


def sql_in(col: str, values: list[str]) -> tuple[str, list[str]]:
    return f"{col} IN ({','.join('?' * len(values))})", list(values)


def sql_filters(scope: Scope, prefix: str = "") -> tuple[list[str], list[Any]]:
    """SQL conditions (and their arguments) of the scope, for the entries table or vec0's metadata columns."""
    where: list[str] = []
    args: list[Any] = []
    for col, values in scope.columns():
        if values is not None:
            clause, vals = sql_in(prefix + col, values)
            where.append(clause)
            args.extend(vals)
    return where, args


def entry_filters(scope: Scope, prefix: str = "") -> tuple[list[str], list[Any]]:
    """``sql_filters`` on the entries table, and no row of an import in progress (``memlens.store.staging``)."""
    where, args = sql_filters(scope, prefix)
    return [staging.visible(prefix.rstrip(".")), *where], args


__all__ = ["ENTRY_COLUMNS", "Knn", "Reads", "Rows", "Scope", "StoredRow", "entry_filters", "fts_query", "query_terms",
           "sql_filters", "sql_in"]
