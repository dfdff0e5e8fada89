"""The assistant shell: type as the agent's user would and see exactly what the agent would get.

A question goes through the engine's own routing (``/memory`` → conversation,
``@PROFILE`` → that profile, plain text → memory), is assembled with the
working memory within the shell's token budget, and lands in the transcript as
the context markdown plus a one-line trace. ``:commands`` curate entries and
the working memory on the spot, so a user can fix what a question revealed and
ask again. Parsing lives in :mod:`memlens.tui.shell_commands` (no Textual);
every engine call runs in a thread worker and reports back with a message.

With a chat model configured (``[llm]``), a question is also answered: the
context is sent to the model (``memlens.assist``), its tokens stream into the
exchange from an async worker (the UI never waits on the network; leaving the
app cancels the stream), then its citations are checked and listed, each
linked to its entry in the "sources sent" table, and the answer is logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.suggester import Suggester
from textual.widgets import Footer, Header, Input, Markdown, Static
from textual.worker import Worker, WorkerState

from memlens.errors import MemlensError
from memlens.trace import Bundle

from .. import shell_commands as sc
from ..widgets.answer import AnswerView
from ..widgets.exchange import Exchange, trace_line  # noqa: F401 - trace_line: re-exported
from ..widgets.ingest_view import IngestView
from ..widgets.ordered import OrderedInput

WELCOME = (
    "Ask as the agent's user would: plain text uses the memory profile, /memory … the conversation "
    "profile, @academic … (or any profile) names one. The context the agent would receive appears here, "
    "with its trace. :help lists the commands (:deprecate, :task complete, :budget …)."
)
HINT = "Tab/→ completes · ↑/↓ history · :help commands · esc back"
NO_MODEL = ("No chat model is configured, so questions show the context only: set [llm] base_url and model "
            "in the configuration file (or MEMLENS_LLM__BASE_URL and MEMLENS_LLM__MODEL) to get answers.")


class ShellSuggester(Suggester):
    """Completes command names, profiles, entry ids and task ids from ``known`` (see ``sc.suggest``)."""

    def __init__(self, known: sc.Known) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.known = known

    async def get_suggestion(self, value: str) -> str | None:
        return sc.suggest(value, self.known)


class ShellInput(OrderedInput):
    """An Input with shell keys: ↑/↓ walk the history, Tab accepts a completion."""

    BINDINGS = [
        Binding("up", "history_previous", "Previous", show=False, id="shell.history_previous",
                tooltip="Recall the previous line"),
        Binding("down", "history_next", "Next", show=False, id="shell.history_next",
                tooltip="Recall the next line (past the newest: what you were typing)"),
        Binding("tab", "complete", "Complete", show=False, id="shell.complete",
                tooltip="Accept the completion shown in grey"),
    ]

    def __init__(self, history: sc.History, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history = history

    def _recall(self, line: str | None) -> None:
        if line is not None:
            self.value = line
            self.cursor_position = len(line)

    def action_history_previous(self) -> None:
        self._recall(self.history.previous(self.value))

    def action_history_next(self) -> None:
        self._recall(self.history.next())

    def action_complete(self) -> None:
        if self._suggestion and self.cursor_at_end:
            self.action_cursor_right()
        else:
            self.screen.focus_next()


class ShellScreen(Screen[None]):
    """Transcript above, prompt below; the budget is a shell setting (``:budget N``)."""

    BINDINGS = [
        Binding("escape", "back", "Back", id="shell.back", tooltip="Return to the main screen"),
        Binding("ctrl+l", "clear", "Clear", id="shell.clear", tooltip="Empty the transcript (same as :clear)"),
        Binding("pageup", "page(-1)", "Scroll up", show=False, id="shell.page_up", tooltip="Scroll the transcript up"),
        Binding("pagedown", "page(1)", "Scroll down", show=False, id="shell.page_down",
                tooltip="Scroll the transcript down"),
        Binding("f1", "help", "Help", id="shell.help", tooltip="Commands and question syntax (same as :help)"),
    ]
    DEFAULT_CSS = """
    ShellScreen #transcript { height: 1fr; border: round $primary-darken-1; border-title-color: $text-muted;
                              padding: 0 1; }
    ShellScreen #welcome { color: $text-muted; }
    ShellScreen .command { height: auto; margin-bottom: 1; }
    ShellScreen .command > .ask { text-style: bold; }
    ShellScreen .command > .result { padding-left: 2; color: $success; }
    ShellScreen .command > .result.info { color: $text-muted; }
    ShellScreen .help { height: auto; margin-bottom: 1; }
    ShellScreen #prompt-box { height: auto; border: round $primary-darken-1; border-title-color: $text-muted; }
    ShellScreen #prompt { border: tall $accent; }
    ShellScreen #shell-status { height: 1; padding: 0 1; color: $text-muted; }
    ShellScreen #shell-status.error { color: $error; text-style: bold; }
    """

    @dataclass
    class Answered(Message):
        number: int
        markdown: str
        bundle: Bundle

    @dataclass
    class ContextReady(Message):
        """The context is ready and a model is configured: answer."""

        number: int
        prepared: Any  # memlens.assist.ask.Prepared
        endpoint: Any  # memlens.assist.llm.Endpoint

    @dataclass
    class LlmChecked(Message):
        model: str | None

    @dataclass
    class AskFailed(Message):
        number: int
        error: str

    @dataclass
    class Written(Message):
        line: str
        text: str

    @dataclass
    class WriteFailed(Message):
        line: str
        error: str

    @dataclass
    class IngestStarted(Message):
        number: int
        total: int

    @dataclass
    class IngestDone(Message):
        number: int
        summary: dict[str, Any]

    @dataclass
    class IngestFailed(Message):
        number: int
        error: str

    @dataclass
    class KnownLoaded(Message):
        known: dict[str, list[str]]

    def __init__(self) -> None:
        super().__init__()
        self.budget = sc.DEFAULT_BUDGET
        self.history = sc.History()
        self.known = sc.Known()
        self._asked = 0
        self._ingests = 0
        self.llm_model: str | None = None
        self._llm_checked = False

    @property
    def lens(self) -> Any:
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="transcript") as box:
            box.border_title = "Assistant shell · transcript"
            yield Static(self._welcome(), id="welcome")
        with Vertical(id="prompt-box"):
            yield ShellInput(self.history, id="prompt", suggester=ShellSuggester(self.known),
                             placeholder="plain question · /memory question · @academic question · :help")
            yield Static(HINT, id="shell-status")
        yield Footer()

    def on_mount(self) -> None:
        prompt = self.query_one("#prompt", ShellInput)
        prompt.cursor_blink = getattr(self.app, "cursor_blink", True)
        prompt.focus()
        self._title()
        self.load_known()
        self.check_llm()

    def _title(self) -> None:
        answers = f" · answers by {self.llm_model}" if self.llm_model else ""
        self.query_one("#prompt-box").border_title = f"Ask · budget {self.budget} tokens{answers}"

    def _welcome(self) -> Text:
        return Text(f"{WELCOME}\n\n{NO_MODEL}" if self._llm_checked and not self.llm_model else WELCOME)

    @work(thread=True, exclusive=True, group="shell-llm", exit_on_error=False)
    def check_llm(self) -> None:
        endpoint = self.lens.llm_endpoint()
        self.post_message(self.LlmChecked(endpoint.model if endpoint else None))

    def on_shell_screen_llm_checked(self, message: LlmChecked) -> None:
        self.llm_model, self._llm_checked = message.model, True
        self._title()
        for welcome in self.query("#welcome"):
            welcome.update(self._welcome())  # type: ignore[attr-defined]

    def _status(self, text: str = HINT, error: bool = False) -> None:
        status = self.query_one("#shell-status", Static)
        status.set_class(error, "error")
        status.update(Text(f"✗ {text}") if error else Text(text))

    # -- completion values ------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="shell-known", exit_on_error=False)
    def load_known(self) -> None:
        self.post_message(self.KnownLoaded(self.lens.shell_known()))

    def on_shell_screen_known_loaded(self, message: KnownLoaded) -> None:
        for key, values in message.known.items():
            setattr(self.known, key, values)

    # -- one line ---------------------------------------------------------------------------

    @on(Input.Submitted, "#prompt")
    def _submitted(self, event: Input.Submitted) -> None:
        line = event.value
        try:
            cmd = sc.parse(line, self.known.profiles)
        except sc.ShellError as exc:
            self.history.add(line)
            self._status(str(exc), error=True)
            return  # the line stays in the input, to be fixed
        if cmd is None:
            return
        self.history.add(line)
        event.input.value = ""
        self._status()
        if isinstance(cmd, sc.Ask):
            self._start_ask(line.strip(), cmd)
        elif isinstance(cmd, sc.WRITES):
            self._write(line.strip(), cmd)
        elif isinstance(cmd, sc.SetBudget):
            self._set_budget(line.strip(), cmd)
        elif isinstance(cmd, sc.Ingest):
            self._start_ingest(line.strip(), cmd)
        elif isinstance(cmd, sc.Help):
            self.action_help()
        elif isinstance(cmd, sc.Clear):
            self.call_later(self.action_clear)

    def _append(self, widget: Any, top: bool = False) -> None:
        transcript = self.query_one("#transcript", VerticalScroll)
        for welcome in self.query("#welcome"):
            welcome.remove()
        for older in self.query(Exchange):
            older.pinned = False
        transcript.mount(widget)
        if top:
            self.call_after_refresh(transcript.scroll_to_widget, widget, top=True, animate=False)
        else:
            self.call_after_refresh(transcript.scroll_end, animate=False)

    def _note(self, line: str, text: str, done: bool = True) -> None:
        """A command and what it did, in the transcript (✓ for a write that happened)."""
        result = Static(Text(f"✓ {text}" if done else text), classes="result" if done else "result info")
        self._append(Vertical(Static(Text(f"› {line}"), classes="ask"), result, classes="command"))

    # -- questions --------------------------------------------------------------------------

    def _start_ask(self, line: str, cmd: sc.Ask) -> None:
        self._asked += 1
        for older in self.query(Exchange):
            older.fold()
        self._append(Exchange(line, self._asked), top=True)
        # named after its exchange, so a crash can be reported in the right place
        self.run_worker(partial(self._ask, self._asked, cmd, self.budget), name=f"ask-{self._asked}",
                        group="shell-ask", thread=True, exit_on_error=False)

    def _ask(self, number: int, cmd: sc.Ask, budget: int) -> None:
        """Runs in a thread worker."""
        try:
            endpoint = self.lens.llm_endpoint()
            if endpoint is not None:
                prepared = self.lens.prepare_answer(cmd.text, budget, cmd.profile)
                self.post_message(self.ContextReady(number, prepared, endpoint))
                return
            markdown, bundle = self.lens.context(cmd.text, budget, cmd.profile)
        except MemlensError as exc:
            self.post_message(self.AskFailed(number, str(exc)))
            return
        self.post_message(self.Answered(number, markdown, bundle))

    def on_shell_screen_context_ready(self, message: ContextReady) -> None:
        exchange = self._exchange(message.number)
        if exchange is None:
            return
        p = message.prepared
        exchange.show(p.context, p.bundle, answer=AnswerView(message.endpoint, p))  # it streams once mounted

    def on_answer_view_problem(self, message: AnswerView.Problem) -> None:
        self._status(message.error, error=True)

    def _exchange(self, number: int) -> Exchange | None:
        found = self.query(f"#exchange-{number}")
        return found.first(Exchange) if found else None

    def on_shell_screen_answered(self, message: Answered) -> None:
        exchange = self._exchange(message.number)
        if exchange is not None:
            exchange.show(message.markdown, message.bundle)  # it scrolls itself into view as it grows

    def on_shell_screen_ask_failed(self, message: AskFailed) -> None:
        exchange = self._exchange(message.number)
        if exchange is not None:
            exchange.fail(message.error)
        self._status(message.error, error=True)

    # -- commands ---------------------------------------------------------------------------

    @work(thread=True, group="shell-write", exit_on_error=False)
    def _write(self, line: str, cmd: sc.Command) -> None:
        try:
            text = sc.execute(cmd, self.lens)
        except MemlensError as exc:
            self.post_message(self.WriteFailed(line, str(exc)))
            return
        self.post_message(self.Written(line, text))

    def on_shell_screen_written(self, message: Written) -> None:
        self._note(message.line, message.text)
        self.load_known()
        refresh = getattr(self.app, "refresh_store", None)
        if refresh is not None:
            refresh(first=False)  # the main screen's working-memory pane

    def on_shell_screen_write_failed(self, message: WriteFailed) -> None:
        self._status(message.error, error=True)
        prompt = self.query_one("#prompt", ShellInput)
        if not prompt.value:  # give the line back, to be fixed
            prompt.value = message.line
            prompt.cursor_position = len(message.line)

    # -- ingestion --------------------------------------------------------------------------

    def _start_ingest(self, line: str, cmd: sc.Ingest) -> None:
        self._ingests += 1
        view = IngestView(line, self._ingests)
        self._append(view)
        self.run_worker(partial(self._ingest, self._ingests, cmd, view), name=f"ingest-{self._ingests}",
                        group="shell-ingest", thread=True, exit_on_error=False)

    def _ingest(self, number: int, cmd: sc.Ingest, view: IngestView) -> None:
        """Runs in a thread worker; the engine's progress events go straight to the view."""
        try:
            total = self.lens.ingest_total(list(cmd.paths))
            self.post_message(self.IngestStarted(number, total))
            summary = self.lens.ingest(list(cmd.paths), wing=cmd.wing, room=cmd.room,
                                       progress=lambda e: view.post_message(IngestView.Progressed(dict(e))))
        except MemlensError as exc:
            self.post_message(self.IngestFailed(number, str(exc)))
            return
        self.post_message(self.IngestDone(number, summary))

    def _ingest_view(self, number: int) -> IngestView | None:
        found = self.query(f"#ingest-{number}")
        return found.first(IngestView) if found else None

    def on_shell_screen_ingest_started(self, message: IngestStarted) -> None:
        view = self._ingest_view(message.number)
        if view is not None:
            view.start(message.total)

    def on_shell_screen_ingest_done(self, message: IngestDone) -> None:
        view = self._ingest_view(message.number)
        if view is not None:
            view.finish(message.summary)
        self.load_known()
        refresh = getattr(self.app, "refresh_store", None)
        if refresh is not None:
            refresh(first=False)  # new wings and rooms for the main screen's completion

    def on_shell_screen_ingest_failed(self, message: IngestFailed) -> None:
        view = self._ingest_view(message.number)
        if view is not None:
            view.fail(message.error)
        self._status(message.error, error=True)

    def _set_budget(self, line: str, cmd: sc.SetBudget) -> None:
        if cmd.tokens is None:
            self._note(line, f"the context budget is {self.budget} tokens (:budget N changes it)", done=False)
            return
        before, self.budget = self.budget, cmd.tokens
        self._title()
        self._note(line, f"context budget {before} → {self.budget} tokens for the next questions")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A bug in a worker (engine errors are reported by the workers themselves)."""
        if event.state == WorkerState.ERROR and (event.worker.group or "").startswith("shell"):
            error = f"internal error: {event.worker.error!r}"
            if event.worker.name.startswith("ingest-"):
                view = self._ingest_view(int(event.worker.name[7:]))
                if view is not None:
                    view.fail(error)
            if event.worker.name.startswith("ask-"):
                exchange = self._exchange(int(event.worker.name[4:]))
                if exchange is not None:
                    exchange.fail(error)
            self._status(error, error=True)

    # -- actions ----------------------------------------------------------------------------

    def prefill(self, line: str) -> None:
        """Put ``line`` in the prompt, cursor at its end (the palette's "Ingest" starts ``:ingest ``)."""
        if not self.is_mounted:
            self.call_after_refresh(self.prefill, line)
            return
        prompt = self.query_one("#prompt", ShellInput)
        prompt.value = line
        prompt.cursor_position = len(line)
        prompt.focus()

    def action_back(self) -> None:
        self.app.pop_screen()

    async def action_clear(self) -> None:
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.remove_children()  # gone before the new welcome (same id) is mounted
        await transcript.mount(Static(self._welcome(), id="welcome"))

    def action_page(self, direction: int) -> None:
        transcript = self.query_one("#transcript", VerticalScroll)
        (transcript.scroll_page_down if direction > 0 else transcript.scroll_page_up)(animate=False)

    def action_help(self) -> None:
        self._append(Vertical(Static(Text("› :help", style="bold")), Markdown(sc.HELP), classes="help"), top=True)
