"""The audit and the retrieval log on SQLite: history per entry, the write a cache saw, one row per retrieval.

``SqliteAuditLog`` is a mixin of ``SqliteStore`` (``conn``: this thread's connection, ``path``,
``_busy_timeout_ms``, ``_pruned``, ``_spool``; ``close_thread``); the PostgreSQL store has the same methods.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.compact_json import dumps
from memlens.models import format_ts, utcnow
from memlens.store import corruption, db, retention
from memlens.store.logspool import Logged, LogSpool
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
    _spool: LogSpool | None

    if TYPE_CHECKING:
        def close_thread(self) -> None: ...  # the host's: this thread's connection closed (the spool's writer ends)

    if TYPE_CHECKING:  # the host's speed layer: its stamps count the retrieval log's changes apart (``log_write``)
        @property
        def speed(self) -> SpeedLayer | None: ...

    def audit(self, entry_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        self.settle_log()
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
        same transaction as the audit row. Both rows are made here, from the bundle as the search returns it; they
        are written by the store's log spool (``memlens.store.logspool``) off the search's path, or at once inside
        a transaction already open on this thread's connection (the row joins it) or on a store without a spool.
        """
        if corruption.seen(self.path):
            return
        try:
            row = Logged(format_ts(utcnow()), active_wing, dumps(metrics), record() if record is not None else None,
                         (max_rows, max_age_days))
        except Exception:
            return
        spool = self._log_spool()
        if spool is not None and not self.conn.in_transaction:
            spool.put(row)
            return
        if spool is not None:
            spool.drain()  # the rows before it first
            spool.mark(row)
        self.write_logged([row])

    def _log_spool(self) -> LogSpool | None:
        """The store's spool, made on its first search (none without the speed layer: a preview's copy on one
        connection writes its rows inside the preview's transaction, which is never committed)."""
        spool = self._spool
        if spool is None and self.speed is not None:
            spool = self._spool = LogSpool(self)
        return spool

    def settle_log(self, *, patient: bool = False) -> None:
        """Write the rows of this process's searches still waiting in the spool: before a read of the log or of the
        audit, and before a write, so that order and this process's view hold. The lock is waited for 50 ms (a
        batch that cannot be written then is skipped, as in ``write_logged``); ``patient``: as long as a write."""
        if self._spool is not None:
            self._spool.drain(patient=patient)

    def write_logged(self, rows: list[Logged], *, patient: bool = False) -> bool:
        """Rows of the retrieval log, in one transaction (or in the one open on this connection). ``patient`` (the
        spool's writer thread, which no search waits for): wait for a busy store as long as any write does; else
        give up after 50 ms, as a search must never wait for a writer. A batch that fails is skipped whole; False
        when, not ``patient`` and in a transaction of its own, it was not written only for want of the lock (held
        by another writer, of this process or another): the spool keeps it then."""
        if corruption.seen(self.path):
            return True
        try:
            conn = self.conn
        except Exception:  # closed meanwhile, or the file is gone: the rows are skipped
            return True
        own = not conn.in_transaction
        speed = self.speed
        log_write = nullcontext() if speed is None else speed.stamps.log_write(conn)  # no search reads these rows
        with log_write, ExitStack() as held:
            committed = False
            try:
                if not patient:
                    conn.execute("PRAGMA busy_timeout = 50")
                if own:  # its turn among this process's writers (``db.write_turn``): a search waits 50 ms for it
                    held.enter_context(db.write_turn(conn, self.path, None if patient else 0.05))
                    conn.execute("BEGIN")
                seqs = []
                for row in rows:
                    cur = conn.execute(
                        "INSERT INTO audit(ts, action, entry_id, wing, before, after, detail)"
                        " VALUES (?, 'retrieval', NULL, ?, NULL, NULL, ?)",
                        (row.ts, row.wing, row.detail),
                    )
                    seqs.append(int(cur.lastrowid))
                    if row.replay is not None:
                        conn.execute(LOG_INSERT, (seqs[-1], *row.replay))
                if own:
                    conn.execute("COMMIT")
                committed = True  # (a prune that fails below leaves the rows written)
                for row, seq in zip(rows, seqs):
                    row.seq = seq
                if any(retention.due(seq, not self._pruned) for seq in seqs):
                    self._pruned = True
                    retention.prune_retrievals(conn, *rows[-1].keep)
            except Exception as exc:
                if own and conn.in_transaction:
                    conn.execute("ROLLBACK")
                return committed or patient or not own or not db.is_busy(exc)
            finally:
                if not patient:
                    conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        return True

    def retrievals(self, limit: int) -> list[dict[str, Any]]:
        """The newest logged retrievals; a row whose metrics do not decode (a hand edit) is left out."""
        self.settle_log()
        rows = self.conn.execute(
            "SELECT seq, ts, detail FROM audit WHERE action = 'retrieval' ORDER BY seq DESC LIMIT ?", (limit,)
        ).fetchall()
        out = []
        for seq, ts, detail in rows:
            metrics = json_object(detail)
            if metrics is not None and isinstance(metrics.get("latency_ms", {}), dict):
                out.append({"seq": seq, "ts": ts, **metrics})
        return out
