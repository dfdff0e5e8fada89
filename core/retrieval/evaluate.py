"""Retrieval evaluation on a BEIR-style question set, so weights can be tuned on real questions.

``queries.jsonl``: one ``{"_id": ..., "text": ...}`` per line (BEIR), optionally
with ``active_wing`` / ``wings``. ``qrels.tsv``: ``query-id<TAB>corpus-id<TAB>score``
with an optional header line; corpus ids are entry ids and scores are graded
relevance (> 0 means relevant).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memlens.errors import MemlensError
from memlens.retrieval.query import literal

if TYPE_CHECKING:
    from memlens.trace import Bundle


class Searches(Protocol):
    """What an evaluation asks of the engine: searches (a ``Memory`` is one)."""

    def search(self, query: str, *, profile: str | None = ..., active_wing: str | None = ...,
               wings: list[str] | None = ..., k: int | None = ..., use_cache: bool = ...) -> Bundle: ...

CUTOFFS = (1, 5, 10)


def shown(path: Path) -> str:
    """How messages name a JSONL input: its path, or stdin for '-'."""
    return "stdin" if str(path) == "-" else str(path)


def _read_lines(path: Path, what: str) -> list[str]:
    """The lines of a regular UTF-8 file of at most JSON_MAX_BYTES (a FIFO or /dev/zero is refused, not read), or of
    stdin ('-') up to the same size; a leading byte-order mark is dropped, as ``import`` drops it."""
    from memlens.files import JSON_MAX_BYTES, read_file, size_text

    if str(path) == "-":
        data = sys.stdin.buffer.read(JSON_MAX_BYTES + 1)
        if len(data) > JSON_MAX_BYTES:
            raise MemlensError(f"{what} on stdin: larger than the {size_text(JSON_MAX_BYTES)} limit")
    else:
        data = read_file(path, cap=JSON_MAX_BYTES, what=what)
    try:
        return data.decode("utf-8").removeprefix("\ufeff").splitlines()  # a byte-order mark some editors write
    except UnicodeDecodeError as exc:
        raise MemlensError(f"{what} {shown(path)}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_json_lines(path: Path, what: str = "queries") -> list[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line of a small JSONL file; bad JSON is a one-line error."""
    lines = _read_lines(path, what)
    out = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                from memlens.io.jsonl import json_error_text  # the message with its column, as import gives it

                raise MemlensError(f"{shown(path)}: line {n}: invalid JSON: {json_error_text(exc)}") from None
            except RecursionError:
                raise MemlensError(f"{shown(path)}: line {n}: invalid JSON: nested too deeply") from None
    return out


def load_queries(path: Path) -> list[dict[str, Any]]:
    out = []
    seen: dict[str, int] = {}  # query id -> its line: the qrels name a query by its id, so one id is one query
    for n, obj in read_json_lines(path):
        if not isinstance(obj, dict) or "_id" not in obj or not isinstance(obj.get("text"), str):
            raise MemlensError(f"{path}: line {n}: expected {{\"_id\": ..., \"text\": \"...\"}}")
        first = seen.setdefault(str(obj["_id"]), n)
        if first != n:
            raise MemlensError(f"{path}: line {n}: query id {str(obj['_id'])[:40]!r} is already the id of line {first} "
                               "(the qrels find a query by its id)")
        if not isinstance(obj.get("active_wing", ""), (str, type(None))):
            raise MemlensError(f"{path}: line {n}: active_wing: expected a string")
        wings = obj.get("wings")
        if wings is not None and (not isinstance(wings, list) or not all(isinstance(w, str) for w in wings)):
            raise MemlensError(f"{path}: line {n}: wings: expected a list of strings")
        out.append(obj)
    return out


MAX_GRADE = 100  # BEIR grades are 0, 1, 2…; far above, nDCG's gain overflows


def load_qrels(path: Path) -> dict[str, dict[str, float]]:
    qrels: dict[str, dict[str, float]] = {}
    lines = _read_lines(path, "qrels")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            raise MemlensError(f"{path}: line {n}: expected query-id<TAB>corpus-id<TAB>score")
        try:
            score = float(parts[2])
        except ValueError:
            if n == 1:
                continue  # header
            raise MemlensError(f"{path}: line {n}: score {parts[2]!r} is not a number") from None
        if not (math.isfinite(score) and score <= MAX_GRADE):  # nDCG's gain is 2**score - 1
            raise MemlensError(f"{path}: line {n}: score {parts[2][:40]!r} is not a relevance grade (a finite number "
                               f"up to {MAX_GRADE})")
        qrels.setdefault(parts[0], {})[parts[1]] = score
    return qrels


def _dcg(gains: list[float]) -> float:
    return sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(gains))


METRICS = tuple(f"recall@{c}" for c in CUTOFFS) + ("mrr@10", "ndcg@10")


def rank_metrics(ranked: list[str], rel: dict[str, float]) -> dict[str, float]:
    """Recall at each cutoff, MRR@10 and nDCG@10 of one ranked list of ids against its graded relevant ids."""
    row = {f"recall@{c}": len(set(ranked[:c]) & set(rel)) / len(rel) for c in CUTOFFS}
    row["mrr@10"] = next((1 / (i + 1) for i, d in enumerate(ranked[:10]) if d in rel), 0.0)
    ideal = _dcg(sorted(rel.values(), reverse=True)[:10])
    row["ndcg@10"] = _dcg([rel.get(d, 0.0) for d in ranked[:10]]) / ideal if ideal else 0.0
    return row


def mean_metrics(per_query: list[dict[str, Any]]) -> dict[str, float]:
    return {m: round(sum(r[m] for r in per_query) / len(per_query), 4) for m in METRICS}


def evaluate(mem: Searches, queries: list[dict[str, Any]], qrels: dict[str, dict[str, float]], *, profile: str = "memory",
             active_wing: str | None = None, wings: list[str] | None = None, k: int = 10) -> dict[str, Any]:
    per_query = []
    for q in queries:
        rel = {d: s for d, s in qrels.get(str(q["_id"]), {}).items() if s > 0}
        if not rel:
            continue
        try:
            b = mem.search(literal(q["text"]), profile=profile, active_wing=q.get("active_wing", active_wing),
                           wings=q.get("wings", wings), k=k, use_cache=False)
        except MemlensError as exc:
            raise MemlensError(f"query {str(q['_id'])[:40]!r}: {exc}") from None
        ranked = [r.entry.id for r in b.results][:k]
        per_query.append({"id": q["_id"], "retrieved": ranked, **rank_metrics(ranked, rel)})
    if not per_query:
        raise MemlensError("no query has a relevant document in the qrels; check the ids")
    summary = mean_metrics(per_query)
    return {"profile": profile, "queries": len(per_query), "skipped": len(queries) - len(per_query), **summary,
            "per_query": per_query}
