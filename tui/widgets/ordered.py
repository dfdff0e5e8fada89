"""Text fields whose own editing keys apply in the order they were typed.

Textual inserts a printable key in the field's own key handler, but a key the
field binds (backspace, the arrows, ctrl+k, enter…) travels up to the app,
which then runs the field's action. When the terminal delivers several keys in
one read (a fast typist, a macro, tmux send-keys, a slow moment of the app),
the characters typed after such a key reach the field first: ``abc``, two
backspaces, ``def`` became ``abcd`` instead of ``adef`` (textual#6605). Here the
field runs its own bindings where it receives the key, so each key applies in
turn; keys it does not bind (the screen's and the app's) travel on as before.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.widgets import Input, TextArea


class _OwnKeysInOrder:
    """For a text field: its own non-priority bindings run inline, in ``_on_key``."""

    async def _on_key(self, event: events.Key) -> None:
        field: Any = self
        if not event.is_printable:
            for binding in field._bindings.key_to_bindings.get(event.key, ()):
                # the app's run_action says whether it ran (a disabled action leaves the key to travel on)
                if not binding.priority and await field.app.run_action(binding.action, field):
                    field._restart_blink()
                    event.stop()
                    event.prevent_default()
                    return
        await super()._on_key(event)  # type: ignore[misc]


class OrderedInput(_OwnKeysInOrder, Input):
    """An ``Input`` whose editing keys keep their place among the characters typed."""


class OrderedTextArea(_OwnKeysInOrder, TextArea):
    """A ``TextArea`` whose editing keys keep their place among the characters typed."""
