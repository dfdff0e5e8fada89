"""Filling memory from real material: documents (``ingest``) and a workspace's code (``index``).

    from memlens.ingest import ingest, index, index_status
    summary = ingest(mem, ["docs/"], wing="docs", progress=print)
    summary = index(mem, "~/src/project", wing="project")
    status = index_status(mem)

Both return the summary object ``{"added", "updated", "unchanged", "removed",
"chunks", "skipped": [{"path", "reason"}], "seconds", "complete"}`` (counts of sources,
except ``chunks``; ``complete`` is false when a deadline stopped the run before every
file was seen). ``progress`` receives small dicts (``stage``, ``files``, ``chunks``,
``path``) as the run advances. See ``memlens.ingest.pipeline``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memlens.ingest.runs import index, ingest

if TYPE_CHECKING:
    from memlens.ingest.context import IngestContext

__all__ = ["ingest", "index", "index_status"]


def index_status(mem: IngestContext, *, stale_sample: int = 20_000) -> dict[str, Any]:
    """The code index at a glance: files, chunks, last run, stale ratio, queue depth and retrieval rates."""
    from memlens.ingest.status import status

    return status(mem, stale_sample=stale_sample)
