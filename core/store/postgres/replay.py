"""Replay's tables on PostgreSQL (``memlens.store.replay_sql`` is the SQLite side, same methods).

JSON is kept as text, as on SQLite; a value that is not valid JSON (a hand edit) is read as nothing
(``IS JSON`` before every cast), never an error. ``rolled_back`` runs a preview on one connection inside
one transaction that always ends in ROLLBACK: the writes inside it are savepoints of that transaction.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np

from memlens.store.postgres.reads import visible

LOG_INSERT = "INSERT INTO retrieval_log(seq, request, client, context, hits) VALUES (%s, %s, %s, %s, %s)"
_QUERY = "CASE WHEN {p}request IS JSON OBJECT THEN {p}request::jsonb ->> 'query' END"
_HITS = "CASE WHEN {p}hits IS JSON ARRAY THEN {p}hits::jsonb ELSE '[]'::jsonb END"
_WINGS = ("coalesce(CASE WHEN a.detail IS JSON OBJECT THEN CASE WHEN jsonb_typeof(a.detail::jsonb -> 'wings_searched')"
          " = 'array' THEN a.detail::jsonb -> 'wings_searched' END END, '[]'::jsonb)")


class Held:
    """``connect.Single``'s interface over one connection that someone else opened and will close."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.closed = False

    @contextmanager
    def connection(self) -> Iterator[Any]:
        yield self.conn

    def close_thread(self) -> None:
        pass

    def close(self) -> None:
        pass


class PgReplay:
    connection: Callable[[], AbstractContextManager[Any]]

    # -- the retrieval log ------------------------------------------------------------------------

    def _rows(self, sql: str, args: Any = ()) -> list[tuple[Any, ...]]:
        with self.connection() as conn:
            rows: list[tuple[Any, ...]] = conn.execute(sql, args).fetchall()
        return rows

    def logged_rows(self, limit: int, since: str | None = None, query: str | None = None) -> list[tuple[Any, ...]]:
        sql = ("SELECT a.seq, a.ts, l.request, l.client, l.context, l.hits FROM audit a JOIN retrieval_log l"
               " ON l.seq = a.seq WHERE a.action = 'retrieval'")
        args: list[Any] = []
        if since:
            sql += " AND a.ts >= %s"
            args.append(since)
        if query is not None:
            sql += f" AND {_QUERY.format(p='l.')} = %s"
            args.append(query)
        return self._rows(sql + " ORDER BY a.seq DESC LIMIT %s", [*args, limit])

    def access_rows(self, entry_id: str, needle: str, limit: int) -> list[tuple[Any, ...]]:
        return self._rows(
            f"SELECT l.seq, a.ts, {_QUERY.format(p='l.')}, l.client, h.n,"
            " CASE WHEN jsonb_typeof(h.value -> 1) = 'number' THEN (h.value ->> 1)::float8 END, l.context"
            f" FROM retrieval_log l JOIN audit a ON a.seq = l.seq CROSS JOIN LATERAL"
            f" jsonb_array_elements({_HITS.format(p='l.')}) WITH ORDINALITY AS h(value, n)"
            " WHERE strpos(l.hits, %s) > 0 AND h.value ->> 0 = %s ORDER BY l.seq DESC, h.n LIMIT %s",
            (needle, entry_id, limit))

    def retrieval_count_rows(self, wing: str | None = None, since: str | None = None) -> list[tuple[Any, ...]]:
        when = " AND a.ts >= %s" if since else ""
        sql = (
            "WITH searched AS (SELECT j.value AS wing, count(*) AS n FROM audit a JOIN retrieval_log l ON l.seq = a.seq"
            f"   CROSS JOIN LATERAL jsonb_array_elements_text({_WINGS}) AS j(value)"
            f"   WHERE a.action = 'retrieval'{when} GROUP BY j.value),"
            " hit AS (SELECT h.value ->> 0 AS entry_id, count(DISTINCT l.seq) AS n FROM retrieval_log l"
            + (" JOIN audit a ON a.seq = l.seq" if since else "")
            + f"   CROSS JOIN LATERAL jsonb_array_elements({_HITS.format(p='l.')}) AS h(value)"
            + (" WHERE a.ts >= %s" if since else "") + " GROUP BY 1)"
            " SELECT e.id, e.wing, e.type, e.title, coalesce(s.n, 0), coalesce(h.n, 0) FROM entries e"
            " LEFT JOIN searched s ON s.wing = e.wing LEFT JOIN hit h ON h.entry_id = e.id"
            f" WHERE e.status != 'deprecated' AND {visible('e')}"
        )
        args: tuple[Any, ...] = ((since, since) if since else ()) + ((wing,) if wing else ())
        rows = self._rows(sql + (" AND e.wing = %s" if wing else "") + " ORDER BY e.wing, e.rowid", args)
        return [(*r[:4], int(r[4]), int(r[5])) for r in rows]

    def entry_statuses(self, ids: list[str]) -> dict[str, str]:
        return dict(self._rows("SELECT id, status FROM entries WHERE id = ANY(%s)", (list(ids),))) if ids else {}

    # -- golden queries ---------------------------------------------------------------------------

    def golden_insert(self, query: str, expect: str, active_wing: str, within: int, created_at: str) -> int:
        from memlens.errors import ValidationError

        with self.connection() as conn, conn.transaction():
            row = conn.execute(
                "INSERT INTO golden(query, expect, active_wing, within, created_at) VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (query, expect, active_wing) DO NOTHING RETURNING id",
                (query, expect, active_wing, within, created_at)).fetchone()
            if row is None:
                old = conn.execute("SELECT id FROM golden WHERE query = %s AND expect = %s AND active_wing = %s",
                                   (query, expect, active_wing)).fetchone()
                raise ValidationError(f"golden query {old[0] if old else '?'} already expects {expect!r} for {query!r}")
            return int(row[0])

    def golden_rows(self) -> list[tuple[Any, ...]]:
        return [(int(i), *rest) for i, *rest in
                self._rows("SELECT id, query, expect, active_wing, within, created_at FROM golden ORDER BY id")]

    def golden_delete(self, golden_id: int) -> bool:
        with self.connection() as conn, conn.transaction():
            return bool(conn.execute("DELETE FROM golden WHERE id = %s", (golden_id,)).rowcount > 0)

    # -- freshness --------------------------------------------------------------------------------

    def vector_stamps(self, ids: list[str]) -> list[tuple[Any, ...]]:
        return self._rows("SELECT id, title, text, content_hash, model FROM entries WHERE id = ANY(%s)", (list(ids),))

    def stamp_rows(self, wing: str | None = None) -> list[tuple[Any, ...]]:
        sql = f"SELECT rowid, id, wing, title, text, content_hash, model FROM entries WHERE {visible()}"
        return [(int(r[0]), *r[1:]) for r in
                self._rows(sql + (" AND wing = %s" if wing else "") + " ORDER BY rowid", (wing,) if wing else ())]

    def rewrite_vectors(self, rows: list[tuple[int, str]], blobs: list[bytes], hashes: list[str], model: str) -> None:
        """One transaction: the new vectors, what they were made from, one ``reembed`` audit row, the generations."""
        from memlens.store.postgres.writer import vector_value

        with self.write() as writer:  # type: ignore[attr-defined]
            vecs = [vector_value(np.frombuffer(b, dtype="<f4")) for b in blobs]
            with writer.conn.cursor() as cur:
                cur.executemany("UPDATE entries_vec SET embedding = %s, usable = %s WHERE rowid = %s",
                                [(v, ok, rowid) for (rowid, _), (v, ok) in zip(rows, vecs)])
                cur.executemany("UPDATE entries SET content_hash = %s, model = %s WHERE rowid = %s",
                                [(h, model, rowid) for (rowid, _), h in zip(rows, hashes)])
            seq = writer.audit("reembed", None, None, None, None, {"entries": len(rows), "model": model})
            writer.bump({w for _, w in rows}, seq)

    # -- a change that is never written ------------------------------------------------------------

    def on_connection(self, conn: Any) -> Any:
        """A copy of this store whose every call runs on ``conn`` (a preview's held transaction), with its own meta."""
        clone = copy.copy(self)
        clone._conns = Held(conn)  # type: ignore[attr-defined]
        clone._meta = dict(self._meta)  # type: ignore[attr-defined]
        clone.__dict__.pop("_answers_local", None)
        return clone

    @contextmanager
    def rolled_back(self) -> Iterator[Any]:
        """A copy of this store on one connection inside a transaction that is always rolled back: nothing it writes
        is ever committed (nor any NOTIFY sent). It holds the write lock from the start, as SQLite's preview does."""
        import psycopg

        from memlens.store.postgres.schema import WRITE_LOCK

        with self.connection() as conn:
            with conn.transaction() as tx:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                yield self.on_connection(conn)
                raise psycopg.Rollback(tx)
