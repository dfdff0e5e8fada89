"""MCP server benchmark: start-up to the ``initialize`` answer, and the cost of the protocol on a search.

On a temp copy of the demo memory (167 entries, real model):

* **initialize**: spawn ``memlens --store S mcp`` and send ``initialize`` at once;
  time from spawn until its answer is read (10 fresh processes after one warm-up;
  target p50 under 500 ms). The same with ``MEMLENS_MCP_EARLY_INIT=0`` (the SDK
  answers once it has imported) for reference, and, in the default mode, the time
  until ``tools/list`` is answered (the SDK is serving) and until a first search
  returns (the model has loaded).
* **memory_wings** on a synthetic store of 100,000 entries (10 wings x 6 rooms):
  the round trip over stdio and ``mem.wing_counts()`` in process.
* **search round trip**: ``memory_search`` over stdio from a plain JSON-lines
  client (request written, answer read and parsed) against ``mem.search`` with the
  same arguments in this process, on a copy of the same store with the in-process
  vector index warmed as the server warms it. Interleaved in blocks of 10 calls
  (with a 50 ms pause at each switch: ONNX Runtime's threads spin briefly after a
  run, and on 2 cores they would slow the other process down). Two
  cases: one repeated query (a retrieval-cache hit after the first call, so the
  protocol cost dominates) and distinct queries (cache misses, where the model's
  run dominates and a loaded 2-core machine adds noise of its own). Target: the
  overhead under 2 ms, taken as the median of the per-query differences (stdio
  minus in process, same query in the same block); the difference of the two
  p50s is reported beside it.

    python -m tests.bench.mcp [--quick]

A full run writes ``tests/bench/results/mcp.json`` and the table in tests/bench/README.md between
the ``bench:mcp`` markers; a quick run writes its JSON to the temp directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import ROOT, ensure_readme_block, log, machine_info, publish, suite_main, summary

NAME = "mcp"
TARGET_INIT_P50_MS = 500.0
TARGET_OVERHEAD_MS = 2.0
BLOCK = 10  # searches in process, then the same over stdio, block by block
MEMLENS = str(Path(sys.executable).parent / "memlens")
WORDS = ("callbacks", "blocking", "executor", "lifecycle", "timer", "parameters", "QoS", "publisher", "lidar", "driver",
         "teardown", "tests", "watchdog", "health", "transition", "node", "queue", "logging", "config", "launch")


class Server:
    """A ``memlens mcp`` process and a JSON-lines client on its stdio."""

    def __init__(self, store: Path, env: dict[str, str] | None = None) -> None:
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([MEMLENS, "--store", str(store), "mcp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
        self.n = 0

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.n += 1
        msg = {"jsonrpc": "2.0", "id": self.n, "method": method, **({"params": params} if params is not None else {})}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        assert reply.get("id") == self.n, reply
        return reply

    def initialize(self) -> dict[str, Any]:
        reply = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "bench", "version": "1"}})
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()
        return reply

    def search(self, **args: Any) -> dict[str, Any]:
        res = self.request("tools/call", {"name": "memory_search", "arguments": args})["result"]
        assert not res.get("isError"), res
        return res["structuredContent"]

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def startup(store: Path, runs: int) -> dict[str, Any]:
    marks: dict[str, list[float]] = {"initialize": [], "tools_list": [], "first_search": [], "initialize_sdk": []}
    for i in range(runs + 1):  # the first run warms the OS file cache
        s = Server(store)
        s.initialize()
        t_init = time.perf_counter() - s.t0
        s.request("tools/list")
        t_list = time.perf_counter() - s.t0
        s.search(query="callbacks blocking", active_wing="lifecore_ros2")
        t_search = time.perf_counter() - s.t0
        s.close()
        s = Server(store, {"MEMLENS_MCP_EARLY_INIT": "0"})
        s.initialize()
        t_sdk = time.perf_counter() - s.t0
        s.close()
        if i:
            for key, v in (("initialize", t_init), ("tools_list", t_list), ("first_search", t_search), ("initialize_sdk", t_sdk)):
                marks[key].append(v)
        log(f"[{NAME}] start-up run {i}: initialize {t_init * 1000:.0f} ms (SDK alone {t_sdk * 1000:.0f} ms), "
            f"tools/list {t_list * 1000:.0f} ms, first search {t_search * 1000:.0f} ms")
    return {k: summary(v) for k, v in marks.items()}


def round_trips(store: Path, mem: Any, calls: int) -> dict[str, Any]:
    s = Server(store)
    try:
        s.initialize()
        s.search(query="warm up", k=1)  # waits for the model; the index warms right after
        time.sleep(2.0)
        out: dict[str, Any] = {}
        cases = {
            "repeated": [("callbacks blocking", "lifecore_ros2")] * calls,
            "distinct": [(f"{WORDS[i % 20]} {WORDS[(i * 7 + 3) % 20]} {WORDS[(i * 13 + 5) % 20]} {i}", "lifecore_ros2")
                         for i in range(calls)],
        }
        for case, queries in cases.items():
            local, remote, same = [], [], 0
            for start in range(0, len(queries), BLOCK):
                block, ids = queries[start:start + BLOCK], []
                for q, wing in block:
                    t = time.perf_counter()
                    b = mem.search(q, active_wing=wing, k=10)
                    local.append(time.perf_counter() - t)
                    ids.append([x.entry.id for x in b.results])
                time.sleep(0.05)  # ONNX Runtime's threads spin a little after each run: let them park
                for (q, wing), local_ids in zip(block, ids):
                    t = time.perf_counter()
                    r = s.search(query=q, active_wing=wing, k=10)
                    remote.append(time.perf_counter() - t)
                    same += [x["id"] for x in r["results"]] == local_ids
                time.sleep(0.05)
            loc, rem = summary(local[5:]), summary(remote[5:])
            paired = sorted((r - lo) * 1000 for r, lo in zip(remote[5:], local[5:]))  # same query, same block
            out[case] = {"in_process": loc, "stdio": rem, "overhead_p50_ms": round(rem["p50_ms"] - loc["p50_ms"], 3),
                         "overhead_paired_median_ms": round(paired[len(paired) // 2], 3),
                         "same_results": f"{same}/{len(queries)}"}
            log(f"[{NAME}] {case}: in process p50 {loc['p50_ms']} ms, over stdio p50 {rem['p50_ms']} ms")
        return out
    finally:
        s.close()


def big_store(path: Path, n: int, model_id: str) -> None:
    """``n`` synthetic entries in 10 wings x 6 rooms, with random unit vectors (imported, not embedded)."""
    import base64

    import numpy as np

    from memlens import Memory
    from memlens.embed import HashEmbedder

    rng = np.random.default_rng(11)
    vecs = rng.standard_normal((n, 384), dtype=np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    jsonl = path.with_suffix(".jsonl")
    with jsonl.open("w", encoding="utf-8") as fh:
        for i in range(n):
            rec = {"id": f"big-{i:06d}", "wing": f"wing{i % 10}", "room": f"room{(i // 10) % 6}",
                   "text": f"synthetic entry {i} {WORDS[i % 20]} {WORDS[(i * 7) % 20]}", "model": model_id,
                   "vector": base64.b64encode(vecs[i].astype("<f4").tobytes()).decode("ascii")}
            fh.write(json.dumps(rec) + "\n")
    emb = HashEmbedder()
    emb.model_id = model_id  # the store records the real model; every vector comes from the file
    with Memory.open(path, embedder=emb) as mem:
        report = mem.import_jsonl(jsonl)
    assert report["embedded"] == 0 and report["imported"] == n, report


def wings_overview(store: Path, calls: int) -> dict[str, Any]:
    """``memory_wings`` over stdio on a large store, and ``mem.wing_counts()`` in process."""
    from memlens import Memory

    s = Server(store)
    try:
        s.initialize()
        remote = []
        for _ in range(calls):
            t = time.perf_counter()
            res = s.request("tools/call", {"name": "memory_wings", "arguments": {}})["result"]
            remote.append(time.perf_counter() - t)
            assert not res.get("isError"), res
        entries = res["structuredContent"]["entries"]
    finally:
        s.close()
    with Memory.open(store) as mem:
        local = []
        for _ in range(calls):
            t = time.perf_counter()
            mem.wing_counts()
            local.append(time.perf_counter() - t)
    return {"entries": entries, "stdio": summary(remote[2:]), "in_process": summary(local[2:])}


def render_table(res: dict[str, Any]) -> str:
    st, rt, m = res["results"]["startup"], res["results"]["search"], res["machine"]
    t = res["targets"]
    rows = [
        "| `memlens mcp` over stdio (demo store, 167 entries) | p50 | p95 | target | |",
        "|---|---:|---:|---|---|",
        f"| spawn → `initialize` answered | {st['initialize']['p50_ms']:,.0f} ms | {st['initialize']['p95_ms']:,.0f} ms "
        f"| p50 < {TARGET_INIT_P50_MS:g} ms | {'met' if t['initialize']['met'] else '**missed**'} |",
        f"| spawn → `tools/list` answered (SDK serving) | {st['tools_list']['p50_ms']:,.0f} ms "
        f"| {st['tools_list']['p95_ms']:,.0f} ms | | |",
        f"| spawn → first `memory_search` answered (model loaded) | {st['first_search']['p50_ms']:,.0f} ms "
        f"| {st['first_search']['p95_ms']:,.0f} ms | | |",
        f"| reference: `initialize` answered by the SDK itself (`MEMLENS_MCP_EARLY_INIT=0`) | "
        f"{st['initialize_sdk']['p50_ms']:,.0f} ms | {st['initialize_sdk']['p95_ms']:,.0f} ms | | |",
    ]
    for case, label in (("repeated", "one repeated query (cache hit)"), ("distinct", "distinct queries (cache miss)")):
        r = rt[case]
        rows.append(
            f"| `memory_search` round trip, {label} | {r['stdio']['p50_ms']:.2f} ms | {r['stdio']['p95_ms']:.2f} ms | | |"
        )
        rows.append(f"| same search in process (`mem.search`) | {r['in_process']['p50_ms']:.2f} ms | "
                    f"{r['in_process']['p95_ms']:.2f} ms | | |")
        rows.append(
            f"| protocol overhead: median of per-query differences (p50 difference) | {r['overhead_paired_median_ms']:.2f} ms "
            f"({r['overhead_p50_ms']:.2f} ms) | | < {TARGET_OVERHEAD_MS:g} ms "
            f"| {'met' if t['overhead_' + case]['met'] else '**missed**'} |"
        )
    w = res["results"]["wings"]
    rows.append(f"| `memory_wings` round trip, {w['entries']:,} entries in 10 wings x 6 rooms | {w['stdio']['p50_ms']:.1f} ms "
                f"| {w['stdio']['p95_ms']:.1f} ms | | |")
    rows.append(f"| `mem.wing_counts()` in process, same store | {w['in_process']['p50_ms']:.1f} ms "
                f"| {w['in_process']['p95_ms']:.1f} ms | | |")
    rows.append("")
    rows.append(
        f"`python -m tests.bench.mcp`: {res['plan']['startup_runs']} fresh processes after one warm-up; "
        f"{res['plan']['search_calls']} searches per case, interleaved in blocks of {BLOCK} with the same search in process "
        "(first 5 not counted). "
        f"{m['cpu_model']}, {m['cores_usable']} cores, Python {m['python']}, mcp {res['sdk_version']}; "
        f"1-min load average before the run {res['load_before']:.2f}; {m['date']}."
    )
    return "\n".join(rows)


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    import importlib.metadata

    from memlens import Memory
    from memlens.config import load_settings

    t0 = time.perf_counter()
    plan = {"startup_runs": 3 if quick else 10, "search_calls": 40 if quick else 300,
            "wings_entries": 10_000 if quick else 100_000}
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-mcp-"))
    try:
        res: dict[str, Any] = {"suite": NAME, "mode": "quick" if quick else "full", "machine": machine_info(), "plan": plan,
                               "sdk_version": importlib.metadata.version("mcp"), "load_before": os.getloadavg()[0]}
        log(f"[{NAME}] {res['mode']} run; scratch {scratch}")
        store = scratch / "demo.db"
        with Memory.open(store, settings=load_settings()) as mem:
            mem.import_jsonl(ROOT / "data" / "demo.jsonl")
        local_copy = scratch / "local.db"
        shutil.copy(store, local_copy)
        res["results"] = {"startup": startup(store, plan["startup_runs"])}
        with Memory.open(local_copy, settings=load_settings()) as mem:
            mem.warm_index()
            res["results"]["search"] = round_trips(store, mem, plan["search_calls"])
            model_id = mem.model_id
        big = scratch / "big.db"
        big_store(big, plan["wings_entries"], model_id)
        res["results"]["wings"] = wings_overview(big, 20)
        st, rt = res["results"]["startup"], res["results"]["search"]
        res["targets"] = {
            "initialize": {"limit_ms": TARGET_INIT_P50_MS, "measured": st["initialize"]["p50_ms"],
                           "met": st["initialize"]["p50_ms"] < TARGET_INIT_P50_MS},
            **{f"overhead_{c}": {"limit_ms": TARGET_OVERHEAD_MS, "measured": rt[c]["overhead_paired_median_ms"],
                                 "met": rt[c]["overhead_paired_median_ms"] < TARGET_OVERHEAD_MS} for c in rt},
        }
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        if write and not quick:
            ensure_readme_block(NAME, "tui")
        publish(NAME, res, render_table(res), official=write and not quick,
                target_lines=[f"{k}: {v['measured']} ms vs {v['limit_ms']} ms -> {'met' if v['met'] else 'MISSED'}"
                              for k, v in res["targets"].items()])
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.mcp", __doc__, run, "fewer runs; README and results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
