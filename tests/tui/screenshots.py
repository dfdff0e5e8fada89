"""``python -m tests.tui.screenshots`` (``make screenshots``): SVG screenshots of the app's main states.

A demo store is built once with the real model (the demo entries and the demo
task history) at a fixed path, every audit time pinned; each screenshot opens
the real app on a fresh copy of it, 120x40, with the snapshot tests' fixed
clock, pinned latencies and theme, drives it like a user and saves
``screenshots/<name>.svg``. A screen whose module does not exist yet is
skipped with a note. Regenerating on an unchanged tree gives the same files.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import shutil
import sys
import tempfile
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "screenshots"
DEMO = ROOT / "data" / "demo.jsonl"
WORK = Path(tempfile.gettempdir()) / "memlens-screenshots"  # the path shows in the header: keep it fixed
SIZE = (120, 40)
QUERY = "callbacks blocking"


@dataclass
class Shot:
    name: str
    what: str
    drive: Callable[[Any], Awaitable[None]]
    needs: str | None = None  # a module that must exist (screens still being built are skipped)
    store: str = "demo"  # "demo", "empty", "metrics", "index", "impact", "replay" or "review"
    llm: str | None = None  # answers from a fake chat model on 127.0.0.1 in this mode (tests/fake_llm.py)


# -- driving the app -------------------------------------------------------------------------


async def _settle(pilot) -> None:
    from .conftest import settle

    await settle(pilot)


async def _search(pilot, query: str) -> None:
    from .conftest import search

    await search(pilot, query)


async def main_screen(pilot) -> None:
    await _search(pilot, QUERY)
    pilot.app.main.query_one("#results").focus()
    await _settle(pilot)


async def dropped(pilot) -> None:
    await _search(pilot, "publisher QoS depth wing=lifecore_ros2|ros2")
    pilot.app.main.query_one("#results").focus()
    await pilot.press("d")
    await _settle(pilot)


async def conflict(pilot) -> None:
    await _search(pilot, "wing=lifecore_ros2|ros2 ReentrantCallbackGroup service calls")
    table = pilot.app.main.query_one("#results")
    table.focus()
    ids = [r.entry.id for r in pilot.app.main.bundle.results]
    table.move_cursor(row=ids.index("ros2-arch-007"))
    await _settle(pilot)


async def first_run(pilot) -> None:
    await _settle(pilot)


async def entry(pilot) -> None:
    await _settle(pilot)
    pilot.app.open_entry("lc-arch-001")
    await _settle(pilot)


async def why_not(pilot) -> None:
    """Why was ros2-conv-005 not among the results? (an explicit override drops it)."""
    await _search(pilot, "publisher QoS depth wing=lifecore_ros2|ros2")
    pilot.app.why_not(pilot.app.main.query_text)
    await _settle(pilot)
    await pilot.press(*"QoS")
    await pilot.pause(0.4)
    await _settle(pilot)
    options = pilot.app.screen.query_one("#wn-list")
    options.focus()
    options.highlighted = [o.id for o in options.options].index("ros2-conv-005")
    await pilot.press("enter")
    await _settle(pilot)


async def context(pilot) -> None:
    await _search(pilot, QUERY)
    pilot.app.context_preview(pilot.app.main.query_text)
    await _settle(pilot)
    await pilot.press(*"1700")
    await pilot.pause(0.4)
    await _settle(pilot)


async def shell(pilot) -> None:
    await _settle(pilot)
    pilot.app.open_shell()
    await _settle(pilot)
    prompt = pilot.app.screen.query_one("#prompt")
    prompt.value = "why do callbacks block"
    prompt.cursor_position = len(prompt.value)
    prompt.focus()
    await pilot.press("enter")
    await _settle(pilot)


async def shell_streaming(pilot) -> None:
    """An answer streaming in: the fake model holds after five tokens."""
    from .test_shell_answers import ask, until, view

    await ask(pilot)
    await until(pilot, lambda: view(pilot.app) is not None and view(pilot.app).text.endswith("runs them "), "five tokens")
    await pilot.pause()


async def shell_answer(pilot) -> None:
    """A finished answer: its citations, the second one highlighted in the sources sent, an invented id flagged."""
    from .test_shell_answers import ask, until, view

    await ask(pilot)
    await until(pilot, lambda: view(pilot.app) is not None and view(pilot.app).answer is not None, "the answer")
    await _settle(pilot)
    options = view(pilot.app).query_one(".citations")
    options.focus()
    options.highlighted = 1
    await _settle(pilot)


async def entry_impact(pilot) -> None:
    """Deprecating an entry that a golden query expects and the logged searches return: the preview asks first."""
    await _settle(pilot)
    pilot.app.open_entry(IMPACT_TARGET)
    await _settle(pilot)
    await pilot.press("ctrl+o")
    await _settle(pilot)


async def replay_screen(pilot) -> None:
    """The logged searches run again after the golden query's entry was deprecated: the lists then and now."""
    from memlens.tui.screens.replay import ReplayScreen

    await _settle(pilot)
    pilot.app.push_screen(ReplayScreen())
    await _settle(pilot)


async def impact_screen(pilot) -> None:
    """The impact screen of an entry: who retrieved it, and what deprecating it would change (nothing written)."""
    from memlens.tui.screens.impact import ImpactScreen

    await _settle(pilot)
    pilot.app.push_screen(ImpactScreen(IMPACT_TARGET))
    await _settle(pilot)


async def review_screen(pilot) -> None:
    """An agent's session waiting for review: its writes with the evidence of the first, a near-duplicate."""
    from .test_review_app import open_review

    await open_review(pilot)


async def metrics(pilot) -> None:
    await _settle(pilot)
    pilot.app.open_metrics()
    await _settle(pilot)


async def index_screen(pilot) -> None:
    from .test_index_snapshots import pin_status

    pin_status(pilot.app.lens)
    await _settle(pilot)
    pilot.app.open_index()
    await _settle(pilot)


SHOTS = [
    Shot("main", "main screen: working memory, results of a scoped search and the trace of the top result", main_screen),
    Shot("dropped", "the trace listing every dropped candidate with stage and reason (d)", dropped),
    Shot("conflict", "a result in conflict with another entry selected", conflict),
    Shot("first-run", "an empty store offering the demo memory", first_run, store="empty"),
    Shot("entry", "the entry editor with its audit history", entry, needs="memlens.tui.screens.entry"),
    Shot("why-not", "why not? an entry dropped by an explicit override", why_not, needs="memlens.tui.screens.why_not"),
    Shot("context", "the budgeted context an agent would get (1700 tokens)", context, needs="memlens.tui.screens.context"),
    Shot("shell", "the assistant shell after a question", shell, needs="memlens.tui.screens.shell"),
    Shot("metrics", "retrieval latency and cache metrics", metrics, needs="memlens.tui.screens.metrics", store="metrics"),
    Shot("index", "the code index: a small indexed workspace, its last run and the file it skipped", index_screen,
         needs="memlens.tui.screens.index", store="index"),
    Shot("entry-impact", "the entry editor previewing a deprecation: a golden query would fail, recent queries change",
         entry_impact, needs="memlens.tui.screens.entry_impact", store="impact"),
    Shot("replay", "the replay screen: logged searches run again after a deprecation, their lists then and now",
         replay_screen, needs="memlens.tui.screens.replay", store="replay"),
    Shot("impact", "the impact screen of an entry: its access log and what deprecating it would change",
         impact_screen, needs="memlens.tui.screens.impact", store="impact"),
    Shot("review", "the review screen: an agent's writes over MCP, each with its evidence (a near-duplicate selected)",
         review_screen, needs="memlens.tui.screens.review", store="review"),
    Shot("shell-streaming", "the assistant shell streaming a model's answer (a fake model on 127.0.0.1)", shell_streaming,
         needs="memlens.assist", llm="hold"),
    Shot("shell-answer", "an answer with its citations, one highlighted in the sources sent, an invented id flagged",
         shell_answer, needs="memlens.assist", llm="stream"),
]


# -- stores ----------------------------------------------------------------------------------

IMPACT_QUERIES = ("callbacks blocking executor", "lifecycle node state transitions", "parameters declared at startup")
IMPACT_TARGET = "lc-arch-001"  # the golden query below expects it (the first query returns it today)
METRIC_QUERIES = [("callbacks blocking", 1.0), ("lifecycle transitions publish", 1.6),
                  ("callbacks blocking", None), ("publisher QoS depth", 2.4),
                  ("watchdog timers under sim time", 3.1), ("callbacks blocking", None)]  # fmt: skip


def _pin_audit(mem) -> None:
    """Audit times (shown as ages against the fixed clock) one minute apart from a fixed start."""
    with mem.conn:
        mem.conn.execute("UPDATE audit SET ts = strftime('%Y-%m-%dT%H:%M:%SZ', '2026-11-01 08:00:00', '+' || seq || ' minutes')")


def build_stores(settings, embedder) -> dict[str, Path]:
    from memlens import Memory
    from memlens.demo import load_tasks
    from memlens.models import format_ts

    from .conftest import FIXED_NOW, PINNED_MS

    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "base").mkdir(parents=True)
    demo, with_metrics = WORK / "base" / "demo.db", WORK / "base" / "metrics.db"
    with Memory.open(demo, settings=settings, embedder=embedder) as mem:
        mem.import_jsonl(DEMO)
        load_tasks(mem)
        _pin_audit(mem)
    shutil.copy(demo, with_metrics)
    with Memory.open(with_metrics, settings=settings, embedder=embedder) as mem:  # real searches log real rows, then pinned
        for query, _ in METRIC_QUERIES:
            mem.search(query, active_wing="lifecore_ros2", now=FIXED_NOW)
        rows = mem.conn.execute("SELECT seq, detail FROM audit WHERE action = 'retrieval' ORDER BY seq").fetchall()
        with mem.conn:
            for i, ((seq, detail), (_, factor)) in enumerate(zip(rows, METRIC_QUERIES)):
                d = json.loads(detail)
                lat = d.get("latency_ms", {})
                d["latency_ms"] = ({k: 0.3 if k == "total" else 0.0 for k in lat} if d.get("cache_hit")
                                   else {k: round(PINNED_MS.get(k, 0.0) * (factor or 1.0), 3) for k in lat})  # fmt: skip
                ts = format_ts(FIXED_NOW - timedelta(seconds=47 * (len(rows) - i)))
                mem.conn.execute("UPDATE audit SET ts = ?, detail = ? WHERE seq = ?", (ts, json.dumps(d), seq))
    impact = WORK / "base" / "impact.db"
    shutil.copy(demo, impact)
    with Memory.open(impact, settings=settings, embedder=embedder) as mem:  # logged searches and a golden query
        from memlens.replay import golden

        for query in IMPACT_QUERIES:
            mem.search(query, active_wing="lifecore_ros2", k=5, now=FIXED_NOW)
        golden.add(mem, IMPACT_QUERIES[0], IMPACT_TARGET, active_wing="lifecore_ros2", within=5)
        _pin_audit(mem)
    replay = WORK / "base" / "replay.db"
    shutil.copy(impact, replay)
    with Memory.open(replay, settings=settings, embedder=embedder) as mem:  # the same, after a deprecation
        mem.set_status(IMPACT_TARGET, "deprecated")
        _pin_audit(mem)
    review = WORK / "base" / "review.db"  # the scripted agent session's 20 writes (tests/review_session.py)
    from .test_review_app import build_review_store

    build_review_store(demo, review, settings, embedder)
    return {"demo": demo, "metrics": with_metrics, "impact": impact, "replay": replay, "review": review}


def build_index_store(stores: dict[str, Path], settings, embedder) -> Path:
    """The demo store with a few real modules of the installed idna package indexed (wing idna)."""
    from .test_index_snapshots import index_into, workspace

    path = WORK / "base" / "index.db"
    shutil.copy(stores["demo"], path)
    index_into(path, workspace(WORK), settings, embedder)
    return path


def _fresh_copy(stores: dict[str, Path], kind: str) -> Path:
    path = WORK / "memlens.db"
    for p in WORK.glob("memlens.db*"):
        p.unlink()
    if kind != "empty":
        shutil.copy(stores[kind], path)
    return path


# -- taking them -----------------------------------------------------------------------------


def take(shot: Shot, store: Path, out: Path, settings, embedder) -> Path:
    from memlens.tui.app import create_app

    from .conftest import FIXED_NOW, pin_lens

    fake = None
    if shot.llm:  # a fake OpenAI-compatible server on 127.0.0.1: fixed tokens, nothing leaves the machine
        from memlens.config import LlmConfig

        from ..fake_llm import FakeLLM, cited_answer

        fake = FakeLLM(shot.llm, cited_answer, hold_after=5).__enter__()
        settings = settings.model_copy(update={"llm": LlmConfig(base_url=fake.base_url, model="fake-model")})
    app = create_app(store, settings=settings, embedder=embedder, now=lambda: FIXED_NOW,
                     active_wing=None if shot.store == "empty" else "lifecore_ros2", watch=False, cursor_blink=False)  # fmt: skip
    pin_lens(app.lens)
    app.theme = "textual-dark"
    target = out / f"{shot.name}.svg"

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await shot.drive(pilot)
            svg = app.export_screenshot(title="memlens")
        target.write_text(svg, encoding="utf-8")

    try:
        asyncio.run(run())
    finally:
        if fake is not None:
            fake.close()
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.tui.screenshots", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--out", type=Path, default=OUT, help=f"folder for the SVGs (default: {OUT.relative_to(ROOT)}/)")
    p.add_argument("--only", nargs="+", metavar="NAME", choices=[s.name for s in SHOTS], help="take only these")
    args = p.parse_args(argv)

    from ..bench.common import setup_environment

    setup_environment()  # offline, no user config, the shared ONNX cache
    from memlens.config import load_settings
    from memlens.embed import make_embedder

    settings = load_settings()
    embedder = make_embedder(settings.embedding, settings.cache_dir)
    embedder.load()
    print(f"building the demo store in {WORK} …", file=sys.stderr)
    stores = build_stores(settings, embedder)
    args.out.mkdir(parents=True, exist_ok=True)

    failed, skipped = [], []
    for shot in SHOTS:
        if args.only and shot.name not in args.only:
            continue
        if shot.needs and importlib.util.find_spec(shot.needs) is None:
            skipped.append(shot.name)
            print(f"  skip {shot.name}: {shot.needs} does not exist yet", file=sys.stderr)
            continue
        try:
            if shot.store == "index" and "index" not in stores:
                stores["index"] = build_index_store(stores, settings, embedder)
            path = take(shot, _fresh_copy(stores, shot.store), args.out, settings, embedder)
        except Exception:  # one broken screen must not cost the others
            failed.append(shot.name)
            print(f"  FAILED {shot.name}:\n{traceback.format_exc()}", file=sys.stderr)
            continue
        print(f"  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}  {shot.what}", file=sys.stderr)
    shutil.rmtree(WORK, ignore_errors=True)
    if skipped:
        print(f"skipped (screen not built yet): {', '.join(skipped)}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
