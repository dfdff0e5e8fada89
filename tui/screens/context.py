"""Context preview: the markdown an agent would receive for the current query, under a token budget.

The budget is applied by the engine (``apply_budget``: invariants whole and
never dropped, then notes dropped, patterns summarised, decisions trimmed);
this screen renders its decisions from ``trace.budget`` so the user sees what
a tighter or looser budget would cost before handing the context to an agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, Input, Label, Markdown, Static
from textual.worker import Worker, WorkerState

from memlens.errors import MemlensError
from memlens.trace import Bundle

from ..widgets.bars import TYPE_STYLE, bar
from ..widgets.ordered import OrderedInput

STEP = 100
DEBOUNCE_S = 0.3
ACTION_STYLE = {"kept": "green", "summarised": "bold blue", "dropped": "bold red"}


def parse_budget(text: str) -> int | None:
    """Empty means no budget; the input only accepts digits, so anything else is empty too."""
    return int(text) if text.strip().isdigit() else None


def step_budget(current: int | None, delta: int) -> int | None:
    """To the next multiple of ``STEP`` up or down; below one step there is no budget, up from none starts at one step."""
    if current is None:
        return STEP if delta > 0 else None
    new = (current // STEP + 1) * STEP if delta > 0 else ((current - 1) // STEP) * STEP
    return new if new >= STEP else None


def totals(bundle: Bundle) -> Text:
    """Used against budget with a bar, then how many entries each action touched."""
    b = bundle.trace.budget
    if not b:
        return Text.assemble(("no budget", "bold"), f": all {len(bundle.results)} retrieved entries are included.\n"
                                                    "Type a number of tokens, or press + to set one.")
    counts = {a: sum(1 for i in b["items"] if i["action"] == a) for a in ACTION_STYLE}
    over = b["used"] > b["budget"]
    out = Text.assemble(bar(min(b["used"], b["budget"]), b["budget"], width=20, style="bold red" if over else "green"),
                        (f" {b['used']} / {b['budget']} tokens", "bold red" if over else "bold"), "\n")
    for i, (action, n) in enumerate(counts.items()):
        out.append((" · " if i else "") + f"{n} {action}", ACTION_STYLE[action] if n else "dim")
    if over:
        out.append("\nover budget: invariants are never dropped", "bold red")
    return out


ID_CELLS = 16  # the entry column: the demo's ids ("lc-arch-015") and a space


def _entry_cell(entry_id: str) -> list[Text]:
    """The entry column's cell, and a line of its own before it for an id too long for the column (a ULID has 26
    characters): it ran into the type, and the action wrapped onto the next line."""
    if len(entry_id) < ID_CELLS:
        return [Text(f"{entry_id:<{ID_CELLS}}", style="bold")]
    return [Text(entry_id, style="bold"), Text(" " * ID_CELLS)]


def decisions(bundle: Bundle) -> RenderableType:
    """One line per retrieved entry: tokens and what the budget did, with the reason under it."""
    b = bundle.trace.budget
    if not b:
        rows: list[RenderableType] = []
        for r in bundle.results:
            *alone, cell = _entry_cell(r.entry.id)
            rows += [*alone, Text.assemble(cell, (f"{r.entry.type.value:<10}", TYPE_STYLE.get(r.entry.type.value, "")),
                                           ("kept", "green"))]
        return Group(Text("no budget: nothing is cut", style="dim"), *rows) if rows else Text("nothing retrieved", style="dim")
    lines: list[RenderableType] = [Text.assemble((f"{'entry':<{ID_CELLS}}{'type':<10}{'tokens':>6}  action",
                                                  "bold underline"))]
    for item in b["items"]:
        *alone, cell = _entry_cell(item["id"])
        lines += [*alone, Text.assemble(cell, (f"{item['type']:<10}", TYPE_STYLE.get(item["type"], "")),
                                        f"{item['tokens']:>6}  ", (item["action"], ACTION_STYLE.get(item["action"], "")))]
        if item.get("reason"):
            lines.append(Text(f"  ↳ {item['reason']}", style="grey62"))
    entries = sum(i["tokens"] for i in b["items"] if i["action"] != "dropped")
    lines += [Text(""), Text(f"working memory {b['working_memory_tokens']} + entries {entries} = {b['used']} tokens"),
              Text(f"budget {b['budget']} · tokenizer {str(b.get('tokenizer', '')).split('@')[0]}", style="dim")]
    return Group(*lines)


class ContextScreen(Screen[None]):
    """``+``/``-`` step the budget by 100 tokens; an empty budget means none."""

    BINDINGS = [
        Binding("plus,equals_sign", "step(1)", "+100", id="context.more", priority=True,
                tooltip="Raise the token budget by 100"),
        Binding("minus", "step(-1)", "-100", id="context.less", priority=True,
                tooltip="Lower the token budget by 100 (below 100: no budget)"),
        Binding("escape", "close", "Close", id="context.close", tooltip="Back to the main screen"),
    ]
    DEFAULT_CSS = """
    ContextScreen #ctx-top { height: 3; }
    ContextScreen #ctx-top Label { width: auto; padding: 1 1 0 1; color: $text-muted; }
    ContextScreen #ctx-budget { width: 14; }
    ContextScreen #ctx-hint { width: 1fr; padding: 1 1 0 1; color: $text-muted; }
    ContextScreen #ctx-total { margin-bottom: 1; }
    ContextScreen #ctx-total.error { color: $error; text-style: bold; }
    ContextScreen #ctx-body { height: 1fr; }
    ContextScreen #ctx-md-box { width: 1fr; border: round $primary-darken-1; border-title-color: $text-muted; padding: 0 1; }
    ContextScreen #ctx-md { margin: 0; padding: 0; }
    ContextScreen #ctx-side { width: 50; border: round $primary-darken-1; border-title-color: $text-muted; padding: 0 1; }
    """

    @dataclass
    class Rendered(Message):
        budget: int | None
        markdown: str | None
        bundle: Bundle | None
        error: str | None = None

    def __init__(self, query: str, budget: int | None = None) -> None:
        super().__init__()
        self.query_text = query
        self.budget = budget
        self.bundle: Bundle | None = None
        """The bundle behind the preview shown (its ``trace.budget`` holds the decisions)."""
        self._debounce: Timer | None = None

    @property
    def lens(self):  # type: ignore[no-untyped-def]
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="ctx-top"):
            yield Label("Budget (tokens)")
            yield OrderedInput("" if self.budget is None else str(self.budget), placeholder="none", restrict=r"[0-9]*",
                               max_length=7, id="ctx-budget", tooltip="Empty: no budget. + and - step by 100.")
            yield Static("+ / - step by 100 · empty: no budget · esc closes", id="ctx-hint")
        with Horizontal(id="ctx-body"):
            with VerticalScroll(id="ctx-md-box") as box:
                box.border_title = "What the agent receives"
                yield Markdown(id="ctx-md")
            with VerticalScroll(id="ctx-side") as box:
                box.border_title = "Budget decisions"
                yield Static(id="ctx-total")
                yield Static(id="ctx-items")
        yield Footer()

    def on_mount(self) -> None:
        budget = self.query_one("#ctx-budget", Input)
        budget.cursor_blink = getattr(self.app, "cursor_blink", True)
        budget.focus()
        self.query_one("#ctx-md-box").border_subtitle = f"query: {self.query_text}" if self.query_text else "no query"
        self.refresh_context()

    # -- budget -------------------------------------------------------------------------------

    @on(Input.Changed, "#ctx-budget")
    def _budget_changed(self, event: Input.Changed) -> None:
        budget = parse_budget(event.value)
        if budget == self.budget:
            return
        self.budget = budget
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(DEBOUNCE_S, self.refresh_context)

    def action_step(self, direction: int) -> None:
        # from the field as it is now: a burst of keys comes before the field's change messages
        field = self.query_one("#ctx-budget", Input)
        new = step_budget(parse_budget(field.value), STEP * direction)
        field.value = "" if new is None else str(new)

    # -- rendering ----------------------------------------------------------------------------

    def refresh_context(self) -> None:
        self._status(Text("assembling the context…", style="dim"))
        self._assemble(self.query_text, self.budget)

    @work(thread=True, exclusive=True, group="context", exit_on_error=False)
    def _assemble(self, query: str, budget: int | None) -> None:
        try:
            markdown, bundle = self.lens.context(query, budget)
        except MemlensError as exc:
            self.post_message(self.Rendered(budget, None, None, str(exc)))
            return
        self.post_message(self.Rendered(budget, markdown, bundle))

    async def on_context_screen_rendered(self, message: Rendered) -> None:
        if message.budget != self.budget:
            return  # the budget moved on meanwhile
        if message.bundle is None or message.markdown is None:
            self._status(Text(f"✗ {message.error}"), "error")
            return
        note = (
            "" if self.query_text else "_No query: the main screen has none; this is the scope's top entries by authority._\n\n"
        )
        self.bundle = message.bundle
        await self.query_one("#ctx-md", Markdown).update(note + message.markdown)
        self._status(totals(message.bundle))
        self.query_one("#ctx-items", Static).update(decisions(message.bundle))

    def _status(self, text: Any, kind: str = "") -> None:
        total = self.query_one("#ctx-total", Static)
        total.set_classes(kind)
        total.update(text)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self._status(Text(f"✗ {type(event.worker.error).__name__}: {event.worker.error}"), "error")

    def action_close(self) -> None:
        self.dismiss(None)
