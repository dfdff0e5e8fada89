"""The ingestion catalog and the code index as a part of the storage interface (``memlens.ingest`` uses it).

``sources`` records what each ingested file was when its chunks were written
(size, mtime_ns, sha256, parser/chunker version); ``source_entries`` names the
entries each source produced; ``ingest_runs`` keeps one row per finished
``ingest`` or ``index`` run (a code index's ``indexed_at`` is its last
completed run). ``Catalog`` is what a store offers on them;
``memlens.store.ingest_sql`` implements it on SQLite and
``memlens.store.postgres.ingest`` on PostgreSQL, both through ``CatalogWrites``
here for the writes, so the two cannot drift apart.

A source's chunks are replaced through the store's write protocol: its
entries, their vectors, its catalog rows, one audit row per source and the
generation bump of its wing commit in one transaction. A reader, or a
process killed at any point, sees all the old chunks or all the new ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from memlens.models import format_ts, utcnow

if TYPE_CHECKING:
    import numpy as np

    from memlens.models import Entry

SOURCE_COLUMNS = "id, wing, path, kind, size, mtime_ns, sha256, version, chunks, indexed_at"
RUN_COLUMNS = "id, mode, wing, root, started_at, finished_at, seconds, status, summary"


@dataclass
class Source:
    """A catalog row."""

    id: int
    wing: str
    path: str
    kind: str
    size: int
    mtime_ns: int
    sha256: str
    version: str
    chunks: int
    indexed_at: str


@dataclass
class SourceWrite:
    """What one file becomes: its catalog values and its chunks (entries with their vectors)."""

    wing: str
    path: str
    kind: str
    size: int
    mtime_ns: int
    sha256: str
    version: str
    entries: list[Entry] = field(default_factory=list)
    vectors: list[bytes] = field(default_factory=list)


def run_record(row: tuple[Any, ...]) -> dict[str, Any]:
    """An ``ingest_runs`` row (``RUN_COLUMNS``) as a dict; a summary that does not decode reads as ``{}``."""
    id_, mode, wing, root, started, finished, seconds, status, summary = row
    try:
        detail = json.loads(summary) if summary else {}
    except ValueError:
        detail = {}
    return {"id": int(id_), "mode": mode, "wing": wing, "root": root, "started_at": started, "finished_at": finished,
            "seconds": seconds, "status": status, "summary": detail if isinstance(detail, dict) else {}}


def recall_records(details: Iterable[Any]) -> list[dict[str, Any]]:
    """The code-recall log's detail texts, decoded; a value that is not a JSON object (a hand edit) is left out."""
    out = []
    for detail in details:
        try:
            value = json.loads(detail)
        except (TypeError, ValueError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


class Catalog(Protocol):
    """The ingestion catalog, its runs and the code index's reads, on any backend."""

    def prepare_ingest_writer(self) -> None:
        """Set up this (ingest writer) thread's connection for streaming writes (SQLite: no memory map)."""
        ...

    def get_source(self, wing: str, path: str) -> Source | None: ...

    def sources_under(self, wing: str, root: str) -> list[Source]:
        """The sources of ``wing`` at ``root`` or below it (``root`` is a real, absolute path), by path."""
        ...

    def all_sources(self, wing: str | None = None, kind: str | None = None) -> list[Source]: ...

    def source_chunk_ids(self, source_id: int) -> list[str]:
        """The ids of the entries the source produced, in id order."""
        ...

    def stored_vectors(self, hashes: list[str], model: str) -> dict[str, bytes]:
        """Usable vectors already stored for these content hashes by ``model``: hash -> float32 bytes."""
        ...

    def write_sources(self, writes: list[SourceWrite], action: str) -> dict[str, int]:
        """Replace the chunks of each source in ONE write transaction; returns {"added", "updated", "chunks"}."""
        ...

    def remove_sources(self, sources: Iterable[Source], action: str) -> int:
        """Remove sources and all their chunks in one write transaction; returns how many sources."""
        ...

    def refresh_source_stat(self, source_id: int, size: int, mtime_ns: int) -> None:
        """Remember a touched but unchanged file's new size and mtime_ns."""
        ...

    def record_ingest_run(self, values: tuple[Any, ...], keep: int) -> int:
        """One ``ingest_runs`` row (``RUN_COLUMNS`` without ``id``); only the newest ``keep`` stay. Returns its id."""
        ...

    def ingest_runs(self, mode: str | None, limit: int) -> list[dict[str, Any]]:
        """The newest runs (of ``mode``), newest first, as ``run_record`` dicts."""
        ...

    def code_indexes(self, wings: list[str] | None = None) -> list[dict[str, Any]]:
        """Each indexed workspace ``{"wing", "root", "indexed_at"}`` (its last completed run's end), by wing, root."""
        ...

    def code_candidates(self, qvec: np.ndarray, wings: list[str], n: int) -> list[tuple[Entry, float]]:
        """The ``n`` nearest visible, active ``code`` entries of ``wings`` as (entry, cosine similarity), best first."""
        ...

    def log_code_recall(self, detail: dict[str, Any], keep: int) -> None:
        """One ``code_recall`` audit row (only the newest ``keep`` stay) without waiting for a writer; never raises."""
        ...

    def code_recalls(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``code_recall`` details, newest first."""
        ...


class CatalogWrites:
    """``write_sources`` and ``remove_sources`` over the store's write protocol; the host store gives ``write()``
    and, for the SQL on a writer's connection, the hooks ``_source_id``, ``_insert_source``, ``_update_source``,
    ``_unlink_source`` (its entries and their vectors go; returns how many entries), ``_link_source`` and
    ``_delete_source`` (whether the source's row was still there)."""

    write: Callable[[], AbstractContextManager[Any]]
    _source_id: Callable[[Any, str, str], int | None]
    _insert_source: Callable[[Any, SourceWrite, str], int]
    _update_source: Callable[[Any, int, SourceWrite, str], None]
    _unlink_source: Callable[[Any, int], int]
    _link_source: Callable[[Any, int, list[str]], None]
    _delete_source: Callable[[Any, int], bool]

    def write_sources(self, writes: list[SourceWrite], action: str) -> dict[str, int]:
        out = {"added": 0, "updated": 0, "chunks": 0}
        if not writes:
            return out
        now = format_ts(utcnow())
        with self.write() as writer:
            conn = writer.conn  # the catalog tables live beside the entries, in the same transaction
            last_seq = 0
            for w in writes:
                source_id = self._source_id(conn, w.wing, w.path)
                removed = 0
                if source_id is None:
                    source_id = self._insert_source(conn, w, now)
                    out["added"] += 1
                else:
                    removed = self._unlink_source(conn, source_id)
                    self._update_source(conn, source_id, w, now)
                    out["updated"] += 1
                for entry, blob in zip(w.entries, w.vectors):
                    writer.insert(entry, blob)
                self._link_source(conn, source_id, [e.id for e in w.entries])
                out["chunks"] += len(w.entries)
                detail = {"source": w.path, "sha256": w.sha256, "version": w.version, "chunks": len(w.entries),
                          "removed": removed}
                last_seq = writer.audit(action, None, w.wing, None, None, detail)
            writer.bump({w.wing for w in writes}, last_seq)
        return out

    def remove_sources(self, sources: Iterable[Source], action: str) -> int:
        sources = list(sources)
        if not sources:
            return 0
        with self.write() as writer:
            conn = writer.conn
            last_seq = 0
            gone = []
            for s in sources:
                removed = self._unlink_source(conn, s.id)
                if not self._delete_source(conn, s.id):
                    continue  # another run removed it since this one read the catalog: not counted twice
                gone.append(s)
                last_seq = writer.audit(f"{action}_remove", None, s.wing, None, None, {"source": s.path, "removed": removed})
            if gone:
                writer.bump({s.wing for s in gone}, last_seq)
        return len(gone)
