"""What replay, golden queries, the access log, freshness and impact previews ask of the engine (a ``Memory`` is one).

Replay is typed against ``ReplayContext``, never against ``Memory``, so strict typing checks every seam and a test
may hand it any object with these parts. The store is reached through one role, ``ReplayStore``: the retrieval
log, golden queries, vector stamps and the rolled-back copy (``memlens.store.base.ReplayLog``), and recording the
store's model after a re-embedding; a golden query is also planned as a search would plan it before it is kept,
which reads the store's wings and rooms (``reads``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from memlens.store.base import ReplayLog

if TYPE_CHECKING:
    from typing_extensions import Self

    from memlens.config import Settings
    from memlens.embed import Embedder
    from memlens.models import Entry
    from memlens.profiles import Profile
    from memlens.store.base import Store
    from memlens.store.reads import Reads
    from memlens.trace import Bundle


class ReplayStore(ReplayLog, Protocol):
    """The store role replay uses: the replay log, and the store's model (set once every vector was re-embedded)."""

    def set_model(self, model: str) -> None: ...


class ReplayContext(Protocol):
    """``store``: its replay role; ``settings`` (the audit level, the export endpoint; a replay's proposed ones);
    ``embedder`` (re-embedding) and ``model_id`` / ``dim``: the store's model and vector size now; ``get`` and
    ``wings``: an entry by id and the wings, for checks and messages; ``search`` and ``explain``: a run of the
    engine and its verdict on one entry; ``profiles`` and ``reads``: what a search's plan reads, so that a golden
    query is checked as a search would check it before it is kept; ``with_settings``: the same engine on the same
    connection (or on ``store``, a rolled-back copy) with other settings and caches of its own."""

    @property
    def store(self) -> ReplayStore: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def embedder(self) -> Embedder: ...

    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def profiles(self) -> dict[str, Profile]: ...

    @property
    def reads(self) -> Reads: ...

    def get(self, entry_id: str) -> Entry: ...

    def wings(self) -> list[str]: ...

    def search(self, query: str, *, active_wing: str | None = ..., wings: list[str] | None = ..., k: int | None = ...,
               profile: str | None = ..., budget: int | None = ..., use_cache: bool = ..., user: str | None = ...) -> Bundle: ...

    def explain(self, query: str, entry_id: str, *, active_wing: str | None = ..., k: int | None = ...) -> dict[str, Any]: ...

    def with_settings(self, settings: Settings, store: Store | None = None) -> Self: ...
