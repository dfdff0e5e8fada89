"""A yes/no question before something that cannot be undone from the app (delete, discard edits).

A modal returning a bool keeps the asking screen in charge of what happens
next: it passes a callback to ``push_screen`` and acts only on True.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True only on an explicit yes (``y`` or the button); escape, ``n`` and enter-on-no say no."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes", tooltip="Confirm"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no", tooltip="Cancel and keep everything as it is"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 64; max-width: 100%; height: auto; max-height: 100%; border: thick $error;
                               padding: 1 2; background: $surface; }
    ConfirmScreen #confirm-title { text-style: bold; color: $error; margin-bottom: 1; }
    /* a long body scrolls: the answers stay on screen in a terminal of 24 rows */
    ConfirmScreen #confirm-scroll { height: auto; max-height: 50vh; margin-bottom: 1; }
    ConfirmScreen Horizontal { height: auto; align-horizontal: center; }
    ConfirmScreen Button { margin: 0 2; }
    """

    def __init__(self, title: str, body: str, *, yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self.title_text, self.body, self.yes, self.no = title, body, yes, no

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, id="confirm-title", markup=False)  # they quote titles and text: shown as is
            with VerticalScroll(id="confirm-scroll"):
                yield Static(self.body, id="confirm-body", markup=False)
            with Horizontal():
                yield Button(f"{self.yes} (y)", id="yes", variant="error")
                yield Button(f"{self.no} (n / esc)", id="no", variant="primary")
        yield Footer()  # this question's keys: the footer underneath named the screen's keys, which do nothing here

    @property
    def active_bindings(self) -> dict[str, Any]:
        """The footer names the answers as the buttons do ("y Delete  n Keep"), not yes and no."""
        out: dict[str, Any] = dict(super().active_bindings)
        labels = {"confirm.yes": self.yes, "confirm.no": self.no}
        for key, active in out.items():
            label = labels.get(active.binding.id or "")
            if label:
                out[key] = active._replace(binding=dataclasses.replace(active.binding, description=label))
        return out

    def on_mount(self) -> None:
        # the safe answer has focus: a stray enter never deletes anything
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
