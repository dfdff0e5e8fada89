"""FTS5's bm25 on PostgreSQL (``memlens.store.postgres.lexical``) against FTS5 itself, on real documentation.

The same entries in a SQLite store and, copied, in a PostgreSQL store (same
rowids): for every question of both question sets, scoped and not, the lexical
generator must return the same rows in the same order with the same scores;
after writes through each store (adds, an edit, a delete, an import that is
discarded), and after a store of schema 4 is upgraded in place. A query word
that FTS5 cuts into several tokens (``child_process``) is a phrase there, and
must be one here too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memlens.store.scope import Scope

pytest.importorskip("psycopg")

DATA = Path(__file__).resolve().parent / "data"
QUESTIONS = [json.loads(line)["text"] for name in ("docs_qa", "chunking_qa")
             for line in (DATA / name / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
# the python_faq questions with a word FTS5 cuts into several tokens (PyErr_Print, a_tuple, _SomeClassName__spam)
FAQ_PHRASES = [q for q in (json.loads(line)["text"] for line in (DATA / "python_faq" / "queries.jsonl").read_text(
    encoding="utf-8").splitlines() if line.strip()) if re.search(r"[^\W_]_+[^\W_]", q)]
SCOPES = [Scope(), Scope(rooms=["fs", "stream", "http"], statuses=["active", "under_review"])]


@pytest.fixture(scope="module")
def node_docs():
    """The Node.js API reference as sections (tests/data/docs_qa), or a skip where Debian's nodejs docs are absent."""
    from tests.data.docs_qa import build_corpus

    if not build_corpus.SRC.is_dir():
        pytest.skip(f"{build_corpus.SRC} is not on this machine")
    return build_corpus.build()


@pytest.fixture(scope="module")
def twin(tmp_path_factory, pg_server, settings, node_docs):
    """(SQLite Memory, PostgreSQL Memory) holding the same sections, PostgreSQL's made by ``memlens copy``; the
    tests below run in order on the same pair (each leaves both as alike as it found them)."""
    from memlens import Memory
    from memlens.embed import HashEmbedder
    from memlens.store.postgres.copy import copy_store

    from .pg_fixture import pg_memory

    hash_embedder = HashEmbedder()
    tmp_path = tmp_path_factory.mktemp("twin")
    name, pg_uri = pg_server.create_db()
    jsonl = tmp_path / "docs.jsonl"
    with jsonl.open("w", encoding="utf-8") as fh:
        for d in node_docs:
            fh.write(json.dumps({"id": d["_id"], "wing": "nodejs", "room": d["_id"].split(":")[0], "kind": "document",
                                 "title": d["title"][:500], "text": d["text"]}) + "\n")
    sq = Memory.open(tmp_path / "docs.db", settings=settings, embedder=hash_embedder)
    sq.import_jsonl(jsonl)
    copy_store(tmp_path / "docs.db", pg_uri)
    pg = pg_memory(pg_uri, settings, hash_embedder)
    try:
        yield sq, pg
    finally:
        sq.close()
        pg.close()
        pg_server.drop_db(name)


def _ids(mem, hits):
    rows = {r[0]: r[2] for r in mem.store.rows([r for r, _ in hits]).rows}
    return [rows[r] for r, _ in hits]


def same_ranking(sq, pg, questions=QUESTIONS, n=100, by_id=False):
    """``by_id``: rows compared by entry id (the two stores gave the rows stored since the copy different rowids)."""
    compared = 0
    for scope in SCOPES:
        for q in questions:
            want = sq.reads.lexical(q, scope, n)
            got = pg.reads.lexical(q, scope, n)
            if by_id:
                assert _ids(pg, got) == _ids(sq, want), q
            else:
                assert [r for r, _ in got] == [r for r, _ in want], q
            assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-12, abs=0), q
            compared += bool(want)
    return compared


def df_counted_again(pg):
    """The postings and ``lex_df`` as a search reads them (the tables, folded in bulk and kept by the triggers, and the
    pending rows), and as made from the rows now."""
    from memlens.store.postgres.lexical import PENDING

    with pg.store.connection() as conn:
        kept = sorted(conn.execute(
            "SELECT term, sum(docs), sum(tokens) FROM (SELECT term, docs, tokens FROM lex_df UNION ALL "
            f"SELECT unnest(lex_terms), 1, 0 FROM ({PENDING}) p UNION ALL SELECT '', 1, lex_len FROM ({PENDING}) p) x "
            "GROUP BY term HAVING sum(docs) > 0 OR term = ''").fetchall())
        assert not conn.execute("SELECT 1 FROM lex_postings WHERE rowid > (SELECT folded_upto FROM lex_state)").fetchall()
        kept += sorted(conn.execute(f"SELECT term, rowid, freq, len FROM lex_postings UNION ALL SELECT u.t, p.rowid, u.f, "
                                    f"p.lex_len FROM ({PENDING}) p, unnest(p.lex_terms, p.lex_freqs) AS u(t, f)").fetchall())
        fresh = sorted(conn.execute(
            "SELECT t, count(*), 0 FROM entries, unnest(lex_terms) AS t GROUP BY t "
            "UNION ALL SELECT '', count(*), coalesce(sum(lex_len), 0) FROM entries").fetchall())
        fresh += sorted(conn.execute("SELECT u.t, e.rowid, u.f, e.lex_len FROM entries e, "
                                     "unnest(e.lex_terms, e.lex_freqs) AS u(t, f)").fetchall())
    return kept, fresh


def test_tokens_are_fts5s_on_real_text(node_docs, monkeypatch):
    from memlens.store.postgres import lexical

    texts = [d["text"] for d in node_docs] + [d["title"] for d in node_docs]
    texts += [Path(__file__).read_text(encoding="utf-8"), "Ünïcödé naïve café ΑΒΓ straße ﬁle 東京 ½ x²", "", "  --  "]
    # cut here although not ASCII: an automatic title ("…"), quotes, dashes, bullets, a no-break space
    texts += [t[:59].rstrip() + "…" for t in texts[:20]]
    texts += ["the node’s “stream” API—backpressure – then\u00a0pipe()… • done", "…", "’’x’’"]
    assert any(not t.isascii() for t in texts) and any(t.isascii() for t in texts)  # both ways of cutting are compared
    assert lexical.field_tokens(texts) == lexical._by_sqlite(texts)
    assert lexical._port_ok()
    monkeypatch.setattr(lexical, "_by_sqlite", lambda fields: pytest.fail(f"cut by SQLite: {fields}"))
    assert lexical.field_tokens(["an entry’s title…"]) == [["an", "entri", "s", "titl"]]  # cut here


def test_bm25_is_fts5s_on_every_question(twin):
    sq, pg = twin
    assert pg.store.lexical_scorer == "pg-bm25" and sq.store.lexical_scorer == "fts5-bm25"
    assert same_ranking(sq, pg) > 300  # most questions match something in both scopes
    kept, fresh = df_counted_again(pg)
    assert kept == fresh  # copy counted the statistics once, from the rows it wrote


def test_a_word_of_several_tokens_is_a_phrase(twin, node_docs):
    """FTS5 matches ``child_process`` where the tokens child and process stand side by side, in order, and ranks
    it with the idf of the rows holding that phrase: PostgreSQL must too. Words taken from the documentation
    itself (``worker_threads``, ``NODE_OPTIONS``, ...), alone and beside plain words, and python_faq's."""
    from memlens.store.postgres import lexical

    sq, pg = twin
    words = sorted({w.lower() for d in node_docs for w in re.findall(r"\w+", d["text"]) if re.search(r"[^\W_]_+[^\W_]", w)})
    cut = {w: tuple(t) for w, t in zip(words, lexical.field_tokens(words), strict=True) if len(t) > 1}
    picked = list(cut)[:: max(1, len(cut) // 40)]
    assert len(picked) >= 30
    with pg.store.connection() as conn:  # rows holding every token of a phrase, and those holding the phrase
        apart = [w for w in picked if len(lexical.phrase_rows(conn, cut[w])) < conn.execute(
            "SELECT count(*) FROM (SELECT rowid FROM lex_postings WHERE term = ANY(%s) GROUP BY rowid "
            "HAVING count(*) = %s) x", (sorted(set(cut[w])), len(set(cut[w])))).fetchone()[0]]
    assert len(apart) >= 5  # words as separate tokens would match (and rank) other rows: the comparison can fail
    questions = picked + [f"how does {a} relate to the stream {b} options" for a, b in zip(picked, picked[1:])]
    assert len(FAQ_PHRASES) >= 4
    assert same_ranking(sq, pg, questions + FAQ_PHRASES) > 60


def test_bm25_stays_fts5s_through_writes(twin):
    sq, pg = twin
    for mem in (sq, pg):
        a = mem.add("Streams: pipe a readable stream into a writable one; backpressure is handled.", wing="nodejs",
                    room="stream", id="extra-1")
        mem.add("HTTP keep-alive agents reuse sockets between requests.", wing="nodejs", room="http", id="extra-2")
        mem.add("child_process.spawn() runs a command; the child_process module pipes its stdio.", wing="nodejs",
                room="stream", id="extra-3")  # a phrase in a pending row
        mem.update(a.id, text="Streams: pipeline() connects readable and writable streams and forwards errors.")
        mem.set_status("fs:file-system", "deprecated")
        mem.delete("extra-2")
        folded = mem.get("http:http")  # a row the copy folded: the triggers keep its postings and counts
        mem.update(folded.id, text=folded.text + " Agents pool keep-alive sockets per origin.")
        mem.delete("zlib:zlib")
    with pg.store.connection() as conn:
        mark, top = conn.execute("SELECT folded_upto, (SELECT max(rowid) FROM entries) FROM lex_state").fetchone()
    assert mark < top  # the rows added are pending, read beside the tables
    questions = QUESTIONS[:40] + ["pipeline readable writable errors", "keep-alive sockets", "file system flags",
                                  "agents pool sockets per origin", "zlib deflate", "child_process stdio pipes",
                                  "spawn a child_process"]
    assert same_ranking(sq, pg, questions) > 40
    kept, fresh = df_counted_again(pg)
    assert kept == fresh


def test_rows_stored_in_bulk_are_folded(twin, node_docs, tmp_path):
    """An import of more rows than ``FOLD_EVERY`` folds them into the tables while it runs, in bulk; the rows left
    pending and the folded ones rank as FTS5 ranks them."""
    from memlens.store.postgres.lexical import FOLD_EVERY

    sq, pg = twin
    docs = node_docs[: FOLD_EVERY + 100]
    assert len(docs) == FOLD_EVERY + 100
    jsonl = tmp_path / "again.jsonl"
    jsonl.write_text("".join(json.dumps({"id": "again-" + d["_id"], "wing": "nodejs-again", "room": d["_id"].split(":")[0],
                                         "kind": "document", "title": d["title"][:500], "text": d["text"]}) + "\n"
                             for d in docs), encoding="utf-8")
    with pg.store.connection() as conn:
        before = conn.execute("SELECT folded_upto FROM lex_state").fetchone()[0]
    for mem in (sq, pg):
        assert mem.import_jsonl(jsonl)["imported"] == len(docs)
    with pg.store.connection() as conn:
        mark, top = conn.execute("SELECT folded_upto, (SELECT max(rowid) FROM entries) FROM lex_state").fetchone()
    assert before < mark < top and top - mark < FOLD_EVERY
    assert same_ranking(sq, pg, QUESTIONS[:60], by_id=True) > 50
    kept, fresh = df_counted_again(pg)
    assert kept == fresh


def test_a_schema_4_store_gains_its_rows_tokens(twin, settings, hash_embedder):
    from memlens.store.postgres import schema

    from .pg_fixture import back_to_schema_4, pg_memory

    sq, pg = twin
    with pg.store.connection() as conn:
        back_to_schema_4(conn)
    again = pg_memory(pg.store.uri, settings, hash_embedder)
    try:
        assert again.store.schema_version() == schema.SCHEMA_VERSION == 6
        assert same_ranking(sq, again, QUESTIONS[:60], by_id=True) > 50
        kept, fresh = df_counted_again(again)
        assert kept == fresh
    finally:
        again.close()


def test_writers_at_once_fold_each_row_once(pg_uri, settings, hash_embedder, node_docs):
    """Four writers adding at once across several folds: an add whose statement began before another writer's fold
    committed must fold from the mark as that fold left it (else a row's postings are written twice and the add
    fails), and every token is counted once."""
    import threading

    from memlens.store.postgres.lexical import FOLD_EVERY

    from .pg_fixture import pg_memory

    docs = node_docs[: 2 * FOLD_EVERY + 200]
    mems = [pg_memory(pg_uri, settings, hash_embedder) for _ in range(4)]
    errors: list[BaseException] = []

    def write(mem, part):
        try:
            for d in part:
                mem.add(d["text"], title=d["title"][:500], wing="nodejs", id=d["_id"])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(mem, docs[i::4])) for i, mem in enumerate(mems)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with mems[0].store.connection() as conn:
            mark, rows = conn.execute("SELECT folded_upto, (SELECT count(*) FROM entries) FROM lex_state").fetchone()
        assert rows == len(docs) and mark > FOLD_EVERY  # folded twice at least, while the others wrote
        kept, fresh = df_counted_again(mems[0])
        assert kept == fresh
    finally:
        for mem in mems:
            mem.close()


def test_each_write_stores_the_tokens_postings_gives(pg_uri, settings, hash_embedder, tmp_path):
    """The writers send a row's tokens and weights as texts the server splits (``packed``): what is stored is what
    ``postings`` made, for plain, accented, CJK and punctuated texts, through add, import and update."""
    from memlens.store.postgres.lexical import postings

    from .pg_fixture import pg_memory

    texts = [("Streams", "Pipe a readable stream; 2.5x faster, e.g. pipe()/unpipe()."),
             ("Café crème", "naïve façade — Ünïcödé tokens and «quotes» stay whole"),
             ("東京", "の データベース and 日本語 words"), ("x y", "well-known child_process A.B.C 1,000,000\ttab")]
    mem = pg_memory(pg_uri, settings, hash_embedder)
    try:
        ids = [mem.add(text, title=title, wing="lex").id for title, text in texts]  # add
        src = tmp_path / "more.jsonl"
        src.write_text("".join(json.dumps({"id": f"imp-{i}", "wing": "lex", "title": title, "text": text}) + "\n"
                               for i, (title, text) in enumerate(reversed(texts))), encoding="utf-8")
        mem.import_jsonl(src)  # insert
        mem.update(ids[0], title="Renamed: über", text="Now it says something else entirely … ok")  # replace
        ids += [f"imp-{i}" for i in range(len(texts))]
        with mem.store.connection() as conn:
            for entry_id in ids:
                e = mem.get(entry_id)
                row = conn.execute("SELECT lex_terms, lex_freqs, lex_len FROM entries WHERE id = %s", (entry_id,)).fetchone()
                assert (list(row[0]), [float(f) for f in row[1]], row[2]) == postings([(e.title, e.text)])[0], entry_id
    finally:
        mem.close()


def test_a_token_fts5_cuts_inside_a_character(pg_uri, settings, hash_embedder):
    """FTS5 cuts a token at 32 KiB, inside a character when it must (a run of 10,923 CJK characters is 32,769 bytes):
    that token's whole characters are kept, so the row is stored (it failed with a decoding traceback) and found."""
    from memlens.store.postgres.lexical import _by_sqlite, postings

    from .pg_fixture import pg_memory

    run = "中" * 11_000
    assert _by_sqlite([run]) == [["中" * 10_922]]  # 32,766 bytes: the 32,768th byte fell inside the next character
    mem = pg_memory(pg_uri, settings, hash_embedder)
    try:
        e = mem.add(f"{run} then a tail of plain words", wing="cjk")
        with mem.store.connection() as conn:
            row = conn.execute("SELECT lex_terms, lex_len FROM entries WHERE id = %s", (e.id,)).fetchone()
        assert (sorted(row[0]), row[1]) == (sorted(postings([(e.title, e.text)])[0][0]), postings([(e.title, e.text)])[0][2])
        assert "中" * 10_922 in row[0]
        assert [r.entry.id for r in mem.search("tail of plain words", k=3).results] == [e.id]
    finally:
        mem.close()
