"""The pipeline's stages after candidate generation: score, policy, rerank, order, results, fallback, budget.

Relevance fuses the two candidate generators as a min-max-normalised weighted
sum, ``0.8 · sim_n + 0.2 · bm25_n`` (per kind by default). Measured on real
questions (FAQ questions against 2.7k documentation sections), vectors alone
scored MRR@10 .70, BM25 .41, reciprocal-rank fusion .63 and this sum .72.
"""

from __future__ import annotations

from memlens.retrieval import policy
from memlens.retrieval.run import Run
from memlens.retrieval.scoring import minmax_missing, recency_many
from memlens.trace import Bundle, Components, Result


def _normalise(run: Run) -> None:
    """Min-max normalise similarity and bm25 per kind (or over the pool), bounds into the trace."""
    for group, members in _groups(run).items():
        sim_n, sim_b = minmax_missing([x.similarity for x in members])  # 0.0 where the generator did not find it
        bm_n, bm_b = minmax_missing([x.bm25 for x in members])
        run.trace.normalisation[group] = {"similarity": sim_b, "bm25": bm_b}
        for x, sim, bm in zip(members, sim_n, bm_n):
            x.similarity_norm, x.bm25_norm = sim, bm


def _groups(run: Run) -> dict[str, list[Components]]:
    """The pool's components by the group they are normalised in: per kind (in the order kinds first appear), or
    one group "pool"."""
    pool = run.pool
    if run.settings.retrieval.normalise != "per_kind":
        return {"pool": [c.comps for c in pool]} if pool else {}
    kinds = [c.kind for c in pool]
    if len(set(kinds)) == 1:  # the common case, one kind: no grouping per candidate
        return {kinds[0]: [c.comps for c in pool]}
    groups: dict[str, list[Components]] = {}
    for kind, c in zip(kinds, pool):
        groups.setdefault(kind, []).append(c.comps)
    return groups


def score(run: Run) -> None:
    """Every component of every candidate, and the final score (``memlens.trace.FORMULA``)."""
    _normalise(run)
    s, plan, pool = run.settings, run.plan, run.pool
    relevance = run.hooks.relevance(run) if run.found.qvec is not None else None
    w_rel, w_rec, w_sal = plan.weights.relevance, plan.weights.recency, plan.weights.salience
    active, boost_active = plan.active_wing, s.retrieval.active_wing_boost
    assert run.now is not None
    decay = recency_many([c.changed_at for c in pool], run.now, s.retrieval.half_life_days)
    for c, (rec, age) in zip(pool, decay):
        comps = c.comps
        comps.recency, comps.age_days = rec, age
        comps.salience = c.salience
        comps.boost = boost_active if active and c.wing == active else 1.0
        if relevance is None:
            # no free text: nothing to be relevant to, so the entry's own salience orders the listing
            comps.relevance = comps.salience
            c.profile_score = 0.0
        else:
            relevance(c, comps, comps.similarity if comps.similarity is not None else 0.0)
        comps.final = (w_rel * comps.relevance + w_rec * comps.recency + w_sal * comps.salience) * comps.boost


def apply_policy(run: Run) -> None:
    """Dedup across wings, overrides, thresholds, then the profile's merge and fallback."""
    s, plan, trace = run.settings, run.plan, run.trace
    pool = policy.dedup_and_conflicts(run.pool, run.vectors, trace, s.retrieval.dedup_similarity)
    pool = scored = policy.apply_overrides(pool, trace)
    if run.text:
        pool = policy.thresholds(pool, trace, plan.profile.min_score, plan.profile.relative)
    if run.hooks.merge is not None:
        pool = run.hooks.merge(run, pool)
    if not pool and run.hooks.fallback is not None and run.text:  # (the fallback alone reads the scored pool by id)
        pool = run.hooks.fallback(run, {c.id: c for c in scored})
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
    per_wing, per_kind = run.trace.results_per_wing, run.trace.counts
    for r in run.bundle.results:
        e = r.entry
        per_wing[e.wing] = per_wing.get(e.wing, 0) + 1
        kind = e.kind.value
        per_kind[kind] = per_kind.get(kind, 0) + 1
