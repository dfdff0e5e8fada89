"""Damage handling and audit retention: what they cost on the foundation's 100k store.

* **pre-write check**: ``corruption.verify_once`` (``PRAGMA quick_check`` of each
  table, what a process runs before its first write), next to one whole-file
  ``PRAGMA quick_check`` and ``PRAGMA integrity_check``;
* **row checks**: ``rows.row_problem`` per stored row (a search checks its
  ~100 candidates; export and check every row);
* **check** and **salvage**: ``memlens check`` and ``memlens salvage`` of the
  sound store, wall time;
* **retention**: ``retention.prune_retrievals`` with 10,500 retrieval rows
  over a 10,000 bound, and again with nothing to delete.

    python -m tests.bench.integrity [--quick]

A full run writes ``tests/bench/results/integrity.json``; a quick run (10k
entries) writes its JSON to the temp directory.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import RESULTS, log, machine_info, suite_main, summary, write_json

NAME = "integrity"


def _timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def run(quick: bool = False) -> dict[str, Any]:
    from memlens import Memory
    from memlens.config import load_settings
    from memlens.embed import make_embedder
    from memlens.store import corruption, retention
    from memlens.store.check import check_store
    from memlens.store.rows import row_problem
    from memlens.store.salvage import salvage

    from . import foundation as F

    t0 = time.perf_counter()
    n = 10_000 if quick else 100_000
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-integrity-"))
    try:
        settings = load_settings()
        model_id = make_embedder(settings.embedding, settings.cache_dir).model_id
        plan = dataclasses.replace(F.make_plan(quick, ("search",)), sizes=(n,))
        ds = F.make_dataset(plan, scratch, model_id)
        path = scratch / f"store-{n}.db"
        log(f"[{NAME}] importing {n:,} entries ...")
        res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                               "entries": n, "import": F.build_store(path, ds.jsonl[n], F.FixedEmbedder(model_id))}
        fe = F.FixedEmbedder(model_id)
        with Memory.open(path, settings=settings, embedder=fe) as mem:
            conn = mem.conn

            def verify() -> None:
                corruption._verified.clear()
                corruption.verify_once(conn)

            verify()  # warm the page cache once, as a process that just opened the store has it partly warm
            res["pre_write_check"] = summary(_timed(verify, 5))
            res["quick_check_whole_file"] = summary(_timed(lambda: conn.execute("PRAGMA quick_check").fetchall(), 3))
            res["integrity_check_whole_file"] = summary(_timed(lambda: conn.execute("PRAGMA integrity_check").fetchall(), 1))
            rows = conn.execute("SELECT id, wing, room, kind, type, status, title, text, key, salience, overrides, "
                                "created_at, updated_at, meta FROM entries").fetchall()
            t = time.perf_counter()
            for r in rows:
                row_problem(r)
            res["row_check_us_per_row"] = round((time.perf_counter() - t) / len(rows) * 1e6, 3)
        log(f"[{NAME}] check ...")
        res["check_s"] = round(_timed(lambda: check_store(path), 1)[0], 2)
        log(f"[{NAME}] salvage ...")
        res["salvage_s"] = round(_timed(lambda: salvage(path, scratch / "new.db", settings=settings, embedder=fe), 1)[0], 2)
        with Memory.open(path, settings=settings, embedder=fe) as mem:
            conn = mem.conn
            detail = json.dumps({"query": "q" * 200, "latency_ms": {"total": 1.0}, "result_ids": ["x" * 26] * 10})
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO audit(ts, action, detail) VALUES ('2026-11-23T00:00:00Z', 'retrieval', ?)",
                             [(detail,)] * 10_500)
            conn.execute("COMMIT")
            t = time.perf_counter()
            deleted = retention.prune_retrievals(conn, 10_000, 36_500)
            res["prune_500_of_10500_ms"] = round((time.perf_counter() - t) * 1000, 3)
            assert deleted == 500, deleted
            res["prune_nothing_ms"] = summary(_timed(lambda: retention.prune_retrievals(conn, 10_000, 36_500), 20))
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        if quick:
            out = Path(tempfile.gettempdir()) / f"memlens-bench-{NAME}-quick.json"
        else:
            out = RESULTS / f"{NAME}.json"
        write_json(out, res)
        log(f"[{NAME}] wrote {out}")
        print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=1))
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.integrity", __doc__, run, "10k entries; results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
