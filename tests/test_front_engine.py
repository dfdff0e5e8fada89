"""The engine calls the front ends share: browsing (memlens.browse), retrieval statistics
(memlens.stats) and the demo memory (memlens.demo). Real SQLite + sqlite-vec store; the
hashing embedder is enough here (no ranking is checked)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from memlens import browse, demo
from memlens.errors import NotFoundError, StoreError
from memlens.stats import percentile, retrieval_stats


def test_find_matches_id_or_title_case_insensitively_in_id_order(mem):
    a = mem.add("alpha text", wing="w", title="Callback rules")
    b = mem.add("beta text", wing="w", title="other")
    c = mem.add("gamma text", wing="v", title="more CALLBACK notes")
    found = browse.find(mem, "callback")
    assert [e.id for e in found] == sorted([a.id, c.id])
    assert browse.find(mem, b.id[-6:])[0].id == b.id
    assert browse.find(mem, "callback", limit=1) == found[:1]
    assert browse.find(mem, "nothing like this") == []


def test_entry_info_reports_freshness_and_who_overrides(mem):
    old = mem.add("the old rule", wing="w", title="old")
    new = mem.add("the new rule", wing="w", title="new", overrides=old.id)
    info = browse.entry_info(mem, old.id)
    assert info["entry"].id == old.id and info["fresh"] is True
    assert info["overridden_by"] == [new.id]
    assert info["model"] == info["store_model"] == mem.model_id
    assert browse.entry_info(mem, new.id)["overridden_by"] == []
    with pytest.raises(NotFoundError):
        browse.entry_info(mem, "no-such-id")


def test_known_names_lists_entries_tasks_blockers_and_profiles(mem):
    e = mem.add("x", wing="w")
    mem.tasks.complete("T-1", "do the thing")
    mem.tasks.block("T-2", "waiting on review")
    known = browse.known_names(mem)
    assert known["entry_ids"] == [e.id]
    assert known["task_ids"] == ["T-1", "T-2"] and known["blocked_ids"] == ["T-2"]
    assert "memory" in known["profiles"]


def test_check_store_file_refuses_what_is_not_a_store(tmp_path, mem):
    browse.check_store_file(tmp_path / "missing.db")  # created on open: fine
    browse.check_store_file(mem.path)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a memlens store"):
        browse.check_store_file(other)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database\n" * 300)
    with pytest.raises(StoreError):
        browse.check_store_file(junk)


def test_retrieval_stats_splits_hits_from_misses():
    rows = [
        {"cache_hit": False, "latency_ms": {"embed": 4.0, "total": 10.0}},
        {"cache_hit": False, "latency_ms": {"embed": 2.0, "total": 6.0}},
        {"cache_hit": False, "latency_ms": {"embed": 8.0, "total": 20.0}},
        {"cache_hit": True, "latency_ms": {"total": 0.5}},
    ]
    s = retrieval_stats(rows)
    assert s["retrievals"] == 4 and s["cache_hits"] == 1 and s["cache_hit_rate"] == 0.25
    assert s["stages"]["embed"] == {"p50": 4.0, "p95": 8.0}
    assert s["stages"]["total"] == {"p50": 10.0, "p95": 20.0}
    assert s["stages"]["vector"] == {"p50": 0.0, "p95": 0.0}
    assert s["cache_hit_total"] == {"p50": 0.5, "p95": 0.5}
    assert retrieval_stats([])["cache_hit_rate"] == 0.0
    assert percentile([], 0.5) == 0.0 and percentile([3.0, 1.0, 2.0], 0.5) == 2.0


def test_demo_loads_entries_and_tasks_once(mem):
    assert demo.demo_file().is_file() and demo.demo_tasks_file().is_file()
    report = demo.load(mem)
    assert report["imported"] == mem.count() > 0
    assert not mem.tasks.is_empty()
    assert demo.load_tasks(mem) is None  # the working memory is no longer empty


def test_demo_loads_in_a_fresh_process(tmp_path):
    """Nothing else imported first: the demo's task history must load on its own (import order is part of it)."""
    code = (
        "import sys\n"
        "from memlens import Memory, demo\n"
        "from memlens.embed import HashEmbedder\n"
        "with Memory.open(sys.argv[1], embedder=HashEmbedder()) as mem:\n"
        "    tasks = demo.load_tasks(mem)\n"
        "    print(tasks['tasks_imported'] > 0, mem.count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.db")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "0"]
