"""``SqliteStore``: the storage interface (``memlens.store.base``) on one SQLite file.

SQLite + sqlite-vec (vectors) + FTS5 (text, BM25). Thread-safe: each thread
gets its own connection (SQLite's rule), opened, checked and migrated on first
use. ``write()`` is the write protocol: one ``BEGIN IMMEDIATE`` transaction in
which a ``SqliteWriter`` stores entry rows, vectors, audit rows and generation
bumps, committed together or rolled back together.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.errors import CorruptRowError, StoreError
from memlens.models import format_ts, utcnow
from memlens.store import corruption, db, importer, staging
from memlens.store.answers_sql import SqliteAnswers
from memlens.store.audit_sql import SqliteAuditLog
from memlens.store.browse_sql import SqliteBrowse
from memlens.store.ingest_sql import SqliteIngest
from memlens.store.replay_sql import SqliteReplay
from memlens.store.rows import COLUMN_LIST, HINT, select_list
from memlens.store.speed import SpeedLayer
from memlens.store.speed.lexindex import WARM_INSTANCES
from memlens.store.speed.vindex import VectorIndex
from memlens.store.sqlite_reads import SqliteReads
from memlens.store.staging import visible, visible_count
from memlens.store.task_rows import SqliteTaskRows
from memlens.store.vectors import degenerate
from memlens.store.writer import SqliteWriter

if TYPE_CHECKING:
    from memlens.models import Entry
    from memlens.store.logspool import LogSpool

class SqliteStore(SqliteReads, SqliteBrowse, SqliteAnswers, SqliteAuditLog, SqliteReplay, SqliteIngest):
    """One SQLite store file: the read half (``SqliteReads``) and the write half.

    ``model`` is called (lazily, only when needed) for the embedding model (``.model_id``, ``.dim``) that a
    new store records, and that a store without a record falls back to; ``vector_index`` for the current
    ``search.vector_index`` setting, the speed layer's switch (``memlens.store.speed``).
    """

    backend = "sqlite"
    lexical_scorer = "fts5-bm25"

    def __init__(self, path: Path, *, model: Callable[[], Any], busy_timeout_ms: int = 5000,
                 mmap_size: int = 1 << 30, synchronous: str = "normal", create: bool = True,
                 vector_index: Callable[[], str] = lambda: "sqlite-vec") -> None:
        self.path = path
        self._vector_index_mode = vector_index  # now: "sqlite-vec" or "auto" (search.vector_index)
        self._speed: SpeedLayer | None = SpeedLayer(self)
        self._staged_vectors: VectorIndex | None = None
        self._model = model
        self._busy_timeout_ms = int(busy_timeout_ms)
        self._mmap_size = mmap_size
        self._synchronous = synchronous
        self._create = create
        self._local = threading.local()
        self._conns: list[Any] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        self._file_id: tuple[int, int] | None = None  # the store file as first opened (``db.still_there``)
        self._abs_path = os.path.abspath(path) if str(path) != ":memory:" else ""
        self._pruned = False  # retrieval records pruned by this store yet (see memlens.store.retention)
        self._spool: LogSpool | None = None  # the retrieval log's rows waiting to be written (``SqliteAuditLog``)
        conn = self.conn  # opens, checks and migrates
        self._meta: dict[str, str] = (
            dict(conn.execute("SELECT key, value FROM store_meta").fetchall()) if db.schema_version(conn) else {}
        )

    # -- connections ----------------------------------------------------------------------------

    @property
    def conn(self) -> Any:
        """This thread's connection (for code inside ``memlens.store`` only)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or self._closed:  # closed: this thread's connection is closed too, not to be handed out
            if self._closed:
                raise StoreError(f"store {self.path} is closed; open it again (Memory.open)")
            db.same_file(self._abs_path, self._file_id, self.path)  # a later connection: to the file first opened
            conn = db.connect(
                self.path,
                busy_timeout_ms=self._busy_timeout_ms,
                mmap_size=self._mmap_size,
                synchronous=self._synchronous,
                create=self._create and not self._conns,  # once open, a vanished file is not silently remade
            )
            try:
                if self._file_id is not None and conn.file_id != self._file_id:  # (put there since the check above)
                    raise db.moved(self.path, gone=conn.file_id is None)
                if db.schema_version(conn) < db.SCHEMA_VERSION:
                    db.migrate(conn, self.path, self._dim_for_new_store(conn))
                    if conn.execute("SELECT 1 FROM store_meta WHERE key = 'model'").fetchone() is None:
                        self._init_meta(conn)
                else:
                    db.migrate(conn, self.path, 0)  # refuses newer schemas
            except BaseException:
                conn.close()
                raise
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
            if self._file_id is None:
                self._file_id = conn.file_id
        return conn

    def on_connection(self, conn: Any) -> SqliteStore:
        """A copy of this store that uses ``conn`` on this thread, without the speed layer (a preview runs its writes
        inside one transaction it never commits)."""
        clone = copy.copy(self)
        clone._local = threading.local()
        clone._local.conn = conn
        clone._conns = []
        clone._conns_lock = threading.Lock()
        clone._speed = None  # one connection, on this thread: nothing kept for other threads or later
        clone._spool = None  # its searches' rows go into its transaction
        clone._staged_vectors = None
        return clone

    def set_model(self, model: str) -> None:
        """Record ``model`` as the one every vector of this store was made by."""
        with self.write() as writer:
            writer.conn.execute("INSERT INTO store_meta(key, value) VALUES ('model', ?)"
                                " ON CONFLICT(key) DO UPDATE SET value = excluded.value", (model,))
        self._meta["model"] = model

    def close_thread(self) -> None:
        """Close this thread's connection (a worker thread's, at its end): threads come and go, connections must not pile up."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        with self._conns_lock:
            if conn in self._conns:
                self._conns.remove(conn)
        try:
            conn.close()
        except Exception:
            pass

    def close(self) -> None:
        if self._spool is not None and not self._closed:
            try:
                self._spool.stop()  # the waiting rows written, the spool's writer thread ended
            except Exception:  # a store closing never fails on its log
                pass
        self._closed = True
        with self._conns_lock:
            for c in self._conns:
                try:
                    c.close()
                except Exception:
                    pass
            self._conns.clear()

    def _dim_for_new_store(self, conn: Any) -> int:
        """The vector size for migrations: the store's own record, else the model's (a new store)."""
        try:
            row = conn.execute("SELECT value FROM store_meta WHERE key = 'dim'").fetchone()
        except Exception:
            row = None
        return int(row[0]) if row else int(self._model().dim)

    def _init_meta(self, conn: Any) -> None:
        model = self._model()
        with db.transaction(conn, self.path):
            conn.execute(
                "INSERT OR IGNORE INTO store_meta(key, value) VALUES ('model', ?), ('dim', ?), ('created_at', ?)",
                (model.model_id, str(model.dim), format_ts(utcnow())),
            )

    # -- meta -----------------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        return dict(self._meta)

    @property
    def model_id(self) -> str:
        """The model this store's vectors were made with."""
        return self._meta.get("model") or str(self._model().model_id)

    @property
    def dim(self) -> int:
        raw = self._meta.get("dim")
        if not raw:
            return int(self._model().dim)
        try:
            return int(raw)
        except (TypeError, ValueError):  # a hand edit: one line, not a traceback
            raise CorruptRowError(f"store {self.path}: store_meta holds {raw!r} as the vector size; {HINT}") from None

    def schema_version(self) -> int:
        return db.schema_version(self.conn)

    def read_only(self) -> bool:
        """True for a store in a read-only directory: opened as it is on disk, every write refused."""
        return db.is_read_only(self.conn)

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())

    # -- writes ---------------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Refuse a damaged store before embedding: every write transaction checks again (``db.transaction``)."""
        corruption.refuse_writes(self.path)
        corruption.verify_once(self.conn)

    @contextmanager
    def write(self) -> Iterator[SqliteWriter]:
        self.settle_log()  # this process's searches come before its write in the audit (50 ms at most for the lock)
        vectors = self.vindex
        if vectors is None:
            with db.transaction(self.conn, self.path) as conn:
                yield SqliteWriter(conn, self.model_id)
            return
        # the entries added join the blocks they leave current once committed, before this process's next writer
        # commits (its turn is held until then): in commit order, or a block would fall behind and be read again
        with db.write_turn(self.conn, self.path):
            writer: SqliteWriter | None = None
            try:
                with db.transaction(self.conn, self.path) as conn:
                    writer = SqliteWriter(conn, self.model_id, track_appends=True)
                    yield writer
                    if writer.appends:  # searches that read the generations this commit leaves wait for its rows
                        vectors.landing(writer.appends)
                if writer.appends:
                    vectors.append(writer.appends)
            finally:
                if writer is not None and writer.appends:
                    vectors.landed(writer.appends)

    def reusable_vector(self, digest: str, model: str) -> bytes | None:
        row = self.conn.execute(
            "SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "
            "WHERE e.content_hash = ? AND e.model = ? LIMIT 1",
            (digest, model),
        ).fetchone()
        if row is None or degenerate(np.frombuffer(row[0], dtype="<f4")):  # never spread a degenerate one
            return None
        return bytes(row[0])

    def missing_ids(self, ids: Iterable[str]) -> list[str]:
        conn = self.conn
        return [i for i in ids if conn.execute(f"SELECT 1 FROM entries WHERE id = ? AND {visible()}", (i,)).fetchone() is None]

    def entry_states(self, ids: list[str]) -> tuple[str, bool] | None:
        """The first of ``ids`` that has a row, and whether that row is visible (False: being imported)."""
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            q = f"SELECT id, {visible()} FROM entries WHERE id IN ({','.join('?' * len(chunk))})"
            found = dict(self.conn.execute(q, chunk).fetchall())
            if found:  # the first in ``ids``' order, not the index's
                first = next(i for i in chunk if i in found)
                return first, bool(found[first])
        return None

    def sweep_imports(self) -> int:
        """Remove the staged rows of imports whose process is gone (``memlens.store.staging``)."""
        return staging.sweep(self.conn, self.path)

    def import_staged(self, shown: Path, rows: Iterator[tuple[int, int, Entry]], vecs: np.ndarray,
                      outside: dict[str, int], unchanged: Callable[[], None], progress: Callable[[int], None]) -> None:
        """Write ``rows`` as an import: staged in short transactions, published at once (``memlens.store.staging``)."""
        importer.write(self, shown, rows, vecs, outside, unchanged, progress)

    # -- entry rows (the facade's own reads) ----------------------------------------------------

    def get_row(self, entry_id: str) -> tuple[Any, ...] | None:
        """The visible entry row (``COLUMNS``) of ``entry_id``."""
        row: tuple[Any, ...] | None = self.conn.execute(
            f"SELECT {COLUMN_LIST} FROM entries WHERE id = ? AND {visible()}", (entry_id,)
        ).fetchone()
        return row

    def iter_rows(self, wing: str | None = None) -> Iterator[tuple[Any, ...]]:
        sql = f"SELECT {COLUMN_LIST} FROM entries WHERE {visible()}" + (" AND wing = ?" if wing else "") + " ORDER BY rowid"
        yield from self.conn.execute(sql, (wing,) if wing else ())

    def entry_vector(self, entry_id: str) -> bytes | None:
        row = self.conn.execute(
            f"SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid WHERE e.id = ? AND {visible('e')}",
            (entry_id,),
        ).fetchone()
        return None if row is None else bytes(row[0])

    def export_rows(self, wing: str | None, with_vectors: bool) -> Iterator[tuple[tuple[Any, ...], bytes | None, str | None]]:
        sql = f"SELECT {select_list('e')}" + (
            ", e.content_hash, v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid" if with_vectors
            else " FROM entries e"
        )
        sql += f" WHERE {visible('e')}"
        args: tuple[Any, ...] = ()
        if wing:
            sql += " AND e.wing = ?"
            args = (wing,)
        sql += " ORDER BY e.rowid"
        for row in self.conn.execute(sql, args):
            yield (row[:-2], row[-1], row[-2]) if with_vectors else (row, None, None)

    # -- counts ---------------------------------------------------------------------------------

    def count(self) -> int:
        return visible_count(self.conn)

    def wing_counts(self) -> list[dict[str, Any]]:
        """Every wing with its entry count and rooms (room -> count), from one ``GROUP BY`` on the scope index."""
        wings: dict[str, dict[str, Any]] = {}
        sql = f"SELECT wing, room, count(*) FROM entries WHERE {visible()} GROUP BY wing, room ORDER BY wing, room"
        for wing, room, n in self.conn.execute(sql):
            w = wings.setdefault(wing, {"wing": wing, "entries": 0, "rooms": {}})
            w["entries"] += n
            w["rooms"][room or ""] = n
        return list(wings.values())

    def audit_count(self) -> int:
        self.settle_log()
        return int(self.conn.execute(
            "SELECT (SELECT count(*) FROM audit) - (SELECT count(*) FROM audit WHERE import_id IN (SELECT id FROM imports))"
        ).fetchone()[0])

    # -- the speed layer (memlens.store.speed) --------------------------------------------------

    def warm_index(self, *, text: bool = False, stop: Callable[[], bool] | None = None) -> int:
        """Load the in-process vector index now (long-lived processes); returns vectors held. ``text``: and every
        word's postings (``LexIndex.load_all``), when the text index holds at most ``WARM_INSTANCES`` tokens, and
        every entry row, when they fit the row cache (``warm_rows``)."""
        speed = self.speed
        if speed is None:
            return 0
        held = speed.warm_vectors().warm(self, stop)
        if text and not (stop is not None and stop()):
            speed.postings.load_all(self.conn, WARM_INSTANCES)
            self.warm_rows()
        return held

    # -- generations ----------------------------------------------------------------------------

    def write_stamp(self) -> tuple[int, int]:
        """Changes whenever any process writes an entry: every write bumps a wing generation."""
        gens = self._all_generations()
        return sum(gens.values()), len(gens)

    # -- working memory -------------------------------------------------------------------------

    def tasks(self) -> SqliteTaskRows:
        return SqliteTaskRows(self.conn)

