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
    from concurrent.futures import Future

    from memlens.config import Settings
    from memlens.retrieval.context import SearchContext
    from memlens.retrieval.hooks import Hooks
    from memlens.retrieval.plan import Plan
    from memlens.retrieval.terms import LexicalTerms


@dataclass(eq=False)
class CacheState:
    """The result cache's part (stage ``cache``): the question's key, what the cache said (the trace shows it), the wing
    generations a cached bundle is checked against (and a new one is kept under), and whether a cached bundle
    answered (the run then ends at the cache stage)."""

    key: str = ""
    info: CacheInfo | None = None
    gens: dict[str, int] = field(default_factory=dict)
    hit: bool = False


@dataclass(eq=False)
class Found:
    """The candidate generators' part (stages ``gate`` to ``lexical``, ``memlens.retrieval.candidates``): what to look
    for, the query's vector, each generator's rows with their scores and ranks, and all their rows in order."""

    mode: str | None = None  # "text" (embed, vector, lexical), "listing" (filters only) or None (nothing to look for)
    n_cand: int = 0  # rows asked of each generator
    qvec: np.ndarray | None = None
    knn_gens: dict[str, int] | None = None  # the generations the KNN read, reused by the lexical generator
    scanned: Callable[[dict[int, str]], dict[int, float]] | None = None  # the KNN's other similarities (store.Knn)
    sims: dict[int, float] = field(default_factory=dict)  # rowid -> vector similarity, best first
    vec_rank: dict[int, int] = field(default_factory=dict)
    bm25: dict[int, float] = field(default_factory=dict)  # rowid -> bm25 (higher is better), best first
    bm25_rank: dict[int, int] = field(default_factory=dict)
    ordered: list[int] = field(default_factory=list)  # every generator's rows, once each: the pool's order
    # the lexical generator under way beside the embedding (``candidates.start_lexical``): its terms and its answer
    beside: tuple[LexicalTerms, Future[tuple[list[tuple[int, float]], float]]] | None = None


@dataclass(eq=False)
class Run:
    """One search's state, in named parts, each written by the stages named beside it and read by those after:

    * the request: ``ctx`` (the engine as a search sees it: settings, embedder, cache, profiles, retrieval log,
      ``memlens.retrieval.context``; every read of stored entries goes through ``store``, its read role), ``query``,
      ``options``, ``workspace``, ``use_cache``, ``now``;
    * ``plan`` and ``hooks`` (stage ``plan``), ``trace`` (``trace``, then every stage adds to it), ``lat`` (the
      pipeline: each stage's time), ``wings_searched`` (``cache``);
    * ``cache_state`` (``CacheState``, stage ``cache``); ``found`` (``Found``, the generators);
    * ``pool`` and ``vectors`` (``load``; ``score`` to ``order`` rank and trim the pool); ``bundle`` (``results``,
      then ``budget``, ``fresh``, ``count``; or the cache's).
    """

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
    cache_state: CacheState = field(default_factory=CacheState)
    found: Found = field(default_factory=Found)
    pool: list[Candidate] = field(default_factory=list)
    vectors: dict[int, np.ndarray] = field(default_factory=dict)  # rowid -> stored vector, for the pool's rows
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
