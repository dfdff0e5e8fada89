"""The working-memory tables (``tasks``, ``blockers``) as rows, for ``memlens.working``.

Rows are returned as stored: a task as ``TASK_COLUMNS``, a blocker as
``BLOCKER_COLUMNS`` (prefixed by its ``id`` where the caller needs to change
it). Timestamps are fixed-width UTC text, so text order is time order; ties
between equal timestamps are broken by ``seq`` (tasks) or ``id`` (blockers).
Writes happen only through a ``Writer`` (its ``tasks``), inside its transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TASK_COLUMNS = ("task_id", "intent", "summary", "outcome", "completed_at", "requires_context", "validation_report")
BLOCKER_COLUMNS = ("task_id", "reason", "blocked_at", "resolved_at", "resolution")
_TASK = ", ".join(TASK_COLUMNS)
_BLOCKER = ", ".join(BLOCKER_COLUMNS)

Row = tuple[Any, ...]


def _one(cursor: Any) -> Row | None:
    """The cursor's next row (``conn`` is untyped, so its rows come back as ``Any``)."""
    row: Row | None = cursor.fetchone()
    return row


def _all(cursor: Any) -> list[Row]:
    rows: list[Row] = cursor.fetchall()
    return rows


class SqliteTaskRows:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    # -- reads ----------------------------------------------------------------------------------

    def task(self, task_id: str) -> Row | None:
        return _one(self.conn.execute(f"SELECT {_TASK} FROM tasks WHERE task_id = ?", (task_id,)))

    def task_count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM tasks").fetchone()[0])

    def is_empty(self) -> bool:
        conn = self.conn
        return conn.execute("SELECT 1 FROM tasks LIMIT 1").fetchone() is None and (
            conn.execute("SELECT 1 FROM blockers LIMIT 1").fetchone() is None
        )

    def recent_tasks(self, n: int) -> list[Row]:
        """The ``n`` latest completed tasks, oldest first."""
        rows = self.conn.execute(
            f"SELECT {_TASK} FROM tasks ORDER BY completed_at DESC, seq DESC LIMIT ?", (n,)
        ).fetchall()
        return list(reversed(rows))

    def all_tasks(self) -> list[Row]:
        return _all(self.conn.execute(f"SELECT {_TASK} FROM tasks ORDER BY completed_at, seq"))

    def blockers(self, active_only: bool) -> list[Row]:
        where = " WHERE resolved_at IS NULL" if active_only else ""
        return _all(self.conn.execute(f"SELECT {_BLOCKER} FROM blockers{where} ORDER BY blocked_at, id"))

    def active_task_ids(self, limit: int) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT task_id FROM blockers WHERE resolved_at IS NULL ORDER BY blocked_at, id LIMIT ?", (limit,)
        )]

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one snapshot (a read transaction, unless one is already open)."""
        conn = self.conn
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN")
        try:
            yield
        finally:
            conn.execute("COMMIT")

    def active_blocker(self, task_id: str) -> Row | None:
        """``(id, *BLOCKER_COLUMNS)`` of the task's active blocker."""
        return _one(self.conn.execute(
            f"SELECT id, {_BLOCKER} FROM blockers WHERE task_id = ? AND resolved_at IS NULL", (task_id,)
        ))

    def blocker_at(self, task_id: str, blocked_at: str) -> Row | None:
        """``(id, *BLOCKER_COLUMNS)`` of the task's blocker set at ``blocked_at``."""
        return _one(self.conn.execute(
            f"SELECT id, {_BLOCKER} FROM blockers WHERE task_id = ? AND blocked_at = ?", (task_id, blocked_at)
        ))

    def other_active(self, task_id: str, exclude: int | None) -> Row | None:
        """``(id, blocked_at)`` of an active blocker of the task other than ``exclude``."""
        return _one(self.conn.execute(
            "SELECT id, blocked_at FROM blockers WHERE task_id = ? AND resolved_at IS NULL AND id IS NOT ?",
            (task_id, exclude),
        ))

    def tasks_beyond(self, keep: int) -> list[Row]:
        """The tasks older than the newest ``keep``."""
        return _all(self.conn.execute(
            f"SELECT {_TASK} FROM tasks ORDER BY completed_at DESC, seq DESC LIMIT -1 OFFSET ?", (keep,)
        ))

    def resolved_beyond(self, keep: int) -> list[Row]:
        """``(id, *BLOCKER_COLUMNS)`` of the resolved blockers older than the newest ``keep``."""
        return _all(self.conn.execute(
            f"SELECT id, {_BLOCKER} FROM blockers WHERE resolved_at IS NOT NULL "
            "ORDER BY resolved_at DESC, id DESC LIMIT -1 OFFSET ?",
            (keep,),
        ))

    # -- writes (inside a Writer's transaction) ---------------------------------------------------

    def put_task(self, values: Row, seq: int) -> None:
        """Insert or replace a task: ``values`` in ``TASK_COLUMNS`` order, ``seq`` the audit row of the write."""
        self.conn.execute(
            f"INSERT OR REPLACE INTO tasks({_TASK}, seq) VALUES ({', '.join('?' * (len(TASK_COLUMNS) + 1))})",
            (*values, seq),
        )

    def delete_task(self, task_id: str) -> None:
        self.conn.execute("DELETE FROM tasks WHERE task_id = ?", (task_id,))

    def insert_blocker(self, values: Row) -> None:
        self.conn.execute(f"INSERT INTO blockers({_BLOCKER}) VALUES ({', '.join('?' * len(BLOCKER_COLUMNS))})", values)

    def update_blocker(self, rowid: int, reason: str, resolved_at: str | None, resolution: str | None) -> None:
        self.conn.execute(
            "UPDATE blockers SET reason = ?, resolved_at = ?, resolution = ? WHERE id = ?",
            (reason, resolved_at, resolution, rowid),
        )

    def resolve_blocker(self, rowid: int, resolved_at: str, resolution: str) -> None:
        self.conn.execute("UPDATE blockers SET resolved_at = ?, resolution = ? WHERE id = ?", (resolved_at, resolution, rowid))

    def delete_blocker(self, rowid: int) -> None:
        self.conn.execute("DELETE FROM blockers WHERE id = ?", (rowid,))
