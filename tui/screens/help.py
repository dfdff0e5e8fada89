"""F1: help for the pane that has focus."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Markdown

HELP = {
    "query": """\
## Scoped search
Type a query in the scoped language: `wing=lifecore_ros2 room=architecture|contracts type=invariant lifecycle`.
Keys are `wing`, `room`, `kind`, `type` and `status`. Separate alternatives with `|`; everything else is free text.
**Tab** or **→** accepts a completion (keys, plus the wings and rooms this store actually has).
An error points at the token that caused it. Results update as you type, 300 ms after the last key.
In this box every letter is text: **Enter** runs the query again (when its results are stale too) and moves to
the results, **Esc** leaves the box. The letter keys (`r`, `d`, `x`, `c`, …) act once the cursor is out of it.
""",
    "results": """\
## Results
Results come in authority order (invariant → decision → pattern → note), by score within each type.
**Enter** opens the entry (edit, deprecate, audit history). **x** asks *why not?* for any entry.
Flags: `mandatory` · `under_review` · `active_wing` · `conflict` · `summarised` · `fallback`.
""",
    "trace": """\
## Retrieval trace
Each bar is one component of the score, and the number beside it is the exact value.
final = (w_rel·relevance + w_rec·recency + w_sal·salience) × boost, with relevance = 0.8·sim_n + 0.2·bm25_n,
min-max normalised per kind, using the bounds shown. The call section shows latency per stage, the cache
(age, or which write invalidated it), the wings searched and what was dropped (**d**).
""",
    "wm": """\
## Working memory
The last completed tasks (✓ success, ✗ failure) and the active blockers, with their age.
The pane updates within a second when an agent completes or blocks a task in another process.
On a narrow terminal (under 100 columns) it is hidden: **t** shows it in place of the search and the trace,
**t** or **esc** goes back.
""",
}
GENERAL = """\
## Keys
Outside the search box: `/` search · `r` re-run · `d` dropped · `enter` entry · `n` new entry · `x` why not? ·
`c` context preview · `s` assistant shell · `v` review inbox · `m` metrics · `i` code index ·
`w` next active wing · `t` working memory (narrow terminal) · `q` quit.
In the search box: `esc` leaves it, `enter` runs the query. Anywhere: `ctrl+p` command palette, `F1` help.

Entry screen: `ctrl+s` save · `ctrl+o` deprecate (a deprecated entry: restore) · `ctrl+r` under review ·
`ctrl+t` delete · `esc` close.
Context preview: `+`/`-` budget by 100. Shell: `@academic …`, `/memory …`, `:help`; ↑/↓ history, Tab completes.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", id="help.close", tooltip="Close help")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90; max-width: 100%; height: auto; max-height: 80%; border: thick $accent; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, topic: str | None) -> None:
        super().__init__()
        self.topic = topic

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP.get(self.topic or "", "") + "\n" + GENERAL)
        yield Footer()  # esc closes (the footer underneath names the screen's keys, which wait)

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
