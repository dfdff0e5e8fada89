"""What ingestion and the code index ask of the engine, and nothing more (a ``Memory`` is one).

Ingestion sits below the facade: its functions are typed against ``IngestContext``, never against ``Memory``, so
strict typing checks every seam and a test may hand them any object with these parts. The store is reached through
two of its roles: the catalog (sources, runs and the code index, ``memlens.store.catalog.Catalog``) and the writes
(the writer thread's connection, whether the store takes writes: ``memlens.store.base.Writes``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from memlens.config import Settings
from memlens.embed import Embedder
from memlens.store.base import Writes
from memlens.store.catalog import Catalog


class IngestStore(Catalog, Writes, Protocol):
    """The store roles ingestion uses: the catalog and the writes."""


class IngestContext(Protocol):
    """``store``: its catalog and write roles; ``embedder`` (its tokenizer sizes chunks) and ``embed`` (texts to unit
    vectors, the store's model checked; ``check_model`` checks it alone, ``model_id`` names it); ``settings`` (entry
    size, audit level); ``path``: the store's file, which a watcher of a workspace holding it leaves out;
    ``retrievals``: the retrieval log (the code index's hit rates); ``tasks``: the working memory that an agent's
    context starts with (``render_with_code``)."""

    @property
    def store(self) -> IngestStore: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def embedder(self) -> Embedder: ...

    @property
    def model_id(self) -> str: ...

    @property
    def path(self) -> Path | str: ...

    @property
    def tasks(self) -> Any: ...

    def check_model(self) -> None: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...

    def retrievals(self, limit: int = 1000) -> list[dict[str, Any]]: ...
