"""The answer log's tables on PostgreSQL (``memlens.store.answers_sql`` is the SQLite side, same methods)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from memlens.store.answers_sql import ANSWER_COLUMNS
from memlens.store.postgres.reads import visible


class PgAnswers:
    connection: Callable[[], AbstractContextManager[Any]]

    def _local(self) -> threading.local:
        return self.__dict__.setdefault("_answers_local", threading.local())  # type: ignore[no-any-return]

    def note_retrieval(self, seq: int, detail: str) -> None:
        """Remember the retrieval row this thread just logged (SQLite's ``last_insert_rowid()``)."""
        self._local().last = (int(seq), detail)

    def last_retrieval(self) -> tuple[int, Any] | None:
        last: tuple[int, Any] | None = getattr(self._local(), "last", None)
        return last

    def record_answer(self, values: tuple[Any, ...], cited: list[str], invented: list[str], keep: int) -> int:
        with self.connection() as conn, conn.transaction():
            answer_id = int(conn.execute(
                "INSERT INTO answers(ts, question, model, complete, error, retrieval_seq, retrieval)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id", values).fetchone()[0])
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO answer_citations(answer_id, entry_id, valid) VALUES (%s, %s, %s) "
                                "ON CONFLICT DO NOTHING",
                                [(answer_id, i, 1) for i in cited] + [(answer_id, i, 0) for i in invented])
            old = conn.execute("SELECT id FROM answers ORDER BY id DESC LIMIT 1 OFFSET %s", (keep,)).fetchone()
            if old is not None:
                conn.execute("DELETE FROM answer_citations WHERE answer_id <= %s", (old[0],))
                conn.execute("DELETE FROM answers WHERE id <= %s", (old[0],))
        return answer_id

    def answer_rows(self, limit: int) -> list[tuple[Any, ...]]:
        with self.connection() as conn:
            rows: list[tuple[Any, ...]] = conn.execute(
                f"SELECT {ANSWER_COLUMNS} FROM answers ORDER BY id DESC LIMIT %s", (limit,)).fetchall()
        return rows

    def answer_citations(self, answer_id: int) -> list[tuple[str, int]]:
        with self.connection() as conn:
            rows: list[tuple[str, int]] = conn.execute(
                "SELECT entry_id, valid FROM answer_citations WHERE answer_id = %s ORDER BY n", (answer_id,)).fetchall()
        return rows

    def cited_rows(self, limit: int) -> list[tuple[Any, ...]]:
        with self.connection() as conn:
            rows: list[tuple[Any, ...]] = conn.execute(
                "SELECT c.entry_id, count(*) AS n, max(a.ts) AS last, "
                f"(SELECT title FROM entries e WHERE e.id = c.entry_id AND {visible('e')}) "
                "FROM answer_citations c JOIN answers a ON a.id = c.answer_id WHERE c.valid = 1 "
                "GROUP BY c.entry_id ORDER BY n DESC, last DESC, c.entry_id LIMIT %s", (limit,)).fetchall()
        return rows

    def answer_count(self) -> int:
        with self.connection() as conn:
            return int(conn.execute("SELECT count(*) FROM answers").fetchone()[0])
