"""Freshness per hit: each search result says whether its vector was made by the store's model from the
entry's text as it is now (``Result.vector``, ``"vector"`` in ``search --json``)."""

from __future__ import annotations

import json

import pytest

from memlens.embed import HashEmbedder
from memlens.replay import freshness
from tests.conftest import run_cli
from tests.fake_store import FakeEngine, FakeStore


def _seed(mem, *texts: str) -> list[str]:
    return [mem.add(t, wing="w").id for t in texts]


def test_a_hit_is_fresh_after_add(mem):
    ids = _seed(mem, "alpha beta", "alpha gamma", "delta epsilon")
    b = mem.search("alpha", k=5)
    assert {r.entry.id for r in b.results} >= set(ids[:2])
    for r in b.results:
        assert r.vector == {"fresh": True, "model": mem.model_id, "hash_matches": True}
        assert r.to_dict()["vector"] == r.vector


def test_a_hit_is_stale_after_its_text_changed_without_re_embedding(mem):
    edited, kept = _seed(mem, "alpha beta", "alpha gamma")
    mem.conn.execute("UPDATE entries SET text = 'alpha omega' WHERE id = ?", (edited,))  # behind the engine's back
    got = {r.entry.id: r.vector for r in mem.search("alpha", k=5, use_cache=False).results}
    assert got[edited] == {"fresh": False, "model": mem.model_id, "hash_matches": False}
    assert got[kept] == {"fresh": True, "model": mem.model_id, "hash_matches": True}
    # the same verdict as the store-wide check, which reads every row
    assert {i for i, f in freshness.hit_freshness(mem, list(got)).items() if not f["fresh"]} == {edited}
    freshness.reembed(mem)
    again = {r.entry.id: r.vector for r in mem.search("alpha", k=5, use_cache=False).results}
    assert again[edited] == {"fresh": True, "model": mem.model_id, "hash_matches": True}


@pytest.mark.parametrize("warm", [False, True], ids=["one-shot", "in-process"])
def test_hits_are_stale_after_the_store_model_changed(store_path, settings, hash_embedder, warm):
    """Also in a long-lived process, which keeps the models it read beside its rows: the re-embed's write is seen."""
    from memlens import Memory

    with Memory.open(store_path, settings=settings, embedder=hash_embedder) as m:
        ids = _seed(m, "alpha beta", "alpha gamma")
        m.store.set_model("another-model")  # as a re-embed with another model does once every vector is rewritten
    other = HashEmbedder()
    other.model_id = "another-model"
    with Memory.open(store_path, settings=settings, embedder=other) as m:
        if warm:
            m.warm_index()
        b = m.search("alpha", k=5)
        assert b.trace.fusion["vector_index"] == ("memory" if warm else "sqlite-vec")
        assert sorted(r.entry.id for r in b.results) == sorted(ids)
        assert [r.vector for r in b.results] == [{"fresh": False, "model": hash_embedder.model_id, "hash_matches": True}] * 2
        freshness.reembed(m)
        again = m.search("alpha", k=5).results  # the re-embed invalidated the cached bundle
        assert sorted(r.entry.id for r in again) == sorted(ids) and all(r.vector["fresh"] for r in again)
        assert {r.vector["model"] for r in again} == {"another-model"}


def test_a_cached_bundle_keeps_each_hits_freshness(mem):
    _seed(mem, "alpha beta")
    first = mem.search("alpha")
    hit = mem.search("alpha")
    assert hit.trace.cache_hit and [r.vector for r in hit.results] == [r.vector for r in first.results]
    assert hit.results[0].vector == {"fresh": True, "model": mem.model_id, "hash_matches": True}


def test_a_workspace_document_has_no_vector(mem, tmp_path):
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "architecture.md").write_text("# Architecture\n\n## Lifecycle\n\nTransitions must be fast.\n")
    b = mem.search("lifecycle transitions", workspace=str(ws))
    assert b.results and all("fallback" in r.flags and r.vector is None for r in b.results)
    assert all(r["vector"] is None for r in b.to_dict()["results"])


def test_the_pipeline_asks_the_store_for_the_models_of_its_hits_only(settings):
    store = FakeStore()
    old = store.add("alpha gamma", wing="w").id
    for t in ("alpha beta", "alpha delta", "epsilon zeta"):
        store.add(t, wing="w")
    store.models[store.rowid(old)] = "old-model"  # its vector was made by another model
    asked: list[list[int]] = []
    real = store.vector_models
    store.vector_models = lambda rowids: asked.append(list(rowids)) or real(rowids)  # type: ignore[method-assign]
    from memlens.retrieval.pipeline import search

    b = search(FakeEngine(settings, store).context(), "alpha gamma", k=2, use_cache=False)
    assert len(b.results) == 2 and len(asked) == 1  # one lookup, for the final hits only
    assert sorted(asked[0]) == sorted(store.rowid(r.entry.id) for r in b.results)
    assert {r.entry.id: r.vector["fresh"] for r in b.results}[old] is False
    assert [r.vector["model"] for r in b.results if r.entry.id != old] == [store.embedder.model_id]


@pytest.mark.model
def test_search_json_carries_each_hits_freshness(demo_store, tmp_path):
    import shutil

    path = tmp_path / "demo.db"
    shutil.copy(demo_store, path)
    out = run_cli("--store", str(path), "search", "callbacks must not block", "--json")
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)["results"]
    model = json.loads(out.stdout)["trace"]["model"]
    assert results and all(r["vector"] == {"fresh": True, "model": model, "hash_matches": True} for r in results)
    from memlens.store import db

    conn = db.connect(path, create=False)
    with conn:
        conn.execute("UPDATE entries SET text = text || ' (edited by hand)' WHERE id = ?", (results[0]["id"],))
    conn.close()
    again = run_cli("--store", str(path), "search", "callbacks must not block", "--json")
    by_id = {r["id"]: r["vector"] for r in json.loads(again.stdout)["results"]}
    assert by_id[results[0]["id"]] == {"fresh": False, "model": model, "hash_matches": False}
    assert sum(not v["fresh"] for v in by_id.values()) == 1
    text = run_cli("--store", str(path), "search", "callbacks must not block")
    assert text.stdout.count("(stale vector: memlens reembed)") == 1


def test_the_trace_pane_says_why_a_vector_is_stale():
    from memlens.tui.widgets.trace_view import vector_note

    assert vector_note({"fresh": False, "model": "m1", "hash_matches": True}, "m2") == "made by m1, the store's model is m2"
    assert vector_note({"fresh": False, "model": "m2", "hash_matches": False}, "m2") == "the text changed since it was embedded"
    assert vector_note({"fresh": False, "model": "m1", "hash_matches": False}, "m2") == (
        "made by m1, the store's model is m2; the text changed since it was embedded")
