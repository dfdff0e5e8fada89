"""Who made a write: the client named in each audit row.

A process that writes on behalf of several clients (the MCP server: one
client per connection) wraps each write in ``acting_as(client)``; every audit
row written inside carries ``detail.client``. A plain CLI or library write
sets nothing and its audit rows stay as they were.

A review action (``memlens.review``) runs its writes inside ``reviewing(info)``
as well: their audit rows also carry ``detail.review`` (the action and the
batch it belongs to), which is how an action is found again to be undone.

It depends on nothing else in memlens: the store's audit writer and the front ends both use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_client: ContextVar[dict[str, str] | None] = ContextVar("memlens_audit_client", default=None)
_review: ContextVar[dict[str, Any] | None] = ContextVar("memlens_audit_review", default=None)

MAX_LEN = 80  # a client names itself: keep what lands in the audit short
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def client_record(name: Any, version: Any = None, via: str | None = None) -> dict[str, str] | None:
    """A clean ``{name, version?, via?}`` from what a client said about itself; None without a name."""
    name, version = _plain(name), _plain(version)
    if not name:
        return None
    rec = {"name": name}
    if version:
        rec["version"] = version
    if via:
        rec["via"] = via
    return rec


def _plain(value: Any) -> str:
    """One line of at most ``MAX_LEN`` characters: control characters (NUL, escapes) count as spaces, as whitespace
    runs do; a client's self-description reaches the audit, the review inbox and the app."""
    if not isinstance(value, str):
        return ""
    return " ".join(_CONTROL.sub(" ", value).split())[:MAX_LEN]


def current() -> dict[str, str] | None:
    return _client.get()


@contextmanager
def acting_as(client: dict[str, str] | None) -> Iterator[None]:
    """Attribute the writes made inside (in this thread or task) to ``client``."""
    token = _client.set(client)
    try:
        yield
    finally:
        _client.reset(token)


@contextmanager
def reviewing(info: dict[str, Any]) -> Iterator[None]:
    """Mark the writes made inside as part of one review action (``info``: its action and batch)."""
    token = _review.set(info)
    try:
        yield
    finally:
        _review.reset(token)


def stamp(detail: dict[str, Any] | None) -> dict[str, Any] | None:
    """``detail`` with the acting client (and the review action) added, if any (used by the store's audit writer)."""
    client, review = _client.get(), _review.get()
    if client is None and review is None:
        return detail
    out = dict(detail or {})
    if client is not None:
        out["client"] = dict(client)
    if review is not None:
        out["review"] = dict(review)
    return out


def describe(client: dict[str, Any] | None) -> str:
    """``claude-code 1.2 (mcp)`` for display."""
    if not client or not client.get("name"):
        return ""
    text = str(client["name"])
    if client.get("version"):
        text += f" {client['version']}"
    if client.get("via"):
        text += f" ({client['via']})"
    return text
