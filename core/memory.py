"""``Memory``: the engine's public face. Every write is one transaction that also
appends an audit row and bumps the wing's generation counter (which is how
caches in this and other processes learn that a wing changed)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.config import Settings, load_settings
from memlens.errors import CorruptRowError, MemlensError, NotFoundError, StaleUpdateError, StoreError, ValidationError
from memlens.limits import MAX_LIST, check_int, entry_text_limit, printable
from memlens.mcp import attribution
from memlens.models import EDITABLE_FIELDS, Entry, EntryType, Kind, Status, content_hash, format_ts, parse_ts, utcnow
from memlens.store import corruption, db, retention
from memlens.store.rows import HINT as ROW_HINT
from memlens.store.rows import json_object, row_problem
from memlens.store.staging import visible, visible_count, visible_groups
from memlens.store.vectors import degenerate

if TYPE_CHECKING:
    from memlens.embed import Embedder
    from memlens.trace import Bundle

_COLUMNS = (
    "id, wing, room, kind, type, status, title, text, key, salience, overrides, created_at, updated_at, meta"
)


def row_to_entry(row: tuple[Any, ...]) -> Entry:
    """Build an Entry from a row selected as ``_COLUMNS``.

    Rows were validated on the way in, so this only converts types
    (``model_construct``): a search builds ~100 of these, and full validation
    was a tenth of the pipeline at 100k entries. A row changed behind the
    engine's back (a hand edit, damage) raises CorruptRowError, in one line.
    """
    problem = row_problem(row)
    if problem is not None:
        raise CorruptRowError(f"stored entry {row[0]!r} is damaged: {problem}; {ROW_HINT}")
    (id_, wing, room, kind, type_, status, title, text, key, salience, overrides, created, updated, meta) = row
    return Entry.model_construct(
        id=id_, wing=wing, room=room, kind=Kind(kind), type=EntryType(type_), status=Status(status), title=title,
        text=text, key=key, salience=float(salience), overrides=overrides, created_at=parse_ts(created),
        updated_at=parse_ts(updated), meta=json.loads(meta) if meta and meta != "{}" else {},
    )


def vec_blob(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype="<f4").tobytes()



def _refuse_if_changed(current: Entry, expected: str | datetime) -> None:
    """StaleUpdateError unless ``current`` was last written at ``expected`` (an ISO-8601 timestamp)."""
    try:
        want = parse_ts(expected)
    except ValueError:
        raise ValidationError(f"expected_updated_at: {expected!r} is not an ISO-8601 timestamp") from None
    stamp = current.updated_at or current.created_at
    if abs((stamp - want).total_seconds()) >= 1e-6:
        raise StaleUpdateError(
            f"entry {current.id!r} was changed at {format_ts(stamp)} since you read it; read it again and re-apply your change"
        )


class Memory:
    """An agent memory on one SQLite file.

    Thread-safe: each thread gets its own connection (SQLite's rule); the
    embedder is shared and loads on first use.
    """

    def __init__(self, path: Path, settings: Settings, embedder: Embedder | None = None, *, create: bool = True) -> None:
        self.path = path
        self._create = create
        self.settings = settings
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._local = threading.local()
        self._conns: list[Any] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        self._cache: Any = None
        self._profiles: dict[str, Any] | None = None
        self._distinct_cache: dict[tuple[str, tuple[Any, ...]], tuple[tuple[int, int], list[str]]] = {}
        self._distinct_lock = threading.Lock()
        self._vindex: Any = None
        self._pruned = False  # retrieval records pruned by this Memory yet (see memlens.store.retention)
        conn = self.conn  # opens, checks and migrates
        meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall()) if db.schema_version(conn) else {}
        self._meta = meta

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        create: bool = True,
    ) -> Memory:
        """Open the store at ``path``, ``MEMLENS_STORE`` or the default; a missing one is created
        (0600, in 0700 folders) unless ``create=False``, which makes it a StoreError instead."""
        settings = settings or load_settings()
        target = Path(path).expanduser() if path is not None else settings.store_path()
        return cls(target, settings, embedder, create=create)

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        with self._conns_lock:
            for c in self._conns:
                try:
                    c.close()
                except Exception:
                    pass
            self._conns.clear()

    @property
    def conn(self) -> Any:
        """This thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"store {self.path} is closed")
            conn = db.connect(
                self.path,
                busy_timeout_ms=self.settings.storage.busy_timeout_ms,
                mmap_size=self.settings.storage.mmap_size,
                create=self._create and not self._conns,  # once open, a vanished file is not silently remade
            )
            try:
                if db.schema_version(conn) < db.SCHEMA_VERSION:
                    self._pending = conn
                    db.migrate(conn, self.path, self._dim_for_new_store())
                    if conn.execute("SELECT 1 FROM store_meta WHERE key = 'model'").fetchone() is None:
                        self._init_meta(conn)
                else:
                    db.migrate(conn, self.path, 0)  # refuses newer schemas
            except BaseException:
                conn.close()
                raise
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _dim_for_new_store(self) -> int:
        """The vector size for migrations: the store's own record, else the model's (a new store)."""
        try:
            row = self._pending.execute("SELECT value FROM store_meta WHERE key = 'dim'").fetchone()
        except Exception:
            row = None
        return int(row[0]) if row else self.embedder.dim

    def _init_meta(self, conn: Any) -> None:
        with db.transaction(conn, self.path):
            conn.execute(
                "INSERT OR IGNORE INTO store_meta(key, value) VALUES ('model', ?), ('dim', ?), ('created_at', ?)",
                (self.embedder.model_id, str(self.embedder.dim), format_ts(utcnow())),
            )

    @property
    def embedder(self) -> Embedder:
        """The embedding model (resolved and verified on first use, loaded on first embed)."""
        if self._embedder is None:
            with self._embedder_lock:
                if self._embedder is None:
                    from memlens.embed import make_embedder

                    self._embedder = make_embedder(self.settings.embedding, self.settings.cache_dir)
        return self._embedder

    @property
    def model_id(self) -> str:
        """The model this store's vectors were made with."""
        return self._meta.get("model") or self.embedder.model_id

    @property
    def dim(self) -> int:
        raw = self._meta.get("dim")
        if not raw:
            return self.embedder.dim
        try:
            return int(raw)
        except (TypeError, ValueError):  # a hand edit: one line, not a traceback
            raise CorruptRowError(f"store {self.path}: store_meta holds {raw!r} as the vector size; {ROW_HINT}") from None

    def check_model(self) -> None:
        """Refuse to mix vectors of two models in one store."""
        if self.embedder.model_id != self.model_id:
            raise MemlensError(
                f"store {self.path} holds vectors of {self.model_id} but the configured model is "
                f"{self.embedder.model_id}; use the same model (embedding.model) or a new store"
            )

    def embed(self, texts: list[str]) -> np.ndarray:
        self.check_model()
        return self.embedder.embed(texts)

    # -- reads -------------------------------------------------------------------------------

    def get(self, entry_id: str) -> Entry:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM entries WHERE id = ? AND {visible()}", (entry_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no entry with id {entry_id!r} in {self.path}")
        return row_to_entry(row)

    def entries(self, wing: str | None = None) -> Iterator[Entry]:
        sql = f"SELECT {_COLUMNS} FROM entries WHERE {visible()}" + (" AND wing = ?" if wing else "") + " ORDER BY rowid"
        for row in self.conn.execute(sql, (wing,) if wing else ()):
            yield row_to_entry(row)

    def count(self) -> int:
        return visible_count(self.conn)

    def _write_stamp(self) -> tuple[int, int]:
        """Changes whenever any process writes an entry: every write bumps a wing generation."""
        row = self.conn.execute("SELECT coalesce(sum(generation), 0), count(*) FROM wings").fetchone()
        return int(row[0]), int(row[1])

    def _distinct(self, col: str, where: str, args: tuple[Any, ...]) -> list[str]:
        # DISTINCT over a large table costs milliseconds; searches ask on every call, so cache it
        # until the next write (seen through the tiny wings table, so other processes count too)
        stamp = self._write_stamp()
        key = (f"{col}|{where}", args)
        with self._distinct_lock:
            hit = self._distinct_cache.get(key)
            if hit is not None and hit[0] == stamp:
                return list(hit[1])
        values = [v for v, _ in visible_groups(self.conn, col, where, args)]
        with self._distinct_lock:
            self._distinct_cache[key] = (stamp, values)
        return list(values)

    def wings(self) -> list[str]:
        return self._distinct("wing", "", ())

    def rooms(self, wing: str | None = None) -> list[str]:
        return self._distinct("room", "room != ''" + (" AND wing = ?" if wing else ""), (wing,) if wing else ())

    def generations(self, wings: Iterable[str] | None = None) -> dict[str, int]:
        rows = self.conn.execute("SELECT wing, generation FROM wings").fetchall()
        gens = {w: g for w, g in rows}
        return gens if wings is None else {w: gens.get(w, 0) for w in wings}

    def audit(self, entry_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        limit = check_int("limit", limit, 1, MAX_LIST)
        sql = f"SELECT seq, ts, action, entry_id, wing, before, after, detail FROM audit WHERE {visible()}"
        args: tuple[Any, ...] = ()
        if entry_id:
            sql += " AND entry_id = ?"
            args = (entry_id,)
        sql += " ORDER BY seq DESC LIMIT ?"
        out = []
        for seq, ts, action, eid, wing, before, after, detail in self.conn.execute(sql, args + (limit,)):
            row = {"seq": seq, "ts": ts, "action": action, "entry_id": eid, "wing": wing}
            for name, value in (("before", before), ("after", after), ("detail", detail)):
                row[name] = json_object(value) if value else None
                if value and row[name] is None:  # a hand-edited value: say so rather than fail the history
                    row.setdefault("damaged", []).append(name)
            out.append(row)
        return out

    def vector(self, entry_id: str) -> np.ndarray:
        row = self.conn.execute(
            f"SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid WHERE e.id = ? AND {visible('e')}",
            (entry_id,),
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no entry with id {entry_id!r} in {self.path}")
        return np.frombuffer(row[0], dtype="<f4").copy()

    # -- writes ------------------------------------------------------------------------------

    def add(self, text: str, *, wing: str, **fields: Any) -> Entry:
        """Add one entry; returns it with its id. Fields as in ``memlens.models.Entry``."""
        with entry_text_limit(self.settings.limits.max_entry_chars):
            entry = self._validate({"text": text, "wing": wing, **fields})
        self._check_writable()
        self._check_overrides([entry])
        vec = self._vectors_for([entry])[0]
        with db.transaction(self.conn, self.path) as conn:
            row = conn.execute(f"SELECT {visible()} FROM entries WHERE id = ?", (entry.id,)).fetchone()
            if row:
                raise ValidationError(
                    f"an entry with id {entry.id!r} already exists"
                    if row[0]
                    else f"an entry with id {entry.id!r} is being imported"
                )
            self._insert(conn, entry, vec)
            seq = self._audit(conn, "add", entry.id, entry.wing, None, entry.to_record())
            self._bump(conn, {entry.wing}, seq)
        return entry

    def update(self, entry_id: str, *, expected_updated_at: str | datetime | None = None, **changes: Any) -> Entry:
        """Change fields of an entry; a new text or title is re-embedded.

        ``expected_updated_at``: the ``updated_at`` (or ``created_at``) the caller read; when the entry
        changed since, the update is refused (StaleUpdateError) instead of overwriting that edit. The
        check runs again inside the write transaction, so a concurrent writer's edit is never lost.
        """
        unknown = set(changes) - set(EDITABLE_FIELDS)
        if unknown:
            raise ValidationError(f"cannot edit {', '.join(sorted(unknown))}; editable: {', '.join(EDITABLE_FIELDS)}")
        self._check_writable()
        before = self.get(entry_id)
        if expected_updated_at is not None:
            _refuse_if_changed(before, expected_updated_at)
        record = before.to_record()
        record.update({k: (v.value if hasattr(v, "value") else v) for k, v in changes.items()})
        record["updated_at"] = utcnow()
        # the cap applies to a new text or meta; an entry stored before it keeps its other fields editable
        with entry_text_limit(self.settings.limits.max_entry_chars if {"text", "meta"} & set(changes) else None):
            after = self._validate(record)
        if "overrides" in changes:
            self._check_overrides([after])
        same_text = after.embed_text == before.embed_text
        vec = None if same_text else self._vectors_for([after])[0]
        with db.transaction(self.conn, self.path) as conn:
            row = conn.execute(f"SELECT rowid, {_COLUMNS} FROM entries WHERE id = ? AND {visible()}", (entry_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"entry {entry_id!r} was deleted meanwhile")
            rowid, before = row[0], row_to_entry(row[1:])  # the audit records what this write replaced
            if expected_updated_at is not None:
                _refuse_if_changed(before, expected_updated_at)
            if vec is None:
                blob = conn.execute("SELECT embedding FROM entries_vec WHERE rowid = ?", (rowid,)).fetchone()[0]
            else:
                blob = vec_blob(vec)
            self._write_row(conn, after, rowid)
            conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (rowid,))
            self._insert_vec(conn, rowid, after, blob)
            seq = self._audit(
                conn, "update", after.id, after.wing, before.to_record(), after.to_record(), {"reembedded": not same_text}
            )
            self._bump(conn, {before.wing, after.wing}, seq)
        return after

    def set_status(self, entry_id: str, status: str | Status) -> Entry:
        """Deprecate, mark under review or reactivate an entry."""
        try:
            status = Status(status)
        except ValueError:
            raise ValidationError(f"unknown status {status!r} (status: active, under_review, deprecated)") from None
        return self.update(entry_id, status=status)

    def delete(self, entry_id: str) -> Entry:
        before = self.get(entry_id)
        with db.transaction(self.conn, self.path) as conn:
            row = conn.execute(f"SELECT rowid FROM entries WHERE id = ? AND {visible()}", (entry_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no entry with id {entry_id!r} in {self.path}")
            conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (row[0],))
            conn.execute("DELETE FROM entries WHERE rowid = ?", (row[0],))
            seq = self._audit(conn, "delete", entry_id, before.wing, before.to_record(), None)
            self._bump(conn, {before.wing}, seq)
        return before

    def add_unique(self, text: str, *, wing: str, **fields: Any) -> tuple[Entry, bool, list[dict[str, Any]]]:
        """Add unless the wing holds the same content: ``(entry, created, similar)`` (see ``memlens.store.writes``)."""
        from memlens.store.writes import add_unique

        return add_unique(self, text, wing=wing, **fields)

    def update_checked(self, entry_id: str, expected_updated_at: Any = None, **changes: Any) -> Entry:
        """``update`` refused (StaleUpdateError) when the entry changed after ``expected_updated_at``."""
        return self.update(entry_id, expected_updated_at=expected_updated_at, **changes)

    def wing_counts(self) -> list[dict[str, Any]]:
        """Wings with entry counts and rooms, from one aggregate query."""
        from memlens.store.writes import wing_counts

        return wing_counts(self)

    # -- helpers for writers ---------------------------------------------------------------

    def _check_writable(self) -> None:
        """Refuse a damaged store before embedding: every write transaction checks again (``db.transaction``)."""
        corruption.refuse_writes(self.path)
        corruption.verify_once(self.conn)

    @staticmethod
    def _validate(record: dict[str, Any]) -> Entry:
        from pydantic import ValidationError as PydanticError

        try:
            return Entry.model_validate(record)
        except PydanticError as exc:
            raise ValidationError(describe_validation(exc)) from None

    def _check_overrides(self, entries: list[Entry], also_known: set[str] | None = None) -> None:
        for e in entries:
            if not e.overrides or (also_known and e.overrides in also_known):
                continue
            row = self.conn.execute(f"SELECT wing FROM entries WHERE id = ? AND {visible()}", (e.overrides,)).fetchone()
            if row is None:
                raise ValidationError(f"overrides: no entry with id {e.overrides!r} to override")

    def _vectors_for(self, entries: list[Entry]) -> list[np.ndarray]:
        """Vectors for entries: reuse a stored vector of identical text, embed the rest in one batch."""
        texts = [e.embed_text for e in entries]
        out: list[np.ndarray | None] = [None] * len(entries)
        model = self.model_id
        missing: dict[str, list[int]] = {}
        for i, t in enumerate(texts):
            h = content_hash(t)
            row = self.conn.execute(
                "SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "
                "WHERE e.content_hash = ? AND e.model = ? LIMIT 1",
                (h, model),
            ).fetchone()
            if row is not None and not degenerate(vec := np.frombuffer(row[0], dtype="<f4")):
                out[i] = vec
            else:  # nothing stored, or a degenerate vector that must not spread (core/store/vectors.py)
                missing.setdefault(h, []).append(i)
        if missing:
            firsts = [idxs[0] for idxs in missing.values()]
            vecs = self.embed([texts[i] for i in firsts])
            for vec, idxs in zip(vecs, missing.values()):
                for i in idxs:
                    out[i] = vec
        return out  # type: ignore[return-value]

    def _insert(self, conn: Any, entry: Entry, vec: np.ndarray | bytes, import_id: int | None = None) -> int:
        rec = entry.to_record()
        values = [rec[f] for f in Entry.model_fields if f != "meta"]
        values += [json.dumps(entry.meta, ensure_ascii=False, sort_keys=True), content_hash(entry.embed_text), self.model_id]
        cur = conn.execute(
            f"INSERT INTO entries({_COLUMNS}, content_hash, model, import_id) VALUES ({', '.join('?' * 17)})",
            [*values, import_id],
        )
        rowid = int(cur.lastrowid)
        self._insert_vec(conn, rowid, entry, vec if isinstance(vec, bytes) else vec_blob(vec))
        return rowid

    def _write_row(self, conn: Any, entry: Entry, rowid: int) -> None:
        rec = entry.to_record()
        sets = ", ".join(f"{f} = ?" for f in Entry.model_fields if f != "id")
        values = [rec[f] for f in Entry.model_fields if f not in ("id", "meta")]
        values.append(json.dumps(entry.meta, ensure_ascii=False, sort_keys=True))
        conn.execute(
            f"UPDATE entries SET {sets}, content_hash = ?, model = ? WHERE rowid = ?",
            (*values, content_hash(entry.embed_text), self.model_id, rowid),
        )

    @staticmethod
    def _insert_vec(conn: Any, rowid: int, entry: Entry, blob: bytes) -> None:
        conn.execute(
            "INSERT INTO entries_vec(rowid, embedding, wing, room, kind, type, status) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rowid, blob, entry.wing, entry.room, entry.kind.value, entry.type.value, entry.status.value),
        )

    @staticmethod
    def _audit(
        conn: Any,
        action: str,
        entry_id: str | None,
        wing: str | None,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        detail: dict[str, Any] | None = None,
        import_id: int | None = None,
    ) -> int:
        dumps = lambda v: None if v is None else json.dumps(v, ensure_ascii=False)  # noqa: E731
        detail = attribution.stamp(detail)  # which client made the write, when one is acting (MCP)
        cur = conn.execute(
            "INSERT INTO audit(ts, action, entry_id, wing, before, after, detail, import_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (format_ts(utcnow()), action, entry_id, wing, dumps(before), dumps(after), dumps(printable(detail)), import_id),
        )
        return int(cur.lastrowid)

    @staticmethod
    def _bump(conn: Any, wings: Iterable[str], seq: int) -> None:
        conn.executemany(
            "INSERT INTO wings(wing, generation, last_write_seq) VALUES (?, 1, ?) "
            "ON CONFLICT(wing) DO UPDATE SET generation = generation + 1, last_write_seq = excluded.last_write_seq",
            [(w, seq) for w in sorted(set(wings))],
        )

    # -- bulk --------------------------------------------------------------------------------

    def import_jsonl(self, source: str | Path, *, batch_size: int = 256, progress: Any = None) -> dict[str, Any]:
        """Import a JSONL file all-or-nothing (see ``memlens.io.jsonl``)."""
        from memlens.io.jsonl import import_file

        self._check_writable()
        with entry_text_limit(self.settings.limits.max_entry_chars):
            return import_file(self, Path(source), batch_size=batch_size, progress=progress)

    def export_jsonl(self, out: Any, *, wing: str | None = None, with_vectors: bool = False, on_skip: Any = None) -> int:
        from memlens.io.jsonl import export

        return export(self, out, wing=wing, with_vectors=with_vectors, on_skip=on_skip)

    # -- search ------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        active_wing: str | None = None,
        wings: list[str] | None = None,
        k: int | None = None,
        profile: str | None = "memory",
        budget: int | None = None,
        **options: Any,
    ) -> Bundle:
        """Retrieve, explain and (optionally) budget; see ``memlens.retrieval.search.search`` for ``options``."""
        from memlens.replay import storage as replay_log
        from memlens.retrieval.search import search

        with replay_log.request(query=query, active_wing=active_wing, wings=wings, k=k, profile=profile, budget=budget,
                                user=options.get("user")):  # what the retrieval log keeps for a replay
            return search(self, query, active_wing=active_wing, wings=wings, k=k, profile=profile, budget=budget, **options)

    def explain(self, query: str, entry_id: str, **kwargs: Any) -> dict[str, Any]:
        """Why was ``entry_id`` returned for ``query`` - or at which stage was it dropped?"""
        from memlens.retrieval.explain import explain

        return explain(self, query, entry_id, **kwargs)

    def context(self, query: str, *, active_wing: str | None = None, budget: int | None = None, **kwargs: Any) -> str:
        """The markdown an agent receives: working memory, then retrieved memory in authority order."""
        from memlens.replay.storage import building_context
        from memlens.retrieval.budget import render_context

        with building_context():
            bundle = self.search(query, active_wing=active_wing, budget=budget, **kwargs)
        return render_context(self, bundle)

    @property
    def vector_index(self) -> Any:
        """The in-process vector index when in use (see core/store/vindex.py), else None (sqlite-vec)."""
        mode = self.settings.search.vector_index
        if mode == "sqlite-vec":
            return None
        if self._vindex is None and mode == "memory":
            from memlens.store.vindex import VectorIndex

            self._vindex = VectorIndex()
        return self._vindex

    def warm_index(self) -> int:
        """Load the in-process vector index now (long-lived processes); returns vectors held."""
        if self.settings.search.vector_index == "sqlite-vec":
            return 0
        if self._vindex is None:
            from memlens.store.vindex import VectorIndex

            self._vindex = VectorIndex()
        return self._vindex.warm(self)

    @property
    def profiles(self) -> dict[str, Any]:
        if self._profiles is None:
            from memlens.profiles import load_profiles

            self._profiles = load_profiles(self.settings.profiles)
        return self._profiles

    @property
    def cache(self) -> Any:
        if self._cache is None:
            from memlens.retrieval.cache import RetrievalCache

            self._cache = RetrievalCache(self.settings.cache.ttl_seconds, self.settings.cache.max_entries)
        return self._cache

    def describe_write(self, wings: list[str]) -> dict[str, Any] | None:
        """The latest write to any of ``wings``: what invalidated a cached retrieval."""
        clause = ",".join("?" * len(wings))
        row = self.conn.execute(
            f"SELECT a.seq, a.ts, a.action, a.entry_id, a.wing FROM wings w JOIN audit a ON a.seq = w.last_write_seq "
            f"WHERE w.wing IN ({clause}) ORDER BY a.seq DESC LIMIT 1",
            wings,
        ).fetchone()
        if row is None:
            return {"reason": "write", "wings": wings}
        seq, ts, action, entry_id, wing = row
        return {"reason": "write", "seq": seq, "ts": ts, "action": action, "entry_id": entry_id, "wing": wing, "wings": wings}

    def log_retrieval(self, bundle: Bundle) -> None:
        """Retrieval metrics into the audit table when the level includes reads.

        Never fails a retrieval: a read-only or busy store just skips the row.
        """
        if self.settings.audit.level != "reads" or corruption.seen(self.path):
            return
        import hashlib

        t = bundle.trace
        metrics = {
            "query_hash": hashlib.sha256(t.query.encode()).hexdigest()[:16],
            "query": t.query[:200],
            "user": t.user,
            "active_wing": t.active_wing,
            "profile": t.profile,
            "cache_hit": t.cache_hit,
            "latency_ms": t.latency_ms,
            "wings_searched": t.wings_searched,
            "results_per_wing": t.results_per_wing,
            "counts": t.counts,
            "total_count": len(bundle.results),
            "result_ids": [r.entry.id for r in bundle.results],
            "dropped": len(t.dropped),
            "degraded": bool(t.degraded),
        }
        conn = self.conn
        audit = self.settings.audit
        own = False
        try:
            # a search must never wait for a writer: give up on the log row after 50 ms
            conn.execute("PRAGMA busy_timeout = 50")
            from memlens.replay import storage as replay_log

            own = not conn.in_transaction  # one transaction for the audit row and what replay needs
            if own:
                conn.execute("BEGIN")
            cur = conn.execute(
                "INSERT INTO audit(ts, action, entry_id, wing, before, after, detail)"
                " VALUES (?, 'retrieval', NULL, ?, NULL, NULL, ?)",
                (format_ts(utcnow()), t.active_wing, json.dumps(metrics, ensure_ascii=False)),
            )
            replay_log.record(conn, int(cur.lastrowid), bundle)  # the request, client and ranked hits, for replay
            if own:
                conn.execute("COMMIT")
            if retention.due(int(cur.lastrowid), not self._pruned):
                self._pruned = True
                retention.prune_retrievals(conn, audit.retrieval_max_rows, audit.retrieval_max_age_days)
        except Exception:
            if own and conn.in_transaction:
                conn.execute("ROLLBACK")
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.settings.storage.busy_timeout_ms)}")

    def retrievals(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The newest logged retrievals; a row whose metrics do not decode (a hand edit) is left out."""
        limit = check_int("limit", limit, 1, MAX_LIST)
        rows = self.conn.execute(
            "SELECT seq, ts, detail FROM audit WHERE action = 'retrieval' ORDER BY seq DESC LIMIT ?", (limit,)
        ).fetchall()
        out = []
        for seq, ts, detail in rows:
            metrics = json_object(detail)
            if metrics is not None and isinstance(metrics.get("latency_ms", {}), dict):
                out.append({"seq": seq, "ts": ts, **metrics})
        return out

    # -- working memory ----------------------------------------------------------------------

    @property
    def tasks(self) -> Any:
        """Working memory: recent completed tasks and blockers (``memlens.working.tasks.WorkingMemory``)."""
        wm = self.__dict__.get("_working_memory")
        if wm is None:
            from memlens.working.tasks import WorkingMemory

            wm = self.__dict__.setdefault("_working_memory", WorkingMemory(self))
        return wm

    # -- stats -------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        conn = self.conn
        per: dict[str, dict[str, int]] = {}
        for col in ("wing", "kind", "type", "status"):
            per[col] = dict(visible_groups(conn, col))
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return {
            "store": str(self.path),
            "entries": self.count(),
            "per_wing": per["wing"],
            "per_kind": per["kind"],
            "per_type": per["type"],
            "per_status": per["status"],
            "size_bytes": size,
            "model": self.model_id,
            "dim": self.dim,
            "schema_version": db.schema_version(conn),
            "audit_rows": int(conn.execute(
                "SELECT (SELECT count(*) FROM audit) - (SELECT count(*) FROM audit WHERE import_id IN (SELECT id FROM imports))"
            ).fetchone()[0]),
            "read_only": self.read_only,
        }

    @property
    def read_only(self) -> bool:
        """True for a store in a read-only directory: opened as it is on disk, every write refused."""
        return db.is_read_only(self.conn)


def describe_validation(exc: Any) -> str:
    """One line from a pydantic ValidationError: ``field 'wing': message``."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "entry"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        return f"field {loc!r} is required"
    if err["type"] == "extra_forbidden":
        return f"unknown field {loc!r}"
    return f"field {loc!r}: {msg}"
