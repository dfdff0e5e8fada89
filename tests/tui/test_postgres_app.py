"""The app on a PostgreSQL store: the title names it (never its password), search and an entry work.

The demo store is copied into a fresh database of the session's embedded server; the app is driven headless.
"""

from __future__ import annotations

import asyncio

import pytest

from .conftest import FIXED_NOW, search, settle

pytest.importorskip("psycopg")
SIZE = (120, 40)


def test_the_app_opens_a_postgres_store(tui_demo_store, pg_uri, settings, real_embedder):
    from memlens.store.postgres.copy import copy_store
    from memlens.tui.app import create_app
    from memlens.tui.screens.entry import EntryScreen

    copy_store(tui_demo_store, pg_uri)
    app = create_app(pg_uri, settings=settings, embedder=real_embedder, now=lambda: FIXED_NOW, watch=False,
                     cursor_blink=False, active_wing="lifecore_ros2")
    seen: dict = {}

    async def main():
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            seen["title"] = app.sub_title
            await search(pilot, "callbacks blocking executor")
            bundle = app.main.bundle
            seen["results"] = [r.entry.id for r in bundle.results]
            seen["index"] = bundle.trace.fusion["vector_index"]
            app.open_entry(seen["results"][0])
            await settle(pilot)
            screen = app.screen
            seen["entry"] = isinstance(screen, EntryScreen) and screen.entry is not None and screen.entry.id
            seen["backend"] = app.lens.mem.store.backend

    asyncio.run(main())
    db = pg_uri.split("?")[0].rsplit("/", 1)[1]
    assert seen["backend"] == "postgresql"
    assert f"postgresql://postgres@/{db}?host=" in seen["title"] and ":@" not in seen["title"]
    assert seen["results"] and seen["index"].startswith("pgvector")
    assert seen["entry"] == seen["results"][0]
