"""Retention of retrieval records: the audit keeps every write, and a bounded log of searches.

At audit level "reads" every search appends one ``retrieval`` row (~600
bytes). Nothing else removes them, so they are pruned here, by age
(``audit.retrieval_max_age_days``) and by count (``audit.retrieval_max_rows``).
Only rows with ``action = 'retrieval'`` are ever deleted: the write history of
entries and tasks stays complete. Rows that remain are untouched, so the log
keeps its format for anything that reads or replays it.

Pruning runs inside ``Memory.log_retrieval``: on the first log of a
``Memory`` (one CLI search is one process) and then whenever the new row's
sequence number is a multiple of :data:`EVERY`, so a long-lived process prunes
once per that many audit rows. Both deletes walk the ``audit_action (action,
seq)`` index from the oldest retrieval and stop where the kept rows begin.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from memlens.models import format_ts

EVERY = 64


def due(seq: int, first: bool) -> bool:
    return first or seq % EVERY == 0


def prune_retrievals(conn: Any, max_rows: int, max_age_days: float, now: datetime | None = None) -> int:
    """Delete retrieval rows beyond ``max_rows`` (newest kept) or older than ``max_age_days``; returns rows deleted."""
    now = now or datetime.now(timezone.utc)
    deleted = 0
    # by count: the seq of the newest row past the bound; it and everything older go
    row = conn.execute(
        "SELECT seq FROM audit WHERE action = 'retrieval' ORDER BY seq DESC LIMIT 1 OFFSET ?", (max_rows,)
    ).fetchone()
    if row is not None:
        deleted += conn.execute("DELETE FROM audit WHERE action = 'retrieval' AND seq <= ?", (row[0],)).rowcount
    # by age: rows are appended in time order, so everything before the first recent row is old
    cutoff = format_ts(now - timedelta(days=max_age_days))
    oldest = conn.execute("SELECT ts FROM audit WHERE action = 'retrieval' ORDER BY seq LIMIT 1").fetchone()
    if oldest is not None and oldest[0] < cutoff:
        first_recent = conn.execute(
            "SELECT seq FROM audit WHERE action = 'retrieval' AND ts >= ? ORDER BY seq LIMIT 1", (cutoff,)
        ).fetchone()
        if first_recent is None:
            deleted += conn.execute("DELETE FROM audit WHERE action = 'retrieval'").rowcount
        else:
            deleted += conn.execute(
                "DELETE FROM audit WHERE action = 'retrieval' AND seq < ?", (first_recent[0],)
            ).rowcount
    return deleted
