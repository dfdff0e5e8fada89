"""The access log of an entry, and which entries the logged retrievals never (or always) return.

Both read the retrieval log (``storage``): they cover what the audit keeps of it (``[audit]``
``retrieval_max_rows`` / ``retrieval_max_age_days``), not the store's whole life.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memlens.limits import MAX_LIST, check_int
from memlens.replay import storage

if TYPE_CHECKING:
    from memlens.replay.context import ReplayContext


def entry_access(mem: ReplayContext, entry_id: str, limit: int = 1000) -> dict[str, Any]:
    """``{id, title, wing, freshness, accesses: [{seq, ts, query, client, rank, score, in_context}]}``, newest first.

    ``in_context``: the retrieval was made to build an agent's context (``Memory.context``, ``memlens context``,
    the MCP tool ``memory_context``), so the entry went into that context.
    """
    entry = mem.get(entry_id)
    limit = check_int("limit", limit, 1, MAX_LIST)
    rows = storage.access(mem, entry_id, limit)
    fresh = storage.freshness(mem, [entry_id], mem.model_id).get(entry_id, {})
    return {"id": entry.id, "title": entry.title, "wing": entry.wing, "freshness": fresh, "accesses": rows}


def coverage(mem: ReplayContext, wing: str | None = None) -> dict[str, Any]:
    """Entries never returned by a logged retrieval that searched their wing, and entries returned by every one.

    Entries of wings no logged retrieval searched are in neither list (nothing can be said of them).
    """
    if wing is not None and wing not in mem.wings():
        from memlens.errors import ValidationError

        raise ValidationError(f"unknown wing {wing!r} (known wings: {', '.join(mem.wings()) or 'none yet'})")
    rows = storage.retrieval_counts(mem, wing)
    never = [r for r in rows if r["searched"] and not r["retrieved"]]
    always = [r for r in rows if r["searched"] and r["retrieved"] >= r["searched"]]
    return {"never": never, "always": always, "entries": len(rows)}
