"""The ingestion catalog and code index on PostgreSQL (``memlens.store.ingest_sql`` is the SQLite side, same methods).

The writes go through ``CatalogWrites`` (``memlens.store.catalog``) inside the store's write transaction, as on
SQLite. An entry's vector goes with its row (``ON DELETE CASCADE``). The code index's KNN is the store's own
(``knn``, exact below the HNSW threshold), scoped to the wings' active ``code`` entries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.models import format_ts, utcnow
from memlens.store.catalog import (
    RUN_COLUMNS,
    SOURCE_COLUMNS,
    CatalogWrites,
    Source,
    SourceWrite,
    recall_records,
    run_record,
)
from memlens.store.postgres.compat import COLUMNS, from_pg, row_to_entry
from memlens.store.postgres.reads import visible
from memlens.store.scope import Knn, Scope

if TYPE_CHECKING:
    from memlens.models import Entry

LOG_LOCK_TIMEOUT_MS = 50  # a retrieval never waits longer than this for its code_recall row


class PgIngest(CatalogWrites):
    connection: Callable[[], AbstractContextManager[Any]]
    knn: Callable[[np.ndarray, Scope, int], Knn]

    def prepare_ingest_writer(self) -> None:
        """Nothing to set up: the server holds the store, this process maps none of it."""

    def _sources(self, sql: str, args: Iterable[Any]) -> list[Source]:
        with self.connection() as conn:
            return [Source(*r) for r in conn.execute(sql, list(args)).fetchall()]

    # -- catalog reads ----------------------------------------------------------------------------

    def get_source(self, wing: str, path: str) -> Source | None:
        found = self._sources(f"SELECT {SOURCE_COLUMNS} FROM sources WHERE wing = %s AND path = %s", (wing, path))
        return found[0] if found else None

    def sources_under(self, wing: str, root: str) -> list[Source]:
        prefix = root.rstrip("/") + "/"
        return self._sources(f"SELECT {SOURCE_COLUMNS} FROM sources WHERE wing = %s AND (path = %s OR starts_with(path, %s)) "
                             "ORDER BY path COLLATE \"C\"", (wing, root, prefix))

    def all_sources(self, wing: str | None = None, kind: str | None = None) -> list[Source]:
        where, args = [], []
        if wing:
            where.append("wing = %s")
            args.append(wing)
        if kind:
            where.append("kind = %s")
            args.append(kind)
        sql = f"SELECT {SOURCE_COLUMNS} FROM sources" + (" WHERE " + " AND ".join(where) if where else "")
        return self._sources(sql + " ORDER BY path COLLATE \"C\"", args)

    def source_chunk_ids(self, source_id: int) -> list[str]:
        with self.connection() as conn:
            return [r[0] for r in conn.execute(
                "SELECT entry_id FROM source_entries WHERE source_id = %s ORDER BY entry_id COLLATE \"C\"", (source_id,))]

    def stored_vectors(self, hashes: list[str], model: str) -> dict[str, bytes]:
        if not hashes:
            return {}
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT ON (e.content_hash) e.content_hash, v.embedding FROM entries e "
                f"JOIN entries_vec v ON v.rowid = e.rowid WHERE e.content_hash = ANY(%s) AND e.model = %s AND v.usable "
                f"AND {visible('e')} ORDER BY e.content_hash, e.rowid", (list(hashes), model)).fetchall()
        return {h: from_pg(v).astype("<f4").tobytes() for h, v in rows}

    # -- catalog writes (hooks of CatalogWrites, on the write transaction's connection) --------------

    def _source_id(self, conn: Any, wing: str, path: str) -> int | None:
        row = conn.execute("SELECT id FROM sources WHERE wing = %s AND path = %s", (wing, path)).fetchone()
        return None if row is None else int(row[0])

    def _insert_source(self, conn: Any, w: SourceWrite, now: str) -> int:
        return int(conn.execute(
            "INSERT INTO sources(wing, path, kind, size, mtime_ns, sha256, version, chunks, indexed_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (w.wing, w.path, w.kind, w.size, w.mtime_ns, w.sha256, w.version, len(w.entries), now),
        ).fetchone()[0])

    def _update_source(self, conn: Any, source_id: int, w: SourceWrite, now: str) -> None:
        conn.execute(
            "UPDATE sources SET kind = %s, size = %s, mtime_ns = %s, sha256 = %s, version = %s, chunks = %s, "
            "indexed_at = %s WHERE id = %s",
            (w.kind, w.size, w.mtime_ns, w.sha256, w.version, len(w.entries), now, source_id),
        )

    def _unlink_source(self, conn: Any, source_id: int) -> int:
        removed = conn.execute(
            "DELETE FROM entries WHERE id IN (SELECT entry_id FROM source_entries WHERE source_id = %s)", (source_id,)
        ).rowcount
        conn.execute("DELETE FROM source_entries WHERE source_id = %s", (source_id,))
        return int(removed)

    def _link_source(self, conn: Any, source_id: int, entry_ids: list[str]) -> None:
        if entry_ids:
            conn.execute("INSERT INTO source_entries(source_id, entry_id) SELECT %s, unnest(%s::text[])",
                         (source_id, entry_ids))

    def _delete_source(self, conn: Any, source_id: int) -> bool:
        return bool(conn.execute("DELETE FROM sources WHERE id = %s", (source_id,)).rowcount)

    def refresh_source_stat(self, source_id: int, size: int, mtime_ns: int) -> None:
        with self.connection() as conn, conn.transaction():
            conn.execute("UPDATE sources SET size = %s, mtime_ns = %s WHERE id = %s", (size, mtime_ns, source_id))

    # -- runs -------------------------------------------------------------------------------------

    def record_ingest_run(self, values: tuple[Any, ...], keep: int) -> int:
        with self.connection() as conn, conn.transaction():
            run_id = int(conn.execute(
                "INSERT INTO ingest_runs(mode, wing, root, started_at, finished_at, seconds, status, summary) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id", values).fetchone()[0])
            conn.execute("DELETE FROM ingest_runs WHERE id <= %s", (run_id - keep,))
        return run_id

    def ingest_runs(self, mode: str | None, limit: int) -> list[dict[str, Any]]:
        sql = f"SELECT {RUN_COLUMNS} FROM ingest_runs" + (" WHERE mode = %s" if mode else "") + " ORDER BY id DESC LIMIT %s"
        with self.connection() as conn:
            rows = conn.execute(sql, (mode, limit) if mode else (limit,)).fetchall()
        return [run_record(r) for r in rows]

    # -- the code index ---------------------------------------------------------------------------

    def code_indexes(self, wings: list[str] | None = None) -> list[dict[str, Any]]:
        sql = ("SELECT wing, root, max(finished_at) FROM ingest_runs WHERE mode = 'index' AND status IN ('ok', 'partial') "
               "AND root IS NOT NULL")
        args: list[Any] = []
        if wings is not None:
            if not wings:
                return []
            sql += " AND wing = ANY(%s)"
            args.append(list(wings))
        sql += ' GROUP BY wing, root ORDER BY wing COLLATE "C", root COLLATE "C"'
        with self.connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [{"wing": w, "root": r, "indexed_at": t} for w, r, t in rows]

    def code_candidates(self, qvec: np.ndarray, wings: list[str], n: int) -> list[tuple[Entry, float]]:
        if not wings:
            return []
        hits = self.knn(np.asarray(qvec, dtype=np.float32), Scope(wings=list(wings), kinds=["code"], statuses=["active"]),
                        n).hits[:n]
        if not hits:
            return []
        with self.connection() as conn:
            found = {int(r[0]): r[1:] for r in conn.execute(
                f"SELECT rowid, {COLUMNS} FROM entries WHERE rowid = ANY(%s) AND {visible()}", ([r for r, _ in hits],))}
        return [(row_to_entry(found[rowid]), sim) for rowid, sim in hits if rowid in found]

    def log_code_recall(self, detail: dict[str, Any], keep: int) -> None:
        try:
            with self.connection() as conn, conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{LOG_LOCK_TIMEOUT_MS}ms'")
                conn.execute(
                    "INSERT INTO audit(ts, action, entry_id, wing, before, after, detail) "
                    "VALUES (%s, 'code_recall', NULL, NULL, NULL, NULL, %s)",
                    (format_ts(utcnow()), json.dumps(detail, ensure_ascii=False)),
                )
                row = conn.execute("SELECT seq FROM audit WHERE action = 'code_recall' ORDER BY seq DESC LIMIT 1 OFFSET %s",
                                   (keep,)).fetchone()
                if row is not None:
                    conn.execute("DELETE FROM audit WHERE action = 'code_recall' AND seq <= %s", (row[0],))
        except Exception:
            pass

    def code_recalls(self, limit: int) -> list[dict[str, Any]]:
        with self.connection() as conn:
            rows = conn.execute("SELECT detail FROM audit WHERE action = 'code_recall' ORDER BY seq DESC LIMIT %s",
                                (limit,)).fetchall()
        return recall_records(detail for (detail,) in rows)
