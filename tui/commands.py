"""Command palette provider: the app's actions, searchable (ctrl+p)."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

ACTIONS = (
    ("Search: focus the scoped query", "focus_search", "Type a scoped query"),
    ("Search: re-run the current query", "rerun", "Fresh results; shows cache provenance"),
    ("Trace: show or hide dropped candidates", "toggle_dropped", "Every dropped candidate with stage and reason"),
    ("Why not? Pick an entry and see where it was dropped", "why_not", "The exact stage that dropped an entry"),
    ("Context preview: what the agent receives", "context", "Budgeted markdown; kept, summarised and dropped"),
    ("Assistant shell", "shell", "Type as the agent's user would; /memory, :deprecate, :task …"),
    ("Ingest: add files or folders to memory (shell :ingest)", "ingest", "Documents and code, with a progress bar"),
    ("Code index: status, latest runs and skipped files", "index", "Files, chunks, stale ratio, queue depth (i)"),
    ("Retrieval metrics", "metrics", "p50/p95 per stage, cache hit rate"),
    ("Review: what agents wrote, with the evidence", "review", "Accept, reject, merge or undo their writes (v)"),
    ("Entry: open the selected entry", "open_entry", "Full text, metadata, audit history; edit"),
    ("Entry: create a new entry", "new_entry", "Add an entry to a wing"),
    ("Wing: switch the active wing", "next_wing", "Cycle through the store's project wings"),
    ("Help for the focused pane", "help", "F1"),
)


class MemlensCommands(Provider):
    """Commands act on the main screen, whatever screen the palette was opened from: the screens above it close
    first, after a question when an open entry has edits that closing would lose (as escape and q ask)."""

    def _run(self, action: str) -> None:
        app = self.app
        main = getattr(app, "main", None)
        if main is None:
            return

        def run() -> None:
            while app.screen is not main and len(app.screen_stack) > 1:
                app.pop_screen()
            getattr(main, f"action_{action}")()

        from .screens.confirm import ConfirmScreen

        if isinstance(app.screen, ConfirmScreen):  # a question is open (discard the edits?): it is answered first
            return
        asks = [getattr(screen, "unsaved_edits", None) for screen in app.screen_stack]
        fields = ", ".join(f for f in (ask() for ask in asks if callable(ask)) if f)
        if not fields:
            run()
            return
        app.push_screen(ConfirmScreen("Discard unsaved edits?", f"Changed: {fields}", yes="Discard", no="Keep editing"),
                        lambda yes: run() if yes else None)

    async def discover(self) -> Hits:
        for title, action, help_text in ACTIONS:
            yield DiscoveryHit(title, partial(self._run, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, action, help_text in ACTIONS:
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(self._run, action), help=help_text)
