"""The one mapping between a stored entry row and an ``Entry``, and checks of stored rows.

``COLUMNS`` is the order in which every reader selects an entry's columns
(``COLUMN_LIST`` / ``select_list(alias)``); ``row_to_entry`` decodes such a
row, ``entry_values`` encodes an entry for ``INSERT`` (``STORED_COLUMNS``).

A hand-edited or damaged column must not crash a read.

SQLite keeps whatever a hand edit wrote (``meta = '{bad json'``, ``kind =
'bogus'``, ``salience = 'high'``, a timestamp that is not one), and rows are
decoded without full validation for speed (``store.row_to_entry``). Readers
check rows with :func:`row_problem` first and skip (search, export) or
report (``memlens check``) a damaged one instead of failing on it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.errors import CorruptRowError
from memlens.models import KINDS, STATUSES, TYPES, Entry, EntryType, Kind, Status, content_hash, filled, parse_ts
from memlens.untrusted import authority_problem
from memlens.vocab import UNTRUSTED_KINDS

if TYPE_CHECKING:
    from memlens.store.scope import Rows, StoredRow

COLUMNS = (
    "id", "wing", "room", "kind", "type", "status", "title", "text", "key", "salience", "overrides",
    "created_at", "updated_at", "meta",
)
COLUMN_LIST = ", ".join(COLUMNS)
WIDTH = len(COLUMNS)
# positions in a row selected as COLUMNS (row_problem reads them as literals, for speed; checked at import)
ID, WING, ROOM, KIND, TYPE, STATUS, TITLE, TEXT, KEY, SALIENCE, OVERRIDES, CREATED_AT, UPDATED_AT, META = range(14)
# what an INSERT writes: the entry's columns, then what the store derives (the hash of the embedded text, the model)
STORED_COLUMNS = (*COLUMNS, "content_hash", "model", "import_id")


def select_list(alias: str = "") -> str:
    """``COLUMN_LIST`` with each column prefixed by ``alias.`` (for joins)."""
    return ", ".join(f"{alias}.{c}" for c in COLUMNS) if alias else COLUMN_LIST


_KINDS, _TYPES, _STATUSES = frozenset(KINDS), frozenset(TYPES), frozenset(STATUSES)
_KIND = {k.value: k for k in Kind}
_TYPE = {t.value: t for t in EntryType}
_STATUS = {s.value: s for s in Status}
TIMES_KEPT = 50_000
# stored timestamp -> its datetime: a long-lived process builds the entries of the same rows search after search
# (the same strings, whose hashes Python keeps), and parsing two timestamps was a quarter of building an entry
_times: dict[str, datetime] = {}


def _time(value: str) -> datetime:
    got = _times.get(value)
    if got is None:
        got = parse_ts(value)  # raises for a value that is not a timestamp, as before: nothing is kept for it
        if len(_times) >= TIMES_KEPT:
            _times.clear()
        _times[value] = got
    return got


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
    """What is wrong with an entry row selected as ``COLUMNS`` (None: it decodes).

    About 1 µs for a sound row: a search checks its ~100 candidates (positions are literals here for
    that speed; ``_check_positions`` below ties them to ``COLUMNS``).
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


def rule_problem(row: tuple[Any, ...]) -> str | None:
    """Which rule across columns a row that decodes breaks (None: none), as validation would refuse it: an entry
    overriding itself, web text stored as an invariant or decision without a person's promotion (written behind
    the engine's back). Such a row is never served (search, export), but it can be read, edited and deleted."""
    if row[3] not in UNTRUSTED_KINDS and row[10] != row[0]:
        return None
    if row[10] == row[0]:
        return "it overrides itself"
    return authority_problem(row[0], row[3], row[4], row[7], json_object(row[13]) or {})


def damaged_note(entry_id: Any, problem: str) -> str:
    return f"skipped entry {entry_id!r}: its stored row is damaged ({problem}); {HINT}"


def json_object(text: Any) -> dict[str, Any] | None:
    """A JSON object stored as text, or None if it is not one."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def row_to_entry(row: tuple[Any, ...]) -> Entry:
    """Build an Entry from a row selected as ``COLUMNS``.

    Rows were validated on the way in, so this only converts types
    (``model_construct``): a search builds ~100 of these, and full validation
    was a tenth of the pipeline at 100k entries. A row changed behind the
    engine's back (a hand edit, damage) raises CorruptRowError, in one line.
    """
    problem = row_problem(row)
    if problem is not None:
        raise CorruptRowError(f"stored entry {row[0]!r} is damaged: {problem}; {HINT}")
    (id_, wing, room, kind, type_, status, title, text, key, salience, overrides, created, updated, meta) = row
    entry = Entry.model_construct(
        id=id_, wing=wing, room=room, kind=_KIND[kind], type=_TYPE[type_], status=_STATUS[status], title=title,
        text=text, key=key, salience=float(salience), overrides=overrides, created_at=_time(created),
        updated_at=_time(updated), meta=json.loads(meta) if meta and meta != "{}" else {},
    )
    return filled(entry)  # what validation fills in (a title left empty by a hand edit)


ENTRIES_KEPT = 4096
ENTRY_CHARS_KEPT = 8_000_000  # characters of title and text
# rowid -> (the stored row an entry was built from, that entry): the results of a long-lived process's searches
# are mostly the same entries again, and building one (the check and the conversion) was half of making a result
_entries: dict[int, tuple[tuple[Any, ...], Entry]] = {}
_entry_chars = [0]


def kept_entry(stored: StoredRow) -> Entry:
    """``row_to_entry`` of a stored row (rowid, content hash, then ``COLUMNS``), built once for as long as the
    row reads the same: each call returns its own copy (a caller may edit it), with its own ``meta``. A row that
    changed in any column (compared by value) is built again; a damaged one raises as ``row_to_entry`` does."""
    rowid = stored[0]
    got = _entries.get(rowid)
    if got is None or (got[0] is not stored and got[0] != stored):
        entry = row_to_entry(stored[2:])
        size = len(stored[2 + TITLE]) + len(stored[2 + TEXT])
        if len(_entries) >= ENTRIES_KEPT or _entry_chars[0] + size > ENTRY_CHARS_KEPT:
            _entries.clear()
            _entry_chars[0] = 0
        _entries[rowid] = got = (stored, entry)
        _entry_chars[0] += size
    copy = got[1].model_copy()
    if copy.meta:
        copy.__dict__["meta"] = json.loads(stored[2 + META])  # not the kept entry's dict
    return copy


def entry_values(entry: Entry, model_id: str) -> list[Any]:
    """The values of ``COLUMNS`` for ``entry``, then its content hash and ``model_id`` (``STORED_COLUMNS`` less
    ``import_id``)."""
    rec = entry.to_record()
    values = [rec[c] for c in COLUMNS[:META]]
    values += [json.dumps(entry.meta, ensure_ascii=False, sort_keys=True), content_hash(entry.embed_text), model_id]
    return values


def vec_blob(vec: np.ndarray) -> bytes:
    """A vector as stored: little-endian float32 bytes."""
    return np.asarray(vec, dtype="<f4").tobytes()


def _check_positions() -> None:
    named = {"id": ID, "wing": WING, "room": ROOM, "kind": KIND, "type": TYPE, "status": STATUS, "title": TITLE,
             "text": TEXT, "key": KEY, "salience": SALIENCE, "overrides": OVERRIDES, "created_at": CREATED_AT,
             "updated_at": UPDATED_AT, "meta": META}
    if WIDTH != len(named) or any(COLUMNS[i] != name for name, i in named.items()):
        raise AssertionError("memlens.store.rows: COLUMNS and the positions read as literals disagree")


_check_positions()


def sound_rows(rows: list[StoredRow], out: Rows) -> Rows:
    """Keep the rows that decode (into ``out``); a damaged one (a hand edit) is a note, not a crash."""
    for r in rows:
        problem = row_problem(r[2:]) or rule_problem(r[2:])
        if problem is None:
            out.rows.append(r)
        else:
            out.damaged.append(damaged_note(r[2], problem))
    return out
