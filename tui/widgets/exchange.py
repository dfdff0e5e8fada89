"""One question in the assistant shell's transcript: the line as typed, its one-line trace, then either the
context the agent would receive or (with a chat model) the answer above the context it was given."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Collapsible, Markdown, Static

from .. import shell_commands as sc
from .bars import ms

if TYPE_CHECKING:
    from memlens.trace import Bundle

    from .answer import AnswerView


def trace_line(bundle: Bundle) -> Text:
    """The trace in one line: profile, what the budget kept, latency, cache, degradation."""
    t = bundle.trace
    n = sc.budget_counts(bundle)
    line = Text.assemble((t.profile, "bold cyan"), f" · {n['kept']} kept · {n['summarised']} summarised · ")
    line.append(f"{n['dropped']} dropped", "yellow" if n["dropped"] else "")
    line.append(f" · {n['filtered']} filtered")
    if t.budget:
        used, budget = t.budget["used"], t.budget["budget"]
        line.append(f" · {used}/{budget} tokens", "bold red" if used > budget else "")
    line.append(f" · {ms(t.latency_ms.get('total', 0.0))} ms · ")
    line.append("cache hit" if t.cache_hit else "cache miss", "green" if t.cache_hit else "")
    if t.degraded:
        line.append(f" · degraded: {t.degraded.get('reason')} → {t.degraded.get('source') or 'nothing'}", "bold yellow")
    return line


class Exchange(Vertical):
    """One question: the line as typed, its trace line, and the context in a collapsible."""

    DEFAULT_CSS = """
    Exchange { height: auto; margin-bottom: 1; }
    Exchange > .ask { text-style: bold; color: $accent; }
    Exchange > .trace { padding-left: 2; color: $text-muted; }
    Exchange > .trace.error { color: $error; text-style: bold; }
    Exchange Collapsible { padding-left: 1; border-top: none; }
    Exchange Markdown { margin: 0; padding: 0 1 0 0; }
    Exchange MarkdownHeader { margin: 1 0 0 0; }
    Exchange MarkdownH1 { margin: 0; }
    Exchange MarkdownBlockQuote { margin: 0 0 1 0; }
    """

    def __init__(self, line: str, number: int) -> None:
        super().__init__(id=f"exchange-{number}")
        self.line = line
        self.pinned = True
        """While it is the newest entry: keep its top in view as the markdown lays itself out."""

    def compose(self) -> ComposeResult:
        yield Static(Text(f"› {self.line}"), classes="ask")
        yield Static("retrieving…", classes="trace")

    def show(self, markdown: str, bundle: Bundle, answer: AnswerView | None = None) -> None:
        self.query_one(".trace", Static).update(trace_line(bundle))
        title = f"context for the {'model' if answer else 'agent'} ({len(bundle.results)} entries)"
        if bundle.trace.budget and bundle.trace.budget.get("over_budget"):
            title += " · over budget: invariants are never dropped"
        if answer is not None:  # the answer first; the context it was given folded below
            self.mount(answer)
        self.mount(Collapsible(Markdown(markdown), title=title, collapsed=answer is not None))

    def fail(self, error: str) -> None:
        trace = self.query_one(".trace", Static)
        trace.add_class("error")
        trace.update(Text(f"✗ {error}"))

    def fold(self) -> None:
        self.pinned = False
        for c in self.query(Collapsible):
            c.collapsed = True

    def on_resize(self) -> None:
        if self.pinned and self.parent is not None:
            self.call_after_refresh(self.parent.scroll_to_widget, self, top=True, animate=False)  # type: ignore[attr-defined]
