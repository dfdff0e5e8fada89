"""`memlens mcp` over stdio against clients that misbehave: input that ends mid-work, lax argument types,
lines that are not JSON, lines too long to hold. A plain JSON-RPC client on a real server process; every
read has a timeout (``mcp_helpers.TIMEOUT``), and the piped run a process timeout."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from .conftest import MEMLENS
from .mcp_helpers import RawClient, server_env

pytestmark = pytest.mark.model


@pytest.fixture
def store(demo_store, tmp_path, real_embedder):
    path = tmp_path / "hostile.db"
    shutil.copy(demo_store, path)
    return path


def raw(store):
    return RawClient([MEMLENS, "--store", str(store), "mcp"])


def test_requests_piped_in_before_the_end_of_input_are_all_answered(store):
    """40 adds written at once, then stdin closed: each is committed and answered before the server exits."""
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    lines += [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
        "name": "memory_add", "arguments": {"text": f"Piped fact number {i}.", "wing": "piped"}}} for i in range(1, 41)]
    p = subprocess.run([MEMLENS, "--store", str(store), "mcp"], input=b"".join(json.dumps(x).encode() + b"\n" for x in lines),
                       capture_output=True, env=server_env(), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    answers = {m["id"]: m for m in map(json.loads, p.stdout.splitlines())}
    assert sorted(answers) == list(range(41))
    added = {answers[i]["result"]["structuredContent"]["id"] for i in range(1, 41)}
    assert all(answers[i]["result"]["structuredContent"]["status"] == "created" for i in range(1, 41))
    from memlens import Memory

    with Memory.open(store) as mem:
        assert {e.id for e in mem.entries("piped")} == added and len(added) == 40


LAX = [  # what pydantic's default mode would have converted: true -> 1, "5" -> 5, "yes" -> True, 1 -> True ...
    ("memory_search", {"query": "callbacks", "k": True}, "k"),
    ("memory_search", {"query": "callbacks", "k": "5"}, "k"),
    ("memory_search", {"query": "callbacks", "full_trace": "yes"}, "full_trace"),
    ("memory_search", {"query": "callbacks", "budget": 1.0}, "budget"),
    ("memory_add", {"text": "x", "wing": "w", "salience": "0.5"}, "salience"),
    ("memory_get", {"id": 12}, "id"),
    ("memory_delete", {"id": "lc-arch-001", "dry_run": 1}, "dry_run"),
]


def test_an_unknown_argument_or_an_empty_query_is_refused_in_one_line(store):
    c = raw(store)
    try:
        c.initialize()
        res = c.call("memory_add", text="Colourful fact.", wing="typed", colour="red")  # not dropped unseen
        assert res["isError"] is True and res["content"][0]["text"] == (
            "memory_add: argument 'colour' is not an argument of memory_add"), res
        for query in ("", "   "):  # nothing to look for: not a listing of whatever ranks first
            res = c.call("memory_search", query=query)
            assert res["isError"] is True, res
            text = res["content"][0]["text"]
            assert "\n" not in text and text.startswith("memory_search: the query is empty"), text
        ok = c.call("memory_search", query="wing=lifecore_ros2")  # filters alone still list their scope
        assert ok.get("isError") is not True and ok["structuredContent"]["results"]
    finally:
        assert c.close() == 0
    from memlens import Memory

    with Memory.open(store) as mem:
        assert "typed" not in mem.wings()


def test_arguments_of_another_type_are_refused_not_converted(store):
    c = raw(store)
    try:
        c.initialize()
        for tool, arguments, argument in LAX:
            res = c.call(tool, **arguments)
            assert res["isError"] is True, (tool, arguments, res)
            text = res["content"][0]["text"]
            assert "\n" not in text and text.startswith(f"{tool}: argument '{argument}': "), text
        ok = c.call("memory_search", query="callbacks", k=2, full_trace=False, budget=500)  # the declared types work
        assert ok.get("isError") is not True and ok["structuredContent"]["results"]
        ok = c.call("memory_add", text="Typed right.", wing="typed", salience=1)  # an integer is a number
        assert ok.get("isError") is not True
    finally:
        assert c.close() == 0
    from memlens import Memory

    with Memory.open(store) as mem:
        assert mem.get("lc-arch-001").status.value == "active" and "w" not in mem.wings()


def test_wing_arguments_are_wing_names_and_errors_never_echo_a_huge_argument(store):
    """An active wing or a wings list is checked as the store checks wing names, and bounded, before a search runs
    and its request is logged; an error quoting an argument back is cut to a line a person can read."""
    from memlens import Memory

    with Memory.open(store) as mem:
        logged = len(mem.retrievals())
    c = raw(store)
    try:
        c.initialize()
        for arguments, start in (({"active_wing": "W" * 100_000}, "memory_search: active wing: 'WWW"),
                                 ({"active_wing": "../etc"}, "memory_search: active wing: '../etc' is not a wing name"),
                                 ({"wings": ["python"] * 200_000}, "memory_search: wings: at most 1,000 wings"),
                                 ({"wings": ["w" * 100_000]}, "memory_search: wings: 'www")):
            res = c.call("memory_search", query="callbacks", **arguments)
            assert res["isError"] is True and res["content"][0]["text"].startswith(start), res["content"][0]["text"][:200]
            assert len(res["content"][0]["text"]) <= 600
        res = c.call("memory_get", id="x" * 100_000)
        text = res["content"][0]["text"]
        assert res["isError"] is True and text.startswith("memory_get: ") and len(text) <= 520 and text.endswith("…")
        ok = c.call("memory_search", query="callbacks", wings=["python", "python"], active_wing="lifecore_ros2")
        assert ok.get("isError") is not True
        # adding what is stored already says what the agent would not guess: deprecated, or other fields kept
        old = c.call("memory_get", id="lc-arch-011")["structuredContent"]
        assert old["status"] == "deprecated"
        again = c.call("memory_add", text=old["text"], title=old["title"], wing=old["wing"], room=old["room"],
                       type="invariant", key="made-up-key")["structuredContent"]
        assert again["status"] == "already_exists" and again["id"] == "lc-arch-011"
        assert again["note"] == ("the stored entry is deprecated: search does not return it (memory_set_status makes "
                                 "it active); it keeps its own type, key (memory_update changes them)"), again["note"]
    finally:
        assert c.close() == 0
    with Memory.open(store) as mem:
        assert len(mem.retrievals()) == logged + 1  # the refused searches logged nothing


def test_the_server_names_the_store_it_serves_when_the_environment_picks_it(store):
    c = RawClient([MEMLENS, "mcp"], env=server_env(MEMLENS_STORE=str(store)))
    try:
        c.initialize()
        c.err.wait_for(f"memlens mcp: serving {store} over stdio".encode())  # not "the default store"
    finally:
        assert c.close() == 0


def test_an_unknown_tool_is_named_once(store):
    c = raw(store)
    try:
        c.initialize()
        unknown = c.request("tools/call", {"name": "nope", "arguments": {}})["result"]
        assert unknown["isError"] and unknown["content"][0]["text"] == "Unknown tool: nope"  # not "nope: Unknown tool…"
        assert c.call("memory_wings")["structuredContent"]["wings"]  # the session goes on
    finally:
        assert c.close() == 0
    assert b"Traceback" not in b"".join(c.err.seen)


def test_a_line_that_is_not_json_gets_a_parse_error(store):
    c = raw(store)
    try:
        c.initialize()
        c.proc.stdin.write(b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"note": "caf\xe9"}}\n')  # Latin-1
        c.proc.stdin.flush()
        assert c.recv() == {"jsonrpc": "2.0", "id": 5,
                            "error": {"code": -32700, "message": "parse error: the line is not UTF-8"}}
        c.proc.stdin.write(b'{"jsonrpc": "2.0", "id": "deep", "method": "ping", "params": '
                           + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
        c.proc.stdin.flush()
        reply = c.recv()
        assert reply["id"] == "deep" and reply["error"]["code"] == -32700, reply
        c.proc.stdin.write(b"{not json at all\n")
        c.proc.stdin.flush()
        reply = c.recv()
        assert reply["id"] is None and reply["error"]["code"] == -32700, reply
        # JSON that is no request is answered too (a client waiting on it would wait for ever), with a null id
        for line, says in ((b'[{"jsonrpc": "2.0", "id": 2, "method": "ping"}]', "a batch (a JSON list) is not part of MCP"),
                           (b"5", "a message is a JSON object with a method"), (b"{}", "a JSON object with a method"),
                           (b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}', "an id is a string or an integer")):
            c.proc.stdin.write(line + b"\n")
            c.proc.stdin.flush()
            reply = c.recv()
            assert reply["id"] is None and reply["error"]["code"] == -32600 and says in reply["error"]["message"], reply
        c.proc.stdin.write(b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"note": "\\ud800"}}\n')
        c.proc.stdin.flush()
        reply = c.recv()
        assert reply["id"] == 7 and reply["error"]["code"] == -32700 and "surrogate" in reply["error"]["message"], reply
        assert c.request("ping")["result"] == {}  # the session goes on
    finally:
        assert c.close() == 0
    assert b"Traceback" not in b"".join(c.err.seen)


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:")) / 1024


def test_an_over_long_line_is_read_past_in_bounded_memory_and_answered(store):
    c = raw(store)
    try:
        c.initialize()
        assert c.call("memory_search", query="callbacks", k=1)["structuredContent"]["results"]  # the model is loaded
        before = _peak_rss_mb(c.proc.pid)
        c.proc.stdin.write(b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "memory_add", '
                           b'"arguments": {"wing": "w", "text": "')
        block = b"a" * (1 << 20)
        for _ in range(256):  # 256 MB on one line, sent a block at a time
            c.proc.stdin.write(block)
        c.proc.stdin.write(b'"}}}\n')
        c.proc.stdin.flush()
        reply = c.recv()
        assert reply["id"] == 9 and reply["error"]["code"] == -32600 and "longer than" in reply["error"]["message"]
        grew = _peak_rss_mb(c.proc.pid) - before
        assert grew < 160, f"peak RSS grew by {grew:.0f} MB for a 256 MB line"
        assert c.request("ping")["result"] == {}
    finally:
        assert c.close() == 0
