"""One search's state as it moves through the pipeline's stages (``memlens.retrieval.pipeline``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.retrieval.policy import Candidate
from memlens.store.reads import Reads
from memlens.trace import STAGES, Bundle, CacheInfo, Trace

if TYPE_CHECKING:
    from memlens.config import Settings
    from memlens.retrieval.context import SearchContext
    from memlens.retrieval.hooks import Hooks
    from memlens.retrieval.plan import Plan


@dataclass(eq=False)
class Run:
    """What the stages read and write. ``ctx`` is the engine as a search sees it (settings, embedder, cache,
    profiles, retrieval log: ``memlens.retrieval.context``); every read of stored entries goes through ``store``,
    its read role."""

    ctx: SearchContext
    query: str
    options: dict[str, Any]
    workspace: str | None = None
    use_cache: bool = True
    now: datetime | None = None
    lat: dict[str, float] = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    plan: Plan = field(init=False)
    hooks: Hooks = field(init=False)
    trace: Trace = field(init=False)
    wings_searched: list[str] = field(default_factory=list)
    cache_key: str = ""
    cache_info: CacheInfo | None = None
    gens: dict[str, int] = field(default_factory=dict)  # the wing generations a cached bundle is checked against
    cached: bool = False  # a valid cached bundle answered: the run ends at the cache stage
    # candidate generation
    mode: str | None = None  # "text" (embed, vector, lexical), "listing" (filters only) or None (nothing to look for)
    n_cand: int = 0
    qvec: np.ndarray | None = None
    knn_gens: dict[str, int] | None = None  # the generations the KNN read, reused by the lexical generator
    scanned: Callable[[dict[int, str]], dict[int, float]] | None = None  # the KNN's other similarities (store.Knn)
    sims: dict[int, float] = field(default_factory=dict)
    vec_rank: dict[int, int] = field(default_factory=dict)
    bm25: dict[int, float] = field(default_factory=dict)
    bm25_rank: dict[int, int] = field(default_factory=dict)
    ordered: list[int] = field(default_factory=list)
    # the pool
    pool: list[Candidate] = field(default_factory=list)
    vectors: dict[int, np.ndarray] = field(default_factory=dict)
    bundle: Bundle | None = None

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def store(self) -> Reads:
        return self.ctx.reads

    @property
    def text(self) -> str:
        return self.plan.parsed.text
