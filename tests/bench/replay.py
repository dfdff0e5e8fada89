"""Replay benchmark: replaying logged retrievals, and what logging them for replay costs per search.

The 100k-entry store of the retrieval benchmark (10k with ``--quick``; same data set, same import, same
``FixedEmbedder`` as ``tests/bench/foundation.py``), opened once with the in-process index warm, queries
scoped to 2 of the 10 wings, k=10, one thread.

* **logging cost**: ``Memory.log_retrieval`` timed alone on the bundles of real searches, with and without
  the replay record (``memlens.replay.storage.record``: the request, the client, the ranked ids and score
  components), interleaved per bundle with the order alternating. The difference is what replay adds to
  every search.
* **replay**: 1,000 searches are run (and logged), then ``memlens.replay.replay.replay(mem, last=1000)``
  re-runs and diffs all of them; queries/s over the whole call, next to the rate of the same searches when
  they were first run (and logged). Nothing changed in between, so every list
  must come back identical (checked).

    python -m tests.bench.replay [--quick]
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import log, machine_info, publish, suite_main, summary

NAME = "replay"


def _log_cost(mem: Any, bundles: list[Any]) -> dict[str, Any]:
    from memlens.replay import storage

    real = storage.record
    with_record: list[float] = []
    without: list[float] = []
    for i, b in enumerate(bundles):
        for variant in (("with", "without") if i % 2 == 0 else ("without", "with")):
            storage.record = real if variant == "with" else (lambda *a, **k: None)  # type: ignore[assignment]
            try:
                t = time.perf_counter()
                mem.log_retrieval(b)
                dt = time.perf_counter() - t
            finally:
                storage.record = real  # type: ignore[assignment]
            (with_record if variant == "with" else without).append(dt)
    w, wo = summary(with_record), summary(without)
    return {"with_replay_record": w, "without": wo, "added_p50_ms": round(w["p50_ms"] - wo["p50_ms"], 4)}


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    from memlens import Memory
    from memlens.config import load_settings
    from memlens.embed import make_embedder
    from memlens.replay.replay import replay

    from . import foundation as F

    t0 = time.perf_counter()
    n = 10_000 if quick else 100_000
    n_replay = 200 if quick else 1000
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-replay-"))
    try:
        settings = load_settings()
        model_id = make_embedder(settings.embedding, settings.cache_dir).model_id
        res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                               "load_average_1m": round(os.getloadavg()[0], 2),
                               "plan": {"entries": n, "replayed": n_replay, "k": F.K, "scope": F.SCOPE}}
        log(f"[{NAME}] {res['mode']} run; scratch {scratch}")
        fplan = dataclasses.replace(F.make_plan(quick, ("search",)), sizes=(n,))
        fe = F.FixedEmbedder(model_id)
        ds = F.make_dataset(fplan, scratch, model_id)
        path = scratch / f"store-{n}.db"
        log(f"  importing {n:,} entries ...")
        F.build_store(path, ds.jsonl[n], fe)
        queries = F.make_queries(ds.vocab, n_replay, seed=fplan.seed)
        with Memory.open(path, embedder=fe) as mem:
            res["warm_index"] = F.warm_index(mem)
            log(f"  {n_replay} logged searches ...")
            t = time.perf_counter()
            bundles = [mem.search(q, wings=F.SCOPE, k=F.K, use_cache=False) for q in queries]
            searched = time.perf_counter() - t
            res["searches"] = {"n": len(queries), "seconds": round(searched, 3),
                               "queries_per_s": round(len(queries) / searched, 1)}
            log(f"  replaying the last {n_replay} ...")
            t = time.perf_counter()
            report = replay(mem, last=n_replay)
            dt = time.perf_counter() - t
            s = report["summary"]
            res["replay"] = {"replayed": s["replayed"], "seconds": round(dt, 3),
                             "queries_per_s": round(s["replayed"] / dt, 1), "changed": s["changed"]}
            assert s["replayed"] == n_replay and s["changed"] == 0, s
            res["logging"] = _log_cost(mem, bundles[: min(500, len(bundles))])
            log(f"    logging: {res['logging']}")
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        lg, rp = res["logging"], res["replay"]
        m = res["machine"]
        table = "\n".join([
            f"| replay ({n:,} entries, scoped to 2 of 10 wings, k={F.K}) | measured |",
            "|---|---:|",
            f"| `memlens replay --last {n_replay}`: re-run and diff | {rp['queries_per_s']:.0f} queries/s "
            f"({rp['seconds']:.1f} s) |",
            f"| the same {n_replay} searches when they were logged (uncached) | {res['searches']['queries_per_s']:.0f} "
            f"queries/s ({res['searches']['seconds']:.1f} s) |",
            f"| `log_retrieval` p50, with the replay record | {lg['with_replay_record']['p50_ms']:.3f} ms |",
            f"| `log_retrieval` p50, without it | {lg['without']['p50_ms']:.3f} ms |",
            f"| added per search by the replay record (p50) | {lg['added_p50_ms']:.3f} ms |",
            f"| added per search by the replay record (mean, WAL checkpoints included) | "
            f"{lg['with_replay_record']['mean_ms'] - lg['without']['mean_ms']:.3f} ms |",
            "",
            f"`python -m tests.bench.replay`; {m['cpu_model']}, {m['cores_usable']} cores, Python {m['python']}, "
            f"SQLite {m['sqlite']}, 1-min load average {res['load_average_1m']} at the start, {m['date']}. Replay and "
            "the searches it repeats ran under the same load: compare the two rates, not either with other tables.",
        ])
        publish(NAME, res, table, official=write and not quick,
                target_lines=[f"replay: {rp['queries_per_s']} queries/s; logging adds {lg['added_p50_ms']} ms p50"])
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.replay", __doc__, run, "10k entries, 200 replays; README and results/ untouched",
                      argv)


if __name__ == "__main__":
    sys.exit(main())
