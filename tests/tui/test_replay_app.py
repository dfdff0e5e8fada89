"""Replay in the app's everyday screens: golden status in the header, the impact preview in the entry
editor (before an edit, a deprecation or a deletion is written), the access log on the entry screen,
and vector freshness per result and in the header."""

from __future__ import annotations

import asyncio

import pytest

from ..conftest import snapshot_store
from .conftest import search, settle
from .test_replay_snapshots import QUERIES, pin_log

SIZE = (120, 40)


def logged_store(path, embedder, settings) -> str:
    """Three logged searches (one of them to build a context), times pinned; returns the first one's top
    non-mandatory entry."""
    from memlens import Memory

    with Memory.open(path, embedder=embedder, settings=settings) as mem:
        first = [mem.search(q, k=5) for q in QUERIES][0]
        target = next(r.entry.id for r in first.results if "mandatory" not in r.flags)
        mem.context(QUERIES[0], k=5)
    pin_log(path)
    return target


def add_golden(path, embedder, settings, *pairs: tuple[str, str]) -> None:
    from memlens import Memory
    from memlens.replay import golden

    with Memory.open(path, embedder=embedder, settings=settings) as mem:
        for query, expect in pairs:
            golden.add(mem, query, expect, within=5)


def deprecate(path, embedder, settings, entry_id: str) -> None:
    from memlens import Memory

    with Memory.open(path, embedder=embedder, settings=settings) as mem:
        mem.set_status(entry_id, "deprecated")


def second_hit(path, embedder, settings, query: str) -> str:
    """An entry the query returns today that is not the target of the other golden query."""
    from memlens import Memory

    with Memory.open(path, embedder=embedder, settings=settings) as mem:
        from memlens.replay.storage import with_settings

        bundle = with_settings(mem, mem.settings).search(query, k=5, use_cache=False)  # not logged
        return bundle.results[0].entry.id


def header_text(app) -> str:
    return str(app.screen.query_one("HeaderTitle").render())


def golden_store(app, settings, embedder) -> tuple[str, str]:
    """Two golden queries; the first one's expected entry deprecated afterwards, so it fails."""
    path = app.lens.store_path
    target = logged_store(path, embedder, settings)
    other = second_hit(path, embedder, settings, QUERIES[1])
    add_golden(path, embedder, settings, (QUERIES[0], target), (QUERIES[1], other))
    deprecate(path, embedder, settings, target)
    return target, other


def test_header_golden_status_with_a_failing_query(make_app, snap_compare, settings, real_embedder):
    app = make_app()
    golden_store(app, settings, real_embedder)

    async def run_before(pilot):
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.model
def test_header_counts_golden_queries_and_stale_vectors(make_app, settings, real_embedder):
    from memlens.store import db

    app = make_app()
    target, _ = golden_store(app, settings, real_embedder)
    conn = db.connect(app.lens.store_path, create=False)  # a text changed behind the engine's back: its vector is stale
    with conn:
        conn.execute("UPDATE entries SET text = text || ' (edited by hand)' WHERE id = 'lc-arch-001'")
    conn.close()
    seen = {}

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            seen["header"] = header_text(app)
            seen["health"] = app.health
            await search(pilot, "callbacks blocking")
            table = app.main.query_one("#results")
            seen["flags"] = {str(table.get_row(k.value)[-1]).strip(): k.value for k in table.rows}

    asyncio.run(run())
    g = seen["health"]["golden"]
    assert (g["passed"], g["failed"]) == (1, 1)
    assert [c["expect"] for c in g["checks"] if not c["ok"]] == [target]
    assert "golden 1/2 ✗ 1 failing" in seen["header"]
    assert seen["health"]["stale"] == 1 and "1 stale vector (memlens reembed)" in seen["header"]
    stale_rows = [eid for flags, eid in seen["flags"].items() if "⟳vec" in flags]
    assert stale_rows == ["lc-arch-001"]


@pytest.mark.model
def test_no_golden_queries_no_header_status(make_app):
    app = make_app()
    seen = {}

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            seen["header"], seen["health"] = header_text(app), app.health

    asyncio.run(run())
    assert seen["health"] == {"golden": None, "stale": 0}
    assert seen["header"].endswith("app.db")  # the store's path ends the header: no golden status, no stale count


def impact_store(app, settings, embedder) -> str:
    """Logged searches and a golden query that expects the first query's top entry (passing today)."""
    path = app.lens.store_path
    target = logged_store(path, embedder, settings)
    add_golden(path, embedder, settings, (QUERIES[0], target))
    from .test_entry_snapshots import pin_times

    pin_times(path)
    pin_log(path)
    return target


def test_entry_editor_impact_preview_before_a_deprecation(make_app, snap_compare, settings, real_embedder):
    app = make_app()
    target = impact_store(app, settings, real_embedder)

    async def run_before(pilot):
        await settle(pilot)
        pilot.app.open_entry(target)
        await settle(pilot)
        await pilot.press("ctrl+o")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_entry_screen_with_an_access_log(make_app, snap_compare, settings, real_embedder):
    app = make_app()
    target = impact_store(app, settings, real_embedder)

    async def run_before(pilot):
        await settle(pilot)
        pilot.app.open_entry(target)
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.model
def test_impact_preview_writes_nothing_and_asks_before_the_write(make_app, settings, real_embedder):
    from memlens import Memory
    from memlens.tui.screens.entry import EntryScreen
    from memlens.tui.screens.entry_impact import ImpactConfirmScreen

    app = make_app()
    target = impact_store(app, settings, real_embedder)
    path = app.lens.store_path
    before = snapshot_store(path)
    seen = {}

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert "golden 1/1" in header_text(app)
            pilot.app.open_entry(target)
            await settle(pilot)
            for key in ("ctrl+o", "ctrl+t"):  # a deprecation, then a deletion: previewed, then cancelled
                await pilot.press(key)
                await settle(pilot)
                modal = app.screen
                assert isinstance(modal, ImpactConfirmScreen), key
                seen[key] = modal.preview
                seen[key + " store"] = await asyncio.to_thread(snapshot_store, path)
                await pilot.press("n")
                await settle(pilot)
                assert isinstance(app.screen, EntryScreen)
            await pilot.press("ctrl+o")
            await settle(pilot)
            await pilot.press("y")
            await settle(pilot)
            assert app.screen is app.main
            seen["header"] = header_text(app)

    asyncio.run(run())
    for key in ("ctrl+o", "ctrl+t"):
        p = seen[key]
        assert p["written"] is False and [(c["expect"], c["was_ok"]) for c in p["golden"]] == [(target, True)]
        assert any(target in q["left"] for q in p["queries"]) and p["summary"]["changed"] >= 1
        assert seen[key + " store"] == before  # the preview wrote nothing, not even a retrieval row
    with Memory.open(path, settings=settings, embedder=real_embedder) as m:
        assert m.get(target).status.value == "deprecated"  # confirmed: written
    assert "golden 0/1 ✗ 1 failing" in seen["header"]  # the header checked again after the write


@pytest.mark.model
def test_an_edit_without_impact_is_written_without_asking(make_app, settings, real_embedder):
    """No golden query and no logged retrieval: nothing to preview, so ctrl+s saves at once, as before."""
    from memlens import Memory

    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            pilot.app.open_entry("lc-arch-003")
            await settle(pilot)
            await pilot.press("ctrl+o")
            await settle(pilot)
            assert app.screen is app.main

    asyncio.run(run())
    with Memory.open(app.lens.store_path, settings=settings, embedder=real_embedder) as m:
        assert m.get("lc-arch-003").status.value == "deprecated"
