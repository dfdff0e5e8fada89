"""Replay, golden queries, the impact preview, the access log and freshness: the same on each backend.

Every test runs on a new SQLite file and on a new database of the session's embedded PostgreSQL server
(``backend_mem`` in tests/pg_fixture.py, or ``backend_demo`` below: the demo memory, real model, copied into
either backend with ``memlens copy``'s engine).
"""

from __future__ import annotations

import io
import json
import shutil

import pytest

from memlens.errors import ValidationError
from memlens.replay import access, freshness, golden, impact, storage
from memlens.replay.replay import replay
from tests.conftest import run_cli

pytest.importorskip("psycopg")

QUERIES = [
    ("callbacks blocking executor", None),
    ("lifecycle node state transitions", None),
    ("python packaging virtual environment", "python"),
    ("testing with pytest fixtures", "python"),
    ("ROS 2 parameters declared at startup", "ros2"),
    ("how to log messages", None),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_demo(request, demo_store, tmp_path, settings, real_embedder):
    """The demo memory (real model) on each backend."""
    from memlens import Memory

    if request.param == "sqlite":
        target = tmp_path / "demo.db"
        shutil.copy(demo_store, target)
    else:
        from memlens.store.postgres.copy import copy_store

        target = request.getfixturevalue("pg_uri")
        copy_store(demo_store, target)
    with Memory.open(target, settings=settings, embedder=real_embedder) as m:
        yield m


def _target(mem) -> str:
    return mem.store.uri if mem.store.backend == "postgresql" else str(mem.path)


def _written(mem) -> tuple:
    """Everything a write could change, read through the engine: entries with vectors, the audit (its size and
    newest rows), generations, golden queries, the retrieval log; the rows this process's stores still hold in
    their log spools written first."""
    from memlens.store import logspool

    logspool.drain_all()
    out = io.StringIO()
    mem.export_jsonl(out, with_vectors=True)
    audit = mem.audit(limit=100_000)
    return (out.getvalue(), len(audit), audit[:5], mem.generations(), storage.golden_list(mem),
            [(r["seq"], r["hits"]) for r in storage.logged(mem)])


def _seed(mem, text: str, wing: str = "w", **kw):
    return mem.add(text, wing=wing, **kw)


# -- with the real model ------------------------------------------------------------------------------


@pytest.mark.model
def test_replay_after_a_deprecation_reports_the_changed_queries(backend_demo):
    mem = backend_demo
    logged = {q: [r.entry.id for r in mem.search(q, active_wing=w, k=5).results] for q, w in QUERIES}
    target = next(r.entry.id for r in mem.search(QUERIES[0][0], k=5, use_cache=False).results
                  if "mandatory" not in r.flags)
    mem.set_status(target, "deprecated")
    report = replay(mem, last=len(QUERIES))
    assert len(storage.logged(mem)) == len(QUERIES) + 1  # the replay added nothing to the log it read
    fresh = {q: [r.entry.id for r in mem.search(q, active_wing=w, k=5, use_cache=False).results] for q, w in QUERIES}
    expected = {q for q in logged if fresh[q] != logged[q]}
    assert QUERIES[0][0] in expected
    assert {q["query"] for q in report["queries"] if q["changed"]} == expected
    for q in report["queries"]:
        assert q["left"] == [i for i in logged[q["query"]] if i not in fresh[q["query"]]]
        if target in logged[q["query"]]:
            assert target in q["left"] and q["why"][target].startswith("deprecated")
    assert report["summary"]["replayed"] == len(QUERIES) and report["summary"]["changed"] == len(expected)


@pytest.mark.model
def test_golden_fails_after_deprecation_and_passes_after_restore(backend_demo):
    mem = backend_demo
    q = "callbacks must never block the executor"
    top = mem.search(q, k=3, use_cache=False).results[0].entry.id
    g = golden.add(mem, q, top, within=3)
    assert [x["id"] for x in golden.listing(mem)] == [g["id"]] and golden.check(mem)["failed"] == 0
    mem.set_status(top, "deprecated")
    (c,) = golden.check(mem)["checks"]
    assert not c["ok"] and c["stage"] == "status" and "deprecated" in c["why"]
    mem.set_status(top, "active")
    assert golden.check(mem)["passed"] == 1
    with pytest.raises(ValidationError, match="already expects"):
        golden.add(mem, q, top, within=3)
    golden.remove(mem, g["id"])
    assert golden.listing(mem) == []


@pytest.mark.model
def test_impact_preview_writes_nothing(backend_demo):
    mem = backend_demo
    for q, wing in QUERIES:
        mem.search(q, active_wing=wing, k=5)
    target = next(r.entry.id for r in mem.search(QUERIES[0][0], k=5, use_cache=False).results
                  if "mandatory" not in r.flags)
    golden.add(mem, QUERIES[0][0], target, within=5)
    before = _written(mem)
    report = impact.preview(mem, lambda m: m.set_status(target, "deprecated"))
    assert _written(mem) == before and mem.get(target).status.value == "active"
    assert [c["expect"] for c in report["golden"]] == [target] and report["golden"][0]["was_ok"]
    changed = {q["query"]: q for q in report["queries"]}
    assert target in changed[QUERIES[0][0]]["left"]
    gone = impact.preview(mem, lambda m: m.delete(target))
    assert _written(mem) == before and gone["golden"][0]["stage"] == "deleted"
    mem.set_status(target, "deprecated")  # the same write for real: the fingerprint sees it
    assert _written(mem) != before


@pytest.mark.model
def test_replay_golden_access_stats_and_dry_run_on_the_cli_with_postgres(pg_uri, demo_store):
    from memlens.store.postgres.copy import copy_store

    copy_store(demo_store, pg_uri)
    q = "single threaded executor default"
    found = run_cli("--store", pg_uri, "search", q, "-k", "3", "--json")
    assert found.returncode == 0, found.stderr
    top = json.loads(found.stdout)["results"][0]["id"]
    assert run_cli("--store", pg_uri, "golden", "add", q, "--expect", top, "--within", "3").returncode == 0
    dry = run_cli("--store", pg_uri, "deprecate", top, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    preview = json.loads(dry.stdout)
    assert preview["written"] is False and [g["expect"] for g in preview["golden"]] == [top]
    assert run_cli("--store", pg_uri, "golden", "check").returncode == 0  # the dry run changed nothing
    assert run_cli("--store", pg_uri, "deprecate", top).returncode == 0
    bad = run_cli("--store", pg_uri, "golden", "check", "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["failed"] == 1 and top in bad.stderr
    rep = run_cli("--store", pg_uri, "replay", "--json")
    assert rep.returncode == 0, rep.stderr
    (row,) = json.loads(rep.stdout)["queries"]
    assert row["query"] == q and top in row["left"]
    acc = run_cli("--store", pg_uri, "access", top, "--json")
    assert acc.returncode == 0, acc.stderr
    assert [a["client"] for a in json.loads(acc.stdout)["accesses"]] == ["cli"]
    stats = run_cli("--store", pg_uri, "stats", "--json")
    assert stats.returncode == 0 and json.loads(stats.stdout)["stale_vectors"] == 0, stats.stderr


# -- mechanics, with the deterministic embedder -------------------------------------------------------


def test_each_retrieval_logs_its_replay_row_in_the_same_transaction(backend_mem):
    mem = backend_mem
    for t in ("alpha beta gamma", "beta delta", "gamma epsilon"):
        _seed(mem, t)
    b = mem.search("alpha gamma", active_wing="w", k=2, budget=500)
    mem.search("beta", use_cache=False)
    rows = storage.logged(mem)
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in mem.retrievals(10))
    assert rows[0]["request"]["query"] == "alpha gamma" and rows[0]["request"]["k"] == 2
    assert [h["id"] for h in rows[0]["hits"]] == [r.entry.id for r in b.results]
    assert [r["request"]["query"] for r in storage.logged(mem, query="beta")] == ["beta"]


def test_replay_rows_are_pruned_with_their_audit_rows(backend_mem):
    from memlens.store import retention

    mem = backend_mem
    _seed(mem, "alpha beta")
    for _ in range(5):
        mem.search("alpha", use_cache=False)
    if mem.store.backend == "postgresql":
        from memlens.store.postgres.store import _Qmark

        with mem.store.connection() as conn:
            retention.prune_retrievals(_Qmark(conn), 2, 90)
    else:
        mem.store.settle_log()  # the searches' rows, handed to the log spool, written before pruning
        retention.prune_retrievals(mem.conn, 2, 90)
    kept = sorted(r["seq"] for r in mem.retrievals(10))
    assert len(kept) == 2 and [r["seq"] for r in storage.logged(mem)] == kept


def test_the_access_log_lists_retrievals_by_client_rank_and_context(backend_mem):
    mem = backend_mem
    e = _seed(mem, "alpha beta", type="invariant")
    other = _seed(mem, "gamma delta")
    never = _seed(mem, "epsilon zeta")
    first = {r.entry.id for r in mem.search("alpha", active_wing="w", k=1, client="claude-code 1.2 (mcp)").results}
    mem.context("gamma delta", active_wing="w", k=1)
    second = {r.entry.id for r in mem.search("gamma delta", active_wing="w", k=1).results}  # the context's (cached)
    acc = access.entry_access(mem, e.id)
    assert [(a["client"], a["in_context"]) for a in acc["accesses"]] == [
        ("api", False), ("api", True), ("claude-code 1.2 (mcp)", False)]  # newest first
    assert all(a["rank"] >= 1 and a["query"] in ("alpha", "gamma delta") for a in acc["accesses"])
    assert acc["freshness"]["fresh"] is True
    assert [a["query"] for a in access.entry_access(mem, other.id)["accesses"]][0] == "gamma delta"
    cov = access.coverage(mem)  # the oracle: what each search returned
    assert {x["id"] for x in cov["always"]} == first & second and e.id in first & second
    assert {x["id"] for x in cov["never"]} == {e.id, other.id, never.id} - first - second


def test_a_preview_runs_the_write_and_rolls_it_back(backend_mem):
    mem = backend_mem
    a = _seed(mem, "alpha beta")
    _seed(mem, "alpha gamma")
    mem.search("alpha", active_wing="w", k=2)
    golden.add(mem, "alpha", a.id, within=2)
    before = _written(mem)
    report = impact.preview(mem, lambda m: m.delete(a.id))
    assert report["written"] is False and report["golden"][0]["stage"] == "deleted"
    assert report["queries"][0]["left"] == [a.id]
    with pytest.raises(ValidationError):  # a change the engine refuses: still nothing written
        impact.preview(mem, lambda m: m.set_status(a.id, "no-such-status"))
    with pytest.raises(ZeroDivisionError):  # a change that fails after it wrote: rolled back too
        impact.preview(mem, lambda m: (m.add("written, then the change fails", wing="w"), 1 / 0))
    assert _written(mem) == before
    mem.delete(a.id)  # afterwards the store takes writes again (the preview let go of the write lock)
    assert _written(mem) != before


def test_a_write_that_fails_inside_a_preview_is_undone_on_its_own(backend_mem):
    """Inside a preview, a failed write leaves nothing behind for the rest of the preview either."""
    mem = backend_mem
    _seed(mem, "alpha beta")
    before = _written(mem)
    with mem.store.rolled_back() as held:
        audits = held.audit_count()
        with pytest.raises(RuntimeError, match="fails after writing"), held.write() as w:
            w.audit("edit", "no-such-entry", "w", None, {"text": "half done"})
            raise RuntimeError("the write fails after writing")
        assert held.audit_count() == audits  # undone at once, not only when the preview ends
        with held.write() as w:  # a later write of the same preview still works
            w.audit("edit", "no-such-entry", "w", None, {"text": "whole"})
        assert held.audit_count() == audits + 1
    assert _written(mem) == before


def test_stale_vectors_after_a_model_change_are_counted_and_reembedded(backend_mem, settings):
    from memlens import Memory
    from memlens.embed import HashEmbedder

    mem = backend_mem
    ids = [_seed(mem, t).id for t in ("alpha beta", "gamma delta", "epsilon zeta")]
    assert freshness.stale_count(mem) == 0
    other = HashEmbedder()
    other.model_id = "another-model"
    with Memory.open(_target(mem), settings=settings, embedder=other) as m:
        assert freshness.stale_count(m) == 0  # the store's model is still the one its vectors were made by
        report = freshness.reembed(m)
        assert report == {"stale": 3, "reembedded": 3, "model": "another-model"}
        assert m.model_id == "another-model" and freshness.stale_count(m) == 0
        fresh = freshness.hit_freshness(m, ids)
        assert set(fresh) == set(ids) and all(f["fresh"] for f in fresh.values())
        assert [a["action"] for a in m.audit(limit=1)] == ["reembed"]
    with Memory.open(_target(mem), settings=settings, embedder=HashEmbedder()) as m:
        assert m.model_id == "another-model"  # recorded in the store
        assert freshness.stale_count(m) == 0
        fresh = freshness.hit_freshness(m, ids[:1])[ids[0]]
        assert fresh["model"] == "another-model" and fresh["fresh"] is True
    # the stats' count: vectors of another model than the store's
    if mem.store.backend == "postgresql":
        with mem.store.connection() as conn:
            conn.execute("UPDATE entries SET model = 'old-model' WHERE id = ANY(%s)", (ids[:2],))
    else:
        mem.conn.execute(f"UPDATE entries SET model = 'old-model' WHERE id IN ('{ids[0]}', '{ids[1]}')")
    with Memory.open(_target(mem), settings=settings, embedder=other) as m:
        assert freshness.stale_count(m) == 2


def test_copy_carries_golden_queries_and_the_replay_log_both_ways(tmp_path, settings, hash_embedder, pg_uri):
    from memlens import Memory
    from memlens.store.postgres.copy import copy_store

    src, back = tmp_path / "a.db", tmp_path / "b.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        a = _seed(mem, "alpha beta")
        _seed(mem, "gamma delta")
        mem.search("alpha", active_wing="w")
        golden.add(mem, "alpha", a.id, within=3)
        golden.add(mem, "alpha beta", a.id, active_wing="w", within=5)
        expected = (golden.listing(mem), storage.logged(mem))
    counts = copy_store(src, pg_uri)
    assert counts["golden"] == 2 and counts["retrieval_log"] == 1
    with Memory.open(pg_uri, settings=settings, embedder=hash_embedder) as pg:
        assert (golden.listing(pg), storage.logged(pg)) == expected
        assert golden.check(pg)["passed"] == 2
    copy_store(pg_uri, back)
    with Memory.open(back, settings=settings, embedder=hash_embedder) as mem:
        assert (golden.listing(mem), storage.logged(mem)) == expected
    with Memory.open(pg_uri, settings=settings, embedder=hash_embedder) as pg:  # ids continue past the copied ones
        assert golden.add(pg, "delta", a.id)["id"] == max(g["id"] for g in expected[0]) + 1


def test_the_app_shows_golden_status_access_freshness_and_previews(backend_mem, settings, hash_embedder):
    from memlens import Memory
    from memlens.tui.service import Lens

    mem = backend_mem
    a = _seed(mem, "alpha beta")
    _seed(mem, "alpha gamma")
    mem.search("alpha", active_wing="w", k=2)
    golden.add(mem, "alpha", a.id, within=2)
    mem.store.settle_log()  # the app below opens a store of its own: this one's waiting log row written first
    lens = Lens(_target(mem), lambda: Memory.open(_target(mem), settings=settings, embedder=hash_embedder))
    try:
        health = lens.health()
        assert health["golden"]["passed"] == 1 and health["stale"] == 0
        assert [x["query"] for x in lens.entry_access(a.id)] == ["alpha"]
        hits = lens.search("alpha").results  # each hit says whether its vector is fresh
        assert hits and all(r.vector is not None and r.vector["fresh"] for r in hits)
        before = _written(mem)
        preview = lens.preview(a.id, "status", {"status": "deprecated"})
        assert [g["expect"] for g in preview["golden"]] == [a.id] and preview["queries"][0]["left"] == [a.id]
        assert _written(mem) == before
    finally:
        lens.close()
