"""Saving web text to the store: the one place the web package writes entries (through the public ``Memory`` API).

Each source that gave text becomes one entry of kind ``web``, type ``note``,
status ``under_review``, with ``meta.untrusted = true`` and ``meta.source`` (the
URL the text came from). A web entry is never an invariant or a decision
(unless a person promotes it, see ``memlens.untrusted``). The same page text saved twice in a wing is
stored once; its key is ``web:URL``, so a page saved again after it changed is linked to the earlier save
(the review evidence names it: accept the new one with ``--supersedes``, or reject it).

The text was written by the page, not by whoever saved it: the writes are attributed to the client
acting (an MCP client that asked for the save), else to ``SAVER``, so each saved page waits in the
review inbox (``memlens.review.inbox``) like an agent's write until a person accepts or rejects it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from memlens import attribution
from memlens.limits import MAX_NAME_CHARS
from memlens.web.sanitize import cap_text

if TYPE_CHECKING:
    from memlens.config import Settings
    from memlens.models import Entry
    from memlens.web.context import WebContext

SAVER = {"name": "web page", "via": "memlens web --save"}  # the audit's client of a save nobody else asked for


class Saves(Protocol):
    """What saving asks of the engine (a ``Memory`` is one): ``settings`` (the entry size) and ``add_unique``."""

    @property
    def settings(self) -> Settings: ...

    def add_unique(self, text: str, *, wing: str, **fields: Any) -> tuple[Entry, bool, list[dict[str, Any]]]: ...


def save_sources(mem: Saves, ctx: WebContext, *, wing: str, room: str = "") -> list[dict[str, Any]]:
    """Store every source of ``ctx`` that has text; returns ``{"id", "url", "created"}`` per saved source."""
    fetched = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    limit = mem.settings.limits.max_entry_chars
    saved: list[dict[str, Any]] = []
    for src in ctx.texts:
        if not src.ok or not src.text.strip():
            continue
        url = src.final_url or src.url
        text, _ = cap_text(src.text, limit)
        meta: dict[str, Any] = {"source": url, "untrusted": True, "fetched_at": fetched, "flagged_lines": src.flagged,
                                "truncated": bool(src.truncated)}
        if url != src.url:
            meta["requested_url"] = src.url
        if ctx.query:
            meta["search_query"] = ctx.query
        title = (src.title or url)[: min(MAX_NAME_CHARS, 200)]
        key = f"web:{url}"  # one page, one key: a later save of a changed page is a same-key conflict in review
        with attribution.acting_as(attribution.current() or SAVER):
            entry, created, _ = mem.add_unique(text, wing=wing, room=room, kind="web", type="note",
                                               status="under_review", title=title, meta=meta,
                                               key=key if len(key) <= MAX_NAME_CHARS else None)
        saved.append({"id": entry.id, "url": url, "created": created})
    return saved
