"""Retrieval statistics from the retrieval log: p50/p95 per stage and the cache hit rate.

``memlens stats --retrievals`` prints these numbers and the app's metrics screen
draws them; both call :func:`retrieval_stats` on rows from ``Memory.retrievals()``.
"""

from __future__ import annotations

from typing import Any

from memlens.trace import STAGES


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 to 1) of ``values``; 0.0 for none."""
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def _p50_p95(values: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 0.5), 3), "p95": round(percentile(values, 0.95), 3)}


def retrieval_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Cache hits and their total latency; p50/p95 per stage over the cache misses (the real work)."""
    hits = sum(1 for r in rows if r.get("cache_hit"))
    misses = [r for r in rows if not r.get("cache_hit")]
    out: dict[str, Any] = {"retrievals": len(rows), "cache_hits": hits, "cache_hit_rate": hits / len(rows) if rows else 0.0,
                           "stages": {}}
    for st in STAGES:
        out["stages"][st] = _p50_p95([float(r["latency_ms"].get(st, 0.0)) for r in misses if r.get("latency_ms")])
    hit_totals = [float(r["latency_ms"]["total"]) for r in rows if r.get("cache_hit") and r.get("latency_ms")]
    out["cache_hit_total"] = _p50_p95(hit_totals)
    return out
