"""The retrieval log written off the search's path (``memlens.store.logspool``): rows reach the file without anyone
reading them, in the order the process made them, before its next write, at close and at exit, and a busy store
delays them rather than loses them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memlens.store import db, logspool

from .concurrency import fork_while_held


def _on_disk(path: Path) -> tuple[int, int]:
    """(retrieval audit rows, retrieval_log rows) as another connection (another process) sees them."""
    conn = db.connect(path, create=False)
    try:
        audit = conn.execute("SELECT count(*) FROM audit WHERE action = 'retrieval'").fetchone()[0]
        return int(audit), int(conn.execute("SELECT count(*) FROM retrieval_log").fetchone()[0])
    finally:
        conn.close()


def _until(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_rows_reach_the_file_without_a_read_and_the_writer_thread_ends(mem, store_path):
    mem.add("Streams emit data in chunks.", wing="docs")
    for q in ("streams", "chunks", "data"):
        mem.search(q, use_cache=False)
    assert _until(lambda: _on_disk(store_path) == (3, 3))  # no read, no close: the spool's thread wrote them
    assert _until(lambda: mem.store._spool._thread is None, timeout=logspool.IDLE + 10)  # idle: it ended
    mem.search("streams again", use_cache=False)  # and starts again with the next row
    assert _until(lambda: _on_disk(store_path) == (4, 4))


def test_a_search_comes_before_the_same_process_s_next_write(mem, monkeypatch):
    monkeypatch.setattr(logspool, "DELAY", 60.0)  # the row waits: only the write can put it first
    mem.add("Buffers hold bytes.", wing="docs")
    mem.search("buffers", use_cache=False)
    mem.add("Sockets carry bytes.", wing="docs")
    actions = [r["action"] for r in reversed(mem.audit(limit=10))]
    assert actions[-3:] == ["add", "retrieval", "add"]


def test_the_process_reads_its_own_rows_at_once(mem, monkeypatch):
    monkeypatch.setattr(logspool, "DELAY", 60.0)
    mem.add("Timers run callbacks later.", wing="docs")
    b = mem.search("timers", use_cache=False)
    rows = mem.retrievals(10)
    assert [r["result_ids"] for r in rows] == [[r.entry.id for r in b.results]]
    seq, _detail = mem.store.last_retrieval()  # what `ask` links its answer to
    assert seq == rows[0]["seq"]


def test_close_writes_the_waiting_rows(store_path, settings, hash_embedder, monkeypatch):
    from memlens import Memory

    monkeypatch.setattr(logspool, "DELAY", 60.0)
    mem = Memory.open(store_path, settings=settings, embedder=hash_embedder)
    mem.add("Paths join segments.", wing="docs")
    mem.search("paths", use_cache=False)
    mem.search("segments", use_cache=False)
    assert _on_disk(store_path) == (0, 0)  # still waiting
    mem.close()
    assert _on_disk(store_path) == (2, 2)
    assert mem.store._spool._thread is None  # its writer thread ended with it


def test_a_process_that_exits_without_closing_writes_its_rows(store_path):
    script = textwrap.dedent(f"""
        from memlens import Memory
        from memlens.embed import HashEmbedder
        from memlens.store import logspool
        logspool.DELAY = 600.0  # nothing written by the thread: only the exit can write it
        mem = Memory.open({str(store_path)!r}, embedder=HashEmbedder())
        mem.add("Workers share memory.", wing="docs")
        mem.search("workers", use_cache=False)
        mem.search("memory", use_cache=False)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _on_disk(store_path) == (2, 2)


def test_a_busy_store_delays_the_rows_and_loses_none(mem, store_path, monkeypatch):
    monkeypatch.setattr(logspool, "DELAY", 0.05)  # the writer thread tries while the lock is still held
    mem.add("Clusters fork workers.", wing="docs")
    mem.store.settle_log()
    other = db.connect(store_path, create=False)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock for a moment
        t = time.perf_counter()
        b = mem.search("clusters", use_cache=False)
        assert b.results and time.perf_counter() - t < 1.0  # the search does not wait for the lock
        time.sleep(0.5)  # longer than a search would ever wait (50 ms): the spool's thread waits on
        other.execute("COMMIT")
    finally:
        other.close()
    assert _until(lambda: _on_disk(store_path) == (1, 1))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_neither_writes_its_parent_s_rows_nor_waits_for_its_drain(mem, store_path, monkeypatch):
    """A forked child's spool starts empty and free: the rows waiting at the fork are the parent's (the child would
    log them a second time), and a drain a thread of the parent had under way would hold its lock for ever there."""
    monkeypatch.setattr(logspool, "DELAY", 60.0)
    mem.add("Children inherit memory.", wing="docs")
    mem.search("children", use_cache=False)  # waiting in the spool
    spool = mem.store._spool

    def child() -> bool:
        done = threading.Thread(target=logspool.drain_all, daemon=True)  # what a child's exit runs
        done.start()
        done.join(10)
        return not done.is_alive() and not spool._pending

    assert fork_while_held(lambda: spool._writing, child) == 0  # a drain under way in the parent at the fork
    mem.store.settle_log()
    assert _on_disk(store_path) == (1, 1)  # the parent's row, once


def test_rows_a_busy_store_kept_from_a_write_s_drain_wait_and_are_written_later(mem, store_path, monkeypatch):
    """Before a write, this process's waiting rows are written first, waiting 50 ms for the lock: when another
    process holds it longer, they wait again (then come after the write) instead of being lost."""
    monkeypatch.setattr(logspool, "DELAY", 60.0)  # only the drains below write them
    mem.add("Pipes connect streams.", wing="docs")
    mem.search("pipes", use_cache=False)
    gave_up = threading.Event()
    write_logged = mem.store.write_logged

    def watched(rows, *, patient=False):
        done = write_logged(rows, patient=patient)
        if not done:
            gave_up.set()
        return done

    monkeypatch.setattr(mem.store, "write_logged", watched)
    other = db.connect(store_path, create=False)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock longer than the drain waits
        added = threading.Thread(target=lambda: mem.add("Sockets connect hosts.", wing="docs"))
        added.start()
        assert gave_up.wait(10)  # the add's drain gave up; the add itself waits for the lock
        other.execute("COMMIT")
    finally:
        other.close()
    added.join(30)
    assert not added.is_alive()
    assert _on_disk(store_path) == (0, 0)  # not written yet: waiting again, not lost
    mem.store.settle_log()
    assert _on_disk(store_path) == (1, 1)
    actions = [r["action"] for r in reversed(mem.audit(limit=10))]
    assert actions[-3:] == ["add", "add", "retrieval"]  # after the write it waited for


def test_rows_committed_before_a_failed_prune_are_not_written_again(mem, store_path, monkeypatch):
    """The retention prune runs after the rows' commit: its failing for want of the lock leaves them written once."""
    from memlens.store import retention

    monkeypatch.setattr(logspool, "DELAY", 60.0)

    def busy(*_args):
        raise db.driver().OperationalError("database is locked")

    monkeypatch.setattr(retention, "prune_retrievals", busy)
    mem.add("Streams pipe data.", wing="docs")
    mem.search("streams", use_cache=False)
    mem.store._pruned = False  # the first batch of a process prunes
    mem.store.settle_log()
    mem.store.settle_log()
    assert _on_disk(store_path) == (1, 1)


def test_close_and_exit_wait_for_a_busy_store_to_write_the_waiting_rows(store_path, settings, hash_embedder,
                                                                       monkeypatch):
    """A store closing, or a process exiting with a store never closed, writes its waiting rows even while another
    process holds the write lock for a moment: it waits as a write would."""
    from memlens import Memory

    monkeypatch.setattr(logspool, "DELAY", 60.0)
    mem = Memory.open(store_path, settings=settings, embedder=hash_embedder)
    mem.add("Signals interrupt processes.", wing="docs")
    mem.search("signals", use_cache=False)
    with _locked_for_a_moment(store_path):
        mem.close()
    assert _on_disk(store_path) == (1, 1)

    script = textwrap.dedent(f"""
        import sys
        from memlens import Memory
        from memlens.embed import HashEmbedder
        from memlens.store import logspool
        logspool.DELAY = 600.0  # nothing written by the thread: only the exit can write it
        mem = Memory.open({str(store_path)!r}, embedder=HashEmbedder())
        mem.search("signals", use_cache=False)
        print("searched", flush=True)
        sys.stdin.readline()  # the store is locked now: exit
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "searched"
        with _locked_for_a_moment(store_path):
            child.stdin.write("exit\n")
            child.stdin.flush()
            time.sleep(0.2)  # the child's exit meets the lock
        assert child.wait(60) == 0
    finally:
        child.kill()
    assert _on_disk(store_path) == (2, 2)


@contextmanager
def _locked_for_a_moment(path: Path, seconds: float = 0.5) -> Iterator[None]:
    """Another connection holds the store's write lock from the start of the block until ``seconds`` after it."""
    held = threading.Event()

    def other_process() -> None:
        other = db.connect(path, create=False)
        try:
            other.execute("BEGIN IMMEDIATE")
            held.set()
            time.sleep(seconds)
            other.execute("COMMIT")
        finally:
            other.close()

    thread = threading.Thread(target=other_process)
    thread.start()
    assert held.wait(10)
    try:
        yield
    finally:
        thread.join(30)
