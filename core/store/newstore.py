"""Which store a name points to; a store created by a command that then fails is removed again.

The commands that write (add, import, demo, task) create a missing store. When
their input is refused after that (an invalid JSONL line, a bad wing name, a
bad ``--at``) or they are interrupted, the new store would stay behind, empty:
the next read command would then find a store where there was none. So a
store this command created is removed when the command fails and the store
still holds nothing: no entry, audit row, task, blocker or import. A store
that held anything, or that existed before, is never touched.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from memlens.errors import StoreError
from memlens.files import expand_user
from memlens.store.postgres.connect import is_uri

if TYPE_CHECKING:
    from memlens.config import Settings

_TABLES = ("entries", "audit", "tasks", "blockers", "imports")


def _unused(path: Path) -> bool:
    """Whether the store at ``path`` holds no rows a user wrote (False when that cannot be told)."""
    from memlens.store.db import driver

    try:
        # no -wal (checked first): the file is all there is, and nobody else is writing it
        conn = driver().connect(f"file:{quote(str(path))}?immutable=1", uri=True, timeout=1.0)
    except Exception:
        return False
    try:
        for table in _TABLES:
            try:
                if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                    return False
            except Exception as exc:
                if "no such table" not in str(exc):
                    return False  # locked, damaged, ...: leave it
        return True
    finally:
        conn.close()


def _missing_folders(path: Path) -> list[Path]:
    """The folders above ``path`` that do not exist yet, deepest first (creating the store makes them)."""
    out = []
    folder = Path(os.path.realpath(path)).parent
    while not folder.exists() and folder != folder.parent:
        out.append(folder)
        folder = folder.parent
    return out


def discard_if_unused(path: Path, folders: Sequence[Path] = ()) -> None:
    """Remove the store file at ``path`` (and its -wal, -shm, -journal) if it holds nothing,
    then those of ``folders`` (deepest first) that are empty."""
    real = Path(os.path.realpath(path))
    if os.path.exists(f"{real}-wal"):  # SQLite removes it when the last connection closes: another process has it open
        return
    if not real.is_file() or not _unused(real):
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{real}{suffix}")
        except OSError:
            pass
    for folder in folders:
        try:
            folder.rmdir()  # only an empty folder goes
        except OSError:
            break


@contextmanager
def removed_on_failure(target: Path) -> Iterator[None]:
    """A store at ``target`` that the block creates is removed again (with the folders made for it) if the block
    fails; open the store inside, so that it is closed (its WAL folded back) before it is removed."""
    existed = os.path.exists(target)
    folders = [] if existed else _missing_folders(target)
    try:
        yield
    except BaseException:
        if not existed:
            discard_if_unused(target, folders)
        raise


def store_target(store: str | Path | None, settings: Settings) -> Path | str:
    """What ``store`` names: a ``postgresql://`` URI as it is, else a file path (default: the settings')."""
    target = store if store is not None else settings.store_path()
    if isinstance(target, str) and not target.strip():
        raise StoreError("the store path is empty: give a file path or a postgresql:// URI")
    return target if is_uri(target) else expand_user(target)
