"""A writer killed with SIGKILL mid-import leaves a consistent store: all or nothing."""

import base64
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from memlens import Memory, db
from memlens.embed import HashEmbedder

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
