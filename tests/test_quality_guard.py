"""The quality guard: ``memlens eval`` on two real question sets of different kinds, held to the figures committed
beside each set (``tests/data/<set>/quality.json``).

* docs_qa: 138 questions written by hand over 2,793 sections of the Node.js API reference;
* python_faq: the Python FAQ's own 172 question headings over their answers (the questions taken out) and 763
  sections of Python's tutorial, HOWTOs, language reference and usage guides.

Each corpus is rebuilt from its source on this machine, checked against its digest, and stored with the real model
(embedded once per run: the ``question_stores`` fixture, tests/conftest.py); the installed ``memlens eval`` command
then ranks every question. A change that lowers MRR@10 or R@1 on either set by more than ``TOLERANCE`` fails here; one that raises
them should commit the new figures, so the guard follows the best measured so far.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.data import beir
from tests.data.beir import SETS


@pytest.mark.parametrize("name", SETS)
def test_memlens_eval_holds_the_committed_figures(question_stores, name):
    data = beir.DATA / name
    done = run_cli("--store", str(question_stores[name]), "eval", str(data / "queries.jsonl"), str(data / "qrels" / "test.tsv"),
                   "--json", timeout=900)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    want = beir.committed(name)
    assert got["queries"] == sum(1 for line in (data / "queries.jsonl").read_text().splitlines() if line.strip())
    print(f"{name}: MRR@10 {got['mrr@10']:.4f} (committed {want['mrr@10']:.4f}), "
          f"R@1 {got['recall@1']:.4f} (committed {want['recall@1']:.4f})")
    for metric in ("mrr@10", "recall@1"):
        assert got[metric] >= want[metric] - beir.TOLERANCE, (
            f"{name}: {metric} {got[metric]:.4f} is more than {beir.TOLERANCE} below the committed "
            f"{want[metric]:.4f} (tests/data/{name}/quality.json)")


def test_the_python_faq_questions_are_the_faqs_own_headings():
    """Every question is a FAQ heading, word for word, and its one relevant document is the answer under it (which
    does not contain the question): the questions exist apart from the answers, none was written for this set."""
    from memlens.retrieval.evaluate import load_qrels, load_queries
    from tests.data.python_faq import build_corpus as faq

    root = faq.source()
    if root is None:
        pytest.fail("python_faq: the Python documentation sources are missing; make test fetches them")
    answers = {doc_id: s for doc_id, s in faq.faq_answers(root)}
    queries = load_queries(beir.DATA / "python_faq" / "queries.jsonl")
    qrels = load_qrels(beir.DATA / "python_faq" / "qrels" / "test.tsv")
    assert len(queries) >= 150
    for q in queries:
        (doc_id,) = qrels[q["_id"]]
        assert answers[doc_id].title == q["text"]
        assert q["text"] not in answers[doc_id].body
    docs = {d["_id"]: d for d in faq.checked()}
    assert set(answers) <= set(docs)
    assert all(q["text"] not in docs[doc_id]["title"] for q in queries for doc_id in qrels[q["_id"]])
