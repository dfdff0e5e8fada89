"""The lexical stage on a worker thread while the query is embedded: same results, truthful trace, errors unchanged."""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import datetime, timezone

import pytest

from memlens.errors import StoreError
from memlens.retrieval import lexical_job
from memlens.store.sqlite_reads import SqliteReads
from memlens.trace import STAGES

from .conftest import bounded

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
QUERIES = ("how are parameters declared in a node", "executor threads and callbacks", "logging to a file", "zzz")


@pytest.fixture
def filled(mem):
    for i, (text, wing, type_, key) in enumerate([
        ("Parameters are declared in on_configure, never in the constructor.", "ros", "decision", "params"),
        ("Parameters are declared in the constructor.", "web", "decision", "params"),
        ("Callbacks run on a single-threaded executor; long work goes to a worker thread.", "ros", "invariant", None),
        ("Nodes should run on a multi-threaded executor.", "_global", "decision", None),
        ("Log to a rotating file under /var/log, one file per node.", "ros", "pattern", None),
        ("A note about coffee, callbacks and parameters.", "_global", "note", None),
    ]):
        mem.add(text, wing=wing, type=type_, key=key, title=f"entry {i}")
    for i in range(30):
        mem.add(f"Filler note {i} about parameters, executors and files number {i}.", wing="web", room=f"r{i % 3}")
    return mem


def _search(mem, q, on, monkeypatch, **kw):
    monkeypatch.setattr(mem.settings.search, "lexical_alongside_embed", on)
    return mem.search(q, use_cache=False, now=NOW, **kw)


def _comparable(bundle):
    d = bundle.to_dict()
    d["trace"].pop("latency_ms")
    d["trace"].pop("concurrent")
    return d


def _worker_threads_seen(monkeypatch):
    seen: list[str] = []
    real = SqliteReads.lexical

    def spy(self, *a, **kw):
        seen.append(threading.current_thread().name)
        return real(self, *a, **kw)

    monkeypatch.setattr(SqliteReads, "lexical", spy)
    return seen


@pytest.mark.parametrize("index", ["sqlite-vec", "memory"])
def test_results_and_trace_are_the_same_with_the_worker_on_and_off(filled, monkeypatch, index):
    if index == "memory":
        filled.warm_index()
    seen = _worker_threads_seen(monkeypatch)
    for q in QUERIES:
        for kw in ({}, {"active_wing": "ros"}, {"wings": ["web"], "k": 3}):
            on, off = _search(filled, q, True, monkeypatch, **kw), _search(filled, q, False, monkeypatch, **kw)
            assert _comparable(on) == _comparable(off), (q, kw)
            assert on.trace.concurrent and not off.trace.concurrent
            assert on.trace.fusion["vector_index"] == index
    assert seen[0].startswith("memlens-lexical") and seen[1] == threading.current_thread().name


@pytest.mark.model
def test_same_results_on_the_demo_with_the_real_model(demo_mem, monkeypatch):
    for q in ("how should nodes run their executor", "parameters", "what is the logging policy"):
        on, off = _search(demo_mem, q, True, monkeypatch), _search(demo_mem, q, False, monkeypatch)
        assert on.results and _comparable(on) == _comparable(off), q
        assert on.trace.concurrent["lexical"]["alongside"] == ["embed", "vector"]


def test_the_trace_says_the_stage_ran_alongside_and_keeps_every_timing(filled, monkeypatch):
    b = _search(filled, "parameters declared", True, monkeypatch)
    lat = b.trace.latency_ms
    assert list(lat) == list(STAGES)
    assert lat["lexical"] > 0 and lat["embed"] > 0 and lat["total"] > 0
    info = b.trace.concurrent["lexical"]
    assert info["alongside"] == ["embed", "vector"] and info["waited_ms"] >= 0
    assert "concurrent" in b.to_dict()["trace"]
    off = _search(filled, "parameters declared", False, monkeypatch)
    assert off.trace.concurrent == {} and list(off.trace.latency_ms) == list(STAGES)


def test_the_worker_reads_through_its_own_connection(filled, monkeypatch):
    conns: list[tuple[str, int]] = []
    real = SqliteReads.lexical

    def spy(self, *a, **kw):
        conns.append((threading.current_thread().name, id(self.conn)))
        return real(self, *a, **kw)

    monkeypatch.setattr(SqliteReads, "lexical", spy)
    _search(filled, "parameters declared", True, monkeypatch)
    (name, conn), = conns
    assert name.startswith("memlens-lexical") and conn != id(filled.store.conn)


def test_an_error_in_the_worker_reaches_the_caller_unchanged(filled, monkeypatch):
    boom = StoreError("the text index is unreadable")
    threads: list[str] = []

    def broken(self, *a, **kw):
        threads.append(threading.current_thread().name)
        raise boom

    monkeypatch.setattr(SqliteReads, "lexical", broken)
    for on in (True, False):
        with pytest.raises(StoreError) as got:
            bounded(lambda on=on: _search(filled, "parameters declared", on, monkeypatch))
        assert got.value is boom
    assert threads[0].startswith("memlens-lexical") and not threads[1].startswith("memlens-lexical")


def test_an_error_before_the_join_waits_for_the_worker(filled, monkeypatch):
    finished = threading.Event()
    real = SqliteReads.lexical

    def slow(self, *a, **kw):
        time.sleep(0.2)
        try:
            return real(self, *a, **kw)
        finally:
            finished.set()

    def failing_embed(texts):
        raise RuntimeError("the model broke")

    monkeypatch.setattr(SqliteReads, "lexical", slow)
    monkeypatch.setattr(filled, "embed", failing_embed)
    with pytest.raises(RuntimeError, match="the model broke"):
        bounded(lambda: _search(filled, "parameters declared", True, monkeypatch))
    assert finished.is_set()  # the search returned only once its worker was done


def test_off_by_default():
    from memlens.config import SearchConfig

    assert SearchConfig().lexical_alongside_embed is False


def test_a_cache_hit_starts_no_worker(filled, monkeypatch):
    monkeypatch.setattr(filled.settings.search, "lexical_alongside_embed", True)
    started: list[str] = []
    real = lexical_job.start
    monkeypatch.setattr(lexical_job, "start", lambda *a: started.append("x") or real(*a))
    first = filled.search("parameters declared", now=NOW)
    again = filled.search("parameters declared", now=NOW)
    assert not first.trace.cache_hit and again.trace.cache_hit
    assert started == ["x"]
    assert first.trace.concurrent and again.trace.concurrent == {}  # the cached answer ran no stage alongside another


def test_no_worker_inside_a_transaction_or_for_a_listing(filled, monkeypatch):
    seen = _worker_threads_seen(monkeypatch)
    conn = filled.store.conn
    conn.execute("BEGIN")
    try:
        b = _search(filled, "parameters declared", True, monkeypatch)
    finally:
        conn.execute("ROLLBACK")
    assert b.trace.concurrent == {} and seen == [threading.current_thread().name]
    listing = _search(filled, "type=decision", True, monkeypatch)
    assert listing.trace.concurrent == {} and listing.results


def test_every_worker_busy_runs_the_stage_inline(filled, monkeypatch):
    taken = 0
    try:
        while lexical_job._slots.acquire(blocking=False):
            taken += 1
        assert taken == lexical_job.WORKERS
        b = _search(filled, "parameters declared", True, monkeypatch)
    finally:
        for _ in range(taken):
            lexical_job._slots.release()
    assert b.trace.concurrent == {} and b.results
    assert _search(filled, "parameters declared", True, monkeypatch).trace.concurrent  # slots back: the worker again


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_its_own_workers(filled, store_path, settings, monkeypatch):
    from memlens import Memory
    from memlens.embed import HashEmbedder

    assert _search(filled, "parameters declared", True, monkeypatch).trace.concurrent  # the parent's pool is running
    pid = os.fork()
    if pid == 0:  # the child: none of the parent's threads; a search must still run its worker and finish
        code = 1
        try:
            settings.search.lexical_alongside_embed = True  # the child's own copy of the settings
            with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as child:
                b = child.search("parameters declared", use_cache=False, now=NOW)
                code = 0 if b.results and b.trace.concurrent else 2
        finally:
            sys.stdout.flush()
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's search hung")
    assert os.waitstatus_to_exitcode(status) == 0
