"""The main screen: working memory, scoped search, results and the retrieval trace."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.cells import cell_len
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Header, Input, Static

from memlens.errors import MemlensError

from ..footer import FooterFits
from ..keys import KeysWhereTheCursorIs, types_text
from ..messages import SearchDone, SearchFailed
from ..widgets.results import ResultsTable
from ..widgets.search_bar import ScopeInput, ScopeSuggester, caret_line, check
from ..widgets.trace_view import TracePane
from ..widgets.working_memory import WorkingMemoryPane

if TYPE_CHECKING:
    from memlens.trace import Bundle, Result, Trace

DEBOUNCE_S = 0.3


def covers_every_wing(trace: Trace) -> bool:
    """Whether the search behind ``trace`` ran over every wing of the store: neither the query (``wing=``) nor an
    active wing narrowed it. Its ``wings_searched`` lists only the wings there were then, so a write to any wing,
    a new one too, may change its results."""
    return trace.active_wing is None and not trace.filters.get("wing")


class MainScreen(FooterFits, KeysWhereTheCursorIs, Screen[None]):
    """The letter keys act on the results and the trace; in the search box they type (``memlens.tui.keys``), and
    Escape leaves the box."""

    # on a narrow terminal the footer keeps Search, Shell, Review, Wing, Help and Quit (F1 lists the others)
    FOOTER_SPARE = ("main.rerun", "main.dropped", "main.new", "main.context", "main.why_not", "main.leave_search",
                    "main.wing", "main.shell")  # (the last two go only in a terminal under 80 columns)

    BINDINGS = [
        Binding("escape", "leave_search", "Results", id="main.leave_search",
                tooltip="Leave the search box: the letter keys then act on the results"),
        Binding("slash", "focus_search", "Search", id="main.search", tooltip="Focus the scoped search input"),
        Binding("r", "rerun", "Re-run", id="main.rerun", tooltip="Run the current query again (fresh from the store)"),
        Binding("d", "toggle_dropped", "Dropped", id="main.dropped", tooltip="List the dropped candidates with stage and reason"),
        Binding("enter", "open_entry", "Entry", id="main.entry", show=False, tooltip="Open the selected entry"),
        Binding("n", "new_entry", "New", id="main.new", tooltip="Create a new entry"),
        Binding("x", "why_not", "Why not?", id="main.why_not", tooltip="Pick any entry and see where it was dropped"),
        Binding("c", "context", "Context", id="main.context", tooltip="Preview the budgeted context an agent would get"),
        Binding("s", "shell", "Shell", id="main.shell", tooltip="Assistant shell: type as the agent's user would"),
        Binding("m", "metrics", "Metrics", id="main.metrics", show=False, tooltip="Retrieval latency and cache metrics"),
        Binding("i", "index", "Index", id="main.index", show=False, tooltip="Code index status, runs and skipped files"),
        Binding("v", "review", "Review", id="main.review",
                tooltip="What agents wrote, with the evidence to accept, reject or merge it"),
        Binding("w", "next_wing", "Wing", id="main.wing", tooltip="Switch the active wing"),
        Binding("t", "toggle_working_memory", "Tasks", id="main.tasks",
                tooltip="On a narrow terminal: the working memory (recent tasks, active blockers) in place of the search"),
        Binding("f1", "help", "Help", id="main.help", tooltip="Help for the focused pane"),
    ]

    show_dropped: reactive[bool] = reactive(False)
    """Whether the trace lists every dropped candidate."""

    def __init__(self) -> None:
        super().__init__()
        self.bundle: Bundle | None = None
        self.query_text = ""
        self.stale: dict | None = None
        self._stale_what = ""
        self._debounce: Timer | None = None
        self.suggester = ScopeSuggester()

    @property
    def lens(self):  # type: ignore[no-untyped-def]
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="top"):
            with VerticalScroll(id="wm-box") as box:
                box.border_title = "Working memory"
                yield WorkingMemoryPane(id="wm")
            with Vertical(id="search-box") as box:
                box.border_title = "Scoped search"
                yield ScopeInput(placeholder="wing=… room=… type=invariant|decision  free text   (F1 for help)",
                                 id="query", suggester=self.suggester)
                yield Static(id="status")
                yield ResultsTable(id="results")
        with VerticalScroll(id="trace-box") as box:
            box.border_title = "Retrieval trace"
            yield TracePane(id="trace")
        yield Footer()

    def on_resize(self) -> None:
        # at 80 columns the working memory pane gives its room to the results (t shows it in their place)
        self.set_class(self.size.width < 100, "narrow")
        self.set_class(self.size.height < 34, "short")
        if not self.has_class("narrow") and self.has_class("working-memory"):
            self._show_working_memory(False)

    def on_mount(self) -> None:
        self.query_one(TracePane).show(None, None, False)
        self._status("")
        query = self.query_one("#query", Input)
        query.cursor_blink = getattr(self.app, "cursor_blink", True)
        query.focus()

    # -- values for completion --------------------------------------------------------------

    def set_known(self, wings: list[str], rooms: list[str]) -> None:
        self.known_wings, self.known_rooms = wings, rooms
        self.suggester.values["wing"] = wings
        self.suggester.values["room"] = rooms

    # -- searching --------------------------------------------------------------------------

    @on(Input.Changed, "#query")
    def _query_changed(self, event: Input.Changed) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        text = event.value.strip()
        error = check(text, getattr(self, "known_wings", []), getattr(self, "known_rooms", []))
        if error is not None:
            self._status(caret_line(error, text, self._caret_indent(event.value)), "error")
            return
        if not text:  # an emptied box: no results of a query no longer there (nor an r that would run it again)
            self._status("")
            self.bundle, self.query_text, self.stale = None, "", None
            self.query_one(ResultsTable).show_nothing()
            self.query_one(TracePane).show(None, None, False)
            return
        self._status("…", "pending")
        self._debounce = self.set_timer(DEBOUNCE_S, lambda: self.search(text))

    def _caret_indent(self, value: str) -> int:
        """Cells from the status line's first character to where the box draws the checked (stripped) query's first:
        the box's border and padding, the spaces the check strips, less what the box has scrolled off to the left."""
        box, status = self.query_one("#query", Input), self.query_one("#status", Static)
        lead = value[: len(value) - len(value.lstrip())]
        return box.content_region.x - status.content_region.x + cell_len(lead) - box.scroll_offset.x

    @on(Input.Submitted, "#query")
    def _query_submitted(self, event: Input.Submitted) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        text = event.value.strip()
        # the debounce may already have started this very query: do not run it twice, unless its results are stale
        # (Enter is what re-runs from inside the box, where r would type)
        if (
            text
            and (text != self.query_text or self.stale is not None)
            and check(text, getattr(self, "known_wings", []), getattr(self, "known_rooms", [])) is None
        ):
            self.search(text)
        self.query_one(ResultsTable).focus()

    def search(self, query: str) -> None:
        self.query_text = query
        self._status("searching…", "pending")
        self._run_search(query)

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def _run_search(self, query: str) -> None:
        try:
            seen = self.lens.generations()
            bundle = self.lens.search(query)  # each result says whether its vector is fresh
        except MemlensError as exc:
            self.post_message(SearchFailed(query, str(exc)))
            return
        self.post_message(SearchDone(query, bundle, seen))

    def on_search_done(self, message: SearchDone) -> None:
        if message.query != self.query_text:
            return  # an older query finished late
        self.bundle, self.stale, self._seen = message.bundle, None, message.generations or {}
        self.query_one(ResultsTable).show(message.bundle)
        t = message.bundle.trace
        cache = "cache hit" if t.cache_hit else "cache miss"
        wings = f" · wings {', '.join(t.wings_searched)}" if t.wings_searched else ""
        self._status(f"{len(message.bundle.results)} results · {t.latency_ms.get('total', 0):.1f} ms · {cache}"
                     f" · {len(t.dropped)} dropped{wings}", "ok")
        self._show_trace()

    def on_search_failed(self, message: SearchFailed) -> None:
        if message.query == self.query_text:
            self._status(message.error, "error")

    def mark_stale(self, write: dict | None, wings: list[str], generations: dict[str, int] | None = None) -> None:
        """Another write touched a searched wing: keep the rows, say they are stale and why. Not when the results
        were searched after that write (the app's own edit re-runs its search before the poll hears of it).
        A search without a wing (no wing= and no active wing) covers every wing, a wing created since included."""
        if self.bundle is None:
            return
        if not covers_every_wing(self.bundle.trace):
            wings = [w for w in wings if w in self.bundle.trace.wings_searched]
        if not wings:
            return
        seen = getattr(self, "_seen", {})
        if generations and all(generations.get(w, 0) <= seen.get(w, -1) for w in wings):
            return
        if not self.query(ResultsTable):  # the app is closing: nothing left to mark
            return
        self.stale = write or {"wings": wings}
        self.query_one(ResultsTable).show(self.bundle, stale=True, keep_cursor=True)
        self._stale_what = f"{write.get('action')} {write.get('entry_id')} in {write.get('wing')}" if write else ", ".join(wings)
        self._stale_status()

    def _stale_status(self) -> None:
        """The stale line names the key that re-runs where the cursor is: Enter in the search box, r elsewhere."""
        key = "enter" if types_text(self.focused) else "r"
        self._status(f"⚠ stale since {self._stale_what} · {key} re-runs", "stale")

    def on_descendant_focus(self) -> None:
        if self.stale is not None:
            self._stale_status()

    # -- trace ------------------------------------------------------------------------------

    def selected(self) -> Result | None:
        if self.bundle is None or not self.bundle.results:
            return None
        table = self.query_one(ResultsTable)
        row = table.cursor_row
        return self.bundle.results[row] if 0 <= row < len(self.bundle.results) else None

    @on(DataTable.RowHighlighted, "#results")
    def _row(self, _: DataTable.RowHighlighted) -> None:
        self._show_trace()

    @on(DataTable.RowSelected, "#results")
    def _row_chosen(self, event: DataTable.RowSelected) -> None:
        # the table takes enter itself (its cursor's selection), before the screen's binding would see it
        event.stop()
        self.action_open_entry()

    def _show_trace(self) -> None:
        self.query_one(TracePane).show(self.bundle, self.selected(), self.show_dropped)

    def watch_show_dropped(self) -> None:
        self._show_trace()

    def _status(self, text: str, kind: str = "") -> None:
        status = self.query_one("#status", Static)
        status.set_classes(kind)
        status.update(Content(text))  # it may quote the query or an engine error: text, never markup

    # -- actions ----------------------------------------------------------------------------

    # These two move the focus at once (set_focus): focus() moves it only after the keys already read, so letters
    # typed in the same burst as / fired the results' keys (w switched the wing, q quit) instead of being typed.

    def action_focus_search(self) -> None:
        self._show_working_memory(False)
        self.set_focus(self.query_one("#query", Input))

    def action_leave_search(self) -> None:
        self._show_working_memory(False)
        self.set_focus(self.query_one(ResultsTable))

    def action_toggle_working_memory(self) -> None:
        self._show_working_memory(not self.has_class("working-memory"))

    def _show_working_memory(self, show: bool) -> None:
        """On a narrow terminal the working memory takes the place of the search and the trace (t), and gives it back
        (t, esc, /)."""
        self.set_class(show, "working-memory")
        if show:
            self.set_focus(self.query_one("#wm-box"))
        elif self.focused is None or self.focused.id == "wm-box":
            self.set_focus(self.query_one(ResultsTable))  # at once: / moves it on to the search box right after
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "leave_search":  # Escape means something only inside the search box, or over the working memory
            return types_text(self.focused) or self.has_class("working-memory")
        if action == "toggle_working_memory" and not self.has_class("narrow"):  # a wide screen always shows it
            return False
        if action == "open_entry" and self.has_class("working-memory"):  # the results are out of sight
            return False
        return super().check_action(action, parameters)

    def action_rerun(self) -> None:
        if self.query_text:
            self.search(self.query_text)

    def action_toggle_dropped(self) -> None:
        self.show_dropped = not self.show_dropped

    def action_open_entry(self) -> None:
        r = self.selected()
        if r is not None and r.entry.wing != "_workspace":
            self.app.open_entry(r.entry.id)  # type: ignore[attr-defined]

    def action_new_entry(self) -> None:
        self.app.open_entry(None)  # type: ignore[attr-defined]

    def action_why_not(self) -> None:
        self.app.why_not(self.query_text)  # type: ignore[attr-defined]

    def action_context(self) -> None:
        self.app.context_preview(self.query_text)  # type: ignore[attr-defined]

    def action_shell(self) -> None:
        self.app.open_shell()  # type: ignore[attr-defined]

    def action_metrics(self) -> None:
        self.app.open_metrics()  # type: ignore[attr-defined]

    def action_ingest(self) -> None:
        self.app.open_shell(":ingest ")  # type: ignore[attr-defined]

    def action_index(self) -> None:
        self.app.open_index()  # type: ignore[attr-defined]

    def action_review(self) -> None:
        self.app.open_review()  # type: ignore[attr-defined]

    def action_next_wing(self) -> None:
        self.app.next_wing()  # type: ignore[attr-defined]

    def action_help(self) -> None:
        focused = self.focused
        topic = None
        while focused is not None and topic is None:
            topic = focused.id if focused.id in ("query", "results", "trace", "wm") else None
            topic = "wm" if focused.id == "wm-box" else topic
            focused = focused.parent  # type: ignore[assignment]
        from .help import HelpScreen

        self.app.push_screen(HelpScreen(topic))
