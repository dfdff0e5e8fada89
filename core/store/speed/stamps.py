"""Values a search reads several times, kept per connection under the connection's stamp.

The stamp is ``(data_version, own_changes)``: SQLite's ``data_version`` moves
when another connection (of any process) commits, ``own_changes`` when this
connection writes something a search could read. A value kept under a stamp is
used while the stamp is unchanged (the invalidation rule: ``memlens.store.speed``).
``data_version`` costs a statement, so a search reads it once, on entering
``settled()``, and what it reads inside is kept under that; outside a
``settled()`` block a caller may pass a stamp it read itself. Inside a
transaction nothing is kept.

Each thread has its own connection (the store's rule), so the values live in a
thread-local record tied to that connection: a new connection on the thread
starts a new record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class _Held:
    """One connection's record: the data_version read on entering ``settled()`` (None outside), the rows its
    retrieval-log writes changed, and the values kept (name -> (stamp, value))."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.version: int | None = None
        self.logged = 0
        self.values: dict[str, tuple[tuple[int, int], Any]] = {}


class Stamps:
    def __init__(self) -> None:
        self._local = threading.local()

    def _held(self, conn: Any) -> _Held:
        held: _Held | None = getattr(self._local, "held", None)
        if held is None or held.conn is not conn:
            held = self._local.held = _Held(conn)
        return held

    @contextmanager
    def settled(self, conn: Any) -> Iterator[None]:
        """``data_version`` read once for the block (nested blocks and transactions keep the outer reading)."""
        held = self._held(conn)
        if held.version is not None or conn.in_transaction:
            yield
            return
        held.version = conn.execute("PRAGMA data_version").fetchone()[0]
        try:
            yield
        finally:
            held.version = None

    def stamp(self, conn: Any) -> tuple[int, int] | None:
        """Inside ``settled()`` and outside a transaction: the data_version read on entering it and the connection's
        ``own_changes`` now. None elsewhere."""
        held = self._held(conn)
        if held.version is None or conn.in_transaction:
            return None
        return held.version, int(conn.total_changes) - held.logged

    def fresh_stamp(self, conn: Any) -> tuple[int, int]:
        """The stamp now: the settled one, else ``data_version`` read here."""
        return self.stamp(conn) or (conn.execute("PRAGMA data_version").fetchone()[0], self.own_changes(conn))

    def kept(self, conn: Any, name: str, read: Callable[[Any], T], stamp: tuple[int, int] | None = None) -> T:
        """``read(conn)``, kept under ``stamp`` (default: ``self.stamp(conn)``); read every time when there is no
        stamp (outside ``settled()`` or inside a transaction, with no stamp given)."""
        held = self._held(conn)
        stamp = self.stamp(conn) if stamp is None else stamp
        if stamp is not None:
            got = held.values.get(name)
            if got is not None and got[0] == stamp:
                value: T = got[1]
                return value
        value = read(conn)
        if stamp is not None:
            held.values[name] = (stamp, value)
        return value

    def own_changes(self, conn: Any) -> int:
        """The rows this connection changed that a search could read: ``total_changes`` less its retrieval-log
        writes (``log_write``)."""
        return int(conn.total_changes) - self._held(conn).logged

    @contextmanager
    def log_write(self, conn: Any) -> Iterator[None]:
        """A write no search reads (the retrieval log): its changes are left out of ``own_changes``."""
        before = conn.total_changes
        try:
            yield
        finally:
            self._held(conn).logged += conn.total_changes - before
