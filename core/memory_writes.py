"""The write side of ``Memory`` (``memlens.memory``): adding, editing, deprecating and deleting entries.

Apart from the facade because it holds what a write checks before the store runs it: a record validated
with the text cap applied, web text kept from authority (``memlens.untrusted``), overrides that name
stored entries and close no cycle, an edit that changes nothing left unwritten, and a vector reused for
identical text or else embedded. The write itself is one transaction of ``memlens.store.writes``.
``Memory`` has these methods from ``EntryWrites``, which uses only its settings, its store, ``get`` and
``embed``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from memlens import untrusted
from memlens.errors import ValidationError
from memlens.limits import entry_text_limit
from memlens.models import EDITABLE_FIELDS, Entry, Status, derived_title, format_ts, utcnow
from memlens.store import writes

if TYPE_CHECKING:
    import numpy as np

    from memlens.config import Settings
    from memlens.store.base import Store

__all__ = ["EntryWrites"]


class EntryWrites:
    """``Memory``'s entry writes; ``Memory`` gives them ``settings``, ``store``, ``get`` and ``embed``."""

    settings: Settings
    store: Store

    if TYPE_CHECKING:
        def get(self, entry_id: str) -> Entry: ...

        def embed(self, texts: list[str]) -> np.ndarray: ...

    def _prepare(self, record: dict[str, Any], *, capped: bool = True) -> Entry:
        """Validate a new entry (text cap applied) and refuse a store that cannot be written."""
        with entry_text_limit(self.settings.limits.max_entry_chars if capped else None):
            return writes.validate_entry(record)

    def _prepare_new(self, record: dict[str, Any]) -> Entry:
        untrusted.refuse_new_authority(record.get("kind"), record.get("type"), record.get("meta"))
        entry = self._prepare(record)
        untrusted.refuse_new_promotion(entry.kind, entry.meta)
        return entry

    def add(self, text: str, *, wing: str, **fields: Any) -> Entry:
        """Add one entry; returns it with its id. Fields as in ``memlens.models.Entry``."""
        entry = self._prepare_new({"text": text, "wing": wing, **fields})
        self.store.check_writable()
        writes.check_overrides(self.store, [entry])
        return writes.add(self.store, entry, self._vectors_for([entry])[0])

    def update(self, entry_id: str, *, expected_updated_at: str | datetime | None = None, promoted_by: str | None = None,
               landing: str | None = None, **changes: Any) -> Entry:
        """Change fields of an entry; a new text or title is re-embedded. A call that changes nothing writes nothing
        (no audit row, no new ``updated_at``, no review item) and returns the entry as it is. ``landing``: the status
        the entry takes when the call changes something (an agent's edit waits for review; a deprecated entry stays
        deprecated unless the call names a status).

        ``expected_updated_at``: the ``updated_at`` (or ``created_at``) the caller read; when the entry
        changed since, the update is refused (StaleUpdateError) instead of overwriting that edit. The
        check runs again inside the write transaction, so a concurrent writer's edit is never lost.
        ``promoted_by``: ``"cli"`` or ``"app"`` when a person promotes web text to an invariant or decision
        (``memlens.untrusted``); without it, web text keeps its origin and never gets an authority type.
        """
        unknown = set(changes) - set(EDITABLE_FIELDS)
        if unknown:
            raise ValidationError(f"cannot edit {', '.join(sorted(unknown))}; editable: {', '.join(EDITABLE_FIELDS)}")
        self.store.check_writable()
        before = self.get(entry_id)
        if expected_updated_at is not None:
            writes.refuse_if_changed(before, expected_updated_at)
        record = before.to_record()
        record.update({k: (v.value if hasattr(v, "value") else v) for k, v in changes.items()})
        if "text" in changes and "title" not in changes and before.title == derived_title(before.text):
            record["title"] = ""  # a title made from the old text is made again from the new one
        record["updated_at"] = utcnow()
        untrusted.carry_origin(before, record, promoted_by, format_ts(record["updated_at"]))
        # the cap applies to a new text or meta; an entry stored before it keeps its other fields editable
        after = self._prepare(record, capped=bool({"text", "meta"} & set(changes)))
        if _same(after, before):
            return before  # nothing changes: no write, no audit row, no new updated_at to fail others' checks
        if landing is not None and landing != after.status.value and ("status" in changes or before.status.value != "deprecated"):
            after = self._prepare({**record, "status": landing}, capped=bool({"text", "meta"} & set(changes)))
            if _same(after, before):  # (an agent asking an entry waiting for review to be active: it waits still)
                return before
        if "overrides" in changes:
            writes.check_overrides(self.store, [after])
            writes.refuse_override_cycle(after, writes.stored_overrides(self.store))
        vec = None if after.embed_text == before.embed_text else self._vectors_for([after])[0]
        return writes.update(self.store, entry_id, after, vec, expected_updated_at, promoted=promoted_by is not None)

    def set_status(self, entry_id: str, status: str | Status) -> Entry:
        """Deprecate, mark under review or reactivate an entry."""
        try:
            status = Status(status)
        except ValueError:
            raise ValidationError(f"unknown status {status!r} (status: active, under_review, deprecated)") from None
        return self.update(entry_id, status=status)

    def delete(self, entry_id: str) -> Entry:
        return writes.delete(self.store, self.get(entry_id))[0]

    def delete_releasing(self, entry_id: str) -> tuple[Entry, list[str]]:
        """``delete``, and the ids of the entries that overrode it and now override nothing (found by the deleting
        transaction itself, so a concurrent write cannot make the list wrong)."""
        return writes.delete(self.store, self.get(entry_id))

    def add_unique(self, text: str, *, wing: str, **fields: Any) -> tuple[Entry, bool, list[dict[str, Any]]]:
        """Add unless the wing holds the same content: ``(entry, created, similar)`` (see ``memlens.store.writes``)."""
        entry = self._prepare_new({"text": text, "wing": wing, **fields})
        self.store.check_writable()
        writes.check_overrides(self.store, [entry])
        return writes.add_unique(self.store, entry, self._vectors_for([entry])[0])

    def update_checked(self, entry_id: str, expected_updated_at: Any = None, **changes: Any) -> Entry:
        """``update`` refused (StaleUpdateError) when the entry changed after ``expected_updated_at``."""
        return self.update(entry_id, expected_updated_at=expected_updated_at, **changes)

    def _vectors_for(self, entries: list[Entry]) -> list[np.ndarray]:
        """Vectors for entries: reuse a stored vector of identical text, embed the rest in one batch."""
        return writes.vectors_for(self.store, self.embed, entries)


def _same(after: Entry, before: Entry) -> bool:
    """Whether an edit leaves every field as it was (``updated_at`` aside)."""
    return {**after.to_record(), "updated_at": None} == {**before.to_record(), "updated_at": None}
