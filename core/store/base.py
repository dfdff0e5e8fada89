"""The storage interface: what the engine needs from a store, whatever holds it.

``Store`` is the whole interface; its read half (``Reads``: candidates by
vector and by text within a scope, rows by id, vectors) is defined in
``memlens.store.reads``, its write half here. Two implementations exist:
``memlens.store.sqlite.SqliteStore`` (SQLite + sqlite-vec + FTS5) and
``memlens.store.postgres.store.PgStore`` (PostgreSQL + pgvector); the facade
(``memlens.memory.Memory``) holds either as a ``Store``. ``backend`` and
``lexical_scorer`` name what ran, so a trace can say it.

Every write goes through one ``Writer`` (``with store.write() as w:``): the
entry rows, their vectors, the audit rows and the generation bump of every
wing written commit together or not at all. Generations are how caches in
this and other processes learn that a wing changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from memlens.models import Entry
    from memlens.store.speed.vindex import VectorIndex

from memlens.store.catalog import Catalog
from memlens.store.reads import Reads

AuditRecord = dict[str, Any]
Row = tuple[Any, ...]


class TaskRows(Protocol):
    """The working-memory tables as rows (``memlens.store.task_rows``: ``TASK_COLUMNS``, ``BLOCKER_COLUMNS``,
    a blocker prefixed by its id where it can be changed). Read through ``Store.tasks()``; written through
    ``Writer.tasks``, inside the writer's transaction."""

    def task(self, task_id: str) -> Row | None: ...
    def task_count(self) -> int: ...
    def is_empty(self) -> bool: ...
    def recent_tasks(self, n: int) -> list[Row]: ...
    def all_tasks(self) -> list[Row]: ...
    def blockers(self, active_only: bool) -> list[Row]: ...
    def active_task_ids(self, limit: int) -> list[str]: ...
    def snapshot(self) -> AbstractContextManager[None]: ...
    def active_blocker(self, task_id: str) -> Row | None: ...
    def blocker_at(self, task_id: str, blocked_at: str) -> Row | None: ...
    def other_active(self, task_id: str, exclude: int | None) -> Row | None: ...
    def tasks_beyond(self, keep: int) -> list[Row]: ...
    def resolved_beyond(self, keep: int) -> list[Row]: ...
    def put_task(self, values: Row, seq: int) -> None: ...
    def delete_task(self, task_id: str) -> None: ...
    def insert_blocker(self, values: Row) -> None: ...
    def update_blocker(self, rowid: int, reason: str, resolved_at: str | None, resolution: str | None) -> None: ...
    def resolve_blocker(self, rowid: int, resolved_at: str, resolution: str) -> None: ...
    def delete_blocker(self, rowid: int) -> None: ...


class Writer(Protocol):
    """One open write transaction. Leaving the ``with`` block commits; an exception rolls everything back."""

    @property
    def conn(self) -> Any:
        """This transaction's connection, in the backend's own SQL: for a backend's own tables written in the same
        transaction (the ingest catalog's, ``memlens.store.catalog``) and the reembed rewrite."""
        ...

    @property
    def tasks(self) -> TaskRows:
        """The working-memory tables, written inside this transaction."""
        ...

    def insert(self, entry: Entry, vector: np.ndarray | bytes, *, import_id: int | None = None) -> int:
        """Store a new entry and its vector; returns its rowid."""
        ...

    def add(self, entry: Entry, vector: np.ndarray | bytes) -> None:
        """The write ``add`` makes: the new entry and its vector, its "add" audit row and its wing's bump. An id
        already used fails it with ``errors.id_taken``: here, or (PostgreSQL, which sends all of it as one
        statement without waiting) when the transaction ends; either way nothing of it is written."""
        ...

    def state(self, entry_id: str) -> bool | None:
        """None: no row with this id; True: a visible entry; False: a row of an import not yet published."""
        ...

    def find(self, entry_id: str) -> tuple[int, Entry] | None:
        """The visible entry ``entry_id`` as ``(rowid, entry)``, read inside this transaction."""
        ...

    def find_rowid(self, entry_id: str) -> int | None: ...

    def find_content(self, digest: str, wing: str) -> Entry | None:
        """The first visible entry of ``wing`` whose embedded text has this content hash."""
        ...

    def replace(self, rowid: int, entry: Entry, vector: bytes | None) -> None:
        """Rewrite a stored entry in place; ``vector=None`` keeps its stored vector."""
        ...

    def delete(self, rowid: int) -> None: ...

    def audit(
        self, action: str, entry_id: str | None, wing: str | None, before: dict[str, Any] | None,
        after: dict[str, Any] | None, detail: dict[str, Any] | None = None, *, import_id: int | None = None,
    ) -> int:
        """Append an audit row (stamped with the acting client, if any); returns its sequence number."""
        ...

    def bump(self, wings: Iterable[str], seq: int) -> None:
        """Advance the generation of each wing, recording ``seq`` as its latest write."""
        ...

    def last_seq(self) -> int:
        """The newest audit sequence number."""
        ...


class Writes(Protocol):
    """The write half of a store, with what it records about itself: writes, meta, audit, retrieval log,
    generations, counts and the working-memory tables."""

    @property
    def path(self) -> Path | str:
        """The store as messages name it: its file, or its ``postgresql://`` URI without the password."""
        ...

    # -- meta ---------------------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        """What the store records about itself: ``model``, ``dim``, ``created_at``."""
        ...

    def set_model(self, model: str) -> None:
        """Record ``model`` as the one every vector of this store was made by."""
        ...

    @property
    def model_id(self) -> str:
        """The model the stored vectors were made with (a new store: the configured one)."""
        ...

    @property
    def dim(self) -> int: ...

    def schema_version(self) -> int: ...
    def read_only(self) -> bool: ...
    def size_bytes(self) -> int: ...
    def close(self) -> None: ...

    def close_thread(self) -> None:
        """Close what this thread holds open (a worker thread's connection, at its end)."""
        ...

    # -- writes ---------------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Refuse writes to a store seen damaged (before any embedding work)."""
        ...

    def write(self) -> AbstractContextManager[Writer]:
        """The write protocol: one transaction (entry rows + vectors + audit + generation bumps)."""
        ...

    def reusable_vector(self, digest: str, model: str) -> bytes | None:
        """A stored vector of an entry with the same embedded text and model, if any (never a degenerate one)."""
        ...

    def missing_ids(self, ids: Iterable[str]) -> list[str]:
        """Those of ``ids`` that name no visible entry."""
        ...

    def entry_states(self, ids: list[str]) -> tuple[str, bool] | None:
        """The first of ``ids`` stored, and whether it is visible (False: an import in progress holds it)."""
        ...

    def sweep_imports(self) -> int:
        """Remove what imports killed before they published left behind; returns how many."""
        ...

    def import_staged(self, shown: Path, rows: Iterator[tuple[int, int, Entry]], vecs: np.ndarray,
                      outside: dict[str, int], unchanged: Callable[[], None], progress: Callable[[int], None]) -> None:
        """Write an import's entries (row of ``vecs``, line number, entry) invisibly, then publish them at once.

        ``outside``: override targets already stored (-> a line naming them), checked again when publishing;
        ``unchanged`` raises if the source changed meanwhile. On any failure nothing stays behind.
        """
        ...

    # -- counts ---------------------------------------------------------------------------------
    def count(self) -> int: ...
    def groups(self, column: str, wing: str | None = None, *, named_only: bool = False) -> list[tuple[Any, int]]:
        """Visible entries per value of ``column`` (wing, room, kind, type, status), optionally in one wing;
        ``named_only`` leaves out the empty value."""
        ...

    def wing_counts(self) -> list[dict[str, Any]]: ...
    def audit_count(self) -> int: ...

    # -- generations ----------------------------------------------------------------------------
    def generations(self, wings: Iterable[str] | None = None) -> dict[str, int]: ...
    def write_stamp(self) -> tuple[int, int]:
        """Changes whenever any process writes: (sum of generations, number of wings)."""
        ...

    # -- audit and retrieval log ----------------------------------------------------------------
    def audit(self, entry_id: str | None = None, limit: int = 100) -> list[AuditRecord]: ...
    def review_rows(self) -> list[Row]:
        """Every entry write (add, update, delete, import) and review mark of the entries written by a client at least
        once, oldest first, raw: (seq, ts, action, entry_id, wing, before, after, detail) (``memlens.review``)."""
        ...

    def last_write(self, wings: list[str]) -> AuditRecord | None:
        """The newest write to any of ``wings`` (seq, ts, action, entry_id, wing), or None."""
        ...

    def log_retrieval(self, active_wing: str | None, metrics: dict[str, Any], *, max_rows: int,
                      max_age_days: float, record: Callable[[], Row | None] | None = None) -> None:
        """Append one retrieval row without waiting for a writer, pruning old ones now and then; never raises.
        ``record()`` gives its ``retrieval_log`` row (request, client, context, hits), written in the same transaction."""
        ...

    def retrievals(self, limit: int) -> list[AuditRecord]: ...
    def settle_log(self) -> None:
        """Write this process's retrieval-log rows that still wait to be written (none on a store whose searches
        write their own), so that what is read next holds them."""
        ...

    # -- rows -----------------------------------------------------------------------------------
    def get_row(self, entry_id: str) -> Row | None:
        """The visible entry row (``memlens.store.rows.COLUMNS``) of ``entry_id``."""
        ...

    def iter_rows(self, wing: str | None = None) -> Iterator[Row]: ...
    def entry_vector(self, entry_id: str) -> bytes | None: ...

    def export_rows(self, wing: str | None, with_vectors: bool) -> Iterator[tuple[tuple[Any, ...], bytes | None, str | None]]:
        """Every visible entry row (``memlens.store.rows.COLUMNS``) in rowid order, with its vector and the content
        hash of the text that vector was made from (the row's stored hash) if asked, else None and None."""
        ...

    def tasks(self) -> TaskRows:
        """The working-memory tables, read outside any write."""
        ...


class Lookups(Protocol):
    """What front ends look up beyond the engine's reads (``memlens.browse``) and the answer log's tables
    (``memlens.assist.log``): ``memlens.store.browse_sql`` and ``memlens.store.answers_sql`` on SQLite,
    ``memlens.store.postgres.browse`` and ``memlens.store.postgres.answers`` on PostgreSQL."""

    def find_ids(self, text: str, limit: int) -> list[str]:
        """Ids of the visible entries whose id or title contains ``text`` (either case), in id order."""
        ...

    def vector_stamp(self, entry_id: str) -> tuple[str, str] | None:
        """(content hash, model) the entry's vector was made from; None if there is no such entry."""
        ...

    def overridden_by(self, entry_id: str) -> list[str]: ...
    def all_ids(self) -> list[str]: ...

    def last_retrieval(self) -> tuple[int, Any] | None:
        """(seq, detail) of the retrieval row this thread logged last, if its last write was one."""
        ...

    def record_answer(self, values: tuple[Any, ...], cited: list[str], invented: list[str], keep: int) -> int:
        """One answer (ts, question, model, complete, error, retrieval_seq, retrieval) and its citations, in one
        transaction; only the newest ``keep`` answers stay. Returns its id."""
        ...

    def answer_rows(self, limit: int) -> list[tuple[Any, ...]]: ...
    def answer_citations(self, answer_id: int) -> list[tuple[str, int]]: ...
    def cited_rows(self, limit: int) -> list[tuple[Any, ...]]: ...
    def answer_count(self) -> int: ...


class ReplayLog(Protocol):
    """What ``memlens.replay`` reads and writes: the retrieval log, golden queries, vector freshness, and a copy of
    the store inside a transaction that is always rolled back (``memlens.store.replay_sql`` on SQLite,
    ``memlens.store.postgres.replay`` on PostgreSQL). Rows are raw; ``memlens.replay.storage`` decodes them."""

    def logged_rows(self, limit: int, since: str | None = None, query: str | None = None) -> list[Row]:
        """The newest ``limit`` logged retrievals (since ``since``, of exactly ``query``), newest first:
        (seq, ts, request, client, context, hits)."""
        ...

    def access_rows(self, entry_id: str, needle: str, limit: int) -> list[Row]:
        """Logged retrievals that returned ``entry_id`` (``needle``: its JSON text), newest first:
        (seq, ts, query, client, rank, score, context)."""
        ...

    def retrieval_count_rows(self, wing: str | None = None, since: str | None = None) -> list[Row]:
        """Each active visible entry: (id, wing, type, title, logged retrievals that searched its wing, returned it);
        ``since``: only the retrievals logged at or after that time count."""
        ...

    def entry_statuses(self, ids: list[str]) -> dict[str, str]: ...
    def golden_insert(self, query: str, expect: str, active_wing: str, within: int, created_at: str) -> int: ...
    def golden_rows(self) -> list[Row]: ...
    def golden_delete(self, golden_id: int) -> bool: ...

    def vector_stamps(self, ids: list[str]) -> list[Row]:
        """(id, title, text, content_hash, model) of each of ``ids`` stored."""
        ...

    def stamp_rows(self, wing: str | None = None) -> list[Row]:
        """(rowid, id, wing, title, text, content_hash, model) of every visible entry (of ``wing``)."""
        ...

    def rewrite_vectors(self, rows: list[tuple[int, str]], blobs: list[bytes], hashes: list[str], model: str) -> None:
        """New vectors of (rowid, wing), with their hashes and model, one audit row and the bumps: one transaction."""
        ...

    def rolled_back(self) -> AbstractContextManager[Store]:
        """A copy of this store inside one transaction (holding the write lock) that is rolled back on exit."""
        ...


class Store(Reads, Writes, Lookups, ReplayLog, Catalog, Protocol):
    """A memlens store: the read half (``Reads``, the retrieval pipeline's reads) and the write half (``Writes``).

    ``backend`` names the implementation ("sqlite"), ``lexical_scorer`` the text ranking it uses ("fts5-bm25"),
    so that a trace can say which ran.
    """

    backend: str
    lexical_scorer: str

    # -- this process's side ----------------------------------------------------------------------
    @property
    def vindex(self) -> VectorIndex | None:
        """The in-process vector index when in use (``memlens.store.speed.vindex``), else None."""
        ...

    def warm_index(self, *, text: bool = False, stop: Callable[[], bool] | None = None) -> int:
        """Load the in-process vector index now (long-lived processes); returns vectors held. ``text``: also
        what ranks text matches in process, where the backend has that (``Memory.warm_index``). ``stop``: asked
        between wings; once it says True, the rest is left for searches to load (a server that is stopping)."""
        ...

    def on_connection(self, conn: Any) -> Store:
        """A copy of this store that uses ``conn`` on this thread, with its own caches (a preview runs its writes
        inside one transaction it never commits)."""
        ...
