"""Scope, authority and status policy, and dedup of the same entry stored in several wings.

All of it works on the candidate pool and reports to the trace; nothing is
resolved silently. The same functions run for search and for "why not?".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from memlens.models import AUTHORITY, Entry
from memlens.store.rows import kept_entry
from memlens.trace import Components, Trace
from memlens.vocab import UNTRUSTED_KINDS

# An entry row as the store read it (``memlens.store.scope.StoredRow``): rowid, content hash, then the entry's
# columns in ``ENTRY_COLUMNS`` order (``memlens.store.reads``): id, wing, room, kind, type, status, title, text,
# key, salience, overrides, created_at, updated_at, meta (JSON text).
StoredEntryRow = tuple[int, str, str, str, str, str, str, str, str, str, str | None, float, str | None, str, str, str]


@dataclass(eq=False, slots=True)
class Candidate:
    """One entry in the pool, kept as its stored row until a caller needs the full ``Entry``.

    A search weighs ~100 candidates and returns ~10: policy reads the few
    columns it needs straight from the stored row, and only results (and the
    profiles that read ``meta``) pay for building an ``Entry``. The row is kept
    as the store read it (``StoredRow``: rowid, content hash, then the entry's
    columns): a row a search has not read lately is cold in the CPU's caches,
    and copying its columns out touched every one of them.
    """

    stored: StoredEntryRow  # (rowid, content_hash, *ENTRY_COLUMNS) as the store read it
    comps: Components = field(default_factory=Components)
    profile_score: float = 0.0
    mandatory: bool = False
    keep: bool = False  # exempt from threshold / relative / cap (mandatory invariants, conflict partners)
    found_in: list[str] = field(default_factory=list)
    conflicts_with: list[str] = field(default_factory=list)
    hides: list[str] = field(default_factory=list)
    source: str = "search"
    _entry: Entry | None = field(default=None, repr=False)
    rowid: int = field(init=False)
    id: str = field(init=False)  # the entry's id: read ~10 times per candidate by policy, so a field

    def __post_init__(self) -> None:
        self.rowid = self.stored[0]
        self.id = self.stored[2]

    @property
    def content_hash(self) -> str:
        return self.stored[1]

    @property
    def entry(self) -> Entry:
        if self._entry is None:
            self._entry = kept_entry(self.stored)
        return self._entry

    @property
    def wing(self) -> str:
        return self.stored[3]

    @property
    def kind(self) -> str:
        return self.stored[5]

    @property
    def type(self) -> str:
        return self.stored[6]

    @property
    def status(self) -> str:
        return self.stored[7]

    @property
    def title(self) -> str:
        return self.stored[8]

    @property
    def text(self) -> str:
        return self.stored[9]

    @property
    def key(self) -> str | None:
        return self.stored[10]

    @property
    def overrides(self) -> str | None:
        return self.stored[12]

    @property
    def salience(self) -> float:
        return float(self.stored[11])

    @property
    def changed_at(self) -> str:
        """When the entry last changed, as stored (``updated_at``, else ``created_at``): what recency decays from."""
        return self.stored[14] or self.stored[13]

    @property
    def score(self) -> float:
        return self.comps.final

    @property
    def authority(self) -> int:
        return AUTHORITY[self.stored[6]]


_FINAL = attrgetter("comps.final")


def by_score(pool: Iterable[Candidate]) -> list[Candidate]:
    """Highest score first, ties in pool order (the same order as sorting by ``-score``, without a Python call
    per candidate)."""
    return sorted(pool, key=_FINAL, reverse=True)


def dedup_and_conflicts(
    pool: list[Candidate], vectors: dict[int, np.ndarray], trace: Trace, dedup_similarity: float
) -> list[Candidate]:
    """Merge duplicates across wings and flag conflicting rules.

    Entries with the same content hash are the same memory. Entries with the
    same (kind, key) are the same memory when their vectors agree
    (cosine >= ``dedup_similarity``). Otherwise two entries sharing a key, if they are in different wings
    and neither overrides the other, they are a **conflict**: both are kept,
    flagged and listed in the trace (rule ``same key``). Rules without a shared
    key are compared by subject later, by ``subject_conflicts``.
    """
    if len({c.content_hash for c in pool}) == len(pool) and not any(c.key for c in pool):
        return list(pool)  # no two share a text, none has a key: nothing to merge or flag
    by_id = {c.id: c for c in pool}
    dropped: set[str] = set()
    ordered = by_score(pool)

    def merge(winner: Candidate, loser: Candidate, why: str) -> None:
        dropped.add(loser.id)
        if not winner.found_in:
            winner.found_in.append(winner.wing)
        for w in [loser.wing, *loser.found_in]:
            if w not in winner.found_in:
                winner.found_in.append(w)
        winner.mandatory = winner.mandatory or loser.mandatory
        trace.drop(loser, "dedup", f"{why} as {winner.id} ({winner.wing}), which scored higher", loser.score)

    # same content: the higher-scored copy stays
    seen_hash: dict[str, Candidate] = {}
    for c in ordered:
        first = seen_hash.get(c.content_hash)
        if first is None:
            seen_hash[c.content_hash] = c
        elif not _override_pair(first, c):
            merge(first, c, "same text")

    # a key names one fact or rule: same kind and agreeing vectors is a duplicate, anything else a conflict
    groups: dict[str, list[Candidate]] = {}
    for c in ordered:
        if c.id not in dropped and c.key:
            groups.setdefault(c.key, []).append(c)
    for members in groups.values():
        for i, a in enumerate(members):
            if a.id in dropped:
                continue
            for b in members[i + 1 :]:
                if b.id in dropped or _override_pair(a, b):
                    continue
                va, vb = vectors.get(a.rowid), vectors.get(b.rowid)
                cos = float(va @ vb) if va is not None and vb is not None else 0.0
                if cos >= dedup_similarity and a.kind == b.kind:
                    merge(a, b, f"same key {a.key!r}, cosine {cos:.3f}")
                elif a.wing != b.wing:
                    _flag_conflict(a, b, cos, trace, "same key", key=a.key)
    return [c for c in pool if c.id not in dropped and c.id in by_id]


# the rule types a contradiction matters for; notes and facts are never flagged by subject
SUBJECT_TYPES = frozenset({"invariant", "decision"})
SAME_SUBJECT = "same subject, no override"


def subject_conflicts(pool: list[Candidate], vectors: dict[int, np.ndarray], trace: Trace, limit: int, threshold: float) -> None:
    """Flag rules of different wings about the same subject that no ``overrides`` links.

    Keys are rarely set, so two rules are also compared by their vectors: an
    invariant or decision of one wing and one of another with cosine >=
    ``threshold``, neither overriding the other, are both flagged (rule
    ``same subject, no override``) for a person to review. Only pairs among
    the results are compared: what ``cap`` keeps (entries kept anyway, then the
    ``limit`` best by score), so a flag never adds a result. ``vectors`` must
    hold every such candidate's vector (a missing one is skipped).
    """
    shown = {c.id for c in pool if c.keep} | {
        c.id for c in by_score(c for c in pool if not c.keep)[:limit]
    }
    rules = [c for c in pool if c.id in shown and c.type in SUBJECT_TYPES and c.rowid in vectors]
    if len(rules) < 2:
        return
    mat = np.stack([vectors[c.rowid] for c in rules])
    sims = mat @ mat.T
    for i, a in enumerate(rules):
        for j in range(i + 1, len(rules)):
            b = rules[j]
            cos = float(sims[i, j])
            if cos < threshold or a.wing == b.wing or b.id in a.conflicts_with or _override_pair(a, b):
                continue
            _flag_conflict(a, b, cos, trace, SAME_SUBJECT, keep=False)


def _flag_conflict(a: Candidate, b: Candidate, cos: float, trace: Trace, rule: str, keep: bool = True, **extra: Any) -> None:
    """Both flagged (and kept past the cap if ``keep``); the trace lists the pair and, in ``conflict_details``, why."""
    for x, y in ((a, b), (b, a)):
        if y.id not in x.conflicts_with:
            x.conflicts_with.append(y.id)
        x.keep = x.keep or keep
    pair = sorted([a.id, b.id])
    trace.conflicts.append(pair)
    trace.conflict_details.append({"pair": pair, "similarity": round(cos, 4), "rule": rule, **extra})


def _override_pair(a: Candidate, b: Candidate) -> bool:
    return a.overrides == b.id or b.overrides == a.id


def apply_overrides(pool: list[Candidate], trace: Trace) -> list[Candidate]:
    """An explicit ``overrides`` hides the overridden entry; the trace says by which."""
    overriding = [c for c in pool if c.overrides]
    if not overriding:
        return list(pool)  # most pools override nothing: no index of the pool to build
    by_id = {c.id: c for c in pool}
    hidden: set[str] = set()
    for c in overriding:
        target = c.overrides
        if target in by_id and target != c.id:
            hidden.add(target)
            c.hides.append(target)
            t = by_id[target]
            trace.drop(t, "override", f"overridden by {c.id} ({c.wing})", t.score)
    return [c for c in pool if c.id not in hidden]


def thresholds(pool: list[Candidate], trace: Trace, min_score: float | None, relative: float | None) -> list[Candidate]:
    """Absolute floor, then the relative cut against the top hit (a profile sets either or both)."""
    if min_score is None and relative is None:
        return list(pool)
    out = []
    for c in pool:
        if min_score is not None and not c.keep and c.profile_score < min_score:
            trace.drop(c, "threshold", f"score {c.profile_score:.3f} < min {min_score}", c.profile_score)
        else:
            out.append(c)
    if relative is not None and out:
        top = max(c.profile_score for c in out)
        kept = []
        for c in out:
            if not c.keep and c.profile_score < top * relative:
                trace.drop(
                    c,
                    "relative",
                    f"score {c.profile_score:.3f} < {relative} × top {top:.3f} = {top * relative:.3f}",
                    c.profile_score,
                )
            else:
                kept.append(c)
        out = kept
    return out


def authority_order(pool: list[Candidate]) -> list[Candidate]:
    """Invariant → decision → pattern → note (higher authority first); score within."""
    return sorted(pool, key=lambda c: (c.authority, -c.score, c.id))


def cap(pool: list[Candidate], trace: Trace, limit: int) -> list[Candidate]:
    """Keep ``limit`` results by score; mandatory invariants and conflict partners always stay."""
    ranked = [c for c in by_score(pool) if not c.keep]  # ids are unique in a pool: the first ``limit`` are chosen
    chosen = {c.id for c in ranked[:limit]}
    trace.drop_each(ranked[limit:], "cap", f"score rank beyond the cap of {limit}")
    out = [c for c in pool if c.keep or c.id in chosen]
    if len(out) > limit:  # k is the number ranked by score: what always stays comes on top of it
        trace.notes.append(f"{len(out)} results for k={limit}: mandatory invariants and conflict partners always stay "
                           "on top of the k best")
    return out


def flags_for(c: Candidate, active_wing: str | None) -> list[str]:
    flags = []
    if c.mandatory:
        flags.append("mandatory")
    if c.status == "under_review":
        flags.append("under_review")
    if active_wing and c.wing == active_wing:
        flags.append("active_wing")
    if c.conflicts_with:
        flags.append("conflict")
    if c.kind in UNTRUSTED_KINDS:
        flags.append("untrusted")
    return flags


def describe(pool: list[Candidate]) -> list[dict[str, Any]]:
    return [{"id": c.id, "score": c.score} for c in pool]
