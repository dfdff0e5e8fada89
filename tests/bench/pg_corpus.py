"""A real-text corpus for the PostgreSQL benchmark: over 100k chunks of text shipped on this machine, embedded once.

Sources, every file in path order: Python's standard library source (the
running Python's ``stdlib`` directory, no site-packages) and the Markdown,
HTML and text files under ``/usr/share/doc`` (files of at most 500 KB, as
``memlens index`` takes). Text nobody on this project wrote, cut by memlens's
own ingestion (``memlens.ingest``: code at syntax boundaries, documents at
headings and paragraphs) into chunks of at most ``MAX_TOKENS`` word pieces
(title included), the size of a memory entry rather than a whole section; a
text found twice is kept once, and chunks of fewer than 5 words are left out.

All chunks are ordered by the sha256 of their text: the first ``N_QUERIES``
are held-out queries (never stored), the next ``N_STORE`` the store. A source
group (a stdlib top-level module, a /usr/share/doc package) goes whole into one
of ten wings, the largest group first into the wing holding fewest chunks, so
a wing is a set of real projects of about the same size.

Vectors are the real model's (all-MiniLM-L6-v2 through memlens's embedder) of
each entry's ``embed_text``. They are kept by the sha256 of that text under
``~/.cache/memlens-bench/vectors/<model>/`` (``$ML_BENCH_CACHE/vectors/<model>/``
when that is set) in shards, one written as each
batch finishes (batches sorted by length, so each pads little): a run that is
stopped resumes where it was, and a source that changed re-embeds only its
new chunks. The chunk list is kept there too, by a digest of the source files'
paths, sizes and modification times.

    nice -n 19 python -m tests.bench.pg_corpus    # builds or completes the cache (hours on 2 shared cores)
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CACHE = Path(os.environ.get("ML_BENCH_CACHE", Path.home() / ".cache" / "memlens-bench"))
DOC_ROOT = Path("/usr/share/doc")
DOC_SUFFIXES = {".md", ".markdown", ".html", ".htm", ".txt", ".rst"}
MAX_FILE = 500_000
MAX_TOKENS = 128
MIN_WORDS = 5
N_WINGS = 10
N_QUERIES = 1_000
N_STORE = 100_000
BATCH = 256  # texts per embedding call, and per shard written
VERSION = 1  # of the chunk list's recipe


@dataclass
class Corpus:
    store: list[dict[str, Any]]  # entry records (id, wing, kind, title, text, created_at, meta.source)
    queries: list[dict[str, Any]]  # held-out chunks, the same fields
    digest: str  # of the chunk list
    vectors: np.ndarray  # store vectors, row i = store[i]
    query_vectors: np.ndarray

    def info(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for r in self.store:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        wings: dict[str, int] = {}
        for r in self.store:
            wings[r["wing"]] = wings.get(r["wing"], 0) + 1
        return {"entries": len(self.store), "queries": len(self.queries), "digest": self.digest[:16],
                "kinds": kinds, "wings": dict(sorted(wings.items())), "max_tokens": MAX_TOKENS,
                "sources": [str(stdlib_dir()), str(DOC_ROOT)]}


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def source_files() -> list[tuple[str, Path, str]]:
    """(group, path, kind) of every source file, in a fixed order."""
    out: list[tuple[str, Path, str]] = []
    std = stdlib_dir()
    for p in sorted(std.rglob("*.py")):
        rel = p.relative_to(std)
        if rel.parts[0] == "site-packages" or not p.is_file() or p.is_symlink() or p.stat().st_size > MAX_FILE:
            continue
        out.append(("stdlib." + rel.parts[0].removesuffix(".py"), p, "code"))
    for p in sorted(DOC_ROOT.rglob("*")):
        if p.suffix.lower() in DOC_SUFFIXES and p.is_file() and not p.is_symlink() and p.stat().st_size <= MAX_FILE:
            out.append(("doc." + p.relative_to(DOC_ROOT).parts[0], p, "document"))
    return out


def _files_digest(files: list[tuple[str, Path, str]]) -> str:
    h = hashlib.sha256(f"v{VERSION} tokens={MAX_TOKENS} min_words={MIN_WORDS}\n".encode())
    for _, p, _ in files:
        st = p.stat()
        h.update(f"{p}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _chunk_all(files: list[tuple[str, Path, str]], count: Any) -> list[dict[str, Any]]:
    from memlens.ingest.code_chunks import code_chunks
    from memlens.ingest.readers import Unreadable, decode, parser_for, read_document

    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    t = time.perf_counter()
    for n, (group, p, kind) in enumerate(files):
        data = p.read_bytes()
        rel = str(p.relative_to(stdlib_dir() if kind == "code" else DOC_ROOT))
        try:
            if kind == "code":
                chunks, _ = code_chunks(rel, decode(data), ".py", count)
            else:
                chunks, _ = read_document(p, data, parser_for(p) or "text", count)
        except Unreadable:
            continue
        for c in chunks:
            if len(c.text.split()) < MIN_WORDS:
                continue
            sha = hashlib.sha256(c.text.encode("utf-8")).hexdigest()
            if sha in seen:
                continue
            seen.add(sha)
            out.append({"sha": sha, "group": group, "kind": kind, "title": c.title[:200], "text": c.text, "source": rel})
        if n % 500 == 0:
            print(f"  chunked {n:,}/{len(files):,} files, {len(out):,} chunks, {time.perf_counter() - t:.0f} s",
                  file=sys.stderr, flush=True)
    return out


def _wings(chosen: list[dict[str, Any]]) -> dict[str, str]:
    """Source group -> wing: the largest group first into the wing holding fewest chunks so far."""
    sizes: dict[str, int] = {}
    for c in chosen:
        sizes[c["group"]] = sizes.get(c["group"], 0) + 1
    load = [0] * N_WINGS
    out = {}
    for group, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        w = min(range(N_WINGS), key=lambda i: (load[i], i))
        load[w] += size
        out[group] = f"wing_{w}"
    return out


def chunks(count: Any) -> tuple[list[dict[str, Any]], str]:
    """The held-out queries and the store's chunks (queries first), and the list's digest; cached."""
    files = source_files()
    digest = _files_digest(files)
    path = CACHE / f"chunks-{digest[:24]}.jsonl.gz"
    if not path.exists():
        print(f"chunking {len(files):,} files ...", file=sys.stderr, flush=True)
        every = _chunk_all(files, count)
        every.sort(key=lambda c: c["sha"])
        chosen = every[: N_QUERIES + N_STORE]
        if len(chosen) < N_QUERIES + N_STORE:
            raise SystemExit(f"only {len(chosen):,} chunks in the sources; the benchmark needs {N_QUERIES + N_STORE:,}")
        wing_of = _wings(chosen)
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with gzip.open(tmp, "wt", encoding="utf-8") as fh:
            for c in chosen:
                fh.write(json.dumps({**c, "wing": wing_of[c["group"]]}, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    return rows, hashlib.sha256(path.read_bytes()).hexdigest()


def record(c: dict[str, Any]) -> dict[str, Any]:
    """The entry a chunk becomes."""
    return {"id": "c" + c["sha"][:20], "wing": c["wing"], "kind": c["kind"], "type": "note", "title": c["title"],
            "text": c["text"], "created_at": "2026-01-01T00:00:00Z", "meta": {"source": c["source"]}}


def _embed_texts(rows: list[dict[str, Any]]) -> list[str]:
    from memlens.models import Entry

    return [Entry.model_validate(record(c)).embed_text for c in rows]


class VectorCache:
    """Vectors by sha256 of the embedded text, in .npz shards under ``root`` (one per finished batch)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.held: dict[str, np.ndarray] = {}
        for shard in sorted(root.glob("shard-*.npz")):
            with np.load(shard) as z:
                self.held.update(zip(z["keys"].tolist(), z["vecs"]))

    def fill(self, texts: list[str], embed: Any) -> None:
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        todo = sorted({k: t for k, t in zip(keys, texts) if k not in self.held}.items(), key=lambda kt: len(kt[1]))
        t0, done = time.perf_counter(), 0
        for i in range(0, len(todo), BATCH):
            part = todo[i : i + BATCH]
            vecs = np.asarray(embed([t for _, t in part]), dtype=np.float32)
            name = self.root / f"shard-{hashlib.sha256(part[0][0].encode()).hexdigest()[:16]}-{len(part)}.npz"
            with open(name.with_suffix(".tmp"), "wb") as fh:
                np.savez(fh, keys=np.array([k for k, _ in part]), vecs=vecs)
            os.replace(name.with_suffix(".tmp"), name)
            self.held.update(zip([k for k, _ in part], vecs))
            done += len(part)
            rate = done / (time.perf_counter() - t0)
            print(f"  embedded {done:,}/{len(todo):,} ({rate:.1f}/s, ~{(len(todo) - done) / rate / 60:.0f} min left)",
                  file=sys.stderr, flush=True)

    def get(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.held[hashlib.sha256(t.encode("utf-8")).hexdigest()] for t in texts])


def load() -> Corpus:
    """The corpus with its vectors, embedding whatever the cache lacks first."""
    from memlens.config import Settings
    from memlens.embed import make_embedder

    settings = Settings()
    embedder = make_embedder(settings.embedding, settings.cache_dir)
    from memlens.ingest.chunking import TokenCounter

    rows, digest = chunks(TokenCounter(embedder.count_tokens, MAX_TOKENS))
    texts = _embed_texts(rows)
    cache = VectorCache(CACHE / "vectors" / embedder.model_id.replace("/", "_").replace(":", "_"))
    cache.fill(texts, embedder.embed)
    vecs = cache.get(texts)
    return Corpus([record(c) for c in rows[N_QUERIES:]], [record(c) for c in rows[:N_QUERIES]], digest,
                  vecs[N_QUERIES:], vecs[:N_QUERIES])


def cached(noise: float = 0.3, seed: int = 0) -> tuple[Corpus, int]:
    """The corpus from what the cache holds now, embedding nothing: a chunk whose vector is cached has it; any other
    gets a cached chunk's vector of the same wing with gaussian noise of norm about ``noise`` added (cosine about
    0.96 to it at 0.3), renormalised. Queries are the held-out chunks whose vectors are cached. Also returns how many
    stored chunks have their own real vector."""
    from memlens.config import Settings
    from memlens.embed import make_embedder

    settings = Settings()
    model_id = make_embedder(settings.embedding, settings.cache_dir).model_id
    rows, digest = chunks(None)  # the chunk list is cached (the embedding job made it)
    cache = VectorCache(CACHE / "vectors" / model_id.replace("/", "_").replace(":", "_"))
    keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in _embed_texts(rows)]
    have = np.array([k in cache.held for k in keys])
    dim = len(next(iter(cache.held.values())))
    vecs = np.zeros((len(rows), dim), dtype=np.float32)
    vecs[have] = np.stack([cache.held[k] for k, h in zip(keys, have) if h])
    rng = np.random.default_rng(seed)
    store_rows = range(N_QUERIES, len(rows))
    real_of_wing: dict[str, list[int]] = {}
    for i in store_rows:
        if have[i]:
            real_of_wing.setdefault(rows[i]["wing"], []).append(i)
    for i in store_rows:
        if not have[i]:
            v = vecs[rng.choice(real_of_wing[rows[i]["wing"]])] + rng.standard_normal(dim).astype(np.float32) * noise / dim**0.5
            vecs[i] = v / np.linalg.norm(v)
    q = [i for i in range(N_QUERIES) if have[i]]
    corpus = Corpus([record(c) for c in rows[N_QUERIES:]], [record(rows[i]) for i in q], digest, vecs[N_QUERIES:], vecs[q])
    return corpus, int(have[N_QUERIES:].sum())


if __name__ == "__main__":
    c = load()
    print(json.dumps(c.info(), indent=1))
