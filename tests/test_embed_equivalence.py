"""The torch-free embedder gives sentence-transformers' vectors, on real text and on the question sets.

Both backends embed the corpora of the project's question sets (sections of installed
packages' documentation, tests/data/chunking_qa; the Node.js API reference, tests/data/docs_qa,
where Debian's nodejs docs are installed) and their questions: texts nobody here wrote,
from a few words to far past the model's 256-token window. Every text's two vectors have
a cosine of at least 0.99999, and every question gets the same ten nearest sections, in
the same order, from either backend's vectors.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from memlens.embed_model import resolve_model, verified_sha256
from memlens.embed_st import SentenceTransformerEmbedder
from memlens.retrieval.evaluate import load_queries
from tests.bench import chunking_data

DOCS_QA = chunking_data.DATA.parent / "docs_qa"
MIN_COSINE = 0.99999


def _chunking_set(tmp_path) -> tuple[list[tuple[str, str]], list[str]]:
    chunking_data.build(tmp_path / "chunking")
    with (tmp_path / "chunking" / "corpus.jsonl").open(encoding="utf-8") as fh:
        corpus = [(d["_id"], f"{d['title']}\n{d['text']}") for d in map(json.loads, fh) if d["text"].strip()]
    return corpus, [q["text"] for q in load_queries(chunking_data.DATA / "queries.jsonl")]


def _docs_set(tmp_path: object = None) -> tuple[list[tuple[str, str]], list[str]] | None:
    if not chunking_data.Path("/usr/share/doc/nodejs/api").is_dir():
        return None
    sys.path.insert(0, str(DOCS_QA))
    try:
        import build_corpus  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    corpus = [(d["_id"], f"{d['title']}\n{d['text']}") for d in build_corpus.build()]
    return corpus, [q["text"] for q in load_queries(DOCS_QA / "queries.jsonl")]


@pytest.fixture(scope="module")
def st_embedder(settings):
    spec = resolve_model(settings.embedding)
    return SentenceTransformerEmbedder(spec, verified_sha256(spec, settings.cache_dir))


SETS = {"chunking_qa": _chunking_set, "docs_qa": _docs_set}


@pytest.mark.parametrize("name", list(SETS))
def test_same_vectors_and_rankings_as_sentence_transformers(name, tmp_path, real_embedder, st_embedder):
    found = SETS[name](tmp_path)
    if found is None:
        pytest.skip(f"{name}: its corpus is not installed here (Debian's nodejs docs)")
    corpus, questions = found
    texts = [t for _, t in corpus] + questions
    tokens = [min(real_embedder.count_tokens(t) + 2, 256) for t in texts]  # + [CLS] and [SEP], cut at the window
    short, middle, full = sum(t < 64 for t in tokens), sum(64 <= t < 256 for t in tokens), sum(t == 256 for t in tokens)
    assert len(texts) >= 1000 and short >= 50 and middle >= 200 and full >= 50, (len(texts), short, middle, full)

    ours, ref = real_embedder.embed(texts), st_embedder.embed(texts)
    cos = (ours * ref).sum(axis=1)  # both are unit vectors
    worst = int(cos.argmin())
    assert cos.min() >= MIN_COSINE, f"{name}: text {worst} has cosine {cos.min():.7f}: {texts[worst][:80]!r}"
    n = len(corpus)
    differ = []
    for q in range(len(questions)):
        top_ours = np.argsort(-(ours[:n] @ ours[n + q]), kind="stable")[:10]
        top_ref = np.argsort(-(ref[:n] @ ref[n + q]), kind="stable")[:10]
        if list(top_ours) != list(top_ref):
            differ.append(questions[q])
    assert not differ, f"{name}: {len(differ)} of {len(questions)} questions get other top-10 lists, e.g. {differ[0]!r}"
