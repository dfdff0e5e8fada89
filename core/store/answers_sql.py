"""The answer log's tables (``answers``, ``answer_citations``) on SQLite: the SQL behind ``memlens.assist.log``.

``SqliteAnswers`` is a mixin of ``SqliteStore`` (``conn``: this thread's connection, ``path``); the
PostgreSQL store has the same methods (``memlens.store.postgres.answers``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.store.staging import visible

if TYPE_CHECKING:
    from memlens.store.logspool import LogSpool

ANSWER_COLUMNS = "id, ts, question, model, complete, error, retrieval_seq, retrieval"


class SqliteAnswers:
    conn: Any
    path: Path
    _spool: LogSpool | None

    def last_retrieval(self) -> tuple[int, Any] | None:
        """(seq, detail) of the retrieval row this thread logged last (through the store's log spool, written first
        if it waits); without a spool, of this thread's connection's last insert, if that was a retrieval row."""
        spool = self._spool
        logged = spool.last() if spool is not None else None
        if spool is not None and logged is not None:
            spool.drain()
            return None if logged.seq is None else (logged.seq, logged.detail)
        row = self.conn.execute(
            "SELECT seq, detail FROM audit WHERE seq = last_insert_rowid() AND action = 'retrieval'").fetchone()
        return None if row is None else (int(row[0]), row[1])

    def record_answer(self, values: tuple[Any, ...], cited: list[str], invented: list[str], keep: int) -> int:
        """Insert one answer (``ANSWER_COLUMNS`` without ``id``) with its citations; keep the newest ``keep``."""
        from memlens.store import db

        with db.transaction(self.conn, self.path) as conn:
            cur = conn.execute(
                "INSERT INTO answers(ts, question, model, complete, error, retrieval_seq, retrieval)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)", values)
            answer_id = int(cur.lastrowid)
            conn.executemany("INSERT OR IGNORE INTO answer_citations(answer_id, entry_id, valid) VALUES (?, ?, ?)",
                             [(answer_id, i, 1) for i in cited] + [(answer_id, i, 0) for i in invented])
            old = conn.execute("SELECT id FROM answers ORDER BY id DESC LIMIT 1 OFFSET ?", (keep,)).fetchone()
            if old is not None:
                conn.execute("DELETE FROM answer_citations WHERE answer_id <= ?", (old[0],))
                conn.execute("DELETE FROM answers WHERE id <= ?", (old[0],))
        return answer_id

    def answer_rows(self, limit: int) -> list[tuple[Any, ...]]:
        """The newest answers (``ANSWER_COLUMNS``), newest first."""
        rows: list[tuple[Any, ...]] = self.conn.execute(
            f"SELECT {ANSWER_COLUMNS} FROM answers ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return rows

    def answer_citations(self, answer_id: int) -> list[tuple[str, int]]:
        """(entry id, valid) of one answer's citations, in the order recorded."""
        rows: list[tuple[str, int]] = self.conn.execute(
            "SELECT entry_id, valid FROM answer_citations WHERE answer_id = ? ORDER BY rowid", (answer_id,)).fetchall()
        return rows

    def cited_rows(self, limit: int) -> list[tuple[Any, ...]]:
        """(entry id, times cited, last cited, title) of validly cited entries, most cited first."""
        rows: list[tuple[Any, ...]] = self.conn.execute(
            "SELECT c.entry_id, count(*) AS n, max(a.ts) AS last, "
            f"(SELECT title FROM entries e WHERE e.id = c.entry_id AND {visible('e')}) "
            "FROM answer_citations c JOIN answers a ON a.id = c.answer_id WHERE c.valid = 1 "
            "GROUP BY c.entry_id ORDER BY n DESC, last DESC, c.entry_id LIMIT ?", (limit,)).fetchall()
        return rows

    def answer_count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM answers").fetchone()[0])
