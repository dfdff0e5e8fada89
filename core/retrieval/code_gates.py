"""Code chunks in a search pass the gates ``context`` applies: old code is never served, by any front end.

A ``code`` candidate whose file is gone, left its indexed workspace, became binary or
no longer holds the indexed lines is dropped at that gate's stage (``code_exists``,
``code_workspace``, ``code_binary``, ``code_stale``) with its reason in the trace
(``memlens.ingest.gates``). It runs after scoring, before the policy, so a dropped chunk
neither takes a result's place nor hides another entry as its duplicate. A cached
search whose results hold a chunk that now fails a gate is searched again.
A search whose candidates hold no code pays one pass over their kinds.
"""

from __future__ import annotations

from typing import Any

from memlens.retrieval.run import Run
from memlens.trace import Dropped, Result


def gate(run: Run) -> None:
    """Drop the code candidates that fail a gate, each with its stage, reason and detail."""
    pool = run.pool
    if not any(c.stored[5] == "code" for c in pool):
        return
    from memlens.ingest.gates import check

    roots: dict[str, str] = {}
    kept = []
    for c in pool:
        if c.stored[5] == "code":
            entry = c.entry
            failed = check(entry.meta, entry.text, roots)
            if failed is not None:
                run.trace.dropped.append(Dropped(c.id, failed[0], failed[1], failed[2], c.score, c.wing))
                continue
        kept.append(c)
    run.pool = kept


def first_failure(results: list[Result]) -> dict[str, Any] | None:
    """The first code result that now fails a gate, as the cache's ``invalidated_by`` record; None if none."""
    code = [r.entry for r in results if r.entry.kind.value == "code"]
    if not code:
        return None
    from memlens.ingest.gates import check

    roots: dict[str, str] = {}
    for entry in code:
        failed = check(entry.meta, entry.text, roots)
        if failed is not None:
            return {"reason": "code changed", "id": entry.id, "stage": failed[0], "detail": failed[2]}
    return None
