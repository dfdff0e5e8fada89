"""The shared server of a team. Under load: 50 SDK clients at once, each with a bearer token, write over streamable
HTTP into one store, SQLite or PostgreSQL; every acknowledged write is there, once, attributed to its token, and no
client saw an error (the minute-long run with rates is the benchmark `python -m tests.bench --only team`). And the
README's "Team setup" run as its commands are written, on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.mcp_helpers import error_text, http_server, result_data, run_client, sdk_client

pytestmark = [pytest.mark.model, pytest.mark.slow]

N_CLIENTS = 50
N_WRITES = 3  # per client


def write_concurrently(url: str, tokens: dict[str, str], n_clients: int, n_writes: int) -> tuple[list[dict], list[str]]:
    """Each client opens its own session with one of ``tokens`` and adds ``n_writes`` entries; (acks, errors)."""
    import anyio

    acks: list[dict] = []
    errors: list[str] = []
    names = sorted(tokens)

    async def client(i: int) -> None:
        name = names[i % len(names)]
        try:
            async with sdk_client(url, name=f"agent-{i}", token=tokens[name]) as c:
                for j in range(n_writes):
                    r = await c.call_tool("memory_add", {"text": f"Finding {j} of agent {i}, sent with {name}'s token.",
                                                         "wing": "team", "room": f"agent-{i}"})
                    if r.is_error:
                        errors.append(r.content[0].text)
                    else:
                        acks.append({**r.structured_content, "token": name, "text": f"Finding {j} of agent {i}"})
        except Exception as exc:  # a transport failure is an error the test reports, with the others
            errors.append(f"agent-{i}: {type(exc).__name__}: {exc}")

    async def main() -> None:
        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                for i in range(n_clients):
                    tg.start_soon(client, i)

    anyio.run(main)
    return acks, errors


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_fifty_token_clients_write_at_once_and_nothing_is_lost(backend, request, tmp_path, settings, real_embedder):
    from memlens import Memory
    from memlens.mcp import tokens

    store = str(tmp_path / "team.db") if backend == "sqlite" else request.getfixturevalue("pg_uri")
    path = tmp_path / "tokens"
    issued = {name: tokens.add(path, name) for name in ("alice", "bob", "ci")}
    with http_server(store, env={"MEMLENS_MCP__TOKENS_FILE": str(path)}) as url:
        acks, errors = write_concurrently(url, issued, N_CLIENTS, N_WRITES)
    assert not errors, errors[:5]
    assert len(acks) == N_CLIENTS * N_WRITES and all(a["status"] == "created" for a in acks)
    assert len({a["id"] for a in acks}) == len(acks)
    with Memory.open(store, settings=settings, embedder=real_embedder) as mem:
        stored = {e.id: e for e in mem.entries("team")}
        assert set(stored) == {a["id"] for a in acks}  # every acknowledged write, and nothing else
        for a in acks:
            assert stored[a["id"]].text.startswith(a["text"])
            assert mem.audit(a["id"])[0]["detail"]["client"]["name"] == a["token"]


def test_the_team_setup_sequence(demo_store, pg_uri, tmp_path):
    """README's "Team setup", step by step: copy into PostgreSQL, tokens in the default file, the shared server named
    by its Host, an agent writing with its token, a read-only one refused, the same database read by the CLI."""
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir()
    config.write_text("")
    env = {"MEMLENS_CONFIG": str(config), "MEMLENS_STORE": pg_uri}
    out = run_cli("copy", str(demo_store), pg_uri, env=env)
    assert out.returncode == 0 and "copied 167 entries" in out.stdout + out.stderr, out.stderr
    issued = {}
    for name, *flags in (("alice-laptop",), ("ci", "--read-only")):
        out = run_cli("mcp", "token", "add", name, *flags, env=env)
        assert out.returncode == 0, out.stderr
        issued[name] = out.stdout.strip()
    assert oct((tmp_path / "config" / "mcp-tokens").stat().st_mode)[-3:] == "600"

    with http_server(None, env={**env, "MEMLENS_MCP__ALLOWED_HOSTS": '["memory.internal"]'}) as url:
        port = url.split(":")[2].split("/")[0]

        async def agent(client):
            return result_data(await client.call_tool(
                "memory_add", {"text": "Deploys go through the staging cluster first.", "wing": "ops", "type": "decision"}))

        async def reviewer(client):
            found = result_data(await client.call_tool("memory_search", {"query": "staging deploys", "active_wing": "ops"}))
            return found, error_text(await client.call_tool("memory_add", {"text": "CI notes.", "wing": "ops"}))

        added = run_client(url, agent, name="claude-code", token=issued["alice-laptop"],
                           headers={"Host": f"memory.internal:{port}"})
        found, refused = run_client(url, reviewer, name="ci-runner", token=issued["ci"])
    assert added["status"] == "created" and found["results"][0]["id"] == added["id"]
    assert "the bearer token 'ci' is read-only" in refused

    out = run_cli("search", "staging deploys", "--active-wing", "ops", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["results"][0]["id"] == added["id"]
