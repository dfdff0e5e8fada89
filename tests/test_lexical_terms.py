"""The lexical generator looks for a query's content words, not its common ones, and the trace says which it left out."""

from __future__ import annotations

import pytest

from memlens.limits import MAX_QUERY_TERMS
from memlens.retrieval.terms import STOP_WORDS, lexical_terms

from .fake_store import FakeEngine, FakeStore
from .test_stages import run_until


@pytest.fixture
def engine(settings):
    store = FakeStore()
    store.add("Parameters are declared in on_configure.", wing="ros", type="decision")
    store.add("Where the executor runs its callbacks.", wing="ros", type="note")
    return FakeEngine(settings, store)


def test_common_words_are_left_out_in_order():
    sel = lexical_terms("How do I read a file one line at a time?")
    assert sel.terms == ["read", "file", "one", "line", "time"]
    assert sel.dropped == ["how", "do", "at"]  # "I" and "a": a one-letter word is never a term
    assert sel.text == "read file one line time" and not sel.cut


def test_a_query_of_only_common_words_keeps_them():
    sel = lexical_terms("how was it done")
    assert all(t in STOP_WORDS for t in ("how", "was", "it", "done"))
    assert sel.terms == ["how", "was", "it", "done"] and sel.dropped == []


def test_content_words_are_never_stop_words():
    for word in ("not", "no", "use", "file", "error", "new", "read", "write", "node", "stream", "2"):
        assert word not in STOP_WORDS, word


def test_the_cap_counts_content_terms_only():
    words = [f"w{i}x" for i in range(MAX_QUERY_TERMS + 5)]
    sel = lexical_terms(" ".join(["the", "of", *words]))
    assert sel.terms == words[:MAX_QUERY_TERMS] and sel.dropped == ["the", "of"] and sel.cut
    assert not lexical_terms(" ".join(["the", *words[:MAX_QUERY_TERMS]])).cut


def test_the_stage_passes_only_content_terms_and_traces_the_rest(engine):
    run = run_until(engine, "where are the parameters declared", "lexical")
    assert run.trace.fusion["lexical_terms"] == ["parameters", "declared"]
    assert run.trace.fusion["lexical_dropped"] == ["where", "are", "the"]
    assert list(run.bm25) == [r for r, _ in engine.reads.lexical("parameters declared", run.plan.search_scope, 50)]
    assert run.bm25  # the content words still match


def test_the_cut_note_counts_the_terms_left_after_common_words(engine):
    words = " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 3))
    run = run_until(engine, "what is " + words, "lexical")
    note = " ".join(run.trace.notes)
    assert f"first {MAX_QUERY_TERMS} of the query's {MAX_QUERY_TERMS + 3} distinct terms left after its 2 common" in note


def test_a_common_word_alone_makes_no_lexical_candidate(mem):
    filler = mem.add("the cat sat on the mat with the hat", wing="w")
    zebra = mem.add("zebra crossings have stripes", wing="w")
    b = mem.search("what is the zebra", use_cache=False)
    ranked = {r.entry.id: r.components.bm25_rank for r in b.results}
    assert ranked.get(zebra.id) == 1
    assert ranked.get(filler.id) is None  # before: "the" matched it three times
    assert b.trace.candidates["lexical"] == 1
    assert b.trace.fusion["lexical_dropped"] == ["what", "is", "the"]


def test_a_query_of_only_common_words_still_finds_text(mem):
    e = mem.add("how it was done: we did it over again", wing="w")
    mem.add("zebra crossings have stripes", wing="w")
    b = mem.search("how was it done", use_cache=False)
    assert b.trace.fusion["lexical_dropped"] == [] and b.trace.fusion["lexical_terms"] == ["how", "was", "it", "done"]
    assert [r.entry.id for r in b.results if r.components.bm25_rank] == [e.id]


def test_search_json_keeps_its_shape(mem):
    mem.add("zebra crossings have stripes", wing="w")
    d = mem.search("the zebra", use_cache=False).to_dict()
    assert {"lexical_terms", "lexical_dropped"} <= set(d["trace"]["fusion"])
    assert d["trace"]["fusion"]["lexical_terms"] == ["zebra"]


def test_terms_in_most_entries_are_left_out_of_a_big_store(settings, monkeypatch):
    from memlens.retrieval import terms

    store = FakeStore()
    for i in range(40):
        store.add(f"common words everywhere, entry {i}", wing="w")
    store.add("the zebra is here with common words", wing="w")
    engine = FakeEngine(settings, store)
    monkeypatch.setattr(terms, "COMMON_MIN_ENTRIES", 10)
    run = run_until(engine, "where is the zebra with common words", "lexical")
    assert run.trace.fusion["lexical_common"] == ["common", "words"]
    assert run.trace.fusion["lexical_terms"] == ["zebra"]
    assert len(run.bm25) == 1
    run = run_until(engine, "common words", "lexical")  # every term is that common: all kept
    assert run.trace.fusion["lexical_common"] == [] and len(run.bm25) == 41
    monkeypatch.setattr(terms, "COMMON_MIN_ENTRIES", 1000)  # a small store: nothing left out for being common
    run = run_until(engine, "where is the zebra with common words", "lexical")
    assert run.trace.fusion["lexical_common"] == [] and len(run.bm25) == 41


def test_term_counts_on_sqlite(mem):
    from memlens.store.sqlite_reads import reads_of

    for i in range(5):
        mem.add(f"alpha entry {i}", wing="w", title="beta" if i < 2 else "")
    total, counts = reads_of(mem).term_counts(["alpha", "beta", "gamma", "entry"])
    assert total == 5 and counts == {"alpha": 5, "beta": 2, "gamma": 0, "entry": 5}


def _lexical_sql(mem, scope):
    from memlens.store.sqlite_reads import reads_of

    seen: list[str] = []
    mem.conn.set_trace_callback(seen.append)
    try:
        rows = reads_of(mem).lexical("zebra stripes", scope, 50)
    finally:
        mem.conn.set_trace_callback(None)
    return rows, [s for s in seen if "MATCH" in s and "bm25" in s]


def test_an_unscoped_search_skips_the_per_match_scope_test_with_the_same_rows(mem, monkeypatch):
    from memlens.store.reads import Scope
    from memlens.store.sqlite_reads import SqliteReads

    monkeypatch.setattr(SqliteReads, "lexical_in_process", False)  # the SQL path (tests/test_lexindex.py: the other)

    for i in range(6):
        mem.add(f"zebra {'stripes ' * i}note {i}", wing=f"w{i % 3}")
    scope = Scope(statuses=["active", "under_review"])
    joined, _ = _lexical_sql(mem, scope)  # no in-process index: each match joined to its entries row
    mem.warm_index()
    fast, sql = _lexical_sql(mem, scope)
    assert fast == joined and len(fast) == 6
    assert sql and "memlens_in_scope" not in sql[0] and "JOIN" not in sql[0]
    old = mem.search("zebra", use_cache=False).results[0].entry.id
    mem.set_status(old, "deprecated")  # now the scope leaves out a row of the index: each match is tested again
    tested, sql = _lexical_sql(mem, scope)
    assert "memlens_in_scope" in sql[0]
    assert [r for r, _ in tested] == [r for r, _ in joined if r != mem.conn.execute(
        "SELECT rowid FROM entries WHERE id = ?", (old,)).fetchone()[0]]
