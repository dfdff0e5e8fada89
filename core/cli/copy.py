"""``memlens copy SRC DST``: a whole store into a new one, SQLite ↔ PostgreSQL (``memlens.store.postgres.copy``).

All or nothing: DST must be new or empty, and everything is written in one
transaction there; a copy that fails or is interrupted leaves DST as it was (a
new SQLite file is removed again). Not resumable: run it again. SRC is read in
one snapshot and never written. Into PostgreSQL, the vector indexes are built
after the copy (``PgStore.ensure_hnsw``) once the store holds enough vectors for
searches to use them; until they are built, searches scan exactly.

Damaged entries (rows edited by hand into something the data model rejects,
which export leaves out with a warning): into a file they are copied as they
are, each named in a warning, and the command exits 1 (``check`` and
``salvage`` repair them there); into PostgreSQL, where neither runs, nothing is
copied and the error names them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from memlens.cli.args import PROG
from memlens.cli.output import count, progress_stream
from memlens.errors import StoreError
from memlens.files import expand_user

BAR = 30


def register(sub: Any) -> None:
    s = sub.add_parser(
        "copy", help="copy a whole store into a new one (SQLite file or postgresql:// URI), all or nothing",
        description="Copy every entry with its vector, the audit history, wing generations, tasks, blockers, the "
                    "answer log, the retrieval log that replay reads, the golden queries and the ingestion catalog "
                    "from SRC into DST, a new or empty store. All or nothing: "
                    "one transaction in DST, so a failed or interrupted copy leaves DST as it was "
                    "(run it again; it does not resume). Damaged entries (see check) are copied as they are into "
                    "a file, named in warnings, exit status 1; into PostgreSQL they stop the copy.",
    )
    s.add_argument("src", metavar="SRC", help="the store to copy from (a file or a postgresql:// URI; only read)")
    s.add_argument("dst", metavar="DST", help="the new store (a file that does not exist yet, or an empty database)")


def _shown(target: str | Path) -> str:
    from memlens.store.postgres.connect import is_uri, label

    return label(str(target)) if is_uri(target) else str(target)


def _target(raw: str) -> str | Path:
    from memlens.store.db import refuse_conninfo
    from memlens.store.postgres.connect import is_uri

    if not raw.strip():
        raise StoreError("copy: SRC and DST must not be empty")
    refuse_conninfo(raw)
    return raw if is_uri(raw) else expand_user(raw)


def _bar(done: int, total: int) -> None:
    frac = done / total if total else 1.0
    filled = int(BAR * frac)
    print(f"\rcopying entries [{'#' * filled}{'.' * (BAR - filled)}] {done}/{total}", end="", file=progress_stream(), flush=True)


def cmd_copy(args: argparse.Namespace) -> int:
    from memlens.sigterm import terminate_as_exit
    from memlens.store.newstore import removed_on_failure
    from memlens.store.postgres.copy import copy_store

    src, dst = _target(args.src), _target(args.dst)
    if isinstance(src, Path) and not src.exists():
        raise StoreError(f"copy: no store at {src}")
    if isinstance(src, Path) and isinstance(dst, Path) and src.resolve() == dst.resolve() or src == dst:
        raise StoreError("copy: SRC and DST are the same store")
    interactive = sys.stderr.isatty()

    def damaged(entry_id: str, problem: str) -> None:  # into a file: copied as it is, named here, exit 1
        if interactive:
            print(file=sys.stderr)  # off the progress bar's line
        print(f"{PROG}: warning: entry {entry_id!r} is damaged ({problem}); copied as it is", file=sys.stderr)

    try:
        with terminate_as_exit():  # SIGTERM unwinds like Ctrl-C: the transaction rolls back, a new file goes
            if isinstance(dst, Path):
                with removed_on_failure(dst):
                    counts = copy_store(src, dst, progress=_bar if interactive else None, on_damaged=damaged)
            else:
                counts = copy_store(src, dst, progress=_bar if interactive else None)
    finally:
        if interactive:
            print(file=sys.stderr)
    print(f"copied {count(counts['entries'], 'entry', 'entries')} ({count(counts['vectors'], 'vector')}), "
          f"{count(counts['audit'], 'audit row')}, "
          f"{counts['wings']} wings, {counts['tasks']} tasks, {counts['blockers']} blockers, {counts['answers']} answers, "
          f"{counts['golden']} golden queries from {_shown(src)} into {_shown(dst)}", file=sys.stderr)
    if counts["damaged"]:
        n = counts["damaged"]
        print(f"{PROG}: {count(n, 'damaged entry', 'damaged entries')} {'was' if n == 1 else 'were'} copied as "
              f"{'it is' if n == 1 else 'they are'}: `memlens --store {dst} check` lists them, "
              f"`memlens --store {dst} salvage NEW.db` makes a sound store", file=sys.stderr)
        return 1
    if not isinstance(dst, Path):
        _vector_indexes(dst, counts["vectors"])
    return 0


def _vector_indexes(uri: str, vectors: int) -> None:
    """Build a new PostgreSQL store's vector indexes (a minute or two at 100k vectors), if it holds enough vectors
    for a search to use them (``hnsw_min_rows``); the copy itself is committed whatever happens here."""
    from memlens.store.postgres import open_store

    store = open_store(uri, create=False)
    try:
        if vectors < store.hnsw_min_rows:
            return
        print(f"building the vector indexes of {vectors} vectors (searches scan exactly until they are built)",
              file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            built = store.ensure_hnsw()
        except (StoreError, KeyboardInterrupt) as exc:
            why = str(exc) or "interrupted"
            raise StoreError(f"copy: the store is copied, but its vector indexes were not built ({why}); searches scan "
                             "exactly until Memory.open(URI).store.ensure_hnsw() builds them") from None
        print(f"built {len(built)} vector indexes in {time.monotonic() - start:.1f} s", file=sys.stderr)
    finally:
        store.close()
