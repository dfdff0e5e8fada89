"""Every read and write of replay, golden queries, the access log and freshness: the one module that touches SQL.

The tables are made by the store's migration 5 (``memlens.store.db``):

* ``retrieval_log(seq, request, client, context, hits)``: one row per ``retrieval`` audit row (same ``seq``):
  the request as the caller made it (query, active wing, wings, k, profile, budget, user; and the weights in
  force), the client that made it (``cli``, ``app``, ``api`` or an MCP client's name), whether it was made to
  build an agent's context, and its ranked results as one JSON array of
  ``[id, score, relevance, recency, salience, boost, rerank]`` (rank order): ~100 bytes a result.
* ``golden(id, query, expect, active_wing, within, created_at)``: the golden queries.

A trigger deletes a retrieval's rows with its audit row, so they are kept exactly as long as the audit keeps
retrieval records (``[audit] retrieval_max_rows`` / ``retrieval_max_age_days``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

# stdlib only at import time: the CLI imports this module before an MCP server answers ``initialize``

if TYPE_CHECKING:
    from memlens.memory import Memory
    from memlens.trace import Bundle

_request: ContextVar[dict[str, Any] | None] = ContextVar("memlens_replay_request", default=None)
_for_context: ContextVar[bool] = ContextVar("memlens_replay_context", default=False)
_default_client = {"name": "api"}


# -- what a retrieval is logged with -------------------------------------------------------------


def set_default_client(name: str) -> None:
    """The client named in the retrieval log when no MCP client is acting: ``cli``, ``app`` (default ``api``)."""
    _default_client["name"] = name


@contextmanager
def default_client(name: str) -> Iterator[None]:
    """``set_default_client(name)`` for a block; the previous name comes back after it (a CLI run called in-process
    must not relabel the retrievals of the program that called it)."""
    before = _default_client["name"]
    _default_client["name"] = name
    try:
        yield
    finally:
        _default_client["name"] = before


@contextmanager
def request(**args: Any) -> Iterator[None]:
    """The arguments of the search running inside, as the caller passed them (what a replay runs again)."""
    token = _request.set({k: v for k, v in args.items() if v is not None})
    try:
        yield
    finally:
        _request.reset(token)


@contextmanager
def building_context() -> Iterator[None]:
    """Mark the retrievals inside as made to build an agent's context (their results went into it)."""
    token = _for_context.set(True)
    try:
        yield
    finally:
        _for_context.reset(token)


def _client_name() -> str:
    from memlens.attribution import current, describe

    client = current()
    return describe(client) if client else _default_client["name"]


def _num(v: float | None) -> float | None:
    return None if v is None else round(float(v), 6)


HIT_COMPONENTS = ("relevance", "recency", "salience", "boost", "rerank")


def record(conn: Any, seq: int, bundle: Bundle) -> None:
    """Log what replay and the access log need for the retrieval logged as audit row ``seq`` (inside its transaction)."""
    t = bundle.trace
    req = _request.get() or {"query": t.query, "active_wing": t.active_wing, "profile": t.profile}
    # the weights in force are kept beside the request (a replay runs with today's): they explain a moved score
    logged_req = {**req, "weights_used": t.weights} if t.weights else req
    hits = [[r.entry.id, _num(r.score), *(_num(getattr(r.components, c)) for c in HIT_COMPONENTS)] for r in bundle.results]
    conn.execute(
        "INSERT INTO retrieval_log(seq, request, client, context, hits) VALUES (?, ?, ?, ?, ?)",
        (seq, _dumps(logged_req), _client_name(), int(_for_context.get()), _dumps(hits)),
    )


def _dumps(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


# -- reading the log -------------------------------------------------------------------------------


def logged(conn: Any, *, last: int | None = None, since: str | None = None, query: str | None = None,
           limit: int = 100_000) -> list[dict[str, Any]]:
    """Logged retrievals, oldest first: ``{seq, ts, request, client, context, hits: [{id, rank, score, <components>}]}``."""
    sql = ("SELECT a.seq, a.ts, l.request, l.client, l.context, l.hits FROM audit a JOIN retrieval_log l ON l.seq = a.seq"
           " WHERE a.action = 'retrieval'")
    args: list[Any] = []
    if since:
        sql += " AND a.ts >= ?"
        args.append(since)
    if query is not None:
        sql += " AND json_extract(l.request, '$.query') = ?"
        args.append(query)
    sql += " ORDER BY a.seq DESC LIMIT ?"
    args.append(min(last or limit, limit))
    out = []
    for seq, ts, req, client, ctx, hits in conn.execute(sql, args).fetchall()[::-1]:
        try:
            request_args, ranked = json.loads(req), json.loads(hits)
            rows = [{"id": h[0], "rank": i + 1, "score": h[1], **dict(zip(HIT_COMPONENTS, h[2:]))}
                    for i, h in enumerate(ranked)]
        except (ValueError, TypeError, IndexError, KeyError):
            continue  # a hand-edited row: left out
        out.append({"seq": seq, "ts": ts, "request": request_args, "client": client, "context": bool(ctx), "hits": rows})
    return out


def access(conn: Any, entry_id: str, limit: int = 1000) -> list[dict[str, Any]]:
    """When ``entry_id`` was retrieved, newest first: ``{seq, ts, query, client, rank, score, in_context}``."""
    rows = conn.execute(
        "SELECT l.seq, a.ts, json_extract(l.request, '$.query'), l.client, CAST(h.key AS INTEGER) + 1,"
        " json_extract(h.value, '$[1]'), l.context"
        " FROM retrieval_log l JOIN audit a ON a.seq = l.seq, json_each(l.hits) h"
        " WHERE instr(l.hits, ?) > 0 AND json_valid(l.hits) AND json_extract(h.value, '$[0]') = ?"
        " ORDER BY l.seq DESC LIMIT ?",
        (json.dumps(entry_id), entry_id, limit),
    ).fetchall()
    return [{"seq": s, "ts": ts, "query": q, "client": c, "rank": rank, "score": score, "in_context": bool(ctx)}
            for s, ts, q, c, rank, score, ctx in rows]


def retrieval_counts(conn: Any, wing: str | None = None) -> list[dict[str, Any]]:
    """Each active entry (of ``wing``): how many logged retrievals searched its wing, and how many returned it."""
    sql = (
        "WITH searched AS (SELECT j.value AS wing, count(*) AS n FROM audit a, json_each(a.detail, '$.wings_searched') j"
        "   WHERE a.action = 'retrieval' AND json_valid(a.detail) AND a.seq IN (SELECT seq FROM retrieval_log)"
        "   GROUP BY j.value),"
        " hit AS (SELECT json_extract(h.value, '$[0]') AS entry_id, count(DISTINCT l.seq) AS n"
        "   FROM retrieval_log l, json_each(l.hits) h WHERE json_valid(l.hits) GROUP BY 1)"
        " SELECT e.id, e.wing, e.type, e.title, coalesce(s.n, 0), coalesce(h.n, 0) FROM entries e"
        " LEFT JOIN searched s ON s.wing = e.wing LEFT JOIN hit h ON h.entry_id = e.id"
        f" WHERE e.status != 'deprecated' AND {_visible('e')}"
    )
    args: tuple[Any, ...] = ()
    if wing:
        sql += " AND e.wing = ?"
        args = (wing,)
    sql += " ORDER BY e.wing, e.rowid"
    return [{"id": i, "wing": w, "type": t, "title": title, "searched": s, "retrieved": h}
            for i, w, t, title, s, h in conn.execute(sql, args)]


def _visible(alias: str = "") -> str:
    """Entries that are published: imported ones keep their ``import_id`` once the import is done."""
    from memlens.store.staging import visible

    return visible(alias)


def entry_states(conn: Any, ids: list[str]) -> dict[str, str]:
    """The status of each of ``ids`` that still exists (a missing id was deleted)."""
    out: dict[str, str] = {}
    for i in range(0, len(ids), 400):
        chunk = ids[i : i + 400]
        out.update(conn.execute(f"SELECT id, status FROM entries WHERE id IN ({','.join('?' * len(chunk))})", chunk))
    return out


# -- golden queries --------------------------------------------------------------------------------


def golden_add(mem: Memory, query: str, expect: str, active_wing: str | None, within: int) -> int:
    from memlens.errors import ValidationError
    from memlens.models import format_ts, utcnow
    from memlens.store import db

    with db.transaction(mem.conn, mem.path) as conn:
        row = conn.execute("SELECT id FROM golden WHERE query = ? AND expect = ? AND active_wing = ?",
                           (query, expect, active_wing or "")).fetchone()
        if row is not None:
            raise ValidationError(f"golden query {row[0]} already expects {expect!r} for {query!r}")
        cur = conn.execute("INSERT INTO golden(query, expect, active_wing, within, created_at) VALUES (?, ?, ?, ?, ?)",
                           (query, expect, active_wing or "", within, format_ts(utcnow())))
        return int(cur.lastrowid)


def golden_list(conn: Any) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT id, query, expect, active_wing, within, created_at FROM golden ORDER BY id").fetchall()
    return [{"id": i, "query": q, "expect": e, "active_wing": w or None, "within": k, "created_at": ts}
            for i, q, e, w, k, ts in rows]


def golden_remove(mem: Memory, golden_id: int) -> bool:
    from memlens.store import db

    with db.transaction(mem.conn, mem.path) as conn:
        return bool(conn.execute("DELETE FROM golden WHERE id = ?", (golden_id,)).rowcount > 0)


# -- freshness -------------------------------------------------------------------------------------


def freshness(conn: Any, ids: list[str], model: str) -> dict[str, dict[str, Any]]:
    """Per entry: the model and content hash its vector was made with, against the store's model and its text now."""
    from memlens.models import Entry, content_hash

    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(ids), 400):
        chunk = ids[i : i + 400]
        for eid, title, text, h, m in conn.execute(
            f"SELECT id, title, text, content_hash, model FROM entries WHERE id IN ({','.join('?' * len(chunk))})", chunk
        ):
            now_hash = content_hash(Entry.model_construct(wing="", title=title, text=text).embed_text)
            out[eid] = {"model": m, "current_model": model, "hash_matches": h == now_hash,
                        "fresh": m == model and h == now_hash}
    return out


def stale_rows(conn: Any, model: str, wing: str | None = None) -> list[tuple[int, str, str, str, str]]:
    """``(rowid, id, wing, title, text)`` of every entry whose vector is not the store model's of its text now."""
    from memlens.models import Entry, content_hash

    sql = f"SELECT rowid, id, wing, title, text, content_hash, model FROM entries WHERE {_visible()}"
    args: tuple[Any, ...] = ()
    if wing:
        sql += " AND wing = ?"
        args = (wing,)
    out = []
    for rowid, eid, w, title, text, h, m in conn.execute(sql, args):
        if m != model or h != content_hash(Entry.model_construct(wing="", title=title, text=text).embed_text):
            out.append((rowid, eid, w, title, text))
    return out


def write_vectors(mem: Memory, rows: list[tuple[int, str, str, str, str]], blobs: list[bytes], hashes: list[str],
                  model: str) -> None:
    """One transaction: the new vectors of ``rows`` (from ``stale_rows``), what they were made from, one audit row,
    the wings' generations (vec0's metadata columns are copied from each entry's row)."""
    with mem.store.write() as writer:
        conn = writer.conn  # vec0's rows are rewritten here: the writer has no "replace the vector only"
        for (rowid, *_), blob, h in zip(rows, blobs, hashes):
            conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (rowid,))
            conn.execute("INSERT INTO entries_vec(rowid, embedding, wing, room, kind, type, status)"
                         " SELECT rowid, ?, wing, room, kind, type, status FROM entries WHERE rowid = ?", (blob, rowid))
            conn.execute("UPDATE entries SET content_hash = ?, model = ? WHERE rowid = ?", (h, model, rowid))
        seq = writer.audit("reembed", None, None, None, None, {"entries": len(rows), "model": model})
        writer.bump({r[2] for r in rows}, seq)


def set_store_model(mem: Memory, model: str) -> None:
    """Make ``model`` the store's (every vector was made by it)."""
    mem.store.set_model(model)


# -- running the engine with other settings, or against a change that is never written ----------------


def with_settings(mem: Memory, settings: Any) -> Memory:
    """``mem`` on the same connection with ``settings`` (copied; nothing saved) and retrieval logging off.

    A replay, a golden check or a preview must not add itself to the log it reads: the copy's audit level is
    ``writes``. It has its own caches (results of other settings must not be served to ``mem``).
    """
    clone = copy.copy(mem)
    clone.settings = settings.model_copy(update={"audit": settings.audit.model_copy(update={"level": "writes"})})
    clone._cache = None
    clone._profiles = None
    clone.__dict__.pop("_working_memory", None)
    return clone


class _HeldConnection:
    """A connection inside a transaction that only the preview ends: BEGIN and COMMIT of the writes it runs do nothing."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    @property
    def in_transaction(self) -> bool:
        return True

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.lstrip()[:8].upper().startswith(("BEGIN", "COMMIT", "END", "ROLLBACK")):
            return self._conn.execute("SELECT 1")
        return self._conn.execute(sql, *args)


@contextmanager
def rolled_back(mem: Memory) -> Iterator[Memory]:
    """A ``mem`` whose writes happen inside one transaction that is rolled back on exit: nothing is ever written.

    The transaction holds the store's write lock while it is open (other writers wait, readers do not).
    """
    conn = mem.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        clone = with_settings(mem, mem.settings)
        clone.store = mem.store.on_connection(_HeldConnection(conn))  # its writes go into the held transaction
        yield clone
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
