"""The evidence for one inbox item, each piece computed by the engine and given with its numbers.

* ``duplicate``: an entry of any wing whose stored vector is at least ``Thresholds.duplicate`` similar
  (cosine) and that shares at least ``Thresholds.containment`` of the shorter text's words
  (``shared_text``), with the entry the pair would merge into;
* ``conflict``: by key (another entry with the same key, different text, no override), and by
  subject without keys: an invariant or decision of another wing at least ``Thresholds.conflict``
  similar and not linked by ``overrides`` (the rule search flags), and, in the entry's own wing, one of
  equal or higher authority on the same subject: the new rule contradicts it or supersedes it, which
  only a person can tell (superseding sets ``overrides``);
* ``overrides``: the override the entry sets (a missing or deprecated target, or one of higher authority
  than the entry), and the overrides a deletion, deprecation or cleared override leaves pointing at
  nothing live;
* ``authority``: a lower-authority entry restating a higher one (a note that duplicates an invariant);
* ``use``: how often logged searches returned the entry since the agent's first unanswered write.

``impact`` (which golden and logged queries accepting or rejecting would change) runs the searches
again inside a rolled-back transaction, so it is computed only when asked (``memlens.review.desk``).
Each piece says whether it argues against accepting (``against``); bulk accept skips an item with any.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from memlens.compact_json import dumps
from memlens.models import AUTHORITY, Entry, content_hash
from memlens.review.inbox import Item
from memlens.store.rows import row_to_entry
from memlens.store.scope import Knn, Rows, Scope

RULES = ("invariant", "decision")  # the types a contradiction matters for (the search's keyless rule too)
NEIGHBOURS = 10  # nearest entries looked at for each kind of evidence
SAME_SUBJECT = "same subject, no override"
SAME_WING = "same subject, same wing"
SAME_KEY = "same key"

# a stored row as ``Reads.rows`` returns it: rowid, content hash, then the entry's columns
_ID, _WING, _TYPE, _STATUS, _TITLE, _TEXT, _KEY, _OVERRIDES, _CREATED = 2, 3, 6, 7, 8, 9, 10, 12, 13


@dataclass(frozen=True)
class Thresholds:
    duplicate: float  # [review] duplicate_similarity: the cosine from which two entries may be duplicates
    containment: float  # [review] duplicate_shared_text: ... and the share of the shorter one's words the other has
    conflict: float  # [retrieval] conflict_similarity
    same_key: float  # [retrieval] dedup_similarity: the same key and this similar is one entry, not a conflict


class EvidenceSource(Protocol):
    """What the evidence reads: entries and their stored vectors, nearest neighbours, the access log."""

    def get_row(self, entry_id: str) -> tuple[Any, ...] | None: ...
    def entry_vector(self, entry_id: str) -> bytes | None: ...
    def knn(self, qvec: np.ndarray, scope: Scope, n: int) -> Knn: ...
    def rows(self, rowids: Sequence[int]) -> Rows: ...
    def related(self, ids: list[str], keys: Iterable[str], scope: Scope) -> list[int]: ...
    def access_rows(self, entry_id: str, needle: str, limit: int) -> list[tuple[Any, ...]]: ...


@lru_cache(maxsize=1024)
def words(text: str) -> frozenset[str]:
    """The text's distinct words, kept for the texts seen last: lint weighs each entry against many others (a cluster
    of near-copies made every pair cut both texts again: 44 of 65 s for 1,068 entries)."""
    return frozenset(re.findall(r"\w+", text.casefold()))


def shared_text(a: str, b: str) -> float:
    """The share of the shorter text's distinct words that the other text has too, 0..1 (1: it adds no word)."""
    wa, wb = words(a), words(b)
    small, large = (wa, wb) if len(wa) <= len(wb) else (wb, wa)
    return round(len(small & large) / len(small), 4) if small else 0.0


def duplicates(sim: float, a: str, b: str, th: Thresholds) -> tuple[bool, float]:
    """Whether two entries are near-duplicates: similar vectors, and one adds (almost) no word to the other.

    On 81 labelled pairs of real texts (``tests/data/duplicate_pairs.jsonl``) the vectors alone mistook
    documentation templates for duplicates (``align_top`` / ``align_middle``: cosine 0.97) at every
    threshold; requiring the shared words too is what made the flag right most of the time.
    """
    shared = shared_text(a, b)
    return sim >= th.duplicate and shared >= th.containment, shared


def _other(row: tuple[Any, ...], sim: float) -> dict[str, Any]:
    return {"id": row[_ID], "wing": row[_WING], "title": row[_TITLE], "type": row[_TYPE], "status": row[_STATUS],
            "similarity": round(sim, 4)}


def _linked(entry: Entry, row: tuple[Any, ...]) -> bool:
    return bool(entry.overrides == row[_ID] or row[_OVERRIDES] == entry.id)


Neighbour = tuple[tuple[Any, ...], float]  # a stored row and its cosine similarity


def _neighbours(src: EvidenceSource, vec: np.ndarray, scope: Scope, floor: float, exclude: str) -> list[Neighbour]:
    hits = [(r, s) for r, s in src.knn(vec, scope, NEIGHBOURS + 1).hits if s >= floor]
    found = {row[0]: row for row in src.rows([r for r, _ in hits]).rows}
    out = [(found[r], float(s)) for r, s in sorted(hits, key=lambda h: -h[1]) if r in found and found[r][_ID] != exclude]
    return out[:NEIGHBOURS]


def similar(entry: Entry, vec: np.ndarray, src: EvidenceSource, th: Thresholds, pending: set[str],
            new: bool = True) -> list[dict[str, Any]]:
    """Near-duplicates (with authority restatements) and keyless conflicts of ``entry`` (``new``: an added entry, also
    weighed against the rules of its own wing)."""
    out: list[dict[str, Any]] = []
    dup_ids = set()
    for row, sim in _neighbours(src, vec, Scope(), th.duplicate, entry.id):
        same, shared = duplicates(sim, entry.embed_text, f"{row[_TITLE]}\n{row[_TEXT]}", th)
        if not same:
            continue
        into = row[_ID]
        if into in pending and row[_CREATED] > entry.to_record()["created_at"]:
            into = entry.id  # two agent writes: the older one is kept
        dup_ids.add(row[_ID])
        out.append({"kind": "duplicate", **_other(row, sim), "shared_text": shared, "merge_into": into, "against": True})
        if row[_TYPE] in RULES and AUTHORITY[row[_TYPE]] < entry.authority:
            out.append({"kind": "authority", **_other(row, sim), "against": True,
                        "detail": f"a {entry.type.value} restating the {row[_TYPE]} {row[_ID]}: the higher one already says it"})
    if entry.type.value not in RULES:
        return out
    for row, sim in _neighbours(src, vec, Scope(types=list(RULES)), th.conflict, entry.id):
        if row[_STATUS] == "deprecated" or _linked(entry, row):
            continue
        if row[_ID] in dup_ids or (entry.key and row[_KEY] == entry.key):
            continue  # the same rule twice (the duplicate evidence names it), or one key (the key's rule decides)
        if row[_WING] != entry.wing:
            out.append({"kind": "conflict", "rule": SAME_SUBJECT, **_other(row, sim), "against": True,
                        "detail": "rules of two wings on the same subject, neither overrides the other: read both"})
        elif new and AUTHORITY[row[_TYPE]] <= entry.authority:
            out.append({"kind": "conflict", "rule": SAME_WING, **_other(row, sim), "against": True,
                        "detail": f"contradicts or supersedes the {row[_TYPE]} {row[_ID]}: accept with --supersedes "
                                  f"{row[_ID]} to set overrides, or reject"})
    return out


def key_conflicts(entry: Entry, vec: np.ndarray | None, src: EvidenceSource, th: Thresholds) -> list[dict[str, Any]]:
    """Entries with the same key and other text, no override between them: in other wings (the search's rule), and
    in the entry's own wing (one key names one fact or rule: two texts for it are for a person to settle)."""
    if not entry.key:
        return []
    rows = src.rows(src.related([], [entry.key], Scope())).rows
    others = [r for r in rows if r[_KEY] == entry.key and r[_ID] != entry.id
              and r[_STATUS] != "deprecated" and not _linked(entry, r) and r[1] != content_hash(entry.embed_text)]
    out = []
    for row in others:
        blob = src.entry_vector(row[_ID])
        sim = float(np.frombuffer(blob, "<f4") @ vec) if blob is not None and vec is not None else 0.0
        if sim >= th.same_key and row[5] == entry.kind.value:
            continue  # the same fact stored twice: the duplicate evidence covers it
        detail = ("the same key in two wings with different text and no override" if row[_WING] != entry.wing else
                  f"the same key as {row[_ID]} in this wing with different text: accept with --supersedes {row[_ID]} "
                  "to set overrides, or reject")
        out.append({"kind": "conflict", "rule": SAME_KEY, "key": entry.key, **_other(row, sim), "against": True,
                    "detail": detail})
    return out


def overrides_set(entry: Entry, src: EvidenceSource) -> list[dict[str, Any]]:
    if not entry.overrides:
        return []
    row = src.get_row(entry.overrides)
    if row is None:
        return [{"kind": "overrides", "sets": entry.overrides, "against": True,
                 "detail": f"overrides {entry.overrides}, which does not exist"}]
    target = row_to_entry(row)
    ev: dict[str, Any] = {"kind": "overrides", "sets": target.id, "wing": target.wing, "title": target.title,
                          "type": target.type.value, "status": target.status.value, "against": False,
                          "detail": f"hides {target.id} ({target.type.value}, {target.wing}) wherever both are found"}
    if target.status.value == "deprecated":
        ev.update(against=True, detail=f"overrides {target.id}, which is deprecated: it hides nothing")
    elif target.authority < entry.authority:
        ev.update(against=True, detail=f"a {entry.type.value} overriding the {target.type.value} {target.id}: "
                                       "lower authority hiding higher")
    return [ev]


def overrides_broken(item: Item, src: EvidenceSource) -> list[dict[str, Any]]:
    """Overrides left pointing at nothing live: at the entry, if it is gone or deprecated; its own, if cleared."""
    out = []
    after, before = item.after, item.before
    if after is None or (after.get("status") == "deprecated" and (before or {}).get("status") != "deprecated"):
        by = [r[_ID] for r in src.rows(src.related([item.entry_id], [], Scope())).rows if r[_OVERRIDES] == item.entry_id]
        if by:
            gone = "deleted" if after is None else "deprecated"
            out.append({"kind": "overrides", "broken": by, "against": True,
                        "detail": f"{', '.join(by)} override{'s' if len(by) == 1 else ''} this entry, now {gone}"})
    was = (before or {}).get("overrides")
    if was and after is not None and after.get("overrides") != was:
        out.append({"kind": "overrides", "cleared": was, "against": True,
                    "detail": f"no longer overrides {was}: it is found again wherever both are"})
    return out


def use(item: Item, src: EvidenceSource, limit: int = 1000) -> dict[str, Any]:
    """How often logged searches returned the entry since the agent's first unanswered write."""
    since = item.writes[0].ts
    rows = [r for r in src.access_rows(item.entry_id, dumps(item.entry_id), limit) if str(r[1]) >= since]
    by: dict[str, int] = {}
    for r in rows:
        by[str(r[3])] = by.get(str(r[3]), 0) + 1
    return {"kind": "use", "retrieved": len(rows), "in_context": sum(1 for r in rows if r[6]), "by": by,
            "since": since, "last": rows[0][1] if rows else None, "against": False}


def evidence(item: Item, src: EvidenceSource, th: Thresholds, pending: set[str] | None = None) -> list[dict[str, Any]]:
    """Every piece of evidence of ``item`` but its impact (see the module docstring)."""
    out: list[dict[str, Any]] = []
    row = src.get_row(item.entry_id) if item.after is not None else None
    if row is not None:
        entry = row_to_entry(row)
        blob = src.entry_vector(entry.id)
        vec = None if blob is None else np.frombuffer(blob, "<f4").astype(np.float32)
        if vec is not None and float(np.abs(vec).sum()) > 0:
            out += similar(entry, vec, src, th, pending or set(), new=item.before is None)
        out += key_conflicts(entry, vec, src, th)
        if entry.status.value != "deprecated":
            out += overrides_set(entry, src)
    out += overrides_broken(item, src)
    out.append(use(item, src))
    return out


def against(evidence: list[dict[str, Any]]) -> bool:
    return any(e.get("against") for e in evidence)
