"""The review screen: what agents wrote that no person has answered yet, each item with the engine's evidence.

The list comes first (``Lens.review_items``: the audit, read once), then the evidence of every item is
computed on a worker, one item after the other (the selected one first), and shown as it arrives: near-
duplicates with their cosine and shared text, conflicts with their rule, overrides, authority and use.
``p`` previews the impact of accepting or rejecting the selected item (the engine runs the golden and
recent logged queries inside a transaction it rolls back). Every action is the engine's
(``memlens.review``): audited with the reviewer as client, and undone with ``u`` (the last action taken
here) or from the entry screen's history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Header, Input, Static
from textual.worker import get_current_worker

from memlens.errors import MemlensError
from memlens.models import parse_ts

from ..footer import FooterFits
from ..messages import StoreChanged
from ..widgets.bars import TYPE_STYLE, age
from ..widgets.entry_view import changed_span
from ..widgets.ordered import OrderedInput

TITLE = "Review: what agents wrote, with the evidence to accept, reject or merge it"
SHOWN = 200  # items the table holds (painting a thousand rows took seconds); accept --clean acts on them all
DIFF_CHARS = 600  # of a changed text, at most this much of each side is shown (``memlens review show ID``: more)
COLUMNS = (("client", 22), ("when", 7), ("change", 7), ("type", 9), ("entry", 40), ("against", 18))
KIND_MARK = {"duplicate": "dup", "conflict": "conflict", "overrides": "overrides", "authority": "authority"}


def column_widths(screen_width: int) -> dict[str, int]:
    """The list's column widths: ``COLUMNS`` when the screen has room, else the evidence column at its shortest, the
    client's names shorter, and the entry column what is left (at least 10), so that the evidence stays on screen
    (each column has a cell of padding each side; the box, a border each side and a scrollbar)."""
    widths = dict(COLUMNS)
    short = screen_width - 4 - 2 * len(widths) - sum(widths.values())
    for name, least in (("against", 15), ("client", 12), ("entry", 10)):
        if short < 0:
            cut = min(-short, widths[name] - least)
            widths[name] -= cut
            short += cut
    return widths


def _clip(text: Any, width: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def marks(evidence: list[dict[str, Any]] | None) -> Text:
    """The list's evidence column: what argues against the item, or a tick."""
    if evidence is None:
        return Text("…", style="dim")
    kinds = list(dict.fromkeys(KIND_MARK[e["kind"]] for e in evidence if e.get("against") and e["kind"] in KIND_MARK))
    return Text(" ".join(kinds), style="bold yellow") if kinds else Text("✓ none against", style="green")


def change_view(item: dict[str, Any], now: datetime) -> RenderableType:
    c = item["change"]
    head = Text.assemble((f"{c['action']} ", "bold"), (item["entry"], "bold"), "  ",
                         (item.get("type") or "", TYPE_STYLE.get(item.get("type") or "", "")), f"  {item.get('wing')}")
    parts: list[RenderableType] = [head, Text(_clip(item.get("title"), 80), style="italic")]
    for w in c["writes"]:
        parts.append(Text.assemble(("  #", "dim"), (str(w["seq"]), "dim"), f" {w['action']} by ", (w["client"], "cyan"),
                                   (f"  {age(parse_ts(w['ts']), now)} ago", "dim")))
    for field, d in c["diff"].items():
        old, new = d["before"], d["after"]
        width = 70
        if isinstance(old, str) and isinstance(new, str) and max(len(old), len(new)) > 30:
            # the part that changed, with context, wrapped in the pane (it scrolls): what the reviewer must read
            width = DIFF_CHARS
            old, new = changed_span(old, new, context=40, width=width)
        parts.append(Text.assemble(f"  {field}: ", ("− " + _clip(old, width), "red")))
        parts.append(Text.assemble(" " * (len(field) + 4), ("+ " + _clip(new, width), "green")))
    return Group(*parts)


def _other(e: dict[str, Any]) -> Text:
    return Text.assemble((str(e.get("id")), "bold"), f" ({e.get('wing')}, ",
                         (str(e.get("type")), TYPE_STYLE.get(str(e.get("type")), "")), f", {e.get('status')}) ",
                         (_clip(e.get("title"), 40), "italic"))


def evidence_view(evidence: list[dict[str, Any]] | None) -> RenderableType:
    if evidence is None:
        return Text("computing the evidence…", style="dim")
    parts: list[RenderableType] = []
    for e in evidence:
        mark = ("✗ ", "bold yellow") if e.get("against") else ("· ", "dim")
        kind = e["kind"]
        if kind == "duplicate":
            parts.append(Text.assemble(mark, ("near-duplicate of ", "bold"), _other(e)))
            parts.append(Text(f"    cosine {e['similarity']:.3f} · shared text {e['shared_text']:.2f} · "
                              f"merges into {e['merge_into']}", style="dim"))
        elif kind == "conflict":
            parts.append(Text.assemble(mark, (f"conflict ({e['rule']}) with ", "bold"), _other(e)))
            parts.append(Text(f"    cosine {e['similarity']:.3f} · {e.get('detail', '')}", style="dim"))
        elif kind == "use":
            n = e["retrieved"]
            line = (f"retrieved {'once' if n == 1 else f'{n} times'} since the agent wrote "
                    f"({e['in_context']} into a context)" if n else "not retrieved since the agent wrote")
            parts.append(Text.assemble(mark, line))
        elif kind == "impact":
            parts += impact_lines(e)
        else:
            sim = f" · cosine {e['similarity']:.3f}" if "similarity" in e else ""
            parts.append(Text.assemble(mark, (f"{kind}: ", "bold"), e.get("detail", ""), (sim, "dim")))
    if not any(e.get("against") for e in evidence):
        parts.insert(0, Text("nothing argues against accepting it", style="green"))
    parts.append(Text("p previews the impact on golden and logged queries", style="dim"))
    return Group(*parts)


def impact_lines(e: dict[str, Any]) -> list[RenderableType]:
    out: list[RenderableType] = []
    for side in ("accept", "reject"):
        p = e.get(side) or {}
        fails, changed = p.get("golden_failing", []), p.get("queries_changed", [])
        style = "bold red" if any(g.get("was_ok") for g in fails) else ""
        out.append(Text.assemble(("✗ " if style else "· ", style or "dim"), (f"if {side}ed: ", "bold"),
                                 (f"{len(fails)} golden failing", style), f" (of {e.get('golden_checked', 0)}), "
                                 f"{len(changed)} logged {'query changes' if len(changed) == 1 else 'queries change'}"))
        for q in changed[:3]:
            out.append(Text(f"    {_clip(q['query'], 40)!r}: +{len(q['entered'])} −{len(q['left'])} ~{len(q['moved'])}",
                            style="dim"))
    return out


class ReasonScreen(ModalScreen[str | None]):
    """Why reject: one line kept in the audit (enter rejects, escape cancels)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="reason.cancel", tooltip="Reject nothing")]
    DEFAULT_CSS = """
    ReasonScreen { align: center middle; }
    ReasonScreen > Vertical { width: 70; height: auto; border: thick $warning; padding: 1 2; background: $surface; }
    """

    def __init__(self, entry_id: str) -> None:
        super().__init__()
        self.entry_id = entry_id

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Reject {self.entry_id}: why? (enter rejects, esc cancels)")
            yield OrderedInput(placeholder="reason, kept in the audit", id="reason")
        yield Footer()  # esc cancels (the footer underneath names the review's keys, which wait)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or "rejected in the app")

    def action_cancel(self) -> None:
        self.dismiss(None)


class ReviewScreen(FooterFits, Screen[None]):
    # on a narrow terminal the footer keeps Accept, Reject, Edit, Undo and Back (F1 lists the others)
    FOOTER_SPARE = ("review.accept_clean", "review.impact", "review.merge")
    BINDINGS = [
        Binding("a", "accept", "Accept", id="review.accept", tooltip="Accept the agent's writes: the entry becomes active"),
        Binding("r", "reject", "Reject", id="review.reject",
                tooltip="Take the writes back: a new entry is deprecated, an edited or deleted one restored"),
        Binding("m", "merge", "Merge", id="review.merge", tooltip="Fold a near-duplicate into the entry it duplicates"),
        Binding("e", "edit", "Edit & accept", id="review.edit", tooltip="Edit the entry, then accept it"),
        Binding("A", "accept_clean", "Accept clean", id="review.accept_clean",
                tooltip="Accept every item with no evidence against it"),
        Binding("p", "impact", "Impact", id="review.impact",
                tooltip="Which golden and logged queries accepting or rejecting would change (nothing written)"),
        Binding("u", "undo", "Undo", id="review.undo", tooltip="Undo the last review action taken here"),
        Binding("enter", "open_entry", "Entry", id="review.entry", show=False, tooltip="Open the selected entry"),
        Binding("escape", "back", "Back", id="review.back", tooltip="Return to the main screen"),
    ]
    DEFAULT_CSS = """
    ReviewScreen #review-summary { height: auto; padding: 0 1; }
    ReviewScreen #review-body { height: 1fr; }
    ReviewScreen #review-items { height: 2fr; border: round $primary-darken-1; border-title-color: $text-muted; }
    ReviewScreen #review-detail { height: 3fr; border: round $primary-darken-1; border-title-color: $text-muted;
                                  padding: 0 1; }
    ReviewScreen #review-detail > Static { width: 1fr; }
    ReviewScreen #review-change { margin-bottom: 1; }
    ReviewScreen #review-status { height: auto; padding: 0 1; color: $text-muted; }
    """

    @dataclass
    class Listed(Message):
        items: list[dict[str, Any]]  # the first SHOWN
        total: int
        clients: list[str]

    @dataclass
    class Weighed(Message):
        entry_id: str
        evidence: list[dict[str, Any]]

    @dataclass
    class Done(Message):
        text: str
        results: list[dict[str, Any]]

    @dataclass
    class Failed(Message):
        error: str

    def __init__(self) -> None:
        super().__init__()
        self.items: list[dict[str, Any]] = []
        self._widths = dict(COLUMNS)  # the list's column widths (``column_widths``)
        self.evidence: dict[str, list[dict[str, Any]]] = {}
        self.done: list[list[dict[str, Any]]] = []  # the keypresses' actions here, newest last (u undoes one keypress)
        self._busy = False

    @property
    def lens(self) -> Any:
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("reading the audit…", id="review-summary")
        with Vertical(id="review-body"):
            yield DataTable(id="review-items", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="review-detail") as box:
                box.border_title = "Change and evidence"
                yield Static(id="review-change")
                yield Static(id="review-evidence")
        yield Static(id="review-status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#review-items", DataTable)
        table.border_title = "Agents' writes waiting for review · by client, oldest first"
        self._columns(column_widths(self.app.size.width))
        self.refresh_items()

    def _columns(self, widths: dict[str, int]) -> None:
        """The list's columns at ``widths`` (fixed: a thousand rows are not measured on the first paint)."""
        self._widths = widths
        table = self.query_one("#review-items", DataTable)
        table.clear(columns=True)
        for label, width in widths.items():
            table.add_column(label, key=label, width=width)

    def on_resize(self) -> None:
        widths = column_widths(self.app.size.width)
        if widths != self._widths:
            self._columns(widths)
            self._rows()

    def refresh_items(self) -> None:
        self._list()

    def store_changed(self, message: StoreChanged) -> None:
        """A write (an agent's, over MCP, or another person's) may add, change or answer items: list them again."""
        changed = (message.write or {}).get("entry_id")
        if changed is not None:
            self.evidence.pop(str(changed), None)  # weighed again
        if not self._busy:
            self.refresh_items()

    @work(thread=True, exclusive=True, group="review-list", exit_on_error=False)
    def _list(self) -> None:
        """List the inbox, then weigh the listed items one after the other (the first is shown first)."""
        try:
            items, total, clients = self.lens.review_items(SHOWN)
        except MemlensError as exc:
            self.post_message(self.Failed(str(exc)))
            return
        known = set(self.evidence)
        self.post_message(self.Listed(items, total, clients))
        worker = get_current_worker()
        for it in items:
            if worker.is_cancelled:
                return
            if it["entry"] in known:
                continue
            try:
                self.post_message(self.Weighed(it["entry"], self.lens.review_evidence(it["entry"])))
            except MemlensError:
                continue  # answered meanwhile (another process): the next listing drops it

    def on_review_screen_listed(self, message: Listed) -> None:
        self.items = message.items
        clients, n = message.clients, message.total
        more = f" (the first {SHOWN} listed; memlens review lists them all)" if n > SHOWN else ""
        self.query_one("#review-summary", Static).update(
            Text.assemble((f"{n} agent write{'s' if n != 1 else ''} waiting", "bold"),
                          f" from {len(clients)} client{'s' if len(clients) != 1 else ''}: ", ", ".join(clients), more)
            if n else Text("Nothing waits for review: every agent write has been answered.", style="green"))
        self._rows()

    def _rows(self) -> None:
        table = self.query_one("#review-items", DataTable)
        table.clear()
        now, widths = self.lens.now(), self._widths
        for it in self.items:
            type_ = it.get("type") or ""
            table.add_row(_clip(it["client"], widths["client"]), f"{age(parse_ts(it['at']), now)} ago",
                          it["change"]["action"], Text(type_, style=TYPE_STYLE.get(type_, "")),
                          _clip(it.get("title") or it["entry"], widths["entry"]), marks(self.evidence.get(it["entry"])),
                          key=it["entry"])
        self._show()

    def on_review_screen_weighed(self, message: Weighed) -> None:
        self.evidence[message.entry_id] = message.evidence
        table = self.query_one("#review-items", DataTable)
        if message.entry_id in table.rows:
            table.update_cell(message.entry_id, "against", marks(message.evidence))
        selected = self.selected()
        if selected is not None and selected["entry"] == message.entry_id:
            self._show()

    def selected(self) -> dict[str, Any] | None:
        table = self.query_one("#review-items", DataTable)
        if not self.items or table.cursor_row is None or table.cursor_row >= len(self.items):
            return None
        return self.items[table.cursor_row]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show()

    def _show(self) -> None:
        item = self.selected()
        change, ev = self.query_one("#review-change", Static), self.query_one("#review-evidence", Static)
        if item is None:
            change.update(Text("Agents' writes (MCP clients, or API callers that name a client) appear here until a "
                               "person accepts, rejects or merges them.", style="dim"))
            ev.update("")
            return
        change.update(change_view(item, self.lens.now()))
        ev.update(evidence_view(self.evidence.get(item["entry"])))

    # -- actions ------------------------------------------------------------------------------

    def _status(self, text: str, style: str = "") -> None:
        self.query_one("#review-status", Static).update(Text(text, style=style))

    def _act(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        if self._busy:
            return
        self._busy = True
        self._status(f"{what}…", "yellow")
        self._run(what, partial(fn, *args, **kwargs))

    @work(thread=True, exclusive=True, group="review-act", exit_on_error=False)
    def _run(self, what: str, call: Any) -> None:
        try:
            results = call()
        except MemlensError as exc:
            self.post_message(self.Failed(str(exc)))
            return
        results = results if isinstance(results, list) else [results]
        self.post_message(self.Done(what, results))

    def on_review_screen_done(self, message: Done) -> None:
        self._busy = False
        self._acted(message.results)
        main = getattr(self.app, "main", None)
        if main is not None:
            main.action_rerun()  # its results may hold what changed

    def _acted(self, results: list[dict[str, Any]]) -> None:
        """A keypress's review results (or an undo's): kept for ``u``, said in the status line, the list read again."""
        acted = [r for r in results if r.get("action") != "undo"]
        if acted:
            self.done.append(acted)
        elif self.done:
            self.done.pop()  # that keypress's actions are undone
        self._status(f"✓ {_summary(results)}" + (_undo_hint(len(acted)) if acted else ""), "green")
        for r in results:
            for eid in r.get("entries", [r.get("entry")]):
                self.evidence.pop(str(eid), None)
        self.refresh_items()

    def _edited(self, done: list[dict[str, Any]] | None) -> None:
        """Back from editing an item: what its accept did, as any other action's (else the list read again)."""
        if done:
            self._acted(done)
        else:
            self.refresh_items()

    def on_review_screen_failed(self, message: Failed) -> None:
        self._busy = False
        self._status(f"✗ nothing written: {message.error}", "bold red")

    def action_accept(self) -> None:
        item = self.selected()
        if item is not None:
            self._act(f"accepting {item['entry']}", self.lens.review_accept, [item["entry"]])

    def action_accept_clean(self) -> None:
        self._act("accepting every item with no evidence against it", self.lens.review_accept_clean)

    def action_reject(self) -> None:
        item = self.selected()
        if item is not None and not self._busy:
            self.app.push_screen(ReasonScreen(item["entry"]), partial(self._rejected, item["entry"]))

    def _rejected(self, entry_id: str, reason: str | None) -> None:
        if reason is not None:
            self._act(f"rejecting {entry_id}", self.lens.review_reject, [entry_id], reason=reason)

    def action_merge(self) -> None:
        item = self.selected()
        weighed = self.evidence.get(item["entry"]) if item is not None else None
        if item is not None and weighed is not None and not any(e.get("kind") == "duplicate" for e in weighed):
            self._status(f"{item['entry']} has no near-duplicate to merge into: accept, reject or edit it", "dim")
            return
        if item is not None:
            self._act(f"merging {item['entry']}", self.lens.review_merge, [item["entry"]])

    def action_undo(self) -> None:
        if not self.done:
            self._status("nothing to undo here (an entry's own history: its screen, ctrl+b)", "dim")
            return
        last = self.done[-1]
        what = (f"undoing the {last[0]['action']} of {last[0]['entry']}" if len(last) == 1
                else f"undoing the {len(last)} actions of that key")
        self._act(what, self.lens.review_undo_all, [r["entry"] for r in reversed(last)])

    def action_edit(self) -> None:
        item = self.selected()
        if item is not None and item["change"]["action"] != "delete":
            from .entry import EntryScreen

            self.app.push_screen(EntryScreen(item["entry"], accept=True), self._edited)

    def action_impact(self) -> None:
        item = self.selected()
        if item is not None:
            self._status(f"previewing the impact of {item['entry']} on golden and logged queries (nothing written)…",
                         "yellow")
            self._impact(item["entry"])

    @work(thread=True, exclusive=True, group="review-impact", exit_on_error=False)
    def _impact(self, entry_id: str) -> None:
        try:
            evidence = self.lens.review_evidence(entry_id, impact=True)
        except MemlensError as exc:
            self.post_message(self.Failed(str(exc)))
            return
        self.post_message(self.Weighed(entry_id, evidence))
        self.app.call_from_thread(self._status, "impact previewed: nothing was written", "dim")

    def action_open_entry(self) -> None:
        item = self.selected()
        if item is not None and item["change"]["action"] != "delete":
            self.app.open_entry(item["entry"])  # type: ignore[attr-defined]

    def action_back(self) -> None:
        self.app.pop_screen()


def _summary(results: list[dict[str, Any]]) -> str:
    """What a keypress did, in one line: each action's own words, or the count and ids when there are several."""
    def said(r: dict[str, Any]) -> str:
        return str(r.get("detail") or f"{r.get('undid')} of {r.get('entry')} undone")

    if len(results) <= 2:
        return "; ".join(said(r) for r in results)
    verbs = {str(r.get("action")) for r in results}
    verb = {"accept": "accepted", "reject": "rejected", "merge": "merged", "undo": "undone"}.get(next(iter(verbs)), "done")
    ids = [str(r.get("entry")) for r in results]
    return (f"{len(results)} {verb}" if len(verbs) == 1 else f"{len(results)} actions") + ": " + ", ".join(ids[:3]) + (
        f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def _undo_hint(n: int) -> str:
    return " · u undoes it" if n == 1 else f" · u undoes all {n}"
