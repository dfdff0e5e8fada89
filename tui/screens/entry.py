"""The entry screen: read, edit, deprecate, create and delete one entry (curation offline).

Every write goes through ``Lens`` in a thread worker (a new text or title is
re-embedded by the engine, which takes a while), and the engine's own
ValidationError is the only judge of a bad edit: it is shown next to the form
and nothing is written. After a write the main screen re-runs its query, so
its trace shows the cache miss caused by exactly this write.

An edit, a status change or a deletion is previewed first (``Lens.preview``: the
engine runs it in a transaction it rolls back): when a golden query would fail or
a recently logged query's ranking would change, the screen shows which and asks
before writing (a deletion always asks). The side panel lists when the entry was
retrieved (the access log), once it has been.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Label, Select, Static, TextArea
from textual.worker import Worker, WorkerState

from memlens.attribution import describe as describe_client
from memlens.errors import MemlensError, NotFoundError
from memlens.models import KINDS, STATUSES, TYPES, Entry, parse_ts

from ..footer import FooterFits
from ..widgets.code import language, lines_of, location
from ..widgets.entry_view import audit_history, metadata
from ..widgets.ordered import OrderedInput, OrderedTextArea

INPUTS = ("title", "wing", "room", "key", "overrides", "salience")
SELECTS = {"kind": KINDS, "type": TYPES, "status": STATUSES}
ACCESS_ROWS = 50  # newest retrievals shown in the access log


def form_values(entry: Entry | None, wing: str | None) -> dict[str, str]:
    """The form as strings: comparing two of these says whether anything was edited."""
    if entry is None:
        return {"title": "", "wing": wing or "", "room": "", "key": "", "overrides": "", "salience": "0.5",
                "kind": "fact", "type": "note", "status": "active", "text": ""}
    return {"title": entry.title, "wing": entry.wing, "room": entry.room, "key": entry.key or "",
            "overrides": entry.overrides or "", "salience": f"{entry.salience:g}", "kind": entry.kind.value,
            "type": entry.type.value, "status": entry.status.value, "text": entry.text}


def gone_text(audit: list[dict[str, Any]]) -> str:
    """``deleted by {client} at {time}`` from the newest audit row, as far as the history tells: one line beside the
    side panel at 120 columns (the id is in the form's title, the keys in the footer)."""
    last = audit[0] if audit else None
    if last is None or last.get("action") != "delete":
        return "not in the store (deleted meanwhile)"
    who = describe_client((last.get("detail") or {}).get("client"))
    try:
        when = f"{parse_ts(last['ts']):%Y-%m-%d %H:%M:%S} UTC"
    except (TypeError, ValueError):  # an audit row's time edited by hand: shown as it is
        when = str(last.get("ts"))
    return f"deleted{f' by {who}' if who else ''} at {when}"


def field(label: str, widget: Any, classes: str = "field") -> Vertical:
    return Vertical(Label(label, classes="field-label"), widget, classes=classes)


class EntryScreen(FooterFits, Screen[None]):
    """``EntryScreen(None)`` creates a new entry in the active wing."""

    # what leaves a narrow footer first (Save and Close stay)
    FOOTER_SPARE = ("entry.undo_review", "entry.review", "entry.deprecate", "entry.restore", "entry.delete")

    BINDINGS = [
        Binding("ctrl+s", "save", "Save", id="entry.save",
                tooltip="Validate and write the edits (a new text or title is re-embedded)"),
        Binding("ctrl+o", "set_status('deprecated')", "Deprecate", id="entry.deprecate",
                tooltip="Mark the entry obsolete: status deprecated, excluded from retrieval (audited)"),
        Binding("ctrl+o", "set_status('active')", "Restore", id="entry.restore",  # (a deprecated entry's ctrl+o)
                tooltip="Make the deprecated entry active again: retrieved again (audited)"),
        Binding("ctrl+r", "set_status('under_review')", "Under review", id="entry.review",
                tooltip="Mark the entry under review: still retrieved, flagged as possibly outdated (audited)"),
        Binding("ctrl+t", "delete", "Delete", id="entry.delete", tooltip="Delete the entry (asks first)"),
        Binding("escape", "close", "Close", id="entry.close", tooltip="Close without saving (asks first if there are edits)"),
        Binding("f2", "toggle_details", "Details", id="entry.details",
                tooltip="On a narrow terminal: switch between the form and the metadata with the audit history"),
        Binding("ctrl+b", "undo_review", "Undo review", id="entry.undo_review",
                tooltip="Undo the newest review action on this entry (accept, reject, merge), as its history shows"),
    ]
    DEFAULT_CSS = """
    EntryScreen #entry-body { height: 1fr; }
    EntryScreen #entry-form {
        width: 1fr; border: round $primary-darken-1; padding: 0 1;
        border-title-color: $text-muted; border-subtitle-color: $warning;
    }
    EntryScreen #entry-side { width: 52; }
    EntryScreen.narrow #entry-side { display: none; }
    EntryScreen.narrow.details #entry-side { display: block; width: 1fr; }
    EntryScreen.narrow.details #entry-form { display: none; }
    EntryScreen #entry-meta-box {
        height: auto; max-height: 19; border: round $primary-darken-1; border-title-color: $text-muted; padding: 0 1;
    }
    EntryScreen #entry-access-box {
        height: auto; max-height: 10; border: round $primary-darken-1; border-title-color: $text-muted; padding: 0 1;
        display: none;
    }
    EntryScreen.accessed #entry-access-box { display: block; }
    EntryScreen.gone #entry-form .row, EntryScreen.gone #f-text-label, EntryScreen.gone #f-text { display: none; }
    EntryScreen #entry-audit-box { height: 1fr; border: round $primary-darken-1; border-title-color: $text-muted; padding: 0 1; }
    EntryScreen .row { height: 4; }
    EntryScreen .field { width: 1fr; height: 4; margin-right: 1; }
    EntryScreen .field.wide { width: 2fr; }
    EntryScreen .field.narrow { width: 14; }
    EntryScreen .field-label { color: $text-muted; height: 1; }
    EntryScreen #f-text { height: 1fr; min-height: 5; }
    EntryScreen Input.refused, EntryScreen TextArea.refused, EntryScreen Select.refused > SelectCurrent { border: tall $error; }
    EntryScreen #entry-error { height: auto; min-height: 1; margin-top: 1; }
    EntryScreen #entry-error.error { color: $error; text-style: bold; }
    EntryScreen #entry-error.pending { color: $warning; }
    EntryScreen #entry-error.muted { color: $text-muted; }
    """

    @dataclass
    class Loaded(Message):
        info: dict[str, Any]
        audit: list[dict[str, Any]]
        access: list[dict[str, Any]] | None = None

    @dataclass
    class Gone(Message):
        """The entry is not in the store (deleted since it was listed): what its history says of its end, and that
        history (newest first)."""

        text: str
        audit: list[dict[str, Any]]

    @dataclass
    class Previewed(Message):
        action: str
        fields: dict[str, Any]
        preview: dict[str, Any] | None
        error: str = ""

    @dataclass
    class Written(Message):
        action: str
        entry: Entry
        reembedded: bool = False
        done: list[dict[str, Any]] | None = None  # an accept's review results: what the review screen can undo

    @dataclass
    class Refused(Message):
        error: str

    def __init__(self, entry_id: str | None, *, accept: bool = False) -> None:
        """``accept``: an agent's write under review; saving accepts it, with the edits made here."""
        super().__init__()
        self.entry_id = entry_id
        self.accept = accept
        self.entry: Entry | None = None
        self.original: dict[str, str] = {}
        self._busy = False
        self.gone = False
        """The entry was not in the store when the screen read it: nothing to show in a form, nor to write."""

    @property
    def lens(self):  # type: ignore[no-untyped-def]
        return self.app.lens  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="entry-body"):
            with VerticalScroll(id="entry-form") as form:
                form.border_title = f"Entry {self.entry_id}" if self.entry_id else "New entry"
                if self.accept:
                    form.border_title += " · edit, then ctrl+s accepts it"
                with Horizontal(classes="row"):
                    yield field("Title (empty: first words of the text)", OrderedInput(id="f-title"), "field wide")
                with Horizontal(classes="row"):
                    yield field("Wing", OrderedInput(id="f-wing"))
                    yield field("Room", OrderedInput(id="f-room"))
                    yield field("Salience 0–1", OrderedInput(id="f-salience"), "field narrow")
                with Horizontal(classes="row"):
                    for name, values in SELECTS.items():
                        yield field(name.capitalize(), Select([(v, v) for v in values], allow_blank=False, id=f"f-{name}"))
                with Horizontal(classes="row"):
                    key_tip = "Entries of different wings with the same key state the same rule"
                    yield field("Key", OrderedInput(id="f-key", tooltip=key_tip))
                    yield field("Overrides (entry id it hides)", OrderedInput(id="f-overrides"))
                yield Label("Text", classes="field-label", id="f-text-label")
                yield OrderedTextArea(id="f-text", soft_wrap=True)
                yield Static(id="entry-error")
            with Vertical(id="entry-side"):
                with VerticalScroll(id="entry-meta-box") as box:
                    box.border_title = "Metadata"
                    yield Static(id="entry-meta")
                with VerticalScroll(id="entry-access-box") as box:
                    box.border_title = "Retrieved · newest first"
                    yield Static(id="entry-access")
                with VerticalScroll(id="entry-audit-box") as box:
                    box.border_title = "Audit history"
                    yield Static(id="entry-audit")
        yield Footer()

    def on_mount(self) -> None:
        blink = getattr(self.app, "cursor_blink", True)
        for widget in self.query(Input):
            widget.cursor_blink = blink
        self.query_one(TextArea).cursor_blink = blink
        if self.entry_id is None:
            self._fill(form_values(None, self.lens.active_wing))
            self.query_one("#entry-meta", Static).update(Text(
                "A new entry: the id is generated when it is saved.\nctrl+s saves it (the text is embedded), esc discards it.",
                style="dim"))
            self.query_one("#entry-audit", Static).update(Text("No history yet.", style="dim"))
            self.query_one("#f-text", TextArea).focus()
        else:
            self.query_one("#entry-form").loading = True
            self._load(self.entry_id)

    # -- loading ----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="entry-load", exit_on_error=False)
    def _load(self, entry_id: str) -> None:
        try:
            self.post_message(self.Loaded(self.lens.entry_info(entry_id), self.lens.audit(entry_id),
                                          self.lens.entry_access(entry_id, ACCESS_ROWS)))
        except NotFoundError:
            try:
                audit = self.lens.audit(entry_id)
            except MemlensError:
                audit = []
            self.post_message(self.Gone(gone_text(audit), audit))
        except MemlensError as exc:
            self.post_message(self.Refused(str(exc)))

    def on_entry_screen_gone(self, message: Gone) -> None:
        """No form (its fields would show the selects' first values as if they were the entry's) and no write keys:
        the line that says what happened, and the history the audit kept."""
        self.gone = True
        self.add_class("gone")
        form = self.query_one("#entry-form")
        form.loading = False
        form.disabled = True
        form.border_title = f"Entry {self.entry_id} · deleted"
        self._error(f"✗ {message.text}")
        now = self.lens.now()
        self.query_one("#entry-meta", Static).update(Text(
            "Not in the store: deleted since the results were read. Nothing to edit.", style="dim"))
        self.query_one("#entry-audit", Static).update(audit_history(message.audit, now))
        self.refresh_bindings()

    def on_entry_screen_loaded(self, message: Loaded) -> None:
        self.entry = message.info["entry"]
        self.query_one("#entry-form").loading = False
        self._fill(form_values(self.entry, None))
        self._code_preview(self.entry)
        now = self.lens.now()
        self.query_one("#entry-meta", Static).update(metadata(message.info, now))
        self.query_one("#entry-audit", Static).update(audit_history(message.audit, now))
        self._show_access(message.access or [], now)
        self.query_one("#f-text", TextArea).focus()
        self.refresh_bindings()  # (ctrl+o deprecates or, for a deprecated entry, restores)

    def _code_preview(self, entry: Entry) -> None:
        """A code chunk's text is shown highlighted, numbered as in its file, and read-only: it mirrors the file."""
        loc = location(entry)
        if loc is None:
            return
        area = self.query_one("#f-text", TextArea)
        area.read_only = True
        area.soft_wrap = False
        area.show_line_numbers = True
        area.line_number_start = (lines_of(entry) or (1, 1))[0]
        try:
            area.language = language(entry)
        except Exception:  # no grammar for it here: plain text
            area.language = None
        self.query_one("#f-text-label", Label).update(f"Code · {loc} · read-only: it mirrors the file")

    def _fill(self, values: dict[str, str]) -> None:
        self.original = dict(values)
        for name in INPUTS:
            self.query_one(f"#f-{name}", Input).value = values[name]
        for name in SELECTS:
            self.query_one(f"#f-{name}", Select).value = values[name]
        self.query_one("#f-text", TextArea).load_text(values["text"])

    def form(self) -> dict[str, str]:
        values = {name: self.query_one(f"#f-{name}", Input).value.strip() for name in INPUTS}
        values.update({name: str(self.query_one(f"#f-{name}", Select).value) for name in SELECTS})
        values["text"] = self.query_one("#f-text", TextArea).text
        return values

    def changes(self) -> dict[str, str]:
        now = self.form()
        return {k: v for k, v in now.items() if v != self.original.get(k)}

    # -- writing ----------------------------------------------------------------------------

    def _error(self, text: str, kind: str = "error") -> None:
        status = self.query_one("#entry-error", Static)
        status.set_classes(kind)
        status.update(Content(text))  # an engine error may quote the value typed: text, never markup

    def action_save(self, status: str | None = None) -> None:
        if self._busy or (self.entry_id is not None and self.entry is None):
            return
        changes = self.changes()
        if status is not None:
            changes["status"] = status
        if self.entry_id is None:
            fields: dict[str, str] = self.form()
            if status is not None:
                fields["status"] = status
            self._start("add", fields)
        elif self.accept and status is None:
            self._write_now("accept", changes)  # the review screen previews the impact (p)
        elif not changes:
            self._error("nothing to save", "muted")
        elif self._needs_promotion(changes):
            self._ask_promotion(changes)
        else:
            self._start("status" if set(changes) == {"status"} else "update", changes)

    # -- web text: a person's promotion to an invariant or decision, asked for explicitly ---------------

    def _needs_promotion(self, changes: dict[str, str]) -> bool:
        """Whether these edits would give web text an authority type that no promotion covers yet."""
        from memlens.untrusted import authority_problem, is_untrusted

        e = self.entry
        if e is None or not is_untrusted(e.kind):
            return False
        return authority_problem(e.id, e.kind, changes.get("type", e.type.value), changes.get("text", e.text),
                                 e.meta) is not None

    def _ask_promotion(self, changes: dict[str, str]) -> None:
        from .confirm import ConfirmScreen

        e = self.entry
        assert e is not None
        to = changes.get("type", e.type.value)
        body = (f"This text was saved from {e.meta.get('source') or 'the web'}: a page's author wrote it, "
                f"not you. As {'an' if to == 'invariant' else 'a'} {to} it binds every agent that reads this wing.\n\n"
                "Promote it only if you have read it and vouch for it. The promotion is recorded with the entry "
                "and in its audit history, and it stays marked as web text.")
        self.app.push_screen(ConfirmScreen(f"Promote web text to {to}?", body, yes="Promote", no="Keep editing"),
                             partial(self._promotion_answer, changes))  # type: ignore[arg-type]

    def _promotion_answer(self, changes: dict[str, Any], yes: bool | None) -> None:
        if yes:
            self._start("update", {**changes, "promoted_by": "app"})
        else:
            self._error("not promoted: nothing written", "muted")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A new entry has nothing to delete; the details key matters only on a narrow terminal; an entry deleted
        elsewhere leaves only esc (and the details, which hold its history)."""
        if action == "toggle_details":
            return self.has_class("narrow")
        if self.gone:
            return action == "close"
        if action == "set_status" and parameters in (("deprecated",), ("active",)):  # ctrl+o: the one that applies
            deprecated = self.entry is not None and self.entry.status.value == "deprecated"
            return deprecated == (parameters == ("active",))
        return not (action in ("delete", "undo_review") and self.entry_id is None)

    def on_resize(self) -> None:
        # under 100 columns the side panel would squeeze the form: show one or the other (f2)
        self.set_class(self.size.width < 100, "narrow")
        self.refresh_bindings()

    def action_toggle_details(self) -> None:
        self.toggle_class("details")

    def action_set_status(self, status: str) -> None:
        if self.entry_id is None:
            self.query_one("#f-status", Select).value = status
            return
        if self.entry is not None and self.entry.status.value == status and "status" not in self.changes():
            self.notify(f"{self.entry_id} is already {status}", timeout=3)
            return
        self.action_save(status)

    def action_delete(self) -> None:
        if self.entry_id is None or self.entry is None or self._busy:
            return
        self._begin_preview("delete", {})

    def _delete_answer(self, yes: bool | None) -> None:
        if yes:
            self._write_now("delete", {})
        else:
            self._busy = False

    def _start(self, action: str, fields: dict[str, str]) -> None:
        if action in ("update", "status"):
            self._begin_preview(action, fields)
            return
        self._write_now(action, fields)

    def _write_now(self, action: str, fields: dict[str, Any]) -> None:
        self._busy = True
        self._error("saving… (a new text is re-embedded)" if action != "delete" else "deleting…", "pending")
        self._write(action, fields)

    # -- impact preview: what the write would change, shown before it is made ----------------------

    def _begin_preview(self, action: str, fields: dict[str, Any]) -> None:
        self._busy = True
        self._error("previewing the change against the golden and recent queries… (nothing is written)", "pending")
        self._preview(action, fields)

    @work(thread=True, exclusive=True, group="entry-preview", exit_on_error=False)
    def _preview(self, action: str, fields: dict[str, Any]) -> None:
        try:
            p = self.lens.preview(self.entry_id, action, fields)
        except MemlensError as exc:
            if action == "delete":  # the delete itself will say what is wrong, after the question
                self.post_message(self.Previewed(action, fields, None, str(exc)))
            else:
                self.post_message(self.Refused(str(exc)))  # the write would be refused the same way
            return
        except Exception as exc:  # noqa: BLE001 - a preview that cannot run (a locked store) must not block the write
            said = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            if "locked" in said.lower() or "busy" in said.lower():
                said = "the store is locked by another writer right now"
            self.post_message(self.Previewed(action, fields, None, said))
            return
        self.post_message(self.Previewed(action, fields, p))

    def on_entry_screen_previewed(self, message: Previewed) -> None:
        from .confirm import ConfirmScreen
        from .entry_impact import ImpactConfirmScreen, checked_anything, has_impact

        self._error("", "")
        p, action, fields = message.preview, message.action, message.fields
        e = self.entry
        if action == "delete" and e is not None:
            title, yes, no = f"Delete {self.entry_id}?", "Delete", "Keep"
            body = (f"{e.title}\n{e.wing}/{e.room or '—'} · {e.type.value}\n\n"
                    "The entry and its vector are removed; the audit keeps its last version.")
        elif action == "status":
            title, yes, no, body = f"Make {self.entry_id} {fields['status']}?", "Write", "Cancel", ""
        else:
            title, yes, no = f"Save the edits to {self.entry_id}?", "Save", "Keep editing"
            body = f"Changed: {', '.join(sorted(k for k in fields if k != 'promoted_by'))}"
        if message.error:
            body = (body + "\n\n" if body else "") + f"(no impact preview: {message.error})"
        answer = partial(self._preview_answer, action, fields)
        if has_impact(p) or (action == "delete" and checked_anything(p)):
            self.app.push_screen(ImpactConfirmScreen(title, body, p, yes=yes, no=no), answer)  # type: ignore[arg-type]
        elif action == "delete" or message.error:
            self.app.push_screen(ConfirmScreen(title, body, yes=yes, no=no), answer)
        else:  # no golden query fails, no recent ranking changes: nothing to ask
            self._write_now(action, fields)

    def _preview_answer(self, action: str, fields: dict[str, Any], yes: bool | None) -> None:
        if yes:
            self._write_now(action, fields)
            return
        self._busy = False
        if action != "delete":
            self._error("cancelled: nothing written", "muted")

    def _show_access(self, rows: list[dict[str, Any]], now: datetime) -> None:
        from .entry_impact import access_table

        self.set_class(bool(rows), "accessed")
        box = self.query_one("#entry-access-box")
        n = f"{len(rows)}{'+' if len(rows) >= ACCESS_ROWS else ''}"
        box.border_title = (("Retrieved once" if n == "1" else f"Retrieved {n} times") + " · newest first"
                            if rows else "Retrieved · newest first")
        self.query_one("#entry-access", Static).update(access_table(rows, now) if rows else "")

    @work(thread=True, exclusive=True, group="entry-write", exit_on_error=False)
    def _write(self, action: str, fields: dict[str, Any]) -> None:
        done: list[dict[str, Any]] | None = None
        try:
            if action == "add":
                entry = self.lens.add(fields.pop("text"), **fields)
            elif action == "accept":
                done = self.lens.review_accept([self.entry_id], edits=fields or None)
                entry = self.lens.get(self.entry_id)
            elif action == "delete":
                entry = self.lens.delete(self.entry_id)
            elif action == "status":
                entry = self.lens.set_status(self.entry_id, fields["status"])
            else:  # refused when the entry changed since this screen read it: that edit is not overwritten
                read = self.entry
                entry = self.lens.update(self.entry_id, **fields, expected_updated_at=None if read is None
                                         else read.updated_at or read.created_at)
        except MemlensError as exc:
            self.post_message(self.Refused(str(exc)))
            return
        reembedded = action == "add" or bool({"text", "title"} & set(fields))
        self.post_message(self.Written(action, entry, reembedded, done))

    def on_entry_screen_refused(self, message: Refused) -> None:
        self._busy = False
        self.query_one("#entry-form").loading = False
        self._error(f"✗ refused, nothing written: {message.error}")
        # point at the field the engine named ("field 'room': …", "overrides: …")
        named = re.match(r"(?:field ')?([a-z_]+)'?:", message.error)
        for widget in self.query(".field Input, .field Select, TextArea"):
            widget.set_class(named is not None and widget.id == f"f-{named.group(1)}", "refused")

    def on_entry_screen_written(self, message: Written) -> None:
        self._busy = False
        e = message.entry
        what = {"add": f"Created {e.id} in {e.wing}", "delete": f"Deleted {e.id} from {e.wing}", "accept": f"Accepted {e.id}",
                "status": f"{e.id} is now {e.status.value}"}.get(message.action, f"Saved {e.id}")
        again = message.reembedded and message.action not in ("delete", "add")  # (a new entry is embedded, not again)
        self.notify(what + (" (re-embedded)" if again else ""), title="Entry")
        self.dismiss(message.done)  # the review screen's status line and undo (None for other writes)
        refresh_health = getattr(self.app, "refresh_health", None)
        if refresh_health is not None:
            refresh_health()  # the header's golden status after this write
        main = getattr(self.app, "main", None)
        if main is not None:
            main.action_rerun()

    def action_undo_review(self) -> None:
        if self.entry_id is not None and not self._busy:
            self._busy = True
            self._error("undoing the newest review action on this entry…", "pending")
            self._undo(self.entry_id)

    @work(thread=True, exclusive=True, group="entry-write", exit_on_error=False)
    def _undo(self, entry_id: str) -> None:
        try:
            done = self.lens.review_undo(entry_id)
        except MemlensError as exc:
            self.post_message(self.Refused(str(exc)))
            return
        self.app.call_from_thread(self._undone, done)

    def _undone(self, done: dict[str, Any]) -> None:
        self._busy = False
        self._error(f"✓ {done['undid']} undone ({', '.join(done['entries'])})", "muted")
        self._load(self.entry_id)
        main = getattr(self.app, "main", None)
        if main is not None:
            main.action_rerun()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self._busy = False
            self.query_one("#entry-form").loading = False
            self._error(f"✗ {type(event.worker.error).__name__}: {event.worker.error}")

    # -- leaving ----------------------------------------------------------------------------

    def unsaved_edits(self) -> str:
        """The fields edited and not saved, named (empty when there is nothing to lose)."""
        if self.entry_id is not None and self.entry is None:
            return ""
        return ", ".join(sorted(self.changes()))

    def action_close(self) -> None:
        fields = self.unsaved_edits()
        if not fields:
            self.dismiss(None)
            return
        from .confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen("Discard unsaved edits?", f"Changed: {fields}", yes="Discard", no="Keep editing"),
                             self._discard_answer)

    def _discard_answer(self, yes: bool | None) -> None:
        if yes:
            self.dismiss(None)

    @on(Input.Changed)
    @on(TextArea.Changed)
    @on(Select.Changed)
    def _edited(self) -> None:
        if self.original:
            form = self.query_one("#entry-form")
            form.border_subtitle = "edited · ctrl+s saves · esc discards" if self.changes() else ""
