"""Working-memory benchmark (target: "< 5 ms overhead per operation", so an agent never waits on it).

One temp store holds 100 completed tasks (the default ``max_tasks`` bound, with
intents and validation reports like an agent's) and 10 active blockers. Timed,
after a warm-up, on one thread:

* **render**: ``mem.tasks.render()``, the block put at the top of every agent
  prompt (read of the last 5 tasks and all active blockers + markdown);
  target p50 under 5 ms;
* **window**: ``mem.tasks.window()``, the same read without the markdown;
* **complete**: ``mem.tasks.complete()`` at the bound, so every call also
  prunes the oldest task and writes its audit rows (one transaction, WAL,
  ``synchronous=NORMAL``); target p50 under 5 ms.

The store uses the hashing embedder: working memory embeds nothing.

    python -m tests.bench.tasks [--quick]

A full run writes ``tests/bench/results/tasks.json`` and the table in tests/bench/README.md
between the ``bench:tasks`` markers; a quick run writes its JSON to the temp
directory and leaves both untouched.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import log, machine_info, publish, suite_main, summary

NAME = "tasks"
TARGET_RENDER_P50_MS = 5.0
TARGET_COMPLETE_P50_MS = 5.0
N_TASKS = 100
N_BLOCKERS = 10

_VERBS = ["Add", "Fix", "Refactor", "Document", "Test", "Offload", "Measure", "Remove", "Rename", "Harden"]
_THINGS = [
    "the lifecycle transition callbacks",
    "watchdog timers under sim time",
    "the lidar_filter writer queue",
    "~/get_health caching",
    "parameter declaration in __init__",
    "teardown order on cleanup",
    "the arm_driver IK worker",
    "signal handling in run()",
    "the per-test rclpy context fixture",
    "state topic QoS (depth 1, transient_local)",
]


def _intent(i: int) -> str:
    return f"{_VERBS[i % len(_VERBS)]} {_THINGS[(i * 7) % len(_THINGS)]} (step {i})"


def _report(i: int) -> dict[str, Any]:
    failed = 1 if i % 9 == 0 else 0
    rep: dict[str, Any] = {
        "tests": {"passed": 40 + i, "failed": failed, "skipped": i % 3},
        "checks": [{"name": "ruff", "passed": True}, {"name": "mypy --strict", "passed": i % 13 != 0}],
        "lint": {"issues": i % 4},
        "duration_s": 30 + i * 0.7,
    }
    if failed:
        rep["errors"] = [f"test_case_{i}: assertion failed after reconfigure", "second failure"]
    return rep


def _timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def render_table(res: dict[str, Any]) -> str:
    m = res["machine"]
    rows = [
        "| working memory (100 tasks, 10 active blockers) | p50 | p95 | target | |",
        "|---|---:|---:|---|---|",
    ]
    for key, label in (
        ("render", "`mem.tasks.render()`"),
        ("window", "`mem.tasks.window()`"),
        ("complete", "`mem.tasks.complete()` + prune"),
    ):
        r = res["results"][key]
        target = res["targets"].get(key)
        verdict = "" if target is None else ("met" if target["met"] else "**missed**")
        limit = "" if target is None else f"p50 < {target['limit']:g} ms"
        rows.append(f"| {label} | {r['p50_ms']:.3f} ms | {r['p95_ms']:.3f} ms | {limit} | {verdict} |")
    rows.append("")
    rows.append(
        f"{res['plan']['render_calls']} render calls after {res['plan']['warmup']} warm-up calls; "
        f"{m['cpu_model']}, {m['cores_usable']} cores, Python {m['python']}, "
        f"SQLite {m['sqlite']} ({m['sqlite_driver']}), {m['date']}."
    )
    return "\n".join(rows)


def run(quick: bool = False, write: bool = True) -> dict[str, Any]:
    """Run the suite; a full run writes results/tasks.json and its tests/bench/README.md block."""
    from memlens import Memory
    from memlens.config import load_settings
    from memlens.embed import HashEmbedder

    t0 = time.perf_counter()
    plan = {"tasks": N_TASKS, "blockers": N_BLOCKERS, "warmup": 50 if quick else 200,
            "render_calls": 200 if quick else 2000, "complete_calls": 50 if quick else 300}  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix="memlens-bench-tasks-"))
    try:
        settings = load_settings()
        res: dict[str, Any] = {
            "suite": NAME,
            "mode": "quick" if quick else "full",
            "machine": machine_info(),
            "settings": {"working_memory": settings.working_memory.model_dump(), "storage": settings.storage.model_dump()},
            "plan": plan,
        }
        log(f"[{NAME}] {res['mode']} run; scratch {scratch}")
        with Memory.open(scratch / "tasks.db", settings=settings, embedder=HashEmbedder()) as mem:
            wm = mem.tasks
            for i in range(N_TASKS):
                wm.complete(
                    f"task-{i:04d}",
                    _intent(i),
                    outcome="failure" if i % 9 == 0 else "success",
                    validation_report=_report(i),
                    requires_context=i % 10 != 7,
                    completed_at=f"2026-10-{1 + i // 24:02d}T{i % 24:02d}:15:00Z",
                )
            for j in range(N_BLOCKERS):
                wm.block(
                    f"task-b{j:02d}",
                    f"Waiting on {_THINGS[j]} (external dependency {j})",
                    blocked_at=f"2026-10-0{1 + j % 5}T0{j % 10}:00:00Z",
                )
            assert wm.count() == N_TASKS and len(wm.blockers()) == N_BLOCKERS
            text = wm.render()
            res["render_chars"] = len(text)

            _timed(wm.render, plan["warmup"])
            res["results"] = {
                "render": summary(_timed(wm.render, plan["render_calls"])),
                "window": summary(_timed(wm.window, plan["render_calls"])),
            }
            counter = iter(range(N_TASKS, N_TASKS + plan["complete_calls"]))

            def complete() -> None:
                i = next(counter)
                wm.complete(f"task-{i:04d}", _intent(i), validation_report=_report(i))

            res["results"]["complete"] = summary(_timed(complete, plan["complete_calls"]))
            assert wm.count() == N_TASKS  # every completion pruned one
            res["example"] = wm.render()
        res["targets"] = {
            "render": {"limit": TARGET_RENDER_P50_MS, "measured": res["results"]["render"]["p50_ms"],
                       "met": res["results"]["render"]["p50_ms"] < TARGET_RENDER_P50_MS},
            "complete": {"limit": TARGET_COMPLETE_P50_MS, "measured": res["results"]["complete"]["p50_ms"],
                         "met": res["results"]["complete"]["p50_ms"] < TARGET_COMPLETE_P50_MS},
        }  # fmt: skip
        res["duration_s"] = round(time.perf_counter() - t0, 1)
        table = render_table(res)
        publish(
            NAME,
            res,
            table,
            official=write and not quick,
            target_lines=[
                f"{key} p50: {t['measured']} ms vs {t['limit']} ms -> {'met' if t['met'] else 'MISSED'}"
                for key, t in res["targets"].items()
            ],
        )
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return suite_main("python -m tests.bench.tasks", __doc__, run, "fewer calls; README and results/ untouched", argv)


if __name__ == "__main__":
    sys.exit(main())
