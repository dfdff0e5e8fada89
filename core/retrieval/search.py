"""Retrieval's entry points: ``search`` (the pipeline, ``memlens.retrieval.pipeline``) and ``check``.

    plan → cache? → embed → candidates (KNN + lexical, inside the scope)
    → score (relevance, recency, salience, active-wing boost; per-kind min-max)
    → dedup across wings → policy (overrides, conflicts, mandatory invariants,
    thresholds) → optional cross-encoder rerank → authority order → cap
    → budget → bundle + trace

``_Plan`` and ``lexical`` keep the shapes the benchmarks and tests mirror the engine with.
"""

from __future__ import annotations

from typing import Any

from memlens.retrieval.pipeline import FUSION, search
from memlens.retrieval.plan import Plan, Planning, resolve_scope
from memlens.store.reads import fts_query, query_terms
from memlens.trace import Bundle, Components, Result, Trace

__all__ = ["search", "check", "Bundle", "Result", "Trace", "Components", "FUSION", "fts_query", "query_terms",
           "resolve_scope"]


def _Plan(mem: Planning, query: str, active_wing: str | None, wings: list[str] | None, k: int | None,  # noqa: N802
          profile: str | None, budget: int | None, user: str | None, weights: dict[str, float] | None) -> Plan:
    """The plan ``search`` makes for these arguments, on ``mem``."""
    return Plan(mem.settings, mem.profiles, mem.reads, query, active_wing, wings, k, profile, budget, user, weights)


def check(mem: Planning, query: str, *, active_wing: str | None = None, wings: list[str] | None = None,
          k: int | None = None, profile: str | None = "memory", budget: int | None = None) -> None:
    """Raise what ``search`` would raise for these arguments, without searching (batch files check every line first)."""
    _Plan(mem, query, active_wing, wings, k, profile, budget, None, None)


def lexical(mem: Planning, plan: Plan, text: str, n: int, gens: dict[str, int] | None = None) -> list[tuple[int, Any]]:
    """The lexical generator as (rowid, SQLite bm25, lower is better), best first."""
    return [(r, -s) for r, s in mem.reads.lexical(text, plan.search_scope, n, gens)]
