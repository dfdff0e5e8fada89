"""``copy_store``: SQLite → PostgreSQL → SQLite gives back the same store (a real embedded server)."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest

from memlens.errors import StoreError
from tests.conftest import snapshot_store

pytest.importorskip("psycopg")


def _tables(path):
    from memlens.store import db

    conn = db.connect(path, create=False)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("tasks", "blockers", "store_meta")}
    finally:
        conn.close()


def _fill(mem):
    a = mem.add("Deploys go through the release branch", wing="ops", room="deploy", type="invariant")
    b = mem.add("We chose PostgreSQL for the team store", wing="ops", type="decision", meta={"by": "ann", "n": 3})
    mem.add("Café au lait, s'il vous plaît: unicode survives", wing="_global", key="coffee")
    mem.update(b.id, text="We chose PostgreSQL with pgvector for the team store")
    mem.set_status(a.id, "under_review")
    c = mem.add("a short-lived note", wing="scratch")
    mem.delete(c.id)
    mem.tasks.complete("t-1", "ship the copy command", validation_report={"tests": "green"})
    mem.tasks.block("t-2", "waiting for review")


def test_sqlite_to_postgres_to_sqlite_round_trips_exactly(tmp_path, settings, hash_embedder, pg_uri):
    from memlens import Memory
    from memlens.store.postgres import open_store
    from memlens.store.postgres.copy import copy_store

    src, back = tmp_path / "a.db", tmp_path / "b.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        _fill(mem)
        want = io.StringIO()
        mem.export_jsonl(want, with_vectors=True)
    seen: list[tuple[int, int]] = []
    counts = copy_store(src, pg_uri, progress=lambda done, total: seen.append((done, total)))
    assert counts["entries"] == counts["vectors"] == 3 and counts["tasks"] == 1 and counts["blockers"] == 1
    assert counts["wings"] == 3  # ops, _global, scratch: the working memory's counter row is not counted
    assert seen[-1] == (3, 3)
    pg = open_store(pg_uri)
    try:
        assert pg.count() == 3 and pg.meta()["model"] == hash_embedder.model_id
        assert len(pg.audit(limit=100)) == len(snapshot_store(src)[2])
        copied = max(a["seq"] for a in pg.audit(limit=100))
        with pytest.raises(RuntimeError, match="roll back"):
            with pg.write() as w:  # the copy's sequences continue past the copied rows
                assert w.audit("probe", None, None, None, None) > copied
                raise RuntimeError("roll back the probe")
        assert max(a["seq"] for a in pg.audit(limit=100)) == copied
    finally:
        pg.close()
    copy_store(pg_uri, back)
    assert snapshot_store(back) == snapshot_store(src)
    assert _tables(back) == _tables(src)
    with Memory.open(back, settings=settings, embedder=hash_embedder) as mem:
        got = io.StringIO()
        mem.export_jsonl(got, with_vectors=True)
        assert got.getvalue() == want.getvalue()
        hits = mem.search("release branch deploys", active_wing="ops", k=3).results
        assert hits and hits[0].entry.wing == "ops"


def test_copy_refuses_a_store_that_is_not_empty_and_writes_nothing(tmp_path, settings, hash_embedder, pg_uri):
    from memlens import Memory
    from memlens.store.postgres import open_store
    from memlens.store.postgres.copy import copy_store

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        mem.add("one entry", wing="w")
    copy_store(src, pg_uri)
    with pytest.raises(StoreError, match="not empty"):
        copy_store(src, pg_uri)
    pg = open_store(pg_uri)
    try:
        assert pg.count() == 1
    finally:
        pg.close()


def test_a_failed_copy_leaves_the_destination_empty(tmp_path, settings, hash_embedder, pg_uri, monkeypatch):
    from memlens import Memory
    from memlens.store.postgres import copy as copy_mod
    from memlens.store.postgres import open_store

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        for i in range(7):
            mem.add(f"entry number {i}", wing="w")

    def broken(self, rows):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(copy_mod._Postgres, "put_vectors", broken)  # entries already written when it fails
    with pytest.raises(RuntimeError, match="disk gone"):
        copy_mod.copy_store(src, pg_uri)
    with pytest.raises(StoreError, match="^no memlens store in"):  # not even an empty one (its tables went too)
        open_store(pg_uri, create=False)


def test_a_copy_whose_server_goes_away_is_one_line(tmp_path, settings, hash_embedder, pg_uri, monkeypatch):
    from memlens import Memory
    from memlens.store.postgres import copy as copy_mod
    from memlens.store.postgres import open_store

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        mem.add("one entry", wing="w")
    real_put = copy_mod._Postgres.put

    def put_then_lose_the_connection(self, table, cols, rows):
        real_put(self, table, cols, rows)
        self.conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")  # as a server stopping mid-copy

    monkeypatch.setattr(copy_mod._Postgres, "put", put_then_lose_the_connection)
    with pytest.raises(StoreError) as err:
        copy_mod.copy_store(src, pg_uri)
    message = str(err.value)
    assert message.startswith("lost the connection to postgresql://")
    assert message.endswith("; nothing was copied: run the copy again") and "next call" not in message
    assert "\n" not in message
    with pytest.raises(StoreError, match="^no memlens store in"):
        open_store(pg_uri, create=False)


def test_a_copy_from_a_database_without_a_store_says_so_and_creates_nothing(tmp_path, pg_uri):
    import psycopg

    from memlens.store.postgres.copy import copy_store

    with pytest.raises(StoreError, match="^no memlens store in postgresql://"):
        copy_store(pg_uri, tmp_path / "out.db")
    assert not (tmp_path / "out.db").exists()
    with psycopg.connect(pg_uri) as conn:  # the empty source got no tables
        assert conn.execute("SELECT to_regclass('store_meta')").fetchone()[0] is None


def test_degenerate_vector_arrives_as_zeros(tmp_path, settings, hash_embedder, pg_uri):
    from memlens import Memory
    from memlens.store.postgres import open_store
    from memlens.store.postgres.copy import copy_store
    from memlens.store.reads import Scope

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        e = mem.add("a vector that will be damaged", wing="w")
        mem.add("a sound one", wing="w")
        nan = np.full(hash_embedder.dim, np.nan, dtype="<f4").tobytes()
        mem.conn.execute("UPDATE entries_vec SET embedding = ? WHERE rowid = 1", (nan,))
    copy_store(src, pg_uri)
    pg = open_store(pg_uri)
    try:
        assert not np.frombuffer(pg.entry_vector(e.id), dtype="<f4").any()
        q = hash_embedder.embed(["a vector that will be damaged"])[0]
        assert [h[0] for h in pg.knn(q, Scope(wings=["w"]), 5).hits] == [2]
    finally:
        pg.close()


def _schema_of(uri):
    """What a database holds: its tables in every schema but the system's, and its extensions."""
    import psycopg

    with psycopg.connect(uri) as conn:
        tables = conn.execute("SELECT schemaname, tablename FROM pg_tables "
                              "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2").fetchall()
        extensions = conn.execute("SELECT extname FROM pg_extension ORDER BY 1").fetchall()
    return tables, extensions


def test_a_failed_copy_into_a_new_database_leaves_it_as_it_was(tmp_path, settings, hash_embedder, pg_uri, monkeypatch):
    """The store's tables (and pgvector, if the copy enabled it) are made in the copy's own transaction: a copy that
    fails takes them back with its rows, so the database holds no empty memlens store afterwards."""
    from memlens import Memory
    from memlens.store.postgres import copy as copy_mod

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        mem.add("one entry", wing="w")
    before = _schema_of(pg_uri)
    assert before[0] == [] and ("vector",) not in before[1]

    def broken(self, rows):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(copy_mod._Postgres, "put_vectors", broken)
    with pytest.raises(RuntimeError, match="disk gone"):
        copy_mod.copy_store(src, pg_uri)
    assert _schema_of(pg_uri) == before
    with pytest.raises(StoreError, match="^no memlens store in postgresql://"):
        copy_mod.copy_store(pg_uri, tmp_path / "back.db")
    monkeypatch.undo()
    assert copy_mod.copy_store(src, pg_uri)["entries"] == 1  # and a copy that succeeds makes them
    assert ("vector",) in _schema_of(pg_uri)[1]


def test_a_failed_copy_into_an_existing_empty_store_leaves_it_as_it_was(tmp_path, settings, hash_embedder, pg_uri,
                                                                        monkeypatch):
    from memlens import Memory
    from memlens.store.postgres import copy as copy_mod
    from memlens.store.postgres import open_store

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        mem.add("one entry", wing="w")
    open_store(pg_uri, model=lambda: hash_embedder).close()  # an empty memlens store, made beforehand
    before = _schema_of(pg_uri)
    monkeypatch.setattr(copy_mod._Postgres, "put_vectors", lambda self, rows: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        copy_mod.copy_store(src, pg_uri)
    assert _schema_of(pg_uri) == before


@pytest.mark.parametrize("into", ["postgresql", "sqlite"])
def test_the_loser_of_two_copies_into_one_new_store_says_so_in_one_line(into, tmp_path, settings, hash_embedder, pg_uri,
                                                                         monkeypatch, capfd, caplog):
    """Two copies into the same new store at once: the second to reach it finds it written by the first, says so in
    one line (no driver error, no driver log line) and leaves the first one's store as it is."""
    from memlens import Memory
    from memlens.cli.main import main
    from memlens.store.postgres import copy as copy_mod

    mine, theirs = tmp_path / "mine.db", tmp_path / "theirs.db"
    for path, n in ((mine, 3), (theirs, 2)):
        with Memory.open(path, settings=settings, embedder=hash_embedder) as mem:
            for i in range(n):
                mem.add(f"{path.stem} entry {i}", wing="w")
    dst = pg_uri if into == "postgresql" else str(tmp_path / "new.db")
    real_snapshot = copy_mod._Sqlite.snapshot
    raced: list[bool] = []

    def snapshot_after_another_copy(self):  # the other copy runs between this one's start and its transaction
        if not raced:
            raced.append(True)
            assert copy_mod.copy_store(theirs, dst)["entries"] == 2
        return real_snapshot(self)

    monkeypatch.setattr(copy_mod._Sqlite, "snapshot", snapshot_after_another_copy)
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG):
        assert main(["copy", str(mine), dst]) == 2
    err = capfd.readouterr().err
    assert raced and err.count("\n") == 1, err
    assert err.startswith("memlens: error: store ") and "is no longer empty" in err and "nothing was copied" in err, err
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]
    monkeypatch.undo()
    assert copy_mod.copy_store(dst, tmp_path / "check.db")["entries"] == 2  # the first copy's store, untouched


def test_damaged_entries_are_named_and_never_carried_into_postgresql(tmp_path, settings, hash_embedder, pg_server, pg_uri,
                                                                     capfd):
    """A row changed behind the engine's back (what export leaves out with a warning): a copy into PostgreSQL, where
    memlens cannot check or salvage, stops with one line naming them and writes nothing; a copy into a file stays
    whole, names each one, and exits 1 (as export does), so that check and salvage can repair them there."""
    import psycopg

    from memlens import Memory
    from memlens.cli.main import main
    from memlens.store.postgres.copy import copy_store

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        ids = [mem.add(f"entry number {i}", wing="w").id for i in range(5)]
        mem.conn.execute("UPDATE entries SET meta = 'not json' WHERE id = ?", (ids[1],))
        mem.conn.execute("UPDATE entries SET kind = 'alien' WHERE id = ?", (ids[2],))
        mem.conn.execute("UPDATE entries SET overrides = id WHERE id = ?", (ids[4],))
    capfd.readouterr()
    assert main(["copy", str(src), pg_uri]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memlens: error: store "), err
    assert "3 damaged entries" in err and all(repr(i) in err for i in (ids[1], ids[2], ids[4])), err
    assert "meta is not valid JSON" in err and "salvage" in err and err.endswith("nothing was copied\n"), err
    assert _schema_of(pg_uri)[0] == []

    into = tmp_path / "b.db"
    assert main(["copy", str(src), str(into)]) == 1
    err = capfd.readouterr().err.splitlines()
    assert [line.split("'")[1] for line in err if line.startswith("memlens: warning: entry ")] == [ids[1], ids[2], ids[4]]
    assert err[-2].startswith("copied 5 entries (5 vectors)") and err[-1].startswith("memlens: 3 damaged entries were "
                                                                                       "copied as they are"), err
    assert main(["--store", str(into), "check"]) == 1  # the copy is whole: check finds the same rows
    out = capfd.readouterr().out
    assert all(i in out for i in (ids[1], ids[2], ids[4])), out
    with pytest.raises(StoreError, match="3 damaged entries"):  # from Python, only when asked to carry them
        copy_store(src, tmp_path / "c.db")

    # the same from a PostgreSQL source damaged by hand: into a file (where it can be checked), not into PostgreSQL
    sound = tmp_path / "sound.db"
    with Memory.open(sound, settings=settings, embedder=hash_embedder) as mem:
        first = mem.add("a sound entry", wing="w").id
        mem.add("another sound entry", wing="w")
    copy_store(sound, pg_uri)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("UPDATE entries SET salience = 5 WHERE id = %s", (first,))
    assert main(["copy", pg_uri, str(tmp_path / "d.db")]) == 1
    assert f"warning: entry {first!r} is damaged (salience 5.0 is not a number from 0 to 1)" in capfd.readouterr().err
    name, other = pg_server.create_db()
    try:
        with pytest.raises(StoreError, match=f"holds 1 damaged entry: {first!r} .*copy it into a SQLite file first"):
            copy_store(pg_uri, other)
    finally:
        pg_server.drop_db(name)


def test_a_source_that_records_no_model_still_gives_a_store_that_opens(tmp_path, settings, hash_embedder, pg_uri):
    """The destination's store records a model and a creation time even when the source's meta lacks them (as
    opening a new store would), so it opens without being given a model."""
    from memlens import Memory
    from memlens.store.postgres import open_store
    from memlens.store.postgres.copy import copy_store

    src = tmp_path / "a.db"
    with Memory.open(src, settings=settings, embedder=hash_embedder) as mem:
        mem.add("one entry", wing="w")
        mem.conn.execute("DELETE FROM store_meta WHERE key IN ('model', 'created_at')")
    copy_store(src, pg_uri)
    pg = open_store(pg_uri, create=False)
    try:
        assert pg.count() == 1 and pg.meta()["model"] == "" and pg.meta()["created_at"]
    finally:
        pg.close()
