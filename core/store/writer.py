"""``SqliteWriter``: what one write transaction of a ``SqliteStore`` can do (``memlens.store.base.Writer``).

Entry rows are written through the one mapping of ``memlens.store.rows``; each
entry's vector goes into sqlite-vec beside it (with the scope columns a KNN
filters on); each change appends an audit row; ``bump`` advances the
generation of the wings written, which is how caches learn of the change.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memlens.attribution import stamp
from memlens.errors import id_taken
from memlens.limits import printable
from memlens.models import Entry, format_ts, utcnow
from memlens.store.rows import COLUMN_LIST, STORED_COLUMNS, entry_values, row_to_entry, vec_blob
from memlens.store.staging import visible
from memlens.store.task_rows import SqliteTaskRows

if TYPE_CHECKING:
    import numpy as np

_INSERT = f"INSERT INTO entries({', '.join(STORED_COLUMNS)}) VALUES ({', '.join('?' * len(STORED_COLUMNS))})"
_UPDATE = (
    "UPDATE entries SET " + ", ".join(f"{c} = ?" for c in STORED_COLUMNS if c not in ("id", "import_id")) + " WHERE rowid = ?"
)


@dataclass
class WingAppends:
    """What one transaction did to a wing, for the in-process vector index (``VectorIndex.append``): the entries
    ``add`` appended, and the wing's generation before the transaction and how often it bumped it. ``other``: a
    bump not made by ``add`` (an update, a delete, an import...), which the appended rows do not describe."""

    before: int
    bumps: int = 0
    rows: list[tuple[int, bytes, tuple[str, str, str, str]]] = field(default_factory=list)  # rowid, vector, filters
    other: bool = False


class SqliteWriter:
    conn: Any  # the transaction's connection (``Writer.conn``)

    def __init__(self, conn: Any, model_id: str, *, track_appends: bool = False) -> None:
        self.conn = conn
        self.model_id = model_id
        self.tasks = SqliteTaskRows(conn)
        # wing -> WingAppends, kept when the store holds an in-process vector index (``SqliteStore.write``)
        self.appends: dict[str, WingAppends] | None = {} if track_appends else None

    # -- entries --------------------------------------------------------------------------------

    def insert(self, entry: Entry, vector: np.ndarray | bytes, *, import_id: int | None = None) -> int:
        cur = self.conn.execute(_INSERT, [*entry_values(entry, self.model_id), import_id])
        rowid = int(cur.lastrowid)
        self._insert_vec(rowid, entry, vector if isinstance(vector, bytes) else vec_blob(vector))
        return rowid

    def add(self, entry: Entry, vector: np.ndarray | bytes) -> None:
        state = self.state(entry.id)
        if state is not None:
            raise id_taken(entry.id, state)
        blob = vector if isinstance(vector, bytes) else vec_blob(vector)
        rowid = self.insert(entry, blob)
        seq = self.audit("add", entry.id, entry.wing, None, entry.to_record())
        self._bump({entry.wing}, seq, (rowid, blob, (entry.room, entry.kind.value, entry.type.value, entry.status.value)))

    def state(self, entry_id: str) -> bool | None:
        row = self.conn.execute(f"SELECT {visible()} FROM entries WHERE id = ?", (entry_id,)).fetchone()
        return None if row is None else bool(row[0])

    def find(self, entry_id: str) -> tuple[int, Entry] | None:
        row = self.conn.execute(f"SELECT rowid, {COLUMN_LIST} FROM entries WHERE id = ? AND {visible()}", (entry_id,)).fetchone()
        return None if row is None else (int(row[0]), row_to_entry(row[1:]))

    def find_rowid(self, entry_id: str) -> int | None:
        row = self.conn.execute(f"SELECT rowid FROM entries WHERE id = ? AND {visible()}", (entry_id,)).fetchone()
        return None if row is None else int(row[0])

    def find_content(self, digest: str, wing: str) -> Entry | None:
        row = self.conn.execute(
            f"SELECT {COLUMN_LIST} FROM entries WHERE content_hash = ? AND wing = ? AND {visible()} ORDER BY rowid LIMIT 1",
            (digest, wing),
        ).fetchone()
        return None if row is None else row_to_entry(row)

    def replace(self, rowid: int, entry: Entry, vector: bytes | None) -> None:
        conn = self.conn
        if vector is None:
            vector = bytes(conn.execute("SELECT embedding FROM entries_vec WHERE rowid = ?", (rowid,)).fetchone()[0])
        values = entry_values(entry, self.model_id)
        conn.execute(_UPDATE, (*values[1:], rowid))
        conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (rowid,))
        self._insert_vec(rowid, entry, vector)

    def delete(self, rowid: int) -> None:
        self.conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (rowid,))
        self.conn.execute("DELETE FROM entries WHERE rowid = ?", (rowid,))

    def _insert_vec(self, rowid: int, entry: Entry, blob: bytes) -> None:
        self.conn.execute(
            "INSERT INTO entries_vec(rowid, embedding, wing, room, kind, type, status) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rowid, blob, entry.wing, entry.room, entry.kind.value, entry.type.value, entry.status.value),
        )

    # -- audit and generations ------------------------------------------------------------------

    def audit(
        self, action: str, entry_id: str | None, wing: str | None, before: dict[str, Any] | None,
        after: dict[str, Any] | None, detail: dict[str, Any] | None = None, *, import_id: int | None = None,
    ) -> int:
        def dumps(v: Any) -> str | None:
            return None if v is None else json.dumps(v, ensure_ascii=False)

        detail = stamp(detail)  # which client made the write, when one is acting (MCP)
        cur = self.conn.execute(
            "INSERT INTO audit(ts, action, entry_id, wing, before, after, detail, import_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (format_ts(utcnow()), action, entry_id, wing, dumps(before), dumps(after), dumps(printable(detail)), import_id),
        )
        return int(cur.lastrowid)

    def bump(self, wings: Iterable[str], seq: int) -> None:
        self._bump(wings, seq, None)

    def _bump(self, wings: Iterable[str], seq: int, appended: tuple[int, bytes, tuple[str, str, str, str]] | None) -> None:
        """Advance the generation of ``wings``; ``appended``: the one entry ``add`` appended to the one wing."""
        names = sorted(set(wings))
        if self.appends is not None:
            for wing in names:
                track = self.appends.get(wing)
                if track is None:  # the generation before this transaction (nobody else writes inside it)
                    row = self.conn.execute("SELECT generation FROM wings WHERE wing = ?", (wing,)).fetchone()
                    track = self.appends[wing] = WingAppends(int(row[0]) if row else 0)
                track.bumps += 1
                if appended is None:
                    track.other = True
                else:
                    track.rows.append(appended)
        self.conn.executemany(
            "INSERT INTO wings(wing, generation, last_write_seq) VALUES (?, 1, ?) "
            "ON CONFLICT(wing) DO UPDATE SET generation = generation + 1, last_write_seq = excluded.last_write_seq",
            [(w, seq) for w in names],
        )

    def last_seq(self) -> int:
        row = self.conn.execute("SELECT max(seq) FROM audit").fetchone()
        return int(row[0] or 0)

