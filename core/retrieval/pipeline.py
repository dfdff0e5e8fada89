"""The retrieval pipeline: one code path that ranks and records why.

    plan → cache? → trace → gate → embed → vector → lexical (or: listing) → load
    → score → code gates → policy → rerank → order → results → workspace fallback? → budget → fresh → count   (then: log)

(in a long-lived process the lexical generator runs on a worker thread while the query is embedded: ``beside``)

Each stage is a function of the search's state (``memlens.retrieval.run.Run``)
in its own module: ``candidates`` (gate to load), ``stages`` (score to count).
What a profile changes it swaps in as hooks (``memlens.retrieval.hooks``).
The pipeline times each stage into the trace's ``latency_ms`` (the key each
stage is counted under; some stages are not timed); the stages never time
themselves, but for the lexical stage, which adds what its generator took on
the worker thread beyond the stage's own wait for it. The engine is reached only through the search's context
(``memlens.retrieval.context.SearchContext``: the store's read role, the
embedder, the cache, the profiles, the log), and what the search logs is
the record built here (``RetrievalRecord``), handed to ``ctx.log``.

To add a stage: write ``def my_stage(run: Run) -> None``. It reads the parts
of ``run`` the stages before it write and writes parts the stages after it
read: ``Run`` (``memlens.retrieval.run``) lists each part and the stage that
writes it (what a new stage produces goes in a part of its own). Add
``Stage("my_stage", my_stage, latency_key_or_None, when=condition_or_None)``
to ``PIPELINE`` at its place, and test it with ``run_until`` in
tests/test_stages.py (the pipeline up to a stage, on a fake store).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from memlens.models import format_ts, utcnow
from memlens.retrieval import candidates, code_gates, fresh, stages
from memlens.retrieval.cache import cache_key
from memlens.retrieval.context import SearchContext
from memlens.retrieval.hooks import hooks_for
from memlens.retrieval.plan import Plan
from memlens.retrieval.run import Run
from memlens.trace import STAGES, Bundle, Result, RetrievalRecord, Trace

FUSION = "minmax-weighted-sum/v1"


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Run], None]
    latency: str | None = None  # the ``latency_ms`` key its time counts under (None: not reported)
    when: Callable[[Run], bool] | None = None  # runs only when this holds


def plan(run: Run) -> None:
    o = run.options
    run.plan = Plan(run.settings, run.ctx.profiles, run.store, run.query, o.get("active_wing"), o.get("wings"), o.get("k"),
                    o.get("profile"), o.get("budget"), o.get("user"), o.get("weights"))
    run.hooks = hooks_for(run.plan.profile)


def cache(run: Run) -> None:
    """A valid cached bundle for the same question ends the search here (checked against the wing generations)."""
    s, plan, store, ctx = run.settings, run.plan, run.store, run.ctx
    run.wings_searched = plan.scope if plan.scope is not None else list(plan.known_wings)  # (read by the plan)
    if not (run.use_cache and s.cache.enabled):
        return
    params = {**plan.cache_params(), "workspace": run.workspace}
    run.cache_state.key = cache_key(plan.text_query, plan.user, plan.scope, params)
    if plan.scope is not None:
        run.cache_state.gens = store.generations(run.wings_searched)
    else:  # every wing of entries; the working memory's counter ("_tasks") is not a wing
        run.cache_state.gens = {w: g for w, g in store.generations().items() if w != "_tasks"}
    hit, run.cache_state.info = ctx.cache.get(run.cache_state.key, run.cache_state.gens, ctx.describe_write)
    if hit is not None:  # a code result whose file changed since (no write to the store says so): search again
        changed = code_gates.first_failure(hit.results)
        if changed is not None:
            run.cache_state.info.invalidated_by, hit = changed, None
    if hit is not None:
        trace = hit.trace.model_copy(update={"cache_hit": True, "cache": run.cache_state.info})
        trace.latency_ms = {st: 0.0 for st in STAGES}
        run.bundle = Bundle(results=_copies(hit.results), trace=trace, context=hit.context)
        run.cache_state.hit = True


def start_trace(run: Run) -> None:
    s, plan = run.settings, run.plan
    run.now = run.now or utcnow()
    run.trace = Trace(
        query=run.query, text=plan.parsed.text, filters=plan.parsed.filters(), active_wing=plan.active_wing,
        user=plan.user, profile=plan.profile.name, profile_settings=plan.profile.model_dump(exclude={"name", "description"}),
        model=run.ctx.model_id(), weights=plan.weights.to_dict(), now=format_ts(run.now), wings_searched=run.wings_searched,
        fusion={"method": FUSION, "vector_weight": s.search.vector_weight, "lexical_weight": s.search.lexical_weight,
                "normalise": s.retrieval.normalise, "active_wing_boost": s.retrieval.active_wing_boost,
                "half_life_days": s.retrieval.half_life_days},
    )
    run.trace.notes.extend(plan.notes)
    if run.cache_state.info is not None:
        run.trace.cache = run.cache_state.info
    else:
        run.trace.cache.enabled = False


PIPELINE: tuple[Stage, ...] = (
    Stage("plan", plan, "parse"),
    Stage("cache", cache),
    Stage("trace", start_trace),
    Stage("gate", candidates.gate),
    Stage("beside", candidates.start_lexical, "lexical", when=candidates.has_text),  # lexical beside the embedding
    Stage("embed", candidates.embed, "embed", when=candidates.has_text),
    Stage("vector", candidates.vector, "vector", when=candidates.has_text),
    Stage("listing", candidates.listing, "vector", when=candidates.is_listing),
    Stage("lexical", candidates.lexical, "lexical", when=candidates.has_text),
    Stage("load", candidates.load, "score"),  # loading the candidates and their vectors is scoring's input
    Stage("score", stages.score, "score"),
    Stage("code", code_gates.gate, "policy"),  # code chunks whose files changed since indexed leave here
    Stage("policy", stages.apply_policy, "policy"),
    Stage("rerank", stages.rerank, "rerank"),
    Stage("order", stages.order, "policy"),
    Stage("results", stages.results),
    Stage("fallback", stages.workspace, when=stages.needs_workspace),
    Stage("budget", stages.budget, "budget"),
    Stage("fresh", fresh.mark),  # each hit's vector: made by the store's model from its text now?
    Stage("count", stages.count),
)


def search(
    ctx: SearchContext,
    query: str,
    *,
    active_wing: str | None = None,
    wings: list[str] | None = None,
    k: int | None = None,
    profile: str | None = "memory",
    budget: int | None = None,
    user: str | None = None,
    weights: dict[str, float] | None = None,
    workspace: str | None = None,
    use_cache: bool = True,
    now: datetime | None = None,
    client: str = "api",
    context: bool = False,
) -> Bundle:
    """Rank the entries for ``query``: the stages of ``PIPELINE`` in order, each timed here. The retrieval log gets
    the search's record (``RetrievalRecord``: these arguments, ``client`` who asked, ``context`` whether the results
    go into an agent's context)."""
    t_start = time.perf_counter()
    options = {"active_wing": active_wing, "wings": wings, "k": k, "profile": profile, "budget": budget, "user": user,
               "weights": weights}
    run = Run(ctx=ctx, query=query, options=options, workspace=workspace, use_cache=use_cache, now=now)
    with run.store.settled():  # whether another process wrote is asked once for the whole search
        for stage in PIPELINE:
            if stage.when is None or stage.when(run):
                t = time.perf_counter()
                stage.run(run)
                if stage.latency is not None:
                    run.lat[stage.latency] += (time.perf_counter() - t) * 1000
            if run.cache_state.hit:
                break
    bundle = _finish(run, t_start)
    request = {"query": query, **{n: v for n, v in options.items() if v is not None and n != "weights"}}
    ctx.log(RetrievalRecord(bundle, request, client, context))
    return bundle


def _finish(run: Run, t_start: float) -> Bundle:
    """Total latency into the trace, the bundle into the cache."""
    bundle = run.bundle
    assert bundle is not None
    total = (time.perf_counter() - t_start) * 1000
    if run.cache_state.hit:
        bundle.trace.latency_ms["total"] = round(total, 3)
    else:
        run.lat["total"] = total
        run.trace.latency_ms = {st: round(v, 3) for st, v in run.lat.items()}
        if run.cache_state.info is not None and not bundle.trace.degraded:
            copy = Bundle(results=_copies(bundle.results), trace=run.trace.model_copy(), context=bundle.context)
            run.ctx.cache.put(run.cache_state.key, copy, run.cache_state.gens)
    return bundle


def _copies(results: list[Result]) -> list[Result]:
    """Copies of results (and of the parts a caller may edit) so the cache and its callers never share them."""
    return [r.model_copy(update={"flags": list(r.flags), "components": dataclasses.replace(r.components)}) for r in results]
