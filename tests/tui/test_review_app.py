"""The review screen: the scripted agent session's writes listed with their evidence; accept, reject, merge,
edit then accept, and undo (from the screen and from the entry's history) driven like a user.

The store is the demo memory after ``tests/review_session.run_in_process`` (the 20 writes of an MCP client,
made in process with fixed ids), every audit time pinned so the ages shown never move.
"""

from __future__ import annotations

import asyncio
import shutil

import pytest

from .conftest import settle, until
from .test_entry_snapshots import pin_times

SIZE = (120, 40)


def build_review_store(source, path, settings, embedder) -> None:
    """``source`` (the demo store) copied to ``path`` with the agent session's writes, audit times pinned."""
    from memlens import Memory

    from ..review_session import run_in_process

    shutil.copy(source, path)
    with Memory.open(path, settings=settings, embedder=embedder) as m:
        run_in_process(m)
    pin_times(path)


@pytest.fixture
def review_store(tui_demo_store, snap_dir, settings, real_embedder):
    path = snap_dir / "review.db"
    build_review_store(tui_demo_store, path, settings, real_embedder)
    return path


async def open_review(pilot, select: str | None = None):
    await settle(pilot)
    pilot.app.main.query_one("#results").focus()  # "v" in the query input would be typed
    await pilot.press("v")
    await settle(pilot)
    screen = pilot.app.screen
    if select is not None:
        table = screen.query_one("#review-items")
        table.move_cursor(row=[i["entry"] for i in screen.items].index(select))
        await settle(pilot)
    return screen


def test_review_screen_lists_the_agents_writes_with_evidence(make_app, review_store, snap_compare):
    async def run_before(pilot):
        await open_review(pilot)

    assert snap_compare(make_app(store=review_store), terminal_size=SIZE, run_before=run_before)


def test_review_screen_shows_a_conflict_within_the_shared_wing(make_app, review_store, snap_compare):
    async def run_before(pilot):
        await open_review(pilot, "agent-contra-2")

    assert snap_compare(make_app(store=review_store), terminal_size=SIZE, run_before=run_before)


def _entry(path, entry_id, settings, embedder):
    from memlens import Memory

    with Memory.open(path, settings=settings, embedder=embedder) as m:
        return m.get(entry_id), m.audit(entry_id, 5)


def _audit(path, entry_id, settings, embedder):
    from memlens import Memory

    with Memory.open(path, settings=settings, embedder=embedder) as m:
        return m.audit(entry_id, 5)


def test_accept_reject_merge_and_undo_from_the_app(make_app, review_store, settings, real_embedder):
    app = make_app(store=review_store)
    path = app.lens.store_path

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_review(pilot, "agent-plain-01")
            assert len(screen.items) == 20 and all(i["entry"] in screen.evidence for i in screen.items)
            await pilot.press("a")
            await settle(pilot)
            e, audit = await asyncio.to_thread(_entry, path, "agent-plain-01", settings, real_embedder)
            assert e.status.value == "active" and audit[0]["detail"]["review"]["action"] == "accept"
            assert "agent-plain-01" not in [i["entry"] for i in screen.items]
            assert "u undoes it" in str(screen.query_one("#review-status").render())

            await pilot.press("u")
            await settle(pilot)
            e, _ = await asyncio.to_thread(_entry, path, "agent-plain-01", settings, real_embedder)
            assert e.status.value == "under_review" and "agent-plain-01" in [i["entry"] for i in screen.items]

            screen.query_one("#review-items").move_cursor(row=[i["entry"] for i in screen.items].index("agent-contra-1"))
            await pilot.press("r")
            await settle(pilot)
            await pilot.press(*"contradicts the shared logging rule")
            await pilot.press("enter")
            await settle(pilot)
            e, audit = await asyncio.to_thread(_entry, path, "agent-contra-1", settings, real_embedder)
            assert e.status.value == "deprecated"
            assert audit[0]["detail"]["review"]["reason"] == "contradicts the shared logging rule"

            screen.query_one("#review-items").move_cursor(row=[i["entry"] for i in screen.items].index("agent-dup-1"))
            await pilot.press("m")
            await settle(pilot)
            e, _ = await asyncio.to_thread(_entry, path, "ros2-conv-007", settings, real_embedder)
            assert e.meta["found_in"][0]["id"] == "agent-dup-1"
            assert "agent-dup-1" not in [i["entry"] for i in screen.items] and len(screen.items) == 18

            # the merge undone from the kept entry's history (the entry screen, ctrl+b)
            await pilot.press("escape")
            await settle(pilot)
            pilot.app.open_entry("ros2-conv-007")
            await settle(pilot)
            await pilot.press("ctrl+b")
            await settle(pilot)
            e, _ = await asyncio.to_thread(_entry, path, "agent-dup-1", settings, real_embedder)
            assert e.text.endswith("Confirmed again while setting up the arm_driver package.")
            assert "merge undone" in str(pilot.app.screen.query_one("#entry-error").render())

    asyncio.run(run())


def test_accept_clean_says_how_many_and_u_undoes_them_all(make_app, review_store, settings, real_embedder):
    app = make_app(store=review_store)
    path = app.lens.store_path

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_review(pilot)
            waiting = [i["entry"] for i in screen.items]
            await pilot.press("A")
            await settle(pilot)
            accepted = [e for e in waiting if e not in [i["entry"] for i in screen.items]]
            assert len(accepted) >= 3, accepted
            status = str(screen.query_one("#review-status").render())
            assert status.startswith(f"✓ {len(accepted)} accepted: ") and f"u undoes all {len(accepted)}" in status, status
            await pilot.press("u")
            await settle(pilot)
            assert sorted(i["entry"] for i in screen.items) == sorted(waiting)  # every one is back, not only the last
            for entry_id in accepted:  # (some are deletions: the entry stays deleted, its review is undone)
                audit = await asyncio.to_thread(_audit, path, entry_id, settings, real_embedder)
                assert audit[0]["detail"]["review"]["action"] == "undo", entry_id
            assert f"{len(accepted)} undone: " in str(screen.query_one("#review-status").render())
            await pilot.press("u")
            await settle(pilot)
            assert "nothing to undo here" in str(screen.query_one("#review-status").render())

    asyncio.run(run())


def test_an_agents_write_while_the_screen_is_open_is_listed(make_app, review_store, settings, real_embedder):
    from memlens import Memory, attribution

    from ..review_session import AGENT

    app = make_app(store=review_store, watch=True, poll_interval=0.2)
    path = app.lens.store_path

    def agent_writes():
        with Memory.open(path, settings=settings, embedder=real_embedder) as m, attribution.acting_as(AGENT):
            m.add("The lidar driver needs firmware 2.4 or later on every rover.", wing="lifecore_ros2", id="late-1")

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_review(pilot)
            before = len(screen.items)
            await asyncio.to_thread(agent_writes)
            await until(pilot, lambda: "late-1" in [i["entry"] for i in screen.items])  # the poll, then a new listing
            assert "late-1" in [i["entry"] for i in screen.items] and len(screen.items) == before + 1

    asyncio.run(run())


def test_merge_without_a_near_duplicate_says_what_can_be_done_here(make_app, review_store):
    app = make_app(store=review_store)

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_review(pilot, "agent-plain-01")
            assert not any(e["kind"] == "duplicate" for e in screen.evidence["agent-plain-01"])
            await pilot.press("m")
            await settle(pilot)
            status = str(screen.query_one("#review-status").render())
            assert status == "agent-plain-01 has no near-duplicate to merge into: accept, reject or edit it", status
            assert "agent-plain-01" in [i["entry"] for i in screen.items]

    asyncio.run(run())


def test_edit_then_accept_from_the_app(make_app, review_store, settings, real_embedder):
    app = make_app(store=review_store)
    path = app.lens.store_path

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await open_review(pilot, "agent-plain-05")
            await pilot.press("e")
            await settle(pilot)
            title = pilot.app.screen.query_one("#f-title")
            title.value = "Staging robot rover-7"
            await pilot.press("ctrl+s")
            await settle(pilot)
            e, audit = await asyncio.to_thread(_entry, path, "agent-plain-05", settings, real_embedder)
            assert e.title == "Staging robot rover-7" and e.status.value == "active"
            assert [r["detail"]["review"]["action"] for r in audit[:2]] == ["accept", "accept"]
            screen = pilot.app.screen
            assert "agent-plain-05" not in [i["entry"] for i in screen.items]
            status = str(screen.query_one("#review-status").render())
            assert status.startswith("✓ ") and "agent-plain-05" in status and "u undoes it" in status, status

            await pilot.press("u")  # the edit and the accept undone, as any other action of this screen
            await settle(pilot)
            e, _ = await asyncio.to_thread(_entry, path, "agent-plain-05", settings, real_embedder)
            assert e.status.value == "under_review" and e.title != "Staging robot rover-7"
            assert "agent-plain-05" in [i["entry"] for i in screen.items]

    asyncio.run(run())


def test_the_palette_opens_the_review_screen(make_app, review_store):
    from memlens.tui.commands import ACTIONS
    from memlens.tui.screens.review import ReviewScreen

    assert any(action == "review" for _, action, _ in ACTIONS)
    app = make_app(store=review_store)

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            pilot.app.main.action_review()
            await settle(pilot)
            assert isinstance(pilot.app.screen, ReviewScreen)

    asyncio.run(run())


def test_a_changed_text_is_shown_whole_up_to_a_bound_wrapped_in_the_pane():
    """The diff of a text showed 70 characters of each side: an agent's 77-character edit was cut. The changed part
    now shows with context up to ``DIFF_CHARS``, wrapped in the detail pane (which scrolls)."""
    from datetime import datetime, timezone

    from rich.console import Console

    from memlens.tui.screens.review import DIFF_CHARS, change_view

    old = "Components publish only through publishers created with create_lifecycle_publisher in on_configure."
    new = "Publish only while active. (agent edit: also never publish from on_configure or on_cleanup callbacks.)"
    item = {"entry": "lc-arch-007", "type": "invariant", "wing": "w", "title": "Publishing",
            "change": {"action": "update", "writes": [], "diff": {"text": {"before": old, "after": new},
                                                                    "salience": {"before": 0.4, "after": 0.5}}}}
    console = Console(width=60, record=True, color_system=None)
    console.print(change_view(item, datetime(2026, 1, 1, tzinfo=timezone.utc)))
    shown = " ".join(console.export_text().split())
    assert old in shown and new in shown and "salience: − 0.4" in shown
    long_old, long_new = "a " * 2000, "b " * 2000  # every word changed: each side cut at the bound
    item["change"]["diff"] = {"text": {"before": long_old, "after": long_new}}
    console = Console(width=60, record=True, color_system=None)
    console.print(change_view(item, datetime(2026, 1, 1, tzinfo=timezone.utc)))
    shown = console.export_text()
    assert "…" in shown and DIFF_CHARS // 2 - 10 < shown.count("b") <= DIFF_CHARS // 2 + 1


def test_the_impact_lines_count_in_words_that_agree():
    from rich.console import Console

    from memlens.tui.screens.review import impact_lines

    q = {"query": "callbacks", "entered": ["a"], "left": [], "moved": []}
    console = Console(width=100, record=True, color_system=None)
    for line in impact_lines({"golden_checked": 0, "accept": {"queries_changed": [q]},
                              "reject": {"queries_changed": [q, q]}}):
        console.print(line)
    shown = console.export_text()
    assert "1 logged query changes" in shown and "2 logged queries change" in shown
