"""The shared HTTP MCP server with bearer tokens: wrong, missing and read-only tokens, sessions bound to their token,
revocation, foreign Host/Origin, body and session bounds; servers on 127.0.0.1 only, driven by the SDK's
streamable HTTP client and by plain HTTP requests."""

from __future__ import annotations

import http.client
import json
import os
import re
import stat
from urllib.parse import urlsplit

import pytest

from memlens.mcp import tokens
from memlens.mcp.tools import READ_TOOLS, WRITE_TOOLS
from tests.conftest import run_cli
from tests.mcp_helpers import error_text, http_server, result_data, run_client

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def add_token(path, name, *flags):
    out = run_cli("mcp", "token", "add", name, "--file", str(path), *flags, timeout=60)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.startswith("memlens_") and len(out.stdout.splitlines()) == 1
    assert token not in out.stderr and token not in path.read_text()  # printed once, stored nowhere
    return token


class Reply:
    def __init__(self, status, headers, body):
        self.status_code, self.headers, self.text = status, headers, body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.text)


def post(url, body, token=None, scheme="Bearer", **headers):
    """One plain HTTP POST of a JSON-RPC message (no SDK)."""
    parts = urlsplit(url)
    h = {**HEADERS, **{k.replace("_", "-"): v for k, v in headers.items()}}
    if token is not None:
        h["Authorization"] = f"{scheme} {token}"
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("POST", parts.path, body=json.dumps(body), headers=h)
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def test_token_file_entries_and_checks(tmp_path):
    path = tmp_path / "cfg" / "tokens"
    alice = tokens.add(path, "alice")
    reader = tokens.add(path, "reader", read_only=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert alice not in text and reader not in text and tokens.digest(alice).hex() in text
    loaded = tokens.load(path, [])
    assert loaded.verify(alice).name == "alice" and not loaded.verify(alice).read_only
    assert loaded.verify(reader).read_only
    assert loaded.verify("memlens_guess") is None and loaded.verify("") is None
    with pytest.raises(tokens.TokenError) as exc:
        tokens.add(path, "alice")
    assert str(exc.value) == (f"{path} already has a token named 'alice': remove it first (`memlens mcp token remove "
                              f"alice --file {path}`) or choose another name")  # the file it is in, not the default one
    spaced = tmp_path / "my tokens"
    tokens.add(spaced, "alice")
    with pytest.raises(tokens.TokenError, match=re.escape(f"remove alice --file '{spaced}'`)")):
        tokens.add(spaced, "alice")
    with pytest.raises(tokens.TokenError, match="must be 1-64 letters"):
        tokens.add(path, "bad name")

    # a file others could read or write is refused, naming the fix
    path.chmod(0o640)
    with pytest.raises(tokens.TokenError, match=r"readable or writable by others \(mode 640\): run chmod 600"):
        tokens.load(path, [])
    path.chmod(0o600)

    # a line that is not an entry (a token pasted in by mistake) is named by its number, never repeated
    with path.open("a") as f:
        f.write(f"{alice}\n")
    with pytest.raises(tokens.TokenError) as err:
        tokens.load(path, [])
    assert "line 4 is not 'NAME sha256:DIGEST [read-only]'" in str(err.value) and alice not in str(err.value)

    # the environment's entries join the file's; one name in both is an error
    path.write_text(f"alice sha256:{tokens.digest(alice).hex()}\n")
    both = tokens.load(path, [f"ci sha256:{tokens.digest('memlens_ci').hex()} read-only"])
    assert len(both) == 2 and both.verify("memlens_ci").read_only
    with pytest.raises(tokens.TokenError, match="'alice' is both in"):
        tokens.load(path, [f"alice sha256:{tokens.digest('x').hex()}"])

    # removal: the entry goes, the rest and the comments stay, the file stays owner-only
    tokens.remove(path, "alice")
    with pytest.raises(tokens.TokenError, match="holds no token"):
        tokens.load(path, [])
    with pytest.raises(tokens.TokenError, match="has no token named 'alice'"):
        tokens.remove(path, "alice")


def test_a_configured_token_file_must_exist_and_the_default_one_is_optional(tmp_path, monkeypatch):
    with pytest.raises(tokens.TokenError, match="cannot read token file"):
        tokens.load(tmp_path / "missing", [])
    monkeypatch.setenv("MEMLENS_CONFIG", str(tmp_path / "config.toml"))
    assert tokens.default_file() == tmp_path / "mcp-tokens"
    assert len(tokens.load(None, [])) == 0


def test_token_cli_lists_names_never_tokens(tmp_path):
    path = tmp_path / "tokens"
    alice = add_token(path, "alice")
    add_token(path, "ci-bot", "--read-only")
    out = run_cli("mcp", "token", "list", "--file", str(path), timeout=60)
    assert out.returncode == 0 and out.stdout == "alice\tread-write\nci-bot\tread-only\n" and alice not in out.stdout
    out = run_cli("mcp", "token", "remove", "alice", "--file", str(path), timeout=60)
    assert out.returncode == 0 and "removed token 'alice'" in out.stderr
    path.chmod(0o644)
    out = run_cli("mcp", "token", "list", "--file", str(path), timeout=60)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "chmod 600" in out.stderr


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_an_address_other_machines_reach_needs_tokens(tmp_path, host):
    """Refused before anything binds: no socket is opened on the address."""
    out = run_cli("--store", str(tmp_path / "s.db"), "mcp", "--transport", "http", "--host", host, "--port", "0",
                  timeout=60)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "refusing to listen on" in out.stderr and "without authentication" in out.stderr
    assert not (tmp_path / "s.db").exists()


def test_a_bad_token_setting_is_one_line_without_the_value(tmp_path):
    out = run_cli("--store", str(tmp_path / "s.db"), "mcp", "--transport", "http", "--port", "0",
                  env={"MEMLENS_MCP__TOKENS": '["memlens_secretvalue"]'}, timeout=60)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert "mcp.tokens" in out.stderr and "secretvalue" not in out.stderr


@pytest.fixture
def token_server(tmp_path):
    """A server on 127.0.0.1 with a read-write token from a file and a read-only one from the environment."""
    path = tmp_path / "tokens"
    alice = add_token(path, "alice")
    bob = add_token(path, "bob")
    reader = "memlens_reader-" + os.urandom(8).hex()
    env = {"MEMLENS_MCP__TOKENS_FILE": str(path),
           "MEMLENS_MCP__TOKENS": json.dumps([f"reader sha256:{tokens.digest(reader).hex()} read-only"]),
           "MEMLENS_MCP__MAX_BODY_BYTES": "65536", "MEMLENS_MCP__MAX_SESSIONS": "4",
           "MEMLENS_MCP__MAX_SESSIONS_PER_TOKEN": "3",
           "MEMLENS_MCP__ALLOWED_HOSTS": '["memory.lan"]'}
    stderr: list[bytes] = []
    store = tmp_path / "s.db"
    with http_server(store, env=env, stderr=stderr) as url:
        yield {"url": url, "store": store, "file": path, "alice": alice, "bob": bob, "reader": reader,
               "stderr": stderr}
    printed = b"".join(stderr).decode()
    assert "3 bearer tokens from" in printed
    for secret in (alice, bob, reader):
        assert secret not in printed  # never logged


@pytest.mark.slow
def test_tokens_name_the_client_and_read_only_writes_nothing(token_server, settings, real_embedder):
    url = token_server["url"]

    # missing and wrong tokens: 401 with a JSON-RPC error body, and no session
    for token, why in ((None, "needs a bearer token"), ("memlens_wrong", "not valid"), ("", "needs a bearer token")):
        r = post(url, INIT, token)
        assert r.status_code == 401 and not r.headers.get("mcp-session-id"), r.text
        assert r.headers["www-authenticate"].startswith("Bearer") and why in r.json()["error"]["message"]
    assert post(url, INIT, token_server["alice"], scheme="Basic").status_code == 401  # only the Bearer scheme

    async def write(client):
        added = result_data(await client.call_tool("memory_add", {"text": "Alice's rule: tokens live in a file.",
                                                                  "wing": "team"}))
        done = result_data(await client.call_tool("task_complete", {"task_id": "t-1", "intent": "set up the team"}))
        return added, done

    async def tools(client):
        return {t.name for t in (await client.list_tools()).tools}

    assert run_client(url, tools, token=token_server["alice"]) == {*READ_TOOLS, *WRITE_TOOLS}
    added, _ = run_client(url, write, name="claude-code", token=token_server["alice"])
    assert added["status"] == "created"

    async def read_then_write(client):
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == set(READ_TOOLS)  # a read-only token is offered the read tools only
        got = result_data(await client.call_tool("memory_get", {"id": added["id"]}))
        wings = result_data(await client.call_tool("memory_wings", {}))
        refused = [error_text(await client.call_tool(name, args)) for name, args in (
            ("memory_add", {"text": "The reader writes this.", "wing": "team"}),
            ("memory_delete", {"id": added["id"]}),
            ("memory_set_status", {"id": added["id"], "status": "deprecated", "dry_run": True}),
            ("task_block", {"task_id": "t-2", "reason": "no"}))]
        return got, wings, refused

    got, wings, refused = run_client(url, read_then_write, name="cursor", token=token_server["reader"])
    assert got["id"] == added["id"] and wings["entries"] == 1
    for message, tool in zip(refused, ("memory_add", "memory_delete", "memory_set_status", "task_block")):
        assert message.startswith(f"{tool}: the bearer token 'reader' is read-only") and "\n" not in message

    from memlens import Memory

    with Memory.open(token_server["store"], settings=settings, embedder=real_embedder) as mem:
        assert [e.id for e in mem.entries()] == [added["id"]]  # the reader wrote nothing
        assert mem.get(added["id"]).status.value == got["status"] != "deprecated"  # as the reader found it
        assert [t.task_id for t in mem.tasks.window().tasks] == ["t-1"]
        client = mem.audit(added["id"])[0]["detail"]["client"]
        assert client == {"name": "alice", "via": "mcp token", "agent": "claude-code 1.0"}


@pytest.mark.slow
def test_sessions_hosts_bounds_and_revocation(token_server):
    url, alice, bob = token_server["url"], token_server["alice"], token_server["bob"]
    port = url.split(":")[2].split("/")[0]

    opened = post(url, INIT, alice)
    session = opened.headers["mcp-session-id"]
    assert opened.status_code == 200 and session
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    own = post(url, listing, alice, mcp_session_id=session, mcp_protocol_version="2025-06-18")
    assert own.status_code == 200
    # a session belongs to the token that opened it: another valid token gets "not found"
    stolen = post(url, listing, bob, mcp_session_id=session, mcp_protocol_version="2025-06-18")
    assert stolen.status_code == 404

    # a valid token does not make a foreign Host or Origin acceptable
    assert post(url, INIT, alice, Host="evil.example").status_code == 421
    assert post(url, INIT, alice, Origin="http://evil.example").status_code == 403
    assert post(url, INIT, alice, Host=f"memory.lan:{port}").status_code == 200
    assert post(url, INIT, alice, Host=f"Memory.LAN.:{port}").status_code == 200  # any case, fully qualified

    # a body over [mcp] max_body_bytes (64 KiB here): 413 with a JSON-RPC error, before any session
    big = {**INIT, "params": {**INIT["params"], "padding": "x" * 70_000}}
    r = post(url, big, alice)
    assert r.status_code == 413 and "error" in r.json() and not r.headers.get("mcp-session-id")

    # JSON that is no JSON-RPC message: 400 with a one-line error, before any session
    for body in ([INIT], 1, {"jsonrpc": "2.0"}, {"id": 1, "method": "initialize"}, {**INIT, "params": "x"},
                 {**INIT, "params": [1]}, {**INIT, "id": None}, {**INIT, "id": True}, {**INIT, "id": 1.5}):
        r = post(url, body, alice)
        message = r.json()["error"]["message"]
        assert r.status_code == 400 and message.startswith("Invalid Request: ") and "\n" not in message, message
        assert not r.headers.get("mcp-session-id")

    # [mcp] max_sessions (4 here; alice opened 3 above, her own bound, tests/test_mcp_sessions.py): bob's session is
    # the fourth, the fifth gets 503, open ones keep working
    assert post(url, INIT, bob).status_code == 200
    r = post(url, INIT, token_server["reader"])
    assert r.status_code == 503 and r.json()["error"]["message"] == "Too many open sessions"
    assert post(url, listing, alice, mcp_session_id=session, mcp_protocol_version="2025-06-18").status_code == 200

    # revoking a token takes effect on the next request, without a restart
    out = run_cli("mcp", "token", "remove", "bob", "--file", str(token_server["file"]), timeout=60)
    assert out.returncode == 0, out.stderr
    assert post(url, INIT, bob).status_code == 401
    assert post(url, listing, alice, mcp_session_id=session, mcp_protocol_version="2025-06-18").status_code == 200


@pytest.mark.parametrize("message", [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": "s-1", "result": {}},
    {"jsonrpc": "2.0", "id": 7, "error": {"code": -1, "message": "declined"}},
])
def test_every_kind_of_json_rpc_message_passes_the_front(message):
    from memlens.mcp.auth import not_a_message

    assert not_a_message(json.dumps(message).encode()) is None
    assert not_a_message(b"not json") is None  # the SDK's own parse error answers it (one line)


@pytest.mark.parametrize(("message", "says"), [
    ({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": "x"}, "params is a JSON object, not a JSON str"),
    ({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": [1]}, "params is a JSON object, not a JSON list"),
    ({"jsonrpc": "2.0", "id": None, "method": "tools/list"}, "a request's id is a string or an integer"),
    ({"jsonrpc": "2.0", "id": True, "method": "tools/list"}, "a request's id is a string or an integer"),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}, "a request's id is a string or an integer"),
])
def test_params_that_are_no_object_and_ids_of_no_kind_are_one_line(message, says):
    """The SDK answered params that are no object with its union's every validation error (13 lines) and dropped a
    request whose id is null, a boolean or a fraction (202, never answered): one line each, as the stdio server says."""
    from memlens.mcp.auth import not_a_message

    problem = not_a_message(json.dumps(message).encode())
    assert problem is not None and problem.startswith("Invalid Request: ") and says in problem and "\n" not in problem


def test_a_host_header_is_compared_in_lower_case_without_the_trailing_dot():
    from memlens.mcp.auth import normal_host

    assert normal_host(b"Memory.LAN.:8080") == b"memory.lan:8080"
    assert normal_host(b"MEMORY.internal.") == b"memory.internal"
    assert normal_host(b"[::1]:8080") == b"[::1]:8080" and normal_host(b"127.0.0.1:80") == b"127.0.0.1:80"


def test_a_token_file_opened_to_others_while_serving_is_refused_until_fixed(tmp_path, capsys):
    from memlens.mcp import tokens

    path = tmp_path / "tokens"
    secret = tokens.add(path, "alice")
    served = tokens.load(path, [])
    assert served.verify(secret).name == "alice"
    path.chmod(0o644)  # only the mode changes: same content, same mtime
    assert served.verify(secret) is None
    assert "readable or writable by others" in capsys.readouterr().err
    path.chmod(0o600)
    assert served.verify(secret).name == "alice"
