"""Entry rows kept in process beside the warm vector index (memlens.store.speed.rowcache): served only while their wing
is at the generation they were read at, so a write by this or another process, or a rolled-back one, is never
hidden; damaged rows are never kept."""

from __future__ import annotations

import pytest

from memlens.store.speed import rowcache
from tests.other_process import write


def _entries_reads(mem) -> list[str]:
    """Record the statements that read entry rows on this thread's connection."""
    seen: list[str] = []
    mem.store.conn.set_trace_callback(lambda s: seen.append(s) if "FROM entries WHERE rowid IN" in s else None)
    return seen


@pytest.fixture
def warm(mem):
    for i in range(12):
        mem.add(f"note {i} about the build cache and its keys", wing="a" if i % 2 else "b", title=f"n{i}")
    assert mem.warm_index() == 12
    return mem


def _rowids(mem) -> list[int]:
    return [r for (r,) in mem.conn.execute("SELECT rowid FROM entries ORDER BY rowid")]


def test_kept_rows_equal_the_stored_rows_and_are_not_read_again(warm):
    store = warm.store
    ids = _rowids(warm)
    first = store.rows(ids)
    assert first.rows == store._read_rows(ids).rows and len(first.rows) == 12
    seen = _entries_reads(warm)
    again = store.rows(ids[::-1])
    assert [r[0] for r in again.rows] == ids[::-1] and sorted(again.rows) == sorted(first.rows)
    assert seen == []  # all twelve came from the cache
    assert warm.search("build cache keys", k=5, use_cache=False).results  # the pipeline reads through it too


def test_a_write_by_this_process_is_read_again(warm):
    store = warm.store
    ids = _rowids(warm)
    store.rows(ids)
    entry_id = store.rows(ids[:1]).rows[0][2]
    warm.update(entry_id, title="renamed here")
    assert store.rows(ids[:1]).rows[0][8] == "renamed here"  # (rowid, content_hash, id, wing, room, kind, type, status, title
    warm.delete(entry_id)
    assert store.rows(ids[:1]).rows == []


def test_a_write_by_another_process_is_read_again(warm):
    store = warm.store
    ids = _rowids(warm)
    store.rows(ids)
    row = store.rows(ids[3:4]).rows[0]
    write(warm.path, "title", row[2], "renamed elsewhere")
    assert store.rows(ids[3:4]).rows[0][8] == "renamed elsewhere"
    others = [r for r in ids if r != ids[3]]
    assert [r[8] for r in store.rows(others).rows] == [r[8] for r in store._read_rows(others).rows]


def test_a_rolled_back_write_is_never_served(warm):
    store, conn = warm.store, warm.store.conn
    ids = _rowids(warm)
    before = store.rows(ids).rows
    row = before[0]
    conn.execute("BEGIN")
    conn.execute("UPDATE entries SET title = 'uncommitted' WHERE rowid = ?", (row[0],))
    conn.execute("UPDATE wings SET generation = generation + 1 WHERE wing = ?", (row[3],))
    assert store.rows([row[0]]).rows[0][8] == "uncommitted"  # inside the transaction: read, not kept
    inside = store.generations()
    conn.execute("ROLLBACK")
    assert store.rows([row[0]]).rows[0][8] == row[8]
    stored = dict(conn.execute("SELECT wing, generation FROM wings").fetchall())
    assert store.generations() == stored and stored[row[3]] == inside[row[3]] - 1
    assert store.rows(ids).rows == before


def test_damaged_rows_are_reported_every_time_and_never_kept(warm):
    store, conn = warm.store, warm.store.conn
    ids = _rowids(warm)
    conn.execute("UPDATE entries SET kind = 'bogus' WHERE rowid = ?", (ids[5],))
    conn.execute("UPDATE wings SET generation = generation + 1")
    for _ in range(2):
        got = store.rows(ids)
        assert ids[5] not in [r[0] for r in got.rows] and len(got.rows) == 11
        assert len(got.damaged) == 1 and "damaged" in got.damaged[0]
    assert ids[5] not in rowcache_rowids(store)


def rowcache_rowids(store) -> set[int]:
    return set(store.vindex.rows._rows)


def test_the_cache_starts_over_past_its_bound(warm, monkeypatch):
    monkeypatch.setattr(rowcache, "ROWS_KEPT", 5)
    store = warm.store
    ids = _rowids(warm)
    store.rows(ids[:4])
    assert len(store.vindex.rows) == 4
    got = store.rows(ids)  # 8 more would pass the bound: it starts over, with as many of them as it holds
    assert len(got.rows) == 12 and len(store.vindex.rows) == 5


def test_a_one_shot_store_keeps_nothing(mem):
    mem.add("a lone note", wing="a")
    assert mem.store.vindex is None or len(mem.store.vindex.rows) == 0
    assert mem.search("lone note", k=3, use_cache=False).results
    assert mem.store.vindex is None or len(mem.store.vindex.rows) == 0


def test_the_cache_starts_over_past_its_byte_budget(warm, monkeypatch):
    store = warm.store
    ids = _rowids(warm)
    one = sum(len(r[8]) + len(r[9]) for r in store._read_rows(ids[:1]).rows)
    monkeypatch.setattr(rowcache, "BYTES_KEPT", one * 5)
    store.rows(ids[:4])
    assert len(store.vindex.rows) == 4
    store.rows(ids[4:8])  # 4 more would pass the budget: it starts over with them
    assert len(store.vindex.rows) == 4
    assert len(store.rows(ids).rows) == 12  # whatever it holds, every row is returned


def test_kept_entries_are_built_once_and_each_caller_gets_its_own(warm, monkeypatch):
    """A search's results are built from the same rows search after search: the entry is built once per row
    value, each result gets a copy it may edit (meta included), and a changed row gives the new entry."""
    from memlens.store import rows as rows_mod

    monkeypatch.setattr(rows_mod, "_entries", {})
    entry_id = warm.search("build cache keys", k=1, use_cache=False).results[0].entry.id
    warm.update(entry_id, meta={"source": "notes.md"})
    built: list[tuple] = []
    real = rows_mod.row_to_entry
    monkeypatch.setattr(rows_mod, "row_to_entry", lambda row: built.append(row) or real(row))

    def top():
        got = warm.search("build cache keys", k=12, use_cache=False).results
        return next(r.entry for r in got if r.entry.id == entry_id)

    first = top()
    assert len(built) == 12
    first.meta["source"] = "edited by a caller"
    first.title = "edited by a caller"
    second = top()
    assert len(built) == 12  # nothing built again
    assert second is not first and second.meta == {"source": "notes.md"} and second.title != "edited by a caller"
    assert second == warm.get(entry_id)
    warm.update(entry_id, title="renamed")
    third = top()
    assert len(built) == 13 and third.title == "renamed" and third == warm.get(entry_id)


def test_kept_entries_start_over_past_their_bound(monkeypatch):
    from memlens.models import Entry
    from memlens.store import rows as rows_mod

    monkeypatch.setattr(rows_mod, "_entries", {})
    monkeypatch.setattr(rows_mod, "ENTRIES_KEPT", 3)
    e = Entry(wing="w", text="x")
    stored = [(i, "hash", *(e.model_copy(update={"id": f"e{i}"}).to_record()[c] for c in rows_mod.COLUMNS[:-1]), "{}")
              for i in range(5)]
    got = [rows_mod.kept_entry(row) for row in stored]
    assert [g.id for g in got] == [f"e{i}" for i in range(5)]
    assert len(rows_mod._entries) <= 3


def test_a_long_lived_warm_keeps_every_row_and_model(mem, monkeypatch):
    """``warm_index(text=True)`` (the app, the MCP server) keeps every row, vector model and entry that fits: the
    first searches read and build none; a write is still seen."""
    for i in range(12):
        mem.add(f"note {i} about the build cache and its keys", wing="a" if i % 2 else "b", title=f"n{i}")
    mem.warm_index(text=True)
    assert len(mem.store.vindex.rows) == 12
    seen = _entries_reads(mem)
    from memlens.store import rows as rows_mod

    built: list[tuple] = []
    real = rows_mod.row_to_entry
    monkeypatch.setattr(rows_mod, "row_to_entry", lambda row: built.append(row) or real(row))
    b = mem.search("build cache keys", k=5, use_cache=False)
    assert b.results and all(r.vector and r.vector["fresh"] for r in b.results)
    assert seen == [] and built == []  # neither a row nor a model read, no entry built
    entry_id = b.results[0].entry.id
    mem.update(entry_id, title="renamed")
    assert next(r for r in mem.search("build cache keys", k=12, use_cache=False).results
                if r.entry.id == entry_id).entry.title == "renamed"


def test_a_warm_past_the_row_bound_keeps_no_rows(mem, monkeypatch):
    for i in range(6):
        mem.add(f"note {i} about the build cache", wing="a", title=f"n{i}")
    monkeypatch.setattr(rowcache, "ROWS_KEPT", 5)
    mem.warm_index(text=True)
    assert len(mem.store.vindex.rows) == 0
    assert mem.search("build cache", k=3, use_cache=False).results


def test_a_warm_past_the_byte_budget_keeps_no_rows(mem, monkeypatch):
    for i in range(6):
        mem.add(f"note {i} about the build cache", wing="a", title=f"n{i}")
    monkeypatch.setattr(rowcache, "BYTES_KEPT", 50)
    mem.warm_index(text=True)
    assert len(mem.store.vindex.rows) == 0 and mem.store.warm_rows() == 0


def test_kept_rows_share_their_few_valued_columns_and_keep_their_values(warm):
    """Rows are kept with one object per distinct wing, kind, timestamp, ... value: equal to what the store
    holds, column by column and type by type."""
    store = warm.store
    ids = _rowids(warm)
    read = store._read_rows(ids).rows
    store.rows(ids)
    kept = store.rows(ids).rows
    assert kept == read and [tuple(map(type, r)) for r in kept] == [tuple(map(type, r)) for r in read]
    assert len({id(r[3]) for r in kept}) == 2  # two wings, two objects
    assert len({id(r[5]) for r in kept}) == 1 and len({id(r[11]) for r in kept}) == 1  # kind, salience
    assert len({id(r[2]) for r in kept}) == 12  # ids are never shared


def test_shared_values_are_bounded(warm, monkeypatch):
    monkeypatch.setattr(rowcache, "VALUES_SHARED", 3)
    store = warm.store
    ids = _rowids(warm)
    store.rows(ids)
    assert len(store.vindex.rows._values) == 3
    assert store.rows(ids).rows == store._read_rows(ids).rows
