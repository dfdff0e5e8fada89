"""Keys that work where the cursor is.

A single-character key (``r``, ``/``, ``q``) bound on a screen or the app
never reaches that binding while a text field has focus: the field types the
character instead. So while the cursor is in a text field, such a binding is
switched off and left out of the footer (``check_action`` returns False), and
the footer names only keys that act there (Escape, F1, ctrl+…, Enter). A
priority binding runs before the field sees the key, so it stays on.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.keys import _character_to_key, key_to_character
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
