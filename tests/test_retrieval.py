"""Retrieval on real stores: multi-wing retrieval, weighted scoring, cache, metrics, rerank."""

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from memlens import Memory
from memlens.config import load_settings
from memlens.errors import ValidationError
from memlens.models import parse_ts, utcnow
from memlens.retrieval.scoring import RetrievalWeights, minmax, recency, recency_many

from .conftest import run_cli


def open_with(path, real_embedder, **overrides):
    return Memory.open(path, settings=load_settings(**overrides), embedder=real_embedder)


# -- 1. multi-wing retrieval ---------------------------------------------------------------


def test_active_wing_boost_is_configurable_and_recorded(demo_store, tmp_path, real_embedder):
    import shutil

    path = tmp_path / "d.db"
    shutil.copy(demo_store, path)
    finals = {}
    for boost in (1.0, 1.5):
        with open_with(path, real_embedder, retrieval={"active_wing_boost": boost}) as mem:
            b = mem.search("pytest fixtures and testing style", active_wing="python", k=10)
            assert b.trace.fusion["active_wing_boost"] == boost
            for r in b.results:
                expected = boost if r.entry.wing == "python" else 1.0
                assert r.components.boost == expected
                assert r.score == pytest.approx(r.components.relevance * expected)
            finals[boost] = {r.entry.id: r.score for r in b.results}
    common = set(finals[1.0]) & set(finals[1.5])
    python_ids = [i for i in common if i.startswith("py-")]
    assert python_ids and all(finals[1.5][i] == pytest.approx(finals[1.0][i] * 1.5) for i in python_ids)


def test_dedup_across_wings_keeps_higher_and_lists_every_wing(demo_mem):
    b = demo_mem.search("prefer pytest over unittest", wings=["python", "_global"], k=10)
    ids = [r.entry.id for r in b.results]
    assert ("py-conv-001" in ids) != ("glob-prof-003" in ids), "one copy of the same fact"
    kept = next(r for r in b.results if r.entry.id in ("py-conv-001", "glob-prof-003"))
    assert sorted(kept.found_in) == ["_global", "python"]
    loser = next(d for d in b.trace.dropped if d.id in ("py-conv-001", "glob-prof-003"))
    assert loser.stage == "dedup" and kept.entry.id in loser.detail
    assert loser.score <= kept.score


def test_same_text_in_two_wings_is_one_result(real_mem):
    real_mem.add("Always pin the Textual version exactly.", wing="python", salience=0.4)
    real_mem.add("Always pin the Textual version exactly.", wing="_global", salience=0.9)
    b = real_mem.search("pin textual version", wings=["python", "_global"])
    assert len(b.results) == 1
    assert sorted(b.results[0].found_in) == ["_global", "python"]
    assert [d.stage for d in b.trace.dropped] == ["dedup"]


# -- 2. weighted scoring ---------------------------------------------------------------------


def test_weights_from_dict_and_merge():
    w = RetrievalWeights.from_dict({"recency": 0.3})
    assert w == RetrievalWeights(relevance=1.0, recency=0.3, salience=0.0)
    assert w.merge({"salience": 0.2}) == RetrievalWeights(1.0, 0.3, 0.2)
    assert w.merge(RetrievalWeights(0.5, 0.0, 0.0)) == RetrievalWeights(0.5, 0.0, 0.0)
    assert RetrievalWeights.from_dict(None) == RetrievalWeights()
    with pytest.raises(ValidationError, match="unknown retrieval weight 'episodic'"):
        RetrievalWeights.from_dict({"episodic": 1})
    with pytest.raises(ValidationError, match="finite number"):
        w.merge({"recency": -1})


def test_minmax_edge_cases():
    assert minmax({}) == ({}, None)
    assert minmax({"a": 0.4}) == ({"a": 0.4}, [0.4, 0.4])  # a lone value is not inflated to 1.0
    assert minmax({"a": 2.0, "b": 2.0}) == ({"a": 1.0, "b": 1.0}, [2.0, 2.0])
    norm, bounds = minmax({"a": 1.0, "b": 3.0, "c": 2.0})
    assert norm == {"a": 0.0, "b": 1.0, "c": 0.5} and bounds == [1.0, 3.0]


def test_recency_many_matches_recency():
    now = datetime(2026, 11, 22, 12, 0, 0, 250_000, tzinfo=timezone.utc)
    stamps = ["2026-11-22T12:00:00Z", "2026-10-23T11:59:59.999999Z", "2025-01-01T00:00:00Z",
              "2026-11-23T00:00:00Z", "2026-11-01T08:30:00+02:00"]  # fmt: skip
    stamps += [stamps[2], stamps[0], stamps[2]]  # repeated stamps (entries written together) keep their places
    for half_life in (30.0, 7.5, 0.0):
        expected = [(round(r, 6), round(a, 3)) for r, a in (recency(parse_ts(x), now, half_life) for x in stamps)]
        assert recency_many(stamps, now, half_life) == expected
    assert recency_many([], now, 30.0) == []


def test_recency_many_matches_a_vectorised_reference_on_random_stamps():
    """Against the same formula over numpy arrays (microseconds apart, in days): equal after the trace's
    rounding for every stamp, half-life and moment tried."""
    rng = np.random.default_rng(11)
    base = np.datetime64("2020-01-01T00:00:00", "us")
    span = 7 * 365 * 86_400 * 10**6
    for _ in range(300):
        now64 = base + np.timedelta64(int(rng.integers(0, span)), "us")
        ts = base + rng.integers(0, span, size=20).astype("timedelta64[us]")
        stamps = [str(t) + "Z" for t in ts]
        now = now64.astype(datetime).replace(tzinfo=timezone.utc)
        for half_life in (0.0, 0.5, 30.0, 365.25):
            ages = np.maximum((now64 - ts).astype(np.float64) / 86_400e6, 0.0)
            scores = np.exp(-math.log(2) * ages / half_life) if half_life > 0 else np.ones_like(ages)
            expected = [(round(r, 6), round(a, 3)) for r, a in zip(scores.tolist(), ages.tolist())]
            assert recency_many(stamps, now, half_life) == expected


def test_recency_decay_half_life():
    now = utcnow()
    assert recency(now, now, 30)[0] == pytest.approx(1.0)
    assert recency(now - timedelta(days=30), now, 30)[0] == pytest.approx(0.5)
    assert recency(now - timedelta(days=60), now, 30)[0] == pytest.approx(0.25)


def test_default_weights_keep_relevance_order(real_mem):
    for i, text in enumerate(["executor threads and callbacks", "callbacks in executors", "a recipe for bread"]):
        real_mem.add(text, wing="w", salience=[0.1, 0.9, 1.0][i])
    b = real_mem.search("callbacks executor", active_wing="w")
    rel = [r.components.relevance for r in b.results]
    assert rel == sorted(rel, reverse=True)
    assert b.trace.weights == {"relevance": 1.0, "recency": 0.0, "salience": 0.0}


def test_recency_and_salience_weights_reorder(real_mem):
    now = utcnow()
    old = real_mem.add("The executor must be single threaded.", wing="w", created_at=now - timedelta(days=400), salience=0.1)
    new = real_mem.add("Executors must be single-threaded.", wing="w", created_at=now - timedelta(days=1), salience=0.9)
    plain = real_mem.search("single threaded executor", active_wing="w", now=now)
    tuned = real_mem.search("single threaded executor", active_wing="w", now=now, weights={"recency": 1.0, "salience": 1.0})
    scores = {r.entry.id: r for r in tuned.results}
    assert scores[new.id].score > scores[old.id].score
    assert scores[old.id].components.age_days == pytest.approx(400, abs=0.01)
    for r in tuned.results:
        c = r.components
        assert r.score == pytest.approx((c.relevance + c.recency + c.salience) * c.boost)
    assert tuned.trace.weights == {"relevance": 1.0, "recency": 1.0, "salience": 1.0}
    assert plain.results  # the plain order is by relevance alone


def test_normalisation_is_per_kind_and_in_the_trace(demo_mem):
    b = demo_mem.search("executor shutdown hang", active_wing="lifecore_ros2", k=15)
    kinds = {r.entry.kind.value for r in b.results}
    assert len(kinds) > 1
    assert kinds <= set(b.trace.normalisation)
    for kind in kinds:
        members = [r for r in b.results if r.entry.kind.value == kind]
        assert all(0 <= r.components.similarity_norm <= 1 for r in members)


# -- 3. cache ------------------------------------------------------------------------------


def test_cache_hit_then_invalidation_by_a_write_to_a_searched_wing(demo_mem):
    q = dict(active_wing="lifecore_ros2")
    first = demo_mem.search("callbacks blocking", **q)
    assert first.trace.cache_hit is False
    second = demo_mem.search("callbacks blocking", **q)
    assert second.trace.cache_hit is True and second.trace.cache.age_s is not None
    assert [r.entry.id for r in second.results] == [r.entry.id for r in first.results]
    e = demo_mem.add("Unrelated wing write.", wing="python")
    assert demo_mem.search("callbacks blocking", **q).trace.cache_hit is True, "python is not searched"
    e = demo_mem.add("Timer callbacks must finish within 10 ms.", wing="lifecore_ros2", type="invariant")
    third = demo_mem.search("callbacks blocking", **q)
    assert third.trace.cache_hit is False
    inv = third.trace.cache.invalidated_by
    assert inv["entry_id"] == e.id and inv["action"] == "add" and inv["wing"] == "lifecore_ros2"
    assert e.id in [r.entry.id for r in third.results]  # the new invariant is mandatory


def test_cache_invalidated_by_another_process(demo_mem):
    demo_mem.search("callbacks blocking", active_wing="lifecore_ros2")
    assert demo_mem.search("callbacks blocking", active_wing="lifecore_ros2").trace.cache_hit
    out = run_cli("--store", str(demo_mem.path), "add", "Written by an agent in another process.", "--wing", "_global")
    assert out.returncode == 0, out.stderr
    b = demo_mem.search("callbacks blocking", active_wing="lifecore_ros2")
    assert b.trace.cache_hit is False
    assert b.trace.cache.invalidated_by["entry_id"] == out.stdout.strip()


def test_cache_key_covers_user_wings_and_parameters(demo_mem):
    demo_mem.search("executor", active_wing="lifecore_ros2", user="ana")
    assert demo_mem.search("executor", active_wing="lifecore_ros2", user="ana").trace.cache_hit
    assert not demo_mem.search("executor", active_wing="lifecore_ros2", user="bo").trace.cache_hit
    assert not demo_mem.search("executor", active_wing="ros2", user="ana").trace.cache_hit
    assert not demo_mem.search("executor", active_wing="lifecore_ros2", user="ana", k=3).trace.cache_hit
    assert not demo_mem.search("executor", active_wing="lifecore_ros2", user="ana", weights={"recency": 0.5}).trace.cache_hit
    key = demo_mem.search("executor", active_wing="lifecore_ros2", user="ana").trace.cache.key
    assert key.startswith("retrieval:ana:lifecore_ros2,_global:")


def test_cache_ttl_and_disable(demo_store, tmp_path, real_embedder):
    import shutil

    path = tmp_path / "d.db"
    shutil.copy(demo_store, path)
    now = [1000.0]  # a fake clock: a loaded machine must not make the entry expire early
    with open_with(path, real_embedder, cache={"ttl_seconds": 0.2}) as mem:
        mem.cache.clock = lambda: now[0]
        mem.search("executor", active_wing="ros2")
        now[0] += 0.1
        assert mem.search("executor", active_wing="ros2").trace.cache_hit
        now[0] += 0.3
        b = mem.search("executor", active_wing="ros2")
        assert not b.trace.cache_hit and b.trace.cache.invalidated_by["reason"] == "ttl"
    with open_with(path, real_embedder, cache={"enabled": False}) as mem:
        mem.search("executor", active_wing="ros2")
        b = mem.search("executor", active_wing="ros2")
        assert not b.trace.cache_hit and b.trace.cache.enabled is False


# -- 4. metrics ----------------------------------------------------------------------------


def test_every_retrieval_is_logged_with_metrics(demo_mem):
    demo_mem.search("callbacks blocking", active_wing="lifecore_ros2")
    demo_mem.search("callbacks blocking", active_wing="lifecore_ros2")
    rows = demo_mem.retrievals()
    assert len(rows) == 2
    hit, miss = rows
    assert hit["cache_hit"] is True and miss["cache_hit"] is False
    assert set(miss["latency_ms"]) == {"parse", "embed", "vector", "lexical", "score", "rerank", "policy", "budget", "total"}
    assert miss["latency_ms"]["embed"] > 0
    assert miss["wings_searched"] == ["lifecore_ros2", "_global"]
    assert sum(miss["counts"].values()) == miss["total_count"] == sum(miss["results_per_wing"].values())
    assert miss["user"] == "default" and len(miss["query_hash"]) == 16


def test_audit_level_writes_logs_no_reads(demo_store, tmp_path, real_embedder):
    import shutil

    path = tmp_path / "d.db"
    shutil.copy(demo_store, path)
    with open_with(path, real_embedder, audit={"level": "writes"}) as mem:
        mem.search("executor", active_wing="ros2")
        assert mem.retrievals() == []


def test_stats_retrievals_cli(demo_mem):
    # a search's log rows wait up to a second for others to share their transaction; reading the log in this process
    # writes them first, as a process that exits does: then another process (the CLI) sees them
    demo_mem.search("executor choice", active_wing="ros2", use_cache=False)
    assert len(demo_mem.retrievals()) == 1
    first = run_cli("--store", str(demo_mem.path), "stats", "--retrievals").stdout
    assert "cache hit rate 0.0%  (no hits yet)" in first  # not a p50 of hits that never happened
    for _ in range(3):
        demo_mem.search("callbacks blocking", active_wing="lifecore_ros2")
    assert len(demo_mem.retrievals()) == 4
    out = run_cli("--store", str(demo_mem.path), "stats", "--retrievals", "--json")
    import json

    st = json.loads(out.stdout)
    assert st["retrievals"] == 4 and st["cache_hits"] == 2
    assert st["cache_hit_rate"] == pytest.approx(2 / 4)
    assert st["stages"]["embed"]["p50"] > 0 and st["stages"]["total"]["p95"] >= st["stages"]["total"]["p50"]
    text = run_cli("--store", str(demo_mem.path), "stats", "--retrievals").stdout
    assert "cache hit rate 50.0%  (hits: p50 " in text and "embed" in text


# -- 2.3 cross-encoder rerank ------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory, settings):
    """A small cross-encoder built here: no cross-encoder weights ship in any reachable package."""
    import shutil

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from memlens.embed import resolve_model

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("ce")
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, num_labels=1, max_position_embeddings=512)
    BertForSequenceClassification(cfg).save_pretrained(out)
    src = resolve_model(settings.embedding).path
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / f, out / f)
    return out


def test_rerank_off_by_default(demo_mem):
    b = demo_mem.search("executor", active_wing="ros2")
    assert b.trace.rerank["applied"] is False and "disabled" in b.trace.rerank["reason"]
    assert all(r.components.rerank is None for r in b.results)


def test_rerank_with_a_local_cross_encoder(demo_store, tmp_path, real_embedder, tiny_cross_encoder):
    import shutil

    from memlens.retrieval.rerank import load_cross_encoder

    path = tmp_path / "d.db"
    shutil.copy(demo_store, path)
    with open_with(path, real_embedder, rerank={"enabled": True, "model": str(tiny_cross_encoder), "top_n": 8}) as mem:
        b = mem.search("executor threads", wings=["ros2"], k=5)
        tr = b.trace.rerank
        assert tr["applied"] is True and tr["top_n"] == 8 and len(tr["input"]) == 8
        ce = load_cross_encoder(str(tiny_cross_encoder))
        for r in b.results:
            c = r.components
            assert c.rerank is not None and c.rank_before_rerank is not None
            logit = float(ce.predict([("executor threads", r.entry.embed_text)])[0])
            import math

            assert c.rerank == pytest.approx(1 / (1 + math.exp(-logit)), abs=1e-5)
            assert r.score == pytest.approx(c.rerank * c.boost)
        assert [d.stage for d in b.trace.dropped if d.stage == "rerank"], "candidates beyond the window are dropped"
        # the output order in the trace is the order of the rerank scores
        by_id = {r.entry.id: r.components.rerank for r in b.results}
        out = [i for i in tr["output"] if i in by_id]
        assert [by_id[i] for i in out] == sorted(by_id.values(), reverse=True)


def test_rerank_missing_model_is_a_clear_error(demo_store, tmp_path, real_embedder):
    import shutil

    from memlens.errors import ModelError

    path = tmp_path / "d.db"
    shutil.copy(demo_store, path)
    with open_with(path, real_embedder, rerank={"enabled": True, "model": str(tmp_path / "none")}) as mem:
        with pytest.raises(ModelError, match="cross-encoder not found"):
            mem.search("executor", active_wing="ros2")


def test_cached_results_are_copies_and_task_writes_keep_the_cache(demo_mem):
    first = demo_mem.search("executor threads")  # unscoped: every wing
    first.results[0].flags.append("edited-by-caller")
    first.results[0].rank = 99
    demo_mem.tasks.complete("t-cache", "unrelated working-memory write")
    hit = demo_mem.search("executor threads")
    assert hit.trace.cache_hit, "a working-memory write is not a write to a wing"
    assert hit.results[0].rank == 1
    hit.results[1].rank = 42
    assert demo_mem.search("executor threads").results[1].rank == 2
