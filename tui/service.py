"""``Lens``: the app's one door to the engine.

Every call blocks, so screens call it from thread workers only. Engine work
runs on a small pool of long-lived threads, which keeps the number of SQLite
connections bounded (the engine opens one per thread) no matter how many
workers the UI starts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # the engine loads on an engine thread, after the first frame
    from memlens import Memory
    from memlens.models import Entry
    from memlens.trace import Bundle

T = TypeVar("T")
WATCHED = "_tasks"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Abandoned(Exception):
    """The worker waiting for an engine call was cancelled (the app is closing)."""


class Lens:
    """Opens the store lazily on an engine thread: the app draws its first frame meanwhile."""

    def __init__(
        self,
        store_path: Path | str,
        opener: Callable[[], Memory],
        *,
        active_wing: str | None = None,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        # a file, or a PostgreSQL store's URI (without its password): kept as it is, never folded into a path
        self.store_path: Path | str = store_path if isinstance(store_path, str) and "://" in store_path else Path(store_path)
        self.now = now
        self.active_wing = active_wing
        self._opener = opener
        self._mem: Memory | None = None
        self._open_lock = threading.Lock()
        self._closed = False
        self._engine_prefix = f"memlens-engine-{id(self):x}"  # this Lens's threads (``engine_busy`` counts any Lens's)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=self._engine_prefix)
        self._pool.submit(lambda: self.mem)  # start opening (imports numpy, pydantic, the store) right away

    @property
    def mem(self) -> Memory:
        """The engine's Memory, opened on first use (on whatever engine or worker thread asks first)."""
        if self._mem is None:
            with self._open_lock:
                if self._mem is None:
                    mem = self._opener()
                    if self.active_wing is None:
                        self.active_wing = self._default_wing(mem)
                    self._mem = mem
        return self._mem

    # plumbing ---------------------------------------------------------------------------------

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` on an engine thread and wait for it (call from a worker, never the UI thread).

        The wait gives up when the calling worker is cancelled, so closing the app
        never waits for a slow engine call (a model export, a locked store).
        """
        future = self._pool.submit(fn, *args, **kwargs)
        while True:
            try:
                return future.result(timeout=0.1)
            except FutureTimeout:
                if self._closed or _worker_cancelled():
                    raise Abandoned() from None

    def close(self) -> None:
        """Stop the engine threads and close the store, never under a call still running: closing a connection while
        another thread runs a statement on it can crash the process. Idle threads end within the half second given;
        a busy one (a model export, a locked store) keeps the store open, and ``run_app`` ends the process without
        waiting for it (every write is its own transaction)."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        end = time.monotonic() + 0.5
        while self._own_threads_alive() and time.monotonic() < end:
            time.sleep(0.01)
        if self._mem is not None and not self._own_threads_alive():
            self._mem.close()

    def _own_threads_alive(self) -> bool:
        return _threads_alive(self._engine_prefix)

    def engine_busy(self) -> bool:
        return _threads_alive("memlens-engine")

    @staticmethod
    def _default_wing(mem: Memory) -> str | None:
        counts = mem.stats()["per_wing"]
        project = {w: n for w, n in counts.items() if w != "_global"}
        return max(sorted(project), key=lambda w: project[w]) if project else None

    # model ------------------------------------------------------------------------------------

    def load_model(self) -> str:
        def load() -> str:
            emb = self.mem.embedder
            loader = getattr(emb, "load", None)
            if loader is not None:
                loader()
            return emb.model_id

        return self.call(load)

    def warm_index(self, *, text: bool = False) -> int:
        """Load the in-process vector index (the app is long-lived: every search after this is faster); ``text``:
        the text index's postings too (``Memory.warm_index``)."""
        return self.call(self.mem.warm_index, text=text)

    # reads ------------------------------------------------------------------------------------

    def search(self, query: str, *, k: int | None = None, budget: int | None = None, profile: str | None = None) -> Bundle:
        return self.call(lambda *a, **k: self.mem.search(*a, **k), query, active_wing=self.active_wing, k=k, budget=budget,
                         profile=profile or "memory", now=self.now())

    def explain(self, query: str, entry_id: str) -> dict[str, Any]:
        return self.call(self.mem.explain, query, entry_id, active_wing=self.active_wing, now=self.now())

    def context(self, query: str, budget: int | None, profile: str | None = None) -> tuple[str, Bundle]:
        from memlens.ingest.recall import render_with_code

        def run() -> tuple[str, Bundle]:
            b = self.mem.search(query, active_wing=self.active_wing, budget=budget, profile=profile or "memory", now=self.now())
            return render_with_code(self.mem, b), b

        return self.call(run)

    # answers (memlens.assist): retrieval and logging on engine threads, the stream in the caller's event loop

    def llm_endpoint(self) -> Any:
        """The configured chat model (``memlens.assist.llm.Endpoint``), or None: the shell then shows context only."""
        from memlens.assist.llm import Endpoint

        def run() -> Any:
            llm = self.mem.settings.llm
            return Endpoint.from_settings(llm) if llm.configured else None

        return self.call(run)  # on an engine thread: the store may still be opening

    def search_for_answer(self, question: str, budget: int | None, profile: str | None = None) -> tuple[Bundle, int | None]:
        """The search an answer is built on, and the audit row it logged (read on the same engine thread)."""
        from memlens.assist import log

        def run() -> tuple[Bundle, int | None]:
            b = self.mem.search(question, active_wing=self.active_wing, budget=budget, profile=profile or "memory",
                                now=self.now())
            return b, log.last_retrieval_seq(self.mem, b.trace.query)  # this thread's connection logged it

        return self.call(run)

    def prepare_answer(self, question: str, budget: int | None, profile: str | None = None) -> Any:
        """Search, render the context exactly as ``context`` does, and build the prompt (``memlens.assist.ask.Prepared``)."""
        from memlens.assist.ask import assemble
        from memlens.ingest.recall import render_with_code

        b, seq = self.search_for_answer(question, budget, profile)
        return assemble(question, b, self.call(render_with_code, self.mem, b), None, seq)

    def log_answer(self, answer: Any) -> Any:
        from memlens.assist.ask import record

        return self.call(record, self.mem, answer)

    def cited(self, limit: int = 20) -> list[dict[str, Any]]:
        """Entries answers cited, most cited first (``memlens.assist.log.cited_entries``)."""
        from memlens.assist import log

        return self.call(lambda: log.cited_entries(self.mem, limit))

    def window(self) -> Any:
        return self.call(lambda: self.mem.tasks.window())

    def wings(self) -> list[str]:
        return self.call(self.mem.wings)

    def rooms(self) -> list[str]:
        return self.call(self.mem.rooms)

    def count(self) -> int:
        return self.call(self.mem.count)

    def read_only(self) -> bool:
        return self.call(lambda: self.mem.read_only)

    def get(self, entry_id: str) -> Entry:
        return self.call(self.mem.get, entry_id)

    def audit(self, entry_id: str, limit: int = 50) -> list[dict[str, Any]]:
        return self.call(self.mem.audit, entry_id, limit)

    def entry_info(self, entry_id: str) -> dict[str, Any]:
        """Vector freshness (stored content hash and model vs the current text) and who overrides the entry."""
        from memlens.browse import entry_info

        return self.call(lambda: entry_info(self.mem, entry_id))

    def find(self, text: str, limit: int = 20) -> list[Entry]:
        """Entries whose id or title contains ``text`` (for "why not?" pickers)."""
        from memlens.browse import find

        return self.call(lambda: find(self.mem, text, limit))

    def generations(self) -> dict[str, int]:
        return self.call(self.mem.generations)

    def describe_write(self, wings: list[str]) -> dict[str, Any] | None:
        return self.call(self.mem.describe_write, wings)

    def retrievals(self, limit: int = 500) -> list[dict[str, Any]]:
        return self.call(self.mem.retrievals, limit)

    def shell_known(self) -> dict[str, list[str]]:
        """Entry ids, task ids, actively blocked task ids and profile names (assistant-shell completion)."""
        from memlens.browse import known_names

        return self.call(lambda: known_names(self.mem))

    def audit_level(self) -> str:
        """``audit.level``: retrievals are only logged (and shown as metrics) at "reads"."""
        return str(self.mem.settings.audit.level)

    # code index and ingestion (memlens.ingest) ----------------------------------------------------

    def index_status(self) -> dict[str, Any]:
        """Every code index: files, chunks, stale ratio, last run, skips, queue depth, code hit and fallback rates."""
        from memlens.ingest import index_status

        return self.call(lambda: index_status(self.mem))

    def ingest_total(self, paths: list[str]) -> int:
        """How many files an ingest of ``paths`` will look at (a walk, nothing read): the progress bar's length."""
        from memlens.ingest.pipeline import resolve_targets
        from memlens.ingest.walker import walk

        def run() -> int:
            skips: list[Any] = []
            return sum(sum(1 for _ in walk(t.path, skips)) if t.is_dir else 1 for t in resolve_targets(list(paths)))

        return self.call(run)

    def ingest(self, paths: list[str], *, wing: str, room: str = "",
               progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Ingest files and folders into ``wing`` (``memlens.ingest.ingest``); ``progress`` is called from engine threads."""
        from memlens.ingest import ingest

        return self.call(lambda: ingest(self.mem, paths, wing=wing, room=room, progress=progress))

    # replay: golden queries, access log, freshness, impact previews (memlens.replay; none of them writes).

    def health(self) -> dict[str, Any]:
        """``{"golden": golden.check(...) or None when there are none, "stale": vectors not made by the store's
        model from the entry's text now}`` (the golden check runs searches that are not logged)."""
        from memlens.replay import freshness, golden

        def run() -> dict[str, Any]:
            checked = golden.check(self.mem) if golden.listing(self.mem) else None
            return {"golden": checked, "stale": freshness.stale_count(self.mem)}

        return self.call(run)

    def replay_report(self, last: int) -> dict[str, Any]:
        """The latest ``last`` logged queries replayed on the store as it is now (``memlens.replay.replay``; not
        logged), with the title of every entry the report names."""
        from memlens.errors import NotFoundError
        from memlens.replay.replay import replay

        def run() -> dict[str, Any]:
            report = replay(self.mem, last=last)
            titles: dict[str, str] = {}
            for q in report["queries"]:
                for eid in [*q.get("before", []), *q.get("after", [])]:
                    if eid not in titles:
                        try:
                            titles[eid] = self.mem.get(eid).title
                        except NotFoundError:
                            titles[eid] = "(deleted)"
            report["titles"] = titles
            return report

        return self.call(run)

    def entry_impact(self, entry_id: str) -> dict[str, Any]:
        """The entry's access log and what deprecating it would change (``memlens.replay``; writes nothing)."""
        from memlens.replay.access import entry_access
        from memlens.replay.impact import preview

        return self.call(lambda: {"access": entry_access(self.mem, entry_id, limit=200),
                                  "preview": preview(self.mem, lambda m: m.set_status(entry_id, "deprecated"))})

    def entry_access(self, entry_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """When the entry was retrieved, newest first: ``{seq, ts, query, client, rank, score, in_context}``."""
        from memlens.replay.access import entry_access

        return self.call(lambda: entry_access(self.mem, entry_id, limit)["accesses"])

    def preview(self, entry_id: str, action: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        """What ``update``/``status``/``delete`` of ``entry_id`` would change (``memlens.replay.impact.preview``):
        golden queries that would fail, recent logged queries whose ranking would change. Nothing is written;
        an invalid change raises the engine's error, as the write would."""
        from memlens.replay.impact import preview

        fields = dict(fields or {})

        def change(m: Memory) -> Any:
            if action == "delete":
                return m.delete(entry_id)
            if action == "status":
                return m.set_status(entry_id, fields["status"])
            return m.update(entry_id, **fields)

        return self.call(lambda: preview(self.mem, change))

    # the review inbox (memlens.review): agents' unanswered writes, their evidence, the reviewer's actions

    def review_items(self, limit: int = 200) -> tuple[list[dict[str, Any]], int, list[str]]:
        """The first ``limit`` items of the inbox, how many there are, and their clients. The items are kept for
        ``review_evidence`` (one audit read a listing)."""
        def run() -> tuple[list[dict[str, Any]], int, list[str]]:
            items = self.mem.review.items()
            self._review_items = {i.entry_id: i for i in items}
            return [i.to_dict() for i in items[:limit]], len(items), sorted({i.client for i in items})

        return self.call(run)

    def review_evidence(self, entry_id: str, *, impact: bool = False) -> list[dict[str, Any]]:
        """The evidence of an item of the last listing (the actions check the entry again before they write)."""
        def run() -> list[dict[str, Any]]:
            desk, listed = self.mem.review, getattr(self, "_review_items", {})
            item = listed.get(entry_id) or desk.item(entry_id)
            return desk.evidence(item, impact=impact, pending=set(listed))

        return self.call(run)

    def review_accept(self, ids: list[str], *, edits: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.call(lambda: self.mem.review.accept(ids, edits=edits))

    def review_accept_clean(self) -> list[dict[str, Any]]:
        return self.call(lambda: self.mem.review.accept_clean()["accepted"])

    def review_reject(self, ids: list[str], *, reason: str | None = None) -> list[dict[str, Any]]:
        return self.call(lambda: self.mem.review.reject(ids, reason=reason))

    def review_merge(self, ids: list[str], *, into: str | None = None) -> list[dict[str, Any]]:
        return self.call(lambda: self.mem.review.merge(ids, into=into))

    def review_undo(self, entry_id: str) -> dict[str, Any]:
        return self.call(lambda: self.mem.review.undo(entry_id))

    def review_undo_all(self, entry_ids: list[str]) -> list[dict[str, Any]]:
        """Undo the newest review action of each entry, in this order (one keypress's actions, newest first)."""
        return self.call(lambda: [self.mem.review.undo(i) for i in entry_ids])

    # writes -----------------------------------------------------------------------------------

    def add(self, text: str, **fields: Any) -> Entry:
        return self.call(self.mem.add, text, **fields)

    def update(self, entry_id: str, **changes: Any) -> Entry:
        return self.call(self.mem.update, entry_id, **changes)

    def set_status(self, entry_id: str, status: str) -> Entry:
        return self.call(self.mem.set_status, entry_id, status)

    def delete(self, entry_id: str) -> Entry:
        return self.call(self.mem.delete, entry_id)

    # working memory: times come from ``now`` so the app's clock (fixed in tests) is the one shown

    def complete_task(self, task_id: str, intent: str, *, failed: bool = False) -> Any:
        return self.call(self.mem.tasks.complete, task_id, intent, outcome="failure" if failed else "success",
                         completed_at=self.now())

    def block_task(self, task_id: str, reason: str) -> Any:
        return self.call(self.mem.tasks.block, task_id, reason, blocked_at=self.now())

    def unblock_task(self, task_id: str) -> Any:
        return self.call(self.mem.tasks.unblock, task_id, resolved_at=self.now())

    def load_demo(self) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            from memlens.demo import load

            report = load(self.mem)
            if self.active_wing is None:
                self.active_wing = self._default_wing(self.mem)
            return report

        return self.call(run)


def _worker_cancelled() -> bool:
    try:
        from textual.worker import get_current_worker

        return get_current_worker().is_cancelled
    except Exception:  # not inside a Textual worker
        return False


def _threads_alive(prefix: str) -> bool:
    """Whether a live thread's name starts with ``prefix``."""
    return any(t.name.startswith(prefix) and t.is_alive() for t in threading.enumerate())
