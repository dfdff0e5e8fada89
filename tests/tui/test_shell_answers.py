"""The assistant shell answering with a chat model: a fake OpenAI-compatible server on 127.0.0.1 streams fixed
tokens, the store and the embedding model are the real ones. No sleeps: the tests wait on the app's state."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from ..fake_llm import FakeLLM
from ..fake_llm import cited_answer as cited_tokens
from .conftest import FIXED_NOW, pin_lens, settle

SIZE = (120, 40)
QUESTION = "why do callbacks block"


@pytest.fixture
def answer_app(tui_demo_store, snap_dir, settings, real_embedder):
    """``answer_app(fake, **llm)``: the app on a copy of the demo store, answering with the fake model."""
    from memlens.config import LlmConfig
    from memlens.tui.app import create_app

    def make(fake, **llm):
        path = snap_dir / "app.db"
        shutil.copy(tui_demo_store, path)
        llm.setdefault("read_timeout", 20.0)
        configured = settings.model_copy(update={"llm": LlmConfig(base_url=fake.base_url, model="fake-model", **llm)})
        app = create_app(path, settings=configured, embedder=real_embedder, now=lambda: FIXED_NOW,
                         watch=False, cursor_blink=False, active_wing="lifecore_ros2")
        pin_lens(app.lens)
        app.theme = "textual-dark"
        return app

    return make


async def until(pilot, condition, what: str, rounds: int = 600) -> None:
    """Let the app run until ``condition()`` holds (bounded: a failure, not a hang)."""
    for _ in range(rounds):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"the app never reached: {what}")


async def ask(pilot, line: str = QUESTION) -> None:
    """Open the shell and submit ``line`` without waiting for workers (a held stream would never finish)."""
    await settle(pilot)
    pilot.app.open_shell()
    await until(pilot, lambda: pilot.app.screen.llm_model is not None, "the shell knows its model")
    prompt = pilot.app.screen.query_one("#prompt")
    prompt.value = line
    prompt.focus()
    await pilot.press("enter")


def view(app):
    from memlens.tui.widgets.answer import AnswerView

    found = app.screen.query(AnswerView)
    return found.last() if found else None


def text_of(app, selector: str) -> str:
    return str(view(app).query_one(selector).render())


def test_tokens_appear_as_they_stream_then_citations_and_the_log(answer_app):
    with FakeLLM("hold", cited_tokens, hold_after=3) as fake:
        app = answer_app(fake)

        async def run():
            async with app.run_test(size=SIZE) as pilot:
                await ask(pilot)
                await until(pilot, lambda: view(app) is not None and view(app).text == "Callbacks block because ",
                            "the first three tokens")
                assert text_of(app, ".answer-text") == "Callbacks block because ▌"
                assert text_of(app, ".answer-status") == "answering with fake-model…"
                assert view(app).answer is None and not view(app).query(".citations")
                fake.release()
                await until(pilot, lambda: view(app).answer is not None, "the end of the answer")
                await settle(pilot)  # the log worker
                v = view(app)
                sent = v.prepared.sent_ids
                assert v.answer.complete and v.answer.citations.valid == sent[:2]
                assert v.answer.citations.invented == ["lc-made-up-999"]
                assert text_of(app, ".answer-text").endswith(", lc-made-up-999].")
                assert text_of(app, ".answer-status") == "✓ fake-model · 2 entries cited · 1 invented"
                options = v.query_one(".citations")
                assert [options.get_option_at_index(i).id for i in range(options.option_count)] == \
                    [*sent[:2], "invented:lc-made-up-999"]
                assert options.get_option_at_index(2).disabled
                assert "Ask · budget 1200 tokens · answers by fake-model" in str(app.screen.query_one("#prompt-box").border_title)
                return sent, await asyncio.to_thread(app.lens.cited)

        sent, cited = asyncio.run(run())
    assert sorted(c["entry_id"] for c in cited) == sorted(sent[:2])
    system, user = fake.requests[0]["body"]["messages"]
    assert QUESTION in user["content"] and "## Memory" not in system["content"]


def test_citation_highlights_the_source_and_opens_the_entry(answer_app):
    with FakeLLM("stream", cited_tokens) as fake:
        app = answer_app(fake)

        async def run():
            async with app.run_test(size=SIZE) as pilot:
                await ask(pilot)
                await until(pilot, lambda: view(app) is not None and view(app).answer is not None, "the answer")
                await settle(pilot)
                v = view(app)
                second = v.answer.citations.valid[1]
                options = v.query_one(".citations")
                options.focus()
                options.highlighted = 1
                await settle(pilot)
                table = v.query_one(".sources")
                assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == second
                await pilot.press("enter")
                await settle(pilot)
                assert type(app.screen).__name__ == "EntryScreen" and app.screen.entry_id == second

        asyncio.run(run())


def test_a_stream_cut_midway_keeps_the_partial_answer(answer_app):
    from memlens.assist import log as answer_log

    with FakeLLM("die", ["Callbacks ", "block ", "because"], die_after=2) as fake:
        app = answer_app(fake)

        async def run():
            async with app.run_test(size=SIZE) as pilot:
                await ask(pilot)
                await until(pilot, lambda: view(app) is not None and view(app).answer is not None, "the answer")
                await settle(pilot)
                assert text_of(app, ".answer-text") == "Callbacks block "
                assert text_of(app, ".answer-status").startswith("✗ incomplete: the connection to the model broke")
                assert "broke midway" in str(app.screen.query_one("#shell-status").render())
                assert not view(app).answer.complete
                return await asyncio.to_thread(app.lens.call, lambda: answer_log.answers(app.lens.mem))

        (row,) = asyncio.run(run())
    assert row["complete"] is False and "broke midway" in row["error"]


def test_a_refused_request_says_no_answer_and_why(answer_app):
    with FakeLLM("status", status=401) as fake:
        app = answer_app(fake)

        async def run():
            async with app.run_test(size=SIZE) as pilot:
                await ask(pilot)
                await until(pilot, lambda: view(app) is not None and view(app).answer is not None, "the answer")
                await settle(pilot)
                assert text_of(app, ".answer-text") == "(no answer)"
                status = text_of(app, ".answer-status")
                assert status.startswith("✗ no answer: ") and "HTTP 401 (check llm.api_key)" in status
                assert not view(app).query(".citations") and view(app).query_one(".sources").row_count > 0

        asyncio.run(run())


def test_without_a_model_the_shell_shows_context_and_says_how_to_configure(make_app):
    from memlens.tui.screens.shell import NO_MODEL
    from memlens.tui.widgets.answer import AnswerView

    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.open_shell()
            await settle(pilot)
            assert NO_MODEL in str(app.screen.query_one("#welcome").render())
            assert "MEMLENS_LLM__BASE_URL" in NO_MODEL
            prompt = app.screen.query_one("#prompt")
            prompt.value = QUESTION
            await pilot.press("enter")
            await settle(pilot)
            assert not app.screen.query(AnswerView)
            assert "context for the agent" in str(app.screen.query("Collapsible").last().title)

    asyncio.run(run())


# -- snapshots ---------------------------------------------------------------------------------------


def test_shell_streaming_an_answer(answer_app, snap_compare):
    with FakeLLM("hold", cited_tokens, hold_after=5) as fake:
        app = answer_app(fake)

        async def run_before(pilot):
            await ask(pilot)
            await until(pilot, lambda: view(app) is not None and view(app).text.endswith("runs them "), "five tokens")
            await pilot.pause()

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_shell_answer_with_citations(answer_app, snap_compare):
    with FakeLLM("stream", cited_tokens) as fake:
        app = answer_app(fake)

        async def run_before(pilot):
            await ask(pilot)
            await until(pilot, lambda: view(app) is not None and view(app).answer is not None, "the answer")
            await settle(pilot)
            options = view(app).query_one(".citations")
            options.focus()
            options.highlighted = 1  # the second citation, highlighted in the sources table
            await settle(pilot)

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# -- the metrics screen: which entries answers cite --------------------------------------------------


def log_pinned_answers(path, fake, embedder, settings) -> list[list[str]]:
    """Two real answers through the engine (fake model), then their times and latencies pinned in the store."""
    import json
    from datetime import timedelta

    from memlens import Memory
    from memlens.assist.ask import ask as ask_engine
    from memlens.assist.llm import Endpoint
    from memlens.models import format_ts

    from .conftest import PINNED_MS

    ep = Endpoint(fake.base_url, "fake-model", timeout=20, read_timeout=20)
    with Memory.open(path, embedder=embedder, settings=settings) as mem:
        cited = [ask_engine(mem, q, ep, active_wing="lifecore_ros2", now=FIXED_NOW).citations.valid
                 for q in (QUESTION, "callbacks blocking the executor")]
        with mem.conn:
            rows = mem.conn.execute("SELECT seq, detail FROM audit WHERE action = 'retrieval' ORDER BY seq").fetchall()
            for i, (seq, detail) in enumerate(rows):
                d = json.loads(detail)
                d["latency_ms"] = {k: PINNED_MS.get(k, 0.0) for k in d["latency_ms"]}
                ts = format_ts(FIXED_NOW - timedelta(seconds=60 * (len(rows) - i)))
                mem.conn.execute("UPDATE audit SET ts = ?, detail = ? WHERE seq = ?", (ts, json.dumps(d), seq))
            mem.conn.execute("UPDATE answers SET ts = (SELECT ts FROM audit WHERE seq = answers.retrieval_seq)")
    return cited


def test_metrics_lists_the_entries_answers_cite(make_app, settings, real_embedder):
    from memlens.tui.screens.metrics import MetricsScreen

    app = make_app()
    with FakeLLM("stream", cited_tokens) as fake:
        cited = log_pinned_answers(app.lens.store_path, fake, real_embedder, settings)
    counts: dict[str, int] = {}
    for ids in cited:
        for i in ids:
            counts[i] = counts.get(i, 0) + 1

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.open_metrics()
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, MetricsScreen) and screen.has_class("cited")
            table = screen.query_one("#cited")
            assert table.row_count == len(counts)
            first = table.get_row_at(0)
            assert max(counts.values()) == 2  # both answers cite the same top entry
            assert counts[first[0]] == max(counts.values()) and str(first[2]) == str(counts[first[0]])  # most cited first
            assert "2 answers logged" in str(table.border_title)

    asyncio.run(run())


def test_metrics_with_answers(make_app, snap_compare, settings, real_embedder):
    app = make_app()
    with FakeLLM("stream", cited_tokens) as fake:
        log_pinned_answers(app.lens.store_path, fake, real_embedder, settings)

    async def run_before(pilot):
        await settle(pilot)
        pilot.app.open_metrics()
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
