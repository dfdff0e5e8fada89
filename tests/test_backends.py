"""The engine's behaviour, the same on each backend: SQLite + sqlite-vec, and PostgreSQL + pgvector.

Every test runs twice through ``backend_mem`` (tests/pg_fixture.py): on a new
SQLite file and on a new database of the session's embedded PostgreSQL server.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from memlens.errors import NotFoundError, StaleUpdateError, ValidationError
from tests.concurrency import run_threads
from tests.conftest import REPO

pytest.importorskip("psycopg")

BACKEND_TRACE = {
    "sqlite": ("sqlite-vec", "fts5-bm25"),
    "postgresql": ("pgvector-exact", "pg-bm25"),
}


def _backend(mem) -> str:
    return mem.store.backend


def test_writes_and_their_audit(backend_mem):
    mem = backend_mem
    e = mem.add("Deploys go through the release branch", wing="ops", type="invariant")
    assert mem.get(e.id).text == e.text
    changed = mem.update(e.id, text="Deploys go only through the release branch")
    with pytest.raises(StaleUpdateError):
        mem.update(e.id, expected_updated_at=e.created_at, title="late edit")
    mem.set_status(e.id, "under_review")
    mem.delete(e.id)
    with pytest.raises(NotFoundError):
        mem.get(e.id)
    history = mem.audit(e.id)
    assert [h["action"] for h in history] == ["delete", "update", "update", "add"]
    assert history[2]["after"]["text"] == changed.text and history[2]["detail"] == {"reembedded": True}
    assert mem.count() == 0 and mem.generations()["ops"] == 4


def test_search_policy_and_trace(backend_mem):
    mem = backend_mem
    inv = mem.add("Never force-push to the main branch", wing="ops", type="invariant")
    note = mem.add("The deploy script lives in tools/deploy.sh and pushes the release branch", wing="ops")
    old = mem.add("Deploys used to go through the staging branch", wing="ops")
    mem.set_status(old.id, "deprecated")
    mem.add("Release notes are written by the release manager", wing="docs")
    bundle = mem.search("deploy script release branch", active_wing="ops", k=5)
    ids = [r.entry.id for r in bundle.results]
    assert note.id in ids and old.id not in ids  # deprecated entries stay out by default
    assert inv.id in ids  # the active wing's invariants are always included
    assert all(r.entry.wing in ("ops", "_global") for r in bundle.results)
    index, lexical = BACKEND_TRACE[_backend(mem)]
    assert bundle.trace.fusion["vector_index"] == index and bundle.trace.fusion["lexical"] == lexical
    everywhere = mem.search("release", k=10)
    assert {r.entry.wing for r in everywhere.results} == {"ops", "docs"}
    assert mem.explain("deploy script release branch", note.id, active_wing="ops")


def test_context_is_the_same_text_on_both_backends(backend_mem):
    """`memlens context` / the MCP context tool: working memory then the budgeted memory, on either store."""
    mem = backend_mem
    inv = mem.add("Never force-push to the main branch", wing="ops", type="invariant")
    note = mem.add("The deploy script lives in tools/deploy.sh", wing="ops")
    text = mem.context("deploy script", active_wing="ops", budget=500)
    assert inv.id in text and note.id in text
    assert "Relevant code" not in text  # no code index in this store


def test_working_memory(backend_mem):
    tasks = backend_mem.tasks
    tasks.complete("t-1", "ship the copy command", validation_report={"tests": "green"})
    tasks.block("t-2", "waiting for review")
    with pytest.raises(Exception, match="already blocked"):
        tasks.block("t-2", "again")
    window = tasks.window()
    assert [t.task_id for t in window.tasks] == ["t-1"] and [b.task_id for b in window.blockers] == ["t-2"]
    tasks.complete("t-2", "reviewed")  # completing a blocked task resolves its blocker
    assert tasks.blockers() == [] and [t.task_id for t in tasks.recent()] == ["t-1", "t-2"]
    assert "ship the copy command" in tasks.render()


def test_export_import_round_trip(backend_mem, tmp_path):
    mem = backend_mem
    mem.add("Café au lait: unicode survives", wing="_global", key="coffee", meta={"n": 1})
    mem.add("An invariant of the api", wing="api", room="http", type="invariant")
    first = io.StringIO()
    assert mem.export_jsonl(first, with_vectors=True) == 2
    source = tmp_path / "export.jsonl"
    source.write_text(first.getvalue(), encoding="utf-8")
    # into a second store of the same backend: delete both, import, export again
    for e in list(mem.entries()):
        mem.delete(e.id)
    report = mem.import_jsonl(source)
    assert report["imported"] == 2 and report["embedded"] == 0
    again = io.StringIO()
    mem.export_jsonl(again, with_vectors=True)
    assert again.getvalue() == first.getvalue()


OTHER_PROCESS = r"""
import sys
from memlens.config import load_settings
from memlens.embed import HashEmbedder
from memlens import Memory
target, texts = sys.argv[1], sys.argv[2:]
mem = Memory.open(target, settings=load_settings(), embedder=HashEmbedder())  # a file or a postgresql:// URI
for text in texts:
    print(mem.add(text, wing="ops").id)
mem.close()
"""


def _target(mem) -> str:
    return mem.store.uri if _backend(mem) == "postgresql" else str(mem.path)


def test_an_import_of_stored_ids_names_the_first_such_line(backend_mem, tmp_path):
    mem = backend_mem
    for eid in ("aaa", "zzz"):
        mem.add(f"entry {eid}", wing="w", id=eid)
    path = tmp_path / "f.jsonl"
    path.write_text("".join(json.dumps({"id": eid, "wing": "w", "text": f"again {eid}"}) + "\n" for eid in ("new", "zzz", "aaa")))
    with pytest.raises(ValidationError, match="line 2: field 'id': 'zzz' already exists in the store"):
        mem.import_jsonl(path)  # not 'aaa' on line 3, which comes first in the index
    assert mem.count() == 2


def test_a_write_in_another_process_invalidates_the_cache(backend_mem):
    mem = backend_mem
    mem.add("The on-call rotation changes every Monday", wing="ops")
    first = mem.search("on-call rotation pager", active_wing="ops")
    assert mem.search("on-call rotation pager", active_wing="ops").trace.cache_hit
    text = "The on-call pager is handed over on Monday"
    out = subprocess.run([sys.executable, "-c", OTHER_PROCESS, _target(mem), text], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    new_id = out.stdout.strip().splitlines()[-1]
    after = mem.search("on-call rotation pager", active_wing="ops")
    why = after.trace.cache.invalidated_by
    assert not after.trace.cache_hit and why is not None and why["entry_id"] == new_id and why["action"] == "add"
    assert new_id in [r.entry.id for r in after.results] and new_id not in [r.entry.id for r in first.results]


def test_concurrent_writers_in_threads_lose_nothing(backend_mem):
    mem = backend_mem
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(15):
                mem.add(f"thread {k} wrote entry number {i}", wing=f"w{k % 2}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    run_threads(writer, 4)
    assert errors == []
    assert mem.count() == 60 and sum(mem.generations(["w0", "w1"]).values()) == 60
    assert len({a["entry_id"] for a in mem.audit(limit=100)}) == 60
    assert json.dumps(mem.stats()["per_wing"], sort_keys=True) == json.dumps({"w0": 30, "w1": 30}, sort_keys=True)


def test_add_unique_reports_the_same_content_and_near_duplicates(backend_mem):
    mem = backend_mem
    first = mem.add("The deploy script lives in tools/deploy.sh and pushes the release branch", wing="ops")
    mem.add("Lunch is at noon in the big room", wing="ops")
    mem.add("The deploy script lives in tools/deploy.sh and pushes the release branch", wing="docs")  # another wing
    again, created, similar = mem.add_unique(first.text, wing="ops")
    assert not created and again.id == first.id and similar == []
    near, created, similar = mem.add_unique("The deploy script lives in tools/deploy.sh and pushes the release branch now",
                                            wing="ops")
    assert created and near.id != first.id
    assert [s["id"] for s in similar] == [first.id]  # only the near one of the same wing, never the new entry itself
    assert similar[0]["similarity"] >= 0.8 and similar[0]["title"] == first.title and similar[0]["status"] == "active"


def test_browse_lookups(backend_mem):
    from memlens import browse

    mem = backend_mem
    old = mem.add("Deploys used to go through staging", wing="ops", title="Old Deploy Path")
    new = mem.add("Deploys go through the release branch", wing="ops", title="Deploy path", overrides=old.id)
    assert [e.id for e in browse.find(mem, "deploy path")] == sorted([old.id, new.id])  # either case
    info = browse.entry_info(mem, old.id)
    assert info["fresh"] and info["overridden_by"] == [new.id] and info["model"] == mem.model_id
    names = browse.known_names(mem)
    assert names["entry_ids"] == sorted([old.id, new.id])


def test_answer_log(backend_mem):
    from memlens.assist import log

    mem = backend_mem
    e = mem.add("The on-call rotation changes every Monday", wing="ops")
    bundle = mem.search("on-call rotation", active_wing="ops")
    seq = log.last_retrieval_seq(mem, bundle.trace.query)
    assert seq is not None and seq == mem.retrievals(1)[0]["seq"]
    answer_id, why = log.record(mem, question="who is on call?", model="m", complete=True, error=None, retrieval_seq=seq,
                                bundle=bundle, cited=[e.id], invented=["nope"])
    assert why is None and answer_id is not None
    [row] = log.answers(mem)
    assert row["id"] == answer_id and row["citations"] == [e.id] and row["invented_citations"] == ["nope"]
    assert row["retrieval_seq"] == seq and row["retrieval"]["sent_ids"] == [r.entry.id for r in bundle.results]
    assert log.cited_entries(mem) == [{"entry_id": e.id, "cited": 1, "last": row["ts"], "title": e.title, "answers": 1}]


def test_settings_keep_a_postgres_uri_as_it_is(tmp_path):
    from memlens.config import Settings

    uri = "postgresql://ann:secret@db.example:5432/memory?sslmode=require"
    assert Settings(store=uri).store_path() == uri
    assert Settings(store=str(tmp_path / "m.db")).store_path() == tmp_path / "m.db"


def test_several_writer_processes_lose_nothing(backend_mem):
    mem = backend_mem
    procs = [subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, _target(mem),
                               *(f"process {k} wrote note number {i}" for i in range(12))],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(3)]
    ids = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        ids += out.split()
    assert len(set(ids)) == 36 and mem.count() == 36 and mem.generations(["ops"])["ops"] == 36
    assert sorted(e.id for e in mem.entries()) == sorted(ids)
