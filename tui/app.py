"""``MemlensApp``: the Textual app over the memlens engine.

The first frame never waits for the model: the store opens fast (no model),
the embedding model loads in a thread worker while the header says so, and a
search typed meanwhile simply waits on the engine thread.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from rich.segment import Segment
from textual import work
from textual.app import App
from textual.binding import Binding
from textual.color import Color
from textual.content import Content
from textual.filter import LineFilter
from textual.widgets import Input, TextArea

from memlens.errors import MemlensError
from memlens.visible import strip_controls

from .commands import MemlensCommands
from .keys import KeysInTheirTurn, KeysWhereTheCursorIs
from .messages import ModelFailed, ModelReady, StoreChanged
from .screens.confirm import ConfirmScreen
from .screens.impact import ImpactCommands
from .screens.main import MainScreen
from .screens.replay import ReplayCommands
from .service import WATCHED, Lens


class NoControls(LineFilter):
    """Every rendered line without control characters: text from the store, a file name, a page or a model is
    drawn, never sent to the terminal as a command (ESC starts a sequence that can clear the screen or set the
    window title). Textual removes only a few controls itself; the ones dropped here take no cell, so every
    column stays in place. The app's own cursor moves are control segments, left as they are."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if all(seg.control or seg.text.isprintable() for seg in segments):
            return segments
        return [seg if seg.control else Segment(strip_controls(seg.text), seg.style) for seg in segments]


_NO_CONTROLS = NoControls()


class MemlensApp(KeysInTheirTurn, KeysWhereTheCursorIs, App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "memlens"
    COMMANDS = App.COMMANDS | {MemlensCommands, ReplayCommands, ImpactCommands}
    BINDINGS = [
        # q has its own action: switched off while a text field has focus, unlike Textual's ctrl+q (action quit)
        Binding("q", "quit_key", "Quit", id="app.quit", tooltip="Quit memlens"),
        # ctrl+c copies a selection in a text field (the field's own binding) and otherwise says how to quit
        Binding("ctrl+c", "copy_or_quit_hint", show=False, priority=True),
    ]

    def __init__(self, lens: Lens, *, demo: bool = False, poll_interval: float = 1.0, watch: bool = True,
                 cursor_blink: bool = True) -> None:
        super().__init__()
        self.lens = lens
        self.cursor_blink = cursor_blink
        """False in snapshot tests: every Input the app makes reads this."""
        self.demo = demo
        self.poll_interval = poll_interval
        self.watch = watch
        self.model_status = "loading…"
        self.read_only = False
        self._generations: dict[str, int] | None = None
        self.main: MainScreen | None = None
        self._shell: Any = None
        self.health: dict[str, Any] | None = None
        """Golden queries' verdicts and the stale vector count (``Lens.health``), shown in the header."""

    def get_line_filters(self) -> list[LineFilter]:
        return [*super().get_line_filters(), _NO_CONTROLS]

    # -- quitting ----------------------------------------------------------------------------

    def action_quit_key(self) -> None:
        """Quit, asking first when an open entry has edits that quitting would lose."""
        asks = [getattr(screen, "unsaved_edits", None) for screen in self.screen_stack]  # a dialog may be on top
        fields = ", ".join(f for f in (ask() for ask in asks if callable(ask)) if f)
        if not fields:
            self.exit()
            return
        if isinstance(self.screen, ConfirmScreen):  # a question is open: it is answered first
            return
        self.push_screen(ConfirmScreen("Quit and lose unsaved edits?", f"Changed: {fields}", yes="Quit", no="Keep editing"),
                         lambda yes: self.exit() if yes else None)

    async def action_quit(self) -> None:
        """ctrl+q (Textual's quit) asks about unsaved edits as q does: it quit at once and lost them."""
        self.action_quit_key()

    def action_copy_or_quit_hint(self) -> None:
        field = self.focused
        if isinstance(field, (Input, TextArea)) and field.selected_text:
            field.action_copy()
        elif self.screen.get_selected_text():
            self.screen.action_copy_text()
        else:
            self.action_help_quit()

    # -- start-up ---------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.main = MainScreen()
        self.push_screen(self.main)
        self._update_title()
        self.load_model()
        self.refresh_store()
        if self.watch:
            self.set_interval(self.poll_interval, self.poll_store)

    def _update_title(self) -> None:
        wing = self.lens.active_wing or "—"
        path = str(self.lens.store_path)
        home = str(Path.home())
        path = "~" + path[len(home):] if path.startswith(home + "/") else path
        health = self._health_text()  # before the path, which a narrow header cuts off
        self.sub_title = (f"wing {wing} · model {self.model_status} · " + (f"{health} · " if health else "") + path
                          + (" · read-only" if self.read_only else ""))

    def _health_text(self) -> str:
        return " · ".join(text for text, _ in self._health_parts())

    def _health_parts(self) -> list[tuple[str, str]]:
        """``(text, style)`` of the header's golden status and stale count; none when there is nothing to say."""
        h = self.health or {}
        parts = []
        g = h.get("golden")
        if g:
            total = g["passed"] + g["failed"]
            text = f"golden {g['passed']}/{total}" + (f" ✗ {g['failed']} failing" if g["failed"] else "")
            parts.append((text, "bold red" if g["failed"] else "green"))
        if h.get("stale"):
            parts.append((f"{h['stale']} stale vector{'s' if h['stale'] != 1 else ''} (memlens reembed)", "bold yellow"))
        return parts

    def format_title(self, title: str, sub_title: str) -> Content:
        """The header: the golden status and the stale count keep their colours (the rest is dim)."""
        parts, health = self._health_parts(), self._health_text()
        at = sub_title.find(f" · {health} · ") if health else -1
        if at < 0:
            return super().format_title(title, sub_title)
        out = Content.assemble(Content(title), (" — ", "dim"), Content(sub_title[:at]).stylize("dim"))
        for text, style in parts:
            out = Content.assemble(out, (" · ", "dim"), (text, style))
        return Content.assemble(out, Content(sub_title[at + len(health) + 3:]).stylize("dim"))

    @work(thread=True, exclusive=True, group="health", exit_on_error=False)
    def refresh_health(self) -> None:
        """Check the golden queries and count stale vectors on an engine thread (at start, after each write)."""
        try:
            health = self.lens.health()
        except MemlensError:
            return
        self.call_from_thread(self._apply_health, health)

    def _apply_health(self, health: dict[str, Any]) -> None:
        self.health = health
        self._update_title()

    @work(thread=True, group="model", exit_on_error=False)
    def load_model(self) -> None:
        try:
            self.post_message(ModelReady(self.lens.load_model()))
        except MemlensError as exc:
            self.post_message(ModelFailed(str(exc)))
            return
        try:
            self.lens.warm_index(text=True)  # on a worker thread: the app is usable meanwhile
        except MemlensError:
            pass  # searches fall back to sqlite-vec; nothing is lost
        if self._running:
            self.call_from_thread(self.refresh_health)  # golden checks search: once the model and the index are up
        # Everything alive now (widgets, modules, the model, the index) lives as long as the app.
        # Frozen, after one last collection, a full collection no longer walks it: it had cost
        # 40-50 ms and landed in the middle of searches (a 10 ms search showed 100-200 ms).
        if self._running:  # not after on_unmount has handed everything back (quit while the model loaded)
            gc.collect()
            gc.freeze()

    def on_model_ready(self, message: ModelReady) -> None:
        self.model_status = f"ready ({message.model_id.split('@')[0]})"
        self._update_title()

    def on_model_failed(self, message: ModelFailed) -> None:
        self.model_status = "unavailable"
        self._update_title()
        self.notify(message.error, title="Embedding model", severity="error", timeout=15)

    @work(thread=True, group="store", exit_on_error=False)
    def refresh_store(self, first: bool = True) -> None:
        """Counts, completion values and the working memory; on an empty store offer the demo."""
        try:
            count = self.lens.count()
            self.read_only = self.lens.read_only()
            wings, rooms = self.lens.wings(), self.lens.rooms()
            window = self.lens.window()
        except MemlensError as exc:
            self.call_from_thread(self.notify, str(exc), title="Store", severity="error", timeout=20)
            return
        self.call_from_thread(self._show_window, window)  # first: the first-run dialog, if any, opens over it
        self.call_from_thread(self._apply_store, count, wings, rooms, first)

    def _apply_store(self, count: int, wings: list[str], rooms: list[str], first: bool) -> None:
        self._update_title()  # the active wing is known once the store is open
        if self.main is not None:
            self.main.set_known(wings, rooms)
        if first and count == 0:
            if self.demo:
                self.load_demo()
            else:
                from .screens.first_run import FirstRunScreen

                # once the main screen has painted what it just got (the working memory): a screen under a dialog
                # showed what it had painted before the dialog opened
                self.call_after_refresh(self.push_screen, FirstRunScreen(str(self.lens.store_path)),
                                        self._first_run_done)

    def _first_run_done(self, load: bool | None) -> None:
        if load:
            self.load_demo()

    @work(thread=True, group="store", exit_on_error=False)
    def load_demo(self) -> None:
        try:
            report = self.lens.load_demo()
        except MemlensError as exc:
            self.call_from_thread(self.notify, str(exc), title="Demo memory", severity="error")
            self.call_from_thread(self.refresh_store, first=False)  # what the store holds now (another's writes)
            return
        self.call_from_thread(self.notify, f"Loaded {report['imported']} entries and the task history.", title="Demo memory")
        self.call_from_thread(self._after_demo)

    def _after_demo(self) -> None:
        self._update_title()
        self.refresh_health()
        self.refresh_store(first=False)
        if self.main is not None:
            self.main.query_one("#query").value = "callbacks blocking"  # type: ignore[attr-defined]

    def _show_window(self, window: Any) -> None:
        if self.main is not None:
            for pane in self.main.query("#wm"):  # none while the app is closing: a late load has nowhere to go
                pane.show(window, self.lens.now(), self.lens.now)  # type: ignore[attr-defined]

    # -- live store -------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="poll", exit_on_error=False)
    def poll_store(self) -> None:
        gens = self.lens.generations()
        previous, self._generations = self._generations, gens
        if previous is None or gens == previous:
            return
        changed = sorted(w for w in set(gens) | set(previous) if gens.get(w) != previous.get(w))
        write = self.lens.describe_write([w for w in changed if w != WATCHED] or changed)
        self.post_message(StoreChanged(changed, write, gens))

    def on_store_changed(self, message: StoreChanged) -> None:
        self.refresh_store(first=False)
        if self.main is not None:
            wings = [w for w in message.wings if w != WATCHED]
            if wings:
                self.main.mark_stale(message.write, wings, message.generations)
        if any(w != WATCHED for w in message.wings):
            self.refresh_health()  # another process wrote: the golden queries may pass or fail now
        for screen in self.screen_stack:  # screens beside the main one that list what a write may change
            hook = getattr(screen, "store_changed", None)
            if callable(hook):
                hook(message)

    # -- navigation used by the screens and the command palette ---------------------------

    def open_entry(self, entry_id: str | None) -> None:
        from .screens.entry import EntryScreen

        self.push_screen(EntryScreen(entry_id))

    def why_not(self, query: str) -> None:
        from .screens.why_not import WhyNotScreen

        self.push_screen(WhyNotScreen(query))

    def context_preview(self, query: str) -> None:
        from .screens.context import ContextScreen

        self.push_screen(ContextScreen(query))

    def open_shell(self, prefill: str | None = None) -> None:
        """One shell per app: its transcript, history and budget survive leaving it (``prefill``: a line to finish)."""
        from .screens.shell import ShellScreen

        if self._shell is None:
            self._shell = ShellScreen()
            self.install_screen(self._shell, name="shell")  # installed screens are kept when popped
        self.push_screen("shell")
        if prefill is not None:
            self._shell.prefill(prefill)

    def open_metrics(self) -> None:
        from .screens.metrics import MetricsScreen

        self.push_screen(MetricsScreen())

    def open_index(self) -> None:
        from .screens.index import IndexScreen

        self.push_screen(IndexScreen())

    def open_review(self) -> None:
        from .screens.review import ReviewScreen

        self.push_screen(ReviewScreen())

    def next_wing(self) -> None:
        wings = [w for w in (self.main.known_wings if self.main and hasattr(self.main, "known_wings") else []) if w != "_global"]
        if not wings:
            return
        current = self.lens.active_wing
        self.lens.active_wing = wings[(wings.index(current) + 1) % len(wings)] if current in wings else wings[0]
        self._update_title()
        self.notify(f"Active wing: {self.lens.active_wing}", timeout=2)
        if self.main is not None:
            self.main.action_rerun()

    def on_unmount(self) -> None:
        self.lens.close()
        gc.unfreeze()  # the app's objects go back to the collector (a host process, or a test session, goes on)


def _opener(store: str | Path | None, **kwargs: Any) -> tuple[Path | str, Any]:
    """The store's name now (for the header: a file path, or a ``postgresql://`` URI without its password)
    and a function that opens it (on an engine thread; a PostgreSQL store with a connection pool)."""
    from memlens.config import load_settings
    from memlens.store.newstore import store_target
    from memlens.store.postgres.connect import is_uri, label

    settings = kwargs.pop("settings", None) or load_settings()
    target = store_target(store, settings)
    shown: Path | str = label(target) if isinstance(target, str) and is_uri(target) else Path(target)

    def open_memory() -> Any:
        from memlens import Memory

        return Memory.open(target, settings=settings, pooled=True, client="app", **kwargs)  # as the retrieval log names it

    return shown, open_memory


def _check_store(path: Path | str) -> None:
    """Refuse a file that is not a memlens store before the screen switches to the app (one-line error)."""
    from memlens.browse import check_store_file

    check_store_file(path)


def run_app(store: str | Path | None, *, demo: bool = False, active_wing: str | None = None) -> int:
    """Entry point for ``memlens`` / ``memlens tui``: the first frame comes before the engine loads."""
    import os
    import sys

    path, open_memory = _opener(store)
    _check_store(path)
    lens = Lens(path, open_memory, active_wing=active_wing)
    app = MemlensApp(lens, demo=demo)
    app.run()
    if lens.engine_busy():
        # an engine call (a first-time model export, a locked store) is still running: every write is
        # its own transaction, so nothing is lost by not waiting for it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(app.return_code or 0)
    return app.return_code or 0


def create_app(store: str | Path, **kwargs: Any) -> MemlensApp:
    """One factory for tests, screenshots and benchmarks."""
    lens_kwargs = {k: kwargs.pop(k) for k in ("active_wing", "now") if k in kwargs}
    memory_kwargs = {k: kwargs.pop(k) for k in ("embedder", "settings") if k in kwargs}
    path, open_memory = _opener(store, **memory_kwargs)
    return MemlensApp(Lens(path, open_memory, **lens_kwargs), **kwargs)
