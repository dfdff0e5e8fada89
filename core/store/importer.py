"""An import's entries written as staged rows, then published at once (the rules: ``memlens.store.staging``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memlens.errors import ValidationError
from memlens.store import staging, textindex

if TYPE_CHECKING:
    import numpy as np

    from memlens.models import Entry
    from memlens.store.writer import SqliteWriter


class _Host(Protocol):
    """The store an import writes to (``SqliteStore``)."""

    path: Path

    @property
    def conn(self) -> Any: ...
    def write(self) -> AbstractContextManager[SqliteWriter]: ...


def write(store: _Host, shown: Path, rows: Iterator[tuple[int, int, Entry]], vecs: np.ndarray, outside: dict[str, int],
          unchanged: Callable[[], None], progress: Callable[[int], None]) -> None:
    """Stage ``rows`` (row of ``vecs``, line number, entry) in short transactions, then publish them at once.

    ``outside``: override targets already in the store (-> a line naming them), checked again when publishing;
    ``unchanged`` raises if the source changed. On any failure the staged rows are removed again.
    """
    conn = store.conn
    import_id = staging.begin(conn, store.path, str(shown))
    try:
        wings: set[str] = set()
        seq, written, done = 0, 0, False
        while not done:
            with store.write() as w:
                staging.check_owned(w.conn, import_id, shown)
                until = time.monotonic() + staging.BATCH_S
                batch: list[tuple[int, int, Entry]] = []
                while not done:  # at least one row a transaction
                    item = next(rows, None)
                    if item is None:
                        done = True
                    else:
                        batch.append(item)
                        written = item[0] + 1
                    if len(batch) == 64 or (done and batch):
                        seq = _stage(w, shown, import_id, batch, vecs, wings) or seq
                        batch = []
                    if time.monotonic() >= until:
                        break
                seq = _stage(w, shown, import_id, batch, vecs, wings) or seq
            progress(written)
            if not done:
                staging.pause()
        unchanged()
        with store.write() as w:  # publish: one short transaction, whatever the size
            staging.check_owned(conn, import_id, shown)
            if outside:
                marks = ",".join("?" * len(outside))
                found = {r[0] for r in conn.execute(
                    f"SELECT id FROM entries WHERE id IN ({marks}) AND {staging.visible()}", list(outside))}
                for target, n in outside.items():
                    if target not in found:
                        raise ValidationError(f"{shown}: line {n}: field 'overrides': entry {target!r} was deleted while "
                                              "importing; nothing was written")
            conn.execute("DELETE FROM imports WHERE id = ?", (import_id,))
            w.bump(wings, seq)
    except BaseException:
        try:
            staging.discard(conn, store.path, import_id)
        except BaseException:  # interrupted again, or the store is gone: the next import removes the rows
            pass
        raise
    textindex.tidy(conn, store.path)  # published; the staged batches left a segment each


def _stage(w: SqliteWriter, shown: Path, import_id: int, batch: list[tuple[int, int, Entry]], vecs: np.ndarray,
           wings: set[str]) -> int:
    """Insert one batch as staged rows (inside the caller's transaction); returns the last audit seq."""
    if not batch:
        return 0
    ids = [e.id for _, _, e in batch]
    taken = w.conn.execute(f"SELECT id FROM entries WHERE id IN ({','.join('?' * len(ids))}) LIMIT 1", ids).fetchone()
    if taken:
        n = next(n for _, n, e in batch if e.id == taken[0])
        raise ValidationError(f"{shown}: line {n}: field 'id': {taken[0]!r} was added to the store while importing; "
                              "nothing was written")
    seq = 0
    for row, _, entry in batch:
        w.insert(entry, vecs[row].tobytes(), import_id=import_id)
        seq = w.audit("import", entry.id, entry.wing, None, entry.to_record(), {"file": str(shown)}, import_id=import_id)
        wings.add(entry.wing)
    return seq
