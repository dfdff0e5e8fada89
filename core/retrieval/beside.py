"""Work a search does beside its query's embedding: one worker thread per process.

The query's embedding (ONNX Runtime, a few milliseconds) releases the GIL, and
the lexical generator does not need the vector: in a long-lived process (the
in-process index warm) it ranks the text matches on this worker meanwhile, and
the lexical stage takes its answer (``memlens.retrieval.candidates``). The
results are the same: the same call on the same state, only on another thread.

One worker serves the whole process, one job at a time: a search that finds it
busy (another search's job) runs its lexical generator itself, as before, so
concurrent searches never queue behind each other. The worker starts at its
first job and again in a forked child (a thread does not survive a fork).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class _Worker:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._job: tuple[Callable[[], Any], Future[Any]] | None = None
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[[], T]) -> Future[T] | None:
        """``fn()`` on the worker, or None when it is busy (the caller runs ``fn`` itself)."""
        with self._cond:
            if self._busy:
                return None
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="memlens-beside", daemon=True)
                try:
                    thread.start()
                except BaseException:  # (no thread to be had, the interpreter shutting down): the caller runs it
                    return None
                self._thread = thread
            future: Future[T] = Future()
            self._job, self._busy = (fn, future), True
            self._cond.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._job is None:
                    self._cond.wait()
                fn, future = self._job
                self._job = None
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn()
            except BaseException as exc:  # the caller's ``result()`` raises it
                error = exc
            with self._cond:  # free before the caller hears: its next search may hand in the next job at once
                self._busy = False
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)
            # nothing of the job is held while the worker waits (its closure holds a store: a store dropped without
            # close() closes its connections when it goes)
            del fn, future, result, error


_worker = _Worker()


def submit(fn: Callable[[], T]) -> Future[T] | None:
    """``fn()`` on the process's worker thread, or None when that is busy."""
    return _worker.submit(fn)


def _forget_in_child() -> None:
    global _worker
    _worker = _Worker()


os.register_at_fork(after_in_child=_forget_in_child)
