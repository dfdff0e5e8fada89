"""``Memory``: the engine's public face, a thin facade over its parts.

It composes the store (``memlens.store``: one SQLite file behind the
``Store`` interface), the embedding model (loaded on first use), the caches
and the retrieval profiles. Entry writes are ``memlens.memory_writes`` (the
checks before a write, inherited) over ``memlens.store.writes`` (each one
transaction: the row, its vector, an audit row and the wing's generation
bump, which is how caches in this and other processes learn that a wing
changed); retrieval is ``memlens.retrieval``; working memory is
``memlens.working``; JSONL is ``memlens.io``.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.config import Settings, load_settings
from memlens.errors import MemlensError, NotFoundError, StoreError
from memlens.limits import MAX_LIST, check_int, entry_text_limit
from memlens.memory_writes import EntryWrites
from memlens.models import Entry
from memlens.store.newstore import store_target
from memlens.store.postgres.connect import is_uri
from memlens.store.rows import row_to_entry
from memlens.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from memlens.embed import Embedder
    from memlens.retrieval.context import SearchContext
    from memlens.review.desk import ReviewDesk
    from memlens.store.base import Store
    from memlens.trace import Bundle, RetrievalRecord

__all__ = ["Memory"]


class Memory(EntryWrites):
    """An agent memory on one SQLite file or in a PostgreSQL database.

    Thread-safe: the store gives each thread its own connection (SQLite's rule);
    the embedder is shared and loads on first use.
    """

    def __init__(self, path: Path | str, settings: Settings, embedder: Embedder | None = None, *, create: bool = True,
                 pooled: bool | None = None, client: str = "api") -> None:
        """``path``: a SQLite file, or a ``postgresql://`` URI (``pooled``: hold a connection pool, for
        long-lived processes; default from the URI's ``pool=``). ``client``: who this Memory searches for, as the
        retrieval log names it when a search names no other (``cli``, ``app``, ``mcp``; a library is ``api``)."""
        self.settings = settings
        self.client = client
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._cache: Any = None
        self._profiles: dict[str, Any] | None = None
        storage = settings.storage
        me = weakref.ref(self)  # no cycle: a Memory dropped without close() still closes its connections at once
        self.store: Store  # SqliteStore, or PgStore for a postgresql:// URI
        if is_uri(path):
            from memlens.store.postgres import open_store

            self.store = open_store(str(path), model=lambda: _alive(me).embedder, pooled=pooled, create=create)
            self.path: Path | str = self.store.path  # the URI without its password, for messages and stats
        else:
            self.path = Path(path)
            self.store = SqliteStore(self.path, model=lambda: _alive(me).embedder, busy_timeout_ms=storage.busy_timeout_ms,
                                     mmap_size=storage.mmap_size, synchronous=storage.synchronous, create=create,
                                     vector_index=lambda: _alive(me).settings.search.vector_index)

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        create: bool = True,
        pooled: bool | None = None,
        client: str = "api",
    ) -> Memory:
        """Open the store at ``path`` (a file or a ``postgresql://`` URI), ``MEMLENS_STORE`` or the default; a
        missing one is created (0600, in 0700 folders) unless ``create=False``, which makes it a StoreError
        instead. ``pooled``: a PostgreSQL store holds a connection pool (long-lived processes). ``client``: the
        name the retrieval log gives this Memory's searches."""
        settings = settings or load_settings()
        return cls(store_target(path, settings), settings, embedder, create=create, pooled=pooled, client=client)

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    @property
    def conn(self) -> Any:
        """This thread's SQLite connection, for tools and tests that read SQLite's tables directly (the engine itself
        goes through ``self.store``). What they read holds this process's searches: their rows still waiting in
        the log spool are written first."""
        conn = getattr(self.store, "conn", None)
        if conn is None:
            raise StoreError(f"store {self.path}: this needs a SQLite store; a {self.store.backend} store does not offer it")
        self.store.settle_log()
        return conn

    @property
    def embedder(self) -> Embedder:
        """The embedding model (resolved and verified on first use, loaded on first embed)."""
        if self._embedder is None:
            with self._embedder_lock:
                if self._embedder is None:
                    from memlens.embed import make_embedder

                    self._embedder = make_embedder(self.settings.embedding, self.settings.cache_dir)
        return self._embedder

    @property
    def model_id(self) -> str:
        """The model this store's vectors were made with."""
        return self.store.model_id

    @property
    def dim(self) -> int:
        return self.store.dim

    def check_model(self) -> None:
        """Refuse to mix vectors of two models in one store."""
        if self.embedder.model_id != self.model_id:
            raise MemlensError(
                f"store {self.path} holds vectors of {self.model_id} but the configured model is "
                f"{self.embedder.model_id}; use the same model (embedding.model) or a new store"
            )

    def embed(self, texts: list[str]) -> np.ndarray:
        self.check_model()
        return self.embedder.embed(texts)

    # -- reads -------------------------------------------------------------------------------

    def get(self, entry_id: str) -> Entry:
        row = self.store.get_row(entry_id)
        if row is None:
            raise NotFoundError(f"no entry with id {entry_id!r} in {self.path}")
        return row_to_entry(row)

    def entries(self, wing: str | None = None) -> Iterator[Entry]:
        for row in self.store.iter_rows(wing):
            yield row_to_entry(row)

    def count(self) -> int:
        return self.store.count()

    def wings(self) -> list[str]:
        return self.store.wings()

    def rooms(self, wing: str | None = None) -> list[str]:
        return self.store.rooms(wing)

    def generations(self, wings: Iterable[str] | None = None) -> dict[str, int]:
        return self.store.generations(wings)

    def wing_counts(self) -> list[dict[str, Any]]:
        """Wings with entry counts and rooms, from one aggregate query."""
        return self.store.wing_counts()

    def audit(self, entry_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return self.store.audit(entry_id, check_int("limit", limit, 1, MAX_LIST))

    def vector(self, entry_id: str) -> np.ndarray:
        blob = self.store.entry_vector(entry_id)
        if blob is None:
            raise NotFoundError(f"no entry with id {entry_id!r} in {self.path}")
        return np.frombuffer(blob, dtype="<f4").copy()

    # -- bulk --------------------------------------------------------------------------------

    def import_jsonl(self, source: str | Path, *, batch_size: int = 256, progress: Any = None) -> dict[str, Any]:
        """Import a JSONL file all-or-nothing (see ``memlens.io.jsonl``)."""
        from memlens.io.jsonl import import_file

        self.store.check_writable()
        with entry_text_limit(self.settings.limits.max_entry_chars):
            return import_file(self.store, self.embed, Path(source), batch_size=batch_size, progress=progress)

    def export_jsonl(self, out: Any, *, wing: str | None = None, with_vectors: bool = False, on_skip: Any = None) -> int:
        from memlens.io.jsonl import export

        return export(self.store, out, wing=wing, with_vectors=with_vectors, on_skip=on_skip)

    # -- search ------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        active_wing: str | None = None,
        wings: list[str] | None = None,
        k: int | None = None,
        profile: str | None = "memory",
        budget: int | None = None,
        client: str | None = None,
        **options: Any,
    ) -> Bundle:
        """Retrieve, explain and (optionally) budget; see ``memlens.retrieval.search.search`` for ``options``.
        ``client``: who asked, for the retrieval log (default: this Memory's ``client``)."""
        from memlens.retrieval.search import search

        return search(self.search_context(), query, active_wing=active_wing, wings=wings, k=k, profile=profile,
                      budget=budget, client=client or self.client, **options)

    def search_context(self) -> SearchContext:
        """What a search needs of this Memory (``memlens.retrieval.context``), made of its parts as they are now
        (a copy made for other settings or a rolled-back preview gets its own)."""
        from memlens.retrieval.budget import working_memory_block
        from memlens.retrieval.context import SearchContext

        return SearchContext(settings=self.settings, reads=self.store, profiles=self.profiles, embed=self.embed,
                             model_id=lambda: self.model_id, count_tokens=lambda text: self.embedder.count_tokens(text),
                             cache=self.cache, describe_write=self.describe_write,
                             working_memory=lambda: working_memory_block(self), log=self.log_retrieval)

    def explain(self, query: str, entry_id: str, **kwargs: Any) -> dict[str, Any]:
        """Why was ``entry_id`` returned for ``query`` - or at which stage was it dropped?"""
        from memlens.retrieval.explain import explain

        return explain(self, query, entry_id, **kwargs)

    def context(self, query: str, *, active_wing: str | None = None, budget: int | None = None, **kwargs: Any) -> str:
        """The markdown an agent receives: working memory, then retrieved memory in authority order."""
        from memlens.ingest.recall import render_with_code

        bundle = self.search(query, active_wing=active_wing, budget=budget, context=True, **kwargs)  # logged as such
        return render_with_code(self, bundle)  # with the Relevant code section when code is indexed

    async def web_context(self, urls: Any = None, query: str | None = None, **kwargs: Any) -> Any:
        """Untrusted web text for ``urls`` and/or a search ``query`` (see ``memlens.web``); nothing is stored."""
        from memlens.web.context import gather

        return await gather(self.settings.web, urls=urls, query=query, **kwargs)

    def web_context_sync(self, urls: Any = None, query: str | None = None, **kwargs: Any) -> Any:
        """``web_context`` from synchronous code, also from inside a running event loop."""
        from memlens.web.context import gather_sync

        return gather_sync(self.settings.web, urls=urls, query=query, **kwargs)

    @property
    def reads(self) -> Store:
        """The store's read interface, which the retrieval pipeline uses (``memlens.store.reads.Reads``)."""
        return self.store

    @property
    def vector_index(self) -> Any:
        """The in-process vector index when in use (see core/store/speed/vindex.py), else None (sqlite-vec)."""
        return self.store.vindex

    def warm_index(self, *, text: bool = False, stop: Callable[[], bool] | None = None) -> int:
        """Load the in-process vector index now (long-lived processes); returns vectors held. ``text``: read
        the whole text index's postings too, when it is small (about 0.5 s at 2,800 documentation sections,
        paid back only over hundreds of searches: for a process that warms up on a background thread).
        ``stop``: asked before each wing; once True, the rest is left for searches to load (a stopping server)."""
        return self.store.warm_index(text=text, stop=stop)

    @property
    def profiles(self) -> dict[str, Any]:
        if self._profiles is None:
            from memlens.profiles import load_profiles

            self._profiles = load_profiles(self.settings.profiles)
        return self._profiles

    @property
    def cache(self) -> Any:
        if self._cache is None:
            from memlens.retrieval.cache import RetrievalCache

            self._cache = RetrievalCache(self.settings.cache.ttl_seconds, self.settings.cache.max_entries)
        return self._cache

    def with_settings(self, settings: Settings, store: Store | None = None) -> Memory:
        """This Memory on the same connection (or ``store``) with ``settings`` and caches of its own (a replay's copy)."""
        clone = copy.copy(self)
        clone.settings, clone._cache, clone._profiles, clone.store = settings, None, None, store or self.store
        clone.__dict__.pop("_working_memory", None)
        return clone

    def describe_write(self, wings: list[str]) -> dict[str, Any] | None:
        """The latest write to any of ``wings``: what invalidated a cached retrieval."""
        last = self.store.last_write(wings)
        return {"reason": "write", "wings": wings} if last is None else {"reason": "write", **last, "wings": wings}

    def log_retrieval(self, record: RetrievalRecord | Bundle) -> None:
        """A search's record into the retrieval log (metrics in the audit table, and what replay needs) when the
        audit level includes reads. A bare bundle is logged with the request its trace names.

        Never fails a retrieval: a read-only or busy store just skips the row.
        """
        audit = self.settings.audit
        if audit.level != "reads":
            return
        from memlens.replay import storage as replay_log
        from memlens.trace import RetrievalRecord, retrieval_metrics

        rec = record if isinstance(record, RetrievalRecord) else RetrievalRecord.of(record, self.client)
        self.store.log_retrieval(rec.bundle.trace.active_wing, retrieval_metrics(rec.bundle),
                                 max_rows=audit.retrieval_max_rows, max_age_days=audit.retrieval_max_age_days,
                                 record=lambda: replay_log.record(rec))  # what replay needs

    def retrievals(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The newest logged retrievals; a row whose metrics do not decode (a hand edit) is left out."""
        return self.store.retrievals(check_int("limit", limit, 1, MAX_LIST))

    # -- working memory ----------------------------------------------------------------------

    @property
    def tasks(self) -> Any:
        """Working memory: recent completed tasks and blockers (``memlens.working.tasks.WorkingMemory``)."""
        wm = self.__dict__.get("_working_memory")
        if wm is None:
            from memlens.working.tasks import WorkingMemory

            wm = self.__dict__.setdefault("_working_memory", WorkingMemory(self.store, self.settings))
        return wm

    # -- curation ----------------------------------------------------------------------------

    @property
    def review(self) -> ReviewDesk:
        """The review inbox and the reviewer's actions, and ``lint`` (``memlens.review.desk.ReviewDesk``)."""
        from memlens.replay.impact import preview
        from memlens.review.desk import ReviewDesk
        from memlens.review.evidence import Thresholds

        r, rv = self.settings.retrieval, self.settings.review
        return ReviewDesk(self.store, self.embed, rv,
                          Thresholds(rv.duplicate_similarity, rv.duplicate_shared_text, r.conflict_similarity,
                                     r.dedup_similarity),
                          preview=lambda act: preview(self, lambda draft: act(draft.store)), update=self.update)

    # -- stats -------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        store = self.store
        per = {col: dict(store.groups(col)) for col in ("wing", "kind", "type", "status")}
        return {
            "store": str(self.path),
            "entries": self.count(),
            "per_wing": per["wing"],
            "per_kind": per["kind"],
            "per_type": per["type"],
            "per_status": per["status"],
            "size_bytes": store.size_bytes(),
            "model": self.model_id,
            "dim": self.dim,
            "schema_version": store.schema_version(),
            "audit_rows": store.audit_count(),
            "read_only": self.read_only,
        }

    @property
    def read_only(self) -> bool:
        """True for a store in a read-only directory: opened as it is on disk, every write refused."""
        return self.store.read_only()


def _alive(ref: weakref.ref[Memory]) -> Memory:
    mem = ref()
    if mem is None:
        raise StoreError("the Memory that opened this store is gone; open it again")
    return mem
