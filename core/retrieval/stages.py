"""The pipeline's stages after candidate generation: score, policy, rerank, order, results, fallback, budget.

Relevance fuses the two candidate generators as a min-max-normalised weighted
sum, ``0.8 · sim_n + 0.2 · bm25_n`` (per kind by default). Measured on real
questions (FAQ questions against 2.7k documentation sections), vectors alone
scored MRR@10 .70, BM25 .41, reciprocal-rank fusion .63 and this sum .72.
"""

from __future__ import annotations

from memlens.retrieval import policy
from memlens.retrieval.run import Run
from memlens.retrieval.scoring import minmax_list, recency_many
from memlens.trace import Bundle, Components, Result


def _normalise(run: Run) -> None:
    """Min-max normalise similarity and bm25 per kind (or over the pool), bounds into the trace."""
    groups: dict[str, list[Components]] = {}
    per_kind = run.settings.retrieval.normalise == "per_kind"
    for c in run.pool:
        groups.setdefault(c.kind if per_kind else "pool", []).append(c.comps)
    for group, members in groups.items():
        sims = [(x, x.similarity) for x in members if x.similarity is not None]
        bm25s = [(x, x.bm25) for x in members if x.bm25 is not None]
        sim_n, sim_b = minmax_list([v for _, v in sims])
        bm_n, bm_b = minmax_list([v for _, v in bm25s])
        run.trace.normalisation[group] = {"similarity": sim_b, "bm25": bm_b}
        for x in members:
            x.similarity_norm = x.bm25_norm = 0.0
        for (x, _), v in zip(sims, sim_n):
            x.similarity_norm = v
        for (x, _), v in zip(bm25s, bm_n):
            x.bm25_norm = v


def score(run: Run) -> None:
    """Every component of every candidate, and the final score (``memlens.trace.FORMULA``)."""
    _normalise(run)
    s, plan, pool = run.settings, run.plan, run.pool
    relevance = run.hooks.relevance(run) if run.found.qvec is not None else None
    w = plan.weights
    boost_active = s.retrieval.active_wing_boost
    assert run.now is not None
    decay = recency_many([c.changed_at for c in pool], run.now, s.retrieval.half_life_days)
    for c, (rec, age) in zip(pool, decay):
        comps = c.comps
        comps.recency, comps.age_days = rec, age
        comps.salience = c.salience
        comps.boost = boost_active if plan.active_wing and c.wing == plan.active_wing else 1.0
        if relevance is None:
            # no free text: nothing to be relevant to, so the entry's own salience orders the listing
            comps.relevance = comps.salience
            c.profile_score = 0.0
        else:
            relevance(c, comps, comps.similarity if comps.similarity is not None else 0.0)
        comps.final = (w.relevance * comps.relevance + w.recency * comps.recency + w.salience * comps.salience) * comps.boost


def apply_policy(run: Run) -> None:
    """Dedup across wings, overrides, thresholds, then the profile's merge and fallback."""
    s, plan, trace = run.settings, run.plan, run.trace
    pool = policy.dedup_and_conflicts(run.pool, run.vectors, trace, s.retrieval.dedup_similarity)
    pool = policy.apply_overrides(pool, trace)
    scored = {c.id: c for c in pool}
    if run.text:
        pool = policy.thresholds(pool, trace, plan.profile.min_score, plan.profile.relative)
    if run.hooks.merge is not None:
        pool = run.hooks.merge(run, pool)
    if not pool and run.hooks.fallback is not None and run.text:
        pool = run.hooks.fallback(run, scored)
    run.pool = pool


def rerank(run: Run) -> None:
    """The optional cross-encoder (``memlens.retrieval.rerank``); the trace says why it did not run."""
    s, pool, trace = run.settings, run.pool, run.trace
    if s.rerank.enabled and pool and run.text:
        from memlens.retrieval.rerank import rerank as cross_encode

        cross_encode(s.rerank, run.text, pool, run.plan.weights, trace)
    elif s.rerank.enabled:
        trace.rerank = {"applied": False, "reason": "no candidates" if not pool else "no free text"}
    else:
        trace.rerank = {"applied": False, "reason": "disabled (rerank.enabled = false)"}


def order(run: Run) -> None:
    run.pool = run.hooks.order(run, run.pool)


def results(run: Run) -> None:
    active = run.plan.active_wing
    out = [
        Result(entry=c.entry, score=c.score, rank=i + 1, flags=policy.flags_for(c, active), components=c.comps,
               found_in=c.found_in or [c.wing], conflicts_with=c.conflicts_with, hides=c.hides)
        for i, c in enumerate(run.pool)
    ]
    for c, r in zip(run.pool, out):
        if c.source == "fallback":
            r.flag("fallback")
    run.bundle = Bundle(results=out, trace=run.trace)


def needs_workspace(run: Run) -> bool:
    return run.bundle is not None and not run.bundle.results and run.workspace is not None


def workspace(run: Run) -> None:
    """Nothing found: the workspace's documents, marked degraded (``memlens.retrieval.fallback``)."""
    from memlens.retrieval.fallback import workspace_fallback

    assert run.bundle is not None and run.workspace is not None
    plan = run.plan
    reason = "the scoped search found nothing" if plan.parsed.text else "no free text to search for"
    workspace_fallback(run.bundle, run.workspace, plan.parsed.text or plan.text_query, plan.limit, reason)


def budget(run: Run) -> None:
    if run.plan.budget is not None:
        from memlens.retrieval.budget import apply_budget

        assert run.bundle is not None
        ctx = run.ctx
        apply_budget(run.bundle, run.plan.budget, ctx.count_tokens, ctx.settings.limits.max_entry_chars,
                     ctx.working_memory(), ctx.model_id())


def count(run: Run) -> None:
    assert run.bundle is not None
    trace = run.trace
    for r in run.bundle.results:
        trace.results_per_wing[r.entry.wing] = trace.results_per_wing.get(r.entry.wing, 0) + 1
        trace.counts[r.entry.kind.value] = trace.counts.get(r.entry.kind.value, 0) + 1
