"""Connections to a PostgreSQL store: settings from the URI, a pool for long-lived processes, one-line errors.

A store is named by a libpq URI (``postgresql://user:password@host:port/db``,
or ``postgresql:///db?host=/run/postgresql`` for a unix socket). Errors never
repeat the password: they name the store by :func:`label`, and the driver's own
message, which may quote the URI's settings (a password with a bad percent
escape), is masked with :func:`uri_secrets`.

Two ways to hold connections, both behind ``connection()``:

- :class:`Single`: one connection per thread, opened on first use (a CLI
  command, one search). A connection found broken (the server restarted, the
  backend was terminated) is dropped, and the next call opens a new one.
- :class:`Pool`: ``psycopg_pool.ConnectionPool`` for long-lived processes (the
  app, the MCP server); every connection is checked when taken from the pool,
  so one that died while idle is replaced before it is used.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeGuard
from urllib.parse import unquote

from memlens.errors import StoreError, StoreLockedError
from memlens.secrets import redact, url_secrets, usable

SCHEMES = ("postgresql://", "postgres://")
CONNECT_TIMEOUT_S = 10
# what a lost connection's message says next: a long-lived process (the app, the MCP server, a program holding a
# store) opens a new connection on its next call; a command that runs once has no next call (``one_shot``)
NEXT_CALL = "the next call reconnects"
RUN_AGAIN = "nothing half-written is kept: run the command again"
_after_lost = [NEXT_CALL]


def is_uri(target: object) -> TypeGuard[str]:
    """Whether ``target`` (a ``--store`` value) names a PostgreSQL store rather than a SQLite file."""
    return isinstance(target, str) and target.startswith(SCHEMES)


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            "a postgresql:// store needs the PostgreSQL client libraries: pip install 'memlens[postgres]'"
        ) from None
    return psycopg


def parts(uri: str) -> dict[str, str]:
    """The URI's connection settings (libpq's names: host, port, dbname, user, password, ...)."""
    _driver()
    from psycopg.conninfo import conninfo_to_dict

    try:
        return {k: str(v) for k, v in conninfo_to_dict(uri).items() if v is not None}
    except Exception:  # libpq's message may quote the URI, password included: say it in our own words
        raise StoreError("not a valid PostgreSQL URI (postgresql://user:password@host:port/database?setting=value)") from None


def label(uri: str) -> str:
    """The store's name in messages: the URI without its password."""
    try:
        p = parts(uri)
    except StoreError:
        return re.sub(r"//([^:/@]*):[^@]*@", r"//\1@", uri.split("?")[0])  # at least never the password
    host = p.get("host", "")
    where = f"{host}:{p['port']}" if "port" in p and host and not host.startswith("/") else host
    user = p.get("user", "")
    # on a unix socket the port picks the socket file (.s.PGSQL.<port>): shown too, or a wrong one goes unseen
    port = f"&port={p['port']}" if "port" in p and where.startswith("/") else ""
    return f"postgresql://{user + '@' if user else ''}{where if not where.startswith('/') else ''}/{p.get('dbname', '')}" + (
        f"?host={where}{port}" if where.startswith("/") else ""
    )


def uri_secrets(uri: str) -> tuple[str, ...]:
    """The URI's password in every form a message may quote it: from the userinfo (as written, decoded) and from
    a ``password=`` setting, found by pattern too, so even a URI libpq cannot read gives them up."""
    found: list[str | None] = [*url_secrets(uri)]
    for raw in re.findall(r"[?&]password=([^&#]*)", uri):
        found += [raw, unquote(raw)]
    try:
        found.append(parts(uri).get("password"))
    except StoreError:
        pass
    return usable(found)


@contextmanager
def one_shot() -> Iterator[None]:
    """While the block runs, this process runs one command and then ends (the CLI, but not its app or MCP server):
    a lost connection's message asks to run the command again instead of promising a next call."""
    _after_lost.append(RUN_AGAIN)
    try:
        yield
    finally:
        _after_lost.pop()


def after_lost() -> str:
    """What a lost connection's message ends with (``one_shot``)."""
    return _after_lost[-1]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def translate(exc: BaseException, store: str, uri: str | None = None) -> StoreError:
    """A driver error as one actionable line naming the store (never its password: give ``uri`` to mask it in the
    driver's message)."""
    err = _translate(exc, store)
    return type(err)(redact(str(err), uri_secrets(uri))) if uri else err


def _translate(exc: BaseException, store: str) -> StoreError:
    msg = first_line(exc)
    low = str(exc).lower()
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if "connection refused" in low:
        return StoreError(f"cannot connect to {store}: connection refused (is the PostgreSQL server running there?)")
    if "password authentication failed" in low or "no password supplied" in low or sqlstate == "28P01":
        return StoreError(f"cannot connect to {store}: the server refused the user name or password")
    if sqlstate == "28000" or "authentication" in low:
        return StoreError(f"cannot connect to {store}: {msg}")
    if sqlstate == "3D000" or ("database" in low and "does not exist" in low):
        return StoreError(f"cannot connect to {store}: {msg} (create it first: createdb)")
    if "no such file or directory" in low and "socket" in low:
        tried = re.search(r'on socket "([^"]+)"', str(exc))  # libpq names the socket file it tried
        return StoreError(f"cannot connect to {store}: no server listens on "
                          f"{'socket ' + tried.group(1) if tried else 'that socket'}")
    if "timeout expired" in low or "timed out" in low:
        return StoreError(f"cannot connect to {store}: no answer within {CONNECT_TIMEOUT_S} s")
    if sqlstate in ("40001", "40P01", "55P03") or "lock timeout" in low:
        return StoreLockedError(f"store {store} is busy (a conflicting writer); try again")
    if lost(exc):
        return StoreError(f"lost the connection to {store} ({msg}); {after_lost()}")
    return StoreError(f"store {store}: {msg}")


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection itself is gone (server stopped, backend terminated)."""
    psycopg = _driver()
    if isinstance(exc, (psycopg.errors.AdminShutdown, psycopg.errors.CrashShutdown)):
        return True
    low = str(exc).lower()
    return isinstance(exc, psycopg.OperationalError) and (
        "server closed the connection" in low or "terminating connection" in low or "connection is lost" in low
        or "consuming input failed" in low or "the connection is closed" in low or "ssl syscall" in low
    )


def _not_the_pipelines_end(record: Any) -> bool:
    """A logging filter: psycopg's warning that ending a pipeline failed too, after an error inside it (a batch
    insert the server refused). That error is raised, and reported in one line; the warning would add a second."""
    return not str(record.msg).startswith("error ignored terminating")


def _quiet_pipeline_ends() -> None:
    logger = logging.getLogger("psycopg")
    if _not_the_pipelines_end not in logger.filters:
        logger.addFilter(_not_the_pipelines_end)


def connect(uri: str, store: str, *, configure: Callable[[Any], None] | None = None) -> Any:
    """One autocommit connection (transactions are explicit: ``conn.transaction()``)."""
    psycopg = _driver()
    _quiet_pipeline_ends()
    try:
        conn = psycopg.connect(uri, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="memlens")
    except psycopg.Error as exc:
        problem = first_line(exc).removeprefix("connection is bad: ")
        if problem.startswith("invalid "):  # libpq could not read a setting: the URI as given, not its label
            shown = re.sub(r"//([^:/@]*):[^@]*@", r"//\1@", uri)
            raise StoreError(redact(f"not a valid PostgreSQL URI {shown!r}: {problem}", uri_secrets(uri))) from None
        raise translate(exc, store, uri) from None
    if configure is not None:
        try:
            configure(conn)
        except BaseException:
            conn.close()
            raise
    return conn


def _broken(conn: Any) -> bool:
    return bool(conn.closed or conn.broken)


class Single:
    """One connection per thread; a broken one is replaced on the next call."""

    def __init__(self, uri: str, store: str, configure: Callable[[Any], None] | None = None) -> None:
        self.uri, self.store, self.configure = uri, store, configure
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()
        self.closed = False

    @contextmanager
    def connection(self) -> Iterator[Any]:
        if self.closed:
            raise StoreError(f"store {self.store} is closed")
        conn = getattr(self._local, "conn", None)
        if conn is None or _broken(conn):
            conn = connect(self.uri, self.store, configure=self.configure)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        try:
            yield conn
        finally:
            if _broken(conn):
                self._local.conn = None
                with self._lock:
                    if conn in self._all:
                        self._all.remove(conn)

    def close_thread(self) -> None:
        """Close this thread's connection (a worker thread's, at its end); the next call on it opens a new one."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        try:
            conn.close()
        except Exception:
            pass

    def close(self) -> None:
        self.closed = True
        with self._lock:
            for c in self._all:
                try:
                    c.close()
                except Exception:
                    pass
            self._all.clear()


def _one_line(record: Any) -> bool:
    """A logging filter: the record's message on one line (libpq's errors add a hint line, indented)."""
    record.msg, record.args = " ".join(record.getMessage().split()), None
    return True


RETRY_MAX_S = 2.0  # a pool that lost its server tries again at least this often


def _pool_class() -> Any:
    """``psycopg_pool.ConnectionPool`` whose attempts to reconnect wait at most ``RETRY_MAX_S`` between them. The
    pool's own back-off doubles without bound (1, 2, 4 ... 64 s): after an outage of a minute, the database was back
    but a shared server kept failing for as long again, while the pool slept."""
    from psycopg_pool import ConnectionPool
    from psycopg_pool.base import AttemptWithBackoff

    class Attempt(AttemptWithBackoff):
        def update_delay(self, now: float) -> None:
            super().update_delay(now)
            self.delay = min(self.delay, RETRY_MAX_S)

    class Capped(ConnectionPool):
        def _add_connection(self, attempt: Any, growing: bool = False) -> None:
            super()._add_connection(attempt or Attempt(timeout=self.reconnect_timeout), growing)

    return Capped


class Pool:
    """``psycopg_pool.ConnectionPool``: connections checked when taken, broken ones discarded when returned, and
    a lost server tried again every ``RETRY_MAX_S`` at most.

    The pool logs a warning for each failed attempt to connect; each is kept to one line on stderr.
    """

    def __init__(self, uri: str, store: str, configure: Callable[[Any], None] | None = None, *,
                 min_size: int = 1, max_size: int = 8, timeout_s: float = 30.0) -> None:
        _driver()
        try:
            from psycopg_pool import ConnectionPool
        except ImportError:
            raise StoreError("a pooled postgresql:// store needs psycopg-pool: pip install 'memlens[postgres]'") from None
        pool_class = _pool_class()
        self.store = store
        logger = logging.getLogger("psycopg.pool")
        if _one_line not in logger.filters:
            logger.addFilter(_one_line)
        _quiet_pipeline_ends()
        self._pool = pool_class(
            uri, min_size=min_size, max_size=max_size, timeout=timeout_s, open=False, configure=configure,
            check=ConnectionPool.check_connection, name="memlens",
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S, "application_name": "memlens"},
        )
        try:
            self._pool.open(wait=True, timeout=timeout_s)
        except Exception as exc:
            self._pool.close()
            # the pool hides the server's answer: connect once for the real reason
            connect(uri, store).close()
            raise StoreError(redact(f"cannot connect to {store}: {first_line(exc)}", uri_secrets(uri))) from None
        self.closed = False

    @contextmanager
    def connection(self) -> Iterator[Any]:
        from psycopg_pool import PoolTimeout

        if self.closed:
            raise StoreError(f"store {self.store} is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise StoreError(f"cannot connect to {self.store}: {first_line(exc)}") from None

    def close_thread(self) -> None:
        """Nothing to close: a thread holds a pooled connection only for the length of one call."""

    def close(self) -> None:
        self.closed = True
        self._pool.close()
