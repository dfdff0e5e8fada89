"""``memlens copy SRC DST``: a whole store from SQLite to PostgreSQL, or back, or between two of a kind.

Everything an export would lose is copied too: entries with their rowids and
vectors, the audit with its sequence numbers, wing generations, completed
tasks and blockers, the answer log, the retrieval log that replay reads, the
golden queries, the ingestion catalog (sources, their entries, the runs) and
the store's meta (model, dimension, creation time).
Rows of an import still in progress are not copied (no reader sees them).

All or nothing: the destination must be a new (or empty) store, and every
row is written in ONE transaction there, so an interrupted copy leaves the
destination as empty as it was; run it again. In a PostgreSQL database, that
transaction also makes the store's tables (and enables pgvector if needed):
one without a store before a failed copy holds none after it either. It is
not resumable. The source is read in one snapshot (a read transaction), so
writers may keep writing to it meanwhile; the copy holds the store as it was
when it began.

A vector with no direction (all zeros, NaN or infinite) arrives as zeros in
PostgreSQL, which cannot hold NaN; it is never a search neighbour either way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from memlens.errors import StoreError
from memlens.files import expand_user
from memlens.secrets import redact
from memlens.store.postgres import lexical
from memlens.store.postgres.compat import from_pg
from memlens.store.postgres.connect import first_line, is_uri, label, lost, translate, uri_secrets
from memlens.store.rows import COLUMNS, row_problem, rule_problem

BATCH = 500
SHOWN_DAMAGED = 5  # damaged entries named in the error
_AGAIN = "nothing was copied: run the copy again"
ENTRY = ("rowid", "id", "wing", "room", "kind", "type", "status", "title", "text", "key", "salience", "overrides",
         "created_at", "updated_at", "meta", "content_hash", "model")
VEC_META = ("wing", "room", "kind", "type", "status")
AUDIT = ("seq", "ts", "action", "entry_id", "wing", "before", "after", "detail")
TABLES: list[tuple[str, tuple[str, ...], str]] = [  # (table, columns, order)
    ("entries", ENTRY, "rowid"),
    ("audit", AUDIT, "seq"),
    ("wings", ("wing", "generation", "last_write_seq"), "wing"),
    ("tasks", ("task_id", "intent", "summary", "outcome", "completed_at", "requires_context", "validation_report", "seq"),
     "task_id"),
    ("blockers", ("id", "task_id", "reason", "blocked_at", "resolved_at", "resolution"), "id"),
    ("answers", ("id", "ts", "question", "model", "complete", "error", "retrieval_seq", "retrieval"), "id"),
    ("answer_citations", ("answer_id", "entry_id", "valid"), "{cite_order}"),  # each backend's insertion order
    ("retrieval_log", ("seq", "request", "client", "context", "hits"), "seq"),
    ("golden", ("id", "query", "expect", "active_wing", "within", "created_at"), "id"),
    ("sources", ("id", "wing", "path", "kind", "size", "mtime_ns", "sha256", "version", "chunks", "indexed_at"), "id"),
    ("source_entries", ("source_id", "entry_id"), "source_id, entry_id"),
    ("ingest_runs", ("id", "mode", "wing", "root", "started_at", "finished_at", "seconds", "status", "summary"), "id"),
]
_VISIBLE = {"entries": "({p}import_id IS NULL OR {p}import_id NOT IN (SELECT id FROM imports))",
            "audit": "({p}import_id IS NULL OR {p}import_id NOT IN (SELECT id FROM imports))",
            "retrieval_log": "seq IN (SELECT seq FROM audit WHERE action = 'retrieval')"}


class _Sqlite:
    ph = "?"
    cite_order = "rowid"

    def __init__(self, path: Path, dim: int | None, storage: Any) -> None:
        from memlens.store import db

        self.label = str(path)
        self.conn = db.connect(path, create=dim is not None, busy_timeout_ms=storage.busy_timeout_ms,
                               mmap_size=storage.mmap_size, synchronous=storage.synchronous)
        if db.schema_version(self.conn) < db.SCHEMA_VERSION:
            if dim is None and not db.schema_version(self.conn):
                raise StoreError(f"no memlens store at {path}")
            row = None
            if db.schema_version(self.conn):
                row = self.conn.execute("SELECT value FROM store_meta WHERE key = 'dim'").fetchone()
            db.migrate(self.conn, path, int(row[0]) if row else int(dim or 0))
        else:
            db.migrate(self.conn, path, 0)

    def rows(self, sql: str) -> Iterator[tuple[Any, ...]]:
        yield from self.conn.execute(sql)

    def has_rows(self) -> bool:
        """Whether the store holds entries or audit rows."""
        return any(self.conn.execute(f"SELECT EXISTS (SELECT 1 FROM {t})").fetchone()[0] for t in ("entries", "audit"))

    def vectors(self) -> Iterator[tuple[Any, ...]]:
        yield from self.conn.execute(
            f"SELECT v.rowid, v.embedding, {', '.join('v.' + c for c in VEC_META)} FROM entries_vec v "
            "JOIN entries e ON e.rowid = v.rowid "
            f"WHERE {_VISIBLE['entries'].format(p='e.')} ORDER BY v.rowid")

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        from memlens.store import db

        with db.transaction(self.conn, self.label):
            yield

    def put(self, table: str, cols: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        self.conn.executemany(f"INSERT INTO {table}({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)

    def put_vectors(self, rows: list[tuple[Any, ...]]) -> None:
        blobs = [(r, v if isinstance(v, bytes) else from_pg(v).astype("<f4").tobytes(), *m) for r, v, *m in rows]
        self.put("entries_vec", ("rowid", "embedding", *VEC_META), blobs)

    def put_meta(self, meta: dict[str, str]) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO store_meta(key, value) VALUES (?, ?)", list(meta.items()))

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM store_meta").fetchall())

    def analyze(self) -> None:
        pass  # SQLite's planner works without statistics here (the store never runs ANALYZE)

    def close(self) -> None:
        self.conn.close()


class _Postgres:
    ph = "%s"
    cite_order = "n"

    def __init__(self, uri: str, dim: int | None, model: str | None) -> None:
        from memlens.store.postgres import open_store, split_options
        from memlens.store.postgres.connect import connect

        self.dim, self.model = dim, model
        if dim is None:  # a source must be a memlens store already: nothing is created in it
            self.store: Any = open_store(uri, create=False)
            self.label = self.store.label
            self._cm: Any = self.store.connection()
            self.conn = self._cm.__enter__()
            return
        # a destination: one plain connection; the store's tables (and pgvector) are made inside the copy's
        # transaction (``transaction``), so a copy that fails leaves the database as it was, with no empty store
        self.store = self._cm = None
        self.uri = split_options(uri)[0]
        self.label = label(self.uri)
        self.conn = connect(self.uri, self.label)

    def has_rows(self) -> bool:
        """Whether the store holds entries or audit rows (a database without a memlens store holds none)."""
        from memlens.store.postgres import schema

        if not schema.version(self.conn):
            return False
        return any(self.conn.execute(f"SELECT EXISTS (SELECT 1 FROM {t})").fetchone()[0] for t in ("entries", "audit"))

    def rows(self, sql: str) -> Iterator[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            yield from cur.execute(sql)

    def vectors(self) -> Iterator[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            yield from cur.execute(
                f"SELECT v.rowid, v.embedding, {', '.join('v.' + c for c in VEC_META)} FROM entries_vec v "
                f"JOIN entries e ON e.rowid = v.rowid WHERE {_VISIBLE['entries'].format(p='e.')} ORDER BY v.rowid")

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    @contextmanager
    def transaction(self) -> Iterator[None]:
        from pgvector.psycopg import register_vector

        from memlens.store.postgres import schema

        with self.conn.transaction() as tx:
            if self.dim is not None:  # pgvector and the schema in this transaction: a failed copy takes them back
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (schema.MIGRATION_LOCK,))
                schema.ensure_extension(self.conn, self.label)
                register_vector(self.conn)
                schema.migrate(self.conn, self.label, self.dim)
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (schema.WRITE_LOCK,))
            yield
            lexical.rebuild(self.conn)  # the rows' tokens counted once, at the end, every row folded
            for table, col in (("entries", "rowid"), ("audit", "seq"), ("blockers", "id"), ("answers", "id"), ("golden", "id"),
                               ("sources", "id"), ("ingest_runs", "id")):
                self.conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', '{col}'), "
                                  f"greatest((SELECT max({col}) FROM {table}), 1), (SELECT max({col}) FROM {table}) IS NOT NULL)")
        if tx.status != tx.Status.COMMITTED:
            raise StoreError(f"lost the connection to {self.label} before the copy committed; {_AGAIN}")

    def put(self, table: str, cols: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        if table == "entries":  # each row with its FTS5 tokens (memlens.store.postgres.lexical)
            at = cols.index("title"), cols.index("text")
            rows = [(*r, *p) for r, p in zip(rows, lexical.postings([(r[at[0]], r[at[1]]) for r in rows]))]
            cols = (*cols, *lexical.LEX_COLUMNS.split(", "))
        with self.conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table}({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})", rows)

    def put_vectors(self, rows: list[tuple[Any, ...]]) -> None:
        from memlens.store.postgres.writer import vector_value

        out = []
        for rowid, v, *m in rows:
            vec, ok = vector_value(np.frombuffer(v, dtype="<f4") if isinstance(v, bytes) else from_pg(v))
            out.append((rowid, vec, ok, *m))
        self.put("entries_vec", ("rowid", "embedding", "usable", *VEC_META), out)

    def put_meta(self, meta: dict[str, str]) -> None:
        from memlens.models import format_ts, utcnow

        # what opening a new store records (its model, vector size, creation time), then the source's values
        meta = {"model": self.model or "", "dim": str(self.dim), "created_at": format_ts(utcnow()), **meta}
        with self.conn.cursor() as cur:
            cur.executemany("INSERT INTO store_meta(key, value) VALUES (%s, %s) "
                            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                            [(k, v) for k, v in meta.items() if k != "schema_version"])

    def meta(self) -> dict[str, str]:
        return {k: v for k, v in self.conn.execute("SELECT key, value FROM store_meta").fetchall() if k != "schema_version"}

    def analyze(self) -> None:
        self.conn.execute("ANALYZE")  # statistics for the planner: the copied tables were empty a moment ago

    def close(self) -> None:
        try:
            if self._cm is not None:
                self._cm.__exit__(None, None, None)
            else:
                self.conn.close()
        except Exception:  # the connection is gone (the error that ended the copy says so)
            pass
        if self.store is not None:
            self.store.close()


def _open(target: str | Path, storage: Any, dim: int | None = None, model: str | None = None) -> Any:
    if is_uri(target):
        return _Postgres(str(target), dim, model)
    return _Sqlite(expand_user(target), dim, storage)


def copy_store(src: str | Path, dst: str | Path, *, progress: Callable[[int, int], None] | None = None,
               on_damaged: Callable[[str, str], None] | None = None, storage: Any = None) -> dict[str, int]:
    """Copy the store ``src`` into the new store ``dst`` (a path or a ``postgresql://`` URI); returns rows per table.
    A PostgreSQL error (the server gone mid-copy, say) is one line naming that store; the copy's transaction rolled
    back, so nothing was copied.

    A damaged entry (a row edited by hand into something the data model rejects, which export leaves out) stops
    the copy with a StoreError naming it, and nothing is written; unless ``dst`` is a SQLite file and ``on_damaged``
    is given: the copy then stays whole, the damaged rows copied as they are (in a file, ``memlens check`` lists
    them and ``memlens salvage`` repairs them), each reported to ``on_damaged(entry_id, problem)``;
    ``counts["damaged"]`` says how many. A SQLite file is opened with ``storage`` (the settings' ``[storage]``, as
    configured when not given: busy timeout, mmap size, synchronous)."""
    if storage is None and not (is_uri(src) and is_uri(dst)):
        from memlens.config import load_settings

        storage = load_settings().storage
    try:
        return _copy_store(src, dst, progress, on_damaged, storage)
    except Exception as exc:
        psycopg = sys.modules.get("psycopg")
        if psycopg is None or not isinstance(exc, psycopg.Error):
            raise
        uri = str(dst) if is_uri(dst) else str(src)
        if lost(exc):  # no "next call" to promise: the copy is simply run again
            raise StoreError(redact(f"lost the connection to {label(uri)} ({first_line(exc)}); {_AGAIN}",
                                    uri_secrets(uri))) from None
        raise StoreError(f"{translate(exc, label(uri), uri)}; nothing was copied") from None


def _copy_store(src: str | Path, dst: str | Path, progress: Callable[[int, int], None] | None,
                on_damaged: Callable[[str, str], None] | None, storage: Any) -> dict[str, int]:
    source = _open(src, storage)
    try:
        meta = source.meta()
        if "dim" not in meta:
            raise StoreError(f"store {source.label} records no vector size; it is not a complete memlens store")
        target = _open(dst, storage, int(meta["dim"]), meta.get("model"))
        try:
            counts = _copy(source, target, meta, progress, on_damaged)
            target.analyze()
            return counts
        finally:
            target.close()
    finally:
        source.close()


def _copy(source: Any, target: Any, meta: dict[str, str], progress: Callable[[int, int], None] | None,
          on_damaged: Callable[[str, str], None] | None) -> dict[str, int]:
    if target.has_rows():
        raise StoreError(f"store {target.label} is not empty: copy writes into a new store only (all or nothing)")
    counts: dict[str, int] = {}
    damaged: list[tuple[str, str]] = []
    keep_damaged = on_damaged is not None and isinstance(target, _Sqlite)  # where check and salvage can repair them
    with source.snapshot(), target.transaction():
        # again under the transaction's locks: another copy (or any writer) may have written there meanwhile, and
        # this copy's rows would then clash with its rows
        if target.has_rows():
            raise StoreError(f"store {target.label} is no longer empty: another copy (or a writer) wrote into it after "
                             "this copy began; nothing was copied")
        tmeta = target.meta()
        if tmeta.get("dim") and tmeta["dim"] != meta["dim"]:
            raise StoreError(f"store {target.label} holds {tmeta['dim']}-dimensional vectors, {source.label} {meta['dim']}")
        total = int(next(iter(source.rows(f"SELECT count(*) FROM entries WHERE {_VISIBLE['entries'].format(p='')}")))[0])
        for table, cols, order in TABLES:
            where = f" WHERE {_VISIBLE[table].format(p='')}" if table in _VISIBLE else ""
            n = 0
            batch: list[tuple[Any, ...]] = []
            order = order.format(cite_order=source.cite_order)
            for row in source.rows(f"SELECT {', '.join(cols)} FROM {table}{where} ORDER BY {order}"):
                if table == "entries" and (problem := _damage(row)):
                    damaged.append((row[1], problem))
                    if keep_damaged and on_damaged is not None:
                        on_damaged(row[1], problem)
                if damaged and not keep_damaged:  # nothing more is written: the copy stops once the entries are read
                    continue
                batch.append(tuple(row))
                if len(batch) >= BATCH:
                    target.put(table, cols, batch)
                    n += len(batch)
                    batch = []
                    if progress and table == "entries":
                        progress(n, total)
            if damaged and not keep_damaged:
                raise StoreError(_damaged_message(source, target, damaged))
            if batch:
                target.put(table, cols, batch)
                n += len(batch)
            counts[table] = n
            if table == "wings":  # the working memory's counter row ('_tasks') is not a wing
                counts[table] -= int(next(iter(source.rows("SELECT count(*) FROM wings WHERE wing = '_tasks'")))[0])
            if table == "entries":
                counts["vectors"] = _copy_vectors(source, target, progress, total)
        target.put_meta(meta)
    counts["damaged"] = len(damaged)
    return counts


def _damage(row: tuple[Any, ...]) -> str | None:
    """What is wrong with an entry row selected as ``ENTRY`` (a hand edit the data model rejects), as export sees it."""
    entry = tuple(row[1:len(COLUMNS) + 1])  # ENTRY is the rowid, then COLUMNS
    return row_problem(entry) or rule_problem(entry)


def _damaged_message(source: Any, target: Any, damaged: list[tuple[str, str]]) -> str:
    """One line: how many entries of ``source`` are damaged, the first few ids (the first with its problem), and
    what to do."""
    n = len(damaged)
    shown = ", ".join([f"{damaged[0][0]!r} ({damaged[0][1]})", *(repr(i) for i, _ in damaged[1:SHOWN_DAMAGED])])
    more = f" and {n - SHOWN_DAMAGED} more" if n > SHOWN_DAMAGED else ""
    if isinstance(source, _Sqlite):
        fix = ("`memlens --store SRC check` lists them, `memlens --store SRC salvage NEW.db` makes a sound store to "
               "copy from")
    else:
        fix = ("copy it into a SQLite file first (damaged rows are copied there as they are, and `memlens check` "
               "and `salvage` work on a file)")
    why = "a copy into PostgreSQL does not carry them" if isinstance(target, _Postgres) else "not asked to carry them"
    return (f"store {source.label} holds {n} damaged {'entry' if n == 1 else 'entries'}: {shown}{more}; {why}: {fix}; "
            "nothing was copied")


def _copy_vectors(source: Any, target: Any, progress: Callable[[int, int], None] | None, total: int) -> int:
    n = 0
    batch: list[tuple[Any, ...]] = []
    for row in source.vectors():
        batch.append(tuple(row))
        if len(batch) >= BATCH:
            target.put_vectors(batch)
            n += len(batch)
            batch = []
    if batch:
        target.put_vectors(batch)
        n += len(batch)
    if progress:
        progress(total, total)
    return n
