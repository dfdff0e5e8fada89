"""Damaged stores: recognise corruption in any driver error, say so in one line, refuse further writes.

SQLite reports damaged pages as SQLITE_CORRUPT ("database disk image is
malformed"); FTS5 as SQLITE_CORRUPT_VTAB; sqlite-vec with messages of its own
("chunks iter error", "vectors blob read error ...", "Internal sqlite-vec
error: ..."). A damaged page is only noticed when a statement reads it, so a
write can succeed on a damaged file: once any statement of this process has
seen damage in a store, every later write transaction on it is refused.

Connections are made with :func:`connection_class`, whose ``execute`` and
cursors turn such errors into :class:`StoreCorruptError` wherever they surface,
including while rows are fetched.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from memlens.errors import StoreCorruptError, StoreError

SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
_VEC_DAMAGE = re.compile(
    r"chunks iter error|blob read error|blob size mismatch|internal sqlite-vec error|"
    r"could not (?:open|read|write)[a-z ]* blob|could not fetch vector data|could not find a row with rowid|"
    r"could not extract metadata value|rowids shadow table|vec0 deletion error|validity bit",
    re.IGNORECASE,
)
_NOT_UTF8 = "Could not decode to UTF-8"  # the driver's message for TEXT bytes that are not UTF-8
_COLUMN = re.compile(r"column '([^']{1,64})'")
_lock = threading.Lock()
_seen: dict[str, str] = {}  # store key -> the first damage this process saw in it
_verified: set[str] = set()  # stores this process checked before its first write
_classes: dict[int, tuple[type, type]] = {}


def store_key(path: Path | str) -> str:
    """One key per store file, however its path was spelled ('' for none or an in-memory database)."""
    return os.path.realpath(path) if str(path) not in ("", ":memory:") else ""


def is_corruption(exc: BaseException) -> bool:
    """Whether a driver error means damaged pages (not a lock, a full disk or a bad statement).

    Text that is not UTF-8 in a TEXT column (the driver cannot decode it) is damage too: memlens
    writes only valid text, so only changed bytes on disk produce it.
    """
    if isinstance(exc, UnicodeDecodeError):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == _SQLITE_CORRUPT:
        return True
    msg = str(exc)
    # not "malformed JSON" (json_extract of a hand-edited value) nor "malformed MATCH expression"
    return "disk image is malformed" in msg or bool(_VEC_DAMAGE.search(msg)) or msg.startswith(_NOT_UTF8)


def hint(path: Path | str) -> str:
    return f"run `memlens --store {path} check`, then `memlens --store {path} salvage NEW.db` to copy what is readable"


def corrupt_error(path: Path | str, detail: str) -> StoreCorruptError:
    return StoreCorruptError(f"store {path} is corrupt ({detail}); {hint(path)}")


def mark(path: Path | str, detail: str) -> None:
    key = store_key(path)
    if key:
        with _lock:
            _seen.setdefault(key, detail)


def seen(path: Path | str) -> str | None:
    """The damage this process has seen in the store at ``path``, if any."""
    if not _seen:
        return None
    return _seen.get(store_key(path))


def refuse_writes(path: Path | str) -> None:
    """Raise if this process has seen damage in ``path``: writing into a damaged file spreads the damage."""
    detail = seen(path)
    if detail is not None:
        raise StoreCorruptError(f"store {path} is corrupt ({detail}); writes are refused; {hint(path)}")


def verify_once(conn: Any) -> None:
    """Before this process first writes to a store: ``PRAGMA quick_check`` of each of its tables.

    A damaged page is only noticed when a statement reads it, and an insert
    reads few pages, so without this a write would land in a damaged file.
    Checked table by table (the tables and indexes, not the free-page
    accounting of a whole-file check): 0.16 to 0.25 s at 100k entries, paid once
    per process and store. Raises StoreCorruptError (and refuses later writes).
    """
    label = getattr(conn, "store_label", "")
    key = store_key(label) if label else ""
    if not key or key in _verified:
        return
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "AND coalesce(sql, '') NOT LIKE 'CREATE VIRTUAL%'"
    )]
    for name in tables:
        quoted = name.replace('"', '""')
        found = [r[0] for r in conn.execute(f'PRAGMA quick_check("{quoted}")')]
        if found != ["ok"]:
            first = str(found[0]).replace("*** in database main ***", "")
            detail = f"quick_check of table {name}: " + " ".join(first.split())[:160]
            mark(label, detail)
            raise corrupt_error(label, detail)
    with _lock:
        _verified.add(key)


def classify(conn: Any, exc: BaseException) -> StoreCorruptError:
    """Record the damage ``exc`` reports on ``conn``'s store; the one-line error to raise for it."""
    label = getattr(conn, "store_label", "") or "?"
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, UnicodeDecodeError) or detail.startswith(_NOT_UTF8):  # (its message quotes the damaged text)
        column = _COLUMN.search(detail)
        detail = "text that is not UTF-8" + (f" in column {column.group(1)}" if column else "")
    mark(label, detail)
    return corrupt_error(label, detail)


def header_damaged(path: Path | str) -> bool:
    """A file that SQLite cannot read but whose header still shows it is one: its magic string or
    the fixed payload fractions (64, 32, 32) at bytes 21-23 that every SQLite database has."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError:
        return False
    return head[:16] == SQLITE_MAGIC or head[21:24] == b"\x40\x20\x20"


def _translated(conn: Any, exc: BaseException) -> BaseException | None:
    """What a driver error raised by ``conn`` becomes: damage, a StoreCorruptError; a statement on a connection
    another thread closed meanwhile (``Memory.close`` while a call ran), a StoreError saying so; else None (the
    error as it is)."""
    if is_corruption(exc):
        return classify(conn, exc)
    if "closed database" in str(exc):
        label = getattr(conn, "store_label", "") or "?"
        return StoreError(f"store {label} was closed while this call ran; open it again (Memory.open)")
    return None


def connection_class(sq: ModuleType) -> type:
    """A ``sq.Connection`` subclass whose statements and fetches report damage as StoreCorruptError."""
    with _lock:
        pair = _classes.get(id(sq))
        if pair is None:
            pair = _make_classes(sq)
            _classes[id(sq)] = pair
    return pair[0]


def _make_classes(sq: ModuleType) -> tuple[type, type]:
    err = sq.DatabaseError

    class Cursor(sq.Cursor):  # type: ignore[misc, name-defined]  # the base is the driver's, chosen at run time
        def _call(self, fn: Any, *args: Any) -> Any:
            try:
                with self.connection.in_use:  # close() from another thread waits for this statement or fetch
                    return fn(*args)
            except (err, UnicodeDecodeError) as exc:
                if (new := _translated(self.connection, exc)) is None:
                    raise
                raise new from None

        def execute(self, sql: str, parameters: Any = ()) -> Any:
            return self._call(super().execute, sql, parameters)

        def executemany(self, sql: str, seq: Any) -> Any:
            return self._call(super().executemany, sql, seq)

        def __next__(self) -> Any:
            return self._call(super().__next__)

        def fetchone(self) -> Any:
            return self._call(super().fetchone)

        def fetchmany(self, size: int | None = None) -> Any:
            return self._call(super().fetchmany, self.arraysize if size is None else size)

        def fetchall(self) -> Any:
            return self._call(super().fetchall)

    class Connection(sq.Connection):  # type: ignore[misc, name-defined]  # (same: sqlite3's or sqlean's)
        """Statements and fetches hold ``in_use``, and ``close`` takes it: a connection closed by another thread
        (``Memory.close`` while a search runs) is closed between two statements, never under one (the binding
        then failed in the running statement, even with a MemoryError); the next statement raises a StoreError."""

        store_label = ""
        file_id: tuple[int, int] | None = None  # the store file it opened, at ``file_path`` (``db.still_there``)
        file_path = ""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.in_use = threading.RLock()

        def cursor(self, factory: Any = Cursor) -> Any:
            try:
                return super().cursor(factory)
            except err as exc:
                if (new := _translated(self, exc)) is None:
                    raise
                raise new from None

        def execute(self, sql: str, parameters: Any = ()) -> Any:
            return self.cursor().execute(sql, parameters)

        def executemany(self, sql: str, seq: Any) -> Any:
            return self.cursor().executemany(sql, seq)

        @property
        def in_transaction(self) -> bool:  # (asked between statements: closed meanwhile, it says so as they do)
            try:
                return bool(super().in_transaction)
            except err as exc:
                if (new := _translated(self, exc)) is None:
                    raise
                raise new from None

        def close(self) -> None:
            with self.in_use:
                super().close()

    return Connection, Cursor
