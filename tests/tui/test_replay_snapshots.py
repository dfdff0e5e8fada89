"""The replay screen: logged queries run again after a deprecation, their ranked lists then and now."""

from __future__ import annotations

import pytest

from .conftest import settle

SIZE = (120, 40)
QUERIES = ("callbacks blocking executor", "lifecycle node state transitions", "parameters declared at startup")


def log_then_deprecate(path, embedder, settings) -> str:
    """Three logged searches, then the first one's top non-mandatory entry deprecated; returns its id."""
    from memlens import Memory

    with Memory.open(path, embedder=embedder, settings=settings) as mem:
        first = [mem.search(q, k=5) for q in QUERIES][0]
        target = next(r.entry.id for r in first.results if "mandatory" not in r.flags)
        mem.set_status(target, "deprecated")
    return target


def _retrievals(path) -> int:
    from memlens.store import db

    conn = db.connect(path, create=False)
    try:
        return conn.execute("SELECT count(*) FROM audit WHERE action = 'retrieval'").fetchone()[0]
    finally:
        conn.close()


def test_replay_screen_after_a_deprecation(make_app, snap_compare, settings, real_embedder):
    from memlens.tui.screens.replay import ReplayScreen

    app = make_app()
    log_then_deprecate(app.lens.store_path, real_embedder, settings)

    async def run_before(pilot):
        await settle(pilot)
        pilot.app.push_screen(ReplayScreen())
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.model
def test_replay_screen_lists_the_change_and_logs_nothing(make_app, settings, real_embedder):
    import asyncio

    from memlens.tui.screens.replay import ReplayScreen

    app = make_app()
    target = log_then_deprecate(app.lens.store_path, real_embedder, settings)

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            before = await asyncio.to_thread(_retrievals, app.lens.store_path)
            app.push_screen(ReplayScreen())
            await settle(pilot)
            screen = app.screen
            first = screen.report["queries"][0]
            assert first["query"] == QUERIES[0] and first["changed"] and target in first["left"]
            assert target in str(screen.query_one("#replay-before").render())
            assert "deprecated" in str(screen.query_one("#replay-before").render())
            assert screen.query_one("#replay-queries").row_count == len(screen.report["queries"])
            assert await asyncio.to_thread(_retrievals, app.lens.store_path) == before

    asyncio.run(run())


def pin_log(path) -> None:
    """Every retrieval's time fixed (one minute apart): the access log shows them."""
    from memlens.store import db

    conn = db.connect(path, create=False)
    try:
        with conn:
            conn.execute("UPDATE audit SET ts = strftime('%Y-%m-%dT%H:%M:%SZ', '2026-11-20 10:00:00', '+' || seq || ' minutes')"
                         " WHERE action = 'retrieval'")
    finally:
        conn.close()


def _golden_and_log(path, embedder, settings) -> str:
    from memlens import Memory
    from memlens.replay import golden

    with Memory.open(path, embedder=embedder, settings=settings) as mem:
        first = [mem.search(q, k=5) for q in QUERIES][0]
        target = next(r.entry.id for r in first.results if "mandatory" not in r.flags)
        mem.context(QUERIES[0], k=5)  # the same search, to build a context: its results went into it
        golden.add(mem, QUERIES[0], target, within=5)
    pin_log(path)
    return target


def test_impact_screen_access_log_and_preview(make_app, snap_compare, settings, real_embedder):
    from memlens.tui.screens.impact import ImpactScreen

    app = make_app()
    target = _golden_and_log(app.lens.store_path, real_embedder, settings)

    async def run_before(pilot):
        await settle(pilot)
        pilot.app.push_screen(ImpactScreen(target))
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.model
def test_impact_screen_writes_nothing(make_app, settings, real_embedder):
    import asyncio

    from memlens.tui.screens.impact import ImpactScreen

    from ..conftest import snapshot_store

    app = make_app()
    target = _golden_and_log(app.lens.store_path, real_embedder, settings)

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            before = await asyncio.to_thread(snapshot_store, app.lens.store_path)
            app.push_screen(ImpactScreen(target))
            await settle(pilot)
            data = app.screen.data
            assert data is not None and data["preview"]["golden"][0]["expect"] == target
            assert [a["in_context"] for a in data["access"]["accesses"]][:1] == [True]
            assert app.screen.query_one("#impact-access").row_count == len(data["access"]["accesses"]) >= 2
            assert await asyncio.to_thread(snapshot_store, app.lens.store_path) == before

    asyncio.run(run())
