"""Every read and write of the store that ingestion and the code index make, in one place.

The catalog (``sources``) records what each ingested file was when its chunks were
written: size, mtime_ns, sha256 and the parser/chunker version. ``source_entries``
names the entries each source produced. A changed file's chunks are replaced in
one transaction that also records the catalog row, one audit row per source and
the wing's generation bump (the engine's write protocol): a reader, or a process
killed at any point, sees all the old chunks or all the new ones, never a mix.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.models import Entry, content_hash, format_ts, utcnow
from memlens.store import db

if TYPE_CHECKING:
    from memlens.memory import Memory

SKIPS_KEPT = 1000  # skipped files kept in a run's summary (the count is always exact)


@dataclass
class Source:
    """A catalog row."""

    id: int
    wing: str
    path: str
    kind: str
    size: int
    mtime_ns: int
    sha256: str
    version: str
    chunks: int
    indexed_at: str


@dataclass
class SourceWrite:
    """What one file becomes: its catalog values and its chunks (entries with their vectors)."""

    wing: str
    path: str
    kind: str
    size: int
    mtime_ns: int
    sha256: str
    version: str
    entries: list[Entry] = field(default_factory=list)
    vectors: list[bytes] = field(default_factory=list)


_SOURCE_COLS = "id, wing, path, kind, size, mtime_ns, sha256, version, chunks, indexed_at"


def open_writer_connection(mem: Memory) -> None:
    """Prepare this (writer) thread's connection: no memory map, so that the process's resident memory
    follows what the pipeline holds, not the size of the store it streams into (the page cache still serves)."""
    mem.conn.execute("PRAGMA mmap_size = 0")


def close_thread_connection(mem: Memory) -> None:
    """Close this thread's connection (a writer thread's, at its end): threads come and go, connections must not pile up."""
    mem.store.close_thread()


def get_source(mem: Memory, wing: str, path: str) -> Source | None:
    row = mem.conn.execute(f"SELECT {_SOURCE_COLS} FROM sources WHERE wing = ? AND path = ?", (wing, path)).fetchone()
    return Source(*row) if row else None


def sources_under(mem: Memory, wing: str, root: str) -> list[Source]:
    """The sources of ``wing`` at ``root`` or below it (``root`` is a real, absolute path)."""
    prefix = root.rstrip("/") + "/"
    rows = mem.conn.execute(
        f"SELECT {_SOURCE_COLS} FROM sources WHERE wing = ? AND (path = ? OR substr(path, 1, ?) = ?) ORDER BY path",
        (wing, root, len(prefix), prefix),
    ).fetchall()
    return [Source(*r) for r in rows]


def stored_vectors(mem: Memory, texts: list[str]) -> dict[str, bytes]:
    """Vectors already stored for identical texts (by content hash and model): hash -> blob."""
    hashes = sorted({content_hash(t) for t in texts})
    out: dict[str, bytes] = {}
    model = mem.model_id
    for start in range(0, len(hashes), 500):
        part = hashes[start : start + 500]
        rows = mem.conn.execute(
            "SELECT e.content_hash, v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "
            f"WHERE e.content_hash IN ({','.join('?' * len(part))}) AND e.model = ?",
            (*part, model),
        ).fetchall()
        for h, blob in rows:
            vec = np.frombuffer(blob, dtype="<f4")
            if np.isfinite(vec).all() and vec.any():
                out.setdefault(h, blob)
    return out


def _delete_source_entries(mem: Memory, conn: Any, source_id: int) -> int:
    ids = [r[0] for r in conn.execute("SELECT entry_id FROM source_entries WHERE source_id = ?", (source_id,))]
    removed = 0
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        marks = ",".join("?" * len(part))
        rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM entries WHERE id IN ({marks})", part)]
        if rowids:
            rmarks = ",".join("?" * len(rowids))
            conn.execute(f"DELETE FROM entries_vec WHERE rowid IN ({rmarks})", rowids)
            removed += conn.execute(f"DELETE FROM entries WHERE rowid IN ({rmarks})", rowids).rowcount
    conn.execute("DELETE FROM source_entries WHERE source_id = ?", (source_id,))
    return removed


def write_sources(mem: Memory, writes: list[SourceWrite], action: str = "ingest") -> dict[str, int]:
    """Replace the chunks of each source in ``writes`` in ONE transaction; returns {"added", "updated", "chunks"}."""
    out = {"added": 0, "updated": 0, "chunks": 0}
    if not writes:
        return out
    now = format_ts(utcnow())
    with mem.store.write() as writer:
        conn = writer.conn  # the catalog tables live beside the entries, in the same transaction
        last_seq = 0
        for w in writes:
            row = conn.execute("SELECT id FROM sources WHERE wing = ? AND path = ?", (w.wing, w.path)).fetchone()
            removed = 0
            if row is None:
                cur = conn.execute(
                    "INSERT INTO sources(wing, path, kind, size, mtime_ns, sha256, version, chunks, indexed_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (w.wing, w.path, w.kind, w.size, w.mtime_ns, w.sha256, w.version, len(w.entries), now),
                )
                source_id = int(cur.lastrowid)
                out["added"] += 1
            else:
                source_id = int(row[0])
                removed = _delete_source_entries(mem, conn, source_id)
                conn.execute(
                    "UPDATE sources SET kind = ?, size = ?, mtime_ns = ?, sha256 = ?, version = ?, chunks = ?, indexed_at = ? "
                    "WHERE id = ?",
                    (w.kind, w.size, w.mtime_ns, w.sha256, w.version, len(w.entries), now, source_id),
                )
                out["updated"] += 1
            for entry, blob in zip(w.entries, w.vectors):
                writer.insert(entry, blob)
            conn.executemany(
                "INSERT INTO source_entries(source_id, entry_id) VALUES (?, ?)", [(source_id, e.id) for e in w.entries]
            )
            out["chunks"] += len(w.entries)
            detail = {"source": w.path, "sha256": w.sha256, "version": w.version, "chunks": len(w.entries), "removed": removed}
            last_seq = writer.audit(action, None, w.wing, None, None, detail)
        writer.bump({w.wing for w in writes}, last_seq)
    return out


def remove_sources(mem: Memory, sources: Iterable[Source], action: str = "ingest") -> int:
    """Remove sources and all their chunks in one transaction; returns the number of sources removed."""
    sources = list(sources)
    if not sources:
        return 0
    with mem.store.write() as writer:
        conn = writer.conn
        last_seq = 0
        for s in sources:
            removed = _delete_source_entries(mem, conn, s.id)
            conn.execute("DELETE FROM sources WHERE id = ?", (s.id,))
            last_seq = writer.audit(f"{action}_remove", None, s.wing, None, None, {"source": s.path, "removed": removed})
        writer.bump({s.wing for s in sources}, last_seq)
    return len(sources)


def refresh_stat(mem: Memory, source_id: int, size: int, mtime_ns: int) -> None:
    """A file touched but not changed (same sha256): remember its new stat so the next run skips the hash."""
    with db.transaction(mem.conn, mem.path) as conn:
        conn.execute("UPDATE sources SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, source_id))


def chunk_ids(mem: Memory, source_id: int) -> list[str]:
    return [r[0] for r in mem.conn.execute("SELECT entry_id FROM source_entries WHERE source_id = ? ORDER BY entry_id",
                                           (source_id,))]


# -- runs -----------------------------------------------------------------------------------


RUNS_KEPT = 1000  # run records kept (the newest)


def record_run(mem: Memory, mode: str, wing: str, root: str | None, started_at: str, seconds: float, status: str,
               summary: dict[str, Any]) -> int:
    """One row per finished run (what ``index status`` reports); older rows beyond ``RUNS_KEPT`` go."""
    kept = dict(summary)
    skipped = kept.get("skipped") or []
    kept["skipped_count"] = len(skipped)
    kept["skipped"] = skipped[:SKIPS_KEPT]
    with db.transaction(mem.conn, mem.path) as conn:
        cur = conn.execute(
            "INSERT INTO ingest_runs(mode, wing, root, started_at, finished_at, seconds, status, summary) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (mode, wing, root, started_at, format_ts(utcnow()), round(seconds, 4), status, json.dumps(kept, ensure_ascii=False)),
        )
        run_id = int(cur.lastrowid)
        conn.execute("DELETE FROM ingest_runs WHERE id <= ?", (run_id - RUNS_KEPT,))
    return run_id


def runs(mem: Memory, mode: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    sql = "SELECT id, mode, wing, root, started_at, finished_at, seconds, status, summary FROM ingest_runs"
    args: tuple[Any, ...] = ()
    if mode:
        sql += " WHERE mode = ?"
        args = (mode,)
    out = []
    for id_, mode_, wing, root, started, finished, seconds, status, summary in mem.conn.execute(
        sql + " ORDER BY id DESC LIMIT ?", (*args, limit)
    ):
        try:
            detail = json.loads(summary) if summary else {}
        except ValueError:
            detail = {}
        out.append({"id": id_, "mode": mode_, "wing": wing, "root": root, "started_at": started, "finished_at": finished,
                    "seconds": seconds, "status": status, "summary": detail if isinstance(detail, dict) else {}})
    return out


def code_indexes(mem: Memory, wings: list[str] | None = None) -> list[dict[str, Any]]:
    """Each indexed workspace (wing, root) with its last completed run's time: the index's ``indexed_at``."""
    sql = ("SELECT wing, root, max(finished_at) FROM ingest_runs WHERE mode = 'index' AND status IN ('ok', 'partial') "
           "AND root IS NOT NULL")
    args: list[Any] = []
    if wings is not None:
        if not wings:
            return []
        sql += f" AND wing IN ({','.join('?' * len(wings))})"
        args += wings
    sql += " GROUP BY wing, root ORDER BY wing, root"
    return [{"wing": w, "root": r, "indexed_at": t} for w, r, t in mem.conn.execute(sql, args)]


def all_sources(mem: Memory, wing: str | None = None, kind: str | None = None) -> list[Source]:
    where, args = [], []
    if wing:
        where.append("wing = ?")
        args.append(wing)
    if kind:
        where.append("kind = ?")
        args.append(kind)
    sql = f"SELECT {_SOURCE_COLS} FROM sources" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY path"
    return [Source(*r) for r in mem.conn.execute(sql, args)]


def code_candidates(mem: Memory, blob: bytes, wings: list[str], n: int) -> list[tuple[Entry, float]]:
    """The ``n`` nearest code chunks of ``wings`` (a KNN on the vector index, filtered to kind 'code')."""
    from memlens.store.rows import COLUMN_LIST as _COLUMNS
    from memlens.store.rows import row_to_entry
    from memlens.store.staging import visible
    from memlens.store.vectors import vec0_knn

    if not wings:
        return []
    where = [f"wing IN ({','.join('?' * len(wings))})", "kind = 'code'", "status = 'active'"]
    hits = vec0_knn(mem.conn, blob, n, where, list(wings))[:n]
    out = []
    for rowid, sim in hits:
        row = mem.conn.execute(f"SELECT {_COLUMNS} FROM entries WHERE rowid = ? AND {visible()}", (rowid,)).fetchone()
        if row is not None:
            out.append((row_to_entry(row), sim))
    return out


def log_code_recall(mem: Memory, detail: dict[str, Any], keep: int = 10_000) -> None:
    """One ``code_recall`` row per retrieval that looked for code (audit level "reads"); never fails a read."""
    if mem.settings.audit.level != "reads":
        return
    conn = mem.conn
    try:
        conn.execute("PRAGMA busy_timeout = 50")
        conn.execute(
            "INSERT INTO audit(ts, action, entry_id, wing, before, after, detail) "
            "VALUES (?, 'code_recall', NULL, NULL, NULL, NULL, ?)",
            (format_ts(utcnow()), json.dumps(detail, ensure_ascii=False)),
        )
        row = conn.execute("SELECT seq FROM audit WHERE action = 'code_recall' ORDER BY seq DESC LIMIT 1 OFFSET ?",
                           (keep,)).fetchone()
        if row is not None:
            conn.execute("DELETE FROM audit WHERE action = 'code_recall' AND seq <= ?", (row[0],))
    except Exception:
        pass
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(mem.settings.storage.busy_timeout_ms)}")


def code_recalls(mem: Memory, limit: int = 1000) -> list[dict[str, Any]]:
    out = []
    for (detail,) in mem.conn.execute("SELECT detail FROM audit WHERE action = 'code_recall' ORDER BY seq DESC LIMIT ?",
                                      (limit,)):
        try:
            value = json.loads(detail)
        except (TypeError, ValueError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out
