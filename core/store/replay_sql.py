"""Replay's tables on SQLite (``retrieval_log``, ``golden``) and the freshness columns of ``entries``: the SQL
behind ``memlens.replay``.

``SqliteReplay`` is a mixin of ``SqliteStore`` (``conn``: this thread's connection, ``path``, ``write()``,
``on_connection()``); the PostgreSQL store has the same methods (``memlens.store.postgres.replay``). Rows
come back raw; ``memlens.replay.storage`` decodes them, the same way for both.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.store import db
from memlens.store.staging import visible

CHUNK = 400  # ids per ``IN (...)`` (SQLite's bound on variables)
LOG_INSERT = "INSERT INTO retrieval_log(seq, request, client, context, hits) VALUES (?, ?, ?, ?, ?)"


class _HeldConnection:
    """A connection inside a transaction that only the preview ends: each write's own BEGIN, COMMIT and ROLLBACK
    become a savepoint, its release and a rollback to it, so a write that fails inside a preview is undone on its
    own (as PostgreSQL's nested transactions do) and nothing is committed."""

    write_turn = None  # the preview holds its process's turn (``db.write_turn``); its writes are savepoints inside

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    @property
    def in_transaction(self) -> bool:
        return True

    def execute(self, sql: str, *args: Any) -> Any:
        word = sql.lstrip()[:8].upper()
        if word.startswith("BEGIN"):
            return self._conn.execute("SAVEPOINT memlens_preview_write")
        if word.startswith(("COMMIT", "END")):
            return self._conn.execute("RELEASE memlens_preview_write")
        if word.startswith("ROLLBACK"):
            self._conn.execute("ROLLBACK TO memlens_preview_write")
            return self._conn.execute("RELEASE memlens_preview_write")
        return self._conn.execute(sql, *args)


class SqliteReplay:
    conn: Any
    path: Path

    if TYPE_CHECKING:
        def settle_log(self) -> None: ...  # the host's: this process's waiting log rows written first (``SqliteAuditLog``)

    # -- the retrieval log ------------------------------------------------------------------------

    def logged_rows(self, limit: int, since: str | None = None, query: str | None = None) -> list[tuple[Any, ...]]:
        """The newest ``limit`` logged retrievals, newest first: (seq, ts, request, client, context, hits)."""
        self.settle_log()
        sql = ("SELECT a.seq, a.ts, l.request, l.client, l.context, l.hits FROM audit a JOIN retrieval_log l"
               " ON l.seq = a.seq WHERE a.action = 'retrieval'")
        args: list[Any] = []
        if since:
            sql += " AND a.ts >= ?"
            args.append(since)
        if query is not None:
            sql += " AND json_valid(l.request) AND json_extract(l.request, '$.query') = ?"
            args.append(query)
        rows: list[tuple[Any, ...]] = self.conn.execute(sql + " ORDER BY a.seq DESC LIMIT ?", [*args, limit]).fetchall()
        return rows

    def access_rows(self, entry_id: str, needle: str, limit: int) -> list[tuple[Any, ...]]:
        """Retrievals that returned ``entry_id`` (``needle``: its JSON text), newest first:
        (seq, ts, query, client, rank, score, context)."""
        self.settle_log()
        rows: list[tuple[Any, ...]] = self.conn.execute(
            "SELECT l.seq, a.ts, CASE WHEN json_valid(l.request) THEN json_extract(l.request, '$.query') END, l.client,"
            " CAST(h.key AS INTEGER) + 1, json_extract(h.value, '$[1]'), l.context"
            " FROM retrieval_log l JOIN audit a ON a.seq = l.seq, json_each(l.hits) h"
            " WHERE instr(l.hits, ?) > 0 AND json_valid(l.hits) AND json_extract(h.value, '$[0]') = ?"
            " ORDER BY l.seq DESC LIMIT ?",
            (needle, entry_id, limit),
        ).fetchall()
        return rows

    def retrieval_count_rows(self, wing: str | None = None, since: str | None = None) -> list[tuple[Any, ...]]:
        """Each active entry (of ``wing``): (id, wing, type, title, retrievals that searched its wing, that returned it),
        counting the retrievals logged at or after ``since`` only, when given."""
        self.settle_log()
        when = " AND a.ts >= ?" if since else ""
        sql = (
            "WITH searched AS (SELECT j.value AS wing, count(*) AS n FROM audit a, json_each(a.detail, '$.wings_searched') j"
            "   WHERE a.action = 'retrieval' AND json_valid(a.detail) AND a.seq IN (SELECT seq FROM retrieval_log)"
            f"{when} GROUP BY j.value),"
            " hit AS (SELECT json_extract(h.value, '$[0]') AS entry_id, count(DISTINCT l.seq) AS n"
            "   FROM retrieval_log l, json_each(l.hits) h WHERE json_valid(l.hits)"
            + (" AND l.seq IN (SELECT seq FROM audit a WHERE a.action = 'retrieval' AND a.ts >= ?)" if since else "")
            + " GROUP BY 1)"
            " SELECT e.id, e.wing, e.type, e.title, coalesce(s.n, 0), coalesce(h.n, 0) FROM entries e"
            " LEFT JOIN searched s ON s.wing = e.wing LEFT JOIN hit h ON h.entry_id = e.id"
            f" WHERE e.status != 'deprecated' AND {visible('e')}"
        )
        args: tuple[Any, ...] = (since, since) if since else ()
        if wing:
            sql += " AND e.wing = ?"
            args = (*args, wing)
        return list(self.conn.execute(sql + " ORDER BY e.wing, e.rowid", args))

    def entry_statuses(self, ids: list[str]) -> dict[str, str]:
        """The status of each of ``ids`` that still has a row (a missing id was deleted)."""
        out: dict[str, str] = {}
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i : i + CHUNK]
            out.update(self.conn.execute(f"SELECT id, status FROM entries WHERE id IN ({','.join('?' * len(chunk))})", chunk))
        return out

    # -- golden queries ---------------------------------------------------------------------------

    def golden_insert(self, query: str, expect: str, active_wing: str, within: int, created_at: str) -> int:
        """A new golden query; its id. A ValidationError when the same one (query, expect, wing) exists."""
        from memlens.errors import ValidationError
        from memlens.store import db

        with db.transaction(self.conn, self.path) as conn:
            row = conn.execute("SELECT id FROM golden WHERE query = ? AND expect = ? AND active_wing = ?",
                               (query, expect, active_wing)).fetchone()
            if row is not None:
                raise ValidationError(f"golden query {row[0]} already expects {expect!r} for {query!r}")
            cur = conn.execute("INSERT INTO golden(query, expect, active_wing, within, created_at) VALUES (?, ?, ?, ?, ?)",
                               (query, expect, active_wing, within, created_at))
            return int(cur.lastrowid)

    def golden_rows(self) -> list[tuple[Any, ...]]:
        """(id, query, expect, active_wing, within, created_at) of every golden query, in id order."""
        rows: list[tuple[Any, ...]] = self.conn.execute(
            "SELECT id, query, expect, active_wing, within, created_at FROM golden ORDER BY id").fetchall()
        return rows

    def golden_delete(self, golden_id: int) -> bool:
        from memlens.store import db

        with db.transaction(self.conn, self.path) as conn:
            return bool(conn.execute("DELETE FROM golden WHERE id = ?", (golden_id,)).rowcount > 0)

    # -- freshness --------------------------------------------------------------------------------

    def vector_stamps(self, ids: list[str]) -> list[tuple[Any, ...]]:
        """(id, title, text, content_hash, model) of each of ``ids`` stored."""
        out: list[tuple[Any, ...]] = []
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i : i + CHUNK]
            out += self.conn.execute(
                f"SELECT id, title, text, content_hash, model FROM entries WHERE id IN ({','.join('?' * len(chunk))})", chunk)
        return out

    def stamp_rows(self, wing: str | None = None) -> list[tuple[Any, ...]]:
        """(rowid, id, wing, title, text, content_hash, model) of every visible entry (of ``wing``), in rowid order."""
        sql = f"SELECT rowid, id, wing, title, text, content_hash, model FROM entries WHERE {visible()}"
        args: tuple[Any, ...] = (wing,) if wing else ()
        return list(self.conn.execute(sql + (" AND wing = ?" if wing else "") + " ORDER BY rowid", args))

    def rewrite_vectors(self, rows: list[tuple[int, str]], blobs: list[bytes], hashes: list[str], model: str) -> None:
        """One transaction: the new vector of each (rowid, wing), what it was made from, one ``reembed`` audit row,
        the wings' generations (vec0's metadata columns are copied from each entry's row)."""
        with self.write() as writer:  # type: ignore[attr-defined]
            conn = writer.conn  # vec0's rows are rewritten: vec0 has no "replace the vector only"
            for (rowid, _), blob, h in zip(rows, blobs, hashes):
                conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (rowid,))
                conn.execute("INSERT INTO entries_vec(rowid, embedding, wing, room, kind, type, status)"
                             " SELECT rowid, ?, wing, room, kind, type, status FROM entries WHERE rowid = ?", (blob, rowid))
                conn.execute("UPDATE entries SET content_hash = ?, model = ? WHERE rowid = ?", (h, model, rowid))
            seq = writer.audit("reembed", None, None, None, None, {"entries": len(rows), "model": model})
            writer.bump({w for _, w in rows}, seq)

    # -- a change that is never written ------------------------------------------------------------

    @contextmanager
    def rolled_back(self) -> Iterator[Any]:
        """A copy of this store whose writes happen inside one transaction that is rolled back on exit.

        The transaction holds the store's write lock while it is open (other writers wait, readers do not).
        """
        conn = self.conn
        with db.write_turn(conn, self.path):  # this process's other writers queue behind it (``db.write_turn``)
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.on_connection(_HeldConnection(conn))  # type: ignore[attr-defined]
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
