"""The retrieval pipeline: one code path that ranks and records why.

    parse → cache? → embed → candidates (vec0 KNN + FTS5, inside the scope)
    → score (relevance, recency, salience, active-wing boost; per-kind min-max)
    → dedup across wings → policy (overrides, conflicts, mandatory invariants,
    thresholds) → optional cross-encoder rerank → authority order → cap
    → budget → bundle + trace

Relevance fuses the two candidate generators as a min-max-normalised weighted
sum, ``0.8 · sim_n + 0.2 · bm25_n``. Measured on real questions (FAQ questions
against 2.7k documentation sections), vectors alone scored MRR@10 .70, BM25
.41, reciprocal-rank fusion .63 and this sum .72. A candidate found only by BM25 still gets its true cosine similarity,
looked up by rowid, so every result carries every component.
"""

from __future__ import annotations

import dataclasses
import re
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.errors import QueryError, ValidationError
from memlens.limits import MAX_QUERY_TERMS, check_budget, check_k, check_text, knn_rows
from memlens.models import GLOBAL_WING, format_ts, utcnow
from memlens.profiles import route
from memlens.retrieval import policy
from memlens.retrieval.cache import cache_key
from memlens.retrieval.policy import Candidate
from memlens.retrieval.query import ParsedQuery, check_known, parse
from memlens.retrieval.scoring import RetrievalWeights, minmax, recency, recency_many
from memlens.store import staging
from memlens.store.rows import damaged_note, row_problem
from memlens.store.vectors import clean, degenerate, from_blob, vec0_knn
from memlens.trace import STAGES, Bundle, Components, Result, Trace

if TYPE_CHECKING:
    from memlens.memory import Memory

__all__ = ["search", "Bundle", "Result", "Trace", "Components"]

FUSION = "minmax-weighted-sum/v1"
_SELECT = (
    "SELECT rowid, content_hash, id, wing, room, kind, type, status, title, text, key, salience, overrides, "
    "created_at, updated_at, meta FROM entries"
)


def query_terms(text: str) -> list[str]:
    """The distinct lexical terms of free text, in order of appearance (all of them; see fts_query)."""
    return list(dict.fromkeys(t.lower() for t in re.findall(r"\w+", text) if len(t) > 1 or t.isdigit()))


def fts_query(text: str) -> str | None:
    """Free text → an FTS5 OR-query of quoted terms (no FTS syntax leaks through).

    Only the first ``MAX_QUERY_TERMS`` distinct terms are used: an FTS5 OR-query costs
    time in proportion to its terms, and the trace notes the cut (``_candidates``).
    """
    terms = query_terms(text)[:MAX_QUERY_TERMS]
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


def _in(col: str, values: list[str]) -> tuple[str, list[str]]:
    return f"{col} IN ({','.join('?' * len(values))})", list(values)


def resolve_scope(mem: Memory, parsed: ParsedQuery, active_wing: str | None, wings: list[str] | None) -> list[str] | None:
    """Wings to search: the query's ``wing=``, else ``wings``, else [active, _global]; None = all."""
    known = mem.wings()
    if parsed.wings:
        check_known(parsed, "wing", known)
        return parsed.wings
    if wings:
        for w in wings:
            if w not in known:
                raise QueryError(f"unknown wing {w!r} (known wings: {', '.join(known) or 'none yet'})")
        return list(dict.fromkeys(wings))
    if active_wing:
        return list(dict.fromkeys([active_wing, GLOBAL_WING]))
    return None


class _Plan:
    """Everything decided before touching the index: scope, filters, profile, weights."""

    def __init__(self, mem: Memory, query: str, active_wing: str | None, wings: list[str] | None, k: int | None,
                 profile: str | None, budget: int | None, user: str | None, weights: dict[str, float] | None) -> None:
        s = mem.settings
        if not isinstance(query, str):
            raise ValidationError(f"query must be a string, not {type(query).__name__}")
        for name, value in (("active_wing", active_wing), ("user", user), ("profile", profile)):
            if value is not None and not isinstance(value, str):
                raise ValidationError(f"{name} must be a string, not {type(value).__name__}")
        if wings is not None and (not isinstance(wings, (list, tuple)) or not all(isinstance(w, str) for w in wings)):
            raise ValidationError("wings must be a list of strings")
        for name, value in (("active wing", active_wing), ("wings", wings), ("user", user), ("profile", profile)):
            check_text(name, value)
        self.text_query, self.profile = route(query, profile, mem.profiles)
        self.parsed = parse(self.text_query)
        if self.parsed.rooms:
            check_known(self.parsed, "room", mem.rooms())
        self.scope = resolve_scope(mem, self.parsed, active_wing, wings)
        self.active_wing = active_wing
        self.k = check_k(s.search.k if k is None else k)
        self.budget = None if budget is None else check_budget(budget)
        self.user = user or s.retrieval.user
        p = self.profile
        self.kinds = self.parsed.kinds
        if p.kinds is not None:
            self.kinds = [x for x in (self.kinds or p.kinds) if x in p.kinds]
        self.rooms = self.parsed.rooms or p.rooms
        self.statuses = self.parsed.statuses or ["active", "under_review"]
        self.weights = RetrievalWeights.from_dict(s.retrieval.weights).merge(p.weights).merge(weights)
        self.limit = min(self.k, p.cap) if p.cap else self.k

    def filters(self, prefix: str = "") -> tuple[list[str], list[Any]]:
        """SQL conditions (and their arguments) of the scope, for the entries table or vec0's metadata columns."""
        where: list[str] = []
        args: list[Any] = []
        for col, values in (("wing", self.scope), ("room", self.rooms), ("kind", self.kinds), ("type", self.parsed.types),
                            ("status", self.statuses)):
            if values is not None:
                clause, vals = _in(prefix + col, values)
                where.append(clause)
                args.extend(vals)
        return where, args

    def entry_filters(self, prefix: str = "") -> tuple[list[str], list[Any]]:
        """``filters()`` on the entries table, and no row of an import in progress (``memlens.store.staging``)."""
        where, args = self.filters(prefix)
        return [staging.visible(prefix.rstrip(".")), *where], args

    def index_filters(self) -> dict[str, list[str]]:
        """The filters other than the wing, as the in-process index applies them."""
        return {c: v for c, v in (("room", self.rooms), ("kind", self.kinds), ("type", self.parsed.types),
                                  ("status", self.statuses)) if v is not None}

    def cache_params(self, mem: Memory) -> dict[str, Any]:
        s = mem.settings
        return {
            "profile": self.profile.model_dump(), "k": self.k, "budget": self.budget, "active": self.active_wing,
            "weights": self.weights.to_dict(), "boost": s.retrieval.active_wing_boost, "search": s.search.model_dump(),
            "retrieval": s.retrieval.model_dump(), "rerank": s.rerank.model_dump(),
        }


def check(mem: Memory, query: str, *, active_wing: str | None = None, wings: list[str] | None = None,
          k: int | None = None, profile: str | None = "memory", budget: int | None = None) -> None:
    """Raise what ``search`` would raise for these arguments, without searching (batch files check every line first)."""
    _Plan(mem, query, active_wing, wings, k, profile, budget, None, None)


def search(
    mem: Memory,
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
) -> Bundle:
    t_start = time.perf_counter()
    lat = {s: 0.0 for s in STAGES}
    s = mem.settings

    t = time.perf_counter()
    plan = _Plan(mem, query, active_wing, wings, k, profile, budget, user, weights)
    lat["parse"] = _ms(t)

    wings_searched = plan.scope if plan.scope is not None else mem.wings()
    cache_info = None
    key = ""
    if use_cache and s.cache.enabled:
        key = cache_key(plan.text_query, plan.user, plan.scope, {**plan.cache_params(mem), "workspace": workspace})
        if plan.scope is not None:
            gens = mem.generations(wings_searched)
        else:  # every wing of entries; the working memory's counter ("_tasks") is not a wing
            gens = {w: g for w, g in mem.generations().items() if w != "_tasks"}
        hit, cache_info = mem.cache.get(key, gens, mem.describe_write)
        if hit is not None:
            trace = hit.trace.model_copy(update={"cache_hit": True, "cache": cache_info})
            trace.latency_ms = {st: 0.0 for st in STAGES}
            trace.latency_ms["total"] = round(_ms(t_start), 3)
            # copies: a caller editing its results must not edit the cache
            bundle = Bundle(results=_copies(hit.results), trace=trace, context=hit.context)
            mem.log_retrieval(bundle)
            return bundle
    else:
        gens = {}

    now = now or utcnow()
    trace = Trace(
        query=query, text=plan.parsed.text, filters=plan.parsed.filters(), active_wing=active_wing, user=plan.user,
        profile=plan.profile.name, profile_settings=plan.profile.model_dump(exclude={"name", "description"}),
        model=mem.model_id, weights=plan.weights.to_dict(), now=format_ts(now), wings_searched=wings_searched,
        fusion={"method": FUSION, "vector_weight": s.search.vector_weight, "lexical_weight": s.search.lexical_weight,
                "normalise": s.retrieval.normalise, "active_wing_boost": s.retrieval.active_wing_boost,
                "half_life_days": s.retrieval.half_life_days},
    )
    if cache_info is not None:
        trace.cache = cache_info
    else:
        trace.cache.enabled = False

    pool, vectors, qvec = _candidates(mem, plan, trace, lat)
    t = time.perf_counter()
    _score(mem, plan, pool, vectors, qvec, trace, now)
    lat["score"] += _ms(t)

    t = time.perf_counter()
    pool = policy.dedup_and_conflicts(pool, vectors, trace, s.retrieval.dedup_similarity)
    pool = policy.apply_overrides(pool, trace)
    scored = {c.id: c for c in pool}
    if plan.parsed.text:
        pool = policy.thresholds(pool, trace, plan.profile.min_score, plan.profile.relative)
    if plan.profile.recent_turns:
        pool = _merge_recent_turns(mem, plan, pool, trace, now)
    if not pool and plan.profile.fallback == "personal_facts" and plan.parsed.text:
        pool = _personal_fallback(mem, plan, trace, scored)
    lat["policy"] = _ms(t)

    t = time.perf_counter()
    if s.rerank.enabled and pool and plan.parsed.text:
        from memlens.retrieval.rerank import rerank

        rerank(mem, plan.parsed.text, pool, plan.weights, trace)
    elif s.rerank.enabled:
        trace.rerank = {"applied": False, "reason": "no candidates" if not pool else "no free text"}
    else:
        trace.rerank = {"applied": False, "reason": "disabled (rerank.enabled = false)"}
    lat["rerank"] = _ms(t)

    t = time.perf_counter()
    if plan.profile.recent_turns:
        pool = pool[: plan.limit]  # conversation keeps transcript order: dedup by first occurrence, cap 6
    else:
        rules = {c.rowid: c.wing for c in pool if c.type in policy.SUBJECT_TYPES}
        if len(rules) > 1:
            _fetch_vectors(mem, rules, vectors)
            policy.subject_conflicts(pool, vectors, trace, plan.limit, s.retrieval.conflict_similarity)
        pool = policy.authority_order(policy.cap(pool, trace, plan.limit))
    lat["policy"] += _ms(t)

    results = [
        Result(entry=c.entry, score=c.score, rank=i + 1, flags=policy.flags_for(c, active_wing), components=c.comps,
               found_in=c.found_in or [c.wing], conflicts_with=c.conflicts_with, hides=c.hides)
        for i, c in enumerate(pool)
    ]
    for c, r in zip(pool, results):
        if c.source == "fallback":
            r.flag("fallback")
    bundle = Bundle(results=results, trace=trace)

    if not results and workspace is not None:
        from memlens.retrieval.fallback import workspace_fallback

        reason = "the scoped search found nothing" if plan.parsed.text else "no free text to search for"
        workspace_fallback(bundle, workspace, plan.parsed.text or plan.text_query, plan.limit, reason)

    t = time.perf_counter()
    if plan.budget is not None:
        from memlens.retrieval.budget import apply_budget

        apply_budget(mem, bundle, plan.budget)
    lat["budget"] = _ms(t)

    for r in bundle.results:
        trace.results_per_wing[r.entry.wing] = trace.results_per_wing.get(r.entry.wing, 0) + 1
        trace.counts[r.entry.kind.value] = trace.counts.get(r.entry.kind.value, 0) + 1
    lat["total"] = _ms(t_start)
    trace.latency_ms = {st: round(v, 3) for st, v in lat.items()}
    if cache_info is not None and not bundle.trace.degraded:
        mem.cache.put(key, Bundle(results=_copies(bundle.results), trace=trace.model_copy(), context=bundle.context), gens)
    mem.log_retrieval(bundle)
    return bundle


def _copies(results: list[Result]) -> list[Result]:
    """Copies of results (and of the parts a caller may edit) so the cache and its callers never share them."""
    return [r.model_copy(update={"flags": list(r.flags), "components": dataclasses.replace(r.components)}) for r in results]


def _fetch_vectors(mem: Memory, need: dict[int, str], vectors: dict[int, np.ndarray]) -> None:
    """Add the stored vectors of the ``need`` rowids (rowid -> wing) that ``vectors`` lacks."""
    need = {r: w for r, w in need.items() if r not in vectors}
    if need and mem.vector_index is not None:
        vectors.update(mem.vector_index.vectors(need))
    # one lookup per rowid: vec0 answers `rowid = ?` from its index but scans the table for `rowid IN (...)`
    for rowid in (r for r in need if r not in vectors):
        row = mem.conn.execute("SELECT embedding FROM entries_vec WHERE rowid = ?", (rowid,)).fetchone()
        if row is not None:
            vectors[rowid] = from_blob(row[0])


def _ms(t: float) -> float:
    return (time.perf_counter() - t) * 1000


def _candidates(
    mem: Memory, plan: _Plan, trace: Trace, lat: dict[str, float]
) -> tuple[list[Candidate], dict[int, np.ndarray], np.ndarray | None]:
    conn = mem.conn
    s = mem.settings
    text = plan.parsed.text
    where, args = plan.entry_filters()
    n_cand = knn_rows(plan.k, s.search.candidates)  # never past sqlite-vec's KNN limit
    sims: dict[int, float] = {}
    vec_rank: dict[int, int] = {}
    bm25: dict[int, float] = {}
    bm25_rank: dict[int, int] = {}
    qvec = None
    ordered: list[int] = []
    if plan.kinds == []:
        trace.notes.append(f"profile {plan.profile.name!r} allows no kind that the query asked for")
    elif text and len(text.split()) < plan.profile.min_query_tokens:
        trace.notes.append(
            f"query has {len(text.split())} token(s); profile {plan.profile.name!r} needs {plan.profile.min_query_tokens}"
        )
    elif text:
        t = time.perf_counter()
        qvec = mem.embed([text])[0]
        lat["embed"] = _ms(t)
        blob = qvec.astype("<f4").tobytes()

        t = time.perf_counter()
        vindex = mem.vector_index
        gens = None
        if degenerate(qvec):
            qvec = clean(qvec)
            hits = []
            trace.notes.append("the query's vector is degenerate (zero or not finite): text matches only")
        elif vindex is not None:
            gens = mem.generations()  # one read for both generators: the blocks and the scope set they check
            hits = vindex.knn(mem, qvec, plan.scope, plan.index_filters(), n_cand, gens)
        else:
            hits = _knn(mem, plan, blob, n_cand)
            if hits is None:  # an import in progress has rows in the scope: rank the visible vectors here
                vindex = mem.__dict__.setdefault("_staged_vindex", _new_vindex())
                trace.notes.append("an import in progress has rows in this scope: vectors ranked in process, without them")
                gens = mem.generations()
                hits = vindex.knn(mem, qvec, plan.scope, plan.index_filters(), n_cand, gens)
            else:
                mem.__dict__.pop("_staged_vindex", None)  # that copy of the vectors was for the import's duration
        trace.fusion["vector_index"] = "memory" if vindex is not None else "sqlite-vec"
        for i, (rowid, sim) in enumerate(hits[:n_cand]):
            sims[rowid] = sim
            vec_rank[rowid] = i + 1
        lat["vector"] = _ms(t)

        t = time.perf_counter()
        n_terms = len(query_terms(text))
        if n_terms > MAX_QUERY_TERMS:
            trace.notes.append(f"the lexical search used the first {MAX_QUERY_TERMS} of the query's {n_terms} distinct terms")
        for i, (rowid, score) in enumerate(lexical(mem, plan, text, n_cand, gens)):
            bm25[rowid] = -float(score)  # SQLite's bm25 is "lower is better"; flip it
            bm25_rank[rowid] = i + 1
        lat["lexical"] = _ms(t)
        ordered = list(dict.fromkeys([*sims, *bm25]))
    else:
        # filters only: list the scope in authority order, most salient first
        t = time.perf_counter()
        sql = "SELECT rowid FROM entries" + (" WHERE " + " AND ".join(where) if where else "")
        sql += (" ORDER BY CASE type WHEN 'invariant' THEN 0 WHEN 'decision' THEN 1 WHEN 'pattern' THEN 2 ELSE 3 END,"
                " salience DESC, updated_at DESC LIMIT ?")
        ordered = [r for (r,) in conn.execute(sql, [*args, n_cand])]
        lat["vector"] = _ms(t)
    trace.candidates = {"vector": len(sims), "lexical": len(bm25), "over_fetch": n_cand}

    t = time.perf_counter()
    pool: dict[int, Candidate] = {}
    _load(mem, ordered, pool, trace)
    # pull in what policy must see even if the generators missed it
    mandatory: set[int] = set()
    extra: list[int] = []
    active_in_scope = plan.active_wing and (plan.scope is None or plan.active_wing in plan.scope)
    if plan.profile.mandatory_invariants and active_in_scope and plan.kinds != []:
        sql = f"SELECT rowid FROM entries WHERE wing = ? AND type = 'invariant' AND status = 'active' AND {staging.visible()}"
        margs: list[Any] = [plan.active_wing]
        if plan.rooms:
            c, v = _in("room", plan.rooms)
            sql += " AND " + c
            margs += v
        mandatory = {r for (r,) in conn.execute(sql, margs)}
        extra += [r for r in mandatory if r not in pool]
    ids = [c.id for c in pool.values()]
    keys = {c.key for c in pool.values() if c.key}
    if ids and text:
        # look up by the overrides / key indexes alone and apply the scope here: with the scope in the
        # SQL, the planner (no ANALYZE stats) prefers the wing index and scans the whole wing
        def in_scope(row: tuple[Any, ...]) -> bool:
            return all(vals is None or v in vals for v, vals in zip(row[1:], (plan.scope, plan.rooms, plan.kinds,
                                                                               plan.parsed.types, plan.statuses)))

        cols = "rowid, wing, room, kind, type, status"
        for i in range(0, len(ids), 400):
            chunk = ids[i : i + 400]
            q = f"SELECT {cols} FROM entries WHERE overrides IN ({','.join('?' * len(chunk))}) AND {staging.visible()}"
            extra += [r[0] for r in conn.execute(q, chunk) if r[0] not in pool and in_scope(r)]
        for key in keys:
            extra += [r[0] for r in conn.execute(f"SELECT {cols} FROM entries WHERE key = ? AND {staging.visible()}", (key,))
                      if r[0] not in pool and in_scope(r)]
    _load(mem, list(dict.fromkeys(extra)), pool, trace)
    trace.candidates["pulled_in"] = len(set(extra))
    vectors: dict[int, np.ndarray] = {}
    if pool and qvec is not None:
        # vectors are needed for the candidates the KNN did not score and for the key groups dedup compares
        need = {r: c.wing for r, c in pool.items() if r not in sims or c.key}
        _fetch_vectors(mem, need, vectors)
        unusable = sorted(pool[r].id for r, v in vectors.items() if not v.any())
        if unusable:
            trace.notes.append(f"no usable vector (all zeros or not finite), similarity counted as 0: {', '.join(unusable[:5])}"
                               + (f" and {len(unusable) - 5} more" if len(unusable) > 5 else ""))
        unscored = [r for r in vectors if r not in sims]
        if unscored:
            sims.update(zip(unscored, (np.stack([vectors[r] for r in unscored]) @ qvec).tolist()))
    for rowid, c in pool.items():
        c.comps.similarity = sims.get(rowid) if qvec is not None else None
        c.comps.vector_rank = vec_rank.get(rowid)
        c.comps.bm25 = bm25.get(rowid)
        c.comps.bm25_rank = bm25_rank.get(rowid)
        if rowid in mandatory:
            c.mandatory = c.keep = True
            c.source = "mandatory" if rowid in extra else c.source
    trace.candidates["pool"] = len(pool)
    lat["score"] += _ms(t)  # loading the candidates, their vectors and policy pull-ins is scoring's input
    return list(pool.values()), vectors, qvec


def _new_vindex() -> Any:
    from memlens.store.vindex import VectorIndex

    return VectorIndex()


def _knn(mem: Memory, plan: _Plan, blob: bytes, n_cand: int) -> list[tuple[int, float]] | None:
    """vec0 KNN inside the scope, as (rowid, cosine similarity) best first; None when an import in progress has
    staged rows in the scope (the KNN would rank them and lose visible rows). One read snapshot for both."""
    conn = mem.conn
    where, args = plan.filters()
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        if staging.staged(conn, plan.scope):
            return None
        return vec0_knn(conn, blob, n_cand, where, args)
    finally:
        if own:
            conn.execute("COMMIT")


def lexical(mem: Memory, plan: _Plan, text: str, n: int, gens: dict[str, int] | None = None) -> list[tuple[int, float]]:
    """The lexical generator: the ``n`` best FTS5 matches inside the scope, as (rowid, SQLite bm25).

    Most matches of a free-text query lie outside a scoped search (2,300 of
    them for 460 inside, at 100k entries). Joining each to its entries row to
    test the scope was most of the statement's time; with the in-process
    index warm, the test is a lookup in the set of in-scope rowids the index
    holds, and bm25 is computed for the rows inside only. Same rows, same
    order (ties by rowid), in about 60% of the time. ``gens``: the wing generations, when already read.
    """
    fq = fts_query(text)
    if not fq:
        return []
    conn = mem.conn
    vindex = mem.vector_index
    if vindex is not None:
        allowed = vindex.in_scope(mem, plan.scope, plan.index_filters(), gens)
        conn.create_function("memlens_in_scope", 1, allowed.__contains__, deterministic=True)
        sql = ("SELECT rowid, bm25(entries_fts, 2.0, 1.0) AS s FROM entries_fts "
               "WHERE entries_fts MATCH ? AND memlens_in_scope(rowid) ORDER BY s, rowid LIMIT ?")
        return conn.execute(sql, [fq, n]).fetchall()
    ewhere, eargs = plan.entry_filters("e.")
    sql = (
        "SELECT e.rowid, bm25(entries_fts, 2.0, 1.0) AS s FROM entries_fts "
        "JOIN entries e ON e.rowid = entries_fts.rowid WHERE entries_fts MATCH ?"
    )
    sql += "".join(" AND " + w for w in ewhere) + " ORDER BY s, e.rowid LIMIT ?"
    return conn.execute(sql, [fq, *eargs, n]).fetchall()


def _load(mem: Memory, rowids: list[int], pool: dict[int, Candidate], trace: Trace) -> None:
    for i in range(0, len(rowids), 400):
        chunk = rowids[i : i + 400]
        rows = mem.conn.execute(f"{_SELECT} WHERE rowid IN ({','.join('?' * len(chunk))}) AND {staging.visible()}",
                                chunk).fetchall()
        by_rowid = {r[0]: r for r in _sound(rows, trace)}
        for rowid in chunk:
            r = by_rowid.get(rowid)
            if r is not None and rowid not in pool:
                pool[rowid] = Candidate(rowid=rowid, row=r[2:], content_hash=r[1])


def _sound(rows: list[tuple[Any, ...]], trace: Trace) -> list[tuple[Any, ...]]:
    """Rows of ``_SELECT`` that decode; a damaged one (a hand edit) is skipped with a note, not a crash."""
    out = []
    for r in rows:
        problem = row_problem(r[2:])
        if problem is None:
            out.append(r)
        else:
            trace.notes.append(damaged_note(r[2], problem))
    return out


def _score(mem: Memory, plan: _Plan, pool: list[Candidate], vectors: dict[int, np.ndarray], qvec: np.ndarray | None,
           trace: Trace, now: datetime) -> None:
    s = mem.settings
    groups: dict[str, list[Candidate]] = {}
    for c in pool:
        groups.setdefault(c.kind if s.retrieval.normalise == "per_kind" else "pool", []).append(c)
    for group, members in groups.items():
        sim_n, sim_b = minmax({c.rowid: c.comps.similarity for c in members if c.comps.similarity is not None})
        bm_n, bm_b = minmax({c.rowid: c.comps.bm25 for c in members if c.comps.bm25 is not None})
        trace.normalisation[group] = {"similarity": sim_b, "bm25": bm_b}
        for c in members:
            c.comps.similarity_norm = sim_n.get(c.rowid, 0.0)
            c.comps.bm25_norm = bm_n.get(c.rowid, 0.0)
    conv = plan.profile.conversation_fusion
    centroids = _session_centroids(mem, pool, vectors) if conv and qvec is not None else {}
    w = plan.weights
    boost_active = s.retrieval.active_wing_boost
    decay = recency_many([c.changed_at for c in pool], now, s.retrieval.half_life_days)
    for c, (rec, age) in zip(pool, decay):
        comps = c.comps
        comps.recency, comps.age_days = rec, age
        comps.salience = c.salience
        comps.boost = boost_active if plan.active_wing and c.wing == plan.active_wing else 1.0
        raw = comps.similarity if comps.similarity is not None else 0.0
        if qvec is None:
            # no free text: nothing to be relevant to, so the entry's own salience orders the listing
            comps.relevance = comps.salience
            c.profile_score = 0.0
        elif conv:
            cen = centroids.get(str(c.entry.meta.get("session_id")))
            comps.summary = float(cen @ qvec) if cen is not None else raw
            comps.relevance = (
                conv.get("raw", 0) * raw + conv.get("summary", 0) * comps.summary + conv.get("recency", 0) * comps.recency
            )
            c.profile_score = comps.relevance
        else:
            comps.relevance = s.search.vector_weight * comps.similarity_norm + s.search.lexical_weight * comps.bm25_norm
            c.profile_score = raw
            year = c.entry.meta.get("year") if plan.profile.year_boost else None
            if isinstance(year, int) and not isinstance(year, bool):
                comps.year_boost = round((year - 2000) * plan.profile.year_boost, 6)
                comps.relevance += comps.year_boost
                c.profile_score = raw + comps.year_boost
        comps.final = (w.relevance * comps.relevance + w.recency * comps.recency + w.salience * comps.salience) * comps.boost


def _session_centroids(mem: Memory, pool: list[Candidate], vectors: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
    """The "summary" signal of conversation fusion: the query against each session's mean turn vector."""
    sessions = {str(c.entry.meta.get("session_id")) for c in pool if c.entry.meta.get("session_id") is not None}
    out = {}
    for sid in sessions:
        rows = mem.conn.execute(
            "SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "
            "WHERE e.kind = 'turn' AND CASE WHEN json_valid(e.meta) THEN json_extract(e.meta, '$.session_id') END = ? "
            f"AND {staging.visible('e')}",
            (sid,),
        ).fetchall()
        if rows:
            m = np.mean([from_blob(r[0]) for r in rows], axis=0)
            out[sid] = m / (np.linalg.norm(m) or 1.0)
    return out


def _merge_recent_turns(mem: Memory, plan: _Plan, pool: list[Candidate], trace: Trace, now: datetime) -> list[Candidate]:
    """Conversation profile: semantic hits then the session's latest turns, first occurrence wins."""
    semantic = sorted(pool, key=lambda c: -c.score)
    where, args = plan.entry_filters()
    sql = f"{_SELECT}" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY created_at DESC, rowid DESC LIMIT 1"
    latest = next(iter(_sound(mem.conn.execute(sql, args).fetchmany(1), trace)), None)
    if latest is None:
        return semantic
    from memlens.memory import row_to_entry

    session = row_to_entry(latest[2:]).meta.get("session_id")
    sql = (f"{_SELECT} WHERE kind = 'turn' AND CASE WHEN json_valid(meta) THEN json_extract(meta, '$.session_id') END = ?"
           f" AND {staging.visible()}")
    rargs: list[Any] = [session]
    if plan.scope is not None:
        c, v = _in("wing", plan.scope)
        sql += " AND " + c
        rargs += v
    sql += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
    rows = _sound(mem.conn.execute(sql, [*rargs, plan.profile.recent_turns]).fetchall(), trace)
    merged = list(semantic)
    ids = {c.id for c in merged}
    for r in reversed(rows):  # oldest of the recent first, as in a transcript
        e = row_to_entry(r[2:])
        if e.id in ids:
            continue
        cand = Candidate(rowid=r[0], row=r[2:], content_hash=r[1], source="recent", _entry=e)
        cand.comps.recency, cand.comps.age_days = recency(
            e.updated_at or e.created_at, now, mem.settings.retrieval.half_life_days
        )
        cand.comps.salience = e.salience
        merged.append(cand)
        ids.add(e.id)
    trace.notes.append(f"merged the {len(rows)} most recent turns of session {session!r}")
    for c in merged[plan.limit :]:
        trace.drop(c, "cap", f"beyond the conversation cap of {plan.limit}", c.score)
    return merged


def _personal_fallback(mem: Memory, plan: _Plan, trace: Trace, scored: dict[str, Candidate]) -> list[Candidate]:
    """Personal profile: nothing passed, so expose the stored personal facts with score 1.0."""
    where, args = plan.entry_filters()
    sql = f"{_SELECT}" + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY salience DESC, updated_at DESC LIMIT ?"
    out = []
    for r in _sound(mem.conn.execute(sql, [*args, plan.limit]).fetchall(), trace):
        c = Candidate(rowid=r[0], row=r[2:], content_hash=r[1], source="fallback")
        if c.id in scored:  # keep the measured components; only the score is the synthetic 1.0
            c.comps = dataclasses.replace(scored[c.id].comps)
        c.comps.final = c.comps.relevance = 1.0
        c.comps.salience = c.salience
        c.profile_score = 1.0
        out.append(c)
    if out:
        trace.notes.append("no personal fact passed the thresholds: stored personal facts returned with score 1.0")
    return out
