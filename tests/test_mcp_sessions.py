"""How many HTTP sessions one bearer token holds open (``[mcp] max_sessions_per_token``) and how long an idle one
lives (``[mcp] session_idle_seconds``): servers on 127.0.0.1 only, driven by plain HTTP requests and the SDK's
client."""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import pytest

from memlens.mcp import tokens
from tests.conftest import run_cli
from tests.mcp_helpers import LineReader, http_server, result_data, run_client, server_env, stop_server
from tests.test_mcp_auth import INIT, post

LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
V = "2025-06-18"


def token_env(tmp_path, **settings: str) -> tuple[dict[str, str], dict[str, str]]:
    """Three tokens in a tokens file, and the server's settings."""
    path = tmp_path / "tokens"
    named = {name: tokens.add(path, name) for name in ("alice", "bob", "carol")}
    return named, {"MEMLENS_MCP__TOKENS_FILE": str(path), **{f"MEMLENS_MCP__{k.upper()}": v for k, v in settings.items()}}


def opened(url: str, token: str) -> str:
    r = post(url, INIT, token)
    assert r.status_code == 200, r.text
    session = r.headers["mcp-session-id"]
    assert post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, token, mcp_session_id=session,
                mcp_protocol_version=V).status_code == 202
    return session


def listed(url: str, token: str, session: str) -> int:
    return post(url, LISTING, token, mcp_session_id=session, mcp_protocol_version=V).status_code


@pytest.mark.slow
def test_a_token_that_never_ends_its_sessions_locks_no_one_out(tmp_path):
    """A client holding a valid token that opened sessions and never ended them filled [mcp] max_sessions: every
    client then got 503 for 30 minutes. Now its least recently used session is closed instead."""
    named, env = token_env(tmp_path, max_sessions="4", max_sessions_per_token="2")
    alice, bob, carol = named["alice"], named["bob"], named["carol"]
    stderr: list[bytes] = []
    with http_server(tmp_path / "s.db", env=env, stderr=stderr) as url:
        first, second = opened(url, alice), opened(url, alice)
        assert listed(url, alice, first) == 200  # the second is now alice's least recently used session
        leaked = [opened(url, alice) for _ in range(6)]  # never ended: each closes alice's oldest unused one
        assert listed(url, alice, second) == 404
        assert listed(url, alice, first) == 404
        assert [listed(url, alice, s) for s in leaked] == [404] * 4 + [200, 200]
        # the others are not locked out: 2 sessions of alice, 2 of bob
        bob_sessions = [opened(url, bob), opened(url, bob)]
        assert [listed(url, bob, s) for s in bob_sessions] == [200, 200]
        # the server's bound still holds: 4 open
        r = post(url, INIT, carol)
        assert r.status_code == 503 and r.json()["error"]["message"] == "Too many open sessions"

        # alice's next client (the SDK's) gets a session too: her least recently used one is closed for it
        async def wings(client):
            return result_data(await client.call_tool("memory_wings", {}))

        assert run_client(url, wings, token=alice)["entries"] == 0
    printed = b"".join(stderr).decode()
    assert printed.count("memlens mcp: the bearer token 'alice' opened more than 2 sessions: its least recently used "
                         "ones are closed ([mcp] max_sessions_per_token)") == 1
    assert "Traceback" not in printed


@pytest.mark.slow
def test_an_opening_the_server_refuses_does_not_lift_the_bound(tmp_path):
    """An initialize with a foreign Host (421) made room by forgetting the token's oldest session without ending it
    (the ending DELETE carried the same foreign Host): repeated, a client holding a token could fill the server
    again. The session is now ended with the Host it was opened with; a request to another path closes nothing."""
    named, env = token_env(tmp_path, max_sessions="2", max_sessions_per_token="1")
    alice = named["alice"]
    with http_server(tmp_path / "s.db", env=env) as url:
        first = opened(url, alice)
        assert post(url + "/", INIT, alice).status_code == 307  # (a redirect, no session): nothing closed for it
        assert listed(url, alice, first) == 200
        assert post(url, INIT, alice, Host="evil.example").status_code == 421
        second = opened(url, alice)
        assert [listed(url, alice, first), listed(url, alice, second)] == [404, 200]
        assert opened(url, named["bob"])  # one of alice's, one of bob's: the server's bound


# the server, with memory_wings held until the file TEST_MEMLENS_HELD_WINGS exists (at most 10 minutes)
HELD = """
import os, sys, time
import memlens.memory

wing_counts = memlens.memory.Memory.wing_counts
def held(self, *a, **kw):
    os.write(2, b"test: wings held\\n")
    for _ in range(6000):
        if os.path.exists(os.environ["TEST_MEMLENS_HELD_WINGS"]):
            break
        time.sleep(0.1)
    return wing_counts(self, *a, **kw)
memlens.memory.Memory.wing_counts = held
from memlens.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_session_running_a_request_is_not_closed_to_make_room(tmp_path):
    """When every session of the token is running a request, one more is refused with 503 and a one-line error
    naming the setting; once the request is answered, its session makes room."""
    named, env = token_env(tmp_path, max_sessions_per_token="1")
    alice = named["alice"]
    gate = tmp_path / "release"
    proc = subprocess.Popen([sys.executable, "-c", HELD, "--store", str(tmp_path / "s.db"), "mcp", "--transport", "http",
                             "--port", "0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=server_env(TEST_MEMLENS_HELD_WINGS=str(gate), **env))
    err = LineReader(proc.stderr)
    try:
        url = err.wait_for(b"serving http://").decode().split("serving ", 1)[1].split(" ", 1)[0]
        busy = opened(url, alice)
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "memory_wings", "arguments": {}}}
        answered: list = []
        caller = threading.Thread(target=lambda: answered.append(
            post(url, call, alice, mcp_session_id=busy, mcp_protocol_version=V)))
        caller.start()
        err.wait_for(b"test: wings held")
        refused = post(url, INIT, alice)
        gate.touch()
        caller.join(60)
        assert listed(url, alice, busy) == 200  # not closed
        assert refused.status_code == 503 and not refused.headers.get("mcp-session-id")
        assert refused.json()["error"]["message"] == (
            "the bearer token 'alice' has 1 session running a request ([mcp] max_sessions_per_token = 1); "
            "end one (DELETE) or retry when a request is answered")
        assert answered[0].status_code == 200 and '"entries":0' in answered[0].text
        again = opened(url, alice)  # the request answered: the busy session is closed to make room
        assert listed(url, alice, busy) == 404 and listed(url, alice, again) == 200
        assert opened(url, named["bob"])  # another token is not bounded by alice's sessions
    finally:
        gate.touch()
        stop_server(proc)
    assert b"Traceback" not in b"".join(err.seen)


@pytest.mark.slow
def test_a_client_that_ends_its_sessions_is_never_closed_under(tmp_path):
    """Sessions a client ends (DELETE), and sessions of another token, leave room: nothing of alice's is closed."""
    named, env = token_env(tmp_path, max_sessions_per_token="2")
    alice = named["alice"]
    with http_server(tmp_path / "s.db", env=env) as url:
        kept = opened(url, alice)
        parts = urlsplit(url)
        for _ in range(4):
            ended = opened(url, alice)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
            conn.request("DELETE", parts.path, headers={"Authorization": f"Bearer {alice}", "mcp-session-id": ended,
                                                        "mcp-protocol-version": V})
            assert conn.getresponse().status == 200
            conn.close()
            opened(url, named["bob"])
        assert listed(url, alice, kept) == 200


@pytest.mark.slow
def test_a_session_with_its_event_stream_open_is_closed_after_those_without(tmp_path):
    """The least recently used session was closed even when its client held its event stream open (as the SDK's
    client does): a live client lost its session while the sessions another left behind stayed."""
    named, env = token_env(tmp_path, max_sessions_per_token="2")
    alice = named["alice"]
    with http_server(tmp_path / "s.db", env=env) as url:
        live, left = opened(url, alice), opened(url, alice)
        parts = urlsplit(url)
        stream = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        try:
            stream.request("GET", parts.path, headers={"Authorization": f"Bearer {alice}", "mcp-session-id": live,
                                                       "mcp-protocol-version": V, "Accept": "text/event-stream"})
            assert stream.getresponse().status == 200  # the stream stays open: its body is never read
            assert listed(url, alice, left) == 200  # live is now the least recently used
            opened(url, alice)
            assert listed(url, alice, live) == 200
            assert listed(url, alice, left) == 404
        finally:
            stream.close()


@pytest.mark.slow
def test_an_idle_session_is_closed_after_the_configured_time(tmp_path):
    """The idle time was fixed at 30 minutes. (3 s: the initialized notification that follows the initialize
    answer must come within it, on a loaded machine too.)"""
    named, env = token_env(tmp_path, session_idle_seconds="3")
    with http_server(tmp_path / "s.db", env=env) as url:
        session = opened(url, named["alice"])
        deadline = time.monotonic() + 60
        while listed(url, named["alice"], session) == 200 and time.monotonic() < deadline:
            time.sleep(5)  # a request every 5 s: the session idles 5 s between them
        assert listed(url, named["alice"], session) == 404


@pytest.mark.parametrize(("name", "value", "top"), [
    ("MAX_SESSIONS_PER_TOKEN", "0", 100000), ("MAX_SESSIONS_PER_TOKEN", "many", 100000),
    ("SESSION_IDLE_SECONDS", "0", 604800), ("SESSION_IDLE_SECONDS", "inf", 604800)])
def test_a_bad_session_setting_is_one_line(tmp_path, name, value, top):
    out = run_cli("--store", str(tmp_path / "s.db"), "mcp", "--transport", "http", "--port", "0",
                  env={f"MEMLENS_MCP__{name}": value}, timeout=60)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert f"mcp.{name.lower()}" in out.stderr and f"allowed from 1 to {top}" in out.stderr, out.stderr
