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

from memlens.errors import StaleUpdateError, ValidationError  # noqa: F401 (StaleUpdateError: re-exported)
from memlens.limits import entry_text_limit
from memlens.models import Entry, content_hash
from memlens.store import db
from memlens.store.staging import visible

if TYPE_CHECKING:
    import numpy as np

    from memlens.memory import Memory

NEAR_DUPLICATE = 0.80  # cosine similarity from which another entry of the wing is reported as similar
SIMILAR_MAX = 3


def add_unique(mem: Memory, text: str, *, wing: str, **fields: Any) -> tuple[Entry, bool, list[dict[str, Any]]]:
    """Add an entry unless the wing already holds the same content.

    Returns ``(entry, created, similar)``: the new entry (or the one already
    stored), whether it was created, and up to three other entries of the wing
    that are near-duplicates (cosine similarity >= ``NEAR_DUPLICATE``), best first.
    """
    from memlens.memory import _COLUMNS, row_to_entry

    with entry_text_limit(mem.settings.limits.max_entry_chars):
        entry = mem._validate({"text": text, "wing": wing, **fields})
    mem._check_writable()
    mem._check_overrides([entry])
    vec = mem._vectors_for([entry])[0]
    digest = content_hash(entry.embed_text)
    with db.transaction(mem.conn, mem.path) as conn:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM entries WHERE content_hash = ? AND wing = ? AND {visible()} ORDER BY rowid LIMIT 1",
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
    from memlens.memory import vec_blob

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
        meta = conn.execute(f"SELECT id, title, type, status FROM entries WHERE rowid = ? AND {visible()}", (rowid,)).fetchone()
        if meta is None or meta[0] == exclude:
            continue
        out.append({"id": meta[0], "title": meta[1], "type": meta[2], "status": meta[3], "similarity": round(sim, 4)})
    return out[:limit]


def update_checked(mem: Memory, entry_id: str, expected_updated_at: str | datetime | None = None, **changes: Any) -> Entry:
    """``Memory.update`` with an optional guard: refuse when the entry's ``updated_at`` moved on.

    The guard is checked again inside the write transaction, so an edit from another
    process that lands between the caller's read and this write is never overwritten.
    """
    return mem.update(entry_id, expected_updated_at=expected_updated_at, **changes)


def wing_counts(mem: Memory) -> list[dict[str, Any]]:
    """Every wing with its entry count and rooms (room -> count), from one ``GROUP BY`` on the scope index."""
    wings: dict[str, dict[str, Any]] = {}
    sql = f"SELECT wing, room, count(*) FROM entries WHERE {visible()} GROUP BY wing, room ORDER BY wing, room"
    for wing, room, n in mem.conn.execute(sql):
        w = wings.setdefault(wing, {"wing": wing, "entries": 0, "rooms": {}})
        w["entries"] += n
        w["rooms"][room or ""] = n
    return list(wings.values())
