"""The retrieval trace: data produced by the pipeline that ranks, never recomputed beside it.

Flags (part of the ``search --json`` contract): ``mandatory``, ``under_review``, ``active_wing``,
``conflict``, ``summarised``, ``fallback``, ``untrusted`` (text saved from the web).
Drop stages: ``status``, ``scope``, ``profile``, ``candidates``, ``threshold``,
``relative``, ``dedup``, ``override``, ``cap``, ``budget``; a code chunk's gates (``code_exists``,
``code_workspace``, ``code_binary``, ``code_stale``: ``memlens.ingest.gates``), in search and context
alike; ``context`` adds ``code``, ``code_index``, ``code_threshold`` and ``code_cap``
(``memlens.ingest.recall``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from pydantic import BaseModel, Field, InstanceOf

from memlens.models import Entry


class Droppable(Protocol):
    """What a drop record names: an ``Entry``, or a pipeline candidate that has not built one."""

    @property
    def id(self) -> str: ...

    @property
    def wing(self) -> str: ...


class Scored(Droppable, Protocol):
    """A drop record's subject that carries its own score (a pipeline candidate)."""

    @property
    def score(self) -> float: ...


STAGES = ("parse", "embed", "vector", "lexical", "score", "rerank", "policy", "budget", "total")
FORMULA = "memlens-score/v1: final = (w_relevance·relevance + w_recency·recency + w_salience·salience) × boost"


@dataclass(slots=True)
class Components:
    """Every number that went into a result's score, so a rank can be recomputed by hand.

    A plain dataclass with slots: the pipeline sets ~15 of these for every candidate of every search,
    and pydantic attribute assignment was a tenth of a search at 100k entries.
    """

    similarity: float | None = None
    vector_rank: int | None = None
    bm25: float | None = None
    bm25_rank: int | None = None
    similarity_norm: float = 0.0
    bm25_norm: float = 0.0
    relevance: float = 0.0
    year_boost: float | None = None
    summary: float | None = None
    recency: float = 0.0
    age_days: float = 0.0
    salience: float = 0.0
    boost: float = 1.0
    rerank: float | None = None
    rank_before_rerank: int | None = None
    final: float = 0.0

    def model_dump(self) -> dict[str, Any]:
        return asdict(self)


class Result(BaseModel):
    # an Entry as given, not validated again (pydantic would run Entry's checks once per result per search): every
    # Entry is validated when made, and a search reads only stored rows that pass the same checks (``sound_rows``)
    entry: InstanceOf[Entry]
    score: float
    rank: int = 0
    flags: list[str] = Field(default_factory=list)
    components: Components = Field(default_factory=Components)
    found_in: list[str] = Field(default_factory=list)
    conflicts_with: list[str] = Field(default_factory=list)
    hides: list[str] = Field(default_factory=list)
    tokens: int | None = None
    summary: str | None = None
    vector: dict[str, Any] | None = None
    """Freshness of the stored vector (``memlens.retrieval.fresh``): ``{"fresh", "model", "hash_matches"}``;
    None for a hit with no stored vector (a workspace document)."""

    def to_dict(self) -> dict[str, Any]:
        rec = self.entry.to_record()
        rec.update(
            score=round(self.score, 6),
            rank=self.rank,
            flags=self.flags,
            components=self.components.model_dump(),
            found_in=self.found_in,
            conflicts_with=self.conflicts_with,
            hides=self.hides,
            tokens=self.tokens,
            summary=self.summary,
            vector=self.vector,
        )
        return rec

    def flag(self, name: str) -> None:
        if name not in self.flags:
            self.flags.append(name)


@dataclass(slots=True)
class Dropped:
    """A candidate that left the pipeline: at which stage, why, with what score.

    A dataclass for the same reason as ``Components``: a search drops ~90 candidates (with slots: a third faster
    to make).
    """

    id: str
    stage: str
    reason: str
    detail: str = ""
    score: float | None = None
    wing: str | None = None


class CacheInfo(BaseModel):
    enabled: bool = True
    key: str = ""
    age_s: float | None = None
    ttl_s: float = 0.0
    invalidated_by: dict[str, Any] | None = None


class Trace(BaseModel):
    query: str
    text: str
    filters: dict[str, list[str]] = Field(default_factory=dict)
    active_wing: str | None = None
    user: str = "default"
    profile: str = "memory"
    profile_settings: dict[str, Any] = Field(default_factory=dict)
    model: str = ""
    formula: str = FORMULA
    weights: dict[str, float] = Field(default_factory=dict)
    fusion: dict[str, Any] = Field(default_factory=dict)
    normalisation: dict[str, dict[str, list[float] | None]] = Field(default_factory=dict)
    now: str = ""
    cache_hit: bool = False
    cache: CacheInfo = Field(default_factory=CacheInfo)
    latency_ms: dict[str, float] = Field(default_factory=dict)
    wings_searched: list[str] = Field(default_factory=list)
    results_per_wing: dict[str, int] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    candidates: dict[str, int] = Field(default_factory=dict)
    dropped: list[Dropped] = Field(default_factory=list)
    conflicts: list[list[str]] = Field(default_factory=list)
    # one per pair of ``conflicts``, same order: {"pair": [a, b], "similarity": cosine,
    # "rule": "same key" (with "key") | "same subject, no override"}
    conflict_details: list[dict[str, Any]] = Field(default_factory=list)
    rerank: dict[str, Any] = Field(default_factory=dict)
    budget: dict[str, Any] | None = None
    degraded: dict[str, Any] | None = None
    notes: list[str] = Field(default_factory=list)

    def drop(self, entry: Droppable, stage: str, detail: str = "", score: float | None = None) -> None:
        self.dropped.append(Dropped(entry.id, stage, stage, detail, score, entry.wing))  # positional: ~70 a search

    def drop_each(self, entries: Iterable[Scored], stage: str, detail: str) -> None:
        """``drop`` of each of ``entries`` with its own score and one detail: the ~70 candidates a cap drops in one
        call (a call per candidate was a tenth of the policy stages)."""
        self.dropped.extend([Dropped(e.id, stage, stage, detail, e.score, e.wing) for e in entries])


class Bundle(BaseModel):
    results: list[Result]
    trace: Trace
    context: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Exactly the ``search --json`` object, a stable contract: ``results`` and ``trace``."""
        return {"results": [r.to_dict() for r in self.results], "trace": self.trace.model_dump(mode="json")}


def retrieval_metrics(bundle: Bundle) -> dict[str, Any]:
    """What the audit keeps of one retrieval (the query itself shortened, and hashed for grouping)."""
    t = bundle.trace
    return {
        "query_hash": hashlib.sha256(t.query.encode()).hexdigest()[:16],
        "query": t.query[:200],
        "user": t.user,
        "active_wing": t.active_wing,
        "profile": t.profile,
        "cache_hit": t.cache_hit,
        "latency_ms": t.latency_ms,
        "wings_searched": t.wings_searched,
        "results_per_wing": t.results_per_wing,
        "counts": t.counts,
        "total_count": len(bundle.results),
        "result_ids": [r.entry.id for r in bundle.results],
        "dropped": len(t.dropped),
        "degraded": bool(t.degraded),
    }


@dataclass(frozen=True)
class RetrievalRecord:
    """What the retrieval log keeps of one search, built by the pipeline from its own arguments and handed to the
    log explicitly (nothing set around the call decides it).

    ``request``: the search's arguments as the caller passed them, those left at None omitted (what a replay runs
    again); ``client``: who asked (``cli``, ``app``, ``api``, an MCP client's name); ``context``: the results went
    into an agent's context."""

    bundle: Bundle
    request: dict[str, Any]
    client: str = "api"
    context: bool = False

    @classmethod
    def of(cls, bundle: Bundle, client: str = "api") -> RetrievalRecord:
        """The record of a bundle whose request is not known: the query, active wing and profile its trace names."""
        t = bundle.trace
        return cls(bundle, {"query": t.query, "active_wing": t.active_wing, "profile": t.profile}, client)
