"""An answer in the assistant shell: the model's text as it streams, its citations, and the entries it was sent.

Once mounted, the view streams the answer in an async worker of its own (the
UI never waits on the network; clearing the transcript or leaving the app
cancels it), then checks the citations and logs the answer through the app's
``Lens`` on an engine thread.

The citations are a list: moving through it highlights the cited entry in
the "sources sent" table below (the retrieval as the model saw it, cited rows
marked ●); Enter on a citation opens the entry. An id the model cited but was
never sent is listed in red as invented and cannot be opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Collapsible, DataTable, OptionList, Static
from textual.widgets.option_list import Option

from .bars import TYPE_STYLE

CURSOR = "▌"
INVENTED = "invented:"


class AnswerView(Vertical):
    DEFAULT_CSS = """
    AnswerView { height: auto; padding-left: 2; }
    AnswerView > .answer-status { color: $text-muted; }
    AnswerView > .answer-status.error { color: $error; text-style: bold; }
    AnswerView > .answer-text { margin: 0 0 1 0; }
    AnswerView > OptionList { height: auto; max-height: 8; margin-bottom: 1; border: round $primary-darken-2; }
    AnswerView Collapsible { padding-left: 0; border-top: none; }
    AnswerView DataTable { height: auto; max-height: 14; }
    """

    @dataclass
    class Problem(Message):
        """The answer failed or could not be logged (one line, for the screen's status)."""

        error: str

    def __init__(self, endpoint: Any, prepared: Any) -> None:
        super().__init__(classes="answer")
        self.endpoint = endpoint
        self.model = endpoint.model
        self.prepared = prepared
        self.text = ""
        self.answer: Any = None  # memlens.assist.ask.Answer once the stream ended

    def compose(self) -> ComposeResult:
        yield Static(Text(f"answering with {self.model}…"), classes="answer-status")
        yield Static(Text(CURSOR), classes="answer-text")

    # -- streaming -------------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.stream()

    @work(group="shell-answer", exit_on_error=False)
    async def stream(self) -> None:
        """The model's tokens as they arrive, in the app's event loop."""
        from memlens.assist.ask import finish
        from memlens.assist.llm import LlmError, astream_chat, one_line

        error = None
        try:
            async for token in astream_chat(self.endpoint, self.prepared.messages):
                self.add(token)
        except LlmError as exc:
            error = one_line(str(exc))
        answer = finish(self.prepared, self.text, model=self.model, complete=error is None, error=error)
        self.finish(answer)
        if error:
            self.post_message(self.Problem(error))
        self.log_answer(answer)

    @work(thread=True, group="shell-log", exit_on_error=False)
    def log_answer(self, answer: Any) -> None:
        answer = self.app.lens.log_answer(answer)  # type: ignore[attr-defined]
        if answer.log_error:
            self.post_message(self.Problem(f"the answer was not logged: {answer.log_error}"))

    def add(self, token: str) -> None:
        self.text += token
        self.query_one(".answer-text", Static).update(Text(self.text + CURSOR))

    def finish(self, answer: Any) -> None:
        self.answer = answer
        c = answer.citations
        self.query_one(".answer-text", Static).update(Text(answer.text or "(no answer)"))
        status = self.query_one(".answer-status", Static)
        if answer.complete:
            n = len(c.valid)
            status.update(Text(f"✓ {self.model} · {n} {'entry' if n == 1 else 'entries'} cited"
                               + (f" · {len(c.invented)} invented" if c.invented else "")))
        else:
            status.add_class("error")
            status.update(Text(f"✗ {'incomplete' if answer.text else 'no answer'}: {answer.error}"))
        titles = {r.entry.id: r.entry.title for r in self.prepared.bundle.results}
        options = [Option(Text.assemble((i, "bold cyan"), (" · ", "dim"), titles.get(i, "")), id=i) for i in c.valid]
        options += [Option(Text(f"✗ {i} · not in the context sent: invented by the model", style="red"), id=INVENTED + i,
                           disabled=True) for i in c.invented]
        if options:
            citations = OptionList(*options, classes="citations")
            citations.border_title = "citations · ↑/↓ highlights the source · enter opens it"
            self.mount(citations)
        table: DataTable[Any] = DataTable(cursor_type="row", classes="sources")
        table.add_columns("", "#", "id", "type", "title")
        for r in self.prepared.bundle.results:
            e = r.entry
            cited = e.id in c.valid
            table.add_row(Text("●", style="bold cyan") if cited else "", str(r.rank), Text(e.id, style="bold" if cited else ""),
                          Text(e.type.value, style=TYPE_STYLE.get(e.type.value, "")), e.title, key=e.id)
        self.mount(Collapsible(table, title=f"sources sent to the model ({len(self.prepared.sent_ids)}) · ● cited",
                               collapsed=False))

    # -- citations ---------------------------------------------------------------------------------

    def highlight(self, entry_id: str) -> bool:
        """Move the sources table's cursor to ``entry_id`` (False when it was not sent)."""
        table = self.query_one(".sources", DataTable)
        try:
            row = table.get_row_index(entry_id)
        except Exception:
            return False
        table.move_cursor(row=row, animate=False)
        return True

    @on(OptionList.OptionHighlighted, ".citations")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id and not event.option.id.startswith(INVENTED):
            self.highlight(event.option.id)

    @on(OptionList.OptionSelected, ".citations")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id and not event.option.id.startswith(INVENTED):
            self.highlight(event.option.id)
            self.app.open_entry(event.option.id)  # type: ignore[attr-defined]

    @on(DataTable.RowSelected, ".sources")
    def _row(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.app.open_entry(event.row_key.value)  # type: ignore[attr-defined]
