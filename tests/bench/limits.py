"""Input caps benchmark: how long the largest inputs the caps allow take.

On the demo memory (167 entries, the real model loaded and warm, in-process
index off as in a one-shot CLI search, cache bypassed):

* **short query**: a 3-word question, the everyday case, for reference;
* **max query, distinct words**: ``MAX_QUERY_CHARS`` characters of distinct words,
  the worst case for the lexical stage (its first ``MAX_QUERY_TERMS`` terms are
  used) and the tokenizer (the model reads its first 256 tokens);
* **max query, one phrase repeated**: the same length made of a sentence repeated;
* **context, max query + max entry**: ``mem.context`` with a budget of 2,000
  tokens for a maximum-length query when an entry of ``max_entry_chars``
  characters (the default cap) is in the wing: the budget counts tokens of every
  block, so this is the most tokenising a context does;
* **add, max entry**: ``mem.add`` of one entry at the cap (embedding included).

    python -m tests.bench.limits [--quick]

A full run writes ``tests/bench/results/limits.json`` and the table in tests/bench/README.md
between the ``bench:limits`` markers; a quick run writes its JSON to the temp
directory and leaves both untouched.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import ROOT, ensure_readme_block, log, machine_info, publish, suite_main, summary

NAME = "limits"


def _timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _distinct_words(chars: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: list[str] = []
    size = 0
    while True:
        w = "".join(rng.choice(letters) for _ in range(rng.randint(4, 9)))
        if size + len(w) + 1 > chars:
            break
        words.append(w)
        size += len(w) + 1
    return " ".join(words)


def render_table(res: dict[str, Any]) -> str:
    m, lim = res["machine"], res["limits"]
    rows = ["| largest input the caps allow | size | p50 | p95 |", "|---|---|---:|---:|"]
    for key, label in (
        ("short_query", "search, 3-word query (reference)"),
        ("max_query_distinct", "search, longest query, all words distinct"),
        ("max_query_repeated", "search, longest query, one sentence repeated"),
        ("context_max", "context (budget 2,000), longest query, max-size invariants in scope (all kept, all counted)"),
        ("add_max_entry", "add one max-size entry (embedding included)"),
    ):
        r = res["results"][key]
        rows.append(f"| {label} | {r['size']} | {r['p50_ms']:.1f} ms | {r['p95_ms']:.1f} ms |")
    rows.append("")
    rows.append(
        f"Caps: a query of at most {lim['max_query_chars']:,} characters (the lexical stage uses its first "
        f"{lim['max_query_terms']} distinct terms), an entry text of at most {lim['max_entry_chars']:,} characters. "
        f"Demo memory, real model warm, sqlite-vec path, cache bypassed; {res['plan']['runs']} runs each after "
        f"{res['plan']['warmup']} warm-up runs. {m['cpu_model']}, {m['cores_usable']} cores (1-min load average "
        f"{res['load_average_1m']} before the run), Python {m['python']}, "
        f"SQLite {m['sqlite']}, {m['date']}. `python -m tests.bench.limits`."
    )
    return "\n".join(rows)


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    from memlens import Memory
    from memlens.config import load_settings
    from memlens.embed import make_embedder
    from memlens.limits import MAX_QUERY_CHARS, MAX_QUERY_TERMS

    t0 = time.perf_counter()
    plan = {"warmup": 1 if quick else 3, "runs": 5 if quick else 20}
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-limits-"))
    try:
        settings = load_settings(search={"vector_index": "sqlite-vec"})
        max_entry = settings.limits.max_entry_chars
        emb = make_embedder(settings.embedding, settings.cache_dir)
        emb.load()
        res: dict[str, Any] = {
            "suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(), "plan": plan,
            "load_average_1m": round(os.getloadavg()[0], 2),
            "limits": {"max_query_chars": MAX_QUERY_CHARS, "max_query_terms": MAX_QUERY_TERMS, "max_entry_chars": max_entry},
        }  # fmt: skip
        log(f"[{NAME}] {res['mode']} run; scratch {scratch}")
        with Memory.open(scratch / "demo.db", settings=settings, embedder=emb) as mem:
            mem.import_jsonl(ROOT / "data" / "demo.jsonl")
            distinct = _distinct_words(MAX_QUERY_CHARS)
            sentence = "why do lifecycle callbacks block the executor thread "
            repeated = (sentence * (MAX_QUERY_CHARS // len(sentence) + 1))[:MAX_QUERY_CHARS]
            cases = {
                "short_query": ("callbacks blocking executor", "3 words"),
                "max_query_distinct": (distinct, f"{len(distinct):,} chars, {len(distinct.split()):,} words"),
                "max_query_repeated": (repeated, f"{len(repeated):,} chars"),
            }
            results: dict[str, Any] = {}
            for key, (query, size) in cases.items():
                def search(q: str = query) -> None:
                    mem.search(q, active_wing="lifecore_ros2", use_cache=False)

                _timed(search, plan["warmup"])
                b = mem.search(query, active_wing="lifecore_ros2", use_cache=False)
                results[key] = {"size": size, "results": len(b.results), "notes": b.trace.notes,
                                **summary(_timed(search, plan["runs"]))}
                log(f"[{NAME}] {key}: p50 {results[key]['p50_ms']} ms")

            big_text = ("Callbacks registered on a lifecycle node must not block the executor thread. " * (max_entry // 70))
            big_text = big_text[:max_entry]
            added: list[str] = []

            def add() -> None:
                tag = f" ({len(added)})"  # distinct texts, each exactly at the cap
                added.append(mem.add(big_text[: max_entry - len(tag)] + tag, wing="lifecore_ros2", type="invariant").id)

            _timed(add, plan["warmup"])
            results["add_max_entry"] = {"size": f"{max_entry:,} chars", **summary(_timed(add, plan["runs"]))}

            def context() -> None:
                mem.context(distinct, active_wing="lifecore_ros2", budget=2000, use_cache=False)

            _timed(context, plan["warmup"])
            results["context_max"] = {"size": f"{len(distinct):,}-char query, {len(added)} entries of {max_entry:,} chars",
                                      **summary(_timed(context, plan["runs"]))}
            res["results"] = results
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        table = render_table(res)
        if write and not quick:
            ensure_readme_block(NAME, after="tui")
        publish(NAME, res, table, official=write and not quick, target_lines=[])
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.limits", __doc__, run, "fewer runs; README and results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
