"""The SQLite store implements the write half of the storage interface, and entries round-trip through the one
row mapping."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from memlens.store import base
from memlens.store.rows import COLUMN_LIST, COLUMNS, entry_values, row_to_entry
from memlens.store.sqlite import SqliteStore
from memlens.store.task_rows import SqliteTaskRows
from memlens.store.writer import SqliteWriter


def _members(proto: type) -> dict[str, object]:
    names = set()
    for klass in proto.__mro__:
        if klass in (object,) or klass.__name__ in ("Protocol", "Generic"):
            continue
        names |= {n for n in vars(klass) if not n.startswith("_")}
        names |= set(getattr(klass, "__annotations__", {}))
    return {n: getattr(proto, n, None) for n in sorted(names)}


@pytest.mark.parametrize(("proto", "impl"), [(base.Writes, SqliteStore), (base.Lookups, SqliteStore),
                                             (base.Catalog, SqliteStore), (base.Writer, SqliteWriter),
                                             (base.TaskRows, SqliteTaskRows)])
def test_sqlite_classes_implement_the_protocols(proto, impl, tmp_path, hash_embedder):
    instance = None
    if impl is SqliteStore:
        instance = SqliteStore(tmp_path / "s.db", model=lambda: hash_embedder)
    missing, wrong = [], []
    for name, want in _members(proto).items():
        have = getattr(instance if instance is not None else impl, name, None)
        if have is None and name not in getattr(impl, "__annotations__", {}) and not hasattr(impl, name):
            if not (impl is SqliteWriter and name == "tasks"):  # set per instance
                missing.append(name)
            continue
        if inspect.isfunction(want) and have is not None and callable(have):
            params = [p for p in inspect.signature(want).parameters if p != "self"]
            got = [p for p in inspect.signature(have).parameters if p != "self"]
            if got[: len(params)] != params:
                wrong.append(f"{name}{tuple(got)} != {tuple(params)}")
    if instance is not None:
        instance.close()
    assert not missing and not wrong, (missing, wrong)


def test_timestamps_read_again_are_the_same_and_a_damaged_one_is_still_refused():
    """Rows decoded again (a long-lived process) reuse their parsed timestamps: the same values, microseconds
    included; a timestamp that does not parse is refused every time and never kept."""
    from datetime import datetime, timezone

    from memlens.errors import CorruptRowError
    from memlens.models import Entry
    from memlens.store import rows

    when = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=timezone.utc)
    entry = Entry(wing="w", text="a body", created_at=when, updated_at=datetime(2026, 3, 5, tzinfo=timezone.utc))
    row = tuple(entry_values(entry, "m")[: len(COLUMNS)])
    assert row_to_entry(row) == entry == row_to_entry(row)
    bad = "2026-13-45T00:00:00Z"
    damaged = (*row[:11], bad, *row[12:])
    for _ in range(2):
        with pytest.raises(CorruptRowError):
            row_to_entry(damaged)
    assert bad not in rows._times


def test_an_entry_round_trips_through_the_row_mapping(tmp_path, hash_embedder):
    from memlens.models import Entry

    entry = Entry.model_validate({"wing": "w", "room": "r", "text": "a body", "title": "T", "key": "k",
                                  "meta": {"b": 1, "a": [1, 2]}, "salience": 0.25})
    store = SqliteStore(tmp_path / "s.db", model=lambda: hash_embedder)
    try:
        with store.write() as w:
            rowid = w.insert(entry, np.ones(hash_embedder.dim, dtype=np.float32) / np.sqrt(hash_embedder.dim))
            w.bump({"w"}, w.audit("add", entry.id, "w", None, entry.to_record()))
        row = store.get_row(entry.id)
        assert row is not None and len(row) == len(COLUMNS)
        assert row_to_entry(row) == entry
        assert list(row[:-1]) == entry_values(entry, store.model_id)[: len(COLUMNS) - 1]
        stored = store.conn.execute(f"SELECT rowid, {COLUMN_LIST} FROM entries").fetchone()
        assert stored[0] == rowid and row_to_entry(stored[1:]) == entry
        assert store.generations(["w"]) == {"w": 1}
        assert [a["action"] for a in store.audit()] == ["add"]
    finally:
        store.close()


def test_a_failed_write_leaves_nothing(tmp_path, hash_embedder):
    from memlens.models import Entry

    store = SqliteStore(tmp_path / "s.db", model=lambda: hash_embedder)
    entry = Entry.model_validate({"wing": "w", "text": "x"})
    try:
        with pytest.raises(RuntimeError), store.write() as w:
            w.insert(entry, np.ones(hash_embedder.dim, dtype=np.float32))
            w.bump({"w"}, w.audit("add", entry.id, "w", None, entry.to_record()))
            raise RuntimeError("stop")
        assert store.count() == 0 and store.generations() == {} and store.audit() == []
    finally:
        store.close()


def test_backends_implement_their_roles_without_placeholders():
    """Every method a role names is implemented where a backend's class defines it: no ``NotImplementedError``
    stand-in for a method the final class fills in (a role's missing method is then a type error, not a crash)."""
    import ast
    from pathlib import Path

    import memlens.store as store_pkg

    found = []
    for path in sorted(Path(store_pkg.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and "NotImplementedError" in ast.unparse(node.exc or node):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found


