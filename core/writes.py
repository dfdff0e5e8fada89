"""Writes for many concurrent writers (agents over MCP, the CLI, the app) on one store.

- ``add_unique``: the same content in the same wing is stored once, even when two
  processes add it at the same moment: the check runs inside the write
  transaction (``BEGIN IMMEDIATE`` holds SQLite's write lock, so a second
  writer waits and then sees the first one's row).
- ``update_checked``: an update that names the ``updated_at`` it read is refused
  when someone else changed the entry since (no lost edit).
- ``wing_counts``: wings, rooms and their entry counts from one aggregate query.

"Same content" means the text the model embeds (title and text) has the same
hash: a repeated write with the same arguments is recognised at any size.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import db
from .errors import NotFoundError, ValidationError
from .models import EDITABLE_FIELDS, Entry, content_hash, format_ts, parse_ts, utcnow

if TYPE_CHECKING:
    import numpy as np

    from .store import Memory

NEAR_DUPLICATE = 0.80  # cosine similarity from which another entry of the wing is reported as similar
SIMILAR_MAX = 3


class StaleUpdateError(ValidationError):
    """The entry changed since the caller read it; nothing was written."""


def add_unique(mem: Memory, text: str, *, wing: str, **fields: Any) -> tuple[Entry, bool, list[dict[str, Any]]]:
    """Add an entry unless the wing already holds the same content.

    Returns ``(entry, created, similar)``: the new entry (or the one already
    stored), whether it was created, and up to three other entries of the wing
    that are near-duplicates (cosine similarity >= ``NEAR_DUPLICATE``), best first.
    """
    from .store import _COLUMNS, row_to_entry

    entry = mem._validate({"text": text, "wing": wing, **fields})
    mem._check_overrides([entry])
    vec = mem._vectors_for([entry])[0]
    digest = content_hash(entry.embed_text)
    with db.transaction(mem.conn, mem.path) as conn:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM entries WHERE content_hash = ? AND wing = ? ORDER BY rowid LIMIT 1",
            (digest, entry.wing),
        ).fetchone()
        if row is not None:
            stored, created = row_to_entry(row), False
        else:
            if conn.execute("SELECT 1 FROM entries WHERE id = ?", (entry.id,)).fetchone():
                raise ValidationError(f"an entry with id {entry.id!r} already exists")
            mem._insert(conn, entry, vec)
            seq = mem._audit(conn, "add", entry.id, entry.wing, None, entry.to_record())
            mem._bump(conn, {entry.wing}, seq)
            stored, created = entry, True
    return stored, created, near_duplicates(mem, vec, stored.wing, exclude=stored.id)


def near_duplicates(
    mem: Memory, vec: np.ndarray, wing: str, *, exclude: str | None = None, limit: int = SIMILAR_MAX,
    threshold: float = NEAR_DUPLICATE,
) -> list[dict[str, Any]]:
    """Entries of ``wing`` whose vectors are within ``threshold`` cosine similarity of ``vec``, best first."""
    from .store import vec_blob

    conn = mem.conn
    rows = conn.execute(
        "SELECT rowid, distance FROM entries_vec WHERE embedding MATCH ? AND k = ? AND wing = ?",
        (vec_blob(vec), limit + 1, wing),
    ).fetchall()
    out = []
    for rowid, distance in sorted(rows, key=lambda r: r[1]):
        sim = 1.0 - float(distance)
        if sim < threshold:
            break
        meta = conn.execute("SELECT id, title, type, status FROM entries WHERE rowid = ?", (rowid,)).fetchone()
        if meta is None or meta[0] == exclude:
            continue
        out.append({"id": meta[0], "title": meta[1], "type": meta[2], "status": meta[3], "similarity": round(sim, 4)})
    return out[:limit]


def _same_time(a: datetime, expected: str | datetime) -> bool:
    try:
        want = parse_ts(expected)
    except ValueError:
        raise ValidationError(f"expected_updated_at: {expected!r} is not an ISO-8601 timestamp") from None
    return abs((a - want).total_seconds()) < 1e-6


def update_checked(mem: Memory, entry_id: str, expected_updated_at: str | datetime | None = None, **changes: Any) -> Entry:
    """``Memory.update`` with an optional guard: refuse when the entry's ``updated_at`` moved on.

    The guard is checked inside the write transaction, so an edit from another
    process that lands between the caller's read and this write is never overwritten.
    """
    from .store import _COLUMNS, row_to_entry, vec_blob

    if expected_updated_at is None:
        return mem.update(entry_id, **changes)
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValidationError(f"cannot edit {', '.join(sorted(unknown))}; editable: {', '.join(EDITABLE_FIELDS)}")
    before = mem.get(entry_id)
    if not _same_time(before.updated_at or before.created_at, expected_updated_at):
        raise _stale(before)
    record = before.to_record()
    record.update({k: (v.value if hasattr(v, "value") else v) for k, v in changes.items()})
    record["updated_at"] = utcnow()
    after = mem._validate(record)
    if "overrides" in changes:
        mem._check_overrides([after])
    same_text = after.embed_text == before.embed_text
    vec = None if same_text else mem._vectors_for([after])[0]
    with db.transaction(mem.conn, mem.path) as conn:
        row = conn.execute(f"SELECT rowid, {_COLUMNS} FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"entry {entry_id!r} was deleted meanwhile")
        rowid, current = row[0], row_to_entry(row[1:])
        if not _same_time(current.updated_at or current.created_at, expected_updated_at):
            raise _stale(current)
        if vec is None:
            blob = conn.execute("SELECT embedding FROM entries_vec WHERE rowid = ?", (rowid,)).fetchone()[0]
        else:
            blob = vec_blob(vec)
        mem._write_row(conn, after, rowid)
        conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (rowid,))
        mem._insert_vec(conn, rowid, after, blob)
        seq = mem._audit(
            conn, "update", after.id, after.wing, current.to_record(), after.to_record(), {"reembedded": not same_text}
        )
        mem._bump(conn, {current.wing, after.wing}, seq)
    return after


def _stale(current: Entry) -> StaleUpdateError:
    when = format_ts(current.updated_at or current.created_at)
    return StaleUpdateError(
        f"entry {current.id!r} was changed at {when} since you read it; read it again and re-apply your change"
    )


def wing_counts(mem: Memory) -> list[dict[str, Any]]:
    """Every wing with its entry count and rooms (room -> count), from one ``GROUP BY`` on the scope index."""
    wings: dict[str, dict[str, Any]] = {}
    for wing, room, n in mem.conn.execute("SELECT wing, room, count(*) FROM entries GROUP BY wing, room ORDER BY wing, room"):
        w = wings.setdefault(wing, {"wing": wing, "entries": 0, "rooms": {}})
        w["entries"] += n
        w["rooms"][room or ""] = n
    return list(wings.values())
