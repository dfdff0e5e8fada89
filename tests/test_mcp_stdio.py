"""The stdio wire without the SDK: newline-delimited JSON-RPC from a subprocess, stdout pure JSON-RPC."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys

import pytest

from .conftest import MEMLENS, logged_retrievals
from .mcp_helpers import RawClient, server_env

# the same server, with prints, a C-level write to fd 1, a warning and a log line from "dependencies"
# at start-up and at model load, and a crashing tool
NOISY = """
import logging, os, sys, warnings
import memlens.embed, memlens.mcp.server, memlens.memory

def noisy(tag, fn):
    def wrapper(*a, **kw):
        print(f"stray print at {tag}")
        os.write(1, f"stray fd-1 write at {tag}\\n".encode())
        warnings.warn(f"a dependency warns at {tag}")
        logging.getLogger("some.dependency").warning("a dependency logs at %s", tag)
        return fn(*a, **kw)
    return wrapper

memlens.mcp.server.build = noisy("start-up", memlens.mcp.server.build)
memlens.embed.OnnxEmbedder.load = noisy("model load", memlens.embed.OnnxEmbedder.load)
def crash(self):
    print("stray print in a crashing tool")
    raise RuntimeError("a bug inside the engine")
memlens.memory.Memory.wing_counts = crash
from memlens.cli.main import main
code = main(sys.argv[1:])
print("ui modules:", sorted({m.split('.')[0] for m in sys.modules} & {"rich", "textual"}), file=sys.stderr)
sys.exit(code)
"""


# no heavy module may load until the test opens the gate: initialize must be answered before that
GATED = """
import os, sys, time
GATE = sys.argv.pop(1)
HEAVY = {"mcp", "mcp_types", "anyio", "pydantic", "numpy", "onnxruntime", "torch", "sentence_transformers", "sqlite_vec"}

class Gate:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            print(f"gate: {name} waits", file=sys.stderr, flush=True)
            while not os.path.exists(GATE):
                time.sleep(0.01)
            sys.meta_path.remove(self)
        return None

sys.meta_path.insert(0, Gate())
from memlens.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def store(demo_store, tmp_path, real_embedder):
    path = tmp_path / "raw.db"
    shutil.copy(demo_store, path)
    return path


def raw(store, *args, env=None):
    return RawClient([MEMLENS, "--store", str(store), "mcp", *args], env=env)


def test_sdk_handshake_versions_match():
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    from memlens.mcp.meta import HANDSHAKE_VERSIONS

    assert HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS


@pytest.mark.model
def test_wire_format_with_a_raw_client(store):
    c = raw(store)
    try:
        init = c.initialize(name="raw-client", version="0.1")
        assert init["result"]["serverInfo"]["name"] == "memlens"
        assert init["result"]["protocolVersion"] == "2025-06-18"
        assert "tools" in init["result"]["capabilities"]
        tools = c.request("tools/list")["result"]["tools"]
        assert {t["name"] for t in tools} >= {"memory_search", "memory_add", "working_memory"}
        search = next(t for t in tools if t["name"] == "memory_search")
        assert search["inputSchema"]["required"] == ["query"] and search["annotations"]["readOnlyHint"] is True
        res = c.call("memory_search", query="callbacks blocking", active_wing="lifecore_ros2", k=3)
        assert res.get("isError") is not True
        assert res["structuredContent"]["results"][0]["id"] == "lc-arch-001"
        assert json.loads(res["content"][0]["text"]) == res["structuredContent"]  # the text is the same JSON
        added = c.call("memory_add", text="Raw JSON-RPC clients are served too.", wing="raw")["structuredContent"]
        assert added["status"] == "created"
        again = c.call("memory_add", text="Raw JSON-RPC clients are served too.", wing="raw")["structuredContent"]
        assert again == {**added, "status": "already_exists"}
        bad = c.call("memory_get", id="")
        assert bad["isError"] is True and "\n" not in bad["content"][0]["text"]
        unknown = c.request("tools/call", {"name": "no_such_tool", "arguments": {}})
        assert unknown["result"]["isError"] is True
        assert c.request("ping")["result"] == {}
    finally:
        assert c.close() == 0
    from memlens import Memory

    with Memory.open(store) as mem:
        row = mem.audit(added["id"])[0]
        assert row["action"] == "add" and row["detail"]["client"] == {"name": "raw-client", "version": "0.1", "via": "mcp"}


@pytest.mark.model
def test_a_server_stopped_with_sigterm_writes_its_searches_log_rows(store):
    """A search's log row waits up to a second in the server's log spool; SIGTERM, how a host stops its server,
    closes the store, which writes it (it was lost: the process died with it)."""
    before = logged_retrievals(store, 0)
    c = raw(store)
    try:
        c.initialize()
        assert c.call("memory_search", query="callbacks blocking", k=3).get("isError") is not True
        c.proc.send_signal(signal.SIGTERM)  # at once: the row still waits
        assert c.proc.wait(timeout=60) == 0
    finally:
        c.close()
    assert logged_retrievals(store, before + 1, timeout=1) == before + 1


@pytest.mark.model
@pytest.mark.parametrize("protocol", ["2024-11-05", "2025-11-25", "1999-01-01"])
def test_early_initialize_is_the_sdk_answer(store, protocol):
    """``initialize`` is answered before the SDK loads; with that off, the SDK's own answer is the same."""
    answers = {}
    for early in ("1", "0"):
        c = raw(store, env=server_env(MEMLENS_MCP_EARLY_INIT=early))
        try:
            answers[early] = c.initialize(protocol=protocol)
            c.request("tools/list")  # the session works after either handshake
        finally:
            assert c.close() == 0
        assert b"answered early" not in b"".join(c.err.seen), b"".join(c.err.seen)
    assert answers["1"] == answers["0"]
    assert answers["1"]["result"]["protocolVersion"] == (protocol if protocol != "1999-01-01" else "2025-11-25")


@pytest.mark.model
def test_stdout_stays_pure_json_rpc(store):
    """Prints, fd-1 writes, warnings and logs at start-up and model load, and a crash: all on stderr."""
    c = RawClient([sys.executable, "-c", NOISY, "--store", str(store), "mcp"])
    try:
        c.send({"jsonrpc": "2.0", "id": "junk"})  # not a request: an invalid-request error, not fatal
        c.send({"this is": "not json-rpc"})
        c.proc.stdin.write(b"{not json at all\n")
        c.proc.stdin.flush()
        assert [(r["id"], r["error"]["code"]) for r in (c.recv(), c.recv())] == [("junk", -32600), (None, -32600)]
        assert c.recv()["error"]["code"] == -32700  # not JSON: a parse error (id null)
        c.initialize()
        # a search waits for the (noisy) model load
        assert c.call("memory_search", query="callbacks", k=1)["structuredContent"]["results"]
        crashed = c.call("memory_wings")
        assert crashed["isError"] is True and "\n" not in crashed["content"][0]["text"]
        bad = c.call("memory_add", wing="w")
        assert bad["isError"] is True and bad["content"][0]["text"] == "memory_add: argument 'text' is required"
        assert c.call("memory_get", id="lc-arch-001")["structuredContent"]["id"] == "lc-arch-001"  # still serving
    finally:
        assert c.close() == 0
    for line in c.out.seen:
        msg = json.loads(line)
        assert msg["jsonrpc"] == "2.0" and ("id" in msg or "method" in msg), line
    err = b"".join(c.err.seen).decode()
    for tag in ("start-up", "model load"):
        assert f"stray print at {tag}" in err and f"stray fd-1 write at {tag}" in err
        assert f"a dependency warns at {tag}" in err and f"a dependency logs at {tag}" in err
    assert "stray print in a crashing tool" in err and "a bug inside the engine" in err
    assert "ui modules: []" in err  # the server, like the engine, loads no UI toolkit


@pytest.mark.model
def test_initialize_is_answered_before_any_heavy_import(store, tmp_path):
    gate = tmp_path / "gate"
    c = RawClient([sys.executable, "-c", GATED, str(gate), "--store", str(store), "mcp"])
    try:
        init = c.initialize()  # answered while the SDK, pydantic and the model are held back
        assert init["result"]["serverInfo"]["name"] == "memlens"
        assert not gate.exists()
        gate.touch()
        assert {t["name"] for t in c.request("tools/list")["result"]["tools"]} >= {"memory_search"}
    finally:
        gate.touch()
        assert c.close() == 0
    assert b"gate: " in b"".join(c.err.seen)  # the gate did hold a heavy import back


def test_lines_the_sdk_cannot_parse_are_answered_or_reported(store):
    c = raw(store)
    try:
        deep = b'{"jsonrpc": "2.0", "id": 0, "method": "ping", "params": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
        c.proc.stdin.write(deep)  # first line: the early-initialize reader must survive it
        c.proc.stdin.flush()
        reply = c.recv()  # too deep to parse: a parse error, for the id read from the line's top
        assert reply["id"] == 0 and reply["error"]["code"] == -32700 and "recursion limit" in reply["error"]["message"]
        init = c.initialize()
        assert init["result"]["serverInfo"]["name"] == "memlens"
        # a lone surrogate: Python's json reads it, the SDK's parser refuses it (a parse error, as over HTTP)
        c.proc.stdin.write(b'{"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": "memory_search", '
                           b'"arguments": {"query": "caf\\udce9"}}}\n')
        c.proc.stdin.write(deep)
        c.proc.stdin.flush()
        reply = c.recv()
        assert reply["id"] == 77 and reply["error"]["code"] == -32700 and "surrogate" in reply["error"]["message"]
        assert c.recv()["error"]["code"] == -32700  # the deep line again
        assert c.request("ping")["result"] == {}  # and the session goes on
        c.err.wait_for(b"invalid message: Invalid JSON: recursion limit")
    finally:
        assert c.close() == 0
    assert b"Traceback" not in b"".join(c.err.seen)


def test_params_the_sdk_refuses_are_named_in_the_error(tmp_path):
    """The SDK answered them "Invalid request parameters" with empty data: neither the field nor what was wrong."""
    c = RawClient([MEMLENS, "--store", str(tmp_path / "s.db"), "mcp"])
    try:
        c.initialize()
        answers = [c.request("tools/call", params)["error"] for params in (
            {"name": "memory_wings", "arguments": [1]}, {"name": 5}, {"arguments": {}})]
    finally:
        assert c.close() == 0
    assert {a["code"] for a in answers} == {-32602}
    assert [a["message"] for a in answers] == [
        "Invalid request parameters: tools/call: 'params.arguments': Input should be a valid dictionary",
        "Invalid request parameters: tools/call: 'params.name': Input should be a valid string",
        "Invalid request parameters: tools/call: 'params.name': Field required"]


def test_a_line_starting_with_a_byte_order_mark_is_answered_for_its_id(tmp_path):
    """Its parse error had a null id: the id was looked for before the mark was skipped."""
    c = RawClient([MEMLENS, "--store", str(tmp_path / "s.db"), "mcp"])
    try:
        c.initialize()
        c.proc.stdin.write(b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 5, "method": "ping"}\n')
        c.proc.stdin.flush()
        reply = c.recv()
        assert c.request("ping")["result"] == {}  # the session goes on
    finally:
        assert c.close() == 0
    assert reply["id"] == 5 and reply["error"]["code"] == -32700
    assert reply["error"]["message"] == ("parse error: the line starts with a byte order mark (U+FEFF); a JSON-RPC line is "
                                         "UTF-8 without one")


def test_a_variable_that_sets_nothing_is_warned_about_once_initialize_is_answered(store):
    """A setting's name mistyped in a client's server entry (MEMLENS_SEARCH_K, one underscore) is named on stderr,
    after the server answered initialize (what decides the warning imports the settings, which the early answer must
    not wait for)."""
    c = raw(store, env={**os.environ, "MEMLENS_SEARCH_K": "3"})
    try:
        assert c.initialize()["result"]["serverInfo"]["name"] == "memlens"
        c.err.wait_for(b"memlens mcp: warning: environment variable MEMLENS_SEARCH_K is not a memlens setting and is "
                       b"ignored (did you mean MEMLENS_SEARCH__K?)")
    finally:
        assert c.close() == 0
