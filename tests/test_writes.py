"""Writes for concurrent writers: add_unique, update_checked, wing_counts, and client attribution in the audit."""

from __future__ import annotations

import os
import threading

import pytest

from memlens import attribution
from memlens.errors import NotFoundError, ValidationError
from memlens.store.writes import StaleUpdateError

from .concurrency import fork_while_held, run_threads
from .conftest import snapshot_store


def test_add_unique_stores_the_same_content_once_per_wing(mem):
    e1, created1, _ = mem.add_unique("Use UTC timestamps everywhere.", wing="proj", type="decision")
    e2, created2, _ = mem.add_unique("Use UTC timestamps everywhere.", wing="proj", type="decision")
    assert (created1, created2) == (True, False)
    assert e2.id == e1.id and mem.count() == 1
    assert [r["action"] for r in mem.audit(e1.id)] == ["add"]
    # another wing, or other text, is other content
    e3, created3, _ = mem.add_unique("Use UTC timestamps everywhere.", wing="other")
    e4, created4, _ = mem.add_unique("Use local time in the UI.", wing="proj")
    assert created3 and created4 and len({e1.id, e3.id, e4.id}) == 3
    assert mem.count() == 3


def test_add_unique_refuses_bad_input_and_writes_nothing(mem):
    mem.add("x", wing="w")
    before = snapshot_store(mem.path)
    with pytest.raises(ValidationError):
        mem.add_unique("text", wing="bad wing!")
    with pytest.raises(ValidationError):
        mem.add_unique("text", wing="w", overrides="no-such-entry")
    assert snapshot_store(mem.path) == before


def test_add_unique_under_concurrent_threads_creates_one(mem):
    results, barrier = [], threading.Barrier(6)

    def worker(_i: int) -> None:
        barrier.wait(10)
        results.append(mem.add_unique("One fact, six writers.", wing="race")[1])

    run_threads(worker, 6, timeout=30)
    assert sorted(results) == [False] * 5 + [True]
    assert sum(1 for _ in mem.entries("race")) == 1


@pytest.mark.model
def test_add_unique_reports_near_duplicates(real_mem):
    first, _, _ = real_mem.add_unique("Callbacks must never block the executor.", wing="ros")
    real_mem.add_unique("The build uses colcon.", wing="ros")
    real_mem.add_unique("Callbacks must never block the executor.", wing="elsewhere")
    e, created, similar = real_mem.add_unique("Callbacks should never block the executor thread.", wing="ros")
    assert created
    assert [s["id"] for s in similar] == [first.id]  # same wing only, unrelated text not listed
    assert 0.8 <= similar[0]["similarity"] < 1.0
    _, created, similar = real_mem.add_unique("Callbacks must never block the executor.", wing="ros")
    assert not created and [s["id"] for s in similar] == [e.id]  # the stored entry itself is not its own duplicate


def test_an_update_that_changes_nothing_writes_nothing(mem):
    e = mem.add("Original text.", wing="w", salience=0.4)
    before = snapshot_store(mem.path)
    for same in ({}, {"text": "Original text."}, {"salience": 0.4}):
        got = mem.update(e.id, **same)
        assert got.to_record() == e.to_record()  # updated_at too: another editor's expected_updated_at still holds
    assert snapshot_store(mem.path) == before and len(mem.audit(e.id)) == 1
    assert mem.update(e.id, salience=0.5).salience == 0.5 and len(mem.audit(e.id)) == 2


def test_deleting_an_overridden_entry_leaves_its_overriders_overriding_nothing(mem, tmp_path, settings, hash_embedder):
    """An override that names no entry is damage (``check``) and refused by ``import``: a delete must not leave one."""
    from memlens import Memory

    mem.add("Use the v1 endpoint for uploads.", wing="w", id="old")
    mem.add("Use the v2 endpoint for uploads.", wing="w", id="new", overrides="old")
    mem.add("Keep upload chunks under 5 MB.", wing="w", id="other")
    mem.delete("old")
    assert mem.get("new").overrides is None
    newest = mem.audit("new")[0]
    assert (newest["action"], newest["before"]["overrides"], newest["after"]["overrides"]) == ("update", "old", None)
    exported = tmp_path / "all.jsonl"
    with exported.open("w") as out:
        mem.export_jsonl(out)
    with Memory.open(tmp_path / "again.db", settings=settings, embedder=hash_embedder) as again:
        assert again.import_jsonl(exported)["imported"] == 2


def test_a_delete_reports_the_overriders_its_own_transaction_released(mem, store_path, settings, hash_embedder):
    """``delete_releasing`` (what ``memlens delete --json`` prints as "released") names the overriders the deleting
    transaction released: also one another process added after the caller read the entry, just before the delete's
    transaction began (the CLI read the list before the delete, and missed it)."""
    from memlens import Memory

    mem.add("Use the v1 endpoint for uploads.", wing="w", id="old")
    mem.add("Use the v2 endpoint for uploads.", wing="w", id="new", overrides="old")
    real_write = mem.store.write
    with Memory.open(store_path, settings=settings, embedder=hash_embedder) as other:

        def write_after_another():  # another writer lands between the caller's reads and the delete
            other.add("Use the v3 endpoint for uploads.", wing="w", id="newer", overrides="old")
            return real_write()

        mem.store.write = write_after_another
        try:
            entry, released = mem.delete_releasing("old")
        finally:
            del mem.store.write
    assert entry.id == "old" and sorted(released) == ["new", "newer"]
    assert mem.get("new").overrides is None and mem.get("newer").overrides is None
    assert mem.delete_releasing("new")[1] == []


def test_an_agents_edit_lands_under_review_only_when_it_changes_something(mem):
    e = mem.add("A person's rule.", wing="w", salience=0.4)
    old = mem.add("An old rule.", wing="w", status="deprecated")
    assert mem.update(e.id, salience=0.4, landing="under_review").to_record() == e.to_record()
    assert mem.update(e.id, status="active", landing="under_review").status.value == "active"  # it was active
    assert len(mem.audit(e.id)) == 1
    assert mem.update(e.id, salience=0.6, landing="under_review").status.value == "under_review"
    assert mem.update(old.id, salience=0.6, landing="under_review").status.value == "deprecated"  # no status asked
    assert mem.update(old.id, status="active", landing="under_review").status.value == "under_review"
    # asked again to be active, it waits for review still: nothing written, no new updated_at to fail others' checks
    waiting = mem.get(old.id)
    for _ in range(2):
        assert mem.update(old.id, status="active", landing="under_review").to_record() == waiting.to_record()
    assert mem.get(old.id).to_record() == waiting.to_record() and len(mem.audit(old.id)) == 3


def test_update_checked_refuses_a_stale_update(mem):
    e = mem.add("Original text.", wing="w")
    read_at = e.to_record()["updated_at"]
    other = mem.update(e.id, salience=0.9)  # someone else edits meanwhile
    before = snapshot_store(mem.path)
    with pytest.raises(StaleUpdateError, match="changed"):
        mem.update_checked(e.id, read_at, text="My edit.")
    assert snapshot_store(mem.path) == before
    fresh = mem.update_checked(e.id, other.to_record()["updated_at"], text="My edit.")
    assert fresh.text == "My edit." and fresh.salience == 0.9
    assert mem.audit(e.id)[0]["detail"]["reembedded"] is True
    with pytest.raises(ValidationError, match="ISO-8601"):
        mem.update_checked(e.id, "yesterday", text="x")
    assert mem.update_checked(e.id, None, room="r").room == "r"  # no guard: a plain update


def test_wing_counts_match_the_entries(mem):
    for i in range(7):
        mem.add(f"fact {i}", wing="a" if i % 3 else "b", room="" if i % 2 else f"r{i % 4}")
    got = {w["wing"]: w for w in mem.wing_counts()}
    for wing in ("a", "b"):
        entries = list(mem.entries(wing))
        assert got[wing]["entries"] == len(entries)
        rooms: dict[str, int] = {}
        for e in entries:
            rooms[e.room] = rooms.get(e.room, 0) + 1
        assert got[wing]["rooms"] == rooms
    assert set(got) == set(mem.wings())


def test_acting_client_is_recorded_in_every_audit_row(mem):
    plain = mem.add("written by a script", wing="w")
    client = attribution.client_record("claude-code", "2.1.0", via="mcp")
    with attribution.acting_as(client):
        e = mem.add("written by an agent", wing="w")
        mem.update(e.id, text="edited by an agent")
        mem.tasks.block("t1", "waiting")
        mem.delete(e.id)
    mem.update(plain.id, salience=0.7)
    rows = {(r["action"], r["entry_id"]): r for r in mem.audit(limit=50)}
    for key in (("add", e.id), ("update", e.id), ("task.block", "t1"), ("delete", e.id)):
        assert rows[key]["detail"]["client"] == {"name": "claude-code", "version": "2.1.0", "via": "mcp"}, key
    assert rows[("update", e.id)]["detail"]["reembedded"] is True  # other detail kept
    assert rows[("add", plain.id)]["detail"] is None
    assert "client" not in rows[("update", plain.id)]["detail"]
    assert attribution.current() is None


def test_client_record_is_cleaned():
    assert attribution.client_record(None) is None and attribution.client_record("  ") is None
    rec = attribution.client_record("  my\nagent ", "x" * 500)
    assert rec == {"name": "my agent", "version": "x" * attribution.MAX_LEN}
    # a NUL or an escape sequence from a client's initialize is no part of a name (the NUL was kept in the audit)
    assert attribution.client_record("bad\nname\x00", "1\x1b[31m") == {"name": "bad name", "version": "1 [31m"}
    assert attribution.client_record("\x00\x07") is None
    assert attribution.describe({"name": "cursor", "version": "1.0", "via": "mcp"}) == "cursor 1.0 (mcp)"
    assert attribution.describe(None) == ""


def test_guarded_writes_apply_the_entry_cap_like_add_and_update(store_path, settings):
    from memlens import Memory
    from memlens.embed import HashEmbedder

    small = settings.model_copy(deep=True)
    small.limits.max_entry_chars = 40
    with Memory.open(store_path, settings=small, embedder=HashEmbedder()) as m:
        e = m.add("short", wing="w")
        before = snapshot_store(m.path)
        with pytest.raises(ValidationError, match="40"):
            m.add_unique("x" * 41, wing="w")
        with pytest.raises(ValidationError, match="40"):
            m.update_checked(e.id, e.to_record()["created_at"], text="y" * 41)
        assert snapshot_store(m.path) == before


def test_rows_of_an_unpublished_import_are_invisible_to_add_unique_and_wing_counts(mem):
    from memlens.store import staging

    staged = mem.add("Staged by an import still running.", wing="w")
    mem.add("Published.", wing="w")
    import_id = staging.begin(mem.conn, mem.path, "test")
    mem.conn.execute("UPDATE entries SET import_id = ? WHERE id = ?", (import_id, staged.id))
    assert mem.wing_counts() == [{"wing": "w", "entries": 1, "rooms": {"": 1}}]
    entry, created, similar = mem.add_unique("Staged by an import still running.", wing="w")
    assert created and entry.id != staged.id and staged.id not in [s["id"] for s in similar]
    with pytest.raises(NotFoundError):  # the staged row is not there to edit until the import publishes
        mem.update_checked(staged.id, staged.to_record()["created_at"], text="edited")


def test_many_threads_writing_at_once_wait_their_turn_and_none_times_out(store_path, settings, hash_embedder):
    """Threads of one process (a server's tool calls) queue for the store's write lock: SQLite's busy handler alone
    polls, lets later writers in first, and left an early one to fail after the busy timeout."""
    from memlens import Memory

    short = settings.model_copy(deep=True)
    short.storage.busy_timeout_ms = 400
    threads_n, each = 24, 40
    errors: list[str] = []
    barrier = threading.Barrier(threads_n)
    with Memory.open(store_path, settings=short, embedder=hash_embedder) as m:
        m.add("the store exists", wing="w")

        def worker(i: int) -> None:
            barrier.wait(10)
            for j in range(each):
                try:
                    m.add(f"writer {i} note {j}", wing=f"w{i % 3}")
                except Exception as exc:  # noqa: BLE001 - every failure is what the test counts
                    errors.append(str(exc))

        run_threads(worker, threads_n)
        assert errors == []
        counts = {w["wing"]: w["entries"] for w in m.wing_counts()}
        assert sum(counts.get(f"w{k}", 0) for k in range(3)) == threads_n * each


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_although_a_thread_of_its_parent_held_the_turn(mem, store_path, settings, hash_embedder):
    """The queue of this process's writers is not inherited by a forked child (a turn a thread of the parent held
    at the fork would never be released there: every write of the child timed out as "locked"), neither through a
    store opened in the child nor through a connection the child inherited (its turn is looked up again)."""
    from memlens import Memory
    from memlens.store import db

    conn = mem.store.conn

    def child() -> bool:  # a new store object on the same file, and a write
        with db.write_turn(conn, timeout_s=1.0):  # the inherited connection (no SQLite call made on it)
            pass
        short = settings.model_copy(deep=True)
        short.storage.busy_timeout_ms = 1000
        with Memory.open(store_path, settings=short, embedder=hash_embedder) as m:
            m.add("written by the forked child", wing="forked")
        return True

    assert fork_while_held(lambda: db.write_turn(conn), child) == 0
    assert [e.text for e in mem.entries("forked")] == ["written by the forked child"]
