"""Every read and write of replay, golden queries, the access log and freshness, through the store's interface
(``memlens.store.base.ReplayLog``: ``memlens.store.replay_sql`` on SQLite, ``memlens.store.postgres.replay`` on
PostgreSQL); this module decodes the rows, the same way for both.

The tables (made by each backend's migrations):

* ``retrieval_log(seq, request, client, context, hits)``: one row per ``retrieval`` audit row (same ``seq``):
  the request as the caller made it (query, active wing, wings, k, profile, budget, user; and the weights in
  force), the client that made it (``cli``, ``app``, ``api`` or an MCP client's name), whether it was made to
  build an agent's context, and its ranked results as one JSON array of
  ``[id, score, relevance, recency, salience, boost, rerank]`` (rank order): ~100 bytes a result.
* ``golden(id, query, expect, active_wing, within, created_at)``: the golden queries.

A retrieval's row is deleted with its audit row (a trigger on SQLite, a cascading foreign key on PostgreSQL), so
they are kept exactly as long as the audit keeps retrieval records (``[audit] retrieval_max_rows`` / ``retrieval_max_age_days``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

# light at import time: only the JSON encoder
from memlens.compact_json import dumps

if TYPE_CHECKING:
    from memlens.config import Settings
    from memlens.replay.context import ReplayContext
    from memlens.trace import RetrievalRecord

R = TypeVar("R", bound="ReplayContext")  # a copy of the engine is of the engine's own type


# -- what a retrieval is logged with -------------------------------------------------------------


HIT_COMPONENTS = ("relevance", "recency", "salience", "boost", "rerank")


def record(rec: RetrievalRecord) -> tuple[str, str, int, str]:
    """The ``retrieval_log`` row (request, client, context, hits) of a retrieval: what replay and the access log need.
    The store writes it in the transaction of the retrieval's audit row (``Store.log_retrieval``)."""
    t = rec.bundle.trace
    # the weights in force are kept beside the request (a replay runs with today's): they explain a moved score
    logged_req = {**rec.request, "weights_used": t.weights} if t.weights else rec.request
    hits = []
    for r in rec.bundle.results:  # [id, score, *HIT_COMPONENTS], each number to 6 decimals
        c, rerank = r.components, r.components.rerank
        hits.append([r.entry.id, round(float(r.score), 6), round(float(c.relevance), 6), round(float(c.recency), 6),
                     round(float(c.salience), 6), round(float(c.boost), 6), None if rerank is None else round(float(rerank), 6)])
    return dumps(logged_req), rec.client, int(rec.context), dumps(hits)


# -- reading the log -------------------------------------------------------------------------------


def logged(mem: ReplayContext, *, last: int | None = None, since: str | None = None, query: str | None = None,
           limit: int = 100_000) -> list[dict[str, Any]]:
    """Logged retrievals, oldest first: ``{seq, ts, request, client, context, hits: [{id, rank, score, <components>}]}``."""
    out = []
    for seq, ts, req, client, ctx, hits in mem.store.logged_rows(min(last or limit, limit), since, query)[::-1]:
        try:
            request_args, ranked = json.loads(req), json.loads(hits)
            rows = [{"id": h[0], "rank": i + 1, "score": h[1], **dict(zip(HIT_COMPONENTS, h[2:]))}
                    for i, h in enumerate(ranked)]
        except (ValueError, TypeError, IndexError, KeyError):
            continue  # a hand-edited row: left out
        out.append({"seq": int(seq), "ts": ts, "request": request_args, "client": client, "context": bool(ctx),
                    "hits": rows})
    return out


def access(mem: ReplayContext, entry_id: str, limit: int = 1000) -> list[dict[str, Any]]:
    """When ``entry_id`` was retrieved, newest first: ``{seq, ts, query, client, rank, score, in_context}``."""
    rows = mem.store.access_rows(entry_id, dumps(entry_id), limit)  # as the log wrote it
    return [{"seq": int(s), "ts": ts, "query": q, "client": c, "rank": int(rank), "score": score, "in_context": bool(ctx)}
            for s, ts, q, c, rank, score, ctx in rows]


def retrieval_counts(mem: ReplayContext, wing: str | None = None) -> list[dict[str, Any]]:
    """Each active entry (of ``wing``): how many logged retrievals searched its wing, and how many returned it."""
    return [{"id": i, "wing": w, "type": t, "title": title, "searched": int(s), "retrieved": int(h)}
            for i, w, t, title, s, h in mem.store.retrieval_count_rows(wing)]


def entry_states(mem: ReplayContext, ids: list[str]) -> dict[str, str]:
    """The status of each of ``ids`` that still exists (a missing id was deleted)."""
    return mem.store.entry_statuses(ids)


# -- golden queries --------------------------------------------------------------------------------


def golden_add(mem: ReplayContext, query: str, expect: str, active_wing: str | None, within: int) -> int:
    from memlens.models import format_ts, utcnow

    return mem.store.golden_insert(query, expect, active_wing or "", within, format_ts(utcnow()))


def golden_list(mem: ReplayContext) -> list[dict[str, Any]]:
    return [{"id": int(i), "query": q, "expect": e, "active_wing": w or None, "within": int(k), "created_at": ts}
            for i, q, e, w, k, ts in mem.store.golden_rows()]


def golden_remove(mem: ReplayContext, golden_id: int) -> bool:
    return mem.store.golden_delete(golden_id)


# -- freshness -------------------------------------------------------------------------------------


def _embed_hash(title: str, text: str) -> str:
    from memlens.models import Entry, content_hash

    return content_hash(Entry.model_construct(wing="", title=title, text=text).embed_text)


def freshness(mem: ReplayContext, ids: list[str], model: str) -> dict[str, dict[str, Any]]:
    """Per entry: the model and content hash its vector was made with, against the store's model and its text now."""
    out: dict[str, dict[str, Any]] = {}
    for eid, title, text, h, m in mem.store.vector_stamps(ids):
        matches = h == _embed_hash(title, text)
        out[eid] = {"model": m, "current_model": model, "hash_matches": matches, "fresh": m == model and matches}
    return out


def stale_rows(mem: ReplayContext, model: str, wing: str | None = None) -> list[tuple[int, str, str, str, str]]:
    """``(rowid, id, wing, title, text)`` of every entry whose vector is not the store model's of its text now."""
    return [(int(rowid), eid, w, title, text) for rowid, eid, w, title, text, h, m in mem.store.stamp_rows(wing)
            if m != model or h != _embed_hash(title, text)]


def write_vectors(mem: ReplayContext, rows: list[tuple[int, str, str, str, str]], blobs: list[bytes], hashes: list[str],
                  model: str) -> None:
    """One transaction: the new vectors of ``rows`` (from ``stale_rows``), what they were made from, one audit row,
    the wings' generations."""
    mem.store.rewrite_vectors([(r[0], r[2]) for r in rows], blobs, hashes, model)


def set_store_model(mem: ReplayContext, model: str) -> None:
    """Make ``model`` the store's (every vector was made by it)."""
    mem.store.set_model(model)


# -- running the engine with other settings, or against a change that is never written ----------------


def with_settings(mem: R, settings: Settings) -> R:
    """``mem`` on the same connection with ``settings`` (copied; nothing saved) and retrieval logging off.

    A replay, a golden check or a preview must not add itself to the log it reads: the copy's audit level is
    ``writes``. It has its own caches (results of other settings must not be served to ``mem``).
    """
    return mem.with_settings(quiet(settings))


def quiet(settings: Settings) -> Settings:
    """A copy of ``settings`` at audit level ``writes``: nothing it runs is logged as a retrieval."""
    return settings.model_copy(update={"audit": settings.audit.model_copy(update={"level": "writes"})})


@contextmanager
def rolled_back(mem: R) -> Iterator[R]:
    """A ``mem`` whose writes happen inside one transaction that is rolled back on exit: nothing is ever written.

    The transaction holds the store's write lock while it is open (other writers wait, readers do not).
    """
    with mem.store.rolled_back() as store:
        yield mem.with_settings(quiet(mem.settings), store)  # its writes go into the held transaction
