"""``memlens copy SRC DST``: a whole store into a new one, SQLite ↔ PostgreSQL (``memlens.store.postgres.copy``).

All or nothing: DST must be new or empty, and everything is written in one
transaction there; a copy that fails or is interrupted leaves DST as it was (a
new SQLite file is removed again). Not resumable: run it again. SRC is read in
one snapshot and never written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from memlens.cli.output import progress_stream
from memlens.errors import StoreError

BAR = 30


def register(sub: Any) -> None:
    s = sub.add_parser(
        "copy", help="copy a whole store into a new one (SQLite file or postgresql:// URI), all or nothing",
        description="Copy every entry with its vector, the audit history, wing generations, tasks, blockers, the "
                    "answer log, the retrieval log that replay reads, the golden queries and the ingestion catalog "
                    "from SRC into DST, a new or empty store. All or nothing: "
                    "one transaction in DST, so a failed or interrupted copy leaves DST as it was "
                    "(run it again; it does not resume).",
    )
    s.add_argument("src", metavar="SRC", help="the store to copy from (a file or a postgresql:// URI; only read)")
    s.add_argument("dst", metavar="DST", help="the new store (a file that does not exist yet, or an empty database)")


def _shown(target: str | Path) -> str:
    from memlens.store.postgres.connect import is_uri, label

    return label(str(target)) if is_uri(target) else str(target)


def _target(raw: str) -> str | Path:
    from memlens.store.postgres.connect import is_uri

    if not raw.strip():
        raise StoreError("copy: SRC and DST must not be empty")
    return raw if is_uri(raw) else Path(raw).expanduser()


def _bar(done: int, total: int) -> None:
    frac = done / total if total else 1.0
    filled = int(BAR * frac)
    print(f"\rcopying entries [{'#' * filled}{'.' * (BAR - filled)}] {done}/{total}", end="", file=progress_stream(), flush=True)


def cmd_copy(args: argparse.Namespace) -> int:
    from memlens.store.newstore import removed_on_failure
    from memlens.store.postgres.copy import copy_store
    from memlens.store.staging import terminate_as_exit

    src, dst = _target(args.src), _target(args.dst)
    if isinstance(src, Path) and not src.exists():
        raise StoreError(f"copy: no store at {src}")
    if isinstance(src, Path) and isinstance(dst, Path) and src.resolve() == dst.resolve() or src == dst:
        raise StoreError("copy: SRC and DST are the same store")
    interactive = sys.stderr.isatty()
    try:
        with terminate_as_exit():  # SIGTERM unwinds like Ctrl-C: the transaction rolls back, a new file goes
            if isinstance(dst, Path):
                with removed_on_failure(dst):
                    counts = copy_store(src, dst, progress=_bar if interactive else None)
            else:
                counts = copy_store(src, dst, progress=_bar if interactive else None)
    finally:
        if interactive:
            print(file=sys.stderr)
    print(f"copied {counts['entries']} entries ({counts['vectors']} vectors), {counts['audit']} audit rows, "
          f"{counts['wings']} wings, {counts['tasks']} tasks, {counts['blockers']} blockers, {counts['answers']} answers, "
          f"{counts['golden']} golden queries from {_shown(src)} into {_shown(dst)}", file=sys.stderr)
    return 0
