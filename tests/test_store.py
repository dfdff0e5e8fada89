"""Store mechanics on a real SQLite file with sqlite-vec (hashing embedder for speed)."""

import json
import stat
from pathlib import Path

import numpy as np
import pytest

from memlens import Memory
from memlens.embed import HashEmbedder
from memlens.errors import NotFoundError, StoreError, ValidationError
from memlens.store import db

from .conftest import run_cli


class CountingEmbedder(HashEmbedder):
    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def embed(self, texts):
        self.calls.extend(texts)
        return super().embed(texts)


def test_new_store_is_owner_only_wal_and_versioned(mem, store_path):
    mode = stat.S_IMODE(store_path.stat().st_mode)
    assert mode == 0o600
    assert stat.S_IMODE(store_path.parent.stat().st_mode) == 0o700
    assert mem.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.schema_version(mem.conn) == db.SCHEMA_VERSION
    assert mem.stats()["model"] == "hash-bow-384"
    mem.add("x", wing="w")
    for suffix in ("-wal", "-shm"):
        side = store_path.with_name(store_path.name + suffix)
        if side.exists():
            assert stat.S_IMODE(side.stat().st_mode) & 0o077 == 0


def test_add_get_roundtrip_and_audit(mem):
    e = mem.add("Callbacks must not block.", wing="lifecore_ros2", room="architecture", type="invariant", key="cb")
    got = mem.get(e.id)
    assert got == e
    assert got.title == "Callbacks must not block."
    audit = mem.audit(e.id)
    assert [a["action"] for a in audit] == ["add"]
    assert audit[0]["before"] is None and audit[0]["after"]["text"] == "Callbacks must not block."
    assert mem.generations(["lifecore_ros2"]) == {"lifecore_ros2": 1}


def test_update_records_before_and_after_and_bumps_both_wings(mem):
    e = mem.add("Use pytest.", wing="python")
    mem.add("other", wing="ros2")
    after = mem.update(e.id, text="Use pytest with fixtures.", wing="_global", room="conventions")
    assert after.wing == "_global" and after.updated_at >= e.updated_at
    last = mem.audit(e.id)[0]
    assert last["action"] == "update"
    assert last["before"]["text"] == "Use pytest." and last["after"]["text"] == "Use pytest with fixtures."
    assert last["detail"] == {"reembedded": True}
    gens = mem.generations()
    assert gens["python"] == 2 and gens["_global"] == 1 and gens["ros2"] == 1
    # the vector moved partitions with the wing
    row = mem.conn.execute(
        "SELECT v.wing, v.room FROM entries e JOIN entries_vec v ON v.rowid = e.rowid WHERE e.id = ?", (e.id,)
    ).fetchone()
    assert row == ("_global", "conventions")


def test_text_change_reembeds_and_metadata_change_does_not(store_path, settings):
    emb = CountingEmbedder()
    with Memory.open(store_path, settings=settings, embedder=emb) as mem:
        e = mem.add("alpha beta", wing="w", title="t")
        v0 = mem.vector(e.id)
        assert emb.calls == ["t\nalpha beta"]
        mem.update(e.id, status="under_review", room="r", salience=0.9)
        assert len(emb.calls) == 1
        np.testing.assert_array_equal(mem.vector(e.id), v0)
        mem.update(e.id, text="gamma delta")
        assert len(emb.calls) == 2
        assert not np.allclose(mem.vector(e.id), v0)


def test_identical_text_is_embedded_once(store_path, settings):
    emb = CountingEmbedder()
    with Memory.open(store_path, settings=settings, embedder=emb) as mem:
        a = mem.add("same words here", wing="python")
        b = mem.add("same words here", wing="_global")
        assert len(emb.calls) == 1
        np.testing.assert_array_equal(mem.vector(a.id), mem.vector(b.id))


def test_a_title_made_from_the_text_follows_a_new_text(mem):
    """An entry added without a title takes its text's start as one; an edit of the text alone kept that old start as
    the title, an unrelated headline in search and context. It is made again from the new text; a title someone
    gave stays."""
    made = mem.add("Callbacks must not block the executor.", wing="w")
    assert made.title == "Callbacks must not block the executor."
    edited = mem.update(made.id, text="Timers run on the executor's own thread; keep them short.")
    assert edited.title == "Timers run on the executor's own thread; keep them short."
    named = mem.add("Use a reentrant group for service calls.", wing="w", title="Service calls")
    assert mem.update(named.id, text="Service calls from a callback need a reentrant group.").title == "Service calls"


def test_status_change_updates_the_knn_filter(mem):
    e = mem.add("deprecated idea about executors", wing="w")
    assert [r.entry.id for r in mem.search("executors", active_wing="w").results] == [e.id]
    mem.set_status(e.id, "deprecated")
    assert mem.search("executors", active_wing="w").results == []
    assert [r.entry.id for r in mem.search("status=deprecated executors", active_wing="w").results] == [e.id]


def test_delete_removes_row_vector_and_fts(mem):
    e = mem.add("transient fact", wing="w")
    mem.delete(e.id)
    with pytest.raises(NotFoundError):
        mem.get(e.id)
    assert mem.conn.execute("SELECT count(*) FROM entries_vec").fetchone()[0] == 0
    assert mem.conn.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH 'transient'").fetchone()[0] == 0
    assert mem.audit(e.id)[0]["action"] == "delete"
    assert mem.audit(e.id)[0]["before"]["text"] == "transient fact"


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"wing": "bad wing"}, "field 'wing'"),
        ({"wing": "w", "type": "rule"}, "field 'type'"),
        ({"wing": "w", "salience": 2}, "field 'salience'"),
        ({"wing": "w", "overrides": "nope"}, "overrides: no entry"),
        ({"wing": "w", "colour": "red"}, "unknown field 'colour'"),
    ],
)
def test_invalid_adds_are_refused_and_write_nothing(mem, fields, fragment):
    with pytest.raises(ValidationError, match=fragment):
        mem.add("text", **fields)
    assert mem.count() == 0
    assert mem.audit() == []


def test_empty_text_refused(mem):
    with pytest.raises(ValidationError, match="field 'text'"):
        mem.add("   ", wing="w")


def test_invalid_update_leaves_entry_unchanged(mem):
    e = mem.add("keep me", wing="w")
    with pytest.raises(ValidationError):
        mem.update(e.id, type="law")
    with pytest.raises(ValidationError, match="cannot edit"):
        mem.update(e.id, id="other")
    assert mem.get(e.id) == e
    assert len(mem.audit(e.id)) == 1


def test_duplicate_id_refused(mem):
    mem.add("one", wing="w", id="fixed-1")
    with pytest.raises(ValidationError, match="already exists"):
        mem.add("two", wing="w", id="fixed-1")


def test_meta_and_timestamps_survive(mem):
    e = mem.add("turn text", wing="w", kind="turn", meta={"session_id": "s1", "role": "user"}, created_at="2026-01-02T03:04:05Z")
    got = mem.get(e.id)
    assert got.meta == {"session_id": "s1", "role": "user"}
    assert got.to_record()["created_at"] == "2026-01-02T03:04:05Z"
    assert json.loads(json.dumps(got.to_record()))["kind"] == "turn"


def test_model_mismatch_is_refused(store_path, settings):
    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as mem:
        mem.add("x", wing="w")

    other = HashEmbedder()
    other.model_id = "other-model"
    with Memory.open(store_path, settings=settings, embedder=other) as mem:
        with pytest.raises(Exception, match="holds vectors of hash-bow-384"):
            mem.add("y", wing="w")
        assert mem.count() == 1


def test_newer_schema_is_refused(store_path, settings):
    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()):
        pass
    conn = db.connect(store_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match="newer memlens"):
        Memory.open(store_path, settings=settings, embedder=HashEmbedder())


def test_foreign_sqlite_database_is_refused(tmp_path, settings):
    path = tmp_path / "other.db"
    conn = db.connect(path)
    conn.execute("CREATE TABLE t(x)")
    conn.close()
    with pytest.raises(StoreError, match="not a memlens store"):
        Memory.open(path, settings=settings, embedder=HashEmbedder())


def test_storage_synchronous_sets_how_each_connection_commits(store_path, settings):
    """'normal' (the default: a commit survives any process's crash) or 'full' (each commit waits for the disk, so it
    survives a power loss too), on every thread's connection."""
    import threading

    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as mem:
        assert mem.conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    full = settings.model_copy(update={"storage": settings.storage.model_copy(update={"synchronous": "full"})})
    with Memory.open(store_path, settings=full, embedder=HashEmbedder()) as mem:
        seen = []
        t = threading.Thread(target=lambda: seen.append(mem.conn.execute("PRAGMA synchronous").fetchone()[0]))
        t.start()
        t.join()
        assert mem.conn.execute("PRAGMA synchronous").fetchone()[0] == 2 and seen == [2]  # FULL
        mem.add("kept", wing="w")
        assert mem.count() == 1


def test_copy_into_a_file_opens_it_with_the_storage_settings(store_path, tmp_path, settings, monkeypatch):
    """``memlens copy`` into (and from) a SQLite file keeps to ``[storage]`` as every other command does: the
    copy's commit waits for the disk under synchronous = "full"; a bad value is the settings' one-line error,
    and no file is left behind."""
    from memlens.store import db

    with Memory.open(store_path, settings=settings, embedder=HashEmbedder()) as mem:
        mem.add("copied", wing="w")
    opened: list[tuple[str, str, int]] = []
    real_connect = db.connect

    def connect(path, **kw):
        conn = real_connect(path, **kw)
        opened.append((Path(path).name, conn.execute("PRAGMA synchronous").fetchone()[0], kw.get("busy_timeout_ms")))
        return conn

    monkeypatch.setattr(db, "connect", connect)
    monkeypatch.setenv("MEMLENS_STORAGE__SYNCHRONOUS", "full")
    monkeypatch.setenv("MEMLENS_STORAGE__BUSY_TIMEOUT_MS", "7000")
    from memlens.store.postgres.copy import copy_store

    copy_store(store_path, tmp_path / "in-process.db")
    assert opened == [(store_path.name, 2, 7000), ("in-process.db", 2, 7000)]  # FULL on both sides
    with Memory.open(tmp_path / "in-process.db", settings=settings, embedder=HashEmbedder()) as copied:
        assert [e.text for e in copied.entries("w")] == ["copied"]

    monkeypatch.setenv("MEMLENS_STORAGE__SYNCHRONOUS", "sometimes")
    proc = run_cli("copy", str(store_path), str(tmp_path / "refused.db"))
    assert proc.returncode != 0 and "synchronous" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "refused.db").exists()


def test_each_thread_gets_its_own_connection(mem):
    import threading

    mem.add("shared", wing="w")
    seen = []

    def work():
        seen.append((mem.conn, mem.count()))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen[0][1] == 1 and seen[0][0] is not mem.conn


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_file_deleted_or_replaced_under_an_open_memory(tmp_path, settings, how):
    """An app or server keeps its connections open; the file at the store's path removed (or a copy put there) while
    it runs: a write would have gone into the old file and been lost with it, a search read the old store. Each now
    stops with one line that says what happened, and the file now at the path is left as it is."""
    import os
    import threading

    path = tmp_path / "kept.db"
    m = Memory.open(path, settings=settings, embedder=HashEmbedder())
    m.add("Callbacks must not block.", wing="w")
    for suffix in ("", "-wal", "-shm"):  # (a store copied into place comes without the old file's -wal and -shm)
        os.unlink(f"{path}{suffix}")
    if how == "replaced":
        with Memory.open(tmp_path / "other.db", settings=settings, embedder=HashEmbedder()) as other:
            other.add("A different store.", wing="x")
        os.replace(tmp_path / "other.db", path)
    message = rf"kept\.db was {how}.* after this process opened it; .*open the store again"
    with pytest.raises(StoreError, match=message):
        m.add("Written after the file went.", wing="w")
    with pytest.raises(StoreError, match=message):
        m.search("callbacks")
    errors: list[Exception] = []  # another thread's first connection opens the path again: not the file put there

    def other_thread() -> None:
        try:
            m.count()
        except Exception as exc:
            errors.append(exc)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], StoreError) and f"was {how}" in str(errors[0])
    m.close()
    if how == "replaced":
        with Memory.open(path, settings=settings, embedder=HashEmbedder()) as again:
            assert [e.text for e in again.entries()] == ["A different store."]
    else:
        assert not path.exists()


def test_a_closed_memory_says_so_in_memlens_terms(tmp_path, settings):
    """Not the SQLite binding's ProgrammingError: a StoreError naming the store, from any call after close()."""
    m = Memory.open(tmp_path / "closed.db", settings=settings, embedder=HashEmbedder())
    m.add("Callbacks must not block.", wing="w")
    m.close()
    for call in (m.count, lambda: m.search("callbacks"), lambda: m.add("more", wing="w"), lambda: m.get("nope")):
        with pytest.raises(StoreError, match=r"closed\.db is closed; open it again"):
            call()


def test_a_connection_closed_under_a_running_call_says_so(tmp_path, settings):
    """close() from another thread while a call holds its connection: the call's next statement raises a StoreError
    in memlens terms, not the binding's ProgrammingError."""
    m = Memory.open(tmp_path / "closing.db", settings=settings, embedder=HashEmbedder())
    m.add("Callbacks must not block.", wing="w")
    conn = m.store.conn  # what a call on this thread holds while another thread closes the store
    m.close()
    with pytest.raises(StoreError, match=r"closing\.db was closed while this call ran; open it again"):
        conn.execute("SELECT count(*) FROM entries").fetchone()
    with pytest.raises(StoreError, match="was closed while this call ran"):
        conn.cursor()


def test_close_from_another_thread_during_searches_raises_only_memlens_errors(tmp_path, settings):
    import threading

    m = Memory.open(tmp_path / "race.db", settings=settings, embedder=HashEmbedder())
    for i in range(60):
        m.add(f"entry {i} about callbacks and executors", wing="w")
    m.warm_index(text=True)
    errors: list[BaseException] = []
    started = threading.Event()

    def searching() -> None:
        try:
            while True:
                m.search("callbacks executors", k=5, use_cache=False)
                started.set()
        except BaseException as exc:  # the loop ends at the first error: the store was closed under it
            errors.append(exc)
            started.set()

    t = threading.Thread(target=searching)
    t.start()
    started.wait(30)
    m.close()
    t.join(30)
    assert not t.is_alive() and len(errors) == 1
    assert isinstance(errors[0], StoreError), repr(errors[0])


def test_a_store_opened_by_a_relative_path_keeps_working_after_a_chdir(tmp_path, settings, monkeypatch):
    """The check that the store file is still the one opened looks at the file by the path it had when opened: a
    process that changes its working folder (a store given as "memory.db") goes on writing and searching it."""
    monkeypatch.chdir(tmp_path)
    m = Memory.open("rel.db", settings=settings, embedder=HashEmbedder())
    m.add("Callbacks must not block.", wing="w")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    m.add("Written after the chdir.", wing="w")
    assert m.count() == 2 and m.search("callbacks").results
    m.close()
