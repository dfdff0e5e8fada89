"""The assistant shell: parsing without Textual, then the real screen on a real store and model."""

from __future__ import annotations

import asyncio

import pytest

from memlens.tui import shell_commands as sc

from .conftest import FIXED_NOW, settle

SIZE = (120, 40)


# -- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("", None),
        ("   ", None),
        ("why do callbacks block", sc.Ask("why do callbacks block")),
        ("  /memory why did lidar_filter hang ", sc.Ask("/memory why did lidar_filter hang")),
        ("@academic executor scheduling", sc.Ask("executor scheduling", "academic")),
        ("@personal  my editor", sc.Ask("my editor", "personal")),
        ("note: the lidar hangs", sc.Ask("note: the lidar hangs")),
        (":deprecate lc-arch-004", sc.SetStatus("lc-arch-004", "deprecated")),
        (":review lc-arch-004", sc.SetStatus("lc-arch-004", "under_review")),
        (":activate lc-arch-011", sc.SetStatus("lc-arch-011", "active")),
        (':task complete t-100 --intent "Fix shutdown"', sc.CompleteTask("t-100", "Fix shutdown")),
        (":task complete t-100 --intent='Fix shutdown' --failed", sc.CompleteTask("t-100", "Fix shutdown", True)),
        (':task complete --failed --intent "Fix it" t-1', sc.CompleteTask("t-1", "Fix it", True)),
        (':task block t-7 --reason "rig offline"', sc.BlockTask("t-7", "rig offline")),
        (":task unblock task-121", sc.UnblockTask("task-121")),
        (":budget 800", sc.SetBudget(800)),
        (":budget", sc.SetBudget(None)),
        (":help", sc.Help()),
        (":clear", sc.Clear()),
    ],
)
def test_parse_good_lines(line, expected):
    assert sc.parse(line) == expected


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (":deprecat lc-arch-004", "unknown command :deprecat; did you mean :deprecate?"),
        (":frobnicate", "unknown command :frobnicate (:help lists them)"),
        (":", "empty command"),
        (":deprecate", "missing an argument: :deprecate ID"),
        (":review a b", "unexpected 'b': :review ID"),
        (":task", "usage: :task complete|block|unblock"),
        (":task finish t-1", "unknown task action 'finish'"),
        (":task complete t-1", "--intent is required"),
        (':task complete --intent "x"', "missing an argument"),
        (":task complete t-1 --intent", "--intent needs a value"),
        (':task complete t-1 --intent "x" --why', "unknown option --why"),
        (':task complete t-1 --intent "x" --failed=yes', "--failed takes no value"),
        (":task block t-1", "--reason is required"),
        (":task unblock", "missing an argument: :task unblock TASK_ID"),
        (':task block t-1 --reason "unclosed', "cannot parse the command: no closing quotation"),
        (":budget lots", "whole number of tokens, got 'lots'"),
        (":budget 0", "from 1 to 1,000,000 tokens, got 0"),
        (":budget 1000001", "from 1 to 1,000,000 tokens, got 1,000,001"),
        (":budget 800 900", "unexpected '900'"),
        (":help me", "unexpected 'me'"),
        ("/memry why", "unknown command /memry"),
        ("/memory", "usage: /memory QUESTION"),
        ("@academic", "usage: @academic QUESTION"),
        ("@ question", "usage: @PROFILE QUESTION"),
    ],
)
def test_parse_bad_lines(line, message):
    with pytest.raises(sc.ShellError) as err:
        sc.parse(line)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_an_unknown_profile_is_refused_before_the_line_leaves_the_input():
    """The engine refused an unknown @profile only after the shell had emptied the input: the question typed was
    lost, where every other error leaves the line to be fixed. The store's profiles are checked while parsing."""
    profiles = sc.Known().profiles
    with pytest.raises(sc.ShellError) as err:
        sc.parse("@acadmic why do callbacks block", profiles)
    assert str(err.value) == ("unknown profile 'acadmic'; did you mean @academic? "
                              "(profiles: memory, academic, personal, conversation)")
    with pytest.raises(sc.ShellError, match="unknown profile 'bogus' \\(profiles: "):
        sc.parse("@bogus executor", profiles)
    assert sc.parse("@academic executor scheduling", profiles) == sc.Ask("executor scheduling", "academic")


def test_suggest_completes_commands_profiles_and_ids():
    known = sc.Known(entry_ids=["lc-arch-001", "lc-arch-004", "ros2-arch-001"], task_ids=["task-101", "task-121"],
                     blocked_ids=["task-121"])
    assert sc.suggest(":dep", known) == ":deprecate "
    assert sc.suggest(":t", known) == ":task "
    assert sc.suggest("@ac", known) == "@academic "
    assert sc.suggest("/me", known) == "/memory "
    assert sc.suggest(":deprecate lc-arch-00", known) == ":deprecate lc-arch-001"
    assert sc.suggest(":review ros", known) == ":review ros2-arch-001"
    assert sc.suggest(":task c", known) == ":task complete"
    assert sc.suggest(":task complete task-1", known) == ":task complete task-101"
    assert sc.suggest(":task unblock task-1", known) == ":task unblock task-121"
    assert sc.suggest(":task complete task-101 --in", known) == ":task complete task-101 --intent"
    for nothing in ("", "why do", ":deprecate ", ":deprecate lc-arch-001", ":deprecate x y", "/memory"):
        assert sc.suggest(nothing, known) is None


def test_history_walks_back_and_returns_the_draft():
    h = sc.History()
    assert h.previous("draft") is None
    for line in ("one", "two", "two", " ", "three"):
        h.add(line)
    assert h.lines == ["one", "two", "three"]
    assert [h.previous("dra"), h.previous("x"), h.previous("x"), h.previous("x")] == ["three", "two", "one", None]
    assert [h.next(), h.next(), h.next(), h.next()] == ["two", "three", "dra", None]


# -- the screen, on a real store -------------------------------------------------------------------


async def open_shell(pilot):
    pilot.app.open_shell()
    await settle(pilot)
    return pilot.app.screen


async def type_line(pilot, line: str) -> None:
    """Type a line and press Enter, the way a user does."""
    await pilot.click("#prompt")
    for ch in line:
        await pilot.press("space" if ch == " " else ch)
    await pilot.press("enter")
    await settle(pilot)


async def submit(pilot, line: str) -> None:
    """Set the line and press Enter (for lines with characters that have no simple key name)."""
    prompt = pilot.app.screen.query_one("#prompt")
    prompt.value = line
    prompt.cursor_position = len(line)
    prompt.focus()
    await pilot.press("enter")
    await settle(pilot)


def reopen(app):
    """The app closes its store on exit: read what it wrote through a fresh connection."""
    from memlens import Memory

    return Memory.open(app.lens.store_path, embedder=app.lens.mem.embedder)


def last_result(screen) -> str:
    return str(screen.query(".command .result").last().render())


def status_text(screen) -> str:
    return str(screen.query_one("#shell-status").render())


def test_deprecate_writes_status_and_audit(make_app):
    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = await open_shell(pilot)
            await type_line(pilot, ":deprecate lc-arch-004")
            assert "active → deprecated" in last_result(screen)
            assert screen.query_one("#prompt").value == ""

    asyncio.run(run())
    with reopen(app) as mem:
        assert mem.get("lc-arch-004").status.value == "deprecated"
        row = mem.audit("lc-arch-004", limit=1)[0]
        assert row["action"] == "update"
        assert (row["before"]["status"], row["after"]["status"]) == ("active", "deprecated")


def test_a_question_with_a_misspelt_profile_stays_in_the_input(make_app):
    """An unknown @profile emptied the input (the engine refused it after the line was taken), unlike every other
    error: the line now stays to be fixed, the status line suggests the profile meant, and nothing was asked."""
    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = await open_shell(pilot)
            await submit(pilot, "@acadmic why do callbacks block")
            assert screen.query_one("#prompt").value == "@acadmic why do callbacks block"
            assert status_text(screen).startswith("✗ unknown profile 'acadmic'; did you mean @academic?"), status_text(screen)
            assert not screen.query(".exchange") and not screen.query("Exchange")

    asyncio.run(run())


def test_task_complete_lands_in_working_memory(make_app):
    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = await open_shell(pilot)
            await submit(pilot, ':task complete t-100 --intent "Fix shutdown"')
            assert "task t-100 completed (success): Fix shutdown" in last_result(screen)
            assert "t-100" in screen.known.task_ids  # completion values refreshed after the write

    asyncio.run(run())
    with reopen(app) as mem:
        window = mem.tasks.window()
    newest = window.tasks[-1]
    assert (newest.task_id, newest.intent, newest.outcome.value) == ("t-100", "Fix shutdown", "success")
    assert newest.completed_at == FIXED_NOW  # the app's clock, not the wall clock


def test_block_and_unblock_through_the_shell(make_app):
    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await open_shell(pilot)
            await submit(pilot, ':task block t-200 --reason "waiting for the rig"')
            assert "t-200" in [b.task_id for b in app.lens.mem.tasks.blockers()]
            await submit(pilot, ":task unblock t-200")
            assert "t-200" not in [b.task_id for b in app.lens.mem.tasks.blockers()]

    asyncio.run(run())


def test_memory_command_uses_the_conversation_profile(make_app):
    app = make_app()
    asked = []
    real_context = app.lens.context

    def spy(query, budget, profile=None):
        markdown, bundle = real_context(query, budget, profile)
        asked.append((query, budget, bundle))
        return markdown, bundle

    app.lens.context = spy

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = await open_shell(pilot)
            await submit(pilot, "/memory why did lidar_filter hang")
            assert "conversation" in str(screen.query_one("#exchange-1 .trace").render())

    asyncio.run(run())
    ((query, budget, bundle),) = asked
    assert query == "/memory why did lidar_filter hang" and budget == sc.DEFAULT_BUDGET
    assert bundle.trace.profile == "conversation"
    assert bundle.results and all(r.entry.kind.value == "turn" for r in bundle.results)


def test_plain_question_and_budget_setting(make_app):
    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = await open_shell(pilot)
            await type_line(pilot, ":budget 300")
            assert screen.budget == 300
            await submit(pilot, "why do callbacks block")
            trace = str(screen.query_one("#exchange-1 .trace").render())
            assert trace.startswith("memory") and "/300 tokens" in trace

    asyncio.run(run())


def test_bad_command_shows_an_inline_error_and_writes_nothing(make_app):
    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            before = app.lens.mem.audit(limit=1)[0]["seq"]
            screen = await open_shell(pilot)
            await type_line(pilot, ":deprecat lc-arch-004")
            assert "unknown command :deprecat; did you mean :deprecate?" in status_text(screen)
            assert screen.query_one("#prompt").value == ":deprecat lc-arch-004"  # kept, to be fixed
            await submit(pilot, ":deprecate lc-nope-999")
            assert "no entry with id 'lc-nope-999'" in status_text(screen)
            await submit(pilot, ":task unblock task-101")
            assert "has no active blocker" in status_text(screen)
            assert not screen.query(".command")
            writes = [r for r in app.lens.mem.audit(limit=20) if r["seq"] > before and r["action"] != "retrieval"]
            assert writes == []
            assert app.lens.mem.get("lc-arch-004").status.value == "active"

    asyncio.run(run())


def test_history_recall_with_up_arrow(make_app):
    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = await open_shell(pilot)
            prompt = screen.query_one("#prompt")
            await type_line(pilot, ":budget 900")
            await type_line(pilot, ":help")
            await pilot.press("u", "p")
            await pilot.press("up")
            assert prompt.value == ":help"
            await pilot.press("up")
            assert prompt.value == ":budget 900"
            await pilot.press("down", "down")
            assert prompt.value == "up"  # the draft comes back
            await pilot.press("up", "up", "enter")
            await settle(pilot)
            assert screen.budget == 900

    asyncio.run(run())


def test_completion_offers_ids_from_the_store(make_app):
    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = await open_shell(pilot)
            await pilot.click("#prompt")
            for key in ":dep":
                await pilot.press(key)
            await settle(pilot)
            await pilot.press("tab")
            for key in "lc-arch-00":
                await pilot.press(key)
            await settle(pilot)
            await pilot.press("tab")
            assert screen.query_one("#prompt").value == ":deprecate lc-arch-001"

    asyncio.run(run())


def test_escape_returns_to_the_main_screen(make_app):
    app = make_app()

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await open_shell(pilot)
            await pilot.press("escape")
            await settle(pilot)
            assert app.screen is app.main

    asyncio.run(run())


def test_shell_keeps_its_transcript_when_left_and_reopened(make_app):
    import asyncio

    from .conftest import settle

    app = make_app()

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            app.open_shell()
            await settle(pilot)
            first = app.screen
            await pilot.press(*":budget 500", "enter")
            await settle(pilot)
            await pilot.press("escape")
            await settle(pilot)
            assert app.screen is app.main
            app.open_shell()
            await settle(pilot)
            assert app.screen is first
            await pilot.press("up")
            assert app.screen.query_one("Input").value == ":budget 500"

    asyncio.run(main())
