"""Working memory: recent completed tasks and active blockers.

An agent loses the thread when it only sees its last task. ``WorkingMemory``
keeps, in the same SQLite store as the entries, every completed task (bounded)
and every blocker, and renders the **sliding window** an agent receives at the
top of its context::

    ## Recent Task History
    1. task-042: "Implement user authentication module" (completed: 2026-01-11T10:00Z, ✓ success)
    2. task-043: "Add JWT validation middleware" (completed: 2026-01-11T10:05Z, ✗ failure)
       tests: 10 passed, 2 failed; errors: 1 (first: "token expiry not checked")
    3. task-044 (completed: 2026-01-11T10:10Z, ✓ success)

    ## Active Blockers
    - task-045: "Waiting for the auth service credentials" (blocked: 2026-01-11T09:00Z)

Use it through ``Memory.tasks``::

    with Memory.open("memory.db") as mem:
        mem.tasks.complete("task-042", "Implement user authentication module",
                           validation_report={"tests": {"passed": 12, "failed": 0}})
        mem.tasks.block("task-045", "Waiting for the auth service credentials")
        prompt_head = mem.tasks.render()        # "" when there is nothing to show

Rules (all writes are one transaction, audited, and bump the ``_tasks``
generation in the ``wings`` table so other processes — the TUI — can notice):

* **Window**: the last ``working_memory.window`` (5) completed tasks by
  ``completed_at``, listed oldest first (the newest is last, next to the work
  that follows). Equal ``completed_at`` are ordered by completion order (the
  audit sequence of the write that stored them), so the order never depends on
  chance. Then *all* active blockers, oldest first. ``render()`` returns ``""``
  when there are neither tasks nor blockers, and a section is left out when it
  is empty; the text has no trailing newline.
* **Opaque tasks** (``requires_context=False``, the default for legacy
  tasks): no intent and no summary are stored on the task, so none can be
  injected; the window shows only id, time and outcome. The intent given to
  ``complete`` is kept in the audit row's ``detail`` so nothing is lost.
* **Summary**: ``summarize(intent, outcome, validation_report)`` is a pure
  function (no model): same input, same text, whatever the key order of the
  report. The report fields it understands are listed in ``report_digest``;
  unknown fields, and known fields of an unexpected shape, are kept in the
  stored report but left out of the summary. When the summary says more than
  "intent — outcome", the extra part is shown under the task in the window.
* **Completing the same task id again** replaces the stored completion (the
  latest call wins, whatever its ``completed_at``); the audit row holds the
  replaced record in ``before``.
* **Completing a blocked task** resolves its active blocker (``resolved_at`` =
  the completion time, or the blocked time if the completion is back-dated
  before it), audited as ``task.unblock`` with ``detail.by = "task.complete"``.
* **Blocking** a task that already has an active blocker is an error (unblock
  it first); **unblocking** a task without an active blocker is an error.
* **Pruning**: after each write only the newest ``working_memory.max_tasks``
  (100) completed tasks are kept, and as many resolved blockers; each pruned
  row is written to the audit (``task.prune``, full record in ``before``).

Audit actions: ``task.complete``, ``task.block``, ``task.unblock``,
``task.prune``, ``task.import``; ``entry_id`` is the task id, ``wing`` is NULL.

Legacy state files (``import_state`` / ``memlens tasks import-state``)
----------------------------------------------------------------------

A JSON object; any other top-level key (a supervisor keeps plenty) is ignored::

    {
      "completed_tasks": [
        {"task_id": "task-001",                       # or "id"
         "completed_at": "2026-01-11T10:00:00Z",      # required, ISO-8601 (no zone = UTC)
         "validation_report": {...},                  # optional object (null = {})
         "requires_context": true,                    # optional; missing/null = false (backfill)
         "intent": "...",                             # needed when requires_context is true
         "summary": "...",                            # optional; computed when missing
         "outcome": "success"}                        # optional, see below
      ],
      "blocked_tasks": [                              # and/or "blockers"; same shape
        {"task_id": "task-007", "reason": "...",      # or "id"; "blocked_reason"
         "blocked_at": "2026-01-11T09:00:00Z",        # required
         "resolved_at": null}                         # optional; set = a resolved blocker
      ]
    }

* At least one of ``completed_tasks``, ``blocked_tasks``, ``blockers`` must be
  present (each a list or null); ``blocked_tasks``/``blockers`` may also be an
  object keyed by task id whose values are the blocker objects (without
  ``task_id``).
* ``outcome``: ``success``/``failure`` (also ``ok``, ``passed``, ``succeeded``,
  ``failed``, ``fail``, ``error``); when missing, a boolean ``success`` on the
  task, then a boolean ``passed`` or ``success`` in the validation report,
  decide it; otherwise a completed task counts as a success.
* Unknown fields of a task or blocker are ignored and listed in the report.
* An ``intent`` on a task without ``requires_context: true`` is not stored on the
  (opaque) task; it is kept in the import's audit row.
* A task id that is already stored is replaced (identical records are left
  alone, so importing the same file twice changes nothing). A blocker is the
  same blocker when task id and ``blocked_at`` match; it is then updated.
* All or nothing: the whole file is validated first (a NUL byte, non-UTF-8,
  invalid JSON, a wrong type, a duplicate id, two active blockers for one task
  — each is a one-line error naming the item), then written in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memlens.errors import CorruptRowError, NotFoundError, ValidationError
from memlens.limits import MAX_LIST, check_int, utf8_problem_in
from memlens.models import ID_RE, check_json_value, format_ts, parse_ts, utcnow
from memlens.store import db
from memlens.working.task_report import _OUTCOME_ALIASES, Outcome, _one_line, report_digest, summarize  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from memlens.memory import Memory

GENERATION_KEY = "_tasks"  # row in the ``wings`` table bumped by every working-memory write
MAX_TEXT = 4000  # characters of an intent or a reason
MAX_REPORT_BYTES = 256 * 1024  # a validation report, serialised
INTENT_SHOWN = 200  # characters of an intent in the window
REASON_SHOWN = 300
DETAIL_SHOWN = 300
NO_REASON = "(no reason recorded)"

_DB_TS = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width: text order is time order


# -- models ------------------------------------------------------------------------------------


def _check_id(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("must be a string")
    v = v.strip()
    if not ID_RE.match(v):
        raise ValueError(f"{v!r} is not a valid task id (1-128 letters, digits, _ . : -)")
    return v


def _check_text(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise ValueError("must be a string")
    v = v.strip()
    if not v:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in v:
        raise ValueError("must not contain NUL bytes")
    if len(v) > MAX_TEXT:
        raise ValueError(f"too long ({len(v)} characters, at most {MAX_TEXT})")
    return v


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


@dataclass(frozen=True)
class Window:
    """What an agent sees: recent tasks (oldest first) and active blockers (oldest first)."""

    tasks: list[Task]
    blockers: list[Blocker]

    def render(self) -> str:
        return render_markdown(self.tasks, self.blockers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": [t.to_record() for t in self.tasks],
            "blockers": [b.to_record() for b in self.blockers],
            "markdown": self.render(),
        }


# -- rendering -----------------------------------------------------------------------------------


def _minute(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%MZ")


def _quote(text: str, limit: int) -> str:
    return json.dumps(_one_line(text, limit), ensure_ascii=False)


def _detail(task: Task) -> str | None:
    """What the summary adds to "intent — outcome" (the line shown under a task)."""
    if not task.summary or not task.intent:
        return None
    head = f"{_one_line(task.intent)} — {task.outcome.value}"
    summary = _one_line(task.summary)
    if summary == head:
        return None
    if summary.startswith(head + "; "):
        summary = summary[len(head) + 2 :]
    return _one_line(summary, DETAIL_SHOWN)


def render_markdown(tasks: list[Task], blockers: list[Blocker]) -> str:
    """The working-memory block (recent tasks, then active blockers); ``""`` when both lists are empty; no trailing newline."""
    lines: list[str] = []
    if tasks:
        lines.append("## Recent Task History")
        for i, t in enumerate(tasks, 1):
            mark = "✓ success" if t.outcome is Outcome.success else "✗ failure"
            status = f"(completed: {_minute(t.completed_at)}, {mark})"
            if t.requires_context and t.intent:
                lines.append(f"{i}. {t.task_id}: {_quote(t.intent, INTENT_SHOWN)} {status}")
                detail = _detail(t)
                if detail:
                    lines.append(f"{' ' * (len(str(i)) + 2)}{detail}")
            else:
                lines.append(f"{i}. {t.task_id} {status}")
    if blockers:
        if lines:
            lines.append("")
        lines.append("## Active Blockers")
        for b in blockers:
            lines.append(f"- {b.task_id}: {_quote(b.reason, REASON_SHOWN)} (blocked: {_minute(b.blocked_at)})")
    return "\n".join(lines)


# -- storage helpers -----------------------------------------------------------------------------


def _db_ts(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime(_DB_TS)


def _from_db_ts(text: str | None) -> datetime | None:
    if text is None:
        return None
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)


_TASK_COLS = "task_id, intent, summary, outcome, completed_at, requires_context, validation_report"
_BLOCKER_COLS = "task_id, reason, blocked_at, resolved_at, resolution"


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
        completed_at=_from_db_ts(completed_at),
        requires_context=bool(rc),
        validation_report=report,
    )


def _decode_blocker(row: tuple[Any, ...]) -> Blocker:
    tid, reason, blocked_at, resolved_at, resolution = row
    return Blocker.model_construct(
        task_id=tid,
        reason=reason,
        blocked_at=_from_db_ts(blocked_at),
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


# -- the working memory --------------------------------------------------------------------------


class WorkingMemory:
    """Recent tasks and blockers of one store (``Memory.tasks``). Thread-safe like ``Memory``."""

    def __init__(self, mem: Memory) -> None:
        self.mem = mem

    @property
    def config(self) -> Any:
        return self.mem.settings.working_memory

    # -- reads ---------------------------------------------------------------------------------

    def get(self, task_id: str) -> Task:
        row = self.mem.conn.execute(f"SELECT {_TASK_COLS} FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no completed task {task_id!r} in {self.mem.path}")
        return _row_to_task(row)

    def count(self) -> int:
        return int(self.mem.conn.execute("SELECT count(*) FROM tasks").fetchone()[0])

    def is_empty(self) -> bool:
        conn = self.mem.conn
        return conn.execute("SELECT 1 FROM tasks LIMIT 1").fetchone() is None and (
            conn.execute("SELECT 1 FROM blockers LIMIT 1").fetchone() is None
        )

    def _n(self, n: int | None) -> int:
        if n is None:
            return int(self.config.window)
        return check_int("window size", n, 0, MAX_LIST)

    def recent(self, n: int | None = None) -> list[Task]:
        """The last ``n`` (default: ``working_memory.window``) completed tasks, oldest first."""
        n = self._n(n)
        if n == 0:
            return []
        rows = self.mem.conn.execute(
            f"SELECT {_TASK_COLS} FROM tasks ORDER BY completed_at DESC, seq DESC LIMIT ?", (n,)
        ).fetchall()
        return [_row_to_task(r) for r in reversed(rows)]

    def all(self) -> list[Task]:
        """Every stored (not pruned) completed task, oldest first."""
        rows = self.mem.conn.execute(f"SELECT {_TASK_COLS} FROM tasks ORDER BY completed_at, seq").fetchall()
        return [_row_to_task(r) for r in rows]

    def blockers(self, active_only: bool = True) -> list[Blocker]:
        """Active blockers (or all, resolved included), oldest first."""
        where = " WHERE resolved_at IS NULL" if active_only else ""
        rows = self.mem.conn.execute(f"SELECT {_BLOCKER_COLS} FROM blockers{where} ORDER BY blocked_at, id").fetchall()
        return [_row_to_blocker(r) for r in rows]

    def window(self, n: int | None = None) -> Window:
        """The last ``n`` completed tasks and all active blockers (one read transaction)."""
        n = self._n(n)
        conn = self.mem.conn
        if conn.in_transaction:
            return Window(self.recent(n), self.blockers())
        conn.execute("BEGIN")  # one snapshot for both reads
        try:
            tasks = self.recent(n)
            blockers = self.blockers()
        finally:
            conn.execute("COMMIT")
        return Window(tasks, blockers)

    def render(self, n: int | None = None) -> str:
        """The markdown block an agent receives; ``""`` when there is nothing."""
        return self.window(n).render()

    def generation(self) -> int:
        """Bumped by every working-memory write, in any process."""
        return self.mem.generations([GENERATION_KEY])[GENERATION_KEY]

    # -- writes --------------------------------------------------------------------------------

    def complete(
        self,
        task_id: str,
        intent: str | None,
        *,
        outcome: str | Outcome = Outcome.success,
        validation_report: Mapping[str, Any] | None = None,
        requires_context: bool = True,
        completed_at: datetime | str | None = None,
    ) -> Task:
        """Record a completed task (the finalizer): capture intent, build the summary, prune.

        With ``requires_context=False`` the task stays opaque: the intent is only
        kept in the audit. Completing an id again replaces the earlier completion;
        completing a blocked task resolves its blocker.
        """
        if isinstance(outcome, str) and outcome.strip().lower() not in ("success", "failure"):
            raise ValidationError(f"outcome must be 'success' or 'failure', got {outcome!r}")
        if requires_context and (intent is None or (isinstance(intent, str) and not intent.strip())):
            raise ValidationError("an intent is required (or complete the task without context)")
        record: dict[str, Any] = {
            "task_id": task_id,
            "intent": intent,
            "outcome": outcome,
            "requires_context": requires_context,
            "validation_report": validation_report,
            "completed_at": completed_at if completed_at is not None else utcnow(),
        }
        if not isinstance(requires_context, bool):
            raise ValidationError("requires_context must be true or false")
        task: Task = _validate(Task, record)
        withheld = intent.strip() if (not requires_context and isinstance(intent, str) and intent.strip()) else None
        with db.transaction(self.mem.conn, self.mem.path) as conn:
            seq = self._put_task(conn, task, "task.complete", {"intent": withheld} if withheld else None)
            last = self._resolve_on_complete(conn, task) or seq
            last = self._prune(conn) or last
            self.mem._bump(conn, {GENERATION_KEY}, last)
        return task

    def block(self, task_id: str, reason: str, blocked_at: datetime | str | None = None) -> Blocker:
        """Mark a task blocked; an already blocked task must be unblocked first."""
        blocker: Blocker = _validate(
            Blocker, {"task_id": task_id, "reason": reason, "blocked_at": blocked_at if blocked_at is not None else utcnow()}
        )
        with db.transaction(self.mem.conn, self.mem.path) as conn:
            row = conn.execute(
                f"SELECT {_BLOCKER_COLS} FROM blockers WHERE task_id = ? AND resolved_at IS NULL", (blocker.task_id,)
            ).fetchone()
            if row is not None:
                old = _row_to_blocker(row)
                raise ValidationError(
                    f"task {blocker.task_id!r} is already blocked since {format_ts(old.blocked_at)} "
                    f"({_quote(old.reason, 80)}); unblock it first"
                )
            seq = self.mem._audit(conn, "task.block", blocker.task_id, None, None, blocker.to_record())
            self._insert_blocker(conn, blocker)
            self.mem._bump(conn, {GENERATION_KEY}, seq)
        return blocker

    def unblock(self, task_id: str, resolved_at: datetime | str | None = None) -> Blocker:
        """Resolve the task's active blocker; an error if it has none."""
        when = _validate(Blocker, {"task_id": task_id, "reason": "-", "blocked_at": resolved_at or utcnow()})
        task_id, when = when.task_id, when.blocked_at
        with db.transaction(self.mem.conn, self.mem.path) as conn:
            row = conn.execute(
                f"SELECT id, {_BLOCKER_COLS} FROM blockers WHERE task_id = ? AND resolved_at IS NULL", (task_id,)
            ).fetchone()
            if row is None:
                active = [
                    r[0]
                    for r in conn.execute(
                        "SELECT task_id FROM blockers WHERE resolved_at IS NULL ORDER BY blocked_at, id LIMIT 6"
                    )
                ]
                known = ", ".join(active[:5]) + (", …" if len(active) > 5 else "") if active else "none"
                raise NotFoundError(f"task {task_id!r} has no active blocker (active blockers: {known})")
            before = _row_to_blocker(row[1:])
            after, seq = self._resolve(conn, row[0], before, when, "unblock", None)
            last = self._prune(conn) or seq
            self.mem._bump(conn, {GENERATION_KEY}, last)
        return after

    # -- write helpers (inside a transaction) ---------------------------------------------------

    def _put_task(self, conn: Any, task: Task, action: str, detail: dict[str, Any] | None) -> int:
        row = conn.execute(f"SELECT {_TASK_COLS} FROM tasks WHERE task_id = ?", (task.task_id,)).fetchone()
        before = _row_to_task(row).to_record() if row else None
        seq = self.mem._audit(conn, action, task.task_id, None, before, task.to_record(), detail)
        conn.execute(
            f"INSERT OR REPLACE INTO tasks({_TASK_COLS}, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                task.task_id,
                task.intent,
                task.summary,
                task.outcome.value,
                _db_ts(task.completed_at),
                int(task.requires_context),
                json.dumps(task.validation_report, ensure_ascii=False, sort_keys=True),
                seq,
            ),
        )
        return seq

    @staticmethod
    def _insert_blocker(conn: Any, b: Blocker) -> None:
        conn.execute(
            f"INSERT INTO blockers({_BLOCKER_COLS}) VALUES (?, ?, ?, ?, ?)",
            (b.task_id, b.reason, _db_ts(b.blocked_at), _db_ts(b.resolved_at) if b.resolved_at else None, b.resolution),
        )

    def _resolve(
        self, conn: Any, rowid: int, before: Blocker, when: datetime, how: str, detail: dict[str, Any] | None
    ) -> tuple[Blocker, int]:
        after = before.model_copy(update={"resolved_at": max(when, before.blocked_at), "resolution": how})
        conn.execute(
            "UPDATE blockers SET resolved_at = ?, resolution = ? WHERE id = ?", (_db_ts(after.resolved_at), how, rowid)  # type: ignore[arg-type]
        )
        seq = self.mem._audit(conn, "task.unblock", before.task_id, None, before.to_record(), after.to_record(), detail)
        return after, seq

    def _resolve_on_complete(self, conn: Any, task: Task) -> int | None:
        row = conn.execute(
            f"SELECT id, {_BLOCKER_COLS} FROM blockers WHERE task_id = ? AND resolved_at IS NULL", (task.task_id,)
        ).fetchone()
        if row is None:
            return None
        _, seq = self._resolve(conn, row[0], _row_to_blocker(row[1:]), task.completed_at, "complete", {"by": "task.complete"})
        return seq

    def _prune(self, conn: Any) -> int | None:
        """Keep the newest ``max_tasks`` tasks and as many resolved blockers; audit each removal."""
        keep = int(self.config.max_tasks)
        last = None
        rows = conn.execute(
            f"SELECT {_TASK_COLS} FROM tasks ORDER BY completed_at DESC, seq DESC LIMIT -1 OFFSET ?", (keep,)
        ).fetchall()
        for row in rows:
            task = _row_to_task(row)
            last = self.mem._audit(conn, "task.prune", task.task_id, None, task.to_record(), None, {"max_tasks": keep})
            conn.execute("DELETE FROM tasks WHERE task_id = ?", (task.task_id,))
        rows = conn.execute(
            f"SELECT id, {_BLOCKER_COLS} FROM blockers WHERE resolved_at IS NOT NULL "
            "ORDER BY resolved_at DESC, id DESC LIMIT -1 OFFSET ?",
            (keep,),
        ).fetchall()
        for row in rows:
            b = _row_to_blocker(row[1:])
            last = self.mem._audit(
                conn, "task.prune", b.task_id, None, b.to_record(), None, {"max_tasks": keep, "blocker": True}
            )
            conn.execute("DELETE FROM blockers WHERE id = ?", (row[0],))
        return last

    # -- backfill ----------------------------------------------------------------------------------

    def import_state(self, source: str | Path, *, parsed: tuple[str, Any] | None = None) -> dict[str, Any]:
        """Load a legacy state file (see the module docstring), all or nothing.

        ``parsed``: the file's (name, JSON) already read by ``read_state`` (the CLI checks it before opening a store).
        """
        name, obj = parsed if parsed is not None else read_state(source)
        tasks, blockers, info = parse_state(obj, name)
        report = {
            "source": name,
            "tasks_imported": 0,
            "tasks_replaced": 0,
            "tasks_unchanged": 0,
            "blockers_imported": 0,
            "blockers_updated": 0,
            "blockers_unchanged": 0,
            "backfilled": info["backfilled"],
            "pruned": 0,
            "ignored_fields": info["ignored_fields"],
        }
        with db.transaction(self.mem.conn, self.mem.path) as conn:
            last = None
            for index, task, withheld in tasks:
                row = conn.execute(f"SELECT {_TASK_COLS} FROM tasks WHERE task_id = ?", (task.task_id,)).fetchone()
                if row is not None and _row_to_task(row).to_record() == task.to_record():
                    report["tasks_unchanged"] += 1
                    continue
                report["tasks_replaced" if row else "tasks_imported"] += 1
                detail = {"source": name, "item": index, **({"intent": withheld} if withheld else {})}
                last = self._put_task(conn, task, "task.import", detail)
            for index, b in blockers:
                row = conn.execute(
                    f"SELECT id, {_BLOCKER_COLS} FROM blockers WHERE task_id = ? AND blocked_at = ?",
                    (b.task_id, _db_ts(b.blocked_at)),
                ).fetchone()
                if row is not None:
                    old = _row_to_blocker(row[1:])
                    same = old.reason == b.reason and old.resolved_at == b.resolved_at
                    if same:
                        report["blockers_unchanged"] += 1
                        continue
                    if b.active:
                        self._check_no_other_active(conn, b, name, index, exclude=row[0])
                    how = None if b.active else (old.resolution if old.resolved_at else "import")
                    new = b.model_copy(update={"resolution": how})
                    conn.execute(
                        "UPDATE blockers SET reason = ?, resolved_at = ?, resolution = ? WHERE id = ?",
                        (new.reason, _db_ts(new.resolved_at) if new.resolved_at else None, new.resolution, row[0]),
                    )
                    last = self.mem._audit(
                        conn, "task.import", b.task_id, None, old.to_record(), new.to_record(), {"source": name, "item": index}
                    )
                    report["blockers_updated"] += 1
                    continue
                if b.active:
                    self._check_no_other_active(conn, b, name, index)
                new = b.model_copy(update={"resolution": "import"}) if b.resolved_at else b
                last = self.mem._audit(
                    conn, "task.import", b.task_id, None, None, new.to_record(), {"source": name, "item": index}
                )
                self._insert_blocker(conn, new)
                report["blockers_imported"] += 1
            before_prune = int(conn.execute("SELECT count(*) FROM tasks").fetchone()[0])
            last = self._prune(conn) or last
            report["pruned"] = before_prune - int(conn.execute("SELECT count(*) FROM tasks").fetchone()[0])
            if last is not None:
                self.mem._bump(conn, {GENERATION_KEY}, last)
        return report

    @staticmethod
    def _check_no_other_active(conn: Any, b: Blocker, name: str, index: str, exclude: int | None = None) -> None:
        row = conn.execute(
            "SELECT id, blocked_at FROM blockers WHERE task_id = ? AND resolved_at IS NULL AND id IS NOT ?",
            (b.task_id, exclude),
        ).fetchone()
        if row is not None:
            since = format_ts(_from_db_ts(row[1]))  # type: ignore[arg-type]
            raise ValidationError(
                f"{name}: {index}: task {b.task_id!r} already has an active blocker in the store (since {since}); "
                "unblock it first"
            )


# legacy state files live in their own module; re-exported here for callers of memlens.working.tasks
from memlens.working.task_state import demo_tasks_file, load_demo, parse_state, read_state  # noqa: E402,F401
