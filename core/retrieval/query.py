"""The scoped query language (filters by wing, room, type, status, plus free text), shared by CLI and TUI.

    wing=lifecore_ros2 room=architecture|contracts type=invariant|decision status=active lifecycle callbacks

``key=value`` filters, ``|`` separates alternatives, everything else is the
free-text query. Double quotes keep text literal (``"a=b"``). An unknown key or
value is an error naming the token and its position, never a silent match-all.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from memlens.errors import QueryError
from memlens.limits import check_query
from memlens.vocab import KINDS, NAME_RE, STATUSES, TYPES

KEYS = ("wing", "room", "kind", "type", "status")
_TOKEN = re.compile(r'"([^"]*)"|(\S+)')
_FILTER = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)=(.*)$")
_ENUMS = {"kind": KINDS, "type": TYPES, "status": STATUSES}


class ScopeError(QueryError):
    """A bad token; ``start``/``end`` locate it in the query string (for inline errors)."""

    def __init__(self, message: str, token: str, start: int, end: int) -> None:
        super().__init__(message)
        self.token, self.start, self.end = token, start, end


@dataclass
class ParsedQuery:
    text: str
    wings: list[str] | None = None
    rooms: list[str] | None = None
    kinds: list[str] | None = None
    types: list[str] | None = None
    statuses: list[str] | None = None
    raw: str = ""
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)

    def filters(self) -> dict[str, list[str]]:
        return {k: v for k in KEYS if (v := getattr(self, _attr(k))) is not None}


def _attr(key: str) -> str:
    return {"wing": "wings", "room": "rooms", "kind": "kinds", "type": "types", "status": "statuses"}[key]


def _short(token: str, limit: int = 60) -> str:
    """A token as an error message shows it: never longer than ``limit`` characters."""
    return token if len(token) <= limit else token[: limit - 1] + "…"


def _suggest(word: str, choices: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def parse(query: str) -> ParsedQuery:
    """Split a scoped query into filters and free text, validating every filter."""
    check_query(query)  # bounded length and valid UTF-8, before any work
    parsed = ParsedQuery(text="", raw=query)
    if "=" not in query and '"' not in query:  # free text only: its words, as the loop below would find them
        parsed.text = " ".join(query.split())
        return parsed
    if query.count('"') % 2:
        pos = query.rfind('"')
        raise ScopeError(f"unclosed quote at column {pos + 1}", '"', pos, pos + 1)
    words: list[str] = []
    for m in _TOKEN.finditer(query):
        if m.group(1) is not None:
            words.append(m.group(1))
            continue
        token, start, end = m.group(2), m.start(), m.end()
        fm = _FILTER.match(token)
        if not fm:
            words.append(token)
            continue
        key, value = fm.group(1).lower(), fm.group(2)
        if len(value) >= 2 and value[0] == value[-1] == '"':  # wing="name": the quotes are not part of the name
            value = value[1:-1]
        shown = _short(token)
        if key not in KEYS:
            raise ScopeError(
                f"unknown key {_short(key)!r} in {shown!r}{_suggest(key, KEYS)}"
                f" (keys: {', '.join(KEYS)}; quote text to search for it)",
                token,
                start,
                end,
            )
        values = [v for v in value.split("|")]
        if not value or any(not v for v in values):
            raise ScopeError(f"empty value in {shown!r}: write {key}=VALUE or {key}=A|B", token, start, end)
        allowed = _ENUMS.get(key)
        for v in values:
            if allowed is not None and v not in allowed:
                raise ScopeError(
                    f"unknown {key} {_short(v)!r} in {shown!r}{_suggest(v, allowed)} ({key}: {', '.join(allowed)})",
                    token,
                    start,
                    end,
                )
            if allowed is None and not NAME_RE.match(v):
                raise ScopeError(f"invalid {key} name {_short(v)!r} in {shown!r}", token, start, end)
        attr = _attr(key)
        existing = getattr(parsed, attr) or []
        setattr(parsed, attr, list(dict.fromkeys(existing + values)))
        parsed.spans[key] = (start, end)
    parsed.text = " ".join(words).strip()
    return parsed


def literal(text: str) -> str:
    """``text`` as a query that searches for exactly its words, no token read as a filter: what a question set's
    question is (its text may hold ``a=b`` or one double quote). Double quotes, which cannot be escaped, become
    spaces, as a pair of them already does."""
    return " ".join(f'"{w}"' if "=" in w else w for w in text.replace('"', " ").split())


def check_known(parsed: ParsedQuery, key: str, known: list[str]) -> None:
    """Refuse a wing or room the store has never seen (a typo would match nothing)."""
    values = getattr(parsed, _attr(key)) or []
    for v in values:
        if v not in known:
            start, end = parsed.spans.get(key, (0, len(parsed.raw)))
            listing = ", ".join(known[:12]) + (" …" if len(known) > 12 else "")
            raise ScopeError(
                f"unknown {key} {_short(v)!r}{_suggest(v, known)} (known {key}s: {listing or 'none yet'})", v, start, end
            )
