"""The speed layer: what the SQLite store keeps in process so that a long-lived process searches faster.

Everything here is a copy of something the plain SQLite path reads with SQL, and
gives the same answer (the parity test, tests/test_speed_parity.py, runs every
question set and the demo's searches with the layer on and off and compares the
rankings). Its parts:

    stamps     per connection: the values a search reads several times (the wing generations, FTS5's state
               records, whether any entry overrides another), and the count of retrieval-log changes
    distinct   the wings and rooms that hold entries
    vindex     the vectors of every wing as numpy blocks, scanned in process (exact KNN)
    rowcache   the entry rows (and their vectors' models) searches read, beside the vectors
    lexindex   FTS5's bm25 computed from postings held in process (porter: SQLite's stemmer, ported)

**The switch** is ``search.vector_index``: ``"sqlite-vec"`` turns the layer off (``SqliteStore.speed`` is None and
every read is SQL: the reference path); ``"auto"`` (the default) keeps stamps and distinct values from the start
and the vectors, rows and postings once ``warm_index()`` loaded them (a long-lived process: the app, the MCP
server, ``search --queries``, ``eval``). A store pinned to one connection (a rolled-back preview) has no layer.

**The invalidation rule**: a value held here is used only while the stamp it was read under still holds, and
nothing is kept or served inside a transaction (whose writes a rollback may undo). There are two stamps:

* a wing's *generation*, for what belongs to one wing (vector blocks, rows, models; the distinct values use
  their sum): every write of an entry bumps its wing's generation in the same transaction (store/writer.py),
  whichever process writes (one exception, exact by construction: a vector block current before a transaction
  of this process that only added entries to its wing takes those rows and the new generation, ``VectorIndex.append``);
* the connection's ``(data_version, own_changes)``, for what is store-wide (the generations themselves, FTS5's
  state records, which every change to the text index rewrites and by which ``lexindex`` keys its postings):
  SQLite moves ``data_version`` when another connection commits, and ``own_changes`` moves when this one
  writes. A write that no search reads (the retrieval log) goes through ``Stamps.log_write`` so that it does not
  count: every search logs itself, and what the next search reads stays kept.

So a write of an entry, by any process, reaches every part; a new kind of write either bumps the generations
(anything a search reads) or goes through ``log_write`` (nothing a search reads).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from memlens.store.speed.distinct import DistinctValues
from memlens.store.speed.lexindex import LexIndex
from memlens.store.speed.stamps import Stamps
from memlens.store.speed.vindex import VectorIndex

if TYPE_CHECKING:
    from memlens.store.base import Writes

OFF = "sqlite-vec"  # the setting's value that turns the layer off


class SpeedLayer:
    """One store's speed layer (built by ``SqliteStore``, used unless the switch is off). ``host`` is the store
    (its write stamp and groups, for the distinct values)."""

    def __init__(self, host: Writes) -> None:
        self._lock = threading.Lock()
        self._vectors: VectorIndex | None = None
        self.stamps = Stamps()
        self.distinct = DistinctValues(host)
        self.postings = LexIndex(self.stamps)

    @property
    def vectors(self) -> VectorIndex | None:
        """The in-process vector index (with its row cache) once ``warm_vectors`` made it; None before (sqlite-vec
        answers the KNN)."""
        return self._vectors

    def warm_vectors(self) -> VectorIndex:
        with self._lock:
            if self._vectors is None:
                self._vectors = VectorIndex()
            return self._vectors


__all__ = ["OFF", "SpeedLayer", "Stamps"]
