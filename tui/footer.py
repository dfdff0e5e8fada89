"""Footers that fit: a screen whose keys do not all fit its width leaves its least-needed ones out of the footer.

Textual's footer shows a screen's keys in binding order and cuts off what does not fit, so at 80 columns the main
screen lost Review, Wing, Help and Quit, and the review screen Undo and Back. A screen here names its keys that may go
first (``FOOTER_SPARE``, least needed first); they leave the footer, one by one, until the rest fit. The keys still
work, and F1 lists every one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

PALETTE_CELLS = 13  # the command palette's key, docked at the right: "▏^p palette "


class FooterFits:
    """Mixin for a ``Screen``: ``active_bindings`` (what the footer shows) without the spare keys that do not fit."""

    FOOTER_SPARE: tuple[str, ...] = ()  # binding ids, least needed first

    @property
    def active_bindings(self) -> dict[str, Any]:
        active: dict[str, Any] = super().active_bindings  # type: ignore[misc]
        screen: Any = self
        room = screen.size.width - PALETTE_CELLS
        shown = [(key, a) for key, a in active.items() if a.binding.show]
        need = sum(_cells(screen.app, a.binding) for _, a in shown)
        if need <= room or not self.FOOTER_SPARE:
            return active
        out = dict(active)
        for spare in self.FOOTER_SPARE:
            for key, a in shown:
                if a.binding.id == spare:
                    out[key] = a._replace(binding=dataclasses.replace(a.binding, show=False))
                    need -= _cells(screen.app, a.binding)
            if need <= room:
                break
        return out

    def on_resize(self) -> None:
        screen: Any = self
        screen.refresh_bindings()  # the footer is composed again for the new width


def _cells(app: Any, binding: Any) -> int:
    """A key's width in the footer: its key and description, each padded by one cell."""
    return len(app.get_key_display(binding)) + len(binding.description) + 3
