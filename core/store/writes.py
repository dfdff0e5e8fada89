"""Entry writes over the storage interface, safe for many concurrent writers (agents over MCP, the CLI, the app).

Each write is one ``store.write()`` transaction: the entry row and its vector,
an audit row, and the generation bump of every wing touched. Checks that
depend on other rows (the id is free, the entry was not changed since the
caller read it, the same content is not stored yet) run again inside that
transaction: ``BEGIN IMMEDIATE`` holds SQLite's write lock, so a second writer
waits and then sees the first one's row (threads of one process queue for
it, ``db.write_turn``; other processes wait in SQLite's busy handler).

- ``add_unique``: the same content in the same wing is stored once. "Same
  content" means the text the model embeds (title and text) has the same hash.
- ``update`` with ``expected_updated_at`` is refused when someone else changed
  the entry since (no lost edit).

Embedding is done before the transaction (it is slow and needs no lock); the
caller passes ``embed``, a function from texts to vectors.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens import untrusted
from memlens.errors import NotFoundError, StaleUpdateError, ValidationError  # StaleUpdateError: re-exported
from memlens.models import Entry, content_hash, format_ts, parse_ts, utcnow
from memlens.store.rows import row_to_entry, vec_blob
from memlens.store.scope import Scope

if TYPE_CHECKING:
    from memlens.store.base import Writer, Writes

Embed = Callable[[list[str]], np.ndarray]
NEAR_DUPLICATE = 0.80  # cosine similarity from which another entry of the wing is reported as similar
SIMILAR_MAX = 3

__all__ = ["NEAR_DUPLICATE", "SIMILAR_MAX", "StaleUpdateError", "add", "add_unique", "check_overrides", "delete",
           "override_cycle", "overriders", "refuse_override_cycle", "release_overriders", "stored_overrides",
           "describe_validation", "near_duplicates", "update", "validate_entry", "vectors_for"]


# -- checks before a write -------------------------------------------------------------------------


def describe_validation(exc: Any) -> str:
    """One line from a pydantic ValidationError: ``field 'wing': message``."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "entry"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        return f"field {loc!r} is required"
    if err["type"] == "extra_forbidden":
        return f"unknown field {loc!r}"
    return f"field {loc!r}: {msg}"


def validate_entry(record: dict[str, Any]) -> Entry:
    from pydantic import ValidationError as PydanticError

    try:
        return Entry.model_validate(record)
    except PydanticError as exc:
        raise ValidationError(describe_validation(exc)) from None


def check_overrides(store: Writes, entries: list[Entry], also_known: set[str] | None = None) -> None:
    for e in entries:
        if not e.overrides or (also_known and e.overrides in also_known):
            continue
        if store.missing_ids([e.overrides]):
            raise ValidationError(f"overrides: no entry with id {e.overrides!r} to override")


def override_cycle(start: str, overrides_of: Callable[[str], str | None]) -> list[str] | None:
    """The ids of the cycle ``start``'s chain of ``overrides`` enters (the first again at the end), else None.
    Entries on a cycle each hide the next: search would return none of them."""
    chain, target = [start], overrides_of(start)
    while target:
        if target in chain:
            return [*chain[chain.index(target):], target]
        chain.append(target)
        target = overrides_of(target)
    return None


def stored_overrides(store: Any) -> Callable[[str], str | None]:
    """``overrides_of`` for ``refuse_override_cycle`` from a store's committed rows (``get_row``)."""
    def of(entry_id: str) -> str | None:
        row = store.get_row(entry_id)
        return None if row is None else row_to_entry(row).overrides
    return of


def refuse_override_cycle(entry: Entry, overrides_of: Callable[[str], str | None], where: str = "overrides") -> None:
    """ValidationError when ``entry``'s ``overrides`` closes a cycle (``overrides_of``: the stored entries' links)."""
    if not entry.overrides:
        return
    cycle = override_cycle(entry.id, lambda i: entry.overrides if i == entry.id else overrides_of(i))
    if cycle is not None and entry.id in cycle:
        raise ValidationError(f"{where}: {' -> '.join(cycle)} would be a cycle of overrides, in which each entry "
                              "hides the next and search returns none of them")


def refuse_if_changed(current: Entry, expected: str | datetime) -> None:
    """StaleUpdateError unless ``current`` was last written at ``expected`` (an ISO-8601 timestamp)."""
    try:
        want = parse_ts(expected)
    except ValueError:
        raise ValidationError(f"expected_updated_at: {expected!r} is not an ISO-8601 timestamp") from None
    stamp = current.updated_at or current.created_at
    if abs((stamp - want).total_seconds()) >= 1e-6:
        raise StaleUpdateError(
            f"entry {current.id!r} was changed at {format_ts(stamp)} since you read it; read it again and re-apply your change"
        )


def vectors_for(store: Writes, embed: Embed, entries: list[Entry]) -> list[np.ndarray]:
    """Vectors for entries: reuse a stored vector of identical text, embed the rest in one batch."""
    texts = [e.embed_text for e in entries]
    out: list[np.ndarray | None] = [None] * len(entries)
    model = store.model_id
    missing: dict[str, list[int]] = {}
    for i, t in enumerate(texts):
        h = content_hash(t)
        blob = store.reusable_vector(h, model)
        if blob is not None:
            out[i] = np.frombuffer(blob, dtype="<f4")
        else:  # nothing stored, or a degenerate vector that must not spread (core/store/vectors.py)
            missing.setdefault(h, []).append(i)
    if missing:
        firsts = [idxs[0] for idxs in missing.values()]
        vecs = embed([texts[i] for i in firsts])
        for vec, idxs in zip(vecs, missing.values()):
            for i in idxs:
                out[i] = vec
    return [v for v in out if v is not None]


# -- the writes (one transaction each) ---------------------------------------------------------------


def add(store: Writes, entry: Entry, vec: np.ndarray) -> Entry:
    with store.write() as w:
        w.add(entry, vec)
    return entry


def update(store: Writes, entry_id: str, after: Entry, vec: np.ndarray | None, expected: str | datetime | None, *,
           promoted: bool = False) -> Entry:
    """Replace the stored ``entry_id`` by ``after`` (``vec=None``: the text is unchanged, keep the vector).

    Web text keeps its origin (``memlens.untrusted``): checked again here against the row as it is now;
    ``promoted``: this write is a person's promotion of web text, recorded in the audit row."""
    with store.write() as w:
        found = w.find(entry_id)
        if found is None:
            raise NotFoundError(f"entry {entry_id!r} was deleted meanwhile")
        rowid, before = found  # the audit records what this write replaced
        if expected is not None:
            refuse_if_changed(before, expected)
        untrusted.check_edit(before, after.kind, after.meta, promoting=promoted)
        w.replace(rowid, after, None if vec is None else vec_blob(vec))
        detail: dict[str, Any] = {"reembedded": vec is not None}
        if promoted:
            detail["promoted"] = after.meta.get(untrusted.PROMOTED)
        seq = w.audit("update", after.id, after.wing, before.to_record(), after.to_record(), detail)
        w.bump({before.wing, after.wing}, seq)
    return after


def overriders(store: Any, entry_id: str) -> list[str]:
    """The ids of the entries whose ``overrides`` names ``entry_id`` (read on this thread's connection: inside a
    ``store.write()`` block, with the write lock held on SQLite)."""
    rows = store.rows(store.related([entry_id], [], Scope())).rows
    return [r[2] for r in rows if r[12] == entry_id]  # (rowid, content_hash, *ENTRY_COLUMNS)


def release_overriders(w: Writer, store: Any, deleted: Entry) -> list[str]:
    """The entries that overrode ``deleted`` override nothing once it is gone: each is an audited update in the
    deleting transaction (an override that names no entry is damage to ``check`` and refused by ``import``)."""
    released = []
    for other_id in overriders(store, deleted.id):
        found = w.find(other_id)
        if found is None or found[1].overrides != deleted.id:
            continue
        rowid, before = found
        after = before.model_copy(update={"overrides": None, "updated_at": utcnow()})
        w.replace(rowid, after, None)
        seq = w.audit("update", after.id, after.wing, before.to_record(), after.to_record(), {"reembedded": False})
        w.bump({after.wing}, seq)
        released.append(after.id)
    return released


def delete(store: Writes, before: Entry) -> tuple[Entry, list[str]]:
    """Delete ``before``; the entries that overrode it no longer override anything (``release_overriders``).
    Returns it and the ids of those entries, as the deleting transaction found them."""
    with store.write() as w:
        rowid = w.find_rowid(before.id)
        if rowid is None:
            raise NotFoundError(f"no entry with id {before.id!r} in {store.path}")
        w.delete(rowid)
        w.bump({before.wing}, w.audit("delete", before.id, before.wing, before.to_record(), None))
        released = release_overriders(w, store, before)
    return before, released


def add_unique(store: Writes, entry: Entry, vec: np.ndarray) -> tuple[Entry, bool, list[dict[str, Any]]]:
    """Add an entry unless the wing already holds the same content.

    Returns ``(entry, created, similar)``: the new entry (or the one already
    stored), whether it was created, and up to three other entries of the wing
    that are near-duplicates (cosine similarity >= ``NEAR_DUPLICATE``), best first.
    """
    with store.write() as w:
        stored = w.find_content(content_hash(entry.embed_text), entry.wing)
        created = stored is None
        if stored is None:
            w.add(entry, vec)
            stored = entry
    return stored, created, near_duplicates(store, vec, stored.wing, exclude=stored.id)


def near_duplicates(
    store: Any, vec: np.ndarray, wing: str, *, exclude: str | None = None, limit: int = SIMILAR_MAX,
    threshold: float = NEAR_DUPLICATE,
) -> list[dict[str, Any]]:
    """Entries of ``wing`` whose vectors are within ``threshold`` cosine similarity of ``vec``, best first
    (through the storage interface: ``store.knn`` then ``store.rows``, so on every backend)."""
    from memlens.store.scope import Scope

    knn = store.knn(np.asarray(vec, dtype=np.float32), Scope(wings=[wing]), limit + 1)
    hits = [(rowid, float(sim)) for rowid, sim in sorted(knn.hits, key=lambda h: -h[1]) if float(sim) >= threshold]
    found = {row[0]: row for row in store.rows([rowid for rowid, _ in hits]).rows}
    out = []
    for rowid, sim in hits:
        row = found.get(rowid)  # (rowid, content_hash, id, wing, room, kind, type, status, title, ...)
        if row is None or row[2] == exclude:
            continue
        out.append({"id": row[2], "title": row[8], "type": row[6], "status": row[7], "similarity": round(sim, 4)})
    return out[:limit]
