"""``memlens mcp`` through the official SDK client, over stdio and streamable HTTP, checked against the store."""

from __future__ import annotations

import shutil

import pytest

from .mcp_helpers import error_text, http_server, result_data, run_client, stdio_params

pytestmark = pytest.mark.model

ALL_TOOLS = {
    "memory_search", "memory_context", "memory_add", "memory_get", "memory_update", "memory_set_status", "memory_delete",
    "memory_explain", "memory_wings", "task_complete", "task_block", "task_unblock", "working_memory",
}
READ_TOOLS = {"memory_search", "memory_context", "memory_get", "memory_explain", "memory_wings", "working_memory"}


@pytest.fixture
def store(demo_store, tmp_path, real_embedder):
    """A private copy of the demo store (real model vectors); ``real_embedder`` exported the model for servers."""
    path = tmp_path / "mcp.db"
    shutil.copy(demo_store, path)
    return path


def open_store(path, settings, embedder):
    from memlens import Memory

    return Memory.open(path, settings=settings, embedder=embedder)


async def every_tool(client):
    """Call every tool once (plus a repeated add and two refused calls); return what came back."""
    out = {"tools": (await client.list_tools()).tools}
    call = client.call_tool
    out["search"] = result_data(
        await call("memory_search", {"query": "callbacks blocking", "active_wing": "lifecore_ros2", "k": 3})
    )
    out["search_full"] = result_data(await call("memory_search", {"query": "callbacks blocking", "k": 2, "full_trace": True}))
    out["context"] = result_data(await call("memory_context", {"query": "callbacks blocking", "active_wing": "lifecore_ros2"}))
    args = {"text": "Agents over MCP share this store.", "wing": "agents", "room": "mcp", "type": "decision", "key": "mcp-share"}
    out["add"] = result_data(await call("memory_add", args))
    out["add_again"] = result_data(await call("memory_add", args))
    new_id = out["add"]["id"]
    out["get"] = result_data(await call("memory_get", {"id": new_id}))
    out["update"] = result_data(await call("memory_update", {"id": new_id, "salience": 0.9,
                                                              "expected_updated_at": out["get"]["updated_at"]}))
    out["stale"] = error_text(await call("memory_update", {"id": new_id, "salience": 0.1,
                                                            "expected_updated_at": out["get"]["updated_at"]}))
    out["status"] = result_data(await call("memory_set_status", {"id": new_id, "status": "under_review"}))
    out["still_waits"] = result_data(await call("memory_set_status", {"id": new_id, "status": "active"}))
    held = result_data(await call("memory_get", {"id": "lc-arch-002"}))  # a person's entry, re-saved as it is
    out["same"] = result_data(await call("memory_update", {"id": "lc-arch-002", "salience": held["salience"],
                                                            "room": held["room"]}))
    out["same_status"] = result_data(await call("memory_set_status", {"id": "lc-arch-003", "status": "active"}))
    out["explain"] = result_data(await call("memory_explain", {"query": "callbacks blocking", "id": "lc-arch-001",
                                                                "active_wing": "lifecore_ros2"}))
    out["wings"] = result_data(await call("memory_wings", {}))
    out["complete"] = result_data(await call("task_complete", {"task_id": "mcp-1", "intent": "wire the MCP server",
                                                               "report": {"tests": "passed"}}))
    out["block"] = result_data(await call("task_block", {"task_id": "mcp-2", "reason": "waiting for review"}))
    out["wm_blocked"] = result_data(await call("working_memory", {}))
    out["unblock"] = result_data(await call("task_unblock", {"task_id": "mcp-2"}))
    out["wm"] = result_data(await call("working_memory", {}))
    out["bad_args"] = error_text(await call("memory_add", {"wing": "agents"}))
    out["bad_type"] = error_text(await call("memory_search", {"query": "x", "k": 0}))
    out["delete"] = result_data(await call("memory_delete", {"id": new_id}))
    out["get_deleted"] = error_text(await call("memory_get", {"id": new_id}))
    out["after_errors"] = result_data(await call("memory_wings", {}))
    return out


def check_every_tool(out, path, settings, embedder, client_name):
    tools = {t.name: t for t in out["tools"]}
    assert set(tools) == ALL_TOOLS
    for name, t in tools.items():
        assert t.description and len(t.description) > 40, name
        assert t.input_schema["type"] == "object"
        a = t.annotations
        assert a.read_only_hint is (name in READ_TOOLS), name
        assert a.idempotent_hint is not None and a.destructive_hint is not None, name
    assert tools["memory_delete"].annotations.destructive_hint is True
    assert tools["memory_add"].annotations.destructive_hint is False
    assert set(tools["memory_add"].input_schema["properties"]["type"]["enum"]) == {"invariant", "decision", "pattern", "note"}

    s = out["search"]
    assert s["results"][0]["id"] == "lc-arch-001"
    assert set(s["results"][0]) >= {"id", "wing", "room", "type", "status", "title", "text", "score", "flags"}
    assert {"cache_hit", "latency_ms", "dropped", "model_wait_ms"} <= set(s["trace"])
    assert "total" in s["trace"]["latency_ms"] and isinstance(s["trace"]["dropped"], int)
    assert "full_trace" not in s and "components" not in s["results"][0]
    assert "components" in out["search_full"]["results"][0] and "dropped" in out["search_full"]["full_trace"]
    assert out["context"].startswith("# Memory context") and "Callbacks must not block" in out["context"]

    assert out["add"]["status"] == "created" and out["add_again"]["status"] == "already_exists"
    assert out["add_again"]["id"] == out["add"]["id"]
    assert out["get"]["text"] == "Agents over MCP share this store." and out["get"]["type"] == "decision"
    assert out["update"]["salience"] == 0.9
    assert "changed" in out["stale"] and out["stale"].startswith("memory_update: ")
    assert out["status"]["status"] == "under_review"
    # an agent cannot make its own write active: the reply says so, and nothing is written (no audit row below)
    assert out["still_waits"]["status"] == "under_review" and out["still_waits"]["updated_at"] == out["update"]["updated_at"]
    assert out["still_waits"]["note"] == ("the entry is under_review, not active: an agent's write waits for a person's "
                                          "review")
    assert out["same"]["status"] == out["same_status"]["status"] == "active"  # values it has: nothing written
    assert out["explain"]["verdict"] == "returned" and out["explain"]["id"] == "lc-arch-001"
    wings = {w["wing"]: w for w in out["wings"]["wings"]}
    assert wings["agents"]["entries"] == 1 and wings["agents"]["rooms"] == {"mcp": 1}
    assert out["complete"]["task_id"] == "mcp-1" and out["complete"]["outcome"] == "success"
    assert out["block"]["reason"] == "waiting for review"
    assert [b["task_id"] for b in out["wm_blocked"]["blockers"]] == ["mcp-2"]
    assert out["wm"]["blockers"] == [] and "mcp-1" in [t["task_id"] for t in out["wm"]["tasks"]]
    for err in (out["bad_args"], out["bad_type"], out["get_deleted"]):
        assert "\n" not in err
    assert out["bad_args"] == "memory_add: argument 'text' is required"
    assert out["bad_type"].startswith("memory_search: argument 'k'")
    assert out["delete"]["deleted"] is True and "agents" not in {w["wing"] for w in out["after_errors"]["wings"]}

    # the store saw exactly these writes, each attributed to the client
    with open_store(path, settings, embedder) as mem:
        counts = {w["wing"]: w["entries"] for w in out["after_errors"]["wings"]}
        assert counts == {w: sum(1 for _ in mem.entries(w)) for w in mem.wings()}
        rows = [r for r in mem.audit(limit=1000) if r["action"] not in ("retrieval", "import")]
        actions = [r["action"] for r in reversed(rows)]
        # (the status set to what an agent's write already has, under_review, or asked to be active while it waits,
        # changes nothing: no audit row)
        assert actions == ["add", "update", "task.complete", "task.block", "task.unblock", "delete"]
        for r in rows:
            assert r["detail"]["client"] == {"name": client_name, "version": "1.0", "via": "mcp"}, r
        assert mem.tasks.get("mcp-1").intent == "wire the MCP server"


def test_every_tool_over_stdio(store, settings, real_embedder):
    out = run_client(stdio_params(store), every_tool, name="stdio-agent")
    check_every_tool(out, store, settings, real_embedder, "stdio-agent")


def test_every_tool_over_streamable_http(store, settings, real_embedder):
    with http_server(store) as url:
        out = run_client(url, every_tool, name="http-agent")
    check_every_tool(out, store, settings, real_embedder, "http-agent")


def test_modern_protocol_client_over_stdio(store, settings, real_embedder):
    """The SDK's default mode negotiates the 2026 per-request protocol: the same tools work there."""

    async def body(client):
        data = result_data(await client.call_tool("memory_add", {"text": "Modern clients write too.", "wing": "agents"}))
        return client.protocol_version, data

    version, data = run_client(stdio_params(store), body, mode="auto", name="modern-agent")
    assert version == "2026-07-28"
    with open_store(store, settings, real_embedder) as mem:
        assert mem.get(data["id"]).text == "Modern clients write too."
        assert mem.audit(data["id"])[0]["detail"]["client"]["name"] == "modern-agent"


def test_read_only_serves_only_read_tools(store, settings, real_embedder):
    from .conftest import snapshot_store

    before = snapshot_store(store)

    async def body(client):
        names = {t.name for t in (await client.list_tools()).tools}
        refused = await client.call_tool("memory_add", {"text": "x", "wing": "w"})
        wings = result_data(await client.call_tool("memory_wings", {}))
        found = result_data(await client.call_tool("memory_search", {"query": "callbacks blocking"}))
        assert found["results"]
        return names, refused, wings

    names, refused, wings = run_client(stdio_params(store, "--read-only"), body)
    assert names == READ_TOOLS
    assert refused.is_error and error_text(refused).startswith(
        "memory_add: this server is read-only (memlens mcp --read-only); it serves only memory_search"), error_text(refused)
    assert wings["entries"] == 167
    assert snapshot_store(store) == before  # not even a retrieval-metrics row
