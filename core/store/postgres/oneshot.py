"""An add's whole transaction in ONE message: prepared statements sent through libpq's pipeline mode, then a Sync.

psycopg's ``Connection.pipeline()`` sends each statement as soon as it is executed (one ``send`` per statement, a
``poll`` before and after each) and dumps every parameter through its adapters: for the add (the statement, a
COMMIT, the flush of the WAL) that was five writes to the socket and about half of the writing process's CPU
besides its own Python, on a machine where the writers and their server share the cores. Here the three go out
together: the add is a statement prepared once per connection under a name of its own (its parameters typed in
the SQL, so the server infers none), its values are encoded here as text (the vector in pgvector's binary form),
and the results are read through psycopg's own wait functions; the first error is raised as psycopg raises it
(the same class and diagnostics), and a connection lost on the way as psycopg's ``OperationalError``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import struct
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
_PLACEHOLDER = re.compile(r"%([sb])(::[a-z0-9]+)?")
_PREPARED: weakref.WeakKeyDictionary[Any, set[bytes]] = weakref.WeakKeyDictionary()  # connection -> names prepared


class Statement:
    """A statement of psycopg placeholders (``%s``, ``%b``, each cast or typed by ``types``) as a prepared one:
    ``$n::type`` in order, under a name made of its text."""

    def __init__(self, sql: str, types: Sequence[str]) -> None:
        it = iter(types)
        count = 0

        def number(m: re.Match[str]) -> str:
            nonlocal count
            count += 1
            given = next(it)
            if m.group(2) and m.group(2) != f"::{given}":
                raise AssertionError(f"parameter {count}: cast {m.group(2)}, typed {given}")
            return f"${count}::{given}"

        self.sql = _PLACEHOLDER.sub(number, sql)
        if next(it, None) is not None:
            raise AssertionError("more types than parameters")
        self.binary = [m.group(1) == "b" for m in _PLACEHOLDER.finditer(sql)]
        self.name = b"memlens_" + hashlib.sha1(self.sql.encode()).hexdigest()[:16].encode()


@functools.lru_cache(maxsize=16)
def _statement(sql: str) -> Statement:
    return Statement(sql, [])


def _text(v: Any, encoding: str) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode(encoding)
    if isinstance(v, bool):
        return b"t" if v else b"f"
    if isinstance(v, (int, float)):
        return repr(v).encode()
    raise TypeError(f"no text form for {type(v).__name__}")


def vector_binary(v: np.ndarray) -> bytes:
    """pgvector's binary form of a vector: its dimension and a reserved 0 (int16 each), then big-endian float32s."""
    return struct.pack(">HH", v.shape[0], 0) + np.asarray(v, dtype=">f4").tobytes()


def _prepare(conn: Any, stmt: Statement) -> None:
    """``stmt`` prepared on ``conn`` (once: the names prepared are kept per connection)."""
    from psycopg import errors, generators, pq

    names = _PREPARED.setdefault(conn, set())
    if stmt.name in names:
        return
    with conn.lock:
        conn.pgconn.send_prepare(stmt.name, stmt.sql.encode(conn.info.encoding))
        results = conn.wait(generators.execute(conn.pgconn))
    for r in results:
        if r.status == pq.ExecStatus.FATAL_ERROR:
            raise errors.error_from_result(r, encoding=conn.info.encoding)
    names.add(stmt.name)


def run(conn: Any, stmt: Statement, args: Sequence[Any], after: Sequence[str]) -> None:
    """``stmt`` with ``args``, then each statement of ``after`` (no parameters), then a Sync, in one message on
    ``conn`` (idle, autocommit, not in a pipeline); the first error raised once every result is read. A statement
    deallocated meanwhile (``DEALLOCATE ALL`` by someone else on this connection) is prepared again, once."""
    _again_if_deallocated(conn, lambda: _run(conn, stmt, args, after))


def _again_if_deallocated(conn: Any, call: Callable[[], T]) -> T:
    """``call()``, once more with every statement prepared again if the connection lost its prepared statements."""
    from psycopg import errors

    try:
        return call()
    except errors.InvalidSqlStatementName:
        _PREPARED.pop(conn, None)
        return call()


def _params(stmt: Statement, args: Sequence[Any], encoding: str) -> tuple[list[bytes | None], list[int]]:
    """``args`` encoded for ``stmt`` (vectors in pgvector's binary form, the rest as text), and their formats."""
    params = [vector_binary(a) if b else _text(a, encoding) for a, b in zip(args, stmt.binary, strict=True)]
    return params, [1 if b else 0 for b in stmt.binary]


def _run(conn: Any, stmt: Statement, args: Sequence[Any], after: Sequence[str]) -> None:
    from psycopg import errors, generators, pq

    thens = [_statement(sql) for sql in after]  # prepared too: parsed once per connection
    for s in (stmt, *thens):
        _prepare(conn, s)
    encoding = conn.info.encoding
    params, formats = _params(stmt, args, encoding)
    pg = conn.pgconn
    failed: Any = None
    with conn.lock:
        pg.enter_pipeline_mode()
        try:
            pg.send_query_prepared(stmt.name, params, formats)
            for then in thens:
                pg.send_query_prepared(then.name, None)
            pg.pipeline_sync()
            conn.wait(generators.send(pg))
            while True:
                results = conn.wait(generators.fetch_many(pg))
                for r in results:
                    if failed is None and r.status == pq.ExecStatus.FATAL_ERROR:
                        failed = r
                if results and results[-1].status == pq.ExecStatus.PIPELINE_SYNC:
                    break
        finally:
            if pg.status == pq.ConnStatus.OK:
                pg.exit_pipeline_mode()
    if failed is not None:
        raise errors.error_from_result(failed, encoding=encoding)


def first_value(conn: Any, stmt: Statement, args: Sequence[Any]) -> bytes | None:
    """The first column of the first row ``stmt`` returns with ``args``, in its binary form (None: no row, or NULL),
    through the prepared statement (one message each way) on ``conn`` (autocommit, not in a pipeline)."""
    return _again_if_deallocated(conn, lambda: _first_value(conn, stmt, args))


def _first_value(conn: Any, stmt: Statement, args: Sequence[Any]) -> bytes | None:
    from psycopg import errors, generators, pq

    _prepare(conn, stmt)
    encoding = conn.info.encoding
    params, formats = _params(stmt, args, encoding)
    with conn.lock:
        conn.pgconn.send_query_prepared(stmt.name, params, formats, result_format=1)
        results = conn.wait(generators.execute(conn.pgconn))
    for r in results:
        if r.status == pq.ExecStatus.FATAL_ERROR:
            raise errors.error_from_result(r, encoding=encoding)
    r = results[-1]
    return r.get_value(0, 0) if r.ntuples else None


def vector_from_binary(value: bytes) -> np.ndarray:
    """A vector in pgvector's binary form as float32."""
    dim = struct.unpack_from(">H", value)[0]
    return np.frombuffer(value, dtype=">f4", count=dim, offset=4).astype(np.float32)
