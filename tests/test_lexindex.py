"""The in-process lexical index (memlens.store.speed.lexindex) against FTS5's own bm25, on real text.

Every comparison runs the SQL by hand here (``bm25(entries_fts, 2.0, 1.0)``, the scope as a join on
entries) and asks the store's lexical generator with the in-process vector index warm; the two must give
the same rowids in the same order with the same scores. ``LexIndex.served`` says which path answered.

Most tests warm the store without reading the whole text index (``lazy_warm``), so that postings are read
word by word as searches ask; the tests at the end cover a store whose warm-up read every word's postings.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from memlens.retrieval.evaluate import load_queries
from memlens.retrieval.terms import lexical_terms
from memlens.store.reads import fts_query
from memlens.store.scope import Scope
from memlens.store.speed.lexindex import LexIndex
from memlens.store.speed.stamps import Stamps
from memlens.store.textindex import varints
from tests.concurrency import run_threads
from tests.other_process import write

DATA = Path(__file__).resolve().parent / "data" / "docs_qa"
NODE_DOCS = Path("/usr/share/doc/nodejs/api")
N = 40

pytestmark = pytest.mark.skipif(not NODE_DOCS.is_dir(), reason="the Node.js API docs are not installed")


def _wing(room: str) -> str:
    return "w1" if room < "f" else "w2" if room < "p" else "w3"


@pytest.fixture(scope="module")
def docs_store(tmp_path_factory) -> Path:
    """The Node.js API reference, one entry per section, in three wings (deterministic embedder: only the
    text index matters here); built once, copied by tests that write."""
    from memlens import Memory
    from memlens.embed import HashEmbedder

    sys.path.insert(0, str(DATA))
    try:
        import build_corpus  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    root = tmp_path_factory.mktemp("lexindex")
    jsonl = root / "corpus.jsonl"
    with jsonl.open("w", encoding="utf-8") as fh:
        for d in build_corpus.build(NODE_DOCS):
            room = d["_id"].split(":", 1)[0]
            rec = {"id": d["_id"], "wing": _wing(room), "room": room, "kind": "document", "type": "note",
                   "title": d["title"][:500], "text": d["text"], "created_at": "2026-01-01T00:00:00Z"}
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    path = root / "docs.db"
    with Memory.open(path, embedder=HashEmbedder()) as mem:
        assert mem.import_jsonl(jsonl)["imported"] > 1000
    return path


def lazy_warm(mem) -> None:
    """Warm the vector index only (as ``search --queries`` does): the text index's postings are then read as
    searches ask for words."""
    mem.warm_index()
    assert mem.store.speed.postings._snap is None


@pytest.fixture(scope="module")
def docs_mem(docs_store):
    from memlens import Memory
    from memlens.embed import HashEmbedder

    with Memory.open(docs_store, embedder=HashEmbedder()) as mem:
        lazy_warm(mem)
        yield mem


@pytest.fixture
def copy_mem(docs_store, tmp_path):
    from memlens import Memory
    from memlens.embed import HashEmbedder

    path = tmp_path / "copy.db"
    shutil.copy(docs_store, path)
    with Memory.open(path, embedder=HashEmbedder()) as mem:
        lazy_warm(mem)
        yield mem


def fts5(conn, text: str, scope: Scope, n: int, visible: bool = False) -> list[tuple[int, float]]:
    """FTS5's answer: bm25 with title 2, text 1, the scope joined on entries, ties by rowid; negated.
    ``visible``: rows of an import in progress left out."""
    fq = fts_query(text)
    if not fq:
        return []
    sql = ("SELECT e.rowid, bm25(entries_fts, 2.0, 1.0) AS s FROM entries_fts JOIN entries e ON e.rowid = entries_fts.rowid "
           "WHERE entries_fts MATCH ?")
    if visible:
        sql += " AND (e.import_id IS NULL OR e.import_id NOT IN (SELECT id FROM imports))"
    args: list = [fq]
    for col, values in scope.columns():
        if values is not None:
            sql += f" AND e.{col} IN ({','.join('?' * len(values))})"
            args += values
    sql += " ORDER BY s, e.rowid LIMIT ?"
    return [(r, -s) for r, s in conn.execute(sql, [*args, n]).fetchall()]


def same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [r for r, _ in got] == [r for r, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-12, abs=0)


def served(mem) -> int:
    return mem.store.speed.postings.served


def hold(mem) -> None:
    """Searches until the index holds the text index's present state (the first search in a new state runs
    FTS5's SQL; the next one reads the sizes and the postings of its word, asked for the second time)."""
    for _ in range(2):
        mem.store.lexical("buffer", Scope(), 1)


def questions() -> list[str]:
    return [q["text"] for q in load_queries(DATA / "queries.jsonl")]


SCOPES = [Scope(), Scope(rooms=["fs"]), Scope(kinds=["document"]), Scope(wings=["w1", "w3"]),
          Scope(wings=["w2"], rooms=["http", "https", "net"])]


def test_questions_rank_as_fts5_in_every_scope(docs_mem):
    """The 138 questions, as typed and as the pipeline sends them (its distinct terms): the same rows, order
    and scores as FTS5, each answered in process."""
    store, conn = docs_mem.store, docs_mem.conn
    qs = questions()
    assert len(qs) >= 100
    texts = qs + [lexical_terms(q).text for q in qs]
    hold(docs_mem)
    for text in texts:  # each word asked once: FTS5's SQL answers, and the next search reads its postings
        same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))
    before = served(docs_mem)
    asked = 0
    for text in texts:
        for scope in SCOPES:
            want = fts5(conn, text, scope, N)
            same(store.lexical(text, scope, N), want)
            asked += 1 if fts_query(text) else 0
    nonempty = sum(1 for text in texts for _ in SCOPES if fts_query(text))
    assert served(docs_mem) - before == nonempty == asked  # none fell back to the SQL


def test_ties_and_limits(docs_mem):
    """Small limits cut through ties the way ORDER BY bm25, rowid does; a scope with no rows finds nothing."""
    store, conn = docs_mem.store, docs_mem.conn
    for text in ("callback", "buffer stream", "the", "deprecated since"):
        for n in (1, 3, 10, 500):
            same(store.lexical(text, Scope(), n), fts5(conn, text, Scope(), n))
    assert store.lexical("buffer", Scope(rooms=["no-such-room"]), 10) == []


def test_words_with_punctuation_diacritics_case_and_absent_terms(docs_mem):
    store, conn = docs_mem.store, docs_mem.conn
    hold(docs_mem)
    texts = ("Buffer.from() ENCODING's", "naïve Café résumé utf-8", "zzqqxxv nonexistentterm buffer",
             "ÉVÉNEMENTS Streams", "zzqqxxv")
    for text in texts:  # asked once: the words are known from now on
        same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))
    before = served(docs_mem)
    for text in texts:
        same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))
    assert served(docs_mem) - before == 5


def test_terms_of_zero_or_several_tokens_fall_back_to_fts5(docs_mem):
    """A word FTS5 splits into several tokens (``child_process``) is a phrase query, and one with no token
    (``__``) an empty phrase: those run FTS5's SQL; the answer is FTS5's either way."""
    store, conn = docs_mem.store, docs_mem.conn
    hold(docs_mem)
    for text in ("child_process spawn", "__ buffer", "node_modules"):
        before = served(docs_mem)
        got = store.lexical(text, Scope(), N)
        assert served(docs_mem) == before
        same(got, fts5(conn, text, Scope(), N))
    assert store.lexical("child_process spawn", Scope(), N)  # sanity: the fallback finds rows


def test_inside_a_transaction_the_sql_answers(copy_mem):
    """Inside a transaction (whose pending writes the held postings cannot show) FTS5's SQL answers, and sees
    the transaction's own write."""
    mem = copy_mem
    store, conn = mem.store, mem.conn
    store.lexical("buffer", Scope(), N)
    conn.execute("BEGIN")
    try:
        conn.execute("UPDATE entries SET title = 'quokkaword buffer' WHERE rowid = (SELECT min(rowid) FROM entries)")
        before = served(mem)
        got = store.lexical("quokkaword buffer", Scope(), N)
        assert served(mem) == before
        same(got, fts5(conn, "quokkaword buffer", Scope(), N))
        assert got[0][0] == conn.execute("SELECT min(rowid) FROM entries").fetchone()[0]
    finally:
        conn.execute("ROLLBACK")
    same(store.lexical("quokkaword buffer", Scope(), N), fts5(conn, "quokkaword buffer", Scope(), N))
    assert not store.lexical("quokkaword", Scope(), N)


def test_writes_through_this_memory_reach_the_next_search(copy_mem):
    """Add, update, deprecate, delete: each changes the text index's state, and the next search ranks the new
    state (IDF, lengths and averages included) exactly as FTS5 does."""
    mem = copy_mem
    store, conn = mem.store, mem.conn
    text = "quokkaword buffer stream callback"
    active = Scope(statuses=["active"])

    def check() -> list[tuple[int, float]]:
        before = served(mem)  # the first search after a write: FTS5's SQL; the next ones: the held postings
        same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))
        assert served(mem) == before
        for scope in (Scope(), active, Scope(wings=["w3"])):
            same(store.lexical(text, scope, N), fts5(conn, text, scope, N))
        assert served(mem) - before == 3
        return store.lexical(text, Scope(), N)

    first = check()
    e = mem.add("the quokkaword marsupial writes to a buffer", wing="w3", title="quokkaword notes")
    rowid = conn.execute("SELECT rowid FROM entries WHERE id = ?", (e.id,)).fetchone()[0]
    hits = check()
    assert rowid in [r for r, _ in hits] and hits != first
    mem.update(e.id, text="nothing about that word any more", title="plain")
    assert rowid not in [r for r, _ in check()]
    mem.update(e.id, text="quokkaword again", title="quokkaword quokkaword")
    assert rowid in [r for r, _ in check()]
    mem.set_status(e.id, "deprecated")
    check()
    assert rowid not in [r for r, _ in store.lexical(text, active, N)]
    mem.delete(e.id)
    assert rowid not in [r for r, _ in check()]


def test_writes_by_another_process_reach_the_next_search(copy_mem):
    mem = copy_mem
    store, conn = mem.store, mem.conn
    text = "wombatword readable stream"
    same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))
    new_id = write(mem.path, "add", "wombatword wombatword readable", "w2")
    rowid = conn.execute("SELECT rowid FROM entries WHERE id = ?", (new_id,)).fetchone()[0]
    same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))  # the first in the new state: SQL
    before = served(mem)
    for scope in (Scope(), Scope(wings=["w2"]), Scope(wings=["w1"])):
        same(store.lexical(text, scope, N), fts5(conn, text, scope, N))
    assert served(mem) - before == 3
    assert store.lexical(text, Scope(), N)[0][0] == rowid
    write(mem.path, "delete", new_id)
    before = served(mem)
    for _ in range(2):
        got = store.lexical(text, Scope(), N)
        same(got, fts5(conn, text, Scope(), N))
        assert rowid not in [r for r, _ in got]
    assert served(mem) - before == 1


def test_a_worker_thread_searches_through_its_own_connection(docs_mem):
    """The lexical stage may run on a worker thread: its connection gets its own temp tables; the held
    postings are shared; the answer is FTS5's."""
    store, conn = docs_mem.store, docs_mem.conn
    texts = questions()[:20]
    want = [fts5(conn, t, Scope(wings=["w2", "w3"]), N) for t in texts]
    out: dict = {}

    def work(_i: int) -> None:
        try:
            out["got"] = [store.lexical(t, Scope(wings=["w2", "w3"]), N) for t in texts]
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    hold(docs_mem)
    for t in texts:  # each word asked twice here: its postings are held (whichever tests ran before)
        for _ in range(2):
            store.lexical(t, Scope(), N)
    before = served(docs_mem)
    run_threads(work, 2, timeout=60)
    assert "error" not in out, out.get("error")
    for got, w in zip(out["got"], want, strict=True):
        same(got, w)
    assert served(docs_mem) - before == 2 * len(texts)


def test_the_store_file_is_not_written(docs_store, tmp_path):
    """The index lives in the connection's temp schema: searching leaves the file's bytes as they were."""
    from memlens import Memory
    from memlens.embed import HashEmbedder

    path = tmp_path / "ro.db"
    shutil.copy(docs_store, path)
    with Memory.open(path, embedder=HashEmbedder()) as mem:  # a first open may migrate or checkpoint: let it
        pass
    data = path.read_bytes()
    with Memory.open(path, embedder=HashEmbedder()) as mem:
        mem.warm_index()
        for q in questions()[:10] * 2:
            mem.store.lexical(q, Scope(), N)
        assert mem.store.speed.postings.served >= 10  # asked again, each question is answered in process
        assert mem.conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'memlens_lex%'").fetchone()[0] == 0
    assert path.read_bytes() == data


def test_a_store_written_between_searches_never_reads_postings(copy_mem):
    """Write, search, write, search: each search is the first in its state, so FTS5's SQL answers it and no
    sizes or postings are read; two searches in one state and the second is answered in process."""
    mem = copy_mem
    store, conn = mem.store, mem.conn
    lex = store.speed.postings
    for i in range(3):
        mem.add(f"platypusword note {i}", wing="w1")
        same(store.lexical("platypusword buffer", Scope(), N), fts5(conn, "platypusword buffer", Scope(), N))
        assert lex.served == 0 and lex._snap is None
    same(store.lexical("platypusword buffer", Scope(), N), fts5(conn, "platypusword buffer", Scope(), N))
    assert lex.served == 1


def test_rows_of_an_import_in_progress_are_left_out_but_counted(copy_mem, tmp_path, monkeypatch):
    """Between two staging transactions of an import, the staged rows are in FTS5's index (they count in its
    row count and IDF) but no search returns them: the held postings give FTS5's answer without them."""
    from memlens import Memory
    from memlens.embed import HashEmbedder
    from memlens.store import staging

    monkeypatch.setattr(staging, "BATCH_S", 0.0)
    seen: list[int] = []
    text = "echidnaword readable stream"
    with Memory.open(copy_mem.path, embedder=HashEmbedder()) as other:
        lazy_warm(other)
        store, conn = other.store, other.conn

        def look() -> None:
            staged = conn.execute("SELECT count(*) FROM entries WHERE import_id IS NOT NULL").fetchone()[0]
            if not staged:
                return
            before = served(other)
            for scope in (Scope(), Scope(wings=["w3"]), Scope(wings=["w1", "w2"])):
                want = fts5(conn, text, scope, N, visible=True)
                assert want != fts5(conn, text, scope, N) or scope.wings == ["w1", "w2"]  # staged rows do match
                for _ in range(2):
                    same(store.lexical(text, scope, N), want)
            assert served(other) - before == 5  # the first search in this state runs the SQL, the rest are held
            seen.append(staged)

        monkeypatch.setattr(staging, "pause", look)
        src = tmp_path / "imp.jsonl"
        src.write_text("".join(json.dumps({"id": f"imp-{i}", "wing": "w3", "title": "echidnaword",
                                           "text": f"echidnaword readable stream number {i}"}) + "\n"
                               for i in range(300)), encoding="utf-8")
        assert copy_mem.import_jsonl(src)["imported"] == 300
        assert seen, "the import should have paused with rows staged"
        for _ in range(2):
            same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))


def test_a_read_only_connection_runs_the_sql(copy_mem):
    """A store opened read-only (``PRAGMA query_only``, as the store does in a read-only place) may not even
    make temp tables: FTS5's SQL answers, and nothing is written."""
    mem = copy_mem
    store, conn = mem.store, mem.conn
    conn.execute("PRAGMA query_only = ON")
    try:
        for _ in range(3):
            for text in ("readable stream", "Buffer alloc"):
                same(store.lexical(text, Scope(wings=["w2", "w3"]), N), fts5(conn, text, Scope(wings=["w2", "w3"]), N))
        assert served(mem) == 0
    finally:
        conn.execute("PRAGMA query_only = OFF")


def test_varints_and_a_search_before_any_row():
    assert varints(bytes([0x05, 0x81, 0x00, 0x7F])) == [5, 128, 127]
    assert LexIndex(Stamps()).search(_NoRows(), ["x"], None, 5) is None


class _NoRows:
    in_transaction = False

    def execute(self, *a):
        from memlens.store import db

        raise db.driver().OperationalError("no such table: entries_fts_data")


def test_a_word_asked_for_the_first_time_runs_the_sql_and_the_second_time_in_process(docs_mem):
    """Reading a word's postings costs more than ranking it once: the first search asking for a word runs FTS5's
    SQL, the next one asking for it reads its postings and answers in process; both answers are FTS5's."""
    store, conn = docs_mem.store, docs_mem.conn
    hold(docs_mem)
    for text in ("buffer qzxvnever1", "buffer qzxvnever1 qzxvnever2"):  # words no other test asks for
        before = served(docs_mem)
        same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))
        assert served(docs_mem) == before  # a word not asked for before: the SQL answered
        same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))
        assert served(docs_mem) == before + 1


# --- a store whose warm-up read the whole text index


@pytest.fixture
def whole_mem(docs_store, tmp_path):
    from memlens import Memory
    from memlens.embed import HashEmbedder

    path = tmp_path / "whole.db"
    shutil.copy(docs_store, path)
    with Memory.open(path, embedder=HashEmbedder()) as mem:
        mem.warm_index(text=True)
        snap = mem.store.speed.postings._snap
        assert snap is not None and snap.complete and len(snap.postings) > 5000
        yield mem


def test_a_store_warmed_whole_ranks_every_question_in_process_from_the_first_ask(whole_mem):
    """Every word's postings were read at warm-up: each question is answered in process the first time it is
    asked, in every scope, with FTS5's rows, order and scores; words the index does not hold match nothing."""
    mem = whole_mem
    store, conn = mem.store, mem.conn
    qs = questions()
    texts = qs + [lexical_terms(q).text for q in qs]
    texts += ["zzqqxxv nonexistentterm buffer", "naïve Café résumé utf-8", "Buffer.from() ENCODING's", "the"]
    before = served(mem)
    asked = 0
    for text in texts:
        for scope in SCOPES:
            same(store.lexical(text, scope, N), fts5(conn, text, scope, N))
            asked += 1 if fts_query(text) else 0
    assert served(mem) - before == asked
    assert store.lexical("zzqqxxv", Scope(), N) == [] and served(mem) - before == asked + 1
    for n in (1, 3, 500):  # limits cut through ties as ORDER BY bm25, rowid does
        same(store.lexical("deprecated since", Scope(), n), fts5(conn, "deprecated since", Scope(), n))
    before = served(mem)
    same(store.lexical("child_process spawn", Scope(), N), fts5(conn, "child_process spawn", Scope(), N))
    assert served(mem) == before  # a word of several tokens is a phrase: FTS5's SQL answers it


def test_a_write_ends_the_whole_index_and_searches_see_it(whole_mem):
    """After a write the index read at warm-up is not used: the search runs FTS5's SQL and finds the new row;
    from then on words are read as they are asked again."""
    mem = whole_mem
    store, conn = mem.store, mem.conn
    text = "quokkaword buffer stream"
    before = served(mem)
    same(store.lexical(text, Scope(), N), fts5(conn, text, Scope(), N))
    assert served(mem) == before + 1
    e = mem.add("the quokkaword marsupial writes to a buffer", wing="w3", title="quokkaword notes")
    rowid = conn.execute("SELECT rowid FROM entries WHERE id = ?", (e.id,)).fetchone()[0]
    for _ in range(3):
        got = store.lexical(text, Scope(), N)
        same(got, fts5(conn, text, Scope(), N))
        assert got[0][0] == rowid
    assert served(mem) == before + 3  # the first search in the new state runs the SQL, the next ones read and hold
    assert not store.speed.postings._snap.complete


def test_a_text_index_above_the_bound_is_not_read_whole(docs_store, tmp_path, monkeypatch):
    import memlens.store.sqlite as sqlite_store
    from memlens import Memory
    from memlens.embed import HashEmbedder

    monkeypatch.setattr(sqlite_store, "WARM_INSTANCES", 10_000)
    path = tmp_path / "big.db"
    shutil.copy(docs_store, path)
    with Memory.open(path, embedder=HashEmbedder()) as mem:
        mem.warm_index(text=True)
        assert mem.store.speed.postings._snap is None
        same(mem.store.lexical("readable stream", Scope(), N), fts5(mem.conn, "readable stream", Scope(), N))
        assert served(mem) == 0


def test_a_snapshot_built_by_another_search_during_the_warm_up_gets_the_postings(docs_store, tmp_path, monkeypatch):
    """A search on another thread may build its own snapshot of the same state while the warm-up reads the
    postings: the snapshot held at the end gets them all (nothing read is thrown away)."""
    from memlens import Memory
    from memlens.embed import HashEmbedder
    from memlens.store.speed import lexindex

    path = tmp_path / "race.db"
    shutil.copy(docs_store, path)
    with Memory.open(path, embedder=HashEmbedder()) as mem:
        mem.warm_index()
        lex = mem.store.speed.postings
        real = lexindex.LexIndex._all_postings

        def meanwhile(self, snap, rows):
            self._snap = None  # another search's snapshot of the same state replaces the warm-up's
            other = self._snapshot(mem.conn)
            assert other is not snap and other.state == snap.state
            return real(self, snap, rows)

        monkeypatch.setattr(lexindex.LexIndex, "_all_postings", meanwhile)
        assert lex.load_all(mem.conn, 10**9) > 5000
        assert lex._snap.complete
        same(mem.store.lexical("readable stream", Scope(), N), fts5(mem.conn, "readable stream", Scope(), N))
        assert served(mem) == 1


def test_a_search_reads_the_text_index_state_once(copy_mem, monkeypatch):
    """The term counts and the in-process ranking both check FTS5's state records: at most one read per search,
    and none while nothing changed (the retrieval-log rows written on this connection do not count; a batch the
    log spool's writer thread commits on its own connection does, once)."""
    from memlens.store import logspool

    monkeypatch.setattr(logspool, "DELAY", 60.0)  # the rows wait until the test writes them
    mem, q = copy_mem, questions()[0]
    mem.warm_index(text=True)  # every word's postings held: what a search reads of FTS5 is its state records
    monkeypatch.setattr(mem.store, "lexical_beside", lambda scope: False)  # ranked on the search's own thread, as when
    conn = mem.conn  # the worker is busy (the next test: on the worker)

    def reads_of_state() -> int:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            mem.search(q, use_cache=False)
        finally:
            conn.set_trace_callback(None)
        return sum("entries_fts_data WHERE id IN (1, 10)" in s for s in seen)

    def settle_here() -> None:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            mem.store.settle_log()  # the searches' rows written on this thread's connection
        finally:
            conn.set_trace_callback(None)
        assert any("INSERT INTO retrieval_log" in s for s in seen)

    mem.search(q, use_cache=False)
    settle_here()
    assert reads_of_state() == 0
    settle_here()
    assert reads_of_state() == 0
    conn.execute("UPDATE entries SET salience = salience WHERE rowid = (SELECT min(rowid) FROM entries)")
    assert reads_of_state() == 1  # this connection changed an entry: read again, once
    logged = mem.store._spool.last()
    writer = threading.Thread(target=lambda: (mem.store._spool.drain(patient=True), mem.store.close_thread()))
    writer.start()  # as the spool's writer thread does: on a connection of its own
    writer.join()
    assert logged.seq is not None
    assert reads_of_state() == 1


def test_beside_the_embedding_a_search_reads_the_text_index_state_at_most_once(copy_mem, monkeypatch):
    """On the worker thread's connection (``memlens.retrieval.beside``) the ranking checks FTS5's state records at
    most once a search, and not while nothing changed."""
    from memlens.store import logspool

    monkeypatch.setattr(logspool, "DELAY", 60.0)
    mem, q = copy_mem, questions()[0]
    mem.warm_index(text=True)
    mem.search(q, use_cache=False)  # the worker's connection opened

    def reads_of_state() -> int:
        seen: list[str] = []
        conns = list(mem.store._conns)  # the search's thread's and the worker's
        for c in conns:
            c.set_trace_callback(seen.append)
        try:
            mem.search(q, use_cache=False)
        finally:
            for c in conns:
                c.set_trace_callback(None)
        return sum("entries_fts_data WHERE id IN (1, 10)" in s for s in seen)

    assert len(mem.store._conns) == 2
    assert reads_of_state() == 0
    mem.conn.execute("UPDATE entries SET salience = salience WHERE rowid = (SELECT min(rowid) FROM entries)")
    assert reads_of_state() == 1  # another connection changed an entry: read again, once
    assert reads_of_state() == 0


def test_the_state_records_kept_for_a_search_end_with_a_write(copy_mem):
    mem = copy_mem
    state_records = mem.store.speed.postings.state_records
    with mem.reads.settled():
        before = state_records(mem.conn)
        assert state_records(mem.conn) is before  # kept
        mem.add("Zebra crossings need a lollipop man.", wing="w1", title="Zebra")
        after = state_records(mem.conn)
        assert after != before  # this connection wrote: read again, the new state
    assert state_records(mem.conn) == after


def test_in_process_sums_are_made_phrase_after_phrase(copy_mem):
    """The ranking sums each row's contributions in the query's order, from 0.0 (as FTS5 does): the same
    floats, bit for bit, as adding phrase after phrase, repeated phrases included."""
    mem = copy_mem
    mem.warm_index(text=True)
    lex = mem.store.speed.postings
    snap = lex._snap
    assert snap is not None and snap.complete
    tokens = sorted(snap.postings)
    rng = np.random.default_rng(5)
    for _ in range(300):
        asked = [tokens[i] for i in rng.integers(0, len(tokens), size=int(rng.integers(1, 10)))]
        ref = np.zeros(len(snap.ids))
        for t in asked:
            rows, contrib = snap.postings[t]
            ref[rows] += contrib
        got = lex._rank(snap, asked, None, 10**6)
        assert [s for _, s in got] == sorted(ref[ref > 0].tolist(), reverse=True)
        assert {r: s for r, s in got} == {int(snap.ids[i]): float(ref[i]) for i in np.flatnonzero(ref > 0)}


def test_a_token_fts5_cut_inside_a_character(tmp_path, settings, hash_embedder):
    """FTS5 cuts a token at 32 KiB, inside a character when it must (10,923 CJK characters are 32,769 bytes). The text
    index read that token as text that is not UTF-8 and took the store for damaged: warming failed, and every write
    after it was refused. The token's whole characters are read; the store stays writable and searchable."""
    from memlens import Memory

    with Memory.open(tmp_path / "cjk.db", settings=settings, embedder=hash_embedder) as mem:
        e = mem.add("中" * 11_000 + " then a tail of plain words", wing="cjk")
        mem.warm_index(text=True)
        assert [r.entry.id for r in mem.search("tail of plain words", k=3).results] == [e.id]
        assert [r.entry.id for r in mem.search("中" * 20, k=3).results] == [e.id]
        mem.add("Written after the warm-up.", wing="cjk")
        assert mem.count() == 2
