"""The lexical generator's work, run inline or on a worker thread while the query is embedded.

The text search needs the query's words, not its vector. Embedding a query
costs the model ~7 ms, during which the calling thread waits in
ONNX Runtime with the GIL released; SQLite releases it too. So when a search
embeds its query, the pipeline hands the lexical work (choosing the terms,
the FTS5 query, the rows and stored vectors of its hits) to a worker thread
and joins it after the vector stage: on a machine with a free core, the
lexical stage costs the search nothing but the join. It is off by default
(``search.lexical_alongside_embed``): ONNX Runtime embeds on every physical
core, and on the 2-core benchmark machine the embed slowed by more than the
worker saved (the figures are in core/README.md).

Rules the worker keeps:

* it reads through its own connection (the store's connections are per
  thread), so it runs only when the calling thread's connection is not inside
  a transaction (a transaction's own writes would be invisible to it) and the
  store says it can serve another thread (``serves_threads``: SQLite stores);
* an error in the worker is raised by the lexical stage, unchanged, exactly
  where the inline stage would raise it; an error before the join (the embed,
  the vector stage) is raised as before, after the worker has finished;
* a search that finds its answer in the result cache, or does not embed,
  never starts one; when every worker is busy the stage runs inline;
* the work is the same inline and on the worker, so the results are too; a
  write that lands during the search may be seen by the worker's reads and
  not by the vector stage's (newer, never older, than the inline path sees).

The pipeline times stages on the calling thread; a worker's stage is timed
where it runs (``Lexical.ms``), that time is its ``latency_ms`` entry, and the
trace's ``concurrent`` says it ran alongside other stages and how long the
calling thread waited at the join.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from memlens.retrieval.terms import LexicalTerms, lexical_terms
from memlens.store.reads import Reads
from memlens.store.scope import Scope, StoredRow

WORKERS = 2  # searches from several threads (a server) share these; one more waiting search runs its stage inline
JOIN_TIMEOUT_S = 600.0  # the worker's reads are bounded by SQLite's busy timeout; this only guards against a bug

_slots = threading.BoundedSemaphore(WORKERS)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


@dataclass
class Lexical:
    """What the lexical generator found: the terms, the hits (rowid, bm25, best first) and, when it ran on a
    worker, the rows and stored vectors of the hits (read there so the calling thread does not)."""

    sel: LexicalTerms
    hits: list[tuple[int, float]]
    rows: dict[int, StoredRow] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)
    vectors: dict[int, np.ndarray] = field(default_factory=dict)
    ms: float = 0.0  # its own time on the worker (inline, the pipeline times the stage)


def find(store: Reads, text: str, scope: Scope, n: int, gens: dict[str, int] | None, prefetch: bool) -> Lexical:
    """The lexical generator: the query's terms (``memlens.retrieval.terms``), the best ``n`` text matches
    inside ``scope`` and, if ``prefetch``, the rows and vectors of those matches."""
    sel = lexical_terms(text)
    out = Lexical(sel, store.lexical(sel.text, scope, n, gens))
    if prefetch and out.hits:
        got = store.rows([r for r, _ in out.hits])
        out.rows = {r[0]: r for r in got.rows}
        out.damaged = got.damaged
        out.vectors = store.vectors({r[0]: r[3] for r in got.rows})  # (rowid, content_hash, id, wing, ...)
    return out


def can_run_alongside(store: Reads) -> bool:
    """The store can answer from a worker thread's own connection and sees what the caller sees."""
    serves = getattr(store, "serves_threads", None)
    return serves is not None and bool(serves())


class Job:
    """``find`` running on a worker thread."""

    def __init__(self, future: Future[Lexical]) -> None:
        self._future = future

    def result(self) -> Lexical:
        """The worker's answer; its exception, unchanged, if it raised."""
        return self._future.result(timeout=JOIN_TIMEOUT_S)

    def settle(self) -> None:
        """Wait for the worker when the search failed before the join: its answer (or error) is not needed,
        and it must not still be reading when the caller goes on (closes the store, say)."""
        try:
            self._future.exception(timeout=JOIN_TIMEOUT_S)
        except Exception:  # noqa: S110  (a timeout or cancellation: the search's own error is what the caller gets)
            pass


def start(store: Reads, text: str, scope: Scope, n: int) -> Job | None:
    """``find`` (with prefetch) on a worker thread, or None when every worker is busy (run it inline)."""
    if not _slots.acquire(blocking=False):
        return None
    try:
        future = _executor().submit(_work, store, text, scope, n)
    except BaseException:
        _slots.release()
        raise
    return Job(future)


def _work(store: Reads, text: str, scope: Scope, n: int) -> Lexical:
    try:
        t = time.perf_counter()
        out = find(store, text, scope, n, None, True)
        out.ms = (time.perf_counter() - t) * 1000
        return out
    finally:
        _slots.release()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="memlens-lexical")
        return _pool


def _after_fork() -> None:
    """A forked child has none of the parent's threads: it starts its own pool and slots when it needs them."""
    global _pool, _slots
    _pool = None
    _slots = threading.BoundedSemaphore(WORKERS)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
