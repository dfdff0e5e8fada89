"""Every read and write of the store that ingestion and the code index make, in one place.

The catalog (``sources``) records what each ingested file was when its chunks were
written: size, mtime_ns, sha256 and the parser/chunker version. ``source_entries``
names the entries each source produced. A changed file's chunks are replaced in
one transaction that also records the catalog row, one audit row per source and
the wing's generation bump (the engine's write protocol): a reader, or a process
killed at any point, sees all the old chunks or all the new ones, never a mix.
The SQL is the store's (``memlens.store.catalog``: the same on SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from memlens.models import Entry, content_hash, format_ts, utcnow
from memlens.store.catalog import Source, SourceWrite

if TYPE_CHECKING:
    from memlens.ingest.context import IngestContext

__all__ = ["Source", "SourceWrite"]

SKIPS_KEPT = 1000  # skipped files kept in a run's summary (the count is always exact)


def open_writer_connection(mem: IngestContext) -> None:
    """Prepare this (writer) thread's connection for streaming writes (on SQLite: no memory map, so that the
    process's resident memory follows what the pipeline holds, not the size of the store it streams into)."""
    mem.store.prepare_ingest_writer()


def close_thread_connection(mem: IngestContext) -> None:
    """Close this thread's connection (a writer thread's, at its end): threads come and go, connections must not pile up."""
    mem.store.close_thread()


def get_source(mem: IngestContext, wing: str, path: str) -> Source | None:
    return mem.store.get_source(wing, path)


def sources_under(mem: IngestContext, wing: str, root: str) -> list[Source]:
    """The sources of ``wing`` at ``root`` or below it (``root`` is a real, absolute path)."""
    return mem.store.sources_under(wing, root)


def stored_vectors(mem: IngestContext, texts: list[str]) -> dict[str, bytes]:
    """Vectors already stored for identical texts (by content hash and model): hash -> blob."""
    return mem.store.stored_vectors(sorted({content_hash(t) for t in texts}), mem.model_id)


def write_sources(mem: IngestContext, writes: list[SourceWrite], action: str = "ingest") -> dict[str, int]:
    """Replace the chunks of each source in ``writes`` in ONE transaction; returns {"added", "updated", "chunks"}."""
    return mem.store.write_sources(writes, action)


def remove_sources(mem: IngestContext, sources: Iterable[Source], action: str = "ingest") -> int:
    """Remove sources and all their chunks in one transaction; returns the number of sources removed."""
    return mem.store.remove_sources(sources, action)


def refresh_stat(mem: IngestContext, source_id: int, size: int, mtime_ns: int) -> None:
    """A file touched but not changed (same sha256): remember its new stat so the next run skips the hash."""
    mem.store.refresh_source_stat(source_id, size, mtime_ns)


def chunk_ids(mem: IngestContext, source_id: int) -> list[str]:
    return mem.store.source_chunk_ids(source_id)


# -- runs -----------------------------------------------------------------------------------


RUNS_KEPT = 1000  # run records kept (the newest)


def record_run(mem: IngestContext, mode: str, wing: str, root: str | None, started_at: str, seconds: float, status: str,
               summary: dict[str, Any]) -> int:
    """One row per finished run (what ``index status`` reports); older rows beyond ``RUNS_KEPT`` go."""
    kept = dict(summary)
    skipped = kept.get("skipped") or []
    kept["skipped_count"] = len(skipped)
    kept["skipped"] = skipped[:SKIPS_KEPT]
    values = (mode, wing, root, started_at, format_ts(utcnow()), round(seconds, 4), status,
              json.dumps(kept, ensure_ascii=False))
    return mem.store.record_ingest_run(values, RUNS_KEPT)


def runs(mem: IngestContext, mode: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    return mem.store.ingest_runs(mode, limit)


def code_indexes(mem: IngestContext, wings: list[str] | None = None) -> list[dict[str, Any]]:
    """Each indexed workspace (wing, root) with its last completed run's time: the index's ``indexed_at``."""
    return mem.store.code_indexes(wings)


def all_sources(mem: IngestContext, wing: str | None = None, kind: str | None = None) -> list[Source]:
    return mem.store.all_sources(wing, kind)


def code_candidates(mem: IngestContext, blob: bytes, wings: list[str], n: int) -> list[tuple[Entry, float]]:
    """The ``n`` nearest code chunks of ``wings`` (a KNN on the vector index, filtered to kind 'code')."""
    return mem.store.code_candidates(np.frombuffer(blob, dtype="<f4"), wings, n)


def log_code_recall(mem: IngestContext, detail: dict[str, Any], keep: int = 10_000) -> None:
    """One ``code_recall`` row per retrieval that looked for code (audit level "reads"); never fails a read."""
    if mem.settings.audit.level != "reads":
        return
    mem.store.log_code_recall(detail, keep)


def code_recalls(mem: IngestContext, limit: int = 1000) -> list[dict[str, Any]]:
    return mem.store.code_recalls(limit)
