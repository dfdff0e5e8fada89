"""Typed messages posted by thread workers (``post_message`` is thread-safe)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from memlens.trace import Bundle


@dataclass
class SearchDone(Message):
    query: str
    bundle: Bundle
    generations: dict[str, int] | None = None  # the wings' generations read just before the search: what it saw


@dataclass
class SearchFailed(Message):
    query: str
    error: str


@dataclass
class ModelReady(Message):
    model_id: str


@dataclass
class ModelFailed(Message):
    error: str


@dataclass
class StoreChanged(Message):
    """Another process (or this one) wrote: ``wings`` whose generation moved, ``write`` the latest."""

    wings: list[str]
    write: dict[str, Any] | None = None
    generations: dict[str, int] = field(default_factory=dict)

