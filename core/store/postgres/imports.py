"""Imports on PostgreSQL: staged in short write transactions, invisible until published, as on SQLite.

The same protocol as ``memlens.store.staging``: the import registers a row of
``imports``; its entries and audit rows carry that id and stay invisible to
every reader (``visible()``) until one short transaction deletes the row and
bumps the wing generations. Between two staging transactions the importer
lets other writers take the write lock. An importer that dies leaves
invisible rows; ``sweep`` removes those of imports whose owner is gone (same
host) or silent for ``STALE_S`` (any host: a team's processes run on several).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError, ValidationError
from memlens.limits import printable
from memlens.store.staging import BATCH_S, DELETE_BATCH, STALE_S, _now, _owner_gone, owner, pause

if TYPE_CHECKING:
    import numpy as np

    from memlens.models import Entry
    from memlens.store.postgres.store import PgStore
    from memlens.store.postgres.writer import PgWriter

STAGE_ROWS = 64


def begin(store: PgStore, source: str) -> int:
    now = _now()
    with store.write() as w:
        row = w.conn.execute("INSERT INTO imports(owner, started_at, heartbeat, source) VALUES (%s, %s, %s, %s) RETURNING id",
                             (owner(), now, now, printable(source))).fetchone()
    return int(row[0])


def check_owned(conn: Any, import_id: int, shown: Path | str) -> None:
    row = conn.execute("SELECT owner FROM imports WHERE id = %s", (import_id,)).fetchone()
    if row is None or row[0] != owner():
        raise MemlensError(f"{shown}: the import was abandoned (no write for {STALE_S} s) and removed; nothing was written")
    conn.execute("UPDATE imports SET heartbeat = %s WHERE id = %s", (_now(), import_id))


def write(store: PgStore, shown: Path, rows: Iterator[tuple[int, int, Entry]], vecs: np.ndarray, outside: dict[str, int],
          unchanged: Callable[[], None], progress: Callable[[int], None]) -> None:
    """Stage ``rows`` (row of ``vecs``, line number, entry), then publish them at once; on failure remove them."""
    import_id = begin(store, str(shown))
    try:
        wings: set[str] = set()
        seq, written, done = 0, 0, False
        while not done:
            with store.write() as w:
                check_owned(w.conn, import_id, shown)
                until = time.monotonic() + BATCH_S
                batch: list[tuple[int, int, Entry]] = []
                while not done and time.monotonic() < until:
                    item = next(rows, None)
                    if item is None:
                        done = True
                    else:
                        batch.append(item)
                        written = item[0] + 1
                    if len(batch) == STAGE_ROWS or (done and batch):
                        seq = _stage(w, shown, import_id, batch, vecs, wings) or seq
                        batch = []
                seq = _stage(w, shown, import_id, batch, vecs, wings) or seq
            progress(written)
            if not done:
                pause()
        unchanged()
        with store.write() as w:  # publish: one short transaction, whatever the size
            check_owned(w.conn, import_id, shown)
            if outside:
                found = {r[0] for r in w.conn.execute("SELECT id FROM entries WHERE id = ANY(%s) AND (import_id IS NULL OR "
                                                      "import_id NOT IN (SELECT id FROM imports))", (list(outside),))}
                for target, n in outside.items():
                    if target not in found:
                        raise ValidationError(f"{shown}: line {n}: field 'overrides': entry {target!r} was deleted while "
                                              "importing; nothing was written")
            w.conn.execute("DELETE FROM imports WHERE id = %s", (import_id,))
            w.bump(wings, seq)
    except BaseException:
        try:
            discard(store, import_id)
        except BaseException:  # interrupted again, or the server is gone: the next import's sweep removes the rows
            pass
        raise


def _stage(w: PgWriter, shown: Path, import_id: int, batch: list[tuple[int, int, Entry]], vecs: np.ndarray,
           wings: set[str]) -> int:
    if not batch:
        return 0
    taken = w.conn.execute("SELECT id FROM entries WHERE id = ANY(%s) LIMIT 1", ([e.id for _, _, e in batch],)).fetchone()
    if taken:
        n = next(n for _, n, e in batch if e.id == taken[0])
        raise ValidationError(f"{shown}: line {n}: field 'id': {taken[0]!r} was added to the store while importing; "
                              "nothing was written")
    seq = 0
    for row, _, entry in batch:
        w.insert(entry, vecs[row], import_id=import_id)
        seq = w.audit("import", entry.id, entry.wing, None, entry.to_record(), {"file": str(shown)}, import_id=import_id)
        wings.add(entry.wing)
    return seq


def discard(store: PgStore, import_id: int) -> None:
    """Remove an unpublished import's rows in short transactions, then its ``imports`` row (last: until then
    the remaining rows stay invisible)."""
    while True:
        with store.write() as w:
            conn = w.conn
            if conn.execute("SELECT 1 FROM imports WHERE id = %s", (import_id,)).fetchone() is None:
                return  # published, or already removed
            gone = conn.execute("DELETE FROM entries WHERE rowid IN (SELECT rowid FROM entries WHERE import_id = %s LIMIT %s)",
                                (import_id, DELETE_BATCH)).rowcount
            if not gone:
                conn.execute("DELETE FROM audit WHERE import_id = %s", (import_id,))
                conn.execute("DELETE FROM imports WHERE id = %s", (import_id,))
                return
        pause()


def sweep(store: PgStore) -> int:
    """Remove the rows of every import whose owner is gone (or silent for ``STALE_S``); returns how many."""
    swept = 0
    cutoff = time.time() - STALE_S
    with store.connection() as conn:
        pending = conn.execute("SELECT id, owner, heartbeat FROM imports").fetchall()
    for import_id, who, beat in pending:
        try:
            silent = float(beat) < cutoff
        except ValueError:
            silent = True
        if who != "abandoned" and not silent and not _owner_gone(who):
            continue
        with store.write() as w:  # claim it: its importer, if it ever resumes, finds it gone
            w.conn.execute("UPDATE imports SET owner = 'abandoned' WHERE id = %s", (import_id,))
        discard(store, import_id)
        swept += 1
    return swept
