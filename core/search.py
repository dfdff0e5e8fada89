"""Scoped hybrid search: vec0 KNN inside the scope + FTS5 BM25, fused.

Fusion is a min-max-normalised weighted sum, ``0.8 · sim_n + 0.2 · bm25_n``
over the candidate pool. Measured on real questions (DESIGN.md): vector alone
MRR@10 .70, BM25 .41, reciprocal-rank fusion .63, this sum .72. Both weights
are configuration (``search.vector_weight`` / ``search.lexical_weight``).
A candidate found only by BM25 still gets its true cosine similarity (looked
up by rowid), so every result carries every component.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from .errors import QueryError
from .models import GLOBAL_WING, Entry
from .query import ParsedQuery, check_known, parse

if TYPE_CHECKING:
    from .store import Memory

FUSION = "minmax-weighted-sum/v1"
STAGES = ("parse", "embed", "vector", "lexical", "score", "rerank", "policy", "budget", "total")


class Components(BaseModel):
    """Every number that went into a result's score."""

    similarity: float | None = None
    vector_rank: int | None = None
    bm25: float | None = None
    bm25_rank: int | None = None
    similarity_norm: float = 0.0
    bm25_norm: float = 0.0
    fused: float = 0.0


class Result(BaseModel):
    entry: Entry
    score: float
    rank: int
    flags: list[str] = Field(default_factory=list)
    components: Components
    found_in: list[str] = Field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        rec = self.entry.to_record()
        rec.update(
            score=round(self.score, 6),
            rank=self.rank,
            flags=self.flags,
            components=self.components.model_dump(),
            found_in=self.found_in,
        )
        return rec


class Dropped(BaseModel):
    id: str
    stage: str
    reason: str
    detail: str = ""


class Trace(BaseModel):
    query: str
    text: str
    filters: dict[str, list[str]] = Field(default_factory=dict)
    active_wing: str | None = None
    profile: str = "memory"
    model: str = ""
    fusion: dict[str, Any] = Field(default_factory=dict)
    cache_hit: bool = False
    cache: dict[str, Any] = Field(default_factory=dict)
    latency_ms: dict[str, float] = Field(default_factory=dict)
    wings_searched: list[str] = Field(default_factory=list)
    results_per_wing: dict[str, int] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    candidates: dict[str, int] = Field(default_factory=dict)
    dropped: list[Dropped] = Field(default_factory=list)


class Bundle(BaseModel):
    results: list[Result]
    trace: Trace

    def to_dict(self) -> dict[str, Any]:
        """Exactly the ``search --json`` object of DESIGN.md."""
        return {"results": [r.to_dict() for r in self.results], "trace": self.trace.model_dump()}


def fts_query(text: str) -> str | None:
    """Free text → an FTS5 OR-query of quoted terms (no FTS syntax leaks through)."""
    terms = list(dict.fromkeys(t.lower() for t in re.findall(r"\w+", text) if len(t) > 1 or t.isdigit()))
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


def _minmax(values: dict[int, float]) -> tuple[dict[int, float], tuple[float, float] | None]:
    if not values:
        return {}, None
    lo, hi = min(values.values()), max(values.values())
    if hi - lo < 1e-12:
        return {r: 1.0 for r in values}, (lo, hi)
    return {r: (v - lo) / (hi - lo) for r, v in values.items()}, (lo, hi)


def _in(col: str, values: list[str]) -> tuple[str, list[str]]:
    return f"{col} IN ({','.join('?' * len(values))})", list(values)


def resolve_scope(
    mem: Memory, parsed: ParsedQuery, active_wing: str | None, wings: list[str] | None
) -> list[str] | None:
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


def search(
    mem: Memory,
    query: str,
    *,
    active_wing: str | None = None,
    wings: list[str] | None = None,
    k: int | None = None,
    profile: str = "memory",
    budget: int | None = None,
) -> Bundle:
    t_start = time.perf_counter()
    lat: dict[str, float] = {s: 0.0 for s in STAGES}
    cfg = mem.settings.search
    k = k or cfg.k
    if k < 1:
        raise QueryError("k must be at least 1")

    t = time.perf_counter()
    parsed = parse(query)
    if parsed.rooms:
        check_known(parsed, "room", mem.rooms())
    scope = resolve_scope(mem, parsed, active_wing, wings)
    statuses = parsed.statuses or ["active", "under_review"]
    lat["parse"] = (time.perf_counter() - t) * 1000

    trace = Trace(
        query=query,
        text=parsed.text,
        filters=parsed.filters(),
        active_wing=active_wing,
        profile=profile,
        model=mem.model_id,
        fusion={"method": FUSION, "vector_weight": cfg.vector_weight, "lexical_weight": cfg.lexical_weight},
        wings_searched=scope if scope is not None else mem.wings(),
    )
    conn = mem.conn

    # metadata filters shared by both candidate generators
    where: list[str] = []
    args: list[Any] = []
    for col, values in (("wing", scope), ("room", parsed.rooms), ("kind", parsed.kinds), ("type", parsed.types), ("status", statuses)):
        if values:
            clause, vals = _in(col, values)
            where.append(clause)
            args.extend(vals)

    n_cand = max(cfg.candidates, k * 3)
    sims: dict[int, float] = {}
    vec_rank: dict[int, int] = {}
    bm25: dict[int, float] = {}
    bm25_rank: dict[int, int] = {}

    if parsed.text:
        t = time.perf_counter()
        qvec = mem.embed([parsed.text])[0]
        lat["embed"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        # With a partition key, `wing IN (...)` yields up to k rows per wing; merged below.
        sql = "SELECT rowid, distance FROM entries_vec WHERE embedding MATCH ? AND k = ?"
        if where:
            sql += " AND " + " AND ".join(where)
        rows = conn.execute(sql, [qvec.astype("<f4").tobytes(), n_cand, *args]).fetchall()
        rows.sort(key=lambda r: r[1])
        for i, (rowid, dist) in enumerate(rows[:n_cand]):
            sims[rowid] = 1.0 - float(dist)
            vec_rank[rowid] = i + 1
        lat["vector"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        fq = fts_query(parsed.text)
        if fq:
            sql = (
                "SELECT e.rowid, bm25(entries_fts, 2.0, 1.0) AS s FROM entries_fts JOIN entries e ON e.rowid = entries_fts.rowid "
                "WHERE entries_fts MATCH ?"
            )
            if where:
                sql += " AND " + " AND ".join(f"e.{w}" for w in where)
            sql += " ORDER BY s LIMIT ?"
            for i, (rowid, score) in enumerate(conn.execute(sql, [fq, *args, n_cand]).fetchall()):
                bm25[rowid] = -float(score)  # SQLite's bm25 is "lower is better"; flip so higher is better
                bm25_rank[rowid] = i + 1
        # lexical-only candidates still get their true cosine similarity
        missing = [r for r in bm25 if r not in sims]
        if missing:
            q = f"SELECT rowid, vec_distance_cosine(embedding, ?) FROM entries_vec WHERE rowid IN ({','.join('?' * len(missing))})"
            for rowid, dist in conn.execute(q, [qvec.astype("<f4").tobytes(), *missing]):
                sims[rowid] = 1.0 - float(dist)
        lat["lexical"] = (time.perf_counter() - t) * 1000
    else:
        # filters only: list the scope in authority order, most salient first
        t = time.perf_counter()
        sql = "SELECT rowid FROM entries" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY CASE type WHEN 'invariant' THEN 0 WHEN 'decision' THEN 1 WHEN 'pattern' THEN 2 ELSE 3 END, salience DESC, updated_at DESC LIMIT ?"
        for i, (rowid,) in enumerate(conn.execute(sql, [*args, n_cand])):
            sims[rowid] = 0.0
            vec_rank[rowid] = i + 1
        lat["vector"] = (time.perf_counter() - t) * 1000

    t = time.perf_counter()
    pool = list(dict.fromkeys([*sims, *bm25]))
    entries: dict[int, Entry] = {}
    if pool:
        from .store import _COLUMNS, row_to_entry

        q = f"SELECT rowid, {_COLUMNS} FROM entries WHERE rowid IN ({','.join('?' * len(pool))})"
        for row in conn.execute(q, pool):
            entries[row[0]] = row_to_entry(row[1:])
    sim_n, sim_bounds = _minmax({r: sims[r] for r in pool if r in sims})
    bm_n, bm_bounds = _minmax(bm25)
    trace.fusion["similarity_bounds"] = list(sim_bounds) if sim_bounds else None
    trace.fusion["bm25_bounds"] = list(bm_bounds) if bm_bounds else None
    scored: list[tuple[float, int]] = []
    comps: dict[int, Components] = {}
    for r in pool:
        if r not in entries:
            continue
        c = Components(
            similarity=sims.get(r) if parsed.text else None,
            vector_rank=vec_rank.get(r),
            bm25=bm25.get(r),
            bm25_rank=bm25_rank.get(r),
            similarity_norm=sim_n.get(r, 0.0),
            bm25_norm=bm_n.get(r, 0.0),
        )
        c.fused = cfg.vector_weight * c.similarity_norm + cfg.lexical_weight * c.bm25_norm if parsed.text else 0.0
        comps[r] = c
        scored.append((c.fused, r))
    if parsed.text:
        scored.sort(key=lambda x: (-x[0], -(sims.get(x[1]) or 0.0)))
    else:
        scored.sort(key=lambda x: vec_rank[x[1]])
    lat["score"] = (time.perf_counter() - t) * 1000

    results: list[Result] = []
    for i, (score, r) in enumerate(scored):
        e = entries[r]
        if i >= k:
            trace.dropped.append(Dropped(id=e.id, stage="cap", reason="cap", detail=f"rank {i + 1} > k={k}"))
            continue
        flags = []
        if e.status.value == "under_review":
            flags.append("under_review")
        if active_wing and e.wing == active_wing:
            flags.append("active_wing")
        results.append(Result(entry=e, score=score, rank=i + 1, flags=flags, components=comps[r], found_in=[e.wing]))

    trace.candidates = {"vector": len(sims), "lexical": len(bm25), "pool": len(pool)}
    for res in results:
        trace.results_per_wing[res.entry.wing] = trace.results_per_wing.get(res.entry.wing, 0) + 1
        trace.counts[res.entry.kind.value] = trace.counts.get(res.entry.kind.value, 0) + 1
    lat["total"] = (time.perf_counter() - t_start) * 1000
    trace.latency_ms = {s: round(v, 3) for s, v in lat.items()}
    return Bundle(results=results, trace=trace)
