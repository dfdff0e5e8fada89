"""The answer log: every answer with the retrieval it used and the entries it cited.

This is the only module of ``memlens.assist`` that touches the store's tables
(``answers`` and ``answer_citations``, schema version 5). A row holds the
question (cut to 200 characters, like the retrieval log), the model, whether
the answer completed, its one-line error, the audit sequence number of the
retrieval row it used (when the retrieval was logged) and a summary of that
retrieval (profile, wings, the ids sent, the budget). The answer text itself
is not kept. Logging never fails an answer: a read-only, busy or damaged store
skips the row and says why.
"""

from __future__ import annotations

import json
from typing import Any

from memlens.limits import MAX_LIST, check_int

QUESTION_CHARS = 200


def last_retrieval_seq(mem: Any, query: str) -> int | None:
    """The audit row a search for ``query`` (its trace's query) just logged on this thread's connection, if it did
    (None at audit level "writes", or when the row could not be written)."""
    import hashlib

    try:
        row = mem.conn.execute(
            "SELECT seq, detail FROM audit WHERE seq = last_insert_rowid() AND action = 'retrieval'").fetchone()
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


def record(mem: Any, *, question: str, model: str, complete: bool, error: str | None, retrieval_seq: int | None,
           bundle: Any, cited: list[str], invented: list[str]) -> tuple[int | None, str | None]:
    """Store one answer: (its id, None), or (None, why it was not logged)."""
    from memlens.models import format_ts, utcnow
    from memlens.store import corruption, db

    if corruption.seen(mem.path):
        return None, "the store is damaged"
    try:
        if mem.read_only:
            return None, "the store is read-only"
        keep = int(mem.settings.audit.retrieval_max_rows)
        with db.transaction(mem.conn, mem.path) as conn:
            cur = conn.execute(
                "INSERT INTO answers(ts, question, model, complete, error, retrieval_seq, retrieval)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (format_ts(utcnow()), question[:QUESTION_CHARS], model, int(complete), error, retrieval_seq,
                 json.dumps(retrieval_summary(bundle), ensure_ascii=False)),
            )
            answer_id = int(cur.lastrowid)
            conn.executemany("INSERT OR IGNORE INTO answer_citations(answer_id, entry_id, valid) VALUES (?, ?, ?)",
                             [(answer_id, i, 1) for i in cited] + [(answer_id, i, 0) for i in invented])
            # bounded like the retrieval log: the newest answers are kept
            old = conn.execute("SELECT id FROM answers ORDER BY id DESC LIMIT 1 OFFSET ?", (keep,)).fetchone()
            if old is not None:
                conn.execute("DELETE FROM answer_citations WHERE answer_id <= ?", (old[0],))
                conn.execute("DELETE FROM answers WHERE id <= ?", (old[0],))
        return answer_id, None
    except Exception as exc:  # a locked or read-only store: the answer stands, unlogged
        return None, " ".join(str(exc).split())[:200] or type(exc).__name__


def answers(mem: Any, limit: int = 100) -> list[dict[str, Any]]:
    """The newest logged answers, newest first, each with its cited and invented ids."""
    limit = check_int("limit", limit, 1, MAX_LIST)
    rows = mem.conn.execute(
        "SELECT id, ts, question, model, complete, error, retrieval_seq, retrieval FROM answers ORDER BY id DESC LIMIT ?",
        (limit,)).fetchall()
    out = []
    for id_, ts, question, model, complete, error, seq, retrieval in rows:
        cites = mem.conn.execute("SELECT entry_id, valid FROM answer_citations WHERE answer_id = ? ORDER BY rowid",
                                 (id_,)).fetchall()
        try:
            summary = json.loads(retrieval)
        except (TypeError, ValueError):
            summary = {}
        out.append({"id": id_, "ts": ts, "question": question, "model": model, "complete": bool(complete),
                    "error": error, "retrieval_seq": seq, "retrieval": summary,
                    "citations": [e for e, v in cites if v], "invented_citations": [e for e, v in cites if not v]})
    return out


def cited_entries(mem: Any, limit: int = 20) -> list[dict[str, Any]]:
    """Entries answers cited (valid citations only), most cited first: id, title, times cited, last cited."""
    from memlens.store.staging import visible

    limit = check_int("limit", limit, 1, MAX_LIST)
    rows = mem.conn.execute(
        "SELECT c.entry_id, count(*) AS n, max(a.ts) AS last, "
        f"(SELECT title FROM entries e WHERE e.id = c.entry_id AND {visible('e')}) "
        "FROM answer_citations c JOIN answers a ON a.id = c.answer_id WHERE c.valid = 1 "
        "GROUP BY c.entry_id ORDER BY n DESC, last DESC, c.entry_id LIMIT ?", (limit,)).fetchall()
    total = int(mem.conn.execute("SELECT count(*) FROM answers").fetchone()[0])
    return [{"entry_id": e, "cited": int(n), "last": last, "title": title, "answers": total}
            for e, n, last, title in rows]
