"""Deterministic app fixtures for snapshot and pilot tests.

Fixed terminal size (per test), fixed clock, pinned theme, no cursor blink,
workers awaited, and the only run-dependent numbers (latencies, cache age,
write timestamps) pinned by ``pin_lens`` at the service edge (the bundles the
screens receive). The engine, the store and the model are the real ones.
"""

from __future__ import annotations

import asyncio
import shutil
from datetime import datetime, timezone

import pytest

FIXED_NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
PINNED_MS = {"parse": 0.2, "embed": 4.1, "vector": 2.3, "lexical": 1.8, "score": 0.6, "rerank": 0.0, "policy": 0.5,
             "budget": 0.0, "total": 9.5}


def pin_bundle(bundle):
    t = bundle.trace
    t.latency_ms = {k: (PINNED_MS.get(k, 0.0) if not t.cache_hit or k == "total" else 0.0) for k in t.latency_ms}
    if t.cache_hit:
        t.latency_ms["total"] = 0.3
    if t.cache.age_s is not None:
        t.cache.age_s = 12.0
    if t.cache.invalidated_by and "ts" in t.cache.invalidated_by:
        t.cache.invalidated_by = {**t.cache.invalidated_by, "ts": "2026-11-20T11:59:58Z", "seq": 0}
    t.now = "2026-11-20T12:00:00Z"
    return bundle


def pin_lens(lens):
    """Every bundle a screen receives from ``lens`` (searches, context packs, answers) goes through ``pin_bundle``."""
    search, context = lens.search, lens.context

    def pinned_search(*args, **kwargs):
        return pin_bundle(search(*args, **kwargs))

    def pinned_context(*args, **kwargs):
        text, bundle = context(*args, **kwargs)  # the pack's text shows none of the pinned numbers
        return text, pin_bundle(bundle)

    search_for_answer = lens.search_for_answer

    def pinned_search_for_answer(*args, **kwargs):
        bundle, seq = search_for_answer(*args, **kwargs)
        return pin_bundle(bundle), seq

    lens.search, lens.context, lens.search_for_answer = pinned_search, pinned_context, pinned_search_for_answer
    return lens


@pytest.fixture(scope="session")
def tui_demo_store(tmp_path_factory, settings, real_embedder):
    """Demo entries and the demo task history, imported once."""
    from memlens import Memory
    from memlens.demo import load_tasks

    from ..conftest import DEMO

    path = tmp_path_factory.mktemp("tui") / "demo.db"
    with Memory.open(path, settings=settings, embedder=real_embedder) as m:
        m.import_jsonl(DEMO)
        load_tasks(m)
    return path


@pytest.fixture
def snap_dir(request):
    """A per-test folder whose path is the same on every run (paths show up on screen)."""
    import re
    import tempfile
    from pathlib import Path

    d = Path(tempfile.gettempdir()) / "memlens-tui" / re.sub(r"[^\w.-]", "_", request.node.name)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make_app(tui_demo_store, snap_dir, settings, real_embedder):
    """``make_app(empty=False, **app_kwargs)`` → a MemlensApp on a private copy of the demo store."""
    from memlens.tui.app import create_app

    tmp_path = snap_dir
    made = []

    def make(*, empty: bool = False, store=None, **kwargs):
        path = store or tmp_path / "app.db"
        if store is None and not empty:
            shutil.copy(tui_demo_store, path)
        kwargs.setdefault("watch", False)
        kwargs.setdefault("cursor_blink", False)
        kwargs.setdefault("active_wing", "lifecore_ros2")
        kwargs.setdefault("embedder", real_embedder)
        app = create_app(path, settings=settings, now=lambda: FIXED_NOW, **kwargs)
        pin_lens(app.lens)
        app.theme = "textual-dark"
        made.append(app)
        return app

    return make


async def settle(pilot, rounds: int = 6) -> None:
    """Let timers fire and every worker finish, several times over (work begets work). A worker cancelled meanwhile
    (an exclusive poll replaced by the next one, on a loaded machine) has finished too: the wait goes on."""
    from textual.worker import WorkerCancelled

    for _ in range(rounds):
        await pilot.pause(0.05)
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:
            pass
    await pilot.pause()


async def type_at_end(pilot, screen, keys: str = " Draft.") -> None:
    """Type ``keys`` at the end of an open entry's text, as a user does (an unsaved edit)."""
    text = screen.query_one("#f-text")
    text.focus()
    text.move_cursor(text.document.end)
    await pilot.press(*keys)


async def search(pilot, query: str) -> None:
    """Type a query the way a user does and wait for its results."""
    main = pilot.app.main
    main.query_one("#query").value = query
    await settle(pilot)
    from memlens.tui.screens.main import DEBOUNCE_S

    await pilot.pause(DEBOUNCE_S + 0.1)
    await settle(pilot)


def run(app, body, size: tuple[int, int] = (120, 40)) -> None:
    """Run ``app`` in a test terminal of ``size``, settled, and ``await body(pilot)`` in it."""
    async def main():
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            await body(pilot)

    asyncio.run(main())


async def until(pilot, done, timeout: float = 10.0) -> bool:
    """Let the app run until ``done()`` holds (timers and polls fire late on a loaded machine); whether it did."""
    for _ in range(int(timeout / 0.05)):
        if done():
            return True
        await pilot.pause(0.05)
    return done()


def screen_lines(svg: str, styled: bool = False) -> list[str]:
    """The text of a snapshot's SVG, one string per terminal row (for reading a mismatch in a log); ``styled``
    puts each run's style (its CSS) and each row's background blocks in, for mismatches of colour or style."""
    import html
    import re

    svg = re.sub(r"terminal-\d+-", "terminal-", svg)  # a fresh screenshot's class names carry a number
    css = dict(re.findall(r"\.(terminal-r\d+) \{ ([^}]*) \}", svg))
    rows: dict[float, list[str]] = {}
    for m in re.finditer(r'<text class="([^"]*)"[^>]*y="([0-9.]+)"[^>]*>(.*?)</text>', svg):
        text = html.unescape(re.sub("<[^>]+>", "", m.group(3))).replace("\xa0", " ")
        rows.setdefault(float(m.group(2)), []).append(f"[{css.get(m.group(1), m.group(1))}]{text}" if styled else text)
    if styled:
        for m in re.finditer(r'<rect fill="([^"]*)" x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)"', svg):
            rows.setdefault(float(m.group(3)), []).append(f"<{m.group(1)} x={m.group(2)} w={m.group(4)}>")
    return ["".join(rows[y]) for y in sorted(rows)]


@pytest.fixture
def snap_compare(snap_compare, request):
    """The plugin's comparison; a mismatch fails with the rows that differ, by text or else by style (a CI log
    has no report file; snapshot_report.html shows the pictures)."""
    import difflib
    import pickle

    from pytest_textual_snapshot import node_to_report_path

    def compare(*args, **kwargs) -> bool:
        __tracebackhide__ = True
        if snap_compare(*args, **kwargs):
            return True
        data = pickle.loads(node_to_report_path(request.node).read_bytes())
        for styled in (False, True):
            expected, actual = screen_lines(data[1], styled), screen_lines(data[2], styled)
            diff = list(difflib.unified_diff(expected, actual, "snapshot", "this run", n=1, lineterm=""))
            if diff:
                break
        raise AssertionError(f"snapshot mismatch; the rows that differ{' in style' if styled else ''}:\n"
                             + "\n".join(diff[:80]))

    return compare
