"""``memlens index --watch``: keep a workspace's code index fresh from a background thread.

A watcher thread (watchfiles) collects saved, created and deleted paths; bursts
are coalesced (watchfiles' debounce, then one pending set). A worker thread
re-indexes the pending paths, each run with its own deadline, and runs a full
rescan every ``rescan_s`` seconds, so a watcher that silently stops delivering
events cannot leave the index stale for longer than that. Retrieval never
waits on any of this: it reads whatever the last completed run wrote.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlens.ingest.context import IngestContext

_active: list[Watcher] = []
_active_lock = threading.Lock()


def active_watchers() -> list[Watcher]:
    with _active_lock:
        return list(_active)


class Watcher:
    def __init__(self, mem: IngestContext, root: str, wing: str, room: str = "", *, rescan_s: float = 300.0,
                 debounce_ms: int = 200, deadline_s: float = 60.0,
                 on_run: Callable[[str, dict[str, Any]], None] | None = None,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        import os

        self.mem, self.root, self.wing, self.room = mem, os.path.realpath(root), wing, room
        self.rescan_s, self.debounce_ms, self.deadline_s = rescan_s, debounce_ms, deadline_s
        self.on_run, self.on_error = on_run, on_error
        self._pending: set[str] = set()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.runs = 0
        self.last_error: str | None = None
        self._next_rescan = time.monotonic() + rescan_s

    @property
    def queue_depth(self) -> int:
        with self._cond:
            return len(self._pending)

    def start(self) -> Watcher:
        self._threads = [threading.Thread(target=self._watch, name="memlens-watch", daemon=True),
                         threading.Thread(target=self._work, name="memlens-index-worker", daemon=True)]
        for t in self._threads:
            t.start()
        with _active_lock:
            _active.append(self)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)
        with _active_lock:
            if self in _active:
                _active.remove(self)

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _watch(self) -> None:
        import os

        import watchfiles

        store = os.path.realpath(self.mem.path)  # a store inside the workspace: its own writes are not changes
        while not self._stop.is_set():
            try:
                for changes in watchfiles.watch(self.root, stop_event=self._stop, debounce=self.debounce_ms, step=50,
                                                 ignore_permission_denied=True, raise_interrupt=False):
                    with self._cond:
                        self._pending.update(path for _, path in changes if not path.startswith(store))
                        self._cond.notify_all()
            except Exception as exc:  # the watcher died: the periodic rescan still keeps the index fresh
                self.last_error = f"watcher: {exc}"
                self._stop.wait(1.0)

    def _work(self) -> None:
        from memlens.ingest.runs import index

        while not self._stop.is_set():
            with self._cond:
                wait = max(0.0, self._next_rescan - time.monotonic())
                if not self._pending and wait > 0:
                    self._cond.wait(timeout=wait)
                if self._stop.is_set():
                    return
                only = set(self._pending) if self._pending else None
                self._pending.clear()
            full = only is None and time.monotonic() >= self._next_rescan
            if only is None and not full:
                continue
            if full:
                self._next_rescan = time.monotonic() + self.rescan_s
            try:
                out = index(self.mem, self.root, wing=self.wing, room=self.room, deadline_s=self.deadline_s, only=only)
                self.runs += 1
                if self.on_run:
                    self.on_run("rescan" if full else "changes", out)
            except BaseException as exc:  # a failed run is reported; the next one retries
                self.last_error = str(exc)
                if self.on_error:
                    self.on_error(exc)
                self._stop.wait(1.0)
