"""The query plan: everything decided before touching the store (scope, filters, profile, weights, limits)."""

from __future__ import annotations

from typing import Any, Protocol

from memlens.config import Settings
from memlens.errors import QueryError, ValidationError
from memlens.limits import MAX_NAME_CHARS, check_budget, check_k, check_text
from memlens.models import GLOBAL_WING
from memlens.profiles import Profile, route
from memlens.retrieval.query import ParsedQuery, check_known, parse
from memlens.retrieval.scoring import RetrievalWeights
from memlens.store.reads import Reads, Scope, entry_filters, sql_filters
from memlens.vocab import NAME_RE


class Planning(Protocol):
    """What a plan reads of the engine (a ``Memory`` is one): the settings, the profiles, the store's read role."""

    @property
    def settings(self) -> Settings: ...

    @property
    def profiles(self) -> dict[str, Profile]: ...

    @property
    def reads(self) -> Reads: ...


def resolve_scope(store: Reads, parsed: ParsedQuery, active_wing: str | None, wings: list[str] | None,
                  known: list[str] | None = None) -> list[str] | None:
    """Wings to search: the query's ``wing=``, else ``wings``, else [active, _global]; None = all. ``known``: the
    store's wings when the caller has read them."""
    known = store.wings() if known is None else known
    if parsed.wings:
        check_known(parsed, "wing", known)
        return parsed.wings
    if wings:
        wings = list(dict.fromkeys(wings))
        for w in wings:
            if w not in known:
                raise QueryError(f"unknown wing {w!r} (known wings: {', '.join(known) or 'none yet'})")
        return wings
    if active_wing:
        return list(dict.fromkeys([active_wing, GLOBAL_WING]))
    return None


MAX_WINGS = 1_000  # wings one search may name


def _check_types(active_wing: Any, wings: Any, user: Any, profile: Any) -> None:
    for name, value in (("active_wing", active_wing), ("user", user), ("profile", profile)):
        if value is not None and not isinstance(value, str):
            raise ValidationError(f"{name} must be a string, not {type(value).__name__}")
    if wings is not None and (not isinstance(wings, (list, tuple)) or not all(isinstance(w, str) for w in wings)):
        raise ValidationError("wings must be a list of strings")
    for name, value in (("active wing", active_wing), ("wings", wings), ("user", user), ("profile", profile)):
        check_text(name, value)
    if wings is not None and len(wings) > MAX_WINGS:
        raise ValidationError(f"wings: at most {MAX_WINGS:,} wings, got {len(wings):,}")
    for w in ([active_wing] if active_wing else []) + list(dict.fromkeys(wings or [])):
        if len(w) > MAX_NAME_CHARS or not NAME_RE.match(w):  # a wing name, as the store takes them
            shown = w if len(w) <= 60 else w[:59] + "…"
            raise ValidationError(f"{'active wing' if w == active_wing else 'wings'}: {shown!r} is not a wing name "
                                  "(letters, digits, _ . - and at most 1,000 characters)")


class Plan:
    """Everything decided before touching the index: scope, filters, profile, weights."""

    def __init__(self, settings: Settings, profiles: dict[str, Profile], store: Reads, query: str, active_wing: str | None,
                 wings: list[str] | None, k: int | None, profile: str | None, budget: int | None, user: str | None,
                 weights: dict[str, float] | None) -> None:
        s = self.settings = settings
        if not isinstance(query, str):
            raise ValidationError(f"query must be a string, not {type(query).__name__}")
        _check_types(active_wing, wings, user, profile)
        self.text_query, self.profile = route(query, profile, profiles)
        self.parsed = parse(self.text_query)
        if not self.parsed.text.strip() and not self.parsed.filters():
            raise QueryError("the query is empty: give words to look for, or filters such as wing=W to list entries")
        if self.parsed.rooms:
            check_known(self.parsed, "room", store.rooms())
        known = self.known_wings = store.wings()  # every wing of the store now (an unscoped search searches these)
        self.scope = resolve_scope(store, self.parsed, active_wing, wings, known)
        self.active_wing = active_wing
        self.notes: list[str] = []  # for the trace
        if active_wing and active_wing not in known:  # a new project, or a typo: say which
            self.notes.append(f"the active wing {active_wing!r} holds no entries yet: it adds no invariants and no "
                              f"boost (known wings: {', '.join(known) or 'none yet'})")
        self.k = check_k(s.search.k if k is None else k)
        self.budget = None if budget is None else check_budget(budget)
        self.user = user or s.retrieval.user
        p = self.profile
        self.kinds = self.parsed.kinds
        if p.kinds is not None:
            self.kinds = [x for x in (self.kinds or p.kinds) if x in p.kinds]
        self.rooms = self.parsed.rooms or p.rooms
        self.statuses = self.parsed.statuses or ["active", "under_review"]
        self.weights = RetrievalWeights.from_dict(s.retrieval.weights).merge(p.weights).merge(weights)
        self.limit = min(self.k, p.cap) if p.cap else self.k
        self.search_scope = Scope(self.scope, self.rooms, self.kinds, self.parsed.types, self.statuses)

    def filters(self, prefix: str = "") -> tuple[list[str], list[Any]]:
        """The scope as the SQLite store's conditions (``memlens.store.reads.sql_filters``)."""
        return sql_filters(self.search_scope, prefix)

    def entry_filters(self, prefix: str = "") -> tuple[list[str], list[Any]]:
        return entry_filters(self.search_scope, prefix)

    def index_filters(self) -> dict[str, list[str]]:
        """The filters other than the wing, as the in-process index applies them."""
        return self.search_scope.index_filters()

    def cache_params(self) -> dict[str, Any]:
        s = self.settings
        return {
            "profile": self.profile.model_dump(), "k": self.k, "budget": self.budget, "active": self.active_wing,
            "weights": self.weights.to_dict(), "boost": s.retrieval.active_wing_boost, "search": s.search.model_dump(),
            "retrieval": s.retrieval.model_dump(), "rerank": s.rerank.model_dump(),
        }
