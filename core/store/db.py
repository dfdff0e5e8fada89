"""SQLite connections with sqlite-vec loaded, the schema and its migrations.

Python's stdlib ``sqlite3`` is often built without extension loading (pyenv,
macOS system Python, this machine). We use it when it can load extensions and
otherwise ``sqlean`` (sqlean-py), a drop-in build of the same module that can.
"""

from __future__ import annotations

import os
import sqlite3 as _stdlib_sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

from memlens.errors import StoreCorruptError, StoreError, StoreLockedError
from memlens.store import corruption

SCHEMA_VERSION = 5
_driver_lock = threading.Lock()
_driver: ModuleType | None = None


def driver() -> ModuleType:
    """The sqlite3-compatible module that can load sqlite-vec."""
    global _driver
    with _driver_lock:
        if _driver is None:
            if hasattr(_stdlib_sqlite3.Connection, "enable_load_extension"):
                _driver = _stdlib_sqlite3
            else:
                try:
                    import sqlean  # type: ignore[import-untyped]
                except ImportError:
                    raise StoreError(
                        "this Python's sqlite3 cannot load extensions and sqlean-py is not installed: "
                        "pip install sqlean-py"
                    ) from None
                _driver = sqlean
        return _driver


def _migration_1(dim: int) -> list[str]:
    return [
        """CREATE TABLE entries (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            wing TEXT NOT NULL,
            room TEXT NOT NULL DEFAULT '',
            kind TEXT NOT NULL,
            type TEXT NOT NULL,
            status TEXT NOT NULL,
            title TEXT NOT NULL,
            text TEXT NOT NULL,
            key TEXT,
            salience REAL NOT NULL,
            overrides TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}',
            content_hash TEXT NOT NULL,
            model TEXT
        )""",
        "CREATE INDEX entries_scope ON entries(wing, room, kind, type, status)",
        "CREATE INDEX entries_hash ON entries(content_hash, model)",
        "CREATE INDEX entries_key ON entries(key, kind) WHERE key IS NOT NULL",
        """CREATE VIRTUAL TABLE entries_fts USING fts5(
            title, text, content='entries', content_rowid='rowid', tokenize='porter unicode61'
        )""",
        """CREATE TRIGGER entries_ai AFTER INSERT ON entries BEGIN
            INSERT INTO entries_fts(rowid, title, text) VALUES (new.rowid, new.title, new.text);
        END""",
        """CREATE TRIGGER entries_ad AFTER DELETE ON entries BEGIN
            INSERT INTO entries_fts(entries_fts, rowid, title, text) VALUES ('delete', old.rowid, old.title, old.text);
        END""",
        """CREATE TRIGGER entries_au AFTER UPDATE OF title, text ON entries BEGIN
            INSERT INTO entries_fts(entries_fts, rowid, title, text) VALUES ('delete', old.rowid, old.title, old.text);
            INSERT INTO entries_fts(rowid, title, text) VALUES (new.rowid, new.title, new.text);
        END""",
        # wing is a partition key: a scoped KNN scans only that wing's chunks.
        # room/kind/type/status are metadata columns: filtered inside the KNN.
        f"""CREATE VIRTUAL TABLE entries_vec USING vec0(
            embedding float[{dim}] distance_metric=cosine,
            wing text partition key,
            room text,
            kind text,
            type text,
            status text
        )""",
        """CREATE TABLE wings (
            wing TEXT PRIMARY KEY,
            generation INTEGER NOT NULL DEFAULT 0,
            last_write_seq INTEGER
        )""",
        """CREATE TABLE audit (
            seq INTEGER PRIMARY KEY,
            ts TEXT NOT NULL,
            action TEXT NOT NULL,
            entry_id TEXT,
            wing TEXT,
            before TEXT,
            after TEXT,
            detail TEXT
        )""",
        "CREATE INDEX audit_entry ON audit(entry_id)",
        "CREATE INDEX audit_action ON audit(action, seq)",
        "CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ]


def _migration_2(dim: int) -> list[str]:
    """Working memory: completed tasks and blockers (see ``memlens.working.tasks``).

    Timestamps are fixed-width UTC text (``YYYY-MM-DDTHH:MM:SS.ffffffZ``) so that
    text order is time order; ``seq`` is the audit sequence of the write that
    stored the row and breaks ties between equal timestamps.
    """
    return [
        """CREATE TABLE tasks (
            task_id TEXT PRIMARY KEY,
            intent TEXT,
            summary TEXT,
            outcome TEXT NOT NULL CHECK (outcome IN ('success', 'failure')),
            completed_at TEXT NOT NULL,
            requires_context INTEGER NOT NULL DEFAULT 0,
            validation_report TEXT NOT NULL DEFAULT '{}',
            seq INTEGER NOT NULL
        )""",
        "CREATE INDEX tasks_recent ON tasks(completed_at, seq)",
        """CREATE TABLE blockers (
            id INTEGER PRIMARY KEY,
            task_id TEXT NOT NULL,
            reason TEXT NOT NULL,
            blocked_at TEXT NOT NULL,
            resolved_at TEXT,
            resolution TEXT
        )""",
        # at most one active blocker per task; the window reads active ones in time order
        "CREATE UNIQUE INDEX blockers_active ON blockers(task_id) WHERE resolved_at IS NULL",
        "CREATE INDEX blockers_open ON blockers(blocked_at, id) WHERE resolved_at IS NULL",
        "CREATE INDEX blockers_task ON blockers(task_id, blocked_at)",
    ]


def _migration_3(dim: int) -> list[str]:
    """Retrieval pulls in the entries that override a candidate: look them up by index, not by scan."""
    return ["CREATE INDEX IF NOT EXISTS entries_overrides ON entries(overrides) WHERE overrides IS NOT NULL"]


def _migration_4(dim: int) -> list[str]:
    """Imports in progress (``memlens.store.staging``): their rows are written in short transactions but stay
    invisible to every reader until one short transaction deletes the import's ``imports`` row."""
    return [
        """CREATE TABLE imports (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            owner TEXT NOT NULL,
            started_at TEXT NOT NULL,
            heartbeat TEXT NOT NULL,
            source TEXT
        )""",
        "ALTER TABLE entries ADD COLUMN import_id INTEGER",
        "ALTER TABLE audit ADD COLUMN import_id INTEGER",
        "CREATE INDEX entries_import ON entries(import_id, wing) WHERE import_id IS NOT NULL",
        "CREATE INDEX audit_import ON audit(import_id) WHERE import_id IS NOT NULL",
    ]


def _migration_5(dim: int) -> list[str]:
    """What replay, golden queries and the access log need (``memlens.replay``; its SQL is in ``replay/storage.py``).

    ``retrieval_log`` adds to each ``retrieval`` audit row (same ``seq``) the request as it was made, the client,
    whether it built a context, and its ranked hits (ids, scores, score components) as one compact JSON array:
    one row per search, appended at the end of its table. A trigger deletes it with its audit row, so it lives
    exactly as long as the retrieval records (``memlens.store.retention``).
    """
    return [
        """CREATE TABLE retrieval_log (
            seq INTEGER PRIMARY KEY,
            request TEXT NOT NULL,
            client TEXT NOT NULL DEFAULT '',
            context INTEGER NOT NULL DEFAULT 0,
            hits TEXT NOT NULL DEFAULT '[]'
        )""",
        """CREATE TRIGGER audit_retrieval_pruned AFTER DELETE ON audit WHEN old.action = 'retrieval' BEGIN
            DELETE FROM retrieval_log WHERE seq = old.seq;
        END""",
        """CREATE TABLE golden (
            id INTEGER PRIMARY KEY,
            query TEXT NOT NULL,
            expect TEXT NOT NULL,
            active_wing TEXT NOT NULL DEFAULT '',
            within INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            UNIQUE (query, expect, active_wing)
        )""",
    ]


MIGRATIONS = {1: _migration_1, 2: _migration_2, 3: _migration_3, 4: _migration_4, 5: _migration_5}


def _secure_create(path: Path) -> None:
    """Create the store file readable by the owner only, and any missing folders 0700.

    Through a dangling symbolic link, the link's target is what gets created
    (SQLite would otherwise create it with the umask's 0644).
    """
    from memlens.files import make_private_dirs

    target = Path(os.path.realpath(path)) if os.path.islink(path) else path
    try:
        make_private_dirs(target.parent)
        fd = os.open(
            target, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o600
        )
        os.close(fd)
    except FileExistsError:
        pass  # created meanwhile by another process; checked again below
    except OSError as exc:
        raise StoreError(f"cannot create store {path}: {exc.strerror or exc}") from None


def check_store_path(path: Path, *, create: bool) -> None:
    """A store is a regular file (or a link to one), or absent and then created here when ``create``.

    Devices, FIFOs, sockets and directories are refused before SQLite opens
    them: SQLite would block on a FIFO, fail on ``/dev/null`` only at the
    first commit, and create ``-journal``/``-wal`` files beside any of them.
    """
    from memlens.files import kind_of

    for attempt in (0, 1):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise StoreError(f"cannot access store {path}: {exc.strerror or exc}") from None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise StoreError(f"store path {path} is a directory, not a store file")
            if not stat.S_ISREG(st.st_mode):
                raise StoreError(f"store path {path} is {kind_of(st.st_mode)}, not a store file")
            if not os.access(path, os.R_OK):
                raise StoreError(f"cannot read store {path}: permission denied")
            return
        if not create:
            raise StoreError(
                f"no store at {path} (memlens add, import or demo create one; --store or MEMLENS_STORE picks another)"
            )
        if attempt == 0:
            _secure_create(path)
    raise StoreError(f"cannot create store {path}")


def connect(path: Path, *, busy_timeout_ms: int = 5000, mmap_size: int = 1 << 30, create: bool = True) -> Any:
    """Open a connection with sqlite-vec loaded and the pragmas memlens relies on.

    ``create=False``: a missing store is an error (read commands never leave an empty store behind).
    """
    sq = driver()
    if str(path) != ":memory:":
        check_store_path(path, create=create)
    try:
        conn = sq.connect(str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000,
                          factory=corruption.connection_class(sq))
    except sq.Error as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from None
    conn.store_label = str(path)
    try:
        # Reading the schema forces SQLite to read the header: a non-database fails here.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except StoreCorruptError:
        conn.close()
        raise
    except sq.DatabaseError as exc:
        conn.close()
        if not _in_read_only_dir(exc, path):
            raise translate(exc, path) from None
        conn = _open_immutable(sq, path, busy_timeout_ms)
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    except Exception as exc:
        conn.close()
        raise StoreError(f"cannot load the sqlite-vec extension: {exc}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal" and os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA mmap_size = {int(mmap_size)}")
    except StoreCorruptError:
        conn.close()
        raise
    except sq.DatabaseError as exc:
        conn.close()
        raise translate(exc, path) from None
    return conn


def _in_read_only_dir(exc: Exception, path: Path) -> bool:
    """Whether the first read failed because a WAL store sits where its ``-shm``/``-wal`` cannot be made.

    SQLite reads a WAL database only through those files; in a read-only
    directory (a shared snapshot, a read-only mount) even a reader fails with
    "attempt to write a readonly database".
    """
    low = str(exc).lower()
    return (
        str(path) != ":memory:"
        and ("readonly" in low or "read-only" in low or "unable to open" in low)
        and not os.access(path.parent, os.W_OK)
    )


def _open_immutable(sq: ModuleType, path: Path, busy_timeout_ms: int) -> Any:
    """Open a store in a read-only directory for reading: immutable, as SQLite allows for read-only media.

    Nothing can write there, so the file cannot change under us, but the last
    writer may have left committed changes in ``-wal`` without checkpointing
    them; an immutable open would not see those, so that store is refused.
    """
    wal = Path(f"{path}-wal")
    try:
        pending = wal.exists() and wal.stat().st_size > 0
    except OSError:
        pending = True
    if pending:
        raise StoreError(
            f"store {path} is in a read-only directory and its last changes are still in {wal.name}; "
            "open it once where it is writable (or copy the directory) to read it"
        )
    uri = f"file:{quote(str(path.absolute()))}?immutable=1"
    try:
        conn = sq.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000,
                          factory=corruption.connection_class(sq))
        conn.store_label = str(path)
        conn.execute("PRAGMA query_only = ON")  # also what ``is_read_only`` reports
    except sq.Error as exc:
        raise StoreError(f"cannot open store {path} read-only: {exc}") from None
    return conn


def is_read_only(conn: Any) -> bool:
    """Whether ``conn`` was opened read-only (a store in a read-only directory)."""
    return bool(conn.execute("PRAGMA query_only").fetchone()[0])


def translate(exc: Exception, path: Path | str) -> StoreError:
    """Turn a driver error into a one-line, actionable StoreError."""
    msg = str(exc)
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return StoreLockedError(f"store {path} is locked by another writer (waited for the busy timeout); try again")
    if corruption.is_corruption(exc) or ("not a database" in low and corruption.header_damaged(path)):
        corruption.mark(path, msg)
        return corruption.corrupt_error(path, msg)
    if "not a database" in low or "encrypted" in low:
        return StoreError(f"{path} is not a memlens store (not a valid SQLite database): {msg}")
    if "readonly" in low or "read-only" in low:
        return StoreError(f"store {path} is read-only: {msg}")
    if "unable to open" in low:
        return StoreError(f"cannot open store {path}: {msg}")
    if "disk" in low and "full" in low:
        return StoreError(f"disk full while writing {path}")
    return StoreError(f"store {path}: {msg}")


def schema_version(conn: Any) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: Any, path: Path | str, dim: int) -> None:
    """Bring the schema up to SCHEMA_VERSION; refuse foreign or newer databases."""
    version = schema_version(conn)
    if version < 0:
        raise corruption.corrupt_error(path, f"its header holds schema version {version}")
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer memlens (schema {version} > {SCHEMA_VERSION}); upgrade memlens")
    if version == SCHEMA_VERSION:
        return
    if version == 0:
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchone()[0]
        if tables:
            raise StoreError(f"{path} is a SQLite database but not a memlens store")
    with transaction(conn, path):
        # re-check under the write lock: another process may have migrated meanwhile
        current = schema_version(conn)
        for v in range(current + 1, SCHEMA_VERSION + 1):
            for stmt in MIGRATIONS[v](dim):
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {v}")


@contextmanager
def transaction(conn: Any, path: Path | str = "") -> Iterator[Any]:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (nothing half-written).

    Refused once this process has seen damage in the store (see ``memlens.store.corruption``).
    """
    sq = driver()
    corruption.refuse_writes(getattr(conn, "store_label", "") or path)
    corruption.verify_once(conn)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sq.Error as exc:
        raise translate(exc, path) from None
    try:
        yield conn
    except sq.Error as exc:
        _rollback(conn)
        raise translate(exc, path) from None
    except BaseException:
        _rollback(conn)
        raise
    try:
        conn.execute("COMMIT")
    except sq.Error as exc:
        _rollback(conn)
        raise translate(exc, path) from None


def _rollback(conn: Any) -> None:
    """Roll back if a transaction is still open; never hide the error that led here.

    SQLite may already have rolled back itself (an I/O error, a full disk, damaged pages):
    a second ROLLBACK would fail with "no transaction is active" instead.
    """
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except Exception:
        pass
