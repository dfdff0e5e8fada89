"""One ingestion in the shell's transcript: a progress bar while it runs, then the summary.

The bar's length is the number of files the run will look at (a walk done first, nothing read); the engine's
``progress`` callback moves it as files are read and batches are written. Its events arrive on engine threads and
reach this widget as messages (``post_message`` is thread-safe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import ProgressBar, Static


def summary_text(s: dict[str, Any]) -> Text:
    """The engine's summary in one line, then one line per skipped file (path and reason)."""
    out = Text.assemble(
        ("✓ ", "green"), (f"{s['added']} added", "bold green" if s["added"] else ""), " · ",
        (f"{s['updated']} updated", "bold yellow" if s["updated"] else ""), f" · {s['unchanged']} unchanged · ",
        (f"{s['removed']} removed", "bold red" if s["removed"] else ""), f" · {s['chunks']} chunks written · ",
        f"{len(s['skipped'])} skipped · {s['seconds']:.2f} s")
    for sk in s["skipped"][:10]:
        out.append(f"\n  skipped {sk['path']}: {sk['reason']}", style="dim")
    if len(s["skipped"]) > 10:
        out.append(f"\n  … and {len(s['skipped']) - 10} more", style="dim")
    return out


class IngestView(Vertical):
    DEFAULT_CSS = """
    IngestView { height: auto; margin-bottom: 1; }
    IngestView > .ask { text-style: bold; }
    IngestView > ProgressBar { padding-left: 2; }
    IngestView > .ingest-status { padding-left: 2; color: $text-muted; }
    IngestView.done > .ingest-status { color: $success; }
    IngestView.failed > .ingest-status { color: $error; text-style: bold; }
    """

    @dataclass
    class Progressed(Message):
        event: dict[str, Any]

    def __init__(self, line: str, number: int) -> None:
        super().__init__(id=f"ingest-{number}")
        self.line = line
        self.files = self.chunks = 0
        self.total: int | None = None
        self.path = ""
        self.summary: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text(f"› {self.line}"), classes="ask")
        yield ProgressBar(total=None, show_eta=False, id="ingest-bar")
        yield Static("walking the paths…", classes="ingest-status")

    def _status(self, text: str | Text) -> None:
        self.query_one(".ingest-status", Static).update(text)

    def start(self, total: int) -> None:
        self.total = total
        self.query_one(ProgressBar).update(total=max(total, 1), progress=0)
        self._status(f"0 of {total} files read · 0 chunks written")

    def on_ingest_view_progressed(self, message: Progressed) -> None:
        e = message.event
        self.files = max(self.files, int(e.get("files", 0)))
        self.chunks = max(self.chunks, int(e.get("chunks", self.chunks)))
        if e.get("path"):
            self.path = str(e["path"])
        self.query_one(ProgressBar).update(progress=self.files)
        tail = f" · {self.path}" if self.path else ""
        self._status(f"{self.files} of {self.total} files read · {self.chunks} chunks written{tail}")

    def finish(self, summary: dict[str, Any]) -> None:
        self.summary = summary
        bar = self.query_one(ProgressBar)
        bar.update(total=max(self.total or 0, 1), progress=max(self.total or 0, 1))
        self.add_class("done")
        self._status(summary_text(summary))

    def fail(self, error: str) -> None:
        self.add_class("failed")
        self.query_one(ProgressBar).display = False
        self._status(Text(f"✗ {error}"))
