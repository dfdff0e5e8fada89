"""The audit and the retrieval log on SQLite: history per entry, the write a cache saw, one row per retrieval.

``SqliteAuditLog`` is a mixin of ``SqliteStore`` (``conn``: this thread's connection, ``path``,
``_busy_timeout_ms``, ``_pruned``); the PostgreSQL store has the same methods.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.compact_json import dumps
from memlens.models import format_ts, utcnow
from memlens.store import corruption, retention
from memlens.store.replay_sql import LOG_INSERT
from memlens.store.rows import json_object
from memlens.store.staging import visible

if TYPE_CHECKING:
    from memlens.store.speed import SpeedLayer

# the entry writes (and review marks) of every entry an agent wrote to, oldest first; "agent" is decided again on the
# decoded detail (``memlens.review.inbox``), the text test only narrows the rows read
REVIEW_ROWS = (
    "SELECT seq, ts, action, entry_id, wing, before, after, detail FROM audit"
    " WHERE entry_id IN (SELECT entry_id FROM audit WHERE action IN ('add', 'update', 'delete')"
    "                    AND instr(detail, '\"client\"') > 0)"
    " AND action IN ('add', 'update', 'delete', 'review', 'import') AND {visible} ORDER BY seq"
)


class SqliteAuditLog:
    conn: Any
    path: Path
    _busy_timeout_ms: int
    _pruned: bool

    if TYPE_CHECKING:  # the host's speed layer: its stamps count the retrieval log's changes apart (``log_write``)
        @property
        def speed(self) -> SpeedLayer | None: ...

    def audit(self, entry_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        sql = f"SELECT seq, ts, action, entry_id, wing, before, after, detail FROM audit WHERE {visible()}"
        args: tuple[Any, ...] = ()
        if entry_id:
            sql += " AND entry_id = ?"
            args = (entry_id,)
        sql += " ORDER BY seq DESC LIMIT ?"
        out = []
        for seq, ts, action, eid, wing, before, after, detail in self.conn.execute(sql, args + (limit,)):
            row = {"seq": seq, "ts": ts, "action": action, "entry_id": eid, "wing": wing}
            for name, value in (("before", before), ("after", after), ("detail", detail)):
                row[name] = json_object(value) if value else None
                if value and row[name] is None:  # a hand-edited value: say so rather than fail the history
                    row.setdefault("damaged", []).append(name)
            out.append(row)
        return out

    def review_rows(self) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self.conn.execute(REVIEW_ROWS.format(visible=visible()))]

    def last_write(self, wings: list[str]) -> dict[str, Any] | None:
        clause = ",".join("?" * len(wings))
        row = self.conn.execute(
            f"SELECT a.seq, a.ts, a.action, a.entry_id, a.wing FROM wings w JOIN audit a ON a.seq = w.last_write_seq "
            f"WHERE w.wing IN ({clause}) ORDER BY a.seq DESC LIMIT 1",
            wings,
        ).fetchone()
        if row is None:
            return None
        seq, ts, action, entry_id, wing = row
        return {"seq": seq, "ts": ts, "action": action, "entry_id": entry_id, "wing": wing}

    def log_retrieval(self, active_wing: str | None, metrics: dict[str, Any], *, max_rows: int,
                      max_age_days: float, record: Callable[[], tuple[Any, ...] | None] | None = None) -> None:
        """One ``retrieval`` audit row; never fails a retrieval (a read-only or busy store skips the row).

        ``record()``: the ``retrieval_log`` row (request, client, context, hits) of what replay needs, written in the
        same transaction as the audit row.
        """
        if corruption.seen(self.path):
            return
        conn = self.conn
        own = False
        speed = self.speed
        with nullcontext() if speed is None else speed.stamps.log_write(conn):  # no search reads these rows
            try:
                replay_row = record() if record is not None else None
                # a search must never wait for a writer: give up on the log row after 50 ms
                conn.execute("PRAGMA busy_timeout = 50")
                own = replay_row is not None and not conn.in_transaction  # one transaction: the audit row and the record
                if own:
                    conn.execute("BEGIN")
                cur = conn.execute(
                    "INSERT INTO audit(ts, action, entry_id, wing, before, after, detail)"
                    " VALUES (?, 'retrieval', NULL, ?, NULL, NULL, ?)",
                    (format_ts(utcnow()), active_wing, dumps(metrics)),
                )
                seq = int(cur.lastrowid)
                if replay_row is not None:
                    conn.execute(LOG_INSERT, (seq, *replay_row))
                if own:
                    conn.execute("COMMIT")
                if retention.due(seq, not self._pruned):
                    self._pruned = True
                    retention.prune_retrievals(conn, max_rows, max_age_days)
            except Exception:
                if own and conn.in_transaction:
                    conn.execute("ROLLBACK")
            finally:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")

    def retrievals(self, limit: int) -> list[dict[str, Any]]:
        """The newest logged retrievals; a row whose metrics do not decode (a hand edit) is left out."""
        rows = self.conn.execute(
            "SELECT seq, ts, detail FROM audit WHERE action = 'retrieval' ORDER BY seq DESC LIMIT ?", (limit,)
        ).fetchall()
        out = []
        for seq, ts, detail in rows:
            metrics = json_object(detail)
            if metrics is not None and isinstance(metrics.get("latency_ms", {}), dict):
                out.append({"seq": seq, "ts": ts, **metrics})
        return out
