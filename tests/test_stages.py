"""Unit tests of the retrieval pipeline's stages against an in-memory fake store (no SQLite, no model)."""

from __future__ import annotations

import inspect
from datetime import datetime, timezone

import numpy as np
import pytest

from memlens.errors import QueryError
from memlens.limits import MAX_QUERY_TERMS
from memlens.profiles import Profile
from memlens.retrieval import candidates, hooks, pipeline, stages
from memlens.retrieval.run import Run
from memlens.store.reads import Reads, Scope
from memlens.store.sqlite import SqliteStore
from memlens.trace import STAGES

from .fake_store import FakeEngine, FakeStore

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


@pytest.fixture
def engine(settings):
    store = FakeStore()
    store.add("Lifecycle callbacks run in the executor thread.", wing="ros", room="architecture", type="invariant",
              kind="fact")
    store.add("Parameters are declared in on_configure.", wing="ros", room="architecture", type="decision", key="params")
    store.add("Parameters are declared in the constructor.", wing="web", type="decision", key="params")
    store.add("Callbacks should be short; long work goes to a worker.", wing="ros", type="pattern")
    store.add("A note about coffee and callbacks.", wing="_global", type="note", salience=0.9)
    return FakeEngine(settings, store)


def run_until(engine: FakeEngine, query: str, last: str, **options) -> Run:
    """The pipeline's own stages, in its order, up to and including ``last``."""
    opts = {"active_wing": None, "wings": None, "k": None, "profile": "memory", "budget": None, "user": None,
            "weights": None, **options}
    run = Run(ctx=engine.context(), query=query, options=opts, use_cache=False, now=NOW)
    for stage in pipeline.PIPELINE:
        if stage.when is None or stage.when(run):
            stage.run(run)
        if stage.name == last:
            return run
    raise AssertionError(f"no stage {last!r}")


def test_fake_and_sqlite_implement_every_read():
    wanted = {n for n, _ in inspect.getmembers(Reads, inspect.isfunction) if not n.startswith("_")}
    assert {"knn", "lexical", "rows", "vectors", "generations"} <= wanted
    for impl in (FakeStore, SqliteStore):
        assert wanted <= {n for n in dir(impl) if not n.startswith("_")}, impl
        assert callable(impl.knn)
    assert SqliteStore.lexical_scorer == "fts5-bm25" and SqliteStore.backend == "sqlite"


def test_plan_scope_from_the_store(engine):
    run = run_until(engine, "callbacks", "plan", active_wing="ros")
    assert run.plan.scope == ["ros", "_global"]
    assert run.plan.search_scope == Scope(["ros", "_global"], None, None, None, ["active", "under_review"])
    with pytest.raises(QueryError, match="unknown wing 'nope'"):
        run_until(engine, "callbacks", "plan", wings=["nope"])


def test_gate_says_why_nothing_is_searched(engine):
    run = run_until(engine, "kind=document coffee", "gate", profile="personal")
    assert run.found.mode is None and "allows no kind" in run.trace.notes[0]
    run = run_until(engine, "callbacks", "gate", profile="academic")
    assert run.found.mode is None and "needs 2" in run.trace.notes[0]
    assert run_until(engine, "type=decision", "gate").found.mode == "listing"
    assert run_until(engine, "callbacks", "gate").found.mode == "text"


def test_vector_stage_records_the_index_and_the_lexical_scorer(engine):
    run = run_until(engine, "parameters declared", "vector")
    assert run.trace.fusion["vector_index"] == "fake"
    assert run.trace.fusion["lexical"] == "fake-term-count"
    store, q = engine.reads, engine.embed(["parameters declared"])[0]
    assert max(run.found.sims, key=run.found.sims.get) == max(store.vecs, key=lambda r: float(store.vecs[r] @ q))
    assert sorted(run.found.vec_rank.values()) == list(range(1, len(run.found.sims) + 1))


def test_degenerate_query_vector_skips_the_knn(engine, monkeypatch):
    monkeypatch.setattr(engine, "embed", lambda texts: np.zeros((1, 64), dtype=np.float32))
    run = run_until(engine, "parameters", "lexical")
    assert "knn" not in engine.reads.calls and run.found.sims == {}
    assert any("degenerate" in n for n in run.trace.notes)
    assert run.found.bm25 and run.found.ordered == list(run.found.bm25)


def test_lexical_stage_orders_the_union_and_notes_the_term_cut(engine):
    run = run_until(engine, "parameters declared", "lexical")
    assert list(run.found.bm25) == [r for r, _ in engine.reads.lexical("parameters declared", run.plan.search_scope, 50)]
    assert run.found.ordered[: len(run.found.sims)] == list(run.found.sims)
    words = " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 3))
    run = run_until(engine, words, "lexical")
    assert f"first {MAX_QUERY_TERMS} of the query's {MAX_QUERY_TERMS + 3}" in " ".join(run.trace.notes)


def test_load_pulls_in_mandatory_invariants_and_reports_damaged_rows(engine):
    store = engine.reads
    store.add("Unrelated invariant about logging format.", wing="ros", type="invariant")
    bad = store.add("Coffee callbacks broken row.", wing="ros", type="note")
    store.damage(bad.id, kind="sandwich")
    run = run_until(engine, "coffee callbacks", "load", active_wing="ros")
    by_id = {c.id: c for c in run.pool}
    assert bad.id not in by_id and any(bad.id in n and "damaged" in n for n in run.trace.notes)
    inv = [c for c in run.pool if c.type == "invariant"]
    assert inv and all(c.mandatory and c.keep for c in inv)
    assert run.trace.candidates["pool"] == len(run.pool)
    assert all(c.comps.similarity is not None for c in run.pool)  # lexical-only ones get their cosine too


def test_load_pulls_in_an_override_of_a_candidate(engine):
    store = engine.reads
    old = store.add("Deploys happen on Fridays.", wing="ros")
    # a zero vector and no shared word: neither generator finds it, only the override link does
    new = store.add("Release policy changed entirely, see wiki.", wing="ros", overrides=old.id,
                    vector=np.zeros(64, dtype=np.float32))
    run = run_until(engine, "deploys fridays", "load", wings=["ros"])
    assert new.id in {c.id for c in run.pool} and run.trace.candidates["pulled_in"] >= 1
    run = run_until(engine, "deploys fridays", "policy", wings=["ros"])
    assert old.id not in {c.id for c in run.pool}
    assert any(d.id == old.id and d.stage == "override" for d in run.trace.dropped)


def test_staged_rows_are_never_candidates(engine):
    store = engine.reads
    e = store.add("Staged coffee entry.", wing="ros")
    store.staged.add(store.rowid(e.id))
    run = run_until(engine, "staged coffee", "load")
    assert e.id not in {c.id for c in run.pool}


def test_score_components_and_final(engine):
    run = run_until(engine, "parameters declared", "score", active_wing="ros")
    for c in run.pool:
        comps = c.comps
        assert comps.boost == (engine.settings.retrieval.active_wing_boost if c.wing == "ros" else 1.0)
        w = run.plan.weights
        assert comps.final == pytest.approx((w.relevance * comps.relevance + w.recency * comps.recency
                                             + w.salience * comps.salience) * comps.boost)
        sv = engine.settings.search
        assert comps.relevance == pytest.approx(sv.vector_weight * comps.similarity_norm + sv.lexical_weight * comps.bm25_norm)


def test_listing_orders_by_salience_without_text(engine):
    run = run_until(engine, "type=decision|note", "score")
    assert all(c.comps.relevance == c.comps.salience for c in run.pool)


def test_year_boost_hook(settings):
    store = FakeStore()
    store.add("Attention results on translation benchmarks.", wing="papers", kind="document", meta={"year": 2020})
    store.add("Attention results on parsing benchmarks.", wing="papers", kind="document", meta={"year": "2019"})
    engine = FakeEngine(settings, store)
    run = run_until(engine, "attention results benchmarks", "score", profile="academic")
    boosts = {c.entry.meta["year"]: c.comps.year_boost for c in run.pool}
    assert boosts == {2020: pytest.approx(0.04), "2019": None}


def test_conversation_profile_merges_recent_turns_and_keeps_transcript_order(settings):
    store = FakeStore()
    for i, text in enumerate(["we talked about the deadline", "lunch plans", "the weather", "more weather", "bye"]):
        store.add(text, wing="chat", kind="turn", meta={"session_id": "s1"},
                  created_at=datetime(2026, 5, 1, 10, i, tzinfo=timezone.utc))
    engine = FakeEngine(settings, store)
    run = run_until(engine, "/memory deadline", "order")
    assert run.hooks.order is hooks.transcript and run.hooks.merge is hooks.merge_recent_turns
    assert any("most recent turns of session 's1'" in n for n in run.trace.notes)
    assert len(run.pool) <= run.plan.limit
    recent = [c.entry.created_at for c in run.pool if c.source == "recent"]
    assert recent and recent == sorted(recent)  # oldest of the recent first, as in a transcript
    assert all(c.comps.summary is not None for c in run.pool if c.source == "search")


def test_personal_fallback_when_nothing_passes(settings):
    store = FakeStore()
    store.add("My name is Ada.", wing="me", kind="fact", room="profile", salience=0.9)
    store.add("I live in Lyon.", wing="me", kind="fact", room="profile", salience=0.4)
    engine = FakeEngine(settings, store)
    run = run_until(engine, "zzz qqq", "policy", profile="personal")
    assert [c.source for c in run.pool] == ["fallback", "fallback"]
    assert [c.score for c in run.pool] == [1.0, 1.0]
    assert run.pool[0].entry.text == "My name is Ada."


def test_a_profile_is_data_plus_the_hooks_it_asks_for():
    assert hooks.hooks_for(Profile(name="plain")) == hooks.Hooks()
    custom = hooks.hooks_for(Profile(name="chatty", recent_turns=2, fallback="personal_facts", year_boost=0.01))
    assert (custom.merge, custom.order, custom.fallback, custom.relevance) == (
        hooks.merge_recent_turns, hooks.transcript, hooks.personal_facts, hooks.year_boosted)
    conv = hooks.hooks_for(Profile(name="c", conversation_fusion={"raw": 1.0}, year_boost=0.01))
    assert conv.relevance is hooks.conversation  # conversation fusion replaces the fused relevance


def test_order_stage_caps_and_orders_by_authority(engine):
    run = run_until(engine, "callbacks parameters declared", "order", k=2)
    types = [c.type for c in run.pool]
    authority = {"invariant": 0, "decision": 1, "pattern": 2, "note": 3}
    assert types == sorted(types, key=authority.get)
    assert len([c for c in run.pool if not c.keep]) <= 2


def test_pipeline_times_each_stage_into_its_latency_key(engine, monkeypatch):
    clock = iter(range(10_000))
    monkeypatch.setattr(pipeline.time, "perf_counter", lambda: float(next(clock)))
    b = pipeline.search(engine.context(), "callbacks", active_wing="ros", use_cache=False, now=NOW)
    lat = b.trace.latency_ms
    assert list(lat) == list(STAGES)
    # every timed stage took exactly one tick of the fake clock (1000 ms); lexical counts handing it to the worker
    # (here: finding it cannot) and the lexical stage, score counts load and score, policy the code gates, the
    # policy and the order
    assert lat["parse"] == lat["embed"] == lat["vector"] == lat["rerank"] == lat["budget"] == 1000.0
    assert lat["lexical"] == lat["score"] == 2000.0 and lat["policy"] == 3000.0
    assert lat["total"] > sum(v for k, v in lat.items() if k != "total")
    assert engine.logged == [b]


def test_pipeline_skips_the_stages_that_do_not_apply(engine):
    b = pipeline.search(engine.context(), "type=decision", use_cache=False, now=NOW)
    assert b.trace.latency_ms["embed"] == b.trace.latency_ms["lexical"] == 0.0
    assert "vector_index" not in b.trace.fusion and b.results


def test_cache_hit_ends_the_run_at_the_cache_stage(engine):
    first = pipeline.search(engine.context(), "callbacks", now=NOW)
    again = pipeline.search(engine.context(), "callbacks", now=NOW)
    assert not first.trace.cache_hit and again.trace.cache_hit
    assert [r.entry.id for r in again.results] == [r.entry.id for r in first.results]
    assert all(v == 0.0 for k, v in again.trace.latency_ms.items() if k != "total")
    engine.reads.add("A new callbacks entry.", wing="ros")  # a write bumps the wing's generation
    third = pipeline.search(engine.context(), "callbacks", now=NOW)
    assert not third.trace.cache_hit and third.trace.cache.invalidated_by is not None
    assert len(engine.logged) == 3


def test_results_flag_and_count(engine):
    run = run_until(engine, "callbacks", "count", active_wing="ros")
    assert run.bundle is not None
    assert sum(run.trace.results_per_wing.values()) == len(run.bundle.results)
    assert all("active_wing" in r.flags for r in run.bundle.results if r.entry.wing == "ros")
    assert [r.rank for r in run.bundle.results] == list(range(1, len(run.bundle.results) + 1))


def test_stage_functions_are_short():
    for module in (candidates, stages, hooks, pipeline):
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__:
                assert len(inspect.getsource(fn).splitlines()) <= 60, f"{module.__name__}.{name}"


def test_sqlite_trace_names_the_index_and_scorer_for_a_degenerate_query(mem, monkeypatch):
    """On the real SQLite store: a query whose vector is degenerate still says which index and scorer ran."""
    mem.add("Parameters are declared in on_configure.", wing="ros")
    monkeypatch.setattr(mem, "embed", lambda texts: np.zeros((1, mem.dim), dtype=np.float32))
    b = mem.search("parameters declared", wings=["ros"], use_cache=False)
    assert (b.trace.fusion["vector_index"], b.trace.fusion["lexical"]) == ("sqlite-vec", "fts5-bm25")
    assert any("degenerate" in n for n in b.trace.notes) and b.results


def _pool(scores: list[float], hashes: list[str] | None = None, keys: list[str | None] | None = None) -> list:
    from memlens.retrieval.policy import Candidate
    from memlens.trace import Components

    out = []
    for i, s in enumerate(scores):
        key = keys[i] if keys else None
        row = (f"e{i}", "w", "", "fact", "note", "active", "t", "x", key, 0.5, None, "2026-01-01T00:00:00Z",
               "2026-01-01T00:00:00Z", "{}")
        comps = Components()
        comps.final = s
        out.append(Candidate((i, hashes[i] if hashes else f"h{i}", *row), comps))
    return out


def test_by_score_is_the_order_of_minus_score_ties_in_pool_order():
    from memlens.retrieval.policy import by_score

    rng = np.random.default_rng(7)
    for _ in range(200):
        pool = _pool([float(x) for x in rng.integers(0, 5, size=int(rng.integers(0, 30))) / 4])
        assert by_score(pool) == sorted(pool, key=lambda c: -c.score)


def test_dedup_without_shared_text_or_keys_keeps_the_pool_as_it_is():
    from memlens.retrieval.policy import dedup_and_conflicts
    from memlens.trace import Trace

    trace = Trace(query="q", text="q")
    pool = _pool([0.3, 0.9, 0.5])
    out = dedup_and_conflicts(pool, {}, trace, 0.95)
    assert out == pool and out is not pool and not trace.dropped and not trace.conflicts
    same_text = _pool([0.3, 0.9, 0.5], hashes=["h", "x", "h"])  # the lower-scored copy goes
    assert [c.id for c in dedup_and_conflicts(same_text, {}, trace, 0.95)] == ["e1", "e2"]
    keyed = _pool([0.3, 0.9], keys=[None, "k"])
    assert dedup_and_conflicts(keyed, {}, trace, 0.95) == keyed
