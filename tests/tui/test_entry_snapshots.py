"""Snapshots of the curation screens: entry editor, delete confirmation, why not?, context preview.

Audit rows and ``updated_at`` carry the wall clock of the write; the stores
used here have them pinned (``pin_times``) so the relative ages shown against
the app's fixed clock never move.
"""

from __future__ import annotations

import shutil

import pytest

from .conftest import search, settle

SIZE = (120, 40)


def pin_times(path, edits: dict[str, list[str]] | None = None) -> None:
    """Every audit row at a fixed time (one minute apart by seq); the edits of ``edits[id]`` at the given times.

    ``updated_at`` of an edited entry becomes its last edit time, as the engine would have written it.
    """
    from memlens.store import db

    conn = db.connect(path, create=False)
    try:
        with conn:
            conn.execute("UPDATE audit SET ts = strftime('%Y-%m-%dT%H:%M:%SZ', '2026-11-01 08:00:00', '+' || seq || ' minutes')")
            for entry_id, times in (edits or {}).items():
                seqs = [r[0] for r in conn.execute(
                    "SELECT seq FROM audit WHERE entry_id = ? AND action = 'update' ORDER BY seq", (entry_id,))]
                assert len(seqs) == len(times), (entry_id, seqs)
                conn.executemany("UPDATE audit SET ts = ? WHERE seq = ?", list(zip(times, seqs)))
                conn.execute("UPDATE entries SET updated_at = ? WHERE id = ?", (times[-1], entry_id))
    finally:
        conn.close()


@pytest.fixture
def pinned_store(tui_demo_store, snap_dir):
    """The demo store with fixed audit times and no edits."""
    path = snap_dir / "pinned.db"
    shutil.copy(tui_demo_store, path)
    pin_times(path)
    return path


@pytest.fixture
def curated_store(tui_demo_store, snap_dir, settings, real_embedder):
    """ros2-conv-005 edited twice (text and salience, then status): an audit history to show."""
    from memlens import Memory

    path = snap_dir / "curated.db"
    shutil.copy(tui_demo_store, path)
    with Memory.open(path, settings=settings, embedder=real_embedder) as m:
        text = m.get("ros2-conv-005").text + " Sensor streams use the SensorDataQoS preset instead."
        m.update("ros2-conv-005", text=text, salience=0.6)
        m.set_status("ros2-conv-005", "under_review")
    pin_times(path, {"ros2-conv-005": ["2026-11-18T09:30:00Z", "2026-11-19T16:45:00Z"]})
    return path


async def open_entry(pilot, entry_id):
    await settle(pilot)
    pilot.app.open_entry(entry_id)
    await settle(pilot)


def test_entry_with_audit_history(make_app, curated_store, snap_compare):
    async def run_before(pilot):
        await open_entry(pilot, "ros2-conv-005")

    assert snap_compare(make_app(store=curated_store), terminal_size=SIZE, run_before=run_before)


def test_invalid_edit_is_refused_inline(make_app, pinned_store, snap_compare):
    async def run_before(pilot):
        await open_entry(pilot, "lc-arch-001")
        room = pilot.app.screen.query_one("#f-room")
        room.focus()
        room.value = ""
        await pilot.press(*"bad room!")
        await pilot.press("ctrl+s")
        await settle(pilot)

    assert snap_compare(make_app(store=pinned_store), terminal_size=SIZE, run_before=run_before)


def test_new_entry_form(make_app, pinned_store, snap_compare):
    async def run_before(pilot):
        await open_entry(pilot, None)
        await pilot.press(*"Lifecycle nodes log every transition.")
        await settle(pilot)

    assert snap_compare(make_app(store=pinned_store), terminal_size=SIZE, run_before=run_before)


def test_delete_asks_first(make_app, pinned_store, snap_compare):
    async def run_before(pilot):
        await open_entry(pilot, "lc-arch-001")
        await pilot.press("ctrl+t")
        await settle(pilot)

    assert snap_compare(make_app(store=pinned_store), terminal_size=SIZE, run_before=run_before)


async def why_not(pilot, query: str, pick: str, entry_id: str) -> None:
    """Search, open "why not?", type words of a title and pick the entry from the list."""
    await search(pilot, query)
    pilot.app.why_not(pilot.app.main.query_text)
    await settle(pilot)
    await pilot.press(*pick)
    await pilot.pause(0.4)
    await settle(pilot)
    olist = pilot.app.screen.query_one("#wn-list")
    olist.focus()
    olist.highlighted = [o.id for o in olist.options].index(entry_id)
    await pilot.press("enter")
    await settle(pilot)


def test_why_not_dropped_by_override(make_app, snap_compare):
    async def run_before(pilot):
        await why_not(pilot, "publisher QoS depth wing=lifecore_ros2|ros2", "QoS", "ros2-conv-005")

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_why_not_deprecated(make_app, snap_compare):
    async def run_before(pilot):
        await why_not(pilot, "lambda callbacks", "lambda", "lc-anti-012")

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


async def context_with_budget(pilot, budget: str) -> None:
    await search(pilot, "callbacks blocking")
    pilot.app.context_preview(pilot.app.main.query_text)
    await settle(pilot)
    await pilot.press(*budget)
    await pilot.pause(0.4)
    await settle(pilot)


def test_context_under_a_tight_budget(make_app, snap_compare):
    """400 tokens: less than the invariants need; they are kept whole, everything else goes."""

    async def run_before(pilot):
        await context_with_budget(pilot, "400")

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_context_keeps_summarises_and_drops(make_app, snap_compare):
    """1700 tokens: notes dropped, patterns summarised, invariants and decisions kept."""

    async def run_before(pilot):
        await context_with_budget(pilot, "1700")

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)
