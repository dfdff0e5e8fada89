"""The two kinds of run: ``ingest`` (documents and files) and ``index`` (a workspace's code), each recorded."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.models import format_ts, utcnow

if TYPE_CHECKING:
    from memlens.ingest.context import IngestContext
    from memlens.ingest.pipeline import Progress


def _run(mem: IngestContext, mode: str, targets: Any, wing: str, room: str, root: str | None, progress: Progress | None,
         deadline_s: float | None, only: set[str] | None = None) -> dict[str, Any]:
    from memlens.ingest import storage
    from memlens.ingest.pipeline import Run, run_pipeline

    _refuse_the_other_modes_folder(mem, mode, wing, targets)
    started = format_ts(utcnow())
    run = Run(mode, wing, room)
    deadline = time.monotonic() + deadline_s if deadline_s else None
    out = run_pipeline(mem, targets, run, progress=progress, deadline=deadline, only=only)
    storage.record_run(mem, mode, wing, root, started, out["seconds"], "ok" if run.complete else "partial",
                       {**out, "files": run.files_done})
    return out


def _refuse_the_other_modes_folder(mem: IngestContext, mode: str, wing: str, targets: Any) -> None:
    """``ingest`` and ``index`` keep one catalog per wing: a folder one of them brought into a wing (or a folder
    inside it, or around it) is refused to the other there, which would take its files as its own, unchanged."""
    from memlens.errors import ValidationError
    from memlens.ingest import storage

    other = "index" if mode == "ingest" else "ingest"
    runs = [r for r in storage.runs(mem, None, storage.RUNS_KEPT) if r["wing"] == wing and r["root"]]
    for t in targets:
        if not t.is_dir:
            continue
        near = [r for r in runs if r["root"] == t.path or r["root"].startswith(t.path + os.sep)
                or t.path.startswith(r["root"] + os.sep)]
        theirs = [r["root"] for r in near if r["mode"] == other]
        if theirs and not any(r["mode"] == mode for r in near):
            as_what = "indexed as code (memlens index)" if other == "index" else "ingested as documents (memlens ingest)"
            raise ValidationError(f"{mode}: {theirs[0]} is already {as_what} in wing {wing!r}; {mode} it into another "
                                  "--wing")


def ingest(mem: IngestContext, paths: Sequence[str | Path], *, wing: str, room: str = "", progress: Progress | None = None
           ) -> dict[str, Any]:
    """Ingest files and folders into ``wing``: documents as kind ``document``, source files as kind ``code``."""
    from memlens.ingest.pipeline import check_name, resolve_targets

    wing, room = check_name("wing", wing, True), check_name("room", room, False)
    targets = resolve_targets(list(paths))
    root = targets[0].path if len(targets) == 1 and targets[0].is_dir else None
    return _run(mem, "ingest", targets, wing, room, root, progress, None)


def index(mem: IngestContext, workspace: str | Path, *, wing: str, room: str = "", progress: Progress | None = None,
          deadline_s: float | None = None, only: set[str] | None = None) -> dict[str, Any]:
    """Index a workspace's files as kind ``code`` (syntax-aware chunks, line ranges); incremental.

    ``deadline_s``: stop reading new files after this many seconds (the run is recorded as ``partial`` and the
    next one continues). ``only``: real paths to look at (the watcher's changed files), the rest untouched.
    """
    from memlens.ingest.pipeline import check_name, resolve_targets

    wing, room = check_name("wing", wing, True), check_name("room", room, False)
    targets = resolve_targets([workspace], want_dir=True)
    return _run(mem, "index", targets, wing, room, targets[0].path, progress, deadline_s, only)
