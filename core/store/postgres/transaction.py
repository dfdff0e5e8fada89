"""The write transaction of a PostgreSQL store (``PgStore.write``): one round trip for a write that reads nothing
back, the write lock held only while the server runs it, and a return only once the commit is on disk."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from memlens.errors import StoreError, id_taken
from memlens.store.postgres import connect, schema
from memlens.store.postgres.writer import PgWriter


def _gone(conn: Any) -> bool:
    """Whether the connection is known dead: what the server sent is read first (no wait), so a backend that was
    terminated shows as such before anything more is sent to it."""
    import psycopg

    try:
        conn.pgconn.consume_input()
    except psycopg.OperationalError:
        return True
    return bool(conn.broken or conn.pgconn.status != psycopg.pq.ConnStatus.OK)


class PgTransactions:
    """``write()`` and ``check_writable()`` over the host's ``connection()`` (``PgStore``)."""

    label: str
    _flush: str | None  # ``_durable``'s statement once asked ("" for none)
    connection: Callable[[], AbstractContextManager[Any]]
    read_only: Callable[[], bool]
    entry_states: Callable[[list[str]], tuple[str, bool] | None]

    if TYPE_CHECKING:
        @property
        def model_id(self) -> str: ...

    def check_writable(self) -> None:
        if self.read_only():
            raise StoreError(f"store {self.label} is read-only (a read-only connection or standby server)")

    @contextmanager
    def write(self) -> Iterator[PgWriter]:
        """One transaction under the store's write lock: everything the block wrote commits, or nothing.

        Nothing is sent while the block runs until it must be (``PgWriter``): a statement whose result the block
        reads opens the transaction (in pipeline mode: BEGIN, the lock, what was held back, then the statement);
        else the end of the block sends everything at once with the COMMIT and a flush of the WAL (``durable``)
        right behind, and a block that only adds an entry is ONE statement that takes the lock and commits by
        itself. Either way the lock is held only while the server runs the statements, never while it waits for
        this process. The commit does not wait for the disk under the lock (``synchronous_commit = off`` for
        this transaction); the flush after it does, outside the lock, so concurrent writers share one flush, and
        the block returns only once the commit is on disk. A block that ends normally after its transaction
        failed (an error inside it was caught) commits nothing: that is an error here too.
        """
        import psycopg

        with self.connection() as conn:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:  # inside a preview's transaction
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (schema.WRITE_LOCK,))
                    yield PgWriter(conn, self.model_id)
                return
            flush = self._durable(conn)
            writer: PgWriter | None = None
            try:
                with PgWriter(conn, self.model_id, held=True, relaxed="off" if flush else None) as writer:
                    yield writer
                    failed = writer.synced.failed if writer.synced is not None else None
                    if failed is not None or _gone(conn):  # the block went on after a statement of it failed
                        raise StoreError(f"lost the connection to {self.label} before the write committed; nothing was "
                                         f"written; {connect.after_lost()}" if failed is None or connect.lost(failed)
                                         else f"a statement of this write to {self.label} failed ({connect.first_line(failed)}); "
                                         "nothing was written")
                    done = conn.execute("COMMIT") if writer.finish(then=flush) else None
                    if flush and writer.sent and not writer.flushed:
                        conn.execute(flush)
            except psycopg.errors.UniqueViolation as exc:
                self._end_failed(conn)
                if writer is not None and writer.adding and exc.diag.constraint_name == "entries_id_key":
                    raise self._taken(writer.adding) from None
                raise
            except BaseException:
                self._end_failed(conn)
                raise
            if done is not None and done.statusmessage != "COMMIT":
                raise StoreError(f"a statement of this write to {self.label} failed; nothing was written")

    def _durable(self, conn: Any) -> str | None:
        """The statement that waits until the WAL is on disk up to now (None: this server has none memlens may
        run; then each commit waits for it itself, as PostgreSQL does by default). Asked once per store."""
        if self._flush is None:
            row = conn.execute("SELECT to_regprocedure('pg_logical_emit_message(boolean,text,text,boolean)'), "
                               "to_regprocedure('pg_logical_emit_message(boolean,text,text)')").fetchone()
            allowed = [r is not None and conn.execute("SELECT has_function_privilege(%s, 'EXECUTE')", (r,)).fetchone()[0]
                       for r in row]
            # PostgreSQL 17+: a message flushed at once; before: a message in its own transaction, whose commit flushes
            self._flush = ("SELECT pg_logical_emit_message(false, 'memlens', '', true)" if allowed[0] else
                           "SELECT pg_logical_emit_message(true, 'memlens', '')" if allowed[1] else "")
        return self._flush or None

    @staticmethod
    def _end_failed(conn: Any) -> None:
        """Roll back what a failed write left open (nothing when the connection itself is gone)."""
        import psycopg

        if not conn.broken and conn.info.transaction_status in (psycopg.pq.TransactionStatus.INTRANS,
                                                                 psycopg.pq.TransactionStatus.INERROR):
            conn.execute("ROLLBACK")

    def _taken(self, ids: list[str]) -> Exception:
        """The error for a write whose new id was taken meanwhile: which one, and by what."""
        hit = self.entry_states(ids)
        return id_taken(*hit) if hit else StoreError(f"store {self.label}: an entry id of this write is already used")
