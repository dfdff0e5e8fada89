"""The ingestion catalog and code index on SQLite (``memlens.store.catalog.Catalog``): the SQL behind ``memlens.ingest``.

``SqliteIngest`` is a mixin of ``SqliteStore`` (``conn``: this thread's connection, ``path``); the PostgreSQL
store has the same methods (``memlens.store.postgres.ingest``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.models import format_ts, utcnow
from memlens.store import textindex
from memlens.store.catalog import (
    RUN_COLUMNS,
    SOURCE_COLUMNS,
    CatalogWrites,
    Source,
    SourceWrite,
    recall_records,
    run_record,
)

if TYPE_CHECKING:
    from memlens.models import Entry

BATCH = 500  # ids per IN (...) list


class SqliteIngest(CatalogWrites):
    conn: Any
    path: Path
    _busy_timeout_ms: int

    def prepare_ingest_writer(self) -> None:
        """No memory map on this thread's connection, so that the process's resident memory follows what the
        pipeline holds, not the size of the store it streams into (the page cache still serves)."""
        self.conn.execute("PRAGMA mmap_size = 0")

    # -- catalog reads ----------------------------------------------------------------------------

    def get_source(self, wing: str, path: str) -> Source | None:
        row = self.conn.execute(f"SELECT {SOURCE_COLUMNS} FROM sources WHERE wing = ? AND path = ?", (wing, path)).fetchone()
        return Source(*row) if row else None

    def sources_under(self, wing: str, root: str) -> list[Source]:
        prefix = root.rstrip("/") + "/"
        rows = self.conn.execute(
            f"SELECT {SOURCE_COLUMNS} FROM sources WHERE wing = ? AND (path = ? OR substr(path, 1, ?) = ?) ORDER BY path",
            (wing, root, len(prefix), prefix),
        ).fetchall()
        return [Source(*r) for r in rows]

    def all_sources(self, wing: str | None = None, kind: str | None = None) -> list[Source]:
        where, args = [], []
        if wing:
            where.append("wing = ?")
            args.append(wing)
        if kind:
            where.append("kind = ?")
            args.append(kind)
        sql = f"SELECT {SOURCE_COLUMNS} FROM sources" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY path"
        return [Source(*r) for r in self.conn.execute(sql, args)]

    def source_chunk_ids(self, source_id: int) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT entry_id FROM source_entries WHERE source_id = ? ORDER BY entry_id", (source_id,))]

    def stored_vectors(self, hashes: list[str], model: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for start in range(0, len(hashes), BATCH):
            part = hashes[start : start + BATCH]
            rows = self.conn.execute(
                "SELECT e.content_hash, v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "
                f"WHERE e.content_hash IN ({','.join('?' * len(part))}) AND e.model = ?",
                (*part, model),
            ).fetchall()
            for h, blob in rows:
                vec = np.frombuffer(blob, dtype="<f4")
                if np.isfinite(vec).all() and vec.any():
                    out.setdefault(h, blob)
        return out

    # -- catalog writes (hooks of CatalogWrites, on the write transaction's connection) --------------

    def _source_id(self, conn: Any, wing: str, path: str) -> int | None:
        row = conn.execute("SELECT id FROM sources WHERE wing = ? AND path = ?", (wing, path)).fetchone()
        return None if row is None else int(row[0])

    def _insert_source(self, conn: Any, w: SourceWrite, now: str) -> int:
        cur = conn.execute(
            "INSERT INTO sources(wing, path, kind, size, mtime_ns, sha256, version, chunks, indexed_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (w.wing, w.path, w.kind, w.size, w.mtime_ns, w.sha256, w.version, len(w.entries), now),
        )
        return int(cur.lastrowid)

    def _update_source(self, conn: Any, source_id: int, w: SourceWrite, now: str) -> None:
        conn.execute(
            "UPDATE sources SET kind = ?, size = ?, mtime_ns = ?, sha256 = ?, version = ?, chunks = ?, indexed_at = ? "
            "WHERE id = ?",
            (w.kind, w.size, w.mtime_ns, w.sha256, w.version, len(w.entries), now, source_id),
        )

    def _unlink_source(self, conn: Any, source_id: int) -> int:
        ids = [r[0] for r in conn.execute("SELECT entry_id FROM source_entries WHERE source_id = ?", (source_id,))]
        removed = 0
        for start in range(0, len(ids), BATCH):
            part = ids[start : start + BATCH]
            marks = ",".join("?" * len(part))
            rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM entries WHERE id IN ({marks})", part)]
            if rowids:
                rmarks = ",".join("?" * len(rowids))
                conn.execute(f"DELETE FROM entries_vec WHERE rowid IN ({rmarks})", rowids)
                removed += conn.execute(f"DELETE FROM entries WHERE rowid IN ({rmarks})", rowids).rowcount
        conn.execute("DELETE FROM source_entries WHERE source_id = ?", (source_id,))
        return removed

    def _link_source(self, conn: Any, source_id: int, entry_ids: list[str]) -> None:
        conn.executemany("INSERT INTO source_entries(source_id, entry_id) VALUES (?, ?)", [(source_id, i) for i in entry_ids])

    def _delete_source(self, conn: Any, source_id: int) -> bool:
        return bool(conn.execute("DELETE FROM sources WHERE id = ?", (source_id,)).rowcount)

    def refresh_source_stat(self, source_id: int, size: int, mtime_ns: int) -> None:
        from memlens.store import db

        with db.transaction(self.conn, self.path) as conn:
            conn.execute("UPDATE sources SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, source_id))

    # -- runs -------------------------------------------------------------------------------------

    def record_ingest_run(self, values: tuple[Any, ...], keep: int) -> int:
        from memlens.store import db

        with db.transaction(self.conn, self.path) as conn:
            cur = conn.execute(
                "INSERT INTO ingest_runs(mode, wing, root, started_at, finished_at, seconds, status, summary) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)
            run_id = int(cur.lastrowid)
            conn.execute("DELETE FROM ingest_runs WHERE id <= ?", (run_id - keep,))
        textindex.tidy(self.conn, self.path)  # a run writes its documents in many transactions
        return run_id

    def ingest_runs(self, mode: str | None, limit: int) -> list[dict[str, Any]]:
        sql = f"SELECT {RUN_COLUMNS} FROM ingest_runs" + (" WHERE mode = ?" if mode else "") + " ORDER BY id DESC LIMIT ?"
        return [run_record(r) for r in self.conn.execute(sql, (mode, limit) if mode else (limit,))]

    # -- the code index ---------------------------------------------------------------------------

    def code_indexes(self, wings: list[str] | None = None) -> list[dict[str, Any]]:
        sql = ("SELECT wing, root, max(finished_at) FROM ingest_runs WHERE mode = 'index' AND status IN ('ok', 'partial') "
               "AND root IS NOT NULL")
        args: list[Any] = []
        if wings is not None:
            if not wings:
                return []
            sql += f" AND wing IN ({','.join('?' * len(wings))})"
            args += wings
        sql += " GROUP BY wing, root ORDER BY wing, root"
        return [{"wing": w, "root": r, "indexed_at": t} for w, r, t in self.conn.execute(sql, args)]

    def code_candidates(self, qvec: np.ndarray, wings: list[str], n: int) -> list[tuple[Entry, float]]:
        from memlens.store.rows import COLUMN_LIST, row_to_entry, vec_blob
        from memlens.store.staging import visible
        from memlens.store.vectors import vec0_knn

        if not wings:
            return []
        where = [f"wing IN ({','.join('?' * len(wings))})", "kind = 'code'", "status = 'active'"]
        hits = vec0_knn(self.conn, vec_blob(qvec), n, where, list(wings))[:n]
        if not hits:
            return []
        found = {int(r[0]): r[1:] for r in self.conn.execute(  # one statement for all hits
            f"SELECT rowid, {COLUMN_LIST} FROM entries WHERE rowid IN ({','.join('?' * len(hits))}) AND {visible()}",
            [r for r, _ in hits])}
        return [(row_to_entry(found[rowid]), sim) for rowid, sim in hits if rowid in found]

    def log_code_recall(self, detail: dict[str, Any], keep: int) -> None:
        conn = self.conn
        try:
            conn.execute("PRAGMA busy_timeout = 50")
            conn.execute(
                "INSERT INTO audit(ts, action, entry_id, wing, before, after, detail) "
                "VALUES (?, 'code_recall', NULL, NULL, NULL, NULL, ?)",
                (format_ts(utcnow()), json.dumps(detail, ensure_ascii=False)),
            )
            row = conn.execute("SELECT seq FROM audit WHERE action = 'code_recall' ORDER BY seq DESC LIMIT 1 OFFSET ?",
                               (keep,)).fetchone()
            if row is not None:
                conn.execute("DELETE FROM audit WHERE action = 'code_recall' AND seq <= ?", (row[0],))
        except Exception:
            pass
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")

    def code_recalls(self, limit: int) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT detail FROM audit WHERE action = 'code_recall' ORDER BY seq DESC LIMIT ?", (limit,))
        return recall_records(detail for (detail,) in rows)
