"""``Reads`` on PostgreSQL: KNN with pgvector, lexical candidates by FTS5's bm25, rows and vectors.

- KNN: cosine distance (``<=>``) with every scope filter and the "no import in
  progress" rule inside one statement: each wing of the scope through its own
  halfvec HNSW index when it has one, else through the index of all vectors,
  or scanned exactly when it holds fewer than ``hnsw_min_rows`` vectors (or no
  index was built: ``ensure_hnsw``); the candidates are ranked by their stored
  float32 vectors, so the similarities are exact. The answer's ``index`` names
  the plan (``memlens.store.postgres.vectors``).
- Lexical: FTS5's bm25 over FTS5's tokens (title weighted 2, text 1), an OR of
  the query's terms, ties by rowid: the SQLite store's ranking, computed in SQL
  from statistics in tables (``memlens.store.postgres.lexical``), hence
  ``lexical_scorer = "pg-bm25"``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from memlens.limits import MAX_QUERY_TERMS
from memlens.store.postgres import vectors
from memlens.store.postgres.compat import COLUMNS, from_pg
from memlens.store.postgres.lexical import query_phrases, scored
from memlens.store.rows import sound_rows
from memlens.store.scope import Knn, Rows, Scope, query_terms

VISIBLE = "({p}import_id IS NULL OR NOT EXISTS (SELECT 1 FROM imports i WHERE i.id = {p}import_id))"
_SELECT = f"SELECT rowid, content_hash, {COLUMNS} FROM entries"
_ORDER_AUTHORITY = (" ORDER BY CASE type WHEN 'invariant' THEN 0 WHEN 'decision' THEN 1 WHEN 'pattern' THEN 2 ELSE 3 END,"
                    " salience DESC, updated_at DESC")


def visible(alias: str = "") -> str:
    return VISIBLE.format(p=f"{alias}." if alias else "")


def scope_filters(scope: Scope, alias: str = "", *, wings: bool = True) -> tuple[list[str], list[Any]]:
    """SQL conditions of ``scope`` (``col = ANY(%s)``) and their arguments."""
    p = f"{alias}." if alias else ""
    where: list[str] = []
    args: list[Any] = []
    for col, values in scope.columns():
        if values is not None and (wings or col != "wing"):
            where.append(f"{p}{col} = ANY(%s)")
            args.append(list(values))
    return where, args


def _where(where: list[str]) -> str:
    return " WHERE " + " AND ".join(where) if where else ""


class PgReads:
    """The read half of the storage interface over ``self.connection()`` (a context manager giving a connection).

    The host (``PgStore``) provides ``connection()``, ``hnsw_min_rows``, ``ef_search`` and ``wing_ef_search``.
    """

    backend = "postgresql"
    lexical_scorer = "pg-bm25"
    hnsw_min_rows: int
    ef_search: int
    wing_ef_search: int
    connection: Callable[[], AbstractContextManager[Any]]  # a connection for one call

    def generations(self, wings: Iterable[str] | None = None) -> dict[str, int]:
        with self.connection() as conn:
            gens = {w: int(g) for w, g in conn.execute("SELECT wing, generation FROM wings").fetchall()}
        return gens if wings is None else {w: gens.get(w, 0) for w in wings}

    def settled(self) -> AbstractContextManager[None]:
        return nullcontext()  # nothing is kept between reads of the generations here: each reads the table

    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.connection() as conn:
            rows: list[tuple[Any, ...]] = conn.execute(sql, args).fetchall()
        return rows

    def wings(self) -> list[str]:
        return [w for (w,) in self._all(f"SELECT DISTINCT wing FROM entries WHERE {visible()} ORDER BY wing")]

    def rooms(self, wing: str | None = None) -> list[str]:
        sql = f"SELECT DISTINCT room FROM entries WHERE room != '' AND {visible()}" + (" AND wing = %s" if wing else "")
        return [r for (r,) in self._all(sql + " ORDER BY room", (wing,) if wing else ())]

    def _vector_info(self, conn: Any) -> vectors.Info:
        """The indexes and sizes ``vectors.plan`` needs, read again every ``vectors.INFO_TTL_S`` seconds."""
        info: vectors.Info | None = self.__dict__.get("_vinfo")
        if info is None or time.monotonic() - info.read_at > vectors.INFO_TTL_S:
            info = self._vinfo = vectors.read_info(conn)
        return info

    def lexical_beside(self, scope: Scope) -> bool:
        return False  # a round trip either way: no gain from a second connection

    def vector_index(self) -> str:
        with self.connection() as conn:
            return vectors.plan(self._vector_info(conn), None, self.hnsw_min_rows, self.ef_search).name

    def knn(self, qvec: np.ndarray, scope: Scope, n: int) -> Knn:
        """One statement (one per part when their ``ef_search`` differ, sent together): each wing of the scope by
        its own index, the others by the index of all vectors or an exact scan (``memlens.store.postgres.vectors``);
        the candidates ranked by their float32 vectors."""
        q = np.asarray(qvec, dtype=np.float32)
        if not q.any() or not np.isfinite(q).all() or n <= 0:
            return Knn([], "pgvector-exact")
        where, args = scope_filters(scope, "v", wings=False)
        with self.connection() as conn:
            p = vectors.plan(self._vector_info(conn), scope.wings, self.hnsw_min_rows, self.ef_search, self.wing_ef_search)
            steps = [(ef, vectors.knn_sql(part, len(q), ["v.usable", visible("v"), *where], args, q, n))
                     for ef, part in p.steps()]
            if len(steps) == 1 and steps[0][0] == self.ef_search:  # the session's setting
                rows = conn.execute(*steps[0][1], prepare=False).fetchall()
            else:  # each statement with its own setting, all in one round trip; the session's again after them
                with conn.pipeline():
                    curs = []
                    for ef, (sql, params) in steps:
                        conn.execute(vectors.SET_EF, (str(ef),))
                        curs.append(conn.execute(sql, params, prepare=False))
                    conn.execute(vectors.SET_EF, (str(self.ef_search),))
                rows = [r for c in curs for r in c.fetchall()]  # each part's n nearest: ranked together below
        hits = [(int(r), 1.0 - float(d)) for r, d in rows]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return Knn(hits[:n], p.name)

    def _bm25(self, conn: Any, text: str, scope: Scope, n: int | None, out: str = "e.rowid") -> list[tuple[Any, float]]:
        """``out`` and FTS5's bm25 (higher is better) of the rows of ``scope`` matching ``text``'s terms, best first,
        ties by rowid; the first ``n`` (None: all). The rows are scored from the postings, then walked in that
        order against the scope: a narrow scope reads only the rows it needs."""
        phrases = query_phrases(query_terms(text)[:MAX_QUERY_TERMS])
        if not phrases:
            return []
        matches, params = scored(conn, phrases)
        where, args = scope_filters(scope, "e")
        sql = (f"SELECT {out}, m.s FROM ({matches} ORDER BY s DESC, rowid) m "
               f"JOIN entries e ON e.rowid = m.rowid WHERE {visible('e')}" + "".join(" AND " + w for w in where)
               + " ORDER BY m.s DESC, m.rowid" + (" LIMIT %s" if n is not None else ""))
        params += [*args, *([n] if n is not None else [])]
        return [(r, float(s)) for r, s in conn.execute(sql, params, prepare=False).fetchall()]

    def lexical(self, text: str, scope: Scope, n: int, gens: dict[str, int] | None = None) -> list[tuple[int, float]]:
        """FTS5's bm25 (higher is better) of the matches inside ``scope``; ties by rowid."""
        with self.connection() as conn:
            return [(int(r), s) for r, s in self._bm25(conn, text, scope, n)]

    def listing(self, scope: Scope, n: int) -> list[int]:
        where, args = scope_filters(scope)
        sql = "SELECT rowid FROM entries" + _where([visible(), *where]) + _ORDER_AUTHORITY + " LIMIT %s"
        return [r for (r,) in self._all(sql, [*args, n])]

    def rows(self, rowids: Sequence[int]) -> Rows:
        if not rowids:
            return Rows()
        found = self._all(f"{_SELECT} WHERE rowid = ANY(%s) AND {visible()}", [list(rowids)])
        sound = sound_rows(found, Rows())
        by_rowid = {r[0]: r for r in sound.rows}
        return Rows([by_rowid[r] for r in rowids if r in by_rowid], sound.damaged)

    def vector_models(self, rowids: Sequence[int]) -> dict[int, str]:
        if not rowids:
            return {}
        return {int(r): m for r, m in self._all("SELECT rowid, model FROM entries WHERE rowid = ANY(%s)", [list(rowids)])}

    def vectors(self, need: dict[int, str]) -> dict[int, np.ndarray]:
        if not need:
            return {}
        rows = self._all("SELECT rowid, embedding, usable FROM entries_vec WHERE rowid = ANY(%s)", [list(need)])
        return {int(r): (from_pg(e) if ok else np.zeros(len(from_pg(e)), dtype=np.float32)) for r, e, ok in rows}

    def mandatory_invariants(self, wing: str, rooms: list[str] | None) -> set[int]:
        sql = f"SELECT rowid FROM entries WHERE wing = %s AND type = 'invariant' AND status = 'active' AND {visible()}"
        args: list[Any] = [wing]
        if rooms:
            sql += " AND room = ANY(%s)"
            args.append(list(rooms))
        return {r for (r,) in self._all(sql, args)}

    def related(self, ids: list[str], keys: Iterable[str], scope: Scope) -> list[int]:
        keys = list(keys)
        out: list[int] = []
        cols = "rowid, wing, room, kind, type, status"
        if ids:
            sql = f"SELECT {cols} FROM entries WHERE overrides = ANY(%s) AND {visible()} ORDER BY rowid"
            out += [r[0] for r in self._all(sql, [ids]) if scope.contains(*r[1:])]
        if keys:
            out += [r[0] for r in self._all(f"SELECT {cols} FROM entries WHERE key = ANY(%s) AND {visible()} ORDER BY rowid",
                                            [keys]) if scope.contains(*r[1:])]
        return out

    def latest(self, scope: Scope) -> Rows:
        where, args = scope_filters(scope)
        sql = _SELECT + _where([visible(), *where]) + " ORDER BY created_at DESC, rowid DESC LIMIT 1"
        return sound_rows(self._all(sql, args), Rows())

    _SESSION = "kind = 'turn' AND CASE WHEN {p}meta IS JSON OBJECT THEN {p}meta::jsonb ->> 'session_id' END = %s"

    def session_turns(self, session: Any, wings: list[str] | None, n: int) -> Rows:
        sql = f"{_SELECT} WHERE {self._SESSION.format(p='')} AND {visible()}"
        args: list[Any] = [str(session)]
        if wings is not None:
            sql += " AND wing = ANY(%s)"
            args.append(list(wings))
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT %s"
        return sound_rows(self._all(sql, [*args, n]), Rows())

    def session_vectors(self, session: str) -> list[np.ndarray]:
        rows = self._all(
            "SELECT v.embedding, v.usable FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "
            f"WHERE e.{self._SESSION.format(p='e.')} AND {visible('e')}",
            [str(session)],
        )
        return [from_pg(e) if ok else np.zeros(len(from_pg(e)), dtype=np.float32) for e, ok in rows]

    def top_salient(self, scope: Scope, n: int) -> Rows:
        where, args = scope_filters(scope)
        sql = _SELECT + _where([visible(), *where]) + " ORDER BY salience DESC, updated_at DESC LIMIT %s"
        return sound_rows(self._all(sql, [*args, n]), Rows())

    def scope_vectors(self, wings: list[str], statuses: list[str]) -> list[np.ndarray]:
        rows = self._all(
            "SELECT v.embedding, v.usable FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "
            f"WHERE e.wing = ANY(%s) AND e.status = ANY(%s) AND {visible('e')}",
            [list(wings), list(statuses)],
        )
        return [from_pg(e) if ok else np.zeros(len(from_pg(e)), dtype=np.float32) for e, ok in rows]

    def text_matches(self, text: str, wings: list[str]) -> list[str]:
        with self.connection() as conn:
            return [str(i) for i, _ in self._bm25(conn, text, Scope(wings=list(wings)), None, out="e.id")]
