"""``memlens mcp --transport http`` serves a request only when its Host and Origin name this server, whatever
``--host`` is (127.0.0.2, 127.1, …): a page using DNS rebinding gets 421/403 and opens no session."""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from memlens.mcp.listen import exposure_warning, host_patterns, origin_patterns
from tests.conftest import MEMLENS, run_cli
from tests.mcp_helpers import LineReader, http_server, result_data, run_client, server_env, stop_server

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}}}


def test_the_names_served_and_the_warning():
    assert host_patterns("127.1", "127.0.0.1") == [
        "127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*", "127.1", "127.1:*"]
    wild = host_patterns("0.0.0.0", "0.0.0.0", ["mem.example.org", "10.0.0.5:8765", "[fd00::5]"])
    assert "0.0.0.0" not in wild and "0.0.0.0:*" not in wild  # a wildcard address is no name a client uses
    assert wild[-5:] == ["mem.example.org", "mem.example.org:*", "10.0.0.5:8765", "[fd00::5]", "[fd00::5]:*"]
    assert "http://127.0.0.1:*" in origin_patterns(wild) and "http://mem.example.org:*" in origin_patterns(wild)
    assert "https://mem.example.org" in origin_patterns(wild)  # the same name behind a TLS proxy
    for loopback in ("127.0.0.2", "127.0.0.1", "::1"):
        assert exposure_warning(loopback, loopback) is None  # 127.0.0.0/8 is loopback: no warning
    assert "every interface, reachable from other machines" in exposure_warning("0.0.0.0", "0.0.0.0")
    assert "listening on 192.0.2.7, reachable from other machines" in exposure_warning("192.0.2.7", "192.0.2.7")


def test_a_bad_allowed_host_setting_is_one_line(tmp_path):
    out = run_cli("--store", str(tmp_path / "s.db"), "mcp", "--transport", "http", "--port", "0",
                  env={"MEMLENS_MCP__ALLOWED_HOSTS": '["evil example"]'}, timeout=60)
    assert out.returncode == 2 and "mcp.allowed_hosts" in out.stderr and len(out.stderr.splitlines()) == 1


@contextmanager
def serving(store, host: str, **env: str) -> Iterator[tuple[int, LineReader]]:
    proc = subprocess.Popen([MEMLENS, "--store", str(store), "mcp", "--transport", "http", "--host", host, "--port", "0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=server_env(**env))
    err = LineReader(proc.stderr)
    LineReader(proc.stdout)
    try:
        line = err.wait_for(b"serving http://").decode()
        yield int(line.split("serving http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]), err
    finally:
        stop_server(proc)


def post(connect_to: str, port: int, host_header: str, origin: str | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection(connect_to, port, timeout=30)
    headers = {"Host": host_header, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if origin:
        headers["Origin"] = origin
    try:
        conn.request("POST", "/mcp", body=json.dumps(INIT), headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.getheader("mcp-session-id") or ""
    finally:
        conn.close()


@pytest.mark.parametrize("bind,connect_to", [("127.0.0.2", "127.0.0.2"), ("127.1", "127.0.0.1")])
def test_host_and_origin_are_checked_whatever_the_bind_address(tmp_path, bind, connect_to):
    store = tmp_path / "s.db"
    with serving(store, bind, MEMLENS_MCP__ALLOWED_HOSTS='["memory.lan"]') as (port, err):
        rebinding = post(connect_to, port, "evil.example", "http://evil.example")
        evil_origin = post(connect_to, port, f"{bind}:{port}", "http://evil.example")
        evil_host = post(connect_to, port, f"evil.example:{port}")
        same = post(connect_to, port, f"{bind}:{port}", f"http://{bind}:{port}")
        # what an allowed name followed by anything used to pass as (the SDK matches ``name:*`` by its start)
        odd_host = post(connect_to, port, f"{bind}:evil")
        odd_origin = post(connect_to, port, f"{bind}:{port}", f"http://{bind}:{port}@evil.example")
        named = post(connect_to, port, f"memory.lan:{port}")
        loopback = post(connect_to, port, f"localhost:{port}", f"http://localhost:{port}")

        async def add(client):
            return result_data(await client.call_tool("memory_add", {"text": "Reached by its own name.", "wing": "w"}))

        added = run_client(f"http://{bind}:{port}/mcp", add)
        stderr = b"".join(err.seen).decode()
    assert rebinding[0] == 421 and not rebinding[1]  # no session opens
    assert evil_origin[0] == 403 and not evil_origin[1]
    assert evil_host[0] == 421
    assert odd_host[0] == 421 and odd_origin[0] == 403 and not odd_host[1] and not odd_origin[1]
    assert same[0] == 200 and same[1] and named[0] == 200 and loopback[0] == 200
    assert added["status"] == "created"
    assert "reachable from other machines" not in stderr  # 127.x is loopback


@pytest.mark.slow
def test_stopping_while_a_client_holds_its_event_stream_logs_no_error(tmp_path):
    """SIGTERM with a client's GET event stream open ends that stream unanswered: the server says nothing of it
    (uvicorn called it 'ERROR: ASGI callable returned without completing response')."""
    import time

    seen: list[bytes] = []
    with http_server(tmp_path / "s.db", stderr=seen) as url:
        port = int(url.split(":")[2].split("/")[0])
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/mcp", json.dumps(INIT), headers)
        opened = conn.getresponse()
        opened.read()
        session = {"mcp-session-id": opened.getheader("mcp-session-id"), "mcp-protocol-version": "2025-06-18"}
        conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                     {**headers, **session})
        conn.getresponse().read()
        stream = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        stream.request("GET", "/mcp", headers={"Accept": "text/event-stream", **session})
        assert stream.getresponse().status == 200  # held open by the server until it stops
        time.sleep(0.5)
    assert b"memlens mcp: serving" in b"".join(seen) and b"ERROR" not in b"".join(seen), b"".join(seen)


def test_an_initialize_without_params_names_what_is_missing(tmp_path):
    """It was answered "Invalid request parameters" with empty data."""
    with http_server(tmp_path / "s.db") as url:
        port = int(url.split(":")[2].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize"}),
                     {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        body = conn.getresponse().read().decode()
    answer = json.loads(next(line for line in body.splitlines() if line.startswith("data: "))[6:])
    assert answer["id"] == 1 and answer["error"]["code"] == -32602
    assert answer["error"]["message"] == "Invalid request parameters: initialize: 'params': Field required"


def test_half_a_surrogate_pair_is_named_as_the_parse_error(tmp_path):
    """The SDK's parser called it "unexpected end of hex escape" (the stdio server names it right)."""
    body = (b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", '
            b'"capabilities": {}, "clientInfo": {"name": "\\ud800", "version": "1"}}}')
    with http_server(tmp_path / "s.db") as url:
        port = int(url.split(":")[2].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/mcp", body, {"Content-Type": "application/json",
                                            "Accept": "application/json, text/event-stream"})
        resp = conn.getresponse()
        status, answer = resp.status, json.loads(resp.read())
    assert status == 400 and answer["error"]["code"] == -32700
    assert answer["error"]["message"] == "Parse error: a \\u escape in the body is half of a surrogate pair, not a character"


def test_the_form_check_refuses_only_what_is_not_a_host_or_an_origin():
    """Well formed (served or not by the names allowed, which the SDK decides next): an IPv6 literal with a zone, an
    empty port, an Origin with a trailing slash. Not: a port that is not a number, a user name, a path."""
    from memlens.mcp.auth import malformed

    for host in (b"localhost", b"localhost:8765", b"localhost:", b"[::1]:80", b"[fe80::1%25br-lan]:80", b"memory.lan"):
        assert malformed([(b"host", host)]) is None, host
    for origin in (b"http://localhost:8765", b"https://memory.lan", b"http://[::1]:3", b"http://localhost:8765/"):
        assert malformed([(b"origin", origin)]) is None, origin
    for host in (b"localhost:evil", b"localhost:1@evil.example", b"a b", b"[::1]x", b"localhost:123456"):
        assert malformed([(b"host", host)])[0] == 421, host
    for origin in (b"http://localhost:1@evil.example", b"null", b"http://localhost/path", b"http://localhost:x"):
        assert malformed([(b"origin", origin)])[0] == 403, origin
