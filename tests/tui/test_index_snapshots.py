"""The code index in the app: the Index screen, :ingest in the shell, code chunks in results and the entry screen.

The workspace is real code nobody here wrote: a few modules of the installed ``idna`` package, copied into a
fixed folder, plus one binary file that the index skips with its reason. Run-dependent values (run times and
durations, entry ids and write times) are pinned; everything else is what the engine computed.
"""

from __future__ import annotations

import asyncio
import shutil
import types
from pathlib import Path

import pytest

from .conftest import FIXED_NOW, settle

SIZE = (120, 40)
MODULES = ("__init__.py", "codec.py", "compat.py", "intranges.py", "package_data.py")
PINNED_TS = "2026-11-20T11:58:00Z"


def workspace(folder: Path) -> Path:
    """A few real modules of the installed idna package, and a binary file the index must skip."""
    idna = pytest.importorskip("idna")
    src = Path(idna.__file__).parent
    ws = folder / "ws"
    ws.mkdir()
    for name in MODULES:
        shutil.copy(src / name, ws / name)
    (ws / "logo.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    return ws


def _deterministic_ids(monkeypatch) -> None:
    """Entry ids from a fixed clock and a counter instead of the wall clock and random bits."""
    import memlens.ids as ids

    counter = iter(range(1, 1_000_000))
    monkeypatch.setattr(ids, "time", types.SimpleNamespace(time=lambda: FIXED_NOW.timestamp()))
    monkeypatch.setattr(ids, "os", types.SimpleNamespace(urandom=lambda n: next(counter).to_bytes(n, "big")))


def index_into(path: Path, ws: Path, settings, embedder, monkeypatch=None) -> dict:
    from memlens import Memory
    from memlens.ingest import index

    if monkeypatch is not None:
        _deterministic_ids(monkeypatch)
    with Memory.open(path, settings=settings, embedder=embedder) as mem:
        summary = index(mem, ws, wing="idna")
    from memlens.store import db

    conn = db.connect(path, create=False)
    try:
        with conn:
            conn.execute("UPDATE entries SET created_at = ?, updated_at = ? WHERE kind = 'code'", (PINNED_TS, PINNED_TS))
            conn.execute("UPDATE audit SET ts = ? WHERE entry_id IN (SELECT id FROM entries WHERE kind = 'code')",
                         (PINNED_TS,))
    finally:
        conn.close()
    return summary


def pin_status(lens):
    """Run times and durations in the index status fixed (the rest is the engine's own numbers)."""
    real = lens.index_status

    def pinned():
        s = real()

        def run(r):
            return r and {**r, "started_at": "2026-11-20T11:57:59Z", "finished_at": PINNED_TS, "seconds": 0.42}

        for ix in s["indexes"]:
            ix["indexed_at"] = PINNED_TS
            ix["last_run"] = run(ix["last_run"])
        s["last_run"] = run(s["last_run"])
        s["recent_runs"] = [run(r) for r in s["recent_runs"]]
        return s

    lens.index_status = pinned
    return lens


def pin_ingest(lens):
    real = lens.ingest

    def pinned(*args, **kwargs):
        return {**real(*args, **kwargs), "seconds": 0.5}

    lens.ingest = pinned
    return lens


def _chunk_id(path: Path, rel: str) -> str:
    """The first chunk of the workspace file ``rel``."""
    from memlens.store import db

    conn = db.connect(path, create=False)
    try:
        return conn.execute(
            "SELECT id FROM entries WHERE kind = 'code' AND json_extract(meta, '$.path') = ? "
            "ORDER BY json_extract(meta, '$.lines[0]') LIMIT 1", (rel,)).fetchone()[0]
    finally:
        conn.close()


# -- the Index screen ------------------------------------------------------------------------


def test_index_screen(make_app, snap_dir, snap_compare, settings, real_embedder):
    app = make_app()
    index_into(app.lens.store_path, workspace(snap_dir), settings, real_embedder)
    pin_status(app.lens)

    async def run_before(pilot):
        await settle(pilot)
        pilot.app.main.query_one("#results").focus()
        await pilot.press("i")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.model
def test_index_screen_shows_the_engine_status(make_app, snap_dir, settings, real_embedder):
    """The numbers on screen are index_status's own: files, chunks, the binary skip, the run; r reads again."""
    from memlens.tui.screens.index import IndexScreen

    app = make_app()
    ws = workspace(snap_dir)
    summary = index_into(app.lens.store_path, ws, settings, real_embedder)

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.open_index()
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, IndexScreen)
            s = screen.status
            assert [ix["wing"] for ix in s["indexes"]] == ["idna"]
            ix = s["indexes"][0]
            assert ix["files"] == len(MODULES) == summary["added"] and ix["chunks"] == summary["chunks"]
            listing = screen.query_one("#index-list")
            assert listing.row_count == 1
            row = [str(c) for c in listing.get_row_at(0)]
            assert row[0] == "idna" and row[3] == str(len(MODULES)) and row[4] == str(summary["chunks"])
            skipped = screen.query_one("#index-skipped")
            cells = [str(c) for c in skipped.get_row_at(0)]
            assert cells[0] == "logo.bin" and cells[1] == next(k["reason"] for k in summary["skipped"]
                                                               if k["path"].endswith("logo.bin"))
            assert screen.query_one("#index-runs").row_count == 1
            # a file edited on disk shows as stale after r
            (ws / "compat.py").write_text((ws / "compat.py").read_text() + "\n# edited\n")
            await pilot.press("r")
            await settle(pilot)
            assert screen.status["indexes"][0]["stale_files"] == 1
            assert "1 · 20%" in str(screen.query_one("#index-list").get_row_at(0)[5])
            await pilot.press("escape")
            await settle(pilot)
            assert app.screen is app.main

    asyncio.run(run())


@pytest.mark.model
def test_index_screen_without_an_index_says_how_to_make_one(make_app):
    async def run():
        app = make_app()
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.open_index()
            await settle(pilot)
            assert app.screen.has_class("empty")
            assert "memlens index WORKSPACE" in str(app.screen.query_one("#index-empty").render())

    asyncio.run(run())


@pytest.mark.model
def test_palette_opens_the_index_screen_and_the_ingest_prompt(make_app):
    from memlens.tui.screens.index import IndexScreen

    async def run():
        app = make_app()
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press("ctrl+p")
            await settle(pilot)
            await pilot.press(*"Code index")
            await settle(pilot)
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, IndexScreen)
            await pilot.press("ctrl+p")
            await settle(pilot)
            await pilot.press(*"Ingest: add")
            await settle(pilot)
            await pilot.press("enter")
            await settle(pilot)
            assert app.screen.query_one("#prompt").value == ":ingest "

    asyncio.run(run())


# -- :ingest in the shell --------------------------------------------------------------------


async def _ingest(pilot, line: str) -> None:
    await settle(pilot)
    pilot.app.open_shell()
    await settle(pilot)
    prompt = pilot.app.screen.query_one("#prompt")
    prompt.value = line
    prompt.cursor_position = len(line)
    prompt.focus()
    await pilot.press("enter")
    await settle(pilot)


def test_ingest_summary_in_the_shell(make_app, snap_dir, snap_compare):
    ws = workspace(snap_dir)
    app = make_app()
    pin_ingest(app.lens)

    async def run_before(pilot):
        await _ingest(pilot, f":ingest {ws} --wing idna --room code")

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_ingest_progress_in_the_shell(make_app, snap_dir, snap_compare):
    """Mid-run: the real ingest is held inside its progress callback once the second file has been read."""
    import threading

    ws = workspace(snap_dir)
    app = make_app()
    lens = app.lens
    held, release, finished = threading.Event(), threading.Event(), threading.Event()
    real_ingest, real_close = lens.ingest, lens.close

    def holding(*args, progress=None, **kwargs):
        def hold(e):
            progress(e)
            if e.get("stage") == "read" and e.get("files", 0) >= 2 and not held.is_set():
                held.set()
                release.wait(timeout=60)

        try:
            return real_ingest(*args, progress=hold, **kwargs)
        finally:
            finished.set()

    def close():  # the app closes the store on exit: let the held run finish first
        release.set()
        finished.wait(timeout=60)
        real_close()

    lens.ingest, lens.close = holding, close

    async def run_before(pilot):
        await settle(pilot, rounds=2)
        pilot.app.open_shell()
        await settle(pilot, rounds=2)
        prompt = pilot.app.screen.query_one("#prompt")
        prompt.value = f":ingest {ws} --wing idna"
        prompt.cursor_position = len(prompt.value)
        prompt.focus()
        await pilot.press("enter")
        for _ in range(600):  # bounded: at most about a minute
            view = pilot.app.screen.query("#ingest-1")
            if held.is_set() and view and view.first().files >= 2:
                break
            await pilot.pause(0.1)
        assert held.is_set()
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
    assert finished.wait(timeout=60)


@pytest.mark.model
def test_ingest_runs_with_progress_and_writes_the_chunks(make_app, snap_dir, settings, real_embedder):
    """The bar is as long as the files walked and is full at the end; the summary is the engine's; a re-run is a no-op."""
    from memlens import Memory
    from memlens.tui.widgets.ingest_view import IngestView

    ws = workspace(snap_dir)
    app = make_app()
    events: list[dict] = []
    real = app.lens.ingest

    def recording(*args, progress=None, **kwargs):
        def both(e):
            events.append(dict(e))
            progress(e)

        return real(*args, progress=both, **kwargs)

    app.lens.ingest = recording

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await _ingest(pilot, f":ingest {ws} --wing idna")
            view = app.screen.query_one("#ingest-1", IngestView)
            assert view.total == len(MODULES) + 1  # every file walked, the binary one included
            assert view.summary is not None and view.summary["added"] == len(MODULES)
            assert [k["path"] for k in view.summary["skipped"]] == [str(ws / "logo.bin")]
            bar = view.query_one("ProgressBar")
            assert bar.total == view.total and bar.progress == view.total
            assert events and view.files == max(e["files"] for e in events)
            assert view.chunks == view.summary["chunks"] == max(e.get("chunks", 0) for e in events)
            assert "5 added" in str(view.query_one(".ingest-status").render())
            prompt = app.screen.query_one("#prompt")
            prompt.value = f":ingest {ws} --wing idna"
            await pilot.press("enter")
            await settle(pilot)
            again = app.screen.query_one("#ingest-2", IngestView)
            assert again.summary["added"] == 0 and again.summary["unchanged"] == len(MODULES)

    asyncio.run(run())
    with Memory.open(app.lens.store_path, settings=settings, embedder=real_embedder) as mem:
        hits = mem.search("convert a list of integers into ranges", active_wing="idna", k=3)
    assert any(r.entry.meta.get("path") == "intranges.py" for r in hits.results)


@pytest.mark.model
def test_ingest_errors_are_one_line_and_write_nothing(make_app, snap_dir):
    from memlens.tui import shell_commands as sc

    with pytest.raises(sc.ShellError, match="--wing is required"):
        sc.parse(":ingest docs/")
    with pytest.raises(sc.ShellError, match="at least one file"):
        sc.parse(":ingest --wing w")
    assert sc.parse(":ingest a b --wing w --room r") == sc.Ingest(("a", "b"), "w", "r")

    async def run():
        app = make_app()
        async with app.run_test(size=SIZE) as pilot:
            before = await asyncio.to_thread(app.lens.count)
            await _ingest(pilot, f":ingest {snap_dir / 'nowhere'} --wing idna")
            view = app.screen.query_one("#ingest-1")
            assert view.has_class("failed")
            assert "no such file or folder" in str(app.screen.query_one("#shell-status").render())
            assert await asyncio.to_thread(app.lens.count) == before

    asyncio.run(run())


# -- code chunks in the results and the entry screen -----------------------------------------


def test_code_chunk_entry_screen(make_app, snap_dir, snap_compare, settings, real_embedder, monkeypatch):
    app = make_app()
    index_into(app.lens.store_path, workspace(snap_dir), settings, real_embedder, monkeypatch)
    chunk = _chunk_id(app.lens.store_path, "intranges.py")

    async def run_before(pilot):
        await settle(pilot)
        pilot.app.open_entry(chunk)
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.model
def test_code_results_show_path_and_lines_and_a_highlighted_preview(make_app, snap_dir, settings, real_embedder):
    from textual.widgets import TextArea

    from memlens.tui.screens.entry import EntryScreen

    from .conftest import search

    app = make_app(active_wing="idna")
    index_into(app.lens.store_path, workspace(snap_dir), settings, real_embedder)

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await search(pilot, "convert a list of integers into ranges")
            bundle = app.main.bundle
            top = next(r for r in bundle.results if r.entry.kind.value == "code")
            a, b = top.entry.meta["lines"]
            where = f"{top.entry.meta['path']}:{a}-{b}"
            table = app.main.query_one("#results")
            row = [r.entry.id for r in bundle.results].index(top.entry.id)
            assert str(table.get_row_at(row)[3]).startswith(where)
            app.open_entry(top.entry.id)
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, EntryScreen)
            area = screen.query_one("#f-text", TextArea)
            assert area.read_only and area.language == "python" and area.line_number_start == a
            assert area.text == top.entry.text
            assert where in str(screen.query_one("#f-text-label").render())
            grid = screen.query_one("#entry-meta").content  # the metadata grid (a rich Table)
            assert f"{top.entry.meta['source']}:{a}-{b}" in [str(c) for c in grid.columns[1]._cells]

    asyncio.run(run())
