"""Import benchmark: a large import beside a live writer.

One temp store; a JSONL file of N entries that carry their vectors (the
``export --with-vectors`` form, so the model is not what is measured). Two
processes run at once:

* the **importer** imports the file (``Memory.import_jsonl``), timing the
  whole import and the final publishing step (from the commit of its last
  staging transaction until ``import_jsonl`` returns: the publishing
  transaction and removing the scratch files);
* the **writer** adds one entry a second with ``Memory.add`` (the store's
  default busy timeout of 5 s) and times each call; after each add it also
  counts the entries it can see, which must be its own adds only until the
  import is published, then all of them (never a part of the import).

The figures: import time and rate, the writer's longest and typical wait,
failed adds (a "locked" error), and whether any reader count ever saw part of
the import.

    python -m tests.bench.imports [--quick]

A full run (200k entries) writes ``tests/bench/results/imports.json`` and the
table in tests/bench/README.md between the ``bench:imports`` markers; a quick run (20k) writes
its JSON to the temp directory and leaves both untouched.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import ROOT, ensure_readme_block, log, machine_info, publish, suite_main, summary

NAME = "imports"
FULL_N = 200_000
QUICK_N = 20_000
TARGET_MAX_WAIT_S = 1.0
WINGS = [f"bench-w{i}" for i in range(8)]

IMPORTER = """
import json, sys, time
from memlens import Memory
from memlens.embed import HashEmbedder
marks = {}
def progress(stage, done, total):
    marks[stage] = time.perf_counter()
with Memory.open(sys.argv[1], embedder=HashEmbedder()) as mem:
    t = time.perf_counter()
    report = mem.import_jsonl(sys.argv[2], progress=progress)
    end = time.perf_counter()  # before closing the store (its final WAL checkpoint is not the import's)
print(json.dumps({"report": report, "seconds": end - t, "publish_s": end - marks.get("writing", end),
                  "staging_s": marks.get("writing", end) - marks.get("embedding", marks.get("validated", t))}))
"""

WRITER = """
import json, sys, time, os
from memlens import Memory
from memlens.embed import HashEmbedder
from memlens.errors import MemlensError
stop, n_import = sys.argv[2], int(sys.argv[3])
out = {"waits": [], "failures": [], "counts": []}
with Memory.open(sys.argv[1], embedder=HashEmbedder()) as mem:
    i = 0
    while not os.path.exists(stop):
        t = time.perf_counter()
        try:
            mem.add(f"live note {i} written while an import runs", wing="live", id=f"live-{i}")
            out["waits"].append(time.perf_counter() - t)
            i += 1
        except MemlensError as exc:
            out["failures"].append(str(exc))
        out["counts"].append([i, mem.count()])
        time.sleep(max(0.0, 1.0 - (time.perf_counter() - t)))
    out["adds"] = i
print(json.dumps(out))
"""


def make_file(path: Path, n: int, seed: int = 11) -> None:
    rng = np.random.default_rng(seed)
    words = [f"w{i:04d}" for i in range(4000)]
    with path.open("w", encoding="utf-8") as fh:
        for start in range(0, n, 10_000):
            m = min(10_000, n - start)
            vecs = rng.standard_normal((m, 384), dtype=np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            picks = rng.integers(0, len(words), (m, 12))
            for j in range(m):
                i = start + j
                rec = {"id": f"imp-{i:06d}", "wing": WINGS[i % len(WINGS)], "text": " ".join(words[k] for k in picks[j]),
                       "created_at": "2025-01-01T00:00:00Z", "model": "hash-bow-384",
                       "vector": base64.b64encode(vecs[j].astype("<f4").tobytes()).decode("ascii")}
                fh.write(json.dumps(rec) + "\n")


def run(quick: bool = False) -> dict[str, Any]:
    n = QUICK_N if quick else FULL_N
    t_start = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-imports-"))
    try:
        src = scratch / "entries.jsonl"
        log(f"[{NAME}] writing {n} entries with vectors to {src}")
        make_file(src, n)
        store = scratch / "store.db"
        from memlens import Memory
        from memlens.embed import HashEmbedder

        with Memory.open(store, embedder=HashEmbedder()) as mem:
            mem.add("a note before the import", wing="live", id="live-seed")
        stop = scratch / "stop"
        env_py = [sys.executable, "-c"]
        writer = subprocess.Popen([*env_py, WRITER, str(store), str(stop), str(n)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        time.sleep(3)  # the writer's first adds happen before the import starts
        log(f"[{NAME}] importing")
        imp = subprocess.run([*env_py, IMPORTER, str(store), str(src)], capture_output=True, text=True, cwd=ROOT,
                             timeout=3600)
        time.sleep(3)  # and a few after it
        stop.touch()
        w_out, _ = writer.communicate(timeout=120)
        if imp.returncode != 0:
            raise SystemExit(f"importer failed: {imp.stderr.strip()[-2000:]}")
        ir = json.loads(imp.stdout.strip().splitlines()[-1])
        wr = json.loads(w_out.strip().splitlines()[-1])
        # every count the writer saw is its own adds (+ the seed), or those plus the whole import
        partial = [c for i, c in wr["counts"] if c not in (i + 1, i + 1 + n)]
        res: dict[str, Any] = {
            "suite": NAME,
            "mode": "quick" if quick else "full",
            "machine": machine_info(),
            "entries": n,
            "import": {
                "seconds": round(ir["seconds"], 2),
                "entries_per_s": round(n / ir["seconds"], 1),
                "staging_s": round(ir["staging_s"], 2),
                "publish_ms": round(ir["publish_s"] * 1000, 1),
                "report": ir["report"],
            },
            "writer": {
                "adds": wr["adds"],
                "failures": len(wr["failures"]),
                "failure_messages": wr["failures"][:3],
                "wait": summary(wr["waits"]),
                "counts_seen": len(wr["counts"]),
                "partial_import_seen": len(partial),
            },
        }
        res["duration_s"] = round(time.perf_counter() - t_start, 1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = render_table(res)
    if not quick:
        ensure_readme_block(NAME, "tui")
    w = res["writer"]
    target = (
        f"longest add {w['wait']['max_ms']:.0f} ms (target under {TARGET_MAX_WAIT_S * 1000:.0f} ms), failures {w['failures']}"
    )
    publish(NAME, res, table, official=not quick, target_lines=[target])
    return res


def render_table(res: dict[str, Any]) -> str:
    n, w, m = res["entries"], res["writer"], res["machine"]
    met = "met" if w["wait"]["max_ms"] < TARGET_MAX_WAIT_S * 1000 and not w["failures"] else "missed"
    return "\n".join([
        f"Import of {n:,} entries with their vectors beside a writer adding one entry a second "
        f"({m['cpu_model']}, {m['cores_usable']} cores):",
        "",
        "| import | rate | publish step | writer adds | longest add | add p50 | add p95 | failed adds | partial import seen |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {res['import']['seconds']} s | {res['import']['entries_per_s']:,.0f}/s | {res['import']['publish_ms']} ms | "
        f"{w['adds']} | {w['wait']['max_ms']:.0f} ms | {w['wait']['p50_ms']:.0f} ms | {w['wait']['p95_ms']:.0f} ms | "
        f"{w['failures']} | {w['partial_import_seen']} |",
        "",
        f"`python -m tests.bench.imports`: target longest add under {TARGET_MAX_WAIT_S * 1000:.0f} ms with no failed add: "
        f"{met}. *publish step*: from the commit of the last staging transaction until `import_jsonl` returns (the "
        "one transaction that makes every row visible, and removing the scratch files). *partial import seen*: "
        f"how many of the writer's {w['counts_seen']} entry counts, taken after each add, showed part of the import "
        f"(each must be its own adds, or those and all {n:,} entries). {m['date']}.",
    ])


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.imports", __doc__, run, "20k entries instead of 200k", argv)


if __name__ == "__main__":
    sys.exit(main())
