"""Keys that work where the cursor is.

A single-character key (``r``, ``/``, ``q``) bound on a screen or the app
never reaches that binding while a text field has focus: the field types the
character instead. So while the cursor is in a text field, such a binding is
switched off and left out of the footer (``check_action`` returns False), and
the footer names only keys that act there (Escape, F1, ctrl+…, Enter). A
priority binding runs before the field sees the key, so it stays on.

Keys read in one burst act in turn (``KeysInTheirTurn``, and the text fields of
``widgets/ordered.py``): each where the keys before it left the focus.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.binding import Binding
from textual.keys import KEY_NAME_REPLACEMENTS, _character_to_key, key_to_character
from textual.widget import Widget
from textual.widgets import Input, TextArea


def types_text(widget: Widget | None) -> bool:
    """Whether ``widget`` (the focused one) takes printable keys as text."""
    return isinstance(widget, (Input, TextArea))


_TYPED = frozenset(_character_to_key(chr(c)) for c in range(32, 127))  # "r", "slash", "space", "plus", …


def _printable(key: str) -> bool:
    key = key.strip()
    if key in _TYPED:
        return True
    char = key_to_character(key)
    return char is not None and char.isprintable()


def typed_away(bindings: list[Binding], action: str) -> bool:
    """Whether every binding of ``action`` (its name, parameters aside) is a non-priority binding of printable keys
    only: a text field with focus would take each of those keys as text."""
    mine = [b for b in bindings if b.action.partition("(")[0] == action]
    return bool(mine) and all(not b.priority and all(_printable(k) for k in b.key.split(",")) for b in mine)


class KeysWhereTheCursorIs:
    """Mixin for a ``Screen`` or the ``App``: its single-character bindings are off while a text field has focus."""

    BINDINGS: list[Binding]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if types_text(self.focused) and typed_away(self.BINDINGS, action):  # type: ignore[attr-defined]
            return False
        return super().check_action(action, parameters)  # type: ignore[misc,no-any-return]


def escape_then(event: events.Key) -> list[events.Key] | None:
    """``escape`` and the key of the character, for an alt+character key as a terminal reads ESC and a character in
    one burst; None for any other key. (Without the kitty keyboard protocol Esc, q typed fast and alt+q are the same
    bytes, and Textual reads them as alt+q, which a text field types as q.)"""
    char = event.character
    if not event.key.startswith("alt+") or char is None or len(char) != 1 or not char.isprintable():
        return None
    name = char if char.isalnum() else _character_to_key(char)
    return [events.Key("escape", "\x1b"), events.Key(KEY_NAME_REPLACEMENTS.get(name, name), char)]


class KeysInTheirTurn:
    """Mixin for the ``App``: keys read in one burst act in turn, each where the keys before it left the focus."""

    async def on_event(self, event: events.Event) -> None:
        """An alt+character that nothing binds is escape and then that character: leaving the search box with escape
        and typing q at once quits, as escape then q does. Both go where a key goes now (the focused widget)."""
        app: Any = self
        keys: list[events.Event] = [event]
        if isinstance(event, events.Key) and not event.is_forwarded:
            split = escape_then(event)
            if split is not None and event.key not in app.active_bindings:  # an alt+key of the screen's stays one
                keys = [*split]
        for key in keys:
            await super().on_event(key)  # type: ignore[misc]

    async def _on_key(self, event: events.Key) -> None:
        """A character no binding took, reaching the app while a text field has focus, was typed in the burst that
        moved the focus there (/ and a query in one read of the terminal): it had been handed to the widget that had
        the focus then. It goes to the field, in its turn. (A field types the characters it receives itself: one
        that comes back from the field, a read-only one, is left alone.)"""
        app: Any = self
        field = app.focused
        if field is None or not types_text(field) or not event.is_printable or getattr(event, "redirected", False):
            return  # App._on_key as ever: the bindings, then the app's own key methods
        event.prevent_default()  # App._on_key would look for the bindings a second time
        if not await app._check_bindings(event.key):
            again = events.Key(event.key, event.character)
            again.redirected = True  # type: ignore[attr-defined]
            field.post_message(again)
