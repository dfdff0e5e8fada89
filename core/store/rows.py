"""Checks of stored entry rows: a hand-edited or damaged column must not crash a read.

SQLite keeps whatever a hand edit wrote (``meta = '{bad json'``, ``kind =
'bogus'``, ``salience = 'high'``, a timestamp that is not one), and rows are
decoded without full validation for speed (``store.row_to_entry``). Readers
check rows with :func:`row_problem` first and skip (search, export) or
report (``memlens check``) a damaged one instead of failing on it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from memlens.models import KINDS, STATUSES, TYPES, parse_ts

_KINDS, _TYPES, _STATUSES = frozenset(KINDS), frozenset(TYPES), frozenset(STATUSES)
_fromiso = datetime.fromisoformat
_TEXT_COLUMNS = ((0, "id"), (1, "wing"), (2, "room"), (6, "title"), (7, "text"))
HINT = "`memlens check` lists such rows"


def ts_problem(value: Any) -> str | None:
    if type(value) is str and len(value) in (20, 27) and value[-1] == "Z" and value[10] == "T":
        try:
            datetime.fromisoformat(value[:-1])  # the store's own format: the common, fast case
            return None
        except ValueError:
            pass
    try:
        parse_ts(value)
        return None
    except (ValueError, TypeError):
        return f"{value!r} is not a timestamp"


def row_problem(row: tuple[Any, ...]) -> str | None:
    """What is wrong with an entry row selected as ``store._COLUMNS`` (None: it decodes).

    About 1 µs for a sound row: a search checks its ~100 candidates.
    """
    c, u, m, sal = row[11], row[12], row[13], row[9]
    if (
        row[3] in _KINDS and row[4] in _TYPES and row[5] in _STATUSES
        and type(row[0]) is str and type(row[1]) is str and type(row[2]) is str and type(row[6]) is str
        and type(row[7]) is str and (row[8] is None or type(row[8]) is str) and (row[10] is None or type(row[10]) is str)
        and (type(sal) is float or type(sal) is int) and 0.0 <= sal <= 1.0
        and type(c) is str and len(c) in (20, 27) and c[-1] == "Z" and type(u) is str and len(u) in (20, 27) and u[-1] == "Z"
        and type(m) is str
    ):
        try:  # the common case: timestamps in the store's own format, meta a JSON object
            _fromiso(c[:-1])
            _fromiso(u[:-1])
            if m == "{}" or type(json.loads(m)) is dict:
                return None
        except ValueError:
            pass
    return _slow_problem(row)


def _slow_problem(row: tuple[Any, ...]) -> str | None:
    if row[3] not in _KINDS:
        return f"kind {row[3]!r} is not one of {', '.join(KINDS)}"
    if row[4] not in _TYPES:
        return f"type {row[4]!r} is not one of {', '.join(TYPES)}"
    if row[5] not in _STATUSES:
        return f"status {row[5]!r} is not one of {', '.join(STATUSES)}"
    for i, name in _TEXT_COLUMNS:
        if type(row[i]) is not str:
            return f"{name} is {'NULL' if row[i] is None else type(row[i]).__name__ + ' ' + repr(row[i])[:40]}, not text"
    for i, name in ((8, "key"), (10, "overrides")):
        if row[i] is not None and type(row[i]) is not str:
            return f"{name} is {type(row[i]).__name__} {repr(row[i])[:40]}, not text"
    sal = row[9]
    if type(sal) not in (float, int) or not 0.0 <= sal <= 1.0:
        return f"salience {sal!r} is not a number from 0 to 1"
    for i, name in ((11, "created_at"), (12, "updated_at")):
        bad = ts_problem(row[i])
        if bad:
            return f"{name}: {bad}"
    meta = row[13]
    if meta != "{}" and meta:
        try:
            value = json.loads(meta)
        except (ValueError, TypeError) as exc:
            return f"meta is not valid JSON ({exc})"
        if type(value) is not dict:
            return f"meta is {type(value).__name__}, not a JSON object"
    elif meta is None:
        return "meta is NULL"
    return None


def damaged_note(entry_id: Any, problem: str) -> str:
    return f"skipped entry {entry_id!r}: its stored row is damaged ({problem}); {HINT}"


def json_object(text: Any) -> dict[str, Any] | None:
    """A JSON object stored as text, or None if it is not one."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        return None
    return value if isinstance(value, dict) else None
