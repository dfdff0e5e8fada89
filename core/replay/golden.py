"""Golden queries: "this query must return this entry within the top K", kept in the store and checked on demand.

A check runs the query asking for K results (cache bypassed, not logged) and passes when the expected
entry is among them. A failure says where the entry went: the stage that dropped it and why (the same
verdict as ``memlens explain``): deprecated, out of scope, below a threshold, beyond the cap of K, not a
candidate...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError, NotFoundError, ValidationError
from memlens.limits import MAX_K, check_int, check_query
from memlens.replay import storage
from memlens.retrieval.search import check as check_search

if TYPE_CHECKING:
    from memlens.replay.context import ReplayContext

DEFAULT_WITHIN = 10


def add(mem: ReplayContext, query: str, expect: str, *, active_wing: str | None = None,
        within: int = DEFAULT_WITHIN) -> dict[str, Any]:
    check_query(query)
    if not query.strip():  # a golden query that could never pass
        raise ValidationError("a golden query needs words to search for; this one is empty")
    within = check_int("--within", within, 1, MAX_K)
    mem.get(expect)  # NotFoundError for an unknown id
    if active_wing is not None and active_wing not in mem.wings():
        raise ValidationError(f"unknown wing {active_wing!r} (known wings: {', '.join(mem.wings()) or 'none yet'})")
    check_search(mem, query, active_wing=active_wing, k=within)  # what its search would refuse (syntax, wings, rooms ...)
    gid = storage.golden_add(mem, query, expect, active_wing, within)
    return {"id": gid, "query": query, "expect": expect, "active_wing": active_wing, "within": within}


def remove(mem: ReplayContext, golden_id: int) -> None:
    if not storage.golden_remove(mem, golden_id):
        raise NotFoundError(f"no golden query with id {golden_id} (memlens golden list shows them)")


def listing(mem: ReplayContext) -> list[dict[str, Any]]:
    return storage.golden_list(mem)


def check_one(mem: ReplayContext, g: dict[str, Any]) -> dict[str, Any]:
    """One golden query's verdict on ``mem`` (a copy that does not log: see ``storage.with_settings``)."""
    out = {**g, "ok": False, "rank": None, "stage": None, "why": ""}
    k = g["within"]  # the search an agent would run asking for K results
    try:
        bundle = mem.search(g["query"], active_wing=g["active_wing"], k=k, use_cache=False)
    except MemlensError as exc:
        return {**out, "stage": "query", "why": f"the query fails: {exc}"}
    for r in bundle.results:
        if r.entry.id == g["expect"]:
            out["rank"] = r.rank
            if r.rank <= g["within"]:
                return {**out, "ok": True, "why": f"rank {r.rank} (within {g['within']})"}
            return {**out, "stage": "rank", "why": f"rank {r.rank}, beyond the top {g['within']} (score {r.score:.3f})"}
    try:
        verdict = mem.explain(g["query"], g["expect"], active_wing=g["active_wing"], k=k)
    except NotFoundError:
        return {**out, "stage": "deleted", "why": f"entry {g['expect']} no longer exists"}
    return {**out, "stage": verdict.get("stage"), "why": verdict.get("detail") or verdict.get("verdict", "")}


def check(mem: ReplayContext) -> dict[str, Any]:
    """``{"passed", "failed", "checks": [{id, query, expect, active_wing, within, ok, rank, stage, why}]}``."""
    runner = storage.with_settings(mem, mem.settings)
    checks = [check_one(runner, g) for g in storage.golden_list(mem)]
    failed = sum(1 for c in checks if not c["ok"])
    return {"passed": len(checks) - failed, "failed": failed, "checks": checks}
