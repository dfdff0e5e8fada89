"""The browsing lookups (``memlens.browse``) on PostgreSQL: the same methods as ``memlens.store.browse_sql.SqliteBrowse``.

A lookup by id or title matches either case (``ILIKE``), as SQLite's ``LIKE`` does for ASCII letters.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from memlens.store.postgres.reads import visible


class PgBrowse:
    connection: Callable[[], AbstractContextManager[Any]]

    def find_ids(self, text: str, limit: int) -> list[str]:
        like = f"%{text}%"
        with self.connection() as conn:
            rows = conn.execute(
                f"SELECT id FROM entries WHERE (id ILIKE %s OR title ILIKE %s) AND {visible()} ORDER BY id LIMIT %s",
                (like, like, limit)).fetchall()
        return [r[0] for r in rows]

    def vector_stamp(self, entry_id: str) -> tuple[str, str] | None:
        with self.connection() as conn:
            row = conn.execute(f"SELECT content_hash, model FROM entries WHERE id = %s AND {visible()}", (entry_id,)).fetchone()
        return None if row is None else (row[0], row[1])

    def overridden_by(self, entry_id: str) -> list[str]:
        with self.connection() as conn:
            return [r[0] for r in conn.execute(
                f"SELECT id FROM entries WHERE overrides = %s AND {visible()} ORDER BY id", (entry_id,))]

    def all_ids(self) -> list[str]:
        with self.connection() as conn:
            return [r[0] for r in conn.execute(f"SELECT id FROM entries WHERE {visible()} ORDER BY id")]
