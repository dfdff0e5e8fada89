"""Working memory pane: the last completed tasks and the active blockers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from .bars import age


def render_window(window: Any, now: datetime) -> Group:
    """Newest task first; each with outcome, id, age and its intent (or why it is opaque), each text on one line cut
    where its column ends."""
    parts: list[Any] = [Text("Recent tasks", style="bold")]
    tasks = Table.grid(padding=(0, 1), expand=True)
    tasks.add_column(width=1)
    tasks.add_column(ratio=1)
    tasks.add_column(justify="right", style="dim")
    for t in reversed(window.tasks):  # newest first on screen
        ok = t.outcome.value == "success"
        tasks.add_row(Text("✓" if ok else "✗", style="green" if ok else "bold red"), Text(t.task_id, style="bold"),
                      age(t.completed_at, now))
        intent = t.intent or ("opaque (requires_context=false)" if not t.requires_context else "")
        if intent:
            tasks.add_row("", _line(intent, style="" if t.intent else "dim italic"), "")
    parts.append(tasks if window.tasks else Text("  none yet", style="dim"))
    parts.append(Text(""))
    parts.append(Text(f"Active blockers ({len(window.blockers)})", style="bold"))
    blockers = Table.grid(padding=(0, 1), expand=True)
    blockers.add_column(width=1)
    blockers.add_column(ratio=1)
    blockers.add_column(justify="right", style="dim")
    for b in window.blockers:
        blockers.add_row(Text("■", style="bold red"), Text(b.task_id, style="bold"), age(b.blocked_at, now))
        blockers.add_row("", _line(b.reason), "")
    parts.append(blockers if window.blockers else Text("  none", style="dim"))
    return Group(*parts)


def _line(text: str, style: str = "") -> Text:
    """``text`` on one line, cut with "…" where its column ends (counted in cells: a CJK character or an emoji takes
    two; a cut by characters left a wide text too long, wrapped onto a line of its own "…")."""
    line = " ".join(text.split())
    if len(line) > LINE_CHARS:  # (what a pane can show of it, and more: the cut below is by cells, and says so)
        line = line[:LINE_CHARS] + "…"
    return Text(line, style=style, no_wrap=True, overflow="ellipsis")


LINE_CHARS = 4096


AGE_TICK_S = 5.0


class WorkingMemoryPane(Static):
    """Shows ``Lens.window()``; refreshed by the app when the store changes, and its ages every ``AGE_TICK_S``
    from ``clock`` (a task completed a minute ago must not still read ``0s``)."""

    DEFAULT_CSS = """
    WorkingMemoryPane { padding: 0 1; }
    """

    def on_mount(self) -> None:
        self.set_interval(AGE_TICK_S, self._tick)

    def show(self, window: Any, now: datetime, clock: Callable[[], datetime] | None = None) -> None:
        self._last = (window, now)
        self._clock = clock
        self.update(render_window(window, now))

    def _tick(self) -> None:
        last, clock = getattr(self, "_last", None), getattr(self, "_clock", None)
        if last is not None and clock is not None:
            self.show(last[0], clock(), clock)

    def on_resize(self) -> None:
        last = getattr(self, "_last", None)
        if last:
            self.update(render_window(last[0], last[1]))
