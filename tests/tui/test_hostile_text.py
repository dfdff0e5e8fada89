"""Text the app did not write (entries, queries in the retrieval log, task intents, file names) is drawn as text:
markup in it is neither applied nor able to break a screen, and its control characters never reach the terminal."""

from __future__ import annotations

import asyncio

from .conftest import search, settle

SIZE = (120, 40)
MARKUP = "[/oops] [b]bold?[/b] [link=http://127.0.0.1:9/]x[/link] [@click=app.quit]quit[/]"
CONTROLS = "\x1b[2J\x1b]0;pwned\x07\rFAKE"
HOSTILE = f"Harbour tides {MARKUP} {CONTROLS}"


def terminal_output(app) -> str:
    """What the app would write to the terminal for its whole current screen."""
    return app.screen._compositor.render_full_update().render_segments(app.console)


def screen_text(app) -> str:
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", app.export_screenshot())).replace("\xa0", " ")


def test_hostile_stored_text_is_drawn_as_text_on_every_screen(make_app, settings, real_embedder, tmp_path):
    from memlens import Memory
    from memlens.ingest import index

    app = make_app()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / f"blob [oops] [b]x{CONTROLS.replace('/', '')}.bin").write_bytes(b"\x00\x01" * 200)
    (workspace / "ok.py").write_text("def tides():\n    return 'harbour'\n")
    with Memory.open(app.lens.store_path, settings=settings, embedder=real_embedder) as m:
        e = m.add(HOSTILE + "\nThe tide tables of the north harbour.", wing="lifecore_ros2", title=HOSTILE)
        m.search(HOSTILE, active_wing="lifecore_ros2")  # a logged query: metrics, replay and the access log show it
        m.tasks.complete("t-hostile", HOSTILE)
        m.tasks.block("t-blocked", HOSTILE)
        index(m, workspace, wing="code")
    seen: dict[str, str] = {}
    outputs: list[str] = []

    async def visit(pilot, name):
        await settle(pilot)
        outputs.append(terminal_output(pilot.app))
        seen[name] = screen_text(pilot.app)

    async def body(pilot):
        await search(pilot, "harbour tides")
        await visit(pilot, "main")
        pilot.app.open_entry(e.id)
        await visit(pilot, "entry")
        await pilot.press("ctrl+t")  # the delete confirmation quotes the title
        await visit(pilot, "delete")
        await pilot.press("n")
        await settle(pilot)
        await pilot.press("escape")
        for opener, name in ((pilot.app.open_metrics, "metrics"), (pilot.app.open_index, "index")):
            opener()
            await visit(pilot, name)
            await pilot.press("escape")
            await settle(pilot)

    async def main():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await body(pilot)

    asyncio.run(main())
    assert set(seen) == {"main", "entry", "delete", "metrics", "index"}
    for out in outputs:
        assert "\x1b[2J" not in out and "\x1b]0;" not in out and "pwned\x07" not in out
    assert "Harbour tides [/oops] [" in seen["main"]  # the title column cuts it there, drawn as typed
    assert "Harbour tides [/oops] [b]bold?[/b] [link=http://127.0.0.1" in seen["entry"]
    assert "[/oops] [b]bold?[/b]" in seen["delete"]
    assert "Harbour tides [/oops]" in seen["metrics"]
    assert "blob [oops] [b]x[2J]0;pwnedFAKE.bin" in seen["index"]


def test_a_wide_task_intent_is_cut_to_the_panes_cells_on_one_line():
    """A task intent with CJK characters (or a long blocker) was cut by characters, to a width the pane's column does
    not have: it wrapped onto a second line holding only the "…" and the intent's last letters."""
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from rich.console import Console

    from memlens.tui.widgets.working_memory import render_window

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    task = SimpleNamespace(task_id="t-1", intent="日本語 Implement a really careful migration of the whole store",
                           completed_at=now, outcome=SimpleNamespace(value="success"), requires_context=True)
    blocker = SimpleNamespace(task_id="t-2", reason="waiting for the hardware team to flash the lidar firmware again",
                              blocked_at=now)
    window = SimpleNamespace(tasks=[task], blockers=[blocker])
    console = Console(width=40, record=True, color_system=None)
    console.print(render_window(window, now))
    lines = [ln.rstrip() for ln in console.export_text().splitlines() if ln.strip()]
    cut = [ln for ln in lines if ln.endswith("…")]
    assert len(cut) == 2 and "日本語" in cut[0] and "waiting for" in cut[1], lines  # each on its own one line
    assert [ln for ln in lines if "…" in ln] == cut, lines
    # zero-width characters take no cell: the tail after them is shown (a cut by characters hid it without a "…")
    blocker.reason = "Blocked by" + "\u200b" * 60 + " SECRET TAIL"
    console = Console(width=40, record=True, color_system=None)
    console.print(render_window(window, now))
    assert "SECRET TAIL" in console.export_text()
