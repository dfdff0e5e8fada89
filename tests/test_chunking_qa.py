"""The chunking question set (tests/data/chunking_qa/) and memlens's chunking measured on it against naive windows."""

from __future__ import annotations

import pytest

from memlens.retrieval.evaluate import load_qrels, load_queries
from tests.bench import chunking_data as D


def _built(tmp_path):
    try:
        return D.build(tmp_path / "corpus")
    except D.CorpusMismatch as exc:
        pytest.fail(str(exc))


def test_question_set_loads_and_names_real_sections(tmp_path):
    secs = _built(tmp_path)
    queries = load_queries(D.DATA / "queries.jsonl")
    qrels = load_qrels(D.DATA / "qrels" / "test.tsv")
    by_id = {s.id: s for v in secs.values() for s in v}
    assert len(secs) >= 30 and len(queries) >= 60
    assert {q["_id"] for q in queries} == set(qrels)
    for q in queries:
        (target,) = qrels[q["_id"]]  # one relevant section per question
        s = by_id[target]  # a section the builder produced from the installed file
        assert s.heads, target
        heading = s.heads[-1].lower()
        if len(heading.split()) > 1:  # the question is in its own words, not the heading's
            assert heading not in q["text"].lower(), q
    assert (tmp_path / "corpus" / "corpus.jsonl").stat().st_size > 0


def test_naive_windows_ignore_headings_and_keep_line_ranges():
    text = "# A\n" + " ".join(f"w{i}" for i in range(10)) + "\n# B\nx y z\n"
    pieces = D.naive_chunks(text, 5)
    assert pieces[:2] == [("# A\nw0 w1 w2", 1, 2), ("w3 w4 w5 w6 w7", 2, 2)]
    assert pieces[2] == ("w8 w9\n# B\nx", 2, 4)  # a window straddles the heading of B
    assert pieces[3] == ("y z", 4, 4)
    secs = D.sections("d", text)
    assert [s.id for s in secs] == ["d::A", "d::B"]
    assert D.covered(secs, 2, 4) == ["d::A", "d::B"]
