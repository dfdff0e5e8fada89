"""Keeping FTS5's text index in few segments after bulk writes.

FTS5 adds a segment per transaction that writes text and merges them only
now and then. An import (written in short transactions) or an ingest run leaves
the index in tens of segments, and every term a search looks for is then
looked up in each one: on 2,793 documentation sections imported at once, 21
segments made the text search 45% slower than one. After such a bulk write,
an index of more than ``SEGMENTS_MAX`` segments is merged into one
(FTS5's ``optimize``: 14 ms at that size; it rewrites the index, so it runs
only after bulk writes, never per entry, and only while the index holds at most
``ROWS_MAX`` rows: the rewrite holds the write lock, about 0.5 s per 100k rows).
Best effort: a busy or read-only store keeps its segments, and searches stay
correct either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SEGMENTS_MAX = 8
ROWS_MAX = 200_000  # larger indexes keep FTS5's own merging: one rewrite would hold the write lock for seconds


def varints(blob: bytes) -> list[int]:
    """Every SQLite varint of ``blob`` in order (big-endian, 7 bits a byte, the ninth byte whole)."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        v = 0
        for j in range(9):
            b = blob[i]
            i += 1
            if j == 8:
                v = (v << 8) | b
                break
            v = (v << 7) | (b & 0x7F)
            if not b & 0x80 or i >= n:
                break
        out.append(v)
    return out


def segments(conn: Any) -> int:
    return int(conn.execute("SELECT count(DISTINCT segid) FROM entries_fts_idx").fetchone()[0])


def rows(conn: Any) -> int:
    """Rows in the text index: the first varint of FTS5's "averages" record (id 1), no scan."""
    row = conn.execute("SELECT block FROM entries_fts_data WHERE id = 1").fetchone()
    return varints(row[0])[0] if row and row[0] else 0


def tidy(conn: Any, path: Path) -> bool:
    """Merge the text index into one segment if it has more than ``SEGMENTS_MAX``; True if it did."""
    from memlens.store import db

    try:
        if segments(conn) <= SEGMENTS_MAX or rows(conn) > ROWS_MAX:
            return False
        with db.transaction(conn, path) as c:
            c.execute("INSERT INTO entries_fts(entries_fts) VALUES ('optimize')")
        return True
    except Exception:  # noqa: BLE001  (busy, read-only, interrupted: the segments stay, searches stay correct)
        return False
