"""Snapshots of the assistant shell and the retrieval metrics (look at snapshot_report.html before --snapshot-update).

The metrics come from the store's audit rows, written by real searches with
the real model; their timestamps and latencies are then pinned in the store,
because the tests' ``pin_lens`` only pins what the UI receives from a
search, not what the engine logs.
"""

from __future__ import annotations

import json
from datetime import timedelta

from .conftest import FIXED_NOW, PINNED_MS, settle

SIZE = (120, 40)
LOGGED = [  # query, profile, latency factor (None: expected cache hit)
    ("callbacks blocking", "memory", 1.0),
    ("lifecycle transitions publish", "memory", 1.6),
    ("callbacks blocking", "memory", None),
    ("/memory why did lidar_filter hang", None, 0.8),
    ("publisher QoS depth", "memory", 2.4),
    ("executor scheduling latency benchmark", "academic", 1.2),
    ("callbacks blocking", "memory", None),
    ("watchdog timers under sim time", "memory", 3.1),
]


def log_pinned_retrievals(path, embedder, settings) -> None:
    """Real searches log real rows; then every row gets a fixed time and fixed latencies."""
    from memlens import Memory
    from memlens.models import format_ts

    with Memory.open(path, embedder=embedder, settings=settings) as mem:
        for query, profile, _ in LOGGED:
            mem.search(query, active_wing="lifecore_ros2", profile=profile, now=FIXED_NOW)
        rows = mem.conn.execute("SELECT seq, detail FROM audit WHERE action = 'retrieval' ORDER BY seq").fetchall()
        assert len(rows) == len(LOGGED)
        with mem.conn:
            for i, ((seq, detail), (_, _, factor)) in enumerate(zip(rows, LOGGED)):
                d = json.loads(detail)
                assert d["cache_hit"] == (factor is None), d["query"]
                lat = d["latency_ms"]
                d["latency_ms"] = ({k: 0.3 if k == "total" else 0.0 for k in lat} if factor is None
                                   else {k: round(PINNED_MS.get(k, 0.0) * factor, 3) for k in lat})
                ts = format_ts(FIXED_NOW - timedelta(seconds=47 * (len(rows) - i)))
                mem.conn.execute("UPDATE audit SET ts = ?, detail = ? WHERE seq = ?", (ts, json.dumps(d), seq))


async def submit(pilot, line: str) -> None:
    prompt = pilot.app.screen.query_one("#prompt")
    prompt.value = line
    prompt.cursor_position = len(line)
    prompt.focus()
    await pilot.press("enter")
    await settle(pilot)


def test_shell_after_two_questions(make_app, snap_compare):
    async def run_before(pilot):
        await settle(pilot)
        pilot.app.open_shell()
        await settle(pilot)
        await submit(pilot, "why do callbacks block")
        await submit(pilot, "/memory why did lidar_filter hang")
        await pilot.press("pageup")  # back to the top: the first exchange, folded, above the second
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_shell_command_error(make_app, snap_compare):
    async def run_before(pilot):
        await settle(pilot)
        pilot.app.open_shell()
        await settle(pilot)
        await submit(pilot, ':task complete t-100 --intent "Fix shutdown"')
        await submit(pilot, ":deprecat lc-arch-004")

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_shell_help(make_app, snap_compare):
    async def run_before(pilot):
        await settle(pilot)
        pilot.app.open_shell()
        await settle(pilot)
        await submit(pilot, ":help")

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_metrics_after_searches(make_app, snap_compare, settings, real_embedder):
    app = make_app()
    log_pinned_retrievals(app.lens.store_path, real_embedder, settings)

    async def run_before(pilot):
        await settle(pilot)
        pilot.app.open_metrics()
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_metrics_empty_state(make_app, snap_compare):
    async def run_before(pilot):
        await settle(pilot)
        pilot.app.open_metrics()
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_metrics_refresh_picks_up_new_searches(make_app):
    """Empty at first; after a search elsewhere, ``r`` shows it, with the engine's own percentiles."""
    import asyncio

    from memlens.stats import retrieval_stats

    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.open_metrics()
            await settle(pilot)
            screen = app.screen
            assert screen.has_class("empty")
            assert "audit.level" in str(screen.query_one("#metrics-empty").render())
            for query in ("callbacks blocking", "callbacks blocking", "lifecycle transitions"):
                await asyncio.to_thread(app.lens.search, query)
            await pilot.press("r")
            await settle(pilot)
            assert not screen.has_class("empty")
            assert screen.query_one("#recent").row_count == 3
            assert len(screen.query_one("#spark-total").data) == 3
            stats = retrieval_stats(await asyncio.to_thread(app.lens.retrievals))
            assert stats["cache_hits"] == 1
            head = screen.query_one("#cache").content.renderables[0]
            assert head.plain.startswith(f"cache hit rate {stats['cache_hit_rate']:.0%} (1 of 3)")
            await pilot.press("escape")
            await settle(pilot)
            assert app.screen is app.main

    asyncio.run(run())
