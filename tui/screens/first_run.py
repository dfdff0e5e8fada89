"""Shown on an empty store: offer the demo memory (one key) or start empty."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Center, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Markdown

TEXT = """\
# Welcome to memlens

This store is **empty**: `{path}`

memlens keeps an agent's memory in this one SQLite file and shows **why** each
entry was retrieved: scores, boosts, cache, latencies and what was dropped.

The demo memory has a ROS 2 project wing (`lifecore_ros2`) and the shared
wings `ros2`, `python` and `_global`. It covers all four authority types, an
explicit override, a conflict, conversation turns and a task history with
blockers.
"""


class FirstRunScreen(ModalScreen[bool]):
    """Dismisses with True to load the demo, False to start empty."""

    BINDINGS = [
        Binding("d", "demo", "Load demo", id="first_run.demo", tooltip="Import the demo memory into this store"),
        Binding("escape", "empty", "Start empty", id="first_run.empty", tooltip="Keep the store empty"),
    ]
    DEFAULT_CSS = """
    FirstRunScreen { align: center middle; }
    FirstRunScreen > Vertical { width: 76; max-width: 100%; height: auto; max-height: 100%; border: thick $accent;
                                padding: 1 2; background: $surface; }
    FirstRunScreen Center { height: auto; margin-top: 1; }
    FirstRunScreen Button { margin: 0 2; }
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Markdown(TEXT.format(path=self.path))
            with Center():
                yield Button("Load the demo memory (d)", id="demo", variant="primary")
                yield Button("Start empty (esc)", id="empty")
        yield Footer()  # this dialog's keys (the footer underneath names the main screen's, which wait)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "demo")

    def action_demo(self) -> None:
        self.dismiss(True)

    def action_empty(self) -> None:
        self.dismiss(False)
