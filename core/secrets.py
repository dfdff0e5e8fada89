"""Secrets memlens holds (API keys, the password in a URL, a database password) and how they are kept out of text.

memlens sends a secret where it belongs (an ``Authorization`` header, the
database's authentication) and nowhere else. A server may still echo one back:
in an error body, a stream's error event, or even the answer itself. Every text
built from what a server sent therefore passes through :func:`redact` (or, for
text that streams, :class:`StreamRedactor`) before it reaches a message, an
output, a log or a stored row. A URL is shown by :func:`without_password`.

A secret shorter than :data:`MIN_SECRET_CHARS` is not searched for: a one- or
two-character password would blank out ordinary words, and is no secret anyway.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import unquote

MASK = "[redacted]"
MIN_SECRET_CHARS = 4
_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:@/?#\[\]]*)(?::(?P<password>[^@/?#]*))?@")


def url_password(url: str) -> str | None:
    """The password in ``scheme://user:password@host…`` as written (None when there is none).

    Read with a pattern, not a URL parser: a URL that does not parse (a bad percent escape, an
    unclosed ``[``) must still give up its password, to be kept out of the message about it."""
    m = _USERINFO.match(url)
    return m.group("password") if m and m.group("password") else None


def without_password(url: str) -> str:
    """``url`` with the password of its userinfo left out (``user:pw@host`` → ``user@host``)."""
    m = _USERINFO.match(url)
    if not m or m.group("password") is None:
        return url
    return m.group("scheme") + m.group("user") + "@" + url[m.end():]


def url_secrets(url: str | None) -> list[str]:
    """The forms a URL's password may come back in: as written, percent-decoded, and inside the HTTP Basic
    credentials a client builds from the userinfo."""
    if not url:
        return []
    m = _USERINFO.match(url)
    password = m.group("password") if m else None
    if not m or not password:
        return []
    user = m.group("user")
    basic = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return [password, unquote(password), basic]


def usable(secrets: Iterable[str | None]) -> tuple[str, ...]:
    """The secrets worth searching for, longest first (so a secret inside a longer one is masked whole)."""
    found = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
    return tuple(sorted(found, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by :data:`MASK`."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class StreamRedactor:
    """:func:`redact` for text that arrives in pieces: a secret split over two pieces is masked too.

    The end of each piece that could be the start of a secret is held back until the next piece
    (or :meth:`end`) says what it is, so at most ``len(longest secret) - 1`` characters wait."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = usable(secrets)
        self._held = ""

    def feed(self, piece: str) -> str:
        if not self.secrets:
            return piece
        text = redact(self._held + piece, self.secrets)
        keep = max((self._prefix_at_end(text, s) for s in self.secrets), default=0)
        self._held = text[len(text) - keep:] if keep else ""
        return text[: len(text) - keep]

    def end(self) -> str:
        out, self._held = self._held, ""
        return out

    @staticmethod
    def _prefix_at_end(text: str, secret: str) -> int:
        """The length of the longest end of ``text`` that begins ``secret`` (0 when none does)."""
        for n in range(min(len(text), len(secret) - 1), 0, -1):
            if secret.startswith(text[-n:]):
                return n
        return 0
