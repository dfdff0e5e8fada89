"""Retrieval over ingested real material with the real model.

Documents: installed packages' READMEs; each package's own one-line summary is the
question, and its README must come back. Code: modules of the standard library
copied into a workspace with their module docstrings removed; the docstring's
first line is the query, and the module must come back (its text is no longer
in the index, so only the code can answer).
"""

from __future__ import annotations

import os

import pytest

from memlens.ingest import index, ingest, recall, storage
from tests.ingest_material import code_workspace, readmes, strip_module_docstring

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def docs_mem(tmp_path_factory, settings, real_embedder):
    from memlens import Memory

    base = tmp_path_factory.mktemp("docs")
    questions = readmes(base / "docs", limit=10)
    with Memory.open(base / "s.db", settings=settings, embedder=real_embedder) as mem:
        out = ingest(mem, [base / "docs"], wing="docs")
        assert out["added"] == len(questions)
        yield mem, questions


def test_questions_find_the_right_document(docs_mem):
    mem, questions = docs_mem
    hits = []
    for fname, summary in questions.items():
        bundle = mem.search(summary, active_wing="docs", k=5, use_cache=False)
        sources = [os.path.basename(r.entry.meta.get("source", "")) for r in bundle.results]
        hits.append(fname in sources)
    assert sum(hits) / len(hits) >= 0.8, list(zip(questions, hits))


def test_chunks_carry_source_position_and_hash(docs_mem):
    mem, _ = docs_mem
    for e in list(mem.entries("docs"))[:100]:
        assert e.kind.value == "document" and os.path.isfile(e.meta["source"])
        assert len(e.meta["source_sha256"]) == 64 and "lines" in e.meta and "heading_path" in e.meta


@pytest.fixture(scope="module")
def code_mem(tmp_path_factory, settings, real_embedder):
    from memlens import Memory

    base = tmp_path_factory.mktemp("code")
    ws = code_workspace(base / "ws", ("email",))
    queries = {}
    for path in sorted((ws / "email").glob("*.py")):
        first = strip_module_docstring(path)
        if first and len(first.split()) >= 3:
            queries[str(path.relative_to(ws))] = first
    with Memory.open(base / "s.db", settings=settings, embedder=real_embedder) as mem:
        index(mem, ws, wing="proj")
        yield mem, ws, queries


def test_queries_find_the_right_module(code_mem):
    from memlens.store.rows import vec_blob

    mem, _, queries = code_mem
    assert len(queries) >= 8
    hits = []
    for rel, query in queries.items():
        qvec = mem.embed([query])[0]
        paths: list[str] = []
        for entry, _ in storage.code_candidates(mem, vec_blob(qvec), ["proj"], 30):
            if entry.meta["path"] not in paths:
                paths.append(entry.meta["path"])
        hits.append(rel in paths[:3])
    assert sum(hits) / len(hits) >= 0.6, list(zip(queries.values(), hits))


def test_context_serves_relevant_code_with_path_lines_and_score(code_mem):
    mem, ws, _ = code_mem
    bundle = mem.search("encode a header value with base64 or quoted-printable", active_wing="proj", use_cache=False)
    text = recall.render_with_code(mem, bundle)
    section = text.split("## Relevant code", 1)[1]
    assert 1 <= section.count("### `email/") <= recall.MAX_CHUNKS and "(score 0." in section
    first = section.split("### `", 1)[1].split("`", 1)[0]
    rel, lines = first.rsplit(":", 1)
    a, b = (int(x) for x in lines.split("-"))
    src = (ws / rel).read_text().split("\n")
    assert "\n".join(src[a - 1 : b]).strip().split("\n")[0] in section  # the served lines are the file's
