"""``PgStore``: the storage interface (``memlens.store.base.Store``) on PostgreSQL + pgvector.

The same tables as the SQLite store (``memlens.store.postgres.schema``), so
the engine above sees the same rows. Connections come from ``connect.Single``
(one per thread, for a command) or ``connect.Pool`` (long-lived processes).
Any driver error leaves as one ``StoreError`` line naming the store without
its password; a connection that broke is replaced on the next call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.compact_json import dumps
from memlens.errors import CorruptRowError, StoreError
from memlens.models import format_ts, utcnow
from memlens.store.postgres import connect, oneshot, schema, vectors
from memlens.store.postgres.answers import PgAnswers
from memlens.store.postgres.browse import PgBrowse
from memlens.store.postgres.compat import COLUMNS, from_pg
from memlens.store.postgres.ingest import PgIngest
from memlens.store.postgres.reads import PgReads, visible
from memlens.store.postgres.replay import LOG_INSERT, PgReplay
from memlens.store.postgres.task_rows import PgTaskRows
from memlens.store.postgres.transaction import PgTransactions
from memlens.store.rows import json_object

if TYPE_CHECKING:
    import numpy as np

    from memlens.models import Entry

_GROUP_COLUMNS = frozenset({"wing", "room", "kind", "type", "status"})
RETRIEVAL_LOCK_TIMEOUT_MS = 50  # a search never waits longer than this for its log row
PRUNE_EVERY = 64
_REUSABLE_SQL = ("SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid "  # ``reusable_vector``
                 "WHERE e.content_hash = %s AND e.model = %s AND v.usable LIMIT 1")
_REUSABLE = oneshot.Statement(_REUSABLE_SQL, ["text", "text"])


def _configure(conn: Any, ef_search: int) -> None:
    """A new connection: pgvector's types, and the HNSW search settings for the whole session (a KNN is then one
    statement, with no SET before it)."""
    from pgvector.psycopg import register_vector

    register_vector(conn)
    conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")
    conn.execute("SET hnsw.iterative_scan = relaxed_order")


class PgStore(PgTransactions, PgReads, PgBrowse, PgAnswers, PgReplay, PgIngest):
    """A memlens store in a PostgreSQL database. ``model`` is called (only when needed) for the embedding
    model (``.model_id``, ``.dim``) that a new store records."""

    backend = "postgresql"
    lexical_scorer = "pg-bm25"

    def __init__(self, uri: str, *, model: Callable[[], Any] | None = None, pooled: bool = False,
                 hnsw_min_rows: int = vectors.MIN_ROWS, ef_search: int = vectors.EF_SEARCH,
                 wing_ef_search: int = vectors.WING_EF_SEARCH, pool_size: int = 8, create: bool = True) -> None:
        self.uri = uri
        self.path = self.label = connect.label(uri)  # what messages and `stats` show as the store
        self._model = model
        self.hnsw_min_rows = int(hnsw_min_rows)
        self.ef_search = int(ef_search)
        self.wing_ef_search = int(wing_ef_search)
        self._pruned = False
        self._read_only: bool | None = None
        self._flush: str | None = None  # ``_durable``'s statement once asked ("" for none)
        self._prepare(create)
        configure = functools.partial(_configure, ef_search=self.ef_search)
        self._conns: Any = (connect.Pool(uri, self.label, configure, max_size=pool_size) if pooled
                            else connect.Single(uri, self.label, configure))
        with self.connection() as conn:
            self._meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())

    def _prepare(self, create: bool) -> None:
        """pgvector enabled, the schema migrated, the store's model recorded (one plain connection).

        ``create=False``: a database without a memlens store is an error (read commands never leave one behind).
        """
        conn = connect.connect(self.uri, self.label)
        try:
            if not create and schema.version(conn) == 0:
                raise StoreError(f"no memlens store in {self.label} (memlens add, import or copy create one)")
            schema.ensure_extension(conn, self.label)
            if schema.version(conn) < schema.SCHEMA_VERSION:
                row = None
                if schema.version(conn):
                    row = conn.execute("SELECT value FROM store_meta WHERE key = 'dim'").fetchone()
                dim = int(row[0]) if row else int(self._need_model().dim)
                schema.migrate(conn, self.label, dim)
            else:
                schema.migrate(conn, self.label, 0)  # refuses a newer schema
            if conn.execute("SELECT 1 FROM store_meta WHERE key = 'model'").fetchone() is None:
                model = self._need_model()
                conn.execute(
                    "INSERT INTO store_meta(key, value) VALUES ('model', %s), ('dim', %s), ('created_at', %s) "
                    "ON CONFLICT (key) DO NOTHING",
                    (model.model_id, str(model.dim), format_ts(utcnow())),
                )
        except StoreError:
            raise
        except Exception as exc:
            raise connect.translate(exc, self.label, self.uri) from None
        finally:
            conn.close()

    def _need_model(self) -> Any:
        if self._model is None:
            raise StoreError(f"store {self.label} is new: give the embedding model that fixes its vector size")
        return self._model()

    # -- connections ----------------------------------------------------------------------------

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A connection for one call; a driver error leaves as one StoreError line."""
        import psycopg

        try:
            with self._conns.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise connect.translate(exc, self.label, self.uri) from None

    def close(self) -> None:
        self._conns.close()

    def close_thread(self) -> None:
        """Close this thread's connection (a worker thread's, at its end): threads come and go, connections must not pile up."""
        self._conns.close_thread()

    # -- meta -----------------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        return dict(self._meta)

    def set_model(self, model: str) -> None:
        """Record ``model`` as the one every vector of this store was made by."""
        with self.write() as writer:
            writer.conn.execute("INSERT INTO store_meta(key, value) VALUES ('model', %s)"
                                " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (model,))
        self._meta["model"] = model

    @property
    def model_id(self) -> str:
        return self._meta.get("model") or str(self._need_model().model_id)

    @property
    def dim(self) -> int:
        raw = self._meta.get("dim")
        try:
            return int(raw) if raw else int(self._need_model().dim)
        except (TypeError, ValueError):
            raise CorruptRowError(f"store {self.label}: store_meta holds {raw!r} as the vector size") from None

    def schema_version(self) -> int:
        with self.connection() as conn:
            return schema.version(conn)

    def read_only(self) -> bool:
        """A standby server, or a user or database set read-only; asked once (a write refused later still fails
        in one line: the server refuses it)."""
        if self._read_only is None:
            with self.connection() as conn:
                self._read_only = bool(conn.execute("SELECT current_setting('transaction_read_only') = 'on'").fetchone()[0])
        return self._read_only

    def size_bytes(self) -> int:
        with self.connection() as conn:
            return int(conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname IN "
                "('entries', 'entries_vec', 'audit', 'wings', 'tasks', 'blockers', 'imports', 'store_meta',"
                " 'answers', 'answer_citations', 'retrieval_log', 'golden')"
            ).fetchone()[0])

    vindex = None  # no in-process vector index: pgvector answers every KNN (exact, or HNSW on a large store)

    def warm_index(self, *, text: bool = False, stop: Callable[[], bool] | None = None) -> int:
        """Nothing to warm: the server holds the vectors (its shared buffers); returns 0 vectors held here."""
        return 0

    def ensure_hnsw(self) -> list[str]:
        """Build the missing vector indexes now (``memlens.store.postgres.vectors.ensure``: minutes at 100k vectors);
        returns the names built."""
        with self.connection() as conn:
            built = vectors.ensure(conn, self.dim, self.hnsw_min_rows)
        self.__dict__.pop("_vinfo", None)  # read again at the next search
        return built

    def reusable_vector(self, digest: str, model: str) -> bytes | None:
        import psycopg

        with self.connection() as conn:
            if (conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF  # every add asks: the lean path, outside
                    and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE):  # a transaction (a preview's)
                value = oneshot.first_value(conn, _REUSABLE, (digest, model))
                return None if value is None else oneshot.vector_from_binary(value).astype("<f4").tobytes()
            row = conn.execute(_REUSABLE_SQL, (digest, model)).fetchone()
        return None if row is None else from_pg(row[0]).astype("<f4").tobytes()

    def missing_ids(self, ids: Iterable[str]) -> list[str]:
        ids = list(ids)
        with self.connection() as conn:
            found = {r[0] for r in conn.execute(f"SELECT id FROM entries WHERE id = ANY(%s) AND {visible()}", (ids,))}
        return [i for i in ids if i not in found]

    def entry_states(self, ids: list[str]) -> tuple[str, bool] | None:
        """The first of ``ids`` that has a row, and whether that row is visible (False: being imported)."""
        with self.connection() as conn:
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                found = dict(conn.execute(f"SELECT id, {visible()} FROM entries WHERE id = ANY(%s)", (chunk,)).fetchall())
                if found:  # the first in ``ids``' order, not the index's
                    first = next(j for j in chunk if j in found)
                    return first, bool(found[first])
        return None

    def sweep_imports(self) -> int:
        """Remove the staged rows of imports whose process is gone (``memlens.store.postgres.imports``)."""
        from memlens.store.postgres import imports

        return imports.sweep(self)

    def import_staged(self, shown: Path, rows: Iterator[tuple[int, int, Entry]], vecs: np.ndarray,
                      outside: dict[str, int], unchanged: Callable[[], None], progress: Callable[[int], None]) -> None:
        """Write ``rows`` as an import: staged in short transactions, published at once."""
        from memlens.store.postgres import imports

        imports.write(self, shown, rows, vecs, outside, unchanged, progress)

    # -- entry rows -------------------------------------------------------------------------------

    def get_row(self, entry_id: str) -> tuple[Any, ...] | None:
        with self.connection() as conn:
            row: tuple[Any, ...] | None = conn.execute(
                f"SELECT {COLUMNS} FROM entries WHERE id = %s AND {visible()}", (entry_id,)).fetchone()
        return row

    def iter_rows(self, wing: str | None = None) -> Iterator[tuple[Any, ...]]:
        sql = f"SELECT {COLUMNS} FROM entries WHERE {visible()}" + (" AND wing = %s" if wing else "") + " ORDER BY rowid"
        with self.connection() as conn, conn.cursor() as cur:
            yield from cur.execute(sql, (wing,) if wing else ())

    def entry_vector(self, entry_id: str) -> bytes | None:
        with self.connection() as conn:
            row = conn.execute(
                f"SELECT v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid WHERE e.id = %s AND {visible('e')}",
                (entry_id,),
            ).fetchone()
        return None if row is None else from_pg(row[0]).astype("<f4").tobytes()

    def export_rows(self, wing: str | None, with_vectors: bool) -> Iterator[tuple[tuple[Any, ...], bytes | None, str | None]]:
        cols = ", ".join(f"e.{c.strip()}" for c in COLUMNS.split(","))
        sql = f"SELECT {cols}" + (", e.content_hash, v.embedding FROM entries e JOIN entries_vec v ON v.rowid = e.rowid"
                                  if with_vectors else " FROM entries e")
        sql += f" WHERE {visible('e')}" + (" AND e.wing = %s" if wing else "") + " ORDER BY e.rowid"
        with self.connection() as conn, conn.cursor() as cur:
            for row in cur.execute(sql, (wing,) if wing else ()):
                if with_vectors:
                    yield tuple(row[:-2]), from_pg(row[-1]).astype("<f4").tobytes(), row[-2]
                else:
                    yield tuple(row), None, None

    # -- counts ---------------------------------------------------------------------------------

    def count(self) -> int:
        with self.connection() as conn:
            return int(conn.execute(f"SELECT count(*) FROM entries WHERE {visible()}").fetchone()[0])

    def groups(self, column: str, wing: str | None = None, *, named_only: bool = False) -> list[tuple[Any, int]]:
        if column not in _GROUP_COLUMNS:
            raise ValueError(f"cannot group entries by {column!r}")
        where = [visible()] + ([f"{column} != ''"] if named_only else []) + (["wing = %s"] if wing else [])
        with self.connection() as conn:
            return [(v, int(n)) for v, n in conn.execute(
                f"SELECT {column}, count(*) FROM entries WHERE {' AND '.join(where)} GROUP BY {column} ORDER BY {column}",
                (wing,) if wing else ())]

    def wing_counts(self) -> list[dict[str, Any]]:
        wings: dict[str, dict[str, Any]] = {}
        with self.connection() as conn:
            sql = f"SELECT wing, room, count(*) FROM entries WHERE {visible()} GROUP BY wing, room ORDER BY wing, room"
            rows = conn.execute(sql)
            for wing, room, n in rows:
                w = wings.setdefault(wing, {"wing": wing, "entries": 0, "rooms": {}})
                w["entries"] += n
                w["rooms"][room or ""] = n
        return list(wings.values())

    def audit_count(self) -> int:
        with self.connection() as conn:
            return int(conn.execute(f"SELECT count(*) FROM audit WHERE {visible()}").fetchone()[0])

    # -- generations ----------------------------------------------------------------------------

    def write_stamp(self) -> tuple[int, int]:
        with self.connection() as conn:
            row = conn.execute("SELECT coalesce(sum(generation), 0), count(*) FROM wings").fetchone()
        return int(row[0]), int(row[1])

    # -- audit and retrieval log ----------------------------------------------------------------

    def audit(self, entry_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        sql = f"SELECT seq, ts, action, entry_id, wing, before, after, detail FROM audit WHERE {visible()}"
        args: tuple[Any, ...] = ()
        if entry_id:
            sql += " AND entry_id = %s"
            args = (entry_id,)
        with self.connection() as conn:
            rows = conn.execute(sql + " ORDER BY seq DESC LIMIT %s", (*args, limit)).fetchall()
        out = []
        for seq, ts, action, eid, wing, before, after, detail in rows:
            row: dict[str, Any] = {"seq": int(seq), "ts": ts, "action": action, "entry_id": eid, "wing": wing}
            for name, value in (("before", before), ("after", after), ("detail", detail)):
                row[name] = json_object(value) if value else None
                if value and row[name] is None:
                    row.setdefault("damaged", []).append(name)
            out.append(row)
        return out

    def review_rows(self) -> list[tuple[Any, ...]]:
        sql = ("SELECT seq, ts, action, entry_id, wing, before, after, detail FROM audit"
               " WHERE entry_id IN (SELECT entry_id FROM audit WHERE action IN ('add', 'update', 'delete')"
               "                    AND strpos(detail, '\"client\"') > 0)"
               f" AND action IN ('add', 'update', 'delete', 'review', 'import') AND {visible()} ORDER BY seq")
        with self.connection() as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]

    def last_write(self, wings: list[str]) -> dict[str, Any] | None:
        with self.connection() as conn:
            row = conn.execute(
                "SELECT a.seq, a.ts, a.action, a.entry_id, a.wing FROM wings w JOIN audit a ON a.seq = w.last_write_seq "
                "WHERE w.wing = ANY(%s) ORDER BY a.seq DESC LIMIT 1",
                (list(wings),),
            ).fetchone()
        if row is None:
            return None
        seq, ts, action, entry_id, wing = row
        return {"seq": int(seq), "ts": ts, "action": action, "entry_id": entry_id, "wing": wing}

    def settle_log(self) -> None:
        """Nothing waits: a search on PostgreSQL writes its own log rows (``log_retrieval``)."""

    def log_retrieval(self, active_wing: str | None, metrics: dict[str, Any], *, max_rows: int, max_age_days: float,
                      record: Callable[[], tuple[Any, ...] | None] | None = None) -> None:
        """One ``retrieval`` audit row and, in the same transaction, its ``retrieval_log`` row (``record()``: what replay
        needs); never fails or blocks a retrieval (gives up after a short lock timeout)."""
        from memlens.store import retention

        detail = dumps(metrics)
        try:
            replay_row = record() if record is not None else None
            with self.connection() as conn, conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{RETRIEVAL_LOCK_TIMEOUT_MS}ms'")
                seq = conn.execute(
                    "INSERT INTO audit(ts, action, entry_id, wing, before, after, detail) "
                    "VALUES (%s, 'retrieval', NULL, %s, NULL, NULL, %s) RETURNING seq",
                    (format_ts(utcnow()), active_wing, detail),
                ).fetchone()[0]
                if replay_row is not None:
                    conn.execute(LOG_INSERT, (seq, *replay_row))
                if not self._pruned or int(seq) % PRUNE_EVERY == 0:
                    self._pruned = True
                    retention.prune_retrievals(_Qmark(conn), max_rows, max_age_days)
            self.note_retrieval(int(seq), detail)  # committed: what the answer log links to
        except Exception:
            pass

    def retrievals(self, limit: int) -> list[dict[str, Any]]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT seq, ts, detail FROM audit WHERE action = 'retrieval' ORDER BY seq DESC LIMIT %s", (limit,)
            ).fetchall()
        out = []
        for seq, ts, detail in rows:
            metrics = json_object(detail)
            if metrics is not None and isinstance(metrics.get("latency_ms", {}), dict):
                out.append({"seq": int(seq), "ts": ts, **metrics})
        return out

    # -- working memory -------------------------------------------------------------------------

    def tasks(self) -> PgTaskRows:
        return PgTaskRows(self.connection)


class _Qmark:
    """A connection that takes SQLite's ``?`` placeholders: lets shared SQL helpers (retention) run here."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Any = ()) -> Any:
        return self._conn.execute(sql.replace("?", "%s"), args)
