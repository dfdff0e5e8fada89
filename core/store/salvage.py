"""``memlens salvage``: copy what is readable from a damaged store into a new one.

The damaged store is only read (see ``check.open_read_only``). Entry rows are
read in rowid order around damaged pages (``check.read_by_key``); a row that
reads but does not validate is lost like an unreadable one. Entries
the audit history says should exist but whose row was lost are rebuilt from
their last audited version (an id seen twice is written once). Readable vectors
of the same model are reused, read from the vec0 table's own tables and checked
(``_vectors``: sqlite-vec itself never reads the damaged file); the rest are
embedded again. Readable audit rows (the write history), tasks
and blockers are copied as they are, and so are the rows of the retrieval log
and of the golden queries that decode (``memlens.store.salvage_replay``).
Everything is written to the new store in one transaction through the engine's
own insert; on any failure the new file is removed, so nothing half-written is
left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.errors import MemlensError, StoreError, ValidationError
from memlens.models import Entry
from memlens.store import salvage_replay
from memlens.store.check import open_read_only, read_by_key, read_entries, safe
from memlens.store.rows import COLUMNS, json_object, row_problem
from memlens.store.vectors import degenerate
from memlens.vocab import UNTRUSTED_KINDS

if TYPE_CHECKING:
    from memlens.store.sqlite import SqliteStore

ENTRY_ACTIONS = ("add", "import", "update", "salvage")
FIELDS = COLUMNS
_RANK = {"audit": 0, "entries": 1}  # where a salvaged entry came from; an entry row wins over the audit's copy


def salvage(src: Path, dst: Path, *, settings: Any = None, embedder: Any = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    say = progress or (lambda stage: None)
    if dst.exists() or Path(f"{dst}-wal").exists():
        raise MemlensError(f"{dst} already exists; salvage writes a new store (choose a path that does not exist)")
    tmp = None
    conn = open_read_only(src)
    if safe(conn, "SELECT count(*) FROM sqlite_master")[1] is not None:
        # a schema that does not load (a table's root page past the end of a truncated file):
        # SQLite then reads what it can of the rest (the connection stays read-only)
        conn.execute("PRAGMA writable_schema = ON")
    if safe(conn, "SELECT count(*) FROM sqlite_master")[1] is not None:
        conn.close()  # the header itself is damaged: read a private copy with a repaired header instead
        from memlens.store.staging import sweep_scratch

        sweep_scratch()  # a killed salvage's copy goes here (or at the next import or check)
        tmp = tempfile.mkdtemp(prefix=f"memlens-salvage-{os.getpid()}-")
        try:
            conn = _repaired_copy(src, Path(tmp) / "copy.db")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    try:
        meta, _ = safe(conn, "SELECT key, value FROM store_meta")
        old_model = dict(meta or []).get("model")
        say("reading entries")
        found = _read(conn, dict(meta or []).get("dim"))
        say("reading the audit history")
        audit, lost_audit = _read_audit(conn)
        tasks = _read_table(
            conn, "tasks", "task_id, intent, summary, outcome, completed_at, requires_context, validation_report, seq"
        )
        blockers = _read_table(conn, "blockers", "id, task_id, reason, blocked_at, resolved_at, resolution")
        say("reading the retrieval log and the golden queries")
        replay_rows = salvage_replay.read(conn, audit)
    finally:
        conn.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    recovered = _from_audit(audit, found["ids"])
    say("writing the new store")
    try:
        report = _write_new(dst, settings, embedder, src, found, recovered, audit, tasks, blockers, old_model, replay_rows)
    except BaseException:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{dst}{suffix}").unlink(missing_ok=True)
        raise
    lost_unreadable = max(0, len(found["unreadable"]) - len([r for r in recovered if r["id"] not in found["invalid"]]))
    lost_invalid = [i for i in found["invalid"] if i not in {r["id"] for r in recovered}]
    lost_ids = [*lost_invalid, *(i for i in report.pop("rejected_ids") if i not in lost_invalid)]
    report.update({
        "store": str(src),
        "new_store": str(dst),
        "unreadable_rows": len(found["unreadable"]),
        "invalid_rows": len(found["invalid"]),
        "lost": lost_unreadable + len(lost_ids),
        "lost_ids": lost_ids,
        "audit_rows_lost": lost_audit,
        "unpublished_import_rows": found["staged"],
    })
    return report


def _repaired_copy(src: Path, copy: Path) -> Any:
    """A copy of ``src`` whose header's fixed fields (page size, format bytes) are set to what SQLite writes.

    Tries each page size SQLite allows, the store's default first; the first
    copy whose schema reads is used. Without one, the store cannot be salvaged.
    """
    shutil.copyfile(src, copy)
    for size in (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512):
        with open(copy, "r+b") as f:
            f.write(b"SQLite format 3\x00")
            f.seek(16)
            f.write((size if size < 65536 else 1).to_bytes(2, "big") + bytes([1, 1, 0, 64, 32, 32]))
            f.seek(44)
            f.write((4).to_bytes(4, "big"))  # schema format 4
            f.seek(56)
            f.write((1).to_bytes(4, "big"))  # UTF-8
        conn = open_read_only(copy)
        conn.execute("PRAGMA writable_schema = ON")
        if safe(conn, "SELECT count(*) FROM entries")[1] is None:
            return conn
        conn.close()
    raise StoreError(f"{src}: its header is damaged beyond repair; nothing can be salvaged")


def _staged(conn: Any, table: str, key: str) -> set[int]:
    """Keys of ``table`` rows staged by an import that never published (killed): not part of the store."""
    rows, _ = safe(conn, f"SELECT {key} FROM {table} WHERE import_id IN (SELECT id FROM imports)")
    return {int(r[0]) for r in rows or []}


def _read(conn: Any, dim: Any) -> dict[str, Any]:
    staged = _staged(conn, "entries", "rowid")
    known: set[int] = set()
    for sql in ("SELECT rowid FROM entries_vec_rowids", "SELECT id FROM entries_fts_docsize"):
        rows, _ = safe(conn, sql)
        known.update(int(r[0]) for r in rows or [])
    good: list[tuple[int, dict[str, Any]]] = []
    unreadable: list[int] = []
    invalid: dict[str, str] = {}
    ids: set[str] = set()
    read: set[int] = set()
    for rowid, row, _err in read_entries(conn):
        if row is None:
            if not known:  # nothing else to tell an entry on a damaged page from a deleted one
                unreadable.append(rowid)
            continue
        read.add(rowid)
        if rowid in staged:  # an unpublished import stays invisible in the copy too
            continue
        problem = row_problem(row)
        if problem is not None:
            invalid[str(row[0])] = problem
            continue
        rec = dict(zip(FIELDS, row))
        rec["meta"] = json.loads(rec["meta"]) if rec["meta"] else {}
        good.append((rowid, rec))
        ids.add(rec["id"])
    unreadable += sorted(known - read)  # the FTS5 index or the vectors know of it, but its row is gone
    vectors = _vectors(conn, [rowid for rowid, _ in good], int(dim)) if str(dim).isdigit() and int(dim) > 0 else {}
    return {"good": good, "unreadable": unreadable, "invalid": invalid, "ids": ids, "vectors": vectors,
            "staged": len(staged)}


def _vectors(conn: Any, rowids: list[int], dim: int) -> dict[int, bytes]:
    """The vectors of ``rowids`` that read back intact, from the tables the vec0 table keeps them in.

    The vec0 virtual table itself is never queried: sqlite-vec's C code trusts the sizes and offsets it
    finds in those tables, and on a damaged file it can crash the process. Here SQLite reads them (it
    reports damage as errors) and each value is checked before it is trusted: the row's chunk and its
    offset in it, the chunk's validity bit and its rowid at that offset, and the vector's byte length.
    A vector that fails any of these is embedded again.
    """
    size = dim * 4
    chunks: dict[int, tuple[Any, ...] | None] = {}
    out: dict[int, bytes] = {}
    for rowid in rowids:
        pos, _ = safe(conn, "SELECT chunk_id, chunk_offset FROM entries_vec_rowids WHERE rowid = ?", (rowid,))
        if not pos or not all(isinstance(v, int) for v in pos[0]):
            continue
        chunk_id, off = pos[0]
        if chunk_id not in chunks:
            rows, _ = safe(conn, "SELECT size, validity, rowids FROM entries_vec_chunks WHERE chunk_id = ?", (chunk_id,))
            chunks[chunk_id] = tuple(rows[0]) if rows else None
        chunk = chunks[chunk_id]
        if chunk is None or not isinstance(chunk[0], int) or not all(isinstance(b, bytes) for b in chunk[1:]):
            continue
        n, validity, ids = chunk
        if not (0 <= off < n and len(validity) * 8 >= n and len(ids) >= 8 * n and validity[off // 8] >> (off % 8) & 1
                and int.from_bytes(ids[8 * off : 8 * off + 8], "little", signed=True) == rowid):
            continue
        got, _ = safe(conn, "SELECT substr(vectors, ?, ?) FROM entries_vec_vector_chunks00 WHERE rowid = ?",
                      (off * size + 1, size, chunk_id))
        if got and isinstance(got[0][0], bytes) and len(got[0][0]) == size:
            out[rowid] = got[0][0]
    return out


def _read_audit(conn: Any) -> tuple[list[tuple[Any, ...]], int]:
    """Readable audit rows in seq order, and how many could not be read or decoded."""
    top = 0
    for sql in ("SELECT max(seq) FROM audit", "SELECT max(seq) FROM audit INDEXED BY audit_entry",
                "SELECT max(seq) FROM audit INDEXED BY audit_action"):
        bound, _ = safe(conn, sql)
        top = max(top, int(bound[0][0] or 0) if bound else 0)
    out: list[tuple[Any, ...]] = []
    lost = 0
    staged = _staged(conn, "audit", "seq")
    for seq, row, _err in read_by_key(conn, "audit", "seq", "ts, action, entry_id, wing, before, after, detail", top):
        if seq in staged:
            continue
        r = None if row is None else (seq, *row)
        if r is not None and all(v is None or json_object(v) is not None for v in r[5:8]) and isinstance(r[1], str):
            out.append(r)
        else:
            lost += 1
    return out, lost


def _read_table(conn: Any, table: str, cols: str) -> list[tuple[Any, ...]]:
    rows, _ = safe(conn, f"SELECT {cols} FROM {table}")
    return [tuple(r) for r in rows or []]


def _from_audit(audit: list[tuple[Any, ...]], readable: set[str]) -> list[dict[str, Any]]:
    """The last audited version of each entry that should exist but was not read."""
    state: dict[str, dict[str, Any]] = {}
    for _seq, _ts, action, entry_id, _wing, _before, after, _detail in audit:
        if not entry_id:
            continue
        if action == "delete":
            state.pop(entry_id, None)
        elif action in ENTRY_ACTIONS and after:
            state[entry_id] = json_object(after) or {}
    return [rec for eid, rec in state.items() if eid not in readable and rec]


def _write_new(dst: Path, settings: Any, embedder: Any, *args: Any) -> dict[str, Any]:
    """Create the new store (its model: the configured one) and write into it."""
    from memlens.config import load_settings
    from memlens.store.sqlite import SqliteStore

    settings = settings or load_settings()
    model: list[Any] = [embedder]

    def get_model() -> Any:
        if model[0] is None:
            from memlens.embed import make_embedder

            model[0] = make_embedder(settings.embedding, settings.cache_dir)
        return model[0]

    store = SqliteStore(dst, model=get_model, busy_timeout_ms=settings.storage.busy_timeout_ms,
                        mmap_size=settings.storage.mmap_size, synchronous=settings.storage.synchronous, create=True)
    try:
        return _write(store, lambda texts: get_model().embed(texts), *args)
    finally:
        store.close()


def _write(store: SqliteStore, embed: Callable[[list[str]], np.ndarray], src: Path, found: dict[str, Any],
           recovered: list[dict[str, Any]], audit: list[tuple[Any, ...]], tasks: list[tuple[Any, ...]],
           blockers: list[tuple[Any, ...]], old_model: str | None, replay_rows: dict[str, Any]) -> dict[str, Any]:
    from memlens.store.writes import validate_entry, vectors_for

    entries: list[tuple[dict[str, Any], bytes | None, str]] = []  # records as found, validated below
    dim = store.dim
    same_model = old_model == store.model_id
    for rowid, rec in found["good"]:
        blob = found["vectors"].get(rowid) if same_model else None
        if blob is not None and (len(blob) != dim * 4 or _damaged(np.frombuffer(blob, dtype="<f4"))):
            blob = None  # embedded again
        entries.append((rec, blob, "entries"))
    for rec in recovered:
        entries.append((rec, None, "audit"))
    kept: dict[str, tuple[Entry, bytes | None, str]] = {}
    rejected_ids: list[str] = []
    self_overrides: list[str] = []
    demoted: list[str] = []
    for rec, blob, source in entries:
        fields = {k: rec.get(k) for k in FIELDS if k in rec}
        if fields.get("overrides") is not None and fields.get("overrides") == fields.get("id"):
            fields["overrides"] = None  # an entry that overrides itself (a hand edit) keeps everything but that
            self_overrides.append(str(fields["id"]))
        try:
            e = validate_entry(fields)
        except ValidationError:
            try:  # web text made a rule without a person's promotion (a hand edit): kept as the note it may be
                if fields.get("kind") not in UNTRUSTED_KINDS or fields.get("type") == "note":
                    raise
                e = validate_entry({**fields, "type": "note"})
                demoted.append(e.id)
            except ValidationError:
                rejected_ids.append(str(rec.get("id")))
                continue
        # one entry per id: damage can show an id twice (an audit row whose entry_id was hit names another
        # entry than its record does); the entry row wins over the audit, then the newer version
        other = kept.get(e.id)
        if other is None or (_RANK[other[2]], str(other[0].updated_at)) < (_RANK[source], str(e.updated_at)):
            kept[e.id] = (e, blob, source)
    valid = list(kept.values())
    ids = set(kept)
    dropped_overrides = [i for i in dict.fromkeys(self_overrides) if i in ids]
    for e, _, _ in valid:
        if e.overrides and e.overrides not in ids:
            dropped_overrides.append(e.id)
            object.__setattr__(e, "overrides", None)
    need = [i for i, (_, blob, _) in enumerate(valid) if blob is None]
    fresh: dict[int, bytes] = {}  # position in ``valid`` -> its new vector
    if need:
        vecs = vectors_for(store, embed, [valid[i][0] for i in need])
        fresh = {i: np.asarray(vec, dtype="<f4").tobytes() for i, vec in zip(need, vecs)}
    embedded = len(need)
    ready = [(e, blob if blob is not None else fresh[i], source) for i, (e, blob, source) in enumerate(valid)]
    with store.write() as w:
        conn = w.conn
        for row in audit:
            conn.execute(
                "INSERT INTO audit(seq, ts, action, entry_id, wing, before, after, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row
            )
        wings: set[str] = set()
        seq = 0
        for e, vec, source in ready:
            w.insert(e, vec)
            seq = w.audit("salvage", e.id, e.wing, None, e.to_record(), {"from": str(src), "source": source})
            wings.add(e.wing)
        if wings:
            w.bump(wings, seq)
        copied_tasks = copied_blockers = 0
        for row in tasks:
            copied_tasks += _try(conn, "INSERT INTO tasks(task_id, intent, summary, outcome, completed_at, requires_context, "
                                       "validation_report, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        for row in blockers:
            copied_blockers += _try(conn, "INSERT INTO blockers(id, task_id, reason, blocked_at, resolved_at, resolution) "
                                          "VALUES (?, ?, ?, ?, ?, ?)", row)
        if copied_tasks or copied_blockers:
            w.bump({"_tasks"}, w.last_seq())
        replay = salvage_replay.write(conn, replay_rows, _try)
    return {
        **replay,
        "saved": sum(1 for _, _, s in valid if s == "entries"),
        "recovered_from_audit": sum(1 for _, _, s in valid if s == "audit"),
        "rejected_ids": [i for i in dict.fromkeys(rejected_ids) if i not in ids],  # refused, and of no entry saved
        "vectors_reused": len(valid) - embedded,
        "embedded": embedded,
        "overrides_dropped": dropped_overrides,
        "demoted_to_note": [i for i in dict.fromkeys(demoted) if kept[i][0].type.value == "note"],
        "audit_rows": len(audit),
        "tasks": copied_tasks,
        "blockers": copied_blockers,
    }


def _damaged(vec: np.ndarray) -> bool:
    """A vector that cannot be the model's: no direction, or not of unit length (the model's vectors are
    normalised, so a changed byte in one nearly always shows in its length)."""
    return bool(degenerate(vec)) or abs(float(np.linalg.norm(vec.astype(np.float64))) - 1.0) > 1e-3


def _try(conn: Any, sql: str, row: tuple[Any, ...]) -> int:
    try:
        conn.execute("SAVEPOINT row")
        conn.execute(sql, row)
        conn.execute("RELEASE row")
        return 1
    except Exception:
        conn.execute("ROLLBACK TO row")
        conn.execute("RELEASE row")
        return 0

