"""Conflicts without keys: precision and recall of the same-subject flag on labelled rule pairs.

``tests/data/conflict_pairs.jsonl`` holds pairs of rules, a project wing's
against a shared wing's (ros2, python, _global), each labelled:

* ``contradict``: same subject, opposite prescriptions: the flag must fire;
* ``agree``: same subject, same prescription: flagging it for review is
  acceptable (the rule asks for review of any same-subject pair that no
  ``overrides`` links) but not required;
* ``neighbour``: same area, a different rule; ``unrelated``: must not fire.

Both texts are embedded by the engine's embedder (all-MiniLM-L6-v2, offline)
exactly as the store embeds an entry (title, then text). A pair is flagged at
threshold ``t`` when both entries are of the flagged types and their cosine is
``>= t`` - the rule ``policy.subject_conflicts`` applies. For each ``t``:

* ``recall``: contradicting pairs flagged / contradicting pairs;
* ``precision``: flagged pairs that are contradicting or agreeing / flagged pairs;
* ``strict_precision``: flagged contradicting pairs / flagged pairs;
* ``agree_flagged``: agreeing pairs flagged / agreeing pairs.

The same figures are given with patterns counted as rules, to decide whether
patterns belong in the flagged types. Then the demo memory is searched with
``DEMO_QUERIES`` at the chosen threshold, with and without patterns, and every
pair flagged by subject is listed (titles and cosine) for a person to judge.

    python -m tests.bench.conflicts [--quick]

A full run writes ``tests/bench/results/conflicts.json``; a quick run (fewer
thresholds) writes its JSON to the temp directory.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import RESULTS, ROOT, log, machine_info, suite_main, write_json

NAME = "conflicts"
PAIRS = ROOT / "tests" / "data" / "conflict_pairs.jsonl"
LABELS = ("contradict", "agree", "neighbour", "unrelated")
# (query, active wing, wings searched): the demo searches the README and the tests run, and a few more
DEMO_QUERIES: list[tuple[str, str | None, list[str] | None]] = [
    ("callbacks blocking executor", "lifecore_ros2", None),
    ("ReentrantCallbackGroup for service calls", "lifecore_ros2", ["lifecore_ros2", "ros2"]),
    ("which executor should nodes spin with", "lifecore_ros2", ["lifecore_ros2", "ros2"]),
    ("executor threading model", "lifecore_ros2", ["lifecore_ros2", "ros2"]),
    ("QoS depth for state topics", "lifecore_ros2", None),
    ("publisher QoS depth", "lifecore_ros2", ["lifecore_ros2", "ros2"]),
    ("deadlock blocking service call inside a timer callback", "lifecore_ros2", None),
    ("sleep in callbacks", "lifecore_ros2", ["lifecore_ros2", "ros2", "python"]),
    ("lifecycle transitions", "lifecore_ros2", ["lifecore_ros2", "ros2"]),
    ("colcon build warnings in launch files", "lifecore_ros2", None),
    ("testing framework pytest", "python", None),
    ("timestamps timezone", "lifecore_ros2", ["lifecore_ros2", "python", "_global"]),
    ("lint and type checking tools", "lifecore_ros2", ["lifecore_ros2", "python", "_global"]),
    ("logging", "lifecore_ros2", ["lifecore_ros2", "ros2", "python"]),
    ("parameters declare", "lifecore_ros2", ["lifecore_ros2", "ros2", "python"]),
    ("naming conventions", "lifecore_ros2", ["lifecore_ros2", "ros2", "_global"]),
    ("asyncio blocking", "python", None),
    ("shutdown threads", None, None),
    ("commit messages and pull requests", None, None),
    ("typing annotations", None, None),
    ("public API and deprecation", None, None),
]


def load_pairs(path: Path = PAIRS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def similarities(pairs: list[dict[str, Any]], embedder: Any) -> np.ndarray:
    """Cosine of each pair's two entries, embedded as the store embeds them."""
    from memlens.models import Entry

    texts = []
    for p in pairs:
        for side in ("a", "b"):
            s = p[side]
            texts.append(Entry(wing=s["wing"], type=s["type"], title=s["title"], text=s["text"]).embed_text)
    vecs = np.asarray(embedder.embed(texts), dtype=np.float32)
    return np.einsum("ij,ij->i", vecs[0::2], vecs[1::2])


def scores(pairs: list[dict[str, Any]], sims: np.ndarray, t: float, types: frozenset[str]) -> dict[str, Any]:
    flagged = [p["label"] for p, s in zip(pairs, sims)
               if s >= t and p["a"]["type"] in types and p["b"]["type"] in types]
    n = {lab: sum(p["label"] == lab for p in pairs) for lab in LABELS}
    f = {lab: flagged.count(lab) for lab in LABELS}
    good = f["contradict"] + f["agree"]
    recall = f["contradict"] / n["contradict"]
    precision = good / len(flagged) if flagged else 1.0
    return {
        "threshold": round(t, 3), "flagged": len(flagged), "flagged_by_label": f,
        "recall": round(recall, 3), "precision": round(precision, 3),
        "strict_precision": round(f["contradict"] / len(flagged), 3) if flagged else 1.0,
        "agree_flagged": round(f["agree"] / n["agree"], 3),
        "f1": round(2 * precision * recall / (precision + recall), 3) if precision + recall else 0.0,
    }


def demo_flags(embedder: Any, settings: Any, types: frozenset[str]) -> list[dict[str, Any]]:
    """Every pair flagged by subject in the demo's searches, with ``types`` as the flagged types."""
    from memlens import Memory
    from memlens.retrieval import policy

    saved = policy.SUBJECT_TYPES
    policy.SUBJECT_TYPES = types
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="memlens-bench-conflicts-") as tmp:
        try:
            with Memory.open(Path(tmp) / "demo.db", settings=settings, embedder=embedder) as mem:
                mem.import_jsonl(ROOT / "data" / "demo.jsonl")
                for q, active, wings in DEMO_QUERIES:
                    b = mem.search(q, active_wing=active, wings=wings, use_cache=False)
                    for d in b.trace.conflict_details:
                        if d["rule"] == policy.SAME_SUBJECT:
                            a, c = (mem.get(i) for i in d["pair"])
                            found.setdefault(tuple(d["pair"]), {
                                "pair": d["pair"], "similarity": d["similarity"],
                                "titles": [f"{a.title} ({a.type.value})", f"{c.title} ({c.type.value})"], "queries": 0})
                            found[tuple(d["pair"])]["queries"] += 1
        finally:
            policy.SUBJECT_TYPES = saved
    return sorted(found.values(), key=lambda d: -d["similarity"])


def run(quick: bool = False) -> dict[str, Any]:
    from memlens.config import load_settings
    from memlens.embed import make_embedder
    from memlens.retrieval.policy import SUBJECT_TYPES

    t0 = time.perf_counter()
    settings = load_settings()
    emb = make_embedder(settings.embedding, settings.cache_dir)
    emb.load()
    pairs = load_pairs()
    sims = similarities(pairs, emb)
    step = 0.05 if quick else 0.01
    grid = [round(x, 3) for x in np.arange(0.40, 0.95 + 1e-9, step)]
    with_patterns = SUBJECT_TYPES | {"pattern"}
    sweep = [scores(pairs, sims, t, SUBJECT_TYPES) for t in grid]
    sweep_p = [scores(pairs, sims, t, with_patterns) for t in grid]
    chosen = settings.retrieval.conflict_similarity
    best = max(sweep, key=lambda r: (r["f1"], r["threshold"]))
    by_label = {lab: [round(float(s), 3) for p, s in zip(pairs, sims) if p["label"] == lab] for lab in LABELS}
    res: dict[str, Any] = {
        "suite": NAME,
        "mode": "quick" if quick else "full",
        "machine": machine_info(),
        "model": emb.model_id,
        "pairs": len(pairs),
        "pairs_by_label": {lab: len(v) for lab, v in by_label.items()},
        "flagged_types": sorted(SUBJECT_TYPES),
        "chosen_threshold": chosen,
        "at_chosen": scores(pairs, sims, chosen, SUBJECT_TYPES),
        "at_chosen_with_patterns": scores(pairs, sims, chosen, with_patterns),
        "best_f1": best,
        "similarity_by_label": {
            lab: {"min": min(v), "median": float(np.median(v)), "max": max(v)} for lab, v in by_label.items()
        },
        "demo_flags": demo_flags(emb, settings, SUBJECT_TYPES),
        "demo_flags_with_patterns": demo_flags(emb, settings, with_patterns),
        "per_pair": [
            {"id": p["id"], "label": p["label"], "similarity": round(float(s), 4)} for p, s in zip(pairs, sims)
        ],
        "sweep": sweep,
        "sweep_with_patterns": sweep_p,
        "duration_s": round(time.perf_counter() - t0, 2),
    }
    out = RESULTS / f"{NAME}.json" if not quick else Path(tempfile.gettempdir()) / f"memlens-bench-{NAME}-quick.json"
    write_json(out, res)
    log(f"[{NAME}] wrote {out}")
    for r in sweep:
        mark = " <- chosen" if abs(r["threshold"] - chosen) < 1e-9 else ""
        log(f"  t={r['threshold']:.2f} flagged={r['flagged']:3d} recall={r['recall']:.3f} precision={r['precision']:.3f} "
            f"strict={r['strict_precision']:.3f} agree={r['agree_flagged']:.3f} f1={r['f1']:.3f}{mark}")
    log(f"  similarity by label: {res['similarity_by_label']}")
    for key in ("demo_flags", "demo_flags_with_patterns"):
        log(f"  {key}: {len(res[key])} pairs")
        for d in res[key]:
            log(f"    {d['similarity']:.3f} {d['pair'][0]} / {d['pair'][1]}: {d['titles'][0]} / {d['titles'][1]}")
    return res


if __name__ == "__main__":
    import sys

    sys.exit(suite_main("python -m tests.bench.conflicts", __doc__, run, "fewer thresholds"))
