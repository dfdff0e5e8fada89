"""Browsing a store from a front end: finding entries by id or title, an entry's vector freshness and
who overrides it, the names an assistant shell completes, and a check of a file before it is opened.

These work through ``Memory``'s public methods and its store's browsing lookups (``find_ids``,
``vector_stamp``, ``overridden_by``, ``all_ids``: ``memlens.store.browse_sql`` on SQLite,
``memlens.store.postgres.browse`` on PostgreSQL).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.errors import NotFoundError, StoreError
from memlens.models import content_hash
from memlens.store import browse_sql

if TYPE_CHECKING:
    from memlens.memory import Memory
    from memlens.models import Entry


def entry_info(mem: Memory, entry_id: str) -> dict[str, Any]:
    """The entry, the content hash and model its vector was made from, whether that matches the current
    text and the store's model (``fresh``), and the ids of the entries that override it."""
    entry = mem.get(entry_id)
    stamp = mem.store.vector_stamp(entry_id)
    if stamp is None:  # deleted between the two reads
        raise NotFoundError(f"no entry with id {entry_id!r} in {mem.path}")
    stored_hash, model = stamp
    by = mem.store.overridden_by(entry_id)
    return {"entry": entry, "content_hash": stored_hash, "model": model, "store_model": mem.model_id,
            "fresh": stored_hash == content_hash(entry.embed_text) and model == mem.model_id,
            "overridden_by": by}


def find(mem: Memory, text: str, limit: int = 20) -> list[Entry]:
    """Entries whose id or title contains ``text`` (SQL LIKE: ASCII letters match either case), by id."""
    out: list[Entry] = []
    for entry_id in mem.store.find_ids(text, limit):
        try:
            out.append(mem.get(entry_id))
        except NotFoundError:  # deleted meanwhile
            continue
    return out


def known_names(mem: Memory) -> dict[str, list[str]]:
    """Entry ids, task ids, actively blocked task ids and profile names (what a shell completes)."""
    ids = mem.store.all_ids()
    blocked = sorted({b.task_id for b in mem.tasks.blockers()})
    tasks = sorted({t.task_id for t in mem.tasks.all()} | {b.task_id for b in mem.tasks.blockers(False)})
    return {"entry_ids": ids, "task_ids": tasks, "blocked_ids": blocked, "profiles": list(mem.profiles)}


def check_store_file(path: Path | str) -> None:
    """Refuse a file that is not a memlens store (one-line error) before a front end commits to opening it.

    A missing file passes: opening creates it. A ``postgresql://`` store is checked when it opens.
    """
    from memlens.store import db
    from memlens.store.postgres.connect import is_uri

    if is_uri(path):
        return
    path = Path(path)
    if not path.exists():
        return
    version, tables = browse_sql.probe(path)
    if version < 0:  # a damaged header: the same one line as the engine gives
        from memlens.store.corruption import corrupt_error

        raise corrupt_error(path, f"its header holds schema version {version}")
    if version > db.SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer memlens (schema {version} > {db.SCHEMA_VERSION}); upgrade memlens")
    if version == 0 and tables:
        raise StoreError(f"{path} is a SQLite database but not a memlens store")
