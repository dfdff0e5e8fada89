"""An agent's session through the official MCP SDK client, then its review from the ``memlens`` command.

The agent (``tests/review_session.py``) makes 20 writes to a copy of the demo memory over stdio: 3 near-
duplicates, 2 contradictions of the shared wing's decisions without keys, an edit of an invariant, a
deletion and 13 plain additions. The inbox must list exactly those writes with the evidence each one
calls for; the reviewer then merges, rejects, accepts (one by one and in bulk) and undoes from the CLI,
and at the end every entry and every audit row is accounted for.
"""

from __future__ import annotations

import json
import shutil

import pytest

from .conftest import run_cli
from .mcp_helpers import run_client, stdio_params
from .review_session import DESCRIBED, run_mcp, writes

pytestmark = pytest.mark.model


def cli(path, *args):
    r = run_cli("--store", str(path), *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if "--json" in args else r.stdout


def rows(path):
    from memlens.store import db

    conn = db.connect(path, create=False)
    try:
        return conn.execute("SELECT seq, action, entry_id, before, after, detail FROM audit WHERE action != 'retrieval'"
                            " ORDER BY seq").fetchall()
    finally:
        conn.close()


def entries(path, settings, embedder):
    from memlens import Memory

    with Memory.open(path, settings=settings, embedder=embedder) as mem:
        return {e.id: e for e in mem.entries()}


def test_an_agents_session_reviewed_from_the_cli(demo_store, tmp_path, settings, real_embedder):
    path = tmp_path / "session.db"
    shutil.copy(demo_store, path)
    demo_ids, audit_before = set(entries(path, settings, real_embedder)), rows(path)

    ids = run_client(stdio_params(path), run_mcp, name="session-agent", version="0.9")
    script = {w.name: w for w in writes()}
    by_id = {ids[name]: w for name, w in script.items()}

    # -- the inbox: exactly the 20 writes, each with its evidence ---------------------------------------
    items = {i["entry"]: i for i in cli(path, "review", "--json")["items"]}
    assert set(items) == set(by_id) and len(items) == 20
    for eid, item in items.items():
        w = by_id[eid]
        assert item["client"] == DESCRIBED and item["clients"] == [DESCRIBED]
        assert item["change"]["action"] == {"memory_add": "add", "memory_update": "update", "memory_delete": "delete"}[w.tool]
        against = {e["kind"] for e in item["evidence"] if e.get("against")}
        if w.role in ("duplicate", "contradiction"):
            assert w.expect <= against, (w.name, item["evidence"])
            named = {e.get("id") for e in item["evidence"] if e["kind"] in w.expect}
            assert w.target in named, (w.name, item["evidence"])
        if w.role == "plain":
            assert against == set(), (w.name, item["evidence"])
        if w.tool == "memory_add":
            assert item["status"] == "under_review"  # MCP writes wait for review by default
    dup1 = items[ids["agent-dup-1"]]
    assert next(e for e in dup1["evidence"] if e["kind"] == "duplicate")["merge_into"] == "ros2-conv-007"
    use = next(e for e in dup1["evidence"] if e["kind"] == "use")
    assert use["retrieved"] >= 1 and use["by"] == {DESCRIBED: use["retrieved"]}  # the agent's own search returned it
    contra2 = next(e for e in items[ids["agent-contra-2"]]["evidence"] if e.get("id") == "ros2-conv-005")
    assert contra2["rule"] == "same subject, same wing"
    assert items["lc-arch-006"]["change"]["diff"]["text"]["after"].startswith("Components should publish")
    assert [i["entry"] for i in cli(path, "review", "--json", "--client", "someone-else")["items"]] == []

    # -- the reviewer acts, from the command line -------------------------------------------------------
    cli(path, "review", "merge", ids["agent-dup-1"])  # into the entry the evidence names
    cli(path, "review", "merge", ids["agent-dup-2"], ids["agent-dup-3"])
    cli(path, "review", "reject", ids["agent-contra-1"], "--reason", "contradicts the shared logging rule")
    cli(path, "review", "accept", ids["agent-contra-2"], "--supersedes", "ros2-conv-005")
    cli(path, "review", "reject", "lc-arch-006", "lc-inc-010")
    shown = cli(path, "review", "show", ids["agent-plain-01"], "--json")["items"][0]
    assert {e["kind"] for e in shown["evidence"]} >= {"use", "impact"}
    bulk = cli(path, "review", "accept", "--clean", "--json")
    # plain-09 overrode the first near-duplicate, a note; merged, it overrides the decision the note repeated
    plain = [ids[f"agent-plain-{i:02d}"] for i in range(1, 14)]
    assert sorted(d["entry"] for d in bulk["done"]) == sorted(set(plain) - {ids["agent-plain-09"]})
    assert bulk["skipped"] == [{"entry": ids["agent-plain-09"], "against": ["overrides"]}]
    cli(path, "review", "accept", ids["agent-plain-09"])
    assert cli(path, "review", "--json")["items"] == []

    # an undo from the entry's history brings the merged entry and its item back; merge it again
    undone = cli(path, "review", "undo", "py-conv-003", "--json")["done"][0]
    assert undone["undid"] == "merge" and ids["agent-dup-2"] in undone["entries"]
    assert [i["entry"] for i in cli(path, "review", "--json")["items"]] == [ids["agent-dup-2"]]
    cli(path, "review", "merge", ids["agent-dup-2"])

    # -- nothing lost ----------------------------------------------------------------------------------
    now = entries(path, settings, real_embedder)
    merged = {ids[f"agent-dup-{i}"] for i in (1, 2, 3)}
    assert set(now) == (demo_ids | set(by_id)) - merged
    assert now[ids["agent-contra-1"]].status.value == "deprecated"
    assert now[ids["agent-contra-2"]].status.value == "active" and now[ids["agent-contra-2"]].overrides == "ros2-conv-005"
    assert now["lc-arch-006"].text.startswith("Components publish only through") and now["lc-arch-006"].status.value == "active"
    assert now["lc-inc-010"].text.startswith("Operators changed ~/frame_rate")
    assert now[ids["agent-plain-09"]].overrides == "ros2-conv-007"  # re-pointed at the entry the duplicate merged into
    found = now["ros2-conv-007"].meta["found_in"]
    assert [f["id"] for f in found] == [ids["agent-dup-1"]] and found[0]["by"] == DESCRIBED
    assert all(now[ids[f"agent-plain-{i:02d}"]].status.value == "active" for i in range(1, 14))

    audit = rows(path)
    assert audit[: len(audit_before)] == audit_before  # no row of before the session changed or went
    new = audit[len(audit_before):]
    agent_rows = [r for r in new if '"client"' in (r[5] or "") and '"review"' not in (r[5] or "")]
    assert len(agent_rows) == 20 and {r[2] for r in agent_rows} == set(by_id)
    assert all(json.loads(r[5])["client"]["name"] == "session-agent" for r in agent_rows)
    review_rows = [r for r in new if r not in agent_rows]
    assert review_rows and all(json.loads(r[5])["client"]["via"] == "review" and json.loads(r[5])["review"]["batch"]
                               for r in review_rows)
    last = {}
    for _seq, action, eid, _before, after, _detail in audit:  # every entry is what its newest audit row says
        if action != "review":
            last[eid] = (action, json.loads(after) if after else None)
    for eid in set(by_id) | demo_ids | {"ros2-conv-007", "py-conv-003", "lc-arch-004"}:
        action, after = last.get(eid, ("import", None))
        if eid in merged:
            assert action == "delete" and eid not in now
        elif action != "import":
            assert after is not None and now[eid].to_record() == after, eid
