"""Replay: the latest logged queries run again on the store as it is now, their two ranked lists side by side.

The engine does the work (``memlens.replay.replay``; replays are not logged). The table lists the replayed
queries, changed ones marked; the two panes show the selected query's list as it was logged and as it comes
back now: entries that left in red (with the reason), entries that entered in green, moved ones in yellow
with their old and new ranks and the score component that changed most.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

LAST = 20
TITLE = "Replay: re-run the latest logged queries and diff their rankings"


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def ranked_list(q: dict[str, Any], titles: dict[str, str], side: str) -> Text:
    """One side of the diff: ``before`` (as logged) or ``after`` (now), changes highlighted."""
    ids = q.get(side, [])
    moved = {m["id"]: m for m in q.get("moved", [])}
    out = Text()
    if not ids:
        out.append("no results", style="dim")
    for rank, eid in enumerate(ids, 1):
        style, mark, note = "", "  ", ""
        if side == "before" and eid in q.get("left", []):
            style, mark, note = "red", "- ", q["why"].get(eid, "")
        elif side == "after" and eid in q.get("entered", []):
            style, mark = "green", "+ "
        elif eid in moved:
            m = moved[eid]
            style, mark = "yellow", "~ "
            if side == "after":
                note = f"{m['from']}→{m['to']}: {q['why'].get(eid, '')}"
        out.append(f"{mark}{rank:>2}  ", style=style)
        out.append(_clip(titles.get(eid, eid), 44), style=style + (" bold" if style else ""))
        out.append(f"\n      {eid}\n", style="dim")
        if note:
            out.append(f"      {_clip(note, 72)}\n", style=style)
    return out


class ReplayScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "back", "Back", id="replay.back", tooltip="Return to the main screen"),
        Binding("r", "refresh", "Replay again", id="replay.refresh", tooltip="Run the latest logged queries again"),
    ]
    DEFAULT_CSS = """
    ReplayScreen #replay-summary { height: auto; padding: 0 1; }
    ReplayScreen #replay-queries { height: 10; border: round $primary-darken-1; border-title-color: $text-muted; }
    ReplayScreen #replay-sides { height: 1fr; }
    ReplayScreen .replay-side { width: 1fr; border: round $primary-darken-1; border-title-color: $text-muted;
                                padding: 0 1; }
    """

    class Loaded(Message):
        def __init__(self, report: dict[str, Any]) -> None:
            super().__init__()
            self.report = report

    def __init__(self) -> None:
        super().__init__()
        self.report: dict[str, Any] = {"queries": [], "titles": {}}

    @property
    def lens(self) -> Any:
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("replaying the latest logged queries…", id="replay-summary")
        yield DataTable(id="replay-queries", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="replay-sides"):
            with VerticalScroll(classes="replay-side") as box:
                box.border_title = "Then: as logged"
                yield Static(id="replay-before")
            with VerticalScroll(classes="replay-side") as box:
                box.border_title = "Now: on the store as it is"
                yield Static(id="replay-after")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#replay-queries", DataTable)
        table.border_title = f"Latest {LAST} logged retrievals · changed ones first"
        for label in ("", "query", "entered", "left", "moved", "tau"):
            table.add_column(label, key=label or "mark")
        self.action_refresh()

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_refresh(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="replay", exit_on_error=False)
    def _load(self) -> None:
        self.post_message(self.Loaded(self.lens.replay_report(LAST)))

    def on_replay_screen_loaded(self, message: Loaded) -> None:
        report = message.report
        queries = sorted(report["queries"], key=lambda q: (not q["changed"], -q["seq"]))
        self.report = {**report, "queries": queries}
        s = report["summary"]
        tau = "-" if s["kendall_tau"] is None else f"{s['kendall_tau']:.3f}"
        self.query_one("#replay-summary", Static).update(Text.assemble(
            (f"replayed {s['replayed']}", "bold"), " · ", (f"changed {s['changed']}", "bold yellow" if s["changed"] else ""),
            f" · top-1 changed {s['top1_changed']} · mean Kendall tau {tau}"))
        table = self.query_one("#replay-queries", DataTable)
        table.clear()
        for q in queries:
            mark = Text("●", style="yellow") if q["changed"] else Text("·", style="dim")
            tau_q = "-" if q["tau"] is None else f"{q['tau']:.2f}"
            table.add_row(mark, Text(_clip(q["query"], 60)), str(len(q["entered"])), str(len(q["left"])), str(len(q["moved"])),
                          tau_q, key=str(q["seq"]))
        self._show(0)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show(event.cursor_row)

    def _show(self, index: int) -> None:
        queries = self.report["queries"]
        before, after = self.query_one("#replay-before", Static), self.query_one("#replay-after", Static)
        if not queries:
            before.update(Text("No logged retrievals yet: search first (every search is logged).", style="dim"))
            after.update("")
            return
        q = queries[min(max(index, 0), len(queries) - 1)]
        before.update(ranked_list(q, self.report["titles"], "before"))
        after.update(ranked_list(q, self.report["titles"], "after"))


class ReplayCommands(Provider):
    """The replay screen in the command palette (ctrl+p)."""

    def _open(self) -> None:
        self.app.push_screen(ReplayScreen())

    async def discover(self) -> Hits:
        yield DiscoveryHit(TITLE, partial(self._open), help="The ranked lists then and now, side by side")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        score = matcher.match(TITLE)
        if score > 0:
            yield Hit(score, matcher.highlight(TITLE), partial(self._open), help="The ranked lists then and now")
