"""The retrieval log written beside the searches instead of inside them (SQLite).

At audit level "reads" every search leaves one row in the audit table and one in
``retrieval_log``. Written by the search itself that cost ~0.3 ms of SQL a search
(a transaction of its own: the busy-timeout switch, two inserts, the commit), a
tenth of a search over a few thousand entries. The search now only hands its
finished rows (their JSON made on its own thread, from the bundle as returned)
to this spool; a writer thread of the store writes what is waiting, every row
that came within ``DELAY`` in one transaction, on its own connection.

What this keeps of the log's rules:

* Order: rows are written in the order they were logged, every drain taking all
  that is waiting under one lock. Whatever in this process reads or writes the
  log's tables (the store's log reads, a write transaction, ``close``) drains
  first, on its own thread, so a process sees its own searches and a write it
  makes after a search comes after that search's row. Such a drain waits 50 ms
  for the store's lock: when another writer (of this process or another) holds
  it longer, the rows go back to wait for the writer thread (which waits as long
  as any write) and come after that write, rather than being lost; until then
  the process's reads of the log do not show them.
* Never fails a search: a row that cannot be written (a read-only or damaged
  store, or one still busy when the store's lock timeout runs out) is skipped.
  A search never waits for the lock; the writer thread waits as any write does,
  so a store busy for a moment delays rows where a search used to skip them.
* Loss: a process killed outright loses the rows of its last ``DELAY`` seconds;
  a process that exits normally writes them (``close``, and at exit for a store
  never closed), waiting for a busy store as long as a write would.

The writer thread ends after ``IDLE`` seconds with nothing to write (closing its
connection) and starts again with the next row, so an idle process holds no
thread; it holds the store weakly, so a store dropped unclosed is not kept alive.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

# seconds a row may wait for others to share its transaction. Each batch, committed on the writer thread's own
# connection, makes the next search read again what the speed layer keeps store-wide (SQLite's data_version moved):
# at 50 ms that was every few searches of a busy process and ate most of the gain (docs_qa, in process: CPU excl.
# the embedding 3.4 ms at 1 s against 3.7-4.0 before the spool; at 50 ms no clear gain)
DELAY = 1.0
IDLE = 1.0  # seconds with nothing to write before the writer thread ends


@dataclass
class Logged:
    """One search's rows: the audit row's values, the ``retrieval_log`` row's (None: none), and once written its seq."""

    ts: str
    wing: str | None
    detail: str
    replay: tuple[Any, ...] | None
    keep: tuple[int, float]  # the retention settings in force (max rows, max age in days)
    seq: int | None = None


class Host(Protocol):
    """What the spool writes through (``SqliteAuditLog``): a batch of rows on this thread's connection, and the end of
    a writer thread (its connection closed)."""

    def write_logged(self, rows: list[Logged], *, patient: bool = False) -> bool: ...
    def close_thread(self) -> None: ...


_live: weakref.WeakSet[LogSpool] = weakref.WeakSet()


def _forget_in_child() -> None:
    """In a forked child: every spool starts empty, with new locks and no writer thread. The rows waiting at the fork
    are the parent's, which writes them (written by the child too they would be logged twice), and a lock a thread
    of the parent held at the fork (a drain under way) would stay held for ever."""
    for spool in list(_live):
        spool._reset()


os.register_at_fork(after_in_child=_forget_in_child)


class LogSpool:
    def __init__(self, host: Host) -> None:
        self._host: Callable[[], Host | None] = weakref.ref(host)
        self._stopped = False
        self._reset()
        _live.add(self)

    def _reset(self) -> None:
        """Nothing waiting, no writer thread, new locks (a new spool, or a forked child's)."""
        self._pending: list[Logged] = []
        self._cond = threading.Condition()
        self._writing = threading.Lock()  # one drain at a time: rows go out in the order they came
        self._thread: threading.Thread | None = None
        self._local = threading.local()  # the row this thread logged last (``last``)

    def mark(self, row: Logged) -> None:
        """``row`` is the one this thread logged last (written at once, not through the spool)."""
        self._local.last = row

    def put(self, row: Logged) -> None:
        self._local.last = row
        with self._cond:
            self._pending.append(row)
            self._wake(1)

    def _wake(self, added: int) -> None:
        """The writer thread started, or told, for the ``added`` rows just put in ``_pending`` (under ``_cond``)."""
        if self._thread is None and not self._stopped:
            self._thread = threading.Thread(target=self._run, name="memlens-retrieval-log", daemon=True)
            self._thread.start()
        elif len(self._pending) == added:  # the thread waits for a first row; later ones wait out its delay
            self._cond.notify()

    def last(self) -> Logged | None:
        """The row this thread logged last (its ``seq`` is set once it was written)."""
        row: Logged | None = getattr(self._local, "last", None)
        return row

    def drain(self, *, patient: bool = False) -> None:
        """Write every row waiting, on the calling thread, after the drain under way if there is one (its rows are
        then written when this returns). Rows the store was too busy to take without ``patient`` wait again, first,
        for the writer thread."""
        if not self._pending and not self._writing.locked():
            return
        host = self._host()
        with self._writing:
            with self._cond:
                rows, self._pending = self._pending, []
            if rows and host is not None and not host.write_logged(rows, patient=patient):
                with self._cond:
                    self._pending[:0] = rows
                    self._wake(len(rows))

    def stop(self) -> None:
        """Write what is waiting here, waiting for a busy store as a write does, and end the writer thread (the store
        closes)."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self.drain(patient=True)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._pending and not self._stopped:
                        self._cond.wait(IDLE)
                    if not self._pending:  # idle, or stopped with nothing left
                        self._thread = None
                        return
                    deadline = time.monotonic() + DELAY  # the rows that come meanwhile share the transaction
                    while not self._stopped and (left := deadline - time.monotonic()) > 0:
                        self._cond.wait(left)
                try:
                    self.drain(patient=True)
                except Exception:  # the log never fails anything; a row it could not write is skipped
                    pass
        finally:
            host = self._host()
            if host is not None:
                host.close_thread()


@atexit.register
def drain_all() -> None:
    """Write the waiting rows of every store of this process, waiting for a busy store as a write does: at exit (a
    process that never closed its stores still writes them), and for tools that look at the files themselves."""
    for spool in list(_live):
        try:
            spool.drain(patient=True)
        except Exception:
            pass
