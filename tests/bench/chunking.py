"""Chunking benchmark: does memlens's chunking find the right section better than naive fixed windows?

The question set is tests/data/chunking_qa/ (86 hand-written questions over the Markdown
docs of 41 installed packages; see its README). Its corpus is rebuilt from the installed
files (``chunking_data.build``) and put into two stores with the real model:

* **memlens**: ``memlens.ingest.ingest`` on the folder: Markdown split at headings, chunks
  packed to the model's 256-word-piece window as counted by its tokenizer, heading path in
  the title;
* **naive**: the same files cut into fixed windows of ``NAIVE_WORDS`` words with no regard
  for headings (title: the file name, as memlens's chunks start with), imported as entries.

Every question is searched (k=10, default profile, no cache) in each store; each hit chunk
is mapped to its document and to the sections its line range covers. A naive window that
straddles sections counts as a hit for every one of them (generous to naive). Recall@10 and
MRR@10 come from ``memlens.retrieval.evaluate.rank_metrics`` over the ranked chunks, at
document level and at section level.

    python -m tests.bench.chunking [--quick]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import chunking_data as D
from .common import ensure_readme_block, log, machine_info, publish, suite_main

NAME = "chunking"
NAIVE_WORDS = 150  # about 200 word pieces of English prose: close to what the model reads
WING = "docs"
K = 10


def _naive_jsonl(docs_dir: Path, out: Path, words: int) -> int:
    n = 0
    with out.open("w", encoding="utf-8") as f:
        for path in sorted(docs_dir.glob("*.md")):
            text = path.read_text(encoding="utf-8")
            for piece, a, b in D.naive_chunks(text, words):
                rec = {"wing": WING, "kind": "document", "title": path.name, "text": piece,
                       "meta": {"source": str(path), "lines": [a, b]}}
                f.write(json.dumps(rec) + "\n")
                n += 1
    return n


def _score(mem: Any, queries: list[dict[str, Any]], qrels: dict[str, dict[str, float]],
           secs: dict[str, list[D.Section]]) -> dict[str, Any]:
    from memlens.retrieval.evaluate import mean_metrics, rank_metrics

    per_doc, per_sec = [], []
    for q in queries:
        (target,) = qrels[q["_id"]]
        doc = target.split("::", 1)[0]
        b = mem.search(q["text"], active_wing=WING, k=K, use_cache=False)
        doc_ranked, sec_ranked = [], []
        for r in b.results[:K]:
            meta = r.entry.meta
            d = Path(meta.get("source", "")).stem
            lines = meta.get("lines") or [0, 0]
            cov = D.covered(secs.get(d, []), lines[0], lines[1])
            doc_ranked.append(d)
            sec_ranked.append(target if target in cov else (cov[0] if cov else f"{d}::?"))
        per_doc.append(rank_metrics(doc_ranked, {doc: 1.0}))
        per_sec.append({"id": q["_id"], **rank_metrics(sec_ranked, {target: 1.0})})

    def mean(rows: list[dict[str, Any]]) -> dict[str, float]:  # nDCG is meaningless here: a unit repeats in a list
        return {m: v for m, v in mean_metrics(rows).items() if m != "ndcg@10"}

    return {"document": mean(per_doc), "section": mean(per_sec),
            "section_misses": [r["id"] for r in per_sec if r["recall@10"] == 0], "eval": _entry_eval(mem, queries, qrels, secs)}


def _entry_eval(mem: Any, queries: list[dict[str, Any]], qrels: dict[str, dict[str, float]],
                secs: dict[str, list[D.Section]]) -> dict[str, float]:
    """What ``memlens eval`` reports on this store with entry-level qrels: every chunk covering the answer's section.

    Its MRR@10 equals the section-level MRR@10 above; its recall@10 is the share of those chunks found.
    """
    from memlens.retrieval.evaluate import evaluate

    res = evaluate(mem, queries, entry_qrels(mem, qrels, secs), active_wing=WING, k=K)
    return {m: res[m] for m in ("mrr@10", "recall@10")}


def entry_qrels(mem: Any, qrels: dict[str, dict[str, float]], secs: dict[str, list[D.Section]]) -> dict[str, dict[str, float]]:
    """The section-level qrels as entry ids: every chunk of the store covering the answer's section."""
    chunks_of: dict[str, list[str]] = {}
    for e in mem.entries(WING):
        lines = e.meta.get("lines") or [0, 0]
        for sid in D.covered(secs.get(Path(e.meta.get("source", "")).stem, []), lines[0], lines[1]):
            chunks_of.setdefault(sid, []).append(e.id)
    return {qid: {eid: 1.0 for sid in rel for eid in chunks_of.get(sid, [])} for qid, rel in qrels.items()}


def compare(settings: Any, embedder: Any, work: Path, *, naive_words: int = NAIVE_WORDS) -> dict[str, Any]:
    """Both stores built under ``work`` and scored; raises ``chunking_data.CorpusMismatch`` on a changed corpus."""
    from memlens import Memory
    from memlens.ingest import ingest
    from memlens.retrieval.evaluate import load_qrels, load_queries

    secs = D.build(work / "corpus")
    docs_dir = work / "corpus" / "docs"
    queries = load_queries(D.DATA / "queries.jsonl")
    qrels = load_qrels(D.DATA / "qrels" / "test.tsv")
    known = {s.id for v in secs.values() for s in v}
    for q in queries:  # the qrels must name sections the builder produced, one per question
        rel = qrels.get(q["_id"], {})
        if len(rel) != 1 or not set(rel) <= known:
            raise D.CorpusMismatch(f"chunking_qa: {q['_id']}: qrels {sorted(rel)} do not name one known section")
    out: dict[str, Any] = {"documents": len(secs), "sections": len(known), "queries": len(queries),
                           "naive_words": naive_words}
    with Memory.open(work / "memlens.db", settings=settings, embedder=embedder) as mem:
        t = time.perf_counter()
        s = ingest(mem, [docs_dir], wing=WING)
        out["memlens"] = {"chunks": s["chunks"], "ingest_s": round(time.perf_counter() - t, 1),
                          **_score(mem, queries, qrels, secs)}
    with Memory.open(work / "naive.db", settings=settings, embedder=embedder) as mem:
        t = time.perf_counter()
        n = _naive_jsonl(docs_dir, work / "naive.jsonl", naive_words)
        mem.import_jsonl(work / "naive.jsonl")
        out["naive"] = {"chunks": n, "ingest_s": round(time.perf_counter() - t, 1),
                        **_score(mem, queries, qrels, secs)}
    return out


def _table(res: dict[str, Any]) -> str:
    m, n = res["memlens"], res["naive"]
    rows = [
        f"| chunking ({res['queries']} questions, {res['documents']} documents, {res['sections']} sections; k={K}) "
        f"| chunks | doc MRR@10 | doc R@10 | section MRR@10 | section R@10 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, r in (("memlens: split at headings, packed to 254 word pieces", m),
                     (f"naive: fixed {res['naive_words']}-word windows", n)):
        rows.append(f"| {label} | {r['chunks']} | {r['document']['mrr@10']:.3f} | {r['document']['recall@10']:.3f} "
                    f"| {r['section']['mrr@10']:.3f} | {r['section']['recall@10']:.3f} |")
    mach = res["machine"]
    rows += ["", f"`python -m tests.bench.chunking`; real all-MiniLM-L6-v2, default profile; {mach['cpu_model']}, "
             f"Python {mach['python']}, {mach['date']}. A naive window spanning sections counts for each of them. "
             f"`memlens eval` on each store with entry-level qrels (every chunk covering the answer's section) gives "
             f"MRR@10 {m['eval']['mrr@10']:.3f} / {n['eval']['mrr@10']:.3f} and R@10 (share of those chunks found) "
             f"{m['eval']['recall@10']:.3f} / {n['eval']['recall@10']:.3f}."]
    return "\n".join(rows)


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    from memlens.config import load_settings
    from memlens.embed import make_embedder

    t0 = time.perf_counter()
    settings = load_settings()
    emb = make_embedder(settings.embedding, settings.cache_dir)
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-chunking-"))
    try:
        try:
            res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                                   "load_average_1m": round(os.getloadavg()[0], 2)}
            res.update(compare(settings, emb, scratch))
        except D.CorpusMismatch as exc:
            raise SystemExit(str(exc)) from None
        for side in ("memlens", "naive"):
            log(f"  {side}: {res[side]['chunks']} chunks, document {res[side]['document']}, "
                f"section {res[side]['section']}")
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        table = _table(res)
        if write and not quick:
            ensure_readme_block(NAME, "replay")
        m, n = res["memlens"], res["naive"]
        publish(NAME, res, table, official=write and not quick, target_lines=[
            f"section R@10 memlens {m['section']['recall@10']} vs naive {n['section']['recall@10']}; "
            f"document R@10 {m['document']['recall@10']} vs {n['document']['recall@10']}"])
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.chunking", __doc__, run,
                      "same as the full run (the question set is small); README and results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
