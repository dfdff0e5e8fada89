"""Secrets never leave: canary API keys, URL passwords and a database password are set, memlens is run as a user
runs it (against servers on 127.0.0.1 that echo what they were sent), and every byte it printed or wrote is
searched for them: stdout, stderr, --json, the store's files, the rows of a PostgreSQL store."""

from __future__ import annotations

import base64
import shutil
import socket
from pathlib import Path

import pytest

from memlens.errors import StoreError
from tests.conftest import run_cli
from tests.fake_llm import FakeLLM
from tests.web_servers import Site

LLM_KEY = "sk-canary-llm-71c0d2"
URL_PASSWORD = "pw-canary-url-9a3e"
PROVIDER_KEY = "canary-brave-44b7"
OTLP_PASSWORD = "pw-canary-otlp-5d2c"
DB_PASSWORD = "pw-canary-db-0e6f"
CANARIES = (LLM_KEY, URL_PASSWORD, PROVIDER_KEY, OTLP_PASSWORD, DB_PASSWORD,
            base64.b64encode(f"alice:{URL_PASSWORD}".encode()).decode())  # the Basic credentials a client builds


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("uri,shown", [
    (f"postgresql://u:{DB_PASSWORD}%zz@127.0.0.1:1/db", "postgresql://u@127.0.0.1:1/db"),  # a bad percent escape
    (f"postgresql://u:{DB_PASSWORD}@[::1/db", "postgresql://u@[::1/db"),  # an unclosed bracket (was a traceback)
    (f"postgresql://u@127.0.0.1:1/db?password={DB_PASSWORD}%zz", "postgresql://u@127.0.0.1:1/db"),
])
def test_a_malformed_database_uri_is_one_line_without_its_password(uri, shown):
    from memlens.store.postgres import open_store

    with pytest.raises(StoreError) as info:
        open_store(uri)
    msg = str(info.value)
    assert DB_PASSWORD not in msg and "\n" not in msg and shown in msg, msg
    out = run_cli("--store", uri, "stats", timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("memlens: error: ")
    assert DB_PASSWORD not in out.stderr and "Traceback" not in out.stderr


def test_a_refused_setting_never_repeats_a_key_or_a_urls_password():
    env = {"MEMLENS_WEB__PROVIDERS__BRAVE__BASE_URL": f"ftp://alice:{URL_PASSWORD}@127.0.0.1/",
           "MEMLENS_WEB__PROVIDERS__BRAVE__API_KEY": PROVIDER_KEY * 300}  # over its length bound
    out = run_cli("web", "http://127.0.0.1:1/", env=env, timeout=60)
    assert out.returncode == 2 and "configuration: web.providers.brave." in out.stderr
    assert URL_PASSWORD not in out.stderr and PROVIDER_KEY not in out.stderr


def enable_password(pg_server, role: str, password: str) -> str:
    """A role that must give ``password`` (scram) on the unix socket; returns pg_hba.conf's original text."""
    hba = Path(pg_server.server.pgdata) / "pg_hba.conf"
    original = hba.read_text()
    with pg_server.admin() as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")
    hba.write_text(f"local all {role} scram-sha-256\n" + original)
    with pg_server.admin() as conn:
        conn.execute("SELECT pg_reload_conf()")
    return original


@pytest.mark.model
def test_canary_secrets_appear_in_nothing_memlens_prints_or_stores(real_mem, tmp_path, pg_server, pg_uri):
    import psycopg

    real_mem.add("Callbacks must not block the executor.", wing="w", type="invariant")
    real_mem.add("Long work runs in its own callback group.", wing="w")
    store = str(real_mem.path)
    real_mem.close()
    printed: list[str] = []

    def run(*args: str, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0, 1, 2)) -> None:
        out = run_cli(*args, env=env, timeout=300)
        assert out.returncode in ok, (args, out.returncode, out.stderr)
        assert "Traceback" not in out.stderr, out.stderr
        printed.extend([out.stdout, out.stderr])

    question = ("ask", "do callbacks block", "--active-wing", "w")
    for echo_in in ("answer", "status", "event"):  # the server repeats the Authorization header back
        with FakeLLM("echo", echo_in=echo_in) as fake:
            keyed = {"MEMLENS_LLM__BASE_URL": fake.base_url, "MEMLENS_LLM__MODEL": "m", "MEMLENS_LLM__API_KEY": LLM_KEY}
            userinfo = {"MEMLENS_LLM__BASE_URL": fake.base_url.replace("http://", f"http://alice:{URL_PASSWORD}@"),
                        "MEMLENS_LLM__MODEL": "m"}
            for env in (keyed, userinfo):
                run("--store", store, *question, env=env)
                run("--store", store, *question, "--json", env=env)
            assert {r["headers"]["Authorization"].split()[0] for r in fake.requests} == {"Bearer", "Basic"}
    unreachable = {"MEMLENS_LLM__BASE_URL": f"http://alice:{URL_PASSWORD}@127.0.0.1:{closed_port()}/v1",
                   "MEMLENS_LLM__MODEL": "m", "MEMLENS_LLM__API_KEY": LLM_KEY}
    run("--store", store, *question, env=unreachable, ok=(1,))

    site = Site("127.0.0.1")  # a search provider that refuses the key
    try:
        provider = {"MEMLENS_WEB__PROVIDER": "brave", "MEMLENS_WEB__PROVIDERS__BRAVE__API_KEY": PROVIDER_KEY,
                    "MEMLENS_WEB__PROVIDERS__BRAVE__BASE_URL": site.base.replace("http://", f"http://alice:{URL_PASSWORD}@"),
                    "MEMLENS_WEB__ALLOW_HOSTS": '["127.0.0.1"]'}
        run("web", "--search", "lighthouse", env=provider, ok=(1,))
        run("web", "--search", "lighthouse", "--json", env=provider, ok=(1,))
    finally:
        site.stop()
    otlp = {"MEMLENS_EXPORT__OTLP_ENDPOINT": f"http://otel:{OTLP_PASSWORD}@127.0.0.1:{closed_port()}"}
    run("--store", store, "search", "callbacks", "--wing", "w", "--format", "openinference", env=otlp, ok=(1,))

    # a database that asks for a password: copy into it, read and answer from it, and a wrong password
    params = psycopg.conninfo.conninfo_to_dict(pg_uri)
    original = enable_password(pg_server, "canary_user", DB_PASSWORD)
    try:
        db = f"postgresql://canary_user:{DB_PASSWORD}@/{params['dbname']}?host={params['host']}"
        run("copy", store, db, ok=(0,))
        run("--store", db, "stats", ok=(0,))
        run("--store", db, "search", "callbacks", "--wing", "w", "--json", ok=(0,))
        with FakeLLM("echo", echo_in="status") as fake:
            run("--store", db, *question, env={"MEMLENS_LLM__BASE_URL": fake.base_url, "MEMLENS_LLM__MODEL": "m",
                                               "MEMLENS_LLM__API_KEY": LLM_KEY}, ok=(1,))
        run("--store", db.replace(DB_PASSWORD, DB_PASSWORD[::-1]), "stats", ok=(2,))
        with psycopg.connect(pg_uri) as conn:  # every row of every table, as text
            tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
            rows = [str(conn.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables]
        assert "answers" in tables and any("HTTP 401" in r for r in rows)  # the refused answer was logged
    finally:
        (Path(pg_server.server.pgdata) / "pg_hba.conf").write_text(original)
        with pg_server.admin() as conn:
            conn.execute("SELECT pg_reload_conf()")

    files = {p.name: p.read_bytes() for p in Path(store).parent.iterdir() if p.is_file()}
    assert any(b"HTTP 401" in data for data in files.values())  # the answer log holds the refused answers
    for canary in CANARIES:
        for text in printed:
            assert canary not in text, f"{canary} printed: {text[:2000]}"
        for name, data in files.items():
            assert canary.encode() not in data, f"{canary} stored in {name}"
        for row in rows:
            assert canary not in row, f"{canary} stored in PostgreSQL: {row[:500]}"
    assert any("[redacted]" in text for text in printed)  # the echoes did arrive, masked
    shutil.rmtree(Path(store).parent, ignore_errors=True)
