"""Snapshots of the main screen and its important states (look at snapshot_report.html before --snapshot-update)."""

from __future__ import annotations

import asyncio
import threading

from .conftest import search, settle, until

SIZE = (120, 40)


def test_empty_store_offers_the_demo(make_app, snap_compare):
    from textual.widgets import Footer

    from memlens.tui.screens.first_run import FirstRunScreen

    app = make_app(empty=True)

    def shown() -> bool:  # the dialog comes from a worker's answer; its footer fills in after its first bindings
        screen = app.screen
        return (isinstance(screen, FirstRunScreen) and screen.query_one("#demo").has_focus
                and bool(screen.query_one(Footer).children)
                and app.main.query_one("#wm").size.height >= 5)  # the working memory under it laid out whole

    async def run_before(pilot):
        await settle(pilot)
        assert await until(pilot, shown), f"the first-run dialog is not shown whole: {app.screen!r}"
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_demo_main_screen(make_app, snap_compare):
    async def run_before(pilot):
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_results_with_trace(make_app, snap_compare):
    async def run_before(pilot):
        await search(pilot, "callbacks blocking")

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_trace_of_a_conflicting_result(make_app, snap_compare):
    async def run_before(pilot):
        await search(pilot, "wing=lifecore_ros2|ros2 ReentrantCallbackGroup service calls")
        table = pilot.app.main.query_one("#results")
        table.focus()
        ids = [r.entry.id for r in pilot.app.main.bundle.results]
        table.move_cursor(row=ids.index("ros2-arch-007"))
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_dropped_candidates_shown(make_app, snap_compare):
    async def run_before(pilot):
        await search(pilot, "publisher QoS depth wing=lifecore_ros2|ros2")
        pilot.app.main.query_one("#results").focus()
        await pilot.press("d")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_invalid_query_is_refused_inline(make_app, snap_compare):
    async def run_before(pilot):
        await search(pilot, "wings=ros2 callbacks")

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_stale_results_after_an_outside_write(make_app, snap_compare, tmp_path):
    from memlens import Memory

    app = make_app(watch=True, poll_interval=0.2)

    async def run_before(pilot):
        await search(pilot, "callbacks blocking")
        # another process's connection writes to the active wing
        with Memory.open(app.lens.store_path, embedder=app.lens.mem.embedder) as other:
            other.add("Timer callbacks finish within 10 ms.", wing="lifecore_ros2", id="agent-001", type="invariant")
            other.tasks.block("task-999", "waiting for the lidar driver fix", blocked_at="2026-11-20T11:00:00Z")
        await until(pilot, lambda: app.main.stale is not None)  # the poll (every 0.2 s) hears of the write
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_results_focused_after_escape(make_app, snap_compare):
    """Escape leaves the search box: the footer then names the letter keys, which act on the results."""
    async def run_before(pilot):
        await search(pilot, "callbacks blocking")
        await pilot.press("escape")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_stale_results_with_the_cursor_on_the_results(make_app, snap_compare):
    """Out of the search box, the stale line says that r re-runs (in it, Enter does)."""
    from memlens import Memory

    app = make_app(watch=True, poll_interval=0.2)

    async def run_before(pilot):
        await search(pilot, "callbacks blocking")
        await pilot.press("escape")
        with Memory.open(app.lens.store_path, embedder=app.lens.mem.embedder) as other:
            other.add("Timer callbacks finish within 10 ms.", wing="lifecore_ros2", id="agent-001", type="invariant")
        await until(pilot, lambda: app.main.stale is not None)  # the poll (every 0.2 s) hears of the write
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


class GatedEmbedder:
    """The real embedder, except that ``load()`` waits until the test opens the gate (the model is "loading")."""

    def __init__(self, real, gate: threading.Event, entered: threading.Event) -> None:
        self._real, self._gate, self._entered = real, gate, entered

    def load(self) -> None:
        self._entered.set()
        self._gate.wait(120)  # a bound, not a delay: the test opens the gate once it has its screenshot
        self._real.load()

    def __getattr__(self, name):
        return getattr(self._real, name)


def test_model_loading(make_app, snap_compare, real_embedder):
    gate, entered = threading.Event(), threading.Event()
    app = make_app(embedder=GatedEmbedder(real_embedder, gate, entered))

    async def run_before(pilot):
        # the app is inside the model load (and stays there); everything else it started has finished
        assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, 60)
        for _ in range(3):
            others = [w for w in pilot.app.workers if w.group != "model"]
            if others:  # (an empty list would mean every worker, the gated one too)
                await pilot.app.workers.wait_for_complete(others)
            await pilot.pause()

    try:
        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
        assert not gate.is_set() and app.model_status == "loading…"
    finally:
        gate.set()


def test_usable_at_80x24(make_app, snap_compare):
    async def run_before(pilot):
        await search(pilot, "callbacks blocking")

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)
