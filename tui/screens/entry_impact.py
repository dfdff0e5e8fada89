"""What the entry screen shows of replay: the impact preview before a write, and the entry's access log.

Before an edit, a status change or a deletion is written, the engine previews it (the write runs inside a
transaction it rolls back: ``Lens.preview``) and this modal lists the golden queries that would fail and the
recently logged queries whose ranked lists would change; the write happens only on an explicit yes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Footer, Static

from memlens.models import parse_ts

from .confirm import ConfirmScreen
from .impact import _clip, preview_text


def has_impact(p: dict[str, Any] | None) -> bool:
    """A golden query that passes today would fail, or a recent query's ranked list would change."""
    return bool(p) and (any(c["was_ok"] for c in p["golden"]) or p["summary"]["changed"] > 0)


def checked_anything(p: dict[str, Any] | None) -> bool:
    return bool(p) and (p["golden_checked"] > 0 or p["summary"]["replayed"] > 0)


def verdict(p: dict[str, Any]) -> Text:
    """One line: how many golden queries would fail, how many recent queries would change."""
    newly = sum(1 for c in p["golden"] if c["was_ok"])
    s = p["summary"]
    out = Text()
    if p["golden_checked"]:
        out.append(f"golden: {newly} of {p['golden_checked']} would fail",
                   "bold red" if newly else "green")
        out.append(" · ")
    out.append(f"recent queries: {s['changed']} of {s['replayed']} would change", "bold yellow" if s["changed"] else "green")
    return out


class ImpactConfirmScreen(ConfirmScreen):
    """The yes/no question with the impact preview under it (nothing has been written yet)."""

    DEFAULT_CSS = """
    ImpactConfirmScreen > Vertical { width: 96; max-width: 100%; max-height: 100%; }
    ImpactConfirmScreen #confirm-verdict { margin-bottom: 1; }
    ImpactConfirmScreen #confirm-impact { height: auto; max-height: 20; border: round $primary-darken-1;
                                          border-title-color: $text-muted; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, title: str, body: str, preview: dict[str, Any], *, yes: str = "Yes", no: str = "No") -> None:
        super().__init__(title, body, yes=yes, no=no)
        self.preview = preview

    def on_mount(self) -> None:  # (ConfirmScreen's own on_mount runs too: Textual calls each class's handler)
        self._fit(self.app.size.height)

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.height)

    def _fit(self, rows: int) -> None:
        """The preview scrolls in what the rest leaves of the screen (up to 20 rows): in a terminal of 24 rows the
        question and its answers stay on screen with it."""
        self.query_one("#confirm-impact").styles.max_height = max(5, min(20, rows - 17))

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, id="confirm-title", markup=False)
            if self.body:
                yield Static(self.body, id="confirm-body", markup=False)
            yield Static(verdict(self.preview), id="confirm-verdict")
            with VerticalScroll(id="confirm-impact") as box:
                box.border_title = "Impact preview · nothing is written until you confirm"
                yield Static(preview_text(self.preview))
            with Horizontal():
                yield Button(f"{self.yes} (y)", id="yes", variant="error")
                yield Button(f"{self.no} (n / esc)", id="no", variant="primary")
        yield Footer()


def access_table(rows: list[dict[str, Any]], now: datetime, width: int = 48) -> Table:
    """The access log, compact: when, client, rank, whether it went into a context, the query."""
    table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False, header_style="bold", expand=False)
    table.add_column("when", width=11, no_wrap=True)
    table.add_column("client", width=8, no_wrap=True, overflow="ellipsis")
    table.add_column("#", width=2, justify="right")
    table.add_column("ctx", width=3)
    table.add_column("query", no_wrap=True, overflow="ellipsis", max_width=max(10, width - 32))
    for a in rows:
        try:
            when = f"{parse_ts(a['ts']):%m-%d %H:%M}"
        except (ValueError, TypeError):
            when = str(a["ts"])[:11]
        table.add_row(when, Text(_clip(a["client"] or "", 8), style="cyan"), str(a["rank"]),
                      Text("✓", style="green") if a["in_context"] else "", Text(_clip(a["query"] or "", 60)))
    return table
