"""``Reads`` answered by SQLite, sqlite-vec and FTS5 (the protocol: ``memlens.store.reads``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.limits import MAX_QUERY_TERMS
from memlens.store import db, staging, textindex
from memlens.store import rows as entry_rows
from memlens.store.reads import ENTRY_COLUMNS, entry_filters, fts_query, sql_filters, sql_in
from memlens.store.rows import sound_rows
from memlens.store.scope import Knn, Rows, Scope, query_terms
from memlens.store.speed import OFF, SpeedLayer, rowcache
from memlens.store.speed.vindex import VectorIndex
from memlens.store.vectors import from_blob, vec0_knn

_GROUP_COLUMNS = frozenset({"wing", "room", "kind", "type", "status"})
_SELECT = f"SELECT rowid, content_hash, {ENTRY_COLUMNS} FROM entries"


def _where(where: list[str]) -> str:
    return " WHERE " + " AND ".join(where) if where else ""


class SqliteReads:
    """``Reads`` with SQLite, sqlite-vec and FTS5, over this thread's connection: the read role of ``SqliteStore``,
    which provides ``conn`` (this thread's connection), ``speed`` (the speed layer, ``memlens.store.speed``, or None:
    every read is SQL) and ``_staged_vectors`` (an in-process copy of the visible vectors while an import is staged
    in a searched scope). Every method answers the same with the layer on or off; the layer only saves reads."""

    backend = "sqlite"
    lexical_scorer = "fts5-bm25"
    conn: Any
    path: Path
    _speed: SpeedLayer | None  # None on a store pinned to one connection
    _vector_index_mode: Callable[[], str]  # search.vector_index now: the speed layer's switch
    _staged_vectors: VectorIndex | None

    if TYPE_CHECKING:  # the host's vector size (what the in-process index reads the store with)
        @property
        def dim(self) -> int: ...

    @property
    def speed(self) -> SpeedLayer | None:
        """The speed layer, or None when the switch is off (``search.vector_index = "sqlite-vec"``) or the store is
        pinned to one connection: every read is then SQL."""
        return None if self._vector_index_mode() == OFF else self._speed

    @property
    def vindex(self) -> VectorIndex | None:
        """The speed layer's in-process vector index when in use, else None (sqlite-vec answers the KNN)."""
        speed = self.speed
        return None if speed is None else speed.vectors

    def wings(self) -> list[str]:
        """Every wing holding a visible entry."""
        speed = self.speed
        if speed is not None:
            return speed.distinct.values("wing")
        return [v for v, _ in self.groups("wing")]

    def rooms(self, wing: str | None = None) -> list[str]:
        """Every non-empty room of a visible entry (of ``wing``)."""
        speed = self.speed
        if speed is not None:
            return speed.distinct.values("room", wing, named_only=True)
        return [v for v, _ in self.groups("room", wing, named_only=True)]

    def groups(self, column: str, wing: str | None = None, *, named_only: bool = False) -> list[tuple[Any, int]]:
        """(value, visible entries) per value of ``column``, in order; ``named_only`` leaves out ``''``."""
        if column not in _GROUP_COLUMNS:
            raise ValueError(f"cannot group entries by {column!r}")
        where = " AND ".join(([f"{column} != ''"] if named_only else []) + (["wing = ?"] if wing else []))
        return staging.visible_groups(self.conn, column, where, (wing,) if wing else ())

    def generations(self, wings: Iterable[str] | None = None) -> dict[str, int]:
        gens = self._all_generations()
        return dict(gens) if wings is None else {w: gens.get(w, 0) for w in wings}

    def _all_generations(self) -> dict[str, int]:
        """Every wing's generation. With the speed layer, read again only when the database may have changed since
        the last read on this connection (its stamp: ``memlens.store.speed.stamps``): a search asks five times or
        so and reads the table at most once. Inside a transaction it is always read. Not to be mutated: callers
        get copies."""
        conn, speed = self.conn, self.speed
        if speed is None or conn.in_transaction:
            return _read_generations(conn)
        return speed.stamps.kept(conn, "generations", _read_generations, speed.stamps.fresh_stamp(conn))

    def settled(self) -> Any:
        """Whether another connection committed is asked once for the block (a search), when the speed layer keeps
        what the search reads; a no-op without it."""
        speed, conn = self.speed, self.conn
        db.still_there(conn)  # a search never reads a store file deleted or replaced since it was opened
        return nullcontext() if speed is None else speed.stamps.settled(conn)

    def vector_index(self) -> str:
        return "memory" if self.vindex is not None else "sqlite-vec"

    def lexical_beside(self, scope: Scope) -> bool:
        """On a file (another connection to ``:memory:`` is another database), outside a transaction, with the
        scope's wings held current in process: a stale wing is read once, by the KNN, not by both threads."""
        vindex = self.vindex
        if vindex is None or str(self.path) == ":memory:" or self.conn.in_transaction:
            return False
        return vindex.holds(self, scope.wings, self.generations())

    def knn(self, qvec: np.ndarray, scope: Scope, n: int) -> Knn:
        vindex = self.vindex
        if vindex is not None:
            gens = self.generations()  # one read for both generators: the blocks and the scope set they check
            hits = vindex.knn(self, qvec, scope.wings, scope.index_filters(), n, gens)
            return Knn(hits, "memory", gens, scanned=functools.partial(vindex.scanned, token=vindex.last_scan()))
        found = self._vec0(qvec.astype("<f4").tobytes(), scope, n)
        if found is None:  # an import in progress has rows in the scope: rank the visible vectors in process
            staged = self._staged_vectors
            if staged is None:
                staged = self._staged_vectors = VectorIndex()
            gens = self.generations()
            return Knn(staged.knn(self, qvec, scope.wings, scope.index_filters(), n, gens), "memory", gens,
                       "an import in progress has rows in this scope: vectors ranked in process, without them")
        self._staged_vectors = None  # that copy of the vectors was for the import's duration
        return Knn(found, "sqlite-vec")

    def _vec0(self, blob: bytes, scope: Scope, n: int) -> list[tuple[int, float]] | None:
        """vec0 KNN inside the scope; None when an import in progress has staged rows in the scope (the KNN
        would rank them and lose visible rows). One read snapshot for both."""
        conn = self.conn
        where, args = sql_filters(scope)
        own = not conn.in_transaction
        if own:
            conn.execute("BEGIN")
        try:
            if staging.staged(conn, scope.wings):
                return None
            return vec0_knn(conn, blob, n, where, args)
        finally:
            if own:
                conn.execute("COMMIT")

    def lexical(self, text: str, scope: Scope, n: int, gens: dict[str, int] | None = None) -> list[tuple[int, float]]:
        """FTS5's bm25 (title weighted 2, text 1), negated so that higher is better; ties by rowid.

        Most matches of a free-text query lie outside a scoped search (2,300 of
        them for 460 inside, at 100k entries). Joining each to its entries row to
        test the scope was most of the statement's time; with the in-process
        index warm, the test is a lookup in the set of in-scope rowids the index
        holds, and bm25 is computed for the rows inside only. Same rows, same
        order, in about 60% of the time. Better still, outside a transaction the
        ranking comes from postings held in process (``memlens.store.speed.lexindex``):
        FTS5's bm25 without its per-match reads; this SQL runs when that cannot
        answer exactly (a word of several tokens, a read-only connection, the
        first search after a write).
        """
        terms = query_terms(text)[:MAX_QUERY_TERMS]  # the phrases of fts_query(text), in its order
        if not terms:
            return []
        conn, speed = self.conn, self.speed
        vindex = None if speed is None else speed.vectors
        if speed is not None and vindex is not None:
            allowed = vindex.in_scope(self, scope.wings, scope.index_filters(), gens)
            hits = speed.postings.search(conn, terms, allowed, n)  # FTS5's bm25, in process (None: it cannot say)
            if hits is not None:
                return hits
            fq = fts_query(text)
            if len(allowed) == self._fts_rows() and not staging.staged(conn, None):
                # the scope holds every row of the text index (a subset of the same size), none of an import:
                # nothing to test per match (an unscoped search pays one Python call per match otherwise)
                sql = ("SELECT rowid, bm25(entries_fts, 2.0, 1.0) AS s FROM entries_fts "
                       "WHERE entries_fts MATCH ? ORDER BY s, rowid LIMIT ?")
                return [(r, -float(s)) for r, s in conn.execute(sql, [fq, n]).fetchall()]
            conn.create_function("memlens_in_scope", 1, allowed.__contains__, deterministic=True)
            sql = ("SELECT rowid, bm25(entries_fts, 2.0, 1.0) AS s FROM entries_fts "
                   "WHERE entries_fts MATCH ? AND memlens_in_scope(rowid) ORDER BY s, rowid LIMIT ?")
            rows = conn.execute(sql, [fq, n]).fetchall()
        else:
            fq = fts_query(text)
            ewhere, eargs = entry_filters(scope, "e.")
            sql = (
                "SELECT e.rowid, bm25(entries_fts, 2.0, 1.0) AS s FROM entries_fts "
                "JOIN entries e ON e.rowid = entries_fts.rowid WHERE entries_fts MATCH ?"
            )
            sql += "".join(" AND " + w for w in ewhere) + " ORDER BY s, e.rowid LIMIT ?"
            rows = conn.execute(sql, [fq, *eargs, n]).fetchall()
        return [(r, -float(s)) for r, s in rows]  # SQLite's bm25 is "lower is better"; flip it

    def _fts_rows(self) -> int:
        """Rows in the text index: the first varint of FTS5's "averages" record (id 1), no scan."""
        return textindex.rows(self.conn)

    def listing(self, scope: Scope, n: int) -> list[int]:
        where, args = entry_filters(scope)
        sql = "SELECT rowid FROM entries" + _where(where)
        sql += (" ORDER BY CASE type WHEN 'invariant' THEN 0 WHEN 'decision' THEN 1 WHEN 'pattern' THEN 2 ELSE 3 END,"
                " salience DESC, updated_at DESC LIMIT ?")
        return [r for (r,) in self.conn.execute(sql, [*args, n])]

    def rows(self, rowids: Sequence[int]) -> Rows:
        vindex = self.vindex
        if vindex is None or self.conn.in_transaction:
            return self._read_rows(rowids)
        # in process: the rows kept beside the vectors, while their wings are at the generation they were read at
        gens = self.generations()
        held, missing = vindex.rows.split(rowids, gens)
        if not missing:
            return Rows([held[r] for r in rowids])
        got = self._read_rows(missing)
        vindex.rows.keep(got.rows, gens)
        if not held:
            return got
        held.update((r[0], r) for r in got.rows)
        return Rows([held[r] for r in rowids if r in held], got.damaged)

    def _read_rows(self, rowids: Sequence[int]) -> Rows:
        out = Rows()
        conn = self.conn
        for i in range(0, len(rowids), 400):
            chunk = rowids[i : i + 400]
            found = conn.execute(f"{_SELECT} WHERE rowid IN ({','.join('?' * len(chunk))}) AND {staging.visible()}",
                                 list(chunk)).fetchall()
            sound = sound_rows(found, Rows())
            out.damaged += sound.damaged
            by_rowid = {r[0]: r for r in sound.rows}
            out.rows += [by_rowid[r] for r in chunk if r in by_rowid]
        return out

    def warm_rows(self) -> int:
        """Keep every visible entry's row and vector model beside the in-process index now, when they fit the
        row cache (``memlens.store.speed.rowcache``), and build their entries when those fit too (``rows.kept_entry``):
        a long-lived process's first searches then read and build none. Returns the rows kept (0 without the
        in-process index, or for a store past the cache's bounds)."""
        vindex = self.vindex
        if vindex is None or self.conn.in_transaction:
            return 0
        gens = self.generations()  # read first: a row written meanwhile is tagged older and read again
        rowids = [r for (r,) in self.conn.execute(f"SELECT rowid FROM entries WHERE {staging.visible()} LIMIT ?",
                                                  (rowcache.ROWS_KEPT + 1,))]
        if len(rowids) > rowcache.ROWS_KEPT:
            return 0
        kept = vindex.rows.keep(self._read_rows(rowids).rows, gens)
        if kept is None:
            return 0
        vindex.rows.keep_models(self._read_models(rowids), gens)
        # and their entries, as a result builds them (kept_entry), when those fit too
        if len(kept) <= entry_rows.ENTRIES_KEPT and sum(len(r[8]) + len(r[9]) for r in kept) <= entry_rows.ENTRY_CHARS_KEPT:
            for r in kept:
                entry_rows.kept_entry(r)
        return len(kept)

    def vector_models(self, rowids: Sequence[int]) -> dict[int, str]:
        vindex = self.vindex
        if vindex is None or self.conn.in_transaction:
            return {r: m for r, m, _ in self._read_models(rowids)}
        gens = self.generations()  # in process: kept beside the rows, under the same generation check
        split: tuple[dict[int, str], list[int]] = vindex.rows.split_models(rowids, gens)
        held, missing = split
        if missing:
            got = self._read_models(missing)
            vindex.rows.keep_models(got, gens)
            held.update((r, m) for r, m, _ in got)
        return held

    def _read_models(self, rowids: Sequence[int]) -> list[tuple[int, str, str]]:
        out: list[tuple[int, str, str]] = []
        for i in range(0, len(rowids), 400):
            chunk = list(rowids[i : i + 400])
            out += self.conn.execute(f"SELECT rowid, model, wing FROM entries WHERE rowid IN ({','.join('?' * len(chunk))})",
                                     chunk).fetchall()
        return out

    def vectors(self, need: dict[int, str]) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        vindex = self.vindex
        if need and vindex is not None:
            out.update(vindex.vectors(need))
        # vec0 answers `rowid = ?` from its index but scans the table for `rowid IN (...)`: one point lookup
        # per rowid, joined by UNION ALL so that one statement runs them all (a compound SELECT of at most 200)
        rest = [r for r in need if r not in out]
        for i in range(0, len(rest), 200):
            chunk = rest[i : i + 200]
            sql = " UNION ALL ".join(["SELECT rowid, embedding FROM entries_vec WHERE rowid = ?"] * len(chunk))
            for rowid, blob in self.conn.execute(sql, chunk).fetchall():
                out[rowid] = from_blob(blob)
        return out

    def mandatory_invariants(self, wing: str, rooms: list[str] | None) -> set[int]:
        sql = f"SELECT rowid FROM entries WHERE wing = ? AND type = 'invariant' AND status = 'active' AND {staging.visible()}"
        args: list[Any] = [wing]
        if rooms:
            c, v = sql_in("room", rooms)
            sql += " AND " + c
            args += v
        return {r for (r,) in self.conn.execute(sql, args)}

    def related(self, ids: list[str], keys: Iterable[str], scope: Scope) -> list[int]:
        # look up by the overrides / key indexes alone and apply the scope here: with the scope in the
        # SQL, the planner (no ANALYZE stats) prefers the wing index and scans the whole wing
        conn = self.conn
        cols = "rowid, wing, room, kind, type, status"
        out: list[int] = []
        # most stores hold no override at all: one probe of the partial index on overrides says so
        speed = self.speed
        if not (_any_override(conn) if speed is None else speed.stamps.kept(conn, "any_override", _any_override)):
            ids = []
        for i in range(0, len(ids), 400):
            chunk = ids[i : i + 400]
            q = f"SELECT {cols} FROM entries WHERE overrides IN ({','.join('?' * len(chunk))}) AND {staging.visible()}"
            out += [r[0] for r in conn.execute(q, chunk) if scope.contains(*r[1:])]
        for key in keys:
            out += [r[0] for r in conn.execute(f"SELECT {cols} FROM entries WHERE key = ? AND {staging.visible()}", (key,))
                    if scope.contains(*r[1:])]
        return out

    def latest(self, scope: Scope) -> Rows:
        where, args = entry_filters(scope)
        sql = _SELECT + _where(where) + " ORDER BY created_at DESC, rowid DESC LIMIT 1"
        return sound_rows(self.conn.execute(sql, args).fetchmany(1), Rows())

    def session_turns(self, session: Any, wings: list[str] | None, n: int) -> Rows:
        sql = (f"{_SELECT} WHERE kind = 'turn' AND CASE WHEN json_valid(meta) THEN json_extract(meta, '$.session_id') END = ?"
               f" AND {staging.visible()}")
        args: list[Any] = [session]
        if wings is not None:
            c, v = sql_in("wing", wings)
            sql += " AND " + c
            args += v
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
        return sound_rows(self.conn.execute(sql, [*args, n]).fetchall(), Rows())

    def session_vectors(self, session: str) -> list[np.ndarray]:
        rows = self.conn.execute(
            "SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "
            "WHERE e.kind = 'turn' AND CASE WHEN json_valid(e.meta) THEN json_extract(e.meta, '$.session_id') END = ? "
            f"AND {staging.visible('e')}",
            (session,),
        ).fetchall()
        return [from_blob(r[0]) for r in rows]

    def top_salient(self, scope: Scope, n: int) -> Rows:
        where, args = entry_filters(scope)
        sql = _SELECT + _where(where) + " ORDER BY salience DESC, updated_at DESC LIMIT ?"
        return sound_rows(self.conn.execute(sql, [*args, n]).fetchall(), Rows())

    def scope_vectors(self, wings: list[str], statuses: list[str]) -> list[np.ndarray]:
        where = f"e.wing IN ({','.join('?' * len(wings))}) AND e.status IN ({','.join('?' * len(statuses))})"
        rows = self.conn.execute(
            f"SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid WHERE {where} AND {staging.visible('e')}",
            [*wings, *statuses],
        )
        return [from_blob(blob) for (blob,) in rows]

    def text_matches(self, text: str, wings: list[str]) -> list[str]:
        fq = fts_query(text)
        if not fq:
            return []
        rows = self.conn.execute(
            "SELECT e.id FROM entries_fts JOIN entries e ON e.rowid = entries_fts.rowid WHERE entries_fts MATCH ? "
            f"AND e.wing IN ({','.join('?' * len(wings))}) AND {staging.visible('e')} ORDER BY bm25(entries_fts, 2.0, 1.0)",
            [fq, *wings],
        ).fetchall()
        return [r[0] for r in rows]


def _read_generations(conn: Any) -> dict[str, int]:
    return {w: int(g) for w, g in conn.execute("SELECT wing, generation FROM wings").fetchall()}


def _any_override(conn: Any) -> bool:
    """Whether any entry overrides another: one probe of the partial index on ``overrides``."""
    return conn.execute("SELECT 1 FROM entries WHERE overrides IS NOT NULL LIMIT 1").fetchone() is not None


__all__ = ["SqliteReads"]
