"""Profiles (memory, academic, personal, conversation) of the one pipeline, with their default numbers; and `memlens eval`."""

import json

import pytest

from memlens.profiles import DEFAULT_PROFILES, load_profiles, route

from .conftest import run_cli


def test_profile_default_numbers():
    a, p, c = DEFAULT_PROFILES["academic"], DEFAULT_PROFILES["personal"], DEFAULT_PROFILES["conversation"]
    assert (a.kinds, a.min_query_tokens, a.year_boost, a.min_score, a.relative, a.cap) == (["document"], 2, 0.002, 0.72, 0.90, 5)
    assert (p.kinds, p.min_score, p.relative, p.cap, p.fallback) == (["fact"], 0.60, 0.90, 5, "personal_facts")
    assert (c.kinds, c.conversation_fusion, c.min_score, c.recent_turns, c.cap) == (
        ["turn"], {"raw": 0.6, "summary": 0.3, "recency": 0.1}, 0.48, 4, 6)


def test_memory_command_routes_to_conversation():
    profiles = load_profiles()
    assert route("/memory what did we decide", None, profiles)[1].name == "conversation"
    assert route("/memory what did we decide", "academic", profiles)[0] == "what did we decide"
    assert route("/memoryless", None, profiles)[1].name == "memory"


def test_profiles_are_configuration(tmp_path):
    profiles = load_profiles({"academic": {"cap": 3}, "mine": {"kinds": ["procedure"], "cap": 2}})
    assert profiles["academic"].cap == 3 and profiles["academic"].min_score == 0.72
    assert profiles["mine"].kinds == ["procedure"]
    cfg = tmp_path / "c.toml"
    cfg.write_text('[profiles.runbooks]\nkinds = ["procedure"]\ncap = 2\ndescription = "how-tos"\n')
    out = run_cli("--store", str(tmp_path / "x.db"), "profiles", "--json", env={"MEMLENS_CONFIG": str(cfg)})
    listed = json.loads(out.stdout)
    assert set(listed) >= {"memory", "academic", "personal", "conversation", "runbooks"}
    assert "runbooks" in run_cli("--store", str(tmp_path / "x.db"), "profiles", env={"MEMLENS_CONFIG": str(cfg)}).stdout


def test_unknown_profile_is_an_error(demo_mem):
    from memlens.errors import QueryError

    with pytest.raises(QueryError, match="unknown profile 'nope'"):
        demo_mem.search("x", profile="nope")


# academic ------------------------------------------------------------------------------------


def test_academic_year_boost_threshold_relative_and_cap(demo_mem):
    b = demo_mem.search("executors and callback groups in rclpy", profile="academic", wings=["ros2"], k=10)
    assert all(r.entry.kind.value == "document" for r in b.results)
    assert len(b.results) <= 5
    for r in b.results:
        year = r.entry.meta["year"]
        assert r.components.year_boost == pytest.approx((year - 2000) * 0.002)
        assert r.components.similarity + r.components.year_boost >= 0.72
    passed = [r.components.similarity + r.components.year_boost for r in b.results]
    if passed:
        assert min(passed) >= 0.90 * max(passed)
    stages = {d.stage for d in b.trace.dropped}
    assert stages <= {"threshold", "relative", "cap", "dedup"}
    for d in b.trace.dropped:
        if d.stage == "threshold":
            assert d.score < 0.72 and "< min 0.72" in d.detail


def test_academic_passes_a_close_question_and_drops_by_threshold(demo_mem):
    doc = demo_mem.get("ros2-doc-003")
    b = demo_mem.search(doc.text, profile="academic", wings=["ros2"])
    assert [r.entry.id for r in b.results][:1] == ["ros2-doc-003"]
    assert b.results[0].components.similarity > 0.9
    low = demo_mem.search("sourdough bread recipe baking", profile="academic", wings=["ros2"])
    assert low.results == [] and any(d.stage == "threshold" for d in low.trace.dropped)


def test_academic_needs_two_query_tokens(demo_mem):
    b = demo_mem.search("executors", profile="academic", wings=["ros2"])
    assert b.results == [] and "needs 2" in " ".join(b.trace.notes)
    assert demo_mem.explain("executors", "ros2-doc-003", profile="academic", wings=["ros2"])["stage"] == "profile"


# personal ------------------------------------------------------------------------------------


def test_personal_threshold_relative_cap(demo_mem):
    b = demo_mem.search("What editor do I use?", profile="personal", wings=["_global"])
    assert b.results and len(b.results) <= 5
    assert all(r.entry.kind.value == "fact" and r.entry.room == "profile" for r in b.results)
    sims = [r.components.similarity for r in b.results]
    assert min(sims) >= 0.60 and min(sims) >= 0.90 * max(sims)
    assert "fallback" not in b.results[0].flags


def test_personal_fallback_exposes_stored_facts_with_score_one(demo_mem):
    b = demo_mem.search("quantum chromodynamics lattice", profile="personal", wings=["_global"])
    assert 0 < len(b.results) <= 5
    assert all(r.score == 1.0 and "fallback" in r.flags and r.entry.room == "profile" for r in b.results)
    assert any(d.stage == "threshold" for d in b.trace.dropped)


# conversation --------------------------------------------------------------------------------


def test_conversation_fusion_merge_and_cap(demo_mem):
    b = demo_mem.search("/memory why did lidar_filter hang on shutdown", active_wing="lifecore_ros2")
    assert b.trace.profile == "conversation"
    assert 0 < len(b.results) <= 6
    assert all(r.entry.kind.value == "turn" for r in b.results)
    semantic = [r for r in b.results if r.components.summary is not None]
    for r in semantic:
        c = r.components
        assert c.relevance == pytest.approx(0.6 * c.similarity + 0.3 * c.summary + 0.1 * c.recency)
        assert c.relevance >= 0.48
    # the latest session's most recent turns are merged after the semantic hits, without duplicates
    ids = [r.entry.id for r in b.results]
    assert len(ids) == len(set(ids))
    latest_turns = ["turn-s2-003", "turn-s2-004", "turn-s2-005", "turn-s2-006"]
    assert "merged the 4 most recent turns of session 's2'" in b.trace.notes
    recent_in = [i for i in ids if i in latest_turns]
    assert recent_in == [i for i in latest_turns if i in ids]
    assert all(
        ids.index(r.entry.id) < ids.index(i) for r in semantic for i in recent_in if i not in {s.entry.id for s in semantic}
    )


def test_conversation_threshold(demo_mem):
    b = demo_mem.search("/memory sourdough bread", active_wing="lifecore_ros2")
    for d in b.trace.dropped:
        if d.stage == "threshold":
            assert d.score < 0.48


# eval ----------------------------------------------------------------------------------------


def test_eval_metrics(demo_mem, tmp_path):
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join(json.dumps(q) for q in [
        {"_id": "q1", "text": "callbacks must not block", "active_wing": "lifecore_ros2"},
        {"_id": "q2", "text": "default QoS depth for publishers", "wings": ["ros2"]},
        {"_id": "q3", "text": "no relevance judged"},
    ]) + "\n")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\tlc-arch-001\t2\nq1\tlc-anti-001\t1\nq2\tros2-conv-005\t1\n")
    from memlens.retrieval.evaluate import evaluate, load_qrels, load_queries

    rep = evaluate(demo_mem, load_queries(queries), load_qrels(qrels))
    assert rep["queries"] == 2 and rep["skipped"] == 1
    q1 = next(r for r in rep["per_query"] if r["id"] == "q1")
    assert q1["retrieved"][0] == "lc-arch-001" and q1["mrr@10"] == 1.0
    assert q1["recall@10"] == 1.0 and q1["ndcg@10"] > 0.9
    for m in ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"):
        assert 0 <= rep[m] <= 1
    assert rep["recall@1"] <= rep["recall@5"] <= rep["recall@10"]
    out = run_cli("--store", str(demo_mem.path), "eval", str(queries), str(qrels))
    assert out.returncode == 0 and "mrr@10" in out.stdout and "warning" not in out.stderr
    other = tmp_path / "other.tsv"
    other.write_text("q1\tlc-arch-001\t1\nq2\taddons:hello-world\t1\n")  # ids of another store
    out = run_cli("--store", str(demo_mem.path), "eval", str(queries), str(other))
    assert out.returncode == 0 and ("memlens: warning: 1 of the 2 relevant ids are not in the store "
                                    "(e.g. 'addons:hello-world')") in out.stderr, out.stderr
    bad = tmp_path / "bad.tsv"
    bad.write_text("q1\tlc-arch-001\n")
    err = run_cli("--store", str(demo_mem.path), "eval", str(queries), str(bad))
    assert err.returncode == 2 and "line 1: expected query-id" in err.stderr
    for grade in ("inf", "nan", "1e400", "5000"):
        bad.write_text(f"query-id\tcorpus-id\tscore\nq1\tlc-arch-001\t{grade}\n")
        err = run_cli("--store", str(demo_mem.path), "eval", str(queries), str(bad), "--json")
        assert err.returncode == 2 and "line 2: score" in err.stderr and "is not a relevance grade" in err.stderr
    # a question's text is searched as it is: a=b is not a filter, a lone double quote is no syntax error
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"_id": "q1", "text": 'set CALLBACKS=blocking "executor'}) + "\n")
    rep = evaluate(demo_mem, load_queries(odd), load_qrels(qrels))
    assert rep["queries"] == 1
