""""Why not?": the exact stage at which an entry left the pipeline for a query.

It runs the very same pipeline (cache bypassed) and reads its trace. For an
entry that never became a candidate, it checks the pre-candidate gates in
pipeline order: status, scope (wings), the query's filters, the profile, and
finally the over-fetch limit, reporting the entry's own similarity and BM25
rank within the scope.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from memlens.retrieval.terms import lexical_terms
from memlens.store.vectors import clean

if TYPE_CHECKING:
    import numpy as np

    from memlens.config import Settings
    from memlens.models import Entry
    from memlens.store.reads import Reads
    from memlens.trace import Bundle


class Explaining(Protocol):
    """What "why not?" asks of the engine (a ``Memory`` is one): the entry, a search, its vector, the query's, and
    the store's read role for the scope's vectors and text matches."""

    @property
    def settings(self) -> Settings: ...

    @property
    def reads(self) -> Reads: ...

    def get(self, entry_id: str) -> Entry: ...
    def search(self, query: str, **kwargs: Any) -> Bundle: ...
    def vector(self, entry_id: str) -> np.ndarray: ...
    def embed(self, texts: list[str]) -> np.ndarray: ...


def explain(mem: Explaining, query: str, entry_id: str, **kwargs: Any) -> dict[str, Any]:
    entry = mem.get(entry_id)
    kwargs.pop("use_cache", None)
    bundle = mem.search(query, use_cache=False, **kwargs)
    t = bundle.trace
    base: dict[str, Any] = {"id": entry_id, "title": entry.title, "wing": entry.wing, "query": query, "profile": t.profile}
    for r in bundle.results:
        if r.entry.id == entry_id:
            return {**base, "verdict": "returned", "stage": None, "rank": r.rank, "score": r.score, "flags": r.flags,
                    "components": r.components.model_dump(),
                    "detail": f"returned at rank {r.rank} of {len(bundle.results)} with score {r.score:.3f}"}
    for d in t.dropped:
        if d.id == entry_id:
            return {**base, "verdict": "dropped", "stage": d.stage, "detail": d.detail, "score": d.score}
    stage, detail = _never_a_candidate(mem, entry, bundle, kwargs)
    return {**base, "verdict": "not retrieved", "stage": stage, "detail": detail}


def _never_a_candidate(mem: Explaining, entry: Any, bundle: Any, kwargs: dict[str, Any]) -> tuple[str, str]:
    t = bundle.trace
    statuses = t.filters.get("status") or ["active", "under_review"]
    if entry.status.value not in statuses:
        how = "ask with status=deprecated" if entry.status.value == "deprecated" else f"status filter is {'|'.join(statuses)}"
        return "status", f"entry is {entry.status.value}; excluded unless the query asks for it ({how})"
    if entry.wing not in t.wings_searched:
        return "scope", f"wing {entry.wing!r} is not among the wings searched ({', '.join(t.wings_searched)})"
    for key, value in (("room", entry.room), ("kind", entry.kind.value), ("type", entry.type.value)):
        allowed = t.filters.get(key)
        if allowed and value not in allowed:
            return "scope", f"the query filters {key}={'|'.join(allowed)}; the entry's {key} is {value!r}"
    prof = t.profile_settings
    if prof.get("kinds") and entry.kind.value not in prof["kinds"]:
        return "profile", f"profile {t.profile!r} retrieves kind {'|'.join(prof['kinds'])}; the entry is a {entry.kind.value}"
    if prof.get("rooms") and entry.room not in prof["rooms"] and not t.filters.get("room"):
        return "profile", f"profile {t.profile!r} retrieves room {'|'.join(prof['rooms'])}; the entry is in {entry.room!r}"
    for note in t.notes:
        if "needs" in note or "allows no kind" in note:
            return "profile", note
    if not t.text:
        return "candidates", "the query has no free text; only the first entries of the scope by authority are listed"
    # it passed every gate but neither generator ranked it high enough
    vec = clean(mem.vector(entry.id))
    qvec = clean(mem.embed([t.text])[0])
    sim = float(vec @ qvec)
    store = mem.reads
    wings = t.wings_searched
    higher = sum(float(v @ qvec) > sim for v in store.scope_vectors(wings, statuses))
    lexical = "does not match any query term"
    ids = store.text_matches(lexical_terms(t.text).text, wings)  # the lexical stage's terms
    if entry.id in ids:
        lexical = f"BM25 rank {ids.index(entry.id) + 1}"
    over = t.candidates.get("over_fetch", mem.settings.search.candidates)
    unusable = " (its stored vector is all zeros or not finite, so it is never a vector neighbour)" if not vec.any() else ""
    return "candidates", (
        f"similarity {sim:.3f}{unusable} ranks {higher + 1} in scope and {lexical}; only the top {over} of each "
        f"generator become candidates (search.candidates)"
    )
