"""Retrieval metrics: is memlens fast, and is the cache doing its job?

Every search is logged to the store's audit table when ``audit.level`` is
"reads" (the default), by any process using the store. This screen reads
those rows through ``Lens.retrievals()`` and shows them three ways: a
sparkline of total latency (spikes and cache hits stand out), p50/p95 per
stage over cache misses (where the time goes; computed by the engine's own
``retrieval_stats``, the numbers ``memlens stats --retrievals`` prints) and a
table of the latest calls. Times are shown relative to ``lens.now()``. Once
answers have been logged (``memlens ask``, the assistant shell), a small
table "Cited by answers" lists the entries they cited, most cited first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Sparkline, Static
from textual.worker import Worker, WorkerState

from memlens.models import parse_ts
from memlens.stats import retrieval_stats

from ..widgets.bars import age, bar, ms

FETCH = 500  # rows behind the percentiles
SHOWN = 60  # rows in the sparkline and the table
CITED = 8  # rows of "Cited by answers"
STAGES = ("parse", "embed", "vector", "lexical", "score", "rerank", "policy", "budget")


def range_bar(p50: float, p95: float, maximum: float, width: int = 22) -> Text:
    """``█`` up to p50, ``▒`` from p50 to p95, ``·`` to the widest p95 of all stages."""
    if maximum <= 0:
        return Text("·" * width, style="grey35")
    a = round(width * min(p50, maximum) / maximum)
    b = max(a, round(width * min(p95, maximum) / maximum))
    return Text.assemble(("█" * a, "cyan"), ("▒" * (b - a), "cyan"), ("·" * (width - b), "grey35"))


def stage_table(stats: dict[str, Any]) -> Table:
    stages = stats["stages"]
    top = max([stages[s]["p95"] for s in STAGES] + [0.0])
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    table.add_column("stage", width=8)
    table.add_column("█ p50  ▒ p95", width=22, no_wrap=True)
    table.add_column("p50 ms", justify="right", width=7)
    table.add_column("p95 ms", justify="right", width=7)
    for s in STAGES:
        table.add_row(s, range_bar(stages[s]["p50"], stages[s]["p95"], top), ms(stages[s]["p50"]), ms(stages[s]["p95"]))
    total = stages["total"]
    table.add_row(Text("total", style="bold"), "", Text(ms(total["p50"]), style="bold"), Text(ms(total["p95"]), style="bold"))
    return table


def cache_lines(stats: dict[str, Any]) -> Group:
    rate, hits, n = stats["cache_hit_rate"], stats["cache_hits"], stats["retrievals"]
    hit_ms = stats["cache_hit_total"]
    head = Text.assemble(("cache hit rate ", "bold"), (f"{rate:.0%}", "bold green"), f" ({hits} of {n}) ")
    head.append_text(bar(rate, 1.0, width=20, style="green"))
    detail = Text(f"a hit answers in {ms(hit_ms['p50'])} ms (p50) · {ms(hit_ms['p95'])} ms (p95)", style="dim")
    return Group(head, detail)


def _when(ts: str, now: datetime) -> tuple[str, str]:
    try:
        t = parse_ts(ts)
    except Exception:
        return ts, ""
    return t.strftime("%H:%M:%S"), age(t, now) + " ago"


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


class MetricsScreen(Screen[None]):
    """Reads the audit log once on open and again on ``r``; never on a timer."""

    BINDINGS = [
        Binding("escape", "back", "Back", id="metrics.back", tooltip="Return to the main screen"),
        Binding("r", "refresh", "Refresh", id="metrics.refresh", tooltip="Read the retrieval log again"),
    ]
    DEFAULT_CSS = """
    MetricsScreen #metrics-top { height: auto; }
    MetricsScreen #latency-box { width: 1fr; height: auto; border: round $primary-darken-1;
                                 border-title-color: $text-muted; padding: 0 1; }
    MetricsScreen #stages-box { width: 60; height: auto; border: round $primary-darken-1;
                                border-title-color: $text-muted; padding: 0 1; }
    MetricsScreen #spark-total { height: 6; margin: 1 0 0 0; }
    MetricsScreen #spark-total > .sparkline--max-color { color: $warning; }
    MetricsScreen #spark-total > .sparkline--min-color { color: $success 60%; }
    MetricsScreen #recent { height: 1fr; border: round $primary-darken-1; border-title-color: $text-muted; }
    MetricsScreen #metrics-empty { height: 1fr; content-align: center middle; color: $text-muted; padding: 0 4; }
    MetricsScreen.empty #metrics-top, MetricsScreen.empty #recent { display: none; }
    MetricsScreen #metrics-empty { display: none; }
    MetricsScreen.empty #metrics-empty { display: block; }
    MetricsScreen #cited { height: auto; max-height: 12; border: round $primary-darken-1; border-title-color: $text-muted;
                           display: none; }
    MetricsScreen.cited #cited { display: block; }
    MetricsScreen.empty #cited { display: none; }
    """

    class Loaded(Message):
        def __init__(self, rows: list[dict[str, Any]], level: str, cited: list[dict[str, Any]] | None = None) -> None:
            super().__init__()
            self.rows, self.level, self.cited = rows, level, cited or []

    @property
    def lens(self) -> Any:
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="metrics-top"):
            with Vertical(id="latency-box") as box:
                box.border_title = "Total latency per retrieval · oldest → newest"
                yield Static("reading the retrieval log…", id="latency-caption")
                yield Sparkline([], id="spark-total")
                yield Static(id="latency-scale")
                yield Static(id="cache")
            with Vertical(id="stages-box") as box:
                box.border_title = "Per stage · cache misses"
                yield Static(id="stages")
        yield DataTable(id="recent", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="cited", cursor_type="row")
        yield Static(id="metrics-empty")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#recent", DataTable)
        for label, key in (("time", "time"), ("age", "age"), ("query", "query"), ("profile", "profile"),
                           ("results", "results"), ("dropped", "dropped"), ("total ms", "total"), ("cache", "cache")):
            table.add_column(label, key=key)
        cited = self.query_one("#cited", DataTable)
        for label, key in (("entry", "entry"), ("title", "title"), ("cited", "cited"), ("last cited", "last")):
            cited.add_column(label, key=key)
        self.action_refresh()

    # -- loading ----------------------------------------------------------------------------

    def action_refresh(self) -> None:
        self.query_one("#latency-caption", Static).update("reading the retrieval log…")
        self._load()

    @work(thread=True, exclusive=True, group="metrics", exit_on_error=False)
    def _load(self) -> None:
        self.post_message(self.Loaded(self.lens.retrievals(FETCH), self.lens.audit_level(), self.lens.cited(CITED)))

    def on_metrics_screen_loaded(self, message: Loaded) -> None:
        rows = message.rows
        self.set_class(not rows, "empty")
        self._cited(message.cited)
        if not rows:
            self._empty(message.level)
            return
        stats = retrieval_stats(rows)
        recent = rows[:SHOWN]  # newest first, as the log returns them
        totals = [float((r.get("latency_ms") or {}).get("total", 0.0)) for r in reversed(recent)]
        self.query_one("#spark-total", Sparkline).data = totals
        total = stats["stages"]["total"]
        self.query_one("#latency-caption", Static).update(Text.assemble(
            (f"{len(rows)} logged" if len(recent) == len(rows) else f"last {len(recent)} of {len(rows)}", "bold"),
            f" · newest {ms(totals[-1])} ms · p50 {ms(total['p50'])} · p95 {ms(total['p95'])} ms"))
        self.query_one("#latency-scale", Static).update(
            Text(f"scale {ms(min(totals))}–{ms(max(totals))} ms · flat bars are usually cache hits", style="dim"))
        self.query_one("#cache", Static).update(cache_lines(stats))
        self.query_one("#stages", Static).update(stage_table(stats))
        self.query_one("#recent", DataTable).border_title = f"Last {len(recent)} retrievals · newest first"
        self._table(recent)

    def _table(self, rows: list[dict[str, Any]]) -> None:
        table = self.query_one("#recent", DataTable)
        table.clear()
        now = self.lens.now()
        for r in rows:
            when, ago = _when(r.get("ts", ""), now)
            hit = bool(r.get("cache_hit"))
            cache = Text("hit", style="green") if hit else Text("miss")
            if r.get("degraded"):
                cache.append(" · degraded", style="bold yellow")
            total = float((r.get("latency_ms") or {}).get("total", 0.0))
            table.add_row(when, ago, Text(_clip(r.get("query", ""), 44)), Text(r.get("profile") or ""),
                          Text(str(r.get("total_count", 0)), justify="right"), Text(str(r.get("dropped", 0)), justify="right"),
                          Text(ms(total), justify="right"), cache, key=str(r.get("seq")))

    def _cited(self, cited: list[dict[str, Any]]) -> None:
        """Which entries answers cite: the ones that actually carry the answers."""
        self.set_class(bool(cited), "cited")
        table = self.query_one("#cited", DataTable)
        table.clear()
        if not cited:
            return
        answers = cited[0]["answers"]
        table.border_title = f"Cited by answers · {answers} answer{'s' if answers != 1 else ''} logged · most cited first"
        now = self.lens.now()
        for c in cited:
            when, ago = _when(c.get("last") or "", now)
            title = c.get("title")
            table.add_row(c["entry_id"], _clip(title, 56) if title else Text("(no longer in the store)", style="dim"),
                          Text(str(c["cited"]), justify="right"), f"{when} · {ago}" if ago else when, key=c["entry_id"])

    def _empty(self, level: str) -> None:
        if level == "reads":
            text = ("No retrievals logged yet.\n\n"
                    "Every search is logged in the store's audit table while audit.level = \"reads\" "
                    "(the default, and this store's setting), by this app, the CLI or any agent using the store.\n\n"
                    "Search on the main screen (/) or ask in the assistant shell (s), then press r here.")
        else:
            text = (f"No retrievals logged: this configuration has audit.level = \"{level}\", so searches are not "
                    "written to the audit table.\n\nSet [audit] level = \"reads\" (the default) in the configuration "
                    "file to collect latency and cache metrics, then search and press r here.")
        self.query_one("#metrics-empty", Static).update(Text(text, justify="center"))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.group == "metrics":
            self.query_one("#latency-caption", Static).update(Text(f"cannot read the log: {event.worker.error}", style="red"))

    # -- actions ----------------------------------------------------------------------------

    def action_back(self) -> None:
        self.app.pop_screen()
