"""Scoped hybrid search on the demo memory with the real model."""

import json

import pytest

from memlens.errors import QueryError

CONTRACT_RESULT = {"id", "wing", "room", "kind", "type", "status", "title", "text", "score", "rank", "flags", "components"}
CONTRACT_TRACE = {"cache_hit", "latency_ms", "wings_searched", "results_per_wing", "counts", "dropped"}


def test_seed_004_example_is_found(demo_mem):
    b = demo_mem.search("wing=lifecore_ros2 callbacks blocking")
    ids = [r.entry.id for r in b.results]
    assert ids[0] == "lc-arch-001"
    assert {"lc-arch-001", "lc-arch-004"} <= set(ids)
    assert all(r.entry.wing == "lifecore_ros2" for r in b.results)


def test_json_shape_is_the_contract(demo_mem):
    d = json.loads(json.dumps(demo_mem.search("executor choice", active_wing="lifecore_ros2").to_dict()))
    assert set(d) == {"results", "trace"}
    assert d["results"], "expected results"
    for r in d["results"]:
        assert CONTRACT_RESULT <= set(r)
        assert {
            "similarity",
            "bm25",
            "bm25_rank",
            "vector_rank",
            "relevance",
            "recency",
            "salience",
            "boost",
            "rerank",
            "final",
        } <= set(r["components"])
        assert all(isinstance(f, str) for f in r["flags"])
    assert CONTRACT_TRACE <= set(d["trace"])
    assert set(d["trace"]["latency_ms"]) >= {
        "parse",
        "embed",
        "vector",
        "lexical",
        "score",
        "rerank",
        "policy",
        "budget",
        "total",
    }
    assert [r["rank"] for r in d["results"]] == list(range(1, len(d["results"]) + 1))
    for item in d["trace"]["dropped"]:
        assert {"id", "reason"} <= set(item)


def test_default_wings_are_active_and_global(demo_mem):
    b = demo_mem.search("pytest fixtures", active_wing="lifecore_ros2", k=20)
    assert b.trace.wings_searched == ["lifecore_ros2", "_global"]
    assert {r.entry.wing for r in b.results} <= {"lifecore_ros2", "_global"}
    assert "_global" in b.trace.results_per_wing
    assert sum(b.trace.results_per_wing.values()) == len(b.results)
    for r in b.results:
        assert ("active_wing" in r.flags) == (r.entry.wing == "lifecore_ros2")


def test_explicit_wings_override_default(demo_mem):
    b = demo_mem.search("executor", active_wing="lifecore_ros2", wings=["ros2", "python"])
    assert b.trace.wings_searched == ["ros2", "python"]
    assert {r.entry.wing for r in b.results} <= {"ros2", "python"}


def test_filters_apply_inside_the_knn(demo_mem):
    # invariants are a small minority; filtering after a k=10 KNN would return fewer than k
    b = demo_mem.search("type=invariant status=active lifecycle transitions", k=10)
    assert len(b.results) == 10
    assert all(r.entry.type.value == "invariant" and r.entry.status.value == "active" for r in b.results)
    b = demo_mem.search("room=incident-log wing=lifecore_ros2 crash", k=5)
    assert len(b.results) == 5 and all(r.entry.room == "incident-log" for r in b.results)


def test_deprecated_excluded_unless_asked(demo_mem):
    all_active = demo_mem.search("wing=lifecore_ros2 executor threads callbacks", k=50)
    assert all(r.entry.status.value != "deprecated" for r in all_active.results)
    dep = demo_mem.search("wing=lifecore_ros2 status=deprecated executor", k=50)
    assert dep.results and all(r.entry.status.value == "deprecated" for r in dep.results)


def test_under_review_is_included_and_flagged(demo_mem):
    b = demo_mem.search("wing=lifecore_ros2 status=under_review callbacks", k=20)
    assert b.results
    assert all(r.flags.count("under_review") == 1 for r in b.results)


def test_every_result_has_all_components(demo_mem):
    b = demo_mem.search("wing=lifecore_ros2 QoS depth transient local")
    lexical_only = 0
    for r in b.results:
        c = r.components
        assert c.similarity is not None and -1 <= c.similarity <= 1
        assert 0 <= c.similarity_norm <= 1 and 0 <= c.bm25_norm <= 1
        assert c.relevance == pytest.approx(0.8 * c.similarity_norm + 0.2 * c.bm25_norm)
        # default weights: relevance only, times the active-wing boost
        assert c.final == pytest.approx(c.relevance * c.boost)
        assert r.score == c.final
        lexical_only += c.vector_rank is None
    order = {"invariant": 0, "decision": 1, "pattern": 2, "note": 3}
    keys = [(order[r.entry.type.value], -r.score) for r in b.results]
    assert keys == sorted(keys), "authority first, score within"
    assert b.trace.fusion["method"].startswith("minmax-weighted-sum")
    # per-kind min-max bounds are in the trace, and each normalised value is recomputable from them
    for r in b.results:
        lo, hi = b.trace.normalisation[r.entry.kind.value]["similarity"]
        if hi > lo:
            assert r.components.similarity_norm == pytest.approx((r.components.similarity - lo) / (hi - lo))


def test_capped_candidates_are_reported_as_dropped(demo_mem):
    b = demo_mem.search("wing=lifecore_ros2 callbacks", k=3)
    assert len(b.results) == 3
    assert b.trace.dropped and all(d.reason == "cap" for d in b.trace.dropped)
    returned = {r.entry.id for r in b.results}
    assert not returned & {d.id for d in b.trace.dropped}


def test_filter_only_query_lists_scope_in_authority_order(demo_mem):
    b = demo_mem.search("wing=lifecore_ros2 room=architecture", k=30)
    order = {"invariant": 0, "decision": 1, "pattern": 2, "note": 3}
    types = [order[r.entry.type.value] for r in b.results]
    assert types == sorted(types) and b.results


@pytest.mark.parametrize("query", ["", "   ", "\t\n"])
def test_a_query_with_nothing_to_look_for_is_an_error(demo_mem, query):
    """Neither words nor filters: an error, not a listing of whatever ranks first in the default wings."""
    with pytest.raises(QueryError, match="^the query is empty: give words to look for, or filters"):
        demo_mem.search(query)
    with pytest.raises(QueryError, match="^the query is empty"):
        demo_mem.explain(query, "lc-arch-001")


def test_an_active_wing_with_no_entries_is_searched_and_the_trace_says_so(demo_mem):
    """A new project's wing is not an error (its agent may search before it stores anything), but a typo would
    silently lose the project's invariants: the trace, the CLI and MCP's summary name the wings that exist."""
    b = demo_mem.search("callbacks blocking", active_wing="lifecore_ros")
    assert b.trace.wings_searched == ["lifecore_ros", "_global"] and b.results
    assert b.trace.notes == ["the active wing 'lifecore_ros' holds no entries yet: it adds no invariants and no boost "
                             "(known wings: _global, lifecore_ros2, python, ros2)"]
    assert not [n for n in demo_mem.search("callbacks blocking", active_wing="lifecore_ros2").trace.notes
                if "holds no entries" in n]
    # the context an agent reads says so too, in its header (it said nothing: the project's invariants just missing)
    text = demo_mem.context("callbacks blocking", active_wing="lifecore_ros")
    assert ("> **note:** the active wing 'lifecore_ros' holds no entries yet: it adds no invariants and no boost (known "
            "wings: _global, lifecore_ros2, python, ros2)") in text.splitlines()[:4]
    assert "**note:**" not in demo_mem.context("callbacks blocking", active_wing="lifecore_ros2")


def test_unknown_wing_or_room_is_an_error(demo_mem):
    with pytest.raises(QueryError, match="did you mean 'lifecore_ros2'"):
        demo_mem.search("wing=lifecore_ros callbacks")
    with pytest.raises(QueryError, match="unknown room 'architecure'"):
        demo_mem.search("room=architecure callbacks")
    with pytest.raises(QueryError, match="unknown wing 'nope'"):
        demo_mem.search("callbacks", wings=["nope"])


def test_counts_per_kind(demo_mem):
    b = demo_mem.search("wing=lifecore_ros2 hang on shutdown", k=10)
    assert sum(b.trace.counts.values()) == len(b.results)
    assert set(b.trace.counts) <= {"turn", "fact", "entity", "procedure", "document", "code"}


QUERIES = [
    ("wing=lifecore_ros2 callbacks blocking", {}),
    ("type=invariant|decision status=active lifecycle transitions", {}),
    ("executor threads", {"active_wing": "lifecore_ros2"}),
    ("room=incident-log crash on shutdown", {"wings": ["lifecore_ros2", "ros2"]}),
    ("status=deprecated executor", {"active_wing": "lifecore_ros2"}),
]


@pytest.mark.parametrize("query, kw", QUERIES)
def test_in_process_index_returns_what_sqlite_vec_returns(demo_mem, query, kw):
    plain = demo_mem.search(query, use_cache=False, **kw)
    assert plain.trace.fusion["vector_index"] == "sqlite-vec"
    assert demo_mem.warm_index() == demo_mem.count()
    warm = demo_mem.search(query, use_cache=False, **kw)
    assert warm.trace.fusion["vector_index"] == "memory"
    assert [r.entry.id for r in warm.results] == [r.entry.id for r in plain.results]
    for a, b in zip(warm.results, plain.results):
        assert a.components.similarity == pytest.approx(b.components.similarity, abs=1e-5)
        assert a.components.vector_rank == b.components.vector_rank
    # every candidate weighed alike too (the in-process scan's own similarities for text-only matches)
    assert [(d.id, d.stage) for d in warm.trace.dropped] == [(d.id, d.stage) for d in plain.trace.dropped]
    assert [d.score for d in warm.trace.dropped] == pytest.approx([d.score for d in plain.trace.dropped], abs=1e-5)


def test_in_process_index_sees_writes_from_any_process(demo_mem):
    demo_mem.warm_index()
    from .conftest import run_cli

    out = run_cli("--store", str(demo_mem.path), "add", "Zebra crossings need a lollipop man.", "--wing", "lifecore_ros2")
    new_id = out.stdout.strip()
    b = demo_mem.search("zebra crossing lollipop", active_wing="lifecore_ros2")
    assert b.trace.fusion["vector_index"] == "memory"
    assert b.results and new_id in [r.entry.id for r in b.results if r.entry.type.value == "note"]
    demo_mem.delete(new_id)
    b = demo_mem.search("zebra crossing lollipop", active_wing="lifecore_ros2", use_cache=False)
    assert new_id not in [r.entry.id for r in b.results]


def test_a_search_asks_once_whether_another_process_wrote(demo_mem):
    """A search reads SQLite's data_version once, not at each stage that checks the generations; inside that
    block a write by another process is seen by the next search, not halfway through this one."""
    from .conftest import run_cli

    demo_mem.warm_index()
    demo_mem.search("executor choice", use_cache=False)
    seen: list[str] = []
    demo_mem.conn.set_trace_callback(seen.append)
    try:
        demo_mem.search("executor choice", use_cache=False)
    finally:
        demo_mem.conn.set_trace_callback(None)
    assert seen.count("PRAGMA data_version") == 1  # (FTS5 runs its own "PRAGMA 'main'.data_version" too)
    reads = demo_mem.reads
    with reads.settled():
        before = reads.generations()
        run_cli("--store", str(demo_mem.path), "add", "Zebra crossings need a lollipop man.", "--wing", "lifecore_ros2")
        assert reads.generations() == before
    assert reads.generations()["lifecore_ros2"] == before["lifecore_ros2"] + 1


def test_a_search_logging_itself_keeps_what_the_next_search_reads(demo_mem, monkeypatch):
    """The wings' generations and whether any entry overrides another are kept between searches: a search's own
    retrieval-log row (written on this thread's connection here) does not make the next search read them again;
    a write to an entry does."""
    from memlens.store import logspool

    monkeypatch.setattr(logspool, "DELAY", 60.0)  # the rows wait until the test writes them
    conn = demo_mem.conn

    def statements(query: str) -> tuple[list[str], list[str]]:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            ids = [r.entry.id for r in demo_mem.search(query, active_wing="lifecore_ros2", use_cache=False).results]
            demo_mem.store.settle_log()
        finally:
            conn.set_trace_callback(None)
        assert any("INSERT INTO retrieval_log" in s for s in seen)
        return [s for s in seen if s in KEPT], ids

    KEPT = ("SELECT wing, generation FROM wings", "SELECT 1 FROM entries WHERE overrides IS NOT NULL LIMIT 1")
    demo_mem.warm_index(text=True)
    demo_mem.search("executor choice", use_cache=False)
    demo_mem.store.settle_log()
    assert statements("executor choice")[0] == []
    new_id = demo_mem.add("Zebra crossings need a lollipop man.", wing="lifecore_ros2").id
    read, ids = statements("zebra crossing lollipop")
    assert sorted(read) == sorted(KEPT) and new_id in ids
    assert statements("zebra crossing lollipop")[0] == []


@pytest.mark.parametrize("query, kw", QUERIES)
def test_lexical_scope_from_the_index_is_the_join(demo_mem, query, kw):
    """With the index warm, FTS5 matches are tested against its in-scope rowids instead of joined to
    entries: the same rows, in the same order, with the same bm25."""
    from memlens.retrieval.search import _Plan, lexical

    def rows():
        plan = _Plan(demo_mem, query, kw.get("active_wing"), kw.get("wings"), 10, "memory", None, None, None)
        return lexical(demo_mem, plan, plan.parsed.text, 50)

    joined = rows()
    assert joined, "the query should match something lexically"
    demo_mem.warm_index()
    assert rows() == joined


def test_lexical_scope_sees_writes_from_any_process(demo_mem):
    from memlens.retrieval.search import _Plan, lexical

    from .conftest import run_cli

    demo_mem.warm_index()
    plan = _Plan(demo_mem, "zebra lollipop", "lifecore_ros2", None, 10, "memory", None, None, None)
    assert lexical(demo_mem, plan, "zebra lollipop", 50) == []
    new_id = run_cli("--store", str(demo_mem.path), "add", "Zebra crossings need a lollipop man.",
                     "--wing", "lifecore_ros2").stdout.strip()
    rowid = demo_mem.conn.execute("SELECT rowid FROM entries WHERE id = ?", (new_id,)).fetchone()[0]
    assert [r for r, _ in lexical(demo_mem, plan, "zebra lollipop", 50)] == [rowid]
    demo_mem.set_status(new_id, "deprecated")
    assert lexical(demo_mem, plan, "zebra lollipop", 50) == []  # status left the scope: a new set
