"""The app watching agents: an MCP server process writes, the app marks its results stale and names the client."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from ..conftest import MEMLENS
from ..mcp_helpers import RawClient
from .conftest import search, settle
from .test_entry_snapshots import SIZE, open_entry, pin_times

pytestmark = pytest.mark.model


def mcp_agent(store, name="claude-code", version="2.1.0"):
    c = RawClient([MEMLENS, "--store", str(store), "mcp"])
    c.initialize(name=name, version=version)
    return c


def test_results_go_stale_after_an_mcp_write(make_app):
    app = make_app(watch=True, poll_interval=0.2)
    seen = {}

    async def main():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await search(pilot, "callbacks blocking")
            assert app.main.stale is None
            agent = mcp_agent(app.lens.store_path)
            try:
                added = await asyncio.to_thread(agent.call, "memory_add", text="Timer callbacks finish within 10 ms.",
                                                wing="lifecore_ros2", type="invariant")
            finally:
                assert await asyncio.to_thread(agent.close) == 0
            seen["id"] = added["structuredContent"]["id"]
            for _ in range(100):  # the app polls every 0.2 s; give up after 10 s
                if app.main.stale:
                    break
                await pilot.pause(0.1)
            seen["stale"] = app.main.stale

    asyncio.run(main())
    assert seen["stale"] and seen["stale"].get("entry_id") == seen["id"]
    assert seen["stale"].get("action") == "add"


@pytest.fixture
def agent_edited_store(tui_demo_store, snap_dir):
    """ros2-conv-005 edited twice by an MCP client (its salience; an agent's edit puts the entry under review), times
    pinned."""
    path = snap_dir / "agent.db"
    shutil.copy(tui_demo_store, path)
    agent = mcp_agent(path)
    try:
        entry = agent.call("memory_get", id="ros2-conv-005")["structuredContent"]
        res = agent.call("memory_update", id="ros2-conv-005", salience=0.9, expected_updated_at=entry["updated_at"])
        assert res.get("isError") is not True, res
        assert agent.call("memory_update", id="ros2-conv-005", salience=0.8).get("isError") is not True
    finally:
        assert agent.close() == 0
    pin_times(path, {"ros2-conv-005": ["2026-11-18T09:30:00Z", "2026-11-19T16:45:00Z"]})
    return path


def test_entry_history_names_the_mcp_client(make_app, agent_edited_store, snap_compare):
    async def run_before(pilot):
        await open_entry(pilot, "ros2-conv-005")

    assert snap_compare(make_app(store=agent_edited_store), terminal_size=SIZE, run_before=run_before)
