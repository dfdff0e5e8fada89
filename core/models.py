"""The data model: entries and their vocabularies, validated with pydantic."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from memlens import vocab
from memlens.ids import new_id
from memlens.limits import entry_field_problem, entry_text_problem
from memlens.untrusted import authority_problem
from memlens.vocab import NAME_RE  # noqa: E402 (one definition, shared with the pydantic-free query parser)

ID_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
GLOBAL_WING = vocab.GLOBAL_WING


class Kind(str, Enum):
    turn = "turn"
    fact = "fact"
    entity = "entity"
    procedure = "procedure"
    document = "document"
    code = "code"
    web = "web"


class EntryType(str, Enum):
    """Authority, highest first: on a clash the higher type wins, and results are ordered by it."""

    invariant = "invariant"
    decision = "decision"
    pattern = "pattern"
    note = "note"


class Status(str, Enum):
    active = "active"
    under_review = "under_review"
    deprecated = "deprecated"


AUTHORITY = {t.value: i for i, t in enumerate(EntryType)}
KINDS = tuple(k.value for k in Kind)
TYPES = tuple(t.value for t in EntryType)
STATUSES = tuple(s.value for s in Status)
assert (KINDS, TYPES, STATUSES) == (vocab.KINDS, vocab.TYPES, vocab.STATUSES), "core/vocab.py is out of date"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def format_ts(ts: datetime) -> str:
    """ISO-8601 UTC with a Z; microseconds only when present, so round trips are exact.

    The year is always four digits (``strftime("%Y")`` writes year 1 as "1" on glibc,
    which would neither sort nor parse back).
    """
    ts = ts.astimezone(timezone.utc)
    frac = f".{ts.microsecond:06d}" if ts.microsecond else ""
    return f"{ts.year:04d}-{ts.month:02d}-{ts.day:02d}T{ts.hour:02d}:{ts.minute:02d}:{ts.second:02d}{frac}Z"


_SHORT_YEAR = re.compile(r"^(\d{1,3})(-\d\d-\d\dT.*)$")


def parse_ts(value: Any) -> datetime:
    if isinstance(value, str) and len(value) in (20, 27) and value[-1] == "Z" and value[10] == "T":
        # the store's own format (format_ts), the common case: fromisoformat reads "Z" only from 3.11
        ts = datetime.fromisoformat(value[:-1])
        if ts.tzinfo is None:
            return ts.replace(tzinfo=timezone.utc)
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        legacy = _SHORT_YEAR.match(text)  # earlier versions stored years before 1000 unpadded ("1-01-01T…")
        if legacy:
            text = f"{int(legacy[1]):04d}{legacy[2]}"
        ts = datetime.fromisoformat(text)
    else:
        raise ValueError("expected an ISO-8601 timestamp string")
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    try:
        return ts.astimezone(timezone.utc)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+14:00 is before year 1 in UTC
        raise ValueError("timestamp out of range once converted to UTC (years 1 to 9999)") from None


MAX_META_DEPTH = 32  # nesting levels of ``meta`` (JSON objects and arrays)
_INT64 = (-(2**63), 2**63 - 1)  # SQLite's JSON functions read larger integers as approximate floats


def _unicode_problem(v: str) -> str | None:
    if "\x00" in v:
        return "must not contain NUL bytes"
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired surrogate (not valid UTF-8)"
    return None


def check_json_value(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy of ``meta``-like data, or ValueError naming the problem.

    Refused: nesting deeper than MAX_META_DEPTH, NaN and infinities (JSON has
    none), integers beyond 64 bits, unpaired surrogates and NUL bytes in
    strings, and anything that is not a JSON type. Tuples become lists.
    """
    if depth > MAX_META_DEPTH:
        raise ValueError(f"nested deeper than {MAX_META_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise ValueError("has an integer outside the 64-bit range")
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("has NaN or an infinity (not valid JSON)")
        return value
    if isinstance(value, str):
        problem = _unicode_problem(value)
        if problem:
            raise ValueError(f"has a string that {problem.replace('must not contain', 'contains')}")
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"has a non-text key {k!r}")
            check_json_value(k, depth + 1)
            out[k] = check_json_value(v, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [check_json_value(v, depth + 1) for v in value]
    raise ValueError(f"has a value of type {type(value).__name__}, which JSON cannot hold")


def embed_text(title: str, text: str) -> str:
    """What the model sees of an entry (``Entry.embed_text``), from its stored title and text."""
    return f"{title}\n{text}" if title and not text.startswith(title.rstrip("…")) else text


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Entry(BaseModel):
    """One unit of memory: text plus where it lives (wing, room), what it is (kind, type) and its status."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    id: str = Field(default_factory=new_id)
    wing: str
    room: str = ""
    kind: Kind = Kind.fact
    type: EntryType = EntryType.note
    status: Status = Status.active
    title: str = ""
    text: str
    key: str | None = None
    salience: float = Field(default=0.5, ge=0.0, le=1.0, allow_inf_nan=False)
    overrides: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not ID_RE.fullmatch(v):  # match() would let a trailing newline through
            raise ValueError("must be 1-128 characters of letters, digits, _ . : -")
        return v

    @field_validator("wing")
    @classmethod
    def _wing(cls, v: str) -> str:
        v = v.strip()
        if why := entry_field_problem("wing", v):
            raise ValueError(why)
        if not NAME_RE.match(v):
            raise ValueError(f"{v!r} is not a valid wing name (letters, digits, _ . -)")
        return v

    @field_validator("room")
    @classmethod
    def _room(cls, v: str) -> str:
        v = (v or "").strip()
        if why := entry_field_problem("room", v):
            raise ValueError(why)
        if v and not NAME_RE.match(v):
            raise ValueError(f"{v!r} is not a valid room name (letters, digits, _ . -)")
        return v

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        if why := entry_text_problem(v):  # first: nothing below should scan a huge text
            raise ValueError(why)
        if not v.strip():
            raise ValueError("must not be empty")
        if "\x00" in v:
            raise ValueError("must not contain NUL bytes")
        return v

    @field_validator("title", "text", "key", "overrides")
    @classmethod
    def _valid_unicode(cls, v: str | None) -> str | None:
        problem = _unicode_problem(v) if isinstance(v, str) else None
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("meta")
    @classmethod
    def _meta(cls, v: dict[str, Any]) -> dict[str, Any]:
        checked: dict[str, Any] = check_json_value(v, 1)
        return checked

    @field_validator("key", "overrides")
    @classmethod
    def _blank_is_none(cls, v: str | None) -> str | None:
        return v.strip() or None if isinstance(v, str) else v

    @field_validator("title", "key", "meta")
    @classmethod
    def _size(cls, v: Any, info: ValidationInfo) -> Any:
        if why := entry_field_problem(str(info.field_name), v):
            raise ValueError(why)
        return v

    @field_validator("created_at", "updated_at", mode="before")
    @classmethod
    def _ts(cls, v: Any) -> Any:
        return None if v is None else parse_ts(v)

    @model_validator(mode="after")
    def _defaults(self) -> Entry:
        filled(self)
        if self.overrides == self.id:
            raise ValueError("an entry cannot override itself")
        if why := authority_problem(self.id, self.kind, self.type, self.text, self.meta):  # web text sets no rules
            raise ValueError(why)
        return self

    @property
    def embed_text(self) -> str:
        """What the model sees: the title carries meaning too, so it leads."""
        return embed_text(self.title, self.text)

    @property
    def authority(self) -> int:
        return AUTHORITY[self.type.value]

    def to_record(self) -> dict[str, Any]:
        """The JSONL / JSON shape, a stable contract: field names and order do not change."""
        return {
            "id": self.id,
            "wing": self.wing,
            "room": self.room,
            "kind": self.kind.value,
            "type": self.type.value,
            "status": self.status.value,
            "title": self.title,
            "text": self.text,
            "key": self.key,
            "salience": self.salience,
            "overrides": self.overrides,
            "created_at": format_ts(self.created_at),
            "updated_at": format_ts(self.updated_at or self.created_at),
            "meta": self.meta,
        }


ENTRY_FIELDS = tuple(Entry.model_fields)
EDITABLE_FIELDS = ("wing", "room", "kind", "type", "status", "title", "text", "key", "salience", "overrides", "meta")


def filled(entry: Entry) -> Entry:
    """``entry`` with what validation fills in: ``updated_at`` from ``created_at``, a title from the text (also for
    one built from a stored row without validation)."""
    if entry.updated_at is None:
        object.__setattr__(entry, "updated_at", entry.created_at)
    if not entry.title:
        object.__setattr__(entry, "title", derived_title(entry.text))
    return entry


def derived_title(text: str) -> str:
    """The title an entry gets when none is given: its text's start, on one line, cut to 60 characters."""
    first = " ".join(text.split())
    return first if len(first) <= 60 else first[:59].rstrip() + "…"
