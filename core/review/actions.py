"""What a reviewer does with an inbox item, each action one write transaction through the storage interface.

* ``accept``: the agent's writes stand; an entry under review becomes active (its type is never changed:
  web text stays what it is), and ``supersedes`` makes it override an entry it replaces.
* ``reject``: the agent's writes are taken back: a new entry is deprecated (or deleted), an edited entry
  gets the version it had before the agent's first unanswered write, a deleted one comes back.
* ``merge``: the item's entry is folded into another entry: the kept entry records where the knowledge
  was also found (``meta.found_in``: the merged entry's id, wing, title, writer and its own ``found_in``),
  entries that overrode the merged one override the kept one, the merged entry's own override passes
  to the kept one if that has none, and the merged entry is deleted. A merge after which some entries would
  override each other in a loop (each hiding the next) is refused and writes nothing.
* ``undo``: every write of one review action is reversed, newest first, after checking that nothing
  changed those entries since (``memlens.review.desk`` finds the action's rows in the entries' history).

An answer to a deletion that needs no entry change (accepting it) is recorded as a ``review`` audit row
with no before and no after. The caller runs each action inside ``attribution.acting_as(reviewer)`` and
``attribution.reviewing(info)``, so every audit row names the reviewer and the action's batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.errors import NotFoundError, StaleUpdateError, ValidationError
from memlens.limits import entry_text_limit
from memlens.models import Entry, Status, utcnow
from memlens.review.inbox import Item
from memlens.store import writes
from memlens.store.rows import vec_blob

if TYPE_CHECKING:
    from memlens.store.base import Writer, Writes

Embed = Callable[[list[str]], np.ndarray]


def _overrides(w: Any, entry_id: str) -> str | None:
    found = w.find(entry_id)
    return None if found is None else found[1].overrides


def revise(entry: Entry | dict[str, Any], **changes: Any) -> Entry:
    """``entry`` (or a stored record of one) with ``changes``, validated, stamped now; its text is not re-capped."""
    record = entry.to_record() if isinstance(entry, Entry) else dict(entry)
    record.update(changes, updated_at=utcnow())
    with entry_text_limit(None):  # a stored entry may predate the current cap: only what the reviewer changes counts
        return writes.validate_entry(record)


def _current(w: Writer, item: Item, seen: str | None = None) -> tuple[int, Entry]:
    """The item's entry as stored, refused if it changed since the inbox was read (``seen``: its updated_at then)."""
    found = w.find(item.entry_id)
    if found is None:
        raise NotFoundError(f"entry {item.entry_id!r} was deleted since the inbox was read; list it again")
    rowid, current = found
    seen = seen or (item.after or {}).get("updated_at")
    if seen is not None and current.to_record()["updated_at"] != seen:
        raise StaleUpdateError(f"entry {item.entry_id!r} changed since the inbox was read; list it again")
    return rowid, current


def _replace(w: Writer, rowid: int, before: Entry, after: Entry, vec: np.ndarray | None = None) -> int:
    w.replace(rowid, after, None if vec is None else vec_blob(vec))
    seq = w.audit("update", after.id, after.wing, before.to_record(), after.to_record(), {"reembedded": vec is not None})
    w.bump({before.wing, after.wing}, seq)
    return seq


def mark(w: Writer, entry_id: str, wing: str | None) -> int:
    """A review recorded against an entry without changing it."""
    return w.audit("review", entry_id, wing, None, None)


def accept(store: Writes, item: Item, *, supersedes: str | None = None, seen: str | None = None) -> str:
    if supersedes == item.entry_id:
        raise ValidationError("an entry cannot supersede itself")
    if supersedes is not None and (item.after is None or item.after.get("status") == "deprecated"):
        raise ValidationError(f"--supersedes: {item.entry_id} is {'deleted' if item.after is None else 'deprecated'} "
                              "and cannot override anything; accept it without --supersedes")
    with store.write() as w:
        if item.after is None:  # a deletion: accepting it changes nothing
            if w.find(item.entry_id) is not None:
                raise StaleUpdateError(f"entry {item.entry_id!r} exists again since the inbox was read; list it again")
            mark(w, item.entry_id, item.snapshot.get("wing"))
            return f"{item.entry_id}: deletion accepted"
        rowid, current = _current(w, item, seen)
        changes: dict[str, Any] = {}
        if current.status is Status.under_review:
            changes["status"] = "active"
        if supersedes is not None:
            if w.find(supersedes) is None:
                raise ValidationError(f"supersedes: no entry with id {supersedes!r}")
            changes["overrides"] = supersedes
            writes.refuse_override_cycle(revise(current, overrides=supersedes), lambda i: _overrides(w, i), "supersedes")
        if not changes:
            mark(w, current.id, current.wing)
            return f"{current.id}: accepted ({current.status.value})"
        _replace(w, rowid, current, revise(current, **changes))
    return f"{item.entry_id}: accepted" + (f", overrides {supersedes}" if supersedes else "")


def reject(store: Writes, embed: Embed, item: Item, *, delete: bool = False) -> str:
    before = item.before
    restored = None if before is None else revise(before)
    vec = None
    if restored is not None and (item.after is None or Entry.model_validate(item.after).embed_text != restored.embed_text):
        vec = writes.vectors_for(store, embed, [restored])[0]  # embedding runs before the transaction
    with store.write() as w:
        if item.after is None:  # the agent deleted it: it comes back
            if restored is None:
                mark(w, item.entry_id, item.snapshot.get("wing"))  # added and deleted by the agent: nothing to take back
                return f"{item.entry_id}: rejected (it was added and deleted by the agent)"
            if w.state(restored.id) is not None:
                raise StaleUpdateError(f"entry {restored.id!r} exists again since the inbox was read; list it again")
            assert vec is not None
            w.insert(restored, vec)
            w.bump({restored.wing}, w.audit("add", restored.id, restored.wing, None, restored.to_record()))
            return f"{restored.id}: restored"
        rowid, current = _current(w, item)
        if restored is not None:
            _replace(w, rowid, current, restored, vec)
            return f"{current.id}: back to its version before the agent's writes"
        if delete:
            w.delete(rowid)
            w.bump({current.wing}, w.audit("delete", current.id, current.wing, current.to_record(), None))
            writes.release_overriders(w, store, current)
            return f"{current.id}: deleted"
        _replace(w, rowid, current, revise(current, status="deprecated"))
    return f"{item.entry_id}: deprecated"


def merge(store: Writes, item: Item, into: str, overriders: list[str]) -> str:
    """Fold the item's entry into ``into``; ``overriders``: the entries whose ``overrides`` names the item's entry."""
    if into == item.entry_id:
        raise ValidationError("an entry cannot be merged into itself")
    with store.write() as w:
        rowid, merged = _current(w, item)
        found = w.find(into)
        if found is None:
            raise NotFoundError(f"merge: no entry with id {into!r} to merge into")
        target_rowid, target = found
        meta = dict(target.meta)
        record = {"id": merged.id, "wing": merged.wing, "title": merged.title, "by": item.client, "at": item.at}
        if merged.meta.get("source"):
            record["source"] = merged.meta["source"]
        carried = [f for f in merged.meta.get("found_in", []) if isinstance(f, dict)]
        meta["found_in"] = [*[f for f in meta.get("found_in", []) if isinstance(f, dict)], record, *carried]
        changes: dict[str, Any] = {"meta": meta}
        if target.overrides == merged.id:
            changes["overrides"] = merged.overrides if merged.overrides != target.id else None
        elif not target.overrides and merged.overrides and merged.overrides != target.id:
            changes["overrides"] = merged.overrides
        kept = revise(target, **changes)
        _replace(w, target_rowid, target, kept)
        repointed = []
        for other_id in overriders:
            if other_id in (into, merged.id):
                continue
            got = w.find(other_id)
            if got is not None and got[1].overrides == merged.id:
                repointed.append(revise(got[1], overrides=into))
                _replace(w, got[0], got[1], repointed[-1])
        w.delete(rowid)
        w.bump({merged.wing}, w.audit("delete", merged.id, merged.wing, merged.to_record(), None))
        for changed in (kept, *repointed):  # an override passed on may close a loop: refused, nothing written
            writes.refuse_override_cycle(changed, lambda i: _overrides(w, i), "merge")
    return f"{item.entry_id}: merged into {into}"


class ChangedSince(StaleUpdateError):
    """An undo refused: ``entry_id`` is no longer as the action's audit row ``seq`` left it (``fields``: what differs,
    ``["exists"]`` when one of the two is a deletion). ``ReviewDesk.undo`` says what changed it and what to do."""

    def __init__(self, entry_id: str, seq: int, fields: list[str]) -> None:
        super().__init__(f"entry {entry_id!r} changed after the review (audit row {seq}): {', '.join(fields)}")
        self.entry_id, self.seq, self.fields = entry_id, seq, fields


def changed_fields(now: dict[str, Any] | None, left: dict[str, Any] | None) -> list[str]:
    """The fields in which the entry as stored (``now``, None: deleted) differs from what an action left (``left``).
    ``updated_at`` is not compared: an undo stamps the version it puts back with its own time, so an entry undone
    to what an earlier action left counts as unchanged, and the earlier action can be undone in turn."""
    if now is None or left is None:
        return [] if now is left else ["exists"]
    return [f for f in now if f != "updated_at" and now[f] != left.get(f)]


def undo(store: Writes, embed: Embed, rows: list[dict[str, Any]]) -> list[str]:
    """Reverse the audit ``rows`` of one review action (newest first); refused (``ChangedSince``) if an entry changed
    since: its fields differ from what the action left."""
    latest: dict[str, dict[str, Any]] = {}
    for r in rows:  # newest first: the first row of an entry is what the action left it as
        latest.setdefault(r["entry_id"], r)
    restore = {r["seq"]: revise(r["before"]) for r in rows if r["before"] is not None}
    vecs: dict[int, np.ndarray] = {}
    need = [(seq, e) for seq, e in restore.items()]
    if need:
        for (seq, _), vec in zip(need, writes.vectors_for(store, embed, [e for _, e in need])):
            vecs[seq] = vec
    done: list[str] = []
    with store.write() as w:
        for entry_id, r in latest.items():
            if r["action"] == "review":
                continue
            found = w.find(entry_id)
            changed = changed_fields(None if found is None else found[1].to_record(), r["after"])
            if changed:
                raise ChangedSince(entry_id, int(r["seq"]), changed)
        for r in rows:
            entry_id, wing = r["entry_id"], r["wing"]
            if r["action"] == "review":
                mark(w, entry_id, wing)
            elif r["before"] is None:  # the action added it
                found = w.find(entry_id)
                if found is not None:
                    w.delete(found[0])
                    w.bump({found[1].wing}, w.audit("delete", entry_id, found[1].wing, found[1].to_record(), None))
            elif r["after"] is None:  # the action deleted it
                e = restore[r["seq"]]
                w.insert(e, vecs[r["seq"]])
                w.bump({e.wing}, w.audit("add", e.id, e.wing, None, e.to_record()))
            else:
                found = w.find(entry_id)
                if found is None:
                    raise NotFoundError(f"entry {entry_id!r} was deleted meanwhile")
                e = restore[r["seq"]]
                _replace(w, found[0], found[1], e, vecs[r["seq"]] if e.embed_text != found[1].embed_text else None)
            done.append(entry_id)
    return list(dict.fromkeys(done))
