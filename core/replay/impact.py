"""Curation impact preview: what an edit, deprecation or deletion would change, without writing it.

The write runs for real, through the engine, inside one transaction that is always rolled back
(``storage.rolled_back``); inside it the golden queries are checked and the recently logged queries
(distinct requests, newest first) are run twice, on the store as it is and with the change, and diffed
exactly as ``memlens replay`` diffs them. Nothing of it is logged or kept: not the write, not its audit
row, not the searches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError
from memlens.models import format_ts, utcnow
from memlens.replay import golden, storage
from memlens.replay.replay import diff, run_request, summarise
from memlens.replay.storage import R

if TYPE_CHECKING:
    from memlens.replay.context import ReplayContext

RECENT = 50


def recent_requests(mem: ReplayContext, n: int = RECENT) -> list[dict[str, Any]]:
    """The newest ``n`` distinct logged requests (a query asked many times counts once)."""
    seen: set[str] = set()
    out = []
    for e in reversed(storage.logged(mem, last=max(n * 4, n))):
        key = json.dumps(e["request"], sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(e)
        if len(out) >= n:
            break
    return out[::-1]


def _as_logged(entry: dict[str, Any], bundle: Any) -> dict[str, Any]:
    """A baseline run in the shape of a logged retrieval, so ``diff`` compares before/after the change; it keeps the
    logged retrieval's ``seq`` and ``ts`` (what names it) and its own time as ``baseline_ts``."""
    hits = [{"id": r.entry.id, "rank": r.rank, "score": r.score,
             **{c: getattr(r.components, c, None) for c in storage.HIT_COMPONENTS}} for r in bundle.results]
    return {**entry, "baseline_ts": format_ts(utcnow()), "hits": hits}


def preview(mem: R, change: Callable[[R], Any], *, recent: int = RECENT) -> dict[str, Any]:
    """``{"change", "golden": [failing checks with "was_ok"], "queries": [changed diffs], "summary"}``; ``change`` is
    made on a copy of ``mem`` (of its type) whose writes are rolled back."""
    entries = recent_requests(mem, recent)
    goldens = storage.golden_list(mem)
    with storage.rolled_back(mem) as draft:
        before_golden = {g["id"]: golden.check_one(draft, g)["ok"] for g in goldens}
        baselines = []
        for e in entries:
            try:
                baselines.append(_as_logged(e, run_request(draft, e["request"])))
            except MemlensError:
                continue  # a request that fails today says nothing about this change
        result = change(draft)
        after = [golden.check_one(draft, g) for g in goldens]
        queries = []
        for b in baselines:
            try:
                queries.append(diff(b, run_request(draft, b["request"]), draft))
            except MemlensError as exc:
                queries.append({"seq": b["seq"], "ts": b["ts"], "query": b["request"].get("query", ""), "changed": True,
                                "entered": [], "left": [h["id"] for h in b["hits"]], "moved": [], "top1_changed": True,
                                "tau": None, "why": {}, "error": str(exc)})
    failing = [{**c, "was_ok": before_golden.get(c["id"], False)} for c in after if not c["ok"]]
    changed = [q for q in queries if q["changed"]]
    return {"change": _describe(result), "written": False, "golden": failing, "golden_checked": len(goldens),
            "queries": changed, "summary": summarise(queries)}


def _describe(result: Any) -> Any:
    if hasattr(result, "to_record"):
        rec = result.to_record()
        return {k: rec.get(k) for k in ("id", "wing", "status", "title")}
    return result
