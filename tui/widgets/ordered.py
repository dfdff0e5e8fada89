"""Text fields whose own editing keys apply in the order they were typed.

Textual inserts a printable key in the field's own key handler, but a key the
field binds (backspace, the arrows, ctrl+k, enter…) travels up to the app,
which then runs the field's action. When the terminal delivers several keys in
one read (a fast typist, a macro, tmux send-keys, a slow moment of the app),
the characters typed after such a key reach the field first: ``abc``, two
backspaces, ``def`` became ``abcd`` instead of ``adef`` (textual#6605). Here the
field runs its own bindings where it receives the key, so each key applies in
turn. A key it leaves to the screen or the app (escape, tab) acts there at once
too, for the same reason: escape and q in one burst left the query box only
after q had been typed into it. A key that reaches the field once the focus has
left it goes where the focus is now.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.widgets import Input, TextArea


class _OwnKeysInOrder:
    """For a text field: every key applies in turn, where the keys before it left the focus."""

    async def _on_key(self, event: events.Key) -> None:
        field: Any = self
        app = field.app
        if app.focused is not field:
            # handed to the field before a key of the same burst moved the focus away (escape to the results, tab, a
            # screen closed or opened): it goes where the focus is now, not into a field the user has left
            event.stop()
            event.prevent_default()
            app.post_message(events.Key(event.key, event.character))
            return
        if not event.is_printable:
            for binding in field._bindings.key_to_bindings.get(event.key, ()):
                # the app's run_action says whether it ran (a disabled action leaves the key to travel on)
                if not binding.priority and await field.app.run_action(binding.action, field):
                    field._restart_blink()
                    event.stop()
                    event.prevent_default()
                    return
        await super()._on_key(event)  # type: ignore[misc]
        # (_stop_propagation: the field's class took the key itself, as a TextArea takes enter and tab)
        if not event.is_printable and not event._stop_propagation and await app._check_bindings(event.key):
            # a key the field leaves to the screen or the app (escape, tab, f1) acts now, as it would once it had
            # travelled up to the app, but before the field reads the keys typed after it
            event.stop()
            event.prevent_default()


class OrderedInput(_OwnKeysInOrder, Input):
    """An ``Input`` whose editing keys keep their place among the characters typed."""


class OrderedTextArea(_OwnKeysInOrder, TextArea):
    """A ``TextArea`` whose editing keys keep their place among the characters typed."""
