"""The UI thread stays responsive while a search is slow.

``Lens.search`` is wrapped to block (it runs in a thread worker, so only that
worker waits) for at least ``SLOW_S``: the test holds it until it has done its
keys, so the search is certainly in flight while they are measured, however
busy the machine. Meanwhile keys are handled, reactives change, screens come
and go and the input takes text; the results arrive once the search is let go.
A UI that waited for the search would take until the search's own time-out
(10 s) to handle a key; the limits below stay well under that and above what a
busy shared machine adds to a key the UI handles at once.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from .conftest import settle

pytestmark = pytest.mark.model

SIZE = (120, 40)
SLOW_S = 2.0
KEY_LIMIT_S = 2.5  # one key handled end to end (pilot.press returns once the app is idle again); blocked: ~10 s
SCREEN_LIMIT_S = 3.0  # push or pop the help screen (it renders Markdown)


class SlowSearch:
    """Wraps ``app.lens.search``: a call waits until its query is released (at most 10 s), then runs the real search."""

    def __init__(self, app) -> None:
        self.real = app.lens.search
        self.calls: list[str] = []
        self.gates: dict[str, threading.Event] = {}
        self.done: list[str] = []
        app.lens.search = self

    def _gate(self, query: str) -> threading.Event:
        return self.gates.setdefault(query, threading.Event())

    def __call__(self, query, **kwargs):
        self.calls.append(query)
        self._gate(query).wait(10)
        try:
            return self.real(query, **kwargs)
        finally:
            self.done.append(query)

    def release(self, query: str | None = None) -> None:
        for q in [query] if query is not None else [*self.gates, *self.calls]:
            self._gate(q).set()


async def wait_until(pilot, condition, timeout: float, state=lambda: "") -> float:
    """Pause in small steps until ``condition()``; seconds waited (never waits on workers)."""
    t0 = time.perf_counter()
    while not condition():
        if time.perf_counter() - t0 > timeout:
            raise AssertionError(f"condition not met within {timeout} s {state()}")
        await pilot.pause(0.02)
    return time.perf_counter() - t0


async def timed_press(pilot, key: str) -> float:
    t0 = time.perf_counter()
    await pilot.press(key)
    return time.perf_counter() - t0


def test_keys_and_screens_are_handled_while_a_search_blocks(make_app, monkeypatch):
    # typing under load can pause longer than the real 0.3 s debounce; a search per pause would
    # make the expected call list depend on the machine's speed
    monkeypatch.setattr("memlens.tui.screens.main.DEBOUNCE_S", 1.5)
    from memlens.tui.screens.help import HelpScreen

    app = make_app()
    slow = SlowSearch(app)

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)  # model loaded, working memory shown
            main = app.main
            await pilot.press("f1", "escape")  # the help screen once before, so Markdown is imported
            for key in "callbacks blocking":
                await pilot.press("space" if key == " " else key)
            await pilot.press("enter")  # search now; the focus moves to the results
            started = time.perf_counter()
            await wait_until(
                pilot,
                lambda: slow.calls == ["callbacks blocking"],
                5.0,  # a precondition, not the measured time
                lambda: (
                    f"calls={slow.calls} query={main.query_one('#query').value!r} status={main.query_one('#status').render()}"
                ),
            )
            assert str(main.query_one("#status").render()) == "searching…"

            keys = {}
            keys["d (show dropped)"] = await timed_press(pilot, "d")
            assert main.show_dropped is True
            keys["d (hide dropped)"] = await timed_press(pilot, "d")
            assert main.show_dropped is False
            keys["/ (focus search)"] = await timed_press(pilot, "slash")
            assert app.focused is main.query_one("#query")
            keys["tab (focus results)"] = await timed_press(pilot, "tab")
            assert app.focused is not main.query_one("#query")
            screens = {"f1 (push help)": await timed_press(pilot, "f1")}
            assert isinstance(app.screen, HelpScreen)
            screens["escape (pop help)"] = await timed_press(pilot, "escape")
            assert app.screen is main

            print("during the blocked search:", {k: round(v, 3) for k, v in {**keys, **screens}.items()})
            assert main.bundle is None and slow.calls == ["callbacks blocking"]
            assert max(keys.values()) < KEY_LIMIT_S, keys
            assert max(screens.values()) < SCREEN_LIMIT_S, screens

            await wait_until(pilot, lambda: time.perf_counter() - started >= SLOW_S, SLOW_S)
            assert main.bundle is None  # still searching after SLOW_S
            slow.release()
            await wait_until(pilot, lambda: main.bundle is not None, 10)
            assert main.bundle.results[0].entry.id == "lc-arch-001"
            assert main.query_one("#results").row_count == len(main.bundle.results)
            assert "results" in str(main.query_one("#status").render())

    try:
        asyncio.run(run())
    finally:
        slow.release()


def test_typing_during_a_slow_search_then_the_last_query_wins(make_app, monkeypatch):
    # typing under load can pause longer than the real 0.3 s debounce; a search per pause would
    # make the expected call list depend on the machine's speed
    monkeypatch.setattr("memlens.tui.screens.main.DEBOUNCE_S", 1.5)
    app = make_app()
    slow = SlowSearch(app)

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            main = app.main
            query = main.query_one("#query")
            await pilot.press(*"callbacks", "enter")
            await wait_until(pilot, lambda: slow.calls == ["callbacks"], 5.0)

            await pilot.press("slash", "end")  # back in the input (focusing it selects all), caret at the end
            per_key = [await timed_press(pilot, "space" if key == " " else key) for key in " blocking"]
            assert query.value == "callbacks blocking"
            assert main.bundle is None
            print("typing during the blocked search:", [round(v, 3) for v in per_key])
            assert max(per_key) < KEY_LIMIT_S, per_key

            # the debounced search for the whole query starts while the first one still blocks
            await wait_until(pilot, lambda: slow.calls == ["callbacks", "callbacks blocking"], 5.0)
            slow.release("callbacks blocking")
            await wait_until(pilot, lambda: main.bundle is not None, 10)
            assert main.bundle.trace.query == "callbacks blocking"
            shown = [r.entry.id for r in main.bundle.results]

            slow.release("callbacks")  # the older search finishes last: its result must not replace the newer one
            await wait_until(pilot, lambda: "callbacks" in slow.done, 10)
            await settle(pilot)
            assert main.query_text == "callbacks blocking"
            assert main.bundle.trace.query == "callbacks blocking"
            assert [r.entry.id for r in main.bundle.results] == shown
            assert shown[0] == "lc-arch-001"

    try:
        asyncio.run(run())
    finally:
        slow.release()


def test_quitting_is_not_held_up_by_a_blocked_search(make_app, monkeypatch):
    # typing under load can pause longer than the real 0.3 s debounce; a search per pause would
    # make the expected call list depend on the machine's speed
    monkeypatch.setattr("memlens.tui.screens.main.DEBOUNCE_S", 1.5)
    app = make_app()
    slow = SlowSearch(app)

    async def run() -> float:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press(*"callbacks", "enter")
            await wait_until(pilot, lambda: slow.calls == ["callbacks"], 5.0)  # a precondition, not the measured time
            t0 = time.perf_counter()
            await pilot.press("q")
        took = time.perf_counter() - t0  # the app has shut down, the search is still blocked
        assert slow.done == []
        slow.release()  # else asyncio.run would wait for the worker thread when it shuts its executor down
        return took

    try:
        assert asyncio.run(run()) < KEY_LIMIT_S
    finally:
        slow.release()
