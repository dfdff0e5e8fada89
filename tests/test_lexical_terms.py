"""The lexical generator looks for every word of the question (up to the cap), function words and common words
included, and the trace lists them; ``explain`` looks for the same ones."""

from __future__ import annotations

import pytest

from memlens.limits import MAX_QUERY_TERMS
from memlens.retrieval.terms import lexical_terms

from .fake_store import FakeEngine, FakeStore
from .test_stages import run_until


@pytest.fixture
def engine(settings):
    store = FakeStore()
    store.add("Parameters are declared in on_configure.", wing="ros", type="decision")
    store.add("Where the executor runs its callbacks.", wing="ros", type="note")
    return FakeEngine(settings, store)


def test_every_word_is_a_term_in_order():
    sel = lexical_terms("How do I read a file one line at a time? How, not why.")
    assert sel.terms == ["how", "do", "read", "file", "one", "line", "at", "time", "not", "why"]  # "I", "a": one letter
    assert sel.text == "how do read file one line at time not why" and not sel.cut and sel.distinct == 10


def test_the_cap_keeps_the_first_terms_and_says_so():
    words = ["the", "of", *(f"w{i}x" for i in range(MAX_QUERY_TERMS + 3))]
    sel = lexical_terms(" ".join(words))
    assert sel.terms == words[:MAX_QUERY_TERMS] and sel.cut and sel.distinct == MAX_QUERY_TERMS + 5
    assert not lexical_terms(" ".join(words[:MAX_QUERY_TERMS])).cut


def test_the_stage_passes_every_term_and_traces_them(engine):
    run = run_until(engine, "where are the parameters declared", "lexical")
    assert run.trace.fusion["lexical_terms"] == ["where", "are", "the", "parameters", "declared"]
    want = engine.reads.lexical("where are the parameters declared", run.plan.search_scope, 50)
    assert list(run.found.bm25) == [r for r, _ in want] and len(run.found.bm25) == 2  # "where" and "the" match the second entry


def test_the_cut_note_counts_every_distinct_term(engine):
    words = " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 3))
    run = run_until(engine, "what is " + words, "lexical")
    assert f"first {MAX_QUERY_TERMS} of the query's {MAX_QUERY_TERMS + 5} distinct terms" in " ".join(run.trace.notes)


def test_a_function_word_decides_between_two_texts_alike(mem):
    """The question's "between" is what tells the two answers apart; the text search must look for it."""
    alike = mem.add("lists and tuples: both hold a sequence of items", wing="w")
    answer = mem.add("lists and tuples: the difference between them is mutability", wing="w")
    b = mem.search("what is the difference between lists and tuples", use_cache=False)
    ranks = {r.entry.id: r.components.bm25_rank for r in b.results}
    assert ranks[answer.id] == 1 and ranks[alike.id] == 2
    assert b.trace.fusion["lexical_terms"] == ["what", "is", "the", "difference", "between", "lists", "and", "tuples"]


def test_a_word_in_every_entry_is_still_searched(mem):
    """A word found in most entries weighs little in BM25, but it is looked for: only its weight decides."""
    for i in range(12):
        mem.add(f"python note {i} about nothing much", wing="w")
    e = mem.add("python python python: why the interpreter starts slowly", wing="w")
    b = mem.search("why python", use_cache=False)
    assert b.trace.fusion["lexical_terms"] == ["why", "python"]
    assert b.trace.candidates["lexical"] == 13
    assert next(r for r in b.results if r.entry.id == e.id).components.bm25_rank == 1


def test_search_json_lists_the_terms_and_nothing_left_out(mem):
    mem.add("zebra crossings have stripes", wing="w")
    fusion = mem.search("the zebra", use_cache=False).to_dict()["trace"]["fusion"]
    assert fusion["lexical_terms"] == ["the", "zebra"]
    assert "lexical_dropped" not in fusion and "lexical_common" not in fusion


def test_explain_looks_for_the_same_terms(mem):
    """An entry that never became a candidate and holds only a function word of the question: "why not?" gives
    its BM25 rank, as the lexical stage would rank it."""
    for i in range(60):  # each nearer to the question and a better text match: the entry is no candidate
        mem.add(f"why storage engines keep indexes, note {i}", wing="w")
    e = mem.add("why", wing="w", title="one word")
    got = mem.explain("why storage engines", e.id)
    assert got["verdict"] == "not retrieved" and got["stage"] == "candidates"
    assert "BM25 rank 61" in got["detail"], got
