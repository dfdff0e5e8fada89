"""The SQL behind browsing a store from a front end (``memlens.browse``): lookups by id or title,
an entry's stored vector stamp, who overrides an entry, and a cheap look at a file before it is opened.

Staged rows of an import in progress are never shown (``staging.visible``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memlens.store import db
from memlens.store.staging import visible


def find_ids(conn: Any, text: str, limit: int) -> list[str]:
    """Ids of the entries whose id or title contains ``text`` (SQL LIKE), in id order."""
    like = f"%{text}%"
    rows = conn.execute(
        f"SELECT id FROM entries WHERE (id LIKE ? OR title LIKE ?) AND {visible()} ORDER BY id LIMIT ?",
        (like, like, limit),
    ).fetchall()
    return [r[0] for r in rows]


def vector_stamp(conn: Any, entry_id: str) -> tuple[str, str] | None:
    """(content hash, model) the entry's vector was made from; None if there is no such entry."""
    row = conn.execute(f"SELECT content_hash, model FROM entries WHERE id = ? AND {visible()}", (entry_id,)).fetchone()
    return None if row is None else (row[0], row[1])


def overridden_by(conn: Any, entry_id: str) -> list[str]:
    """Ids of the entries that override ``entry_id``, in id order."""
    return [r[0] for r in conn.execute(f"SELECT id FROM entries WHERE overrides = ? AND {visible()} ORDER BY id", (entry_id,))]


def all_ids(conn: Any) -> list[str]:
    """Every entry id, in id order."""
    return [r[0] for r in conn.execute(f"SELECT id FROM entries WHERE {visible()} ORDER BY id")]


def probe(path: Path) -> tuple[int, int]:
    """(schema version, number of tables) of an existing SQLite file, opened without creating or migrating it."""
    conn = db.connect(path, create=False)
    try:
        version = db.schema_version(conn)
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchone()[0]
    finally:
        conn.close()
    return version, int(tables)


class SqliteBrowse:
    """The browsing lookups as store methods (a mixin of ``SqliteStore``; ``conn``: this thread's connection).
    The PostgreSQL store has the same methods (``memlens.store.postgres.browse``)."""

    conn: Any

    def find_ids(self, text: str, limit: int) -> list[str]:
        return find_ids(self.conn, text, limit)

    def vector_stamp(self, entry_id: str) -> tuple[str, str] | None:
        return vector_stamp(self.conn, entry_id)

    def overridden_by(self, entry_id: str) -> list[str]:
        return overridden_by(self.conn, entry_id)

    def all_ids(self) -> list[str]:
        return all_ids(self.conn)
