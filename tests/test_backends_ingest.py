"""Ingestion and the code index, the same on each backend: SQLite + sqlite-vec, and PostgreSQL + pgvector.

Every test runs twice through ``backend_mem`` (tests/pg_fixture.py) on real material
(installed packages' READMEs, standard-library modules: tests/ingest_material.py).
Mechanics use the hashing embedder; the model-marked test recalls code by meaning
with the real model on both backends.
"""

from __future__ import annotations

import io
import json
import os
import time
from dataclasses import asdict

import pytest

from memlens.ingest import index, index_status, ingest, recall, storage
from tests.conftest import run_cli
from tests.ingest_material import code_workspace, readmes

pytest.importorskip("psycopg")


def _snapshot(mem) -> tuple:
    """Everything observable through the store: entries with their vectors, the audit, generations, the catalog."""
    out = io.StringIO()
    mem.export_jsonl(out, with_vectors=True)
    return (out.getvalue(), mem.audit(limit=100_000), mem.generations(), [asdict(s) for s in storage.all_sources(mem)],
            storage.runs(mem, limit=1000))


def _by_source(mem) -> dict[str, list]:
    out: dict[str, list] = {}
    for e in mem.entries():
        out.setdefault(e.meta.get("source"), []).append(e)
    return out


def _catalog_matches_entries(mem) -> None:
    """Each source's recorded chunks are exactly the entries that name it: none missing, none left behind."""
    by_source = _by_source(mem)
    sources = storage.all_sources(mem)
    assert {s.path for s in sources} == set(by_source)
    for s in sources:
        ids = sorted(e.id for e in by_source[s.path])
        assert storage.chunk_ids(mem, s.id) == ids and s.chunks == len(ids)
        assert {e.meta["source_sha256"] for e in by_source[s.path]} == {s.sha256}


def test_ingest_reingest_edit_and_delete(backend_mem, tmp_path):
    mem = backend_mem
    docs = tmp_path / "docs"
    readmes(docs, limit=8)
    first = ingest(mem, [docs], wing="docs")
    assert (first["added"], first["updated"], first["removed"], first["skipped"]) == (8, 0, 0, [])
    assert first["chunks"] == mem.count() > 8
    assert {e.kind.value for e in mem.entries()} == {"document"}
    _catalog_matches_entries(mem)

    # unchanged files: nothing is written at all (no entry, vector, audit row, generation or catalog row)
    before = _snapshot(mem)
    again = ingest(mem, [docs], wing="docs")
    assert (again["added"], again["updated"], again["removed"], again["chunks"], again["unchanged"]) == (0, 0, 0, 0, 8)
    after = _snapshot(mem)
    assert after[:4] == before[:4] and len(after[4]) == len(before[4]) + 1  # only the run itself is recorded

    # a touched but unchanged file: not re-chunked, its new stat remembered
    touched = sorted(docs.iterdir())[0]
    ids = sorted(e.id for e in mem.entries())
    os.utime(touched, ns=(time.time_ns(), time.time_ns() + 10**9))
    out = ingest(mem, [docs], wing="docs")
    assert (out["updated"], out["unchanged"]) == (0, 8) and sorted(e.id for e in mem.entries()) == ids
    assert storage.get_source(mem, "docs", str(touched)).mtime_ns == touched.stat().st_mtime_ns

    # an edit replaces exactly that file's chunks, in one transaction (one generation bump)
    by_source = _by_source(mem)
    target = str(sorted(docs.iterdir())[2])
    with open(target, "a", encoding="utf-8") as fh:
        fh.write("\n\n## Appendix added later\n\nA brand new closing paragraph about zebra migration.\n")
    gen = mem.generations(["docs"])["docs"]
    out = ingest(mem, [docs], wing="docs")
    assert (out["added"], out["updated"], out["unchanged"], out["removed"]) == (0, 1, 7, 0)
    now = _by_source(mem)
    for src, entries in by_source.items():
        if src != target:
            assert sorted(e.id for e in now[src]) == sorted(e.id for e in entries)
    assert any("zebra migration" in e.text for e in now[target])
    assert not {e.id for e in by_source[target]} & {e.id for e in now[target]}
    assert mem.generations(["docs"])["docs"] == gen + 1
    row = next(a for a in mem.audit(limit=5) if a["action"] == "ingest")
    assert row["detail"]["source"] == target and row["detail"]["removed"] == len(by_source[target])
    hits = mem.search("zebra migration appendix", active_wing="docs", use_cache=False).results
    assert hits and hits[0].entry.meta["source"] == target
    _catalog_matches_entries(mem)

    # a deleted file loses its chunks and its catalog row when the folder is ingested again
    victim = sorted(docs.iterdir())[1]
    n, total = len(now[str(victim)]), mem.count()
    victim.unlink()
    out = ingest(mem, [docs], wing="docs")
    assert (out["removed"], out["unchanged"]) == (1, 7)
    assert mem.count() == total - n and str(victim) not in _by_source(mem)
    assert storage.get_source(mem, "docs", str(victim)) is None
    assert next(a for a in mem.audit(limit=5) if a["action"] == "ingest_remove")["detail"] == {"source": str(victim),
                                                                                                "removed": n}
    _catalog_matches_entries(mem)


def test_a_failed_write_leaves_the_old_chunks(backend_mem, tmp_path, monkeypatch):
    """The replacement of a source is all or nothing: a failure inside the write transaction keeps the old chunks."""
    mem = backend_mem
    docs = tmp_path / "docs"
    readmes(docs, limit=8)
    ingest(mem, [docs], wing="docs")
    before = _snapshot(mem)
    target = sorted(docs.iterdir())[3]
    target.write_text(target.read_text(encoding="utf-8") + "\n\n## More\n\nAnother paragraph.\n", encoding="utf-8")
    store = type(mem.store)
    real = store._link_source

    def broken(self, conn, source_id, entry_ids):
        real(self, conn, source_id, entry_ids)
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "_link_source", broken)
    with pytest.raises(Exception, match="disk full"):
        ingest(mem, [docs], wing="docs")
    monkeypatch.setattr(store, "_link_source", real)
    assert _snapshot(mem)[:4] == before[:4]
    out = ingest(mem, [docs], wing="docs")
    assert out["updated"] == 1
    _catalog_matches_entries(mem)


def test_code_index_status_and_relevant_code(backend_mem, tmp_path, monkeypatch):
    mem = backend_mem
    ws = code_workspace(tmp_path / "ws", ("json",))
    first = index(mem, ws, wing="proj")
    assert first["added"] >= 4 and {e.kind.value for e in mem.entries("proj")} == {"code"}
    again = index(mem, ws, wing="proj")
    assert (again["added"], again["updated"], again["removed"], again["chunks"]) == (0, 0, 0, 0)

    st = index_status(mem)
    ix = st["indexes"][0]
    assert (ix["wing"], ix["workspace"], ix["files"], ix["stale_files"]) == ("proj", str(ws), first["added"], 0)
    assert st["last_run"]["status"] == "ok" and st["chunks"] == mem.count()
    assert storage.code_indexes(mem, ["proj"])[0]["indexed_at"] == st["indexes"][0]["indexed_at"]
    assert storage.code_indexes(mem, ["other"]) == []

    monkeypatch.setattr(recall, "MIN_SCORE", -1.0)  # the hashing embedder's similarities are low: gate mechanics only
    query = "def py_scanstring s end strict BACKSLASH STRINGCHUNK match chunks content terminator"
    text = mem.context(query, active_wing="proj")
    assert "## Relevant code" in text and "json/decoder.py:" in text
    assert storage.code_recalls(mem, 10)[0]["served"] >= 1  # logged for `index status`'s hit rate
    assert index_status(mem)["code_hit_rate"] == 1.0

    # the file edited since it was indexed: its chunk is stale, never served; re-indexing serves the new code
    decoder = ws / "json" / "decoder.py"
    decoder.write_text(decoder.read_text().replace("def py_scanstring(", "def py_scanstring_renamed("))
    bundle = mem.search(query, active_wing="proj", use_cache=False)
    assert ("code_stale", "stale") in {(d.stage, d.reason) for d in bundle.trace.dropped}  # by the search itself
    assert not any("def py_scanstring(" in r.entry.text for r in bundle.results)
    text = recall.render_with_code(mem, bundle)
    assert "py_scanstring_renamed" not in text
    (ws / "json" / "tool.py").unlink()
    out = index(mem, ws, wing="proj")
    assert (out["added"], out["updated"], out["removed"]) == (0, 1, 1)
    assert "py_scanstring_renamed" in mem.context(query, active_wing="proj")
    assert not any(e.meta["path"] == "json/tool.py" for e in mem.entries("proj"))
    _catalog_matches_entries(mem)


@pytest.fixture(params=["sqlite", "postgresql"])
def real_backend_mem(request, tmp_path, settings, real_embedder):
    """``backend_mem`` with the real model."""
    from memlens import Memory
    from tests.pg_fixture import pg_memory

    if request.param == "sqlite":
        with Memory.open(tmp_path / "store" / "memlens.db", settings=settings, embedder=real_embedder) as mem:
            yield mem
        return
    mem = pg_memory(request.getfixturevalue("pg_uri"), settings, real_embedder)
    try:
        yield mem
    finally:
        mem.close()


@pytest.mark.model
def test_context_recalls_code_by_meaning(real_backend_mem, tmp_path):
    mem = real_backend_mem
    ws = code_workspace(tmp_path / "ws", ("json",))
    index(mem, ws, wing="proj")
    text = mem.context("where is a JSON string with backslash escapes scanned and decoded", active_wing="proj")
    section = text.split("## Relevant code", 1)[1]
    assert "json/decoder.py:" in section and "(score " in section


def test_copy_carries_the_catalog_both_ways(backend_mem, tmp_path, pg_uri):
    """SQLite -> PostgreSQL -> SQLite (or PostgreSQL -> SQLite -> PostgreSQL): the copy knows what was ingested, so
    ingesting the same folder into it changes nothing."""
    from memlens import Memory
    from memlens.store.postgres.copy import copy_store
    from tests.pg_fixture import pg_memory

    mem = backend_mem
    docs = tmp_path / "docs"
    readmes(docs, limit=8)
    ingest(mem, [docs], wing="docs")
    ws = code_workspace(tmp_path / "ws", ("json",))
    index(mem, ws, wing="proj")
    want = _snapshot(mem)
    src = mem.store.uri if mem.store.backend == "postgresql" else mem.path
    other = tmp_path / "copy.db" if mem.store.backend == "postgresql" else pg_uri
    counts = copy_store(src, other)
    assert counts["sources"] == len(want[3]) and counts["ingest_runs"] == len(want[4])
    assert counts["source_entries"] == mem.count()
    settings, embedder = mem.settings, mem.embedder
    copied = pg_memory(other, settings, embedder) if isinstance(other, str) else Memory.open(other, settings=settings,
                                                                                              embedder=embedder)
    try:
        got = _snapshot(copied)
        assert got[0] == want[0] and got[2:] == want[2:]
        out = ingest(copied, [docs], wing="docs")
        assert (out["added"], out["updated"], out["removed"], out["unchanged"]) == (0, 0, 0, 8)
        later = index(copied, ws, wing="proj")  # new ids continue after the copied ones
        assert later["unchanged"] > 0 and storage.runs(copied, limit=1)[0]["id"] > want[4][0]["id"]
    finally:
        copied.close()


def test_cli_ingest_index_and_context_on_postgresql(pg_uri, tmp_path):
    """The commands that refused a PostgreSQL store now run on one (real model, in a fresh process): ingest, index,
    index status, and context with the code it recalls."""
    docs = tmp_path / "docs"
    readmes(docs, limit=3)
    ws = code_workspace(tmp_path / "ws", ("json",))
    r = run_cli("--store", pg_uri, "ingest", str(docs), "--wing", "docs", "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["added"] == 3
    r = run_cli("--store", pg_uri, "index", str(ws), "--wing", "proj", "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    added = json.loads(r.stdout)["added"]
    r = run_cli("--store", pg_uri, "index", "status", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["files"] == added and st["indexes"][0]["workspace"] == str(ws)
    r = run_cli("--store", pg_uri, "ingest", str(docs), "--wing", "docs", "--json", timeout=600)
    assert r.returncode == 0 and json.loads(r.stdout)["unchanged"] == 3
    r = run_cli("--store", pg_uri, "context", "where is a JSON string with backslash escapes scanned and decoded",
                "--active-wing", "proj", "--workspace", str(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr
    assert "json/decoder.py:" in r.stdout.split("## Relevant code", 1)[1]


KILLED = r"""
import sys
from memlens import Memory
from memlens.embed import HashEmbedder
from memlens.ingest import ingest, pipeline
pipeline.BATCH_FILES = 3
mem = Memory.open(sys.argv[1], embedder=HashEmbedder())  # a file or a postgresql:// URI
def progress(ev):
    if ev["stage"] == "written":
        print("written", flush=True)
        import time; time.sleep(0.3)
ingest(mem, [sys.argv[2]], wing="docs", progress=progress)
print("finished", flush=True)
"""


def test_sigkill_mid_ingest_leaves_whole_sources_and_the_next_run_completes(backend_mem, tmp_path):
    import shutil
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    mem = backend_mem
    docs = tmp_path / "docs"
    for i, name in enumerate(readmes(docs, limit=8)):  # more files: several batches to kill between
        shutil.copy(docs / name, docs / f"copy{i}-{name}")
    target = mem.store.uri if mem.store.backend == "postgresql" else str(mem.path)
    proc = subprocess.Popen([sys.executable, "-c", KILLED, target, str(docs)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "written"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    total = len(list(docs.iterdir()))
    done = len(storage.all_sources(mem))
    assert 0 < done < total  # killed part way
    _catalog_matches_entries(mem)  # each source whole: never half old, half new
    out = ingest(mem, [docs], wing="docs")
    assert (out["added"], out["unchanged"]) == (total - done, done)
    _catalog_matches_entries(mem)


def test_watch_reindexes_a_saved_file(backend_mem, tmp_path):
    from memlens.ingest.watch import Watcher

    mem = backend_mem
    ws = code_workspace(tmp_path / "ws", ("json",))
    index(mem, ws, wing="proj")
    with Watcher(mem, str(ws), "proj", debounce_ms=50):
        time.sleep(0.5)  # let the watcher start
        (ws / "json" / "fresh.py").write_text("def zebra_stripes():\n    return 'freshly saved'\n")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("zebra_stripes" in e.text for e in mem.entries("proj")):
            time.sleep(0.1)
    assert any("zebra_stripes" in e.text for e in mem.entries("proj"))
    _catalog_matches_entries(mem)
