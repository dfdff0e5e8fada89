"""Imports that never block other writers for long, and leave nothing behind.

An import writes its entries in many short transactions, as *staged* rows:
each carries the id of a row of ``imports``, the table of imports still in
progress. Every read of entries (and of the audit log) keeps only rows whose
``import_id`` is NULL or names no pending import (``visible()``), so no
reader ever sees part of an import. The import is published by one short
transaction that deletes its ``imports`` row and bumps the wing generations:
every staged row becomes visible at once, whatever the import's size.

A vec0 KNN cannot take the anti-join inside the index, so a search whose
scope holds staged rows ranks the visible vectors itself (``memlens.retrieval.search``);
the check and the KNN share one read snapshot, so the KNN never meets a staged
row. Counts and distinct values take all rows less the staged ones, through
the index on ``import_id``.

Between two staging transactions the importer pauses a little longer than
SQLite's busy handler sleeps between two tries (100 ms), so a writer waiting
for the lock gets it at the next pause: no write waits longer than about one
staging batch plus that pause.

An import killed before it published (SIGKILL, power loss) leaves invisible
rows. Its ``imports`` row names the owner (host, pid and the process's start
time) and a heartbeat; the next import removes the rows of every import
whose owner is gone or whose heartbeat is older than ``STALE_S``. Its
scratch files live in ``<TMPDIR>/memlens-import-<pid>-*/``, which the next
import removes once that pid is gone.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memlens.errors import MemlensError
from memlens.limits import printable
from memlens.store import db

SCRATCH_PREFIX = "memlens-import-"
# check and salvage copy the store into scratch directories of their own: swept the same way
SCRATCH_PREFIXES = (SCRATCH_PREFIX, "memlens-check-", "memlens-salvage-")
BATCH_S = 0.25  # a staging transaction holds the write lock about this long
PAUSE_S = 0.11  # then lets waiting writers in (SQLite's busy handler retries every 100 ms at most)
STALE_S = 600  # an import that has not written for this long is abandoned
DELETE_BATCH = 500


def visible(alias: str = "") -> str:
    """SQL condition: the entries (or audit) row belongs to no import in progress."""
    p = f"{alias}." if alias else ""
    return f"({p}import_id IS NULL OR {p}import_id NOT IN (SELECT id FROM imports))"


def staged(conn: Any, wings: list[str] | None) -> bool:
    """Whether an import in progress has staged rows in ``wings`` (None: anywhere)."""
    if wings is None:
        return conn.execute("SELECT 1 FROM imports LIMIT 1").fetchone() is not None
    if not wings:
        return False
    q = (f"SELECT 1 FROM entries WHERE import_id IN (SELECT id FROM imports) "
         f"AND wing IN ({','.join('?' * len(wings))}) LIMIT 1")
    return conn.execute(q, wings).fetchone() is not None


def visible_count(conn: Any) -> int:
    """Visible entries: all of them less the staged ones (counted through the staged-rows index; one statement)."""
    q = ("SELECT (SELECT count(*) FROM entries) - "
         "(SELECT count(*) FROM entries WHERE import_id IN (SELECT id FROM imports))")
    return int(conn.execute(q).fetchone()[0])


def visible_groups(conn: Any, col: str, where: str = "", args: tuple[Any, ...] = ()) -> list[tuple[Any, int]]:
    """(value of ``col``, visible entries) for the values with any, in order; ``where`` narrows (without WHERE).

    All rows grouped (by an index where there is one) less the staged rows grouped: much faster than
    testing every row, and one statement, so one snapshot.
    """
    cond = f" WHERE {where}" if where else ""
    staged_cond = " AND " + where if where else ""
    q = (f"SELECT v, sum(n) FROM (SELECT {col} AS v, count(*) AS n FROM entries{cond} GROUP BY {col} UNION ALL "
         f"SELECT {col}, -count(*) FROM entries WHERE import_id IN (SELECT id FROM imports){staged_cond} GROUP BY {col}) "
         "GROUP BY v HAVING sum(n) > 0 ORDER BY v")
    return [(v, int(n)) for v, n in conn.execute(q, (*args, *args))]


# -- owners ------------------------------------------------------------------------------


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _owner_gone(value: str) -> bool:
    parts = value.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return True
    host, pid, started = parts[0], int(parts[1]), parts[2]
    if host != socket.gethostname():
        return False  # cannot tell from here; the heartbeat decides
    return not _alive(pid) or (bool(started) and _start_time(pid) != started)


# -- the write protocol ------------------------------------------------------------------


def begin(conn: Any, path: Path, source: str) -> int:
    """Register an import in progress; returns its id (never reused: AUTOINCREMENT)."""
    now = _now()
    with db.transaction(conn, path):
        cur = conn.execute(
            "INSERT INTO imports(owner, started_at, heartbeat, source) VALUES (?, ?, ?, ?)",
            (owner(), now, now, printable(source)),  # a file name need not be valid UTF-8
        )
        return int(cur.lastrowid)


def check_owned(conn: Any, import_id: int, shown: Path | str) -> None:
    """Inside a staging transaction: the import is still ours (not abandoned and cleaned up by another process)."""
    row = conn.execute("SELECT owner FROM imports WHERE id = ?", (import_id,)).fetchone()
    if row is None or row[0] != owner():
        raise MemlensError(f"{shown}: the import was abandoned (no write for {STALE_S} s) and removed; nothing was written")
    conn.execute("UPDATE imports SET heartbeat = ? WHERE id = ?", (_now(), import_id))


def pause() -> None:
    time.sleep(PAUSE_S)


def discard(conn: Any, path: Path, import_id: int) -> None:
    """Remove an unpublished import's rows in short transactions, then its ``imports`` row (last: until then
    the remaining rows stay invisible)."""
    while True:
        with db.transaction(conn, path):
            if conn.execute("SELECT 1 FROM imports WHERE id = ?", (import_id,)).fetchone() is None:
                return  # published (its rows are entries now) or already removed
            rowids = [r for (r,) in conn.execute(
                "SELECT rowid FROM entries WHERE import_id = ? LIMIT ?", (import_id, DELETE_BATCH))]
            if rowids:
                conn.executemany("DELETE FROM entries_vec WHERE rowid = ?", [(r,) for r in rowids])
                conn.execute(f"DELETE FROM entries WHERE rowid IN ({','.join('?' * len(rowids))})", rowids)
            else:
                conn.execute(
                    "DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE import_id = ? LIMIT ?)",
                    (import_id, DELETE_BATCH * 20),
                )
                if conn.execute("SELECT 1 FROM audit WHERE import_id = ? LIMIT 1", (import_id,)).fetchone() is None:
                    conn.execute("DELETE FROM imports WHERE id = ?", (import_id,))
                    return
        pause()


def sweep(conn: Any, path: Path) -> int:
    """Remove the rows of every import whose owner is gone (or silent for ``STALE_S``); returns how many."""
    swept = 0
    cutoff = time.time() - STALE_S
    for import_id, who, beat in conn.execute("SELECT id, owner, heartbeat FROM imports").fetchall():
        try:
            silent = float(beat) < cutoff
        except ValueError:
            silent = True
        if who != "abandoned" and not silent and not _owner_gone(who):
            continue
        with db.transaction(conn, path):  # claim it: its importer, if it ever resumes, finds it gone
            conn.execute("UPDATE imports SET owner = 'abandoned' WHERE id = ?", (import_id,))
        discard(conn, path, import_id)
        swept += 1
    return swept


def _now() -> str:
    return f"{time.time():.3f}"


# -- scratch files -----------------------------------------------------------------------


def _scratch_root() -> Path:
    return Path(tempfile.gettempdir())


def sweep_scratch() -> int:
    """Remove scratch files of imports whose process is gone; returns how many.

    Ours are ``memlens-import-<pid>-*`` directories (``memlens-check-<pid>-*`` and
    ``memlens-salvage-<pid>-*`` for the copies those commands make). Earlier versions named
    theirs (and the spooled stdin) ``memlens-import-<random>``: those go once a day old.
    """
    removed = 0
    try:
        candidates = [(d, prefix) for prefix in SCRATCH_PREFIXES for d in _scratch_root().glob(prefix + "*")]
    except OSError:
        return 0
    uid = os.getuid() if hasattr(os, "getuid") else None
    for d, prefix in candidates:
        pid, sep, _ = d.name[len(prefix):].partition("-")
        try:
            st = d.lstat()
            if uid is not None and st.st_uid != uid:
                continue
            if pid.isdigit() and sep and d.is_dir():
                if _alive(int(pid)):
                    continue
            elif time.time() - st.st_mtime < 86400:
                continue
            if d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
            else:
                d.unlink()
        except OSError:
            continue
        removed += not os.path.lexists(d)
    return removed


@contextmanager
def scratch(prefix: str = SCRATCH_PREFIX) -> Iterator[Path]:
    """A private scratch directory, removed on exit (and by the next import, check or salvage if this process is killed)."""
    sweep_scratch()
    d = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
