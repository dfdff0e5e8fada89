"""``memory_update`` with ``dry_run``: the update runs in a transaction that is rolled back and the tool returns
its impact (golden queries that would fail, recent queries whose results would change), through the official
SDK client over stdio, as an agent calls it."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import snapshot_store

pytestmark = pytest.mark.model

QUERY = "callbacks blocking executor"


def test_memory_update_dry_run_returns_the_impact_and_writes_nothing(demo_store, tmp_path, settings, real_embedder):
    from memlens import Memory
    from memlens.replay import golden
    from tests.mcp_helpers import error_text, result_data, run_client, stdio_params

    path = tmp_path / "mcp.db"
    shutil.copy(demo_store, path)
    with Memory.open(path, settings=settings, embedder=real_embedder) as m:
        target = next(r.entry.id for r in m.search(QUERY, k=5).results if "mandatory" not in r.flags)  # logged
        golden.add(m, QUERY, target, within=5)
        stamp = m.get(target).to_record()["updated_at"]
    away = "Bananas ripen faster in a paper bag next to apples."  # the target's text, moved far from the query

    async def body(client):
        before = snapshot_store(path)
        out = {"dry": result_data(await client.call_tool("memory_update", {"id": target, "text": away, "dry_run": True,
                                                                           "expected_updated_at": stamp}))}
        out["harmless"] = result_data(await client.call_tool("memory_update", {"id": target, "salience": 0.5,
                                                                                "dry_run": True}))
        out["stale"] = error_text(await client.call_tool("memory_update", {"id": target, "text": away, "dry_run": True,
                                                                           "expected_updated_at": "2001-01-01T00:00:00Z"}))
        out["unknown"] = error_text(await client.call_tool("memory_update", {"id": "no-such-id", "text": away,
                                                                             "dry_run": True}))
        out["unchanged"] = snapshot_store(path) == before
        out["written"] = result_data(await client.call_tool("memory_update", {"id": target, "text": away}))
        return out

    out = run_client(stdio_params(path), body)
    dry = out["dry"]
    assert out["unchanged"], "a dry run wrote to the store"
    assert dry["written"] is False and dry["change"]["id"] == target
    assert [(g["expect"], g["was_ok"]) for g in dry["golden"]] == [(target, True)] and dry["golden_checked"] == 1
    assert any(q["query"] == QUERY and target in q["left"] for q in dry["queries"])
    assert dry["summary"]["changed"] >= 1
    # a change that moves nothing: no golden query fails, no logged query changes
    assert out["harmless"]["golden"] == [] and out["harmless"]["queries"] == []
    # a dry run is refused exactly as the write would be
    assert "changed" in out["stale"] and out["stale"].startswith("memory_update: ")
    assert "no-such-id" in out["unknown"]
    # the write itself (no dry_run) goes through, and the golden query now fails as the preview said
    assert out["written"]["text"] == away
    with Memory.open(path, settings=settings, embedder=real_embedder) as m:
        assert m.get(target).text == away
        assert [c["expect"] for c in golden.check(m)["checks"] if not c["ok"]] == [target]
