"""Entry rows kept in process beside the in-process vector index, checked by wing generation.

A search weighs about a hundred candidates and reads each one's row: one
statement, then a check that the row decodes. In a long-lived process the same
rows come back search after search, so once the vector index is in use the
store keeps the sound rows it has read, each with the generation its wing had
when it was read. Every write to a wing, by any process, bumps that generation
(core/store/writer.py), so a kept row is used only while its wing is still at
that generation; otherwise it is read again. A row read while a write was
landing is tagged with the generation read before it: at worst it is read
again on the next search, never served stale. Damaged rows are never kept (each
search reports them). At most ``ROWS_KEPT`` rows and ``BYTES_KEPT`` characters of
title and text are held; past either, the cache starts over. The model that
made each hit's vector (what a search's freshness step asks) is kept the same
way, under the same check: a re-embedding bumps every wing it rewrites.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from memlens.store.scope import StoredRow

ROWS_KEPT = 20_000
BYTES_KEPT = 32_000_000  # characters of title and text (an entry may hold up to 100,000)
VALUES_SHARED = 4096  # distinct column values the kept rows share (see ``_share``)


# (rowid, content_hash, id, wing, room, kind, type, status, title, text, key, salience, overrides, created_at,
# updated_at, meta): the positions of the columns with few distinct values
_SHARED = (3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15)


class RowCache:
    def __init__(self) -> None:
        self._rows: dict[int, tuple[int, StoredRow]] = {}  # rowid -> (its wing's generation when read, the row)
        self._lock = threading.Lock()
        self._size = 0  # characters of title and text held
        self._models: dict[int, tuple[int, str, str]] = {}  # rowid -> (generation when read, wing, model of its vector)
        self._values: dict[tuple[type, object], object] = {}  # (type, value) -> the one object kept rows hold for it

    def split(self, rowids: Sequence[int], gens: dict[str, int]) -> tuple[dict[int, StoredRow], list[int]]:
        """The kept rows of ``rowids`` still current at ``gens`` (wing -> generation), and the rowids to read."""
        held, rows = {}, self._rows
        missing = []
        for r in rowids:
            got = rows.get(r)
            if got is not None and gens.get(got[1][3]) == got[0]:  # (rowid, content_hash, id, wing, ...)
                held[r] = got[1]
            else:
                missing.append(r)
        return held, missing

    def keep(self, rows: Sequence[StoredRow], gens: dict[str, int]) -> list[StoredRow] | None:
        """Keep sound ``rows`` read after ``gens`` was read (a wing it does not name is not kept); returns them as
        kept, None when they are past the budget of characters and nothing was kept."""
        size = sum(len(r[8] or "") + len(r[9] or "") for r in rows)  # (rowid, hash, id, wing, ..., title, text, ...)
        kept = []
        with self._lock:
            if len(self._rows) + len(rows) > ROWS_KEPT or self._size + size > BYTES_KEPT:
                self._rows, self._size, self._values = {}, 0, {}
            if size > BYTES_KEPT:
                return None
            for r in rows[:ROWS_KEPT]:
                g = gens.get(r[3])
                if g is not None:
                    shared = self._share(r)
                    self._rows[r[0]] = (g, shared)
                    kept.append(shared)
            self._size += size
        return kept

    def _share(self, r: StoredRow) -> StoredRow:
        """``r`` with its few-valued columns (wing, room, kind, type, status, key, salience, overrides, timestamps,
        meta) as objects shared by every kept row with the same value: the driver makes new ones for each row,
        and a search reads those columns of ~100 rows that are cold in the CPU's caches."""
        values = self._values
        out = list(r)
        for i in _SHARED:
            v = out[i]
            got = values.get((type(v), v))
            if got is not None:
                out[i] = got
            elif len(values) < VALUES_SHARED:
                values[(type(v), v)] = v
        return tuple(out)

    def split_models(self, rowids: Sequence[int], gens: dict[str, int]) -> tuple[dict[int, str], list[int]]:
        """The kept vector models of ``rowids`` still current at ``gens``, and the rowids to read (a re-embedding
        bumps the wings it rewrites, like any write)."""
        held, missing, models = {}, [], self._models
        for r in rowids:
            got = models.get(r)
            if got is not None and gens.get(got[1]) == got[0]:
                held[r] = got[2]
            else:
                missing.append(r)
        return held, missing

    def keep_models(self, found: Sequence[tuple[int, str, str]], gens: dict[str, int]) -> None:
        """Keep (rowid, model, wing) read after ``gens`` was read."""
        with self._lock:
            if len(self._models) + len(found) > ROWS_KEPT:
                self._models = {}
            for rowid, model, wing in found[:ROWS_KEPT]:
                g = gens.get(wing)
                if g is not None:
                    self._models[rowid] = (g, wing, model)

    def __len__(self) -> int:
        return len(self._rows)
