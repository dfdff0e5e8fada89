"""Review benchmark: the near-duplicate rule on labelled pairs, the inbox and lint on a 100k store, lint on real stores.

* **labelled pairs** (``tests/data/duplicate_pairs.jsonl``, 81 pairs of real texts nobody here wrote: docstrings
  of the same function in two releases of a package, neighbouring functions of one package, README sections
  of two releases or two packages; labelled by reading both: would a person keep only one?). Both texts are
  embedded by the engine's embedder (all-MiniLM-L6-v2). A pair is called a duplicate when its cosine is at
  least ``c`` and the shorter text shares at least ``s`` of its words with the other; precision and recall
  are given over a grid of ``c`` and ``s``, and the rule chosen is the best F1 (ties: the higher ``c``, then
  the higher ``s``). The settings' defaults must be that choice.
* **inbox** on a 100,000-entry store (10,000 with ``--quick``) with 1,000 agent writes waiting: synthetic
  entries (random pseudo-word text, vectors drawn around 2,000 random topics, 5% invariants and decisions,
  10 wings, 500 planted near-duplicate pairs), written by ``FixedEmbedder`` (a random vector per text). Timed:
  the listing (the audit read), one item's evidence (stored vectors, KNN on sqlite-vec and on the warm
  in-process index), the app's review screen from the key press to the list and the first item's evidence,
  and the evidence of all 1,000.
* **lint** of that store in a child process: wall time, peak RSS, and how many planted pairs it reports.
* **lint on real stores**: the demo memory and the pages of the Node.js API reference Debian installs as
  Markdown (``/usr/share/doc/nodejs/api/*.md`` under 40 KB: 33 pages), ingested with the real model: the
  findings by kind, the duplicate clusters listed for a person.

    python -m tests.bench.review [--quick]
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import ROOT, log, machine_info, publish, suite_main, summary

NAME = "review"
PAIRS = ROOT / "tests" / "data" / "duplicate_pairs.jsonl"
COSINES = [round(0.5 + 0.05 * i, 2) for i in range(10)]
SHARED = [0.0, 0.8, 0.85, 0.9, 0.95, 1.0]
AGENT = {"name": "bench-agent", "version": "1", "via": "mcp"}
PENDING, PLANTED, TOPICS = 1000, 500, 2000


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def labelled_pairs(embedder: Any) -> dict[str, Any]:
    from memlens.review.evidence import shared_text

    pairs = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]
    a, b = embedder.embed([p["a"] for p in pairs]), embedder.embed([p["b"] for p in pairs])
    cos = (a * b).sum(axis=1)
    shared = np.array([shared_text(p["a"], p["b"]) for p in pairs])
    dup = np.array([p["label"] == "duplicate" for p in pairs])
    grid = []
    for c in COSINES:
        for s in SHARED:
            pred = (cos >= c) & (shared >= s)
            tp, fp, fn = int((pred & dup).sum()), int((pred & ~dup).sum()), int((~pred & dup).sum())
            p, r = (tp / (tp + fp) if tp + fp else 0.0), (tp / (tp + fn) if tp + fn else 0.0)
            grid.append({"cosine": c, "shared_text": s, "precision": round(p, 3), "recall": round(r, 3),
                         "f1": round(_f1(p, r), 3), "flagged": tp + fp})
    best = max(grid, key=lambda g: (g["f1"], g["cosine"], g["shared_text"]))
    cosine_only = max((g for g in grid if g["shared_text"] == 0.0), key=lambda g: (g["f1"], g["cosine"]))
    return {"pairs": len(pairs), "duplicates": int(dup.sum()), "grid": grid, "chosen": best, "best_cosine_only": cosine_only,
            "per_pair": [{"id": p["id"], "label": p["label"], "cosine": round(float(x), 4), "shared_text": float(y)}
                         for p, x, y in zip(pairs, cos, shared)]}


# -- the synthetic store -------------------------------------------------------------------------------


def _dataset(n: int, path: Path, model_id: str, seed: int = 29) -> list[tuple[str, str]]:
    """A JSONL of ``n`` entries with vectors; returns the planted near-duplicate pairs (ids)."""
    from .foundation import make_vocab

    rng = np.random.default_rng(seed)
    vocab = make_vocab(rng)
    topics = rng.standard_normal((TOPICS, 384)).astype(np.float32)
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    vecs = topics[rng.integers(0, TOPICS, n)] * 0.6 + rng.standard_normal((n, 384)).astype(np.float32) * (0.8 / np.sqrt(384))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    texts = [" ".join(vocab[j] for j in rng.integers(0, len(vocab), rng.integers(10, 20))) for _ in range(n)]
    planted = []
    for i, j in rng.choice(n, size=(PLANTED, 2), replace=False):
        noise = rng.standard_normal(384).astype(np.float32)
        noise /= np.linalg.norm(noise)
        c = rng.uniform(0.85, 0.99)
        vecs[j] = c * vecs[i] + np.sqrt(1 - c * c) * noise
        vecs[j] /= np.linalg.norm(vecs[j])
        texts[j] = texts[i] + " " + vocab[int(rng.integers(0, len(vocab)))]
        planted.append((f"e{i:06d}", f"e{j:06d}"))
    types = rng.choice(["invariant", "decision", "pattern", "note"], size=n, p=[0.02, 0.03, 0.2, 0.75])
    wings = rng.integers(0, 10, n)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"e{i:06d}", "wing": f"wing{wings[i]}", "type": str(types[i]), "text": texts[i],
                                 "created_at": "2026-01-01T00:00:00Z", "model": model_id,
                                 "vector": base64.b64encode(vecs[i].astype("<f4").tobytes()).decode("ascii")}) + "\n")
    return planted


def _pending(mem: Any, n: int) -> None:
    """``n`` agent writes waiting for review: adds, with every tenth an edit of an existing entry."""
    from memlens import attribution

    with attribution.acting_as(AGENT):
        for i in range(n):
            if i % 10 == 9:
                mem.update(f"e{i:06d}", salience=0.9, status="under_review")
            else:
                mem.add(f"agent finding {i} about wing{i % 10}", wing=f"wing{i % 10}", status="under_review", id=f"a{i:05d}")


def _time(fn: Any, runs: int) -> dict[str, Any]:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return summary(samples)


def _app_open(path: Path, embedder: Any) -> dict[str, float]:
    """The app on the store (model loaded, in-process index warm, as a running app has them): from the review key
    to the end of the handler that fills the list, and to the end of the one that shows the first item's evidence
    (each paints right after; timed inside the handlers, which a poll from the test would see late under load)."""
    from memlens.tui.app import create_app
    from memlens.tui.screens.review import ReviewScreen

    marks: dict[str, float] = {}
    listed, weighed = ReviewScreen.on_review_screen_listed, ReviewScreen.on_review_screen_weighed

    def on_listed(screen: Any, message: Any) -> None:
        listed(screen, message)
        marks.setdefault("list", time.perf_counter())

    def on_weighed(screen: Any, message: Any) -> None:
        weighed(screen, message)
        if screen.items and message.entry_id == screen.items[0]["entry"]:
            marks.setdefault("first_evidence", time.perf_counter())

    app = create_app(path, embedder=embedder, watch=False, cursor_blink=False)

    async def run() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await app.workers.wait_for_complete()
            app.main.query_one("#results").focus()
            for round_ in ("", "again_"):  # the first time the screen opens, and a second time
                marks.pop("list", None)
                marks.pop("first_evidence", None)
                marks[f"{round_}press"] = time.perf_counter()
                await pilot.press("v")
                while "first_evidence" not in marks:
                    await pilot.pause(0.01)
                marks[f"{round_}list_at"], marks[f"{round_}first_at"] = marks["list"], marks["first_evidence"]
                await pilot.press("escape")
                await app.workers.wait_for_complete()
                app.main.query_one("#results").focus()
            await pilot.pause(0.2)
            marks["floor_push"] = time.perf_counter()  # the same widgets, no engine call: what Textual takes
            app.push_screen(_floor_screen(marks))
            while "floor" not in marks:
                await pilot.pause(0.01)

    ReviewScreen.on_review_screen_listed, ReviewScreen.on_review_screen_weighed = on_listed, on_weighed  # type: ignore
    try:
        asyncio.run(run())
    finally:
        ReviewScreen.on_review_screen_listed, ReviewScreen.on_review_screen_weighed = listed, weighed  # type: ignore
    return {"list_ms": round((marks["list_at"] - marks["press"]) * 1000, 1),
            "first_evidence_ms": round((marks["first_at"] - marks["press"]) * 1000, 1),
            "again_first_evidence_ms": round((marks["again_first_at"] - marks["again_press"]) * 1000, 1),
            "floor_ms": round((marks["floor"] - marks["floor_push"]) * 1000, 1)}


def _floor_screen(marks: dict[str, float]) -> Any:
    """A screen with the review screen's widgets and 200 rows of fixed text, filled in its mount handler."""
    from textual.screen import Screen
    from textual.widgets import DataTable, Footer, Header, Static

    from memlens.tui.screens.review import COLUMNS

    class Floor(Screen[None]):
        def compose(self) -> Any:
            yield Header()
            yield Static("summary")
            yield DataTable()
            yield Static("detail")
            yield Footer()

        def on_mount(self) -> None:
            table = self.query_one(DataTable)
            for label, width in COLUMNS:
                table.add_column(label, key=label, width=width)
            for i in range(200):
                table.add_row("bench-agent 1 (mcp)", "2h ago", "add", "note", f"agent finding {i}", "✓ none against")
            marks["floor"] = time.perf_counter()

    return Floor()


def _lint_child(path: Path) -> dict[str, Any]:
    # the peak is the child's own (VmHWM: ru_maxrss would carry the parent's peak at the fork)
    return _child("import re, time\nfrom memlens import Memory\nt = time.perf_counter()\n"
                  f"with Memory.open({str(path)!r}, create=False) as mem:\n    r = mem.review.lint()\n"
                  "hwm = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
                  "print(json.dumps({'seconds': time.perf_counter() - t, 'peak_rss_mb': hwm / 1024, 'summary': r['summary'], "
                  "'duplicates': [f['entries'] for f in r['findings'] if f['kind'] == 'duplicate']}))")


def big_store(n: int, scratch: Path, model_id: str) -> dict[str, Any]:
    from memlens import Memory

    from .foundation import FixedEmbedder

    fe = FixedEmbedder(model_id)
    jsonl, path = scratch / "entries.jsonl", scratch / "big.db"
    planted = _dataset(n, jsonl, model_id)
    out: dict[str, Any] = {"entries": n, "pending": PENDING}
    with Memory.open(path, embedder=fe) as mem:
        t = time.perf_counter()
        mem.import_jsonl(jsonl)
        out["import_s"] = round(time.perf_counter() - t, 1)
        _pending(mem, PENDING)
    with Memory.open(path, embedder=fe) as mem:
        desk = mem.review
        items = desk.items()
        assert len(items) == PENDING, len(items)
        out["list"] = _time(desk.items, 5)
        first = items[:20]
        out["evidence_sqlite_vec"] = _time(lambda: [desk.evidence(i) for i in first[:5]], 3)
        out["evidence_sqlite_vec"]["per_item_ms"] = round(out["evidence_sqlite_vec"]["p50_ms"] / 5, 1)
        t = time.perf_counter()
        mem.warm_index()
        out["warm_index_s"] = round(time.perf_counter() - t, 2)
        out["evidence_warm"] = _time(lambda: [desk.evidence(i) for i in first], 3)
        out["evidence_warm"]["per_item_ms"] = round(out["evidence_warm"]["p50_ms"] / len(first), 1)
        t = time.perf_counter()
        listing = desk.listing()
        out["listing_all_evidence_s"] = round(time.perf_counter() - t, 1)
        assert len(listing["items"]) == PENDING
    log("  the review screen in the app ...")
    out["app"] = _app_open(path, fe)
    log("  lint in a child process ...")
    lint = _lint_child(path)
    found = {tuple(sorted(d)) for d in lint.pop("duplicates") if len(d) == 2}
    in_clusters = sum(1 for a, b in planted if tuple(sorted((a, b))) in found)
    out["lint"] = {**lint, "seconds": round(lint["seconds"], 1), "peak_rss_mb": round(lint["peak_rss_mb"]),
                   "planted": len(planted), "planted_found": in_clusters}
    return out


NODE_DOCS = Path("/usr/share/doc/nodejs/api")  # Debian's nodejs: the Node.js API reference as Markdown


def _child(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (its memory is its own) and return the JSON it prints."""
    done = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, timeout=7200,
                          cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"child failed: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def real_stores(scratch: Path) -> dict[str, Any]:
    from memlens import Memory
    from memlens.config import load_settings
    from memlens.embed import make_embedder
    from memlens.ingest import ingest

    settings = load_settings()
    embedder = make_embedder(settings.embedding, settings.cache_dir)
    out: dict[str, Any] = {}
    demo = scratch / "demo.db"
    with Memory.open(demo, embedder=embedder) as mem:
        mem.import_jsonl(ROOT / "data" / "demo.jsonl")
        r = mem.review.lint(embedder.count_tokens)
    out["demo"] = {"summary": r["summary"], "findings": r["findings"]}
    files = sorted(str(f) for f in NODE_DOCS.glob("*.md") if f.stat().st_size < 40_000)  # 33 pages, 572 KB
    with Memory.open(scratch / "docs.db", embedder=embedder) as mem:
        ingest(mem, files, wing="docs")
        r = mem.review.lint(embedder.count_tokens)
        titles = {e.id: f"{e.meta.get('source', '').split('/')[-1]}: {e.title}" for e in mem.entries()}
    dups = [{"entries": [titles.get(i, i) for i in f["entries"]], "similarity": f.get("similarity")}
            for f in r["findings"] if f["kind"] == "duplicate"]
    out["docs"] = {"summary": r["summary"], "duplicates": dups}
    return out


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    from memlens.config import load_settings
    from memlens.embed import make_embedder

    t0 = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-review-"))
    try:
        settings = load_settings()
        embedder = make_embedder(settings.embedding, settings.cache_dir)
        embedder.load()
        n = 10_000 if quick else 100_000
        res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                               "load_average_1m": round(os.getloadavg()[0], 2)}
        log(f"[{NAME}] {res['mode']} run; scratch {scratch}")
        res["pairs"] = labelled_pairs(embedder)
        chosen, rv = res["pairs"]["chosen"], settings.review
        res["pairs"]["settings_match"] = (chosen["cosine"], chosen["shared_text"]) == (rv.duplicate_similarity,
                                                                                        rv.duplicate_shared_text)
        log(f"  pairs: chosen {chosen}; settings match: {res['pairs']['settings_match']}")
        log("  lint on the demo memory and on the ingested Node.js docs (a child process) ...")
        res["real"] = _child(f"from pathlib import Path\nfrom tests.bench.review import real_stores\n"
                             f"print(json.dumps(real_stores(Path({str(scratch)!r}))))")
        model_id = embedder.model_id
        del embedder  # the model is not needed any more: the big store's vectors are made up
        log(f"  building a {n:,}-entry store with {PENDING} agent writes ...")
        res["big"] = big_store(n, scratch, model_id)
        log(f"  {res['big']}")
        res["load_average_1m_end"] = round(os.getloadavg()[0], 2)
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        res["peak_rss_mb_parent"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        table = _table(res, n)
        b = res["big"]
        opens = b["app"]["first_evidence_ms"]
        publish(NAME, res, table, official=write and not quick, target_lines=[
            f"inbox opens (list and first evidence, app): {opens:.0f} ms (< 1000 ms: {'met' if opens < 1000 else 'missed'})",
            f"lint of {n:,}: {b['lint']['seconds']} s (< 60 s: {'met' if b['lint']['seconds'] < 60 else 'missed'}), "
            f"peak RSS {b['lint']['peak_rss_mb']} MB"])
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _table(res: dict[str, Any], n: int) -> str:
    p, b, real, m = res["pairs"], res["big"], res["real"], res["machine"]
    c, co = p["chosen"], p["best_cosine_only"]
    rows = [f"| {g['cosine']:.2f} | {g['shared_text']:.2f} | {g['precision']:.2f} | {g['recall']:.2f} | {g['f1']:.2f} |"
            for g in p["grid"] if g["shared_text"] in (0.0, c["shared_text"]) and g["cosine"] in (0.5, 0.65, 0.8, 0.9, 0.95)]
    opens, lint = b["app"]["first_evidence_ms"], b["lint"]
    demo, docs = real["demo"]["summary"], real["docs"]["summary"]
    return "\n".join([
        f"Near-duplicates on {p['pairs']} labelled pairs of real texts ({p['duplicates']} duplicates; "
        "`tests/data/duplicate_pairs.jsonl`):",
        "",
        "| cosine ≥ | shared text ≥ | precision | recall | F1 |",
        "|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Chosen (best F1): cosine ≥ {c['cosine']:.2f} and shared text ≥ {c['shared_text']:.2f}: precision "
        f"{c['precision']:.2f}, recall {c['recall']:.2f}; the best on the cosine alone (≥ {co['cosine']:.2f}) had precision "
        f"{co['precision']:.2f}, recall {co['recall']:.2f}. The settings' defaults "
        f"{'are' if p['settings_match'] else 'are NOT'} this choice.",
        "",
        f"| review and lint, {n:,} entries, {PENDING:,} agent writes waiting | measured | target |",
        "|---|---:|---|",
        f"| the inbox's list (the audit read), p50 | {b['list']['p50_ms']:.0f} ms | |",
        f"| one item's evidence on sqlite-vec (a one-shot CLI), p50 | {b['evidence_sqlite_vec']['per_item_ms']:.0f} ms | |",
        f"| one item's evidence on the warm in-process index, p50 | {b['evidence_warm']['per_item_ms']:.1f} ms | |",
        f"| the app: `v` to the list on screen | {b['app']['list_ms']:.0f} ms | |",
        f"| the app: `v` to the list and the first item's evidence (the inbox opens) | {opens:.0f} ms | < 1 s: "
        f"{'met' if opens < 1000 else 'missed'} |",
        f"| the same, the second time the screen opens | {b['app']['again_first_evidence_ms']:.0f} ms | |",
        f"| the app: a screen of the same widgets and 200 rows, no engine call (Textual's part) | "
        f"{b['app']['floor_ms']:.0f} ms | |",
        f"| `review --json`: the evidence of all {PENDING:,} items (warm index) | {b['listing_all_evidence_s']:.1f} s | |",
        f"| `memlens lint` ({lint['summary']['pairs']}) | {lint['seconds']:.1f} s | < 60 s: "
        f"{'met' if lint['seconds'] < 60 else 'missed'} |",
        f"| its peak RSS | {lint['peak_rss_mb']} MB | reported |",
        f"| planted near-duplicate pairs it reports | {lint['planted_found']} of {lint['planted']} | |",
        "",
        f"Lint on the demo memory: {demo['by_kind']}; on 33 pages of the Node.js API reference Debian installs as "
        f"Markdown ({docs['entries']:,} chunks, ingested with the real model): {docs['by_kind']} in {docs['seconds']:.1f} s "
        "(the duplicate clusters are listed in `results/review.json`).",
        "",
        f"`python -m tests.bench.review`; {m['cpu_model']}, {m['cores_usable']} cores, Python {m['python']}, SQLite "
        f"{m['sqlite']}, 1-min load average {res['load_average_1m']} at the start and {res['load_average_1m_end']} at "
        f"the end, {m['date']} (the machine was shared with other work). The {n:,}-entry store is synthetic: "
        "pseudo-word text and random vectors drawn around 2,000 topics (timing only).",
    ])


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.review", __doc__, run, "10k entries; README and results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
