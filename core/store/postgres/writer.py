"""The write protocol on PostgreSQL: one transaction for the entry row, its vector, the audit row and
the generation bump of every wing written, under one advisory lock.

Every write transaction first takes ``pg_advisory_xact_lock(WRITE_LOCK)``:
writers serialise as they do on SQLite (``BEGIN IMMEDIATE``), so a check made
inside the transaction (the same content already stored, an entry changed
since it was read) still holds when the transaction commits, on any machine.
A bump also sends ``NOTIFY memlens_generations``, delivered at commit, so a
long-lived process that listens hears every write at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

import numpy as np

from memlens.limits import printable
from memlens.models import Entry, format_ts, utcnow
from memlens.store.postgres import oneshot
from memlens.store.postgres.compat import COLUMNS, as_vector, entry_values, row_to_entry, stamp
from memlens.store.postgres.lexical import LEX_COLUMNS, LEX_VALUES, fold_parts, packed
from memlens.store.postgres.reads import visible
from memlens.store.postgres.schema import NOTIFY_CHANNEL, WRITE_LOCK
from memlens.store.postgres.task_rows import PgTaskRows


def _usable(v: np.ndarray) -> bool:
    return bool(np.isfinite(v).all()) and bool(v.any())


def vector_value(vec: np.ndarray | bytes) -> tuple[np.ndarray, bool]:
    """What ``entries_vec`` stores: pgvector refuses NaN and infinities, so a degenerate vector is stored as zeros."""
    v = as_vector(vec)
    ok = _usable(v)
    return (v if ok else np.zeros(v.shape, dtype=np.float32)), ok


def dumps(v: Any) -> str | None:
    return None if v is None else json.dumps(v, ensure_ascii=False)


_AUDIT_COLUMNS = "ts, action, entry_id, wing, before, after, detail, import_id"
# the write lock, and (``relaxed``: 'off', else None) a commit that does not wait for the disk (``PgStore.write``)
LOCK = ("SELECT pg_advisory_xact_lock(%s), "
        "set_config('synchronous_commit', coalesce(%s, current_setting('synchronous_commit')), true)")
# the types of the entry's values (``entry_values``; its postings, ``packed``, are typed by ``LEX_VALUES``) and of an
# audit row's: an INSERT ... SELECT does not take them from the columns as a VALUES list does
_ENTRY_TYPES = ["text"] * 9 + ["float8"] + ["text"] * 6
_AUDIT_TYPES = ["text"] * 7 + ["bigint"]


def _typed(types: list[str]) -> str:
    return ", ".join(f"%s::{t}" for t in types)


_ADD = (  # PgWriter.add, one statement that is its own transaction when sent alone: the lock first (every row is
    # made from ``l``'s, so the ids and the audit seq are drawn under it), then every part (data-modifying WITH parts
    # always run), the bump after the audit row it names
    f"WITH l AS ({LOCK}), "
    f"e AS (INSERT INTO entries({COLUMNS}, content_hash, model, {LEX_COLUMNS}) "
    f"SELECT {_typed(_ENTRY_TYPES)}, {', '.join(LEX_VALUES)} FROM l "
    "RETURNING rowid), "
    "v AS (INSERT INTO entries_vec(rowid, embedding, usable, wing, room, kind, type, status) "
    "SELECT e.rowid, %b, %s, %s, %s, %s, %s, %s FROM e RETURNING rowid), "
    f"a AS (INSERT INTO audit({_AUDIT_COLUMNS}) SELECT {_typed(_AUDIT_TYPES)} FROM l RETURNING seq), "
    "b AS (INSERT INTO wings(wing, generation, last_write_seq) SELECT %s, 1, a.seq FROM a "
    "ON CONFLICT (wing) DO UPDATE SET generation = wings.generation + 1, last_write_seq = excluded.last_write_seq RETURNING 1), "
    f"{fold_parts('(SELECT rowid FROM e)')} "
    "SELECT pg_notify(%s, %s), (SELECT count(*) FROM v), (SELECT count(*) FROM b)"
)


# every parameter of ``_ADD`` typed, in order, for its prepared form (``oneshot``): the lock's key and commit setting,
# the entry's values and postings, the vector's row, the audit row, the bump, the notification
_ADD_TYPES = (["bigint", "text", *_ENTRY_TYPES, "text", "text", "integer", "vector", "boolean", *["text"] * 5, *_AUDIT_TYPES,
               "text", "text", "text"])
ADD_STATEMENT = oneshot.Statement(_ADD, _ADD_TYPES)


def _audit_values(action: str, entry_id: str | None, wing: str | None, before: dict[str, Any] | None,
                  after: dict[str, Any] | None, detail: dict[str, Any] | None, import_id: int | None) -> tuple[Any, ...]:
    return (format_ts(utcnow()), action, entry_id, wing, dumps(before), dumps(after), dumps(printable(stamp(detail))),
            import_id)


class Synced:
    """The write transaction's connection as code outside this module uses it: each ``execute`` (of it or of its
    cursors) first sends what the writer holds back (opening the transaction), then waits for its own result, so
    rows, ``rowcount`` and errors are there when it returns, as outside pipeline mode. ``failed`` keeps the first
    error a statement met (the transaction cannot commit after it)."""

    def __init__(self, conn: Any, writer: PgWriter) -> None:
        self._conn, self._writer = conn, writer
        self.failed: BaseException | None = None

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        with self.watch():
            self._writer.send()
            cur = self._conn.execute(*args, **kwargs)
            self._writer.pipeline.sync()
        return cur

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return _SyncedCursor(self._conn.cursor(*args, **kwargs), self)

    @contextmanager
    def watch(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            self.failed = self.failed or exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _SyncedCursor:
    def __init__(self, cur: Any, conn: Synced) -> None:
        self._cur, self._conn = cur, conn

    def execute(self, *args: Any, **kwargs: Any) -> _SyncedCursor:
        with self._conn.watch():
            self._conn._writer.send()
            self._cur.execute(*args, **kwargs)
            self._conn._writer.pipeline.sync()
        return self

    def executemany(self, *args: Any, **kwargs: Any) -> None:
        with self._conn.watch():
            self._conn._writer.send()
            self._cur.executemany(*args, **kwargs)
            self._conn._writer.pipeline.sync()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cur)

    def __enter__(self) -> _SyncedCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


class PgWriter:
    """One open write transaction (``Store.write()``).

    ``held`` (``PgStore.write``): nothing is sent while the block runs until it must be. A statement whose result
    the block does not read is held back; the first statement that is waited for, or the end of the block, opens
    the transaction (BEGIN and the write lock, in pipeline mode) and sends everything held at once, so the lock is
    taken only when the server can run what follows it without waiting for this process (which may be computing
    the next values, or not even scheduled). A block that only adds one entry sends ONE statement that takes the
    lock itself and is its own transaction (``finish``). Otherwise (``held`` false) statements run at once, in the
    caller's transaction."""

    def __init__(self, conn: Any, model: str, *, held: bool = False, relaxed: str | None = None) -> None:
        self._raw = conn
        self.relaxed = relaxed  # ``LOCK``'s commit setting
        self._held: list[tuple[str, Any]] | None = [] if held else None  # statements not sent yet
        self._alone = False  # the one held statement is a transaction of its own (``_ADD``)
        self._stack = ExitStack()
        self.pipeline: Any = None  # entered when the transaction opens
        self.sent = False  # whether anything was sent (a block that wrote nothing sends nothing)
        self.flushed = False  # whether ``finish`` sent the flush too
        self.synced = Synced(conn, self) if held else None
        self.conn = conn if self.synced is None else self.synced  # what callers get: each statement waited for
        self.model = model
        self.tasks = PgTaskRows(lambda: nullcontext(self.conn))
        self.adding: list[str] = []  # ids ``add`` sent: a unique violation at commit names one of them

    def __enter__(self) -> PgWriter:
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        """Leave the pipeline if the transaction opened one (collecting its results: an error raises here)."""
        return self._stack.__exit__(*exc)

    def _later(self, sql: str, args: Any = None, *, alone: bool = False) -> None:
        """A statement whose result nobody reads: held back (``held``), else run now. ``alone``: it takes the lock
        itself, so it can be the whole transaction."""
        if self._held is None:
            self._raw.execute(sql, args)
        else:
            self._alone = alone and not self._held and self.pipeline is None
            self._held.append((sql, args))

    def send(self) -> None:
        """Open the transaction (a pipeline, BEGIN, the lock) if not yet done, and send what is held back, not
        waiting for the results (the pipeline's next sync collects them)."""
        if self._held is None:
            return
        if self.pipeline is None:
            self.pipeline = self._stack.enter_context(self._raw.pipeline())
            self.sent = True
            self._raw.execute("BEGIN")
            self._raw.execute(LOCK, (WRITE_LOCK, self.relaxed))
        held, self._held = self._held, []
        for sql, args in held:
            self._raw.execute(sql, args)

    def finish(self, then: str | None = None) -> bool:
        """Send the rest of the block's statements; whether a transaction is open for the caller to commit. Not
        when the block wrote nothing, nor when it is one statement that is its own transaction (an ``add``): that
        one is sent with its sync in the same message, so the lock it takes is held only while the server runs it
        and commits, never while the server waits for this process; ``then`` (the flush of the WAL) follows it
        in the same message, after a COMMIT that ends the statement's implicit transaction (``flushed``): one
        round trip (a failed statement skips both, and its error is raised)."""
        if self.pipeline is None and self._held is not None and (not self._held or (self._alone and len(self._held) == 1)):
            if self._held:
                sql, args = self._held[0]
                # the statement commits (the lock goes) before the flush runs
                after = ["COMMIT", then] if then else []
                self.sent = True
                if sql is _ADD:  # in one message (``oneshot``)
                    oneshot.run(self._raw, ADD_STATEMENT, args, after)
                else:
                    with self._raw.pipeline():
                        self._raw.execute(sql, args)
                        for stmt in after:
                            self._raw.execute(stmt)
                self.flushed = bool(then)
            self._held = []
            return False
        self.send()
        return True

    def add(self, entry: Entry, vector: np.ndarray | bytes) -> None:
        """The entry row (with its tokens), its vector, its audit row, its wing's bump and the notification, in ONE
        statement that takes the write lock first (again, at no cost, inside an open transaction): held back and
        not waited for, it is the whole transaction when the block does nothing else (``finish``); a taken id
        fails it at the end (``PgStore.write``)."""
        v, ok = vector_value(vector)
        self.adding.append(entry.id)
        self._later(_ADD, [
            WRITE_LOCK, self.relaxed, *entry_values(entry, self.model), *packed(entry.title, entry.text),
            v, ok, entry.wing, entry.room, entry.kind.value, entry.type.value, entry.status.value,
            *_audit_values("add", entry.id, entry.wing, None, entry.to_record(), None, None),
            entry.wing, NOTIFY_CHANNEL, json.dumps([entry.wing]),
        ], alone=True)

    def _one(self, sql: str, args: Any = ()) -> tuple[Any, ...] | None:
        with self.synced.watch() if self.synced is not None else nullcontext():
            self.send()
            row: tuple[Any, ...] | None = self._raw.execute(sql, args).fetchone()
        return row

    def insert(self, entry: Entry, vector: np.ndarray | bytes, *, import_id: int | None = None) -> int:
        """The entry row and its vector in one statement (one round trip while the write lock is held)."""
        v, ok = vector_value(vector)
        row = self._one(
            f"WITH e AS (INSERT INTO entries({COLUMNS}, content_hash, model, import_id, {LEX_COLUMNS}) "
            f"VALUES ({', '.join(['%s'] * 17)}, {', '.join(LEX_VALUES)}) RETURNING rowid), "
            f"{fold_parts('(SELECT rowid FROM e)')} "
            "INSERT INTO entries_vec(rowid, embedding, usable, wing, room, kind, type, status, import_id) "
            "SELECT e.rowid, %s, %s, %s, %s, %s, %s, %s, %s FROM e RETURNING rowid",
            [*entry_values(entry, self.model), import_id, *packed(entry.title, entry.text),
             v, ok, entry.wing, entry.room, entry.kind.value, entry.type.value, entry.status.value, import_id],
        )
        return int(row[0])  # type: ignore[index]

    def _put_vector(self, rowid: int, entry: Entry, vector: np.ndarray | bytes, import_id: int | None) -> None:
        v, ok = vector_value(vector)
        self._later(
            "INSERT INTO entries_vec(rowid, embedding, usable, wing, room, kind, type, status, import_id) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (rowid) DO UPDATE SET embedding = excluded.embedding, "
            "usable = excluded.usable, wing = excluded.wing, room = excluded.room, kind = excluded.kind, "
            "type = excluded.type, status = excluded.status, import_id = excluded.import_id",
            (rowid, v, ok, entry.wing, entry.room, entry.kind.value, entry.type.value, entry.status.value, import_id),
        )

    def state(self, entry_id: str) -> bool | None:
        row = self._one(f"SELECT {visible()} FROM entries WHERE id = %s", (entry_id,))
        return None if row is None else bool(row[0])

    def find(self, entry_id: str) -> tuple[int, Entry] | None:
        row = self._one(f"SELECT rowid, {COLUMNS} FROM entries WHERE id = %s AND {visible()} FOR UPDATE", (entry_id,))
        return None if row is None else (int(row[0]), row_to_entry(row[1:]))

    def find_rowid(self, entry_id: str) -> int | None:
        row = self._one(f"SELECT rowid FROM entries WHERE id = %s AND {visible()}", (entry_id,))
        return None if row is None else int(row[0])

    def find_content(self, digest: str, wing: str) -> Entry | None:
        row = self._one(
            f"SELECT {COLUMNS} FROM entries WHERE content_hash = %s AND wing = %s AND {visible()} ORDER BY rowid LIMIT 1",
            (digest, wing),
        )
        return None if row is None else row_to_entry(row)

    def replace(self, rowid: int, entry: Entry, vector: bytes | np.ndarray | None) -> None:
        values = entry_values(entry, self.model)
        cols = [c.strip() for c in COLUMNS.split(",")]
        sets = ", ".join(f"{c} = %s" for c in cols[1:]) + ", content_hash = %s, model = %s, "
        sets += ", ".join(f"{c} = {v}" for c, v in zip(LEX_COLUMNS.split(", "), LEX_VALUES))
        self._later(f"UPDATE entries SET {sets} WHERE rowid = %s",
                    [*values[1:], *packed(entry.title, entry.text), rowid])
        if vector is None:
            self._later(
                "UPDATE entries_vec SET wing = %s, room = %s, kind = %s, type = %s, status = %s WHERE rowid = %s",
                (entry.wing, entry.room, entry.kind.value, entry.type.value, entry.status.value, rowid),
            )
        else:
            import_id = self._one("SELECT import_id FROM entries WHERE rowid = %s", (rowid,))
            self._put_vector(rowid, entry, vector, import_id[0] if import_id else None)

    def delete(self, rowid: int) -> None:
        self._later("DELETE FROM entries WHERE rowid = %s", (rowid,))  # its vector goes with it (ON DELETE CASCADE)

    def audit(
        self, action: str, entry_id: str | None, wing: str | None, before: dict[str, Any] | None,
        after: dict[str, Any] | None, detail: dict[str, Any] | None = None, *, import_id: int | None = None,
    ) -> int:
        row = self._one(f"INSERT INTO audit({_AUDIT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING seq",
                        _audit_values(action, entry_id, wing, before, after, detail, import_id))
        return int(row[0])  # type: ignore[index]

    def bump(self, wings: Iterable[str], seq: int) -> None:
        names = sorted(set(wings))
        if not names:
            return
        self._later(  # the bump and the notification (sent at commit) in one statement
            "WITH b AS (INSERT INTO wings(wing, generation, last_write_seq) SELECT w, 1, %s FROM unnest(%s::text[]) AS w "
            "ON CONFLICT (wing) DO UPDATE SET generation = wings.generation + 1, last_write_seq = excluded.last_write_seq "
            "RETURNING 1) SELECT pg_notify(%s, %s), (SELECT count(*) FROM b)",
            (seq, names, NOTIFY_CHANNEL, json.dumps(names)),
        )

    def last_seq(self) -> int:
        row = self._one("SELECT coalesce(max(seq), 0) FROM audit")
        return int(row[0])  # type: ignore[index]
