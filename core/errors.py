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


class NotFoundError(MemlensError):
    """No entry with that id."""


class StaleUpdateError(ValidationError):
    """The entry changed since the caller read it (``expected_updated_at``); nothing was written."""
