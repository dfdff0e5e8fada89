"""What a user does by reflex must not crash the app nor lose work: a pasted query over the length limit is an
inline error, Enter on a result opens it, and q with an entry's edits unsaved asks before quitting."""

from __future__ import annotations

import asyncio
import html
import re

import pytest

from memlens.limits import MAX_QUERY_CHARS

from .conftest import run, search, settle, type_at_end, until

pytestmark = pytest.mark.model


def status(app) -> str:
    return str(app.main.query_one("#status").render())


def screen_text(app) -> str:
    """What the terminal shows, as text."""
    return html.unescape(re.sub(r"<[^>]+>", "", app.export_screenshot())).replace("\xa0", " ")


def test_a_query_over_the_limit_is_an_inline_error_and_the_app_goes_on(make_app):
    app = make_app()

    async def body(pilot):
        await search(pilot, "x" * (MAX_QUERY_CHARS + 1))
        assert app.is_running
        assert f"the limit is {MAX_QUERY_CHARS:,}" in status(app)
        await search(pilot, "callbacks blocking")  # and the box still searches
        assert app.main.bundle is not None and app.main.bundle.results
        assert "results" in status(app)

    run(app, body)


def test_enter_on_a_result_opens_that_entry(make_app):
    from memlens.tui.screens.entry import EntryScreen

    app = make_app()

    async def body(pilot):
        await search(pilot, "callbacks blocking")
        await pilot.press("escape", "down")
        chosen = app.main.selected()
        assert chosen is not None and app.main.bundle.results.index(chosen) == 1
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, EntryScreen)
        assert app.screen.entry_id == chosen.entry.id

    run(app, body)


def test_q_with_unsaved_edits_asks_first_and_keeps_them_on_no(make_app):
    from memlens.tui.screens.confirm import ConfirmScreen
    from memlens.tui.screens.entry import EntryScreen

    app = make_app()

    async def body(pilot):
        await search(pilot, "callbacks blocking")
        app.open_entry("lc-arch-001")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, EntryScreen)
        text = screen.query_one("#f-text")
        text.focus()
        text.move_cursor(text.document.end)
        await pilot.press(*" Draft.")
        screen.query_one("#f-status").focus()  # out of the text fields: q is the app's key again
        await settle(pilot)
        assert screen.unsaved_edits() == "text"
        await pilot.press("q")
        await settle(pilot)
        assert app.is_running and isinstance(app.screen, ConfirmScreen)
        await pilot.press("q")  # the question is answered first, not quit past
        assert app.is_running and isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert app.screen is screen and screen.query_one("#f-text").text.endswith(" Draft.")
        await pilot.press("q")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        assert not app.is_running

    run(app, body)


def test_ctrl_q_with_unsaved_edits_asks_as_q_does(make_app):
    from memlens.tui.screens.confirm import ConfirmScreen

    app = make_app()

    async def body(pilot):
        app.open_entry("lc-arch-001")
        await settle(pilot)
        await type_at_end(pilot, app.screen)
        await pilot.press("ctrl+q")  # from inside the text field, where the app's footer points for quitting
        await settle(pilot)
        assert app.is_running and isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert not app.is_running

    run(app, body)


def test_a_palette_command_over_unsaved_edits_asks_first_and_keeps_them_on_no(make_app, settings, real_embedder):
    """A palette command acts on the main screen, closing the entry above it: with edits unsaved it asks, as escape
    and q do (it closed the entry and lost them)."""
    from memlens.tui.screens.confirm import ConfirmScreen
    from memlens.tui.screens.entry import EntryScreen
    from memlens.tui.screens.metrics import MetricsScreen

    app = make_app()

    async def palette(pilot, command: str) -> None:
        await pilot.press("ctrl+p")
        await settle(pilot)
        await pilot.press(*command)
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)

    async def body(pilot):
        app.open_entry("lc-arch-001")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, EntryScreen)
        await type_at_end(pilot, screen)
        await palette(pilot, "Retrieval metrics")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert app.screen is screen and screen.query_one("#f-text").text.endswith(" Draft.")
        await pilot.press("escape")  # the entry's own question is open: a palette command does not stack another
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await palette(pilot, "Retrieval metrics")
        assert isinstance(app.screen, ConfirmScreen) and isinstance(app.screen_stack[-2], EntryScreen)
        await pilot.press("n")
        await settle(pilot)
        await palette(pilot, "Retrieval metrics")
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, MetricsScreen) and not any(isinstance(s, EntryScreen) for s in app.screen_stack)

    run(app, body)
    from memlens import Memory

    with Memory.open(app.lens.store_path, settings=settings, embedder=real_embedder) as m:
        assert not m.get("lc-arch-001").text.endswith(" Draft.")


def test_clearing_the_shell_twice_and_by_command_keeps_one_welcome(make_app):
    app = make_app()

    async def body(pilot):
        app.open_shell()
        await settle(pilot)
        shell = app.screen
        for _ in range(2):
            await pilot.press("ctrl+l")  # the first clear of a fresh shell crashed the app (DuplicateIds)
            await settle(pilot)
        prompt = shell.query_one("#prompt")
        prompt.value = ":clear"
        prompt.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert app.is_running and len(shell.query("#welcome")) == 1

    run(app, body)


def test_q_without_edits_quits_at_once(make_app):
    app = make_app()

    async def body(pilot):
        app.open_entry("lc-arch-001")
        await settle(pilot)
        app.screen.query_one("#f-status").focus()
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
        assert not app.is_running

    run(app, body)


def test_working_memory_ages_move_on_without_a_write(make_app, monkeypatch):
    """A task completed five weeks ago reads nine weeks four weeks later, though nothing was written meanwhile."""
    from datetime import timedelta

    from memlens.tui.widgets import working_memory

    from .conftest import FIXED_NOW

    monkeypatch.setattr(working_memory, "AGE_TICK_S", 0.1)
    app = make_app()
    clock = [FIXED_NOW]
    app.lens.now = lambda: clock[0]

    def ages() -> list[str]:
        svg = app.export_screenshot()
        text = html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")
        return re.findall(r"\b\d+w\b", text)

    async def body(pilot):
        before = ages()
        assert before and set(before) == {"5w"}, before  # the demo's tasks, done 39 days before the fixed clock
        clock[0] = FIXED_NOW + timedelta(days=28)
        assert await until(pilot, lambda: ages() == ["9w"] * len(before)), ages()

    run(app, body)


def test_the_apps_own_delete_does_not_mark_its_fresh_results_stale(make_app):
    """The delete re-runs the search; the poll that hears of the write afterwards must not call those rows stale.
    A write from elsewhere after the search still does."""
    from memlens import Memory

    app = make_app(watch=True, poll_interval=0.1)

    async def body(pilot):
        await search(pilot, "callbacks blocking")
        assert await until(pilot, lambda: app._generations is not None)  # the poll has read the generations
        app.open_entry("lc-arch-004")
        await settle(pilot)
        await pilot.press("ctrl+t")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        now = app.lens.generations()  # the poll has heard of the delete once it holds these
        assert await until(pilot, lambda: app._generations == now)
        await settle(pilot)
        assert app.screen is app.main and "lc-arch-004" not in [r.entry.id for r in app.main.bundle.results]
        assert app.main.stale is None, app.main.stale
        with Memory.open(app.lens.store_path, embedder=app.lens.mem.embedder) as other:
            other.add("Timer callbacks finish within 10 ms.", wing="lifecore_ros2", id="agent-002", type="invariant")
        assert await until(pilot, lambda: app.main.stale is not None)
        assert app.main.stale.get("entry_id") == "agent-002"

    run(app, body)


def test_a_search_over_every_wing_goes_stale_when_another_process_writes_a_new_wing(make_app):
    """Without an active wing and without wing=, a search covers every wing there is, and a wing created after it
    (a first entry on an empty store) may hold its answer: that write marks the results stale. A search narrowed to
    some wings stays fresh after a write elsewhere."""
    from memlens import Memory

    app = make_app(watch=True, poll_interval=0.1)

    async def body(pilot):
        app.lens.active_wing = None
        await search(pilot, "zebra stripes pattern")
        assert app.main.bundle is not None and "zoo" not in app.main.bundle.trace.wings_searched
        assert await until(pilot, lambda: app._generations is not None)
        with Memory.open(app.lens.store_path, embedder=app.lens.mem.embedder) as other:
            other.add("Zebra stripes are a pattern unique to each animal.", wing="zoo", id="zoo-001")
        assert await until(pilot, lambda: app.main.stale is not None)
        assert app.main.stale.get("entry_id") == "zoo-001" and status(app).startswith("⚠ stale since add zoo-001 in zoo")
        await pilot.press("enter")  # re-runs from the search box
        await settle(pilot)
        assert app.main.stale is None and "zoo-001" in [r.entry.id for r in app.main.bundle.results]

        app.lens.active_wing = "lifecore_ros2"  # narrowed to lifecore_ros2 and _global: a write to zoo is elsewhere
        await search(pilot, "callbacks blocking")
        seen = app.lens.generations()
        with Memory.open(app.lens.store_path, embedder=app.lens.mem.embedder) as other:
            other.add("Giraffes sleep standing up.", wing="zoo", id="zoo-002")
        assert await until(pilot, lambda: app._generations is not None and app._generations != seen)
        await settle(pilot)
        assert app.main.stale is None, app.main.stale

    run(app, body)


def test_opening_an_entry_deleted_elsewhere_says_so_instead_of_a_blank_form(make_app):
    from memlens import Memory, attribution
    from memlens.tui.screens.entry import EntryScreen

    app = make_app()

    async def body(pilot):
        await search(pilot, "callbacks blocking")
        with Memory.open(app.lens.store_path, embedder=app.lens.mem.embedder) as other, \
                attribution.acting_as({"name": "cleanup-agent", "version": "2", "via": "mcp"}):
            other.delete("lc-arch-004")
        app.open_entry("lc-arch-004")  # the row is still listed: the results were read before the delete
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, EntryScreen) and screen.query_one("#entry-form").disabled
        said = str(screen.query_one("#entry-error").render())
        assert said.startswith("✗ deleted by cleanup-agent 2 (mcp) at ") and said.endswith(" UTC"), said
        assert screen.query_one("#entry-form").border_title == "Entry lc-arch-004 · deleted"
        assert screen.unsaved_edits() == ""
        # no fields (they showed the selects' first values, turn / invariant / active, as if they were the entry's)
        def visible(widget) -> bool:
            while widget is not screen:
                if not widget.display:
                    return False
                widget = widget.parent
            return True

        assert not [w.id for w in screen.query("#entry-form Input, #entry-form Select, #f-text") if visible(w)]
        # and no key that writes: the footer offers esc only
        shown = {a.binding.action for a in screen.active_bindings.values() if a.enabled and a.binding.show}
        assert not {"save", "delete", "undo_review"} & shown and not any(a.startswith("set_status") for a in shown), shown
        assert "close" in shown
        await pilot.press("ctrl+t")  # does nothing: no question about deleting what is gone
        await settle(pilot)
        assert app.screen is screen
        said = screen_text(app)
        assert "Audit history" in said and "by cleanup-agent 2 (mcp)" in said  # the history the audit kept
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is app.main

    run(app, body)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_a_deleted_entrys_line_takes_one_line_at_120_and_80_columns(make_app, size):
    """The line beside the side panel (64 cells at 120 columns) wrapped onto a second line: it named the id again (the
    form's title has it) and the keys (the footer has them). Deleted by a client with a version, as an agent is."""
    from memlens import Memory, attribution
    from memlens.tui.screens.entry import EntryScreen

    app = make_app()

    async def body(pilot):
        with Memory.open(app.lens.store_path, embedder=app.lens.mem.embedder) as other, \
                attribution.acting_as({"name": "claude-code", "version": "1.0.51", "via": "mcp"}):
            other.delete("lc-arch-004")
        app.open_entry("lc-arch-004")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, EntryScreen) and screen.gone
        line = screen.query_one("#entry-error")
        said = str(line.render())
        assert line.size.height == 1, (line.size, said)
        assert said.startswith("✗ deleted by claude-code 1.0.51 (mcp) at "), said
        shown = [part.strip() for row in screen_text(app).splitlines() for part in row.split("│")]
        assert said in shown, said  # whole, between the form's borders

    run(app, body, size)


BURST = [("a", "a"), ("b", "b"), ("c", "c"), ("backspace", None), ("backspace", None), ("d", "d"), ("e", "e"), ("f", "f"),
         ("left", None), ("x", "x")]


async def burst(pilot) -> None:
    """The keys of ``BURST`` arriving in one read of the terminal (a fast typist, a macro, tmux send-keys): all queued
    before the app handles the first, as pilot.press (which waits after each key) never does."""
    from textual import events

    for key, char in BURST:
        pilot.app.post_message(events.Key(key, char))
    await settle(pilot)


def test_letters_typed_in_one_burst_after_slash_land_in_the_search_box(make_app):
    """/ moved the focus to the search box only once the keys already read had been handled: letters typed in the
    same burst (tmux send-keys, a macro, a fast typist) fired the results' keys instead (w switched the active wing,
    i opened the code index, n a new entry; q would quit). They are now typed into the box."""
    from textual import events

    app = make_app()

    async def body(pilot):
        await pilot.press("escape")  # the cursor on the results: letters are keys there
        await settle(pilot)
        wing = app.lens.active_wing
        for key, char in [("slash", "/"), ("w", "w"), ("i", "i"), ("n", "n"), ("g", "g")]:
            app.post_message(events.Key(key, char))
        await settle(pilot)
        assert app.screen is app.main and app.lens.active_wing == wing
        assert app.main.query_one("#query").value == "wing"

    run(app, body)


def test_editing_keys_typed_in_one_burst_apply_in_order(make_app):
    """A field's own editing keys (backspace, arrows) keep their place among the characters typed after them: the
    query box, an entry's text and the shell's prompt."""
    from memlens.tui.screens.entry import EntryScreen

    app = make_app()

    async def body(pilot):
        query = app.main.query_one("#query")
        query.focus()
        await burst(pilot)
        assert query.value == "adexf"  # not "abcd…": the backspaces applied after the letters typed after them

        app.open_entry("lc-arch-001")
        await settle(pilot)
        assert isinstance(app.screen, EntryScreen)
        text = app.screen.query_one("#f-text")
        text.focus()
        text.move_cursor(text.document.end)
        before = text.text
        await burst(pilot)
        assert text.text == before + "adexf"
        text.text = before  # nothing left unsaved: escape leaves without asking
        await pilot.press("escape")
        await settle(pilot)

        app.open_shell()
        await settle(pilot)
        prompt = app.screen.query_one("#prompt")
        prompt.focus()
        await burst(pilot)
        assert prompt.value == "adexf"

    run(app, body)


def test_a_narrow_footer_keeps_review_help_and_quit(make_app):
    """At 80 columns the footer leaves out the keys F1 lists anyway (Re-run, Dropped, …) rather than cutting off
    Review, Wing, Help and Quit; at 120 every key is there. The keys left out still work."""
    from textual.widgets._footer import FooterKey

    from memlens.tui.screens.review import COLUMNS

    app = make_app()

    def shown() -> list[str]:
        return [k.description for k in app.screen.query(FooterKey) if "-command-palette" not in k.classes]

    async def body(pilot):
        await pilot.press("escape")  # out of the search box: the results' keys
        await settle(pilot)
        assert {"Review", "Wing", "Help", "Quit", "Search"} <= set(shown()) and "Re-run" not in shown(), shown()
        await pilot.resize_terminal(120, 40)
        await settle(pilot)
        assert {"Re-run", "Dropped", "New", "Context", "Review", "Help", "Quit"} <= set(shown()), shown()
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        await pilot.press("d")  # a key the narrow footer leaves out still works
        await settle(pilot)
        assert app.main.show_dropped
        await pilot.press("v")
        await settle(pilot)
        assert {"Accept", "Reject", "Undo", "Back", "Quit"} <= set(shown()), shown()
        table = app.screen.query_one("#review-items")
        cells = [c.width for c in table.columns.values()]  # (each column has a cell of padding each side)
        assert sum(cells) + 2 * len(cells) <= table.scrollable_content_region.width, cells  # "against" on screen
        await pilot.resize_terminal(120, 40)
        await settle(pilot)
        assert [c.width for c in table.columns.values()] == [w for _, w in COLUMNS]

    run(app, body, size=(80, 24))


def test_at_60_columns_the_footers_keep_help_quit_save_and_close_whole(make_app):
    """At 60 columns the main footer cut off Help and Quit, the entry's its Close key in the middle of Delete: the
    keys that do not fit leave it whole (F1 lists them; they still work)."""
    from textual.widgets._footer import FooterKey

    from memlens.tui.footer import PALETTE_CELLS

    app = make_app()

    def keys() -> list[FooterKey]:
        return [k for k in app.screen.query(FooterKey) if "-command-palette" not in k.classes]

    def fits() -> bool:
        return all(k.region.width > 0 and k.region.right <= 60 - PALETTE_CELLS for k in keys())

    async def body(pilot):
        await pilot.press("escape")
        await settle(pilot)
        shown = [k.description for k in keys()]
        assert {"Search", "Review", "Help", "Quit"} <= set(shown) and fits(), shown
        wing = app.lens.active_wing
        await pilot.press("w")  # a key the footer left out still works
        await settle(pilot)
        assert app.lens.active_wing != wing
        app.open_entry("lc-arch-001")
        await settle(pilot)
        shown = [k.description for k in keys()]
        assert {"Save", "Close"} <= set(shown) and fits(), shown

    run(app, body, size=(60, 20))


def test_the_demo_offer_loads_nothing_into_a_store_written_since(make_app, settings, real_embedder):
    """The app offers the demo on an empty store; when another process writes before the offer is taken, taking it
    loads nothing (the demo's entries would mix with real ones) and says why."""
    from memlens import Memory
    from memlens.tui.screens.first_run import FirstRunScreen

    app = make_app(empty=True)
    notes: list[str] = []
    app.notify = lambda message, **kw: notes.append(str(message))  # type: ignore[method-assign]

    def agent_writes():
        with Memory.open(app.lens.store_path, settings=settings, embedder=real_embedder) as m:
            m.add("The lidar driver needs firmware 2.4 or later.", wing="robots", id="real-1")

    async def body(pilot):
        assert isinstance(app.screen, FirstRunScreen)
        await asyncio.to_thread(agent_writes)
        await pilot.press("d")
        await until(pilot, lambda: bool(notes))
        assert any("loads only into an empty store; nothing was loaded" in n for n in notes), notes
        with Memory.open(app.lens.store_path, settings=settings, embedder=real_embedder) as m:
            assert m.count() == 1 and m.tasks.is_empty()

    run(app, body)


@pytest.mark.parametrize("key", ["ctrl+t", "ctrl+o"])
def test_a_confirmation_with_a_long_impact_preview_keeps_its_answers_on_an_80x24_screen(make_app, key):
    """At 80x24 the delete and deprecate questions grew with their impact preview past the bottom of the screen:
    their two buttons could not be seen nor scrolled to. The preview scrolls; the answers stay on screen."""
    from textual.widgets import Button

    from memlens.tui.screens.confirm import ConfirmScreen

    app = make_app()

    async def body(pilot):
        await search(pilot, "callbacks blocking")
        app.open_entry("lc-arch-015")
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        width, height = app.screen.size
        for button in app.screen.query(Button):
            r = button.region
            assert r.height > 0 and r.y >= 0 and r.bottom <= height and r.right <= width, (button.id, r, app.screen.size)
        await pilot.press("n")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)

    run(app, body, size=(80, 24))


def test_help_fits_an_80_column_terminal(make_app):
    """F1's help was 90 columns wide: in an 80-column terminal its words were cut at the right edge."""
    from textual.containers import VerticalScroll

    from memlens.tui.screens.help import HelpScreen

    app = make_app()

    async def body(pilot):
        await pilot.press("escape", "f1")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        box = app.screen.query_one(VerticalScroll).region
        assert box.x >= 0 and box.right <= 80 and box.width > 40, box

    run(app, body, size=(80, 24))


def test_t_shows_the_working_memory_a_narrow_terminal_hides(make_app):
    """Under 100 columns the working memory pane gives its room to the results, and it had no way back: t (in the
    footer) shows it in the search's place, t or esc goes back. A wide terminal always shows it: no t there."""
    from textual.widgets._footer import FooterKey

    app = make_app()

    def shown() -> list[str]:
        return [k.description for k in app.screen.query(FooterKey) if "-command-palette" not in k.classes]

    def on_screen(selector: str) -> bool:
        return app.main.query_one(selector).region.width > 0

    async def body(pilot):
        await search(pilot, "callbacks blocking")
        await pilot.press("escape")  # out of the search box: the letter keys act
        await settle(pilot)
        assert not on_screen("#wm-box") and "Tasks" in shown(), shown()
        await pilot.press("t")
        await settle(pilot)
        assert on_screen("#wm-box") and not on_screen("#search-box")
        assert "Recent tasks" in screen_text(app) and "Active blockers" in screen_text(app)
        assert app.main.query_one("#wm-box").region.width >= 70  # the search's width, not the 36 of a wide screen
        await pilot.press("t")
        await settle(pilot)
        assert not on_screen("#wm-box") and on_screen("#search-box") and app.focused is app.main.query_one("#results")
        await pilot.press("t", "escape")
        await settle(pilot)
        assert not on_screen("#wm-box") and on_screen("#search-box")
        await pilot.press("t", "slash")  # / goes to the search box, which is back in view
        await settle(pilot)
        assert on_screen("#search-box") and app.focused is app.main.query_one("#query")
        await pilot.resize_terminal(120, 40)
        await pilot.press("escape")
        await settle(pilot)
        assert on_screen("#wm-box") and on_screen("#search-box") and "Tasks" not in shown(), shown()

    run(app, body, size=(80, 24))


@pytest.mark.parametrize("query, token", [("wing=x callbacks", "wing=x"), ('abcdefghij "x', '"'),
                                          ('  コールバック 🚀 émoji ↔ "unclosed', '"')])
def test_an_error_caret_sits_under_the_token_it_names(make_app, query, token):
    """The ^ under the search box started two cells left of the bad token (the box's border and padding were not
    counted), and further left after wide characters (a CJK character or an emoji takes two cells)."""
    from rich.cells import cell_len

    app = make_app()

    async def body(pilot):
        app.main.query_one("#query").value = query
        await settle(pilot)
        update = app.screen._compositor.render_full_update()  # the terminal's lines, spaces and wide characters kept
        lines = ["".join(seg.text for strip in line for seg in strip if not seg.control) for line in update.strips]
        typed = next(line for line in lines if query.strip() in line)
        carets = next(line for line in lines if "^" in line)
        assert cell_len(carets[: carets.index("^")]) == cell_len(typed[: typed.index(token)]), (typed, carets)
        assert status(app).lstrip().startswith("^")

    run(app, body)



def test_a_dialog_has_a_footer_of_its_own_keys(make_app):
    """Under a dialog the footer named the screen underneath's keys (^s Save, ^t Delete, …), which do nothing while
    it is open, and not the dialog's own (y / n). Each dialog now shows its own keys, named as its buttons are."""
    from textual.widgets._footer import FooterKey

    from memlens.tui.screens.confirm import ConfirmScreen
    from memlens.tui.screens.first_run import FirstRunScreen
    from memlens.tui.screens.help import HelpScreen
    from memlens.tui.screens.review import ReasonScreen

    app = make_app()

    def shown() -> list[tuple[str, str]]:
        return [(k.key_display, k.description) for k in app.screen.query(FooterKey)
                if "-command-palette" not in k.classes and k.region.width > 0]

    async def body(pilot):
        await search(pilot, "callbacks blocking")
        app.open_entry("lc-arch-015")
        await settle(pilot)
        await pilot.press("ctrl+t")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert shown() == [("y", "Delete"), ("n", "Keep")], shown()
        footer = app.screen.query_one("Footer").region
        assert all(b.region.bottom <= footer.y for b in app.screen.query("Button"))  # the answers stay above it
        await pilot.press("n")
        await settle(pilot)
        for dialog, keys in ((ReasonScreen("lc-arch-015"), [("esc", "Cancel")]), (HelpScreen(None), [("esc", "Close")]),
                             (FirstRunScreen("app.db"), [("d", "Load demo"), ("esc", "Start empty")])):
            app.push_screen(dialog)
            await settle(pilot)
            assert shown() == keys, (type(dialog).__name__, shown())
            await pilot.press("escape")
            await settle(pilot)

    run(app, body, size=(80, 24))


@pytest.mark.parametrize("budget", [None, 400])
def test_the_budget_decisions_keep_a_long_id_out_of_the_type_column(tui_demo_store, tmp_path, settings, real_embedder,
                                                                     budget):
    """An id the CLI or an agent generated (a ULID, 26 characters) ran into the type ("…6FQHdecision") and pushed
    the action onto a line of its own in the context preview's Budget decisions pane (46 cells wide). Such an id
    now has a line of its own, and its row keeps the columns."""
    import shutil

    from rich.console import Console

    from memlens import Memory
    from memlens.tui.screens.context import decisions

    id_cells = 16  # the entry column's width (the demo's ids and a space)

    path = tmp_path / "ulid.db"
    shutil.copy(tui_demo_store, path)
    with Memory.open(path, settings=settings, embedder=real_embedder) as m:
        added = m.add("Gripper calibration runs once per power cycle, before the first grasp.", wing="lifecore_ros2",
                      type="decision")
        bundle = m.search("gripper calibration power cycle", active_wing="lifecore_ros2", budget=budget, k=50)
    assert len(added.id) > id_cells
    console = Console(width=46, record=True, color_system=None)
    console.print(decisions(bundle))
    lines = console.export_text().splitlines()
    at = lines.index(added.id)  # alone on its line
    row = lines[at + 1]
    assert row[:id_cells].strip() == "" and row[id_cells:].startswith("decision"), row
    assert ("kept" in row) if budget is None else any(a in row for a in ("kept", "summarised", "dropped")), row


def test_a_deleted_entrys_line_shows_an_audit_time_edited_by_hand_as_it_is():
    """The line for an entry deleted elsewhere reads the time of its newest audit row: one edited by hand into no
    time is shown as it is (it failed the screen's worker, which would end the app)."""
    from memlens.tui.screens.entry import gone_text

    rows = [{"action": "delete", "ts": "yesterday-ish", "detail": {"client": {"name": "agent-7"}}}]
    assert gone_text(rows) == "deleted by agent-7 at yesterday-ish"
    rows[0]["ts"] = "2026-11-28T09:00:00Z"
    assert gone_text(rows) == "deleted by agent-7 at 2026-11-28 09:00:00 UTC"
