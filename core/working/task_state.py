"""Legacy state files (backfill of working memory from an older state file): tolerant parsing of old ``completed_tasks`` shapes.

``WorkingMemory.import_state`` (``memlens tasks import-state``) writes what this validates.

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
from datetime import datetime
from pathlib import Path
from typing import Any

from memlens.errors import ValidationError
from memlens.files import JSON_MAX_BYTES, read_file, read_stdin
from memlens.models import format_ts
from memlens.working.task_models import NO_REASON, Blocker, Task, _validate

_TASK_FIELDS = {
    "task_id",
    "id",
    "intent",
    "summary",
    "outcome",
    "completed_at",
    "requires_context",
    "validation_report",
    "success",
}
_BLOCKER_FIELDS = {"task_id", "id", "reason", "blocked_reason", "blocked_at", "resolved_at"}


def read_json_file(
    source: str | Path, *, label: str = "", expected: str = "a JSON state file", cap: int = JSON_MAX_BYTES
) -> tuple[str, Any]:
    """(name, parsed JSON) of a regular file of at most ``cap`` bytes, or ``-`` for stdin,
    with one-line errors prefixed by ``label``."""
    if str(source) == "-":
        name, data = "<stdin>", read_stdin(cap=cap, what=label.strip())
    else:
        name = str(Path(source))
        data = read_file(name, cap=cap, what=label.strip())
    where = f"{label}{name}"
    if b"\x00" in data:
        raise ValidationError(f"{where}: binary data (NUL byte); not {expected}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start}); not {expected}") from None
    if not text.strip():
        raise ValidationError(f"{where}: empty file; expected {expected}")

    def no_constant(c: str) -> Any:
        raise ValueError(c)

    try:
        obj = json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:
        raise ValidationError(f"{where}: invalid JSON: {exc} is not a number") from None
    except RecursionError:
        raise ValidationError(f"{where}: invalid JSON: nested too deeply") from None
    return name, obj


def read_state(source: str | Path) -> tuple[str, Any]:
    """(name, parsed JSON) of a legacy state file."""
    return read_json_file(source, expected="a JSON state file with completed_tasks")


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__
    )


def _legacy_outcome(item: Mapping[str, Any]) -> Any:
    if item.get("outcome") is not None:
        return item["outcome"]
    if isinstance(item.get("success"), bool):
        return "success" if item["success"] else "failure"
    report = item.get("validation_report")
    if isinstance(report, Mapping):
        for key in ("passed", "success"):
            if isinstance(report.get(key), bool):
                return "success" if report[key] else "failure"
    return "success"


def _pick(item: Mapping[str, Any], *names: str) -> Any:
    for n in names:
        if item.get(n) is not None:
            return item[n]
    return None


def parse_state(
    obj: Any, name: str = "state"
) -> tuple[list[tuple[str, Task, str | None]], list[tuple[str, Blocker]], dict[str, Any]]:
    """Validate a whole state object: (tasks, blockers, info), each item with its location.

    Tasks come as (location, task, intent withheld from an opaque task or None),
    oldest first; blockers as (location, blocker), oldest first.
    """
    if not isinstance(obj, dict):
        raise ValidationError(f"{name}: expected a JSON object with completed_tasks, got {_kind(obj)}")
    known = [k for k in ("completed_tasks", "blocked_tasks", "blockers") if k in obj]
    if not known:
        raise ValidationError(f"{name}: no completed_tasks, blocked_tasks or blockers: not a state file")
    ignored: set[str] = set()
    backfilled = 0

    raw_tasks = obj.get("completed_tasks")
    if raw_tasks is None:
        raw_tasks = []
    if not isinstance(raw_tasks, list):
        raise ValidationError(f"{name}: completed_tasks must be a list, got {_kind(raw_tasks)}")
    tasks: list[tuple[int, str, Task, str | None]] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(raw_tasks):
        where = f"completed_tasks[{i}]"
        if not isinstance(item, dict):
            raise ValidationError(f"{name}: {where}: expected an object, got {_kind(item)}")
        ignored |= {f"completed_tasks.{k}" for k in item if k not in _TASK_FIELDS}
        rc = item.get("requires_context")
        if rc is None:
            backfilled += 1
            rc = False
        elif not isinstance(rc, bool):
            raise ValidationError(f"{name}: {where}: field 'requires_context': must be true or false, got {_kind(rc)}")
        task_id = _pick(item, "task_id", "id")
        if task_id is None:
            raise ValidationError(f"{name}: {where}: field 'task_id' is required")
        if item.get("completed_at") is None:
            raise ValidationError(f"{name}: {where}: field 'completed_at' is required")
        record = {
            "task_id": task_id,
            "intent": item.get("intent"),
            "summary": item.get("summary"),
            "outcome": _legacy_outcome(item),
            "completed_at": item["completed_at"],
            "requires_context": rc,
            "validation_report": item.get("validation_report"),
        }
        task: Task = _validate(Task, record, f"{name}: {where}")
        if task.task_id in seen:
            raise ValidationError(f"{name}: {where}: duplicate task_id {task.task_id!r} (also at {seen[task.task_id]})")
        seen[task.task_id] = where
        withheld = None if task.requires_context or not isinstance(item.get("intent"), str) else item["intent"].strip() or None
        tasks.append((i, where, task, withheld))

    blockers: list[tuple[int, str, Blocker]] = []
    seen_b: dict[tuple[str, datetime], str] = {}
    active: dict[str, str] = {}
    n = 0
    for key in ("blocked_tasks", "blockers"):
        raw = obj.get(key)
        if raw is None:
            continue
        if isinstance(raw, dict):
            items: list[tuple[str, Any]] = []
            for tid, v in raw.items():
                if not isinstance(v, dict):
                    raise ValidationError(f"{name}: {key}[{tid!r}]: expected an object, got {_kind(v)}")
                items.append((f"{key}[{tid!r}]", {"task_id": tid, **v}))
        elif isinstance(raw, list):
            items = [(f"{key}[{i}]", v) for i, v in enumerate(raw)]
        else:
            raise ValidationError(f"{name}: {key} must be a list or an object, got {_kind(raw)}")
        for where, item in items:
            if not isinstance(item, dict):
                raise ValidationError(f"{name}: {where}: expected an object, got {_kind(item)}")
            ignored |= {f"{key}.{k}" for k in item if k not in _BLOCKER_FIELDS}
            task_id = _pick(item, "task_id", "id")
            if task_id is None:
                raise ValidationError(f"{name}: {where}: field 'task_id' is required")
            if item.get("blocked_at") is None:
                raise ValidationError(f"{name}: {where}: field 'blocked_at' is required")
            reason = _pick(item, "reason", "blocked_reason")
            if reason is None or (isinstance(reason, str) and not reason.strip()):
                reason = NO_REASON
            record = {
                "task_id": task_id,
                "reason": reason,
                "blocked_at": item["blocked_at"],
                "resolved_at": item.get("resolved_at"),
            }
            b: Blocker = _validate(Blocker, record, f"{name}: {where}")
            ident = (b.task_id, b.blocked_at)
            if ident in seen_b:
                raise ValidationError(
                    f"{name}: {where}: duplicate blocker of {b.task_id!r} at {format_ts(b.blocked_at)} (also at {seen_b[ident]})"
                )
            seen_b[ident] = where
            if b.active:
                if b.task_id in active:
                    raise ValidationError(
                        f"{name}: {where}: task {b.task_id!r} has two active blockers (also at {active[b.task_id]})"
                    )
                active[b.task_id] = where
            blockers.append((n, where, b))
            n += 1

    tasks.sort(key=lambda t: (t[2].completed_at, t[0]))
    blockers.sort(key=lambda b: (b[2].blocked_at, b[0]))
    info = {"backfilled": backfilled, "ignored_fields": sorted(ignored)}
    return [(w, t, x) for _, w, t, x in tasks], [(w, b) for _, w, b in blockers], info

