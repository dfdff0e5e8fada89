"""The vector indexes of a PostgreSQL store and the KNN statement that uses them (pgvector 0.8).

What serves a KNN, chosen on 100k chunks of real text with the real model's vectors (tests/bench/postgres.py,
the figures in tests/bench/README.md):

- **halfvec HNSW**: the indexes hold each vector as ``halfvec`` (16-bit floats, an
  expression index on ``embedding::halfvec(dim)``): half the size of a float32
  index, so more of it stays in the server's cache. The candidates they give
  (``OVERFETCH`` times ``n`` per part) are ranked again by the stored float32
  vectors, so every similarity a search reports is exact.
- **one index per wing** of ``min_rows`` vectors or more (a partial index,
  ``WHERE wing = '<wing>'``) beside the index of all vectors: a search scoped to
  a few wings walks each wing's own graph for its ``n`` nearest. The exact scan
  it replaces read two wings of 4,300 vectors in 41-62 ms (sqlite-vec 11-15 ms), as
  their rows lie all over the table; through their own indexes 6 ms. An
  unscoped search walks the index of all vectors.
- ``ef_search`` 200: recall@10 against the exact answer was 0.95 / 0.87 / 0.91
  (unscoped / two small wings / two large wings) at 40, 0.98 / 0.94 / 0.96 at
  100 and 0.99 / 0.99 / 0.98 at 200, for a few ms more (6 / 6 / 11 ms p50). Neither ranking the
  candidates twice as deep (``OVERFETCH``) nor float32 indexes raised it: the
  graph walk is what misses.
- **a small wing's index is walked wider** (``wing_ef``): a wing of less than
  ``SMALL_WING`` of the vectors gets ``ef_search`` one per ``ROWS_PER_EF`` of its
  vectors (at least ``ef_search``, at most ``wing_ef_search``). At 500k and 1M
  entries (tests/bench/postgres_1m.py: the 100k real chunks and noisy copies of
  them, so each chunk stands 5 or 10 times, nearly) two small wings of 21.5k / 43k
  vectors each reached recall@10 0.948 / 0.860 at 200 (0.980 / 0.928 at 400, 0.968 at
  800 for 43k), while the two largest wings (a third of the vectors and more)
  kept 0.984 / 0.973 at 200 and took 23-44 ms at 400-1000. A query's nearest
  entries in a wing it has little to do with are far and scattered, and a small
  wing's index is cheap to walk wide.
- **iterative index scans** (``hnsw.iterative_scan = relaxed_order``): when the
  other filters (status, room, kind, type) reject candidates, the scan goes on
  until it has ``n`` rows instead of returning fewer (``strict_order`` was no
  faster, and the candidates are re-ranked here anyway).
- a scope of fewer than ``min_rows`` vectors (a small wing, a small store) is
  scanned exactly.

``ensure`` builds the missing indexes (the one of all vectors, and one per
wing of ``min_rows`` vectors or more) with enough ``maintenance_work_mem`` for
the graph to be built in memory; ``Plan`` says, per search, which index serves
each part of the scope, and names it for the trace
(``pgvector-hnsw(halfvec, ef_search=200, wing indexes 2 of 2)``, ``pgvector-hnsw(halfvec, ef_search=860,
wing indexes 2 of 2)``, ``pgvector-exact``; per part when they differ: ``ef_search=200/860``).
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from typing import Any

GLOBAL = "entries_vec_hnsw_h"  # the halfvec HNSW index of every vector
WING_PREFIX = "entries_vec_hnsw_w_"  # + a digest of the wing: its own halfvec HNSW index
M, EF_CONSTRUCTION = 16, 64
MIN_ROWS = 1_000  # a scope (or a wing) of fewer vectors is scanned exactly; a wing of this many gets its own index
EF_SEARCH = 200  # the index of all vectors, and a large wing's own
SMALL_WING = 0.10  # a wing with less than this share of the vectors is walked wider (``wing_ef``) ...
ROWS_PER_EF = 50  # ... ef_search one per this many of its vectors ...
WING_EF_SEARCH = 1000  # ... up to this (pgvector's most)
OVERFETCH = 2  # an index part gives this many times ``n`` candidates by halfvec distance, ranked again by float32
INFO_TTL_S = 30.0  # how long a process trusts what it read of the indexes and the table's size
_PRED = re.compile(r"^\(wing = '((?:[^']|'')*)'::text\)$")


def half(dim: int, alias: str = "v") -> str:
    return f"({alias}.embedding::halfvec({int(dim)}))"


def build_memory_mb(rows: int, dim: int) -> int:
    """``maintenance_work_mem`` for building an HNSW graph of ``rows`` halfvec vectors in memory (pgvector writes it
    to disk, many times slower, when it does not fit): the vectors, their neighbour lists, and a margin."""
    per_row = 2 * dim + 8 * (2 * M) * 2 + 64
    return int(min(8192, max(64, rows * per_row * 1.5 / 2**20)))


@dataclass
class Info:
    """What a store's KNN needs to know: the indexes that exist and the vectors per wing (planner estimates)."""

    has_global: bool = False
    wing_index: dict[str, str] = field(default_factory=dict)  # wing -> its index
    rows: float = 0.0  # vectors in the table (estimate)
    wing_rows: dict[str, float] = field(default_factory=dict)  # wing -> its vectors (estimate; the common wings)
    read_at: float = 0.0


def read_info(conn: Any) -> Info:
    rows = conn.execute(
        "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = 'entries_vec'::regclass AND i.indisvalid AND c.relname LIKE 'entries_vec_hnsw%'").fetchall()
    info = Info(read_at=time.monotonic())
    for name, pred in rows:
        if name == GLOBAL:
            info.has_global = True
        elif pred and (m := _PRED.match(pred)):
            info.wing_index[m.group(1).replace("''", "'")] = name
    total, stats = conn.execute(
        "SELECT (SELECT reltuples FROM pg_class WHERE oid = 'entries_vec'::regclass), "
        "(SELECT array_agg(ARRAY[m.v, m.f::text]) FROM pg_stats s, unnest(s.most_common_vals::text::text[], "
        " s.most_common_freqs) AS m(v, f) WHERE s.schemaname = current_schema() AND s.tablename = 'entries_vec' "
        " AND s.attname = 'wing')").fetchone()
    info.rows = max(0.0, float(total or 0))
    info.wing_rows = {w: info.rows * float(f) for w, f in (stats or [])}
    return info


@dataclass
class Plan:
    """How one KNN runs: per part of the scope (one wing, or everything), an index or an exact scan, and how wide
    the part's index is walked."""

    parts: list[tuple[str | None, str]]  # (wing or None for all, "hnsw" or "exact")
    efs: list[int]  # per part: its ``ef_search`` (an exact part: the session's, unused)
    wing_indexes: int = 0  # parts served by their wing's own index

    def steps(self) -> list[tuple[int, Plan]]:
        """The statements the plan runs, each with its ``ef_search``: one for every part when their settings agree,
        else one per part (each part's ``n`` nearest, merged by the caller)."""
        efs = {e for (_, how), e in zip(self.parts, self.efs) if how == "hnsw"}
        if len(efs) <= 1:
            return [(next(iter(efs), self.efs[0]), self)]
        return [(e, Plan([part], [e])) for part, e in zip(self.parts, self.efs)]

    @property
    def name(self) -> str:
        hnsw = [e for (_, how), e in zip(self.parts, self.efs) if how == "hnsw"]
        if not hnsw:
            return "pgvector-exact"
        detail = ["ef_search=" + "/".join(str(e) for e in dict.fromkeys(hnsw))]
        if self.parts[0][0] is not None:
            detail.append(f"wing indexes {self.wing_indexes} of {len(self.parts)}")
            if len(hnsw) < len(self.parts):
                detail.append(f"{len(self.parts) - len(hnsw)} scanned exactly")
        return f"pgvector-hnsw(halfvec, {', '.join(detail)})"


def wing_ef(rows: float, total: float, ef_search: int, wing_ef_search: int) -> int:
    """How wide a wing's own index is walked: ``ef_search`` for a wing of ``SMALL_WING`` of the vectors or more;
    a smaller wing gets one per ``ROWS_PER_EF`` of its vectors, from ``ef_search`` up to ``wing_ef_search``."""
    if total <= 0 or rows >= SMALL_WING * total:
        return ef_search
    return min(wing_ef_search, max(ef_search, int(rows) // ROWS_PER_EF))


def plan(info: Info, wings: list[str] | None, min_rows: int, ef_search: int, wing_ef_search: int = WING_EF_SEARCH) -> Plan:
    """Which index serves each part of the scope, and how wide (``wing_ef``)."""
    if wings is None:
        return Plan([(None, "hnsw" if info.has_global and info.rows >= min_rows else "exact")], [ef_search])
    parts: list[tuple[str | None, str]] = []
    efs: list[int] = []
    own = 0
    for w in dict.fromkeys(wings):
        # a wing with its own index had ``min_rows`` vectors when it was built (the statistics may not list it)
        if w in info.wing_index and info.wing_rows.get(w, info.rows) >= min_rows:
            parts.append((w, "hnsw"))
            efs.append(wing_ef(info.wing_rows.get(w, info.rows), info.rows, ef_search, wing_ef_search))
            own += 1
        else:  # no index of its own: the index of all vectors, filtered, for a wing too large to scan
            parts.append((w, "hnsw" if info.has_global and info.wing_rows.get(w, 0.0) >= min_rows else "exact"))
            efs.append(ef_search)
    return Plan(parts, efs, own)


# a statement's ``ef_search``, for the implicit transaction of the pipeline it is sent in only (``PgReads.knn``)
SET_EF = "SELECT set_config('hnsw.ef_search', %s, true)"


def knn_sql(p: Plan, dim: int, where: list[str], args: list[Any], q: Any, n: int) -> tuple[str, list[Any]]:
    """The statement of plan ``p`` and its parameters: each part's ``n`` nearest (by its index, in halfvec order,
    or exactly), then all of them ranked by the stored float32 vectors, the first ``n`` kept."""
    cond = " AND ".join(where)
    subs, params = [], [q]
    for wing, how in p.parts:
        order = f"{half(dim)} <=> %s::halfvec({int(dim)})" if how == "hnsw" else "v.embedding <=> %s"
        wing_cond = " AND v.wing = %s" if wing is not None else ""
        subs.append(f"(SELECT v.rowid, v.embedding FROM entries_vec v WHERE {cond}{wing_cond} ORDER BY {order} LIMIT %s)")
        params += [*args, *([wing] if wing is not None else []), q, n * OVERFETCH if how == "hnsw" else n]
    sql = f"SELECT c.rowid, c.embedding <=> %s AS d FROM ({' UNION ALL '.join(subs)}) c ORDER BY d, c.rowid LIMIT %s"
    return sql, [*params, n]


def wing_index_name(wing: str) -> str:
    return WING_PREFIX + hashlib.sha1(wing.encode("utf-8")).hexdigest()[:16]


def ensure(conn: Any, dim: int, min_rows: int) -> list[str]:
    """Build the missing indexes: the one of all vectors, one per wing of ``min_rows`` vectors or more; drop the
    float32 index an earlier memlens built. Returns the names built (each ``CREATE INDEX`` is its own statement:
    readers and writers go on meanwhile, writers wait for the build to finish)."""
    from psycopg import sql

    total = int(conn.execute("SELECT count(*) FROM entries_vec").fetchone()[0])
    conn.execute(f"SET maintenance_work_mem = '{build_memory_mb(total, dim)}MB'")
    built = []
    have = read_info(conn)
    opts = f"WITH (m = {M}, ef_construction = {EF_CONSTRUCTION})"
    if not have.has_global:
        conn.execute(f"CREATE INDEX IF NOT EXISTS {GLOBAL} ON entries_vec USING hnsw ({half(dim, 'entries_vec')} "
                     f"halfvec_cosine_ops) {opts}")
        built.append(GLOBAL)
    big = conn.execute("SELECT wing, count(*) FROM entries_vec GROUP BY wing HAVING count(*) >= %s ORDER BY wing",
                       (min_rows,)).fetchall()
    for wing, n in big:
        if wing in have.wing_index:
            continue
        conn.execute(f"SET maintenance_work_mem = '{build_memory_mb(int(n), dim)}MB'")
        name = wing_index_name(wing)
        conn.execute(sql.SQL(f"CREATE INDEX IF NOT EXISTS {name} ON entries_vec USING hnsw ({half(dim, 'entries_vec')} "
                             f"halfvec_cosine_ops) {opts} WHERE wing = {{}}").format(sql.Literal(wing)))
        built.append(name)
    conn.execute("RESET maintenance_work_mem")
    conn.execute("DROP INDEX IF EXISTS entries_vec_hnsw")
    conn.execute("ANALYZE entries_vec")  # the sizes ``plan`` compares with ``min_rows``
    return built
