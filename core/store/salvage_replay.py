"""Salvage of what replay keeps: the retrieval log (each logged search's request and ranked hits) and the
golden queries (``memlens.store.salvage`` calls these).

Rows are read around damaged pages, like the audit (``check.read_by_key``). A row is copied when it decodes:

* a log row whose request is a JSON object, whose hits are a JSON array of ``[id, score, ...]`` lists, and
  whose audit row (same ``seq``, a retrieval) was copied too: replay reads the two together, and the log
  lives exactly as long as its audit row;
* a golden query with a query, an expected id, a positive ``within`` and a creation time.

Any other row (unreadable, or not decoding: a hand edit, damage) is skipped and counted in the report.
A store made before these tables existed has nothing to copy.
"""

from __future__ import annotations

import json
from typing import Any

from memlens.store.check import read_by_key, safe
from memlens.store.rows import json_object

LOG_COLUMNS = "request, client, context, hits"
GOLDEN_COLUMNS = "query, expect, active_wing, within, created_at"
_FAR = 1 << 20  # a bound to read up to when a table's largest key cannot be read (read_by_key skips gaps fast)


def read(conn: Any, audit: list[tuple[Any, ...]]) -> dict[str, Any]:
    """``{"log": [(seq, *LOG_COLUMNS)], "golden": [(id, *GOLDEN_COLUMNS)], "log_skipped", "golden_skipped"}``;
    ``audit``: the audit rows salvage copies, ``(seq, ts, action, ...)``."""
    retrievals = {r[0] for r in audit if r[2] == "retrieval"}
    top_seq = max((r[0] for r in audit), default=0)
    log, log_skipped = _rows(conn, "retrieval_log", "seq", LOG_COLUMNS, top_seq,
                             lambda seq, row: seq in retrievals and _log_row_ok(row))
    golden, golden_skipped = _rows(conn, "golden", "id", GOLDEN_COLUMNS, _FAR, lambda _id, row: _golden_row_ok(row))
    return {"log": log, "golden": golden, "log_skipped": log_skipped, "golden_skipped": golden_skipped}


def write(conn: Any, found: dict[str, Any], insert: Any) -> dict[str, int]:
    """Insert the rows ``read`` kept into the new store (``insert(conn, sql, row)`` -> 1 if written, 0 if refused)."""
    log = sum(insert(conn, "INSERT INTO retrieval_log(seq, request, client, context, hits) VALUES (?, ?, ?, ?, ?)", r)
              for r in found["log"])
    golden = sum(insert(conn, "INSERT INTO golden(id, query, expect, active_wing, within, created_at)"
                              " VALUES (?, ?, ?, ?, ?, ?)", r) for r in found["golden"])
    return {"retrieval_log": log, "golden": golden,
            "retrieval_log_skipped": found["log_skipped"] + len(found["log"]) - log,
            "golden_skipped": found["golden_skipped"] + len(found["golden"]) - golden}


def _rows(conn: Any, table: str, key: str, cols: str, fallback_top: int, ok: Any) -> tuple[list[tuple[Any, ...]], int]:
    exists, _ = safe(conn, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
    if not exists:
        return [], 0
    bound, _ = safe(conn, f"SELECT max({key}) FROM {table}")
    top = bound[0][0] if bound and isinstance(bound[0][0], int) else fallback_top
    out: list[tuple[Any, ...]] = []
    skipped = 0
    for k, row, _err in read_by_key(conn, table, key, cols, max(top, 0)):
        if row is not None and ok(k, row):
            out.append((k, *row))
        else:
            skipped += 1
    return out, skipped


def _log_row_ok(row: tuple[Any, ...]) -> bool:
    request, client, context, hits = row
    if json_object(request) is None or not isinstance(client, str) or context not in (0, 1):
        return False
    try:
        ranked = json.loads(hits)
    except (ValueError, TypeError):
        return False
    return isinstance(ranked, list) and all(
        isinstance(h, list) and len(h) >= 2 and isinstance(h[0], str) and isinstance(h[1], (int, float)) for h in ranked
    )


def _golden_row_ok(row: tuple[Any, ...]) -> bool:
    query, expect, active_wing, within, created_at = row
    return (isinstance(query, str) and query.strip() != "" and isinstance(expect, str) and expect != ""
            and isinstance(active_wing, str) and isinstance(within, int) and within >= 1 and isinstance(created_at, str))
