"""Ranking quality of a PostgreSQL store against the SQLite store it was copied from, on every question set.

Each set's corpus (tests/data: docs_qa, python_faq, chunking_qa) is stored in a
SQLite file with the real model, as the quality guard and the chunking suite
store it, then copied into PostgreSQL (``memlens copy``: same ids, same
vectors). Every question is ranked by ``memlens.retrieval.evaluate`` (what
``memlens eval`` runs: default profile, k=10, no cache) on:

* the SQLite store;
* the PostgreSQL store as it opens by default (at these sizes every KNN is the
  exact scan: the sets are below ``hnsw_min_rows``);
* the PostgreSQL store with its HNSW indexes built and used for every search
  (``hnsw_min_rows=0``), at the default ``ef_search`` and at 40: what the
  approximate index does to the rankings;
* the same searches scoped to the set's wing (which holds all of its entries),
  so that each goes through that wing's own index: SQLite, then PostgreSQL by
  default (such a wing is no small one: ``ef_search``) and walked at 1000, what
  a small wing of a large store gets at most (``vectors.wing_ef``); their top-10
  lists are compared with SQLite's scoped ones.

The real model's vectors are cached by text under
``~/.cache/memlens-bench/vectors-eval/`` (``pg_corpus.VectorCache``), so a run
after the first embeds nothing.

    python -m tests.bench.pg_quality     # prints the figures (the postgres suite records them)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .common import log
from .pg_corpus import CACHE, VectorCache

SETS = ("docs_qa", "python_faq", "chunking_qa")
METRICS = ("mrr@10", "recall@1")


class CachedEmbedder:
    """The real embedder behind a vector cache keyed by text: the same vectors, each text embedded once ever."""

    def __init__(self, real: Any) -> None:
        self.real, self.model_id, self.dim = real, real.model_id, real.dim
        self.cache = VectorCache(CACHE / "vectors-eval" / real.model_id.replace("/", "_").replace(":", "_"))

    def embed(self, texts: list[str]) -> np.ndarray:
        self.cache.fill(list(texts), self.real.embed)
        return self.cache.get(list(texts))

    def __getattr__(self, name: str) -> Any:  # count_tokens, max_tokens, ...: the real embedder's
        return getattr(self.real, name)


def _sqlite_stores(settings: Any, emb: Any, work: Path) -> dict[str, tuple[Path, list[dict[str, Any]], dict[str, Any],
                                                                          str | None]]:
    """Per set: (SQLite store, queries, entry-level qrels, active wing), built with ``emb``."""
    from memlens import Memory
    from memlens.ingest import ingest
    from memlens.retrieval.evaluate import load_qrels, load_queries
    from tests.data import beir

    from . import chunking as C
    from . import chunking_data as D

    out = {}
    for name in SETS:
        data = beir.DATA / name
        queries = load_queries(data / "queries.jsonl")
        path = work / f"{name}.db"
        with Memory.open(path, settings=settings, embedder=emb) as mem:
            if name == "chunking_qa":
                secs = D.build(work / "chunking-corpus")
                ingest(mem, [work / "chunking-corpus" / "docs"], wing=C.WING)
                qrels = C.entry_qrels(mem, load_qrels(data / "qrels" / "test.tsv"), secs)
                wing: str | None = C.WING
            else:
                beir.write_entries(beir.corpus(name), beir.WINGS[name], work / f"{name}.jsonl")
                mem.import_jsonl(work / f"{name}.jsonl")
                qrels, wing = load_qrels(data / "qrels" / "test.tsv"), None
        out[name] = (path, queries, qrels, wing)
        log(f"[pg_quality] {name}: SQLite store built")
    return out


def _scores(mem: Any, queries: list[dict[str, Any]], qrels: dict[str, Any], wing: str | None,
            wings: list[str] | None = None) -> dict[str, Any]:
    from memlens.retrieval.evaluate import evaluate

    res = evaluate(mem, queries, qrels, active_wing=wing, wings=wings, k=10)
    return {**{m: round(float(res[m]), 4) for m in METRICS}, "queries": res["queries"],
            "ranked": {str(q["id"]): q["retrieved"] for q in res["per_query"]}}


def compare(server: Any, settings: Any, real_embedder: Any, work: Path) -> dict[str, Any]:
    """MRR@10 and R@1 per set on SQLite, PostgreSQL (default) and PostgreSQL (HNSW for every search)."""
    import psycopg

    from memlens import Memory
    from memlens.store.postgres import with_options
    from memlens.store.postgres.copy import copy_store
    from tests.data import beir

    emb = CachedEmbedder(real_embedder)
    stores = _sqlite_stores(settings, emb, work)
    out: dict[str, Any] = {}
    for name, (path, queries, qrels, wing) in stores.items():
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE q_{name}")
        uri = server.get_uri(f"q_{name}")
        copy_store(path, uri)
        row: dict[str, Any] = {}
        with Memory.open(path, settings=settings, embedder=emb) as mem:
            row["sqlite"] = _scores(mem, queries, qrels, wing)
        with Memory.open(uri, settings=settings, embedder=emb) as mem:
            row["postgresql"] = _scores(mem, queries, qrels, wing)
        for side, opts in (("postgresql_hnsw", {}), ("postgresql_hnsw_ef40", {"ef_search": 40})):
            with Memory.open(with_options(uri, hnsw_min_rows=0, **opts), settings=settings, embedder=emb) as mem:
                mem.store.ensure_hnsw()
                row[side] = _scores(mem, queries, qrels, wing)
                row[side]["index"] = mem.store.vector_index()
        # scoped to the set's wing (all of its entries): each search through that wing's own index
        home = [wing or beir.WINGS[name]]
        with Memory.open(path, settings=settings, embedder=emb) as mem:
            row["sqlite_wing"] = _scores(mem, queries, qrels, wing, home)
        for side, opts in (("postgresql_hnsw_wing", {}), ("postgresql_hnsw_wing_ef1000", {"ef_search": 1000,
                                                                                        "wing_ef_search": 1000})):
            with Memory.open(with_options(uri, hnsw_min_rows=0, **opts), settings=settings, embedder=emb) as mem:
                row[side] = _scores(mem, queries, qrels, wing, home)
                row[side]["index"] = mem.search(queries[0]["text"], wings=home, use_cache=False).trace.fusion["vector_index"]
        for side in [s for s in row if s != "sqlite"]:  # how many questions got another top 10 than on SQLite
            base = "sqlite_wing" if side.startswith("postgresql_hnsw_wing") else "sqlite"  # the same scope
            got, want = row[side]["ranked"], row[base]["ranked"]
            row[side]["lists_differing"] = sum(1 for q in want if got.get(q) != want[q])
        for side in row.values():
            side.pop("ranked")
        out[name] = row
        log(f"[pg_quality] {name}: " + json.dumps(row))
    return out


def main() -> int:
    from memlens.config import load_settings
    from memlens.embed import make_embedder

    from .postgres import _start_server

    settings = load_settings()
    real = make_embedder(settings.embedding, settings.cache_dir)
    with tempfile.TemporaryDirectory(prefix="memlens-bench-pgq-") as tmp:
        server = _start_server(Path(tmp))
        try:
            print(json.dumps(compare(server, settings, real, Path(tmp)), indent=1))
        finally:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
