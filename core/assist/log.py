"""The answer log: every answer with the retrieval it used and the entries it cited.

This is the only module of ``memlens.assist`` that touches the store's tables
(``answers`` and ``answer_citations``), through the store's answer-log methods
(``memlens.store.answers_sql`` on SQLite, ``memlens.store.postgres.answers``). A row holds the
question (cut to 200 characters, like the retrieval log), the model, whether
the answer completed, its one-line error, the audit sequence number of the
retrieval row it used (when the retrieval was logged) and a summary of that
retrieval (profile, wings, the ids sent, the budget). The answer text itself
is not kept. Logging never fails an answer: a read-only, busy or damaged store
skips the row and says why.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from memlens.limits import MAX_LIST, check_int
from memlens.store.base import Lookups

if TYPE_CHECKING:
    from pathlib import Path

    from memlens.config import Settings

QUESTION_CHARS = 200


class AnswerStore(Lookups, Protocol):
    """The store role the answer log uses: the answer tables and the last retrieval row (``Lookups``), and whether
    the store takes writes."""

    def read_only(self) -> bool: ...


class AnswerLog(Protocol):
    """What the answer log asks of the engine (a ``Memory`` is one): its ``store`` (that role), ``path`` (a store
    seen damaged is not written) and ``settings`` (how many answers are kept)."""

    @property
    def store(self) -> AnswerStore: ...

    @property
    def path(self) -> Path | str: ...

    @property
    def settings(self) -> Settings: ...


def last_retrieval_seq(mem: AnswerLog, query: str) -> int | None:
    """The audit row a search for ``query`` (its trace's query) just logged on this thread's connection, if it did
    (None at audit level "writes", or when the row could not be written)."""
    import hashlib

    try:
        row = mem.store.last_retrieval()
    except Exception:
        return None
    if row is None:
        return None
    try:
        detail = json.loads(row[1])
    except (TypeError, ValueError):
        return None
    want = hashlib.sha256(query.encode()).hexdigest()[:16]
    return int(row[0]) if isinstance(detail, dict) and detail.get("query_hash") == want else None


def retrieval_summary(bundle: Any) -> dict[str, Any]:
    t = bundle.trace
    budget = t.budget or {}
    return {"query": t.query[:QUESTION_CHARS], "profile": t.profile, "active_wing": t.active_wing,
            "wings_searched": t.wings_searched, "sent_ids": [r.entry.id for r in bundle.results],
            "budget": budget.get("budget"), "tokens_used": budget.get("used"), "cache_hit": t.cache_hit,
            "degraded": bool(t.degraded)}


def record(mem: AnswerLog, *, question: str, model: str, complete: bool, error: str | None, retrieval_seq: int | None,
           bundle: Any, cited: list[str], invented: list[str]) -> tuple[int | None, str | None]:
    """Store one answer: (its id, None), or (None, why it was not logged)."""
    from memlens.models import format_ts, utcnow
    from memlens.store import corruption

    if corruption.seen(mem.path):
        return None, "the store is damaged"
    try:
        if mem.store.read_only():
            return None, "the store is read-only"
        keep = int(mem.settings.audit.retrieval_max_rows)
        values = (format_ts(utcnow()), question[:QUESTION_CHARS], model, int(complete), error, retrieval_seq,
                  json.dumps(retrieval_summary(bundle), ensure_ascii=False))
        # bounded like the retrieval log: the newest answers are kept
        answer_id = mem.store.record_answer(values, cited, invented, keep)
        return answer_id, None
    except Exception as exc:  # a locked or read-only store: the answer stands, unlogged
        return None, " ".join(str(exc).split())[:200] or type(exc).__name__


def answers(mem: AnswerLog, limit: int = 100) -> list[dict[str, Any]]:
    """The newest logged answers, newest first, each with its cited and invented ids."""
    limit = check_int("limit", limit, 1, MAX_LIST)
    rows = mem.store.answer_rows(limit)
    out = []
    for id_, ts, question, model, complete, error, seq, retrieval in rows:
        cites = mem.store.answer_citations(id_)
        try:
            summary = json.loads(retrieval)
        except (TypeError, ValueError):
            summary = {}
        out.append({"id": id_, "ts": ts, "question": question, "model": model, "complete": bool(complete),
                    "error": error, "retrieval_seq": seq, "retrieval": summary,
                    "citations": [e for e, v in cites if v], "invented_citations": [e for e, v in cites if not v]})
    return out


def cited_entries(mem: AnswerLog, limit: int = 20) -> list[dict[str, Any]]:
    """Entries answers cited (valid citations only), most cited first: id, title, times cited, last cited."""
    limit = check_int("limit", limit, 1, MAX_LIST)
    rows = mem.store.cited_rows(limit)
    total = mem.store.answer_count()
    return [{"entry_id": e, "cited": int(n), "last": last, "title": title, "answers": total}
            for e, n, last, title in rows]
