"""Retention of retrieval records: bounded by count and by age; the write history is never pruned."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from memlens import Memory
from memlens.config import load_settings
from memlens.errors import MemlensError
from memlens.models import format_ts, utcnow
from memlens.store import retention
from tests.conftest import run_cli


def counts(mem: Memory) -> dict[str, int]:
    return dict(mem.conn.execute("SELECT action, count(*) FROM audit GROUP BY action").fetchall())


def test_retrievals_are_pruned_by_count_and_writes_are_kept(store_path, hash_embedder):
    settings = load_settings(audit={"retrieval_max_rows": 5})
    with Memory.open(store_path, settings=settings, embedder=hash_embedder) as mem:
        for i in range(3):
            mem.add(f"Callbacks must not block ({i}).", wing="w")
        for i in range(2 * retention.EVERY + 10):
            mem.search(f"callbacks {i}", active_wing="w", use_cache=False)
        c = counts(mem)
        assert c["add"] == 3
        # pruned on the first log and whenever a row's seq is a multiple of EVERY: never more than the bound plus one period
        assert 5 <= c["retrieval"] <= 5 + retention.EVERY
        newest = mem.retrievals(limit=1)[0]
        assert newest["query"] == f"callbacks {2 * retention.EVERY + 9}"
    # a new process (one CLI search) prunes on its first log
    with Memory.open(store_path, settings=settings, embedder=hash_embedder) as mem:
        mem.search("callbacks again", active_wing="w", use_cache=False)
        c = counts(mem)
        assert c == {"add": 3, "retrieval": 5}
        # the log keeps its format: what stats --retrievals and the metrics screen read
        rows = mem.retrievals()
        assert [r["query"] for r in rows][0] == "callbacks again"
        assert all({"latency_ms", "cache_hit", "result_ids", "query_hash"} <= set(r) for r in rows)


def test_retrievals_are_pruned_by_age_and_old_writes_are_kept(store_path, hash_embedder):
    settings = load_settings(audit={"retrieval_max_age_days": 30})
    with Memory.open(store_path, settings=settings, embedder=hash_embedder) as mem:
        e = mem.add("Callbacks must not block.", wing="w")
        old = format_ts(utcnow() - timedelta(days=200))
        recent = format_ts(utcnow() - timedelta(days=10))
        conn = mem.conn
        # an old write and old / recent retrievals, as a long-used store holds them
        conn.execute("UPDATE audit SET ts = ? WHERE entry_id = ?", (old, e.id))
        detail = json.dumps({"query": "x", "latency_ms": {"total": 1.0}, "cache_hit": False})
        for ts in (old, old, recent):
            conn.execute("INSERT INTO audit(ts, action, detail) VALUES (?, 'retrieval', ?)", (ts, detail))
    with Memory.open(store_path, settings=settings, embedder=hash_embedder) as mem:
        mem.search("callbacks", active_wing="w", use_cache=False)
        rows = mem.conn.execute("SELECT action, ts FROM audit ORDER BY seq").fetchall()
        assert rows[0] == ("add", old)  # the write history stays complete, however old
        assert [ts for a, ts in rows if a == "retrieval"][0] == recent
        assert counts(mem) == {"add": 1, "retrieval": 2}


@pytest.mark.model
def test_stats_retrievals_reads_the_pruned_log(demo_store, tmp_path):
    import shutil

    store = tmp_path / "demo.db"
    shutil.copy(demo_store, store)
    env = {"MEMLENS_AUDIT__RETRIEVAL_MAX_ROWS": "2"}
    for q in ("callbacks", "typing", "launch files"):
        assert run_cli("--store", str(store), "search", q, env=env, timeout=120).returncode == 0
    p = run_cli("--store", str(store), "stats", "--retrievals", "--json", env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["retrievals"] == 2


@pytest.mark.parametrize("setting", [{"retrieval_max_rows": 0}, {"retrieval_max_rows": -3},
                                     {"retrieval_max_age_days": 0}, {"retrieval_max_age_days": 10**6}])
def test_retention_settings_are_bounded(setting):
    with pytest.raises(MemlensError, match="audit.retrieval_max"):
        load_settings(audit=setting)
