"""Replay and ranking diff, golden queries, the impact preview, the access log, freshness and trace export."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

from memlens.attribution import acting_as, client_record
from memlens.errors import ValidationError
from memlens.replay import access, freshness, golden, impact, otel, storage
from memlens.replay.replay import apply_sets, kendall_tau, replay
from tests.conftest import logged_retrievals, run_cli, snapshot_store

QUERIES = [
    ("callbacks blocking executor", None),
    ("lifecycle node state transitions", None),
    ("python packaging virtual environment", "python"),
    ("testing with pytest fixtures", "python"),
    ("ROS 2 parameters declared at startup", "ros2"),
    ("how to log messages", None),
]


def _seed(mem, text: str, wing: str = "w", **kw):
    return mem.add(text, wing=wing, **kw)


def _retrieval_rows(conn) -> int:
    return conn.execute("SELECT count(*) FROM audit WHERE action = 'retrieval'").fetchone()[0]


# -- the log ---------------------------------------------------------------------------------------


def test_every_retrieval_logs_its_request_client_and_ranked_hits(mem):
    for t in ("alpha beta gamma", "beta delta", "gamma epsilon", "alpha zeta"):
        _seed(mem, t)
    b = mem.search("alpha gamma", active_wing="w", k=3, budget=500)
    (row,) = storage.logged(mem)
    assert row["request"] == {"query": "alpha gamma", "active_wing": "w", "k": 3, "profile": "memory", "budget": 500,
                              "weights_used": {"relevance": 1.0, "recency": 0.0, "salience": 0.0}}
    assert row["client"] == "api" and row["context"] is False
    assert [h["id"] for h in row["hits"]] == [r.entry.id for r in b.results]
    assert [h["score"] for h in row["hits"]] == [pytest.approx(r.score, abs=1e-6) for r in b.results]
    assert [h["relevance"] for h in row["hits"]] == [pytest.approx(r.components.relevance, abs=1e-6) for r in b.results]


def test_the_client_and_the_context_flag_are_logged(mem):
    e = _seed(mem, "alpha beta")
    mem.search("alpha", client="claude-code 1.2 (mcp)")  # named by the caller, not by what is set around the call
    with acting_as(client_record("other", "1.0", via="mcp")):  # who writes does not decide what a search logs
        mem.context("alpha", active_wing="w")
    rows = storage.logged(mem)
    assert [r["client"] for r in rows] == ["claude-code 1.2 (mcp)", "api"]
    assert [r["context"] for r in rows] == [False, True]
    acc = access.entry_access(mem, e.id)["accesses"]
    assert [(a["client"], a["in_context"], a["rank"]) for a in acc] == [("api", True, 1), ("claude-code 1.2 (mcp)", False, 1)]


def test_replay_rows_are_pruned_with_their_audit_rows(store_path, settings, hash_embedder):
    from memlens import Memory
    from memlens.store import retention

    with Memory.open(store_path, settings=settings, embedder=hash_embedder) as m:
        _seed(m, "alpha beta")
        for _ in range(6):
            m.search("alpha", use_cache=False)
        retention.prune_retrievals(m.conn, 2, 90)
        seqs = [r[0] for r in m.conn.execute("SELECT seq FROM audit WHERE action = 'retrieval' ORDER BY seq")]
        assert len(seqs) == 2
        assert [r["seq"] for r in storage.logged(m)] == seqs
        assert [r[0] for r in m.conn.execute("SELECT seq FROM retrieval_log ORDER BY seq")] == seqs


def test_kendall_tau_over_the_union():
    assert kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == -1.0
    # one swap of three: 2 concordant pairs, 1 discordant
    assert kendall_tau(["a", "b", "c"], ["a", "c", "b"]) == pytest.approx(1 / 3)
    t = kendall_tau(["a", "b"], ["a", "c"])  # b left, c entered: ties at the missing ends
    assert t is not None and -1 < t < 1
    assert kendall_tau(["a"], []) is None


# -- replay ----------------------------------------------------------------------------------------


def test_replays_are_not_logged_and_set_changes_nothing_on_disk(mem, store_path):
    # the best match of each query has the lowest salience: ranked by salience alone, every list turns over
    for t, sal in (("beta beta", 0.0), ("beta gamma delta epsilon zeta eta", 1.0), ("alpha alpha", 0.1),
                   ("alpha theta iota kappa lambda mu", 0.9), ("gamma", 0.2)):
        _seed(mem, t, salience=sal)
    for q in ("alpha", "gamma", "beta"):
        mem.search(q, active_wing="w")
    before = snapshot_store(store_path)
    weights_before = dict(mem.settings.retrieval.weights)
    report = replay(mem, sets=["retrieval.weights.salience=5", "retrieval.weights.relevance=0"])
    assert report["summary"]["replayed"] == 3
    assert report["summary"]["changed"] >= 1  # salience alone now orders them: some list must move
    moved = [m for q in report["queries"] for m in q["moved"]]
    whys = [q["why"][m["id"]] for q in report["queries"] for m in q["moved"]]
    assert moved and all(w.split(" ")[0] in ("salience", "relevance", "same") for w in whys)
    assert any(w.startswith("salience × weight 0.000 → ") for w in whys)
    assert snapshot_store(store_path) == before
    assert mem.settings.retrieval.weights == weights_before
    again = replay(mem)  # today's settings: nothing changed since the searches
    assert again["summary"]["changed"] == 0 and again["summary"]["kendall_tau"] == 1.0
    assert snapshot_store(store_path) == before


def test_bad_set_is_one_clear_error(settings):
    with pytest.raises(ValidationError, match="retrieval.weights"):
        apply_sets(settings, ["retrieval.weights.bogus=1"])
    with pytest.raises(ValidationError, match="section.key=value"):
        apply_sets(settings, ["nodot"])
    with pytest.raises(ValidationError, match="search.k"):
        apply_sets(settings, ["search.k=0"])


@pytest.mark.model
def test_replay_after_a_deprecation_reports_exactly_the_changed_queries(demo_mem):
    logged = {}
    for q, wing in QUERIES:
        b = demo_mem.search(q, active_wing=wing, k=5)
        logged[q] = [r.entry.id for r in b.results]
    # the top hit of the first query that is not a mandatory invariant
    b = demo_mem.search(QUERIES[0][0], k=5, use_cache=False)
    target = next(r.entry.id for r in b.results if "mandatory" not in r.flags)
    demo_mem.set_status(target, "deprecated")
    report = replay(demo_mem, last=len(QUERIES))
    # the oracle: each query searched afresh, independently of replay
    fresh = {q: [r.entry.id for r in demo_mem.search(q, active_wing=w, k=5, use_cache=False).results] for q, w in QUERIES}
    expected = {q for q in logged if fresh[q] != logged[q]}
    assert {q["query"] for q in report["queries"] if q["changed"]} == expected
    assert QUERIES[0][0] in expected
    for q in report["queries"]:
        assert q["entered"] == [i for i in fresh[q["query"]] if i not in logged[q["query"]]]
        assert q["left"] == [i for i in logged[q["query"]] if i not in fresh[q["query"]]]
        if target in logged[q["query"]]:
            assert target in q["left"] and q["why"][target].startswith("deprecated")
    assert report["summary"]["changed"] == len(expected)
    assert report["summary"]["top1_changed"] >= 1


# -- golden queries --------------------------------------------------------------------------------


@pytest.mark.model
def test_golden_fails_after_deprecation_and_passes_after_restore(demo_mem):
    q = "callbacks must never block the executor"
    top = demo_mem.search(q, k=3, use_cache=False).results[0].entry.id
    g = golden.add(demo_mem, q, top, within=3)
    assert golden.listing(demo_mem)[0]["id"] == g["id"]
    assert golden.check(demo_mem)["failed"] == 0
    demo_mem.set_status(top, "deprecated")
    report = golden.check(demo_mem)
    (c,) = report["checks"]
    assert not c["ok"] and c["stage"] == "status" and "deprecated" in c["why"]
    demo_mem.set_status(top, "active")
    assert golden.check(demo_mem)["passed"] == 1
    with pytest.raises(ValidationError, match="already expects"):
        golden.add(demo_mem, q, top, within=3)
    for empty in ("", "   \t"):
        with pytest.raises(ValidationError, match="a golden query needs words to search for"):
            golden.add(demo_mem, empty, top)
    assert len(golden.listing(demo_mem)) == 1


@pytest.mark.model
def test_golden_cli_exits_1_naming_the_failing_query(demo_mem):
    path = str(demo_mem.path)
    q = "single threaded executor default"
    top = demo_mem.search(q, k=3, use_cache=False).results[0].entry.id
    demo_mem.close()
    assert run_cli("--store", path, "golden", "add", q, "--expect", top, "--within", "3").returncode == 0
    ok = run_cli("--store", path, "golden", "check")
    assert ok.returncode == 0, ok.stderr
    assert run_cli("--store", path, "deprecate", top).returncode == 0
    bad = run_cli("--store", path, "golden", "check", "--json")
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["failed"] == 1
    assert q in bad.stderr and top in bad.stderr and "deprecated" in bad.stderr
    assert run_cli("--store", path, "restore", top).returncode == 0
    assert run_cli("--store", path, "golden", "check").returncode == 0
    missing = run_cli("--store", path, "golden", "add", q, "--expect", "no-such-id")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_golden_add_refuses_a_query_its_search_would_refuse_and_keeps_nothing(mem):
    """A golden query that can never run (an unknown wing, bad syntax) used to be kept, and `golden check` then
    failed on it for good: it is refused when added, with the error the search gives."""
    from memlens.errors import QueryError

    e = _seed(mem, "topic one about harbours", wing="w")
    for query, message in (("wing=nope topic", "unknown wing 'nope'"),
                           ('"unclosed topic', "unclosed quote"), ("room=nowhere topic", "unknown room 'nowhere'")):
        with pytest.raises(QueryError) as search_error:
            mem.search(query)
        with pytest.raises(QueryError, match=message) as golden_error:
            golden.add(mem, query, e.id)
        assert str(golden_error.value) == str(search_error.value)
    assert golden.listing(mem) == []
    golden.add(mem, "wing=w topic", e.id)
    assert golden.check(mem)["passed"] == 1


def test_golden_check_says_what_each_failing_query_expects_in_one_sentence(mem, capsys, monkeypatch):
    """The stderr line read 'fails: ID the query fails: ...' (the id and the reason run together)."""
    from memlens import embed
    from memlens.cli.main import main

    monkeypatch.setattr(embed, "make_embedder", lambda *a, **k: embed.HashEmbedder())
    e = _seed(mem, "topic one about harbours", wing="w")
    golden.add(mem, "harbours", e.id, active_wing="w", within=3)
    mem.set_status(e.id, "deprecated")
    path = str(mem.path)
    mem.close()
    assert main(["--store", path, "golden", "check"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"memlens: golden query 1 'harbours' fails: it expects {e.id} within 3: ") and "deprecated" in err
    assert len(err.splitlines()) == 1


# -- impact preview --------------------------------------------------------------------------------


@pytest.mark.model
def test_impact_preview_writes_nothing_and_names_what_would_change(demo_mem):
    for q, wing in QUERIES:
        demo_mem.search(q, active_wing=wing, k=5)
    top = demo_mem.search(QUERIES[0][0], k=5, use_cache=False).results
    target = next(r.entry.id for r in top if "mandatory" not in r.flags)
    golden.add(demo_mem, QUERIES[0][0], target, within=5)
    before = snapshot_store(demo_mem.path)
    report = impact.preview(demo_mem, lambda m: m.set_status(target, "deprecated"))
    assert snapshot_store(demo_mem.path) == before
    assert demo_mem.get(target).status.value == "active"
    assert [c["expect"] for c in report["golden"]] == [target] and report["golden"][0]["was_ok"]
    changed = {q["query"]: q for q in report["queries"]}
    assert QUERIES[0][0] in changed and target in changed[QUERIES[0][0]]["left"]
    logged = {e["seq"]: e["ts"] for e in storage.logged(demo_mem, last=50)}
    assert all(logged[q["seq"]] == q["ts"] for q in report["queries"])  # each named by its logged time, not now
    # the same write, done for real, changes the store: the preview's rollback is what kept it unchanged
    report2 = impact.preview(demo_mem, lambda m: m.delete(target))
    assert snapshot_store(demo_mem.path) == before and report2["golden"][0]["stage"] == "deleted"
    demo_mem.set_status(target, "deprecated")
    assert snapshot_store(demo_mem.path) != before


@pytest.mark.model
def test_dry_run_cli_writes_nothing(demo_mem):
    path = demo_mem.path
    demo_mem.search("callbacks blocking", k=5)
    target = demo_mem.search("callbacks blocking", k=5, use_cache=False).results[-1].entry.id
    demo_mem.close()
    before = snapshot_store(path)
    for cmd in (["deprecate", target], ["delete", target], ["edit", target, "title=Something else entirely"]):
        out = run_cli("--store", str(path), *cmd, "--dry-run", "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["written"] is False
        assert snapshot_store(path) == before
    bad = run_cli("--store", str(path), "edit", target, "colour=red", "--dry-run")
    assert bad.returncode == 2 and snapshot_store(path) == before
    bad = run_cli("--store", str(path), "edit", target, "meta=ops")
    assert bad.returncode == 2 and "field 'meta': expected a JSON object" in bad.stderr and snapshot_store(path) == before
    meta = run_cli("--store", str(path), "edit", target, 'meta={"owner": "ops"}', "--json")  # the meta of an export line
    assert meta.returncode == 0, meta.stderr
    assert json.loads(meta.stdout)["meta"] == {"owner": "ops"} and snapshot_store(path) != before
    text = run_cli("--store", str(path), "deprecate", target, "--dry-run")  # no golden query exists in this store
    assert text.returncode == 0 and "  golden queries: none defined (memlens golden add)" in text.stdout.splitlines()


# -- access log, freshness ---------------------------------------------------------------------------


def test_never_and_always_retrieved(mem):
    a = _seed(mem, "alpha beta", type="invariant")
    b = _seed(mem, "gamma delta")
    c = _seed(mem, "epsilon zeta")
    mem.search("gamma", active_wing="w", k=1)
    mem.search("gamma delta", active_wing="w", k=1)
    cov = access.coverage(mem)
    always = {e["id"] for e in cov["always"]}
    never = {e["id"] for e in cov["never"]}
    assert a.id in always  # a mandatory invariant of the active wing comes back every time
    assert c.id in never and b.id not in never


def test_freshness_and_reembed(mem):
    e = _seed(mem, "alpha beta")
    f = _seed(mem, "gamma delta")
    assert freshness.hit_freshness(mem, [e.id])[e.id]["fresh"] is True
    assert freshness.stale_count(mem) == 0
    # the text changed behind the engine's back: its vector no longer matches it
    mem.conn.execute("UPDATE entries SET text = 'omega omega' WHERE id = ?", (e.id,))
    assert freshness.hit_freshness(mem, [e.id])[e.id] == {"model": mem.model_id, "current_model": mem.model_id,
                                                          "hash_matches": False, "fresh": False}
    assert freshness.stale_count(mem) == 1
    report = freshness.reembed(mem)
    assert report == {"stale": 1, "reembedded": 1, "model": mem.model_id}
    assert freshness.stale_count(mem) == 0
    expected = mem.embedder.embed([mem.get(e.id).embed_text])[0]
    assert np.allclose(mem.vector(e.id), expected)
    assert mem.search("omega", k=1, use_cache=False).results[0].entry.id == e.id
    assert f.id  # untouched
    assert [a["action"] for a in mem.audit(limit=2)] == ["retrieval", "reembed"]


def test_reembed_switches_the_store_to_a_new_model_of_the_same_size(store_path, settings, hash_embedder):
    from memlens import Memory
    from memlens.embed import HashEmbedder

    with Memory.open(store_path, settings=settings, embedder=hash_embedder) as m:
        _seed(m, "alpha beta")
        _seed(m, "gamma delta")
    other = HashEmbedder()
    other.model_id = "another-model"
    with Memory.open(store_path, settings=settings, embedder=other) as m:
        report = freshness.reembed(m)
        assert report == {"stale": 2, "reembedded": 2, "model": "another-model"}
        assert m.model_id == "another-model" and freshness.stale_count(m) == 0
        m.search("alpha")  # the store's model is now the configured one
    with Memory.open(store_path, settings=settings, embedder=other) as m:
        assert m.model_id == "another-model"


# -- trace export ------------------------------------------------------------------------------------


class _Receiver(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, self.headers["Content-Type"], json.loads(body)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def _attrs(span) -> dict:
    out = {}
    for a in span["attributes"]:
        v = a["value"]
        out[a["key"]] = next(iter(v.values()))
    return out


def test_openinference_spans_shape(mem):
    _seed(mem, "alpha beta")
    _seed(mem, "alpha gamma")
    b = mem.search("alpha", k=2)
    body = otel.spans(b, end_ns=2_000_000_000)
    (span,) = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    attrs = _attrs(span)
    assert attrs["openinference.span.kind"] == "RETRIEVER" and attrs["input.value"] == "alpha"
    for i, r in enumerate(b.results):
        assert attrs[f"retrieval.documents.{i}.document.id"] == r.entry.id
        assert attrs[f"retrieval.documents.{i}.document.score"] == pytest.approx(r.score)
        assert attrs[f"retrieval.documents.{i}.document.content"] == r.entry.text
    assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
    assert int(span["startTimeUnixNano"]) <= int(span["endTimeUnixNano"]) == 2_000_000_000


@pytest.mark.model
def test_otlp_export_reaches_a_local_receiver(demo_mem):
    _Receiver.received = []
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = str(demo_mem.path)
    demo_mem.close()
    try:
        env = {"MEMLENS_EXPORT__OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}"}
        out = run_cli("--store", path, "search", "callbacks blocking", "-k", "3", "--format", "openinference", env=env)
        assert out.returncode == 0, out.stderr
        rep = run_cli("--store", path, "replay", "--last", "1", "--format", "openinference", env=env)
        assert rep.returncode == 0, rep.stderr
    finally:
        server.shutdown()
        thread.join(10)
    (req_path, ctype, body) = _Receiver.received[0]
    assert req_path == "/v1/traces" and ctype == "application/json"
    assert body == json.loads(out.stdout)
    res = _attrs(body["resourceSpans"][0]["resource"])
    assert res["service.name"] == "memlens"
    (span,) = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    attrs = _attrs(span)
    assert attrs["openinference.span.kind"] == "RETRIEVER" and attrs["input.value"] == "callbacks blocking"
    ids = [attrs[f"retrieval.documents.{i}.document.id"] for i in range(3)]
    assert all(ids) and "memlens.latency_ms.total" in attrs
    assert len(_Receiver.received) == 2 and _Receiver.received[1][2] == json.loads(rep.stdout)
    (replayed,) = rep_spans = json.loads(rep.stdout)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert len(rep_spans) == 1 and _attrs(replayed)["input.value"] == "callbacks blocking"
    assert [_attrs(replayed)[f"retrieval.documents.{i}.document.id"] for i in range(3)] == ids
    refused = run_cli("--store", path, "search", "x", "--format", "openinference",
                      env={"MEMLENS_EXPORT__OTLP_ENDPOINT": "http://127.0.0.1:9/"})
    assert refused.returncode == 1 and "OTLP collector" in refused.stderr


@pytest.mark.model
def test_replay_and_access_from_the_cli(demo_mem):
    path = str(demo_mem.path)
    demo_mem.close()
    q = "callbacks blocking executor"
    out = run_cli("--store", path, "search", q, "-k", "5", "--json")
    assert out.returncode == 0, out.stderr
    ids = [r["id"] for r in json.loads(out.stdout)["results"]]
    target = next(r["id"] for r in json.loads(out.stdout)["results"] if "mandatory" not in r["flags"])
    assert run_cli("--store", path, "deprecate", target).returncode == 0
    rep = run_cli("--store", path, "replay", "--since", "1h", "--json")
    assert rep.returncode == 0, rep.stderr
    data = json.loads(rep.stdout)
    (entry,) = data["queries"]
    assert {"query", "changed", "entered", "left", "moved"} <= set(entry)
    assert entry["query"] == q and entry["changed"] and target in entry["left"]
    assert all(set(m) == {"id", "from", "to"} for m in entry["moved"])
    assert data["summary"]["replayed"] == 1 and data["summary"]["changed"] == 1
    acc = run_cli("--store", path, "access", ids[-1], "--json")
    assert acc.returncode == 0, acc.stderr
    (a,) = json.loads(acc.stdout)["accesses"]
    assert a["client"] == "cli" and a["query"] == q and a["rank"] == len(ids)
    text = run_cli("--store", path, "replay", "--query", q)
    assert text.returncode == 0 and f"- {target}  left: deprecated" in text.stdout
    re = run_cli("--store", path, "reembed", "--json")
    assert re.returncode == 0 and json.loads(re.stdout)["stale"] == 0, re.stderr
    assert json.loads(run_cli("--store", path, "stats", "--json").stdout)["stale_vectors"] == 0
    for bad in (["replay", "--set", "retrieval.weights.nope=1"], ["replay", "--since", "yesterday-ish"],
                ["access"], ["golden", "remove", "99"]):
        r = run_cli("--store", path, *bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)
    # an age older than the calendar (it overflowed into a traceback): everything there is, as the oldest age would
    for since in ("99999999999d", "3000000d"):
        r = run_cli("--store", path, "replay", "--since", since, "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["summary"]["replayed"] == 1, r.stderr
        r = run_cli("--store", path, "review", "--since", since, "--json")
        assert r.returncode == 0, r.stderr


@pytest.mark.model
def test_mcp_dry_run_writes_nothing_and_searches_name_their_client(demo_store, tmp_path, real_embedder):
    import shutil

    from tests.mcp_helpers import result_data, run_client, stdio_params

    path = tmp_path / "mcp.db"
    shutil.copy(demo_store, path)
    q = "callbacks blocking executor"
    logged_before = logged_retrievals(path, 0)

    async def body(client):
        found = result_data(await client.call_tool("memory_search", {"query": q, "k": 5}))
        target = next(r["id"] for r in found["results"] if "mandatory" not in r.get("flags", []))
        why = result_data(await client.call_tool("memory_explain", {"query": q, "id": target}))
        assert why["verdict"] == "returned"
        logged_retrievals(path, logged_before + 2)  # the server's log rows of the search and of explain's search have landed
        before = snapshot_store(path)
        dry = result_data(await client.call_tool("memory_set_status", {"id": target, "status": "deprecated",
                                                                        "dry_run": True}))
        gone = result_data(await client.call_tool("memory_delete", {"id": target, "dry_run": True}))
        assert snapshot_store(path) == before
        return target, dry, gone

    target, dry, gone = run_client(stdio_params(path), body, name="pytest-agent", version="1.0")
    assert dry["written"] is False and gone["written"] is False
    assert any(target in qd["left"] for qd in dry["queries"]) and any(target in qd["left"] for qd in gone["queries"])
    from memlens import Memory
    from memlens.config import load_settings

    with Memory.open(path, settings=load_settings(), embedder=real_embedder, create=False) as m:
        accesses = storage.access(m, target)
    assert [a["client"] for a in accesses] == ["pytest-agent 1.0 (mcp)"] * 2  # the search, and explain's search
