"""SQLite connections with sqlite-vec loaded, transactions, and applying the schema (``memlens.store.schema``).

Python's stdlib ``sqlite3`` is often built without extension loading (pyenv,
macOS system Python, this machine). We use it when it can load extensions and
otherwise ``sqlean`` (sqlean-py), a drop-in build of the same module that can.
"""

from __future__ import annotations

import os
import re
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
from memlens.store.schema import MIGRATIONS, SCHEMA_VERSION

_driver_lock = threading.Lock()
_driver: ModuleType | None = None
_turns_lock = threading.Lock()
_turns: dict[tuple[int, int], threading.RLock] = {}  # a store file's (device, inode) -> its writers' turn in this process


def _forget_turns() -> None:
    """In a forked child: new turns (a turn some thread of the parent held at the fork would stay held for ever;
    a connection made before the fork takes the child's at its next write, ``write_turn``)."""
    global _turns_lock, _turns
    _turns_lock = threading.Lock()
    _turns = {}


os.register_at_fork(after_in_child=_forget_turns)


def driver() -> ModuleType:
    """The sqlite3-compatible module that can load sqlite-vec."""
    global _driver
    with _driver_lock:
        if _driver is None:
            if hasattr(_stdlib_sqlite3.Connection, "enable_load_extension"):
                _driver = _stdlib_sqlite3
            else:
                try:
                    import sqlean
                except ImportError:
                    raise StoreError(
                        "this Python's sqlite3 cannot load extensions and sqlean-py is not installed: "
                        "pip install sqlean-py"
                    ) from None
                _driver = sqlean
        return _driver



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


# libpq's key=value connection string ("dbname=team host=db user=ops password=..."): its first word
_CONNINFO = re.compile(r"\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|options|connect_timeout|"
                       r"application_name)\s*=")


def refuse_conninfo(target: str) -> None:
    """StoreError for a store written as libpq's key=value connection string: it would be taken for a file name (a
    file named after the password). The string is not shown: it may hold a password."""
    if _CONNINFO.match(target):
        raise StoreError("the store is written as a PostgreSQL connection string (key=value words), which would be "
                         "taken for a file name: write it as a URI, postgresql://USER:PASSWORD@HOST:PORT/DBNAME")


def check_store_path(path: Path, *, create: bool) -> None:
    """A store is a regular file (or a link to one), or absent and then created here when ``create``.

    Devices, FIFOs, sockets and directories are refused before SQLite opens
    them: SQLite would block on a FIFO, fail on ``/dev/null`` only at the
    first commit, and create ``-journal``/``-wal`` files beside any of them.
    """
    from memlens.files import kind_of

    refuse_conninfo(str(path))
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
            if st.st_size == 0 and not create:  # SQLite would make it a store, with the schema written into it
                raise StoreError(f"store path {path} is an empty file, not a store (memlens add, import or demo "
                                 "make one there)")
            return
        if not create:
            raise StoreError(
                f"no store at {path} (memlens add, import or demo create one; --store or MEMLENS_STORE picks another)"
            )
        if attempt == 0:
            _secure_create(path)
    raise StoreError(f"cannot create store {path}")


# [storage] synchronous: in WAL mode NORMAL writes each commit to the OS (a crash of any process keeps it) and waits for
# the disk only at checkpoints (a power loss may lose the last commits); FULL waits for the disk at every commit
SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}


def connect(path: Path, *, busy_timeout_ms: int = 5000, mmap_size: int = 1 << 30, synchronous: str = "normal",
            create: bool = True) -> Any:
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
    conn.file_path = os.path.abspath(path) if str(path) != ":memory:" else ""  # (a later chdir moves no check)
    conn.file_id = file_identity(conn.file_path) if conn.file_path else None
    conn.write_turn, conn.turn_pid = _turn(conn.file_id), os.getpid()
    conn.busy_timeout_s = busy_timeout_ms / 1000
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
        if foreign(conn):  # another program's database: refused before anything (the journal mode) is changed in it
            conn.close()
            raise StoreError(f"{path} is a SQLite database but not a memlens store")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal" and os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS[synchronous]}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA mmap_size = {int(mmap_size)}")
    except StoreCorruptError:
        conn.close()
        raise
    except sq.DatabaseError as exc:
        conn.close()
        raise translate(exc, path) from None
    return conn


def _turn(file_id: tuple[int, int] | None) -> threading.RLock | None:
    """The lock this process's writers of one store file take before SQLite's write lock (None: no file).

    SQLite's busy handler polls: a writer that finds the lock taken sleeps, up to 100 ms at a time, and one
    that arrives later may take the lock first, again and again. With many threads writing at once (a server's
    tool calls), an early one could wait out the whole busy timeout and fail while the store served others.
    Threads of one process therefore queue here (woken when the turn is free) and only the first of them
    waits on SQLite, for other processes. Reentrant: ``SqliteStore.write`` holds it around the transaction, which
    takes it again. A write may thus wait up to the busy timeout here, then up to the busy timeout in SQLite.
    """
    if file_id is None:
        return None
    with _turns_lock:
        turn = _turns.get(file_id)
        if turn is None:
            turn = _turns[file_id] = threading.RLock()
        return turn


@contextmanager
def write_turn(conn: Any, path: Path | str = "", timeout_s: float | None = None) -> Iterator[None]:
    """Hold this process's turn to write ``conn``'s file (``_turn``), waiting at most ``timeout_s`` (default: the
    connection's busy timeout) before the one-line "locked" error."""
    turn = getattr(conn, "write_turn", None)
    if turn is None:
        yield
        return
    if getattr(conn, "turn_pid", None) != os.getpid():  # a connection made before a fork: this process's turn
        fresh = _turn(conn.file_id)
        if fresh is not None:
            turn = conn.write_turn = fresh
        conn.turn_pid = os.getpid()
    wait = getattr(conn, "busy_timeout_s", 5.0) if timeout_s is None else timeout_s
    if not turn.acquire(timeout=wait):
        raise translate(RuntimeError("locked"), path or getattr(conn, "store_label", ""))
    try:
        yield
    finally:
        turn.release()


def file_identity(path: Path | str) -> tuple[int, int] | None:
    """The file at ``path`` (device and inode), None when there is none."""
    if str(path) == ":memory:":
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def still_there(conn: Any) -> None:
    """StoreError when the store file ``conn`` opened was deleted or replaced since: a connection keeps the old file,
    so what it read would be the old store's and what it wrote would go with that file, lost (an app or server left
    open while the file is removed, or a copy put in its place)."""
    same_file(getattr(conn, "file_path", ""), getattr(conn, "file_id", None), getattr(conn, "store_label", ""))


def same_file(path: Path | str, opened: tuple[int, int] | None, label: Path | str = "") -> None:
    """StoreError unless ``path`` is still the file ``opened`` (``file_identity`` when it was opened; None: unknown)."""
    if opened is None or not str(path):
        return
    now = file_identity(path)
    if now != opened:
        raise moved(label or path, gone=now is None)


def moved(label: Path | str, *, gone: bool) -> StoreError:
    """The error for a store file deleted (``gone``) or replaced after this process opened it."""
    what = "deleted" if gone else "replaced by another file"
    return StoreError(f"store {label} was {what} after this process opened it; nothing more is read from or written "
                      "to the old file: open the store again (restart the app or server, or Memory.open)")


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


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` says another writer held the store (the driver's "locked"/"busy", or ``write_turn``'s)."""
    low = str(exc).lower()
    return isinstance(exc, StoreLockedError) or "locked" in low or "busy" in low


def translate(exc: Exception, path: Path | str) -> StoreError:
    """Turn a driver error into a one-line, actionable StoreError."""
    msg = str(exc)
    low = msg.lower()
    if is_busy(exc):
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


def foreign(conn: Any) -> bool:
    """Whether the database holds tables but no memlens schema version: another program's (a memlens store sets
    its version in the transaction that makes its tables)."""
    if schema_version(conn) != 0:
        return False
    return bool(conn.execute("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchone()[0])


def migrate(conn: Any, path: Path | str, dim: int) -> None:
    """Bring the schema up to SCHEMA_VERSION; refuse foreign or newer databases."""
    version = schema_version(conn)
    if version < 0:
        raise corruption.corrupt_error(path, f"its header holds schema version {version}")
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer memlens (schema {version} > {SCHEMA_VERSION}); upgrade memlens")
    if version == SCHEMA_VERSION:
        return
    if version == 0 and foreign(conn):
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
    with write_turn(conn, path):  # this process's other writers wait their turn here, not in SQLite's busy handler
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sq.Error as exc:
            raise translate(exc, path) from None
        try:
            still_there(conn)  # under the write lock: the file this transaction writes is the store's
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


# the schema's names are re-exported: callers read the version and the migrations through this module
__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "check_store_path", "connect", "driver", "file_identity", "is_read_only",
           "migrate", "moved", "refuse_conninfo", "same_file", "schema_version", "still_there", "transaction", "translate"]
