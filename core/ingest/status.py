"""``memlens index status``: the code index at a glance (also what the app's Index screen shows)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from memlens.ingest import storage
from memlens.ingest.walker import inside

if TYPE_CHECKING:
    from memlens.ingest.context import IngestContext


def _stale(sources: list[storage.Source], sample: int) -> tuple[int, int]:
    """(stale, checked): files whose size or mtime on disk no longer match the catalog, or that are gone."""
    stale = checked = 0
    for s in sources[:sample]:
        checked += 1
        try:
            st = os.stat(s.path, follow_symlinks=False)
        except OSError:
            stale += 1
            continue
        if st.st_size != s.size or st.st_mtime_ns != s.mtime_ns:
            stale += 1
    return stale, checked


def status(mem: IngestContext, *, stale_sample: int = 20_000) -> dict[str, Any]:
    from memlens.ingest.watch import active_watchers

    indexes = []
    all_runs = storage.runs(mem, "index", limit=200)
    for ix in storage.code_indexes(mem):
        sources = [s for s in storage.all_sources(mem, ix["wing"]) if inside(s.path, ix["root"])]
        stale, checked = _stale(sources, stale_sample)
        mine = [r for r in all_runs if r["wing"] == ix["wing"] and r["root"] == ix["root"]]
        last = mine[0] if mine else None
        indexes.append({
            "wing": ix["wing"], "workspace": ix["root"], "indexed_at": ix["indexed_at"], "files": len(sources),
            "chunks": sum(s.chunks for s in sources), "stale_files": stale,
            "stale_ratio": round(stale / checked, 4) if checked else 0.0,
            "last_run": _run_view(last) if last else None,
            "skipped": (last or {}).get("summary", {}).get("skipped", []),
        })
    watchers = active_watchers()
    recalls = storage.code_recalls(mem, limit=1000)
    retrievals = mem.retrievals(limit=1000)
    files = sum(i["files"] for i in indexes)
    stale_total = sum(i["stale_files"] for i in indexes)
    return {
        "indexes": indexes,
        "files": files,
        "chunks": sum(i["chunks"] for i in indexes),
        "last_run": _run_view(all_runs[0]) if all_runs else None,
        "stale_ratio": round(stale_total / files, 4) if files else 0.0,
        "queue_depth": sum(w.queue_depth for w in watchers),
        "watching": [w.root for w in watchers],
        "code_recalls": len(recalls),
        "code_hit_rate": round(sum(1 for r in recalls if r.get("served")) / len(recalls), 4) if recalls else None,
        "retrievals": len(retrievals),
        "fallback_rate": round(sum(1 for r in retrievals if r.get("degraded")) / len(retrievals), 4) if retrievals else None,
        "recent_runs": [_run_view(r) for r in all_runs[:10]],
    }


def _run_view(r: dict[str, Any]) -> dict[str, Any]:
    s = r.get("summary") or {}
    return {"id": r["id"], "wing": r["wing"], "workspace": r["root"], "started_at": r["started_at"],
            "finished_at": r["finished_at"], "seconds": r["seconds"], "status": r["status"],
            **{k: s.get(k) for k in ("added", "updated", "unchanged", "removed", "chunks", "skipped_count")}}
