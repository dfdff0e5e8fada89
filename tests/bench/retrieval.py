"""Retrieval benchmark (issue 3): cache hits, the whole pipeline against the foundation's
search, the cost of audit logging, and where a retrieval spends its time.

One synthetic store of 100k entries (10k with ``--quick``), built exactly as the
foundation benchmark builds its stores (``tests/bench/foundation.py``: same data
set, same ``import_jsonl``, same ``FixedEmbedder``, so embedding a query is cheap
and constant: the "warm model" case). The store is opened once and
``Memory.warm_index()`` loads the in-process vector index, as a long-lived
process (the app, ``search --queries``, an agent) does. Queries are scoped to 2
of the 10 wings, k=10. Everything runs on one thread (one BLAS thread, faiss
``omp_set_num_threads(1)``), as in the foundation benchmark.

* **cache hit**: ``mem.search(q)`` once (a miss, which fills the cache; an
  uncached search of the same query is timed next to it, order alternating),
  then the same call again, timed; ``trace.cache_hit`` must be True. Timed at the default
  audit level (``reads``: the hit still writes its metrics row) and at
  ``writes``, interleaved.
* **pipeline**: ``mem.search(q, use_cache=False)`` on the warm index against the
  foundation's hybrid search at its floor: its two candidate generators alone,
  ``VectorIndex.knn`` at the candidate count with the engine's filters plus the
  foundation's FTS5 statement (scope tested by a join to ``entries``). The
  engine's own lexical generator (``memlens.retrieval.search.lexical``) must return the
  same rows as that statement (checked on every query). Also against the raw
  KNN at k=10, the sqlite-vec KNN SQL, faiss ``IndexFlatIP`` with the same
  filter and numpy on the same rows. All interleaved per query.
* **audit logging**: the same pipeline calls at ``audit.level = "reads"`` (one
  retrieval metrics row into the audit table per search) and ``"writes"`` (no
  row), interleaved per query with the order alternating, so drift and
  first-call effects fall on both alike. ``Memory.log_retrieval`` is also timed
  alone on the bundles those searches returned.
* **stages**: p50 of every stage of ``trace.latency_ms``.

    python -m tests.bench.retrieval [--quick]

A full run writes ``tests/bench/results/retrieval.json`` and the table in tests/bench/README.md
between the ``bench:retrieval`` markers; a quick run writes its JSON to the temp
directory.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import RESULTS, log, machine_info, publish, ratio, suite_main, summary

NAME = "retrieval"
TARGET_CACHE_HIT_MS = 1.0
TARGET_PIPELINE_VS_RAW = 1.5
TARGET_AUDIT_SHARE = 0.10


@dataclasses.dataclass
class RPlan:
    quick: bool
    n: int
    queries: int
    cache_queries: int
    warmup: int
    seed: int = 20260303


def make_rplan(quick: bool) -> RPlan:
    if quick:
        return RPlan(quick=True, n=10_000, queries=40, cache_queries=40, warmup=3)
    return RPlan(quick=False, n=100_000, queries=200, cache_queries=200, warmup=5)


def _retrieval_rows(mem: Any) -> int:
    return int(mem.conn.execute("SELECT count(*) FROM audit WHERE action = 'retrieval'").fetchone()[0])


def _fts_statement(mem: Any, query: str, wings: list[str], n_cand: int) -> tuple[str, list[Any]]:
    """The foundation's FTS5 statement (the reference): each match joined to its entries row to test the scope."""
    from memlens.retrieval.search import _Plan, fts_query  # private: used only to mirror the engine exactly

    plan = _Plan(mem, query, None, wings, 10, "memory", None, None, None)
    ewhere, eargs = plan.filters("e.")
    sql = (
        "SELECT e.rowid, bm25(entries_fts, 2.0, 1.0) AS s FROM entries_fts "
        "JOIN entries e ON e.rowid = entries_fts.rowid WHERE entries_fts MATCH ?"
    )
    sql += "".join(" AND " + w for w in ewhere) + " ORDER BY s LIMIT ?"
    return sql, [fts_query(plan.parsed.text), *eargs, n_cand]


def _lexical_rows(mem: Any, query: str, wings: list[str], n_cand: int) -> list[tuple[int, float]]:
    """The engine's lexical generator for ``query``, as ``memlens.retrieval.search._candidates`` calls it."""
    from memlens.retrieval.search import _Plan, lexical  # private: used only to mirror the engine exactly

    plan = _Plan(mem, query, None, wings, 10, "memory", None, None, None)
    return lexical(mem, plan, plan.parsed.text, n_cand)


def _statements_of_one_search(mem: Any, query: str, wings: list[str]) -> dict[str, Any]:
    """Every SQL statement one warm, uncached search issues (SQLite's trace hook)."""
    seen: list[str] = []
    mem.conn.set_trace_callback(seen.append)
    try:
        mem.search(query, wings=wings, k=10, use_cache=False)
        seen_engine = list(seen)
    finally:
        mem.conn.set_trace_callback(None)
    kinds: dict[str, int] = {}
    nested = [x for x in seen_engine if x.lstrip().startswith("--")]  # run inside FTS5 / vec0 / triggers
    seen_engine = [x for x in seen_engine if not x.lstrip().startswith("--")]
    for stmt in seen_engine:
        head = re.sub(r"\s+", " ", stmt.strip())
        key = ("INSERT INTO audit" if head.startswith("INSERT INTO audit")
               else "PRAGMA" if head.startswith("PRAGMA")
               else "FTS5 MATCH" if "entries_fts MATCH" in head
               else "SELECT ... FROM entries WHERE rowid IN" if "FROM entries WHERE rowid IN" in head
               else "SELECT ... WHERE overrides IN" if "overrides IN" in head
               else "SELECT ... WHERE key = ?" if "WHERE key =" in head
               else "SELECT embedding FROM entries_vec WHERE rowid = ?" if "FROM entries_vec WHERE rowid" in head
               else "SELECT ... FROM wings" if "FROM wings" in head
               else head[:60])  # fmt: skip
        kinds[key] = kinds.get(key, 0) + 1
    return {"statements": len(seen_engine), "by_kind": kinds, "nested_statements": len(nested)}


def bench(plan: RPlan, scratch: Path, model_id: str, res: dict[str, Any], stage: Any) -> None:
    import faiss
    from threadpoolctl import threadpool_limits

    from memlens import Memory
    from memlens.trace import STAGES

    from . import foundation as F

    fplan = dataclasses.replace(F.make_plan(plan.quick, ("search",)), sizes=(plan.n,))
    fe = F.FixedEmbedder(model_id)
    t = time.perf_counter()
    ds = F.make_dataset(fplan, scratch, model_id)
    log(f"  data set: {plan.n:,} entries generated in {time.perf_counter() - t:.1f} s")
    res["dataset"] = F.dataset_info(fplan)
    path = scratch / f"store-{plan.n}.db"
    log(f"  importing {plan.n:,} entries with vectors ...")
    res["import"] = F.build_store(path, ds.jsonl[plan.n], fe)
    log(f"    {res['import']}")
    wings = F.SCOPE
    K = F.K

    with Memory.open(path, embedder=fe) as mem:  # a fresh connection, as an application would have
        settings = mem.settings
        assert settings.audit.level == "reads" and settings.cache.enabled, "engine defaults expected"
        res["warm_index"] = F.warm_index(mem)
        log(f"  warm_index(): {res['warm_index']}")
        vindex = mem.vector_index
        rowid_to_idx = F.rowid_map(mem)
        n_cand = max(settings.search.candidates, K * 3)
        # distinct queries: warm-up and measured ones for the pipeline part, then for the cache part
        queries = F.make_queries(ds.vocab, 2 * plan.warmup + plan.queries + plan.cache_queries, seed=plan.seed)
        w, nq = plan.warmup, plan.queries
        warm_q, pipe_q = queries[:w], queries[w : w + nq]
        cache_warm_q, cache_q = queries[w + nq : 2 * w + nq], queries[2 * w + nq :]
        filters = F.knn_filters(mem, warm_q[0], wings)
        check_mem = F.verify_knn_memory(mem, warm_q[0], wings, filters, n_cand)
        sql, tail, _ = F.knn_sql(mem, warm_q[0], wings)
        with F.vector_path(mem, "sqlite-vec"):
            check_sql = F.verify_knn_sql(mem, warm_q[0], wings, sql, tail, n_cand)
        fts_sql, _ = _fts_statement(mem, warm_q[0], wings, n_cand)
        statements = _statements_of_one_search(mem, warm_q[0], wings)
        res["checks"] = {"knn_memory": check_mem, "knn_sqlite_vec_sql": check_sql, "one_search": statements}
        for name, ok in (("VectorIndex.knn call", check_mem["identical"]), ("vec0 statement", check_sql["identical"])):
            if not ok:
                log(f"    WARNING: our {name} differs from the engine's (see checks in the JSON)")

        subset = np.flatnonzero(np.isin(ds.wing_of[: plan.n], [F.WINGS.index(w) for w in wings])).astype(np.int64)
        index = faiss.IndexFlatIP(F.DIM)
        index.add(np.ascontiguousarray(ds.vectors[: plan.n]))
        params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(subset))
        matrix = np.ascontiguousarray(ds.vectors[subset])
        conn = mem.conn
        pc = time.perf_counter

        def knn_mem(qv: np.ndarray, k: int) -> list[int]:
            return [r for r, _ in vindex.knn(mem, qv, wings, filters, k)[:k]]

        def search(q: str, level: str, **kw: Any) -> tuple[float, Any]:
            settings.audit.level = level
            try:
                t = pc(); b = mem.search(q, wings=wings, k=K, **kw); dt = pc() - t  # fmt: skip
            finally:
                settings.audit.level = "reads"
            return dt, b

        # -- pipeline, raw KNN and audit cost, interleaved per query --------------------------
        stage("pipeline")
        log(f"  pipeline, raw KNN and audit level, {len(pipe_q)} queries ({plan.warmup} warm-up) ...")
        methods = ("search_reads", "search_writes", "knn_memory_k10", "knn_memory_kcand", "knn_sqlite_vec_k10",
                   "fts_statement", "faiss", "numpy")  # fmt: skip
        times: dict[str, list[float]] = {m: [] for m in methods}
        paired: list[float] = []
        by_order: dict[str, list[float]] = {"reads_first": [], "writes_first": []}
        stage_samples: dict[str, list[dict[str, float]]] = {"search_reads": [], "search_writes": []}
        bundles: list[Any] = []
        paths: set[str] = set()
        recall_mem: list[float] = []
        same_rows: list[bool] = []
        rows_before = _retrieval_rows(mem)
        reads_calls = 0
        t_part = pc()
        with threadpool_limits(limits=1):
            faiss.omp_set_num_threads(1)
            for i, q in enumerate(warm_q + pipe_q):
                qv = fe.embed([q])[0]
                t = pc(); got = knn_mem(qv, K); t_k10 = pc() - t  # fmt: skip
                t = pc(); knn_mem(qv, n_cand); t_kc = pc() - t  # fmt: skip
                order = ("reads", "writes") if i % 2 == 0 else ("writes", "reads")
                pipe = {}
                for level in order:
                    pipe[level] = search(q, level, use_cache=False)
                reads_calls += 1
                _, fargs = _fts_statement(mem, q, wings, n_cand)
                t = pc(); fts_rows = conn.execute(fts_sql, fargs).fetchall(); t_fts = pc() - t  # fmt: skip
                # the engine's lexical generator must find exactly what the foundation's statement finds
                same_rows.append(sorted(fts_rows, key=lambda r: (r[1], r[0])) == _lexical_rows(mem, q, wings, n_cand))
                t = pc(); index.search(qv[None, :], K, params=params); t_fa = pc() - t  # fmt: skip
                t = pc()
                s = matrix @ qv
                top = np.argpartition(-s, K)[:K]
                top = top[np.argsort(-s[top])]
                t_np = pc() - t
                exact = set(subset[top].tolist())
                if i < len(warm_q):
                    continue
                for key, dt in (("knn_memory_k10", t_k10), ("knn_memory_kcand", t_kc), ("fts_statement", t_fts),
                                ("faiss", t_fa), ("numpy", t_np)):  # fmt: skip
                    times[key].append(dt)
                for level, (dt, b) in pipe.items():
                    assert not b.trace.cache_hit
                    times[f"search_{level}"].append(dt)
                    stage_samples[f"search_{level}"].append(b.trace.latency_ms)
                    paths.add(str(b.trace.fusion.get("vector_index")))
                d = pipe["reads"][0] - pipe["writes"][0]
                paired.append(d)
                by_order[f"{order[0]}_first"].append(d)
                bundles.append(pipe["reads"][1])
                recall_mem.append(len(exact & {int(rowid_to_idx[r]) for r in got}) / K)
            # the sqlite-vec KNN, as a reference, in a pass of its own: its scans flush SQLite's page
            # cache, which a long-lived process searching on the warm index never does
            for i, q in enumerate(warm_q + pipe_q):
                blob = fe.embed([q])[0].astype("<f4").tobytes()
                t = pc(); conn.execute(sql, [blob, K, *tail]).fetchall(); dt = pc() - t  # fmt: skip
                if i >= len(warm_q):
                    times["knn_sqlite_vec_k10"].append(dt)
        rows_written = _retrieval_rows(mem) - rows_before
        res["checks"]["lexical_same_rows"] = {"queries": len(same_rows), "identical": sum(same_rows)}
        if not all(same_rows):
            log(f"    WARNING: the engine's lexical rows differ from the foundation statement's on "
                f"{len(same_rows) - sum(same_rows)} of {len(same_rows)} queries")
        log(f"    ({pc() - t_part:.1f} s) " + ", ".join(f"{m} {summary(v)['p50_ms']}" for m, v in times.items()))
        if paths != {"memory"}:
            log(f"    WARNING: trace.fusion['vector_index'] was {paths}, not the in-process index")

        # -- log_retrieval alone, on the bundles those searches returned ----------------------
        t_log_reads, t_log_writes = [], []
        rows_before = _retrieval_rows(mem)
        for b in bundles:
            settings.audit.level = "reads"
            t = pc(); mem.log_retrieval(b); t_log_reads.append(pc() - t)  # fmt: skip
            settings.audit.level = "writes"
            t = pc(); mem.log_retrieval(b); t_log_writes.append(pc() - t)  # fmt: skip
        settings.audit.level = "reads"
        log_rows = _retrieval_rows(mem) - rows_before

        # -- cache hits -----------------------------------------------------------------------
        stage("cache")
        log(f"  cache hits, {len(cache_q)} queries ...")
        hit_times: dict[str, list[float]] = {"hit_reads": [], "hit_writes": [], "miss_reads": [], "uncached_reads": []}
        hits_ok = 0
        hit_totals: list[float] = []
        with threadpool_limits(limits=1):
            for i, q in enumerate(cache_warm_q + cache_q):
                # the miss that fills the cache and an uncached search of the same query, order alternating
                first = {}
                for kind in (("miss", "uncached") if i % 2 == 0 else ("uncached", "miss")):
                    first[kind] = search(q, "reads", use_cache=kind == "miss")
                dt_miss, miss = first["miss"]
                assert not miss.trace.cache_hit, "a distinct query hit the cache"
                order = ("reads", "writes") if i % 2 == 0 else ("writes", "reads")
                got = {level: search(q, level) for level in order}
                if i < len(cache_warm_q):
                    continue
                hit_times["miss_reads"].append(dt_miss)
                hit_times["uncached_reads"].append(first["uncached"][0])
                for level, (dt, b) in got.items():
                    hit_times[f"hit_{level}"].append(dt)
                    hits_ok += bool(b.trace.cache_hit)
                hit_totals.append(got["reads"][1].trace.latency_ms["total"])
        del index

    # -- results ------------------------------------------------------------------------------
    lat = {m: summary(v) for m, v in times.items()}
    p50 = {m: v["p50_ms"] for m, v in lat.items()}
    cache = {m: summary(v) for m, v in hit_times.items()}
    log_r, log_w = summary(t_log_reads), summary(t_log_writes)
    diff_ms = p50["search_reads"] - p50["search_writes"]
    paired_ms = float(np.median(paired)) * 1000
    # reads-first medians carry +penalty of running first, writes-first -penalty: their mean cancels it
    med = {k: float(np.median(v)) * 1000 for k, v in by_order.items() if v}
    balanced_ms = (med["reads_first"] + med["writes_first"]) / 2 if len(med) == 2 else paired_ms
    penalty_ms = (med["reads_first"] - med["writes_first"]) / 2 if len(med) == 2 else 0.0
    res["pipeline"] = {
        "entries": plan.n,
        "wings": wings,
        "entries_in_scope": int(subset.size),
        "k": K,
        "knn_k_issued_by_search": n_cand,
        "queries": len(pipe_q),
        "warmup_queries": len(warm_q),
        "use_cache": False,
        "vector_index": sorted(paths),
        # the "foundation's raw search": the foundation's scoped hybrid search, taken at its floor
        "raw_search_definition": "the foundation's hybrid search at its floor: its two candidate generators alone, "
                                 "VectorIndex.knn at the candidate count (the pipeline's KNN path, with the engine's "
                                 "filters) plus the foundation's FTS5 statement (scope by a join to entries; the "
                                 "engine's lexical generator must return the same rows); sum of their p50s",  # fmt: skip
        "latency": lat,
        "ratios_p50": {
            "search_vs_raw_knn_memory_k10": ratio(p50["search_reads"], p50["knn_memory_k10"]),
            "search_vs_raw_knn_memory_kcand": ratio(p50["search_reads"], p50["knn_memory_kcand"]),
            "search_vs_knn_sqlite_vec_k10": ratio(p50["search_reads"], p50["knn_sqlite_vec_k10"]),
            "search_vs_faiss": ratio(p50["search_reads"], p50["faiss"]),
            "search_vs_numpy": ratio(p50["search_reads"], p50["numpy"]),
            "knn_memory_k10_vs_faiss": ratio(p50["knn_memory_k10"], p50["faiss"]),
            # the foundation's search as issue 2 specifies it: vector KNN plus FTS5 BM25 candidates
            "search_vs_hybrid_generators": ratio(p50["search_reads"], p50["knn_memory_kcand"] + p50["fts_statement"]),
        },
        "recall_at_10_knn_memory_vs_exact": round(float(np.mean(recall_mem)), 4),
        # what no pipeline with these two candidate generators can go below (p50 KNN k=cand + p50 FTS5 statement)
        "generators_floor_ms": round(p50["knn_memory_kcand"] + p50["fts_statement"], 3),
        "trace_latency_ms_p50": {
            key: {s: round(float(np.median([st.get(s, 0.0) for st in sts])), 3) for s in STAGES}
            for key, sts in stage_samples.items()
        },
        # per search: total minus the sum of the named stages (plan/cache key, trace and result objects, ...)
        "unstaged_ms_p50": {
            key: round(float(np.median([st["total"] - sum(v for k, v in st.items() if k != "total") for st in sts])), 3)
            for key, sts in stage_samples.items()
        },
    }
    res["audit"] = {
        "method": "the same uncached pipeline searches at audit.level 'reads' and 'writes', interleaved per query, "
                  "order alternating",  # fmt: skip
        "retrieval_rows_written": {"during_pipeline_part": rows_written, "expected": reads_calls},
        "search_reads_p50_ms": p50["search_reads"],
        "search_writes_p50_ms": p50["search_writes"],
        "difference_of_p50_ms": round(diff_ms, 3),
        "share_of_retrieval": ratio(diff_ms, p50["search_writes"]),
        "paired_median_difference_ms": round(paired_ms, 3),
        "paired_share_of_retrieval": ratio(paired_ms, p50["search_writes"]),
        "paired_median_by_order_ms": {k: round(float(np.median(v)) * 1000, 3) for k, v in by_order.items() if v},
        "order_balanced_ms": round(balanced_ms, 3),
        "order_balanced_share_of_retrieval": ratio(balanced_ms, p50["search_writes"]),
        "first_call_penalty_ms": round(penalty_ms, 3),
        "log_retrieval_alone": {"reads": log_r, "writes": log_w, "rows_written": log_rows, "calls": len(bundles)},
        "log_retrieval_share_of_retrieval": ratio(log_r["p50_ms"], p50["search_writes"]),
        "log_retrieval_share_of_cache_hit": ratio(log_r["p50_ms"], cache["hit_writes"]["p50_ms"]),
    }
    res["cache"] = {
        "queries": len(cache_q),
        "hits": hits_ok,
        "expected_hits": 2 * len(cache_q),
        "latency": cache,
        "trace_total_ms_p50_of_hit": round(float(np.median(hit_totals)), 3),
        "audit_cost_on_hit_ms": round(cache["hit_reads"]["p50_ms"] - cache["hit_writes"]["p50_ms"], 3),
    }
    if hits_ok != 2 * len(cache_q):
        log(f"  WARNING: only {hits_ok} of {2 * len(cache_q)} repeated searches were cache hits")
    res["foundation_reference"] = _foundation_reference(plan)


def _foundation_reference(plan: RPlan) -> dict[str, Any] | None:
    """The same raw KNN as measured by the last full foundation run (a cross-check, not the ratio's base)."""
    import json

    path = RESULTS / "foundation.json"
    try:
        f = json.loads(path.read_text())
        c = f["search"][str(plan.n)]["scoped"]
        return {"file": "tests/bench/results/foundation.json", "date": f["machine"]["date"],
                "knn_memory_k10_p50_ms": c["latency"]["knn_memory_k10"]["p50_ms"],
                "search_memory_p50_ms": c["latency"]["search_memory"]["p50_ms"],
                "faiss_p50_ms": c["latency"]["faiss"]["p50_ms"]}  # fmt: skip
    except (OSError, KeyError, ValueError):
        return None


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    p, a, c = res["pipeline"], res["audit"], res["cache"]
    hit = c["latency"]["hit_reads"]["p50_ms"]
    r = p["ratios_p50"]["search_vs_hybrid_generators"]
    share = a["order_balanced_share_of_retrieval"]
    return [
        {"name": "cache_hit_p50", "measured": hit, "limit": TARGET_CACHE_HIT_MS, "unit": "ms p50",
         "met": hit < TARGET_CACHE_HIT_MS and c["hits"] == c["expected_hits"]},
        {"name": f"pipeline_{p['entries']}_scoped_vs_foundation_search", "measured": r, "limit": TARGET_PIPELINE_VS_RAW,
         "unit": "x p50 (the foundation's hybrid search at its floor: KNN + FTS5 statement)",
         "met": r is not None and r <= TARGET_PIPELINE_VS_RAW},
        {"name": "audit_reads_vs_writes_share", "measured": share, "limit": TARGET_AUDIT_SHARE,
         "unit": "share of a retrieval at 'writes' (p50; order-balanced paired difference)",
         "met": share is not None and share < TARGET_AUDIT_SHARE},
    ]  # fmt: skip


def _ms(v: float) -> str:
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}" if abs(v) >= 1 else f"{v:.3f}"


def _pp(stat: dict[str, Any]) -> str:
    return f"{_ms(stat['p50_ms'])} / {_ms(stat['p95_ms'])} ms"


def _x(v: float | None) -> str:
    return "—" if v is None else (f"{v:.1f}×" if v >= 10 else f"{v:.2f}×")


def render_table(res: dict[str, Any]) -> str:
    m = res["machine"]
    p, a, c = res["pipeline"], res["audit"], res["cache"]
    lat = p["latency"]
    tg = {t["name"]: t for t in res["targets"]}

    def ok(name: str) -> str:
        return "met" if tg[name]["met"] else "**missed**"

    n = p["entries"]
    nk = f"{n // 1000}k"
    lx = res["checks"]["lexical_same_rows"]
    own_lex = p["trace_latency_ms_p50"]["search_reads"]["lexical"]
    kc = p["knn_k_issued_by_search"]
    load = res["load_average_1m"]
    lines = [
        f"Last full run: {m['date'][:10]} on {m['cpu_model']} ({m['cores']} cores), Python {m['python']}, SQLite "
        f"{m['sqlite']}; 1-min load average {load.get('pipeline', 0):.2f} before the pipeline part, "
        f"{load.get('cache', 0):.2f} before the cache part. All figures: `tests/bench/results/retrieval.json`.",
        "",
        f"One synthetic store of {n:,} entries (the foundation data set), opened once, `warm_index()` done "
        f"({res['warm_index']['seconds']:.2f} s), queries scoped to 2 of the 10 wings, k={p['k']}, the fixed stand-in "
        f"embedder (a warm model: embedding costs {p['trace_latency_ms_p50']['search_reads']['embed']:.2f} ms p50), one "
        "thread. Latencies are p50 / p95. *Raw KNN* is the "
        "in-process index's `VectorIndex.knn` alone with the engine's filters: the same KNN path the pipeline "
        "takes (the foundation's \"KNN alone, in-process index\", measured again here, interleaved with the "
        "pipeline). The pipeline runs with `use_cache=False` at the default audit level (`reads`).",
        "",
        "| What | Measured | Reference | Ratio | Target | Result |",
        "|---|---|---|---|---|---|",
        f"| Cache hit: the second identical `mem.search` ({c['queries']} queries, `trace.cache_hit` "
        f"{c['hits']}/{c['expected_hits']}), audit `reads` | {_pp(c['latency']['hit_reads'])} | the miss that filled "
        f"the cache {_pp(c['latency']['miss_reads'])} · the same query uncached {_pp(c['latency']['uncached_reads'])} "
        f"(interleaved) | {c['latency']['miss_reads']['p50_ms'] / c['latency']['hit_reads']['p50_ms']:.0f}× faster than "
        f"the miss | < {TARGET_CACHE_HIT_MS:g} ms | {ok('cache_hit_p50')} |",
        f"| Cache hit, audit `writes` (no metrics row) | {_pp(c['latency']['hit_writes'])} | — | — | — | — |",
        f"| Pipeline {nk}, scoped ({p['queries']} queries): `mem.search(use_cache=False)`, warm index | "
        f"{_pp(lat['search_reads'])} | the foundation's hybrid search at its floor, its two candidate generators "
        f"alone: KNN k={kc} {_ms(lat['knn_memory_kcand']['p50_ms'])} + its FTS5 statement (the scope tested by a "
        f"join to `entries`) {_ms(lat['fts_statement']['p50_ms'])} = {_ms(p['generators_floor_ms'])} ms (p50s) | "
        f"{_x(p['ratios_p50']['search_vs_hybrid_generators'])} | ≤ {TARGET_PIPELINE_VS_RAW}× | "
        f"{ok(f'pipeline_{n}_scoped_vs_foundation_search')} |",
        f"| … against the pipeline's own two generators: KNN k={kc} + its lexical stage (the same rows as the "
        f"foundation's statement on {lx['identical']}/{lx['queries']} queries, scope tested against the index's "
        f"in-scope rowids) {_ms(own_lex)} ms (trace p50) | {_pp(lat['search_reads'])} | "
        f"{_ms(lat['knn_memory_kcand']['p50_ms'] + own_lex)} ms (p50s) | "
        f"{_x(ratio(lat['search_reads']['p50_ms'], lat['knn_memory_kcand']['p50_ms'] + own_lex))} | — | — |",
        f"| … against the raw KNN alone (k={p['k']}, no lexical search: below any hybrid search, as the FTS5 statement "
        f"alone takes {_x(ratio(lat['fts_statement']['p50_ms'], lat['knn_memory_k10']['p50_ms']))} of it) | "
        f"{_pp(lat['search_reads'])} | raw KNN k={p['k']} {_pp(lat['knn_memory_k10'])} | "
        f"{_x(p['ratios_p50']['search_vs_raw_knn_memory_k10'])} | — | — |",
        f"| … the same pipeline against other references | {_pp(lat['search_reads'])} | raw KNN k={kc} (as `search` "
        f"asks) {_pp(lat['knn_memory_kcand'])} · sqlite-vec KNN k={p['k']} {_pp(lat['knn_sqlite_vec_k10'])} · faiss "
        f"{_pp(lat['faiss'])} · numpy {_pp(lat['numpy'])} | {_x(p['ratios_p50']['search_vs_raw_knn_memory_kcand'])} "
        f"raw k={kc} · {_x(p['ratios_p50']['search_vs_knn_sqlite_vec_k10'])} sqlite-vec · "
        f"{_x(p['ratios_p50']['search_vs_faiss'])} faiss · {_x(p['ratios_p50']['search_vs_numpy'])} numpy | — | — |",
        f"| Audit logging: the same uncached searches at `reads` vs `writes` (interleaved, order alternating) | "
        f"{a['order_balanced_ms']:+.2f} ms per search (paired, order-balanced); p50 {_ms(a['search_reads_p50_ms'])} "
        f"vs {_ms(a['search_writes_p50_ms'])} ms, {a['difference_of_p50_ms']:+.2f} ms | "
        f"a retrieval at `writes` {_ms(a['search_writes_p50_ms'])} ms | "
        f"{a['order_balanced_share_of_retrieval'] * 100:+.1f}% (difference of p50s {a['share_of_retrieval'] * 100:+.1f}%) | "
        f"< {TARGET_AUDIT_SHARE * 100:.0f}% | {ok('audit_reads_vs_writes_share')} |",
        f"| `Memory.log_retrieval` alone (one metrics row, {a['log_retrieval_alone']['calls']} bundles) | "
        f"{_pp(a['log_retrieval_alone']['reads'])} | a retrieval at `writes` {_ms(a['search_writes_p50_ms'])} ms · "
        f"a cache hit at `writes` {_ms(c['latency']['hit_writes']['p50_ms'])} ms | "
        f"{a['log_retrieval_share_of_retrieval'] * 100:.1f}% of a retrieval · "
        f"{a['log_retrieval_share_of_cache_hit'] * 100:.0f}% of a hit | — | — |",
        "",
        "Where the pipeline spends its time (p50 of each stage of `trace.latency_ms`, ms; *wall* is the p50 measured "
        "around the call; *outside the stages* is total minus the named stages). *lexical* is the engine's FTS5 "
        "query; *score* includes loading the candidate rows, their vectors and the override/key pull-ins that policy "
        f"needs. The foundation's FTS5 statement takes {_ms(lat['fts_statement']['p50_ms'])} ms p50 on the same "
        "queries (run right after the pipeline, so its pages are in SQLite's cache); with it, the two generators alone "
        f"take {_ms(p['generators_floor_ms'])} ms: "
        f"{_x(ratio(p['generators_floor_ms'], lat['knn_memory_k10']['p50_ms']))} the raw KNN.",
        "",
    ]
    st = p["trace_latency_ms_p50"]
    stages = [s for s in st["search_reads"] if s != "total" and any(st[k].get(s, 0) >= 0.05 for k in st)]
    lines += ["| Case | " + " | ".join(stages) + " | outside the stages | total | wall |", "|---" * (len(stages) + 4) + "|"]
    for key, label in (("search_reads", "pipeline, audit `reads`"), ("search_writes", "pipeline, audit `writes`")):
        cells = " | ".join(f"{st[key].get(s, 0.0):.2f}" for s in stages)
        other = p["unstaged_ms_p50"][key]
        lines.append(f"| {label} | {cells} | {other:.2f} | {st[key]['total']:.2f} | {lat[key]['p50_ms']:.2f} |")
    cells = " | ".join("0" for _ in stages)
    lines.append(f"| cache hit, audit `reads` | {cells} | {c['trace_total_ms_p50_of_hit']:.3f} | "
                 f"{c['trace_total_ms_p50_of_hit']:.3f} | {c['latency']['hit_reads']['p50_ms']:.3f} |")  # fmt: skip
    one = res["checks"]["one_search"]
    lines += [
        "",
        f"One uncached search issues {one['statements']} SQL statements: "
        + ", ".join(f"{v} × `{k}`" for k, v in sorted(one["by_kind"].items(), key=lambda kv: -kv[1]))
        + f" (and FTS5 runs {one['nested_statements']} statements of its own inside them).",
    ]
    return "\n".join(lines)


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    """Run the suite; a full run writes results/retrieval.json and its tests/bench/README.md block."""
    from memlens.config import load_settings
    from memlens.embed import make_embedder

    t0 = time.perf_counter()
    plan = make_rplan(quick)
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-retrieval-"))
    try:
        settings = load_settings()
        model_id = make_embedder(settings.embedding, settings.cache_dir).model_id
        res: dict[str, Any] = {
            "suite": NAME,
            "mode": "quick" if quick else "full",
            "machine": machine_info(),
            "settings": {"search": settings.search.model_dump(), "cache": settings.cache.model_dump(),
                         "audit": settings.audit.model_dump(), "storage": settings.storage.model_dump()},  # fmt: skip
            "model_id": model_id,
            "plan": dataclasses.asdict(plan),
            "load_average_1m": {},
        }
        log(f"[{NAME}] {res['mode']} run; scratch {scratch}")

        def stage(name: str) -> None:
            res["load_average_1m"][name] = round(os.getloadavg()[0], 2)
            log(f"[{NAME}] {name} ({time.perf_counter() - t0:.0f} s, load average {os.getloadavg()[0]:.2f})")

        stage("build")
        bench(plan, scratch, model_id, res, stage)
        stage("end")
        res["targets"] = targets(res)
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        table = render_table(res)
        publish(
            NAME,
            res,
            table,
            official=write and not quick,
            target_lines=[
                f"{t['name']}: {t['measured']} vs {t['limit']} {t['unit']} -> {'met' if t['met'] else 'MISSED'}"
                for t in res["targets"]
            ],
        )
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return suite_main(
        "python -m tests.bench.retrieval", __doc__, run, "10k entries, 40 queries; README and results/ untouched", argv
    )


if __name__ == "__main__":
    sys.exit(main())
