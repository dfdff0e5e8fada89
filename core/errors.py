"""Errors a user can cause and fix. The CLI prints them as one line and exits 2."""

from __future__ import annotations


class MemlensError(Exception):
    """Base class: a problem with input, the store or the model, never a bug."""

    exit_code = 2


class StoreError(MemlensError):
    """The store file cannot be opened, is not a memlens store, or is locked."""


class StoreLockedError(StoreError):
    """Another process holds the write lock longer than the busy timeout."""


class StoreCorruptError(StoreError):
    """SQLite, FTS5 or sqlite-vec found damaged pages; writes to that store are refused from then on."""


class CorruptRowError(StoreError):
    """A stored row cannot be decoded (a hand-edited or damaged column value)."""


class ModelError(MemlensError):
    """The embedding model is missing, corrupted or cannot be loaded."""


class QueryError(MemlensError):
    """A scoped query has an unknown key or value."""


class ValidationError(MemlensError):
    """An entry or an import line does not satisfy the data model."""


def id_taken(entry_id: str, visible: bool) -> ValidationError:
    """A new entry's id is already used: by a stored entry (``visible``), or by one an import is writing."""
    return ValidationError(f"an entry with id {entry_id!r} already exists" if visible
                           else f"an entry with id {entry_id!r} is being imported")


class NotFoundError(MemlensError):
    """No entry with that id."""


class StaleUpdateError(ValidationError):
    """The entry changed since the caller read it (``expected_updated_at``); nothing was written."""
