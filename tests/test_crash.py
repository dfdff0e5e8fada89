"""A writer killed with SIGKILL mid-import leaves a consistent store: all or nothing."""

import base64
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from memlens import Memory
from memlens.embed import HashEmbedder
from memlens.store import db

IMPORTER = """
import sys
from memlens import Memory
from memlens.embed import HashEmbedder
with Memory.open(sys.argv[1], embedder=HashEmbedder()) as mem:
    mem.import_jsonl(sys.argv[2])
print("committed", flush=True)
"""

N = 30_000


def _big_file(path):
    rng = np.random.default_rng(7)
    with path.open("w") as fh:
        for i in range(N):
            v = rng.standard_normal(384).astype("<f4")
            v /= np.linalg.norm(v)
            rec = {"id": f"e{i}", "wing": f"w{i % 10}", "text": f"entry number {i} about topic {i % 97}",
                   "model": "hash-bow-384", "vector": base64.b64encode(v.tobytes()).decode()}
            fh.write(json.dumps(rec) + "\n")


def test_sigkill_mid_import_leaves_store_consistent(tmp_path, settings):
    store = tmp_path / "s.db"
    with Memory.open(store, settings=settings, embedder=HashEmbedder()) as mem:
        mem.add("survivor", wing="w0", id="keep")
    src = tmp_path / "big.jsonl"
    _big_file(src)
    wal = store.with_name(store.name + "-wal")
    base = wal.stat().st_size if wal.exists() else 0
    proc = subprocess.Popen([sys.executable, "-c", IMPORTER, str(store), str(src)], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        # wait until the importer is inside its write transaction (the WAL grows), then kill it
        while time.monotonic() < deadline and proc.poll() is None:
            if wal.exists() and wal.stat().st_size > base + 4_000_000:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "importer finished before it could be killed; make the file bigger"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL

    conn = db.connect(store, create=False)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        n_entries = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
        n_vec = conn.execute("SELECT count(*) FROM entries_vec").fetchone()[0]
        n_fts = conn.execute("SELECT count(*) FROM entries_fts").fetchone()[0]
        n_audit = conn.execute("SELECT count(*) FROM audit").fetchone()[0]
    finally:
        conn.close()
    assert (n_entries, n_vec, n_fts, n_audit) == (1, 1, 1, 1), "nothing of the killed import may remain"

    # the store is usable afterwards and the same import now succeeds
    with Memory.open(store, settings=settings, embedder=HashEmbedder()) as mem:
        assert mem.get("keep").text == "survivor"
        report = mem.import_jsonl(src)
        assert report["imported"] == N and mem.count() == N + 1


# -- killed at any moment: all or nothing, and nothing left once the next import ran ------------

def _vector_file(path, n, prefix):
    rng = np.random.default_rng(len(prefix))
    with path.open("w") as fh:
        for i in range(n):
            v = rng.standard_normal(384).astype("<f4")
            v /= np.linalg.norm(v)
            fh.write(json.dumps({"id": f"{prefix}{i}", "wing": f"w{i % 5}", "text": f"{prefix} entry {i}",
                                 "model": "hash-bow-384", "vector": base64.b64encode(v.tobytes()).decode()}) + "\n")
    return path


def _raw_counts(store):
    conn = db.connect(store, create=False)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        q = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "entries": q("SELECT count(*) FROM entries"),
            "vec": q("SELECT count(*) FROM entries_vec"),
            "fts": q("SELECT count(*) FROM entries_fts"),
            "staged": q("SELECT count(*) FROM entries WHERE import_id IN (SELECT id FROM imports)"),
            "imports": q("SELECT count(*) FROM imports"),
            "staged_audit": q("SELECT count(*) FROM audit WHERE import_id IN (SELECT id FROM imports)"),
        }
    finally:
        conn.close()


def _visible(store, settings):
    with Memory.open(store, settings=settings, embedder=HashEmbedder()) as mem:
        return {e.id for e in mem.entries()}


def _scratch_dirs(tmpdir, pid=None):
    return sorted(p.name for p in tmpdir.glob(f"memlens-import-{pid or ''}*"))


def _wait_for_staged_rows(store, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _raw_counts(store)["staged"] > 0:
                return True
        except Exception:  # the store is being written: try again
            pass
        time.sleep(0.05)
    return False


def test_sigkill_at_random_moments_all_or_nothing_and_the_next_import_leaves_nothing(tmp_path, settings):
    import random

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    store = tmp_path / "s.db"
    with Memory.open(store, settings=settings, embedder=HashEmbedder()) as mem:
        mem.add("survivor", wing="w0", id="keep")
    expected = {"keep"}
    n = 4000
    rng = random.Random(1234)
    delays = ["staging", rng.uniform(0.0, 2.0), rng.uniform(1.0, 6.0), rng.uniform(2.0, 10.0)]
    for round_, delay in enumerate(delays):
        src = _vector_file(tmp_path / f"f{round_}.jsonl", n, f"r{round_}-")
        proc = subprocess.Popen([sys.executable, "-c", IMPORTER, str(store), str(src)], stdout=subprocess.PIPE,
                                text=True, env=env)
        try:
            if delay == "staging":  # one kill certainly lands between staging transactions
                assert _wait_for_staged_rows(store, proc), "the importer never staged rows"
                assert _scratch_dirs(tmpdir, proc.pid), "the importer's scratch directory should exist"
            else:
                try:
                    proc.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
        ids = _visible(store, settings)
        mine = {f"r{round_}-{i}" for i in range(n)}
        assert ids in (expected, expected | mine), "a reader saw part of an import"
        expected = ids
        # the next import removes what the killed one left: staged rows and scratch files
        nxt = _vector_file(tmp_path / f"n{round_}.jsonl", 1, f"next{round_}-")
        done = subprocess.run([sys.executable, "-c", IMPORTER, str(store), str(nxt)], capture_output=True, text=True,
                              env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        expected = expected | {f"next{round_}-0"}
        assert _visible(store, settings) == expected
        counts = _raw_counts(store)
        assert counts == {"entries": len(expected), "vec": len(expected), "fts": len(expected), "staged": 0,
                          "imports": 0, "staged_audit": 0}
        assert _scratch_dirs(tmpdir) == []


@pytest.mark.parametrize("from_stdin", [False, True])
def test_sigterm_during_a_cli_import_removes_scratch_files_and_staged_rows(tmp_path, settings, from_stdin):
    from .conftest import MEMLENS

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    store = tmp_path / "s.db"
    with Memory.open(store, settings=settings, embedder=HashEmbedder()) as mem:
        mem.add("survivor", wing="w0", id="keep")
    src = _vector_file(tmp_path / "f.jsonl", 20_000, "t-")
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    args = [MEMLENS, "--store", str(store), "import", "-" if from_stdin else str(src)]
    with src.open("rb") as stdin:
        proc = subprocess.Popen(args, stdin=stdin if from_stdin else subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=env)
        try:
            assert _wait_for_staged_rows(store, proc), "the import never staged rows"
            dirs = _scratch_dirs(tmpdir, proc.pid)
            assert dirs
            if from_stdin:
                assert (tmpdir / dirs[0] / "input.jsonl").exists(), "stdin is spooled into the scratch directory"
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert proc.returncode == 143 and "interrupted" in err  # 128 + SIGTERM
    assert _scratch_dirs(tmpdir) == []
    assert _raw_counts(store) == {"entries": 1, "vec": 1, "fts": 1, "staged": 0, "imports": 0, "staged_audit": 0}
    assert _visible(store, settings) == {"keep"}


def test_scratch_sweep_keeps_live_and_recent_files_and_removes_the_rest(tmp_path, monkeypatch):
    import tempfile

    from memlens.store import staging

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=60).stdout.strip()
    (tmp_path / f"memlens-import-{dead}-abc").mkdir()
    (tmp_path / f"memlens-import-{dead}-abc" / "vectors.npy").write_bytes(b"x" * 1000)
    (tmp_path / f"memlens-import-{os.getpid()}-live").mkdir()  # this process: alive
    old_dir, old_spool, recent = (
        tmp_path / "memlens-import-k2j3h4",
        tmp_path / "memlens-import-x1y2.jsonl",
        tmp_path / "memlens-import-q9w8",
    )
    old_dir.mkdir()
    old_spool.write_text("{}")
    recent.mkdir()
    day_ago = time.time() - 2 * 86400
    os.utime(old_dir, (day_ago, day_ago))
    os.utime(old_spool, (day_ago, day_ago))
    (tmp_path / "unrelated").mkdir()
    assert staging.sweep_scratch() == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"memlens-import-{os.getpid()}-live", "memlens-import-q9w8", "unrelated"]
    )


def test_killed_check_and_salvage_copies_are_swept(tmp_path, monkeypatch, settings):
    import tempfile

    from memlens import Memory
    from memlens.embed import HashEmbedder
    from memlens.store import staging
    from memlens.store.check import check_store

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=60).stdout.strip()
    for prefix in ("memlens-check-", "memlens-salvage-"):  # what a SIGKILL'd check or salvage leaves: a whole store copy
        (tmp_path / f"{prefix}{dead}-abc").mkdir()
        (tmp_path / f"{prefix}{dead}-abc" / "copy.db").write_bytes(b"x" * 1000)
    (tmp_path / f"memlens-check-{os.getpid()}-live").mkdir()
    assert staging.sweep_scratch() == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"memlens-check-{os.getpid()}-live"]
    (tmp_path / f"memlens-check-{os.getpid()}-live").rmdir()
    # check's own copy is named so that the sweep finds it, and is gone when check returns
    store = tmp_path / "s.db"
    with Memory.open(store, settings=settings, embedder=HashEmbedder()) as mem:
        mem.add("alpha", wing="w")
    made = []
    real_mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **kw: made.append(kw.get("prefix")) or real_mkdtemp(*a, **kw))
    assert check_store(store)["ok"]
    assert made == [f"memlens-check-{os.getpid()}-"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]
