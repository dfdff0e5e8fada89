"""Working memory's records: a completed ``Task`` and a ``Blocker``, their checks, and their stored form.

A task or blocker is validated once on the way in (``validate``); rows read
back are decoded without full validation (``row_to_task``, ``row_to_blocker``)
and a row damaged by a hand edit raises CorruptRowError in one line.
Timestamps are stored as fixed-width UTC text, so text order is time order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memlens.errors import CorruptRowError, ValidationError
from memlens.limits import utf8_problem_in
from memlens.models import ID_RE, check_json_value, format_ts, parse_ts, utcnow
from memlens.working.task_report import _OUTCOME_ALIASES, Outcome, summarize

GENERATION_KEY = "_tasks"  # row in the ``wings`` table bumped by every working-memory write
MAX_TEXT = 4000  # characters of an intent or a reason
MAX_REPORT_BYTES = 256 * 1024  # a validation report, serialised
NO_REASON = "(no reason recorded)"

_DB_TS = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width: text order is time order


# -- models ------------------------------------------------------------------------------------


def _check_id(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("must be a string")
    text = v.strip()
    if not ID_RE.match(text):
        raise ValueError(f"{v!r} is not a valid task id (1-128 letters, digits, _ . : -)")  # as given (' ', not '')
    return text


def _check_text(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise ValueError("must be a string")
    text = v.strip()
    if not text:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in text:
        raise ValueError("must not contain NUL bytes")
    if len(text) > MAX_TEXT:
        raise ValueError(f"too long ({len(text)} characters, at most {MAX_TEXT})")
    return text


def check_task_id(task_id: Any) -> str:
    """A valid task id (stripped), or a one-line ValidationError."""
    try:
        return _check_id(task_id)
    except ValueError as exc:
        raise ValidationError(f"task id: {exc}") from None


class Task(BaseModel):
    """One completed task (the ``CompletedTask`` record of a legacy state file)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    intent: str | None = None
    summary: str | None = None
    outcome: Outcome = Outcome.success
    completed_at: datetime = Field(default_factory=utcnow)
    requires_context: bool = False
    validation_report: dict[str, Any] = Field(default_factory=dict)

    @field_validator("task_id", mode="before")
    @classmethod
    def _id(cls, v: Any) -> str:
        return _check_id(v)

    @field_validator("intent", "summary", mode="before")
    @classmethod
    def _texts(cls, v: Any) -> str | None:
        if v is None:
            return None
        if isinstance(v, str) and not v.strip():
            return None
        return _check_text(v, "text")

    @field_validator("outcome", mode="before")
    @classmethod
    def _outcome(cls, v: Any) -> Any:
        if isinstance(v, str):
            return _OUTCOME_ALIASES.get(v.strip().lower(), v)
        return v

    @field_validator("completed_at", mode="before")
    @classmethod
    def _ts(cls, v: Any) -> datetime:
        return parse_ts(v)

    @field_validator("validation_report", mode="before")
    @classmethod
    def _report(cls, v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            raise ValueError(f"must be a JSON object, got {type(v).__name__}")
        try:
            v = check_json_value(dict(v))  # like meta: bounded nesting, 64-bit integers, UTF-8 text, JSON types only
            text = json.dumps(v, ensure_ascii=False, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"must be plain JSON ({exc})") from None
        if len(text.encode("utf-8")) > MAX_REPORT_BYTES:
            raise ValueError(f"too large ({len(text.encode('utf-8'))} bytes serialised, at most {MAX_REPORT_BYTES})")
        return json.loads(text)  # a detached, canonical copy

    @model_validator(mode="after")
    def _context(self) -> Task:
        if not self.requires_context:
            # opaque: intent and summary are only populated when requires_context is true
            object.__setattr__(self, "intent", None)
            object.__setattr__(self, "summary", None)
        else:
            if self.intent is None:
                raise ValueError("an intent is required when requires_context is true")
            if self.summary is None:
                object.__setattr__(self, "summary", summarize(self.intent, self.outcome, self.validation_report))
        return self

    def to_record(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "intent": self.intent,
            "summary": self.summary,
            "outcome": self.outcome.value,
            "completed_at": format_ts(self.completed_at),
            "requires_context": self.requires_context,
            "validation_report": self.validation_report,
        }


class Blocker(BaseModel):
    """Why a task cannot proceed; active until ``resolved_at`` is set."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    reason: str
    blocked_at: datetime = Field(default_factory=utcnow)
    resolved_at: datetime | None = None
    resolution: str | None = None  # "unblock", "complete" or "import"

    @field_validator("task_id", mode="before")
    @classmethod
    def _id(cls, v: Any) -> str:
        return _check_id(v)

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, v: Any) -> str:
        return _check_text(v, "the reason")

    @field_validator("blocked_at", mode="before")
    @classmethod
    def _ts(cls, v: Any) -> datetime:
        return parse_ts(v)

    @field_validator("resolved_at", mode="before")
    @classmethod
    def _ts_opt(cls, v: Any) -> datetime | None:
        return None if v is None else parse_ts(v)

    @model_validator(mode="after")
    def _order(self) -> Blocker:
        if self.resolved_at is not None and self.resolved_at < self.blocked_at:
            raise ValueError("resolved_at is before blocked_at")
        return self

    @property
    def active(self) -> bool:
        return self.resolved_at is None

    def to_record(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "reason": self.reason,
            "blocked_at": format_ts(self.blocked_at),
            "resolved_at": format_ts(self.resolved_at) if self.resolved_at else None,
            "resolution": self.resolution,
        }


# -- stored form ---------------------------------------------------------------------------------


def _db_ts(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime(_DB_TS)


def _parse_db_ts(text: str) -> datetime:
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)


def _from_db_ts(text: str | None) -> datetime | None:
    """A nullable timestamp column (``resolved_at``); the NOT NULL ones go through ``_parse_db_ts``."""
    return None if text is None else _parse_db_ts(text)


def _damaged(kind: str, row: tuple[Any, ...], exc: Exception) -> CorruptRowError:
    """A stored task or blocker row that does not decode (a hand edit): one line, not a traceback."""
    return CorruptRowError(
        f"stored {kind} {row[0]!r} is damaged ({' '.join(str(exc).split())[:120]}); `memlens check` lists such rows"
    )


def _row_to_task(row: tuple[Any, ...]) -> Task:
    try:
        return _decode_task(row)
    except (ValueError, TypeError, AttributeError, IndexError) as exc:  # JSONDecodeError is a ValueError
        raise _damaged("task", row, exc) from None


def _row_to_blocker(row: tuple[Any, ...]) -> Blocker:
    try:
        return _decode_blocker(row)
    except (ValueError, TypeError, AttributeError, IndexError) as exc:
        raise _damaged("blocker of task", row, exc) from None


def _decode_task(row: tuple[Any, ...]) -> Task:
    tid, intent, summary, outcome, completed_at, rc, report = row
    report = json.loads(report) if report else {}
    if not isinstance(report, dict):
        raise ValueError("validation_report is not a JSON object")
    return Task.model_construct(
        task_id=tid,
        intent=intent,
        summary=summary,
        outcome=Outcome(outcome),
        completed_at=_parse_db_ts(completed_at),
        requires_context=bool(rc),
        validation_report=report,
    )


def _decode_blocker(row: tuple[Any, ...]) -> Blocker:
    tid, reason, blocked_at, resolved_at, resolution = row
    return Blocker.model_construct(
        task_id=tid,
        reason=reason,
        blocked_at=_parse_db_ts(blocked_at),
        resolved_at=_from_db_ts(resolved_at),
        resolution=resolution,
    )


def _describe(exc: Any, where: str = "") -> str:
    """One line from a pydantic ValidationError: ``field 'x': message``."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    prefix = f"{where}: " if where else ""
    if err["type"] == "missing":
        return f"{prefix}field {loc!r} is required"
    if err["type"] == "extra_forbidden":
        return f"{prefix}unknown field {loc!r}"
    return f"{prefix}field {loc!r}: {msg}" if loc else f"{prefix}{msg}"


def _validate(model: type[BaseModel], record: dict[str, Any], where: str = "") -> Any:
    from pydantic import ValidationError as PydanticError

    try:
        obj = model.model_validate(record)
    except PydanticError as exc:
        raise ValidationError(_describe(exc, where)) from None
    for name, value in obj.__dict__.items():  # a lone surrogate (non-UTF-8 input) cannot be stored
        if why := utf8_problem_in(value):
            raise ValidationError(f"{where + ': ' if where else ''}field {name!r}: {why}")
    return obj


def task_values(task: Task) -> tuple[Any, ...]:
    """A task as stored (``memlens.store.task_rows.TASK_COLUMNS``)."""
    return (
        task.task_id,
        task.intent,
        task.summary,
        task.outcome.value,
        _db_ts(task.completed_at),
        int(task.requires_context),
        json.dumps(task.validation_report, ensure_ascii=False, sort_keys=True),
    )


def blocker_values(b: Blocker) -> tuple[Any, ...]:
    """A blocker as stored (``memlens.store.task_rows.BLOCKER_COLUMNS``)."""
    return (b.task_id, b.reason, _db_ts(b.blocked_at), _db_ts(b.resolved_at) if b.resolved_at else None, b.resolution)
