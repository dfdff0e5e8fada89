"""The lexical generator beside the query's embedding (``memlens.retrieval.beside``): in a long-lived process (the
in-process index warm) it runs on the process's worker thread while the query is embedded, with the same answer;
anywhere else, or when the worker is busy, on the search's own thread as before. (The question sets rank the same
with the index warm and with every read made in SQL: tests/test_speed_parity.py, real model.)"""

from __future__ import annotations

import os
import threading
import time

import pytest

from memlens.errors import StoreError
from memlens.retrieval import beside
from memlens.store.scope import Scope

TEXTS = [
    ("Streams emit data in chunks and pause when the buffer is full.", "docs"),
    ("Buffers hold raw bytes outside the heap.", "docs"),
    ("The event loop runs callbacks once the stack is empty.", "docs"),
    ("Worker threads share memory through SharedArrayBuffer.", "runtime"),
    ("Child processes talk over pipes and streams.", "runtime"),
]
QUERIES = ["streams and buffers", "how do callbacks run on the event loop", "share memory between threads"]


@pytest.fixture
def warm(mem):
    for text, wing in TEXTS:
        mem.add(text, wing=wing)
    assert mem.warm_index(text=True) == len(TEXTS)
    return mem


def _lexical_threads(mem, monkeypatch) -> list[str]:
    """The names of the threads the store's lexical generator runs on, from now on."""
    seen: list[str] = []
    real = mem.store.lexical

    def spy(*args, **kwargs):
        seen.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(mem.store, "lexical", spy)
    return seen


def _ranked(bundle):
    return [(r.entry.id, r.score, r.components.bm25, r.components.bm25_rank) for r in bundle.results]


def test_with_the_index_warm_the_lexical_generator_runs_beside_the_embedding_with_the_same_answer(warm, monkeypatch):
    threads = _lexical_threads(warm, monkeypatch)
    beside_bundles = [warm.search(q, use_cache=False) for q in QUERIES]
    assert threads == ["memlens-beside"] * len(QUERIES)
    monkeypatch.setattr(warm.store, "lexical_beside", lambda scope: False)
    inline = [warm.search(q, use_cache=False) for q in QUERIES]
    assert threads[len(QUERIES):] == [threading.current_thread().name] * len(QUERIES)
    assert [_ranked(b) for b in beside_bundles] == [_ranked(b) for b in inline]
    assert any(r.components.bm25 for b in inline for r in b.results)  # the text matches count in both
    for a, b in zip(beside_bundles, inline):
        assert a.trace.fusion["lexical_terms"] == b.trace.fusion["lexical_terms"]
        assert a.trace.candidates == b.trace.candidates


def test_without_the_index_warm_or_inside_a_transaction_it_runs_on_the_search_s_thread(mem, monkeypatch):
    for text, wing in TEXTS:
        mem.add(text, wing=wing)
    threads = _lexical_threads(mem, monkeypatch)
    mem.search(QUERIES[0], use_cache=False)  # a fresh process: sqlite-vec and FTS5, nothing held
    mem.warm_index()
    conn = mem.store.conn
    conn.execute("BEGIN")  # what this thread's connection sees, another's would not
    try:
        assert not mem.store.lexical_beside(Scope())
        mem.search(QUERIES[0], use_cache=False)
    finally:
        conn.execute("ROLLBACK")
    assert threads == [threading.current_thread().name] * 2


def test_a_busy_worker_is_not_waited_for(warm, monkeypatch):
    threads = _lexical_threads(warm, monkeypatch)
    started, release = threading.Event(), threading.Event()
    busy = beside.submit(lambda: (started.set(), release.wait(30)))  # another search's job, still running
    assert busy is not None and started.wait(10)
    try:
        warm.search(QUERIES[0], use_cache=False)
        assert beside.submit(lambda: None) is None
    finally:
        release.set()
    busy.result(10)
    assert threads == [threading.current_thread().name]
    warm.search(QUERIES[1], use_cache=False)  # free again
    assert threads[-1] == "memlens-beside"


def test_an_error_of_the_lexical_generator_reaches_the_search(warm, monkeypatch):
    def broken(*_args, **_kwargs):
        raise StoreError("store is damaged (test)")

    monkeypatch.setattr(warm.store, "lexical", broken)
    with pytest.raises(StoreError, match="damaged"):
        warm.search(QUERIES[0], use_cache=False)
    monkeypatch.undo()
    assert warm.search(QUERIES[0], use_cache=False).results  # the worker goes on


def test_its_time_counts_once_in_the_lexical_stage_and_within_the_total(warm, monkeypatch):
    real = warm.store.lexical

    def slow(*args, **kwargs):
        time.sleep(0.05)  # longer than the embedding: the search waits for it
        return real(*args, **kwargs)

    monkeypatch.setattr(warm.store, "lexical", slow)
    lat = warm.search(QUERIES[0], use_cache=False).trace.latency_ms
    assert 50.0 <= lat["lexical"] <= lat["total"]
    assert sum(v for k, v in lat.items() if k != "total") <= lat["total"]


def test_a_store_in_memory_ranks_its_text_itself(settings, hash_embedder, monkeypatch):
    """Another connection to ``:memory:`` is another, empty database: never beside."""
    from memlens import Memory

    with Memory.open(":memory:", settings=settings, embedder=hash_embedder) as mem:
        for text, wing in TEXTS:
            mem.add(text, wing=wing)
        mem.warm_index(text=True)
        threads = _lexical_threads(mem, monkeypatch)
        b = mem.search(QUERIES[0], use_cache=False)
    assert threads == [threading.current_thread().name]
    assert b.trace.candidates["lexical"] > 0


def test_a_wing_another_process_wrote_is_read_once_by_the_knn_not_by_both_threads(warm, store_path, monkeypatch):
    from memlens.store import db
    from memlens.store.speed import vindex

    warm.search(QUERIES[0], use_cache=False)
    other = db.connect(store_path, create=False)  # another process's write: the wing's block is stale here
    try:
        other.execute("UPDATE wings SET generation = generation + 1 WHERE wing = 'docs'")
        other.commit()
    finally:
        other.close()
    reads: list[str] = []
    real = vindex._read_wing

    def spy(*args, **kwargs):
        reads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(vindex, "_read_wing", spy)
    threads = _lexical_threads(warm, monkeypatch)
    warm.search(QUERIES[0], use_cache=False)
    assert reads == [threading.current_thread().name] and threads == [threading.current_thread().name]
    warm.search(QUERIES[0], use_cache=False)  # held again: beside
    assert threads[-1] == "memlens-beside" and len(reads) == 1


def test_a_store_dropped_unclosed_is_not_kept_by_the_worker(store_path, settings, hash_embedder):
    import gc
    import weakref

    from memlens import Memory

    mem = Memory.open(store_path, settings=settings, embedder=hash_embedder)
    for text, wing in TEXTS:
        mem.add(text, wing=wing)
    mem.warm_index(text=True)
    mem.search(QUERIES[0], use_cache=False)  # beside: the worker ran a job over this store
    gone = weakref.ref(mem.store)
    del mem
    gc.collect()
    assert gone() is None


def test_a_worker_that_cannot_start_leaves_the_job_to_the_caller(monkeypatch):
    worker = beside._Worker()

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    assert worker.submit(lambda: 1) is None
    monkeypatch.undo()
    job = worker.submit(lambda: 2)  # a later try starts it
    assert job is not None and job.result(10) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_a_worker_of_its_own():
    assert beside.submit(lambda: None).result(10) is None  # the parent's worker is started
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is not there; a job still runs
        code = 1
        try:
            job = beside.submit(lambda: os.getpid())
            code = 0 if job is not None and job.result(10) == os.getpid() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
