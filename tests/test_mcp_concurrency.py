"""Many clients, one store: two MCP server processes and the CLI write at once; nothing is lost or doubled."""

from __future__ import annotations

import shutil
import threading

import pytest

from .conftest import MEMLENS, run_cli
from .mcp_helpers import RawClient

pytestmark = pytest.mark.model

N_AGENT = 12  # distinct adds per agent
N_CLI = 4  # CLI processes, one add each
N_SAME = 3  # times each agent adds the shared fact


def agent(store, name):
    c = RawClient([MEMLENS, "--store", str(store), "mcp"])
    c.initialize(name=name, version="1.0")
    return c


def test_two_servers_and_the_cli_lose_nothing(demo_store, tmp_path, settings, real_embedder):
    store = tmp_path / "shared.db"
    shutil.copy(demo_store, store)
    clients = {name: agent(store, name) for name in ("agent-a", "agent-b")}
    outcomes: dict[str, list[dict]] = {name: [] for name in clients}
    shared: list[dict] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(clients) + 1)
    cli_done = threading.Event()

    def write_as(name, c):
        try:
            start.wait(60)
            i = 0
            while (i < N_AGENT or not cli_done.is_set()) and i < 500:  # keep writing while the CLI writes
                res = c.call("memory_add", text=f"Fact {i} learned by {name}.", wing="shared", room=name)
                outcomes[name].append(res["structuredContent"])
                if i < N_SAME:
                    same = c.call("memory_add", text="Both agents learned this fact.", wing="shared")
                    shared.append(same["structuredContent"])
                i += 1
            res = c.call("task_complete", task_id=f"task-{name}", intent=f"work of {name}")
            assert res.get("isError") is not True, res
        except BaseException as exc:  # reported below; the thread must not die silently
            errors.append(exc)

    threads = [threading.Thread(target=write_as, args=(n, c)) for n, c in clients.items()]
    for t in threads:
        t.start()
    start.wait(60)
    try:
        procs = [run_cli("--store", str(store), "add", f"Fact {i} from the command line.", "--wing", "shared", timeout=120)
                 for i in range(N_CLI)]
    finally:
        cli_done.set()
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
    cli_ids = [p.stdout.strip() for p in procs]
    for t in threads:
        t.join(300)
        assert not t.is_alive(), "an agent's writes did not finish"
    for c in clients.values():
        assert c.close() == 0
    assert not errors, errors

    assert len(shared) == 2 * N_SAME and len({o["id"] for o in shared}) == 1
    assert sorted(o["status"] for o in shared) == ["already_exists"] * (2 * N_SAME - 1) + ["created"]
    assert all(o["status"] == "created" for outs in outcomes.values() for o in outs)

    from memlens import Memory

    with Memory.open(store, settings=settings, embedder=real_embedder) as mem:
        texts = [e.text for e in mem.entries("shared")]
        n_agent = sum(len(outs) for outs in outcomes.values())
        assert n_agent >= 2 * N_AGENT
        assert len(texts) == n_agent + N_CLI + 1 == len(set(texts))
        assert texts.count("Both agents learned this fact.") == 1
        by_id = {e.id: e for e in mem.entries("shared")}
        for outs in outcomes.values():
            for o in outs:
                assert o["id"] in by_id
        for row in mem.audit(limit=5000):
            if row["action"] != "add":
                continue
            client = (row["detail"] or {}).get("client")
            if row["entry_id"] in cli_ids:
                assert client is None
            else:
                assert client["name"] in clients and by_id[row["entry_id"]].room in ("", client["name"])
        assert {t.task_id for t in mem.tasks.all()} >= {"task-agent-a", "task-agent-b"}
        adds = [r for r in mem.audit(limit=5000) if r["action"] == "add"]
        assert len(adds) == len(texts)  # one add row per stored entry: no write lost, none doubled
        cli_seqs = [r["seq"] for r in adds if r["entry_id"] in cli_ids]
        agent_seqs = [r["seq"] for r in adds if r["entry_id"] not in cli_ids]
        assert min(agent_seqs) < max(cli_seqs) < max(agent_seqs)  # the writers really overlapped

