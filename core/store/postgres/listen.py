"""Hearing writes at once: LISTEN on the channel every write transaction notifies at commit.

Caches stay correct without this (they compare wing generations, read from
the ``wings`` table, before every use); a long-lived process can listen so it
learns of another process's write the moment it commits, e.g. to refresh a
screen or drop a warm index early. ``GenerationListener`` runs one thread on
its own connection and calls ``on_write(wings)`` for each committed write. If
the connection drops, it reconnects (after a pause) and reports ``None``:
writes may have been missed meanwhile, so the caller should re-read the
generations.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from memlens.store.postgres import connect
from memlens.store.postgres.schema import NOTIFY_CHANNEL

RETRY_S = 1.0


class GenerationListener:
    def __init__(self, uri: str, on_write: Callable[[list[str] | None], None]) -> None:
        self.uri = uri
        self.label = connect.label(uri)
        self.on_write = on_write
        self._stop = threading.Event()
        self._conn: Any = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memlens-pg-listen", daemon=True)

    def start(self, timeout_s: float = 10.0) -> GenerationListener:
        """Start listening; returns once LISTEN is in place (or after ``timeout_s``)."""
        self._thread.start()
        self._ready.wait(timeout_s)
        return self

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                self._conn = connect.connect(self.uri, self.label)
                self._conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                if not first:
                    self.on_write(None)  # writes while disconnected were not heard
                first = False
                self._ready.set()
                while not self._stop.is_set():
                    for note in self._conn.notifies(timeout=0.5, stop_after=1):
                        try:
                            wings = json.loads(note.payload)
                        except ValueError:
                            wings = None
                        self.on_write(wings if isinstance(wings, list) else None)
            except Exception:
                if self._stop.wait(RETRY_S):
                    break
            finally:
                self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
