"""Profile hooks: what a profile swaps into the one pipeline.

A profile (``memlens.profiles.Profile``) is data. Each behaviour it can ask
for is a hook here, chosen by ``hooks_for`` from the profile's fields, so a
new profile, built-in or from the configuration, is data only, and a new
behaviour is one more hook and one more line of ``FEATURES``; the pipeline
(``memlens.retrieval.pipeline``) never changes.

    relevance  how a candidate's relevance (and the score the thresholds test) is computed
    pull_in    rowids a search must weigh even if the generators missed them
    merge      a change to the pool after the thresholds
    fallback   what to return when nothing passed
    order      the final order and cap
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from memlens.profiles import Profile
from memlens.retrieval import policy
from memlens.retrieval.candidates import fetch_vectors
from memlens.retrieval.policy import Candidate
from memlens.retrieval.run import Run
from memlens.retrieval.scoring import recency
from memlens.trace import Components

Scorer = Callable[[Candidate, Components, float], None]  # sets comps.relevance and c.profile_score from the raw cosine


def fused(run: Run) -> Scorer:
    """Relevance of the two generators: ``vector_weight · sim_n + lexical_weight · bm25_n``; thresholds test the cosine."""
    vw, lw = run.settings.search.vector_weight, run.settings.search.lexical_weight

    def score(c: Candidate, comps: Components, raw: float) -> None:
        comps.relevance = vw * comps.similarity_norm + lw * comps.bm25_norm
        c.profile_score = raw

    return score


def year_boosted(run: Run) -> Scorer:
    """``fused``, plus ``year_boost`` per year since 2000 for an entry with an integer ``meta.year``."""
    base, per_year = fused(run), run.plan.profile.year_boost

    def score(c: Candidate, comps: Components, raw: float) -> None:
        base(c, comps, raw)
        year = c.entry.meta.get("year")
        if isinstance(year, int) and not isinstance(year, bool):
            comps.year_boost = round((year - 2000) * per_year, 6)
            comps.relevance += comps.year_boost
            c.profile_score = raw + comps.year_boost

    return score


def conversation(run: Run) -> Scorer:
    """Conversation fusion: raw cosine, the query against the session's mean turn vector ("summary"), recency."""
    conv = run.plan.profile.conversation_fusion or {}
    qvec = run.found.qvec
    centroids = session_centroids(run)

    def score(c: Candidate, comps: Components, raw: float) -> None:
        cen = centroids.get(str(c.entry.meta.get("session_id")))
        comps.summary = float(cen @ qvec) if cen is not None else raw
        comps.relevance = (
            conv.get("raw", 0) * raw + conv.get("summary", 0) * comps.summary + conv.get("recency", 0) * comps.recency
        )
        c.profile_score = comps.relevance

    return score


def session_centroids(run: Run) -> dict[str, np.ndarray]:
    """Each candidate session's mean turn vector, unit length."""
    sessions = {str(c.entry.meta.get("session_id")) for c in run.pool if c.entry.meta.get("session_id") is not None}
    out = {}
    for sid in sessions:
        vecs = run.store.session_vectors(sid)
        if vecs:
            m = np.mean(vecs, axis=0)
            out[sid] = m / (np.linalg.norm(m) or 1.0)
    return out


def mandatory_invariants(run: Run) -> set[int]:
    """The active wing's active invariants, when the active wing is searched and the query allows any kind, and its
    own ``type=``, ``status=`` and ``kind=`` terms, if any, allow them (``type=decision`` asks for decisions,
    ``kind=turn`` for conversation turns)."""
    plan = run.plan
    active_in_scope = plan.active_wing and (plan.scope is None or plan.active_wing in plan.scope)
    if not active_in_scope or plan.kinds == [] or plan.active_wing is None:
        return set()
    asked = plan.parsed
    if (asked.types and "invariant" not in asked.types) or (asked.statuses and "active" not in asked.statuses):
        return set()
    found = run.store.mandatory_invariants(plan.active_wing, plan.rooms)
    if asked.kinds and found:  # (rowid, content_hash, id, wing, room, kind, ...)
        found = {r[0] for r in run.store.rows(sorted(found)).rows if r[5] in asked.kinds}
    return found


def merge_recent_turns(run: Run, pool: list[Candidate]) -> list[Candidate]:
    """Semantic hits then the latest turns of the latest session, first occurrence wins."""
    plan, trace, store = run.plan, run.trace, run.store
    semantic = policy.by_score(pool)
    latest = store.latest(plan.search_scope)
    trace.notes.extend(latest.damaged)
    if not latest.rows:
        return semantic
    last = latest.rows[0]
    session = Candidate(last).entry.meta.get("session_id")
    turns = store.session_turns(session, plan.scope, plan.profile.recent_turns)
    trace.notes.extend(turns.damaged)
    merged = list(semantic)
    ids = {c.id for c in merged}
    half_life = run.settings.retrieval.half_life_days
    for r in reversed(turns.rows):  # oldest of the recent first, as in a transcript
        cand = Candidate(r, source="recent")
        e = cand.entry
        if e.id in ids:
            continue
        assert run.now is not None
        cand.comps.recency, cand.comps.age_days = recency(e.updated_at or e.created_at, run.now, half_life)
        cand.comps.salience = e.salience
        merged.append(cand)
        ids.add(e.id)
    trace.notes.append(f"merged the {len(turns.rows)} most recent turns of session {session!r}")
    for c in merged[plan.limit :]:
        trace.drop(c, "cap", f"beyond the conversation cap of {plan.limit}", c.score)
    return merged


def personal_facts(run: Run, scored: dict[str, Candidate]) -> list[Candidate]:
    """Nothing passed: the stored personal facts of the scope, with score 1.0."""
    got = run.store.top_salient(run.plan.search_scope, run.plan.limit)
    run.trace.notes.extend(got.damaged)
    out = []
    for r in got.rows:
        c = Candidate(r, source="fallback")
        if c.id in scored:  # keep the measured components; only the score is the synthetic 1.0
            c.comps = dataclasses.replace(scored[c.id].comps)
        c.comps.final = c.comps.relevance = 1.0
        c.comps.salience = c.salience
        c.profile_score = 1.0
        out.append(c)
    if out:
        run.trace.notes.append("no personal fact passed the thresholds: stored personal facts returned with score 1.0")
    return out


def authority(run: Run, pool: list[Candidate]) -> list[Candidate]:
    """Rules of different wings on one subject flagged, the cap, then authority order."""
    s = run.settings
    rules = {c.rowid: c.wing for c in pool if c.type in policy.SUBJECT_TYPES}
    if len(rules) > 1:
        fetch_vectors(run, rules)
        policy.subject_conflicts(pool, run.vectors, run.trace, run.plan.limit, s.retrieval.conflict_similarity)
    return policy.authority_order(policy.cap(pool, run.trace, run.plan.limit))


def transcript(run: Run, pool: list[Candidate]) -> list[Candidate]:
    """Conversation keeps transcript order: dedup by first occurrence, then the cap."""
    return pool[: run.plan.limit]


@dataclass(frozen=True)
class Hooks:
    relevance: Callable[[Run], Scorer] = fused
    pull_in: Callable[[Run], set[int]] | None = None
    merge: Callable[[Run, list[Candidate]], list[Candidate]] | None = None
    fallback: Callable[[Run, dict[str, Candidate]], list[Candidate]] | None = None
    order: Callable[[Run, list[Candidate]], list[Candidate]] = authority


# (does the profile ask for it?, the hooks it swaps in): applied in this order, a later match wins
FEATURES: tuple[tuple[Callable[[Profile], bool], dict[str, Any]], ...] = (
    (lambda p: bool(p.year_boost), {"relevance": year_boosted}),
    (lambda p: bool(p.conversation_fusion), {"relevance": conversation}),
    (lambda p: p.mandatory_invariants, {"pull_in": mandatory_invariants}),
    (lambda p: bool(p.recent_turns), {"merge": merge_recent_turns, "order": transcript}),
    (lambda p: p.fallback == "personal_facts", {"fallback": personal_facts}),
)


def hooks_for(profile: Profile) -> Hooks:
    chosen: dict[str, Any] = {}
    for wants, swap in FEATURES:
        if wants(profile):
            chosen.update(swap)
    return Hooks(**chosen)
