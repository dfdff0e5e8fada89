""""Why not?": pick any entry and see the exact pipeline stage that dropped it for a query.

The engine's ``explain`` re-runs the real pipeline (cache bypassed) and reads
its trace, so the verdict shown here is the pipeline's own, never a guess made
beside it. The screen only finds entries (by id or title) and renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, Input, Label, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from memlens.errors import MemlensError
from memlens.models import Entry

from ..widgets.bars import FLAG_STYLE, TYPE_STYLE, bar
from ..widgets.ordered import OrderedInput

DEBOUNCE_S = 0.25
PIPELINE = ("status", "scope", "profile", "candidates", "dedup", "override", "threshold", "relative", "rerank", "cap",
            "budget")
"""Drop stages in the order the engine applies them (memlens.retrieval.search): a verdict is a position on this line."""
STAGE_MEANING = {
    "status": "deprecated entries are excluded unless the query asks for status=deprecated",
    "scope": "only the active wing, _global and the wings the query names are searched; room/kind/type filters apply",
    "profile": "the retrieval profile limits which kinds and rooms are retrieved",
    "candidates": "only the top entries of the vector and BM25 generators become candidates",
    "dedup": "a near-duplicate of a higher-scoring entry of another wing is folded into that entry",
    "override": "an entry that names this one in `overrides` hides it wherever both are searched",
    "threshold": "scores under the profile's absolute floor are cut",
    "relative": "scores under a fraction of the top hit's score are cut",
    "rerank": "only the top entries go through the cross-encoder",
    "cap": "only the top k results are returned",
    "budget": "the context budget had no room left for it",
}
VERDICT_STYLE = {"returned": "bold black on green", "dropped": "bold white on red", "not retrieved": "bold black on yellow"}


def pipeline(stage: str | None, verdict: str, detail: str) -> Table:
    """One row per stage: passed (✓), the one that dropped the entry (✗, with the engine's sentence), never reached (·)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=12, no_wrap=True)
    grid.add_column(overflow="fold")
    reached = True
    for s in PIPELINE:
        if verdict != "returned" and s == stage:
            grid.add_row(Text(f"✗ {s}", "bold red"), Text(detail, "bold"))
            reached = False
        elif reached:
            grid.add_row(Text(f"✓ {s}", "green"), Text("passed", "grey50"))
        else:
            grid.add_row(Text(f"· {s}", "grey42"), Text("not reached", "grey42"))
    return grid


def verdict_view(x: dict[str, Any]) -> RenderableType:
    verdict, stage = x["verdict"], x.get("stage")
    badge = Text.assemble((f" {verdict.upper()} ", VERDICT_STYLE.get(verdict, "reverse")))
    badge.append(f"  at stage {stage}" if stage else f"  {x.get('detail', '')}", "bold")
    parts: list[RenderableType] = [
        badge, Text(""),
        Text.assemble((x["id"], "bold"), " · ", x.get("title", ""), (f" · {x.get('wing')}", "dim")),
        Text(f"query `{x.get('query')}` · profile {x.get('profile')}", style="dim"), Text(""),
        pipeline(stage, verdict, x.get("detail", "")),
    ]
    if stage in STAGE_MEANING:
        parts += [Text(""), Text(f"{stage}: {STAGE_MEANING[stage]}", style="italic grey62")]
    if verdict == "returned":
        parts += [Text(""), components_view(x)]
    return Group(*parts)


def components_view(x: dict[str, Any]) -> RenderableType:
    c = x.get("components") or {}
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=11, style="bold")
    grid.add_column(width=20)
    grid.add_column()
    sim = c.get("similarity")
    grid.add_row("similarity", bar(sim or 0, 1.0, style="green"),
                 f"{'—' if sim is None else f'{sim:.3f}'} raw cosine · norm {c.get('similarity_norm', 0):.3f}")
    grid.add_row("bm25", bar(c.get("bm25_norm", 0), 1.0, style="blue"), f"norm {c.get('bm25_norm', 0):.3f}")
    grid.add_row("relevance", bar(c.get("relevance", 0), 1.0, style="green"), f"{c.get('relevance', 0):.3f}")
    grid.add_row("recency", bar(c.get("recency", 0), 1.0, style="yellow"),
                 f"{c.get('recency', 0):.3f} · {c.get('age_days', 0):.1f} days old")
    grid.add_row("salience", bar(c.get("salience", 0), 1.0, style="magenta"), f"{c.get('salience', 0):.3f}")
    grid.add_row("boost", bar(c.get("boost", 1), 2.0, style="cyan"), f"×{c.get('boost', 1):g}")
    grid.add_row("final", bar(x.get("score", 0), max(1.0, x.get("score", 0)), style="bold green"), f"{x.get('score', 0):.3f}")
    flags = Text("flags: ")
    for f in x.get("flags") or []:
        flags.append(f + " ", FLAG_STYLE.get(f, ""))
    return Group(Text(f"rank {x.get('rank')} · score {x.get('score', 0):.3f}", style="bold"), grid, flags)


def option_for(e: Entry, width: int = 46) -> Option:
    """Two lines per entry: id, type, status; then the title (cut to fit) and the wing."""
    room = width - len(e.wing) - 4
    title = e.title if len(e.title) <= room else e.title[: room - 1] + "…"
    label = Text.assemble((f"{e.id:<15}", "bold"), " ", (f"{e.type.value:<9}", TYPE_STYLE.get(e.type.value, "")), " ",
                          (e.status.value, "yellow" if e.status.value != "active" else "dim"), "\n  ", title,
                          (f"  {e.wing}", "dim"))
    return Option(label, id=e.id)


class WhyNotScreen(Screen[None]):
    """Explains one entry against one query; both can be changed here."""

    BINDINGS = [
        Binding("escape", "close", "Close", id="why_not.close", tooltip="Back to the main screen"),
        Binding("ctrl+l,down", "focus_list", "Entries", id="why_not.list", tooltip="Move to the list of matching entries"),
        Binding("f2", "open_entry", "Open entry", id="why_not.open", tooltip="Open the explained entry to edit or deprecate it"),
    ]
    DEFAULT_CSS = """
    WhyNotScreen #wn-top { height: auto; border: round $primary-darken-1; border-title-color: $text-muted; padding: 0 1; }
    WhyNotScreen #wn-top Horizontal { height: 3; }
    WhyNotScreen #wn-top Label { width: 8; padding: 1 0; color: $text-muted; }
    WhyNotScreen #wn-top Input { width: 1fr; }
    WhyNotScreen #wn-body { height: 1fr; }
    WhyNotScreen #wn-list { width: 52; height: 1fr; border: round $primary-darken-1; border-title-color: $text-muted; }
    WhyNotScreen #wn-verdict-box { width: 1fr; border: round $primary-darken-1; border-title-color: $text-muted; padding: 0 1; }
    """

    @dataclass
    class Found(Message):
        text: str
        entries: list[Entry]
        explain: bool = False

    @dataclass
    class Explained(Message):
        query: str
        entry_id: str
        result: dict[str, Any] | None
        error: str | None = None

    def __init__(self, query: str) -> None:
        super().__init__()
        self.query_text = query
        self.entry_id: str | None = None
        self.result: dict[str, Any] | None = None
        """The last verdict shown (the engine's ``explain`` dict)."""
        self.found: list[Entry] = []
        self._found_for: str | None = None
        self._debounce: Timer | None = None

    @property
    def lens(self):  # type: ignore[no-untyped-def]
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="wn-top") as top:
            top.border_title = "Why not? · the stage that dropped an entry for a query"
            with Horizontal():
                yield Label("Query")
                yield OrderedInput(self.query_text, placeholder="the query to test, in the scoped language", id="wn-query")
            with Horizontal():
                yield Label("Entry")
                yield OrderedInput(placeholder="an entry id, or words of its title (enter explains)", id="wn-pick")
        with Horizontal(id="wn-body"):
            yield OptionList(id="wn-list")
            with VerticalScroll(id="wn-verdict-box") as box:
                box.border_title = "Verdict"
                yield Static(id="wn-verdict")
        yield Footer()

    def on_mount(self) -> None:
        blink = getattr(self.app, "cursor_blink", True)
        for widget in self.query(Input):
            widget.cursor_blink = blink
        self.query_one("#wn-list", OptionList).border_title = "Entries"
        self._say("Type an entry id or words of its title, then pick it (enter)." if self.query_text else
                  "No query: the main screen has none. Type the query to test above, then pick an entry.")
        self.query_one("#wn-pick" if self.query_text else "#wn-query", Input).focus()

    def _say(self, text: str, style: str = "dim") -> None:
        self.query_one("#wn-verdict", Static).update(Text(text, style=style))

    # -- picking an entry ---------------------------------------------------------------------

    @on(Input.Changed, "#wn-pick")
    def _pick_changed(self, event: Input.Changed) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        text = event.value.strip()
        self._debounce = self.set_timer(DEBOUNCE_S, lambda: self._find(text))

    @work(thread=True, exclusive=True, group="why-not-find", exit_on_error=False)
    def _find(self, text: str, explain: bool = False) -> None:
        self.post_message(self.Found(text, self.lens.find(text) if text else [], explain))

    def on_why_not_screen_found(self, message: Found) -> None:
        if message.text != self.query_one("#wn-pick", Input).value.strip():
            return  # typed on meanwhile
        self.found, self._found_for = message.entries, message.text
        olist = self.query_one("#wn-list", OptionList)
        olist.clear_options()
        olist.add_options([option_for(e) for e in message.entries])
        olist.border_title = f"Entries · {len(message.entries)} matching" if message.text else "Entries"
        if message.entries:
            olist.highlighted = 0
        if message.explain:
            self._explain_pick(message.text)

    @on(Input.Submitted, "#wn-pick")
    def _pick_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if self._debounce is not None:
            self._debounce.stop()
        if self._found_for == text:
            self._explain_pick(text)
        else:
            self._find(text, explain=True)  # enter came before the list caught up: find, then explain

    def _explain_pick(self, text: str) -> None:
        """An exact id wins; else the highlighted match; with several matches and none chosen yet, ask to pick."""
        exact = [e for e in self.found if e.id == text]
        olist = self.query_one("#wn-list", OptionList)
        if exact or len(self.found) == 1:
            self.explain((exact or self.found)[0].id)
        elif not self.found:
            self._say(f"No entry id or title contains {text!r}.", "bold yellow")
        elif olist.has_focus:
            self.explain(self.found[olist.highlighted or 0].id)
        else:
            self._say(f"{len(self.found)} entries match {text!r}: pick one in the list (enter).")
            olist.focus()

    @on(OptionList.OptionSelected, "#wn-list")
    def _option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.explain(event.option.id)

    @on(Input.Submitted, "#wn-query")
    def _query_submitted(self, event: Input.Submitted) -> None:
        self.query_text = event.value.strip()
        if self.entry_id:
            self.explain(self.entry_id)
        else:
            self.query_one("#wn-pick", Input).focus()

    # -- explaining ---------------------------------------------------------------------------

    def explain(self, entry_id: str) -> None:
        self.query_text = self.query_one("#wn-query", Input).value.strip()
        self.entry_id = entry_id
        if not self.query_text:
            self._say(f"No query to test {entry_id} against: type one above (enter runs it).", "bold yellow")
            self.query_one("#wn-query", Input).focus()
            return
        self._say(f"Running the pipeline for {entry_id}…")
        self._explain(self.query_text, entry_id)

    @work(thread=True, exclusive=True, group="why-not-explain", exit_on_error=False)
    def _explain(self, query: str, entry_id: str) -> None:
        try:
            self.post_message(self.Explained(query, entry_id, self.lens.explain(query, entry_id)))
        except MemlensError as exc:
            self.post_message(self.Explained(query, entry_id, None, str(exc)))

    def on_why_not_screen_explained(self, message: Explained) -> None:
        if (message.query, message.entry_id) != (self.query_text, self.entry_id):
            return
        box = self.query_one("#wn-verdict-box", VerticalScroll)
        if message.result is None:
            box.border_title = "Verdict"
            self._say(f"✗ {message.error}", "bold red")
            return
        box.border_title = f"Verdict · {message.entry_id}"
        self.result = message.result
        self.query_one("#wn-verdict", Static).update(verdict_view(message.result))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self._say(f"✗ {type(event.worker.error).__name__}: {event.worker.error}", "bold red")

    # -- actions ------------------------------------------------------------------------------

    def action_focus_list(self) -> None:
        self.query_one("#wn-list", OptionList).focus()

    def action_open_entry(self) -> None:
        if self.entry_id:
            self.app.open_entry(self.entry_id)  # type: ignore[attr-defined]

    def action_close(self) -> None:
        self.dismiss(None)
