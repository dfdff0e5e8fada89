"""Keys work where the cursor is: in a text field the footer names only keys that act there, Escape leaves the
search box, the stale line names the key that re-runs from where the cursor is, and a key meant as a command never
lands in the query (where it would be searched, logged and replayed as text)."""

from __future__ import annotations

import asyncio

import pytest
from textual.keys import _character_to_key

from memlens.tui.keys import types_text

from .conftest import search, settle

pytestmark = pytest.mark.model

SIZE = (120, 40)
TYPED = {_character_to_key(chr(c)) for c in range(32, 127)}  # the key names of the printable characters


def footer(app) -> dict[str, object]:
    """What the footer shows now: key -> binding."""
    return {k: b.binding for k, b in app.screen.active_bindings.items() if b.binding.show}


def typed_by_the_field(app) -> list[str]:
    """Footer keys that the focused text field would take as text instead (none may be shown)."""
    if not types_text(app.focused):
        return []
    out = []
    for key, binding in footer(app).items():
        if key in TYPED and not binding.priority:
            out.append(key)
    return out


class Searches:
    """Records every query the app searches (and so logs)."""

    def __init__(self, app) -> None:
        self.real, self.queries = app.lens.search, []
        app.lens.search = self

    def __call__(self, query, **kwargs):
        self.queries.append(query)
        return self.real(query, **kwargs)


def test_search_box_hints_name_keys_that_work_there_and_escape_leaves_it(make_app):
    app = make_app()

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await search(pilot, "callbacks blocking")
            main, query = app.main, app.main.query_one("#query")
            assert app.focused is query  # the default
            shown = footer(app)
            assert typed_by_the_field(app) == [], shown
            assert "escape" in shown and "r" not in shown and "q" not in shown
            await pilot.press("escape")
            assert app.focused is main.query_one("#results")
            shown = footer(app)
            assert {"r", "d", "x", "c", "s", "q"} <= set(shown) and "escape" not in shown
            assert query.value == "callbacks blocking"
            await pilot.press("slash")  # and back in
            assert app.focused is query and typed_by_the_field(app) == []

    asyncio.run(run())


def test_stray_keys_outside_the_box_never_edit_the_query(make_app):
    app = make_app()
    searches = Searches(app)

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await search(pilot, "callbacks blocking")
            main, query = app.main, app.main.query_one("#query")
            await pilot.press("escape", "r", "z", "1", "d", "d", "k")
            await settle(pilot)
            assert query.value == "callbacks blocking"
            assert main.query_text == "callbacks blocking"
            assert set(searches.queries) == {"callbacks blocking"} and len(searches.queries) == 2  # typed, then r
            assert main.show_dropped is False

    asyncio.run(run())


def _write_elsewhere(app) -> None:
    from memlens import Memory

    with Memory.open(app.lens.store_path, embedder=app.lens.mem.embedder) as other:
        n = other.count()
        other.add(f"Timer callbacks finish within {n} ms.", wing="lifecore_ros2", type="invariant")


def test_the_stale_line_names_the_key_that_reruns_where_the_cursor_is(make_app):
    app = make_app(watch=True, poll_interval=0.2)
    searches = Searches(app)

    async def stale(pilot) -> str:
        _write_elsewhere(app)
        for _ in range(50):
            await pilot.pause(0.1)
            if app.main.stale is not None:
                break
        return str(app.main.query_one("#status").render())

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await search(pilot, "callbacks blocking")
            main, query = app.main, app.main.query_one("#query")
            assert app.focused is query
            assert stale_line(await stale(pilot)) == "enter re-runs"
            await pilot.press("enter")  # the same query again: its results were stale
            await settle(pilot)
            assert main.stale is None and len(searches.queries) == 2
            assert app.focused is main.query_one("#results")  # Enter moved on to the results

            assert stale_line(await stale(pilot)) == "r re-runs"
            await pilot.press("slash")
            assert stale_line(str(main.query_one("#status").render())) == "enter re-runs"
            await pilot.press("escape")
            assert stale_line(str(main.query_one("#status").render())) == "r re-runs"
            await pilot.press("r")
            await settle(pilot)
            assert main.stale is None and len(searches.queries) == 3
            assert query.value == "callbacks blocking" and set(searches.queries) == {"callbacks blocking"}

    asyncio.run(run())


def stale_line(status: str) -> str:
    assert status.startswith("⚠ stale since "), status
    return status.rpartition(" · ")[2]


def test_no_screen_hints_a_key_its_text_field_would_type(make_app):
    """The entry editor, the assistant shell, the context preview and "why not?" each have a text field with
    focus: the footer there (the app's q included) names no key the field would take as text."""
    app = make_app()

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await search(pilot, "callbacks blocking")
            for key in ("n", "s", "c", "x"):
                await pilot.press("escape")  # out of the search box (or back from the screen)
                assert app.screen is app.main
                await pilot.press(key)
                await settle(pilot)
                assert app.screen is not app.main, key
                fields = [w for w in app.screen.query("Input, TextArea") if w.can_focus]
                assert fields, key
                fields[0].focus()
                await pilot.pause()
                assert types_text(app.focused)
                assert typed_by_the_field(app) == [], (key, footer(app))
                await pilot.press("escape")
                await settle(pilot)
                if app.screen is not app.main:  # a form with edits asks first
                    await pilot.press("y")
                    await settle(pilot)

    asyncio.run(run())


def test_tab_completes_in_the_search_box_and_an_emptied_box_shows_no_results(make_app):
    """Tab accepted no completion there (the README says it does): it moved the focus away, and the letters typed
    next ran as keys (q quit). And an emptied box kept the last query's rows, which r ran again though the box no
    longer held it."""
    app = make_app()

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            main, query = app.main, app.main.query_one("#query")
            await settle(pilot)
            query.focus()
            await pilot.press(*"wing=lif")
            await settle(pilot)
            await pilot.press("tab")
            assert app.focused is query and query.value == "wing=lifecore_ros2"
            await pilot.press(*" callbacks")
            await settle(pilot)
            await search(pilot, query.value)
            assert main.bundle is not None and main.query_one("#results").row_count > 0
            await pilot.press("tab")  # no completion shown: Tab moves on, as before
            assert app.focused is main.query_one("#results")
            query.focus()
            await pilot.press("ctrl+u")
            await settle(pilot)
            assert query.value == "" and main.bundle is None and main.query_one("#results").row_count == 0
            await pilot.press("escape", "r")
            await settle(pilot)
            assert main.bundle is None and main.query_text == ""

    asyncio.run(run())


def terminal_keys(data: str) -> list:
    """The keys Textual's terminal driver reads from ``data`` arriving in one read (the bytes of tmux send-keys, a
    fast typist, a macro), as the app receives them."""
    from textual._xterm_parser import XTermParser

    parser = XTermParser()
    return [*parser.feed(data), *parser.feed("")]  # the end of the input ends a pending ESC sequence as a pause does


async def burst(pilot, keys) -> None:
    """``keys`` all queued before the app handles the first (pilot.press waits after each key, a terminal does not)."""
    for key in keys:
        pilot.app.post_message(key)
    await settle(pilot)


def test_escape_and_a_letter_in_one_burst_act_on_the_results(make_app):
    """Escape left the search box only once the field had typed the letters read with it: escape then w typed w into
    the query (escape then q typed q rather than quit). The letter now acts where escape moved the focus."""
    from textual import events

    app = make_app()

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await search(pilot, "callbacks blocking")
            main, query = app.main, app.main.query_one("#query")
            wing = app.lens.active_wing
            assert app.focused is query
            await burst(pilot, [events.Key("escape", "\x1b"), events.Key("w", "w")])
            assert query.value == "callbacks blocking"
            assert app.focused is main.query_one("#results") and app.lens.active_wing != wing

    asyncio.run(run())


def test_escape_and_a_letter_from_a_terminal_act_on_the_results_and_arrows_still_move(make_app):
    """A terminal without the kitty keyboard protocol sends Esc, w typed fast as the bytes of alt+w, which Textual
    reads as alt+w and a text field typed as w. Nothing binds alt+w: it is escape, then w. The arrows' own escape
    sequences are keys as before, in the box and on the results, alone or after escape."""
    app = make_app()

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await search(pilot, "callbacks blocking")
            main, query = app.main, app.main.query_one("#query")
            results = main.query_one("#results")
            assert [k.key for k in terminal_keys("\x1bw")] == ["alt+w"]
            await burst(pilot, terminal_keys("\x1b[D\x1b[DX"))  # left, left, X
            assert query.value == "callbacks blockiXng" and app.focused is query
            wing = app.lens.active_wing
            await burst(pilot, terminal_keys("\x1bw"))
            assert query.value == "callbacks blockiXng" and app.focused is results and app.lens.active_wing != wing
            await burst(pilot, terminal_keys("/\x1b\x1b[B\x1b[B"))  # back in the box, then escape, down, down
            assert app.focused is results and results.cursor_row == 2 and query.value == "callbacks blockiXng"

    asyncio.run(run())


def test_escape_and_a_letter_in_one_burst_leave_the_shell_and_act_on_the_main_screen(make_app):
    """Escape closes the shell: the letter typed with it acts on the main screen, not in the shell's prompt."""
    from textual import events

    app = make_app()

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await search(pilot, "callbacks blocking")
            await pilot.press("escape", "s")  # the results, then the shell
            await settle(pilot)
            prompt = app.screen.query_one("#prompt")
            assert app.focused is prompt
            wing = app.lens.active_wing
            await burst(pilot, [events.Key("escape", "\x1b"), events.Key("w", "w")])
            assert app.screen is app.main and app.lens.active_wing != wing
            assert prompt.value == "" and app.main.query_one("#query").value == "callbacks blocking"

    asyncio.run(run())


def test_home_and_end_select_the_first_and_the_last_result(make_app):
    """In the results, home and end scrolled sideways and left the selected row where it was (enter then opened a
    row off screen): they select the first and the last row."""
    app = make_app()

    async def run() -> None:
        async with app.run_test(size=(120, 24)) as pilot:
            await search(pilot, "callbacks blocking")
            table = app.main.query_one("#results")
            table.focus()
            await settle(pilot)
            assert table.row_count > 3
            await pilot.press("down", "down")
            await pilot.press("end")
            await settle(pilot)
            assert table.cursor_row == table.row_count - 1
            await pilot.press("home")
            await settle(pilot)
            assert table.cursor_row == 0

    asyncio.run(run())


def test_a_burst_of_plus_keys_steps_the_context_budget_once_each(make_app):
    """Four + in one burst (a terminal's key repeat) raised the budget by one step: each read the budget the field's
    change message had not updated yet. Each counts now."""
    from textual import events

    app = make_app()

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await search(pilot, "callbacks blocking")
            app.context_preview(app.main.query_text)
            await settle(pilot)
            field = app.screen.query_one("#ctx-budget")
            field.value = "400"
            await settle(pilot)
            await burst(pilot, [events.Key("plus", "+")] * 4)
            assert field.value == "800"
            await burst(pilot, [events.Key("minus", "-")] * 3)
            assert field.value == "500"

    asyncio.run(run())
