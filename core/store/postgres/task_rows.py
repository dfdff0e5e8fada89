"""The working-memory tables (``tasks``, ``blockers``) on PostgreSQL (``memlens.store.task_rows`` is the SQLite side,
same methods).

Apart from the writer because they serve readers too: a ``PgWriter``'s ``tasks`` runs them on the write
transaction's connection (the only place their writes happen), ``PgStore.tasks()`` on one the store gives for reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from memlens.store.postgres.compat import BLOCKER_COLUMNS, TASK_COLUMNS


class PgTaskRows:
    """The working-memory tables (completed tasks, blockers) as rows (``TASK_COLUMNS`` / ``BLOCKER_COLUMNS``).

    ``connection`` gives the connection to use (a context manager): the write transaction's own inside a
    ``Writer``, else one from the store's pool; ``snapshot()`` pins one for reads that must agree.
    """

    def __init__(self, connection: Callable[[], AbstractContextManager[Any]]) -> None:
        self._connection = connection
        self._pinned: Any = None

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        if self._pinned is not None:
            yield self._pinned
        else:
            with self._connection() as conn:
                yield conn

    def _all(self, sql: str, args: Any = ()) -> list[tuple[Any, ...]]:
        with self._conn() as conn:
            rows: list[tuple[Any, ...]] = conn.execute(sql, args).fetchall()
        return rows

    def _one(self, sql: str, args: Any = ()) -> tuple[Any, ...] | None:
        with self._conn() as conn:
            row: tuple[Any, ...] | None = conn.execute(sql, args).fetchone()
        return row

    def _run(self, sql: str, args: Any = ()) -> None:
        with self._conn() as conn:
            conn.execute(sql, args)

    # -- reads ----------------------------------------------------------------------------------

    def task(self, task_id: str) -> tuple[Any, ...] | None:
        return self._one(f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = %s", (task_id,))

    def task_count(self) -> int:
        return int(self._one("SELECT count(*) FROM tasks")[0])  # type: ignore[index]

    def is_empty(self) -> bool:
        return self._one("SELECT 1 FROM tasks UNION ALL SELECT 1 FROM blockers LIMIT 1") is None

    def recent_tasks(self, n: int) -> list[tuple[Any, ...]]:
        """The ``n`` latest completed tasks, oldest first."""
        rows = self._all(f"SELECT {TASK_COLUMNS} FROM tasks ORDER BY completed_at DESC, seq DESC LIMIT %s", (n,))
        return list(reversed(rows))

    def all_tasks(self) -> list[tuple[Any, ...]]:
        return self._all(f"SELECT {TASK_COLUMNS} FROM tasks ORDER BY completed_at, seq")

    def blockers(self, active_only: bool) -> list[tuple[Any, ...]]:
        where = " WHERE resolved_at IS NULL" if active_only else ""
        return self._all(f"SELECT {BLOCKER_COLUMNS} FROM blockers{where} ORDER BY blocked_at, id")

    def active_task_ids(self, limit: int) -> list[str]:
        return [r[0] for r in self._all(
            "SELECT task_id FROM blockers WHERE resolved_at IS NULL ORDER BY blocked_at, id LIMIT %s", (limit,))]

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one snapshot (a repeatable-read transaction, unless one is already open)."""
        if self._pinned is not None:
            yield
            return
        with self._conn() as conn:
            if conn.info.transaction_status != 0:  # already inside the caller's transaction
                yield
                return
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                self._pinned = conn
                try:
                    yield
                finally:
                    self._pinned = None

    def active_blocker(self, task_id: str) -> tuple[Any, ...] | None:
        return self._one(f"SELECT id, {BLOCKER_COLUMNS} FROM blockers WHERE task_id = %s AND resolved_at IS NULL", (task_id,))

    def blocker_at(self, task_id: str, blocked_at: str) -> tuple[Any, ...] | None:
        return self._one(f"SELECT id, {BLOCKER_COLUMNS} FROM blockers WHERE task_id = %s AND blocked_at = %s",
                         (task_id, blocked_at))

    def other_active(self, task_id: str, exclude: int | None) -> tuple[Any, ...] | None:
        return self._one("SELECT id, blocked_at FROM blockers WHERE task_id = %s AND resolved_at IS NULL "
                         "AND id IS DISTINCT FROM %s", (task_id, exclude))

    def tasks_beyond(self, keep: int) -> list[tuple[Any, ...]]:
        return self._all(f"SELECT {TASK_COLUMNS} FROM tasks ORDER BY completed_at DESC, seq DESC OFFSET %s", (keep,))

    def resolved_beyond(self, keep: int) -> list[tuple[Any, ...]]:
        return self._all(f"SELECT id, {BLOCKER_COLUMNS} FROM blockers WHERE resolved_at IS NOT NULL "
                         "ORDER BY resolved_at DESC, id DESC OFFSET %s", (keep,))

    # -- writes (inside a Writer's transaction) ---------------------------------------------------

    def put_task(self, values: tuple[Any, ...], seq: int) -> None:
        self._run(
            f"INSERT INTO tasks({TASK_COLUMNS}, seq) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (task_id) DO UPDATE SET "
            "intent = excluded.intent, summary = excluded.summary, outcome = excluded.outcome, "
            "completed_at = excluded.completed_at, requires_context = excluded.requires_context, "
            "validation_report = excluded.validation_report, seq = excluded.seq",
            (*values, seq),
        )

    def delete_task(self, task_id: str) -> None:
        self._run("DELETE FROM tasks WHERE task_id = %s", (task_id,))

    def insert_blocker(self, values: tuple[Any, ...]) -> None:
        self._run(f"INSERT INTO blockers({BLOCKER_COLUMNS}) VALUES (%s, %s, %s, %s, %s)", values)

    def update_blocker(self, rowid: int, reason: str, resolved_at: str | None, resolution: str | None) -> None:
        self._run("UPDATE blockers SET reason = %s, resolved_at = %s, resolution = %s WHERE id = %s",
                  (reason, resolved_at, resolution, rowid))

    def resolve_blocker(self, rowid: int, resolved_at: str, resolution: str) -> None:
        self._run("UPDATE blockers SET resolved_at = %s, resolution = %s WHERE id = %s", (resolved_at, resolution, rowid))

    def delete_blocker(self, rowid: int) -> None:
        self._run("DELETE FROM blockers WHERE id = %s", (rowid,))
