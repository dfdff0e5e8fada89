"""An entry's access log and the impact of deprecating it, before anything is written.

Top: when the entry was retrieved (from the retrieval log), by which client, for which query, at which
rank, and whether it went into an agent's context. Bottom: what deprecating it would do: the golden
queries that would fail and the recently logged queries whose ranked lists would change. The engine
previews the change inside a transaction it rolls back (``memlens.replay.impact``): nothing is written.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

TITLE = "Impact: who retrieves the selected entry, and what deprecating it would change"


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def preview_text(p: dict[str, Any]) -> Text:
    out = Text()
    if p["golden"]:
        for c in p["golden"]:
            state = "would fail" if c["was_ok"] else "fails already"
            out.append(f"golden {c['id']} {state}: ", style="bold red" if c["was_ok"] else "red")
            out.append(f"{_clip(c['query'], 50)!r} — {_clip(c['why'], 70)}\n")
    else:
        out.append(f"golden queries: none of {p['golden_checked']} would fail\n", style="green")
    s = p["summary"]
    out.append(f"\n{s['changed']} of {s['replayed']} recent queries would change\n", style="bold")
    for q in p["queries"]:
        out.append(f"\n{_clip(q['query'], 70)!r}\n", style="yellow")
        for i in q["left"]:
            out.append(f"  - {i}  {_clip(q['why'].get(i, ''), 70)}\n", style="red")
        for i in q["entered"]:
            out.append(f"  + {i}\n", style="green")
        for m in q["moved"]:
            out.append(f"  ~ {m['id']}  {m['from']} → {m['to']}\n", style="yellow")
    return out


class ImpactScreen(Screen[None]):
    BINDINGS = [Binding("escape", "back", "Back", id="impact.back", tooltip="Return to the previous screen")]
    DEFAULT_CSS = """
    ImpactScreen #impact-title { height: auto; padding: 0 1; }
    ImpactScreen #impact-access { height: 12; border: round $primary-darken-1; border-title-color: $text-muted; }
    ImpactScreen #impact-box { height: 1fr; border: round $primary-darken-1; border-title-color: $text-muted;
                               padding: 0 1; }
    """

    class Loaded(Message):
        def __init__(self, data: dict[str, Any]) -> None:
            super().__init__()
            self.data = data

    def __init__(self, entry_id: str) -> None:
        super().__init__()
        self.entry_id = entry_id
        self.data: dict[str, Any] | None = None

    @property
    def lens(self) -> Any:
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"{self.entry_id}: reading the retrieval log and previewing a deprecation…", id="impact-title")
        yield DataTable(id="impact-access", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="impact-box") as box:
            box.border_title = "If deprecated (a preview: nothing is written)"
            yield Static(id="impact-preview")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#impact-access", DataTable)
        table.border_title = "Access log · newest first"
        for label in ("when", "client", "query", "rank", "score", "context"):
            table.add_column(label, key=label)
        self._load()

    def action_back(self) -> None:
        self.app.pop_screen()

    @work(thread=True, exclusive=True, group="impact", exit_on_error=False)
    def _load(self) -> None:
        self.post_message(self.Loaded(self.lens.entry_impact(self.entry_id)))

    def on_impact_screen_loaded(self, message: Loaded) -> None:
        self.data = data = message.data
        acc = data["access"]
        fresh = acc["freshness"]
        vector = "vector fresh" if fresh.get("fresh") else "vector STALE (memlens reembed)"
        self.query_one("#impact-title", Static).update(Text.assemble(
            (acc["title"], "bold"), f"  {acc['id']} · {acc['wing']} · retrieved {len(acc['accesses'])} times in the log · ",
            (vector, "green" if fresh.get("fresh") else "bold red")))
        table = self.query_one("#impact-access", DataTable)
        table.clear()
        for a in acc["accesses"]:
            table.add_row(a["ts"][:19].replace("T", " "), Text(_clip(a["client"], 24)), Text(_clip(a["query"] or "", 50)),
                          str(a["rank"]), f"{a['score']:.3f}", "yes" if a["in_context"] else "")
        self.query_one("#impact-preview", Static).update(preview_text(data["preview"]))


class ImpactCommands(Provider):
    """The impact screen in the command palette, for the entry selected on the main screen."""

    def _open(self) -> None:
        main = getattr(self.app, "main", None)
        r = main.selected() if main is not None else None
        if r is None or r.entry.wing == "_workspace":
            self.app.notify("select an entry in the results first", severity="warning")
            return
        self.app.push_screen(ImpactScreen(r.entry.id))

    async def discover(self) -> Hits:
        yield DiscoveryHit(TITLE, partial(self._open), help="Access log and a deprecation preview (writes nothing)")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        score = matcher.match(TITLE)
        if score > 0:
            yield Hit(score, matcher.highlight(TITLE), partial(self._open), help="Access log and a deprecation preview")
