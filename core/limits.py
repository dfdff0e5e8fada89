"""Bounds on what a caller may ask for, checked where input enters (CLI, API, batch files).

Every bound is stated once here so that the CLI, the engine and the app give the
same limit in the same words. A value a caller passes outside its range is a
``ValidationError`` naming the argument and the allowed range, never silently
clamped. Internal amounts derived from them (the KNN over-fetch) are clamped here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from memlens.errors import QueryError, ValidationError

# sqlite-vec refuses a KNN query for more than 4096 rows ("k value in knn query too large").
SQLITE_VEC_MAX_KNN = 4096

MAX_K = 1000  # results a search may return
MAX_BUDGET = 1_000_000  # tokens of context
MAX_LIST = 100_000  # rows a listing may ask for (tasks -n, audit and retrieval limits)

# A query is typed or pasted by a person or an agent. These caps keep every stage of a
# search bounded (parse, FTS5, embedding, explain, context): a longer query is refused
# with this limit in the message; terms past MAX_QUERY_TERMS are left out of the
# lexical search and the trace says so.
MAX_QUERY_CHARS = 10_000
MAX_QUERY_TERMS = 64

# Default cap on one entry's text (setting [limits] max_entry_chars). A longer document
# belongs in several entries; search and context stay linear in what is kept.
DEFAULT_MAX_ENTRY_CHARS = 100_000
# The model reads only a text's first 256 tokens, but the tokenizer reads all of it first. Texts
# are cut to this many characters before tokenising: 256 tokens of any text that is not almost
# all whitespace fit in far fewer, and no entry under the default cap is longer.
EMBED_INPUT_CHARS = 100_000
# The largest value the setting accepts: a JSONL line (one entry) is at most 16 MiB anyway.
MAX_ENTRY_CHARS_SETTING = 10_000_000
MAX_NAME_CHARS = 1_000  # an entry's title, key, wing or room: a line, not a document
_max_entry_chars: ContextVar[int | None] = ContextVar("memlens_max_entry_chars", default=DEFAULT_MAX_ENTRY_CHARS)


@contextmanager
def entry_text_limit(chars: int | None) -> Iterator[None]:
    """Validate entries against ``chars`` (the store's setting) inside the block; None: no limit."""
    token = _max_entry_chars.set(chars)
    try:
        yield
    finally:
        _max_entry_chars.reset(token)


def entry_field_problem(name: str, value: Any) -> str | None:
    """Why a title, key, wing, room or meta is too long to store, or None: each is bounded like the text."""
    if name == "meta":
        import json

        size = len(json.dumps(value, ensure_ascii=False, default=str)) if value else 0
        limit = _max_entry_chars.get()
        if limit is not None and size > limit:
            return f"is {size:,} characters as JSON; the limit is {limit:,} (setting limits.max_entry_chars)"
        return None
    if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
        return f"is {len(value):,} characters; the limit is {MAX_NAME_CHARS:,}"
    return None


def entry_text_problem(text: str) -> str | None:
    """Why an entry's text is too long to store, or None (used by the Entry model's validator)."""
    limit = _max_entry_chars.get()
    if limit is None or len(text) <= limit:
        return None
    return (f"is {len(text):,} characters; the limit is {limit:,} (setting limits.max_entry_chars): "
            "split it into smaller entries (e.g. by section)")


def shown_text(text: str, limit: int | None = None) -> str:
    """At most ``limit`` characters of an entry's text (default: the entry cap), for context and token counts.

    An entry stored before the cap existed can be far longer; context shows its
    start and ends with a marker, so rendering and token counting stay linear in
    what an agent is actually given.
    """
    limit = DEFAULT_MAX_ENTRY_CHARS if limit is None else limit
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" … [cut at {limit:,} of {len(text):,} characters]"


def check_int(name: str, value: Any, lo: int, hi: int, *, unit: str = "") -> int:
    """``value`` as an int inside ``lo..hi``, or a one-line error naming ``name`` and the range."""
    suffix = f" {unit}" if unit else ""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValidationError(f"{name} must be a whole number from {lo} to {hi}{suffix}, not {_show(value)}")
    if not lo <= value <= hi:
        raise ValidationError(f"{name} must be from {lo} to {hi}{suffix}, not {_show(value)}")
    return int(value)


def check_k(value: Any, name: str = "k") -> int:
    return check_int(name, value, 1, MAX_K)


def check_budget(value: Any, name: str = "budget") -> int:
    return check_int(name, value, 1, MAX_BUDGET, unit="tokens")


def knn_rows(k: int, candidates: int) -> int:
    """Rows one KNN query may ask for: the over-fetch for ``k``, never past sqlite-vec's limit."""
    return max(1, min(max(candidates, k * 3), SQLITE_VEC_MAX_KNN))


def check_query(query: str) -> None:
    """A query the pipeline can run in bounded time: not over MAX_QUERY_CHARS, valid UTF-8."""
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(
            f"query is {len(query):,} characters; the limit is {MAX_QUERY_CHARS:,} (search for its key terms instead)"
        )
    if why := utf8_problem(query):
        raise QueryError(f"query {why}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def utf8_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as UTF-8 (a lone surrogate, e.g. from a non-UTF-8 argv), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid UTF-8 (character {exc.start + 1} is {value[exc.start]!r})"
    return None


def utf8_problem_in(value: Any) -> str | None:
    """``utf8_problem`` of the first string (key or value) inside nested dicts and lists, or None."""
    if isinstance(value, str):
        return utf8_problem(value)
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else []
    for v in items:
        if why := utf8_problem_in(v):
            return why
    return None


def check_text(name: str, value: Any) -> None:
    """A string argument that will be stored, matched or printed must be valid UTF-8."""
    for v in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(v, str) and (why := utf8_problem(v)):
            raise ValidationError(f"{name} {why}")


def printable(value: Any) -> Any:
    """``value`` with every string made valid UTF-8 (undecodable bytes as ``\\xNN``), for records like the audit."""
    if isinstance(value, str):
        return (
            value if utf8_problem(value) is None else value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        )
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(v) for v in value]
    return value
