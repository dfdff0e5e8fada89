"""The front ends on a PostgreSQL store: the CLI with ``--store postgresql://…`` and ``MEMLENS_STORE``,
``memlens copy`` in both directions, one-line refusals, and the MCP server (a real embedded server)."""

from __future__ import annotations

import json
import socket

import pytest

from .conftest import run_cli
from .mcp_helpers import result_data, run_client, stdio_params

pytest.importorskip("psycopg")


def one_line_error(proc, fragment):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memlens: error: "), proc.stderr
    assert fragment in lines[0], lines[0]


@pytest.mark.model  # add and search embed with the real model
def test_cli_add_search_export_on_postgres(pg_uri, real_embedder):
    add = run_cli("--store", pg_uri, "add", "Callbacks must not block the executor.", "--wing", "p", "--type",
                  "invariant", "--json")
    assert add.returncode == 0, add.stderr
    entry = json.loads(add.stdout)
    env = {"MEMLENS_STORE": pg_uri}  # the same store named by the environment
    other = run_cli("add", "The build runs in CI on every push.", "--wing", "p", env=env)
    assert other.returncode == 0, other.stderr
    found = run_cli("search", "--store", pg_uri, "blocking callbacks", "--active-wing", "p", "--json")
    assert found.returncode == 0, found.stderr
    d = json.loads(found.stdout)
    assert d["results"][0]["id"] == entry["id"]
    assert all(r["vector"]["fresh"] for r in d["results"])  # each hit's freshness, from PostgreSQL's rows
    assert d["trace"]["fusion"]["vector_index"].startswith("pgvector") and d["trace"]["fusion"]["lexical"] == "pg-bm25"
    out = run_cli("export", env=env)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["id"] for r in records][0] == entry["id"] and len(records) == 2
    stats = run_cli("stats", "--json", env=env)
    shown = json.loads(stats.stdout)["store"]
    assert shown.startswith("postgresql://") and shown.endswith("?host=" + pg_uri.split("?host=")[1])


def test_copy_sqlite_to_postgres_to_sqlite_through_the_cli(tmp_path, settings, hash_embedder, pg_uri):
    from memlens import Memory
    from memlens.assist import log

    src, back = tmp_path / "a.db", tmp_path / "b.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        a = mem.add("Deploys go through the release branch", wing="ops", room="deploy", type="invariant")
        mem.add("Café au lait: unicode survives", wing="_global", key="coffee", meta={"n": 1})
        mem.update(a.id, text="Deploys go only through the release branch")
        mem.tasks.complete("t-1", "ship the copy command")
        bundle = mem.search("release branch", active_wing="ops")
        log.record(mem, question="how do we deploy?", model="m", complete=True, error=None, retrieval_seq=None,
                   bundle=bundle, cited=["zz-x", a.id], invented=["made-up"])  # not in id order
        answers = log.answers(mem)
    there = run_cli("copy", str(src), pg_uri)
    assert there.returncode == 0, there.stderr
    assert "copied 2 entries (2 vectors)" in there.stderr and ":@" not in there.stderr
    assert len(there.stderr.splitlines()) == 1  # too few vectors for the indexes: none built, nothing more said
    again = run_cli("copy", pg_uri, str(back))
    assert again.returncode == 0, again.stderr
    want = run_cli("--store", str(src), "export", "--with-vectors")
    mid = run_cli("--store", pg_uri, "export", "--with-vectors")
    got = run_cli("--store", str(back), "export", "--with-vectors")
    assert want.returncode == mid.returncode == got.returncode == 0, (want.stderr, mid.stderr, got.stderr)
    assert want.stdout and got.stdout == mid.stdout == want.stdout
    tasks = run_cli("--store", str(back), "tasks", "--json")
    assert tasks.returncode == 0 and "ship the copy command" in tasks.stdout, tasks.stderr
    with Memory.open(back, settings=settings, embedder=hash_embedder) as mem:
        assert log.answers(mem) == answers and answers[0]["citations"] == ["zz-x", a.id]

    # into a store that is not empty: refused in one line, nothing written
    refused = run_cli("copy", str(src), pg_uri)
    one_line_error(refused, "is not empty")
    assert run_cli("--store", pg_uri, "export", "--with-vectors").stdout == want.stdout
    # a new file whose copy fails goes again
    missing = tmp_path / "none.db"
    one_line_error(run_cli("copy", str(missing), str(tmp_path / "c.db")), "no store at")
    assert not (tmp_path / "c.db").exists()


def test_copy_into_postgres_builds_the_vector_indexes(tmp_path, settings, hash_embedder, pg_uri):
    from memlens import Memory
    from memlens.store.postgres import open_store, vectors, with_options
    from memlens.store.reads import Scope

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        for i in range(6):
            mem.add(f"release note {i}: deploys go through the release branch", wing="ops" if i % 2 else "web")
    uri = with_options(pg_uri, hnsw_min_rows=3)  # enough vectors for an index of all of them, and one per wing
    out = run_cli("copy", str(src), uri)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines[0].startswith("copied 6 entries (6 vectors)")
    assert lines[1] == "building the vector indexes of 6 vectors (searches scan exactly until they are built)"
    assert lines[2].startswith("built 3 vector indexes in ")
    store = open_store(uri, create=False)
    try:
        assert store.knn(hash_embedder.embed(["release"])[0], Scope(wings=["ops"]), 3).index == \
            f"pgvector-hnsw(halfvec, ef_search={vectors.EF_SEARCH}, wing indexes 1 of 1)"
    finally:
        store.close()


def test_unreachable_server_and_sqlite_only_commands_are_one_line(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"postgresql://ann:s3cret@127.0.0.1:{port}/memory"
    for args in (["copy", uri, str(tmp_path / "x.db")], ["--store", uri, "stats"], ["search", "--store", uri, "x"]):
        proc = run_cli(*args)
        one_line_error(proc, "connection refused")
        assert "s3cret" not in proc.stderr
    assert not (tmp_path / "x.db").exists()
    for cmd in ("check", "salvage"):
        proc = run_cli("--store", uri, cmd, *([str(tmp_path / "new.db")] if cmd == "salvage" else []))
        one_line_error(proc, "works on a SQLite store file")
        assert "s3cret" not in proc.stderr


def test_the_pools_connection_warnings_are_one_line_each(tmp_path):
    """A pooled store (the app, the MCP server) whose server is down: the pool warns per attempt, one line each."""
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = ("from memlens.store.postgres.connect import Pool\n"
            "try:\n"
            f"    Pool('postgresql://ann:s3cret@127.0.0.1:{port}/memory', 'the store', timeout_s=3)\n"
            "except Exception as exc:\n"
            "    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    warnings = proc.stderr.splitlines()
    assert warnings and all(w.startswith("error connecting in 'memlens': connection failed") for w in warnings), warnings
    assert all("Is the server running" in w for w in warnings)  # libpq's hint, kept on the same line
    assert "cannot connect to the store" in proc.stdout and "s3cret" not in proc.stderr + proc.stdout


@pytest.mark.model  # the server embeds what memory_add stores
def test_mcp_server_on_a_postgres_store(pg_uri, real_embedder):
    async def body(client):
        first = result_data(await client.call_tool("memory_add", {"text": "Agents share memory on PostgreSQL.",
                                                                   "wing": "agents"}))
        again = result_data(await client.call_tool("memory_add", {"text": "Agents share memory on PostgreSQL.",
                                                                   "wing": "agents"}))
        found = result_data(await client.call_tool("memory_search", {"query": "shared agent memory",
                                                                      "active_wing": "agents"}))
        return first, again, found

    first, again, found = run_client(stdio_params(pg_uri), body)
    assert first["status"] == "created" and again["status"] == "already_exists" and again["id"] == first["id"]
    assert first["id"] in json.dumps(found)


def test_copy_shows_a_progress_bar_on_a_terminal(tmp_path, settings, hash_embedder, monkeypatch, capsys):
    import sys

    from memlens import Memory
    from memlens.cli.main import main
    from memlens.store.postgres import copy as pg_copy

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        for i in range(5):
            mem.add(f"note number {i} about the copy", wing="w")
    monkeypatch.setattr(pg_copy, "BATCH", 2)  # several steps of the bar
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["copy", str(src), str(tmp_path / "b.db")]) == 0
    err = capsys.readouterr().err
    steps = [s for s in err.split("\r") if s.startswith("copying entries [")]
    assert [s.split("] ")[1].split()[0] for s in steps] == ["2/5", "4/5", "5/5"]
    assert steps[-1].startswith("copying entries [" + "#" * 30 + "]") and "copied 5 entries (5 vectors)" in err


def test_a_store_of_schema_1_gains_the_answer_log_the_replay_tables_and_the_catalog(pg_uri, settings, hash_embedder):
    from memlens import Memory
    from memlens.assist import log
    from memlens.replay import golden, storage
    from memlens.store.postgres import schema
    from memlens.store.scope import Scope

    from .pg_fixture import back_to_schema_4

    with Memory.open(pg_uri, settings=settings, embedder=hash_embedder) as mem:
        e = mem.add("kept across the upgrade", wing="w")
        with mem.store.connection() as conn:  # as a store written before the answer log existed
            back_to_schema_4(conn)
            conn.execute("DROP TABLE answers, answer_citations, retrieval_log, golden, sources, source_entries, ingest_runs")
            conn.execute("UPDATE store_meta SET value = '1' WHERE key = 'schema_version'")
    with Memory.open(pg_uri, settings=settings, embedder=hash_embedder, create=False) as mem:
        assert mem.store.schema_version() == schema.SCHEMA_VERSION == 6 and mem.get(e.id).text == e.text
        hits = mem.store.lexical("kept upgrade", Scope(), 5)  # the rows stored before gained their tokens
        assert [mem.store.rows([r]).rows[0][2] for r, _ in hits] == [e.id]
        assert golden.listing(mem) == [] and len(storage.logged(mem)) == 0
        assert mem.store.all_sources() == [] and mem.store.ingest_runs(None, 10) == []  # the ingestion catalog too
        bundle = mem.search("upgrade", active_wing="w")
        answer_id, why = log.record(mem, question="q", model="m", complete=True, error=None, retrieval_seq=None,
                                    bundle=bundle, cited=[e.id], invented=[])
        assert why is None and log.answers(mem)[0]["id"] == answer_id
        assert [r["request"]["query"] for r in storage.logged(mem)] == ["upgrade"]  # the replay log is kept again


def test_store_set_in_the_config_file_to_a_uri(tmp_path, pg_uri, settings, hash_embedder):
    from memlens import Memory

    with Memory.open(pg_uri, settings=settings, embedder=hash_embedder) as mem:
        mem.add("named by the config file", wing="cfg")
    config = tmp_path / "config.toml"
    config.write_text(f'store = "{pg_uri}"\n', encoding="utf-8")
    stats = run_cli("stats", "--json", env={"MEMLENS_CONFIG": str(config)})  # no --store, no MEMLENS_STORE
    assert stats.returncode == 0, stats.stderr
    d = json.loads(stats.stdout)
    assert d["entries"] == 1 and d["per_wing"] == {"cfg": 1} and d["store"].startswith("postgresql://")


def test_a_command_that_lost_its_connection_says_to_run_it_again(tmp_path, settings, hash_embedder, pg_uri, monkeypatch,
                                                                  capfd):
    """A CLI command has no next call: its lost-connection message says nothing half-written is kept and to run it
    again; a long-lived process (the app, the MCP server, any library user) keeps 'the next call reconnects'."""
    from memlens import Memory
    from memlens.cli.main import main
    from memlens.errors import StoreError
    from memlens.store.postgres import open_store
    from memlens.store.postgres.store import PgStore

    with Memory.open(pg_uri, settings=settings, embedder=hash_embedder) as mem:
        mem.add("one entry", wing="w")
    real_count = PgStore.count
    lost: list[bool] = []

    def count_after_losing_the_connection(self):
        if not lost:
            lost.append(True)
            with self.connection() as conn:  # as a server restarting under the command
                conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return real_count(self)

    monkeypatch.setattr(PgStore, "count", count_after_losing_the_connection)
    capfd.readouterr()
    assert main(["--store", pg_uri, "stats"]) == 2
    err = capfd.readouterr().err
    assert lost and err.count("\n") == 1 and err.startswith("memlens: error: lost the connection to postgresql://"), err
    assert "next call" not in err and err.endswith("nothing half-written is kept: run the command again\n"), err

    lost.clear()  # the same process, no longer running a command: a library user's store reconnects on its next call
    store = open_store(pg_uri)
    try:
        with pytest.raises(StoreError, match="; the next call reconnects$"):
            store.count()
        assert real_count(store) == 1
    finally:
        store.close()


@pytest.mark.parametrize(("argv", "one_shot"), [
    (["stats"], True), (["copy", "a", "b"], True), (["index", "ws", "--wing", "w"], True),
    (["mcp"], False), ([], False), (["index", "ws", "--wing", "w", "--watch"], False),
])
def test_only_commands_that_run_once_are_one_shot(argv, one_shot):
    from memlens.cli.args import parse
    from memlens.cli.main import build_parser, runs_once

    assert runs_once(parse(build_parser(), argv)) is one_shot


def test_a_wrong_port_on_a_socket_uri_is_named_in_the_error(pg_server, pg_uri, capfd):
    """A unix-socket URI with a port nothing listens on: the error shows the port and the socket file tried (the
    port picks the file), never the password."""
    from memlens.cli.main import main
    from memlens.store.postgres.connect import label

    host = pg_uri.split("host=")[1].split("&")[0]
    dbname = pg_uri.split("/")[3].split("?")[0]
    for uri in (f"postgresql://postgres:s3cret@:5433/{dbname}?host={host}",
                f"postgresql://postgres:s3cret@/{dbname}?host={host}&port=5433"):
        assert label(uri) == f"postgresql://postgres@/{dbname}?host={host}&port=5433"
        capfd.readouterr()
        assert main(["--store", uri, "stats"]) == 2
        err = capfd.readouterr().err
        assert err.count("\n") == 1 and "port=5433" in err and f"{host}/.s.PGSQL.5433" in err, err
        assert "s3cret" not in err
    assert label(f"postgresql://postgres:s3cret@/{dbname}?host={host}") == f"postgresql://postgres@/{dbname}?host={host}"
