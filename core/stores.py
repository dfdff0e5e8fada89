"""Opening a store to write to: created when missing, and a new file removed again if the command fails."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memlens.config import load_settings
from memlens.memory import Memory
from memlens.store.newstore import removed_on_failure, store_target


@contextmanager
def open_for_write(store: str | Path | None, *, pooled: bool | None = None, client: str = "api") -> Iterator[Memory]:
    """``Memory.open(store)``, creating a missing store; a new SQLite file is removed again if the block fails
    (a PostgreSQL store is created in its database, which stays)."""
    settings = load_settings()
    target = store_target(store, settings)
    if isinstance(target, str):
        with Memory.open(target, settings=settings, create=True, pooled=pooled, client=client) as mem:
            yield mem
        return
    with removed_on_failure(target), Memory.open(target, settings=settings, create=True, client=client) as mem:
        yield mem
