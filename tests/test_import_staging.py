"""An import writes in short transactions that other writers get between, and no reader sees part of it.

The importer's pause between two staging transactions is where another
writer gets the lock; these tests act there (``staging.pause`` patched), so
what they see is the store between two batches, deterministically.
"""

import base64
import io
import json

import numpy as np
import pytest

from memlens import Memory
from memlens.embed import HashEmbedder
from memlens.errors import MemlensError, NotFoundError, ValidationError
from memlens.store import db, staging
from memlens.store.writer import SqliteWriter
from memlens.store.writes import validate_entry

from .conftest import snapshot_store

N = 400


def _file(path, n=N, wing="w", extra=()):
    emb = HashEmbedder()
    lines = []
    for i in range(n):
        text = f"imported alpha entry {i}"
        v = emb.embed([text])[0]
        lines.append(json.dumps({"id": f"imp-{i}", "wing": wing if i % 2 else "other", "text": text,
                                 "model": emb.model_id, "vector": base64.b64encode(v.astype("<f4").tobytes()).decode()}))
    lines += [json.dumps(x) for x in extra]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _raw(path, sql):
    conn = db.connect(path, create=False)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


@pytest.fixture
def small_batches(monkeypatch):
    """Every staging transaction writes about one 64-row chunk; pauses run ``hooks`` (then sleep 0)."""
    hooks = []
    calls = []
    monkeypatch.setattr(staging, "BATCH_S", 0.0)

    def pause():
        calls.append(1)
        for h in list(hooks):
            h()

    monkeypatch.setattr(staging, "pause", pause)
    return hooks, calls


@pytest.mark.slow  # a long import read back at every pause: about 20 s of the fast loop otherwise
@pytest.mark.parametrize("vector_index", ["sqlite-vec", "memory"])  # the reader's KNN: sqlite-vec, or in process
def test_no_reader_sees_a_staged_import_and_writers_get_in(store_path, settings, tmp_path, small_batches, vector_index):
    hooks, calls = small_batches
    s = settings.model_copy(deep=True)
    s.search.vector_index = "sqlite-vec" if vector_index == "sqlite-vec" else "auto"
    with Memory.open(store_path, settings=s, embedder=HashEmbedder()) as mem, \
            Memory.open(store_path, settings=s, embedder=HashEmbedder()) as other:
        mem.add("alpha entry that was here before", wing="w", id="old")
        if vector_index == "memory":
            other.warm_index()  # its blocks reload during the import (the live write bumps the wing)
        seen = []

        def look():
            ids = {e.id for e in other.entries()}
            buf = io.StringIO()
            other.export_jsonl(buf)
            bundle = other.search("imported alpha entry", wings=["w"], use_cache=False)
            seen.append({
                "count": other.count(), "ids": ids, "wings": other.wings(), "stats": other.stats()["per_wing"],
                "export": [json.loads(x)["id"] for x in buf.getvalue().splitlines()],
                "search": [r.entry.id for r in bundle.results], "notes": bundle.trace.notes,
                "audit": {a["entry_id"] for a in other.audit(limit=1000)},
                "audit_rows": other.stats()["audit_rows"],
            })
            with pytest.raises(NotFoundError):
                other.get("imp-1")
            staged = _raw(store_path, "SELECT count(*) FROM entries WHERE import_id IS NOT NULL")[0][0]
            seen[-1]["staged_raw"] = staged
            if len(seen) == 1:  # a writer between two staging transactions, with the default busy timeout
                other.add("written while the import runs", wing="w", id="live")

        hooks.append(look)
        report = mem.import_jsonl(_file(tmp_path / "f.jsonl"))
        assert report["imported"] == N
        assert len(calls) >= 3, "the import should have written in several transactions"
        assert all(x["staged_raw"] > 0 for x in seen[1:]), "staged rows exist in the store between batches"
        for i, x in enumerate(seen):
            own = {"old"} | ({"live"} if i else set())
            assert x["ids"] == own and x["count"] == len(own) and set(x["export"]) == own
            assert x["wings"] == ["w"] and x["stats"] == {"w": len(own)}
            assert set(x["search"]) <= own and "old" in x["search"]
            assert not any(a and a.startswith("imp-") for a in x["audit"])
        # sqlite-vec ranks the visible vectors in process while an import has rows in scope; a warm index always does
        assert any("import in progress" in n for n in seen[-1]["notes"]) == (vector_index == "sqlite-vec")
        # published: everything at once, and the live write kept
        assert other.count() == N + 2 and other.get("imp-1").wing == "w"
        assert other.wings() == ["other", "w"]
        assert "imp-1" in {r.entry.id for r in other.search("imported alpha entry 1", wings=["w"]).results}
        assert len([a for a in other.audit(limit=5000) if a["action"] == "import"]) == N
    assert _raw(store_path, "SELECT count(*) FROM imports") == [(0,)]


def test_an_id_added_while_importing_fails_the_import_and_removes_its_rows(store_path, settings, tmp_path, small_batches):
    hooks, _ = small_batches
    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as mem, \
            Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as other:
        mem.add("seed", wing="w", id="seed")
        hooks.append(lambda: other.add("racer", wing="w", id=f"imp-{N - 1}") if other.count() == 1 else None)
        with pytest.raises(ValidationError, match=f"line {N}: field 'id': 'imp-{N - 1}' was added to the store while importing"):
            mem.import_jsonl(_file(tmp_path / "f.jsonl"))
        assert {e.id for e in mem.entries()} == {"seed", f"imp-{N - 1}"}
    assert _raw(store_path, "SELECT count(*) FROM entries") == [(2,)]
    assert _raw(store_path, "SELECT count(*) FROM entries_vec") == [(2,)]
    assert _raw(store_path, "SELECT count(*) FROM audit WHERE import_id IS NOT NULL") == [(0,)]
    assert _raw(store_path, "SELECT count(*) FROM imports") == [(0,)]


def test_an_override_target_deleted_while_importing_fails_the_publish(store_path, settings, tmp_path, small_batches):
    hooks, _ = small_batches
    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as mem, \
            Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as other:
        mem.add("the shared rule", wing="w", id="target")
        hooks.append(lambda: other.delete("target") if other.count() == 1 else None)
        path = _file(tmp_path / "f.jsonl", extra=[{"id": "proj", "wing": "w", "text": "override", "overrides": "target"}])
        with pytest.raises(ValidationError, match=f"line {N + 1}: field 'overrides': entry 'target' was deleted while importing"):
            mem.import_jsonl(path)
        assert mem.count() == 0
    assert _raw(store_path, "SELECT count(*) FROM entries") == [(0,)]


def test_an_import_claimed_by_a_sweep_cannot_publish(store_path, settings, tmp_path, small_batches):
    """An importer that stalled past the staleness limit finds its import removed, and stops cleanly."""
    hooks, _ = small_batches

    def claim():
        conn = db.connect(store_path, create=False)
        try:
            with db.transaction(conn, store_path):
                conn.execute("UPDATE imports SET owner = 'abandoned'")
        finally:
            conn.close()

    hooks.append(claim)
    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as mem:
        mem.add("seed", wing="w", id="seed")
        before = snapshot_store(store_path)
        with pytest.raises(MemlensError, match="the import was abandoned"):
            mem.import_jsonl(_file(tmp_path / "f.jsonl"))
    hooks.clear()
    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as mem:
        assert mem.count() == 1
        mem.import_jsonl(_file(tmp_path / "g.jsonl", n=2))
        assert mem.count() == 3
    assert _raw(store_path, "SELECT count(*) FROM entries") == [(3,)]
    assert _raw(store_path, "SELECT count(*) FROM imports") == [(0,)]
    assert before[0][0][0] == 1  # (the seed's rowid: nothing renumbered)


def test_a_dead_importers_rows_are_swept_but_a_live_ones_are_not(store_path, settings, tmp_path):
    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as mem:
        conn = mem.conn
        ids = []
        for who in ("nohost-elsewhere:1:1", f"{staging.owner()}", "garbage"):
            ids.append(staging.begin(conn, store_path, "x"))
            with db.transaction(conn, store_path):
                conn.execute("UPDATE imports SET owner = ? WHERE id = ?", (who, ids[-1]))
        with db.transaction(conn, store_path):
            conn.execute("UPDATE imports SET heartbeat = '0' WHERE id = ?", (ids[0],))  # silent for decades
        for imp in ids:
            with db.transaction(conn, store_path):
                entry = validate_entry({"id": f"s{imp}", "wing": "w", "text": "staged"})
                SqliteWriter(conn, mem.model_id).insert(entry, np.ones(384, dtype=np.float32) / np.sqrt(384), import_id=imp)
        assert mem.count() == 0
        assert staging.sweep(conn, store_path) == 2  # the silent one and the unreadable owner; ours is alive
        left = conn.execute("SELECT id FROM entries").fetchall()
        assert left == [(f"s{ids[1]}",)]
        assert conn.execute("SELECT id FROM imports").fetchall() == [(ids[1],)]


def test_salvage_leaves_out_the_rows_of_an_unpublished_import(store_path, settings, tmp_path, small_batches):
    from memlens.store.salvage import salvage

    hooks, _calls = small_batches
    new = tmp_path / "copy.db"
    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as mem:
        mem.add("alpha entry that was here before", wing="w", id="old")
        out = []

        def copy_once():
            if not out:  # rows are staged now (this pause follows a staging transaction), none published
                assert _raw(store_path, "SELECT count(*) FROM entries")[0][0] > 1
                out.append(salvage(store_path, new, settings=settings, embedder=HashEmbedder()))

        hooks.append(copy_once)
        mem.import_jsonl(_file(tmp_path / "in.jsonl"))
        assert mem.count() == N + 1
    assert out and out[0]["saved"] == 1 and out[0]["unpublished_import_rows"] > 0
    with Memory.open(new, settings=settings, embedder=HashEmbedder(), create=False) as copy:
        assert [e.id for e in copy.entries()] == ["old"]
        assert {a["entry_id"] for a in copy.audit(limit=1000)} <= {"old"}
