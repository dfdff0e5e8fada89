"""Results in authority order: rank, type, wing/room, title, score, flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from memlens.visible import one_line

from .bars import TYPE_STYLE, flag_text
from .code import location

if TYPE_CHECKING:
    from memlens.trace import Bundle


class ResultsTable(DataTable):
    DEFAULT_CSS = """
    ResultsTable { height: 1fr; }
    """
    # a list of rows: home and end select the first and the last (a table's own scroll sideways, leaving the row
    # selected off screen for enter to open)
    BINDINGS = [Binding("home", "scroll_top", "First", show=False), Binding("end", "scroll_bottom", "Last", show=False)]

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self._columns(8, 5)

    def _columns(self, where: int, flags: int) -> None:
        """Fixed columns sized to their content; the title takes whatever is left."""
        title = max(12, self.size.width - (3 + 9 + where + 6 + flags) - 6 * 2 - 2)
        self.add_column("#", key="rank", width=3)
        self.add_column("type", key="type", width=9)
        self.add_column("where", key="where", width=where)
        self.add_column("title", key="title", width=title)
        self.add_column("score", key="score", width=6)
        self.add_column("flags", key="flags", width=flags)

    def on_resize(self) -> None:
        if getattr(self, "_bundle", None) is not None:
            self.show(*self._bundle, keep_cursor=True)

    def show_nothing(self) -> None:
        """No rows (the query box was emptied)."""
        self._bundle = None
        self.clear(columns=True)
        self._columns(8, 5)

    def show(self, bundle: Bundle, stale: bool = False, keep_cursor: bool = False) -> None:
        """Rows keyed by entry id; the active wing is implied (room only), other wings are spelled out.

        A result whose vector is not the store model's embedding of the entry's text now (its ``vector``
        says so) is flagged ``⟳vec``: its relevance is not what the current text would score.
        """
        self._bundle = (bundle, stale)
        row = self.cursor_row
        active = bundle.trace.active_wing
        rows = []
        for r in bundle.results:
            e = r.entry
            where = (e.room or "—") if e.wing == active else (f"{e.wing}/{e.room}" if e.room else e.wing)
            flags = flag_text([f for f in r.flags if f != "active_wing"], short=True)
            if r.vector is not None and not r.vector["fresh"]:
                flags.append(" " if flags else "")
                flags.append("⟳vec", "bold yellow")
            rows.append((r, where, flags))
        self.clear(columns=True)
        self._columns(min(22, max([5] + [len(w) for _, w, _ in rows])), min(20, max([5] + [f.cell_len for _, _, f in rows])))
        for r, where, flags in rows:
            e = r.entry
            style = "dim" if stale else ""
            title = Text(one_line(e.title), style=style, overflow="ellipsis", no_wrap=True)
            loc = location(e)
            if loc is not None:  # a code chunk: where it is first, then its symbol (the title after its own location)
                rest = e.title[len(loc):].strip() if e.title.startswith(loc) else e.title
                title = Text.assemble((loc, style or "cyan"), (" " + rest if rest else "", style),
                                      overflow="ellipsis", no_wrap=True)
            self.add_row(
                Text(str(r.rank), style=style),
                Text(e.type.value, style=TYPE_STYLE.get(e.type.value, "")),
                Text(where, style=style or ("cyan" if e.wing == active else "magenta"), overflow="ellipsis", no_wrap=True),
                title,
                Text(f"{r.score:.3f}", justify="right", style=style),
                flags,
                key=e.id,
            )
        if keep_cursor and 0 < row < len(bundle.results):
            self.move_cursor(row=row)
