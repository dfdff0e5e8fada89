"""The code index at a glance: each indexed workspace, the latest runs and the files they skipped, with reasons.

Everything comes from the engine's ``index_status`` (``Lens.index_status``, the numbers ``memlens index status``
prints), read once on open and again on ``r``: files and chunks per index, how many files changed on disk since
they were indexed (the stale ratio), the last run and its duration, the watcher's queue depth, and from the
retrieval log how often code was served (hit rate) and how often a retrieval ran degraded (fallback rate).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static
from textual.worker import Worker, WorkerState

from memlens.models import parse_ts

from ..widgets.bars import age

STATUS_STYLE = {"ok": "green", "partial": "yellow"}


def _clip_left(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _ago(ts: str | None, now: datetime) -> str:
    if not ts:
        return "never"
    try:
        t = parse_ts(ts)
    except Exception:
        return str(ts)
    return f"{t:%Y-%m-%d %H:%M} · {age(t, now)} ago"


def _secs(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def overview(status: dict[str, Any], now: datetime) -> Table:
    """The totals: files, chunks, stale ratio, last run, queue depth, watchers, code hit and fallback rates."""
    grid = Table.grid(padding=(0, 2))
    for _ in range(4):
        grid.add_column()
    last = status.get("last_run")
    stale = status.get("stale_ratio") or 0.0
    grid.add_row(
        Text.assemble(("files ", "bold"), str(status["files"])),
        Text.assemble(("chunks ", "bold"), str(status["chunks"])),
        Text.assemble(("stale ", "bold"), (f"{stale:.0%}", "bold yellow" if stale else "green")),
        Text.assemble(("queue depth ", "bold"), str(status["queue_depth"]),
                      (f" · watching {len(status['watching'])}" if status["watching"] else " · no watcher", "dim")),
    )
    grid.add_row(
        Text.assemble(("last run ", "bold"), _ago(last["finished_at"], now) if last else "never"),
        Text.assemble(("took ", "bold"), _secs(last["seconds"]) if last else "—"),
        Text.assemble(("code hit rate ", "bold"), _rate(status["code_hit_rate"]),
                      (f" of {status['code_recalls']} recalls", "dim")),
        Text.assemble(("fallback rate ", "bold"), _rate(status["fallback_rate"]),
                      (f" of {status['retrievals']} retrievals", "dim")),
    )
    return grid


class IndexScreen(Screen[None]):
    """Reads the status once on open and again on ``r``; never on a timer."""

    BINDINGS = [
        Binding("escape", "back", "Back", id="index.back", tooltip="Return to the previous screen"),
        Binding("r", "refresh", "Refresh", id="index.refresh", tooltip="Read the index status again"),
    ]
    DEFAULT_CSS = """
    IndexScreen #index-overview { height: auto; border: round $primary-darken-1; border-title-color: $text-muted;
                                  padding: 0 1; }
    IndexScreen #index-list { height: auto; max-height: 10; border: round $primary-darken-1;
                              border-title-color: $text-muted; }
    IndexScreen #index-runs { height: auto; max-height: 13; border: round $primary-darken-1;
                              border-title-color: $text-muted; }
    IndexScreen #index-skipped { height: 1fr; min-height: 4; border: round $primary-darken-1;
                                 border-title-color: $text-muted; }
    IndexScreen #index-empty { height: 1fr; content-align: center middle; color: $text-muted; padding: 0 4;
                               display: none; }
    IndexScreen.empty #index-list, IndexScreen.empty #index-runs, IndexScreen.empty #index-skipped { display: none; }
    IndexScreen.empty #index-empty { display: block; }
    """

    class Loaded(Message):
        def __init__(self, status: dict[str, Any]) -> None:
            super().__init__()
            self.status = status

    def __init__(self) -> None:
        super().__init__()
        self.status: dict[str, Any] | None = None

    @property
    def lens(self) -> Any:
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        overview_box = Static("reading the index status…", id="index-overview")
        overview_box.border_title = "Code index"
        yield overview_box
        yield DataTable(id="index-list", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="index-runs", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="index-skipped", cursor_type="row")
        yield Static(id="index-empty")
        yield Footer()

    def on_mount(self) -> None:
        columns = {
            "index-list": ("wing", "workspace", "indexed", "files", "chunks", "stale", "last run", "took"),
            "index-runs": ("finished", "wing", "status", "added", "updated", "unchanged", "removed", "chunks", "skipped",
                           "took"),
            "index-skipped": ("file", "reason"),
        }
        for table_id, labels in columns.items():
            table = self.query_one(f"#{table_id}", DataTable)
            for label in labels:
                table.add_column(label, key=label)
        self.query_one("#index-list", DataTable).border_title = "Indexed workspaces"
        self.query_one("#index-runs", DataTable).border_title = "Latest runs · newest first"
        self.query_one("#index-skipped", DataTable).border_title = "Skipped in the last run"
        self.action_refresh()

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_refresh(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="index-status", exit_on_error=False)
    def _load(self) -> None:
        self.post_message(self.Loaded(self.lens.index_status()))

    def on_index_screen_loaded(self, message: Loaded) -> None:
        self.status = s = message.status
        now = self.lens.now()
        self.query_one("#index-overview", Static).update(overview(s, now))
        self.set_class(not s["indexes"] and not s["recent_runs"], "empty")
        if not s["indexes"] and not s["recent_runs"]:
            self.query_one("#index-empty", Static).update(Text(
                "No code index yet.\n\nIndex a workspace with `memlens index WORKSPACE --wing W` (add --watch to keep it "
                "current); its files, runs and skips show here. Press r to read the status again.", justify="center"))
            return
        table = self.query_one("#index-list", DataTable)
        table.clear()
        for ix in s["indexes"]:
            last = ix["last_run"] or {}
            stale = ix["stale_ratio"]
            table.add_row(ix["wing"], Text(_clip_left(ix["workspace"], 40)), _ago(ix["indexed_at"], now),
                          Text(str(ix["files"]), justify="right"), Text(str(ix["chunks"]), justify="right"),
                          Text(f"{ix['stale_files']} · {stale:.0%}", style="yellow" if stale else "green"),
                          Text(last.get("status", "—"), style=STATUS_STYLE.get(last.get("status", ""), "")),
                          _secs(last.get("seconds")), key=f"{ix['wing']}\0{ix['workspace']}")
        runs = self.query_one("#index-runs", DataTable)
        runs.clear()
        for r in s["recent_runs"]:
            runs.add_row(_ago(r["finished_at"], now), r["wing"], Text(r["status"], style=STATUS_STYLE.get(r["status"], "")),
                         *(Text(str(r.get(k) if r.get(k) is not None else "—"), justify="right")
                           for k in ("added", "updated", "unchanged", "removed", "chunks", "skipped_count")),
                         _secs(r["seconds"]), key=str(r["id"]))
        self._skipped()

    def _skipped(self) -> None:
        table = self.query_one("#index-skipped", DataTable)
        table.clear()
        skipped = [(ix, sk) for ix in (self.status or {}).get("indexes", []) for sk in ix["skipped"]]
        for ix, sk in skipped:
            path = sk["path"]
            root = ix["workspace"].rstrip("/") + "/"
            table.add_row(Text(_clip_left(path[len(root):] if path.startswith(root) else path, 60)), Text(sk["reason"]))
        if not skipped:
            table.add_row(Text("nothing skipped", style="dim"), "")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.group == "index-status":
            self.query_one("#index-overview", Static).update(
                Text(f"cannot read the index status: {event.worker.error}", style="red"))

