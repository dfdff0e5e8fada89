"""What a search needs from the engine, and nothing more: the pipeline's one seam to the rest of memlens.

The facade (``memlens.memory.Memory``) builds a ``SearchContext`` for each
search from its parts: the store's read role, the embedder, the result cache,
the profiles and a sink for the retrieval log. The pipeline and its stages see
only this, so strict typing checks everything a stage may reach, and a test can
hand the pipeline a context made of fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.config import Settings
from memlens.profiles import Profile
from memlens.store.reads import Reads
from memlens.trace import RetrievalRecord

if TYPE_CHECKING:
    from memlens.retrieval.cache import RetrievalCache


@dataclass(frozen=True)
class SearchContext:
    """The engine as one search sees it.

    ``reads``: the store's read role (every read of stored entries); ``embed``: texts to unit vectors (the store's
    model checked); ``model_id``: the store's model now; ``count_tokens``: the embedder's tokenizer (budgets);
    ``cache`` and ``describe_write``: the result cache and what invalidated an entry of it; ``working_memory``: the
    block a budgeted context starts with; ``log``: where the search's record goes (``RetrievalRecord``).
    """

    settings: Settings
    reads: Reads
    profiles: dict[str, Profile]
    embed: Callable[[list[str]], np.ndarray]
    model_id: Callable[[], str]
    count_tokens: Callable[[str], int]
    cache: RetrievalCache
    describe_write: Callable[[list[str]], dict[str, Any] | None]
    working_memory: Callable[[], str]
    log: Callable[[RetrievalRecord], None]
